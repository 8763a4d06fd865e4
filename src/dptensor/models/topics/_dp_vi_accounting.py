"""The accounting of DP variational LDA: epsilon of its releases, and the noise for a target epsilon.

The privacy arithmetic of :class:`~dptensor.models.topics.dp_vi.DPVariationalLDA`, apart from the
estimator: :func:`dp_vi_epsilon` (the PLD accountant for Poisson-subsampled Gaussian releases under
replace-one, Gaussian DP for a full batch, or the authors' moments accountant),
:func:`dp_vi_noise_multiplier` (its calibration), :func:`replace_one_sensitivity` and the valid
epsilon of the authors' fixed-size minibatches. Why these are the right events is in the module
docstring of :mod:`dptensor.models.topics.dp_vi` (*Accounting*), which re-exports every public name.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

import dp_accounting
from dp_accounting import pld, rdp

from dptensor._validation import check_epsilon_delta
from dptensor.privacy import composed_gaussian_epsilon, composed_noise_multiplier

__all__ = [
    "PLD_DISCRETIZATION",
    "dp_vi_epsilon",
    "dp_vi_noise_multiplier",
    "pld_discretization",
    "replace_one_sensitivity",
]

#: PLD discretisation of the exact accountant (pessimistic, so the epsilon is an upper bound).
PLD_DISCRETIZATION = 1e-3


def _poisson_gaussian_event(noise_multiplier: float, q: float, n_steps: int) -> dp_accounting.DpEvent:
    """``n_steps`` Poisson-subsampled Gaussian releases (read in the accountant's own units)."""
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(noise_multiplier)), n_steps
    )


@contextmanager
def _quiet_absl() -> Iterator[None]:
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@lru_cache(maxsize=256)
def dp_vi_epsilon(
    noise_multiplier: float,
    delta: float,
    sampling_probability: float,
    n_steps: int,
    accountant: str = "exact",
    discretization: float = PLD_DISCRETIZATION,
) -> float:
    """``epsilon`` at ``delta`` of ``n_steps`` DP-VI releases with noise multiplier ``z``.

    Parameters
    ----------
    noise_multiplier : float
        ``"exact"`` with ``q < 1``: ``sigma / (C / S)`` (dp-accounting's REPLACE_ONE units);
        ``"exact"`` with ``q = 1``: ``sigma / (sqrt(2) C / S)`` (the replace-one sensitivity);
        ``"paper"``: ``sigma / (C / S)`` as the authors' moments accountant reads it.
    delta : float
    sampling_probability : float
        ``q = S / N`` (``1`` for a full batch).
    n_steps : int
    accountant : {"exact", "paper"}
        ``"exact"``: PLD accountant, Poisson sampling, REPLACE_ONE (full batch: Gaussian DP);
        ``"paper"``: the authors' claim, RDP (moments) accountant for Poisson sampling under
        ADD_OR_REMOVE_ONE.
    discretization : float
        The PLD's value discretisation interval (pessimistic rounding: any interval gives an
        upper bound; smaller is tighter and slower).

    See the module docstring for why these are the right events.
    """
    q = float(sampling_probability)
    if accountant == "exact" and q >= 1.0:
        return composed_gaussian_epsilon(noise_multiplier, n_steps, delta)
    if accountant == "exact":
        acc = pld.PLDAccountant(
            dp_accounting.NeighboringRelation.REPLACE_ONE, value_discretization_interval=discretization
        )
        acc.compose(_poisson_gaussian_event(noise_multiplier, q, n_steps))
        return float(acc.get_epsilon(delta))
    if accountant == "paper":
        acc = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
        with _quiet_absl():  # dp-accounting logs orders it drops at small noise; they are excluded safely
            acc.compose(_poisson_gaussian_event(noise_multiplier, q, n_steps))
            return float(acc.get_epsilon(delta))
    raise ValueError(f"accountant must be 'exact' or 'paper', got {accountant!r}")


@lru_cache(maxsize=256)
def _valid_epsilon_without_replacement(
    sigma_over_sensitivity: float, delta: float, n_documents: int, batch_size: int, n_steps: int
) -> float:
    """Valid epsilon of fixed-size minibatches (paper mode) under replace-one: WBK RDP bound.

    ``sigma_over_sensitivity = sigma / (sqrt(2) C / S)``; dp-accounting's RDP accountant reads a
    ``SampledWithoutReplacementDpEvent`` under REPLACE_ONE in units of the replace-one
    sensitivity (its base Gaussian has RDP ``alpha / (2 z^2)``).
    """
    if batch_size >= n_documents:
        return composed_gaussian_epsilon(sigma_over_sensitivity, n_steps, delta)
    acc = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    with _quiet_absl():
        acc.compose(
            dp_accounting.SampledWithoutReplacementDpEvent(
                n_documents, batch_size, dp_accounting.GaussianDpEvent(sigma_over_sensitivity)
            ),
            n_steps,
        )
        return float(acc.get_epsilon(delta))


@lru_cache(maxsize=256)
def dp_vi_noise_multiplier(
    epsilon: float, delta: float, sampling_probability: float, n_steps: int, accountant: str = "exact"
) -> float:
    """Smallest noise multiplier (to relative ``1e-4``) with :func:`dp_vi_epsilon` ``<= epsilon``.

    Bisection on the monotone map ``z -> epsilon(z)``; the value returned is always on the
    private side (its epsilon, recomputed by the same accountant, is at most the target). The
    PLD is discretised at :func:`pld_discretization` ``(epsilon)``. The full-batch exact case is
    the closed-form Gaussian-DP calibration.
    """
    check_epsilon_delta(epsilon, delta)  # never a bool
    if accountant == "exact" and sampling_probability >= 1.0:
        return composed_noise_multiplier(epsilon, delta, n_steps, "exact")
    interval = pld_discretization(epsilon)

    def eps(z: float) -> float:
        return dp_vi_epsilon(z, delta, sampling_probability, n_steps, accountant, interval)

    hi = 1.0
    while eps(hi) > epsilon:
        hi *= 2.0
        if hi > 1e6:  # pragma: no cover - only for absurd budgets
            raise ValueError(f"no noise multiplier below 1e6 reaches epsilon={epsilon} at delta={delta}")
    lo = hi / 2.0
    while lo > 0.05 and eps(lo) <= epsilon:
        hi, lo = lo, lo / 2.0
    if lo <= 0.05:
        return hi
    while (hi - lo) > 1e-4 * hi:
        mid = 0.5 * (lo + hi)
        if eps(mid) <= epsilon:
            hi = mid
        else:
            lo = mid
    return hi


def pld_discretization(epsilon: float) -> float:
    """PLD interval used for a target ``epsilon``: ``1e-3``, relaxed to ``1e-3 epsilon`` above 1.

    Large budgets mean small noise and long privacy-loss supports; a proportional interval keeps
    their calibration fast at the same relative precision (pessimistic either way).
    """
    return PLD_DISCRETIZATION * max(1.0, float(epsilon))


def replace_one_sensitivity(clip: float, batch_size: int) -> float:
    """``sqrt(2) C / S``: largest change of the clipped minibatch mean when one document is replaced.

    See the proposition in the module docstring (non-negative statistics of norm at most ``C``).
    """
    return math.sqrt(2.0) * float(clip) / int(batch_size)
