"""Robust tensor power method (Wang & Anandkumar 2016, Algorithm 1) against ground truth."""

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor import power_method
from dptensor.datasets import make_orthogonal_tensor
from dptensor.decomposition import default_n_iter, default_n_restarts
from dptensor.metrics import match_components
from dptensor.tensor import DenseTensor, SampleMoment, SymmetricTensor


@pytest.mark.parametrize("components", ["canonical", "random"])
@pytest.mark.parametrize("dim, rank", [(10, 1), (20, 4), (40, 8), (12, 12)])
def test_exact_recovery_of_noiseless_orthogonal_tensors(dim, rank, components):
    weights = np.linspace(2.0, 0.3, rank)
    tensor, w, V, _ = make_orthogonal_tensor(
        dim, rank, weights=weights, components=components, random_state=dim + rank
    )
    result = power_method(tensor, rank, random_state=1)
    match = match_components(V, result.factors, w, result.weights)
    assert np.all(match.inner > 1 - 1e-8)
    assert np.all(match.weight_error <= 1e-8 * w[match.true_index])
    np.testing.assert_allclose(result.weights, weights, rtol=1e-8)  # sorted like the truth
    np.testing.assert_allclose(np.linalg.norm(result.factors, axis=0), 1.0, atol=1e-12)
    assert result.converged.all()


@pytest.mark.parametrize("dim", [25, 50, 100])
@pytest.mark.parametrize("seed", range(3))
def test_recovery_under_gaussian_noise_within_theorem_2_2(dim, seed):
    # ||E||_op at half of lambda_min / sqrt(d): inside the O(lambda_min / sqrt(d)) tolerance of
    # Theorem 2.2, whose conclusion |lambda - lambda_hat| <= C2 eps, ||v - v_hat|| <= C3 eps / lambda
    # we check with C2 = C3 = 1 (observed values are about 0.1 and 0.4).
    sigma = 0.5 * 0.5 / np.sqrt(dim)
    tensor, w, V, _ = make_orthogonal_tensor(dim, 3, noise=sigma, random_state=seed)
    result = power_method(tensor, 3, random_state=seed)
    match = match_components(V, result.factors, w, result.weights)
    assert np.all(match.distance <= sigma / w[match.true_index])
    assert np.all(match.weight_error <= sigma)
    assert np.all(result.weights >= 0) and np.all(np.diff(result.weights) <= 0)


def test_identical_seeds_give_identical_results():
    tensor, *_ = make_orthogonal_tensor(30, 4, noise=0.02, random_state=3)
    a = power_method(tensor, 4, random_state=7)
    b = power_method(tensor, 4, random_state=7)
    c = power_method(tensor, 4, random_state=np.random.default_rng(7))
    for other in (b, c):
        np.testing.assert_array_equal(a.weights, other.weights)
        np.testing.assert_array_equal(a.factors, other.factors)


def test_sample_moment_input_dense_and_sparse_agree_with_truth():
    # Records x = a * v_j with orthonormal v_j give (1/n) sum x^(x)3 = sum_j (sum a^3 / n) v_j^(x)3.
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((60, 60)))
    V = Q[:, :3]
    labels = rng.integers(0, 3, size=500)
    scales = rng.uniform(0.5, 1.5, size=500)
    X = scales[:, None] * V[:, labels].T
    expected = np.array([np.sum(scales[labels == j] ** 3) / 500 for j in range(3)])
    dense = power_method(SampleMoment(X), 3, random_state=0)
    sparse = power_method(SampleMoment(sp.csr_matrix(X)), 3, random_state=0)
    match = match_components(V, dense.factors, expected, dense.weights)
    assert np.all(match.inner > 1 - 1e-10)
    assert np.all(match.weight_error < 1e-10)
    np.testing.assert_allclose(sparse.weights, dense.weights, rtol=1e-12)
    np.testing.assert_allclose(sparse.factors, dense.factors, atol=1e-10)


