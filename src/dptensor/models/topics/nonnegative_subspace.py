"""The whitening subspace of a noisy second moment from a symmetric non-negative factorisation.

LDA's second moment is ``M2 = sum_i alpha_i / (alpha_0 (alpha_0 + 1)) mu_i mu_i^T`` (Anandkumar et
al. 2012): ``H H^T`` with ``H = [mu_i sqrt(alpha_i / (alpha_0 (alpha_0 + 1)))]`` **non-negative**.
The whitening needs the span of ``H``. Taking it from the top eigenvectors of a noisy release
``M2 + E`` ignores that structure; under heavy noise a direction whose eigenvalue is below half the
noise's spectral edge leaves no trace in the eigenvectors at all
(:func:`~dptensor.models.topics.private_whitening.spike_alignment`), while a non-negative factor
can still be found, because the noise is not non-negative.

Method, post-processing of the release:

1. **Threshold.** ``A = max(M2_hat - t, 0)`` with ``t`` the standard deviation of an off-diagonal
   noise entry (``s / sqrt2`` for the ``"frobenius"`` convention of scale ``s``): an entry of ``M2``
   smaller than the noise is set to zero rather than kept at a random sign.
2. **Symmetric NMF.** ``min ||A - H H^T||_F`` over ``H >= 0`` of ``rank`` columns by the damped
   multiplicative update ``H <- H * (1/2 + (A H) / (2 H H^T H))`` (the damped update of Ding, He &
   Simon 2005, *On the equivalence of nonnegative matrix factorization and spectral clustering*),
   started from the top eigenpairs of ``A`` (``|v_i| sqrt(lambda_i)``), so the result is a function
   of the release only.
3. **Subspace.** An orthonormal basis of the columns of ``H``.

The caller then takes the eigenpairs of the released matrix within that subspace (Rayleigh--Ritz).

Measured on real text (WordNet glosses, ``V' = 300`` whitening words, the default fit's noise at
epsilon = 1, ``benchmarks/bench_whitening_alignment.py``): it captures 0.69 of the un-noised
``M2``'s top-10 subspace, the eigenvectors 0.39. Real ``M2`` is not exactly of
this form (the noiseless factorisation reaches 0.95 of the true subspace on WordNet, 0.97 on Debian
descriptions), so with little noise the eigenvectors are better; see ``whitening_subspace`` of
:class:`~dptensor.models.PrivateSpectralLDA` for when each is used.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from dptensor._errstate import underflow_ignored
from dptensor._validation import check_positive_int

#: A direction of the factor counts above this fraction of its largest singular value: below it adds
#: less than 1e-8 of ``H H^T``'s scale, a remnant of the start (which no entry leaves at exactly 0).
FACTOR_RANK_TOL = 1e-4
#: Iterations of the multiplicative update at most, and the relative change of ``H`` that stops it.
SYMMETRIC_NMF_MAX_ITER = 500
SYMMETRIC_NMF_TOL = 1e-6
#: With ``impute_diagonal``, the start's diagonal is that of the rank-``k`` eigen-approximation,
#: re-estimated this many times from a zero diagonal (the eigenpairs of a matrix whose diagonal is
#: far off its ``H H^T`` would start the update at one word per column).
IMPUTE_START_ROUNDS = 5


@underflow_ignored  # multiplicative updates drive entries towards zero, by design
def symmetric_nmf(
    matrix: np.ndarray, rank: int, *, max_iter: int = SYMMETRIC_NMF_MAX_ITER, tol: float = SYMMETRIC_NMF_TOL,
    impute_diagonal: bool = False,
) -> np.ndarray:  # fmt: skip
    """A non-negative ``H`` of ``rank`` columns with ``H H^T`` close to a non-negative symmetric matrix.

    Parameters
    ----------
    matrix : ndarray of shape (m, m)
        Symmetric, entries ``>= 0``.
    rank : int
    max_iter : int, default :data:`SYMMETRIC_NMF_MAX_ITER`
    tol : float, default :data:`SYMMETRIC_NMF_TOL`
        Stop when ``||H_new - H||_F <= tol ||H||_F``.
    impute_diagonal : bool, default False
        Fit the off-diagonal entries only: each update reads the diagonal as the current
        ``diag(H H^T)`` (an EM step for missing entries). For a second moment whose diagonal is not
        of the form ``H H^T`` (a word paired with itself) or is noisier than the rest. The start is
        then imputed too (:data:`IMPUTE_START_ROUNDS`).

    Returns
    -------
    ndarray of shape (m, rank)
        Non-negative; deterministic (started from the top eigenpairs of ``matrix``).
    """
    A = np.asarray(matrix, dtype=np.float64)
    m = A.shape[0]
    rank = check_positive_int(rank, "rank")
    if A.ndim != 2 or A.shape != (m, m) or rank > m:
        raise ValueError(f"matrix must be square with at least rank={rank} rows, got shape {A.shape}")
    if not np.all(np.isfinite(A)) or np.any(A < 0):
        raise ValueError("matrix must be finite and non-negative")
    scale = float(np.max(A)) if A.size else 0.0
    if scale == 0.0:
        return np.zeros((m, rank))
    if impute_diagonal:
        A = A.copy()
        np.fill_diagonal(A, 0.0)
    start = A
    for _ in range(IMPUTE_START_ROUNDS if impute_diagonal else 0):  # the start's diagonal: rank-k imputed
        values, vectors = scipy.linalg.eigh(start, subset_by_index=[m - rank, m - 1])
        start = A + np.diag((vectors**2) @ np.maximum(values, 0.0))
    values, vectors = scipy.linalg.eigh(start, subset_by_index=[m - rank, m - 1])
    H = np.abs(vectors) * np.sqrt(np.maximum(values, 1e-12 * scale))[None, :]
    H += 1e-6 * np.sqrt(scale / m)  # no entry starts at zero (the update keeps zeros at zero)
    for _ in range(max_iter):
        numerator = A @ H
        if impute_diagonal:
            numerator += np.einsum("ij,ij->i", H, H)[:, None] * H
        denominator = H @ (H.T @ H)
        updated = H * (0.5 + 0.5 * numerator / np.maximum(denominator, 1e-300))
        change = np.linalg.norm(updated - H)
        H = updated
        if change <= tol * np.linalg.norm(H):
            break
    return H


def thresholded_release(released: np.ndarray, noise_scale: float) -> np.ndarray:
    """``max(released - s / sqrt2, 0)``: an entry of the release below one off-diagonal noise deviation
    (``s / sqrt2`` for the ``"frobenius"`` convention of scale ``s``) is set to zero (module docstring)."""
    return np.maximum(np.asarray(released, dtype=np.float64) - float(noise_scale) / np.sqrt(2.0), 0.0)


def nonnegative_subspace(released: np.ndarray, rank: int, noise_scale: float) -> np.ndarray:
    """Orthonormal basis of the span of a symmetric NMF of the thresholded release (module docstring).

    Parameters
    ----------
    released : ndarray of shape (m, m)
        The noisy symmetric second moment.
    rank : int
    noise_scale : float
        Scale ``s`` of its ``"frobenius"`` symmetric noise (off-diagonal standard deviation
        ``s / sqrt2``, the threshold).

    Returns
    -------
    ndarray of shape (m, rank)
        Orthonormal columns. Where the factor has fewer than ``rank`` independent columns (singular
        values above :data:`FACTOR_RANK_TOL` of the largest) the basis is completed by the top
        eigenvectors of the release, their part in the factor's span removed (pivoted QR).
    """
    released = np.asarray(released, dtype=np.float64)
    H = symmetric_nmf(thresholded_release(released, noise_scale), rank)
    left, singular, _ = np.linalg.svd(H, full_matrices=False)
    independent = int(np.count_nonzero(singular > FACTOR_RANK_TOL * singular[0])) if singular[0] > 0 else 0
    basis = left[:, :independent]
    if independent == rank:
        return basis
    # too few independent columns: the release's top eigenvectors, less their part in the basis
    m = released.shape[0]
    _, top = scipy.linalg.eigh(released, subset_by_index=[m - rank, m - 1])
    rest = top[:, ::-1] - basis @ (basis.T @ top[:, ::-1])
    extra, _, _ = scipy.linalg.qr(rest, mode="economic", pivoting=True)
    return np.hstack([basis, extra[:, : rank - independent]])
