"""LDA moment estimators: exact unbiasedness, implicit vs dense agreement, whitening, decomposition."""

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.datasets import make_orthogonal_tensor
from dptensor.datasets.lda import make_lda_corpus
from dptensor.decomposition.simultaneous_power import simultaneous_power_method
from dptensor.metrics import match_components
from dptensor.models.topics._lda_whitening import lda_whitening, top_eigenpairs
from dptensor.models.topics._third_moment import LDAMomentAccumulator, whitened_third_moment
from dptensor.models.topics.moments import (
    LDASecondMoment,
    dense_lda_moments,
    first_moment,
    population_lda_moments,
    prepare_counts,
)
from dptensor.models.topics.spectral import project_rows_to_simplex


def _dirichlet_moments(alpha):
    a0 = alpha.sum()
    e1 = alpha / a0
    e2 = (np.outer(alpha, alpha) + np.diag(alpha)) / (a0 * (a0 + 1))
    e3 = np.einsum("i,j,k->ijk", alpha, alpha, alpha)
    for t in range(alpha.size):
        e3[t, t, :] += alpha[t] * alpha
        e3[t, :, t] += alpha[t] * alpha
        e3[:, t, t] += alpha[t] * alpha
        e3[t, t, t] += 2 * alpha[t]
    return e1, e2, e3 / (a0 * (a0 + 1) * (a0 + 2))


def test_population_moments_match_their_definitions():
    """Lemma 3: M2, M3 defined from E[x1 x2], E[x1 x2 x3] equal the weighted sums of mu_i."""
    rng = np.random.default_rng(0)
    topics = rng.dirichlet(np.ones(6), size=3)
    alpha = np.array([0.3, 0.7, 1.1])
    a0 = alpha.sum()
    m1, m2, m3 = population_lda_moments(topics, alpha)
    e1, e2, e3 = _dirichlet_moments(alpha)
    x1 = e1 @ topics
    x12 = topics.T @ e2 @ topics
    x123 = np.einsum("abc,ai,bj,ck->ijk", e3, topics, topics, topics)
    np.testing.assert_allclose(m1, x1)
    np.testing.assert_allclose(m2, x12 - a0 / (a0 + 1) * np.outer(x1, x1), atol=1e-15)
    x12m = np.einsum("ij,k->ijk", x12, x1)
    expected = (
        x123
        - a0 / (a0 + 2) * (x12m + x12m.transpose(0, 2, 1) + x12m.transpose(2, 0, 1))
        + 2 * a0**2 / ((a0 + 1) * (a0 + 2)) * np.einsum("i,j,k->ijk", x1, x1, x1)
    )
    np.testing.assert_allclose(m3, expected, atol=1e-15)


def test_estimators_are_exactly_unbiased():
    """Average the estimators over many corpora of only N=3 short documents.

    With N=3 any O(1/N) bias (e.g. Lemma 21 as printed, with repeated-document terms) would be
    a large fraction of the moments; the mean must match the population moments within 4.5
    standard errors in every entry.
    """
    rng = np.random.default_rng(1)
    d, k, n_docs, reps = 5, 2, 3, 4000
    topics = rng.dirichlet(np.ones(d), size=k)
    alpha = np.array([0.4, 0.8])
    p1, p2, p3 = population_lda_moments(topics, alpha)
    big = make_lda_corpus(n_docs * reps, d, k, alpha=alpha, doc_length=5, topics=topics, random_state=2)
    samples = {1: [], 2: [], 3: []}
    for r in range(reps):
        docs = prepare_counts(big.counts[r * n_docs : (r + 1) * n_docs])
        for order, moment in zip((1, 2, 3), dense_lda_moments(docs, alpha.sum()), strict=True):
            samples[order].append(moment)
    for order, population in zip((1, 2, 3), (p1, p2, p3), strict=True):
        values = np.array(samples[order])
        mean = values.mean(axis=0)
        se = values.std(axis=0, ddof=1) / np.sqrt(reps)
        z = np.abs(mean - population) / np.maximum(se, 1e-12)
        assert np.max(z) < 4.5, f"M{order}: max z-score {np.max(z):.2f}"


def test_estimators_converge_to_population_moments():
    corpus = make_lda_corpus(20000, 8, 3, alpha=0.3, doc_length=20, topic_concentration=0.5, random_state=3)
    docs = prepare_counts(corpus.counts)
    m1, m2, m3 = dense_lda_moments(docs, corpus.alpha0)
    p1, p2, p3 = population_lda_moments(corpus.topics, corpus.alpha)
    assert np.abs(m1 - p1).max() < 0.01
    assert np.abs(m2 - p2).max() < 0.1 * np.abs(p2).max()
    assert np.abs(m3 - p3).max() < 0.1 * np.abs(p3).max()
    np.testing.assert_allclose(first_moment(docs), m1, rtol=1e-12)


