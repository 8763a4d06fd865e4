"""Tests of the semi-synthetic implicit-feedback generator (small sizes, the built-in fallback set)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor._validation import NotFittedError
from dptensor.datasets.interactions_model import (
    ImplicitFeedbackModel,
    _choose,
    _co_occurrence_energy,
    make_implicit_feedback,
    planted_interactions,
    unit_row_gram,
)


@pytest.fixture(scope="module")
def real() -> sp.csr_array:
    return planted_interactions(600, 200, random_state=3)


@pytest.fixture(scope="module")
def fitted(real: sp.csr_array) -> ImplicitFeedbackModel:
    return ImplicitFeedbackModel(12, calibration_rounds=3, random_state=0).fit(real)


def test_choose_is_successive_sampling() -> None:
    """Two items of three without replacement: the frequencies of each ordered-free pair match the
    exact successive-sampling probabilities P({i,j}) = p_i p_j / (1 - p_i) + p_j p_i / (1 - p_j)."""
    p = np.array([0.6, 0.3, 0.1])
    n = 60_000
    drawn = _choose(np.tile(np.log(p), (n, 1)), np.full(n, 2), np.random.default_rng(0))
    assert np.all(np.diff(drawn.indptr) == 2)
    pairs = drawn.indices.reshape(n, 2)
    for i, j in itertools.combinations(range(3), 2):
        exact = p[i] * p[j] / (1 - p[i]) + p[j] * p[i] / (1 - p[j])
        freq = np.mean((pairs[:, 0] == i) & (pairs[:, 1] == j))
        assert abs(freq - exact) < 4 * np.sqrt(exact * (1 - exact) / n)


def test_choose_full_and_empty_rows() -> None:
    drawn = _choose(np.zeros((3, 4)), np.array([0, 4, 2]), np.random.default_rng(1))
    assert drawn.shape == (3, 4)
    assert list(np.diff(drawn.indptr)) == [0, 4, 2]
    assert sorted(drawn[[1]].indices) == [0, 1, 2, 3]


def test_rows_binary_lengths_and_determinism(fitted: ImplicitFeedbackModel, real: sp.csr_array) -> None:
    X = fitted.sample(2000, random_state=5)
    assert X.shape == (2000, real.shape[1])
    assert np.all(X.data == 1.0)
    assert X.has_canonical_format
    lengths = np.diff(X.indptr)
    assert set(lengths) <= set(fitted.row_lengths_)
    real_lengths = np.diff(real.indptr)
    assert abs(lengths.mean() - real_lengths.mean()) < 0.05 * real_lengths.mean()
    assert abs(np.median(lengths) - np.median(real_lengths)) <= 0.1 * np.median(real_lengths)
    again = fitted.sample(2000, random_state=5)
    assert (X != again).nnz == 0
    assert (X != fitted.sample(2000, random_state=6)).nnz > 0


def test_blocks_are_prefixes(fitted: ImplicitFeedbackModel) -> None:
    small = fitted.sample(300, chunk_size=100, random_state=9)
    large = fitted.sample(500, chunk_size=100, random_state=9)
    assert (large[:300] != small).nnz == 0
    blocks = list(fitted.iter_samples(250, chunk_size=100, random_state=9))
    assert [b.shape[0] for b in blocks] == [100, 100, 50]


def test_popularity_profile(fitted: ImplicitFeedbackModel, real: sp.csr_array) -> None:
    """Drawn item shares follow the real ones (after the correction), far better than uniform."""
    X = fitted.sample(6000, random_state=2)
    drawn = np.bincount(X.indices, minlength=X.shape[1]) / X.nnz
    target = fitted.item_popularity_ / fitted.item_popularity_.sum()
    assert np.corrcoef(drawn, target)[0, 1] > 0.97
    assert 0.5 * np.abs(drawn - target).sum() < 0.08
    # the head is as concentrated as the real head
    top = np.argsort(-target)[:20]
    assert abs(drawn[top].sum() - target[top].sum()) < 0.03


def test_user_dependence_matches_real_energy(fitted: ImplicitFeedbackModel, real: sp.csr_array) -> None:
    """The auto temperature matches the real co-occurrence energy; popularity-only choice has less."""
    n = real.shape[0]
    drawn = _co_occurrence_energy(fitted.sample(n, random_state=4))
    assert abs(drawn - fitted.real_energy_) < 0.1 * fitted.real_energy_
    flat = ImplicitFeedbackModel(12, temperature=1e6, calibration_rounds=3, random_state=0).fit(real)
    assert _co_occurrence_energy(flat.sample(n, random_state=4)) < 0.8 * fitted.real_energy_


def test_item_item_structure_beats_popularity(fitted: ImplicitFeedbackModel) -> None:
    """A held-out item is found more often by item-item co-occurrence than by popularity."""
    train = fitted.sample(3000, random_state=11)
    test = fitted.sample(500, random_state=12)
    rng = np.random.default_rng(0)
    gram = unit_row_gram(train)
    np.fill_diagonal(gram, 0.0)
    popularity = np.asarray(train.sum(axis=0)).ravel()
    hits = {"items": 0, "popularity": 0}
    for u in range(test.shape[0]):
        items = test[[u]].indices
        held = rng.choice(items)
        shown = items[items != held]
        for name, scores in (("items", gram[shown].sum(axis=0)), ("popularity", popularity.astype(float))):
            scores = scores.copy()
            scores[shown] = -np.inf
            hits[name] += held in np.argsort(-scores, kind="stable")[:10]
    assert hits["items"] > 1.3 * hits["popularity"]


def test_unit_row_gram_brute_force() -> None:
    X = sp.csr_array(np.array([[1, 1, 0], [0, 0, 0], [1, 0, 1]], dtype=float))
    dense = X.toarray()
    expected = sum(np.outer(r, r) / r.sum() for r in dense if r.sum())
    np.testing.assert_allclose(unit_row_gram(X), expected)


def test_make_implicit_feedback_and_fallback() -> None:
    X = make_implicit_feedback(50, n_factors=4, temperature=1.0, random_state=1)
    assert X.shape == (50, planted_interactions().shape[1])
    assert (X != make_implicit_feedback(50, n_factors=4, temperature=1.0, random_state=1)).nnz == 0


def test_errors(real: sp.csr_array) -> None:
    with pytest.raises(NotFittedError):
        ImplicitFeedbackModel().sample(3)
    with pytest.raises(TypeError, match="X must be"):
        ImplicitFeedbackModel().fit(np.ones((3, 3)))
    with pytest.raises(ValueError, match="no interactions"):
        ImplicitFeedbackModel().fit(sp.csr_array((3, 3)))
    with pytest.raises(ValueError, match="non-negative"):
        ImplicitFeedbackModel().fit(sp.csr_array(np.array([[1.0, -1.0]])))
    with pytest.raises(ValueError, match="temperature"):
        ImplicitFeedbackModel(temperature=0.0).fit(real)
    with pytest.raises(TypeError, match="n_factors"):
        ImplicitFeedbackModel(n_factors=2.5).fit(real)
    model = ImplicitFeedbackModel(4, temperature=1.0, calibration_rounds=0).fit(real)
    with pytest.raises(ValueError, match="n_users"):
        model.sample(0)
