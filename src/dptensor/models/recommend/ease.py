"""EASE: the item-item model of Steck (WWW 2019), dense and in a low-rank form.

Steck's *Embarrassingly shallow autoencoder* learns an item-item weight matrix ``B`` with a zero
diagonal that reconstructs each user's row from their other items,

``min_B ||X - X B||_F^2 + lambda ||B||_F^2  subject to  diag(B) = 0``           (Steck 2019, eq. 1)

whose closed form (eq. 8) needs only the item Gram ``G = X^T X``: with ``P = (G + lambda I)^-1``,

``B = I - P diagMat(1 / diag(P))``,  i.e.  ``B_ij = -P_ij / P_jj`` off the diagonal.

A user's scores are ``x_u B``. Everything about the users that EASE needs is the Gram, a sum over
users of ``x_u x_u^T`` (:func:`dptensor.models.recommend.statistics.item_gram`, map over user
blocks, then sum); a private model noises that sum once (:mod:`dptensor.models.recommend.releases`).

Catalogues too large for a dense ``I x I`` matrix (``10^5`` items) use :class:`LowRankEase`: the
Gram's top ``r`` eigenpairs ``G ~ Q diag(s) Q^T``, from a randomised eigensolver on ``X`` that never
forms ``G`` (Halko, Martinsson & Tropp 2011; scikit-learn's ``randomized_svd`` of the weighted rows,
whose squared singular values are the Gram's eigenvalues). Then
``P ~ (I - Q diag(s / (s + lambda)) Q^T) / lambda`` and both ``diag(P)`` and ``x_u P`` cost
``O(I r)``, so ``B`` is never formed either.

The ridge. Steck tunes ``lambda`` per data set (500 for MovieLens-20M). :func:`ease_ridge` gives it
from the Gram's mean diagonal -- the mean number of (weighted) interactions per item -- a rule
measured on MovieLens-100K and on semi-synthetic users (docs/recommend.md).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from dptensor.models.recommend.statistics import mirror_upper

__all__ = [
    "DEFAULT_RIDGE_SCALE",
    "LowRankEase",
    "ease_from_gram",
    "ease_ridge",
    "fit_low_rank_ease",
    ]

#: From this many items on, the Cholesky factorisation runs on one BLAS thread: OpenBLAS 0.3.31's
#: threaded ``dpotrf`` (the one NumPy and SciPy wheels ship) crashes the process at n = 16000 on a
#: 2-core x86-64 machine (fine at 12000 and 14000, and at 16000 on one thread: 29 s); the inverse
#: (``dpotri``) keeps every thread.
SINGLE_THREAD_CHOLESKY_ITEMS = 12000

#: ``lambda = DEFAULT_RIDGE_SCALE * mean(diag(G))`` (:func:`ease_ridge`).
DEFAULT_RIDGE_SCALE = 8.0


def ease_ridge(gram_diagonal: np.ndarray, scale: float = DEFAULT_RIDGE_SCALE) -> float:
    """The default ridge: ``scale`` times the Gram's mean diagonal (at least a tiny positive number)."""
    mean = float(np.mean(np.maximum(np.asarray(gram_diagonal, dtype=np.float64), 0.0)))
    return max(scale * mean, 1e-6)


