"""The noise of a private spectral LDA plan's releases and the guarantee they compose to.

:func:`noise_and_guarantee` is the calibration step of
:func:`~dptensor.models.topics._private_plan.plan_private_spectral_lda`: from the resolved options
and the budget's shares per release it gives each release's noise multiplier and, for the paper's
per-edge accounting, its ``(epsilon_i, delta_i)``, whether the guarantee holds, and the
:class:`~dptensor.privacy.guarantee.PrivacyGuarantee` with its composed
:class:`dp_accounting.DpEvent`. Configuration 1 (clipped or not; DeCarolis et al., paper 004, with
the corrections of ``docs/lda.md``, *Privacy*): one Gaussian-DP ``mu`` from the total
``(epsilon, delta)``, ``mu^2`` divided by the shares, a release repeated ``T`` times at
``mu_edge / sqrt(T)`` each, composed exactly (:func:`composed_multiplier`), or the classic Gaussian
per edge (Dwork & Roth, Theorem A.1). Configurations 2--4: the paper's per-edge budgets with basic
composition, as printed (unproven).
"""

from __future__ import annotations

import math
from typing import Any

import dp_accounting

from dptensor.models.topics._private_guarantee import (
    CLASSIC_REASON,
    PAPER_SENSITIVITY_REASON,
    UNPROVEN_REASONS,
    spectral_lda_guarantee,
)
from dptensor.models.topics.private_refinement import refinement_sensitivity
from dptensor.models.topics.sensitivity import clipped_sensitivities
from dptensor.privacy.calibration import classic_gaussian_formula, gaussian_epsilon, gaussian_sigma_analytic
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.quantile import HISTOGRAM_SENSITIVITY

__all__ = ["composed_multiplier", "noise_and_guarantee"]


def composed_multiplier(
    multipliers: dict[str, float], counts: dict[str, int], epsilon: float, delta: float, *,
    round_up: bool = True,
) -> float:  # fmt: skip
    """The Gaussian-DP composition of ``counts[e]`` releases at ``multipliers[e]``, as one multiplier.

    With ``round_up``, every multiplier is raised by relative steps doubling from ``1e-10`` until the
    total meets ``epsilon`` (the rounding of the split and of the calibration's root finding), in place.
    """
    effective = 1.0 / math.sqrt(sum(counts[e] / multipliers[e] ** 2 for e in counts))
    if round_up and gaussian_epsilon(effective, delta) > epsilon:
        factor, step = 1.0, 1e-10
        while gaussian_epsilon(effective * factor, delta) > epsilon:  # steps doubling from 1e-10
            factor *= 1.0 + step
            step *= 2.0
        for e in multipliers:
            multipliers[e] *= factor
        effective *= factor
    return effective


