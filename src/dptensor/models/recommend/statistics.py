"""The item statistics of the top-N models: sums over users, as map over user blocks, then sum.

Every item-side quantity a top-N model needs from the users is a sum over users of a term that
depends on one user's row: the item counts ``sum_u w_u x_u`` (popularity) and the item Gram
``sum_u w_u^2 x_u x_u^T`` (EASE). They are written once here against
:class:`dptensor.parallel.RowBlocks`, so the same code runs in-process, on threads or on a Dask
cluster (``docs/scale.md``); a private model adds its noise once, to the sum
(:mod:`dptensor.models.recommend.releases`).

Weightings: ``"none"`` (``w_u = 1``) and ``"unit"`` (``w_u = 1/sqrt(n_u)``: every user's weighted row
has l2 norm 1 whatever its length, which bounds one user's contribution to both sums).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dptensor.parallel import RowBlocks

__all__ = ["WEIGHTINGS", "item_counts", "item_gram", "weighted_rows"]

#: The row weightings of the item statistics.
WEIGHTINGS = ("none", "unit")


def weighted_rows(block: object, weighting: str) -> sp.csr_array:
    """A block's rows, binarised, each multiplied by its weight ``w_u`` (module docstring)."""
    rows = sp.csr_array(block, copy=True)
    rows.sum_duplicates()  # a pair stored twice is one interaction
    rows.data = (rows.data != 0).astype(np.float64)
    rows.eliminate_zeros()
    if weighting == "unit":
        lengths = np.diff(rows.indptr).astype(np.float64)
        scale = np.zeros_like(lengths)
        np.divide(1.0, np.sqrt(lengths), out=scale, where=lengths > 0)
        rows.data *= np.repeat(scale, np.diff(rows.indptr))
    return rows


def _gram_block(block: object, weighting: str) -> np.ndarray:
    """``sum_u w_u^2 x_u x_u^T`` over one block's users (dense ``I x I``)."""
    rows = weighted_rows(block, weighting)
    return np.asarray((rows.T @ rows).toarray(), dtype=np.float64)


def _count_block(block: object, weighting: str) -> np.ndarray:
    """``sum_u w_u x_u`` over one block's users."""
    return np.asarray(weighted_rows(block, weighting).sum(axis=0), dtype=np.float64).ravel()


def item_gram(blocks: RowBlocks, *, weighting: str = "none") -> np.ndarray:
    """The item Gram ``sum_u w_u^2 x_u x_u^T`` of binary user rows, as map over user blocks, then sum.

    Parameters
    ----------
    blocks : RowBlocks
        The user rows (:func:`dptensor.parallel.as_row_blocks`); a stored value is an interaction.
    weighting : {"none", "unit"}
        ``"none"``: ``X^T X``, EASE's Gram; ``"unit"``: rows of l2 norm 1.

    Returns
    -------
    ndarray, shape (n_items, n_items)
    """
    _check_weighting(weighting)
    return blocks.map_sum(_gram_block, weighting, label="item-gram")


def item_counts(blocks: RowBlocks, *, weighting: str = "none") -> np.ndarray:
    """``sum_u w_u x_u``: each item's (weighted) number of users, as map over user blocks, then sum."""
    _check_weighting(weighting)
    return blocks.map_sum(_count_block, weighting, label="item-counts")


def _check_weighting(weighting: str) -> None:
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
