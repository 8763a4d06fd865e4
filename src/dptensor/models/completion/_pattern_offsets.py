"""Private offsets under the entry-value relation: one pattern-weighted Laplace release.

Under ``"entry-value"`` the set Omega of observed entries is public; only the values are
protected. The offsets -- the global mean and one bias per row of every mode -- are then best
released as *weighted row sums* with Laplace noise, and estimated from them by a Bayesian
posterior whose prior is informed by Omega itself.

The release
-----------
Every observed entry ``e`` (value ``x_e`` clipped to the declared range ``[lo, hi]`` of width
``D``, centred at ``c``) enters the row sum of its row in each released mode ``m`` with a public
weight ``a_e^(m) >= 0``, ``sum_m a_e^(m) = 1 / D``:

    s_r^(m) = sum_{e in row r of mode m} a_e^(m) (x_e - c) + Laplace(1 / epsilon).

Changing one value moves the stacked vector ``s`` by at most ``D sum_m a_e^(m) = 1`` in l1 norm, so
the release is ``epsilon``-DP (the Laplace mechanism, Dwork et al. 2006) with ``delta = 0``. The
weights split each entry's budget between its rows: ``a_e^(m)`` is proportional to
``1 / count_m(row)``, so an entry gives most of its budget to the row (user, item or day) that has
the fewest other entries -- a light user's ratings of popular items go almost entirely into the
user's sum, where they are the only evidence, and little into the item's, which has plenty.
Under a pure-DP budget this is far better than one Gaussian release of plain sums: two sums per
entry need ``sqrt(2)``-times the Gaussian's sensitivity, and at ``delta = 1e-6`` the Gaussian's
noise is about 1.8 times the Laplace's at the same ``epsilon``.

The estimate
------------
The values are modelled as ``x_e - c = mu + sum_m b^(m)_{row_m(e)} + f_e^T gamma + noise`` with
residual variance ``sigma_e^2``, biases ``b ~ N(0, tau^2)`` and ``f_e`` public *pattern features*
of the entry's rows: the log count of every row, the mean log count of the rows it co-occurs with,
and ``k``-dimensional spectral embeddings of the rows from the co-occurrence patterns of every
pair of modes (the top singular vectors of the degree-normalised 0/1 matrix, after the first).
They let the prior predict a row's bias from what is public about it (how many ratings, of which
items), so that rows whose sums are drowned by the noise shrink to a sensible value rather than to
zero. The estimate is the posterior mean (the linear MMSE estimate, treating the Laplace noise as
Gaussian of the same variance 2): with ``M = R^T D`` (``R`` the weighted row-membership matrix,
``D`` the design of ``theta = (b, mu, gamma)``) and ``V`` the prior variances,

    theta_hat = V M^T (M V M^T + sigma_e^2 R^T R + 2 I)^-1 (s - R^T k),

``k`` the part of the values already explained by released parameters (the factors, in DP-ALS).
The system is solved by a dense Cholesky factorisation when there are at most
:data:`DENSE_POSTERIOR_LIMIT` row sums, and otherwise by preconditioned conjugate gradients with
products by sparse matrices only, so that memory stays linear in the number of observed entries.
All of this is post-processing of ``s`` and of Omega.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, cg, svds

from dptensor.privacy import NoiseSource

#: Dimension of the spectral pattern embedding of each pair of modes.
EMBEDDING_DIM = 5

#: Pairs of modes whose smaller dimension is at most this get a dense (LAPACK) SVD, others ARPACK's.
DENSE_SVD_LIMIT = 1000

#: Releases of at most this many row sums are solved densely (Cholesky), larger ones by CG.
DENSE_POSTERIOR_LIMIT = 6000

#: Relative residual at which the posterior's conjugate-gradient solve stops.
CG_TOLERANCE = 1e-10


@dataclass(frozen=True)
class PatternDesign:
    """The public structure of the release: weights, memberships and the model's design.

    Attributes
    ----------
    release : scipy.sparse.csr_matrix, shape (n, q)
        ``R``: entry ``e``'s weight ``a_e^(m)`` in the row sum of its row in each released mode
        (columns: the rows of mode 0, then mode 1, then mode 2; one column for the mean alone).
    bias_design : scipy.sparse.csr_matrix, shape (n, p_b)
        One-hot rows of every mode with a bias (empty when there are none).
    features : ndarray, shape (n, 1 + f)
        The intercept and the standardised pattern features of every entry.
    bias_sizes : tuple of int
        Number of rows of each mode with a bias.
    row_features : list of ndarray
        Per mode, the features of every row (``features`` holds them at the entries).
    """

    release: sp.csr_matrix
    bias_design: sp.csr_matrix
    features: np.ndarray
    bias_sizes: tuple
    row_features: list


def release_weights(indices: np.ndarray, shape: tuple, width: float, modes: tuple) -> np.ndarray:
    """Per entry and released mode, ``a_e^(m)``: proportional to ``1 / count_m(row)``, sum ``1 / width``."""
    inverse = np.column_stack(
        [1.0 / np.bincount(indices[:, m], minlength=shape[m])[indices[:, m]] for m in modes]
    )
    return inverse / (width * inverse.sum(axis=1, keepdims=True))


def _one_hot(rows: np.ndarray, n_rows: int, weights: np.ndarray | None = None) -> sp.csr_matrix:
    n = rows.shape[0]
    data = np.ones(n) if weights is None else weights
    return sp.csr_matrix((data, (np.arange(n), rows)), shape=(n, n_rows))


def _spectral_embeddings(rows_a: np.ndarray, rows_b: np.ndarray, n_a: int, n_b: int, k: int):
    """Row embeddings of two modes from their 0/1 co-occurrence matrix (degree-normalised SVD)."""
    pattern = sp.csr_matrix((np.ones(rows_a.shape[0]), (rows_a, rows_b)), shape=(n_a, n_b))
    pattern.data[:] = 1.0  # repeated pairs count once
    deg_a = np.maximum(np.asarray(pattern.sum(axis=1)).ravel(), 1.0)
    deg_b = np.maximum(np.asarray(pattern.sum(axis=0)).ravel(), 1.0)
    normalised = sp.diags(1.0 / np.sqrt(deg_a)) @ pattern @ sp.diags(1.0 / np.sqrt(deg_b))
    k = min(k, min(n_a, n_b) - 2)
    if k < 1:
        return np.zeros((n_a, 0)), np.zeros((n_b, 0))
    if min(n_a, n_b) <= DENSE_SVD_LIMIT:
        left, values, right = np.linalg.svd(normalised.toarray(), full_matrices=False)
    else:  # a fixed start vector: ARPACK's result is then a deterministic function of the pattern
        start = np.full(min(n_a, n_b), 1.0 / math.sqrt(min(n_a, n_b)))
        left, values, right = svds(normalised, k=k + 1, v0=start)
    order = np.argsort(-values)[1 : k + 1]  # the first singular pair only reflects the degrees
    left, right = left[:, order], right[order].T
    # one sign convention: each left vector's largest entry is positive
    signs = np.sign(left[np.argmax(np.abs(left), axis=0), np.arange(left.shape[1])])
    signs[signs == 0] = 1.0
    return left * signs, right * signs


def pattern_features(indices: np.ndarray, shape: tuple, k: int = EMBEDDING_DIM) -> list[np.ndarray]:
    """Public features of every row of every mode (module docstring), standardised over the entries.

    Returns one ``(shape[m], f_m)`` matrix per mode; an entry's features are its rows' rows of
    these, so any linear function of them is a sum of per-row terms (it folds into the biases).
    """
    per_mode: list[list[np.ndarray]] = [[] for _ in range(3)]
    counts = [np.bincount(indices[:, m], minlength=shape[m]) for m in range(3)]
    log_counts = [np.log1p(c) for c in counts]
    for m in range(3):
        per_mode[m].append(log_counts[m])
        for other in range(3):
            if other != m:
                neighbours = log_counts[other][indices[:, other]]
                sums = np.bincount(indices[:, m], weights=neighbours, minlength=shape[m])
                per_mode[m].append(sums / np.maximum(counts[m], 1))
    for a in range(3):
        for b in range(a + 1, 3):
            emb_a, emb_b = _spectral_embeddings(indices[:, a], indices[:, b], shape[a], shape[b], k)
            per_mode[a].extend(emb_a.T)
            per_mode[b].extend(emb_b.T)
    out = []
    for m in range(3):
        rows = np.column_stack(per_mode[m])
        at_entries = rows[indices[:, m]]
        spread = at_entries.std(axis=0)
        keep = spread > 1e-9 * np.maximum(1.0, np.abs(at_entries).max(axis=0))
        standardised = (rows[:, keep] - at_entries[:, keep].mean(axis=0)) / spread[keep]
        standardised[counts[m] == 0] = 0.0  # a row without entries: the average row's features
        out.append(standardised)
    return out


def pattern_design(indices: np.ndarray, shape: tuple, width: float, biases: bool) -> PatternDesign:
    """The release weights and the posterior's design, from Omega and the declared width only."""
    n = indices.shape[0]
    if biases:
        modes = (0, 1, 2)
        weights = release_weights(indices, shape, width, modes)
        release = sp.hstack([_one_hot(indices[:, m], shape[m], weights[:, j]) for j, m in enumerate(modes)])
        bias_design = sp.hstack([_one_hot(indices[:, m], shape[m]) for m in modes])
        row_features = pattern_features(indices, shape)
        features = np.hstack([np.ones((n, 1))] + [f[indices[:, m]] for m, f in enumerate(row_features)])
        sizes = tuple(shape[m] for m in modes)
    else:  # the mean alone: one sum of all entries
        release = _one_hot(np.zeros(n, dtype=np.int64), 1, np.full(n, 1.0 / width))
        bias_design = sp.csr_matrix((n, 0))
        row_features = []
        features = np.ones((n, 1))
        sizes = ()
    return PatternDesign(release.tocsr(), bias_design.tocsr(), features, sizes, row_features)