@pytest.mark.parametrize("alpha0", [0.05, 1.0, 7.5])
def test_implicit_second_moment_matches_dense(alpha0):
    corpus = make_lda_corpus(300, 12, 3, alpha=alpha0 / 3, doc_length=8, random_state=4)
    docs = prepare_counts(corpus.counts)
    _, m2, _ = dense_lda_moments(docs, alpha0)
    op = LDASecondMoment(docs, alpha0)
    np.testing.assert_allclose(op.to_dense(), m2, rtol=1e-12, atol=1e-15)
    block = np.random.default_rng(0).standard_normal((12, 4))
    np.testing.assert_allclose(op.matmat(block), m2 @ block, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(op.as_linear_operator() @ block[:, 0], m2 @ block[:, 0], atol=1e-14)


@pytest.mark.parametrize("alpha0", [0.05, 1.0, 7.5])
def test_whitened_third_moment_matches_dense_contraction(alpha0):
    corpus = make_lda_corpus(200, 10, 3, alpha=alpha0 / 3, doc_length=7, random_state=5)
    docs = prepare_counts(corpus.counts)
    _, _, m3 = dense_lda_moments(docs, alpha0)
    W = np.random.default_rng(1).standard_normal((10, 4))
    expected = np.einsum("ijk,ia,jb,kc->abc", m3, W, W, W)
    fast = whitened_third_moment(docs, alpha0, W)
    np.testing.assert_allclose(fast, expected, rtol=1e-10, atol=1e-12 * np.abs(expected).max())
    np.testing.assert_allclose(fast, fast.transpose(1, 0, 2), atol=1e-14)
    np.testing.assert_allclose(fast, fast.transpose(2, 1, 0), atol=1e-14)


def test_short_documents_are_left_out():
    counts = sp.csr_matrix(
        np.array([[1, 1, 1, 0], [0, 2, 0, 0], [0, 0, 0, 0], [3, 0, 1, 1], [1, 0, 0, 0], [0, 1, 1, 1]])
    )
    docs = prepare_counts(counts)
    assert docs.n_documents == 3 and docs.n_dropped == 3 and docs.n_input_documents == 6
    np.testing.assert_array_equal(docs.kept, [0, 3, 5])
    np.testing.assert_array_equal(docs.lengths, [3, 5, 3])
    full = dense_lda_moments(docs, 1.0)
    only = dense_lda_moments(prepare_counts(counts[[0, 3, 5]]), 1.0)
    for a, b in zip(full, only, strict=True):
        np.testing.assert_allclose(a, b)


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        (np.array([[1, -1, 3], [1, 1, 1], [2, 2, 2]]), "negative"),
        (np.array([[1, 0.5, 3], [1, 1, 1], [2, 2, 2]]), "non-integer"),
        (np.array([[1, np.nan, 3], [1, 1, 1], [2, 2, 2]]), "NaN"),
        (np.zeros((0, 3)), "empty"),
        (np.zeros((4, 3)), "empty"),
        (np.array([[1, 1, 1], [1, 1, 0], [2, 2, 2]]), "at least 3"),
        (np.ones(5), "2-D"),
    ],
)
def test_bad_counts_raise(counts, message):
    with pytest.raises(ValueError, match=message):
        prepare_counts(counts)


def test_non_numeric_counts_raise_type_error():
    with pytest.raises(TypeError, match="X must be a numeric"):
        prepare_counts([["a", "b"], ["c", "d"]])


@pytest.mark.parametrize("alpha0", [0, -1.0, float("nan"), float("inf")])
def test_bad_alpha0(alpha0):
    docs = prepare_counts(np.array([[1, 1, 1], [2, 1, 1], [1, 2, 3]]))
    with pytest.raises(ValueError, match="alpha0"):
        LDASecondMoment(docs, alpha0)
    with pytest.raises(ValueError, match="alpha0"):
        whitened_third_moment(docs, alpha0, np.ones((3, 1)))


@pytest.mark.parametrize("method", ["randomized", "eigsh"])
def test_iterative_eigensolvers_match_dense(method):
    corpus = make_lda_corpus(3000, 400, 5, alpha=0.2, doc_length=60, random_state=6)
    op = LDASecondMoment(prepare_counts(corpus.counts), corpus.alpha0)
    dense_values, dense_vectors = top_eigenpairs(op, 5, method="dense")
    values, vectors = top_eigenpairs(op, 5, method=method, random_state=0)
    np.testing.assert_allclose(values, dense_values, rtol=1e-6)
    np.testing.assert_allclose(np.abs(np.sum(vectors * dense_vectors, axis=0)), 1.0, atol=1e-6)


