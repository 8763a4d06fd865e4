"""The input of every top-N model: a binary user x item interaction matrix.

A recommender for implicit feedback sees *which* items each user chose (a rating above a threshold
the user names, a purchase, a play), not how much: every stored value of the matrix is read as one
interaction. :func:`check_interactions` turns what a caller passes into that matrix, refusing what
cannot be one.

Errors name the argument and the problem, never a value read from the matrix, so a refusal on a
private path says nothing about the data beyond that it is not an interaction matrix.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
import scipy.sparse as sp

__all__ = ["check_interactions", "check_item_count", "row_lengths"]


def check_item_count(n_items: object, name: str = "n_items") -> int:
    """``n_items`` as a positive ``int`` (a public size)."""
    if isinstance(n_items, bool) or not isinstance(n_items, Integral) or n_items < 1:
        raise ValueError(f"{name} must be a positive integer, got {n_items!r}")
    return int(n_items)


def check_interactions(X: object, *, name: str = "X", n_items: int | None = None) -> sp.csr_array:
    """``X`` as a binary CSR array of float64: every stored non-zero value is one interaction.

    Parameters
    ----------
    X : scipy.sparse matrix or array, or array_like
        Users in rows, items in columns; a non-zero entry is an interaction (its size is not used).
    name : str, default "X"
        The argument's name in error messages.
    n_items : int, optional
        The number of columns ``X`` must have (the fitted catalogue).

    Returns
    -------
    scipy.sparse.csr_array
        Sorted indices, no explicit zeros, every stored value ``1.0``.

    Raises
    ------
    TypeError
        When ``X`` is not numeric.
    ValueError
        When ``X`` is not 2-D, has no row or no column, holds NaN, an infinite or a negative value, or does
        not have ``n_items`` columns.
    """
    if sp.issparse(X):
        matrix = sp.csr_array(X, copy=True)
    else:
        array = np.asarray(X)
        if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
            raise TypeError(f"{name} must be a numeric user x item matrix, got dtype {array.dtype}")
        if array.ndim != 2:
            raise ValueError(f"{name} must be a 2-D user x item matrix, got {array.ndim} dimension(s)")
        matrix = sp.csr_array(array)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be a 2-D user x item matrix")
    if np.issubdtype(matrix.dtype, np.complexfloating) or not (
        np.issubdtype(matrix.dtype, np.number) or matrix.dtype == bool
    ):
        raise TypeError(f"{name} must hold real numbers, got dtype {matrix.dtype}")
    if matrix.shape[1] < 1 or matrix.shape[0] < 1:
        raise ValueError(f"{name} must have at least one user (row) and one item (column), got shape "
                         f"{matrix.shape}")
    if n_items is not None and matrix.shape[1] != n_items:
        raise ValueError(f"{name} must have {n_items} items (columns), as at fit, got {matrix.shape[1]}")
    values = matrix.data.astype(np.float64, copy=False)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name} must not hold NaN or infinite values")
    if np.any(values < 0):
        raise ValueError(f"{name} must not hold negative values (a non-zero entry is an interaction)")
    matrix.sum_duplicates()
    matrix.data = (matrix.data != 0).astype(np.float64)
    matrix.eliminate_zeros()
    matrix.sort_indices()
    return matrix


def row_lengths(X: sp.csr_array) -> np.ndarray:
    """The number of items of each user (row) of a checked matrix."""
    return np.diff(X.indptr).astype(np.int64)

