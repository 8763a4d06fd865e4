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
