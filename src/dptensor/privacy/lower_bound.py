"""Private lower confidence bounds for data-dependent noise scales (Lemma 8, Procedure 1).

DeCarolis et al. (paper 004, Section 5.1) calibrate the noise of their Configurations 2--4 to a
*local* sensitivity that depends on the data through ``sigma_k(M2_hat)`` (and ``gamma_s``). Lemma 8:
if ``LS~`` is released ``(epsilon_1, 0)``-DP and ``P[LS > LS~] <= delta_1``, then adding noise
calibrated to ``LS~`` for ``(epsilon, delta)`` gives an ``(epsilon_1 + epsilon, delta_1 + delta)``-DP
release. Procedure 1 obtains ``LS~`` from a private lower bound of ``sigma_k``:

``sigma_hat = sigma_k + Lap(Delta / epsilon_1)`` and
``sigma~ = sigma_hat - (Delta / epsilon_1) ln(1 / (2 delta_1))``,

so that ``P[sigma~ > sigma_k] = P[Lap(1) > ln(1/(2 delta_1))] = delta_1`` exactly
(:func:`private_lower_bound`, tested by Monte Carlo). As printed, Procedure 1 uses the Laplace
scale ``1/(N epsilon_1)`` but the offset ``(2/(N epsilon_1)) ln(1/(2 delta_1))`` -- the scale of a
sensitivity of ``1/N``, the offset of ``2/N`` -- and Lemma 9's ``2/N`` is itself below the
eigenvalue sensitivity ``sqrt2 (1 + 2a)/N`` (:func:`~dptensor.models.topics.sensitivity.m2_sensitivity`,
Weyl). ``paper=True`` reproduces the printed numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dptensor._validation import check_epsilon_delta, check_real
from dptensor.privacy.noise import NoiseSource


@dataclass(frozen=True)
class LowerBound:
    """A private lower confidence bound: ``lower <= value`` except with probability ``delta``.

    Attributes
    ----------
    released : float
        ``value + Laplace(scale)`` (the ``(epsilon, 0)``-DP release).
    lower : float
        ``released - offset``.
    scale, offset : float
        The Laplace scale and the subtracted tail quantile.
    """

    released: float
    lower: float
    scale: float
    offset: float


def private_lower_bound(
    value: float,
    sensitivity: float,
    epsilon: float,
    delta: float,
    source: NoiseSource,
    *,
    paper_scale: float | None = None,
) -> LowerBound:
    """Release ``value`` with Laplace noise and a lower bound that fails with probability ``delta``.

    Parameters
    ----------
    value : float
        The private statistic (e.g. ``sigma_k(M2_hat)``).
    sensitivity : float
        Its global sensitivity (largest change between neighbours).
    epsilon : float
        The Laplace release is ``epsilon``-DP.
    delta : float
        ``P[lower > value] = delta`` (over the noise).
    source : NoiseSource
        Secret randomness.
    paper_scale : float, optional
        Procedure 1 as printed: Laplace scale ``paper_scale / epsilon`` (the paper's ``1/N``) and
        offset ``(2 paper_scale / epsilon) ln(1/(2 delta))`` (its ``2/N``), floored at 0.

    Returns
    -------
    LowerBound
    """
    check_epsilon_delta(epsilon, delta)
    if delta >= 0.5:
        raise ValueError(f"delta must be below 1/2 for a Laplace tail bound, got {delta!r}")
    tail = math.log(1.0 / (2.0 * delta))
    if paper_scale is not None:
        unit = check_real(paper_scale, "paper_scale") / epsilon
        released = float(source.add_laplace(float(value), unit))
        offset = 2.0 * unit * tail
        return LowerBound(released, max(0.0, released - offset), unit, offset)
    scale = check_real(sensitivity, "sensitivity") / epsilon
    released = float(source.add_laplace(float(value), scale))
    return LowerBound(released, released - scale * tail, scale, scale * tail)
