"""Sensitivity audit: observed changes between neighbours never exceed the claimed bounds,
and the worst case attains them (both relations)."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.privacy import (
    EntryNeighbouring,
    RecordNeighbouring,
    clip_records,
    entry_neighbour_difference,
    record_bound_violations,
    record_norms,
)
from dptensor.tensor import DenseTensor, SampleMoment


def _test_vectors(dim: int, rng: np.random.Generator) -> np.ndarray:
    gaussian = rng.standard_normal((dim, 200))
    sparse = gaussian * (rng.random((dim, 200)) < 0.3)
    sparse[0, :] += 1e-3  # no zero columns
    spiky = rng.standard_normal((dim, 20)) * 0.1
    spiky[rng.integers(dim, size=20), np.arange(20)] = 1.0
    columns = np.hstack([gaussian, sparse, spiky, np.eye(dim), np.ones((dim, 1))])
    return columns / np.linalg.norm(columns, axis=0)


def test_entry_relation_sensitivity_audit():
    dim = 5
    rng = np.random.default_rng(0)
    vectors = _test_vectors(dim, rng)
    relation = EntryNeighbouring()
    claimed_pair = relation.pair_sensitivity(vectors)
    claimed_triple = relation.triple_sensitivity(vectors)
    worst_pair = np.zeros(vectors.shape[1])
    worst_triple = np.zeros(vectors.shape[1])
    base = rng.standard_normal((dim,) * 3)
    base = sum(base.transpose(p) for p in itertools.permutations(range(3)))
    for i, j, k in itertools.combinations_with_replacement(range(dim), 3):
        diff = entry_neighbour_difference(dim, i, j, k)
        assert np.array_equal(diff, diff.transpose(1, 0, 2))
        for sign in (1.0, -1.0):
            # compute through the operators, as the algorithm does
            change = DenseTensor(base + sign * diff).contract_pair(vectors) - DenseTensor(base).contract_pair(
                vectors
            )
            worst_pair = np.maximum(worst_pair, np.linalg.norm(change, axis=0))
            tchange = DenseTensor(base + sign * diff).contract_triple(vectors) - DenseTensor(
                base
            ).contract_triple(vectors)
            worst_triple = np.maximum(worst_triple, np.abs(tchange))
    # never exceeded ...
    assert np.all(worst_pair <= claimed_pair * (1 + 1e-9) + 1e-12)
    assert np.all(worst_triple <= claimed_triple * (1 + 1e-9) + 1e-12)
    # ... and attained for every u (at the diagonal entry argmax |u_i|): 6||u||_inf^2 is exact in l2
    np.testing.assert_allclose(worst_pair, claimed_pair, rtol=1e-9)
    np.testing.assert_allclose(worst_triple, claimed_triple, rtol=1e-9)


def test_entry_relation_off_diagonal_l2_is_below_paper_l1_bound():
    """Distinct indices: ||E(I,u,u)||_2 <= 2 sqrt(3) ||u||_inf^2 < 6 ||u||_inf^2."""
    u = np.ones(4) / 2.0
    change = DenseTensor(entry_neighbour_difference(4, 0, 1, 2)).contract_pair(u)
    assert np.linalg.norm(change) == pytest.approx(2 * np.sqrt(3) * 0.25)


def test_record_relation_sensitivity_audit():
    n, dim, bound = 40, 6, 2.0
    rng = np.random.default_rng(1)
    relation = RecordNeighbouring(bound, n)
    data = rng.standard_normal((n, dim))
    data *= (bound * rng.random(n) / np.linalg.norm(data, axis=1))[:, None]
    vectors = _test_vectors(dim, rng)
    claimed_pair = relation.pair_sensitivity(vectors)
    claimed_triple = relation.triple_sensitivity(vectors)
    base = SampleMoment(data)
    base_pair, base_triple = base.contract_pair(vectors), base.contract_triple(vectors)
    worst = 0.0
    for trial in range(300):
        other = data.copy()
        row = trial % n
        new = rng.standard_normal(dim)
        other[row] = new * bound * rng.random() ** 0.2 / np.linalg.norm(new)
        moment = SampleMoment(other)
        pair = np.linalg.norm(moment.contract_pair(vectors) - base_pair, axis=0)
        triple = np.abs(moment.contract_triple(vectors) - base_triple)
        assert np.all(pair <= claimed_pair * (1 + 1e-9))
        assert np.all(triple <= claimed_triple * (1 + 1e-9))
        frob = np.linalg.norm(moment.to_dense() - base.to_dense()) if trial < 20 else 0.0
        assert frob <= relation.scale * (1 + 1e-9)
        worst = max(worst, float(np.max(pair / claimed_pair)))
    assert worst > 0.3  # random pairs come within a small factor
    # worst case: x = -B u, x' = +B u attains the bound exactly
    u = vectors[:, :5]
    for col in range(u.shape[1]):
        lo, hi = data.copy(), data.copy()
        lo[0], hi[0] = -bound * u[:, col], bound * u[:, col]
        pair = SampleMoment(hi).contract_pair(u[:, col]) - SampleMoment(lo).contract_pair(u[:, col])
        triple = SampleMoment(hi).contract_triple(u[:, col]) - SampleMoment(lo).contract_triple(u[:, col])
        assert np.linalg.norm(pair) == pytest.approx(relation.scale, rel=1e-9)
        assert abs(triple) == pytest.approx(relation.scale, rel=1e-9)


def test_clip_records_dense_and_sparse():
    rng = np.random.default_rng(2)
    data = rng.standard_normal((30, 8)) * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # clipping is silent: no warning may depend on the data
        clipped = clip_records(data, 3.0)
    over = np.linalg.norm(data, axis=1) > 3.0
    assert over.any()
    np.testing.assert_array_equal(record_bound_violations(data, 3.0), np.flatnonzero(over))
    assert np.all(np.linalg.norm(clipped, axis=1) <= 3.0)
    np.testing.assert_allclose(np.linalg.norm(clipped[over], axis=1), 3.0, rtol=1e-14)
    np.testing.assert_allclose(clipped[over] / np.linalg.norm(clipped[over], axis=1)[:, None],
                               data[over] / np.linalg.norm(data[over], axis=1)[:, None], rtol=1e-13)
    np.testing.assert_array_equal(clipped[~over], data[~over])
    sparse = sp.random(30, 8, density=0.5, random_state=3, format="csr") * 5
    sclipped = clip_records(sparse, 1.0)
    assert sp.issparse(sclipped)
    np.testing.assert_allclose(sclipped.toarray(), clip_records(sparse.toarray(), 1.0))
    np.testing.assert_array_equal(clip_records(data, 100.0), data)


def test_clip_records_never_overflows():
    """Entries up to the largest float are clipped to the bound, never to inf, nan or 0."""
    huge = np.array([[1e308, 1e308, 0.0], [-1.7e308, 0.0, 1.7e308], [1.0, 2.0, 2.0], [0.0, 0.0, 0.0]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        clipped = clip_records(huge, 2.0)
        sclipped = clip_records(sp.csr_matrix(huge), 2.0).toarray()
    for out in (clipped, sclipped):
        norms = np.linalg.norm(out, axis=1)
        assert np.all(np.isfinite(out)) and np.all(norms <= 2.0)
        np.testing.assert_allclose(norms, [2.0, 2.0, 2.0, 0.0], rtol=1e-14)
        np.testing.assert_allclose(out[0], [np.sqrt(2), np.sqrt(2), 0.0], rtol=1e-14)
    np.testing.assert_allclose(record_norms(huge)[2:], [3.0, 0.0])
    assert np.isinf(record_norms(huge)[1])  # its true norm exceeds the float range
    np.testing.assert_allclose(record_norms(huge[:1]), [np.sqrt(2) * 1e308])


@pytest.mark.parametrize("bound", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_record_bound(bound):
    with pytest.raises(ValueError, match="record_bound"):
        RecordNeighbouring(bound, 10)
