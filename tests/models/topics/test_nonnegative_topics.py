"""Topics from a symmetric non-negative factor of the M2 release (``topic_recovery="nmf"``)."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from _helpers import topic_l1_error
from scipy.optimize import nnls
from sklearn.base import clone

import dptensor.models.topics._configuration1 as configuration1
import dptensor.models.topics.private_whitening as pw
from dptensor.datasets.lda import make_lda_corpus
from dptensor.models import PrivateSpectralLDA
from dptensor.models.topics import _private_plan
from dptensor.models.topics.nonnegative_subspace import symmetric_nmf
from dptensor.models.topics.nonnegative_topics import nonnegative_topic_factor, topics_from_factor
from dptensor.models.topics.plan import (
    plan_private_lda,
    plan_private_spectral_lda,
    prefers_nonnegative_topics,
)
from dptensor.privacy.noise import NoiseSource


def _separable(m, k, seed):
    """A non-negative ``H`` whose first ``k`` rows are anchor words (one topic each): identifiable."""
    rng = np.random.default_rng([seed, 7])
    H = rng.random((m, k)) * (rng.random((m, k)) < 0.4)
    H[:k] = np.diag(rng.random(k) + 1.0)
    return H


def _off_diagonal(A):
    return A - np.diag(np.diag(A))


def test_symmetric_nmf_with_an_imputed_diagonal_ignores_a_wrong_diagonal():
    H0 = _separable(30, 3, seed=0)
    A = H0 @ H0.T
    np.fill_diagonal(A, 50.0 * np.diag(A))  # a diagonal that is not of the form H H^T
    fitted = symmetric_nmf(A, 3, max_iter=20000, tol=1e-13, impute_diagonal=True)
    target = _off_diagonal(H0 @ H0.T)
    assert np.linalg.norm(_off_diagonal(fitted @ fitted.T) - target) < 1e-3 * np.linalg.norm(target)
    plain = symmetric_nmf(A, 3, max_iter=20000, tol=1e-13)  # fits the wrong diagonal too
    assert np.linalg.norm(_off_diagonal(plain @ plain.T) - target) > 0.05 * np.linalg.norm(target)


def test_factor_of_an_exact_moment_extends_the_core_to_every_word():
    H0 = _separable(40, 3, seed=1)
    A = H0 @ H0.T
    core = np.arange(20)
    F = nonnegative_topic_factor(A, 3, noise_scale=1e-12, core=core)
    assert F.shape == (40, 3) and np.all(F >= 0)
    target = _off_diagonal(A)
    # the rest words' rows come from least squares against the core factor: the whole moment is fitted
    assert np.linalg.norm(_off_diagonal(F @ F.T) - target) < 1e-2 * np.linalg.norm(target)
    # and each column is one planted topic (anchor words make the factor unique up to order)
    cos = (F / np.linalg.norm(F, axis=0)).T @ (H0 / np.linalg.norm(H0, axis=0))
    assert np.sort(cos.max(axis=1)).min() > 0.99


def test_factor_subtracts_exactly_one_noise_deviation():
    # a release that is H H^T plus one off-diagonal noise deviation everywhere: the factor is exact
    H0 = _separable(30, 3, seed=4)
    s = 0.3
    released = H0 @ H0.T + s / np.sqrt(2.0)
    F = nonnegative_topic_factor(released, 3, noise_scale=s, core=np.arange(15))
    target = _off_diagonal(H0 @ H0.T)
    assert np.linalg.norm(_off_diagonal(F @ F.T) - target) < 1e-2 * np.linalg.norm(target)


@pytest.mark.parametrize("seed, tight", [(7, True), (8, True), (5, False), (6, False)])
def test_factor_ignores_the_release_s_diagonal(seed, tight):
    H0 = _separable(30, 3, seed=seed)
    released = H0 @ H0.T
    np.fill_diagonal(released, 40.0 * np.diag(released))  # a diagonal far from H H^T
    core = np.arange(15)
    target = _off_diagonal(H0 @ H0.T)

    def residual(F, rows=slice(None)):
        part = np.ix_(np.arange(30)[rows], np.arange(30)[rows])
        return np.linalg.norm(_off_diagonal(F @ F.T)[part] - target[part]) / np.linalg.norm(target[part])

    F = nonnegative_topic_factor(released, 3, noise_scale=1e-12, core=core)
    error = residual(F)
    fits_the_diagonal = np.zeros((30, 3))  # the core factor of a factorisation that fits the diagonal too
    fits_the_diagonal[core] = symmetric_nmf(released[np.ix_(core, core)], 3)
    assert residual(F, core) < 1e-2 and residual(fits_the_diagonal, core) > 0.4
    # with the other rows: seeds 5 and 6 end in local minima (0.13 and 0.21 of the moment), 7 and 8 do not
    assert error < (1e-2 if tight else 0.25)


def test_factor_solves_the_other_rows_by_nonnegative_least_squares():
    H0 = _separable(30, 3, seed=5)
    core = np.arange(15)
    # the other words' rows: non-negative least squares against the core factor, not clipped least squares
    rng = np.random.default_rng(6)
    noisy = H0 @ H0.T + 0.05 * rng.normal(size=(30, 30))
    noisy = (noisy + noisy.T) / 2
    F = nonnegative_topic_factor(noisy, 3, noise_scale=0.1, core=core)
    thresholded = np.maximum(noisy - 0.1 / np.sqrt(2.0), 0.0)
    scale = thresholded.max()
    core_factor = F[core] / np.sqrt(scale)
    differs = 0
    for word in range(15, 30):
        block = thresholded[core, word] / scale
        expected = nnls(core_factor, block)[0]
        np.testing.assert_allclose(F[word] / np.sqrt(scale), expected, atol=1e-9)
        clipped = np.maximum(np.linalg.lstsq(core_factor, block, rcond=None)[0], 0.0)
        differs += not np.allclose(clipped, expected, atol=1e-6)
    assert differs > 0  # the check can tell the two apart


def test_factor_thresholds_at_one_noise_deviation_and_is_scale_equivariant():
    H0 = _separable(24, 2, seed=2)
    rng = np.random.default_rng(3)
    noise = rng.normal(size=(24, 24))
    released = H0 @ H0.T + 0.05 * (noise + noise.T)
    core = np.arange(12)
    F = nonnegative_topic_factor(released, 2, noise_scale=0.1, core=core)
    thresholded = np.maximum(released - 0.1 / np.sqrt(2.0), 0.0)
    again = nonnegative_topic_factor(thresholded + 0.1 / np.sqrt(2.0), 2, noise_scale=0.1, core=core)
    np.testing.assert_allclose(F, again, rtol=1e-9, atol=1e-12)  # only the thresholded release matters
    for c in (1e-200, 1e200):  # c A with noise c s: the factor of sqrt(c), no overflow or underflow
        scaled = nonnegative_topic_factor(c * released, 2, noise_scale=c * 0.1, core=core)
        np.testing.assert_allclose(scaled / np.sqrt(c), F, rtol=1e-6, atol=1e-12)
    assert np.all(nonnegative_topic_factor(-np.ones((5, 5)), 2, 0.1, core=np.arange(3)) == 0)
    with pytest.raises(ValueError, match="core"):
        nonnegative_topic_factor(released, 2, 0.1, core=[0])
    with pytest.raises(ValueError, match="core"):
        nonnegative_topic_factor(released, 2, 0.1, core=[0, 24])


def test_topics_from_factor_keep_the_unigram_distribution_off_the_support():
    unigram = np.array([0.3, 0.2, 0.1, 0.1, 0.2, 0.1])
    support = np.array([0, 1, 4])  # mass 0.7
    factor = np.array([[0.6, 0.0], [0.2, 0.3], [0.0, 0.1]])  # column sums 0.8 and 0.4
    topics, alpha = topics_from_factor(factor, support, unigram, alpha0=1.0)
    np.testing.assert_allclose(topics.sum(axis=1), 1.0)
    np.testing.assert_allclose(alpha, [0.8, 0.2])  # alpha0 (1^T h_i)^2 / sum_j (1^T h_j)^2, decreasing
    np.testing.assert_allclose(topics[0], [0.7 * 0.75, 0.7 * 0.25, 0.1, 0.1, 0.0, 0.1])
    np.testing.assert_allclose(topics[1], [0.0, 0.7 * 0.75, 0.1, 0.1, 0.7 * 0.25, 0.1])
    zero, alpha_zero = topics_from_factor(np.zeros((3, 2)), support, unigram, alpha0=1.0)
    np.testing.assert_allclose(zero[:, support], 0.7 / 3)  # no information: flat on the support
    np.testing.assert_allclose(alpha_zero, [0.5, 0.5])  # no information: equal shares of alpha0
    _, tiny = topics_from_factor(np.array([[1.0, 0.0], [1.0, 1e-300], [0.0, 0.0]]), support, unigram, 2.0)
    assert tiny.sum() == pytest.approx(2.0) and tiny.min() > 0  # bounded away from 0 (1e-12 of alpha0)


def _corpus():
    return make_lda_corpus(20000, 40, 3, alpha=0.1, doc_length=40, topic_concentration=0.2, random_state=3)


def test_refinement_gives_the_unigram_release_more_of_the_moments_budget():
    """With private refinement after it, the nmf recovery's m1 release takes 0.4 of the moments' share
    (the passes rescale to the released unigram distribution); the guarantee is unchanged."""
    c = _corpus()
    kwargs = dict(epsilon=4.0, delta=1e-6, topic_recovery="nmf", random_state=0)
    refined = PrivateSpectralLDA(3, 0.3, refine_passes=2, **kwargs).fit(c.counts)
    moments = 1.0 - refined.budget_split_["rf"]
    assert refined.budget_split_ == pytest.approx(
        {"m1": 0.4 * moments, "m2": 0.6 * moments, "rf": refined.budget_split_["rf"]}
    )
    assert _private_plan.NMF_REFINED_BUDGET_SPLIT == {"m1": 0.4, "m2": 0.6}
    alone = PrivateSpectralLDA(3, 0.3, refine=None, **kwargs).fit(c.counts)
    assert alone.budget_split_ == pytest.approx(_private_plan.NMF_BUDGET_SPLIT)
    for model in (refined, alone):  # the same total, composed exactly
        assert model.guarantee_.holds and model.guarantee_.epsilon == pytest.approx(4.0, rel=1e-6)
    # the m1 release's noise multiplier falls as its share grows (mu_m1 = sqrt(share) mu)
    multipliers = [model.guarantee_.details["noise_multipliers"]["m1"] for model in (alone, refined)]
    shares = [model.budget_split_["m1"] for model in (alone, refined)]
    assert multipliers[0] / multipliers[1] == pytest.approx(math.sqrt(shares[1] / shares[0]), rel=1e-6)


def test_nmf_recovery_finds_the_topics_with_two_releases():
    c = _corpus()
    model = PrivateSpectralLDA(3, 0.3, epsilon=4.0, delta=1e-6, topic_recovery="nmf", random_state=0,
                               refine=None)  # the moment releases alone (refinement adds "rf" passes)
    model.fit(c.counts)
    assert model.topic_recovery_ == "nmf"
    assert topic_l1_error(c.topics, model.components_) < 0.35  # chance is about 1.7
    assert np.all(model.alpha_ > 0) and np.all(np.diff(model.alpha_) <= 0)
    g = model.guarantee_
    assert g.holds and g.n_releases == 2 and g.details["topic_recovery"] == "nmf"
    assert set(model.budget_split_) == {"m1", "m2"} == set(model.noise_scales_)
    assert model.budget_split_ == pytest.approx({"m1": 0.2, "m2": 0.8}) == _private_plan.NMF_BUDGET_SPLIT
    assert g.details["third_clip"] is None
    assert set(g.details["sensitivities"]) == {"m1", "m2"}
    released_total = model._released_total[0]  # S0 from the m1 release: the m2 noise is z Delta / S0
    expected = g.details["noise_multipliers"]["m2"] * g.details["sensitivities"]["m2"] / released_total
    assert model.noise_scales_["m2"] == pytest.approx(expected, rel=1e-12)
    assert model.whitening_alignment_ is None and model.third_clip_ is None
    tensor = clone(model).set_params(topic_recovery="tensor").fit(c.counts)
    assert tensor.topic_recovery_ == "tensor" and tensor.guarantee_.details["topic_recovery"] == "tensor"
    # the core is the more frequent half of the whitening words by the released unigram distribution
    captured = {}

    def capture(released, rank, noise_scale, core):
        captured["core"] = np.asarray(core)
        return original(released, rank, noise_scale, core)

    original = configuration1.nonnegative_topic_factor
    configuration1.nonnegative_topic_factor = capture
    try:
        again = clone(model).set_params(topic_recovery="nmf", whitening_words=20).fit(c.counts)
    finally:
        configuration1.nonnegative_topic_factor = original
    support = np.sort(np.argsort(-again.unigram_, kind="stable")[:20])
    frequent = np.sort(support[np.argsort(-again.unigram_[support], kind="stable")[:10]])
    np.testing.assert_array_equal(np.sort(support[captured["core"]]), frequent)
    # the split it reports can be passed back; a third-moment share cannot
    again = clone(model).set_params(budget_split=model.budget_split_).fit(c.counts)
    assert again.budget_split_ == pytest.approx(model.budget_split_)
    with pytest.raises(ValueError, match="topic_recovery='nmf' must have exactly the keys"):
        clone(model).set_params(budget_split={"m1": 1, "m2": 1, "e3": 1}).fit(c.counts)


def test_nmf_recovery_is_post_processing_of_the_two_releases(monkeypatch):
    """Two different corpora whose m1 and m2 releases are the same give the same topics."""
    c = _corpus()
    other = make_lda_corpus(20000, 40, 3, alpha=0.5, doc_length=30, random_state=9)
    released = {}

    def fixed_m1(self, values, scale):
        key = ("m1", values.shape)
        released.setdefault(key, values + scale * np.random.default_rng(0).normal(size=values.shape))
        return released[key].copy()

    def fixed_m2(values, scale, **kwargs):
        released.setdefault("m2", values + scale * np.eye(values.shape[0]))
        return released["m2"].copy()

    monkeypatch.setattr(NoiseSource, "add_gaussian", fixed_m1)
    monkeypatch.setattr(pw, "add_symmetric_gaussian", fixed_m2)
    fits = [
        PrivateSpectralLDA(3, 0.3, epsilon=4.0, delta=1e-6, topic_recovery="nmf", whitening_words=20,
                           random_state=0).fit(x)
        for x in (c.counts, other.counts)
    ]  # fmt: skip
    np.testing.assert_array_equal(fits[0].components_, fits[1].components_)
    np.testing.assert_array_equal(fits[0].alpha_, fits[1].alpha_)


@pytest.mark.parametrize("params, message", [
    ({"clip": None}, "topic_recovery='nmf' applies to the clipped config=1"),
    ({"public_corpus": sp.csr_matrix(np.ones((5, 40)))}, "topic_recovery='nmf' applies"),
    ({"whitening_words": 6000}, "at most 5000 whitening words"),
    ({"private_whitening": "noisy-power"}, "needs private_whitening 'auto' or 'analyze-gauss'"),
])  # fmt: skip
def test_nmf_recovery_refuses_what_it_cannot_factorise(params, message):
    n_words = 6000 if "whitening_words" in params else 40
    counts = sp.random(50, n_words, density=0.2, format="csr", random_state=0) * 5
    counts.data = np.ceil(counts.data)
    model = PrivateSpectralLDA(3, epsilon=1.0, delta=1e-6, topic_recovery="nmf", **params)
    with pytest.raises(ValueError, match=message):
        model.check_configuration(50, n_words)


def test_auto_takes_the_factor_only_where_the_planner_predicts_little_signal():
    # public sizes of the WordNet glosses (N = 47028, V = 2000, k = 10): epsilon 1 -> nmf, 2 and 4 -> tensor
    assert prefers_nonnegative_topics(47028, 2000, 10, 1.0, 1.0, 1e-6)
    assert not prefers_nonnegative_topics(47028, 2000, 10, 1.0, 2.0, 1e-6)
    assert not prefers_nonnegative_topics(47028, 2000, 10, 1.0, 4.0, 1e-6)
    assert not prefers_nonnegative_topics(166389, 2000, 10, 1.0, 1.0, 1e-6)  # the change logs' N
    assert plan_private_lda(47028, 2000, 10, 1.0, 1.0, 1e-6).topic_recovery == "nmf"
    assert "topic_recovery='nmf'" in plan_private_lda(47028, 2000, 10, 1.0, 1.0, 1e-6).describe()
    assert plan_private_lda(47028, 2000, 10, 1.0, 4.0, 1e-6).topic_recovery == "tensor"
    for epsilon, expected in ((0.05, "nmf"), (4.0, "tensor")):
        model = PrivateSpectralLDA(3, 0.3, epsilon=epsilon, delta=1e-6, random_state=0)
        assert prefers_nonnegative_topics(20000, 40, 3, 0.3, epsilon, 1e-6) == (expected == "nmf")
        assert model.fit(_corpus().counts).topic_recovery_ == expected
        assert model.guarantee_.details["topic_recovery"] == expected

    def _recovery(estimator):  # the plan's topic recovery, from the parameters and (N, d) only
        return plan_private_spectral_lda(estimator.get_params(), 20000, 40).topic_recovery

    # public_corpus or the unclipped modes: always the tensor step
    unclipped = PrivateSpectralLDA(3, 0.3, epsilon=0.05, delta=1e-6, clip=None)
    assert _recovery(unclipped) == "tensor"
    # a parameter of the tensor step's releases set by the user keeps that step
    for params in ({"budget_split": {"m1": 1, "m2": 2, "e3": 1}}, {"third_clip": 0.01}, {"third_clip": None},
                   {"whitening_words": 20}):  # fmt: skip
        model = PrivateSpectralLDA(3, 0.3, epsilon=0.05, delta=1e-6, **params)
        assert _recovery(model) == "tensor"
    assert _recovery(PrivateSpectralLDA(3, 0.3, epsilon=0.05, delta=1e-6)) == "nmf"
    power = PrivateSpectralLDA(3, 0.3, epsilon=0.05, delta=1e-6, private_whitening="noisy-power")
    assert _recovery(power) == "tensor"  # nmf factorises an Analyze Gauss release
