"""Calibration and accounting: known values, dp-accounting cross-checks, round trips."""

from __future__ import annotations

import math

import dp_accounting
import pytest

from dptensor.privacy import (
    advanced_composition_epsilon,
    advanced_step_parameters,
    composed_gaussian_epsilon,
    composed_noise_multiplier,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
    laplace_scale,
    noise_ratio,
    pld_composed_epsilon,
)


def test_known_values_per_unit_sensitivity():
    assert gaussian_sigma_analytic(1.0, 1e-5) == pytest.approx(3.7306, abs=5e-4)
    assert gaussian_sigma_classic(0.999999, 1e-5) == pytest.approx(4.8448, abs=5e-4)
    assert math.sqrt(2 * math.log(1.25 / 1e-5)) == pytest.approx(4.8448, abs=5e-4)
    assert gaussian_sigma_analytic(1.0, 1e-5, sensitivity=6.0) == pytest.approx(6 * 3.7306, abs=3e-3)
    assert laplace_scale(0.5, 2.0) == 4.0


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-9])
def test_analytic_round_trips(epsilon, delta):
    sigma = gaussian_sigma_analytic(epsilon, delta)
    assert gaussian_epsilon(sigma, delta) == pytest.approx(epsilon, rel=1e-6)
    assert gaussian_delta(sigma, epsilon) == pytest.approx(delta, rel=1e-5)
    # analytic never needs more noise than classic (where classic applies)
    if epsilon < 1:
        assert sigma < gaussian_sigma_classic(epsilon, delta)


def test_gaussian_delta_matches_pld_single_release():
    for sigma in (0.5, 2.0, 8.0):
        eps = pld_composed_epsilon(sigma, 1, 1e-5)
        assert gaussian_delta(sigma, eps) == pytest.approx(1e-5, rel=0.05)


@pytest.mark.parametrize(
    ("z", "k"), [(3.0, 1), (20.0, 50), (300.0, 4200), (1.5, 7)]
)
def test_exact_composition_agrees_with_dp_accounting_pld(z, k):
    closed = composed_gaussian_epsilon(z, k, 1e-6)
    pld = pld_composed_epsilon(z, k, 1e-6)
    assert pld == pytest.approx(closed, rel=1e-2, abs=1e-3)
    # PLD discretisation is pessimistic: never below the exact value by more than rounding
    assert pld >= closed - 1e-6


def test_exact_calibration_hits_budget_and_matches_dp_accounting_calibration():
    epsilon, delta, k = 1.0, 1e-6, 300
    z = composed_noise_multiplier(epsilon, delta, k, "exact")
    assert composed_gaussian_epsilon(z, k, delta) == pytest.approx(epsilon, rel=1e-6)

    # dp-accounting's own calibration machinery on the K-fold composition (RDP is looser,
    # PLD is tight): the closed form must agree with PLD and need no more noise than RDP.
    def make_event(sigma: float) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), k)

    pld_sigma = dp_accounting.calibrate_dp_mechanism(
        lambda: dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3),
        make_event, epsilon, delta,
        dp_accounting.ExplicitBracketInterval(0.8 * z, 1.2 * z), tol=1e-2,
    )
    rdp_sigma = dp_accounting.calibrate_dp_mechanism(
        lambda: dp_accounting.rdp.RdpAccountant(), make_event, epsilon, delta,
        dp_accounting.LowerEndpointAndGuess(1.0, 50.0), tol=1e-2,
    )
    assert z == pytest.approx(pld_sigma, rel=5e-3)
    assert z <= rdp_sigma


def test_advanced_reproduces_algorithm_3_constants():
    k, n_restarts, n_iter, epsilon, delta = 3, 7, 11, 0.8, 1e-4
    big_k = k * n_restarts * (n_iter + 1)
    eps_step = epsilon / math.sqrt(big_k * (4 + math.log(2 / delta)))
    delta_step = delta / (2 * big_k)
    nu = 6 * math.sqrt(2 * math.log(1.25 / delta_step)) / eps_step
    assert advanced_step_parameters(epsilon, delta, big_k) == pytest.approx((eps_step, delta_step))
    assert 6 * composed_noise_multiplier(epsilon, delta, big_k, "advanced") == pytest.approx(nu, rel=1e-12)


def test_noise_ratio_for_paper_scale_setting_is_several_fold():
    big_k = 10 * 20 * (20 + 1)
    ratio = noise_ratio(1.0, 1e-6, big_k)
    assert 6.5 < ratio < 7.5  # 6.92


def test_paper_constants_gap_and_true_guarantee():
    """Advanced composition (Dwork & Roth Thm 3.20) does not give the paper's claim; GDP does."""
    big_k, epsilon, delta = 10 * 20 * 21, 1.0, 1e-6
    eps_step, _ = advanced_step_parameters(epsilon, delta, big_k)
    assert advanced_composition_epsilon(eps_step, big_k, delta / 2) > 1.25 * epsilon
    z = composed_noise_multiplier(epsilon, delta, big_k, "advanced")
    assert composed_gaussian_epsilon(z, big_k, delta) < 0.2 * epsilon


@pytest.mark.parametrize("epsilon", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_epsilon(epsilon):
    with pytest.raises(ValueError, match="epsilon"):
        gaussian_sigma_analytic(epsilon, 1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        composed_noise_multiplier(epsilon, 1e-5, 10)


@pytest.mark.parametrize("delta", [0.0, 1.0, -0.1, 2.0])
def test_bad_delta(delta):
    with pytest.raises(ValueError, match="delta"):
        gaussian_sigma_analytic(1.0, delta)
    with pytest.raises(ValueError, match="delta"):
        composed_noise_multiplier(1.0, delta, 10, "advanced")


def test_classic_refuses_large_epsilon_and_bad_accountant():
    with pytest.raises(ValueError, match="epsilon < 1"):
        gaussian_sigma_classic(1.0, 1e-5)
    with pytest.raises(ValueError, match="accountant"):
        composed_noise_multiplier(1.0, 1e-5, 10, "rdp")
    with pytest.raises(ValueError, match="n_releases"):
        composed_noise_multiplier(1.0, 1e-5, 0)
    with pytest.raises(ValueError, match="sigma"):
        gaussian_epsilon(0.0, 1e-5)


def test_a_huge_epsilon_calibrates_without_floating_point_warnings():
    """dp-accounting's search meets log1p(-1) at epsilon 1e9: not a warning for the caller."""
    import warnings

    from dptensor.privacy.calibration import gaussian_epsilon, gaussian_sigma_analytic

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        sigma = gaussian_sigma_analytic(1.0e9 + 7.0, 3e-7)
    assert 0 < sigma < 1e-3 and gaussian_epsilon(sigma, 3e-7) <= 1.0e9 + 7.0