def laplace_release(
    design: PatternDesign, centred_values: np.ndarray, epsilon: float, source: NoiseSource
) -> np.ndarray:
    """``R^T (x - c) + Laplace(1 / epsilon)``: l1 sensitivity 1, so ``epsilon``-DP (module docstring)."""
    statistics = design.release.T @ centred_values
    return source.add_laplace(statistics, 1.0 / epsilon)


def _cg(operator: LinearOperator, rhs: np.ndarray, preconditioner: LinearOperator) -> np.ndarray:
    """SciPy's conjugate gradients at :data:`CG_TOLERANCE` (``rtol`` since SciPy 1.12, ``tol`` before)."""
    name = "rtol" if "rtol" in inspect.signature(cg).parameters else "tol"
    solution, info = cg(operator, rhs, M=preconditioner, maxiter=20 * rhs.shape[0], **{name: CG_TOLERANCE})
    if info != 0:  # pragma: no cover - guard; public structure only
        raise RuntimeError(f"the offsets' posterior solve did not converge (info={info})")
    return solution


def posterior_offsets(
    design: PatternDesign,
    released: np.ndarray,
    explained: np.ndarray,
    *,
    epsilon: float,
    residual_var: float,
    bias_var: float,
    mean_var: float,
) -> tuple[float, list[np.ndarray]]:
    """Posterior mean of ``(mu, biases)`` from the release (module docstring); post-processing.

    Parameters
    ----------
    design : PatternDesign
    released : ndarray, shape (q,)
        The noisy weighted row sums of the centred values.
    explained : ndarray, shape (n,)
        What released parameters already explain at each entry (centred scale); zero if nothing.
    epsilon : float
        The release's budget: its noise is ``Laplace(1 / epsilon)``, variance ``2 / epsilon^2``.
    residual_var, bias_var, mean_var : float
        ``sigma_e^2``; the prior variance of every bias and feature coefficient; that of the
        intercept.

    Returns
    -------
    mean : float
        The intercept (on the centred scale).
    biases : list of ndarray
        One per mode with a bias (empty without biases), the pattern features' term included.
    """
    solve = offsets_posterior(
        design, epsilon=epsilon, residual_var=residual_var, bias_var=bias_var, mean_var=mean_var
    )
    return solve(released, explained)


