"""Top-N recommendations: each user's highest-predicted items among those they have not rated.

A recommender's everyday output. For every requested user, the model's completed values at
``(user, item, day)`` over all items of one day are ranked, the items the user has rated (any day)
are left out, and the ``n`` best are kept -- the completion of Wei et al. read as a ranking, as in
the recommender literature's top-N evaluation (Cremonesi, Koren & Turrin 2010).

Ranking and reported values
---------------------------
Items are ranked by the model's value **before** clamping into the declared ``value_range``:
clamping would tie every item predicted above the top of the range. The values reported are the
clamped predictions, as :meth:`~dptensor.models.completion.TensorCompletion.predict` gives them.
Ties are broken by the smaller item index, so the ranking is deterministic; an item predicted NaN
ranks after every other unrated item.

Privacy
-------
Post-processing of the fitted model and of the excluded entries, nothing else:

* ``neighbouring="user"`` (joint DP): a training user's list is computed from that user's own row
  of the model (their ratings and the release) and, when ``exclude`` holds the training entries,
  from that user's own ratings -- so it must be given to that user alone, exactly as their
  predictions. Every user of the shape gets ``n`` slots, so the output's number of rows depends on
  the shape only.
* ``neighbouring="entry-value"``: the model is DP with respect to one rating's value, and the set
  of observed entries is public, so the lists (and the exclusion of rated items) are
  post-processing.

Nothing here is printed, warned or raised on the data: errors name the arguments only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["Recommendations", "check_day", "check_top_n", "check_users", "top_items"]

#: Items per user when ``n`` is not given (fewer where the catalogue is smaller).
DEFAULT_TOP_N = 10
#: Score at most this many (user, item) cells at once (memory: a few arrays of this many float64).
CELLS_PER_BLOCK = 1 << 21


@dataclass(frozen=True, eq=False)
class Recommendations:
    """Each user's ``n`` best items that they have not rated.

    Attributes
    ----------
    users : ndarray of int64, shape (n_users,)
        The users, in the order asked for.
    items : ndarray of int64, shape (n_users, n)
        Row ``u``: user ``users[u]``'s items, best first; ``-1`` in the slots left over when the
        user has fewer than ``n`` unrated items.
    predictions : ndarray of float64, shape (n_users, n)
        The model's prediction at each recommended item (clamped into the declared value range,
        as ``predict`` gives it); ``NaN`` in the left-over slots.
    day : int
        The index of the third mode (day) whose values were ranked.
    """

    users: np.ndarray
    items: np.ndarray
    predictions: np.ndarray
    day: int

    def rows(self) -> list[tuple[int, int, int, float]]:
        """``(user, rank, item, prediction)`` per slot, rank from 1 (the left-over slots included)."""
        n = self.items.shape[1]
        return [(int(user), rank + 1, int(item), float(value))
                for user, items, values in zip(self.users, self.items, self.predictions, strict=True)
                for rank, item, value in zip(range(n), items, values, strict=True)]


def check_top_n(n: object, n_items: int, name: str = "n") -> int:
    """``n`` as an int in ``[1, n_items]``, ``None`` meaning ``min(10, n_items)`` (a public check)."""
    if n is None:
        return min(DEFAULT_TOP_N, n_items)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(n).__name__}")
    if not 1 <= n <= n_items:
        raise ValueError(f"{name} must be between 1 and the number of items ({n_items}), got {n}")
    return int(n)


def check_day(day: object, n_days: int) -> int:
    """The day to rank (default: the last one, the most recent), checked against the public shape."""
    if day is None:
        return n_days - 1
    if isinstance(day, bool) or not isinstance(day, (int, np.integer)):
        raise TypeError(f"day must be an integer or None, got {type(day).__name__}")
    if not 0 <= day < n_days:
        raise ValueError(f"day must lie in [0, {n_days - 1}] (the model's third mode), got {day}")
    return int(day)


def check_users(users: object, n_users: int | None) -> np.ndarray:
    """``users`` as distinct non-negative int64 labels, below ``n_users`` where that is given."""
    arr = np.asarray(users)
    if arr.ndim != 1:
        raise ValueError(f"users must be a 1-D array of user indices, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"users must hold integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 0:
        raise ValueError("users must be non-negative")
    if n_users is not None and arr.size and arr.max() >= n_users:
        raise ValueError(f"users must lie in [0, {n_users - 1}] (the model's first mode)")
    if np.unique(arr).shape[0] != arr.shape[0]:
        raise ValueError("users must be distinct")
    return arr


def top_items(
    completed: Callable[[np.ndarray], np.ndarray],
    users: np.ndarray,
    n_items: int,
    n: int,
    *,
    excluded: np.ndarray | None = None,
    day: int,
    value_range: tuple[float, float] | None = None,
) -> Recommendations:
    """Rank every item for each user and keep the ``n`` best that the user has not rated.

    Parameters
    ----------
    completed : callable
        ``completed(cells)``: the model's values, before clamping, at ``(n, 3)`` int64
        ``(user, item, day)`` cells.
    users : ndarray of int64, shape (n_users,)
        The users, as ``completed`` understands them.
    n_items : int
        The catalogue: items ``0 .. n_items - 1``.
    n : int
        Items per user, ``1 <= n <= n_items``.
    excluded : ndarray of int64, shape (m, 2), optional
        ``(user, item)`` pairs that are never recommended (the rated items).
    day : int
        The day whose values are ranked.
    value_range : (float, float), optional
        The declared range the reported values are clamped into (not the ranking's).

    Returns
    -------
    Recommendations
    """
    users = np.asarray(users, dtype=np.int64)
    items = np.full((users.shape[0], n), -1, dtype=np.int64)
    values = np.full((users.shape[0], n), np.nan)
    catalogue = np.arange(n_items, dtype=np.int64)
    pairs = None if excluded is None or excluded.shape[0] == 0 else _ExcludedPairs.of(excluded)
    block = max(1, CELLS_PER_BLOCK // n_items)
    for start in range(0, users.shape[0], block):
        chunk = users[start:start + block]
        cells = np.column_stack([np.repeat(chunk, n_items), np.tile(catalogue, chunk.shape[0]),
                                 np.full(chunk.shape[0] * n_items, day, dtype=np.int64)])
        reported = np.asarray(completed(cells), dtype=np.float64).reshape(chunk.shape[0], n_items)
        # an item the model gives NaN or -inf ranks last among the unrated; -inf marks the rated ones
        ranking = np.where(np.isnan(reported) | (reported == -np.inf), np.finfo(np.float64).min, reported)
        if value_range is not None:
            reported = np.clip(reported, *value_range)
        if pairs is not None:
            rows, cols = _excluded_cells(chunk, pairs)
            ranking[rows, cols] = -np.inf
        best = _best_n(ranking, n)
        best_values = np.take_along_axis(ranking, best, axis=1)
        order = np.lexsort((best, -best_values), axis=1)
        best = np.take_along_axis(best, order, axis=1)
        best_values = np.take_along_axis(best_values, order, axis=1)
        kept = best_values > -np.inf  # not rated (a left-over slot otherwise)
        items[start:start + len(chunk)] = np.where(kept, best, -1)
        values[start:start + len(chunk)] = np.where(
            kept, np.take_along_axis(reported, best, axis=1), np.nan)
    return Recommendations(users, items, values, day)


def _best_n(ranking: np.ndarray, n: int) -> np.ndarray:
    """Per row, the columns of the ``n`` largest values, ties at the cut going to the smaller column."""
    m = ranking.shape[1]
    cut = np.partition(ranking, m - n, axis=1)[:, m - n:m - n + 1]  # each row's n-th largest value
    above = ranking > cut
    tied = ranking == cut
    room = n - above.sum(axis=1, keepdims=True)
    chosen = above | (tied & (np.cumsum(tied, axis=1) <= room))
    return np.nonzero(chosen)[1].reshape(ranking.shape[0], n)


def _excluded_cells(chunk: np.ndarray, excluded: _ExcludedPairs) -> tuple[np.ndarray, np.ndarray]:
    """Rows (positions in ``chunk``, distinct users) and item columns of the excluded pairs in ``chunk``."""
    first = np.searchsorted(excluded.users, chunk, side="left")
    counts = np.searchsorted(excluded.users, chunk, side="right") - first
    rows = np.repeat(np.arange(chunk.shape[0]), counts)
    # position of each pair in the sorted list: its user's first pair plus its rank among them
    offsets = np.arange(rows.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
    return rows, excluded.items[np.repeat(first, counts) + offsets]


@dataclass(frozen=True)
class _ExcludedPairs:
    """``(user, item)`` pairs sorted by user, looked up per block of users."""

    users: np.ndarray
    items: np.ndarray

    @classmethod
    def of(cls, pairs: np.ndarray) -> _ExcludedPairs:
        order = np.argsort(pairs[:, 0], kind="stable")
        return cls(np.ascontiguousarray(pairs[order, 0]), np.ascontiguousarray(pairs[order, 1]))
