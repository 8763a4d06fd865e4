"""The real-text benchmark's parsing and summary logic (no corpus needed; benchmarks/ is not a package)."""

from __future__ import annotations

import sys

import pytest
from _helpers import load_benchmark

load = load_benchmark


def test_debian_stanzas_keep_continuation_lines_and_drop_paragraph_marks():
    corpora = load("_corpora")
    text = (
        "Package: a\nDescription-md5: 1\nDescription-en: first line\n more text\n .\n last para\n\n"
        "Package: b\nDescription: short only\nHomepage: x\n Tag: not a continuation of Description\n\n"
        "Package: c\nVersion: 1\n"
    )
    assert corpora._stanza_descriptions(text) == ["first line more text last para", "short only"]


def test_wordnet_glosses_are_the_text_after_the_bar(tmp_path):
    corpora = load("_corpora")
    for pos in ("noun", "verb", "adj", "adv"):
        (tmp_path / f"data.{pos}").write_text(
            "  1 licence header | not a gloss\n"
            f"00001740 03 n 01 {pos} 0 000 | a {pos} gloss; \"an example\"  \n"
        )
    glosses = corpora.wordnet_glosses(tmp_path)
    assert glosses == ['a noun gloss; "an example"', 'a verb gloss; "an example"',
                       'a adj gloss; "an example"', 'a adv gloss; "an example"']  # fmt: skip
    with pytest.raises(corpora.CorpusUnavailable, match="apt-get install wordnet-base"):
        corpora.wordnet_glosses(tmp_path / "missing")


def test_scaling_summary_finds_the_first_size_at_90_percent():
    bench = load("bench_private_topics")
    rows = [
        {"n_documents": 10, "method": "spectral", "epsilon": None, "npmi": 0.10},
        {"n_documents": 10, "method": "private-spectral", "epsilon": 1.0, "npmi": 0.05, "topic_l1": 1.0},
        {"n_documents": 100, "method": "spectral", "epsilon": None, "npmi": 0.10},
        {"n_documents": 100, "method": "private-spectral", "epsilon": 1.0, "npmi": 0.091, "topic_l1": 0.4},
        {"n_documents": 1000, "method": "spectral", "epsilon": None, "npmi": 0.12},
        {"n_documents": 1000, "method": "private-spectral", "epsilon": 1.0, "npmi": 0.12, "topic_l1": 0.2},
        {"n_documents": 1000, "method": "private-spectral", "epsilon": 4.0, "error": "ValueError: x"},
    ]
    summary = bench.scaling_summary(rows, [1.0, 4.0])
    assert summary["1"] == {"n_for_90pct_npmi": 100, "largest_n": 1000, "topic_l1_at_largest_n": 0.2,
                            "target_topic_l1": 0.3}  # fmt: skip
    assert summary["4"]["n_for_90pct_npmi"] is None and summary["4"]["topic_l1_at_largest_n"] is None


def test_planner_hook_passes_public_quantities_to_the_planner(monkeypatch):
    import types

    bench = load("bench_private_topics")
    calls = []

    def plan_private_lda(n_documents, n_words, n_components, alpha0, epsilon, delta, *, typical_length=None,
                         whitening_words="auto"):
        calls.append((n_documents, n_words, n_components, alpha0, epsilon, delta, typical_length))
        return types.SimpleNamespace(snr=0.5, verdict="no better than noise")

    fake = types.ModuleType("dptensor.models.topics.plan")
    fake.plan_private_lda = plan_private_lda
    monkeypatch.setitem(sys.modules, "dptensor.models.topics.plan", fake)
    got = bench.planner_prediction(n_documents=1000, vocab_size=50, n_topics=5, alpha0=0.8, epsilon=1.0,
                                   delta=1e-6, typical_length=2.0)  # fmt: skip
    assert got == "snr 0.50: no better than noise"
    assert calls == [(1000, 50, 5, 0.8, 1.0, 1e-6, 3.0)]  # lengths below 3 tokens are raised to 3
