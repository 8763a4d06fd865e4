"""PrivateSpectralLDA's private refinement (issue 35, item 2): the plan, the fit, the ground truth."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dptensor import PrivateSpectralLDA
from dptensor.datasets.lda import make_lda_corpus
from dptensor.models.topics._private_plan import (
    REFINE_MAX_NOISE,
    REFINE_MAX_PASSES,
    REFINE_NOISE_LEVEL,
    moments_epsilon,
    plan_private_spectral_lda,
    refinement_noise_ratio,
)
from dptensor.privacy import insecure_test_noise
from dptensor.privacy.calibration import gaussian_epsilon

BASE = {"n_components": 10, "alpha0": 1.0, "epsilon": 4.0, "delta": 1e-6}


def _composed_epsilon(plan) -> float:
    counts = {"m1": 1, "m2": plan.m2_releases, "q3": 1, "e3": 1, "rf": plan.refine_passes}
    mu2 = sum(counts[e] / plan.noise_multipliers[e] ** 2 for e in plan.noise_multipliers)
    return gaussian_epsilon(1.0 / math.sqrt(mu2), BASE["delta"])


def test_the_passes_share_the_budget_and_compose_exactly():
    plan = plan_private_spectral_lda(BASE, 55_000, 2000)
    assert plan.refine_passes == REFINE_MAX_PASSES
    assert plan.shares["rf"] == pytest.approx(0.5) and sum(plan.shares.values()) == pytest.approx(1.0)
    assert _composed_epsilon(plan) == pytest.approx(4.0, rel=1e-9)
    assert plan.guarantee.epsilon == 4.0 and plan.guarantee.holds
    assert plan.guarantee.n_releases == 1 + plan.m2_releases + 1 + ("q3" in plan.shares) + plan.refine_passes
    details = plan.guarantee.details
    assert details["refinement"] == {"passes": REFINE_MAX_PASSES, "clip": 1.0}
    assert details["sensitivities"]["rf"] == pytest.approx(math.sqrt(2.0))


def test_without_refinement_the_plan_is_the_moments_plan():
    plan = plan_private_spectral_lda({**BASE, "refine": None}, 55_000, 2000)
    assert plan.refine_passes == 0 and "rf" not in plan.shares
    assert _composed_epsilon(plan) == pytest.approx(4.0, rel=1e-9)
    # the moments of a refined fit are the moments-only plan at the moments' own budget
    refined = plan_private_spectral_lda(BASE, 55_000, 2000)
    half = plan_private_spectral_lda({**BASE, "refine": None, "epsilon": moments_epsilon(4.0, 1e-6, 0.5)},
                                     55_000, 2000)  # fmt: skip
    assert half.whitening_words == refined.whitening_words and half.topic_recovery == refined.topic_recovery
    for edge in half.noise_multipliers:
        assert refined.noise_multipliers[edge] == pytest.approx(half.noise_multipliers[edge], rel=1e-9)


def test_the_passes_follow_the_predicted_noise_of_one_pass():
    ratio = refinement_noise_ratio(55_000, 2000, 10, 1.0, 1e-6, 0.5)
    assert ratio > REFINE_MAX_NOISE  # Debian descriptions at epsilon = 1: refinement does not pay
    assert plan_private_spectral_lda({**BASE, "epsilon": 1.0}, 55_000, 2000).refine_passes == 0
    passes = [plan_private_spectral_lda({**BASE, "epsilon": 1.0}, n, 2000).refine_passes
              for n in (20_000, 60_000, 120_000, 300_000, 10**6)]  # fmt: skip
    assert passes == sorted(passes) and passes[0] == passes[1] == 0 and passes[-1] == REFINE_MAX_PASSES
    ratio = refinement_noise_ratio(120_000, 2000, 10, 1.0, 1e-6, 0.5)
    assert 0 < passes[2] == math.floor((REFINE_NOISE_LEVEL / ratio) ** 2) < REFINE_MAX_PASSES
    assert plan_private_spectral_lda({**BASE, "refine_passes": 2}, 55_000, 2000).refine_passes == 2
    assert plan_private_spectral_lda({**BASE, "clip": None}, 55_000, 2000).refine_passes == 0


def _corpus():
    return make_lda_corpus(30_000, 60, 4, alpha=0.1, doc_length=40, topic_concentration=0.1, random_state=0)


def _matched_error(estimate: np.ndarray, truth: np.ndarray) -> float:
    from scipy.optimize import linear_sum_assignment

    cost = np.abs(estimate[:, None, :] - truth[None, :, :]).sum(axis=2)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


def test_refined_private_topics_are_closer_to_the_truth():
    corpus = _corpus()
    model = PrivateSpectralLDA(4, alpha0=0.4, epsilon=4.0, delta=1e-6, random_state=0,
                               noise=insecure_test_noise(0)).fit(corpus.counts)  # fmt: skip
    assert model.refinement_ is not None and model.refinement_.n_passes == REFINE_MAX_PASSES
    assert model.refinement_.log_likelihood.size == 0
    assert "rf" in model.noise_scales_ and model.budget_split_["rf"] == pytest.approx(0.5)
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
