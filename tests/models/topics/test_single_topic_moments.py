"""Single-topic moments: estimators, brute-force sensitivity, symmetrisation, input validation."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor import SingleTopicModel
from dptensor.datasets import make_single_topic_corpus
from dptensor.models.topics.single_topic_moments import (
    check_documents,
    dense_second_moment,
    second_moment,
    third_moment,
)
from dptensor.privacy import PrivacyWarning, symmetric_gaussian_matrix, unique_entries
from dptensor.privacy.noise import insecure_test_noise


def _per_document_unique(documents: list, d: int, moments: str) -> tuple[np.ndarray, np.ndarray]:
    """Unique entries of each document's own M2 and M3 terms (the moments of a one-document corpus)."""
    m2, m3 = [], []
    for doc in documents:
        docs = check_documents([np.asarray(doc)], n_words=d, moments=moments)
        m2.append(unique_entries(dense_second_moment(docs, moments), 2))
        m3.append(unique_entries(third_moment(docs, moments), 3))
    return np.array(m2), np.array(m3)


def _max_pair_distance(vectors: np.ndarray) -> float:
    sq = np.sum(vectors**2, axis=1)
    gram = sq[:, None] + sq[None, :] - 2.0 * vectors @ vectors.T
    return float(np.sqrt(max(gram.max(), 0.0)))


def _frobenius_weights(d: int, order: int) -> np.ndarray:
    """sqrt(|orbit|) per unique entry: ||T||_F = ||sqrt(|o|) * u||."""
    index = np.array([t for t in itertools.product(range(d), repeat=order) if list(t) == sorted(t)])
    return np.sqrt([len(set(itertools.permutations(t))) for t in index])


@pytest.mark.parametrize(("moments", "lengths"), [("first3", (3, 4)), ("all", (3, 4, 5))])
@pytest.mark.parametrize("d", [2, 3])
def test_sensitivity_is_sqrt2_over_n_by_brute_force(moments, lengths, d):
    """Replace one document by any other: both moments move by at most sqrt(2)/N, and that is attained.

    One document's term is the change of N * moment; every document over the vocabulary (all
    word sequences of the given lengths) is enumerated and every pair compared, in the l2 norm of
    the unique entries and in the Frobenius norm.
    """
    documents = [seq for length in lengths for seq in itertools.product(range(d), repeat=length)]
    m2, m3 = _per_document_unique(documents, d, moments)
    for unique, order in ((m2, 2), (m3, 3)):
        for weights in (np.ones(unique.shape[1]), _frobenius_weights(d, order)):
            assert _max_pair_distance(unique * weights) == pytest.approx(np.sqrt(2.0), abs=1e-12)


def test_symmetrisation_closes_the_antisymmetric_leak():
    """Word order inside the first words must not reach the release.

    Neighbours that differ only by the order of the first two words have identical symmetrised
    moments, so with the same (test) noise the releases are identical. An unsymmetrised moment
    plus symmetric noise releases its antisymmetric part without any noise: (M + E) - (M + E)^T
    = M - M^T, which differs between the neighbours with certainty.
    """
    d = 4
    base = make_single_topic_corpus(50, d, 2, random_state=0).tokens
    first, second = base.copy(), base.copy()
    first[0] = [0, 1, 2]
    second[0] = [1, 0, 2]
    docs = [check_documents(x, n_words=d, input="tokens") for x in (first, second)]
    np.testing.assert_array_equal(dense_second_moment(docs[0]), dense_second_moment(docs[1]))
    np.testing.assert_array_equal(third_moment(docs[0]), third_moment(docs[1]))

    def unsymmetrised(tokens: np.ndarray) -> np.ndarray:
        raw = np.zeros((d, d))
        np.add.at(raw, (tokens[:, 0], tokens[:, 1]), 1.0 / tokens.shape[0])
        return raw

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        fits = [SingleTopicModel(2, mechanism="agn", epsilon=1.0, delta=1e-6, n_words=d, input="tokens",
                                 noise=insecure_test_noise(3), random_state=0).fit(x)
                for x in (first, second)]
    np.testing.assert_array_equal(fits[0].components_, fits[1].components_)  # identical releases

    noise = [symmetric_gaussian_matrix(d, 0.1, noise=insecure_test_noise(s)) for s in (1, 2)]
    pairs = zip((first, second), noise, strict=True)
    leaks = [(unsymmetrised(x) + e) - (unsymmetrised(x) + e).T for x, e in pairs]
    assert not np.allclose(leaks[0], leaks[1])  # the variant tells the neighbours apart ...
    assert np.allclose(leaks[0], unsymmetrised(first) - unsymmetrised(first).T)  # ... with no noise at all


