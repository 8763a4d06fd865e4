"""The sections of a report: guarantee, budget, topics, completion errors, provenance.

Each ``add_*`` function appends one section to a :class:`~dptensor.report.page.ReportPage` from
what it is given. The callers (the CLI, a notebook) decide what may be shown: on a private fit
only released quantities, public sizes and held-out data that is not the private training set.
"""

from __future__ import annotations

import math
import platform
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from dptensor.models.topics.private_whitening import whitening_subspace_rule
from dptensor.privacy.guarantee import releases_phrase
from dptensor.report.page import ReportPage
from dptensor.report.plots import (
    plot_budget,
    plot_error_by_count,
    plot_intertopic_map,
    plot_topics,
    topic_distributions,
    topic_prevalence,
)

__all__ = [
    "COUNT_BUCKETS",
    "add_budget",
    "add_completion_errors",
    "add_guarantee",
    "add_heldout_topics",
    "add_provenance",
    "add_topics",
    "add_vocabulary",
    "add_whitening",
    "guarantee_sentences",
]

#: Buckets of "how many training ratings a user (item) has", fixed in advance (public).
COUNT_BUCKETS = ((1, 5), (6, 20), (21, 100), (101, math.inf))


def _as_dict(guarantee: Any) -> dict[str, Any] | None:
    if guarantee is None:
        return None
    if isinstance(guarantee, Mapping):
        return dict(guarantee)
    return guarantee.to_dict()


def _number(value: Any, spec: str = "g") -> str:
    """A number as text; a model file's JSON may hold ``"nan"``/``"inf"`` strings or ``None``."""
    try:
        return format(float(value), spec)
    except (TypeError, ValueError):
        return str(value)


def guarantee_sentences(guarantee: Any) -> list[str]:
    """The guarantee in plain words, one sentence a line (``None``: not private).

    ``guarantee`` is a :class:`~dptensor.privacy.PrivacyGuarantee` or its ``to_dict()``.
    """
    g = _as_dict(guarantee)
    if g is None:
        return ["Not private: no privacy mechanism was applied. Everything on this page is computed from "
                "the data without noise; do not share it where the data may not go."]
    relation = g.get("neighbouring")
    if not g.get("holds", True):
        nominal = g.get("nominal_epsilon")
        asked = "" if nominal is None else f" of epsilon = {_number(nominal)}"
        return [f"NOT PRIVATE. The {g.get('claim', 'paper')} claim{asked} (delta = {_number(g['delta'])}) "
                f"under the "
                f"'{relation}' relation does not hold: {g.get('reason', '')}",
                "Treat everything on this page as computed from the data without a privacy guarantee."]
    epsilon, delta = _number(g["epsilon"]), _number(g["delta"])
    lines = [
        f"The release is ({epsilon}, {delta})-differentially private under the '{relation}' "
        "neighbouring relation: changing one protected unit of the data changes the probability of any "
        f"output by at most a factor e^{epsilon}, except with probability {delta}.",
    ]
    if g.get("protected"):
        lines.append(f"Protected (what one neighbouring change may be): {g['protected']}.")
    if g.get("public"):
        lines.append(f"Public (not protected): {g['public']}.")
    multiplier = _number(g.get("noise_multiplier"), ".4g")
    lines.append(
        f"Mechanism: {releases_phrase(g.get('n_releases', 0), g.get('mechanism'))}"
        + (f", noise multiplier {multiplier}" if multiplier not in ("nan", "None") else "")
        + f"; accountant '{g.get('accountant')}' (exact epsilon of the noise added: "
        f"{_number(g.get('epsilon_exact'), '.4g')})."
    )
    return lines


def add_guarantee(page: ReportPage, guarantee: Any) -> ReportPage:
    """Section "Privacy guarantee": holds or not (and why), relation, protected/public, epsilon, delta."""
    page.heading("Privacy guarantee")
    g = _as_dict(guarantee)
    status = "not private" if g is None else ("holds" if g.get("holds", True) else "does NOT hold")
    page.paragraph(f"Guarantee: {status}", css="holds" if g is not None and g.get("holds", True) else "fails")
    for line in guarantee_sentences(guarantee):
        page.paragraph(line)
    if g is not None:
        keys = ("epsilon", "delta", "neighbouring", "accountant", "mechanism", "n_releases",
                "noise_multiplier")
        page.table(["quantity", "value"], [(key, _readable(key, g.get(key))) for key in keys])
    return page


