"""The guarantee of a fitted scikit-learn ``Pipeline`` of private steps, and what voids it.

A private estimator cannot see where its columns came from: in
``make_pipeline(CountVectorizer(), PrivateSpectralLDA(...))`` the model's own ``guarantee_`` still
holds *for its input*, while the ``CountVectorizer`` chose the columns from the private documents
without noise (issue 27, finding 8). The pipeline can be inspected, though.
:func:`pipeline_guarantee` composes the ``guarantee_`` of every private step (exactly, with
:func:`dptensor.privacy.compose`) and reports ``holds=False``, with the reason, when any step
learned something from the data without a guarantee -- before a private step (from the raw
documents) or after one (from what the private step computes for each private document, such as
a ``transform``'s document-topic proportions, which no guarantee covers):

* a step with ``guarantee_`` (``PrivateCountVectorizer``, the private models): composed;
* scikit-learn's ``CountVectorizer`` with a fixed ``vocabulary=``, ``HashingVectorizer`` and
  ``FunctionTransformer``: they learn nothing from the documents, so they are public maps;
* any other fitted step (a ``CountVectorizer`` that built its vocabulary, ``TfidfVectorizer``,
  which learns ``idf_``, a scaler, ...): voids the guarantee unless the caller names it in
  ``public_steps`` (fitted on public data, or learning nothing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer, TfidfVectorizer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

from dptensor.privacy import PrivacyGuarantee, compose

__all__ = ["pipeline_guarantee"]


def _learns_from_data(step: object) -> bool:
    """Whether a step without a guarantee keeps something it learned from the documents."""
    if isinstance(step, HashingVectorizer | FunctionTransformer) or step is None or step == "passthrough":
        return False  # stateless: a fixed function of each record
    if isinstance(step, CountVectorizer) and not isinstance(step, TfidfVectorizer):
        return not getattr(step, "fixed_vocabulary_", False)
    return True


def pipeline_guarantee(
    pipeline: Pipeline, *, delta: float, public_steps: Iterable[str] = ()
) -> PrivacyGuarantee:
    """The total guarantee of a fitted pipeline: its private steps composed, or why it does not hold.

    Parameters
    ----------
    pipeline : sklearn.pipeline.Pipeline
        Fitted.
    delta : float
        The total ``delta`` at which to state the composed ``epsilon`` (at least the sum of the
        steps' ``delta`` parts that are pure ``(epsilon, delta)`` events).
    public_steps : iterable of str
        Names of steps the caller vouches for: fitted on public data or learning nothing.

    Returns
    -------
    PrivacyGuarantee
        :func:`dptensor.privacy.compose` of the private steps' guarantees; ``holds=False`` (with
        ``reason``) when a step learned from the data without a guarantee.

    Raises
    ------
    TypeError
        ``pipeline`` is not a scikit-learn ``Pipeline``.
    ValueError
        No step has a guarantee (the pipeline is not private at all), or ``public_steps`` names a
        step the pipeline does not have.

    Examples
    --------
    >>> from sklearn.feature_extraction.text import CountVectorizer
    >>> from sklearn.pipeline import make_pipeline
    >>> from dptensor.models import PrivateSpectralLDA
    >>> docs = ["tensor power method moment"] * 300 + ["privacy noise budget ledger"] * 300
    >>> wrong = make_pipeline(CountVectorizer(), PrivateSpectralLDA(2, epsilon=1, delta=1e-6)).fit(docs)
    >>> pipeline_guarantee(wrong, delta=1e-6).holds
    False
    """
    if not isinstance(pipeline, Pipeline):
        raise TypeError(f"pipeline must be a sklearn.pipeline.Pipeline, got {type(pipeline).__name__}")
    names = [name for name, _ in pipeline.steps]
    public = set(public_steps)
    unknown = sorted(public - set(names))
    if unknown:
        raise ValueError(f"public_steps names steps the pipeline does not have: {', '.join(unknown)}")
    guarantees: list[PrivacyGuarantee] = []
    voided: list[str] = []
    for name, step in pipeline.steps:
        guarantee = getattr(step, "guarantee_", None)
        if isinstance(guarantee, PrivacyGuarantee):
            guarantees.append(guarantee)
        elif name not in public and _learns_from_data(step):
            voided.append(name)
    if not guarantees:
        raise ValueError("no step of the pipeline has a privacy guarantee (guarantee_): nothing is private")
    total = compose(*guarantees, delta=delta)
    if not voided:
        return total
    reason = (
        f"step(s) {', '.join(voided)} learned from the private data without a guarantee (e.g. a "
        "CountVectorizer that built its vocabulary from the documents, or a step fitted on what a "
        "private step computed for each private document): "
        "use CountVectorizer(vocabulary=public_words) or dptensor.models.PrivateCountVectorizer, or name "
        "steps fitted on public data in public_steps"
    )
    return dataclasses.replace(
        total, holds=False, claim="pipeline", reason="; ".join(filter(None, [total.reason, reason])),
        nominal_epsilon=total.epsilon if total.holds else total.nominal_epsilon,
    )
