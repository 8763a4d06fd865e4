"""Private refinement's release (issue 35, item 2): brute-forced sensitivity and an audit.

One pass releases ``W = sum_n D_n`` with ``D_nwj = g_w c_nw gamma_nwj`` (``g`` public word weights,
1 or from the released unigram distribution) scaled to ``||D_n||_F <= L``; replace-one sensitivity
``sqrt(2) L`` (:mod:`dptensor.models.topics.private_refinement`).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.models.topics.private_refinement import (
    PRIVATE_SWEEPS,
    WORD_WEIGHT_MIN_RATIO,
    refine_topics_privately,
    refinement_sensitivity,
    release_expected_counts,
    release_word_weights,
)
from dptensor.models.topics.refinement import clipped_expected_counts
from dptensor.parallel import LocalRowBlocks
from dptensor.privacy import insecure_test_noise
from dptensor.privacy.audit import epsilon_lower_bound
from dptensor.privacy.calibration import gaussian_sigma_analytic
from dptensor.privacy.noise import resolve_noise

WORDS = 3


def _documents() -> list[np.ndarray]:
    """Every document of counts 0..3 over three words, and extreme ones."""
    documents = [np.array(c, dtype=float) for c in itertools.product(range(4), repeat=WORDS)]
    documents += [np.array([1e300, 1e300, 0.0]), np.array([1e308, 0.0, 1.0]), np.array([1e6, 1.0, 0.0]),
                  np.array([0.5, 0.0, 0.0]), np.array([1e308, 1e308, 1e308]),
                  np.array([0.0, 1e306, 0.0])]  # fmt: skip  (the last overflows once weighted by 1000)
    return documents


def _term(
    document: np.ndarray, topics_t: np.ndarray, alpha: np.ndarray, clip: float, sweeps: int = PRIVATE_SWEEPS,
    weights: np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    return clipped_expected_counts(sp.csr_matrix(document[None, :]), topics_t, alpha, sweeps, clip, weights)


#: Word weights as the released unigram distributions give them: none, mild, and the largest allowed.
WEIGHTS = [None, release_word_weights(np.array([0.6, 0.3, 0.1])),
           release_word_weights(np.array([1.0, WORD_WEIGHT_MIN_RATIO / 10, 0.5]))]  # fmt: skip


@pytest.mark.parametrize("weights", WEIGHTS, ids=["unweighted", "mild", "largest"])
@pytest.mark.parametrize("sweeps", [1, PRIVATE_SWEEPS])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("clip", [0.7, 2.0])
def test_brute_force_replace_one_sensitivity(seed, clip, sweeps, weights):
    rng = np.random.default_rng(seed)
    topics_t = np.ascontiguousarray(rng.dirichlet(np.ones(WORDS), size=2).T)  # d x k
    alpha = rng.uniform(0.05, 2.0, size=2)
    terms = [_term(doc, topics_t, alpha, clip, sweeps, weights) for doc in _documents()]
    for term in terms:
        assert np.all(np.isfinite(term)) and np.all(term >= 0)
        assert np.linalg.norm(term) <= clip
    largest = max(np.linalg.norm(a - b) for a, b in itertools.combinations(terms, 2))
    assert largest <= refinement_sensitivity(clip)
    assert largest > 1.2 * clip  # the bound sqrt(2) L is nearly reached: a claim of L would fail


def test_terms_of_overflowing_or_underflowing_documents_are_bounded():
    """Counts whose sum overflows and a word no topic gives weight to (responsibilities spread evenly
    instead of a division by zero) still give finite non-negative terms within the bound."""
    topics_t = np.ascontiguousarray(np.array([[0.5, 0.5], [0.5, 0.5], [0.0, 0.0]]))
    alpha = np.array([0.5, 0.5])
    for document in ([1e308, 1e308, 1e308], [1.7e308, 1.7e308, 0.0], [0.0, 1.0, 2.0]):
        term = _term(np.array(document), topics_t, alpha, 1.0)
        assert np.all(np.isfinite(term)) and np.all(term >= 0) and np.linalg.norm(term) <= 1.0
    term = _term(np.array([0.0, 1.0, 2.0]), topics_t, alpha, 1.0)
    assert np.all(np.isfinite(term)) and np.linalg.norm(term) <= 1.0 and term[2].sum() > 0
    duplicated = sp.csr_matrix((np.array([2.0, 2.0]), np.array([0, 0]), np.array([0, 2])), shape=(1, 3))
    assert np.linalg.norm(clipped_expected_counts(duplicated, topics_t, alpha, 2, 1.0)) <= 1.0
    with pytest.raises(ValueError, match="non-negative topics"):
        release_expected_counts(LocalRowBlocks([duplicated], 3), -topics_t, alpha, clip=1.0,
                                noise_multiplier=1.0, source=resolve_noise(insecure_test_noise(0)))


@pytest.mark.parametrize("weights", WEIGHTS[:2], ids=["unweighted", "mild"])
def test_the_release_is_the_sum_of_the_terms(weights):
    """Replacing one document changes the summed statistic by the difference of its terms; the
    release comes back unweighted (row ``w`` over ``g_w``)."""
    rng = np.random.default_rng(3)
    topics_t = np.ascontiguousarray(rng.dirichlet(np.ones(WORDS), size=2).T)
    alpha = np.array([0.3, 0.6])
    corpus = np.array([[3.0, 0, 1], [0, 2, 2], [1, 1, 1], [0, 0, 0]])
    blocks = LocalRowBlocks([sp.csr_matrix(corpus[:2]), sp.csr_matrix(corpus[2:])], WORDS)
    source = resolve_noise(insecure_test_noise(0))
    exact = {"noise_multiplier": 0.0, "source": source, "word_weights": weights}
    total = release_expected_counts(blocks, topics_t, alpha, clip=1.0, **exact)
    expected = sum(_term(doc, topics_t, alpha, 1.0, weights=weights) for doc in corpus)
    if weights is not None:
        expected = expected / weights[:, None]
    np.testing.assert_allclose(total, expected, rtol=1e-12)
    unclipped = release_expected_counts(blocks, topics_t, alpha, clip=1e9, **exact)
    plain = sum(_term(doc, topics_t, alpha, 1e9) for doc in corpus)  # no clipping: the weights cancel
    np.testing.assert_allclose(unclipped, plain, rtol=1e-12)


def test_word_weights_are_bounded_and_favour_rare_words():
    weights = release_word_weights(np.array([0.5, 0.125, 0.0, 0.375]))
    np.testing.assert_allclose(weights, [1.0, 2.0, WORD_WEIGHT_MIN_RATIO**-0.5, (0.75) ** -0.5])
    assert np.all(release_word_weights(np.full(4, 0.25)) == 1.0)
    for bad in (np.zeros(3), np.array([0.5, np.nan]), np.empty(0)):
        with pytest.raises(ValueError, match="finite unigram"):
            release_word_weights(bad)
    topics_t, alpha = np.full((3, 2), 1 / 3), np.ones(2)
    with pytest.raises(ValueError, match="word_weights must be 3 finite positive"):
        clipped_expected_counts(sp.csr_matrix(np.ones((1, 3))), topics_t, alpha, 1, 1.0, np.array([1, 0, 1]))
    for bad in (np.empty(0), np.ones(2), np.array([1.0, np.inf, 1.0])):  # refused before any block is read
        with pytest.raises(ValueError, match="word_weights must be 3 finite positive"):
            release_expected_counts(LocalRowBlocks([sp.csr_matrix((0, 3))], 3), topics_t, alpha, clip=1.0,
                                    noise_multiplier=1.0, source=resolve_noise(insecure_test_noise(0)),
                                    word_weights=bad)  # fmt: skip


def test_each_rows_noise_is_the_release_noise_over_its_weight():
    """With no documents the release is the noise alone: row ``w``'s s.d. is ``z sqrt2 L / g_w``."""
    topics_t = np.full((2, 4000), 0.5)  # two words, 4000 topics: 4000 draws per row
    blocks = LocalRowBlocks([sp.csr_matrix((0, 2))], 2)
    released = release_expected_counts(blocks, topics_t, np.ones(4000), clip=1.0, noise_multiplier=3.0,
                                       source=resolve_noise(insecure_test_noise(5)),
                                       word_weights=np.array([1.0, 4.0]))  # fmt: skip
    sigma = 3.0 * refinement_sensitivity(1.0)
    np.testing.assert_allclose(released.std(axis=1), [sigma, sigma / 4], rtol=0.05)


