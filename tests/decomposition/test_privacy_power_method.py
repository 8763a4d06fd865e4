"""Private power method (Algorithm 3) and input perturbation: behaviour, guarantees, bad input."""

from __future__ import annotations

import importlib
import warnings

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.decomposition.input_perturbation import input_perturbation
from dptensor.decomposition.private_power_method import (
    PrivatePowerMethodResult,
    private_power_method,
)
from dptensor.privacy import PrivacyGuarantee, PrivacyWarning, composed_noise_multiplier, insecure_test_noise
from dptensor.tensor import DenseTensor, LowRankTensor, SampleMoment

#: Reproducible noise, for tests that compare two runs.
NOISE = insecure_test_noise(0)


def _orthogonal(
    dim: int, rank: int, scale: float, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    factors = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, rank)))[0]
    weights = scale * np.linspace(1.0, 0.5, rank)
    return LowRankTensor(weights, factors).to_dense(), weights, factors


def test_guarantee_and_shape_of_result():
    tensor, _, _ = _orthogonal(12, 3, 100.0)
    res = private_power_method(tensor, 3, epsilon=1.0, delta=1e-6, n_restarts=4, n_iter=5, random_state=0)
    assert isinstance(res, PrivatePowerMethodResult)
    g = res.guarantee
    assert isinstance(g, PrivacyGuarantee)
    assert (g.epsilon, g.delta, g.neighbouring, g.accountant) == (1.0, 1e-6, "entry", "exact")
    assert g.n_releases == 3 * 4 * (5 + 1)
    assert g.epsilon_exact == pytest.approx(1.0, rel=1e-6)
    assert g.noise_multiplier == pytest.approx(composed_noise_multiplier(1.0, 1e-6, 72, "exact"))
    assert "entry" in g.describe() and g.to_dict()["n_releases"] == 72
    # fixed R steps: no early stopping under privacy
    np.testing.assert_array_equal(res.n_iter, [5, 5, 5])
    assert not res.converged.any()
    assert np.all(np.diff(res.weights) <= 0) and np.all(res.weights >= 0)
    np.testing.assert_allclose(np.linalg.norm(res.factors, axis=0), 1.0)


def test_advanced_accountant_reproduces_paper_noise_and_is_stricter():
    tensor, _, _ = _orthogonal(8, 2, 10.0)
    res = private_power_method(
        tensor, 2, epsilon=0.5, delta=1e-5, n_restarts=3, n_iter=4, accountant="advanced", random_state=1
    )
    big_k = 2 * 3 * 5
    eps_step = 0.5 / np.sqrt(big_k * (4 + np.log(2 / 1e-5)))
    nu = 6 * np.sqrt(2 * np.log(1.25 / (1e-5 / (2 * big_k)))) / eps_step
    assert 6 * res.guarantee.noise_multiplier == pytest.approx(nu)
    assert res.guarantee.epsilon_exact < 0.5


def test_advanced_refuses_where_paper_constants_fail():
    with pytest.raises(ValueError, match="use accountant='exact'"):
        private_power_method(
            np.ones((2, 2, 2)), 1, epsilon=100.0, delta=0.1, n_restarts=1, n_iter=1, accountant="advanced"
        )


def test_test_noise_is_reproducible_and_voids_the_guarantee():
    tensor, _, _ = _orthogonal(10, 2, 50.0)
    kwargs = dict(epsilon=2.0, delta=1e-5, n_restarts=3, n_iter=4)
    with pytest.warns(PrivacyWarning, match="NOT differentially private"):
        a = private_power_method(tensor, 2, random_state=7, noise=insecure_test_noise(1), **kwargs)
        b = private_power_method(tensor, 2, random_state=7, noise=insecure_test_noise(1), **kwargs)
        c = private_power_method(tensor, 2, random_state=7, noise=insecure_test_noise(2), **kwargs)
    np.testing.assert_array_equal(a.factors, b.factors)
    assert not np.array_equal(a.factors, c.factors)
    assert not a.guarantee.holds and a.guarantee.epsilon == np.inf
    assert a.guarantee.nominal_epsilon == 2.0 and "insecure_test_noise" in a.guarantee.reason
    assert a.guarantee.to_dp_event() == dp_accounting.NonPrivateDpEvent()


