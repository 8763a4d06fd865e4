"""A private upper quantile from a noisy histogram on public bins (Gaussian mechanism).

Used to choose a clipping bound from the data without looking at it for free: the counts of
``values`` in public, log-spaced bins are released with Gaussian noise, and the bound is read off
the noisy counts (post-processing). Under the relation *replace one record* a record leaves one
bin and enters another, so the L2 sensitivity of the count vector is ``sqrt2`` whatever the
values (a value outside the bins is counted in the first or last one). The release composes with
the caller's other Gaussian releases in Gaussian DP: it is one Gaussian release of multiplier
``z`` (standard deviation ``z sqrt2``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dptensor._validation import check_positive_int, check_real

#: L2 sensitivity of a histogram's counts when one record is replaced by another.
HISTOGRAM_SENSITIVITY = math.sqrt(2.0)


def log_bin_edges(low: float, high: float, per_decade: int) -> np.ndarray:
    """Public log-spaced edges from ``low`` to ``high`` (both included), ``per_decade`` bins per decade."""
    low, high = check_real(low, "low"), check_real(high, "high")
    per_decade = check_positive_int(per_decade, "per_decade")
    if not 0 < low < high:
        raise ValueError(f"need 0 < low < high, got low={low!r}, high={high!r}")
    n_bins = max(1, math.ceil(round(per_decade * math.log10(high / low), 9)))
    return np.geomspace(low, high, n_bins + 1)


def bin_counts(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Counts of ``values`` in the ``len(edges) + 1`` bins ``(-inf, e0), [e0, e1), ..., [e_last, inf)``."""
    return np.bincount(np.searchsorted(edges, np.asarray(values, dtype=np.float64), side="right"),
                       minlength=edges.size + 1).astype(np.float64)  # fmt: skip


@dataclass(frozen=True)
class PrivateUpperQuantile:
    """Result of :func:`private_upper_quantile`.

    Attributes
    ----------
    value : float
        The chosen edge (or ``fallback``).
    noisy_counts : ndarray
        The release: the noisy bin counts.
    noise_scale : float
        Standard deviation of the noise on each count.
    """

    value: float
    noisy_counts: np.ndarray
    noise_scale: float


def upper_quantile_from_counts(
    noisy_counts: np.ndarray, edges: np.ndarray, *, n_records: int, tail_fraction: float, noise_scale: float,
    fallback: float,
) -> float:  # fmt: skip
    """The smallest edge with at most ``tail_fraction * n_records`` noisy counts above it (post-processing).

    A tail's noisy count is a sum of ``j`` noisy bins, with noise of standard deviation
    ``noise_scale sqrt(j)``; the edge must pass with two of those to spare, so that the true tail
    of the chosen edge is within the allowed count with probability at least about 98% whatever
    the noise (noise tends to give a larger, less clipping, edge). ``fallback`` when no edge
    qualifies (noise as large as the allowed count).
    """
    noisy = np.asarray(noisy_counts, dtype=np.float64)
    tails = np.cumsum(noisy[::-1])[::-1][1:]  # tails[i] = noisy count of values >= edges[i]
    bins_in_tail = np.arange(edges.size, 0, -1)
    allowed = tail_fraction * n_records - 2.0 * noise_scale * np.sqrt(bins_in_tail)
    ok = np.flatnonzero(tails <= allowed)
    return float(edges[ok[0]]) if ok.size else float(fallback)


def private_upper_quantile(
    counts: np.ndarray, edges: np.ndarray, *, n_records: int, tail_fraction: float, noise_multiplier: float,
    source: object, fallback: float,
) -> PrivateUpperQuantile:  # fmt: skip
    """Release ``counts`` (from :func:`bin_counts`) with Gaussian noise and choose an upper quantile.

    Parameters
    ----------
    counts : ndarray of shape (len(edges) + 1,)
        Exact counts of the private values in the public bins.
    edges : ndarray
        Public, increasing bin edges.
    n_records : int
        The public number of records.
    tail_fraction : float in (0, 1)
        Share of the records that may lie above the chosen value.
    noise_multiplier : float
        ``z``: the noise standard deviation is ``z * sqrt2`` (:data:`HISTOGRAM_SENSITIVITY`).
    source : NoiseSource
        Secret noise.
    fallback : float
        Returned when no edge qualifies (a bound that holds without the quantile).

    Returns
    -------
    PrivateUpperQuantile
    """
    edges = np.asarray(edges, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    if counts.shape != (edges.size + 1,):
        raise ValueError(f"counts must have len(edges) + 1 = {edges.size + 1} entries, got {counts.shape}")
    if not 0 < tail_fraction < 1:
        raise ValueError(f"tail_fraction must be in (0, 1), got {tail_fraction!r}")
    scale = float(noise_multiplier) * HISTOGRAM_SENSITIVITY
    noisy = source.add_gaussian(counts, scale)
    value = upper_quantile_from_counts(
        noisy, edges, n_records=int(n_records), tail_fraction=float(tail_fraction), noise_scale=scale,
        fallback=fallback,
    )
    return PrivateUpperQuantile(value, noisy, scale)
