"""The per-document steps of DP variational LDA: the E-step, the clipped statistics, the minibatches.

:class:`~dptensor.models.topics.dp_vi.DPVariationalLDA` (Park, Foulds, Chaudhuri & Welling 2016;
online variational Bayes of Hoffman, Blei & Bach 2010, Algorithm 2) runs these on every minibatch:
the variational E-step for all its documents at once, each document's expected sufficient
statistics clipped to Frobenius norm ``C`` and summed, the declared length bound, the noise floor
removed from the released topics, and the minibatch draws from the secret noise source (Poisson
sampling, or fixed-size draws without replacement as the authors' code does).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from scipy.special import psi

from dptensor.models.topics.moments import row_reduce
from dptensor.privacy import NoiseSource

__all__ = ["bound_document_lengths", "dirichlet_expectation", "document_statistics", "e_step",
           "fixed_size_sample", "poisson_sample", "shrink_noise"]

_EPS = np.finfo(np.float64).eps


def dirichlet_expectation(alpha: np.ndarray) -> np.ndarray:
    """``E[log theta]`` for ``theta ~ Dirichlet(alpha)``, row-wise."""
    return psi(alpha) - psi(alpha.sum(axis=1, keepdims=True))


def e_step(
    X: sp.csr_matrix,
    exp_elog_beta: np.ndarray,
    alpha: float,
    gamma: np.ndarray,
    max_iter: int,
    tol: float,
    clip: float | None,
    with_stats: bool,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Variational E-step of Hoffman et al. (2010), Algorithm 2, for all documents of ``X`` at once.

    Every document runs its own fixed-point iteration and stops when its mean absolute change
    of ``gamma`` falls below ``tol`` (as the per-document loops of Hoffman's code and
    scikit-learn do); the active documents are processed together, as arrays over their stored
    entries (``O(nnz K)`` per iteration, no Python loop over documents).

    Returns
    -------
    gamma : ndarray of shape (n_documents, K)
    sstats : ndarray of shape (K, V) or None
        ``sum_d s_d`` with each ``s_d`` clipped to Frobenius norm ``clip`` (``None``: unclipped).
    """
    lengths = np.diff(X.indptr)
    cols, counts = X.indices, X.data
    beta_t = np.ascontiguousarray(exp_elog_beta.T)  # V x K
    gamma = np.array(gamma, dtype=np.float64, copy=True)
    exp_elog_theta = np.exp(dirichlet_expectation(gamma))

    # documents still iterating; empty documents are done (gamma = alpha after one update)
    active = np.flatnonzero(lengths > 0)
    gamma[lengths == 0] = alpha
    exp_elog_theta[lengths == 0] = np.exp(dirichlet_expectation(gamma[lengths == 0]))
    # stored entries of the active documents (all stored entries belong to non-empty ones)
    a_counts, a_beta = counts, beta_t[cols]
    a_local = np.repeat(np.arange(active.size), lengths[active])
    starts = np.concatenate([[0], np.cumsum(lengths[active])[:-1]]) if active.size else np.zeros(0, int)
    g, t = gamma[active], exp_elog_theta[active]
    norm = np.einsum("ij,ij->i", t[a_local], a_beta) + _EPS
    for _ in range(max_iter):
        if active.size == 0:
            break
        weighted = a_beta * (a_counts / norm)[:, None]
        new = alpha + t * np.add.reduceat(weighted, starts, axis=0)
        t = np.exp(dirichlet_expectation(new))
        norm = np.einsum("ij,ij->i", t[a_local], a_beta) + _EPS
        change = np.abs(new - g).mean(axis=1)
        g = new
        done = change < tol
        if done.any():
            gamma[active[done]], exp_elog_theta[active[done]] = g[done], t[done]
            keep = ~done
            keep_entries = keep[a_local]
            active, g, t = active[keep], g[keep], t[keep]
            a_counts, a_beta, norm = a_counts[keep_entries], a_beta[keep_entries], norm[keep_entries]
            a_local = np.repeat(np.arange(active.size), lengths[active])
            starts = (
                np.concatenate([[0], np.cumsum(lengths[active])[:-1]]) if active.size else np.zeros(0, int)
            )
    gamma[active], exp_elog_theta[active] = g, t
    if not with_stats:
        return gamma, None
    return gamma, document_statistics(X, exp_elog_theta, exp_elog_beta, clip)


