"""Spectral LDA's whitening: the top eigenpairs of ``M2_hat`` and ``W = U S^{-1/2}`` (edges e2, e5).

Step (2) of Section 4 of DeCarolis et al. (*An end-to-end differentially private spectral algorithm
for LDA*; Figure 1's edges e2 and e5): :func:`top_eigenpairs` finds the ``k`` algebraically largest
eigenpairs of ``M2_hat`` -- a dense matrix or the implicit operator
:class:`~dptensor.models.topics.moments.LDASecondMoment`, never formed as ``d x d`` -- by a dense
eigendecomposition, randomised subspace iteration with Rayleigh-Ritz (Halko, Martinsson & Tropp
2011) or Lanczos, and :func:`lda_whitening` turns them into the
:class:`~dptensor.decomposition.whitening.Whitening` ``W = U S^{-1/2}``, ``(W^T)^+ = U S^{1/2}``
that :mod:`dptensor.models.topics.spectral` and the private models use.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse.linalg as spla

from dptensor._validation import RandomStateLike, check_positive_int, check_random_state
from dptensor.decomposition.whitening import Whitening, orient_columns
from dptensor.models.topics.moments import LDASecondMoment

__all__ = ["DENSE_WHITENING_MAX_WORDS", "MAX_POWER_ITER", "lda_whitening", "top_eigenpairs"]

#: Vocabularies up to this size are whitened with a dense eigendecomposition under ``"auto"``.
DENSE_WHITENING_MAX_WORDS = 1500
#: The most block products the randomised eigensolver runs when it iterates to a tolerance.
MAX_POWER_ITER = 100


def _ritz_state(basis: np.ndarray, image: np.ndarray, rank: int, tol: float) -> str:
    """``"converged"``, ``"iterate"`` or ``"lanczos"``: where randomised subspace iteration stands.

    ``"converged"`` when the top ``rank`` Ritz pairs of ``M`` in ``basis`` have relative residuals
    ``<= tol``. ``image = M basis``; with ``basis^T M basis = S diag(theta) S^T``, the Ritz vector
    ``u_j = basis s_j`` has ``M u_j = image s_j`` (Rayleigh-Ritz; Saad, *Numerical Methods for
    Large Eigenvalue Problems*, Section 4.3), so the residuals cost no further product.
    ``"lanczos"`` when fewer than ``rank`` Ritz values are positive: the iteration converges to the
    eigenvalues largest in magnitude, and negative ones hold the place of the ``rank``-th positive
    one, so more products would not find it (:func:`top_eigenpairs` then runs Lanczos at once
    instead of after :data:`MAX_POWER_ITER` products).
    """
    small = basis.T @ image
    theta, vectors = np.linalg.eigh((small + small.T) / 2.0)
    if np.count_nonzero(theta > 0) < rank:
        return "lanczos"
    top = np.argsort(theta)[::-1][:rank]
    theta, vectors = theta[top], vectors[:, top]
    residual = np.linalg.norm(image @ vectors - (basis @ vectors) * theta, axis=0)
    return "converged" if np.all(residual <= tol * np.abs(theta)) else "iterate"


def top_eigenpairs(
    operator: LDASecondMoment | np.ndarray,
    rank: int,
    *,
    method: str = "auto",
    n_oversamples: int = 10,
    n_power_iter: int = 2,
    tol: float | None = None,
    random_state: RandomStateLike = None,
    lanczos_fallback: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``rank`` algebraically largest eigenpairs of a symmetric matrix or operator.

    Parameters
    ----------
    operator : LDASecondMoment or ndarray of shape (d, d)
    rank : int
    method : {"auto", "dense", "randomized", "eigsh"}
        ``"dense"``: :func:`numpy.linalg.eigh` on the materialised matrix; ``"randomized"``:
        randomised subspace iteration with Rayleigh-Ritz (Halko, Martinsson & Tropp 2011,
        Algorithms 4.4 and 5.3), ``n_power_iter + 2`` block products with
        ``rank + n_oversamples`` columns (for an :class:`LDASecondMoment` the range-finding
        products run in single precision, the Rayleigh-Ritz one in double); ``"eigsh"``:
        Lanczos (:func:`scipy.sparse.linalg.eigsh`, ``which="LA"``) on a LinearOperator.
        ``"auto"`` is dense up to :data:`DENSE_WHITENING_MAX_WORDS` words and randomised above.
        Randomised subspace iteration converges to the eigenvalues largest in magnitude; when
        its top ``rank`` Ritz values include a non-positive one (large negative eigenvalues of
        ``M2_hat`` took the place of positive ones; with ``tol``, seen at the first convergence
        check rather than after the last product), Lanczos (``"eigsh"``) is used instead
        unless ``lanczos_fallback=False`` (callers that accept non-positive values and whose
        operator is costly per single product, e.g. a private release's implicit noise).
    n_oversamples, n_power_iter : int
        Randomised method only.
    tol : float, optional
        Randomised method only: after ``n_power_iter`` products, keep iterating the subspace
        (at most :data:`MAX_POWER_ITER` products) until every one of the top ``rank`` Ritz pairs
        ``(theta_j, u_j)`` of the current basis has the relative residual
        ``||M u_j - theta_j u_j|| <= tol theta_j`` (computed from the product the next step needs
        anyway). ``None`` runs exactly ``n_power_iter`` products (Halko et al.'s fixed ``q``), whose
        accuracy depends on the spectrum: with a slowly decaying one the subspace then depends on
        the random start (issue 26: cosines down to 0.76 between seeds on 6.7e4 Debian descriptions
        at ``k = 20``), and so do the topics.
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    eigenvalues : ndarray of shape (rank,), descending
    eigenvectors : ndarray of shape (d, rank), orthonormal columns
        Each oriented by :func:`~dptensor.decomposition.whitening.orient_columns`, so that the
        result does not depend on which sign the solver happened to return.
    """
    d = operator.shape[0]
    if method == "auto":
        method = "dense" if d <= DENSE_WHITENING_MAX_WORDS else "randomized"
    rng = check_random_state(random_state)
    apply = operator.matmat if isinstance(operator, LDASecondMoment) else (lambda v: operator @ v)
    if method == "dense":
        dense = operator.to_dense() if isinstance(operator, LDASecondMoment) else np.asarray(operator)
        values, vectors = np.linalg.eigh((dense + dense.T) / 2.0)
        order = np.argsort(values)[::-1][:rank]
        return values[order], orient_columns(vectors[:, order])
    if method == "randomized":
        width = min(d, rank + check_positive_int(n_oversamples, "n_oversamples", minimum=0))
        n_power_iter = check_positive_int(n_power_iter, "n_power_iter", minimum=0)
        # Range finding only needs the subspace: single-precision sparse passes where available;
        # the Rayleigh-Ritz step below is in double precision.
        rough = (
            (lambda v: operator.matmat(v, single_precision=True))
            if isinstance(operator, LDASecondMoment)
            else apply
        )
        Q, _ = np.linalg.qr(rough(rng.standard_normal((d, width))))
        state = "iterate"
        for step in range(MAX_POWER_ITER if tol is not None else n_power_iter):
            image = rough(Q)
            if tol is not None and step >= n_power_iter:
                state = _ritz_state(Q, image, rank, tol)
                if state == "converged" or (state == "lanczos" and lanczos_fallback):
                    break
            Q, _ = np.linalg.qr(image)
        if state != "lanczos" or not lanczos_fallback:
            small = Q.T @ apply(Q)
            values, vectors = np.linalg.eigh((small + small.T) / 2.0)
            order = np.argsort(values)[::-1][:rank]
            if values[order[-1]] > 0 or not lanczos_fallback:
                return values[order], orient_columns(Q @ vectors[:, order])
        # Subspace iteration finds the eigenvalues largest in *magnitude*: where M2_hat has negative
        # ones as large as its positive ones, the subspace holds them instead of the k-th positive
        # eigenvector (change logs, d = 5000, k = 20: a Ritz value -1.9e-4 where Lanczos finds
        # +3.2e-4). Lanczos for the algebraically largest then decides.
        method = "eigsh"
    if method == "eigsh":
        if isinstance(operator, LDASecondMoment):
            linop = operator.as_linear_operator()
        elif isinstance(operator, np.ndarray):
            linop = spla.aslinearoperator(operator)
        else:  # a LinearOperator (a release plus its noise) or any operator with ``@``
            linop = spla.LinearOperator(
                (d, d), matvec=lambda v: np.asarray(apply(v.reshape(-1, 1))).ravel(), matmat=apply,
                dtype=np.float64,
            )  # fmt: skip
        v0 = rng.standard_normal(d)
        values, vectors = spla.eigsh(linop, k=rank, which="LA", v0=v0)
        order = np.argsort(values)[::-1]
        return values[order], orient_columns(vectors[:, order])
    raise ValueError(f"method must be 'auto', 'dense', 'randomized' or 'eigsh', got {method!r}")


def lda_whitening(
    second_moment: LDASecondMoment | np.ndarray,
    n_components: int,
    *,
    method: str = "auto",
    n_oversamples: int = 10,
    n_power_iter: int = 2,
    tol: float | None = None,
    random_state: RandomStateLike = None,
) -> Whitening:
    """Whitening ``W = U S^{-1/2}`` from the top-``k`` eigenpairs of ``M2_hat`` (Section 4, step (2)).

    Raises ``ValueError`` when ``M2_hat`` has fewer than ``k`` positive eigenvalues (too few
    documents for ``k`` topics, ``k`` larger than the number of topics present, or a wrong
    ``alpha0``). See :func:`top_eigenpairs` for the methods.
    """
    values, vectors = top_eigenpairs(
        second_moment,
        n_components,
        method=method,
        n_oversamples=n_oversamples,
        n_power_iter=n_power_iter,
        tol=tol,
        random_state=random_state,
    )
    if values[-1] <= 0:
        raise ValueError(
            f"M2_hat has only {int(np.sum(values > 0))} positive eigenvalue(s) among its top "
            f"{n_components}; cannot whiten for n_components={n_components} (use fewer topics, more "
            "documents, or check alpha0)"
        )
    return Whitening.from_eigenpairs(values, vectors)
