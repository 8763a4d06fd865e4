"""Honest guarantees, exact composition, safe-side calibration, opt-in features, noise backends."""

from __future__ import annotations

import math
import warnings

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from dptensor import TensorCompletion, input_perturbation, private_power_method
from dptensor.models._options import build_estimator
from dptensor.privacy import (
    EpsilonDeltaDpEvent,
    PrivacyGuarantee,
    PrivacyWarning,
    UnprovenPrivacyError,
    compose,
    composed_gaussian_holds,
    composed_noise_multiplier,
    disable_features,
    enable_features,
    feature_enabled,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_sigma_analytic,
    insecure_test_noise,
    require_unproven,
    resolve_noise,
)
from dptensor.tensor import LowRankTensor


def _tensor(dim=8):
    return LowRankTensor(np.array([100.0]), np.eye(dim)[:, :1])


def _pld(*events, delta, relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE):
    accountant = dp_accounting.pld.PLDAccountant(relation)
    accountant.compose(dp_accounting.ComposedDpEvent(list(events)))
    return accountant.get_epsilon(delta)


def _completion_guarantee(privacy, epsilon=1.0, **kwargs):
    rng = np.random.default_rng(0)
    indices = np.argwhere(rng.random((6, 5, 4)) < 0.5)
    values = rng.integers(1, 6, len(indices)).astype(float)
    model = build_estimator(TensorCompletion, rank=2, privacy=privacy, neighbouring="entry-value",
                             epsilon=epsilon, n_epochs=2, value_range=(1.0, 5.0), random_state=0, **kwargs)
    return model.fit(indices, values, (6, 5, 4)).guarantee_


# ------------------------------------------------------------------ composition


def test_compose_agrees_with_dp_accounting_pld_on_mixed_gaussian_laplace_releases():
    gaussian = private_power_method(_tensor(), 1, epsilon=0.7, delta=1e-6, n_restarts=2, n_iter=3).guarantee
    laplace = _completion_guarantee("input", epsilon=0.4)
    dpsgd = _completion_guarantee("gradient_dpsgd", epsilon=0.5, delta=1e-6)
    assert isinstance(laplace.to_dp_event(), dp_accounting.LaplaceDpEvent)
    guarantees = [gaussian, laplace, dpsgd]
    for g in guarantees:  # each part, alone, is what it states
        assert _pld(g.to_dp_event(), delta=g.delta if g.delta > 0 else 1e-9) <= g.epsilon * (1 + 1e-3)
    # compose() needs one relation: the parts protect different units, so it must be told
    with pytest.raises(ValueError, match="different units"):
        compose(*guarantees, delta=1e-5)
    total = compose(*guarantees, delta=1e-5, neighbouring="one record of the shared data")
    reference = _pld(*(g.to_dp_event() for g in guarantees), delta=1e-5)
    assert total.epsilon == pytest.approx(reference, abs=1e-6)
    assert total.holds and total.epsilon < gaussian.epsilon + laplace.epsilon + dpsgd.epsilon
    assert total.epsilon > max(g.epsilon for g in guarantees)
    assert total.n_releases == sum(g.n_releases for g in guarantees)
    # and through the RDP accountant for the events it supports
    rdp = compose(gaussian, dpsgd, delta=1e-5, accountant="rdp", neighbouring="x")
    assert rdp.epsilon >= compose(gaussian, dpsgd, delta=1e-5, neighbouring="x").epsilon - 1e-9


def test_compose_same_relation_and_repeated_runs():
    runs = [private_power_method(_tensor(), 1, epsilon=0.5, delta=1e-6, n_restarts=2, n_iter=3).guarantee
            for _ in range(4)]
    total = compose(*runs, delta=4e-6)
    assert total.neighbouring == "entry"
    # Gaussian-DP: four (0.5, 1e-6) Gaussian releases compose to much less than 2 at delta 4e-6
    z = runs[0].noise_multiplier
    exact = gaussian_epsilon(z / math.sqrt(4 * runs[0].n_releases), 4e-6)
    assert total.epsilon == pytest.approx(exact, rel=2e-3) and total.epsilon >= exact * (1 - 1e-9)
    assert total.epsilon < 2.0


def test_compose_pure_releases_and_non_holding_parts():
    pure = _completion_guarantee("output_clipped", epsilon=1.0)
    assert isinstance(pure.to_dp_event(), dp_accounting.ComposedDpEvent)
    assert compose(pure, delta=1e-9).epsilon == pytest.approx(1.0, abs=2e-3)
    two = compose(pure, pure, delta=1e-9)
    assert two.epsilon <= 2.0 + 2e-3  # basic composition is the worst case at delta ~ 0
    with enable_features("unproven"):
        paper = _completion_guarantee("gradient", epsilon=1.0)
    assert paper.to_dp_event() == dp_accounting.NonPrivateDpEvent()
    total = compose(pure, paper, delta=1e-6)
    assert not total.holds and total.epsilon == math.inf and "un-noised" in total.reason
    with pytest.raises(ValueError, match="at least one"):
        compose(delta=1e-6)
    with pytest.raises(TypeError, match="PrivacyGuarantee"):
        compose(1.0, delta=1e-6)


def test_epsilon_delta_event_is_the_worst_case_of_its_parameters():
    event = EpsilonDeltaDpEvent(0.8, 1e-6)
    roundtrip = dp_accounting.DpEvent.from_named_tuple(event.to_named_tuple())
    assert roundtrip == event
    g = PrivacyGuarantee(epsilon=0.8, delta=1e-6, neighbouring="record", accountant="x", n_releases=1,
                         mechanism="any", noise_multiplier=math.nan, epsilon_exact=0.8, dp_event=event)
    assert compose(g, delta=1e-6).epsilon == pytest.approx(0.8, abs=1e-3)
    # delta below the release's own delta: no finite epsilon
    with pytest.raises(ValueError, match="not .*-DP for any finite epsilon"):
        compose(g, delta=1e-7)