def noise_and_guarantee(
    options: dict, shares: dict[str, float], steps: int, clipping: tuple | None, whitened: int,
    passes: int = 0,
) -> tuple[dict, dict, dict, bool, list[str], PrivacyGuarantee]:
    """Noise multipliers, per-edge budgets, whether the guarantee holds, and the guarantee itself."""
    eps, delta = float(options["epsilon"]), float(options["delta"])
    multipliers: dict[str, float] = {}
    epsilons: dict[str, float] = {}
    deltas: dict[str, float] = {}
    holds, reasons = True, []

    def guarantee(holds: bool, reasons: list[str], **kwargs: Any) -> PrivacyGuarantee:
        # reads the multipliers when called: after composed_multiplier's rounding
        return spectral_lda_guarantee(
            options, shares=shares, multipliers=multipliers, epsilons=epsilons, deltas=deltas, holds=holds,
            reasons=reasons, **kwargs,
        )
    if clipping is not None:  # the clipped Configuration 1: mu^2 shared by weight; m2 repeated T times (NPM)
        edges = tuple(shares)
        counts = {"m1": 1, "m2": steps, "q3": 1, "e3": 1, "rf": passes}
        mu = 1.0 / gaussian_sigma_analytic(eps, delta)
        for edge in edges:
            multipliers[edge] = math.sqrt(counts[edge]) / (math.sqrt(shares[edge]) * mu)
        effective = composed_multiplier(multipliers, {e: counts[e] for e in edges}, eps, delta)
        events = [
            dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(multipliers[e]), counts[e])
            for e in edges
        ]
        clip, word_clip, third_clip = clipping
        return multipliers, epsilons, deltas, holds, reasons, guarantee(
            holds, reasons, accountant="exact (Gaussian DP composition, analytic calibration)",
            n_releases=sum(counts[e] for e in edges), noise_multiplier=effective,
            epsilon_exact=min(gaussian_epsilon(effective, delta), eps),
            dp_event=dp_accounting.ComposedDpEvent(events),
            clipping={
                "clip": clip, "word_clip": word_clip,
                "third_clip": (
                    "private quantile (q3)" if "q3" in edges else third_clip if "e3" in edges else None
                ),
                "whitening_words": whitened,
                # with q3, e3's is min(sqrt2 C, 2 C3) for the released C3 (third_clip_); sqrt2 C at most
                "sensitivities": {
                    key: value for key, value in clipped_sensitivities(clip, word_clip, third_clip).items()
                    if key in edges
                } | ({"q3": HISTOGRAM_SENSITIVITY} if "q3" in edges else {})
                | ({"rf": refinement_sensitivity(options["refine_clip"])} if "rf" in edges else {}),
                "topic_recovery": "nmf" if "e3" not in edges and "m2" in edges else "tensor",
                "refinement": (
                    {"passes": passes, "clip": float(options["refine_clip"])} if "rf" in edges else None
                ),
            },
        )  # fmt: skip
    config = options["config"]
    if config == 1:
        shared = options["shared_m2"]
        m2_edges = ["m2"] if shared else ["e4", "e8"]
        weight = {"e3": shares["e3"], "e4": shares["e4"], "e8": shares["e8"]}
        if shared:
            weight["m2"] = weight.pop("e4") + weight.pop("e8")
        counts = {edge: (steps if edge != "e3" else 1) for edge in weight}
        if options["calibration"] == "analytic":
            mu = 1.0 / gaussian_sigma_analytic(eps, delta)
            for edge, w in weight.items():
                # mu^2 shared by weight; a release repeated n times gets mu_edge / sqrt(n) each.
                multipliers[edge] = math.sqrt(counts[edge]) / (math.sqrt(w) * mu)
        else:
            for edge, w in weight.items():
                e_step, d_step = w * eps / counts[edge], w * delta / counts[edge]
                multipliers[edge] = classic_gaussian_formula(e_step, d_step)
                epsilons[edge], deltas[edge] = w * eps, w * delta
                if e_step >= 1:
                    holds = False
                    if CLASSIC_REASON not in reasons:
                        reasons.append(CLASSIC_REASON)
        if options["sensitivity"] == "paper":
            holds = False
            reasons.append(PAPER_SENSITIVITY_REASON)
        effective = composed_multiplier(multipliers, counts, eps, delta, round_up=holds)
        events = [
            dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), counts[e])
            for e in ["e3", *m2_edges]
            for z in [multipliers[e]]
        ]
        accountant = (
            "exact (Gaussian DP composition, analytic calibration)" if options["calibration"] == "analytic"
            else "classic Gaussian per edge (Proposition 18), composed exactly"
        )
        return multipliers, epsilons, deltas, holds, reasons, guarantee(
            holds, reasons, accountant=accountant, n_releases=sum(counts.values()),
            noise_multiplier=effective,
            epsilon_exact=min(gaussian_epsilon(effective, delta), eps),
            dp_event=dp_accounting.ComposedDpEvent(events),
        )  # fmt: skip
    # Configurations 2-4: per-edge (epsilon_i, delta_i), basic composition, as printed.
    holds = False
    reasons.append(UNPROVEN_REASONS[config])
    for edge, w in shares.items():
        epsilons[edge], deltas[edge] = w * eps, w * delta
        if edge in ("sigma_k", "gamma_s"):
            continue
        n = steps if edge == "e8" else 1
        if options["calibration"] == "classic":
            multipliers[edge] = classic_gaussian_formula(w * eps / n, w * delta / n)
        else:
            multipliers[edge] = math.sqrt(n) * gaussian_sigma_analytic(w * eps, w * delta)
    return multipliers, epsilons, deltas, holds, reasons, guarantee(
        holds, reasons, accountant="basic composition (paper)", n_releases=len(shares),
        noise_multiplier=math.nan, epsilon_exact=math.inf, dp_event=None,
    )  # fmt: skip
