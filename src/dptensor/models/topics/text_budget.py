"""One budget for texts to private topics: a private vocabulary and a model, calibrated to spend it all.

A private text fit makes two releases on the same documents: the vocabulary
(:class:`~dptensor.models.topics.vectorizer.PrivateCountVectorizer`, Gaussian partition selection)
and the model over its words (:class:`~dptensor.models.topics.private_spectral.PrivateSpectralLDA`
or :class:`~dptensor.models.topics.dp_vi.DPVariationalLDA`). Splitting ``(epsilon, delta)``
linearly -- the vocabulary ``share``, the model ``1 - share`` -- is safe (basic composition) but
wasteful: their exact composition (the PLD accountant, :func:`dptensor.privacy.compose`) is far
below the sum (a 50/50 split of ``epsilon = 2`` composes to about 1.40, of ``epsilon = 1`` to about
0.70, at ``N = d = 2000``, ``k = 10``, ``delta = 1e-6``). :func:`plan_text_budget` therefore

1. chooses the vocabulary's share of the budget where none is given
   (:func:`~dptensor.models.topics.plan.choose_vocabulary_share`, on the linear split, whose plans
   are stated in the totals the user asked for), then
2. scales both ``epsilon`` shares by one factor ``s >= 1`` (the ``delta`` split stays linear) and
   finds, by Brent's method, the ``s`` at which the exact composition of the two planned guarantees
   is ``epsilon`` less :data:`CALIBRATION_MARGIN` -- never above ``epsilon``.

Everything here is computed from public inputs (the options, the number of documents ``N``, the
most words ``V``), so the split reveals nothing about the documents and is known before the first
charge; the ledger is asked for the two releases together (:attr:`TextBudget.planned`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scipy.optimize import brentq
from sklearn.base import clone

from dptensor.models.pipeline_plan import model_guarantees
from dptensor.models.topics.private_spectral import PrivateSpectralLDA
from dptensor.models.topics.vectorizer import PrivateCountVectorizer
from dptensor.privacy.accounting import compose
from dptensor.privacy.guarantee import PrivacyGuarantee

__all__ = ["CALIBRATION_MARGIN", "TextBudget", "plan_text_budget"]

#: How far below the ``epsilon`` asked the calibrated composition lands (the PLD accountant's
#: discretisation is pessimistic, so the reported total is an upper bound of the true one).
CALIBRATION_MARGIN = 2.5e-4
#: The PLD accountant's discretisation: the one :func:`compose` reports with, and a coarser one
#: (pessimistic too, so above the fine total) for the search.
_FINE, _COARSE = 1e-4, 1e-3
#: The largest scale of the linear shares searched (two releases compose to more than their larger part).
_MAX_SCALE = 64.0


@dataclass(frozen=True)
class TextBudget:
    """The split of one ``(epsilon, delta)`` between a private vocabulary and the model after it.

    Attributes
    ----------
    epsilon, delta : float
        The run's total, as asked.
    vocabulary_share : float
        The vocabulary's share of the linear split (given, or chosen by the planner).
    share_chosen : bool
        Whether the planner chose ``vocabulary_share``.
    scale : float
        The factor by which both ``epsilon`` shares of the linear split were scaled (1 where the
        guarantees do not hold, e.g. a paper's unproven configuration).
    vocabulary_epsilon, vocabulary_delta, model_epsilon, model_delta : float
        The two releases' budgets: ``scale * share * epsilon``, ``share * delta`` and
        ``scale * (1 - share) * epsilon``, ``(1 - share) * delta``.
    planned : list of list of PrivacyGuarantee
        The vocabulary's guarantee, then the model's at each vocabulary size it may get
        (:func:`~dptensor.models.pipeline_plan.model_guarantees`): what a ledger is asked for.
    total : PrivacyGuarantee
        The exact composition of the planned releases at ``delta`` (the most of them, over the
        model's alternatives): ``total.epsilon`` is within ``10^-3`` of ``epsilon``, never above.
    """

    epsilon: float
    delta: float
    vocabulary_share: float
    share_chosen: bool
    scale: float
    vocabulary_epsilon: float
    vocabulary_delta: float
    model_epsilon: float
    model_delta: float
    planned: list[list[PrivacyGuarantee]]
    total: PrivacyGuarantee


def _at_budget(estimator: object, epsilon: float, delta: float) -> object:
    return clone(estimator).set_params(epsilon=epsilon, delta=delta)


def _worst_total(
    vocabulary: PrivacyGuarantee, models: list[PrivacyGuarantee], delta: float
) -> PrivacyGuarantee:
    """The largest exact composition of the vocabulary with one of the model's alternatives."""
    distinct = {repr(g.to_dp_event()) if g.holds else repr(g): g for g in models}
    totals = [compose(vocabulary, g, delta=delta) for g in distinct.values()]
    return max(totals, key=lambda g: g.epsilon)


def plan_text_budget(
    vectorizer: PrivateCountVectorizer, model: object, n_documents: int, *, epsilon: float, delta: float,
    vocabulary_share: float | str = "auto", default_share: float = 0.2,
    plan_at: Callable[[float], object] | None = None,
) -> TextBudget:
    """Split ``(epsilon, delta)`` between a private vocabulary and a model so that all of it is spent.

    Parameters
    ----------
    vectorizer : PrivateCountVectorizer
        The vocabulary's release as configured (its ``epsilon`` and ``delta`` are replaced).
    model : PrivateSpectralLDA or DPVariationalLDA
        The model as configured (its ``epsilon`` and ``delta`` are replaced).
    n_documents : int
        The public number of documents ``N``.
    epsilon, delta : float
        The run's total budget.
    vocabulary_share : float in (0, 1) or "auto", default "auto"
        The vocabulary's share of the linear split; ``"auto"``: the planner's choice through
        ``plan_at`` (or ``default_share`` where the planner does not apply).
    default_share : float, default 0.2
        The share where the planner does not apply (DP-VI, the worst-case releases, a public corpus).
    plan_at : callable, optional
        ``plan_at(share)``: the planner's plan of the model at that linear share, or ``None``
        (see :func:`~dptensor.models.topics.plan.choose_vocabulary_share`).

    Returns
    -------
    TextBudget
        The shares, the calibrated budgets and the planned guarantees.

    Raises
    ------
    ValueError
        ``vocabulary_share`` outside ``(0, 1)``, or the model refuses ``N`` (its own checks).
    """
    from dptensor.models.topics.plan import choose_vocabulary_share

    chosen = isinstance(vocabulary_share, str)
    if chosen:
        if vocabulary_share != "auto":
            raise ValueError(f"vocabulary_share must be in (0, 1) or 'auto', got {vocabulary_share!r}")
        share = choose_vocabulary_share(plan_at) if plan_at is not None else None
        if share is None:
            share, chosen = float(default_share), False
    else:
        share = float(vocabulary_share)
        if not 0.0 < share < 1.0:
            raise ValueError(f"vocabulary_share must lie in (0, 1), got {vocabulary_share!r}")
    n_words = int(vectorizer.n_words)

    def releases(scale: float) -> tuple[PrivacyGuarantee, list[PrivacyGuarantee]]:
        words = _at_budget(vectorizer, scale * share * epsilon, share * delta)
        fit = _at_budget(model, scale * (1.0 - share) * epsilon, (1.0 - share) * delta)
        return words.planned_guarantee(), model_guarantees(fit, n_documents, n_words)

    def total_at(scale: float, alternative: int, interval: float = _FINE) -> float:
        vocabulary, models = releases(scale)
        return compose(vocabulary, models[alternative], delta=delta,
                       value_discretization_interval=interval).epsilon

    scale, total = 1.0, None
    vocabulary, models = releases(1.0)
    if models and vocabulary.holds and all(g.holds for g in models):
        # calibrate on the largest vocabulary's model (every alternative spends alike: the model
        # calibrates its own releases to its share), then make sure the worst one fits too
        alternative = len(models) - 1
        for _ in range(len(models)):
            scale = _calibrated_scale(lambda s, i, a=alternative: total_at(s, a, i), epsilon)
            vocabulary, models = releases(scale)
            total = _worst_total(vocabulary, models, delta)
            if total.epsilon <= epsilon:
                break
            alternative = next(i for i, g in enumerate(models)
                               if compose(vocabulary, g, delta=delta).epsilon == total.epsilon)
    else:
        total = _worst_total(vocabulary, models, delta) if models else compose(vocabulary, delta=delta)
    return TextBudget(
        epsilon=float(epsilon), delta=float(delta), vocabulary_share=share, share_chosen=chosen,
        scale=float(scale), vocabulary_epsilon=scale * share * epsilon, vocabulary_delta=share * delta,
        model_epsilon=scale * (1.0 - share) * epsilon, model_delta=(1.0 - share) * delta,
        planned=[[vocabulary], models], total=total,
    )  # fmt: skip


def _calibrated_scale(total: Callable[[float, float], float], epsilon: float) -> float:
    """The ``s >= 1`` at which the increasing ``total(s, interval)`` is ``epsilon`` less the margin.

    Brent's method on the PLD accountant with a coarse discretisation (an upper bound, about 30
    times faster), then one secant step on the fine one (the accountant :func:`compose` reports
    with); never a scale whose fine total exceeds ``epsilon``.
    """
    target = epsilon - CALIBRATION_MARGIN
    if total(1.0, _FINE) >= target:
        return 1.0
    low, high = 1.0, 2.0
    while total(high, _COARSE) < target and high < _MAX_SCALE:
        low, high = high, 2.0 * high
    coarse = brentq(lambda s: total(s, _COARSE) - target, low, min(high, _MAX_SCALE), xtol=1e-6)
    at_coarse = total(coarse, _FINE)
    step = 1e-3 * coarse
    slope = (total(coarse + step, _COARSE) - total(coarse, _COARSE)) / step
    scale = coarse + (target - at_coarse) / slope if slope > 0 else coarse
    if total(scale, _FINE) > epsilon:  # the secant overshot: the coarse root is on the safe side
        scale = coarse
    return float(scale)


def spectral_plan_at(model: object, n_documents: int, n_words: int, epsilon: float, delta: float,
                     max_words_per_document: int) -> Callable[[float], object]:
    """``plan_at(share)`` for :func:`plan_text_budget`: the planner's plan of a spectral fit at a share.

    ``None`` for a model the planner does not model (not a :class:`PrivateSpectralLDA`).
    """
    def plan_at(share: float) -> object:
        if not isinstance(model, PrivateSpectralLDA):
            return None
        fit = _at_budget(model, epsilon * (1.0 - share), delta * (1.0 - share))
        fit.check_configuration(n_documents, n_words)
        return fit.utility_plan(n_documents, n_words, vocabulary_share=share,
                                max_words_per_document=max_words_per_document, suggest=False)

    return plan_at