def _audit(multiplier_factor: float, runs: int = 3000, weights: np.ndarray | None = None) -> float:
    """epsilon lower bound of one pass's release from two corpora that differ in one document (with
    ``weights``, read in the weighted space: each release's rows times ``g`` again)."""
    topics_t = np.ascontiguousarray(np.array([[0.9, 0.05], [0.05, 0.05], [0.05, 0.9]]))
    alpha = np.array([0.5, 0.5])
    base = [[2.0, 1, 0], [0, 1, 2]]
    first, second = [*base, [9.0, 0, 0]], [*base, [0.0, 0, 9]]  # terms on different topics: ~sqrt2 L apart
    clip = 1.0
    z = gaussian_sigma_analytic(1.0, 1e-5) * multiplier_factor
    direction = (_term(np.array(second[-1]), topics_t, alpha, clip, weights=weights)
                 - _term(np.array(first[-1]), topics_t, alpha, clip, weights=weights))  # fmt: skip
    assert np.linalg.norm(direction) > 1.35 * clip
    direction /= np.linalg.norm(direction)
    samples = []
    for seed, corpus in ((0, first), (1, second)):
        blocks = LocalRowBlocks([sp.csr_matrix(np.array(corpus))], WORDS)
        source = resolve_noise(insecure_test_noise(seed))
        releases = [
            release_expected_counts(blocks, topics_t, alpha, clip=clip, noise_multiplier=z, source=source,
                                    word_weights=weights) * (1.0 if weights is None else weights[:, None])
            for _ in range(runs)
        ]  # fmt: skip
        samples.append(np.array([float(np.sum(direction * release)) for release in releases]))
    return epsilon_lower_bound(samples[0], samples[1], 1e-5)


