"""Dense and implicit symmetric tensor operators agree to rounding (DESIGN.md, layer 1)."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from dptensor.tensor import (
    DeflatedTensor,
    DenseTensor,
    LowRankTensor,
    SampleMoment,
    SumTensor,
    WhitenedTensor,
    as_tensor,
    operator_norm,
    symmetrize,
)


def dense_moment(X, weights=None):
    X = X.toarray() if sp.issparse(X) else X
    w = np.full(X.shape[0], 1 / X.shape[0]) if weights is None else weights
    return np.einsum("n,ni,nj,nk->ijk", w, X, X, X)


def brute_force_pair(T, U):
    return np.einsum("ijk,jm,km->im", T, U, U)


def brute_force_triple(T, U):
    return np.einsum("ijk,im,jm,km->m", T, U, U, U)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 30),
    d=st.integers(1, 7),
    m=st.integers(1, 5),
    seed=st.integers(0, 2**31),
    sparse=st.booleans(),
)
def test_sample_moment_matches_dense(n, d, m, seed, sparse):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.6)
    data = sp.csr_matrix(X) if sparse else X
    U = rng.standard_normal((d, m))
    op, dense = SampleMoment(data), dense_moment(X)
    scale = 1 + np.abs(dense).max()
    np.testing.assert_allclose(op.contract_pair(U), brute_force_pair(dense, U), atol=1e-12 * scale * 10)
    np.testing.assert_allclose(op.contract_triple(U), brute_force_triple(dense, U), atol=1e-11 * scale)
    np.testing.assert_allclose(op.to_dense(), dense, atol=1e-12 * scale)


@settings(max_examples=25, deadline=None)
@given(d=st.integers(1, 8), m=st.integers(1, 6), seed=st.integers(0, 2**31))
def test_dense_operator_matches_einsum(d, m, seed):
    rng = np.random.default_rng(seed)
    T = symmetrize(rng.standard_normal((d, d, d)))
    U = rng.standard_normal((d, m))
    op = DenseTensor(T)
    np.testing.assert_allclose(op.contract_pair(U), brute_force_pair(T, U), atol=1e-12)
    np.testing.assert_allclose(op.contract_triple(U), brute_force_triple(T, U), atol=1e-12)
    np.testing.assert_allclose(op.to_dense(), T, atol=1e-14)


def test_weighted_sample_moment():
    rng = np.random.default_rng(1)
    X, w = rng.standard_normal((12, 4)), rng.random(12)
    np.testing.assert_allclose(SampleMoment(X, weights=w).to_dense(), dense_moment(X, w), atol=1e-13)


def test_low_rank_deflated_whitened_and_sums_match_dense():
    rng = np.random.default_rng(2)
    d, k = 6, 3
    X = rng.standard_normal((40, d))
    base = SampleMoment(X)
    dense = dense_moment(X)
    lam, V = rng.random(k), rng.standard_normal((d, k))
    low = np.einsum("r,ir,jr,kr->ijk", lam, V, V, V)
    np.testing.assert_allclose(LowRankTensor(lam, V).to_dense(), low, atol=1e-13)
    np.testing.assert_allclose(DeflatedTensor(base, lam, V).to_dense(), dense - low, atol=1e-12)
    W = rng.standard_normal((d, 2))
    whitened = np.einsum("abc,ai,bj,ck->ijk", dense, W, W, W)
    np.testing.assert_allclose(WhitenedTensor(base, W).to_dense(), whitened, atol=1e-12)
    combo = SumTensor([base, LowRankTensor(lam, V)], [2.0, -0.5])
    np.testing.assert_allclose(combo.to_dense(), 2 * dense - 0.5 * low, atol=1e-12)
    np.testing.assert_allclose((base - 2.0 * DenseTensor(dense)).to_dense(), -dense, atol=1e-12)
    U = rng.standard_normal((d, 4))
    np.testing.assert_allclose(
        DeflatedTensor(base, lam, V).contract_triple(U), brute_force_triple(dense - low, U), atol=1e-12
    )


def test_single_vector_input_returns_vector_and_scalar():
    T = DenseTensor(symmetrize(np.random.default_rng(3).standard_normal((4, 4, 4))))
    u = np.ones(4) / 2
    assert T.contract_pair(u).shape == (4,)
    assert isinstance(T.contract_triple(u), float)


def test_operator_norm_of_orthogonal_tensor_is_largest_weight():
    rng = np.random.default_rng(4)
    Q, _ = np.linalg.qr(rng.standard_normal((10, 10)))
    T = np.einsum("r,ir,jr,kr->ijk", np.array([2.0, 1.0, 0.5]), Q[:, :3], Q[:, :3], Q[:, :3])
    result = operator_norm(T, random_state=0)
    assert result.norm == pytest.approx(2.0, rel=1e-10)
    assert abs(result.vector @ Q[:, 0]) == pytest.approx(1.0, abs=1e-8)


def test_operator_norm_is_a_lower_bound_attained_by_its_vector():
    rng = np.random.default_rng(5)
    T = symmetrize(rng.standard_normal((8, 8, 8)))
    result = operator_norm(T, n_starts=30, random_state=0)
    assert result.norm == pytest.approx(DenseTensor(T).contract_triple(result.vector))
    # Brute-force search over many random unit vectors never beats SS-HOPM.
    U = rng.standard_normal((8, 20000))
    U /= np.linalg.norm(U, axis=0)
    assert np.max(np.abs(brute_force_triple(T, U))) <= result.norm + 1e-12


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.full((3, 3, 3), np.nan), "NaN"),
        (np.ones((3, 3)), "3-dimensional"),
        (np.ones((3, 3, 4)), "cubic"),
        (np.arange(27.0).reshape(3, 3, 3), "not symmetric"),
        (np.zeros((0, 0, 0)), "empty"),
    ],
)
def test_dense_tensor_rejects_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        DenseTensor(bad)


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.array([[1.0, np.inf]]), "NaN or infinite"),
        (np.zeros((0, 3)), "empty"),
        (sp.csr_matrix((0, 3)), "empty"),
        (sp.csr_matrix(np.array([[np.nan, 1.0]])), "NaN or infinite"),
        (np.ones(3), "2-dimensional"),
    ],
)
def test_sample_moment_rejects_bad_data(bad, match):
    with pytest.raises(ValueError, match=match):
        SampleMoment(bad)


def test_bad_vectors_and_mismatched_parts_are_rejected():
    op = SampleMoment(np.ones((3, 4)))
    with pytest.raises(ValueError, match="shape"):
        op.contract_pair(np.ones((3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        op.contract_triple(np.array([np.nan, 0, 0, 0]))
    with pytest.raises(ValueError, match="same dimension"):
        SampleMoment(np.ones((3, 4))) + SampleMoment(np.ones((3, 5)))
    with pytest.raises(ValueError, match="rows"):
        WhitenedTensor(op, np.ones((3, 2)))
    with pytest.raises(ValueError, match="weights"):
        SampleMoment(np.ones((3, 4)), weights=np.ones(2))
    with pytest.raises(ValueError, match=r"shape \(4, k\)"):
        DeflatedTensor(op, np.ones(3), np.ones((3, 4)))  # (k, d) instead of (d, k)
    with pytest.raises(TypeError, match="SampleMoment"):
        as_tensor(sp.csr_matrix(np.ones((3, 3))))