def test_whitening_whitens():
    corpus = make_lda_corpus(3000, 60, 4, alpha=0.25, doc_length=40, random_state=7)
    op = LDASecondMoment(prepare_counts(corpus.counts), corpus.alpha0)
    white = lda_whitening(op, 4, method="dense")
    np.testing.assert_allclose(white.matrix.T @ op.to_dense() @ white.matrix, np.eye(4), atol=1e-10)
    np.testing.assert_allclose(
        white.inverse @ white.matrix.T @ white.eigenvectors, white.eigenvectors, atol=1e-12
    )
    with pytest.raises(ValueError, match="positive eigenvalue"):
        lda_whitening(op, 60, method="dense")


def test_simultaneous_power_method_recovers_orthogonal_tensor():
    tensor, weights, factors, _ = make_orthogonal_tensor(12, 5, noise=0.0, random_state=0)
    result = simultaneous_power_method(tensor, 5, random_state=0)
    match = match_components(factors, result.factors, weights, result.weights)
    assert match.min_inner > 1 - 1e-8
    assert np.max(match.weight_error) < 1e-8
    assert bool(result.converged.all())
    again = simultaneous_power_method(tensor, 5, random_state=0)
    np.testing.assert_array_equal(again.factors, result.factors)


def test_project_rows_to_simplex():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 30))
    p = project_rows_to_simplex(x)
    assert np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    # A point already on the simplex is unchanged; the projection beats random simplex points.
    q = rng.dirichlet(np.ones(30))
    np.testing.assert_allclose(project_rows_to_simplex(q)[0], q, atol=1e-12)
    others = rng.dirichlet(np.ones(30), size=200)
    assert np.all(np.linalg.norm(x[0] - p[0]) <= np.linalg.norm(x[0] - others, axis=1) + 1e-12)


def test_accumulator_over_batches_equals_whole_corpus():
    corpus = make_lda_corpus(400, 15, 3, alpha=0.5, doc_length=8, random_state=8)
    basis = np.random.default_rng(2).standard_normal((15, 5))
    accumulator = LDAMomentAccumulator(basis, 1.5)
    for lo, hi in [(0, 100), (100, 101), (101, 400)]:
        accumulator.update(prepare_counts(corpus.counts[lo:hi], min_documents=0))
    whole = prepare_counts(corpus.counts)
    assert accumulator.n_documents == whole.n_documents
    expected = whitened_third_moment(whole, 1.5, basis)
    np.testing.assert_allclose(accumulator.third_moment(), expected, atol=1e-12 * np.abs(expected).max())
    m2_basis = LDASecondMoment(whole, 1.5).matmat(basis)
    np.testing.assert_allclose(accumulator.second_moment_basis(), m2_basis, atol=1e-14)
    with pytest.raises(ValueError, match="at least 3 documents"):
        LDAMomentAccumulator(basis, 1.0).third_moment()


def test_scaled_length_weights_equal_the_length_functions_times_powers_of_the_length():
    """``l^r f(l)`` from ``e = 1/l`` (the scaled form, issue 36) against the direct formula."""
    from dptensor.models.topics import moments as lda_moments

    lengths = np.array([3.0, 4.0, 7.0, 50.0, 1e6])
    l2, l3 = lengths * (lengths - 1), lengths * (lengths - 1) * (lengths - 2)
    direct = np.column_stack([1 / l3, 1 / (l2 * lengths), lengths**-3.0, 1 / l2, lengths**-2.0, 1 / lengths])
    for power in (1, 2, 3):
        scaled = lda_moments._scaled_length_basis(1.0 / lengths, power)
        bounded = lda_moments._DEGREES >= power
        np.testing.assert_allclose(scaled[:, bounded], (direct * lengths[:, None] ** power)[:, bounded],
                                   rtol=1e-12)  # fmt: skip
        assert np.all(scaled[:, ~bounded] == 0)
    # e = 0 (a length beyond float64's range): the limits l -> inf, 1 where the degree equals the power
    np.testing.assert_array_equal(lda_moments._scaled_length_basis(np.zeros(1), 3), [[1, 1, 1, 0, 0, 0]])
    # a weight that would grow with the length is refused, not computed
    docs = prepare_counts(sp.csr_matrix(np.array([[3.0, 1.0], [2.0, 2.0], [1.0, 4.0]])))
    request = lda_moments.StatisticsRequest(pair=lda_moments._weights({lda_moments._L1: 1.0}))
    with pytest.raises(ValueError, match="degree below 2"):
        lda_moments.document_statistics(docs, np.eye(2), request)
