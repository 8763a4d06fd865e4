"""Private power method (Algorithm 3) and input perturbation: behaviour, guarantees, bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.decomposition.input_perturbation import input_perturbation
from dptensor.decomposition.private_power_method import (
    PrivatePowerMethodResult,
    private_power_method,
)
from dptensor.privacy import PrivacyGuarantee, composed_noise_multiplier
from dptensor.tensor import DenseTensor, LowRankTensor, SampleMoment


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


def test_reproducible_and_seed_dependent():
    tensor, _, _ = _orthogonal(10, 2, 50.0)
    kwargs = dict(epsilon=2.0, delta=1e-5, n_restarts=3, n_iter=4)
    a = private_power_method(tensor, 2, random_state=7, **kwargs)
    b = private_power_method(tensor, 2, random_state=7, **kwargs)
    c = private_power_method(tensor, 2, random_state=8, **kwargs)
    np.testing.assert_array_equal(a.factors, b.factors)
    assert not np.array_equal(a.factors, c.factors)


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
    a = private_power_method(SampleMoment(data), 1, random_state=0, **kwargs)
    b = private_power_method(data, 1, random_state=0, **kwargs)
    c = private_power_method(sp.csr_matrix(data), 1, random_state=0, **kwargs)
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
    with pytest.warns(UserWarning, match="clipped") as caught:
        res = private_power_method(SampleMoment(data), 2, random_state=0, **kwargs)
    # The warning and the guarantee say nothing data-dependent (how many, how large).
    n_over = int(np.sum(np.linalg.norm(data, axis=1) > 1.0))
    assert str(n_over) not in str(caught[0].message) and "n_clipped" not in res.guarantee.details
    # The decomposed moment is that of the clipped records.
    clipped = data / np.maximum(np.linalg.norm(data, axis=1, keepdims=True), 1.0)
    same = private_power_method(clipped, 2, random_state=0, **kwargs)
    np.testing.assert_allclose(res.factors, same.factors, atol=1e-12)
    with pytest.raises(ValueError, match="above record_bound"):
        private_power_method(data, 2, clip_records=False, **kwargs)
    with pytest.raises(ValueError, match="above record_bound"):
        input_perturbation(data, 2, clip_records=False, **{k: v for k, v in kwargs.items() if k != "n_iter"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        private_power_method(data / 10.0, 2, random_state=0, **kwargs)


def test_relation_misuse_is_refused():
    tensor, _, _ = _orthogonal(6, 2, 10.0)
    data = np.random.default_rng(6).standard_normal((20, 6))
    budget = dict(epsilon=1.0, delta=1e-6)
    with pytest.raises(ValueError, match="neighbouring='record'"):
        private_power_method(SampleMoment(data), 1, **budget)
    with pytest.raises(ValueError, match="neighbouring='record'"):
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