def document_statistics(
    X: sp.csr_matrix, exp_elog_theta: np.ndarray, exp_elog_beta: np.ndarray, clip: float | None
) -> np.ndarray:
    """``sum_d s_d`` with ``s_d[k, w] = n_dw e^{E log theta_dk + E log beta_kw} / phinorm_dw``, clipped.

    Each document's ``K x V`` statistic is scaled by ``min(1, clip / ||s_d||_F)`` before the sum
    (Park et al.; no scaling when ``clip`` is None). Its entries are non-negative and sum to the
    document's length.
    """
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    beta_nnz = exp_elog_beta.T[X.indices]  # nnz x K
    resp = exp_elog_theta[rows] * beta_nnz  # nnz x K, unnormalised responsibilities
    ratio = X.data / (resp.sum(axis=1) + _EPS)  # n_dw / phinorm_dw
    weights = exp_elog_theta
    if clip is not None:
        norms = np.sqrt(np.bincount(rows, ratio**2 * np.einsum("ij,ij->i", resp, resp), minlength=X.shape[0]))
        scale = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
        weights = exp_elog_theta * scale[:, None]
    ratio_matrix = sp.csr_matrix((ratio, X.indices, X.indptr), shape=X.shape)
    return np.asarray(ratio_matrix.T @ weights).T * exp_elog_beta


def bound_document_lengths(counts: sp.csr_matrix, max_length: float) -> sp.csr_matrix:
    """Scale every document longer than ``max_length`` tokens down to exactly ``max_length``.

    Row ``d`` becomes ``n_d min(1, L / |n_d|)`` (a per-document map, so it keeps the
    replace-one relation). Computed in a scaled form so that no finite count overflows: with
    ``m_d = max_w n_dw`` and ``u_d = sum_w n_dw / m_d`` (finite, at most the number of distinct
    words), the length is ``m_d u_d`` and a long row becomes ``(n_d / m_d) (L / u_d)``; counts
    up to the largest float64 (two of ``1e308`` included) give finite rows of length ``L``,
    without a floating-point warning.

    Parameters
    ----------
    counts : scipy.sparse.csr_matrix
        Non-negative, finite counts (validated), documents in rows.
    max_length : float
        The public bound ``L > 0``.

    Returns
    -------
    scipy.sparse.csr_matrix
        A new matrix; rows of at most ``L`` tokens are unchanged.
    """
    matrix = sp.csr_matrix(counts, dtype=np.float64, copy=True)
    matrix.eliminate_zeros()
    nonempty = np.flatnonzero(np.diff(matrix.indptr) > 0)
    if nonempty.size == 0:
        return matrix
    peak = row_reduce(matrix, matrix.data, np.maximum)
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    unit = matrix.data / peak[rows]  # in (0, 1]
    relative = row_reduce(matrix, unit, np.add)  # u_d: length / m_d, finite
    # length > L  <=>  u_d > L / m_d (no product that can overflow)
    long = np.zeros(matrix.shape[0], dtype=bool)
    long[nonempty] = relative[nonempty] > float(max_length) / peak[nonempty]
    hit = long[rows]
    matrix.data[hit] = unit[hit] * (float(max_length) / relative[rows[hit]])
    return matrix


def shrink_noise(lam: np.ndarray, noise_std: float, floor: float) -> np.ndarray:
    """``max(lambda - noise_std, floor)`` entrywise: the private topics' noise floor removed.

    Post-processing of the released ``lambda`` with a public ``noise_std`` (the standard deviation
    of the Gaussian noise each entry carries after the online average,
    ``sqrt(sum_t (rho_t prod_{s > t} (1 - rho_s) N sigma)^2)``, a function of the parameters and
    ``N`` only). Every entry of ``lambda``, signal or none, carries that noise, and the floor at
    ``eta`` keeps about ``0.4`` of it on each of the ``K V`` entries with no signal, which spreads
    the topics' mass over every word; soft-thresholding by one standard deviation removes most of
    it while keeping the order of each topic's words (a dptensor heuristic, not from Park et al.;
    on Debian's package descriptions at epsilon = 1 it cut the completion perplexity by about 10%).
    """
    return np.maximum(lam - float(noise_std), float(floor))


# ---------------------------------------------------------------------------------------------
# sampling from the secret source
# ---------------------------------------------------------------------------------------------
def poisson_sample(source: NoiseSource, n: int, q: float) -> np.ndarray:
    """Indices of a Poisson sample (each of ``0..n-1`` independently with probability ``q``).

    Drawn as geometric gaps ``floor(log(1 - U) / log(1 - q)) + 1`` (the memoryless skip between
    successes), so the cost is ``O(q n)`` uniforms from the secret source, not ``O(n)``.
    """
    if q >= 1.0:
        return np.arange(n)
    log_miss = math.log1p(-q)
    picks: list[np.ndarray] = []
    position = -1
    expected = n * q
    while True:
        m = int(expected + 6.0 * math.sqrt(expected + 1.0) + 16)
        gaps = np.floor(np.log1p(-source.random(m)) / log_miss).astype(np.int64) + 1
        idx = position + np.cumsum(gaps)
        inside = idx[idx < n]
        picks.append(inside)
        if inside.size < idx.size:
            return np.concatenate(picks)
        position = int(idx[-1])


def fixed_size_sample(source: NoiseSource, n: int, size: int) -> np.ndarray:
    """``size`` of ``0..n-1`` uniformly without replacement (the authors' random permutation)."""
    if size >= n:
        return np.arange(n)
    return np.sort(np.argsort(source.random(n), kind="stable")[:size])