@pytest.mark.parametrize("moments", ["first3", "all"])
def test_dense_whitened_and_operator_forms_agree(moments):
    rng = np.random.default_rng(1)
    d, k = 7, 3
    tokens = [rng.integers(0, d, size=rng.integers(3, 9)) for _ in range(300)]
    docs = check_documents(tokens, n_words=d, moments=moments)
    W = rng.standard_normal((d, k))
    dense3 = third_moment(docs, moments)
    np.testing.assert_allclose(
        np.einsum("abc,ai,bj,ck->ijk", dense3, W, W, W), third_moment(docs, moments, W), atol=1e-12
    )
    np.testing.assert_allclose(second_moment(docs, moments) @ np.eye(d), dense_second_moment(docs, moments),
                               atol=1e-15)  # fmt: skip
    for perm in ((1, 0, 2), (0, 2, 1), (2, 1, 0)):
        np.testing.assert_allclose(dense3, dense3.transpose(perm), atol=1e-16)
    assert dense3.sum() == pytest.approx(1.0) and np.all(dense3 >= 0)


def test_u_statistics_match_brute_force_and_have_lower_variance():
    """'all' averages every ordered triple of distinct positions; it is unbiased with less variance."""
    d, k, length = 5, 2, 8
    truth = make_single_topic_corpus(10, d, k, document_length=length, random_state=3)
    m2_true, m3_true = truth.moments()
    doc = truth.tokens[0]
    brute = np.zeros((d, d, d))
    for p, q, r in itertools.permutations(range(length), 3):
        brute[doc[p], doc[q], doc[r]] += 1.0 / (length * (length - 1) * (length - 2))
    single = check_documents([doc], n_words=d, moments="all")
    np.testing.assert_allclose(third_moment(single, "all"), brute, atol=1e-15)

    errors = {"first3": [], "all": []}
    means = {"first3": 0.0, "all": 0.0}
    reps = 300
    for seed in range(reps):
        corpus = make_single_topic_corpus(200, d, k, document_length=length, topics=truth.topics,
                                          weights=truth.weights, random_state=100 + seed)  # fmt: skip
        for moments in errors:
            docs = check_documents(list(corpus.tokens), n_words=d, moments=moments)
            m3 = third_moment(docs, moments)
            errors[moments].append(np.sum((m3 - m3_true) ** 2))
            means[moments] = means[moments] + m3 / reps
    for moments in errors:  # unbiased: the mean over replications is close to M3
        assert np.abs(means[moments] - m3_true).max() < 4e-3
    assert np.mean(errors["all"]) < 0.5 * np.mean(errors["first3"])  # observed ratio 0.19


def test_short_documents_are_an_input_error_naming_rows():
    tokens = [np.array([0, 1, 2]), np.array([1, 1]), np.array([0, 2, 2, 1]), np.array([2])]
    with pytest.raises(ValueError, match=r"2 document\(s\) with fewer than 3 tokens \(rows 1, 3\)"):
        check_documents(tokens, n_words=3)
    counts = sp.csr_matrix(np.array([[1, 1, 1], [0, 2, 0], [3, 0, 0]]))
    with pytest.raises(ValueError, match=r"1 document\(s\) with fewer than 3 tokens \(rows 1\)"):
        check_documents(counts, moments="all")
    many = [np.array([0, 1])] * 12
    with pytest.raises(ValueError, match=r"12 document\(s\).*rows 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, \.\.\."):
        check_documents(many, n_words=3)
    messages = set()
    for private_input in (tokens, many):  # a private fit's input: neither a count nor a row is named
        with pytest.raises(ValueError, match=r"^X has documents with fewer than 3 tokens; ") as raised:
            check_documents(private_input, n_words=3, private=True)
        messages.add(str(raised.value))
    assert len(messages) == 1 and "rows" not in messages.pop()  # the same words for any such input


