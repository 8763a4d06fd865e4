"""TensorCompletion: recovery, the paper's per-entry SGD, noise scales, guarantees, errors."""

from __future__ import annotations

import math
import warnings

import dp_accounting
import numpy as np
import pytest

from dptensor._validation import NotFittedError
from dptensor.datasets.entries import make_low_rank_completion, train_test_split_entries
from dptensor.models._options import build_estimator, flat_params
from dptensor.models.completion import CompletionOptions, plan_completion
from dptensor.models.completion._sgd import refit_c_clipped
from dptensor.models.completion.estimator import PRIVACY_MODES, TensorCompletion, rmse
from dptensor.privacy import (
    PrivacyWarning,
    UnprovenPrivacyError,
    composed_noise_multiplier,
    enable_features,
    insecure_test_noise,
    pld_composed_epsilon,
    resolve_noise,
)


def _problem(model="cp", snr=1e12, missing=0.5, seed=0, min_max=False):
    prob = make_low_rank_completion(
        (20, 20, 20), 3, model=model, snr=snr, missing_ratio=missing, min_max=min_max, random_state=seed
    )
    train, test = train_test_split_entries(prob.observed, 0.2, random_state=seed + 1)
    return prob, train, test


@pytest.mark.parametrize("model", ["cp", "tucker"])
def test_recovers_low_rank_tensor_from_half_the_entries(model):
    prob, train, test = _problem(model)
    fit = TensorCompletion(3, model=model, random_state=0, options=CompletionOptions(reg=0.0))
    fit.fit(train.indices, train.values, train.shape)
    error = rmse(prob.truth_at(test.indices), fit.predict(test.indices))
    assert error < 1e-3 * np.std(test.values)  # held-out cells, unit-RMS tensor
    full = fit.to_dense()
    assert full.shape == (20, 20, 20)
    assert np.max(np.abs(full - prob.truth_tensor)) < 1e-2
    assert fit.guarantee_ is None
    assert len(fit.factors_) == 3 and fit.factors_[0].shape == (20, 3)
    assert (fit.core_ is None) == (model == "cp")


def test_noisy_completion_beats_the_noise():
    prob, train, test = _problem("cp", snr=4.0, missing=0.5)
    fit = TensorCompletion(3, random_state=0, options=CompletionOptions(reg=0.01, learning_rate=0.01)).fit(
        train.indices, train.values, train.shape
    )
    truth = prob.truth_at(test.indices)
    # denoised: much closer to the truth than the observations are
    assert rmse(truth, fit.predict(test.indices)) < 0.5 * prob.noise_std


def _sequential_cp_sgd(indices, values, factors, eta, lam, n_epochs, rng):
    """The paper's per-entry SGD written as a Python loop (reference for batch_size=1)."""
    a_mat, b_mat, c_mat = (f.copy() for f in factors)
    counts = [np.bincount(indices[:, m], minlength=f.shape[0]) for m, f in enumerate(factors)]
    for _ in range(n_epochs):
        for e in rng.permutation(len(values)):
            i, j, k = indices[e]
            a, b, c = a_mat[i].copy(), b_mat[j].copy(), c_mat[k].copy()
            r = values[e] - np.sum(a * b * c)
            a_mat[i] = a - eta * (-2 * r * b * c + 2 * lam / counts[0][i] * a)
            b_mat[j] = b - eta * (-2 * r * a * c + 2 * lam / counts[1][j] * b)
            c_mat[k] = c - eta * (-2 * r * a * b + 2 * lam / counts[2][k] * c)
    return a_mat, b_mat, c_mat


