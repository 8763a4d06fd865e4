"""An empirical lower bound on epsilon from a mechanism's outputs on two neighbouring inputs.

:func:`epsilon_lower_bound` is a threshold test with Clopper--Pearson intervals (after Jagielski,
Ullman & Oprea 2020 and Nasr et al. 2021). Both kinds of audit use it: the audits of a single
mechanism in :mod:`dptensor.privacy.audit` (which re-exports it, its documented home) and the
distinguishing test of a whole fit in :mod:`dptensor.privacy.end_to_end_audit`; it lives here,
below both, so that neither imports the other for it.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = ["epsilon_lower_bound"]


def epsilon_lower_bound(
    samples: np.ndarray,
    neighbour_samples: np.ndarray,
    delta: float,
    *,
    confidence: float = 1e-3,
    n_thresholds: int = 200,
) -> float:
    """A lower confidence bound on epsilon from outputs on two neighbouring inputs.

    For every threshold test ``S > c``, a mechanism that is ``(epsilon, delta)``-DP satisfies
    ``P'[S > c] <= e^epsilon P[S > c] + delta``. The first half of each sample picks the most
    revealing threshold; on the second half, Clopper--Pearson bounds at one-sided level
    ``confidence`` give ``epsilon >= ln((p'_low - delta) / p_high)`` with probability at least
    ``1 - 2 confidence``. ``neighbour_samples`` should come from the input whose statistic is
    larger.

    Parameters
    ----------
    samples, neighbour_samples : ndarray of shape (m,)
        One scalar statistic of the release per run, for each input.
    delta : float
    confidence : float, default 1e-3
    n_thresholds : int, default 200

    Returns
    -------
    float
        ``0.0`` when the test finds nothing.
    """
    s0 = np.asarray(samples, dtype=float)
    s1 = np.asarray(neighbour_samples, dtype=float)
    half = min(s0.size, s1.size) // 2
    pick0, pick1, test0, test1 = s0[:half], s1[:half], s0[half:2 * half], s1[half:2 * half]
    thresholds = np.quantile(pick0, np.linspace(0.5, 0.999, n_thresholds))
    p0 = np.array([(pick0 > c).mean() for c in thresholds])
    p1 = np.array([(pick1 > c).mean() for c in thresholds])
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.log(np.maximum(p1 - delta, 1e-300) / np.maximum(p0, 1.0 / half))
    c = thresholds[int(np.argmax(score))]
    k0, k1, n = int((test0 > c).sum()), int((test1 > c).sum()), test0.size
    p0_high = stats.beta.ppf(1 - confidence, k0 + 1, n - k0) if k0 < n else 1.0
    p1_low = stats.beta.ppf(confidence, k1, n - k1 + 1) if k1 > 0 else 0.0
    if p1_low - delta <= 0:
        return 0.0
    return float(max(0.0, np.log((p1_low - delta) / p0_high)))