def _readable(key: str, value: Any) -> Any:
    """A guarantee's value for the table: a composed guarantee has no single noise multiplier (NaN;
    ``"nan"`` once read back from a model file's JSON)."""
    if _number(value) == "nan":  # a float NaN, or the "nan" string of a model file's JSON
        return "several (one per release)" if key == "noise_multiplier" else "not defined"
    return value


def add_vocabulary(
    page: ReportPage, asked: int, released: int, predicted: float | None, guarantee: Any
) -> ReportPage:
    """Section "Private vocabulary": words asked, released and predicted, and the vocabulary's guarantee.

    ``asked`` (``--private-vocab V``), ``predicted`` (the planner's expected size, public inputs
    only) and ``released`` (the size of the DP release, itself released) are all public.
    """
    page.heading("Private vocabulary")
    page.paragraph(f"The vocabulary was chosen from the private documents under differential privacy "
                   f"(Gaussian partition selection): {released} of the {asked} words asked for passed the "
                   "noisy threshold and were released.")  # fmt: skip
    rows: list[tuple[str, object]] = [("words asked", asked), ("words released", released)]
    if predicted is not None:
        rows.append(("words predicted by the planner (before the release)", round(predicted)))
    page.table(["", "words"], rows)
    sentences = guarantee_sentences(guarantee)
    if sentences:
        page.paragraph("Vocabulary guarantee: " + " ".join(sentences))
    return page


def add_budget(
    page: ReportPage, before: Mapping[str, Any] | None, after: Mapping[str, Any], charges: Sequence[Any] = ()
) -> ReportPage:
    """Section "Privacy budget": a ledger's budget, spent and left before and after this run.

    ``before``/``after`` are :meth:`BudgetLedger.summary` dictionaries; ``charges`` its
    :meth:`~dptensor.privacy.BudgetLedger.charges`, drawn with :func:`plot_budget`.
    """
    page.heading("Privacy budget")
    dataset = after.get("dataset")
    page.paragraph(
        f"Ledger {after['path']}" + (f" (data set '{dataset}')" if dataset else "")
        + f": budget epsilon = {after['epsilon']:g}, delta = {after['delta']:g}, composed exactly "
        f"(accountant '{after.get('accountant')}')."
    )
    rows = []
    for name, summary in (("before this run", before), ("after this run", after)):
        if summary is not None:
            rows.append((name, summary["n_charges"], summary["spent_epsilon"], summary["left_epsilon"]))
    page.table(["", "charges", "epsilon spent", "epsilon left"], rows)
    page.figure(plot_budget(charges, budget=after["epsilon"]), "epsilon spent over time, by caller")
    return page


def add_topics(
    page: ReportPage, model: Any, vocabulary: Sequence[str] | None, *, top: int = 10
) -> ReportPage:
    """Section "Topics": top-word bars, prevalence and the intertopic distance map (LDAvis-style)."""
    page.heading("Topics")
    page.paragraph("Each chart shows a topic's most probable words and their probabilities; the title gives "
                   "the topic's prevalence (its share of the corpus as the model estimates it).")
    page.figure(plot_topics(model, vocabulary, top=top), f"top {top} words of each topic")
    topics, prevalence = topic_distributions(model), topic_prevalence(model)
    rows = []
    for t, row in enumerate(topics):
        order = np.argsort(-row, kind="stable")[: min(top, row.size)]
        words = " ".join(str(vocabulary[j]) if vocabulary is not None else str(j) for j in order)
        rows.append((f"topic {t + 1}", f"{100 * prevalence[t]:.1f}%", words))
    page.table(["topic", "prevalence", f"top {top} words"], rows)
    page.figure(plot_intertopic_map(model),
                "intertopic distance map: classical MDS of the Jensen-Shannon distances between topics; "
                "circle area ~ prevalence")
    return page