def test_batch_size_one_is_the_sequential_algorithm():
    rng = np.random.default_rng(5)
    shape = (4, 5, 6)
    indices = np.argwhere(rng.random(shape) < 0.5)
    values = rng.standard_normal(len(indices))
    fit = TensorCompletion(2, solver="sgd", random_state=7,
                           options=CompletionOptions(batch_size=1, n_epochs=3, learning_rate=0.05, reg=0.1))
    fit.fit(indices, values, shape)
    # replay the same random stream: initial factors, then one permutation per epoch
    stream = np.random.default_rng(7)
    init = [0.5 * np.abs(stream.standard_normal((dim, 2))) for dim in shape]
    expected = _sequential_cp_sgd(indices, values, init, 0.05, 0.1, 3, stream)
    for got, want in zip(fit.factors_, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("privacy", PRIVACY_MODES)
@pytest.mark.parametrize("model", ["cp", "tucker"])
def test_same_seed_same_result(privacy, model):
    """Equal seeds repeat the public randomness; the privacy noise is fresh unless test noise is asked for."""
    _, train, _ = _problem(model, snr=4.0)
    kwargs = dict(model=model, privacy=privacy, epsilon=1.0 if privacy else None, n_epochs=3,
                  value_range=(-3.0, 3.0), clip=0.5, neighbouring="entry-value" if privacy else None)

    def fit(seed, **extra):
        with enable_features("unproven"):
            return build_estimator(TensorCompletion, rank=3, random_state=seed, **kwargs, **extra).fit(
                train.indices, train.values, train.shape)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        # noise= without privacy is an error (issue 17): test noise only for private fits
        test_noise = {"noise": insecure_test_noise(4)} if privacy else {}
        one, two = fit(11, **test_noise), fit(11, **test_noise)
        three = fit(12, **test_noise)
    for f1, f2, f3 in zip(one.factors_, two.factors_, three.factors_, strict=True):
        np.testing.assert_array_equal(f1, f2)
        assert not np.array_equal(f1, f3)
    secure_one, secure_two = fit(11), fit(11)
    pairs = zip(secure_one.factors_, secure_two.factors_, strict=True)
    same = all(np.array_equal(f1, f2) for f1, f2 in pairs)
    assert same == (privacy is None)  # a private fit's noise is never repeated by the seed
    if privacy:
        assert one.guarantee_.to_dict() == two.guarantee_.to_dict()
        assert not one.guarantee_.holds  # test noise voids every guarantee
        assert secure_one.guarantee_.to_dict() == secure_two.guarantee_.to_dict()


# ------------------------------------------------------------------ noise scales against formulas


def test_input_perturbation_laplace_scale():
    _, train, _ = _problem("cp", snr=4.0)
    eps = 0.5
    fits = [
        TensorCompletion(3, privacy="input", epsilon=eps, value_range=(-4.0, 4.0), neighbouring="entry-value",
                         random_state=0, options=CompletionOptions(clamp=False,
                                                                   n_epochs=1)).fit(train.indices,
                                                                                    train.values,
                                                                         train.shape)
        for _ in range(4)
    ]  # fmt: skip
    fit = fits[0]
    b = 8.0 / eps  # Delta = max - min = 8
    assert fit.input_noise_scale_ == pytest.approx(b)
    # four fits, four fresh secret draws of the 3200 values' noise
    noise = np.concatenate([f.perturbed_values_ - np.clip(train.values, -4, 4) for f in fits])
    n = noise.shape[0]
    # Laplace(b): E|X| = b, Var X = 2 b^2; 12800 draws -> 0.9% standard error on the mean |X|, 2% on
    # the variance (with one fit's 3200 draws the variance missed its 15% in 2.3e-4 of runs)
    assert np.mean(np.abs(noise)) == pytest.approx(b, rel=0.08)
    assert np.var(noise) == pytest.approx(2 * b * b, rel=0.15)
    assert abs(np.mean(noise)) < 5 * math.sqrt(2) * b / math.sqrt(n)
    g = fit.guarantee_
    assert g.holds and g.epsilon == eps and g.delta == 0 and g.neighbouring == "entry-value"
    assert g.details["sensitivity"] == 8.0
    clamped = TensorCompletion(3, privacy="input", epsilon=eps, value_range=(-4.0, 4.0),
                               neighbouring="entry-value", random_state=0,
                               options=CompletionOptions(n_epochs=1)).fit(
        train.indices, train.values, train.shape)
    assert clamped.perturbed_values_.min() >= -4 and clamped.perturbed_values_.max() <= 4
    # without a declared range the paper's data-derived Delta is used: only after opting in,
    # and the guarantee says it does not hold (and that the range is released)
    with pytest.raises(UnprovenPrivacyError, match="without value_range"):
        TensorCompletion(3, privacy="input", epsilon=eps, neighbouring="entry-value",
            options=CompletionOptions(n_epochs=1)).fit(
            train.indices, train.values, train.shape)
    with enable_features("unproven"):
        paper = TensorCompletion(3, privacy="input", epsilon=eps, neighbouring="entry-value", random_state=0,
                                 options=CompletionOptions(n_epochs=1)).fit(
            train.indices, train.values, train.shape
        )
    assert paper.input_noise_scale_ == pytest.approx(np.ptp(train.values) / eps)
    g = paper.guarantee_
    assert not g.holds and g.claim == "paper" and g.epsilon == math.inf and g.nominal_epsilon == eps
    assert "released" in g.reason and g.details["range_declared"] is False


def _paired_fits(privacy, shape=(10, 10, 800), **kwargs):
    """A private and a non-private fit that share every random draw except the privacy noise."""
    rng = np.random.default_rng(3)
    indices = np.argwhere(rng.random(shape) < 0.5)
    values = rng.standard_normal(len(indices))
    common = dict(n_epochs=1, batch_size=len(values), random_state=9, solver="sgd", **kwargs)
    with enable_features("unproven"):
        private = build_estimator(TensorCompletion, rank=3, privacy=privacy, epsilon=2.0,
            neighbouring="entry-value", **common).fit(
            indices, values, shape)
    plain = build_estimator(TensorCompletion, rank=3, **common).fit(indices, values, shape)
    return private, plain, indices


def test_gradient_perturbation_noise_scale_algorithm_2():
    # one batch, one epoch, clip so large it never binds: C differs by -eta * sum of the noise
    # vectors of the entries in each row; each is exponential-norm with Delta = 2m, so
    # E||sum||^2 = n_k d (d + 1) (2m / eps)^2.
    m, eta, eps, d = 1e6, 1e-9, 2.0, 3
    private, plain, indices = _paired_fits("gradient", clip=m, learning_rate=eta)
    for f1, f2 in zip(private.factors_[:2], plain.factors_[:2], strict=True):
        np.testing.assert_array_equal(f1, f2)  # A and B get no noise
    diff = (private.factors_[2] - plain.factors_[2]) / eta
    counts = np.bincount(indices[:, 2], minlength=diff.shape[0])
    # 800 rows: the ratio's standard error is 3% (at 200 rows 6%: it missed its 20% in 5e-4 of runs)
    ratio = np.mean(np.sum(diff**2, axis=1) / counts) / (d * (d + 1) * (2 * m / eps) ** 2)
    assert ratio == pytest.approx(1.0, rel=0.2)
    g = private.guarantee_
    assert not g.holds and g.claim == "paper" and "un-noised" in g.reason and g.epsilon == math.inf
    assert g.details["sensitivity"] == 2 * m


def test_output_perturbation_noise_scale_algorithm_3():
    eta, lip, eps, d = 0.005, 0.3, 2.0, 3
    private, plain, _ = _paired_fits("output", clip=lip, learning_rate=eta)
    sens = 2 * 1 * lip * eta  # Delta = 2 tau L eta, tau = 1 epoch
    assert private.output_sensitivity_ == pytest.approx(sens)
    diff = private.factors_[2] - plain.factors_[2]
    norms = np.linalg.norm(diff, axis=1)
    # ||n|| ~ Gamma(d, Delta / eps): mean d Delta / eps; 800 rows -> 2% standard error (at 200 rows,
    # 4%: the mean missed its 15% in 2.7e-4 of runs)
    assert np.mean(norms) == pytest.approx(d * sens / eps, rel=0.15)
    assert not private.guarantee_.holds and "convex" in private.guarantee_.reason


def test_dpsgd_noise_scale_and_exact_accounting():
    # no signal: tiny factors and zero values, so every update is the Gaussian noise alone
    shape = (1200, 1200, 1200)
    rng = np.random.default_rng(0)
    indices = rng.integers(0, 1200, size=(50, 3))
    eps, delta, clip, eta = 1.0, 1e-5, 0.25, 1e-3
    fit = TensorCompletion(3, privacy="gradient_dpsgd", neighbouring="entry-value", epsilon=eps, delta=delta,
                           random_state=1,
                           options=CompletionOptions(clip=clip, learning_rate=eta, n_epochs=1, batch_size=50,
                                                     reg=0.0, init_scale=1e-12))
    fit.fit(indices, np.zeros(50), shape)
    z = composed_noise_multiplier(eps, delta, 1, "exact")
    assert fit.noise_std_ == pytest.approx(z * 2 * clip)
    # 3600 coordinates each: 1.2% standard error on the std (at 900, 2.4%: the three 10% checks
    # failed together in 7e-5 of runs; now 1e-16)
    for factor in fit.factors_:
        assert np.std(factor) / eta == pytest.approx(fit.noise_std_, rel=0.1)
    g = fit.guarantee_
    assert g.holds and g.accountant == "exact" and g.delta == delta
    assert g.epsilon_exact == pytest.approx(eps, rel=1e-6)


def test_dpsgd_composition_over_epochs_matches_pld():
    _, train, _ = _problem("cp", snr=4.0)
    fit = TensorCompletion(3, privacy="gradient_dpsgd", epsilon=2.0, delta=1e-5, neighbouring="entry-value",
                           random_state=0, options=CompletionOptions(n_epochs=20, batch_size=800)).fit(
        train.indices, train.values, train.shape)
    g = fit.guarantee_
    assert g.n_releases == 20  # one Gaussian release per entry per epoch
    assert g.noise_multiplier == pytest.approx(composed_noise_multiplier(2.0, 1e-5, 20, "exact"))
    assert pld_composed_epsilon(g.noise_multiplier, 20, 1e-5) == pytest.approx(2.0, rel=0.02)


def test_output_clipped_lemma_3_sensitivity_audit():
    """Neighbouring values, same randomness: only row c_k moves, by at most 2 tau L eta."""
    prob, train, _ = _problem("tucker", snr=4.0)
    model = TensorCompletion(3, model="tucker", privacy="output_clipped", epsilon=1.0,
                             neighbouring="entry-value", value_range=(-4.0, 4.0), random_state=0,
                             options=CompletionOptions(clip=0.2, output_epochs=4, learning_rate=0.01))
    model.fit(train.indices, train.values, train.shape)
    plan = plan_completion(flat_params(model), train.shape, len(train))
    e = 17
    base, neighbour = np.clip(train.values, -4, 4), np.clip(train.values, -4, 4)
    base[e], neighbour[e] = 4.0, -4.0  # the range's extremes: the clipped gradients differ most
    results = []
    for vals in (base, neighbour):
        factors = [f.copy() for f in model.factors_]
        with pytest.warns(PrivacyWarning):  # the same test noise for both neighbours
            source = resolve_noise(insecure_test_noise(3))
        refit_c_clipped(plan, train.indices, vals, factors, model.core_.copy(),
                        np.random.default_rng(5), source)
        results.append(factors[2])
    diff = np.linalg.norm(results[0] - results[1], axis=1)
    k = train.indices[e, 2]
    assert np.all(diff[np.arange(20) != k] == 0)
    assert 0 < diff[k] <= 2 * 4 * 0.2 * 0.01 + 1e-12
    g = model.guarantee_
    assert g.holds and g.epsilon == 1.0 and g.epsilon_exact == pytest.approx(1.0)
    assert g.details["sensitivity"] == pytest.approx(2 * 4 * 0.2 * 0.01)


def test_guarantees_name_relation_and_public_information():
    _, train, _ = _problem("cp", snr=4.0)
    for privacy in PRIVACY_MODES[1:]:
        unproven = privacy in ("gradient", "output")
        model = TensorCompletion(3, privacy=privacy, epsilon=1.0, value_range=(-4, 4),
                                 neighbouring="entry-value", random_state=0,
                                 options=CompletionOptions(n_epochs=2))
        if unproven:
            with pytest.raises(UnprovenPrivacyError, match="enable_features"):
                model.fit(train.indices, train.values, train.shape)
        with enable_features("unproven"):
            fit = model.fit(train.indices, train.values, train.shape)
        g = fit.guarantee_
        assert g.neighbouring == "entry-value"
        assert "Omega" in g.public and "one observed entry" in g.protected
        assert g.holds == (not unproven)
        assert (g.epsilon == math.inf) == unproven and (g.nominal_epsilon == 1.0) == unproven
        assert ("NOT PRIVATE" in g.describe()) == unproven and "entry-value" in g.describe()
        assert g.to_dict()["holds"] == g.holds
        event = g.to_dp_event()
        assert (event == dp_accounting.NonPrivateDpEvent()) == unproven


# ------------------------------------------------------------------ errors


def test_bad_input_errors():
    idx = np.array([[0, 0, 0], [1, 1, 1]])
    vals = np.array([1.0, 2.0])
    with pytest.raises(ValueError, match="indices"):
        TensorCompletion(1).fit(np.array([[0, 0, 0], [2, 0, 0]]), vals, (2, 2, 2))
    with pytest.raises(ValueError, match="NaN"):
        TensorCompletion(1).fit(idx, [1.0, np.nan], (2, 2, 2))
    with pytest.raises(ValueError, match="no observed entries"):
        TensorCompletion(1).fit(np.zeros((0, 3), int), [], (2, 2, 2))
    with pytest.raises(ValueError, match="rank must be >= 1"):
        TensorCompletion(0).fit(idx, vals, (2, 2, 2))
    with pytest.raises(TypeError, match="rank must be an integer"):
        TensorCompletion(1.5).fit(idx, vals, (2, 2, 2))
    with pytest.raises(ValueError, match="exceeds the tensor dimension"):
        TensorCompletion(3, model="tucker").fit(idx, vals, (2, 2, 2))
    for eps in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="epsilon"):
            TensorCompletion(1, privacy="input", epsilon=eps).fit(idx, vals, (2, 2, 2))
    with pytest.raises(ValueError, match="epsilon is required"):
        TensorCompletion(1, privacy="gradient").fit(idx, vals, (2, 2, 2))
    with pytest.raises(ValueError, match="privacy must be one of"):
        TensorCompletion(1, privacy="objective", epsilon=1.0).fit(idx, vals, (2, 2, 2))
    with pytest.raises(ValueError, match="model must be one of"):
        TensorCompletion(1, model="tt").fit(idx, vals, (2, 2, 2))
    with pytest.raises(ValueError, match="value_range is required"):
        TensorCompletion(1, privacy="output_clipped", epsilon=1.0).fit(idx, vals, (2, 2, 2))
    with pytest.raises(ValueError, match="delta"):
        TensorCompletion(1, privacy="gradient_dpsgd", epsilon=1.0, delta=2.0).fit(idx, vals, (2, 2, 2))
    with pytest.raises(ValueError, match="learning_rate"):
        TensorCompletion(1, options=CompletionOptions(learning_rate=0)).fit(idx, vals, (2, 2, 2))
    with pytest.raises(NotFittedError, match="not fitted"):
        TensorCompletion(1).predict(idx)
    fit = TensorCompletion(1, options=CompletionOptions(n_epochs=1)).fit(idx, vals, (2, 2, 2))
    with pytest.raises(ValueError, match="indices"):
        fit.predict([[0, 0, 2]])