@pytest.mark.parametrize("func", [private_power_method, input_perturbation])
def test_same_seed_same_public_randomness_fresh_noise(func, monkeypatch):
    """random_state repeats the restarts only; the noise differs between runs with equal seeds."""
    pm = importlib.import_module("dptensor.decomposition.power_method")

    drawn = []
    original = pm.random_unit_vectors

    def recording(dim, count, rng):
        vectors = original(dim, count, rng)
        drawn.append(vectors.copy())
        return vectors

    monkeypatch.setattr(pm, "random_unit_vectors", recording)
    tensor, _, _ = _orthogonal(10, 2, 50.0)
    kwargs = dict(epsilon=2.0, delta=1e-5, n_restarts=3, n_iter=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # secure noise warns about nothing
        a = func(tensor, 2, random_state=7, **kwargs)
        first = list(drawn)
        drawn.clear()
        b = func(tensor, 2, random_state=7, **kwargs)
    assert len(first) == len(drawn) == 2
    for x, y in zip(first, drawn, strict=True):
        np.testing.assert_array_equal(x, y)  # identical public randomness
    assert not np.array_equal(a.factors, b.factors)  # different private outputs
    assert a.guarantee.holds and b.guarantee.holds
    with pytest.raises(ValueError, match="integer seeds are not accepted"):
        func(tensor, 2, noise=7, **kwargs)


def test_recovers_top_component_when_noise_is_small():
    tensor, weights, factors = _orthogonal(30, 3, 1e4, seed=3)
    res = private_power_method(tensor, 3, epsilon=5.0, delta=1e-6, n_restarts=10, n_iter=12, random_state=0)
    assert abs(factors[:, 0] @ res.factors[:, 0]) > 0.99
    assert abs(res.weights[0] - weights[0]) < 0.02 * weights[0]
    inp = input_perturbation(tensor, 3, epsilon=5.0, delta=1e-6, random_state=0)
    assert abs(factors[:, 0] @ inp.factors[:, 0]) > 0.99
    assert inp.guarantee.n_releases == 1


def test_record_relation_inputs_agree_and_never_form_cubes():
    rng = np.random.default_rng(4)
    data = rng.standard_normal((200, 3000)) / 60.0  # d = 3000: a dense d^3 would need 216 GB
    kwargs = dict(epsilon=1.0, delta=1e-6, n_restarts=2, n_iter=3, neighbouring="record", record_bound=1.0)
    a = private_power_method(SampleMoment(data), 1, random_state=0, noise=NOISE, **kwargs)
    b = private_power_method(data, 1, random_state=0, noise=NOISE, **kwargs)
    c = private_power_method(sp.csr_matrix(data), 1, random_state=0, noise=NOISE, **kwargs)
    np.testing.assert_allclose(a.factors, b.factors)
    np.testing.assert_allclose(a.factors, c.factors, atol=1e-10)
    g = a.guarantee
    assert g.neighbouring == "record"
    assert g.details["record_bound"] == 1.0 and g.details["n_records"] == 200
    assert "n_clipped" not in g.details  # data-dependent, not covered by the guarantee


def test_record_relation_clipping():
    rng = np.random.default_rng(5)
    data = rng.standard_normal((100, 6))
    kwargs = dict(epsilon=1.0, delta=1e-6, n_restarts=2, n_iter=2, neighbouring="record", record_bound=1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = private_power_method(SampleMoment(data), 2, random_state=0, noise=NOISE, **kwargs)
    # clipping is silent: the only warning is the one about the test noise
    assert [w.category for w in caught] == [PrivacyWarning]
    assert "n_clipped" not in res.guarantee.details
    # The decomposed moment is that of the clipped records.
    clipped = data / np.maximum(np.linalg.norm(data, axis=1, keepdims=True), 1.0)
    same = private_power_method(clipped, 2, random_state=0, noise=NOISE, **kwargs)
    np.testing.assert_allclose(res.factors, same.factors, atol=1e-12)


def test_relation_misuse_is_refused():
    tensor, _, _ = _orthogonal(6, 2, 10.0)
    data = np.random.default_rng(6).standard_normal((20, 6))
    budget = dict(epsilon=1.0, delta=1e-6)
    with pytest.raises(ValueError, match="neighbouring='record'"):
        private_power_method(SampleMoment(data), 1, neighbouring="entry", **budget)
    with pytest.raises(ValueError, match="neighbouring='record'"):
        private_power_method(data, 1, neighbouring="entry", **budget)
    # without a relation, the records' one relation is taken -- and it needs its bound
    with pytest.raises(ValueError, match="record_bound is required"):
        private_power_method(data, 1, **budget)
    with pytest.raises(ValueError, match="record_bound only applies"):
        private_power_method(tensor, 1, record_bound=1.0, **budget)
    with pytest.raises(ValueError, match="record_bound is required"):
        private_power_method(data, 1, neighbouring="record", **budget)
    with pytest.raises(TypeError, match="needs the records"):
        private_power_method(tensor, 1, neighbouring="record", record_bound=1.0, **budget)
    with pytest.raises(ValueError, match="custom weights"):
        private_power_method(
            SampleMoment(data, weights=np.ones(20)), 1, neighbouring="record", record_bound=5.0, **budget
        )
    with pytest.raises(ValueError, match="neighbouring must be"):
        private_power_method(tensor, 1, neighbouring="row", **budget)


@pytest.mark.parametrize("func", [private_power_method, input_perturbation])
def test_bad_budget_and_data(func):
    tensor, _, _ = _orthogonal(5, 1, 10.0)
    for eps in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="epsilon"):
            func(tensor, 1, epsilon=eps, delta=1e-5)
    for delta in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="delta"):
            func(tensor, 1, epsilon=1.0, delta=delta)
    bad = tensor.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        func(bad, 1, epsilon=1.0, delta=1e-5)
    data = np.ones((4, 5))
    data[1, 2] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        func(data, 1, epsilon=1.0, delta=1e-5, neighbouring="record", record_bound=1.0)
    with pytest.raises(ValueError, match="rank"):
        func(tensor, 6, epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="accountant"):
        func(tensor, 1, epsilon=1.0, delta=1e-5, accountant="rdp")


def test_input_perturbation_guarantee():
    """One analytic-Gaussian release; the classic calibration refuses epsilon >= 1."""
    dim = 4
    zero = DenseTensor(np.zeros((dim, dim, dim)))
    res = input_perturbation(zero, 1, epsilon=1.0, delta=1e-5, random_state=0)
    assert res.guarantee.noise_multiplier == pytest.approx(3.7306, abs=1e-3)
    assert res.guarantee.accountant == "exact" and res.guarantee.n_releases == 1
    rec = input_perturbation(
        np.eye(dim), 1, epsilon=1.0, delta=1e-5, neighbouring="record", record_bound=1.0, random_state=0
    )
    assert rec.guarantee.details["n_records"] == dim
    with pytest.raises(ValueError, match="epsilon < 1"):
        input_perturbation(zero, 1, epsilon=2.0, delta=1e-5, accountant="classic")
