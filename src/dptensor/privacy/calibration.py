"""Noise calibration for the Gaussian and Laplace mechanisms, and composition accounting.

Two ways of turning a total budget ``(epsilon, delta)`` for ``K`` adaptively composed Gaussian
releases into a per-release *noise multiplier* ``z = sigma / Delta_2`` (noise standard deviation
per unit of l2 sensitivity):

``"advanced"``
    Wang & Anandkumar (2016), Algorithm 3, step 2, and the proof of Theorem 4.1: each release
    is an ``(epsilon', delta')`` classic Gaussian mechanism (Dwork & Roth 2014, Theorem A.1),
    ``z = sqrt(2 ln(1.25 / delta')) / epsilon'``, with
    ``epsilon' = epsilon / sqrt(K (4 + ln(2 / delta)))`` and ``delta' = delta / (2K)``,
    composed by advanced composition.
``"exact"``
    Gaussian differential privacy (Dong, Roth & Su 2022, Corollary 3.3): a Gaussian release
    with noise multiplier ``z`` is ``(1/z)``-GDP, and ``K`` adaptively composed ones are
    ``(sqrt(K)/z)``-GDP -- exactly the privacy curve of *one* Gaussian release with noise
    multiplier ``z / sqrt(K)``. So ``z = sqrt(K) * sigma_analytic(epsilon, delta)``, where
    ``sigma_analytic`` is the analytic Gaussian calibration of Balle & Wang (2018), computed by
    :func:`dp_accounting.get_sigma_gaussian`. Nothing is lost in this step: it is the smallest
    noise for which the composition is ``(epsilon, delta)``-DP.

The ratio of the two multipliers is the noise the paper's accounting wastes
(:func:`noise_ratio`); for ``k=10, L=20, R=20, epsilon=1, delta=1e-6`` it is about 6.9.

A gap in the paper's accounting
-------------------------------
Advanced composition as stated by Dwork & Roth (2014, Theorem 3.20) with ``delta'' = delta/2``
gives a total ``epsilon' sqrt(2K ln(2/delta)) + K epsilon' (e^{epsilon'} - 1)`` (see
:func:`advanced_composition_epsilon`); with the paper's ``epsilon'`` this exceeds ``epsilon`` once
``ln(2/delta) > 4`` (about 1.31 for the setting above), so the constants of Algorithm 3 do not
follow from that theorem. The *claim* of Theorem 4.1 still holds, with a large margin, because
the releases are Gaussian and compose exactly as above: :func:`composed_gaussian_epsilon` gives
the exact ``epsilon`` (about 0.126 for the setting above). Every private result of dptensor
records this exact value next to the requested one and refuses to run where it would exceed it.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy.special import log_ndtr

from dptensor._validation import check_epsilon_delta, check_positive_int, check_real

Accountant = Literal["exact", "advanced"]
ACCOUNTANTS: tuple[str, ...] = ("exact", "advanced")


#: What each accountant name means, for every Gaussian release of dptensor's functional APIs.
#: ``"exact"`` is the default everywhere; the other names reproduce a paper's calibration and
#: apply only where that paper's shape of release exists.
ACCOUNTANT_MEANINGS: dict[str, str] = {
    "exact": "analytic Gaussian calibration, the releases composed exactly (Gaussian DP)",
    "advanced": "Algorithm 3's classic Gaussian formula per release with advanced composition",
    "classic": "the classic Gaussian mechanism of a single release (Dwork & Roth, Thm A.1; epsilon < 1)",
}


def check_accountant(accountant: object, allowed: tuple[str, ...] = ACCOUNTANTS, *, who: str = "") -> str:
    """Return ``accountant`` after checking it is one of ``allowed`` (default :data:`ACCOUNTANTS`).

    A name that another function accepts (see :data:`ACCOUNTANT_MEANINGS`) is refused with what it
    means and where it applies, so ``"classic"`` and ``"advanced"`` are not confused.
    """
    if accountant in allowed:
        return str(accountant)
    where = f" for {who}" if who else ""
    choices = "; ".join(f"{name!r}: {ACCOUNTANT_MEANINGS[name]}" for name in allowed)
    if accountant in ACCOUNTANT_MEANINGS:
        meaning = ACCOUNTANT_MEANINGS[accountant]
        raise ValueError(f"accountant={accountant!r} ({meaning}) does not apply{where}; choose {choices}")
    raise ValueError(f"accountant must be one of {allowed}{where} ({choices}), got {accountant!r}")


def classic_gaussian_formula(epsilon: float, delta: float) -> float:
    """``sqrt(2 ln(1.25/delta)) / epsilon``, the classic Gaussian multiplier, with no range check.

    Dwork & Roth (2014), Theorem A.1, prove it for ``epsilon < 1`` only; this is the formula
    alone, for the callers that reproduce a paper which applies it per step (Algorithm 3's
    advanced composition, where every step's ``epsilon'`` is small) or at any ``epsilon`` as
    written (DeCarolis et al.'s Proposition 18, labelled as the paper's claim by its caller).
    :func:`gaussian_sigma_classic` is the checked mechanism.
    """
    check_epsilon_delta(epsilon, delta)  # a number (never a bool), not a range check
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def gaussian_sigma_classic(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Classic Gaussian mechanism: ``sigma = Delta_2 sqrt(2 ln(1.25/delta)) / epsilon``.

    Dwork & Roth (2014), Theorem A.1; valid only for ``epsilon < 1``. This is the per-release
    calibration of Wang & Anandkumar (2016), Algorithm 3 (``nu = 6 sqrt(2 ln(1.25/delta')) /
    epsilon'``).

    Raises
    ------
    ValueError
        If ``epsilon >= 1`` (the theorem does not cover it; use :func:`gaussian_sigma_analytic`).
    """
    check_epsilon_delta(epsilon, delta)
    sensitivity = check_real(sensitivity, "sensitivity")
    if epsilon >= 1:
        raise ValueError(
            f"the classic Gaussian mechanism is only proven for epsilon < 1, got epsilon={epsilon}; "
            "use gaussian_sigma_analytic"
        )
    return sensitivity * classic_gaussian_formula(epsilon, delta)