# ------------------------------------------------------------------ honest guarantee objects


def test_guarantee_that_does_not_hold_never_shows_a_finite_epsilon():
    g = PrivacyGuarantee(epsilon=1.0, delta=1e-6, neighbouring="entry", accountant="paper",
                         n_releases=1, mechanism="gaussian", noise_multiplier=1.0, epsilon_exact=0.5,
                         holds=False, claim="paper", reason="the proof fails")
    assert g.epsilon == math.inf and g.epsilon_exact == math.inf and g.nominal_epsilon == 1.0
    assert g.describe().startswith("NOT PRIVATE") and "'entry'" in g.describe()
    with pytest.raises(ValueError, match="reason"):
        PrivacyGuarantee(epsilon=1.0, delta=1e-6, neighbouring="entry", accountant="a", n_releases=1,
                         mechanism="m", noise_multiplier=1.0, epsilon_exact=1.0, holds=False)
    with pytest.raises(ValueError, match="dp_event"):
        PrivacyGuarantee(epsilon=1.0, delta=1e-6, neighbouring="entry", accountant="a", n_releases=1,
                         mechanism="m", noise_multiplier=1.0, epsilon_exact=1.0)
    with pytest.raises(ValueError, match="neighbouring relation"):
        PrivacyGuarantee(epsilon=1.0, delta=1e-6, neighbouring="", accountant="a", n_releases=1,
                         mechanism="m", noise_multiplier=1.0, epsilon_exact=1.0,
                         dp_event=dp_accounting.GaussianDpEvent(1.0))


@pytest.mark.parametrize("func", [private_power_method, input_perturbation])
def test_every_private_result_names_its_relation_and_exposes_its_event(func):
    g = func(_tensor(), 1, epsilon=1.0, delta=1e-6, n_restarts=2).guarantee
    assert g.holds and "'entry'" in g.describe() and "entry" in repr(g)
    assert g.protected and g.public
    event = g.to_dp_event()
    assert isinstance(event, dp_accounting.SelfComposedDpEvent)
    assert _pld(event, delta=1e-6) <= 1.0 + 2e-3
    assert g.to_dict()["dp_event"].startswith("SelfComposedDpEvent")


# ------------------------------------------------------------------ calibration on the safe side


def test_calibration_never_reports_an_epsilon_below_the_true_one():
    for epsilon in np.geomspace(0.01, 50.0, 25):
        for delta in (1e-3, 1e-6, 1e-10):
            sigma = gaussian_sigma_analytic(float(epsilon), delta)
            assert gaussian_delta(sigma, float(epsilon)) <= delta  # exact closed form, no tolerance
            reported = gaussian_epsilon(sigma, delta)
            assert gaussian_delta(sigma, reported) <= delta
            for k in (1, 3, 72, 4200):
                z = composed_noise_multiplier(float(epsilon), delta, k)
                assert composed_gaussian_holds(z, k, float(epsilon), delta)


# ------------------------------------------------------------------ features (opt-in)


def test_enable_features_scopes_and_errors():
    assert not feature_enabled("unproven")
    with pytest.raises(UnprovenPrivacyError, match="because"):
        require_unproven("mode x", "because")
    with enable_features("unproven"):
        assert feature_enabled("unproven")
        require_unproven("mode x", "because")
    assert not feature_enabled("unproven")
    enable_features("unproven")
    try:
        assert feature_enabled("unproven")
    finally:
        disable_features("unproven")
    with pytest.raises(ValueError, match="unknown feature"):
        enable_features("contrib")


# ------------------------------------------------------------------ noise backends


def test_numpy_noise_is_fresh_and_test_noise_is_loud():
    a, b = resolve_noise(None), resolve_noise("numpy")
    assert a.secure and b.secure
    assert not np.array_equal(a.gaussian(5, 1.0), b.gaussian(5, 1.0))
    with pytest.warns(PrivacyWarning, match="NOT differentially private"):
        test_noise = resolve_noise(insecure_test_noise(3))
    assert not test_noise.secure


def test_opendp_backend_draws_the_right_laws():
    pytest.importorskip("opendp")
    source = resolve_noise("opendp")
    assert source.backend == "opendp" and source.secure
    # OpenDP's noise cannot be seeded: each KS test fails with probability = its level under the
    # right law. At 2000 draws and level 1e-4 (3e-4 a run of the suite) the tests rejected laws off
    # by more than D = 0.050 (Gaussian) and 0.070 (each Laplace); 8000 draws at level 1e-7 reject
    # D > 0.032 and 0.046, so the check is both stricter and 1000x less likely to fail by chance.
    values = np.linspace(-1.0, 1.0, 8000)
    gauss = source.add_gaussian(values, 2.0) - values
    assert stats.kstest(gauss, stats.norm(scale=2.0).cdf).pvalue > 1e-7
    scales = np.where(np.arange(8000) % 2 == 0, 0.5, 3.0)
    lap = source.add_laplace(values, scales) - values
    assert stats.kstest(lap[::2], stats.laplace(scale=0.5).cdf).pvalue > 1e-7
    assert stats.kstest(lap[1::2], stats.laplace(scale=3.0).cdf).pvalue > 1e-7
    import opendp.mod

    assert "contrib" not in opendp.mod.GLOBAL_FEATURES  # the caller's OpenDP settings are restored
    # a whole private run on the OpenDP backend
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = private_power_method(_tensor(), 1, epsilon=1.0, delta=1e-6, n_restarts=2, n_iter=2,
                                   noise="opendp")
    assert res.guarantee.holds and np.all(np.isfinite(res.factors))
