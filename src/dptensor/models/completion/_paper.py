"""The paper's completion modes as written, whose privacy claims do not hold (opt-in).

Wei, Li, Mao & Wang, *Applying Differential Privacy to Tensor Completion*, claim three modes; as
printed, none of the claims is proved (module docstring of
:mod:`dptensor.models.completion.estimator`, which says why each fails):

* ``privacy="input"`` without a declared ``value_range`` (Algorithm 1 as printed): the Laplace
  sensitivity ``Delta = max - min`` is taken from the private values and released;
* ``privacy="gradient"`` (Algorithm 2): exponential-norm noise on ``c_k``'s clipped gradient only,
  charged once for every step;
* ``privacy="output"`` (Algorithm 3): exponential-norm noise on the rows of ``C`` after a
  non-convex SGD, under Lemma 3's convexity assumptions that nothing enforces.

They run only after ``dptensor.privacy.enable_features("unproven")`` (:func:`require_opt_in`),
and their guarantees report ``holds=False``, ``epsilon = inf`` and the paper's number as
``nominal_epsilon``. This module holds what is theirs alone: the opt-in, the data's range, their
guarantees and Algorithm 2's noise step (Algorithm 3's noise on the rows of ``C`` is the one that
``privacy="output_clipped"`` adds too). The shared SGD is :mod:`dptensor.models.completion._sgd`;
the modes whose guarantees hold are planned in :mod:`dptensor.models.completion._plan`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dptensor.privacy import NoiseSource, PrivacyGuarantee, exponential_norm_noise, require_unproven

#: Why each of the paper's unproven modes fails (shown in the opt-in error and the guarantee).
UNPROVEN_REASONS = {
    "gradient": (
        "A, B (and G) are trained with un-noised gradients and released, so they are a "
        "deterministic function of every value (no finite epsilon); each entry's noisy gradient is "
        "released n_epochs times and the paper charges epsilon once; the proof compares neighbours "
        "at a common minimiser C*, which SGD does not reach"
    ),
    "output": (
        "Lemma 3 needs a convex, L-Lipschitz, beta-smooth loss with eta <= 2/beta; objective (6)/(7) "
        "is multilinear (non-convex) with unbounded gradients and nothing enforces L; A, B (and G) "
        "are released without noise"
    ),
    "input": (
        "without a declared value_range, Delta = max - min is computed from the private values and "
        "released (value_range_, the guarantee's sensitivity and laplace_scale); declare value_range "
        "for the guarantee to hold"
    ),
}

#: How the opt-in error names each unproven mode.
UNPROVEN_MODES = {
    "gradient": "privacy='gradient' (Wei et al., Algorithm 2)",
    "output": "privacy='output' (Wei et al., Algorithm 3)",
    "input": "privacy='input' without value_range (Wei et al., Algorithm 1 as printed)",
}


def unproven_mode(privacy: str | None, value_range: tuple[float, float] | None) -> str | None:
    """The paper's unproven mode a fit would run (a key of :data:`UNPROVEN_REASONS`), or ``None``.

    Parameters
    ----------
    privacy : str or None
        The estimator's ``privacy``.
    value_range : (float, float) or None
        The declared range, checked.

    Returns
    -------
    str or None
    """
    if privacy in ("gradient", "output"):
        return privacy
    return "input" if privacy == "input" and value_range is None else None


def require_opt_in(privacy: str | None, value_range: tuple[float, float] | None) -> None:
    """Raise :class:`~dptensor.privacy.UnprovenPrivacyError` for an unproven mode without the opt-in.

    Parameters
    ----------
    privacy : str or None
        The estimator's ``privacy``.
    value_range : (float, float) or None
        The declared range, checked.
    """
    unproven = unproven_mode(privacy, value_range)
    if unproven is not None:
        require_unproven(UNPROVEN_MODES[unproven], UNPROVEN_REASONS[unproven])


def data_range(values: np.ndarray) -> tuple[float, float]:
    """``(min, max)`` of the values: Algorithm 1's range without a declared one (unproven).

    Parameters
    ----------
    values : ndarray of shape (n,), n >= 1
        The observed values.

    Returns
    -------
    (float, float)
        ``(min, max)``, or ``(v, v + 1)`` when every value is ``v``.
    """
    low, high = float(values.min()), float(values.max())
    return (low, high) if high > low else (low, low + 1.0)


def gradient_guarantee(
    epsilon: float, n_releases: int, clip: float, common: dict[str, Any]
) -> PrivacyGuarantee:
    """Algorithm 2's guarantee: the paper's Theorem 2, which does not hold.

    Parameters
    ----------
    epsilon : float
        The paper's claimed budget (``nominal_epsilon``).
    n_releases : int
        Noisy gradient steps, ``n_epochs * |Omega|``.
    clip : float
        ``m``, the clip of ``c_k``'s gradient (sensitivity ``2m``).
    common : dict
        ``neighbouring``, ``protected`` and ``public`` of the guarantee.

    Returns
    -------
    PrivacyGuarantee
        ``holds=False``.
    """
    return PrivacyGuarantee(
        epsilon=epsilon, delta=0.0, accountant="paper (Theorem 2)",
        n_releases=n_releases, mechanism="exponential-norm",
        noise_multiplier=1 / epsilon, epsilon_exact=math.inf,
        details={"algorithm": "Wei et al. Algorithm 2", "sensitivity": 2 * clip,
                 "clip": clip, "noised": "gradients of C only"},
        holds=False, claim="paper", reason=UNPROVEN_REASONS["gradient"], **common,
    )


def output_guarantee(
    epsilon: float, sensitivity: float, n_epochs: int, clip: float, learning_rate: float,
    common: dict[str, Any],
) -> PrivacyGuarantee:
    """Algorithm 3's guarantee: the paper's Theorem 3, which does not hold.

    Parameters
    ----------
    epsilon : float
        The paper's claimed budget (``nominal_epsilon``).
    sensitivity : float
        ``Delta = 2 tau L eta``.
    n_epochs, clip, learning_rate : int, float, float
        ``tau``, ``L`` and ``eta``.
    common : dict
        ``neighbouring``, ``protected`` and ``public`` of the guarantee.

    Returns
    -------
    PrivacyGuarantee
        ``holds=False``.
    """
    return PrivacyGuarantee(
        epsilon=epsilon, delta=0.0, accountant="paper (Theorem 3)", n_releases=1,
        mechanism="exponential-norm", noise_multiplier=1 / epsilon, epsilon_exact=math.inf,
        details={"algorithm": "Wei et al. Algorithm 3", "sensitivity": sensitivity, "tau": n_epochs,
                 "lipschitz": clip, "learning_rate": learning_rate, "noised": "rows of C only"},
        holds=False, claim="paper", reason=UNPROVEN_REASONS["output"], **common,
    )


def noisy_gradient_rows(gc: np.ndarray, clip: float, epsilon: float, source: NoiseSource) -> None:
    """Algorithm 2, steps 6-8: clip each row of ``c_k``'s gradient to ``m``, add exponential-norm noise.

    Parameters
    ----------
    gc : ndarray of shape (batch, rank)
        The batch's gradients of ``c_k``, changed in place.
    clip : float
        ``m`` (the noise's sensitivity is ``2m``).
    epsilon : float
        The paper's per-step budget.
    source : NoiseSource
        The secret noise.
    """
    norm = np.linalg.norm(gc, axis=1)
    gc *= np.minimum(1.0, clip / np.maximum(norm, 1e-300))[:, None]
    gc += exponential_norm_noise(gc.shape[1], 2.0 * clip, epsilon, size=gc.shape[0], noise=source)