def test_input_forms_and_bad_input():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 6, size=(20, 4))
    as_array = check_documents(tokens, n_words=6, input="tokens", moments="all")
    as_list = check_documents(list(tokens), n_words=6, moments="all")
    np.testing.assert_array_equal(as_array.first_words, tokens[:, :3])
    assert (as_array.counts != as_list.counts).nnz == 0
    counts = as_list.counts
    from_counts = check_documents(counts, moments="all")
    assert from_counts.n_documents == 20 and from_counts.n_words == 6 and from_counts.first_words is None
    dense_counts = check_documents(counts.toarray(), input="counts", moments="all")
    assert (dense_counts.counts != counts).nnz == 0

    with pytest.raises(ValueError, match="does not record word order"):
        check_documents(counts)  # moments="first3" needs token sequences
    with pytest.raises(TypeError, match="pass input='counts' or input='tokens'"):
        check_documents(tokens, n_words=6)
    with pytest.raises(ValueError, match="n_words .* is required with token input"):
        check_documents(list(tokens))
    with pytest.raises(ValueError, match=r"outside \[0, n_words\)"):
        check_documents(list(tokens), n_words=5)
    with pytest.raises(ValueError, match=r"outside \[0, n_words\)"):
        check_documents([np.array([0, -1, 2])], n_words=5)
    with pytest.raises(TypeError, match="integer word ids"):
        check_documents([np.array([0.0, 1.0, 2.5])], n_words=5)
    with pytest.raises(ValueError, match="n_words=7 but X has 6 columns"):
        check_documents(counts, n_words=7, moments="all")
    with pytest.raises(ValueError, match="negative counts"):
        check_documents(sp.csr_matrix(-np.ones((2, 3))), moments="all")
    with pytest.raises(ValueError, match="empty corpus"):
        check_documents([], n_words=3)
    with pytest.raises(ValueError, match="moments must be one of"):
        check_documents(counts, moments="every")


def _exact_all_words_moments(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The U-statistics of moments='all' in exact rational arithmetic (any integer counts)."""
    from fractions import Fraction

    d = counts.shape[1]
    m2, m3 = np.zeros((d, d)), np.zeros((d, d, d))
    for row in counts:
        c = [Fraction(int(x)) for x in row]
        length = sum(c)
        l2, l3 = length * (length - 1), length * (length - 1) * (length - 2)

        def diag(a, b, c=c):
            return c[a] if a == b else 0

        for a, b in itertools.product(range(d), repeat=2):
            m2[a, b] += float((c[a] * c[b] - diag(a, b)) / l2)
        for a, b, e in itertools.product(range(d), repeat=3):
            value = c[a] * c[b] * c[e] - (diag(a, b) * c[e] + diag(a, e) * c[b] + diag(b, e) * c[a])
            value += 2 * (c[a] if a == b == e else 0)
            m3[a, b, e] += float(value / l3)
    return m2 / len(counts), m3 / len(counts)


@pytest.mark.parametrize("huge", [2**63 - 1, 1e160, 1.7e308])
def test_all_words_moments_are_exact_for_extreme_counts(huge):
    """Counts of 1e110 overflowed c c^T (a warning), 1e160 gave NaN moments (issue 27, finding 1)."""
    rng = np.random.default_rng(1)
    counts = rng.integers(0, 4, size=(6, 4)).astype(float)
    counts[:, 0] += 3
    counts[0] = [huge, huge, 0.0, 1.0]  # two huge counts: the length overflows at 1.7e308
    counts[1] = [0.0, 3.0, 0.0, 0.0]
    m2, m3 = _exact_all_words_moments(counts)
    W = rng.standard_normal((4, 2))
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        docs = check_documents(sp.csr_matrix(counts), moments="all")
        np.testing.assert_allclose(dense_second_moment(docs, "all"), m2, atol=1e-15)
        np.testing.assert_allclose(third_moment(docs, "all"), m3, atol=1e-15)
        np.testing.assert_allclose(
            third_moment(docs, "all", W), np.einsum("abc,ai,bj,ck->ijk", m3, W, W, W), atol=1e-14
        )
