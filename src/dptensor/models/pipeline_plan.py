"""A pipeline of private steps planned before its first charge: every step's checks, one ledger check.

In ``make_pipeline(PrivateCountVectorizer(...), PrivateSpectralLDA(...))`` each step charges its
ledger when it is fitted, so a model that refuses its configuration (``n_components=10`` over a
vocabulary of at most 3 words) or that the ledger cannot pay for any more is refused only after the
vocabulary's release was charged (issue 53, finding 8): that budget is lost. The sizes that decide
both are public before anything is read -- the number of documents ``N`` and the most words
``n_words`` the vocabulary may keep -- so the whole run can be planned first:

* :func:`model_guarantees`: what the model after a private vocabulary may charge (its guarantee at
  each vocabulary size the release could leave);
* :func:`check_pipeline_budget`: whether one ledger can pay for every step's charge together
  (composed exactly with its earlier charges), for every outcome of the earlier releases;
* :func:`check_private_pipeline`: both, for a scikit-learn ``Pipeline``;
* :class:`PrivatePipeline` (:func:`make_private_pipeline`): a ``Pipeline`` whose ``fit`` runs
  :func:`check_private_pipeline` first, so that a run the ledger cannot pay in full charges nothing;
* a plain ``Pipeline`` is planned the same way when its first private step is about to be charged
  (:data:`dptensor.models._base.PIPELINE_PLANNERS`: the step finds the pipeline fitting it on the
  call stack), except with ``memory=``, whose steps are fitted as clones.

``dptensor lda fit --private-vocab --ledger`` plans its run through the same functions.
A concurrent run charging the same ledger between the check and a later step's charge can still
leave that charge refused (only :meth:`~dptensor.privacy.BudgetLedger.charge` decides atomically).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer
from sklearn.pipeline import Pipeline, make_pipeline

from dptensor.models._base import PIPELINE_PLANNERS
from dptensor.models.topics.dp_vi import DPVariationalLDA
from dptensor.models.topics.dp_vi_options import DPVIOptions
from dptensor.models.topics.private_spectral import PrivateSpectralLDA
from dptensor.models.topics.vectorizer import PrivateCountVectorizer
from dptensor.privacy import BudgetExceededError, PrivacyGuarantee, compose

__all__ = [
    "PrivatePipeline",
    "check_pipeline_budget",
    "check_private_pipeline",
    "make_private_pipeline",
    "model_guarantees",
    "planned_charges",
]


def model_guarantees(
    model: PrivateSpectralLDA | DPVariationalLDA, n_documents: int, max_words: int
) -> list[PrivacyGuarantee]:
    """What the model after a private vocabulary may charge: its guarantee at each vocabulary size.

    The released vocabulary has between ``k`` and ``max_words`` words, which only its release
    tells. :class:`DPVariationalLDA`'s guarantee depends on ``N`` alone. That of
    :class:`PrivateSpectralLDA` depends on the size through the plan's regimes (clipped or not,
    Analyze Gauss or the noisy power method for ``M2``, the tensor step or the non-negative
    factor), each an interval of sizes; with the analytic calibration the composed spend is the
    same in every regime. The sizes ``k, 2k, 4k, ...`` and ``max_words`` sample every regime's
    interval that is as wide as a factor of two; a size the fit would refuse is left out.

    Parameters
    ----------
    model : PrivateSpectralLDA or DPVariationalLDA
        Private (``epsilon`` and ``delta`` set).
    n_documents : int
        The public number of documents.
    max_words : int
        The most words the vocabulary before the model may keep.

    Returns
    -------
    list of PrivacyGuarantee
        One guarantee per sampled size (empty when the fit would refuse every size).
    """
    if isinstance(model, DPVariationalLDA):  # with the moments' start: the same spend at any size
        return [model.planned_guarantee(n_documents, max_words)]
    k = int(model.n_components)
    sizes = {int(max_words)}
    size = k
    while size < max_words:
        sizes.add(size)
        size *= 2
    plans = []
    for n_words in sorted(sizes):
        try:
            plans.append(model.planned_guarantee(n_documents, n_words))
        except ValueError:  # a vocabulary of this size would be refused by the fit itself
            continue
    return plans


def check_pipeline_budget(
    ledger: object, steps: Sequence[Sequence[PrivacyGuarantee]], *,
    what: str = "the vocabulary and the model of this run together",
) -> None:
    """Refuse, before the first release of a run, a run whose later releases the ledger could not pay.

    Parameters
    ----------
    ledger : BudgetLedger
        Anything with ``would_spend(guarantee)``, ``spent()``, ``epsilon``, ``delta`` and ``path``.
    steps : sequence of sequences of PrivacyGuarantee
        In the order they are charged, each step's possible charges (a model after a private
        vocabulary: its guarantee at each size the vocabulary may have, :func:`model_guarantees`).
    what : str
        The steps, for the message ("... has spent ...; {what} would bring it to ...").

    Raises
    ------
    BudgetExceededError
        Some choice of one charge per step, composed exactly with the ledger's earlier charges
        (:meth:`~dptensor.privacy.BudgetLedger.would_spend`), exceeds the budget; nothing was
        charged.
    """
    for choice in itertools.product(*steps):
        together = compose(*choice, delta=ledger.delta)
        total = ledger.would_spend(together)
        if not total <= ledger.epsilon:
            spent = ledger.spent()
            raise BudgetExceededError(
                f"privacy budget exceeded: the ledger {ledger.path} has spent epsilon={spent:.6g} of "
                f"{ledger.epsilon:g} (delta={ledger.delta:g}); {what} would bring it to "
                f"epsilon={total:.6g}. Nothing was charged and nothing computed (no step is released "
                "when a step after it could not be paid for).",
                path=str(ledger.path), budget_epsilon=ledger.epsilon, budget_delta=ledger.delta, spent=spent,
                requested=together.epsilon, total=total,
            )


def _is_private(step: object) -> bool:
    return getattr(step, "epsilon", None) is not None


def _ledger_key(ledger: object) -> object:
    """Steps sharing a ledger (the same object, or ledgers on one file) are checked together."""
    path = getattr(ledger, "path", None)
    return ("path", str(path)) if path is not None else ("object", id(ledger))


def planned_charges(pipeline: Pipeline, n_documents: int) -> list[tuple[str, object, list[PrivacyGuarantee]]]:
    """``(name, ledger, possible charges)`` of each private step, in order, after each step's own checks.

    The width of each step's input is followed from public parameters: a
    :class:`PrivateCountVectorizer` keeps at most ``n_words`` words, a ``CountVectorizer`` with a
    fixed ``vocabulary`` has its length, a ``HashingVectorizer`` ``n_features`` columns. A topic
    model whose input width is not known so (after any other step) is not planned; it is checked
    when it is fitted.

    Parameters
    ----------
    pipeline : sklearn.pipeline.Pipeline
        Not yet fitted.
    n_documents : int
        The public number of documents it will be fitted on.

    Returns
    -------
    list of (str, ledger or None, list of PrivacyGuarantee)
        The planned steps; a private step missing from it is not planned.
    """
    width: int | None = None
    planned = []
    for name, step in pipeline.steps:
        if step is None or step == "passthrough":
            continue
        if isinstance(step, PrivateCountVectorizer):
            planned.append((name, step.ledger, [step.planned_guarantee()]))  # its parameter checks too
            width = int(step.n_words)
            continue
        if isinstance(step, PrivateSpectralLDA | DPVariationalLDA) and _is_private(step):
            if width is not None:
                step.check_configuration(n_documents, width)
                planned.append((name, step.ledger, model_guarantees(step, n_documents, width)))
            elif isinstance(step, DPVariationalLDA) and (step.options or DPVIOptions()).init != "moments":
                step.check_configuration(n_documents)
                planned.append((name, step.ledger, [step.planned_guarantee(n_documents)]))
            width = int(step.n_components)
            continue
        if isinstance(step, HashingVectorizer):
            width = int(step.n_features)
        elif isinstance(step, CountVectorizer) and step.vocabulary is not None:
            width = len(set(step.vocabulary))
        else:
            width = None
    return planned


def check_private_pipeline(pipeline: Pipeline, n_documents: int) -> None:
    """Run every private step's checks and ask each ledger for all its steps, before any charge.

    Parameters
    ----------
    pipeline : sklearn.pipeline.Pipeline
        Not yet fitted: a :class:`PrivateCountVectorizer` followed by a private topic model
        (:class:`PrivateSpectralLDA`, :class:`DPVariationalLDA`), with public steps in between.
    n_documents : int
        The public number of documents it will be fitted on.

    Raises
    ------
    ValueError
        A step would refuse its configuration at these public sizes (``n_components`` above the
        most words the vocabulary may keep, for instance).
    BudgetExceededError
        A ledger cannot pay for all the steps that charge it (:func:`check_pipeline_budget`).
    """
    if not isinstance(pipeline, Pipeline):
        raise TypeError(f"pipeline must be a sklearn.pipeline.Pipeline, got {type(pipeline).__name__}")
    groups: dict[object, tuple[object, list[str], list[list[PrivacyGuarantee]]]] = {}
    for name, ledger, charges in planned_charges(pipeline, int(n_documents)):
        if ledger is None or not hasattr(ledger, "would_spend"):
            continue  # no ledger (or one that cannot be asked): the steps' own checks only
        group = groups.setdefault(_ledger_key(ledger), (ledger, [], []))
        group[1].append(name)
        group[2].append(charges)
    for ledger, names, steps in groups.values():
        check_pipeline_budget(ledger, steps, what=f"the steps {', '.join(names)} of this run together")


def _plan_before_the_first_charge(pipeline: Pipeline, step: object, n_public: int | None) -> None:
    """A plain ``Pipeline``'s first private step, about to be charged: plan the whole pipeline first.

    Registered in :data:`dptensor.models._base.PIPELINE_PLANNERS`, so that
    ``make_pipeline(PrivateCountVectorizer(...), PrivateSpectralLDA(...))`` charges nothing when
    a later step would refuse or a ledger could not pay for all of them. A :class:`PrivatePipeline`
    planned already; without the public number of documents (a one-pass iterable) nothing is
    planned.
    """
    if isinstance(pipeline, PrivatePipeline) or n_public is None:
        return
    private = [s for _, s in pipeline.steps if getattr(s, "epsilon", None) is not None]
    if private and private[0] is step:
        check_private_pipeline(pipeline, n_public)


def _n_documents(X: object) -> int:
    shape = getattr(X, "shape", None)
    if shape is not None and len(shape) >= 1:
        return int(shape[0])
    if hasattr(X, "__len__") and not isinstance(X, str | bytes):
        return len(X)
    raise TypeError(
        "a PrivatePipeline plans its run from the public number of documents before the first charge: "
        "pass the documents as a sequence (list, array), not a one-pass iterable"
    )


class PrivatePipeline(Pipeline):
    """A scikit-learn ``Pipeline`` of private steps that plans the whole run before the first charge.

    ``fit``, ``fit_transform`` and ``fit_predict`` first run :func:`check_private_pipeline` on the
    public number of documents: every private step's own checks, and each ledger asked whether it
    can pay for all the steps that charge it, so that a run refused by a later step or by the
    ledger charges nothing (a plain ``Pipeline`` charges the vocabulary, then the model refuses,
    and the vocabulary's budget is spent). Then it fits as ``Pipeline`` does; the parameters are
    ``Pipeline``'s. The total guarantee of the fitted pipeline is
    :func:`~dptensor.models.pipeline_guarantee`'s.

    Examples
    --------
    >>> from dptensor.models import PrivateCountVectorizer, PrivateSpectralLDA, make_private_pipeline
    >>> pipe = make_private_pipeline(PrivateCountVectorizer(3, epsilon=0.5, delta=1e-7),
    ...                              PrivateSpectralLDA(10, epsilon=1.0, delta=1e-6))
    >>> pipe.fit(["tensor power method"] * 600)  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ValueError: n_components=10 exceeds the vocabulary size 3
    """

    def _plan(self, X: object) -> None:
        check_private_pipeline(self, _n_documents(X))

    def fit(self, X: object, y: object = None, **params: object) -> PrivatePipeline:
        """Plan the run (:func:`check_private_pipeline`), then ``Pipeline.fit``.

        Parameters
        ----------
        X : sequence of documents
            A sequence (its length, the number of documents, is public and plans the run).
        y : ignored
        **params
            As for ``Pipeline.fit``.

        Returns
        -------
        self
        """
        self._plan(X)
        return super().fit(X, y, **params)

    def fit_transform(self, X: object, y: object = None, **params: object) -> object:
        """Plan the run (:func:`check_private_pipeline`), then ``Pipeline.fit_transform``."""
        self._plan(X)
        return super().fit_transform(X, y, **params)

    def fit_predict(self, X: object, y: object = None, **params: object) -> object:
        """Plan the run (:func:`check_private_pipeline`), then ``Pipeline.fit_predict``."""
        self._plan(X)
        return super().fit_predict(X, y, **params)


def make_private_pipeline(*steps: object, memory: object = None, verbose: bool = False) -> PrivatePipeline:
    """:class:`PrivatePipeline` from its steps, named as ``sklearn.pipeline.make_pipeline`` names them.

    Parameters
    ----------
    *steps : estimators
        The steps, in order.
    memory, verbose
        As for ``make_pipeline``.

    Returns
    -------
    PrivatePipeline
    """
    return PrivatePipeline(make_pipeline(*steps).steps, memory=memory, verbose=verbose)


PIPELINE_PLANNERS.append(_plan_before_the_first_charge)
