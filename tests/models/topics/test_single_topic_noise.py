"""The vocabulary-scale noise: whitened laws of AGN/AVN noise and the keyed blocked Analyze-Gauss matrix.

Each fast sampler must have exactly the law of the dense mechanism it replaces: checked exactly
(covariances against brute force) and in distribution (moments and Kolmogorov-Smirnov tests on
many draws of both samplers at small d). Seeds are fixed; sample sizes make luck irrelevant.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dptensor.privacy import (
    SymmetricGaussianOperator,
    WhitenedNoiseLaw,
    exponential_norm_noise,
    insecure_test_noise,
    symmetric_from_unique,
    symmetric_gaussian_matrix,
    symmetric_gaussian_tensor,
    unique_entries,
    unique_indices,
    whitened_noise_gram,
)

ALPHA = 1e-4
pytestmark = pytest.mark.filterwarnings("ignore::dptensor.privacy.PrivacyWarning")


def _whitening(d: int, k: int, seed: int, spread: float = 1e3) -> np.ndarray:
    """A whitening-like W = U S^{-1/2}, badly conditioned on purpose."""
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((d, k)))[0]
    return U / np.sqrt(np.geomspace(1.0, 1.0 / spread, k))


def _push(tensors: np.ndarray, W: np.ndarray) -> np.ndarray:
    return np.einsum("...ijl,ia,jb,lc->...abc", tensors, W, W, W, optimize=True)


def _brute_gram(W: np.ndarray) -> np.ndarray:
    """Phi Phi^T with Phi's columns E_o(W, W, W) for every orbit indicator E_o."""
    d, k = W.shape
    basis = np.eye(unique_indices(d, 3).shape[0])
    columns = unique_entries(_push(symmetric_from_unique(basis, d, 3), W), 3)
    return columns.T @ columns


@pytest.mark.parametrize(("d", "k"), [(3, 3), (6, 2), (8, 4)])
def test_gram_and_law_covariance_match_brute_force(d, k):
    W = _whitening(d, k, seed=d + k)
    brute = _brute_gram(W)
    scale = np.abs(brute).max()
    assert np.abs(whitened_noise_gram(W) - brute).max() < 1e-10 * scale
    law = WhitenedNoiseLaw.from_whitening(W)
    assert np.abs(law.covariance() - brute).max() < 1e-10 * scale
    assert law.n_unique_input == d * (d + 1) * (d + 2) // 6


def _projections(samples: np.ndarray, seed: int) -> np.ndarray:
    """A few fixed linear statistics of the unique entries (and the squared norm)."""
    unique = unique_entries(samples, 3)
    directions = np.random.default_rng(seed).standard_normal((unique.shape[1], 3))
    return np.column_stack([unique @ directions, unique[:, 0], np.sum(unique**2, axis=1)])


def _assert_same_law(dense: np.ndarray, fast: np.ndarray, covariance: np.ndarray, seed: int) -> None:
    """Both samples have the exact covariance, and their projections the same distribution (KS)."""
    for sample in (dense, fast):
        empirical = np.cov(unique_entries(sample, 3).T)
        assert np.abs(empirical - covariance).max() < 0.08 * np.abs(covariance).max()
    a, b = _projections(dense, seed), _projections(fast, seed)
    for column in range(a.shape[1]):
        assert stats.ks_2samp(a[:, column], b[:, column]).pvalue > ALPHA


def test_agn_fast_and_dense_samplers_agree_in_distribution():
    d, k, tau, reps = 6, 3, 0.7, 6000
    W = _whitening(d, k, seed=0, spread=30.0)
    law = WhitenedNoiseLaw.from_whitening(W)
    draws = symmetric_gaussian_tensor(d, tau, convention="unique", size=reps, noise=insecure_test_noise(1))
    dense = _push(draws, W)
    fast = law.gaussian(tau, size=reps, noise=insecure_test_noise(2))
    assert fast.shape == (reps, k, k, k)
    for perm in ((0, 2, 1, 3), (0, 3, 2, 1)):
        np.testing.assert_allclose(fast, fast.transpose(perm), atol=1e-12)
    _assert_same_law(dense, fast, tau**2 * law.covariance(), seed=5)


def test_avn_fast_and_dense_samplers_agree_in_distribution():
    d, k, sens, eps, reps = 5, 3, 0.3, 2.0, 6000
    W = _whitening(d, k, seed=1, spread=30.0)
    law = WhitenedNoiseLaw.from_whitening(W)
    n_unique = law.n_unique_input
    b = exponential_norm_noise(n_unique, sens, eps, size=reps, noise=insecure_test_noise(3))
    dense = _push(symmetric_from_unique(b, d, 3), W)
    fast = law.exponential_norm(sens, eps, size=reps, noise=insecure_test_noise(4))
    # E[b b^T] = E[r^2] I / D_sym = (D_sym + 1) (sens/eps)^2 I, so Cov(Phi b) = (D_sym + 1) (sens/eps)^2 M.
    _assert_same_law(dense, fast, (n_unique + 1) * (sens / eps) ** 2 * law.covariance(), seed=6)


