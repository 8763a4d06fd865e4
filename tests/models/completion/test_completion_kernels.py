"""ALS's compiled per-row normal equations and CP values against brute-force numpy references."""

from __future__ import annotations

import numpy as np
import pytest

from dptensor.models.completion import _kernels as kernels
from dptensor.models.completion._als import EntryStatistics, initial_parameters, mode_problem
from dptensor.models.completion._kernels import (
    cp_normal_equations,
    design_normal_equations,
    factor_values,
)


def _reference(rows: np.ndarray, design: np.ndarray, target: np.ndarray, n_rows: int, weights=None):
    """Per-row sums of dense outer products, one row at a time (the definition)."""
    d = design.shape[1]
    weights = np.ones(len(rows)) if weights is None else weights
    gram, rhs = np.zeros((n_rows, d, d)), np.zeros((n_rows, d))
    for r in range(n_rows):
        w, v, y = design[rows == r], weights[rows == r], target[rows == r]
        gram[r] = (w * v[:, None]).T @ w
        rhs[r] = w.T @ y
    return gram, rhs


def _entries(rng: np.random.Generator, shape: tuple[int, int, int], n: int) -> np.ndarray:
    """Random entries, repeats allowed, some rows of each mode left empty."""
    return np.stack([rng.integers(0, max(1, s - 1), n) for s in shape], axis=1)


@pytest.mark.parametrize(("n", "n_rows", "d"), [(0, 3, 2), (1, 1, 1), (200, 7, 5), (500, 40, 13)])
@pytest.mark.parametrize("weighted", [False, True])
def test_design_normal_equations_equal_the_dense_sums(n, n_rows, d, weighted):
    rng = np.random.default_rng(n + d)
    rows = rng.integers(0, n_rows, n)
    design, target = rng.standard_normal((n, d)), rng.standard_normal(n)
    weights = rng.random(n) if weighted else None
    gram, rhs = design_normal_equations(rows, design, target, n_rows, weights)
    want_gram, want_rhs = _reference(rows, design, target, n_rows, weights)
    np.testing.assert_allclose(gram, want_gram, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rhs, want_rhs, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(gram, np.swapaxes(gram, 1, 2))


@pytest.mark.parametrize(("offsets", "factors"), [("none", True), ("biases", True), ("biases", False)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cp_normal_equations_equal_the_dense_design(offsets, factors, seed):
    """The fused CP kernel gives the per-row sums of :func:`mode_problem`'s design and target."""
    rng = np.random.default_rng(seed)
    shape = (9, 6, 4)
    indices = _entries(rng, shape, 300)
    values = rng.standard_normal(len(indices))
    params = initial_parameters("cp", shape, (3, 3, 3) if factors else None, offsets, (2,), 0.8, rng, 0.4)
    if params.biases is not None:
        params.biases = [rng.standard_normal(s) for s in shape]
    columns = [np.ascontiguousarray(indices[:, m]) for m in range(3)]
    for mode in range(3):
        design, target = mode_problem(params, mode, indices, values)
        want = _reference(indices[:, mode], design, target, shape[mode])
        got = cp_normal_equations(
            mode, params.factors, params.mean, params.biases, columns, values, shape[mode]
        )
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
        stats = EntryStatistics(indices, values, shape)
        for g, w in zip(stats.mode_system(params, mode), want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_cp_normal_equations_need_factors_or_biases():
    with pytest.raises(ValueError, match="factors or biases"):
        cp_normal_equations(0, None, 0.0, None, [np.zeros(1, dtype=np.int64)] * 3, np.zeros(1), 1)


@pytest.mark.parametrize("model", ["cp", "tucker"])
def test_factor_values_equal_a_loop_over_entries(model):
    rng = np.random.default_rng(5)
    shape, ranks = (6, 5, 4), (3, 2, 2) if model == "tucker" else (3, 3, 3)
    factors = [rng.standard_normal((s, r)) for s, r in zip(shape, ranks, strict=True)]
    core = rng.standard_normal(ranks) if model == "tucker" else None
    indices = _entries(rng, shape, 50)
    if model == "cp":
        want = [np.sum(factors[0][i] * factors[1][j] * factors[2][k]) for i, j, k in indices]
    else:
        rows = ((factors[0][i], factors[1][j], factors[2][k]) for i, j, k in indices)
        want = [np.einsum("pqt,p,q,t->", core, *row) for row in rows]
    np.testing.assert_allclose(factor_values(model, core, factors, indices), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sort", [False, True])
def test_normal_equations_in_many_blocks_equal_one_block(monkeypatch, sort):
    """Blocks summed in parallel (sorted rows: disjoint; unsorted: fewer blocks) give the same sums."""
    rng = np.random.default_rng(7)
    shape = (30, 8, 3)
    indices = _entries(rng, shape, 2000)
    if sort:
        indices = indices[np.argsort(indices[:, 0], kind="stable")]
    values = rng.standard_normal(len(indices))
    params = initial_parameters("cp", shape, (4, 4, 4), "biases", (2,), 0.8, rng, 0.1)
    one = [EntryStatistics(indices, values, shape).mode_system(params, m) for m in range(3)]
    monkeypatch.setattr(kernels, "BLOCK_ENTRIES", 64)
    monkeypatch.setattr(kernels, "PARTIAL_ROWS", 0)
    stats = EntryStatistics(indices, values, shape)
    starts, lo, offsets = stats.index[0].blocks
    # sorted: 16 blocks of disjoint rows; unsorted: each block covers (nearly) every row, so two
    assert len(lo) == (kernels.MAX_BLOCKS if sort else 2)
    assert offsets[-1] <= 2 * shape[0]
    assert len(stats.index[1].blocks[1]) == 2
    for mode in range(3):
        for got, want in zip(stats.mode_system(params, mode), one[mode], strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        design, target = mode_problem(params, mode, indices, values)
        got = stats.index[mode].normal_equations(design, target)
        for g, w in zip(got, one[mode], strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
