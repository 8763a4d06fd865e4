"""Sampler statistics (fixed seeds, sample sizes large enough that luck does not decide)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dptensor.privacy import (
    exponential_norm_noise,
    gaussian_noise,
    insecure_test_noise,
    laplace_noise,
    orbit_sizes,
    symmetric_gaussian_matrix,
    symmetric_gaussian_tensor,
)

ALPHA = 1e-4  # per-test significance; seeds are fixed so results are deterministic anyway


def test_gaussian_and_laplace_laws():
    g = gaussian_noise((200, 100), 2.5, noise=insecure_test_noise(0))
    assert g.shape == (200, 100)
    assert stats.kstest(g.ravel(), stats.norm(scale=2.5).cdf).pvalue > ALPHA
    lap = laplace_noise(20000, 0.7, noise=insecure_test_noise(1))
    assert stats.kstest(lap, stats.laplace(scale=0.7).cdf).pvalue > ALPHA
    again = gaussian_noise(5, 1.0, noise=insecure_test_noise(3))
    np.testing.assert_array_equal(gaussian_noise(5, 1.0, noise=insecure_test_noise(3)), again)


@pytest.mark.parametrize("dim", [1, 3, 20])
def test_exponential_norm_radius_is_gamma(dim):
    sens, eps = 2.0, 0.5
    b = exponential_norm_noise(dim, sens, eps, size=20000, noise=insecure_test_noise(dim))
    assert b.shape == (20000, dim)
    radius = np.linalg.norm(b, axis=1)
    assert stats.kstest(radius, stats.gamma(a=dim, scale=sens / eps).cdf).pvalue > ALPHA


def test_exponential_norm_direction_is_uniform():
    b = exponential_norm_noise(3, 1.0, 1.0, size=(100, 200), noise=insecure_test_noise(7)).reshape(-1, 3)
    theta = b / np.linalg.norm(b, axis=1, keepdims=True)
    # Archimedes: each coordinate of a uniform point on S^2 is Uniform(-1, 1)
    for axis in range(3):
        assert stats.kstest(theta[:, axis], stats.uniform(-1, 2).cdf).pvalue > ALPHA
    # chi-square on the 8 octants
    octant = (theta > 0) @ np.array([1, 2, 4])
    counts = np.bincount(octant, minlength=8)
    assert stats.chisquare(counts).pvalue > ALPHA
    # and the radius is independent of the direction
    radius = np.linalg.norm(b, axis=1)
    assert abs(stats.spearmanr(radius, theta[:, 0]).statistic) < 0.03


def test_exponential_norm_density_ratio_in_1d():
    """In one dimension the mechanism is Laplace(Delta/epsilon)."""
    b = exponential_norm_noise(1, 3.0, 1.5, size=20000, noise=insecure_test_noise(11))[:, 0]
    assert stats.kstest(b, stats.laplace(scale=2.0).cdf).pvalue > ALPHA


@pytest.mark.parametrize(
    ("convention", "std_by_orbit"),
    [("unique", {1: 1.0, 3: 1.0, 6: 1.0}), ("frobenius", {1: 1.0, 3: 3**-0.5, 6: 6**-0.5}),
     ("entry", {1: 6.0, 3: 2.0, 6: 1.0})],
)
def test_symmetric_tensor_law(convention, std_by_orbit):
    dim, scale, reps = 6, 1.5, 400
    noise = symmetric_gaussian_tensor(
        dim, scale, convention=convention, size=reps, noise=insecure_test_noise(5)
    )
    assert noise.shape == (reps, dim, dim, dim)
    for axes in ((0, 2, 1, 3), (0, 1, 3, 2), (0, 3, 2, 1)):
        np.testing.assert_array_equal(noise, noise.transpose(axes))
    orbits = orbit_sizes(dim)
    i, j, k = np.indices((dim,) * 3)
    unique = (i <= j) & (j <= k)
    for size, std in std_by_orbit.items():
        values = noise[:, unique & (orbits == size)].ravel() / (scale * std)
        # sum of squares of n standard normals is chi-square(n)
        stat = float(np.sum(values**2))
        p = stats.chi2(values.size).cdf(stat)
        assert ALPHA < p < 1 - ALPHA, (size, p)
    # distinct orbits are independent: correlation of two different unique entries ~ 0
    a, b = noise[:, 0, 1, 2], noise[:, 1, 1, 3]
    assert abs(np.corrcoef(a, b)[0, 1]) < 4 / np.sqrt(reps)


def test_symmetric_matrix_law():
    m = symmetric_gaussian_matrix(5, 2.0, size=2000, noise=insecure_test_noise(9))
    np.testing.assert_array_equal(m, m.transpose(0, 2, 1))
    diag = m[:, np.arange(5), np.arange(5)].ravel()
    off = m[:, 0, 1]
    assert stats.kstest(diag, stats.norm(scale=2.0).cdf).pvalue > ALPHA
    assert stats.kstest(off, stats.norm(scale=2.0).cdf).pvalue > ALPHA
    f = symmetric_gaussian_matrix(5, 2.0, convention="frobenius", size=2000, noise=insecure_test_noise(9))
    assert stats.kstest(f[:, 0, 1], stats.norm(scale=2.0 / np.sqrt(2)).cdf).pvalue > ALPHA


def test_bad_sampler_input():
    with pytest.raises(ValueError, match="sigma"):
        gaussian_noise(3, -1.0)
    with pytest.raises(ValueError, match="epsilon"):
        exponential_norm_noise(3, 1.0, 0.0)
    with pytest.raises(ValueError, match="convention"):
        symmetric_gaussian_matrix(3, convention="entry")
    with pytest.raises(ValueError, match="noise must be"):
        gaussian_noise(3, 1.0, noise="seed")
    with pytest.raises(ValueError, match="integer seeds are not accepted"):
        gaussian_noise(3, 1.0, noise=3)
