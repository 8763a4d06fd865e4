"""Whitening a symmetric tensor with a second-moment matrix, and mapping results back.

For a latent-variable model with ``M2 = sum_i w_i mu_i mu_i^T`` and
``M3 = sum_i w_i mu_i^{(x)3}`` (``w_i > 0``, ``mu_i`` linearly independent), a ``d x k`` matrix
``W`` with ``W^T M2 W = I_k`` makes ``v_i = sqrt(w_i) W^T mu_i`` orthonormal, so

``M3(W, W, W) = sum_i w_i (W^T mu_i)^{(x)3} = sum_i w_i^{-1/2} v_i^{(x)3}``

is an orthogonally decomposable ``k x k x k`` tensor (Anandkumar et al., JMLR 2014,
Section 4.3; DeCarolis et al., Section 4). Its eigenpairs ``(lambda_i, v_i)`` give back
``w_i = lambda_i^{-2}`` and ``mu_i = lambda_i (W^T)^+ v_i`` (:func:`unwhiten`).

An eigenvector is determined only up to its sign, and which sign an eigensolver returns depends on
the rounding of its input: the same ``M2`` summed in another order (threads, Dask blocks, another
BLAS kernel) can come back with some columns negated. The whitened tensor then has the matching
slices negated, and a power method started from the same random vectors takes another path to the
same eigenvectors. :func:`orient_columns` fixes one sign per column (its entry of largest magnitude
is positive, the convention of :func:`sklearn.utils.extmath.svd_flip`), and every
:class:`Whitening` built here is oriented, so ``W`` is a continuous function of ``M2``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse.linalg as spla

from dptensor._validation import RandomStateLike, check_finite_array, check_random_state, check_rank


def orientation_signs(vectors: np.ndarray) -> np.ndarray:
    """``+1`` or ``-1`` per column: the sign that makes the column's largest-magnitude entry positive.

    The sign convention of :func:`sklearn.utils.extmath.svd_flip`, for eigenvectors (which are
    determined up to sign only); ``+1`` for a zero column.
    """
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.size == 0:
        return np.ones(vectors.shape[1] if vectors.ndim == 2 else 0)
    largest = vectors[np.argmax(np.abs(vectors), axis=0), np.arange(vectors.shape[1])]
    return np.where(largest < 0, -1.0, 1.0)


def orient_columns(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` with each column multiplied by its :func:`orientation_signs` (a new array)."""
    return np.asarray(vectors, dtype=np.float64) * orientation_signs(vectors)


@dataclass(frozen=True)
class Whitening:
    """A whitening map for the top-``k`` eigenspace of a symmetric matrix ``M``.

    Attributes
    ----------
    matrix : ndarray of shape (d, k)
        ``W = U |Lambda|^{-1/2}`` (or ``U`` when built with ``scale=False``), so
        ``W^T M W = diag(sign(Lambda))`` -- the identity for a positive semi-definite ``M``.
    inverse : ndarray of shape (d, k)
        ``B = (W^T)^+ = U |Lambda|^{1/2}`` (or ``U``), which maps whitened vectors back:
        ``B W^T`` is the orthogonal projection onto the eigenspace.
    eigenvalues : ndarray of shape (k,)
        The ``k`` eigenvalues of largest magnitude, in decreasing magnitude.
    eigenvectors : ndarray of shape (d, k)
        The orthonormal eigenvectors ``U``.
    """

    matrix: np.ndarray
    inverse: np.ndarray
    eigenvalues: np.ndarray
    eigenvectors: np.ndarray

    @classmethod
    def from_eigenpairs(
        cls, eigenvalues: np.ndarray, eigenvectors: np.ndarray, *, require_positive: bool = True
    ) -> Whitening:
        """``W = U |Lambda|^{-1/2}`` and ``B = U |Lambda|^{1/2}`` from eigenpairs ``(Lambda, U)``.

        The columns of ``U`` are first oriented by :func:`orient_columns`. Raises ``ValueError``
        for a zero eigenvalue, or a non-positive one when ``require_positive`` is set.
        """
        if require_positive and np.any(eigenvalues <= 0):
            raise ValueError(
                f"the matrix has non-positive eigenvalues among its top {eigenvalues.shape[0]} "
                f"({eigenvalues.min():.3g}); it cannot be whitened to rank {eigenvalues.shape[0]}"
            )
        magnitude = np.sqrt(np.abs(eigenvalues))
        if np.any(magnitude == 0):
            raise ValueError(f"the matrix has rank below {eigenvalues.shape[0]}; it cannot be whitened")
        eigenvectors = orient_columns(eigenvectors)
        return cls(eigenvectors / magnitude, eigenvectors * magnitude, eigenvalues, eigenvectors)


