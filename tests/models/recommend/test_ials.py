"""Implicit ALS (Hu, Koren & Volinsky 2008): half-steps against dense brute force, the fit's properties."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.models.recommend.ials import (
    IALSFactors,
    ItemSideStatistics,
    ials_objective,
    implicit_als,
    item_side_statistics,
    solve_item_factors,
    solve_user_factors,
)
from dptensor.parallel import as_local_blocks


def tiny(seed: int = 0, shape: tuple[int, int] = (9, 7)) -> sp.csr_array:
    """A small binary matrix with an empty user and an item nobody chose."""
    rng = np.random.default_rng(seed)
    dense = (rng.random(shape) < 0.4).astype(float)
    dense[3] = 0.0
    dense[:, 5] = 0.0
    dense[0] = 1.0  # a user with every item but the empty one
    return sp.csr_array(dense)


def dense_ridge(reg: float, nu: float, alpha: float, dense: np.ndarray) -> np.ndarray:
    """``lambda (sum_j c_rj)^nu`` for each row of a dense binary matrix, from the confidences themselves."""
    return reg * (1.0 + alpha * dense).sum(axis=1) ** nu


def brute_half_step(dense: np.ndarray, other: np.ndarray, reg: float, alpha: float, nu: float) -> np.ndarray:
    """Each row's exact least squares with its full confidence matrix ``C_r = diag(1 + alpha x_r)``."""
    ridge = dense_ridge(reg, nu, alpha, dense)
    out = []
    for row, lam in zip(dense, ridge, strict=True):
        c = np.diag(1.0 + alpha * row)
        system = other.T @ c @ other + lam * np.eye(other.shape[1])
        out.append(np.linalg.solve(system, other.T @ c @ row))
    return np.array(out)


def brute_objective(dense: np.ndarray, users: np.ndarray, items: np.ndarray, reg: float, alpha: float,
                    nu: float) -> float:
    c = 1.0 + alpha * dense
    fit = float(np.sum(c * (dense - users @ items.T) ** 2))
    return fit + float(dense_ridge(reg, nu, alpha, dense) @ np.sum(users**2, axis=1)
                       + dense_ridge(reg, nu, alpha, dense.T) @ np.sum(items**2, axis=1))


@pytest.mark.parametrize(("alpha", "nu"), [(3.0, 0.0), (0.0, 0.0), (5.0, 0.7)])
def test_half_steps_equal_dense_weighted_least_squares(alpha: float, nu: float) -> None:
    X = tiny()
    dense = X.toarray()
    rng = np.random.default_rng(1)
    items, users = rng.normal(size=(7, 3)), rng.normal(size=(9, 3))
    settings = {"regularization": 0.3, "alpha": alpha, "regularization_exponent": nu}
    np.testing.assert_allclose(solve_user_factors(X, items, **settings),
                               brute_half_step(dense, items, 0.3, alpha, nu), rtol=1e-10, atol=1e-12)
    stats = item_side_statistics(X, users, alpha=alpha)
    np.testing.assert_allclose(solve_item_factors(stats, stats.user_gram, **settings),
                               brute_half_step(dense.T, users, 0.3, alpha, nu), rtol=1e-10, atol=1e-12)
    assert np.all(solve_user_factors(X, items, **settings)[3] == 0.0)  # no interaction, no signal


def test_objective_equals_dense_sum_over_every_pair() -> None:
    X = tiny(2)
    rng = np.random.default_rng(3)
    users, items = rng.normal(size=(9, 4)), rng.normal(size=(7, 4))
    for alpha, nu in [(2.0, 0.0), (7.0, 0.5)]:
        value = ials_objective(X, users, items, regularization=0.2, alpha=alpha, regularization_exponent=nu)
        assert value == pytest.approx(brute_objective(X.toarray(), users, items, 0.2, alpha, nu), rel=1e-12)


