"""PrivateSpectralLDA's private refinement (issue 35, item 2): the plan, the fit, the ground truth."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment

from dptensor import PrivateSpectralLDA
from dptensor.datasets.lda import make_lda_corpus
from dptensor.models.topics import private_refinement
from dptensor.models.topics._private_plan import (
    REFINE_MAX_NOISE,
    REFINE_PASSES,
    REFINE_SHARE,
    moments_epsilon,
    plan_private_spectral_lda,
    refinement_noise_ratio,
)
from dptensor.models.topics._releases import check_clipped_counts
from dptensor.models.topics.moments import document_blocks
from dptensor.models.topics.private_refinement import ReleaseAverage
from dptensor.privacy import insecure_test_noise
from dptensor.privacy.calibration import gaussian_epsilon
from dptensor.privacy.noise import resolve_noise

BASE = {"n_components": 10, "alpha0": 1.0, "epsilon": 4.0, "delta": 1e-6}


def _composed_epsilon(plan) -> float:
    counts = {"m1": 1, "m2": plan.m2_releases, "q3": 1, "e3": 1, "rf": plan.refine_passes}
    mu2 = sum(counts[e] / plan.noise_multipliers[e] ** 2 for e in plan.noise_multipliers)
    return gaussian_epsilon(1.0 / math.sqrt(mu2), BASE["delta"])


def test_the_passes_share_the_budget_and_compose_exactly():
    plan = plan_private_spectral_lda(BASE, 55_000, 2000)
    assert plan.refine_passes == REFINE_PASSES
    assert plan.shares["rf"] == pytest.approx(REFINE_SHARE)
    assert sum(plan.shares.values()) == pytest.approx(1.0)
    assert _composed_epsilon(plan) == pytest.approx(4.0, rel=1e-9)
    assert plan.guarantee.epsilon == 4.0 and plan.guarantee.holds
    assert plan.guarantee.n_releases == 1 + plan.m2_releases + 1 + ("q3" in plan.shares) + plan.refine_passes
    details = plan.guarantee.details
    assert details["refinement"] == {"passes": REFINE_PASSES, "clip": 1.0}
    assert details["sensitivities"]["rf"] == pytest.approx(math.sqrt(2.0))


def test_without_refinement_the_plan_is_the_moments_plan():
    plan = plan_private_spectral_lda({**BASE, "refine": None}, 55_000, 2000)
    assert plan.refine_passes == 0 and "rf" not in plan.shares
    assert _composed_epsilon(plan) == pytest.approx(4.0, rel=1e-9)
    # the moments of a refined fit are the moments-only plan at the moments' own budget
    refined = plan_private_spectral_lda(BASE, 55_000, 2000)
    moments_only = {**BASE, "refine": None, "epsilon": moments_epsilon(4.0, 1e-6, REFINE_SHARE)}
    half = plan_private_spectral_lda(moments_only, 55_000, 2000)
    assert half.whitening_words == refined.whitening_words and half.topic_recovery == refined.topic_recovery
    for edge in half.noise_multipliers:
        assert refined.noise_multipliers[edge] == pytest.approx(half.noise_multipliers[edge], rel=1e-9)


def test_the_passes_follow_the_predicted_noise_of_their_release():
    ratio = refinement_noise_ratio(55_000, 2000, 10, 1.0, 1e-6, REFINE_SHARE)
    assert ratio < REFINE_MAX_NOISE  # Debian descriptions at epsilon = 1: refinement pays (6%)
    assert plan_private_spectral_lda({**BASE, "epsilon": 1.0}, 55_000, 2000).refine_passes == REFINE_PASSES
    sizes = (8_000, 20_000, 35_000, 60_000, 10**6)
    passes = [plan_private_spectral_lda({**BASE, "epsilon": 1.0}, n, 2000).refine_passes for n in sizes]
    assert passes == [0, 0, REFINE_PASSES, REFINE_PASSES, REFINE_PASSES]  # 35 000 at epsilon = 1 gained 1.2%
    for n, made in zip(sizes, passes, strict=True):
        ratio = refinement_noise_ratio(n, 2000, 10, 1.0, 1e-6, REFINE_SHARE)
        assert (made > 0) == (ratio <= REFINE_MAX_NOISE)
    assert plan_private_spectral_lda({**BASE, "refine_passes": 2}, 55_000, 2000).refine_passes == 2
    assert plan_private_spectral_lda({**BASE, "clip": None}, 55_000, 2000).refine_passes == 0


def test_the_release_average_weighs_release_t_by_t_squared():
    rng = np.random.default_rng(0)
    releases = [rng.normal(size=(5, 3)) for _ in range(4)]
    average = ReleaseAverage(2.0)
    for t, release in enumerate(releases, start=1):
        counts, noise = average.add(release)
        weights = np.arange(1, t + 1, dtype=float) ** 2
        expected = sum(w * r for w, r in zip(weights, releases[:t], strict=True)) / weights.sum()
        np.testing.assert_allclose(counts, expected)
        assert noise == pytest.approx(2.0 * math.sqrt(np.sum(weights**2)) / weights.sum())
    first = np.ones((2, 2))
    independent = ReleaseAverage(1.0)
    counts, _ = independent.add(first)
    counts[:] = 5.0
    second, _ = independent.add(np.zeros((2, 2)))
    assert np.all(first == 1.0) and np.allclose(second, 0.2)  # neither the release nor the state moved
    with pytest.raises(ValueError, match="shape"):
        independent.add(np.zeros((3, 2)))
    flat = ReleaseAverage(1.0, power=0.0)
    for release in releases:
        counts, noise = flat.add(release)
    np.testing.assert_allclose(counts, np.mean(releases, axis=0))
    assert noise == pytest.approx(0.5)


def test_averaging_the_releases_keeps_noisy_passes_near_good_topics(monkeypatch):
    """From the true topics, passes whose topics come from their own release alone drift away with
    the noise (the equilibrium of noisy EM); the weighted average of the releases stays closer."""
    corpus = make_lda_corpus(20_000, 60, 4, alpha=0.1, doc_length=40, topic_concentration=0.1, random_state=1)
    blocks, unigram = _blocks_and_unigram(corpus.counts)
    alpha = np.full(4, 0.1)

    def refine():
        result = private_refinement.refine_topics_privately(
            blocks, corpus.topics, alpha, unigram, passes=16, clip=1.0, noise_multiplier=60.0,
            source=resolve_noise(insecure_test_noise(3)),
        )  # fmt: skip
        return _matched_error(result.topics, corpus.topics)

    averaged = refine()

    class LastRelease(ReleaseAverage):
        def add(self, released):
            return released, self.noise_std

    monkeypatch.setattr(private_refinement, "ReleaseAverage", LastRelease)
    last = refine()
    assert averaged < 0.7 * last


def _blocks_and_unigram(counts) -> tuple:
    """A corpus as the private passes read it, and its (here exact) unigram distribution."""
    counts = sp.csr_matrix(counts, dtype=np.float64)
    unigram = np.asarray(counts.sum(axis=0)).ravel() / counts.sum()
    return document_blocks(check_clipped_counts(counts)), unigram


def _corpus():
    return make_lda_corpus(30_000, 60, 4, alpha=0.1, doc_length=40, topic_concentration=0.1, random_state=0)


def _matched_error(estimate: np.ndarray, truth: np.ndarray) -> float:
    return _matched_mean(np.abs(estimate[:, None, :] - truth[None, :, :]).sum(axis=2))


def _matched_mean(cost: np.ndarray) -> float:
    """The mean cost of the best one-to-one matching of the rows to the columns."""
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


@pytest.mark.slow  # a statistical check of the topics' quality (4 s)
def test_refined_private_topics_are_closer_to_the_truth():
    corpus = _corpus()
    model = PrivateSpectralLDA(4, alpha0=0.4, epsilon=4.0, delta=1e-6, random_state=0,
                               noise=insecure_test_noise(0)).fit(corpus.counts)  # fmt: skip
    assert model.refinement_ is not None and model.refinement_.n_passes == REFINE_PASSES
    assert model.refinement_.log_likelihood.size == 0
    assert "rf" in model.noise_scales_ and model.budget_split_["rf"] == pytest.approx(REFINE_SHARE)
    z = model.guarantee_.details["noise_multipliers"]["rf"]
    assert model.noise_scales_["rf"] == pytest.approx(z * math.sqrt(2.0) * model.refine_clip)
    refined = _matched_error(model.components_, corpus.topics)
    moments = _matched_error(model.moment_components_, corpus.topics)
    assert refined < 0.75 * moments
    held_out = corpus.counts[:3000]
    clipped = PrivateSpectralLDA(4, alpha0=0.4, epsilon=4.0, delta=1e-6, refine_passes=1, refine_clip=0.25,
                                 random_state=0, noise=insecure_test_noise(0)).fit(corpus.counts[:2000])
    z = clipped.guarantee_.details["noise_multipliers"]["rf"]
    assert clipped.noise_scales_["rf"] == pytest.approx(z * math.sqrt(2.0) * 0.25)
    assert "refinement" in clipped.guarantee_.public
    plain = PrivateSpectralLDA(4, alpha0=0.4, epsilon=4.0, delta=1e-6, random_state=0, refine=None,
                               noise=insecure_test_noise(0)).fit(corpus.counts)  # fmt: skip
    assert plain.refinement_ is None and np.array_equal(plain.components_, plain.moment_components_)
    assert model.perplexity(held_out) < plain.perplexity(held_out)


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_a_saved_refined_private_model_infers_as_the_fitted_one(tmp_path, suffix):
    import scipy.sparse as sp

    from dptensor.cli.lda import load_model, save_model
    from dptensor.datasets.corpus import Corpus

    corpus = make_lda_corpus(3000, 30, 3, alpha=0.1, doc_length=40, topic_concentration=0.1, random_state=0)
    model = PrivateSpectralLDA(3, alpha0=0.3, epsilon=50.0, delta=1e-6, refine_passes=2, random_state=0,
                               noise=insecure_test_noise(0)).fit(corpus.counts)  # fmt: skip
    assert model.refinement_.n_passes == 2
    path = tmp_path / f"model{suffix}"
    save_model(path, model, Corpus(sp.csr_matrix(corpus.counts), [f"w{i}" for i in range(30)], "test"))
    loaded, _ = load_model(path)
    assert loaded.refinement_ is not None and loaded.refinement_.n_passes == 2
    np.testing.assert_allclose(loaded.refinement_.doc_topic_prior, model.refinement_.doc_topic_prior)
    np.testing.assert_allclose(loaded.transform(corpus.counts[:50]), model.transform(corpus.counts[:50]))


def test_weighting_rare_words_brings_the_passes_closer_to_the_true_topics(monkeypatch):
    """Word weights ``(u_max / u_w)^(1/2)`` in the release (its noise on row ``w`` falls to ``sigma / g_w``)
    against every weight 1, from the true topics, same noise: the topics' KL divergence from the truth
    falls (sparse topics over 200 words: word frequencies spread over four orders of magnitude)."""
    corpus = make_lda_corpus(8_000, 200, 4, alpha=0.1, doc_length=40, topic_concentration=0.05,
                             random_state=1)  # fmt: skip
    blocks, unigram = _blocks_and_unigram(corpus.counts)
    weights = private_refinement.release_word_weights

    def divergence(weighted: bool, seed: int) -> float:
        chosen = weights if weighted else (lambda u: np.ones_like(u))
        monkeypatch.setattr(private_refinement, "release_word_weights", chosen)
        result = private_refinement.refine_topics_privately(
            blocks, corpus.topics, np.full(4, 0.1), unigram, passes=8, clip=1.0, noise_multiplier=12.0,
            source=resolve_noise(insecure_test_noise(seed)),
        )  # fmt: skip
        return _matched_divergence(result.topics, corpus.topics)

    weighted = sum(divergence(True, seed) for seed in (1, 3))
    unweighted = sum(divergence(False, seed) for seed in (1, 3))
    assert weighted < 0.85 * unweighted  # measured 0.129 against 0.181


def _matched_divergence(estimate: np.ndarray, truth: np.ndarray) -> float:
    logs = np.log(truth, where=truth > 0, out=np.zeros_like(truth))
    return _matched_mean((truth * logs).sum(axis=1)[:, None] - truth @ np.log(estimate).T)  # KL(truth || est)


def test_the_weights_come_from_the_unigram_and_each_rows_pseudo_counts_from_its_own_noise(monkeypatch):
    """The passes weigh the words by ``release_word_weights(unigram)`` and hand ``denoised_topics``
    the average's noise over ``g_w`` for row ``w`` (not one number for every row)."""
    rng = np.random.default_rng(0)
    corpus = sp.csr_matrix(rng.poisson(1.0, size=(300, 6)).astype(float))
    unigram = np.array([0.4, 0.2, 0.2, 0.1, 0.05, 0.05])
    seen = {"unigram": [], "noise": []}
    weights, denoise = private_refinement.release_word_weights, private_refinement.denoised_topics

    def recording_weights(u):
        seen["unigram"].append(np.array(u))
        return weights(u)

    def recording_denoise(released, noise_std, *args):
        seen["noise"].append(np.array(noise_std))
        return denoise(released, noise_std, *args)

    monkeypatch.setattr(private_refinement, "release_word_weights", recording_weights)
    monkeypatch.setattr(private_refinement, "denoised_topics", recording_denoise)
    private_refinement.refine_topics_privately(
        document_blocks(check_clipped_counts(corpus)), rng.dirichlet(np.ones(6), size=3), np.full(3, 0.3),
        unigram, passes=2, clip=1.0, noise_multiplier=2.0, source=resolve_noise(insecure_test_noise(0)),
    )  # fmt: skip
    assert len(seen["unigram"]) == 1 and np.array_equal(seen["unigram"][0], unigram)
    sigma = 2.0 * math.sqrt(2.0)
    for t, noise in enumerate(seen["noise"], start=1):
        weights_t = np.arange(1, t + 1, dtype=float) ** 2
        average_noise = sigma * math.sqrt(np.sum(weights_t**2)) / weights_t.sum()
        np.testing.assert_allclose(noise, average_noise / weights(unigram))
    # one number per row or the same number broadcast: the same topics
    released, previous = rng.uniform(0, 5, size=(6, 3)), rng.dirichlet(np.ones(6), size=3).T
    alpha = np.full(3, 0.3)
    np.testing.assert_array_equal(denoise(released, 1.5, previous, alpha, unigram),
                                  denoise(released, np.full(6, 1.5), previous, alpha, unigram))  # fmt: skip