def whiten(
    second_moment: np.ndarray | spla.LinearOperator,
    rank: int,
    *,
    scale: bool = True,
    require_positive: bool = True,
    random_state: RandomStateLike = None,
) -> Whitening:
    """Build the whitening map of the top-``rank`` eigenspace of a symmetric matrix.

    Parameters
    ----------
    second_moment : ndarray of shape (d, d) or scipy.sparse.linalg.LinearOperator
        A symmetric matrix such as ``M2``. A ``LinearOperator`` (or ``d > 500``) uses
        Lanczos (:func:`scipy.sparse.linalg.eigsh`) so only products with ``M`` are needed.
    rank : int
        ``k``, the number of eigenpairs kept (those of largest magnitude).
    scale : bool, default True
        ``True`` gives ``W = U |Lambda|^{-1/2}`` (``W^T M W = I`` for PSD ``M``);
        ``False`` gives the orthonormal projection basis ``W = U``.
    require_positive : bool, default True
        With ``scale=True``, raise when a kept eigenvalue is not positive (``M`` is then not
        the second moment of a model of rank ``k``, or is too noisy); ``False`` whitens with
        ``|lambda|`` instead.
    random_state : None, int or numpy.random.Generator
        Seeds the Lanczos start vector.

    Returns
    -------
    Whitening
    """
    rng = check_random_state(random_state)
    if isinstance(second_moment, spla.LinearOperator):
        dim = second_moment.shape[0]
        dense = None
    else:
        dense = check_finite_array(second_moment, "second_moment", ndim=2)
        dim = dense.shape[0]
        if dense.shape != (dim, dim):
            raise ValueError(f"second_moment must be square, got shape {dense.shape}")
        if not np.allclose(dense, dense.T, rtol=1e-8, atol=1e-12 * np.abs(dense).max()):
            raise ValueError("second_moment must be symmetric")
    rank = check_rank(rank, dim)
    if dense is not None and (dim <= 500 or rank >= dim - 1):
        values, vectors = np.linalg.eigh((dense + dense.T) / 2)
    else:
        operator = spla.aslinearoperator(dense) if dense is not None else second_moment
        start = rng.standard_normal(dim)
        values, vectors = spla.eigsh(operator, k=rank, which="LM", v0=start)
    order = np.argsort(-np.abs(values), kind="stable")[:rank]
    values, vectors = values[order], orient_columns(vectors[:, order])
    if not scale:
        return Whitening(vectors, vectors, values, vectors)
    return Whitening.from_eigenpairs(values, vectors, require_positive=require_positive)


def unwhiten(
    whitening: Whitening, weights: np.ndarray, factors: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Map eigenpairs of ``M3(W, W, W)`` back to model weights and components.

    With ``T = M3(W, W, W) = sum_i lambda_i v_i^{(x)3}`` and ``lambda_i = w_i^{-1/2}``
    (module docstring): ``w_i = lambda_i^{-2}`` and ``mu_i = lambda_i B v_i`` where
    ``B = (W^T)^+``.

    Parameters
    ----------
    whitening : Whitening
    weights : ndarray of shape (k,)
        Eigenvalues ``lambda_i > 0`` of the whitened tensor.
    factors : ndarray of shape (k, k)
        Unit eigenvectors ``v_i`` as columns.

    Returns
    -------
    mixture_weights : ndarray of shape (k,)
        ``w_i = lambda_i^{-2}``.
    components : ndarray of shape (d, k)
        ``mu_i = lambda_i B v_i`` as columns.
    """
    weights = check_finite_array(weights, "weights", ndim=1)
    factors = check_finite_array(factors, "factors", ndim=2)
    if np.any(weights <= 0):
        raise ValueError("weights of the whitened tensor must be positive to un-whiten")
    if factors.shape[0] != whitening.matrix.shape[1] or factors.shape[1] != weights.shape[0]:
        raise ValueError(
            f"factors must have shape ({whitening.matrix.shape[1]}, {weights.shape[0]}), "
            f"got {factors.shape}"
        )
    return weights**-2.0, (whitening.inverse @ factors) * weights