def ease_from_gram(gram: np.ndarray, ridge: float) -> np.ndarray:
    """EASE's weights ``B = I - P diagMat(1/diag(P))``, ``P = (G + ridge I)^-1`` (Steck 2019, eq. 8).

    Parameters
    ----------
    gram : ndarray, shape (n_items, n_items)
        A symmetric item Gram (it need not be positive semi-definite: a noisy Gram is not; the
        ridge must then exceed its most negative eigenvalue).
    ridge : float
        ``lambda > 0``.

    Returns
    -------
    ndarray, shape (n_items, n_items)
        ``B``, zero on the diagonal; a user's scores are ``x_u @ B``.

    Raises
    ------
    ValueError
        When ``gram + ridge I`` is not positive definite.
    """
    if not ridge > 0:
        raise ValueError(f"ridge must be positive, got {ridge!r}")
    # P from the Cholesky factor directly (LAPACK potrf + potri: a third of the work of solving
    # against the identity, and no second n x n array); P is written to the upper triangle
    system = np.array(gram, dtype=np.float64, order="F", copy=True)
    system[np.diag_indices_from(system)] += ridge
    with _cholesky_threads(system.shape[0]):
        factor, info = scipy.linalg.lapack.dpotrf(system, lower=False, overwrite_a=True, clean=False)
    if info != 0:
        raise ValueError("gram + ridge * I is not positive definite: raise the ridge")
    precision, info = scipy.linalg.lapack.dpotri(factor, lower=False, overwrite_c=True)
    if info != 0:  # pragma: no cover - potrf succeeded, so the factor is invertible
        raise ValueError("gram + ridge * I could not be inverted: raise the ridge")
    mirror_upper(precision)
    precision /= -np.diag(precision)[None, :]  # B in place: I - P diagMat(1/diag P), off the diagonal
    np.fill_diagonal(precision, 0.0)
    return precision


@dataclass(frozen=True)
class LowRankEase:
    """EASE on a rank-``r`` eigen-approximation of the Gram (module docstring); ``B`` is never formed.

    Attributes
    ----------
    eigenvectors : ndarray, shape (n_items, r)
        ``Q``, orthonormal columns.
    eigenvalues : ndarray, shape (r,)
        ``s >= 0``.
    ridge : float
        ``lambda``.
    """

    eigenvectors: np.ndarray
    eigenvalues: np.ndarray
    ridge: float

    @property
    def _shrink(self) -> np.ndarray:
        return self.eigenvalues / (self.eigenvalues + self.ridge)

    @property
    def precision_diagonal(self) -> np.ndarray:
        """``diag(P)`` of the approximation."""
        q = self.eigenvectors
        return (1.0 - np.einsum("ir,ir,r->i", q, q, self._shrink)) / self.ridge

    def scores(self, rows: sp.csr_array) -> np.ndarray:
        """``x_u B`` for each row: ``x - (x P) / diag(P)`` (the diagonal of ``B`` is zero)."""
        dense = np.asarray(rows.toarray() if sp.issparse(rows) else rows, dtype=np.float64)
        projected = (rows @ self.eigenvectors) * self._shrink
        times_p = (dense - projected @ self.eigenvectors.T) / self.ridge
        return dense - times_p / self.precision_diagonal[None, :]


def fit_low_rank_ease(
    X: sp.csr_array, rank: int, ridge: float | None = None, *, ridge_scale: float = DEFAULT_RIDGE_SCALE,
    random_state: np.random.Generator | int | None = None,
) -> LowRankEase:
    """:class:`LowRankEase` of binary rows ``X``: top ``rank`` eigenpairs of ``X^T X`` by a randomised SVD.

    ``ridge=None`` applies :func:`ease_ridge` to the Gram's diagonal, the item counts (exact, not
    approximated).
    """
    from sklearn.utils.extmath import randomized_svd

    rank = int(min(rank, min(X.shape)))
    seed = random_state if isinstance(random_state, int | None) else int(random_state.integers(2**31))
    _, singular, vt = randomized_svd(X, rank, n_oversamples=20, n_iter=6, random_state=seed)
    if ridge is None:
        ridge = ease_ridge(np.asarray(X.sum(axis=0)).ravel(), ridge_scale)
    return LowRankEase(np.ascontiguousarray(vt.T), singular**2, float(ridge))


def _cholesky_threads(n: int) -> contextlib.AbstractContextManager:
    """One BLAS thread for a Cholesky factorisation of ``n >= SINGLE_THREAD_CHOLESKY_ITEMS`` rows."""
    if n < SINGLE_THREAD_CHOLESKY_ITEMS:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")
