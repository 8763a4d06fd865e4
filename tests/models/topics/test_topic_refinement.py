"""CVB0 refinement of the moment topics (issue 35): a brute-force reference, ground truth, backends."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from _helpers import topic_l1_error

from dptensor.datasets.lda import make_lda_corpus
from dptensor.evaluation import completion_perplexity, split_documents
from dptensor.models import SpectralLDA
from dptensor.models.topics.refinement import fold_in, refine_topics
from dptensor.parallel import as_local_blocks


def _reference_pass(counts: np.ndarray, topics: np.ndarray, alpha: np.ndarray, sweeps: int):
    """One CVB0 pass written token by token (every copy of a word its own token), no shortcuts.

    Returns the word-topic expected counts (``d x k``), each document's ``(N + alpha) / (L + alpha0)``
    and the leave-one-out log-likelihood summed over the last sweep's tokens.
    """
    n_docs, d = counts.shape
    k = topics.shape[0]
    word_counts = np.zeros((d, k))
    theta = np.zeros((n_docs, k))
    log_lik = scored = 0.0
    for n in range(n_docs):
        words = [w for w in range(d) for _ in range(int(counts[n, w]))]
        length = len(words)
        # one responsibility per distinct word, shared by its copies (the sweep visits words in order)
        distinct = sorted(set(words))
        gamma = {w: alpha * topics[:, w] / np.sum(alpha * topics[:, w]) for w in distinct}
        doc_topic = sum((counts[n, w] * gamma[w] for w in distinct), np.zeros(k))
        for sweep in range(sweeps):
            for w in distinct:
                c = counts[n, w]
                weights = (np.maximum(doc_topic - gamma[w], 0) + alpha) * topics[:, w]
                if sweep == sweeps - 1 and length > 1:
                    log_lik += c * math.log(weights.sum() / (length - 1 + alpha.sum()))
                    scored += c
                new = weights / weights.sum()
                doc_topic = doc_topic + c * (new - gamma[w])
                gamma[w] = new
        for w in distinct:
            word_counts[w] += counts[n, w] * gamma[w]
        theta[n] = (doc_topic + alpha) / (length + alpha.sum())
    return word_counts, theta, log_lik, scored


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(3)
    counts = rng.poisson(0.6, size=(25, 12)).astype(float)
    counts[4] = 0  # an empty document
    counts[7] = 0
    counts[7, 2] = 1  # a one-token document: nothing to score it by
    topics = rng.dirichlet(np.ones(12), size=3)
    alpha = np.array([0.3, 0.1, 0.6])
    return counts, topics, alpha


def test_one_pass_matches_the_token_by_token_reference(small) -> None:
    counts, topics, alpha = small
    beta = 0.05
    expected_counts, expected_theta, log_lik, scored = _reference_pass(counts, topics, alpha, sweeps=3)
    result = refine_topics(as_local_blocks(sp.csr_matrix(counts)), topics, alpha,
                           topic_word_prior=beta, max_passes=1, sweeps=3)  # fmt: skip
    expected_topics = (expected_counts + beta) / (expected_counts + beta).sum(axis=0)
    np.testing.assert_allclose(result.topics, expected_topics.T, rtol=1e-12)
    np.testing.assert_allclose(result.log_likelihood, [log_lik / scored], rtol=1e-12)
    assert result.n_passes == 1 and not result.converged
    theta = fold_in(sp.csr_matrix(counts), topics, alpha, max_sweeps=3, tol=0.0)
    np.testing.assert_allclose(theta, expected_theta, rtol=1e-12)
    np.testing.assert_allclose(theta[4], alpha / alpha.sum())  # no tokens: the prior mean


def test_blocks_on_threads_sum_to_the_single_block_result(small) -> None:
    counts, topics, alpha = small
    X = sp.csr_matrix(counts)
    one = refine_topics(as_local_blocks(X), topics, alpha, max_passes=3, tol=0.0)
    four = refine_topics(as_local_blocks(X, n_jobs=2, n_blocks=4), topics, alpha, max_passes=3, tol=0.0)
    np.testing.assert_allclose(four.topics, one.topics, rtol=1e-12)
    np.testing.assert_allclose(four.log_likelihood, one.log_likelihood, rtol=1e-12)


def test_refine_topics_refuses_bad_priors(small) -> None:
    counts, topics, alpha = small
    blocks = as_local_blocks(sp.csr_matrix(counts))
    with pytest.raises(ValueError, match="topic_word_prior"):
        refine_topics(blocks, topics, alpha, topic_word_prior=0.0)
    with pytest.raises(ValueError, match="doc_topic_prior"):
        refine_topics(blocks, topics, alpha[:2])
    silent_word = topics.copy()
    silent_word[:, 0] = 0.0  # a word no topic can produce: CVB0 would divide by zero
    with pytest.raises(ValueError, match="every word possible"):
        refine_topics(blocks, silent_word, alpha)
    huge = np.zeros_like(counts)
    huge[:4, 0] = 1.5e308  # four documents of one word: the word's expected counts pass float64's range
    huge = sp.csr_matrix(huge)
    with pytest.raises(ValueError, match="overflowed"):
        refine_topics(as_local_blocks(huge), topics, alpha, max_passes=1)


@pytest.fixture(scope="module")
def lda_corpus():
    return make_lda_corpus(2000, 200, 5, alpha=0.1, doc_length=10, random_state=0)


def test_refinement_moves_the_moment_topics_toward_the_truth_and_lowers_perplexity(lda_corpus) -> None:
    test = make_lda_corpus(600, 200, 5, alpha=0.1, doc_length=10, topics=lda_corpus.topics, random_state=10)
    split = split_documents(test.counts, random_state=0)
    moments = SpectralLDA(5, 0.5, random_state=0, refine=None).fit(lda_corpus.counts)
    refined = SpectralLDA(5, 0.5, random_state=0).fit(lda_corpus.counts)
    np.testing.assert_array_equal(refined.moment_components_, moments.components_)
    assert moments.refinement_ is None
    # short documents, few of them: the moments' error is large, and refinement removes a quarter of it
    assert topic_l1_error(lda_corpus.topics, refined.components_) < 0.85 * topic_l1_error(
        lda_corpus.topics, moments.components_
    )
    assert completion_perplexity(refined, split) < completion_perplexity(moments, split)
    record = refined.refinement_
    assert 2 <= record.n_passes <= refined.refine_max_passes
    assert record.converged
    assert np.all(np.diff(record.log_likelihood) > 0)  # every pass scores better than the last
    np.testing.assert_allclose(refined.components_.sum(axis=1), 1.0)
    assert "refinement" in refined.timings_
    # transform folds in with the refined topics and the prior refinement used
    theta = refined.transform(test.counts[:50])
    expected = fold_in(sp.csr_matrix(test.counts[:50], dtype=float), refined.components_,
                       record.doc_topic_prior, max_sweeps=refined.transform_max_iter,
                       tol=refined.transform_tol)  # fmt: skip
    np.testing.assert_allclose(theta, expected)
    np.testing.assert_array_equal(refined.topic_word_distribution(), refined.components_)
    np.testing.assert_array_equal(refined.document_topic_prior(), record.doc_topic_prior)


def test_refinement_is_the_same_on_threads(lda_corpus) -> None:
    one = SpectralLDA(5, 0.5, random_state=0).fit(lda_corpus.counts)
    two = SpectralLDA(5, 0.5, random_state=0, n_jobs=2).fit(lda_corpus.counts)
    np.testing.assert_allclose(two.moment_components_, one.moment_components_, atol=1e-8)
    np.testing.assert_allclose(two.components_, one.components_, atol=1e-6)


def test_refinement_options(lda_corpus) -> None:
    capped = SpectralLDA(5, 0.5, random_state=0, refine_max_passes=2, refine_tol=0.0).fit(lda_corpus.counts)
    assert capped.refinement_.n_passes == 2 and not capped.refinement_.converged
    assert capped.refinement_.topic_word_prior == 0.01
    with pytest.raises(ValueError, match="topic_word_prior"):
        SpectralLDA(5, topic_word_prior=0.0).fit(lda_corpus.counts)
    with pytest.raises(ValueError, match="refine"):
        SpectralLDA(5, refine="gibbs").fit(lda_corpus.counts)


def test_verbose_refinement_reports_each_pass(lda_corpus, capsys) -> None:
    SpectralLDA(5, 0.5, random_state=0, refine_max_passes=2, verbose=True).fit(lda_corpus.counts)
    err = capsys.readouterr().err
    assert "refinement (CVB0" in err and "pass 1: leave-one-out log-likelihood per token" in err


def test_cli_fit_refines_unless_told_not_to(tmp_path, capsys) -> None:
    import json

    from dptensor.cli import main
    from dptensor.datasets.corpus import write_uci_bow

    corpus = make_lda_corpus(1500, 40, 3, alpha=0.2, doc_length=20, random_state=0)
    docword = tmp_path / "docword.toy.txt"
    write_uci_bow(corpus.counts, docword, [f"w{i}" for i in range(40)])
    for extra, refined in (([], True), (["--no-refine"], False)):
        out = tmp_path / f"model{len(extra)}.json"
        argv = ["lda", "fit", str(docword), "--topics", "3", "--seed", "0", "--out", str(out), *extra]
        assert main(argv) == 0
        err = capsys.readouterr().err
        saved = json.loads(out.read_text())
        assert saved["params"]["refine"] == ("cvb0" if refined else None)
        assert ("refinement" in saved) is refined and ("refinement (CVB0" in err) is refined
        if refined:
            assert saved["refinement"]["n_passes"] >= 1
