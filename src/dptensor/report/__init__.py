"""Reports a person can open: one self-contained HTML page per fit, and the pictures in it.

The experiments/CLI layer: models never import this package. A notebook gets the same pictures
(:func:`plot_topics`, :func:`plot_intertopic_map`, :func:`plot_budget`) and pages
(:func:`topic_report`, :class:`ReportPage` with the ``add_*`` sections) as ``--report FILE.html``.

Examples
--------
>>> from dptensor.datasets import make_lda_corpus
>>> from dptensor.models import SpectralLDA
>>> corpus = make_lda_corpus(300, 40, 3, alpha=0.2, random_state=0)
>>> model = SpectralLDA(3, alpha0=0.6, random_state=0).fit(corpus.counts)
>>> page = topic_report(model, None, title="three topics")
>>> "intertopic distance map" in page.to_html()
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import scipy.sparse as sp

from dptensor.report.page import ReportPage
from dptensor.report.plots import (
    intertopic_coordinates,
    plot_budget,
    plot_error_by_count,
    plot_intertopic_map,
    plot_topics,
    topic_distributions,
    topic_prevalence,
)
from dptensor.report.sections import (
    add_budget,
    add_completion_errors,
    add_guarantee,
    add_heldout_topics,
    add_provenance,
    add_topics,
    add_vocabulary,
    add_whitening,
    guarantee_sentences,
)

__all__ = [
    "ReportPage",
    "add_budget",
    "add_completion_errors",
    "add_guarantee",
    "add_heldout_topics",
    "add_provenance",
    "add_topics",
    "add_vocabulary",
    "add_whitening",
    "guarantee_sentences",
    "intertopic_coordinates",
    "plot_budget",
    "plot_error_by_count",
    "plot_intertopic_map",
    "plot_topics",
    "topic_distributions",
    "topic_prevalence",
    "topic_report",
]


def topic_report(
    model: Any,
    vocabulary: Sequence[str] | None,
    *,
    title: str = "dptensor topic model report",
    test: sp.spmatrix | None = None,
    train: sp.spmatrix | None = None,
    unigram_note: str = "",
    top: int = 10,
    guarantee: Any = None,
) -> ReportPage:
    """A topic model's page: guarantee (``model.guarantee_``), topics, map, whitening, held-out evaluation.

    Parameters
    ----------
    model : fitted topic model
        SpectralLDA, PrivateSpectralLDA, DPVariationalLDA or SingleTopicModel.
    vocabulary : sequence of str or None
        Word of each column.
    title : str
        The page title.
    test : sparse matrix, optional
        Held-out documents x words counts: per-word perplexity and NPMI coherence.
    train, unigram_note
        Training counts for the unigram baseline (non-private fits only), or why there is none;
        see :func:`add_heldout_topics`.
    top : int, default 10
        Words per topic.
    guarantee : PrivacyGuarantee or dict, optional
        The guarantee to state (default ``model.guarantee_``; e.g. a composed total).

    Returns
    -------
    ReportPage
        Add budget or provenance sections, then :meth:`ReportPage.write` it.
    """
    page = ReportPage(title)
    add_guarantee(page, guarantee if guarantee is not None else getattr(model, "guarantee_", None))
    add_topics(page, model, vocabulary, top=top)
    add_whitening(page, model)
    if test is not None or hasattr(model, "perplexity"):
        add_heldout_topics(page, model, test, train=train, unigram_note=unigram_note, top=top)
    return page