class CountingTensor(SymmetricTensor):
    """Wraps an operator and counts how it is applied."""

    def __init__(self, base):
        self.base, self.pair_calls, self.columns = base, 0, []

    @property
    def dim(self):
        return self.base.dim

    def _contract_pair(self, vectors):
        self.pair_calls += 1
        self.columns.append(vectors.shape[1])
        return self.base._contract_pair(vectors)

    def to_dense(self):  # deflation must never materialise anything
        raise AssertionError("to_dense called")


def test_restarts_are_batched_and_deflation_is_implicit():
    tensor, *_ = make_orthogonal_tensor(15, 3, noise=0.01, random_state=0)
    counting = CountingTensor(DenseTensor(tensor))
    power_method(counting, 3, n_restarts=7, n_iter=5, tol=0, random_state=0)
    # tol=0 runs exactly R = 5 steps for each of k = 3 components, each one product on all
    # L = 7 restarts at once, plus one T(u,u,u) evaluation per component.
    assert counting.pair_calls == 3 * (5 + 1)
    assert set(counting.columns) == {7}


def test_tol_zero_runs_exactly_n_iter_and_defaults_follow_theory():
    tensor, *_ = make_orthogonal_tensor(20, 2, random_state=0)
    result = power_method(tensor, 2, n_iter=6, tol=0, random_state=0)
    np.testing.assert_array_equal(result.n_iter, [6, 6])
    assert not result.converged.any()
    assert default_n_restarts(1) == 10 and default_n_restarts(10) == 47
    assert default_n_iter(200, 1e-8) == 35 + 10


def test_result_reconstructs_the_tensor():
    tensor, *_ = make_orthogonal_tensor(8, 3, random_state=0)
    result = power_method(tensor, 3, random_state=0)
    np.testing.assert_allclose(result.to_dense(), tensor, atol=1e-10)
    np.testing.assert_allclose(result.to_tensor().to_dense(), tensor, atol=1e-10)


def test_negative_weight_is_reported_with_flipped_vector():
    v = np.zeros(5)
    v[0] = 1.0
    tensor = -2.0 * np.einsum("i,j,k->ijk", v, v, v)
    result = power_method(tensor, 1, random_state=0)
    assert result.weights[0] == pytest.approx(2.0)
    assert result.factors[0, 0] == pytest.approx(-1.0)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"rank": 0}, ValueError, "rank must be >= 1"),
        ({"rank": 6}, ValueError, "at most the tensor dimension 5"),
        ({"rank": 1.5}, TypeError, "rank must be an integer"),
        ({"rank": 1, "random_state": "seed"}, TypeError, "random_state"),
        ({"rank": 1, "random_state": -3}, ValueError, "random_state"),
        ({"rank": 1, "n_restarts": 0}, ValueError, "n_restarts"),
        ({"rank": 1, "n_iter": 0}, ValueError, "n_iter"),
        ({"rank": 1, "tol": -1.0}, ValueError, "tol"),
        ({"rank": 1, "tol": float("nan")}, ValueError, "tol"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, error, match):
    tensor, *_ = make_orthogonal_tensor(5, 2, random_state=0)
    with pytest.raises(error, match=match):
        power_method(tensor, **kwargs)


@pytest.mark.parametrize(
    "tensor, match",
    [
        (np.full((4, 4, 4), np.inf), "NaN or infinite"),
        (np.ones((4, 4)), "3-dimensional"),
        (np.random.default_rng(0).standard_normal((4, 4, 4)), "not symmetric"),
        (np.zeros((0, 0, 0)), "empty"),
    ],
)
def test_bad_tensors_are_rejected(tensor, match):
    with pytest.raises(ValueError, match=match):
        power_method(tensor, 1)


def test_callback_reports_each_component_in_extraction_order():
    tensor, *_ = make_orthogonal_tensor(10, 3, random_state=0)
    seen = []
    result = power_method(tensor, 3, random_state=0, callback=lambda i, w: seen.append((i, w)))
    assert [i for i, _ in seen] == [0, 1, 2]
    np.testing.assert_allclose(sorted(w for _, w in seen)[::-1], result.weights)