def add_whitening(page: ReportPage, model: Any) -> ReportPage:
    """Section "Whitening" of a private spectral fit: how much of each ``M2`` direction survived its noise.

    Reads ``model.whitening_alignment_`` (post-processing of the release; nothing is added when the
    model has none) and ``model.whitening_subspace`` (a parameter). The wording depends on
    parameters only, so neighbouring corpora give the same text up to the released numbers. A fit
    whose topics come from the ``M2`` release's non-negative factor (``topic_recovery_ == "nmf"``,
    decided by parameters and public sizes) has no whitening: a section "Topic recovery" says so, and
    whether the parameter ``topic_recovery`` asked for it or ``"auto"`` chose it.
    """
    alignment = getattr(model, "whitening_alignment_", None)
    if alignment is None:
        if getattr(model, "topic_recovery_", None) == "nmf":
            page.heading("Topic recovery")
            chosen = (
                "The planner chose it from public sizes, predicting too little signal for the third-moment "
                "step" if getattr(model, "topic_recovery", "auto") == "auto" else "It was asked for"
            )
            page.paragraph(
                "The topics are a non-negative factor of the released second moment on the most frequent "
                "words (topic_recovery='nmf'): no whitening and no third-moment release, the budget went to "
                f"the word frequencies and the second moment. {chosen} (docs/lda.md, Topics from the "
                "co-occurrences' non-negative factor)."
            )
        return page
    alignment = np.asarray(alignment, dtype=np.float64)
    page.heading("Whitening")
    resolved = int(np.count_nonzero(alignment > 0))
    page.paragraph(
        f"{resolved} of {alignment.size} directions of the released second moment's top eigenvectors rose "
        "above its noise. Each direction's estimated alignment is the squared cosine between the released "
        "eigenvector and the un-noised one (spiked Wigner model, computed from the released eigenvalues "
        "and the public noise scale); near 0 the direction is noise, and the topics that depend on it are "
        "mostly noise (docs/lda.md, How many topics the release can resolve)."
    )
    subspace = getattr(model, "whitening_subspace", "eigen")
    rule = whitening_subspace_rule(subspace)
    page.paragraph(f"{rule[0].upper()}{rule[1:]} (whitening_subspace={subspace!r}).", css="note")
    page.table(["direction", "estimated alignment"],
               [(f"direction {i + 1}", f"{value:.2f}") for i, value in enumerate(alignment)])  # fmt: skip
    return page


def add_heldout_topics(
    page: ReportPage,
    model: Any,
    test: sp.spmatrix | None,
    *,
    train: sp.spmatrix | None = None,
    unigram_note: str = "",
    top: int = 10,
    random_state: int = 0,
) -> ReportPage:
    """Section "Held-out evaluation": perplexity and NPMI coherence on a test corpus, with baselines.

    :mod:`dptensor.evaluation`: document-completion perplexity (Wallach et al. 2009, Section 4.3;
    the test documents split by :func:`~dptensor.evaluation.split_documents` with the public seed
    ``random_state``) and NPMI (:func:`~dptensor.evaluation.topic_npmi`) on the test corpus.
    Baselines on the same held-out tokens: the uniform model (perplexity = vocabulary size, public)
    and, when ``train`` counts are given (non-private fits only: it reads them without noise), the
    unigram model. ``unigram_note`` says why a unigram baseline is missing.
    """
    from dptensor.evaluation import completion_perplexity, split_documents, topic_npmi, unigram_perplexity

    page.heading("Held-out evaluation")
    if test is None:
        page.paragraph("No test corpus given (--test CORPUS with dptensor report, --report-test CORPUS "
                       "where a fit command offers it): no perplexity or coherence.")
        return page
    test = sp.csr_matrix(test)
    split = split_documents(test, random_state=random_state)
    rows = []
    if hasattr(model, "transform"):
        rows.append(("this model", completion_perplexity(model, split)))
    rows.append(("uniform baseline (1/d per word)", float(test.shape[1])))
    if train is not None:
        rows.append(("unigram baseline (training word frequencies)", unigram_perplexity(train, split)))
    page.paragraph(f"Test corpus: {test.shape[0]} documents, {int(test.sum())} tokens (held out, not "
                   "private). "
                   "Perplexity: each test document's topic proportions are inferred from a random half of "
                   "its tokens and the other half is scored.")
    page.table(["model", "document-completion perplexity (lower is better)"], rows)
    if train is None and unigram_note:
        page.paragraph(unigram_note, css="note")
    coherence = topic_npmi(model, test, n_top=min(top, test.shape[1]))
    page.table(["topic", f"NPMI coherence of the top {top} words on the test corpus (higher is better)"],
               [(t + 1, float(c)) for t, c in enumerate(coherence)] + [("mean", float(coherence.mean()))])
    return page


