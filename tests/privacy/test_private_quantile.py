"""The private upper quantile (noisy histogram on public bins): sensitivity, choice, audit."""

import itertools

import numpy as np
import pytest

from dptensor.privacy import insecure_test_noise
from dptensor.privacy.audit import epsilon_lower_bound
from dptensor.privacy.calibration import gaussian_sigma_analytic
from dptensor.privacy.noise import resolve_noise
from dptensor.privacy.quantile import (
    HISTOGRAM_SENSITIVITY,
    bin_counts,
    log_bin_edges,
    private_upper_quantile,
    upper_quantile_from_counts,
)


def test_log_bin_edges():
    edges = log_bin_edges(1e-4, 1.0, 4)
    assert edges.size == 17 and edges[0] == pytest.approx(1e-4) and edges[-1] == pytest.approx(1.0)
    assert np.allclose(np.diff(np.log10(edges)), 0.25)
    assert log_bin_edges(0.5, 1.0, 1).size == 2
    with pytest.raises(ValueError, match="0 < low < high"):
        log_bin_edges(1.0, 0.5, 4)
    with pytest.raises(ValueError):
        log_bin_edges(0.0, 1.0, 4)


def test_bin_counts_put_every_value_in_one_bin():
    edges = np.array([0.1, 1.0, 10.0])
    values = np.array([0.0, 0.05, 0.1, 0.5, 1.0, 9.99, 10.0, 1e300, np.inf])
    counts = bin_counts(values, edges)
    assert counts.tolist() == [2, 2, 2, 3] and counts.sum() == values.size


def test_brute_force_sensitivity_of_the_histogram():
    """Replacing any one record by any other moves the counts by at most sqrt2 in L2 (attained)."""
    edges = log_bin_edges(1e-3, 1.0, 2)
    candidates = np.concatenate([[0.0, 1e-9, np.inf], edges, edges * 1.01, edges * 0.99])
    base = np.random.default_rng(0).random(20)
    worst = 0.0
    for a, b in itertools.product(candidates, repeat=2):
        first = bin_counts(np.append(base, a), edges)
        second = bin_counts(np.append(base, b), edges)
        worst = max(worst, float(np.linalg.norm(first - second)))
    assert worst == pytest.approx(HISTOGRAM_SENSITIVITY)


def test_upper_quantile_without_noise_is_the_exact_edge():
    edges = log_bin_edges(1e-3, 1.0, 3)
    values = np.concatenate([np.full(970, 2e-3), np.full(20, 0.05), np.full(10, 0.5)])
    counts = bin_counts(values, edges)

    def choose(fraction):
        return upper_quantile_from_counts(
            counts, edges, n_records=1000, tail_fraction=fraction, noise_scale=0.0, fallback=7.0
        )

    # 1% of the records above the edge just above 0.05; 3% just above 2e-3; nothing asks for less than 0
    assert choose(0.01) == pytest.approx(edges[np.searchsorted(edges, 0.05)])
    assert choose(0.03) == pytest.approx(edges[np.searchsorted(edges, 2e-3)])
    assert choose(0.0001) == pytest.approx(edges[np.searchsorted(edges, 0.5)])
    # the noise's slack moves the choice to larger edges (less clipping), never to smaller ones
    for scale in (0.5, 3.0, 10.0):
        cautious = upper_quantile_from_counts(
            counts, edges, n_records=1000, tail_fraction=0.01, noise_scale=scale, fallback=7.0
        )
        assert cautious >= choose(0.01)
    huge = upper_quantile_from_counts(
        counts, edges, n_records=1000, tail_fraction=0.01, noise_scale=1e3, fallback=7.0
    )
    assert huge == 7.0
    # no edge qualifies: the fallback
    everything_high = bin_counts(np.full(100, 5.0), edges)
    none = upper_quantile_from_counts(
        everything_high, edges, n_records=100, tail_fraction=0.01, noise_scale=0.0, fallback=7.0
    )
    assert none == 7.0


def test_private_upper_quantile_release():
    edges = log_bin_edges(1e-3, 1.0, 3)
    counts = bin_counts(np.full(500, 0.01), edges)
    result = private_upper_quantile(counts, edges, n_records=500, tail_fraction=0.05, noise_multiplier=2.0,
                                    source=resolve_noise(insecure_test_noise(1)), fallback=1.0)  # fmt: skip
    assert result.noise_scale == pytest.approx(2.0 * np.sqrt(2.0))
    assert result.noisy_counts.shape == counts.shape and not np.allclose(result.noisy_counts, counts)
    again = upper_quantile_from_counts(
        result.noisy_counts, edges, n_records=500, tail_fraction=0.05, noise_scale=result.noise_scale,
        fallback=1.0,
    )
    assert result.value == again
    assert 0.01 <= result.value <= 0.1
    with pytest.raises(ValueError, match="len\\(edges\\) \\+ 1"):
        private_upper_quantile(counts[:-1], edges, n_records=500, tail_fraction=0.05, noise_multiplier=1.0,
                               source=resolve_noise(insecure_test_noise(1)), fallback=1.0)  # fmt: skip
    with pytest.raises(ValueError, match="tail_fraction"):
        private_upper_quantile(counts, edges, n_records=500, tail_fraction=1.0, noise_multiplier=1.0,
                               source=resolve_noise(insecure_test_noise(1)), fallback=1.0)  # fmt: skip


def _audit(multiplier_factor, runs=3000):
    """epsilon lower bound from noisy histograms of neighbours: one record in bin 1 vs in bin 3."""
    edges = log_bin_edges(1e-3, 1.0, 1)
    base = np.array([2e-3, 2e-2, 0.2, 0.5])
    z = gaussian_sigma_analytic(1.0, 1e-5) * multiplier_factor
    samples = []
    for seed, record in ((0, 0.005), (1, 0.3)):
        source = resolve_noise(insecure_test_noise(seed))
        counts = bin_counts(np.append(base, record), edges)
        statistic = []
        for _ in range(runs):
            noisy = private_upper_quantile(counts, edges, n_records=5, tail_fraction=0.5, noise_multiplier=z,
                                           source=source, fallback=1.0).noisy_counts  # fmt: skip
            statistic.append(noisy[3] - noisy[1])  # moves by 2 = sqrt2 x sqrt2: the bound in this direction
        samples.append(np.array(statistic))
    return epsilon_lower_bound(samples[0], samples[1], 1e-5)


def test_audit_histogram_release_and_catch_an_under_noised_variant():
    assert _audit(1.0) <= 1.0
    assert _audit(0.1) > 1.5