def test_avn_noise_radius_is_gamma_and_direction_uniform():
    """AVN's M3 noise on the D_sym unique entries: ||b|| ~ Gamma(D_sym, Delta/eps), b/||b|| uniform.

    Checked for the dense draw the estimator scatters to the orbits, and for the fast whitened
    sampler where Phi is invertible (k = d), by mapping its samples back to b = Phi^{-1} X.
    """
    d, sens, eps, reps = 3, np.sqrt(2) / 50, 0.5, 8000
    n_unique = d * (d + 1) * (d + 2) // 6
    law = WhitenedNoiseLaw.from_whitening(_whitening(d, d, seed=2, spread=10.0))
    basis = np.eye(n_unique)
    phi = unique_entries(_push(symmetric_from_unique(basis, d, 3), law.whitening), 3).T  # Phi, K_sym x D_sym
    fast = unique_entries(law.exponential_norm(sens, eps, size=reps, noise=insecure_test_noise(8)), 3)
    samples = {
        "dense": exponential_norm_noise(n_unique, sens, eps, size=reps, noise=insecure_test_noise(7)),
        "fast": np.linalg.solve(phi, fast.T).T,
    }
    for b in samples.values():
        radius = np.linalg.norm(b, axis=1)
        assert stats.kstest(radius, stats.gamma(a=n_unique, scale=sens / eps).cdf).pvalue > ALPHA
        theta = b / radius[:, None]
        # a coordinate of a uniform point on S^{n-1} has theta_1^2 ~ Beta(1/2, (n-1)/2)
        for axis in (0, 4, n_unique - 1):
            assert stats.kstest(theta[:, axis] ** 2, stats.beta(0.5, (n_unique - 1) / 2).cdf).pvalue > ALPHA
        assert np.abs(theta.mean(axis=0)).max() < 5 / np.sqrt(reps * n_unique)
        assert abs(stats.spearmanr(radius, theta[:, 0]).statistic) < 0.05


def test_fast_sampler_is_reproducible_only_with_test_noise():
    law = WhitenedNoiseLaw.from_whitening(_whitening(5, 2, seed=3))
    one = law.gaussian(1.0, noise=insecure_test_noise(0))
    np.testing.assert_array_equal(one, law.gaussian(1.0, noise=insecure_test_noise(0)))
    assert not np.array_equal(law.gaussian(1.0), law.gaussian(1.0))
    with pytest.raises(ValueError, match="at least as many rows"):
        WhitenedNoiseLaw.from_whitening(np.ones((2, 3)))
    with pytest.raises(ValueError, match="rank below"):
        WhitenedNoiseLaw.from_whitening(np.ones((4, 2)))


def test_blocked_operator_is_one_symmetric_matrix_with_the_unique_law():
    d, scale = 700, 1.7
    E = SymmetricGaussianOperator(d, scale, noise=insecure_test_noise(0), block_size=64)
    dense = E.to_dense()
    np.testing.assert_array_equal(dense, dense.T)
    V = np.random.default_rng(0).standard_normal((d, 5))
    np.testing.assert_allclose(E.matmat(V), dense @ V, atol=1e-10)
    np.testing.assert_array_equal(E.matmat(V), E.matmat(V))  # regenerated from the key, identically
    np.testing.assert_allclose(E.as_linear_operator() @ V[:, 0], dense @ V[:, 0], atol=1e-10)
    upper = dense[np.triu_indices(d, 1)] / scale
    assert stats.kstest(upper, "norm").pvalue > ALPHA
    assert stats.kstest(np.diag(dense) / scale, "norm").pvalue > ALPHA
    # independent entries across panels and inside them: neighbouring rows and columns uncorrelated
    for shift in (1, 63, 64, 65):
        assert abs(np.corrcoef(dense[:-shift, :].ravel(), dense[shift:, :].ravel())[0, 1]) < 0.01
    # same law as the dense Analyze-Gauss sampler (unique convention)
    reference = symmetric_gaussian_matrix(d, scale, noise=insecure_test_noise(1))
    assert stats.ks_2samp(upper, reference[np.triu_indices(d, 1)] / scale).pvalue > ALPHA
    # secure keys differ between operators; test noise repeats
    fresh = [SymmetricGaussianOperator(50, 1.0).to_dense() for _ in range(2)]
    assert not np.array_equal(*fresh)
    np.testing.assert_array_equal(
        SymmetricGaussianOperator(50, 1.0, noise=insecure_test_noise(4)).to_dense(),
        SymmetricGaussianOperator(50, 1.0, noise=insecure_test_noise(4)).to_dense(),
    )
    with pytest.raises(ValueError, match="vectors must have shape"):
        E.matmat(np.ones((3, 2)))
