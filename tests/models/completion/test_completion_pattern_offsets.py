"""The entry-value offsets of DP-ALS: one pattern-weighted Laplace release and its posterior.

Brute-force l1 sensitivity of the release, the budget split of each entry, the posterior against
its dense formula, recovery of exact additive offsets without noise, determinism of the public
pattern features, and an empirical audit of the released biases.
"""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import random_ratings as _ratings

from dptensor.models import TensorCompletion
from dptensor.models.completion import _pattern_offsets as po
from dptensor.privacy import NoiseSource
from dptensor.privacy.audit import epsilon_lower_bound

LOW, HIGH = 1.0, 5.0
WIDTH = HIGH - LOW
CENTRE = 0.5 * (LOW + HIGH)


class NoNoise:
    """A noise source that adds nothing (the release's statistic itself)."""

    secure = True

    def add_laplace(self, values, scale):
        return np.array(values, dtype=float)


def _statistic(design, values):
    return po.laplace_release(design, values - CENTRE, 1.0, NoNoise())


@pytest.mark.parametrize("biases", [True, False])
def test_release_l1_sensitivity_is_one_brute_force(biases):
    """Every value moved to each end of the range moves the statistic by at most 1 in l1; attained."""
    indices, values, shape = _ratings()
    design = po.pattern_design(indices, shape, WIDTH, biases)
    base = _statistic(design, values)
    worst = 0.0
    for e in range(len(values)):
        for extreme in (LOW, HIGH):
            other = values.copy()
            other[e] = extreme
            worst = max(worst, float(np.abs(_statistic(design, other) - base).sum()))
    assert worst <= 1.0 + 1e-12
    low = _statistic(design, np.full(len(values), LOW))
    for e in range(len(values)):
        moved = _statistic(design, np.where(np.arange(len(values)) == e, HIGH, LOW))
        assert np.abs(moved - low).sum() == pytest.approx(1.0, rel=1e-12)  # every entry attains it


def test_each_entry_splits_its_budget_by_inverse_row_counts():
    indices, _, shape = _ratings(seed=3)
    weights = po.release_weights(indices, shape, WIDTH, (0, 1, 2))
    np.testing.assert_allclose(weights.sum(axis=1) * WIDTH, 1.0, rtol=1e-12)
    counts = [np.bincount(indices[:, m], minlength=shape[m])[indices[:, m]] for m in range(3)]
    np.testing.assert_allclose(weights[:, 0] * counts[0], weights[:, 1] * counts[1], rtol=1e-12)
    np.testing.assert_allclose(weights[:, 1] * counts[1], weights[:, 2] * counts[2], rtol=1e-12)


def test_pattern_features_are_deterministic_standardised_and_ignore_values():
    indices, _, shape = _ratings(shape=(30, 20, 8), density=0.3, seed=4)
    first = po.pattern_features(indices, shape)
    second = po.pattern_features(indices.copy(), shape)
    for a, b, m in zip(first, second, range(3), strict=True):
        np.testing.assert_array_equal(a, b)
        at_entries = a[indices[:, m]]
        np.testing.assert_allclose(at_entries.mean(axis=0), 0.0, atol=1e-10)
        np.testing.assert_allclose(at_entries.std(axis=0), 1.0, rtol=1e-10)
        assert a.shape[0] == shape[m] and a.shape[1] >= 3  # counts, co-occurrence, embeddings


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_posterior_equals_its_dense_formula(solver, monkeypatch):
    if solver == "cg":
        monkeypatch.setattr(po, "DENSE_POSTERIOR_LIMIT", 0)
    indices, values, shape = _ratings(shape=(7, 6, 3), density=0.7, seed=5)
    design = po.pattern_design(indices, shape, WIDTH, True)
    rng = np.random.default_rng(0)
    released = _statistic(design, values) + rng.laplace(0, 0.5, design.release.shape[1])
    explained = rng.normal(0, 0.3, len(values))
    eps, residual_var, bias_var, mean_var = 2.0, 0.8, 0.3, 16.0
    mean, biases = po.posterior_offsets(
        design, released, explained, epsilon=eps, residual_var=residual_var, bias_var=bias_var,
        mean_var=mean_var,
    )
    R = design.release.toarray()
    D = np.hstack([design.bias_design.toarray(), design.features])
    M = R.T @ D
    V = np.full(D.shape[1], bias_var)
    n_bias = design.bias_design.shape[1]
    V[n_bias] = mean_var
    S = M @ np.diag(V) @ M.T + residual_var * R.T @ R + 2.0 / eps**2 * np.eye(R.shape[1])
    theta = V * (M.T @ np.linalg.solve(S, released - R.T @ explained))
    assert mean == pytest.approx(theta[n_bias], abs=1e-7)
    fitted = D @ theta  # the model at the entries: biases with the folded feature term
    ours = mean + sum(b[indices[:, m]] for m, b in enumerate(biases))
    np.testing.assert_allclose(ours, fitted, atol=1e-7)


