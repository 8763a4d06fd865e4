"""match_first_moment: LDA's first-moment identity restored exactly by Bayes' rule (brute force)."""

from __future__ import annotations

import numpy as np
import pytest

from dptensor.models.topics.moment_matching import match_first_moment


def _random_inputs(k: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    topics = rng.dirichlet(np.full(d, 0.3), size=k) + 1e-9
    topics /= topics.sum(axis=1, keepdims=True)
    return topics, rng.dirichlet(np.ones(k)), rng.dirichlet(np.full(d, 0.5))


@pytest.mark.parametrize("seed", range(5))
def test_the_mixture_equals_the_target_and_the_topic_posterior_is_kept(seed: int) -> None:
    topics, weights, unigram = _random_inputs(4, 25, seed)
    new_topics, new_weights = match_first_moment(topics, weights, unigram)
    np.testing.assert_allclose(new_weights @ new_topics, unigram, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(new_topics.sum(axis=1), 1.0, rtol=1e-12)
    assert new_weights.sum() == pytest.approx(1.0) and np.all(new_weights > 0) and np.all(new_topics > 0)
    # Bayes' rule: p(topic | word) is the same before and after, only the word marginal changed
    before = weights[:, None] * topics / (weights @ topics)[None, :]
    after = new_weights[:, None] * new_topics / (new_weights @ new_topics)[None, :]
    np.testing.assert_allclose(after, before, rtol=1e-9)


def test_topics_that_already_satisfy_the_identity_are_unchanged() -> None:
    topics, weights, _ = _random_inputs(3, 12, 7)
    new_topics, new_weights = match_first_moment(topics, weights, weights @ topics)
    np.testing.assert_allclose(new_topics, topics, rtol=1e-12)
    np.testing.assert_allclose(new_weights, weights, rtol=1e-12)


def test_one_topic_becomes_the_target() -> None:
    topics, _, unigram = _random_inputs(1, 8, 3)
    new_topics, new_weights = match_first_moment(topics, np.ones(1), unigram)
    np.testing.assert_allclose(new_topics[0], unigram, rtol=1e-12)
    assert new_weights.tolist() == [1.0]


def test_bad_inputs_are_refused() -> None:
    topics, weights, unigram = _random_inputs(3, 6, 0)
    with pytest.raises(ValueError, match="positive"):
        match_first_moment(np.where(topics > topics.mean(), topics, 0.0), weights, unigram)
    with pytest.raises(ValueError, match=r"\(k, d\)"):
        match_first_moment(topics, weights[:2], unigram)
    with pytest.raises(ValueError, match="weights"):
        match_first_moment(topics, -weights, unigram)
    with pytest.raises(ValueError, match="unigram"):
        match_first_moment(topics, weights, np.zeros(6))


def test_spectral_lda_matches_its_topics_to_the_corpus_first_moment() -> None:
    from dptensor.datasets.lda import make_lda_corpus
    from dptensor.evaluation import completion_perplexity, split_documents
    from dptensor.models import SpectralLDA

    corpus = make_lda_corpus(3000, 40, 3, alpha=0.2, doc_length=30, random_state=0)
    model = SpectralLDA(3, 0.6, random_state=0, refine=None).fit(corpus.counts)  # matching: moment topics
    counts = corpus.counts.toarray()
    counts = counts[counts.sum(axis=1) >= 3]  # the documents that enter the moments
    m1 = (counts / counts.sum(axis=1, keepdims=True)).mean(axis=0)  # Lemma 21, eq. (5), by hand
    np.testing.assert_allclose(model.unigram_, m1, rtol=1e-10)
    streamed = SpectralLDA(3, 0.6, random_state=0).partial_fit(corpus.counts[:1500])
    streamed.partial_fit(corpus.counts[1500:])
    np.testing.assert_allclose(streamed.unigram_, m1, rtol=1e-10)
    prior = model.document_topic_prior()
    s, d = model.smoothing, 40
    assert prior.sum() == pytest.approx(0.6)
    mixture = prior / 0.6 @ model.topic_word_distribution()
    np.testing.assert_allclose(mixture, (1 - s) * m1 + s / d, rtol=1e-10)
    plain = SpectralLDA(3, 0.6, random_state=0, match_unigram=False, refine=None).fit(corpus.counts)
    np.testing.assert_array_equal(plain.components_, model.components_)  # inference only
    np.testing.assert_allclose(plain.document_topic_prior(), plain.alpha_)
    test = make_lda_corpus(300, 40, 3, alpha=0.2, doc_length=30, topics=corpus.topics, random_state=1)
    split = split_documents(test.counts, random_state=0)
    # topics close to the truth already nearly satisfy the identity: matching changes little here
    assert completion_perplexity(model, split) == pytest.approx(completion_perplexity(plain, split), rel=0.02)


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_saved_spectral_lda_keeps_its_matching_and_old_files_keep_theirs(tmp_path, suffix) -> None:
    import json

    import scipy.sparse as sp

    from dptensor.cli.lda import load_model, save_model
    from dptensor.datasets.corpus import Corpus
    from dptensor.datasets.lda import make_lda_corpus
    from dptensor.models import SpectralLDA

    corpus = make_lda_corpus(2000, 30, 3, alpha=0.2, doc_length=30, random_state=0)
    model = SpectralLDA(3, 0.6, random_state=0).fit(corpus.counts)
    path = tmp_path / f"model{suffix}"
    save_model(path, model, Corpus(sp.csr_matrix(corpus.counts), [f"w{i}" for i in range(30)], "test"))
    loaded, _ = load_model(path)
    assert loaded.match_unigram
    np.testing.assert_allclose(loaded.components_, model.components_)  # the refined topics
    np.testing.assert_allclose(loaded.refinement_.doc_topic_prior, model.refinement_.doc_topic_prior)
    assert loaded.refinement_.n_passes == model.refinement_.n_passes
    np.testing.assert_allclose(loaded.unigram_, model.unigram_)
    np.testing.assert_allclose(loaded.transform(corpus.counts[:20]), model.transform(corpus.counts[:20]))
    np.testing.assert_allclose(loaded.document_topic_prior(), model.document_topic_prior())
    if suffix == ".json":  # a file written before match_unigram and refinement: no such parameters
        data = json.loads(path.read_text())
        del data["params"]["match_unigram"], data["unigram"]
        for key in ("refine", "refine_max_passes", "refine_tol", "topic_word_prior"):
            del data["params"][key]
        del data["doc_topic_prior"], data["refinement"]
        path.write_text(json.dumps(data))
        old, _ = load_model(path)
        assert not old.match_unigram and old.unigram_ is None
        assert old.refine is None and old.refinement_ is None  # its components are moment topics
        np.testing.assert_allclose(old.document_topic_prior(), model.alpha_)
