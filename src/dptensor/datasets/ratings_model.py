"""A semi-synthetic ratings generator shaped like a real ratings set (a benchmark tool).

:class:`RatingsModel` is fitted on a real ratings set (MovieLens-100K, say) and then draws any
number of *new* users -- 10^3 to 10^6 and more, in chunks, in memory bounded by the chunk -- whose
data look like the real ones in the respects that matter to (private) completion benchmarks:

* **ratings per user**: each new user copies the number of ratings of a real user drawn uniformly
  ("donor"), so the counts follow the real, heavy-tailed distribution exactly (resampled);
* **item popularity**: the user's items are drawn *without replacement* with probability
  proportional to each item's number of real ratings (successive sampling: each next item
  proportional to popularity among the items not yet drawn), so popular items stay popular;
* **rank-r structure**: ``mu + b_u + b_i + <p_u, q_i>`` where ``mu``, the item biases ``b_i`` and
  item factors ``q_i`` are those of a non-private biased matrix factorisation fitted to the real
  data by ALS (:class:`~dptensor.models.TensorCompletion` on the ``users x items x 1`` tensor), and
  ``(b_u, p_u)`` is drawn from a Gaussian fitted to the real users' ``(b_u, p_u)`` -- one Gaussian
  per stratum of the rating count (``count_strata`` quantile bins), the donor's stratum, because
  the fitted rows of light users are shrunk more than those of heavy users;
* **noise**: plus a residual drawn from the real residuals (resampled), then rounded to the nearest
  level of the real rating scale (1..5, half stars, ...) and so clipped into it, which makes the
  histogram of ratings close to the real one. The residuals are *cross-fitted*: each real rating's
  residual comes from a fit (same rank and penalty) on the other ``n_folds - 1`` folds of the
  ratings. In-sample residuals are too small (the fit absorbs part of the noise, most for light
  users) while a new user's structure does not carry that part, so with them the drawn ratings
  would be too concentrated (total variation 0.07-0.13 against 0.03 on the tests' set);
* **time**: every rating gets a time index (a day, say: the third mode of a user x item x time
  tensor); a new user takes the time indices of their donor's ratings in random order, so both the
  marginal distribution of time and each user's sessions (ratings bunched on few days) are real.
  Ratings do not depend on time in this generator.

The users drawn are independent of each other and of the real users (beyond the fitted model), so
the generator is a tool for measuring how methods scale with the number of users on data of a
realistic shape -- not a model of any real user, and not a privacy mechanism: the fitted model
(``item_factors_``, the residuals, the donors' counts and times) is computed from the real data
without noise. Never publish it, or data drawn from it, in place of private data.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

from dptensor._validation import (
    NotFittedError,
    RandomStateLike,
    check_positive_int,
    check_random_state,
    check_real,
)
from dptensor.datasets.entries import TensorEntries

__all__ = ["RatingsModel", "sample_items_by_popularity"]

#: A ratings scale with at most this many distinct values is treated as discrete (ratings are
#: rounded to its levels); with more, ratings are continuous and only clipped into the range.
MAX_LEVELS = 50

#: Rounds of vectorised with-replacement draws before the remaining items of the users still
#: short are drawn by exponential keys (:func:`sample_items_by_popularity`).
REJECTION_ROUNDS = 4

#: Numbers per block of the exponential-key fallback (users x items), about 32 MB of float64.
KEY_BLOCK = 1 << 22


def sample_items_by_popularity(
    counts: np.ndarray, weights: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """For every user ``u``, ``counts[u]`` distinct items drawn by successive sampling on ``weights``.

    Successive sampling (what ``numpy.random.Generator.choice(replace=False, p=...)`` does for one
    user): each next item is drawn with probability proportional to its weight among the items not
    drawn yet. Vectorised over users without forming a users x items array: a stream of
    with-replacement draws per user keeps each item's first occurrence, which is exactly successive
    sampling; after :data:`REJECTION_ROUNDS` rounds, the users still short (heavy users, whose
    remaining items are rare) draw the rest by exponential keys ``E_j / w_j`` on the items not yet
    taken -- the smallest keys are a successive sample (Efraimidis & Spirakis 2006), and conditional
    on its first picks, a successive sample continues as one on the remaining items.

    Parameters
    ----------
    counts : ndarray of int, shape (n_users,)
        Items per user; each at most the number of items of positive weight.
    weights : ndarray of float, shape (n_items,)
        Non-negative popularity weights.
    rng : numpy.random.Generator

    Returns
    -------
    users, items : ndarray of int64
        The drawn ``(user, item)`` pairs, sorted by user, ``counts.sum()`` of them.
    """
    counts = np.asarray(counts, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.float64)
    n_users, n_items = counts.shape[0], weights.shape[0]
    if np.any(counts < 0) or np.any(weights < 0) or not np.all(np.isfinite(weights)):
        raise ValueError("counts and weights must be non-negative (and weights finite)")
    if counts.size and counts.max() > np.count_nonzero(weights):
        raise ValueError("a user needs more items than there are items of positive weight")
    cdf = np.cumsum(weights)
    total = cdf[-1] if n_items else 0.0
    users = np.zeros(0, dtype=np.int64)
    items = np.zeros(0, dtype=np.int64)
    need = counts.copy()
    for _ in range(REJECTION_ROUNDS):
        active = np.flatnonzero(need > 0)
        if active.size == 0:
            break
        cand_users = np.repeat(active, 2 * need[active] + 4)  # sorted by user, in stream order
        cand_items = np.searchsorted(cdf, rng.random(cand_users.shape[0]) * total, side="right")
        cand_items = np.minimum(cand_items, n_items - 1)  # rounding at the top end of the cdf
        keys = np.concatenate([users * n_items + items, cand_users * n_items + cand_items])
        _, first = np.unique(keys, return_index=True)  # first occurrence: kept items, then stream order
        fresh = np.zeros(keys.shape[0], dtype=bool)
        fresh[first] = True
        fresh = fresh[users.shape[0]:]
        new_users, new_items = cand_users[fresh], cand_items[fresh]
        rank = np.arange(new_users.shape[0]) - np.searchsorted(new_users, new_users, side="left")
        keep = rank < need[new_users]
        users = np.concatenate([users, new_users[keep]])
        items = np.concatenate([items, new_items[keep]])
        need -= np.bincount(new_users[keep], minlength=n_users)
    short = np.flatnonzero(need > 0)
    if short.size:
        order = np.argsort(users, kind="stable")
        users, items = users[order], items[order]
        starts = np.searchsorted(users, short, side="left")
        ends = np.searchsorted(users, short, side="right")
        with np.errstate(divide="ignore"):
            inverse_weight = np.where(weights > 0, 1.0 / weights, np.inf)
        extra_users, extra_items = [], []
        step = max(1, KEY_BLOCK // max(n_items, 1))
        for lo in range(0, short.shape[0], step):
            block = short[lo:lo + step]
            key = rng.exponential(size=(block.shape[0], n_items)) * inverse_weight
            for row, (a, b) in enumerate(zip(starts[lo:lo + step], ends[lo:lo + step], strict=True)):
                key[row, items[a:b]] = np.inf
            for row, user in enumerate(block):
                k = int(need[user])
                chosen = np.argpartition(key[row], k - 1)[:k]
                extra_users.append(np.full(k, user, dtype=np.int64))
                extra_items.append(chosen.astype(np.int64))
        users = np.concatenate([users, *extra_users])
        items = np.concatenate([items, *extra_items])
    order = np.argsort(users, kind="stable")
    return users[order], items[order]


def _as_ratings(ratings: object, shape: object) -> tuple:
    """``(users, items, values, times, (n_users, n_items, n_times))`` of any accepted input."""
    if isinstance(ratings, TensorEntries):
        idx = ratings.indices
        users, items, times = idx[:, 0], idx[:, 1], idx[:, 2]
        values = ratings.values
        dims = tuple(ratings.shape)
    elif sp.issparse(ratings):
        coo = sp.coo_matrix(ratings)
        coo.sum_duplicates()
        users, items = coo.row.astype(np.int64), coo.col.astype(np.int64)
        values = coo.data.astype(np.float64)
        times = np.zeros_like(users)
        dims = (coo.shape[0], coo.shape[1], 1)
    else:
        table = np.asarray(ratings, dtype=np.float64)
        if table.ndim != 2 or table.shape[1] not in (3, 4):
            raise ValueError(
                "ratings must be a users x items sparse matrix, TensorEntries, or an array of "
                f"(user, item, rating[, time]) rows; got an array of shape {table.shape}"
            )
        ids = table[:, [0, 1, 3] if table.shape[1] == 4 else [0, 1]]
        if not np.all(np.isfinite(ids)) or np.any(ids != np.round(ids)) or np.any(ids < 0):
            raise ValueError("user, item and time columns must be non-negative integers")
        users, items = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)
        times = table[:, 3].astype(np.int64) if table.shape[1] == 4 else np.zeros_like(users)
        values = table[:, 2]
        dims = tuple(int(column.max(initial=-1)) + 1 for column in (users, items, times))
    if shape is not None:
        given = tuple(int(s) for s in shape)
        if len(given) == 2:
            given = (*given, dims[2])
        if len(given) != 3 or any(g < d for g, d in zip(given, dims, strict=True)):
            raise ValueError(f"shape {tuple(shape)} is smaller than the data's {dims}")
        dims = given
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no ratings to fit")
    if not np.all(np.isfinite(values)):
        raise ValueError("ratings must be finite")
    return users, items, values, times, dims


def _gaussian(latent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of the rows of ``latent`` (at least two rows)."""
    return latent.mean(axis=0), np.atleast_2d(np.cov(latent, rowvar=False))