def gaussian_sigma_analytic(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest Gaussian noise std giving ``(epsilon, delta)``-DP (analytic Gaussian mechanism).

    Balle & Wang (2018), Theorem 8: ``N(0, sigma^2 I)`` added to a query of l2 sensitivity
    ``Delta_2`` is ``(epsilon, delta)``-DP iff
    ``Phi(Delta/(2 sigma) - epsilon sigma/Delta) - e^epsilon Phi(-Delta/(2 sigma) -
    epsilon sigma/Delta) <= delta``. Solved by :func:`dp_accounting.get_sigma_gaussian`; valid
    for every ``epsilon > 0``. For ``epsilon=1, delta=1e-5`` it is ``3.7306`` per unit
    sensitivity (the classic formula gives ``4.8448``).
    """
    check_epsilon_delta(epsilon, delta)
    sensitivity = check_real(sensitivity, "sensitivity")
    return sensitivity * _analytic_sigma(float(epsilon), float(delta))


def _gaussian_log_delta(noise_multiplier: float, epsilon: float) -> float:
    """``log delta(epsilon)`` of the Gaussian mechanism with ``sigma / Delta = noise_multiplier``."""
    mu = 1.0 / noise_multiplier
    first = float(log_ndtr(mu / 2 - epsilon / mu))
    second = epsilon + float(log_ndtr(-mu / 2 - epsilon / mu))
    if second >= first:
        return -math.inf
    return first + math.log(-math.expm1(second - first))


#: Calibration aims at ``delta (1 - 1e-9)``, so that a check at ``delta`` itself is never undone by
#: the last bits of floating-point rounding in ``log delta(epsilon)`` (about 1e-14 relative).
_LOG_DELTA_SLACK = 1e-9


def _safe_side(value: float, holds, *, upward: bool = True) -> float:
    """Nudge a root-finder's answer until ``holds(value)``: calibration errs towards privacy.

    Bracketing root-finders (Brent's method in dp-accounting) return a point within a tolerance
    of the root, on either side. We move it, ulp by growing ulp, to the side where the privacy
    condition holds, so no calibration ever reports an epsilon below the true one.
    """
    step = math.ulp(value) or 5e-324
    while not holds(value):
        value = value + step if upward else value - step
        step *= 2.0
    return value


@lru_cache(maxsize=4096)
def _analytic_sigma(epsilon: float, delta: float) -> float:
    import dp_accounting

    target = math.log(delta) - _LOG_DELTA_SLACK
    # at a huge epsilon dp-accounting's search takes log1p(-1) = -inf on its way (a NumPy warning, not
    # an error: the result is right), so its floating-point warnings are not the caller's
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        sigma = float(dp_accounting.get_sigma_gaussian(epsilon, delta))
    # the smallest sigma must satisfy delta(epsilon; sigma) <= delta: move up if it does not
    return _safe_side(sigma, lambda s: _gaussian_log_delta(s, epsilon) <= target)


@lru_cache(maxsize=4096)
def _analytic_epsilon(noise_multiplier: float, delta: float) -> float:
    import dp_accounting

    target = math.log(delta) - _LOG_DELTA_SLACK
    epsilon = float(dp_accounting.get_epsilon_gaussian(noise_multiplier, delta))
    # the reported epsilon must satisfy delta(epsilon; sigma) <= delta: move up if it does not
    return _safe_side(epsilon, lambda e: _gaussian_log_delta(noise_multiplier, e) <= target)


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest ``epsilon`` for which Gaussian noise ``sigma`` is ``(epsilon, delta)``-DP.

    The inverse of :func:`gaussian_sigma_analytic` (Balle & Wang 2018), computed by
    :func:`dp_accounting.get_epsilon_gaussian`. Returns ``0.0`` when even ``epsilon=0`` works.
    """
    sigma = check_real(sigma, "sigma")
    check_epsilon_delta(1.0, delta)
    sensitivity = check_real(sensitivity, "sensitivity")
    return _analytic_epsilon(sigma / sensitivity, float(delta))


def gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """``delta(epsilon)`` of the Gaussian mechanism (Balle & Wang 2018, Theorem 8), exactly.

    With ``mu = Delta_2 / sigma``:
    ``delta = Phi(mu/2 - epsilon/mu) - e^epsilon Phi(-mu/2 - epsilon/mu)``, evaluated in log space.
    """
    sigma = check_real(sigma, "sigma")
    sensitivity = check_real(sensitivity, "sensitivity")
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | np.floating) or not (
        math.isfinite(epsilon) and epsilon >= 0
    ):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    return math.exp(_gaussian_log_delta(sigma / sensitivity, float(epsilon)))


def laplace_scale(epsilon: float, sensitivity: float = 1.0) -> float:
    """Laplace mechanism scale ``b = Delta_1 / epsilon`` (Dwork & Roth 2014, Theorem 3.6)."""
    check_epsilon_delta(epsilon)
    return check_real(sensitivity, "sensitivity") / epsilon


def advanced_composition_epsilon(epsilon_step: float, n_releases: int, delta_slack: float) -> float:
    """Total epsilon of ``n_releases`` ``epsilon_step``-DP releases by advanced composition.

    Dwork & Roth (2014), Theorem 3.20:
    ``epsilon_step sqrt(2 K ln(1/delta_slack)) + K epsilon_step (e^{epsilon_step} - 1)``
    (the total delta is ``K delta_step + delta_slack``).
    """
    epsilon_step = check_real(epsilon_step, "epsilon_step")
    n_releases = check_positive_int(n_releases, "n_releases")
    check_epsilon_delta(1.0, delta_slack)
    return epsilon_step * math.sqrt(2 * n_releases * math.log(1 / delta_slack)) + (
        n_releases * epsilon_step * math.expm1(epsilon_step)
    )


def advanced_step_parameters(epsilon: float, delta: float, n_releases: int) -> tuple[float, float]:
    """``(epsilon', delta')`` of Algorithm 3, step 2 (Wang & Anandkumar 2016).

    ``epsilon' = epsilon / sqrt(K (4 + ln(2/delta)))`` and ``delta' = delta / (2K)`` for
    ``K = n_releases``.
    """
    check_epsilon_delta(epsilon, delta)
    n_releases = check_positive_int(n_releases, "n_releases")
    return (
        epsilon / math.sqrt(n_releases * (4 + math.log(2 / delta))),
        delta / (2 * n_releases),
    )


def composed_noise_multiplier(
    epsilon: float, delta: float, n_releases: int, accountant: Accountant = "exact"
) -> float:
    """Per-release noise multiplier ``z = sigma / Delta_2`` for ``K`` composed Gaussian releases.

    Parameters
    ----------
    epsilon, delta : float
        Total privacy budget, ``epsilon > 0`` and ``0 < delta < 1``.
    n_releases : int
        ``K``, the number of adaptively composed Gaussian releases (``K = kL(R+1)`` in
        Algorithm 3).
    accountant : {"exact", "advanced"}
        ``"advanced"`` reproduces Algorithm 3, step 2 exactly:
        ``z = sqrt(2 ln(1.25/delta')) / epsilon'`` (so the paper's ``nu = 6 z``).
        ``"exact"`` is ``z = sqrt(K) sigma_analytic(epsilon, delta)`` (Gaussian DP composition);
        see the module docstring.

    Returns
    -------
    float
    """
    check_epsilon_delta(epsilon, delta)
    n_releases = check_positive_int(n_releases, "n_releases")
    accountant = check_accountant(accountant)
    if accountant == "advanced":
        eps_step, delta_step = advanced_step_parameters(epsilon, delta, n_releases)
        return classic_gaussian_formula(eps_step, delta_step)
    sigma = gaussian_sigma_analytic(epsilon, delta)
    root = math.sqrt(n_releases)
    # z / sqrt(K) must not round below sigma
    return _safe_side(root * sigma, lambda z: z / root >= sigma)


def composed_gaussian_holds(noise_multiplier: float, n_releases: int, epsilon: float, delta: float) -> bool:
    """Whether ``K`` composed Gaussian releases with multiplier ``z`` are ``(epsilon, delta)``-DP.

    The exact criterion (Gaussian DP: one Gaussian with multiplier ``z / sqrt(K)``, Balle & Wang
    2018, Theorem 8), evaluated in closed form in log space -- no root-finding, no tolerance.
    """
    noise_multiplier = check_real(noise_multiplier, "noise_multiplier")
    n_releases = check_positive_int(n_releases, "n_releases")
    check_epsilon_delta(epsilon, delta)
    return _gaussian_log_delta(noise_multiplier / math.sqrt(n_releases), float(epsilon)) <= math.log(delta)


def composed_gaussian_epsilon(noise_multiplier: float, n_releases: int, delta: float) -> float:
    """Exact ``epsilon`` at ``delta`` of ``K`` adaptively composed Gaussian releases.

    Each release adds ``N(0, (z Delta_2)^2 I)`` to a query of l2 sensitivity ``Delta_2`` (which
    may depend on earlier releases); the composition is ``(sqrt(K)/z)``-GDP (Dong, Roth & Su
    2022), whose ``(epsilon, delta)`` curve is that of one Gaussian with multiplier
    ``z / sqrt(K)`` (:func:`gaussian_epsilon`).
    """
    noise_multiplier = check_real(noise_multiplier, "noise_multiplier")
    n_releases = check_positive_int(n_releases, "n_releases")
    return gaussian_epsilon(noise_multiplier / math.sqrt(n_releases), delta)


def gaussian_pure_epsilon(noise_multiplier: float, pure_epsilon: float, delta: float) -> float:
    """Exact ``epsilon`` at ``delta`` of one Gaussian release composed with one pure ``epsilon_p``-DP release.

    Nothing is known of the pure release but its ``epsilon_p``, so its worst case is the two-point
    (randomised-response) pair, whose privacy loss is ``+epsilon_p`` with probability
    ``p = e^{epsilon_p} / (1 + e^{epsilon_p})`` and ``-epsilon_p`` otherwise (Kairouz, Oh & Viswanath
    2015). Privacy losses of composed releases add, so with ``delta_G(x)`` the Gaussian's curve of
    Balle & Wang (2018, Theorem 8), valid for every real ``x``,

    ``delta(epsilon) = p delta_G(epsilon - epsilon_p) + (1 - p) delta_G(epsilon + epsilon_p)``,

    which is decreasing in ``epsilon``; solved by bisection on the safe side. Exact where
    dp-accounting's PLD accountant (which :func:`dptensor.privacy.compose` uses) discretises, and
    usable for any ``epsilon_p`` (the PLD of a very large pure epsilon overflows).
    """
    noise_multiplier = check_real(noise_multiplier, "noise_multiplier")
    pure_epsilon = check_real(pure_epsilon, "pure_epsilon", strict=False)
    check_epsilon_delta(1.0, delta)
    log_p = -math.log1p(math.exp(-pure_epsilon))
    log_q = -pure_epsilon + log_p

    def log_delta(epsilon: float) -> float:
        return float(np.logaddexp(log_p + _gaussian_log_delta(noise_multiplier, epsilon - pure_epsilon),
                                  log_q + _gaussian_log_delta(noise_multiplier, epsilon + pure_epsilon)))

    target = math.log(delta)
    low, high = 0.0, pure_epsilon + max(gaussian_epsilon(noise_multiplier, delta), 1e-12)
    while log_delta(high) > target:  # pragma: no cover - the bracket above always holds
        high *= 2.0
    if log_delta(low) <= target:
        return 0.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if middle in (low, high):
            break
        if log_delta(middle) <= target:
            high = middle
        else:
            low = middle
    return high


def pld_composed_epsilon(
    noise_multiplier: float,
    n_releases: int,
    delta: float,
    *,
    value_discretization_interval: float = 1e-4,
) -> float:
    """``epsilon`` of ``K`` composed Gaussian releases from the PLD accountant of ``dp-accounting``.

    An independent numerical route (privacy-loss distributions, pessimistic discretisation) to
    the quantity :func:`composed_gaussian_epsilon` computes in closed form; used to cross-check
    it. Uses the replace-one relation, which is what both of dptensor's neighbouring relations
    are (a unit change to a tensor entry, or replacing one record).
    """
    noise_multiplier = check_real(noise_multiplier, "noise_multiplier")
    n_releases = check_positive_int(n_releases, "n_releases")
    check_epsilon_delta(1.0, delta)
    import dp_accounting
    from dp_accounting import pld

    accountant = pld.PLDAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
        value_discretization_interval=value_discretization_interval,
    )
    # dp-accounting measures a GaussianDpEvent's noise per unit of add/remove sensitivity and
    # takes a replacement to move the query by 2 units. Our sensitivities are already the
    # largest change between two neighbours, so the event's multiplier is 2 z.
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(2.0 * noise_multiplier), n_releases
    )
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))


def noise_ratio(epsilon: float, delta: float, n_releases: int) -> float:
    """Ratio of the ``"advanced"`` to the ``"exact"`` per-release noise multiplier."""
    return composed_noise_multiplier(epsilon, delta, n_releases, "advanced") / composed_noise_multiplier(
        epsilon, delta, n_releases, "exact"
    )