def _bucket_labels() -> list[str]:
    return [f"{lo}-{hi}" if math.isfinite(hi) else f">{lo - 1}" for lo, hi in COUNT_BUCKETS]


def add_completion_errors(
    page: ReportPage,
    test_indices: np.ndarray,
    test_values: np.ndarray,
    predictions: Mapping[str, np.ndarray],
    train_indices: np.ndarray | None,
) -> ReportPage:
    """Section "Held-out error": RMSE of each prediction set, overall and by training ratings per user/item.

    ``predictions`` maps a name ("this model", "mean baseline", ...) to predictions at
    ``test_indices``; ``train_indices`` (the observed training indices) give each user's (mode 0)
    and item's (mode 1) number of ratings, bucketed by :data:`COUNT_BUCKETS`; without them the
    breakdown is left out.
    """
    page.heading("Held-out error")
    values = np.asarray(test_values, dtype=np.float64)
    indices = np.asarray(test_indices)

    def rmse(pred: np.ndarray, mask: np.ndarray | slice = slice(None)) -> float:
        diff = np.asarray(pred, dtype=np.float64)[mask] - values[mask]
        return float(np.sqrt(np.mean(diff**2))) if diff.size else float("nan")

    page.table(["predictions", "test RMSE", "test entries"],
               [(name, rmse(pred), len(values)) for name, pred in predictions.items()])
    if train_indices is None:
        return page
    labels = _bucket_labels()
    for mode, who in ((0, "user"), (1, "item")):
        counts = np.bincount(np.asarray(train_indices)[:, mode], minlength=int(indices[:, mode].max()) + 1)
        per_entry = counts[indices[:, mode]]
        masks = [(per_entry >= lo) & (per_entry <= hi) for lo, hi in COUNT_BUCKETS]
        series = {name: [rmse(pred, m) for m in masks] for name, pred in predictions.items()}
        rows = [(label, int(m.sum()), *(series[name][b] for name in predictions))
                for b, (label, m) in enumerate(zip(labels, masks, strict=True))]
        page.paragraph(f"By the number of training ratings of the test entry's {who} "
                       f"({who}s with none fall in no bucket).")
        page.table([f"ratings per {who}", "test entries", *predictions], rows)
        page.figure(plot_error_by_count(labels, series, title=f"held-out RMSE by ratings per {who}"),
                    f"held-out RMSE by the number of training ratings per {who}")
    return page


def add_provenance(
    page: ReportPage, argv: Sequence[str] | None, started: str, *, note: str = ""
) -> ReportPage:
    """Section "Reproduce": the command, the versions of dptensor and its libraries, and the time."""
    import matplotlib
    import scipy
    import sklearn

    from dptensor._version import __version__

    page.heading("Reproduce")
    if argv is not None:
        page.paragraph("Command:")
        page.code(shlex.join(["dptensor", *argv]))
    versions = [("dptensor", __version__), ("python", platform.python_version()), ("numpy", np.__version__),
                ("scipy", scipy.__version__), ("scikit-learn", sklearn.__version__),
                ("matplotlib", matplotlib.__version__), ("platform", sys.platform)]
    page.table(["software", "version"], versions)
    page.paragraph(f"Started: {started} (UTC)." + (f" {note}" if note else ""))
    return page