def test_recovers_exact_additive_offsets_without_noise():
    rng = np.random.default_rng(6)
    shape = (12, 10, 4)
    indices = np.argwhere(rng.random(shape) < 0.7)
    truth = [rng.normal(0, 0.5, s) for s in shape]
    values = 3.2 + sum(truth[m][indices[:, m]] for m in range(3))
    design = po.pattern_design(indices, shape, 10.0, True)
    released = po.laplace_release(design, values - CENTRE, 1.0, NoNoise())
    mean, biases = po.posterior_offsets(
        design, released, np.zeros(len(values)), epsilon=1e9, residual_var=1e-8, bias_var=1.0, mean_var=100.0
    )
    fitted = CENTRE + mean + sum(b[indices[:, m]] for m, b in enumerate(biases))
    np.testing.assert_allclose(fitted, values, atol=1e-3)


def test_pattern_prior_improves_on_a_zero_prior_when_counts_predict_the_biases():
    """Items' biases that grow with their popularity: the features carry them to sparse rows."""
    rng = np.random.default_rng(7)
    shape = (200, 120, 2)
    popularity = rng.pareto(1.5, shape[1]) + 0.05
    probs = np.minimum(1.0, 0.4 * popularity / popularity.mean()) * 0.3
    indices = np.argwhere(rng.random(shape) < probs[None, :, None])
    item_bias = 0.5 * (np.log1p(np.bincount(indices[:, 1], minlength=shape[1])) - 2.0)
    values = np.clip(np.round(3.5 + item_bias[indices[:, 1]] + rng.normal(0, 0.8, len(indices))), 1, 5)
    design = po.pattern_design(indices, shape, WIDTH, True)
    plain = po.PatternDesign(design.release, design.bias_design, design.features[:, :1], design.bias_sizes,
                             [f[:, :0] for f in design.row_features])
    errors = {}
    for name, d in (("pattern", design), ("plain", plain)):
        err = []
        for seed in range(5):
            source = NoiseSource("numpy", np.random.default_rng(seed), secure=False)
            released = po.laplace_release(d, values - CENTRE, 0.5, source)
            mean, biases = po.posterior_offsets(d, released, np.zeros(len(values)), epsilon=0.5,
                                                residual_var=1.0, bias_var=0.2, mean_var=16.0)
            err.append(np.sqrt(np.mean((CENTRE + mean + biases[1] - 3.5 - item_bias) ** 2)))
        errors[name] = np.mean(err)
    assert errors["pattern"] < 0.8 * errors["plain"]


def test_private_fit_without_factors_is_pure_laplace():
    indices, values, shape = _ratings(seed=8)
    fit = TensorCompletion(None, privacy="als", neighbouring="entry-value", epsilon=0.7,
                           value_range=(LOW, HIGH)).fit(indices, values, shape)
    g = fit.guarantee_
    assert g.holds and g.mechanism == "laplace" and g.delta == 0.0 and g.epsilon_exact == pytest.approx(0.7)
    assert g.details["releases"] == ["offsets"] and fit.noise_stds_ == [pytest.approx(1 / 0.7)]
    assert np.all(np.isfinite(fit.predict(indices)))


# ------------------------------------------------------------------ empirical audit

EPSILON = 2.0
N_RUNS = 1500


@pytest.mark.slow  # a statistical check of 6000 releases (12 s): with the slow checks, once per CI run
def test_audit_pattern_offsets():
    """The changed entry's fitted offsets (mean + its user's and item's biases) on a neighbouring pair."""
    indices, values, shape = _ratings(shape=(4, 3, 2), density=1.0, seed=9)
    lo, hi = values.copy(), values.copy()
    lo[0], hi[0] = LOW, HIGH  # entry 0 is (0, 0, 0)
    design = po.pattern_design(indices, shape, WIDTH, True)  # public: the same for both inputs
    outputs = {}
    for name, eps, seed in (("honest", EPSILON, 0), ("under", 20 * EPSILON, 1)):
        source = NoiseSource("numpy", np.random.default_rng(seed), secure=False)

        def run(x, eps=eps, source=source):
            released = po.laplace_release(design, x - CENTRE, eps, source)
            mean, biases = po.posterior_offsets(design, released, np.zeros(len(x)), epsilon=eps,
                                                residual_var=1.0, bias_var=0.2, mean_var=16.0)
            return mean + biases[0][0] + biases[1][0]

        outputs[name] = [np.array([run(x) for _ in range(2 * N_RUNS)]) for x in (lo, hi)]
    assert epsilon_lower_bound(*outputs["honest"], 1e-5) <= EPSILON
    assert epsilon_lower_bound(*outputs["under"], 1e-5) > 1.5 * EPSILON
