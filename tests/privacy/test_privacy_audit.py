"""Empirical privacy audit: distinguish two neighbouring inputs by a threshold test.

For a mechanism M and neighbours T, T', every threshold test S > c on the output satisfies
``P[S(M(T')) > c] <= e^epsilon P[S(M(T)) > c] + delta``. We run M many times on both inputs,
choose the most revealing threshold on one half of the runs and, on the other half, compute a
Clopper--Pearson lower confidence bound on
``epsilon_hat = ln((P'[S > c] - delta) / P[S > c])``. A correctly calibrated mechanism must give a
bound at most its claimed epsilon; the *same* test applied to a deliberately under-noised
variant (calibrated for a much larger epsilon but claiming the same one) must exceed it, which
shows the test has power.

The inputs are one-dimensional (``d = 1``) so that the released value is a sufficient-looking
statistic: the reported rank-one term ``weights[0] * factors[0, 0]**3`` equals the last noisy
eigenvalue release, ``N(T, (z Delta)^2)``. DP-SGD is audited on a one-entry tensor whose value
is pushed to either extreme, so that the clipped gradients point in opposite directions.

The noise of each audit comes from one seeded (and therefore insecure) ``NoiseSource`` so that
the test is deterministic; its law is the production law.
"""

from __future__ import annotations

import numpy as np
import pytest

from dptensor.decomposition.input_perturbation import input_perturbation
from dptensor.decomposition.private_power_method import private_power_method
from dptensor.models.completion import CompletionOptions
from dptensor.models.completion.estimator import TensorCompletion
from dptensor.privacy import NoiseSource
from dptensor.privacy.audit import epsilon_lower_bound
from dptensor.tensor import SampleMoment

N_RUNS = 2500  # runs per input per half
#: Runs per input per half: a fast default audit (the 20x under-noised variant is far off) and the
#: full-power one, ``slow``.
RUNS = [1000, pytest.param(N_RUNS, marks=pytest.mark.slow)]


def _statistic(result) -> float:
    return float(result.weights[0] * result.factors[0, 0] ** 3)


def _samples(run, inputs, seed: int, statistic=_statistic, n_runs=N_RUNS) -> tuple[np.ndarray, np.ndarray]:
    noise = NoiseSource("numpy", np.random.default_rng(seed), secure=False)
    return tuple(np.array([statistic(run(x, noise)) for _ in range(2 * n_runs)]) for x in inputs)


EPSILON, DELTA = 2.0, 1e-5
UNDER_NOISED_EPSILON = 40.0  # calibrated for 20x the budget it claims


def _ppm_entry(epsilon: float):
    def run(tensor, noise):
        return private_power_method(
            tensor, 1, epsilon=epsilon, delta=DELTA, n_restarts=1, n_iter=1, random_state=0, noise=noise
        )

    return run


# Definition 4.2 in d = 1: T' - T = symmetrize(e_1 (x) e_1 (x) e_1) = 6.
ENTRY_PAIR = (np.zeros((1, 1, 1)), np.full((1, 1, 1), 6.0))


@pytest.mark.parametrize("n_runs", RUNS)
def test_audit_private_power_method_entry_relation(n_runs):
    honest = epsilon_lower_bound(*_samples(_ppm_entry(EPSILON), ENTRY_PAIR, 0, n_runs=n_runs), DELTA)
    under = epsilon_lower_bound(
        *_samples(_ppm_entry(UNDER_NOISED_EPSILON), ENTRY_PAIR, 1, n_runs=n_runs), DELTA
    )
    assert honest <= EPSILON
    assert under > 1.5 * EPSILON  # the same test catches the under-noised variant


def _input_entry(epsilon: float):
    def run(tensor, noise):
        return input_perturbation(tensor, 1, epsilon=epsilon, delta=DELTA, random_state=0, noise=noise)

    return run


@pytest.mark.parametrize("n_runs", RUNS)
def test_audit_input_perturbation_entry_relation(n_runs):
    honest = epsilon_lower_bound(*_samples(_input_entry(EPSILON), ENTRY_PAIR, 2, n_runs=n_runs), DELTA)
    under = epsilon_lower_bound(
        *_samples(_input_entry(UNDER_NOISED_EPSILON), ENTRY_PAIR, 3, n_runs=n_runs), DELTA
    )
    assert honest <= EPSILON
    assert under > 1.5 * EPSILON


@pytest.mark.parametrize("n_runs", RUNS)
def test_audit_private_power_method_record_relation(n_runs):
    """Replace the record -B by +B among n: the moment moves by the full 2 B^3 / n."""
    n, bound = 10, 1.5
    base = np.linspace(-1.0, 1.0, n)[:, None]
    lo, hi = base.copy(), base.copy()
    lo[0, 0], hi[0, 0] = -bound, bound
    pair = (SampleMoment(lo), SampleMoment(hi))

    def make(epsilon: float):
        def run(moment, noise):
            return private_power_method(
                moment, 1, epsilon=epsilon, delta=DELTA, n_restarts=1, n_iter=1,
                neighbouring="record", record_bound=bound, random_state=0, noise=noise,
            )

        return run

    honest = epsilon_lower_bound(*_samples(make(EPSILON), pair, 4, n_runs=n_runs), DELTA)
    under = epsilon_lower_bound(*_samples(make(UNDER_NOISED_EPSILON), pair, 5, n_runs=n_runs), DELTA)
    assert honest <= EPSILON
    assert under > 1.5 * EPSILON


@pytest.mark.parametrize("n_runs", RUNS)
def test_audit_dpsgd_entry_value_relation(n_runs):
    """One observed entry at either extreme: its clipped gradients are opposite, 2 * clip apart.

    With one entry, one epoch and a step that never hits the curvature cap, every factor moves by
    ``-eta (g + sigma n)``; projected on the unit gradient direction ``w`` (public: it depends on
    the public initialisation only), the release is ``N(+-clip, sigma^2)`` with
    ``sigma = z 2 clip`` -- the Gaussian mechanism with multiplier ``z``.
    """
    clip, eta = 1.0, 1e-6
    # a very low value pulls every factor up: its statistic is the larger one (second)
    values = (np.array([1e6]), np.array([-1e6]))
    index = np.zeros((1, 3), dtype=int)
    public = np.random.default_rng(0)  # the estimator's initialisation with random_state=0
    init = [0.5 * np.abs(public.standard_normal((1, 1))) for _ in range(3)]
    a, b, c = (float(f[0, 0]) for f in init)
    direction = np.array([b * c, a * c, a * b]) / np.linalg.norm([b * c, a * c, a * b])

    def make(epsilon: float):
        def run(vals, noise):
            return TensorCompletion(1, privacy="gradient_dpsgd", neighbouring="entry-value", epsilon=epsilon,
                                    delta=DELTA, offsets="none", random_state=0, noise=noise,
                                    options=CompletionOptions(clip=clip, learning_rate=eta, reg=0.0,
                                                              n_epochs=1, batch_size=1),
                                    ).fit(index, vals, (1, 1, 1))

        return run

    def statistic(model) -> float:
        moved = np.array([init[m][0, 0] - model.factors_[m][0, 0] for m in range(3)]) / eta
        return float(moved @ direction)

    honest = epsilon_lower_bound(*_samples(make(EPSILON), values, 6, statistic, n_runs=n_runs), DELTA)
    under = epsilon_lower_bound(
        *_samples(make(UNDER_NOISED_EPSILON), values, 7, statistic, n_runs=n_runs), DELTA
    )
    assert honest <= EPSILON
    assert under > 1.5 * EPSILON
