"""Each user's ``n`` best items among those not in their row: the output of every top-N model.

A model gives a score to every (user, item) pair of a block of user rows (:func:`top_n` calls it
block by block, so that ``users x items`` scores never live in memory at once); the items already
in the user's row are left out, and the ``n`` of largest score are kept, best first. Ties are
broken by the smaller item index, so the ranking is deterministic; an item scored NaN (or
``-inf``) ranks after every other eligible item. A user with fewer than ``n`` eligible items gets
``-1`` (and a NaN score) in the slots left over, so every user has exactly ``n`` slots and the size
of the result depends on the public sizes only.

Privacy (joint DP). A user's list is a function of that user's own row and of the model's item
side (a release, for a private model), nothing else: it is for that user alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral

import numpy as np
import scipy.sparse as sp

__all__ = ["DEFAULT_TOP_N", "Recommendations", "check_top_n", "check_users", "top_n"]

#: Items per user when ``n`` is not given (fewer where the catalogue is smaller).
DEFAULT_TOP_N = 10
#: Score at most this many (user, item) cells at once.
CELLS_PER_BLOCK = 1 << 22

ScoreRows = Callable[[sp.csr_array], np.ndarray]


@dataclass(frozen=True, eq=False)
class Recommendations:
    """Each user's ``n`` best items that are not in their row.

    Attributes
    ----------
    users : ndarray of int64, shape (n_users,)
        The users (row indices of the matrix the lists were made from), in the order asked for.
    items : ndarray of int64, shape (n_users, n)
        Row ``u``: the items of ``users[u]``, best first; ``-1`` in the slots left over.
    scores : ndarray of float64, shape (n_users, n)
        The model's score of each recommended item; ``NaN`` in the slots left over.
    """

    users: np.ndarray
    items: np.ndarray
    scores: np.ndarray

    @property
    def n(self) -> int:
        """Slots per user."""
        return int(self.items.shape[1])

    def rows(self) -> list[tuple[int, int, int, float]]:
        """``(user, rank, item, score)`` per slot, rank from 1 (the left-over slots included)."""
        return [(int(user), rank + 1, int(item), float(score))
                for user, items, scores in zip(self.users, self.items, self.scores, strict=True)
                for rank, (item, score) in enumerate(zip(items, scores, strict=True))]


def check_top_n(n: object, n_items: int, name: str = "n") -> int:
    """``n`` as an int in ``[1, n_items]``; ``None`` means ``min(10, n_items)`` (a public check)."""
    if n is None:
        return min(DEFAULT_TOP_N, n_items)
    if isinstance(n, bool) or not isinstance(n, Integral) or not 1 <= n <= n_items:
        raise ValueError(f"{name} must be an integer from 1 to the number of items ({n_items}), got {n!r}")
    return int(n)


def check_users(users: object, n_users: int, name: str = "users") -> np.ndarray:
    """Row indices in ``[0, n_users)`` as int64 (``None``: every row)."""
    if users is None:
        return np.arange(n_users, dtype=np.int64)
    array = np.asarray(users)
    if array.ndim == 0:
        array = array.reshape(1)
    if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
        raise ValueError(f"{name} must be a 1-D array of user indices (integers)")
    array = array.astype(np.int64)
    if array.size and (array.min() < 0 or array.max() >= n_users):
        raise ValueError(f"{name} must lie in [0, {n_users}) (the users of the fitted matrix)")
    return array


def top_n(
    score_rows: ScoreRows, X: sp.csr_array, n: int, users: np.ndarray | None = None,
    eligible: np.ndarray | None = None,
) -> Recommendations:
    """Each requested user's ``n`` best items outside their row of ``X``.

    Parameters
    ----------
    score_rows : callable
        ``score_rows(rows)`` -> dense ``(len(rows), n_items)`` scores of a CSR block of user rows.
    X : scipy.sparse.csr_array
        The users' rows (binary, as :func:`~dptensor.models.recommend._input.check_interactions`
        gives them); their items are excluded and they are what ``score_rows`` reads.
    n : int
        Slots per user (checked by the caller: :func:`check_top_n`).
    users : ndarray of int64, optional
        Rows of ``X`` to list (default: all, in order).
    eligible : ndarray of int64, optional
        The only columns that may be listed (default: every column), e.g. the items a private
        model selected under DP; the others are never listed, whatever their score.

    Returns
    -------
    Recommendations
    """
    users = np.arange(X.shape[0], dtype=np.int64) if users is None else users
    n_items = X.shape[1]
    items = np.full((users.size, n), -1, dtype=np.int64)
    scores = np.full((users.size, n), np.nan)
    allowed = None
    if eligible is not None:
        allowed = np.zeros(n_items, dtype=bool)
        allowed[eligible] = True
    step = max(1, CELLS_PER_BLOCK // n_items)
    for start in range(0, users.size, step):
        chosen = users[start:start + step]
        rows = X[chosen]
        block = np.asarray(score_rows(rows), dtype=np.float64)
        if block.shape != (chosen.size, n_items):
            raise RuntimeError(f"score_rows returned shape {block.shape}, expected {(chosen.size, n_items)}")
        best_items, best_scores = _best(block, rows, n, allowed)
        items[start:start + step] = best_items
        scores[start:start + step] = best_scores
    return Recommendations(users, items, scores)


def _best(block: np.ndarray, rows: sp.csr_array, n: int, allowed: np.ndarray | None
          ) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` best eligible items of each row of a score block (module docstring's order)."""
    n_rows, n_items = block.shape
    key = np.where(np.isfinite(block) | (block == np.inf), block, np.finfo(np.float64).min)
    excluded_rows = np.repeat(np.arange(n_rows), np.diff(rows.indptr))
    key[excluded_rows, rows.indices] = -np.inf
    if allowed is not None:
        key[:, ~allowed] = -np.inf
    # the n-th largest key of each row: every item at or above it is a candidate (ties included)
    kth = -np.partition(-key, n - 1, axis=1)[:, n - 1] if n < n_items else np.full(n_rows, -np.inf)
    candidate = (key >= kth[:, None]) & (key > -np.inf)
    r, c = np.nonzero(candidate)
    order = np.lexsort((c, -key[r, c], r))
    r, c = r[order], c[order]
    first = np.searchsorted(r, np.arange(n_rows))
    rank = np.arange(r.size) - first[r]
    keep = rank < n
    items = np.full((n_rows, n), -1, dtype=np.int64)
    scores = np.full((n_rows, n), np.nan)
    items[r[keep], rank[keep]] = c[keep]
    scores[r[keep], rank[keep]] = block[r[keep], c[keep]]
    return items, scores