def test_large_batches_and_steps_stay_stable():
    # the curvature cap keeps the Jacobi (mini-batch) form from diverging where plain summed
    # updates would: Tucker, batch 1024, step 100x the paper's, values scaled by 100
    prob, train, _ = _problem("tucker")
    fit = TensorCompletion(3, model="tucker", solver="sgd", random_state=0,
                           options=CompletionOptions(learning_rate=0.5, batch_size=1024, n_epochs=20))
    fit.fit(train.indices, train.values * 100, train.shape)
    assert np.all(np.isfinite(fit.history_))
    assert fit.history_[-1] < fit.history_[0]


def test_private_fits_keep_no_noiseless_training_history():
    data = make_low_rank_completion((8, 8, 8), 2, missing_ratio=0.5, random_state=0)
    cases = ((None, True), ("input", True), ("gradient_dpsgd", False), ("output_clipped", False))
    for privacy, kept in cases:
        model = TensorCompletion(2, privacy=privacy, epsilon=1.0 if privacy else None, random_state=0,
                                 value_range=(0.0, 1.0) if privacy else None,
                                 neighbouring="entry-value" if privacy else None,
                                 options=CompletionOptions(n_epochs=3))
        model.fit(data.observed.indices, data.observed.values, data.observed.shape)
        assert bool(model.history_) is kept, privacy