def test_audit_the_release_and_catch_an_under_noised_variant():
    assert _audit(1.0) <= 1.0
    assert _audit(0.2) > 1.5
    weights = np.array([1.0, 3.0, 2.0])  # the weighted release: the same noise for the same bound
    assert _audit(1.0, weights=weights) <= 1.0
    assert _audit(0.2, weights=weights) > 1.5


def test_refinement_reads_no_data_dependent_stopping_rule():
    """A fixed number of passes, no likelihood recorded, topics on the simplex."""
    rng = np.random.default_rng(0)
    corpus = sp.csr_matrix(rng.poisson(1.0, size=(200, 6)).astype(float))
    topics = rng.dirichlet(np.ones(6), size=3)
    unigram = np.full(6, 1 / 6)
    seen = []
    result = refine_topics_privately(
        LocalRowBlocks([corpus], 6), topics, np.full(3, 0.3), unigram, passes=3, clip=1.0,
        noise_multiplier=2.0, source=resolve_noise(insecure_test_noise(0)), on_pass=seen.append,
    )  # fmt: skip
    assert seen == [1, 2, 3] and result.n_passes == 3 and result.log_likelihood.size == 0
    np.testing.assert_allclose(result.topics.sum(axis=1), 1.0)
    assert np.all(result.topics > 0)
