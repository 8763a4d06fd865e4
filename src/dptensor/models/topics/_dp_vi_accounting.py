"""The accounting of DP variational LDA: epsilon of its releases, and the noise for a target epsilon.

The privacy arithmetic of :class:`~dptensor.models.topics.dp_vi.DPVariationalLDA`, apart from the
estimator: :func:`dp_vi_epsilon` (the PLD accountant for Poisson-subsampled Gaussian releases under
replace-one, Gaussian DP for a full batch, or the authors' moments accountant),
:func:`dp_vi_noise_multiplier` (its calibration), :func:`replace_one_sensitivity` and the valid
epsilon of the authors' fixed-size minibatches, and :func:`vi_pass_guarantee`, the guarantee of a
fit's releases. The neighbouring relation and the sensitivity ``sqrt(2) C / S`` are derived in
:mod:`dptensor.models.topics.dp_vi`.

Accounting (``accountant="exact"``, the default)
------------------------------------------------
*Full batch* (``S >= N``, so ``q = 1``): ``T`` adaptively composed Gaussian releases of
sensitivity ``sqrt(2) C / N``, calibrated exactly by Gaussian differential privacy
(:func:`~dptensor.privacy.composed_noise_multiplier`); the ``dp_event`` is
``SelfComposedDpEvent(GaussianDpEvent(z), T)`` in dptensor's units (``z = sigma / (sqrt(2) C / N)``).

*Poisson subsampling* (``q < 1``): condition on the other documents' draws; the replaced
document's slot is drawn with probability ``q`` on both sides, so one step's outputs are
``P = (1-q) N(m, s^2) + q N(m + a, s^2)`` and ``Q = (1-q) N(m, s^2) + q N(m + b, s^2)`` with
``a = s_x / S``, ``b = s_x' / S``, ``||a||, ||b|| <= C / S``. The non-negativity bounds
``||a - b||`` by ``sqrt(2) C / S``, but under subsampling it does **not** give the one-dimensional
pair at distance ``sqrt(2) C / S``: the common offset of ``a`` and ``b`` away from the
"not sampled" component reveals whether the slot was drawn (for ``a, b`` orthogonal the
hockey-stick divergence exceeds that pair's; the test suite shows it numerically). We therefore
use the dominating pair for contributions in a ball of radius ``C / S`` under substitution,
``((1-q) N(0, z^2) + q N(-1, z^2), (1-q) N(0, z^2) + q N(1, z^2))`` (Lebeda, Regehr, Kamath &
Steinke 2024, *Avoiding pitfalls for privacy accounting of subsampled mechanisms under
composition*), which is exactly what dp-accounting's PLD accountant composes for
``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` under ``NeighboringRelation.REPLACE_ONE``
(``z = sigma / (C / S)``). ``z`` is the smallest (to relative ``1e-4``) for which the PLD
accountant (pessimistic discretisation) reports ``epsilon <= target`` over ``T`` steps. That
accountant reads the event in REPLACE_ONE units, not in dptensor's add-or-remove units
(:mod:`dptensor.privacy.accounting`), so the guarantee exposes the whole run as
``EpsilonDeltaDpEvent(epsilon_exact, delta)`` (valid for composition, pessimistic) and records
the REPLACE_ONE event in ``details``.

``accountant="paper"`` (unproven, opt-in)
-----------------------------------------
The authors' code: fixed-size minibatches of ``S`` documents, noise ``sigma = z C / S`` with ``z``
from the moments accountant (Abadi et al. 2016) for *Poisson* sampling at rate ``S/N`` under
*add/remove* (computed here with dp-accounting's RDP accountant, which implements that bound).
Under the replace-one relation a fixed-size minibatch moves the mean by up to ``sqrt(2) C / S``,
and sampling without replacement is not Poisson sampling; the valid epsilon of that noise
(Wang, Balle & Kasiviswanathan 2019, dp-accounting's ``SampledWithoutReplacementDpEvent`` under
REPLACE_ONE) is recorded in the guarantee's details and is several times larger.
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
from dptensor.privacy import (
    EpsilonDeltaDpEvent,
    PrivacyGuarantee,
    composed_gaussian_epsilon,
    composed_noise_multiplier,
)
from dptensor.privacy.vocabulary import VOCABULARY_ASSUMPTION

__all__ = [
    "NEIGHBOURING",
    "PAPER_REASON",
    "PLD_DISCRETIZATION",
    "PROTECTED",
    "PUBLIC",
    "dp_vi_epsilon",
    "dp_vi_noise_multiplier",
    "pld_discretization",
    "replace_one_sensitivity",
    "vi_pass_guarantee",
]

NEIGHBOURING = "document"
PROTECTED = "the whole word-count vector of one document (replace one document by any other)"
PUBLIC = (
    "the number of documents N, the vocabulary, the clipping norm C (and the declared maximum "
    "document length), the minibatch size S, the number of steps and every other parameter; "
    + VOCABULARY_ASSUMPTION
)
PAPER_REASON = (
    "the authors calibrate with the moments accountant for Poisson sampling under add/remove with "
    "sensitivity C/S, but draw fixed-size minibatches and the replace-one relation moves the "
    "minibatch mean by up to sqrt(2) C/S; the valid epsilon of the same noise (sampling without "
    "replacement, Wang, Balle & Kasiviswanathan 2019) is in details['epsilon_valid']"
)

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


def vi_pass_guarantee(
    n_documents: int, n_steps: int, epsilon: float, delta: float, *, batch_size: int, clip: float,
    max_doc_length: int | None, accountant: str,
) -> tuple[PrivacyGuarantee, float]:
    """The guarantee of ``n_steps`` private VI releases at ``epsilon`` and their noise standard deviation.

    Minibatches of ``batch_size`` of the ``n_documents`` (Poisson at ``q = S / N``; the full batch
    when ``S >= N``; fixed-size draws for ``accountant="paper"``), statistics clipped to ``clip``
    (module docstring). ``max_doc_length`` is recorded in the details.
    """

    eps = epsilon
    S = batch_size
    q = min(1.0, S / n_documents)
    common = {
        "algorithm": "Park, Foulds, Chaudhuri & Welling (2016): online VB for LDA (Hoffman et al. "
        "2010) with clipped, Gaussian-noised expected sufficient statistics",
        "n_documents": n_documents,
        "batch_size": S,
        "sampling_probability": q,
        "n_steps": n_steps,
        "clip": clip,
        "max_doc_length": max_doc_length,
        "replace_one_sensitivity": replace_one_sensitivity(clip, S),
    }
    shared = {"neighbouring": NEIGHBOURING, "protected": PROTECTED, "public": PUBLIC}
    if accountant == "paper":
        z = dp_vi_noise_multiplier(eps, delta, q, n_steps, "paper")
        sigma = z * clip / S
        valid = _valid_epsilon_without_replacement(
            sigma / replace_one_sensitivity(clip, S), delta, n_documents, S, n_steps
        )
        details = {
            **common,
            "sampling": "fixed size S without replacement, every step (the authors' code)",
            "noise_std": sigma,
            "paper_sensitivity": clip / S,
            "paper_accountant": "moments accountant (RDP), Poisson sampling, add/remove",
            "epsilon_valid": valid,
            "epsilon_valid_accountant": "RDP, sampling without replacement, replace-one (WBK 2019)",
        }
        guarantee = PrivacyGuarantee(
            epsilon=eps, delta=delta, accountant="paper (moments accountant)", n_releases=n_steps,
            mechanism="subsampled gaussian", noise_multiplier=z, epsilon_exact=math.inf, details=details,
            holds=False, claim="paper", reason=PAPER_REASON, **shared,
        )  # fmt: skip
        return guarantee, sigma
    z = dp_vi_noise_multiplier(eps, delta, q, n_steps, "exact")
    exact = min(eps, dp_vi_epsilon(z, delta, q, n_steps, "exact", pld_discretization(eps)))
    if q >= 1.0:
        unit = replace_one_sensitivity(clip, S)
        event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), n_steps)
        details = {**common, "sampling": "full batch", "noise_std": z * unit, "sensitivity": unit}
        accountant = "exact (Gaussian DP, full batch)"
    else:
        unit = clip / S
        native = _poisson_gaussian_event(z, q, n_steps)
        event = EpsilonDeltaDpEvent(exact, delta)
        details = {
            **common,
            "sampling": "poisson (secret)",
            "noise_std": z * unit,
            "contribution_radius": unit,
            "dp_accounting_event": repr(native),
            "dp_accounting_relation": "REPLACE_ONE",
            "pld_value_discretization": pld_discretization(eps),
        }
        accountant = "exact (dp-accounting PLD, Poisson sampling, replace-one)"
    guarantee = PrivacyGuarantee(
        epsilon=eps, delta=delta, accountant=accountant, n_releases=n_steps,
        mechanism="subsampled gaussian" if q < 1 else "gaussian", noise_multiplier=z,
        epsilon_exact=exact, details=details, dp_event=event, **shared,
    )  # fmt: skip
    return guarantee, z * unit