def offsets_posterior(
    design: PatternDesign, *, epsilon: float, residual_var: float, bias_var: float, mean_var: float
) -> Callable[[np.ndarray, np.ndarray], tuple[float, list[np.ndarray]]]:
    """:func:`posterior_offsets` with its system built (and factorised) once, for repeated solves.

    DP-ALS re-solves the same release after every factor update: only ``explained`` changes, so
    the system matrix ``M V M^T + sigma_e^2 R^T R + (2 / epsilon^2) I`` is formed once.
    """
    release = design.release
    full = sp.hstack([design.bias_design, sp.csr_matrix(design.features)]).tocsr()
    coupling = (release.T @ full).tocsr()  # M = R^T D, (q, p)
    n_bias = design.bias_design.shape[1]
    prior = np.full(full.shape[1], bias_var)
    prior[n_bias] = mean_var
    gram_release = (release.T @ release).tocsr()
    noise_var = 2.0 / epsilon**2  # the variance of Laplace(1 / epsilon)
    q = release.shape[1]
    if q <= DENSE_POSTERIOR_LIMIT:  # a Cholesky solve: fast and exact at every noise level
        system = np.asarray((coupling @ sp.diags(prior) @ coupling.T).todense())
        system += residual_var * gram_release.toarray()
        system[np.diag_indices(q)] += noise_var
        try:
            factor = scipy.linalg.cho_factor(system)

            def solve_system(target: np.ndarray) -> np.ndarray:
                return scipy.linalg.cho_solve(factor, target)

        except np.linalg.LinAlgError:  # numerically singular (negligible noise): least squares

            def solve_system(target: np.ndarray) -> np.ndarray:
                return scipy.linalg.lstsq(system, target)[0]

    else:  # conjugate gradients with sparse products only: memory linear in n

        def apply(x: np.ndarray) -> np.ndarray:
            return coupling @ (prior * (coupling.T @ x)) + residual_var * (gram_release @ x) + noise_var * x

        diagonal = (
            np.asarray(coupling.multiply(coupling) @ prior).ravel()
            + residual_var * gram_release.diagonal()
            + noise_var
        )
        operator = LinearOperator((q, q), matvec=apply, dtype=np.float64)
        jacobi = LinearOperator((q, q), matvec=lambda x: x / diagonal, dtype=np.float64)

        def solve_system(target: np.ndarray) -> np.ndarray:
            return _cg(operator, target, jacobi)

    def solve(released: np.ndarray, explained: np.ndarray) -> tuple[float, list[np.ndarray]]:
        theta = prior * (coupling.T @ solve_system(released - release.T @ explained))
        biases, start, feature_start = [], 0, n_bias + 1
        for size, row_features in zip(design.bias_sizes, design.row_features, strict=True):
            # the feature term is a sum of per-row terms: it folds into each mode's biases
            width = row_features.shape[1]
            coefficients = theta[feature_start : feature_start + width]
            biases.append(theta[start : start + size] + row_features @ coefficients)
            start += size
            feature_start += width
        return float(theta[n_bias]), biases

    return solve


__all__ = [
    "PatternDesign",
    "laplace_release",
    "offsets_posterior",
    "pattern_design",
    "pattern_features",
    "posterior_offsets",
]
