"""Top-N evaluation of recommenders on implicit feedback: the splits and the ranking metrics.

Two protocols, both on a SciPy sparse user x item matrix whose stored non-zeros are the
interactions (their values -- ratings, counts -- are kept by the splits):

* **Per-user random split** (:func:`per_user_split`): each user's interactions are split at
  random, a fraction held out as that user's test set; the model is trained on the rest and each
  training user's list (their training items excluded) is scored against their held-out items.
  The protocol of RecBole's benchmark tables (a ratio split grouped by user, in random order).
* **Held-out users** (:func:`held_out_users_split`; "strong generalisation", Marlin 2004; Liang,
  Krishnan, Hoffman & Jebara, *Variational Autoencoders for Collaborative Filtering*, WWW 2018,
  experimental setup; Steck, *Embarrassingly Shallow Autoencoders for Sparse Data*, WWW 2019,
  experiments): users are split into training and test users; the model never sees a test user's
  row in training, is given 80% of it at recommendation time (the *fold-in* part) and is scored on
  the other 20% (the *target*). Under user-level DP this is the evaluation that reads no training
  user's list.

Metrics take the recommended lists as an integer array of item ids, shape ``(users, n)``, best
first, ``-1`` in an empty slot (fewer than ``n`` items to recommend) -- the ``items`` of a
``Recommendations`` -- and ``relevant``, a sparse matrix with one row per list whose non-zeros are
the relevant items (the held-out interactions, or :func:`relevant_from_ratings` for the explicit
rating protocol: relevant = a held-out rating of at least 4). With ``hit_uj = 1`` when the ``j``-th
item of user ``u``'s list is relevant (``j = 1..k``) and ``R_u`` the relevant set:

* ``Recall@k = sum_j hit_uj / min(k, |R_u|)`` -- the normalisation of Liang et al. 2018 (their
  Recall@R), also Steck 2019's, which reaches 1 when the list is as good as it can be;
  ``denominator="relevant"`` gives the plain ``sum_j hit_uj / |R_u|``;
* ``Precision@k = sum_j hit_uj / k`` (an empty slot counts as a miss);
* ``NDCG@k = DCG@k / IDCG@k`` with ``DCG@k = sum_j hit_uj / log2(j + 1)`` and ``IDCG@k`` the DCG of
  a list holding ``min(k, |R_u|)`` relevant items first (binary relevance; Järvelin & Kekäläinen
  2002; as in Liang et al. 2018);
* ``Coverage@k``: the share of the catalogue (``relevant``'s columns) that appears in the top ``k``
  of at least one list, over every list given.

Each per-user metric is the mean over the users with at least one relevant item; a user without
one is left out (and counted in neither the mean nor ``n_users``). NDCG@k is ``implicit``'s
(``implicit.evaluation.ranking_metrics_at_k``: equal to six digits on MovieLens-100K); its
"precision" is Recall@k pooled over users (``sum_u hits_u / sum_u min(k, |R_u|)``), not the mean.

The metrics are vectorised: the hits of the lists are read, a block of users at a time, from a
boolean array in which that block's relevant items are marked, so ``10^5`` users with lists of 100
items are evaluated in about a second (0.6 s on an idle core).

Privacy: these are evaluations, not releases (see :mod:`dptensor.evaluation`): they read the
held-out interactions exactly.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dptensor._validation import RandomStateLike, check_positive_int, check_random_state

#: The ``k`` of :func:`evaluate_top_n` by default.
DEFAULT_KS = (10, 20, 100)


def _check_sparse(X: object, name: str) -> sp.csr_array:
    """``X`` as a canonical float64 ``csr_array`` (duplicates summed, explicit zeros dropped)."""
    if not sp.issparse(X):
        raise TypeError(f"{name} must be a SciPy sparse user x item matrix, got {type(X).__name__}")
    if X.ndim != 2:
        raise ValueError(f"{name} must be two-dimensional, got {X.ndim} dimensions")
    if np.issubdtype(X.dtype, np.complexfloating) or not (
        np.issubdtype(X.dtype, np.number) or X.dtype == np.bool_
    ):
        raise TypeError(f"{name} must hold real numbers, got dtype {X.dtype}")
    matrix = sp.csr_array(X, dtype=np.float64, copy=True)
    matrix.sum_duplicates()
    if not np.all(np.isfinite(matrix.data)):
        raise ValueError(f"{name} has NaN or infinite entries")
    matrix.eliminate_zeros()
    matrix.sort_indices()
    return matrix


def _check_fraction(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < 1:
        raise ValueError(f"{name} must lie strictly between 0 and 1, got {value!r}")
    return float(value)


def _row_of_entries(matrix: sp.csr_array) -> np.ndarray:
    return np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))


def _subset(matrix: sp.csr_array, rows: np.ndarray, keep: np.ndarray) -> sp.csr_array:
    """The entries of ``matrix`` flagged by ``keep`` (same shape, values kept)."""
    out = sp.csr_array((matrix.data[keep], (rows[keep], matrix.indices[keep])), shape=matrix.shape)
    out.sort_indices()
    return out


def per_user_split(
    X: object, test_fraction: float = 0.2, *, random_state: RandomStateLike = None, min_interactions: int = 2
) -> tuple[sp.csr_array, sp.csr_array]:
    """Split each user's interactions at random into a training and a test part.

    A user with ``n_u >= min_interactions`` interactions has
    ``t_u = clip(floor(test_fraction * n_u + 1/2), 1, n_u - 1)`` of them, drawn uniformly without
    replacement, held out (so both parts are non-empty); a user with fewer keeps every interaction
    in training and has no test items (the metrics then leave that user out). One sort of all
    entries by ``(user, random key)``, no loop over users.

    Parameters
    ----------
    X : scipy.sparse matrix of shape (n_users, n_items)
        Non-zero = an interaction; the stored values (ratings, counts) are carried into both parts.
    test_fraction : float, default 0.2
        Strictly between 0 and 1.
    random_state : None, int or numpy.random.Generator
    min_interactions : int, default 2
        At least 2.

    Returns
    -------
    train, test : scipy.sparse.csr_array of shape (n_users, n_items)
        Disjoint, their sum is ``X`` (duplicates summed, explicit zeros dropped).
    """
    matrix = _check_sparse(X, "X")
    test_fraction = _check_fraction(test_fraction, "test_fraction")
    min_interactions = check_positive_int(min_interactions, "min_interactions", minimum=2)
    rng = check_random_state(random_state)
    rows = _row_of_entries(matrix)
    counts = np.diff(matrix.indptr)
    n_test = np.clip(np.floor(test_fraction * counts + 0.5).astype(np.int64), 1, np.maximum(counts - 1, 1))
    n_test[counts < min_interactions] = 0
    # a random order within each row: one sort of the keys row * 2^32 + a random 32-bit number
    order = np.argsort((rows.astype(np.int64) << 32) | rng.integers(0, 2**32, size=rows.size, dtype=np.int64))
    rank = np.empty(rows.size, dtype=np.int64)
    rank[order] = np.arange(rows.size) - matrix.indptr[rows[order]]
    test = rank < n_test[rows]
    return _subset(matrix, rows, ~test), _subset(matrix, rows, test)


@dataclass(frozen=True)
class HeldOutUsers:
    """The held-out-users protocol (:func:`held_out_users_split`).

    Attributes
    ----------
    train : scipy.sparse.csr_array of shape (n_train_users, n_items)
        The training users' rows, in the order of ``train_users``.
    fold_in : scipy.sparse.csr_array of shape (n_test_users, n_items)
        The part of each test user's row shown to the model (``recommend_for(fold_in)``).
    target : scipy.sparse.csr_array of shape (n_test_users, n_items)
        The rest of each test user's row: the items to find (``relevant`` for the metrics).
    train_users, test_users : ndarray of int64
        The rows of the input that ``train`` and ``fold_in``/``target`` hold, sorted.
    """

    train: sp.csr_array
    fold_in: sp.csr_array
    target: sp.csr_array
    train_users: np.ndarray
    test_users: np.ndarray


def held_out_users_split(
    X: object,
    n_test_users: int,
    *,
    fold_in_fraction: float = 0.8,
    random_state: RandomStateLike = None,
    min_interactions: int = 2,
) -> HeldOutUsers:
    """Split the users into training and test users, and each test user's row into fold-in and target.

    The "strong generalisation" protocol (Liang et al. 2018; Steck 2019):
    ``n_test_users`` users are drawn uniformly without replacement among those with at least
    ``min_interactions`` interactions; every other user is a training user. Each test user's row
    is split by :func:`per_user_split` with ``test_fraction = 1 - fold_in_fraction``: the fold-in
    part is what the model may read at recommendation time, the target what it must find.

    Parameters
    ----------
    X : scipy.sparse matrix of shape (n_users, n_items)
    n_test_users : int
        At least 1, and fewer than the number of users.
    fold_in_fraction : float, default 0.8
        Strictly between 0 and 1.
    random_state : None, int or numpy.random.Generator
    min_interactions : int, default 2
        At least 2 (a test user needs a fold-in and a target item).

    Returns
    -------
    HeldOutUsers
    """
    matrix = _check_sparse(X, "X")
    n_test_users = check_positive_int(n_test_users, "n_test_users")
    fold_in_fraction = _check_fraction(fold_in_fraction, "fold_in_fraction")
    min_interactions = check_positive_int(min_interactions, "min_interactions", minimum=2)
    rng = check_random_state(random_state)
    eligible = np.flatnonzero(np.diff(matrix.indptr) >= min_interactions)
    if n_test_users >= matrix.shape[0] or n_test_users > eligible.size:
        raise ValueError(
            f"n_test_users={n_test_users} must be less than the {matrix.shape[0]} users and at most the "
            f"{eligible.size} users with at least min_interactions={min_interactions} interactions"
        )
    test_users = np.sort(rng.choice(eligible, size=n_test_users, replace=False)).astype(np.int64)
    train_users = np.setdiff1d(np.arange(matrix.shape[0], dtype=np.int64), test_users)
    fold_in, target = per_user_split(
        matrix[test_users], 1.0 - fold_in_fraction, random_state=rng, min_interactions=min_interactions
    )
    return HeldOutUsers(matrix[train_users], fold_in, target, train_users, test_users)


def relevant_from_ratings(ratings: object, threshold: float = 4) -> sp.csr_array:
    """The relevant items of a held-out ratings matrix: the entries rated at least ``threshold``.

    The explicit-rating protocol (relevant = a held-out rating of at least 4 on MovieLens's 1-5
    scale). Returns a binary ``csr_array`` of the same shape.
    """
    matrix = _check_sparse(ratings, "ratings")
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise TypeError(f"threshold must be a real number, got {type(threshold).__name__}")
    if not np.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold!r}")
    keep = matrix.data >= threshold
    out = _subset(matrix, _row_of_entries(matrix), keep)
    out.data[:] = 1.0
    return out


def _lists(recommended: object, relevant: object) -> tuple[np.ndarray, sp.csr_array, np.ndarray]:
    """The lists (int64), ``relevant`` as a binary csr_array with one row per list, and the hits.

    ``recommended`` may be a ``Recommendations`` (its ``items``; ``relevant``'s rows are then
    taken at its ``users``). The hits are ``(users, n)`` booleans (:func:`_hit_slots`).
    """
    users = None
    if hasattr(recommended, "items") and hasattr(recommended, "users") and not sp.issparse(recommended):
        users = np.asarray(recommended.users)
        recommended = recommended.items
    items = np.asarray(recommended)
    if items.ndim != 2:
        raise ValueError(f"recommended must be a (users, n) array of item ids, got shape {items.shape}")
    if items.size and not np.issubdtype(items.dtype, np.integer):
        raise TypeError(f"recommended must hold integer item ids (-1: empty), got dtype {items.dtype}")
    items = items.astype(np.int64, copy=False)
    matrix = _check_sparse(relevant, "relevant")
    if users is not None:
        matrix = matrix[users]
    matrix.data[:] = 1.0
    if matrix.shape[0] != items.shape[0]:
        raise ValueError(f"recommended has {items.shape[0]} lists but relevant has {matrix.shape[0]} rows")
    if items.size and (items.min() < -1 or items.max() >= matrix.shape[1]):
        raise ValueError(f"recommended has item ids outside [0, {matrix.shape[1]}) other than -1 (empty)")
    ordered = np.sort(items, axis=1)
    if np.any((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)):
        raise ValueError("recommended has an item twice in one list")
    return items, matrix, _hit_slots(items, matrix)


def _hit_slots(items: np.ndarray, matrix: sp.csr_array) -> np.ndarray:
    """Whether each slot of each list holds a relevant item, in blocks of users.

    For a block of ``B`` users the relevant items are marked in one flat boolean array of ``B x
    (n_items + 1)`` cells (column 0 stands for an empty slot, never marked), the lists' cells are
    read from it, and the marks are cleared again: ``O(interactions + slots)`` work per block and
    about :data:`_MARK_CELLS` cells of memory (small enough to stay in cache; at least 32 users).
    """
    n_users, width = items.shape[0], matrix.shape[1] + 1
    block = max(32, _MARK_CELLS // width)
    marks = np.zeros(min(block, max(n_users, 1)) * width, dtype=bool)
    hits = np.empty(items.shape, dtype=bool)
    for start in range(0, n_users, block):
        stop = min(start + block, n_users)
        low, high = matrix.indptr[start], matrix.indptr[stop]
        local = np.repeat(np.arange(stop - start, dtype=np.int64), np.diff(matrix.indptr[start : stop + 1]))
        cells = local * width + matrix.indices[low:high] + 1
        marks[cells] = True
        rows = np.arange(stop - start, dtype=np.int64)[:, None] * width
        hits[start:stop] = marks[rows + items[start:stop] + 1]
        marks[cells] = False
    return hits


#: Cells of the scratch array of :func:`_hit_slots` (1 MiB: measured 2.5x faster than 64 MiB).
_MARK_CELLS = 2**20


def _check_k(k: object) -> int:
    return check_positive_int(k, "k")


class _Hits:
    """The hits of the scored users' lists by depth: counts and DCG of the first ``k`` slots.

    Kept as the ``(user, slot)`` positions of the hits (few), so each ``k`` costs a ``bincount``
    of them rather than a pass over every slot. A list shorter than ``k`` has misses in the
    missing slots.
    """

    def __init__(self, hits: np.ndarray, matrix: sp.csr_array) -> None:
        n_relevant = np.diff(matrix.indptr)
        scored = n_relevant > 0
        if not scored.any():
            raise ValueError("relevant has no user with a relevant item: there is nothing to score")
        hits = hits[scored] if not scored.all() else hits
        self.n_users = int(scored.sum())
        self.n_relevant = n_relevant[scored]
        self.user, self.slot = np.nonzero(hits)

    def found(self, k: int) -> np.ndarray:
        return np.bincount(self.user[self.slot < k], minlength=self.n_users)

    def recall(self, k: int, denominator: str) -> float:
        bound = self.n_relevant if denominator == "relevant" else np.minimum(k, self.n_relevant)
        return float(np.mean(self.found(k) / bound))

    def precision(self, k: int) -> float:
        return float(np.mean(self.found(k) / k))

    def ndcg(self, k: int) -> float:
        discount = 1.0 / np.log2(np.arange(2, k + 2))
        top = self.slot < k
        dcg = np.bincount(self.user[top], weights=discount[self.slot[top]], minlength=self.n_users)
        ideal = np.concatenate(([0.0], np.cumsum(discount)))[np.minimum(k, self.n_relevant)]
        return float(np.mean(dcg / ideal))


def _check_denominator(denominator: object) -> str:
    if denominator not in ("min", "relevant"):
        raise ValueError(f"denominator must be 'min' (min(k, |relevant|)) or 'relevant', got {denominator!r}")
    return str(denominator)


def recall_at_k(recommended: object, relevant: object, k: int, *, denominator: str = "min") -> float:
    """Mean Recall@k over the users with at least one relevant item.

    ``hits in the top k / min(k, |relevant|)`` (Liang et al. 2018) by default;
    ``denominator="relevant"`` divides by ``|relevant|`` instead. See the module documentation.

    Parameters
    ----------
    recommended : array_like of int, shape (n_users, n), or Recommendations
        Item ids, best first, ``-1`` in an empty slot; no item twice in a list. A list shorter
        than ``k`` counts its missing slots as misses.
    relevant : scipy.sparse matrix of shape (n_users, n_items)
        Non-zero = relevant (held-out interactions, or :func:`relevant_from_ratings`).
    k : int
    denominator : {"min", "relevant"}, default "min"
    """
    denominator = _check_denominator(denominator)
    k = _check_k(k)
    _, matrix, hits = _lists(recommended, relevant)
    return _Hits(hits, matrix).recall(k, denominator)


def precision_at_k(recommended: object, relevant: object, k: int) -> float:
    """Mean Precision@k (``hits in the top k / k``) over the users with at least one relevant item.

    Parameters as in :func:`recall_at_k`.
    """
    k = _check_k(k)
    _, matrix, hits = _lists(recommended, relevant)
    return _Hits(hits, matrix).precision(k)


def ndcg_at_k(recommended: object, relevant: object, k: int) -> float:
    """Mean NDCG@k with binary relevance over the users with at least one relevant item.

    ``sum_j hit_j / log2(j + 1)`` over the top ``k`` slots, divided by the same sum for a list with
    ``min(k, |relevant|)`` relevant items first (Liang et al. 2018). Parameters as in
    :func:`recall_at_k`.
    """
    k = _check_k(k)
    _, matrix, hits = _lists(recommended, relevant)
    return _Hits(hits, matrix).ndcg(k)


def coverage(recommended: object, n_items: int, k: int | None = None) -> float:
    """Share of the catalogue's ``n_items`` items that appear in the top ``k`` of at least one list.

    Over every list given (whether or not its user has a relevant item); ``k=None`` takes the
    whole lists. Empty slots (``-1``) count for nothing.
    """
    n_items = check_positive_int(n_items, "n_items")
    items = np.asarray(getattr(recommended, "items", recommended))
    if items.ndim != 2 or (items.size and not np.issubdtype(items.dtype, np.integer)):
        raise ValueError(f"recommended must be a (users, n) integer array of item ids, got {items.shape}")
    if k is not None:
        items = items[:, : _check_k(k)]
    if items.size and (items.min() < -1 or items.max() >= n_items):
        raise ValueError(f"recommended has item ids outside [0, {n_items}) other than -1 (an empty slot)")
    return _coverage_at(items, n_items, [items.shape[1]])[0]


def _coverage_at(items: np.ndarray, n_items: int, depths: list[int]) -> list[float]:
    """Coverage of the first ``k`` slots for each ``k`` of ``depths`` (ascending)."""
    shown = np.zeros(n_items + 1, dtype=bool)  # cell 0: an empty slot
    out, done = [], 0
    for k in depths:
        shown[items[:, done:k].ravel() + 1] = True
        done = max(done, k)
        out.append(float(np.count_nonzero(shown[1:]) / n_items))
    return out


def evaluate_top_n(
    recommended: object, relevant: object, ks: tuple[int, ...] = DEFAULT_KS, *, denominator: str = "min"
) -> dict[str, float | int]:
    """Every top-N metric at every ``k`` of ``ks`` in one pass over the lists.

    Returns
    -------
    dict
        ``"recall@k"``, ``"ndcg@k"``, ``"precision@k"`` and ``"coverage@k"`` for each ``k`` (so
        ``recall@20``, ``ndcg@10``, ``ndcg@100`` and ``precision@10`` with the default ``ks``),
        ``"coverage"`` (of the whole lists) and ``"n_users"`` (the users scored: those with at
        least one relevant item). Recall uses ``denominator`` as in :func:`recall_at_k`.
    """
    denominator = _check_denominator(denominator)
    if isinstance(ks, numbers.Integral):
        ks = (ks,)
    ks = tuple(_check_k(k) for k in ks)
    if not ks:
        raise ValueError("ks must name at least one k")
    items, matrix, hits = _lists(recommended, relevant)
    scored = _Hits(hits, matrix)
    depths = sorted(set(ks))
    shown = _coverage_at(items, matrix.shape[1], [*depths, items.shape[1]])
    out: dict[str, float | int] = {}
    for k, share in zip(depths, shown, strict=False):
        out[f"recall@{k}"] = scored.recall(k, denominator)
        out[f"ndcg@{k}"] = scored.ndcg(k)
        out[f"precision@{k}"] = scored.precision(k)
        out[f"coverage@{k}"] = share
    out["coverage"] = shown[-1]
    out["n_users"] = scored.n_users
    return out


__all__ = [
    "DEFAULT_KS",
    "HeldOutUsers",
    "coverage",
    "evaluate_top_n",
    "held_out_users_split",
    "ndcg_at_k",
    "per_user_split",
    "precision_at_k",
    "recall_at_k",
    "relevant_from_ratings",
]
