"""Synthetic orthogonal tensors (Appendix A noise models) and Hungarian matching."""

import numpy as np
import pytest

from dptensor.datasets import make_orthogonal_tensor
from dptensor.metrics import match_components
from dptensor.tensor import check_symmetric, operator_norm


@pytest.mark.parametrize("model", ["gaussian", "adversarial", "weakly_correlated"])
def test_noise_models_are_symmetric_with_requested_operator_norm(model):
    tensor, weights, factors, noise = make_orthogonal_tensor(
        12, 3, noise=0.2, noise_model=model, random_state=0
    )
    check_symmetric(tensor)
    np.testing.assert_allclose(factors.T @ factors, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(weights, [1.0, 0.75, 0.5])
    signal = np.einsum("r,ir,jr,kr->ijk", weights, factors, factors, factors)
    np.testing.assert_allclose(tensor - signal, noise, atol=1e-14)
    assert operator_norm(noise, n_starts=40, random_state=1).norm == pytest.approx(0.2, rel=1e-6)


def test_adversarial_and_weakly_correlated_structure():
    _, _, V, adversarial = make_orthogonal_tensor(
        6, 3, noise=3.0, noise_model="adversarial", components="canonical", random_state=0
    )
    # E = sum_i sym(v2 (x) e_i (x) e_i): E_abc = v2_a d_bc + v2_b d_ac + v2_c d_ab with v2 = e_2.
    assert adversarial[1, 0, 0] == 1.0 and adversarial[1, 1, 1] == 3.0 and adversarial[0, 0, 0] == 0.0
    _, _, V, weak = make_orthogonal_tensor(6, 2, noise=1.0, noise_model="weakly_correlated", random_state=0)
    assert np.abs(np.einsum("ijk,i->jk", weak, V[:, 0])).max() < 1e-12  # orthogonal to the signal


def test_same_seed_same_tensor_and_bad_arguments():
    a = make_orthogonal_tensor(8, 2, noise=0.1, random_state=5)
    b = make_orthogonal_tensor(8, 2, noise=0.1, random_state=5)
    np.testing.assert_array_equal(a.tensor, b.tensor)
    with pytest.raises(ValueError, match="noise_model"):
        make_orthogonal_tensor(8, 2, noise=0.1, noise_model="pink")
    with pytest.raises(ValueError, match="noise"):
        make_orthogonal_tensor(8, 2, noise=-1.0)
    with pytest.raises(ValueError, match="weights"):
        make_orthogonal_tensor(8, 2, weights=[1.0, -1.0])
    with pytest.raises(ValueError, match="rank"):
        make_orthogonal_tensor(8, 9)
    with pytest.raises(ValueError, match="rank < dim"):
        make_orthogonal_tensor(4, 4, noise=0.1, noise_model="weakly_correlated")


def test_match_components_is_sign_and_permutation_invariant():
    rng = np.random.default_rng(0)
    V, _ = np.linalg.qr(rng.standard_normal((10, 4)))
    perm = [2, 0, 3, 1]
    est = V[:, perm] * np.array([1, -1, 1, -1]) * 3.0  # unnormalised, flipped, permuted
    match = match_components(V, est, np.arange(4.0), np.arange(4.0)[perm] + 0.5)
    np.testing.assert_array_equal(match.est_index[match.true_index], np.argsort(perm))
    np.testing.assert_allclose(match.inner, 1.0)
    np.testing.assert_allclose(match.distance, 0.0, atol=1e-7)
    np.testing.assert_allclose(match.weight_error, 0.5)


def test_match_components_distance_and_rectangular_case():
    a = np.array([[1.0], [0.0]])
    b = np.array([[0.6, 0.0], [0.8, -1.0]])
    match = match_components(a, b)
    assert match.est_index.tolist() == [0] and match.inner[0] == pytest.approx(0.6)
    assert match.distance[0] == pytest.approx(np.linalg.norm(a[:, 0] - b[:, 0]))
    with pytest.raises(ValueError, match="rows"):
        match_components(np.ones((3, 1)), np.ones((4, 1)))
    with pytest.raises(ValueError, match="zero column"):
        match_components(np.ones((3, 1)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match="NaN"):
        match_components(np.ones((3, 1)), np.full((3, 1), np.nan))
