"""Whitening and un-whitening (Anandkumar et al. 2014, Section 4.3) and marginalisation."""

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from dptensor import power_method
from dptensor.decomposition.whitening import unwhiten, whiten
from dptensor.metrics import match_components
from dptensor.tensor import DenseTensor, LowRankTensor, SampleMoment, WhitenedTensor


def model(d=40, k=4, seed=0):
    rng = np.random.default_rng(seed)
    mu, w = rng.random((d, k)), rng.random(k) + 0.2
    return mu, w, (mu * w) @ mu.T


@pytest.mark.parametrize("as_operator", [False, True])
def test_whitening_recovers_non_orthogonal_components_exactly(as_operator):
    mu, w, m2 = model()
    second = spla.aslinearoperator(m2) if as_operator else m2
    W = whiten(second, 4, random_state=0)
    np.testing.assert_allclose(W.matrix.T @ m2 @ W.matrix, np.eye(4), atol=1e-10)
    whitened = WhitenedTensor(LowRankTensor(w, mu), W.matrix)
    result = power_method(whitened, 4, random_state=0)
    np.testing.assert_allclose(result.weights, np.sort(w**-0.5)[::-1], rtol=1e-8)
    weights, components = unwhiten(W, result.weights, result.factors)
    match = match_components(mu, components)
    np.testing.assert_allclose(components[:, match.est_index], mu[:, match.true_index], atol=1e-8)
    np.testing.assert_allclose(weights[match.est_index], w[match.true_index], rtol=1e-8)


def test_projection_basis_and_errors():
    mu, w, m2 = model()
    basis = whiten(m2, 3, scale=False)
    np.testing.assert_allclose(basis.matrix.T @ basis.matrix, np.eye(3), atol=1e-12)
    with pytest.raises(ValueError, match="non-positive"):
        whiten(-m2, 2)
    with pytest.raises(ValueError, match="symmetric"):
        whiten(np.triu(np.ones((4, 4))), 2)
    with pytest.raises(ValueError, match="rank"):
        whiten(m2, 41)
    W = whiten(m2, 4)
    with pytest.raises(ValueError, match="positive"):
        unwhiten(W, np.array([1.0, -1.0, 1.0, 1.0]), np.eye(4))
    with pytest.raises(ValueError, match="shape"):
        unwhiten(W, np.ones(3), np.eye(4))


def test_marginal_matches_dense_contraction():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((20, 5))
    dense = np.einsum("ni,nj,nk->ijk", X, X, X) / 20
    theta = rng.standard_normal(5)
    expected = np.einsum("ijk,k->ij", dense, theta)
    np.testing.assert_allclose(SampleMoment(X).marginal(theta), expected, atol=1e-12)
    np.testing.assert_allclose(DenseTensor(dense).marginal(theta), expected, atol=1e-12)
