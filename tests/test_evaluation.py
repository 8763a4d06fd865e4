"""Evaluation on text: completion perplexity, the unigram baseline and NPMI against brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor import DPVariationalLDA, SpectralLDA
from dptensor.datasets.lda import make_lda_corpus
from dptensor.evaluation import (
    CompletionSplit,
    completion_perplexity,
    split_documents,
    top_word_indices,
    topic_npmi,
    topic_word_distribution,
    unigram_perplexity,
    word_set_npmi,
)
from dptensor.models.topics.dp_vi_options import DPVIOptions


@pytest.fixture(scope="module")
def corpus():
    return make_lda_corpus(3000, 60, 4, alpha=0.1, doc_length=40, topic_concentration=0.05, random_state=3)


def small_counts(seed: int = 0, n_docs: int = 12, n_words: int = 7) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    dense = rng.poisson(0.8, size=(n_docs, n_words)).astype(float)
    dense[0] = 0.0  # an empty document
    dense[1] = 0.0
    dense[1, 2] = 1.0  # a one-token document
    return sp.csr_matrix(dense)


# -- split ---------------------------------------------------------------------------------------
def test_split_halves_add_up_and_drop_short_documents():
    counts = small_counts()
    split = split_documents(counts, random_state=0)
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    assert list(split.documents) == list(np.flatnonzero(lengths >= 2))
    whole = (split.observed + split.held_out).toarray()
    np.testing.assert_array_equal(whole, counts[split.documents].toarray())
    observed_len = np.asarray(split.observed.sum(axis=1)).ravel()
    np.testing.assert_array_equal(observed_len, lengths[split.documents] // 2)
    assert split.n_held_out_tokens == int(lengths[split.documents].sum() - observed_len.sum())
    again = split_documents(counts, random_state=0)
    assert (again.observed != split.observed).nnz == 0


def test_split_is_uniform_over_tokens():
    # one document "a a b b": observed half is 2 of 4 tokens without replacement, so it holds
    # one a and one b with probability 4/6, two a's 1/6, two b's 1/6.
    counts = sp.csr_matrix(np.tile([[2.0, 2.0]], (6000, 1)))
    observed = split_documents(counts, random_state=1).observed.toarray()
    share = np.mean(observed[:, 0] == 1)
    assert abs(share - 4 / 6) < 0.03  # 5 standard errors
    assert abs(np.mean(observed[:, 0] == 2) - 1 / 6) < 0.025


def test_split_rejects_bad_input():
    with pytest.raises(ValueError, match="min_tokens"):
        split_documents(np.ones((2, 3)), min_tokens=1)
    with pytest.raises(ValueError, match="no document with at least"):
        split_documents(np.eye(3))
    with pytest.raises(ValueError, match="negative"):
        split_documents(-np.ones((2, 3)))


# -- perplexity ----------------------------------------------------------------------------------
class FixedModel:
    """A topic model with given topics and a fixed proportion per document (for brute force)."""

    def __init__(self, topics, theta):
        self.components_ = np.asarray(topics)
        self.theta = np.asarray(theta)

    def transform(self, X):
        return self.theta[: X.shape[0]]


def test_completion_perplexity_matches_a_loop():
    counts = small_counts(seed=4)
    split = split_documents(counts, random_state=2)
    rng = np.random.default_rng(0)
    topics = rng.dirichlet(np.ones(counts.shape[1]), size=3) * 5.0  # unnormalised on purpose
    theta = rng.dirichlet(np.ones(3), size=split.observed.shape[0]) * 2.0
    model = FixedModel(topics, theta)
    phi = topics / topics.sum(axis=1, keepdims=True)
    held = split.held_out.toarray()
    log_lik, tokens = 0.0, 0
    for n in range(held.shape[0]):
        th = theta[n] / theta[n].sum()
        for w in range(held.shape[1]):
            if held[n, w]:
                log_lik += held[n, w] * math.log(sum(th[i] * phi[i, w] for i in range(3)))
                tokens += held[n, w]
    assert completion_perplexity(model, split) == pytest.approx(math.exp(-log_lik / tokens), rel=1e-12)


def test_unigram_perplexity_matches_a_loop():
    train = small_counts(seed=5)
    split = split_documents(small_counts(seed=6), random_state=0)
    dense_train = train.toarray()
    held = split.held_out.toarray()
    total = dense_train.sum() + 0.5 * dense_train.shape[1]
    log_lik = sum(
        held[n, w] * math.log((dense_train[:, w].sum() + 0.5) / total)
        for n in range(held.shape[0]) for w in range(held.shape[1]) if held[n, w]
    )  # fmt: skip
    expected = math.exp(-log_lik / held.sum())
    assert unigram_perplexity(train, split, pseudo_count=0.5) == pytest.approx(expected, rel=1e-12)


def test_unigram_without_smoothing_is_infinite_on_an_unseen_word():
    train = sp.csr_matrix(np.array([[3.0, 1.0, 0.0]]))
    split = split_documents(np.array([[0.0, 0.0, 4.0]]), random_state=0)  # held out: word 2 twice
    assert unigram_perplexity(train, split, pseudo_count=0.0) == math.inf
    assert math.isfinite(unigram_perplexity(train, split))


def test_true_topics_beat_the_unigram_model_and_fitted_models_too(corpus):
    train, test = corpus.counts[:2500], corpus.counts[2500:]
    split = split_documents(test, random_state=0)
    oracle = SpectralLDA(4, alpha0=0.4)
    oracle.components_, oracle.alpha_, oracle.n_features_in_ = corpus.topics, np.full(4, 0.1), 60
    unigram = unigram_perplexity(train, split)
    truth = completion_perplexity(oracle, split)
    assert truth < 0.75 * unigram
    spectral = SpectralLDA(4, alpha0=0.4, random_state=0).fit(train)
    assert truth <= completion_perplexity(spectral, split) < 0.85 * unigram
    vi = DPVariationalLDA(4, doc_topic_prior=0.1, random_state=0, options=DPVIOptions(learning_offset=10.0))
    vi.fit(train)
    assert completion_perplexity(vi, split) < 0.85 * unigram


def test_scikit_learn_lda_is_scored_through_components_and_transform(corpus):
    from sklearn.decomposition import LatentDirichletAllocation

    train, test = corpus.counts[:2500], corpus.counts[2500:]
    split = split_documents(test, random_state=0)
    lda = LatentDirichletAllocation(4, learning_method="online", random_state=0, max_iter=1).fit(train)
    np.testing.assert_allclose(topic_word_distribution(lda).sum(axis=1), 1.0)
    assert completion_perplexity(lda, split) < 0.85 * unigram_perplexity(train, split)


def test_perplexity_rejects_mismatched_inputs(corpus):
    split = split_documents(corpus.counts[:50], random_state=0)
    with pytest.raises(TypeError, match="split must be a CompletionSplit"):
        completion_perplexity(FixedModel(np.ones((2, 60)), np.ones((50, 2))), corpus.counts)
    with pytest.raises(ValueError, match="the model has 59 words"):
        completion_perplexity(FixedModel(np.ones((2, 59)), np.ones((50, 2))), split)
    with pytest.raises(ValueError, match="train has 3 words"):
        unigram_perplexity(np.ones((2, 3)), split)
    with pytest.raises(TypeError, match="components_"):
        completion_perplexity(object(), split)
    assert isinstance(split, CompletionSplit)


# -- NPMI ----------------------------------------------------------------------------------------
def brute_npmi(word_set, dense, eps):
    docs = [set(np.flatnonzero(row)) for row in dense]
    n = len(docs)
    values = []
    for a, b in itertools.combinations(word_set, 2):
        pa = sum(a in d for d in docs) / n
        pb = sum(b in d for d in docs) / n
        pab = sum(a in d and b in d for d in docs) / n
        if pa == 0 or pb == 0 or pab + eps == 0:
            values.append(-1.0)
        elif pab + eps >= 1:
            values.append(1.0)
        else:
            values.append(math.log((pab + eps) / (pa * pb)) / -math.log(pab + eps))
    return float(np.mean(values))


@pytest.mark.parametrize("eps", [1e-12, 0.0, 0.01])
def test_npmi_matches_a_loop(eps):
    rng = np.random.default_rng(7)
    dense = (rng.random((40, 12)) < 0.25) * rng.integers(1, 4, size=(40, 12))
    dense[:, 11] = 0  # a word absent from the reference
    sets = np.array([[0, 1, 2, 3], [4, 5, 6, 11], [7, 8, 9, 10]])
    got = word_set_npmi(sets, sp.csr_matrix(dense.astype(float)), epsilon=eps)
    expected = [brute_npmi(s, dense, eps) for s in sets]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)


def test_npmi_limits():
    # words 0 and 1 always together (in half of the documents), 2 only where they are absent
    dense = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1], [0, 0, 1]], dtype=float)
    np.testing.assert_allclose(word_set_npmi(np.array([[0, 1]]), dense, epsilon=0.0), [1.0])
    np.testing.assert_allclose(word_set_npmi(np.array([[0, 2]]), dense, epsilon=0.0), [-1.0])
    assert -1.0 < word_set_npmi(np.array([[0, 2]]), dense)[0] < -0.5


def test_npmi_agrees_with_gensim():
    gensim = pytest.importorskip("gensim")
    from gensim.corpora import Dictionary
    from gensim.models.coherencemodel import CoherenceModel

    rng = np.random.default_rng(11)
    vocab = [f"w{i}" for i in range(15)]
    texts = [list(rng.choice(vocab, size=rng.integers(2, 9))) for _ in range(60)]
    dictionary = Dictionary(texts)
    columns = {w: dictionary.token2id[w] for w in dictionary.token2id}
    dense = np.zeros((len(texts), len(dictionary)))
    for n, text in enumerate(texts):
        for w in text:
            dense[n, columns[w]] += 1
    topics = [["w0", "w1", "w2", "w3", "w4"], ["w5", "w9", "w12", "w14", "w7"]]
    # a window longer than every text: each text is one window, i.e. boolean-document co-occurrence
    cm = CoherenceModel(topics=topics, texts=texts, dictionary=dictionary, coherence="c_npmi",
                        window_size=max(map(len, texts)) + 1, processes=1)  # fmt: skip
    theirs = cm.get_coherence_per_topic()
    ours = word_set_npmi(np.array([[columns[w] for w in t] for t in topics]), dense)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)
    assert gensim is not None


def test_true_topics_are_more_coherent_than_random_words(corpus):
    reference = corpus.counts
    true = topic_npmi(corpus.topics, reference, n_top=8)
    rng = np.random.default_rng(0)
    random_sets = np.array([rng.choice(60, size=8, replace=False) for _ in range(20)])
    assert true.min() > 0.1
    assert true.mean() > word_set_npmi(random_sets, reference).mean() + 0.2


def test_top_word_indices_and_npmi_validation():
    topics = np.array([[0.1, 0.5, 0.4], [0.3, 0.3, 0.4]])
    np.testing.assert_array_equal(top_word_indices(topics, 2), [[1, 2], [2, 0]])
    with pytest.raises(ValueError, match="n_top=4 exceeds"):
        top_word_indices(topics, 4)
    with pytest.raises(ValueError, match="n_top must be >= 2"):
        top_word_indices(topics, 1)
    with pytest.raises(ValueError, match="distinct"):
        word_set_npmi(np.array([[0, 0]]), np.eye(3))
    with pytest.raises(ValueError, match="outside the reference vocabulary"):
        word_set_npmi(np.array([[0, 3]]), np.eye(3))
    with pytest.raises(ValueError, match="integer array"):
        word_set_npmi(np.array([[0.0, 1.0]]), np.eye(3))
    with pytest.raises(ValueError, match="epsilon"):
        word_set_npmi(np.array([[0, 1]]), np.eye(3), epsilon=-1.0)


def test_scoring_the_observed_tokens_is_the_models_own_perplexity(corpus):
    """With held-out = observed, completion perplexity is SpectralLDA.perplexity (same inference)."""
    model = SpectralLDA(4, alpha0=0.4, random_state=0).fit(corpus.counts[:2500])
    test = sp.csr_matrix(corpus.counts[2500:], dtype=np.float64)
    same = CompletionSplit(test, test, np.arange(test.shape[0]))
    assert completion_perplexity(model, same) == pytest.approx(model.perplexity(test), rel=1e-12)