class RatingsModel(BaseEstimator):
    """A semi-synthetic ratings generator fitted to a real ratings set (a benchmark tool).

    See the module docstring for what is kept from the real data and how users are drawn. The
    fitted model is computed from the real data **without** any privacy protection.

    Parameters
    ----------
    rank : int, default 10
        Rank ``r`` of the structure ``mu + b_u + b_i + <p_u, q_i>``.
    reg : float or "auto", default "auto"
        The ALS penalty of the structure's fit (``"auto"``: chosen on a validation split, as
        :class:`~dptensor.models.TensorCompletion` does).
    max_iter : int, default 30
        ALS sweeps at most.
    n_folds : int, default 5
        Folds of the cross-fitted residuals (``n_folds`` more fits with the chosen penalty).
    count_strata : int, default 4
        Quantile bins of the users' rating counts, each with its own Gaussian of ``(b_u, p_u)``.
    random_state : None, int or Generator
        Seeds the structure's fit and, unless :meth:`sample` gets its own, the users drawn: the same
        integer gives the same users.

    Attributes
    ----------
    n_items_, n_times_ : int
        Items and time indices of the real data (the generated tensors' modes 1 and 2).
    user_counts_ : ndarray of int, shape (n_real_users,)
        Ratings of every real user with at least one rating (the donors).
    item_popularity_ : ndarray of int, shape (n_items,)
        Real ratings per item.
    global_mean_ : float
    item_biases_ : ndarray, shape (n_items,)
    item_factors_ : ndarray, shape (n_items, rank)
    count_edges_ : ndarray of int
        Upper count bounds of the strata but the last (a user with count ``c`` is in stratum
        ``searchsorted(count_edges_, c, side="right")``).
    user_mean_ : ndarray, shape (n_strata, rank + 1)
        Mean of the real users' ``(b_u, p_u)`` in each count stratum.
    user_covariance_ : ndarray, shape (n_strata, rank + 1, rank + 1)
        Their covariance in each stratum.
    residuals_ : ndarray, shape (n_ratings,)
        The real ratings minus the structure fitted without their fold.
    levels_ : ndarray or None
        The rating scale's distinct values (``None``: continuous ratings, more than
        :data:`MAX_LEVELS` distinct values).
    rating_range_ : (float, float)
        The smallest and largest real rating.
    completion_ : TensorCompletion
        The structure's fit.
    """

    def __init__(
        self,
        rank: int = 10,
        *,
        reg: float | str = "auto",
        max_iter: int = 30,
        n_folds: int = 5,
        count_strata: int = 4,
        random_state: RandomStateLike = None,
    ) -> None:
        self.rank = rank
        self.reg = reg
        self.max_iter = max_iter
        self.n_folds = n_folds
        self.count_strata = count_strata
        self.random_state = random_state

    def fit(self, ratings: object, shape: object = None) -> RatingsModel:
        """Fit the generator to a real ratings set.

        Parameters
        ----------
        ratings : scipy sparse matrix, TensorEntries or array-like of shape (n, 3) or (n, 4)
            A users x items sparse matrix (its stored entries are the ratings; no time mode), a
            users x items x time :class:`~dptensor.datasets.TensorEntries` (e.g. from
            :func:`~dptensor.datasets.read_recbole_inter`), or rows ``(user, item, rating[, time])``
            with zero-based integer users, items and time indices.
        shape : sequence of 2 or 3 ints, optional
            ``(n_users, n_items[, n_times])`` when there are items or times without ratings.

        Returns
        -------
        self
        """
        from dptensor.models import TensorCompletion  # here: importing dptensor.datasets stays light
        from dptensor.models.completion import CompletionOptions

        rank = check_positive_int(self.rank, "rank")
        max_iter = check_positive_int(self.max_iter, "max_iter")
        n_folds = check_positive_int(self.n_folds, "n_folds", minimum=2)
        n_strata = check_positive_int(self.count_strata, "count_strata")
        reg = self.reg if self.reg == "auto" else check_real(self.reg, "reg", strict=False)
        users, items, values, times, (n_users, n_items, n_times) = _as_ratings(ratings, shape)
        rng = check_random_state(self.random_state)
        # the structure: biased MF on the users x items x 1 tensor (its context row folds into p_u)
        indices = np.column_stack([users, items, np.zeros_like(users)])
        completion = TensorCompletion(rank, random_state=rng,
            options=CompletionOptions(reg=reg, max_iter=max_iter))
        completion.fit(indices, values, (n_users, n_items, 1))
        user_factors = completion.factors_[0] * completion.factors_[2][0]
        self.completion_ = completion
        self.global_mean_ = float(completion.mean_ + completion.biases_[2][0])
        self.item_biases_ = completion.biases_[1].copy()
        self.item_factors_ = completion.factors_[1].copy()
        # cross-fitted residuals: each rating's from a fit without its fold (same rank and penalty)
        fold = rng.integers(n_folds, size=values.shape[0])
        self.residuals_ = np.empty(values.shape[0])
        for k in range(n_folds):
            held = fold == k
            if not held.any():
                continue
            if held.all():  # a single rating: no other fold to fit
                self.residuals_[held] = values[held] - float(np.mean(values))
                continue
            options = CompletionOptions(reg=completion.reg_, reg_bias=completion.reg_bias_, max_iter=max_iter)
            other = TensorCompletion(rank, random_state=rng, options=options)
            other.fit(indices[~held], values[~held], (n_users, n_items, 1))
            self.residuals_[held] = values[held] - other.predict(indices[held])
        # donors: the real users with ratings, their counts and their time indices
        counts = np.bincount(users, minlength=n_users)
        donors = np.flatnonzero(counts > 0)
        self.user_counts_ = counts[donors]
        latent = np.column_stack([completion.biases_[0][donors], user_factors[donors]])
        self.count_edges_ = np.unique(np.quantile(self.user_counts_, np.linspace(0, 1, n_strata + 1)[1:-1],
                                                  method="lower")).astype(np.int64)
        stratum = np.searchsorted(self.count_edges_, self.user_counts_, side="right")
        everyone = _gaussian(latent) if donors.size > 1 else (latent[0], np.zeros((rank + 1, rank + 1)))
        fitted = [_gaussian(latent[stratum == s]) if np.sum(stratum == s) > 1 else everyone
                  for s in range(self.count_edges_.shape[0] + 1)]
        self.user_mean_ = np.array([mean for mean, _ in fitted])
        self.user_covariance_ = np.array([cov for _, cov in fitted])
        order = np.argsort(users, kind="stable")
        self._donor_times = times[order]
        self._donor_starts = np.concatenate([[0], np.cumsum(counts)])[donors]
        self.item_popularity_ = np.bincount(items, minlength=n_items)
        levels = np.unique(values)
        self.levels_ = levels if levels.shape[0] <= MAX_LEVELS else None
        self.rating_range_ = (float(levels[0]), float(levels[-1]))
        self.n_items_, self.n_times_ = n_items, n_times
        # each user Gaussian's square root (a covariance of rank < r + 1 is fine)
        vals, vecs = np.linalg.eigh(self.user_covariance_)
        self._user_root = vecs * np.sqrt(np.maximum(vals, 0.0))[:, None, :]
        return self

    # ------------------------------------------------------------------ sampling
    def _check_fitted(self) -> None:
        if not hasattr(self, "item_factors_"):
            raise NotFittedError("this RatingsModel is not fitted yet; call fit first")

    def _users(self, n_users: int, first: int, total: int, rng: np.random.Generator) -> TensorEntries:
        """``n_users`` new users numbered from ``first`` in a tensor of ``total`` users."""
        donors = rng.integers(self.user_counts_.shape[0], size=n_users)
        counts = np.minimum(self.user_counts_[donors], np.count_nonzero(self.item_popularity_))
        local, items = sample_items_by_popularity(counts, self.item_popularity_, rng)
        # times: each user's donor's time indices in random order (a random subset if capped)
        shuffled = np.lexsort((rng.random(local.shape[0]), local))
        position = np.empty(local.shape[0], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)])
        position[shuffled] = np.arange(local.shape[0]) - starts[local[shuffled]]
        times = self._donor_times[self._donor_starts[donors[local]] + position]
        stratum = np.searchsorted(self.count_edges_, self.user_counts_[donors], side="right")
        normal = rng.standard_normal((n_users, self.user_mean_.shape[1]))
        latent = self.user_mean_[stratum] + np.einsum("nij,nj->ni", self._user_root[stratum], normal)
        structure = (self.global_mean_ + latent[local, 0] + self.item_biases_[items]
                     + np.einsum("nr,nr->n", latent[local, 1:], self.item_factors_[items]))
        values = structure + self.residuals_[rng.integers(self.residuals_.shape[0], size=local.shape[0])]
        if self.levels_ is not None:
            middle = 0.5 * (self.levels_[1:] + self.levels_[:-1])
            values = self.levels_[np.searchsorted(middle, values)]
        else:
            values = np.clip(values, *self.rating_range_)
        indices = np.column_stack([local + first, items, times])
        return TensorEntries(indices, values, (total, self.n_items_, self.n_times_))

    def iter_samples(
        self, n_users: int, *, chunk_size: int = 10_000, random_state: RandomStateLike = None
    ) -> Iterator[TensorEntries]:
        """Draw ``n_users`` new users, ``chunk_size`` at a time (memory bounded by one chunk).

        Parameters
        ----------
        n_users : int
        chunk_size : int, default 10000
        random_state : None, int or Generator, optional
            Defaults to the model's ``random_state``. Chunk ``b`` draws from its own stream
            (``numpy.random.SeedSequence(seed, spawn_key=(b,))``), so a draw is reproducible for the
            same ``(random_state, chunk_size)``, and a smaller draw's full chunks are the first
            chunks of a larger one (the same users).

        Yields
        ------
        TensorEntries
            Each chunk's ratings: ``(user, item, time)`` indices with users numbered globally
            (``0 .. n_users - 1``) in a tensor of shape ``(n_users, n_items_, n_times_)``, one
            rating per (user, item) pair, sorted by user.
        """
        self._check_fitted()
        n_users = check_positive_int(n_users, "n_users")
        chunk_size = check_positive_int(chunk_size, "chunk_size")
        seed = int(check_random_state(self.random_state if random_state is None else random_state,
                                      "random_state").integers(2**63))
        for b, first in enumerate(range(0, n_users, chunk_size)):
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(b,)))
            yield self._users(min(chunk_size, n_users - first), first, n_users, rng)

    def sample(
        self, n_users: int, *, chunk_size: int = 10_000, random_state: RandomStateLike = None
    ) -> TensorEntries:
        """Draw ``n_users`` new users at once: :meth:`iter_samples`'s chunks concatenated.

        The result holds every rating (about ``n_users`` times the mean real count); for very many
        users iterate over :meth:`iter_samples` instead.

        Returns
        -------
        TensorEntries
            ``(user, item, time)`` indices and ratings, shape ``(n_users, n_items_, n_times_)``.
        """
        chunks = list(self.iter_samples(n_users, chunk_size=chunk_size, random_state=random_state))
        return TensorEntries(np.concatenate([c.indices for c in chunks]),
                             np.concatenate([c.values for c in chunks]), chunks[0].shape)