def test_statistics_map_sum_equal_direct_computation() -> None:
    # stored values of 3: binarised
    X = sp.csr_array(sp.random(40, 11, density=0.3, random_state=4, format="csr") * 3.0)
    dense = (X.toarray() != 0).astype(float)
    users = np.random.default_rng(5).normal(size=(40, 3))
    alpha = 4.0
    grams = alpha * np.einsum("ui,ua,ub->iab", dense, users, users)
    targets = (1.0 + alpha) * dense.T @ users
    for stats in (item_side_statistics(X, users, alpha=alpha),
                  item_side_statistics(X, users, alpha=alpha, n_jobs=2),
                  item_side_statistics(as_local_blocks(X, n_blocks=7), users, alpha=alpha)):
        assert isinstance(stats, ItemSideStatistics) and stats.n_users == 40
        np.testing.assert_allclose(stats.grams, grams, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(stats.targets, targets, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(stats.counts, dense.sum(axis=0))
        np.testing.assert_allclose(stats.user_gram, users.T @ users, rtol=1e-12)
    stored = X.copy()
    stored.data[::5] = 0.0  # explicit zeros are no interaction, and the blocks are left as they are
    blocks = as_local_blocks(stored, n_blocks=7)
    before = [block.copy() for block in blocks.payloads]
    kept = (stored.toarray() != 0).astype(float)
    stats = item_side_statistics(blocks, users, alpha=alpha)
    expected = alpha * np.einsum("ui,ua,ub->iab", kept, users, users)
    np.testing.assert_allclose(stats.grams, expected, atol=1e-12)
    np.testing.assert_array_equal(stats.counts, kept.sum(axis=0))
    for block, old in zip(blocks.payloads, before, strict=True):
        assert block.nnz == old.nnz and np.array_equal(block.data, old.data)


@pytest.mark.parametrize(("solver", "dtype", "rounding"),
                         [("cg", np.float64, 1e-12), ("cg", np.float32, 1e-6),
                          ("cholesky", np.float64, 1e-12)])
def test_objective_never_increases_and_fold_in_equals_last_user_step(solver: str, dtype: type,
                                                                     rounding: float) -> None:
    X = sp.csr_array(sp.random(60, 30, density=0.15, random_state=6, format="csr"))
    fit = implicit_als(X, 5, regularization=0.5, alpha=8.0, iterations=8, solver=solver, dtype=dtype,
                       random_state=0, verbose=True)
    assert isinstance(fit, IALSFactors) and len(fit.objective) == 9
    assert fit.user_factors.dtype == fit.item_factors.dtype == np.float64
    assert np.all(np.diff(fit.objective) <= rounding * fit.objective[0])
    assert fit.objective[-1] < 0.9 * fit.objective[0]
    assert fit.objective[-1] == pytest.approx(
        ials_objective(X, fit.user_factors, fit.item_factors, regularization=0.5, alpha=8.0), rel=1e-12)
    rows = [0, 7, 59]
    folded = solve_user_factors(X[rows], fit.item_factors, regularization=0.5, alpha=8.0)
    np.testing.assert_allclose(folded, fit.user_factors[rows], rtol=1e-12, atol=1e-14)


def test_cg_run_to_convergence_equals_exact_half_steps() -> None:
    X = tiny(7, (25, 12))
    settings = {"regularization": 0.2, "alpha": 6.0, "iterations": 4, "random_state": 3,
                "regularization_exponent": 0.5}
    exact = implicit_als(X, 4, solver="cholesky", **settings)
    cg = implicit_als(X, 4, solver="cg", cg_steps=40, dtype=np.float64, **settings)
    np.testing.assert_allclose(cg.item_factors, exact.item_factors, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(cg.user_factors, exact.user_factors, rtol=1e-8, atol=1e-10)


def test_same_seed_same_factors_whatever_the_threads() -> None:
    X = sp.csr_array(sp.random(80, 40, density=0.1, random_state=8, format="csr"))
    first = implicit_als(X, 6, iterations=3, random_state=11)
    again = implicit_als(X, 6, iterations=3, random_state=11, n_jobs=2)
    np.testing.assert_array_equal(first.user_factors, again.user_factors)
    np.testing.assert_array_equal(first.item_factors, again.item_factors)
    other = implicit_als(X, 6, iterations=3, random_state=12)
    assert not np.allclose(first.item_factors, other.item_factors)


def test_planted_low_rank_preferences_are_recovered() -> None:
    """Users in 8 taste groups choose mostly among their group's 25 items; held-out choices are found."""
    rng = np.random.default_rng(9)
    n_users, n_items, groups = 400, 200, 8
    taste = rng.integers(groups, size=n_users)
    chosen = []
    for user in range(n_users):
        own = np.flatnonzero(np.arange(n_items) % groups == taste[user])
        picks = rng.choice(own, size=12, replace=False)
        noise = rng.choice(n_items, size=2, replace=False)
        chosen.append(np.union1d(picks, noise))
    held = np.array([rng.choice(c[np.arange(n_items)[c] % groups == taste[u]]) for u, c in enumerate(chosen)])
    rows = np.concatenate([np.full(len(c) - 1, u) for u, c in enumerate(chosen)])
    cols = np.concatenate([np.setdiff1d(c, [held[u]]) for u, c in enumerate(chosen)])
    X = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(n_users, n_items))
    fit = implicit_als(X, 8, regularization=1.0, alpha=10.0, iterations=10, random_state=0)
    scores = fit.user_factors @ fit.item_factors.T
    scores[X.toarray() > 0] = -np.inf
    top = np.argsort(-scores, axis=1)[:, :10]
    hit_rate = np.mean([held[u] in top[u] for u in range(n_users)])
    assert hit_rate > 0.6  # random lists hit 10 / ~187 = 0.05; the group's unseen items are 14


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vanishing_factors_stop_the_cg_steps_instead_of_dividing_by_zero(dtype: type) -> None:
    X = sp.csr_array(sp.random(30, 20, density=0.2, random_state=0, format="csr"))
    fit = implicit_als(X, 3, regularization=1e6, iterations=6, dtype=dtype, random_state=0)
    assert np.all(np.isfinite(fit.item_factors)) and np.abs(fit.item_factors).max() < 1e-20


def test_bad_input_is_refused_naming_the_argument() -> None:
    X = tiny()
    items = np.ones((7, 2))
    with pytest.raises(ValueError, match="regularization"):
        implicit_als(X, 2, regularization=0.0)
    with pytest.raises(ValueError, match="alpha"):
        implicit_als(X, 2, alpha=-1.0)
    with pytest.raises(ValueError, match="dtype"):
        implicit_als(X, 2, dtype=np.float16)
    with pytest.raises(ValueError, match="solver"):
        implicit_als(X, 2, solver="lu")
    with pytest.raises(ValueError, match="n_factors"):
        implicit_als(X, 0)
    with pytest.raises(TypeError, match="iterations"):
        implicit_als(X, 2, iterations=2.5)
    with pytest.raises(ValueError, match="NaN"):
        implicit_als(sp.csr_array(np.array([[np.nan, 1.0]])), 2)
    with pytest.raises(ValueError, match="items"):
        solve_user_factors(X, np.ones((6, 2)), regularization=1.0, alpha=1.0)
    with pytest.raises(ValueError, match="item_factors"):
        solve_user_factors(X, np.full((7, 2), np.inf), regularization=1.0, alpha=1.0)
    with pytest.raises(ValueError, match="user_factors"):
        item_side_statistics(X, np.ones((8, 2)), alpha=1.0)
    with pytest.raises(TypeError, match="stats"):
        solve_item_factors({"grams": 0}, regularization=1.0)
    stats = item_side_statistics(X, np.ones((9, 2)), alpha=1.0)
    with pytest.raises(ValueError, match="user_gram"):
        solve_item_factors(stats, np.eye(3), regularization=1.0)
    with pytest.raises(ValueError, match="same columns"):
        ials_objective(X, np.ones((9, 3)), items, regularization=1.0, alpha=1.0)
