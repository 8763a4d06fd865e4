"""Private popularity in two rounds: noisy counts choose the candidates, a recount ranks them.

One Gaussian release of the unit-weighted item counts ``sum_u x_u / sqrt(n_u)``
(:func:`~dptensor.models.recommend.releases.private_item_counts`) spreads a heavy user's unit of
weight over every item of their row, most of which no list ever reaches. In two rounds the
budget goes where the lists are made:

1. ``"counts"`` (share ``1 - recount_share`` of the fit's ``mu^2``): the counts over every item,
   plus Gaussian noise. The ``n_candidates`` items of the largest noisy counts are the
   **candidates** (:func:`candidate_items`; post-processing of the release).
2. ``"recount"`` (share ``recount_share``): the counts again, over the candidates only, each
   user's row cut to the candidates and weighted anew to norm 1, ``x_u^C / sqrt(n_u^C)``
   (``n_u^C`` the user's candidate items; ``0`` for a row with none), plus Gaussian noise.

The recount is a release of the same kind as the counts -- a sum of non-negative user vectors of
l2 norm at most 1 -- so its replace-one-user sensitivity is ``sqrt(2)`` by the counts' argument
(:mod:`~dptensor.models.recommend.releases`: ``||a - b||^2 <= ||a||^2 + ||b||^2``, ``a.b >= 0``),
attained by two users with single, different candidate items. The candidates are a function of
the first release only, the same in both neighbouring worlds once it is fixed, so the two
Gaussian releases compose adaptively into one GDP release (Dong, Roth & Su 2022, Corollary 3.3;
:func:`~dptensor.models.recommend.release_plan.recommender_guarantee` with the releases
``("counts", "recount")``).

A user's list ranks the candidates by their recounts, then the other items by their counts
(:func:`popularity_ranking`); when the candidates are every item both releases measure the same
vector and the ranking is their inverse-variance mean, as good as one release of the whole
budget. On MovieLens-100K at ``epsilon = 1`` the two rounds keep 0.89 of popularity's NDCG@10,
against 0.86 for one release (docs/recommend.md, ``benchmarks/bench_topn.py``): heavy users, whose
rows are mostly outside the candidates, weigh up to ``sqrt(n_u / n_u^C)`` more where it counts.
"""

from __future__ import annotations

import numpy as np

from dptensor._validation import check_positive_int, check_real
from dptensor.models.recommend.releases import private_item_counts, select_columns
from dptensor.privacy.noise import NoiseSource

__all__ = ["candidate_items", "popularity_ranking", "private_recounts"]


def candidate_items(counts: np.ndarray, n_candidates: int) -> np.ndarray:
    """The positions of the ``n_candidates`` largest noisy counts, in increasing order.

    Ties go to the smaller position; every position when there are at most ``n_candidates``.
    A function of the released counts only (post-processing).
    """
    counts = np.asarray(counts, dtype=np.float64)
    n_candidates = check_positive_int(n_candidates, "n_candidates")
    if counts.size <= n_candidates:
        return np.arange(counts.size, dtype=np.int64)
    order = np.lexsort((np.arange(counts.size), -counts))
    return np.sort(order[:n_candidates]).astype(np.int64)


def private_recounts(X: object, candidates: np.ndarray, *, sigma: float, source: NoiseSource,
                     n_jobs: int | None = None) -> np.ndarray:  # fmt: skip
    """The second round: unit-weighted counts of the rows cut to ``candidates``, plus ``N(0, sigma^2)``.

    ``candidates`` must come from the released counts (:func:`candidate_items`); ``sigma`` is the
    plan's ``sigma("recount")`` (sensitivity ``sqrt(2)``, module docstring) and ``source`` the
    :class:`~dptensor.privacy.NoiseSource` of the release already begun.

    Returns
    -------
    ndarray, shape (len(candidates),)
    """
    sigma = check_real(sigma, "sigma")
    kept = select_columns(X, np.asarray(candidates, dtype=np.int64))
    return private_item_counts(kept, sigma=sigma, source=source, n_jobs=n_jobs)


def popularity_ranking(counts: np.ndarray, candidates: np.ndarray, recounts: np.ndarray, *,
                       sigma_counts: float, sigma_recount: float) -> np.ndarray:  # fmt: skip
    """Scores whose order is the two-round popularity list (post-processing of both releases).

    The candidates by their recounts, above every other item, which keep the order of their
    counts; if the candidates are every item, the inverse-variance mean of the two releases.
    """
    counts = np.asarray(counts, dtype=np.float64)
    recounts = np.asarray(recounts, dtype=np.float64)
    candidates = np.asarray(candidates, dtype=np.int64)
    if candidates.size == counts.size:
        w1, w2 = 1.0 / sigma_counts**2, 1.0 / sigma_recount**2
        return (w1 * counts + w2 * recounts[np.argsort(candidates)]) / (w1 + w2)
    scores = counts.copy()
    others = np.ones(counts.size, dtype=bool)
    others[candidates] = False
    if candidates.size:
        # the candidates above the others: shift the recounts past the others' largest count
        shift = counts[others].max() - recounts.min() + 1.0
        scores[candidates] = recounts + shift
    return scores
