"""Canaries for auditing :class:`PrivateRecommender` end to end, one score per release.

:func:`dptensor.privacy.audit.audit_estimator` fits the estimator many times with **canary users**
inserted and scores, from what the fit releases, whether each canary was in
(:class:`~dptensor.privacy.audit.CanaryAdapter`; the privacy layer does not import the models, so
this module registers the adapter with :func:`~dptensor.privacy.audit.register_canaries`).

Relation ``"user"``: one user's whole row replaced by any other row, the number of users public.
Every canary is an extra user with ``2`` items of its own, disjoint from every other canary's;
left out, a *neighbour* user with ``2`` other items of its own takes its row, so the number of
users stays the same. Two rows of disjoint supports are the most distinguishable replace-one pair
the unit-row weighting allows (:mod:`~dptensor.models.recommend.releases`): the counts move by
``||a - b||_2 = sqrt(2)`` and the Gram by ``||a a^T - b b^T||_F = sqrt(2)``, both releases' whole
sensitivity; an empty neighbour moves each by ``1`` only. Two items per row (rather than one) give
the Gram an off-diagonal entry, ``1/2``, between the canary's items.

The canaries' items are the corpus's **rarest** under ``catalogue="public"`` (no other user
blurs the EASE weights there), its **most frequent** under ``catalogue="select"`` (so that the
private selection keeps them and the counts and Gram releases cover them; a rare item would not
pass its threshold). Other users' interactions with those items are the same in every fit: the
audit centres each canary's score on its mean over the fits.

Scores, one per release the fit makes (``guarantee_.details["releases"]``), each a function of
released attributes only, the canary's minus its neighbour's:

``"counts"``
    The noisy item counts (``popularity_``) summed over the canary's items: for Gaussian noise
    the matched filter of the release, ``(a - b) . c~``.
``"recount"``
    Private popularity's recounts (``recounts_``) summed over the canary's items, the same matched
    filter, where both are candidates (``candidates_``); no guess otherwise. On catalogues of at
    most ``options.recount_items`` items every item is a candidate, rare ones included.
``"gram"``
    The EASE weights between the canary's two items, ``B_ij + B_ji`` (``item_side_.weights``,
    Steck's closed form solved from the noisy Gram; the noisy Gram itself is not kept). With the
    private ridge ``lambda`` far above the Gram's entries, ``B_ij ~ G~_ij / lambda``: the noisy
    Gram's off-diagonal entry between the canary's items, up to a public scale.
``"ials"``
    The private implicit ALS's released sums, every sweep (``sweeps_``): the auditor solves the
    canary's factor ``x`` from its own row and the sweep's public start ``V_{t-1}``, clips it as the
    fit does, and scores the matched filter of each statistic, weighted by its signal over its
    noise variance: ``(1 + alpha) w / sigma_b^2 sum_{i in items} b~_i . x``,
    ``alpha w / sigma_A^2 sum_{i in items} x^T A~_i x`` and ``w / sigma_G^2 x^T G~ x``
    (``w = 1/sqrt(2)``), summed over the sweeps. In, the canary adds ``(1 + alpha) w x`` to its
    items' ``b`` and ``alpha w x x^T`` to their ``A``, and ``w x x^T`` to ``G``; out, its neighbour
    adds its own to its items (the score minus the neighbour's reads both). The ``A_i`` of a fit
    too large to keep them (``sweeps_``) are left out of the score.
``"selection"`` (``catalogue="select"``)
    How many of the canary's items were selected (``items_``).

A release that does not cover a canary's or its neighbour's items (not selected) makes no guess
on it (``nan``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dptensor.models.recommend._input import check_interactions
from dptensor.models.recommend.ials import solve_user_factors
from dptensor.models.recommend.private_estimator import PrivateRecommender
from dptensor.models.recommend.private_ials import clip_factors
from dptensor.privacy.end_to_end_audit import register_canaries

__all__ = ["ITEMS_PER_CANARY", "RecommenderCanaries", "release_scores"]

#: Items of each canary user (and of its neighbour).
ITEMS_PER_CANARY = 2


@dataclass
class _RecommenderPlan:
    base: sp.csr_array
    items: np.ndarray  # (n_canaries, ITEMS_PER_CANARY): each canary's items
    others: np.ndarray  # the same for its neighbour

    @property
    def n_canaries(self) -> int:
        return len(self.items)


def _rows(groups: np.ndarray, n_items: int) -> sp.csr_array:
    """One binary user row per group of items."""
    count, size = groups.shape
    indptr = np.arange(0, count * size + 1, size)
    indices = np.sort(groups, axis=1).ravel()
    return sp.csr_array((np.ones(count * size), indices, indptr), shape=(count, n_items))


def release_scores(estimator: PrivateRecommender) -> dict[str, Callable[[np.ndarray], float]]:
    """Per release of a fitted :class:`PrivateRecommender`, ``items -> score`` from released attributes.

    ``"selection"``: how many of ``items`` are in ``items_``; ``"counts"``: their noisy counts summed
    (``popularity_``); ``"recount"``: their recounts summed (``recounts_``, if all are candidates);
    ``"gram"``: the EASE weights among them, ``sum_{i != j} B_ij`` (``item_side_.weights``);
    ``"ials"``: every sweep's matched filter for a user of exactly those items (``sweeps_``, module
    docstring). ``nan`` where the release does not cover every one of ``items``.
    The releases are the guarantee's (``guarantee_.details["releases"]``), which the public
    configuration fixes.
    """
    released = estimator.items_
    position = np.full(int(estimator.n_items_), -1, dtype=np.int64)
    position[released] = np.arange(released.size)
    counts = np.asarray(estimator.popularity_, dtype=float)
    weights = estimator.item_side_.weights
    factors = estimator.item_side_.factors

    def covered(items: np.ndarray) -> np.ndarray | None:
        rows = position[items]
        return rows if np.all(rows >= 0) else None

    def counts_score(items: np.ndarray) -> float:
        rows = covered(items)
        return np.nan if rows is None else float(counts[rows].sum())

    recounted = np.full(int(estimator.n_items_), -1, dtype=np.int64)
    recounted[estimator.candidates_] = np.arange(estimator.candidates_.size)
    recounts = np.asarray(estimator.recounts_, dtype=float)

    def recount_score(items: np.ndarray) -> float:
        rows = recounted[items]
        return float(recounts[rows].sum()) if np.all(rows >= 0) else np.nan

    def gram_score(items: np.ndarray) -> float:
        rows = covered(items)
        if rows is None or weights is None:
            return np.nan
        block = np.asarray(weights, dtype=float)[np.ix_(rows, rows)]
        return float(block.sum() - np.trace(block))

    def sweeps_score(items: np.ndarray) -> float:
        rows = covered(items)
        if rows is None or factors is None:
            return np.nan
        return _sweeps_filter(estimator, rows)

    readers = {"selection": lambda items: float(np.count_nonzero(position[items] >= 0)),
               "counts": counts_score, "recount": recount_score, "gram": gram_score, "ials": sweeps_score}
    made = estimator.guarantee_.details["releases"]
    unscored = [name for name in made if name not in readers]
    if unscored:  # every release is scored: a new one needs its canary score here
        raise ValueError(f"no canary score for the release(s) {unscored} of {type(estimator).__name__}")
    return {name: readers[name] for name in made}


def _sweeps_filter(estimator: PrivateRecommender, rows: np.ndarray) -> float:
    """The ``"ials"`` score of a user whose row is exactly the item-side positions ``rows``."""
    details = estimator.guarantee_.details["ials"]
    sigmas, alpha, clip = details["sigmas"], float(details["alpha"]), float(details["clip"])
    weight = 1.0 / math.sqrt(rows.size)
    score = 0.0
    for sweep in estimator.sweeps_:
        start = np.asarray(sweep.start, dtype=float)
        row = sp.csr_array((np.ones(rows.size), np.sort(rows), [0, rows.size]), shape=(1, start.shape[0]))
        user = clip_factors(solve_user_factors(row, start, regularization=float(details["regularization"]),
                                               alpha=alpha), clip)[0]
        stats, outer = sweep.statistics, np.outer(user, user)
        targets = float(stats.targets[rows].sum(axis=0) @ user)
        score += (1.0 + alpha) * weight / sigmas["targets"] ** 2 * targets
        score += weight / sigmas["gram"] ** 2 * float(np.sum(stats.user_gram * outer))
        if "grams" in sigmas and stats.grams is not None:
            grams = float(np.sum(stats.grams[rows].sum(axis=0) * outer))
            score += alpha * weight / sigmas["grams"] ** 2 * grams
    return score


class RecommenderCanaries:
    """Canary users of :class:`PrivateRecommender`, each with its own items (module docstring).

    Parameters
    ----------
    items : {"rare", "frequent"}, default "rare"
        Which of the corpus's items the canaries and their neighbours are made of: its rarest
        (a public catalogue) or its most frequent (a selected catalogue keeps them).
    """

    relation = "user"

    def __init__(self, items: str = "rare") -> None:
        if items not in ("rare", "frequent"):
            raise ValueError(f"items must be 'rare' or 'frequent', got {items!r}")
        self.items = items
        which = "rarest" if items == "rare" else "most frequent"
        self.description = (
            f"canary users, each with {ITEMS_PER_CANARY} of the corpus's {which} items of their own, "
            f"replaced when left out by a user with {ITEMS_PER_CANARY} other such items; scores, one per "
            "release, the canary's minus its neighbour's: counts, the noisy item counts (popularity_) at "
            "its items; recount, their recounts (recounts_) where they are candidates; gram, the EASE "
            "weights between its items (item_side_.weights, solved from the noisy Gram); ials, every "
            "sweep's matched filter for its factor solved from the sweep's public start "
            "(sweeps_: the noisy b and A at its items and G); selection, how many of its items were selected "
            "(items_)"
        )

    def plan(self, estimator: Any, X: Any, n_canaries: int, rng: np.random.Generator) -> _RecommenderPlan:
        """Pick each canary's items and its neighbour's, ``2 * ITEMS_PER_CANARY`` distinct items a canary."""
        base = check_interactions(X)
        n_items = base.shape[1]
        m = min(int(n_canaries), n_items // (2 * ITEMS_PER_CANARY))
        if m < 1:
            raise ValueError(f"auditing PrivateRecommender needs at least {2 * ITEMS_PER_CANARY} items "
                             f"(a canary's and its neighbour's), got {n_items}")
        frequency = np.diff(sp.csc_array(base).indptr)
        candidates = n_items
        if self.items == "frequent":  # an item no user chose passes a selection with probability <= delta
            candidates = max(int(np.count_nonzero(frequency)), 2 * ITEMS_PER_CANARY)
        m = min(m, candidates // (2 * ITEMS_PER_CANARY))
        order = np.lexsort((rng.random(n_items), frequency if self.items == "rare" else -frequency))
        chosen = rng.permutation(order[:2 * m * ITEMS_PER_CANARY]).reshape(2 * m, ITEMS_PER_CANARY)
        return _RecommenderPlan(base, chosen[:m], chosen[m:])

    def fit_args(self, plan: _RecommenderPlan, included: np.ndarray) -> tuple:
        """The users of ``X`` followed by each canary (in) or its neighbour (out)."""
        groups = np.where(np.asarray(included, dtype=bool)[:, None], plan.items, plan.others)
        return (sp.vstack([plan.base, _rows(groups, plan.base.shape[1])], format="csr"),)

    def features(self, estimator: Any, plan: _RecommenderPlan) -> dict[str, list[np.ndarray]]:
        """Per release: the canary's score minus its neighbour's, then (counts, selection) each item's.

        The Gram's and the factors' scores have no per-item part (a single item has no off-diagonal
        weight).
        """
        out = {}
        for name, score in release_scores(estimator).items():
            rows = []
            for mine, theirs in zip(plan.items, plan.others, strict=True):
                single = name not in ("gram", "ials")  # counts, recount, selection: per item too
                each = [score(np.array([item])) for item in (*mine, *theirs)] if single else []
                rows.append(np.array([score(mine) - score(theirs), *each]))
            out[name] = rows
        return out


def _recommender_canaries(estimator: PrivateRecommender) -> RecommenderCanaries:
    # a selected catalogue keeps frequent items only: the canaries must be among them to be released
    return RecommenderCanaries("frequent" if estimator.catalogue == "select" else "rare")


register_canaries(PrivateRecommender, _recommender_canaries)
