"""A grid search over private estimators whose one guarantee covers every fit and the choice.

The search (issue 53, finding 7) under *replace one document*, with ``C`` candidates and the folds
of a data-independent split (``KFold`` with public randomness):

1. **Fits.** Every candidate is fitted on every fold's training documents. A document takes part
   in the fits of the folds whose training part holds it (``K - 1`` of ``K`` folds): those are
   the releases it can change, composed exactly; the fits it is not part of do not depend on it.
   When a candidate's planned guarantee differs between folds, the fold plan of largest Gaussian-DP
   ``mu`` stands for each (:func:`dominating`), or, for releases that are not all Gaussian, all
   its fold fits are composed (an upper bound).
2. **Selection.** Each held-out document is scored on its own by a fitted fold model (by default
   its per-token log-likelihood ``sum_v c_v log((theta^T phi)_v) / tokens``, ``theta`` from that
   document alone), clipped to ``score_range = (lo, hi)``; a failing score counts as ``lo`` and
   warnings are silenced, so nothing but the clipped number depends on the document. The
   candidates' mean scores over all ``T`` held-out instances have, for fixed fold models, ``l2``
   sensitivity ``sqrt(C) h (hi - lo) / T`` (``h`` = the most folds holding one document out: 1
   for ``KFold``); they are released with Gaussian noise calibrated to ``(selection_epsilon,
   selection_delta)`` and the best noisy score is chosen (post-processing).
3. **Refit.** The chosen candidate is fitted on all documents: charged as the candidates' refit
   plan of largest Gaussian-DP ``mu``, which covers whichever is chosen (:func:`dominating`; for
   releases that are not all Gaussian, every candidate's refit is composed: an upper bound).

All of it composes adaptively into ``guarantee_`` (:func:`dptensor.privacy.compose`: exact, in
dp-accounting's PLD); the whole plan, computed from parameters and public sizes only, is charged
to ``ledger`` once, before the first fit. The fold models are not released; the noisy mean scores
(``cv_results_``), the choice and the refitted model are.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Mapping, Sequence

import dp_accounting
import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
from sklearn.model_selection import KFold, ParameterGrid
from sklearn.pipeline import Pipeline
from sklearn.utils import _safe_indexing
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import _num_samples, check_is_fitted

from dptensor.models.pipeline_plan import planned_charges
from dptensor.models.topics._fitted import mixture_log_likelihood
from dptensor.privacy import (
    InsecureTestNoise,
    NoiseSource,
    PrivacyGuarantee,
    compose,
    gaussian_epsilon,
    gaussian_sigma_analytic,
    resolve_noise,
)
from dptensor.privacy.accounting import reduce_event
from dptensor.privacy.release import begin_release, void_for_insecure_noise

__all__ = ["PrivateGridSearchCV", "dominating", "per_token_log_likelihood", "selection_guarantee"]


def selection_guarantee(
    epsilon: float, delta: float, *, n_candidates: int, sensitivity: float,
    like: PrivacyGuarantee | None = None,
) -> tuple[PrivacyGuarantee, float]:
    """The Gaussian release of ``n_candidates`` mean scores, each of sensitivity ``sensitivity``.

    Parameters
    ----------
    epsilon, delta : float
        The selection's budget.
    n_candidates : int
        ``C``: the scores released together (``l2`` sensitivity ``sqrt(C) sensitivity``).
    sensitivity : float
        How much one candidate's mean score can move when one document is replaced.
    like : PrivacyGuarantee, optional
        A fit's guarantee, whose relation and wording (``neighbouring``, ``protected``) the
        selection's takes.

    Returns
    -------
    guarantee : PrivacyGuarantee
        ``(epsilon, delta)``-DP, a :class:`dp_accounting.GaussianDpEvent` of noise multiplier
        ``gaussian_sigma_analytic(epsilon, delta)``.
    sigma : float
        The noise standard deviation per score.
    """
    if n_candidates < 1 or not sensitivity > 0:
        raise ValueError("a selection needs at least one candidate and a positive sensitivity")
    multiplier = gaussian_sigma_analytic(float(epsilon), float(delta))
    l2 = math.sqrt(n_candidates) * float(sensitivity)
    guarantee = PrivacyGuarantee(
        epsilon=float(epsilon), delta=float(delta),
        neighbouring=like.neighbouring if like is not None else "document",
        accountant="exact (analytic Gaussian)", n_releases=1, mechanism="gaussian",
        noise_multiplier=multiplier, epsilon_exact=min(float(epsilon), gaussian_epsilon(multiplier, delta)),
        details={"release": "the candidates' mean held-out scores plus Gaussian noise; the choice is "
                 "their argmax (post-processing)", "n_candidates": int(n_candidates),
                 "score_sensitivity": float(sensitivity), "l2_sensitivity": l2, "noise_std": multiplier * l2},
        protected=like.protected if like is not None else "",
        public="the candidates, the folds (public randomness), the score range and the numbers of "
        "documents",
        dp_event=dp_accounting.GaussianDpEvent(multiplier),
    )  # fmt: skip
    return guarantee, multiplier * l2


def per_token_log_likelihood(model: object, document: object) -> float:
    """``sum_v c_v log((theta^T phi)_v) / tokens`` of one document, ``theta`` from it alone.

    Parameters
    ----------
    model : fitted topic model, or a Pipeline ending in one
        Needs ``transform`` and ``topic_word_distribution`` (after the pipeline's other steps).
    document : one row (a 1 x V count matrix, or a one-document list for a pipeline)

    Returns
    -------
    float
        ``<= 0``; ``0`` for a document without tokens.
    """
    final, counts = model, document
    if isinstance(model, Pipeline):
        counts, final = model[:-1].transform(document), model[-1]
    counts = sp.csr_matrix(counts)
    tokens = float(counts.sum())
    if tokens == 0:
        return 0.0
    theta = final.transform(counts)
    return mixture_log_likelihood(counts, theta, np.asarray(final.topic_word_distribution())) / tokens


def _equal(one: PrivacyGuarantee, other: PrivacyGuarantee) -> bool:
    return one == other and repr(one.to_dp_event()) == repr(other.to_dp_event())


def dominating(guarantees: Sequence[PrivacyGuarantee]) -> PrivacyGuarantee | None:
    """One of ``guarantees`` whose release is at least as private-costly as each of the others.

    Where each is a composition of Gaussian releases (one Gaussian of ``mu = (sum z_i^-2)^(1/2)``
    in Gaussian DP, :func:`~dptensor.privacy.accounting.reduce_event`), the one of largest
    ``mu``: every other is ``mu``-GDP for a smaller ``mu``, so charging it covers whichever of them
    runs. Otherwise the first, if all are the same release; else ``None`` (compose them all).
    """
    if all(_equal(guarantees[0], other) for other in guarantees[1:]):
        return guarantees[0]
    if not all(g.holds for g in guarantees):
        return None
    reduced = [reduce_event(g.to_dp_event()) for g in guarantees]
    if not all(isinstance(event, dp_accounting.GaussianDpEvent) for event in reduced):
        return None
    return guarantees[int(np.argmin([event.noise_multiplier for event in reduced]))]


def _private_steps(estimator: object) -> list[tuple[str, object]]:
    steps = estimator.steps if isinstance(estimator, Pipeline) else [("", estimator)]
    return [(name, step) for name, step in steps if getattr(step, "epsilon", None) is not None]


class PrivateGridSearchCV(MetaEstimatorMixin, BaseEstimator):
    """Exhaustive search over a grid of private estimators, with one guarantee for all of it.

    Every candidate is fitted on every fold, each held-out document is scored on its own with a
    clipped score, the candidates' mean scores are released with Gaussian noise and the best is
    refitted on all the documents (module docstring: the three parts and their sensitivities).
    ``guarantee_`` is their exact composition, and that plan is charged to ``ledger`` once, before
    the first fit, so that a ledger that cannot pay for the whole search charges nothing.

    Parameters
    ----------
    estimator : private estimator, or a Pipeline of public steps and private ones
        Each private step needs ``planned_guarantee(n_documents, n_words)`` (the topic models,
        :class:`~dptensor.models.PrivateCountVectorizer` in a pipeline whose model's charge does
        not depend on the vocabulary's size). Its ``ledger`` is used when ``ledger`` is not given;
        the fits themselves charge nothing (the search charges the whole plan).
    param_grid : dict or list of dicts
        As for ``GridSearchCV``.
    selection_epsilon, selection_delta : float
        The budget of the noisy scores (the choice).
    cv : int or splitter, default 3
        An int is ``KFold(cv, shuffle=True, random_state=random_state)``; a splitter is asked for
        ``split`` of the number of documents only (never of the data).
    scoring : callable, optional
        ``scoring(fitted_model, one_document) -> float`` (:func:`per_token_log_likelihood` by
        default), clipped to ``score_range``.
    score_range : (float, float), optional
        ``(lo, hi)``; by default ``(-2 log V, 0)`` for the per-token log-likelihood over ``V``
        words (``V`` the number of columns of ``X``). Required with ``scoring`` or when ``X`` has no
        columns to count.
    refit : bool, default True
        Fit the chosen candidate on all the documents (``best_estimator_``).
    delta : float, optional
        The ``delta`` at which ``guarantee_`` states the total (default: the sum of the parts').
    ledger : BudgetLedger, optional
        Charged with the whole plan once.
    noise : None, "numpy", "opendp", InsecureTestNoise or NoiseSource
        The noise of the scores (the fits use their estimators' ``noise``).
    random_state : int, optional
        Public randomness of the folds.

    Attributes
    ----------
    guarantee_ : PrivacyGuarantee
        Covers every fit, the noisy scores, the choice and the refit.
    cv_results_ : dict
        ``params``, ``mean_test_score`` (the noisy released scores) and ``rank_test_score``.
    best_index_, best_params_, best_score_ : the chosen candidate and its noisy score.
    best_estimator_ : the refitted chosen candidate (``refit=True``).
    score_sensitivity_, selection_noise_std_ : float
        One candidate's mean score's sensitivity and the noise standard deviation added to it.
    n_splits_ : int

    Examples
    --------
    >>> from dptensor.datasets.lda import make_lda_corpus
    >>> from dptensor.models import PrivateSpectralLDA
    >>> corpus = make_lda_corpus(600, 30, 3, alpha=0.3, doc_length=30, random_state=0)
    >>> search = PrivateGridSearchCV(PrivateSpectralLDA(3, epsilon=1.0, delta=1e-7, refine=None),
    ...                              {"alpha0": [0.3, 3.0]}, selection_epsilon=0.5, selection_delta=1e-7,
    ...                              cv=2, random_state=0).fit(corpus.counts)
    >>> search.guarantee_.n_releases > 3 * search.best_estimator_.guarantee_.n_releases
    True
    """

    def __init__(
        self,
        estimator: object,
        param_grid: Mapping | Sequence[Mapping],
        *,
        selection_epsilon: float,
        selection_delta: float,
        cv: int | object = 3,
        scoring: Callable[[object, object], float] | None = None,
        score_range: tuple[float, float] | None = None,
        refit: bool = True,
        delta: float | None = None,
        ledger: object = None,
        noise: object = None,
        random_state: int | None = None,
    ) -> None:
        self.estimator = estimator
        self.param_grid = param_grid
        self.selection_epsilon = selection_epsilon
        self.selection_delta = selection_delta
        self.cv = cv
        self.scoring = scoring
        self.score_range = score_range
        self.refit = refit
        self.delta = delta
        self.ledger = ledger
        self.noise = noise
        self.random_state = random_state

    # ------------------------------------------------------------------ the plan
    def _splits(self, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
        cv = self.cv
        if isinstance(cv, int | np.integer):
            cv = KFold(int(cv), shuffle=True, random_state=self.random_state)
        # the split sees the number of documents only: a placeholder column, never X or y
        return [(np.asarray(a), np.asarray(b)) for a, b in cv.split(np.zeros((n, 1)))]

    def _score_range(self, n_words: int | None) -> tuple[float, float]:
        if self.score_range is not None:
            lo, hi = (float(v) for v in self.score_range)
        elif self.scoring is None and n_words is not None and n_words > 1:
            lo, hi = -2.0 * math.log(n_words), 0.0
        else:
            raise ValueError("score_range=(lo, hi) is needed: a custom scoring, or an X without columns")
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"score_range must be finite with lo < hi, got {self.score_range!r}")
        return lo, hi

    def _ledger_and_base(self) -> tuple[object, object]:
        """The ledger to charge, and the estimator with every ledger of its steps removed."""
        params = self.estimator.get_params(deep=True)
        names = [name for name in params if name == "ledger" or name.endswith("__ledger")]
        found = {id(params[name]): params[name] for name in names if params[name] is not None}
        if self.ledger is not None:
            found.pop(id(self.ledger), None)
        if len(found) > (0 if self.ledger is not None else 1):
            raise ValueError("PrivateGridSearchCV charges one ledger for the whole search: the estimator's "
                             "steps name another ledger than ledger=")
        ledger = self.ledger if self.ledger is not None else next(iter(found.values()), None)
        base = clone(self.estimator).set_params(**dict.fromkeys(names))
        return ledger, base

    def _plan(self, estimator: object, n: int, n_words: int | None) -> PrivacyGuarantee:
        """The guarantee one fit of ``estimator`` on ``n`` documents charges, from public sizes only."""
        if isinstance(estimator, Pipeline):
            planned = planned_charges(estimator, n)
            names = {name for name, _ in _private_steps(estimator)}
            if names - {name for name, _, _ in planned}:
                raise TypeError(f"PrivateGridSearchCV cannot plan the steps {sorted(names)} from public "
                                "sizes")
            parts = []
            for name, _, alternatives in planned:
                if not all(_equal(alternatives[0], other) for other in alternatives[1:]) or not alternatives:
                    raise ValueError(
                        f"PrivateGridSearchCV: step {name}'s charge depends on the size of a vocabulary "
                        "released inside the search; release the vocabulary once (PrivateCountVectorizer "
                        "on all the documents) and search over CountVectorizer(vocabulary=its words)"
                    )
                parts.append(alternatives[0])
            return parts[0] if len(parts) == 1 else compose(*parts, delta=sum(p.delta for p in parts))
        planned_guarantee = getattr(estimator, "planned_guarantee", None)
        if planned_guarantee is None:
            raise TypeError(
                f"PrivateGridSearchCV plans every fit before the first: {type(estimator).__name__} has no "
                "planned_guarantee(n_documents, n_words)"
            )
        return planned_guarantee(n, n_words)

    def _voided_for_test_noise(
        self, guarantee: PrivacyGuarantee, estimators: list[object]
    ) -> PrivacyGuarantee:
        """The total voided when a fit draws reproducible test noise (its estimator's ``noise``)."""
        for estimator in estimators:
            for name, value in estimator.get_params(deep=True).items():
                if (name == "noise" or name.endswith("__noise")) and (
                    isinstance(value, InsecureTestNoise)
                    or (isinstance(value, NoiseSource) and not value.secure)
                ):
                    guarantee = void_for_insecure_noise(guarantee, resolve_noise(value))
        return guarantee

    def _planned_total(
        self, bases: list[object], splits: list, n: int, n_words: int | None, lo: float, hi: float
    ) -> tuple[PrivacyGuarantee, float, float]:
        in_train, in_test = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        for train, test in splits:
            in_train[train] += 1
            in_test[test] += 1
        held_out = int(in_test.sum())
        if held_out == 0:
            raise ValueError("the folds hold no document out: nothing to score")
        sensitivity = int(in_test.max()) * (hi - lo) / held_out
        fits: list[PrivacyGuarantee] = []
        for base in bases:
            per_fold = [self._plan(base, len(train), n_words) for train, _ in splits]
            worst = dominating(per_fold)
            if worst is not None:
                fits += [worst] * int(in_train.max())  # the folds a document is trained in
            else:
                fits += per_fold  # all of them: an upper bound
        selection, sigma = selection_guarantee(
            self.selection_epsilon, self.selection_delta, n_candidates=len(bases), sensitivity=sensitivity,
            like=fits[0] if fits else None,
        )
        refits: list[PrivacyGuarantee] = []
        if self.refit:
            refits = [self._plan(base, n, n_words) for base in bases]
            worst = dominating(refits)
            if worst is not None:
                refits = [worst]  # the chosen one is any of them: this plan covers each
        parts = [*fits, selection, *refits]
        delta = float(self.delta) if self.delta is not None else sum(part.delta for part in parts)
        total = self._voided_for_test_noise(compose(*parts, delta=delta), bases)
        total = dataclasses.replace(total, details={
            **dict(total.details), "n_candidates": len(bases), "n_splits": len(splits),
            "fits_composed": len(fits), "refits_composed": len(refits),
            "selection_epsilon": float(self.selection_epsilon),
            "selection_delta": float(self.selection_delta), "score_range": (lo, hi),
            "score_sensitivity": sensitivity, "selection_noise_std": sigma,
        })  # fmt: skip
        return total, sensitivity, sigma

    # ------------------------------------------------------------------ fitting
    def _document_score(self, model: object, document: object, lo: float, hi: float) -> float:
        """One held-out document's clipped score: nothing else about it leaves this function."""
        score = self.scoring or per_token_log_likelihood
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                value = float(score(model, document))
            except Exception:  # noqa: BLE001 - a failure is a score like any other: the lowest
                value = lo
        return lo if math.isnan(value) else min(max(value, lo), hi)

    def fit(self, X: object, y: object = None) -> PrivateGridSearchCV:
        """Plan and charge the whole search, fit every candidate on every fold, choose privately, refit.

        Parameters
        ----------
        X : documents x words counts, or the documents a pipeline reads
            The number of documents (and of columns) is public.
        y : ignored

        Returns
        -------
        self
        """
        n = _num_samples(X)
        shape = getattr(X, "shape", None)
        n_words = int(shape[1]) if shape is not None and len(shape) == 2 else None
        candidates = list(ParameterGrid(self.param_grid))
        ledger, base = self._ledger_and_base()
        bases = [clone(base).set_params(**params) for params in candidates]
        if not candidates or not all(_private_steps(b) for b in bases):
            raise ValueError("PrivateGridSearchCV searches private estimators (epsilon set); for others "
                             "use sklearn.model_selection.GridSearchCV")
        splits = self._splits(n)
        lo, hi = self._score_range(n_words)
        total, sensitivity, sigma = self._planned_total(bases, splits, n, n_words, lo, hi)
        self.guarantee_, source = begin_release(  # the one charge, before any fit
            total, self.noise, ledger=ledger,
            description=f"PrivateGridSearchCV: {len(bases)} candidates x {len(splits)} folds, a noisy "
            f"selection{', a refit' if self.refit else ''}",
        )
        sums = np.zeros(len(bases))
        for c, candidate in enumerate(bases):
            for train, test in splits:
                model = clone(candidate).fit(_safe_indexing(X, train))
                sums[c] += sum(self._document_score(model, _safe_indexing(X, [i]), lo, hi) for i in test)
        held_out = sum(len(test) for _, test in splits)
        noisy = source.add_gaussian(sums / held_out, sigma)
        self.best_index_ = int(np.argmax(noisy))
        self.best_params_ = candidates[self.best_index_]
        self.best_score_ = float(noisy[self.best_index_])
        ranks = np.empty(len(bases), dtype=np.int64)
        ranks[np.argsort(-noisy, kind="stable")] = np.arange(1, len(bases) + 1)
        self.cv_results_ = {"params": candidates, "mean_test_score": noisy, "rank_test_score": ranks}
        self.score_sensitivity_, self.selection_noise_std_ = sensitivity, sigma
        self.n_splits_ = len(splits)
        if self.refit:
            self.best_estimator_ = clone(bases[self.best_index_]).fit(X)
        return self

    def _has(name: str) -> Callable[[PrivateGridSearchCV], bool]:  # noqa: N805 - a decorator factory
        def check(self: PrivateGridSearchCV) -> bool:
            check_is_fitted(self, "best_estimator_")
            return hasattr(self.best_estimator_, name)

        return check

    @available_if(_has("transform"))
    def transform(self, X: object) -> object:
        """``best_estimator_.transform`` (post-processing of the released model on your documents)."""
        return self.best_estimator_.transform(X)

    @available_if(_has("score"))
    def score(self, X: object, y: object = None) -> float:
        """``best_estimator_.score`` on your documents (not private: computed without noise)."""
        return self.best_estimator_.score(X)
