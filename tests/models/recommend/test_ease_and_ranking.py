"""The top-N family's core: the interaction check, the item statistics, EASE and the ranking.

EASE against a brute-force constrained least squares per column (Steck 2019, eq. 1), its low-rank
form against the dense one at full rank, the statistics against dense products on every backend,
and the ranking against a sort of every user's scores.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.models.recommend._input import check_interactions, row_lengths
from dptensor.models.recommend.ease import LowRankEase, ease_from_gram, ease_ridge, fit_low_rank_ease
from dptensor.models.recommend.ranking import Recommendations, check_top_n, check_users, top_n
from dptensor.models.recommend.statistics import item_counts, item_gram, weighted_rows
from dptensor.parallel import as_row_blocks


def _interactions(users: int = 120, items: int = 25, density: float = 0.2, seed: int = 0) -> sp.csr_array:
    return check_interactions(sp.random(users, items, density=density, random_state=seed))


# -- the input --------------------------------------------------------------------------------
def test_check_interactions_binarises_and_sums_duplicates() -> None:
    coo = sp.coo_array((np.array([3.0, 2.0, 0.0, 5.0]), (np.array([0, 0, 1, 2]), np.array([1, 1, 2, 0]))),
                       shape=(3, 4))
    X = check_interactions(coo)
    assert X.format == "csr" and X.dtype == np.float64
    np.testing.assert_array_equal(X.toarray(), [[0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]])
    np.testing.assert_array_equal(row_lengths(X), [1, 0, 1])
    np.testing.assert_array_equal(check_interactions([[0, 2], [True, 0]]).toarray(), [[0, 1], [1, 0]])


@pytest.mark.parametrize(("value", "error", "match"), [
    ([[1.0, np.nan]], ValueError, "NaN"),
    ([[1.0, np.inf]], ValueError, "NaN or infinite"),
    ([[1.0, -1.0]], ValueError, "negative"),
    ([1.0, 2.0], ValueError, "2-D"),
    (np.zeros((3, 0)), ValueError, "at least one user"),
    (sp.csr_array((0, 4)), ValueError, "one item"),
    ([["a", "b"]], TypeError, "numeric"),
    ([[1 + 1j, 0]], TypeError, "real"),
])
def test_check_interactions_refuses_what_is_no_interaction_matrix(value, error, match) -> None:
    with pytest.raises(error, match=match):
        check_interactions(value)


def test_check_interactions_names_the_argument_and_the_catalogue() -> None:
    with pytest.raises(ValueError, match="X_new must have 5 items"):
        check_interactions(np.ones((2, 4)), name="X_new", n_items=5)


# -- the statistics ---------------------------------------------------------------------------
@pytest.mark.parametrize("n_jobs", [1, 2])
def test_item_statistics_equal_dense_products(n_jobs: int) -> None:
    X = _interactions().tolil()
    X[3, :] = 0.0  # an empty user
    X = check_interactions(X)
    dense = X.toarray()
    blocks = as_row_blocks(X, n_jobs=n_jobs)
    np.testing.assert_allclose(item_gram(blocks), dense.T @ dense)
    np.testing.assert_allclose(item_counts(blocks), dense.sum(axis=0))
    lengths = dense.sum(axis=1, keepdims=True)
    unit = np.divide(dense, np.sqrt(lengths), out=np.zeros_like(dense), where=lengths > 0)
    np.testing.assert_allclose(item_gram(blocks, weighting="unit"), unit.T @ unit)
    np.testing.assert_allclose(item_counts(blocks, weighting="unit"), unit.sum(axis=0))
    norms = np.linalg.norm(weighted_rows(X, "unit").toarray(), axis=1)
    np.testing.assert_allclose(norms[lengths.ravel() > 0], 1.0)
    with pytest.raises(ValueError, match="weighting"):
        item_gram(blocks, weighting="sqrt")


# -- EASE -------------------------------------------------------------------------------------
def test_ease_equals_the_constrained_least_squares_of_each_column() -> None:
    X = _interactions().toarray()
    ridge = 7.0
    weights = ease_from_gram(X.T @ X, ridge)
    n_items = X.shape[1]
    for j in range(n_items):
        others = [i for i in range(n_items) if i != j]
        A = X[:, others]
        column = np.linalg.solve(A.T @ A + ridge * np.eye(n_items - 1), A.T @ X[:, j])
        np.testing.assert_allclose(weights[others, j], column, atol=1e-10)
        assert weights[j, j] == 0.0


def test_ease_refuses_an_indefinite_system_and_a_bad_ridge() -> None:
    with pytest.raises(ValueError, match="raise the ridge"):
        ease_from_gram(-10.0 * np.eye(3), 1.0)
    with pytest.raises(ValueError, match="ridge must be positive"):
        ease_from_gram(np.eye(3), 0.0)


def test_ease_ridge_scales_the_mean_diagonal() -> None:
    assert ease_ridge(np.array([10.0, 30.0]), 2.0) == 40.0
    assert ease_ridge(np.zeros(3)) > 0


def test_low_rank_ease_at_full_rank_is_the_dense_ease() -> None:
    X = _interactions()
    ridge = 5.0
    dense = X @ ease_from_gram((X.T @ X).toarray(), ridge)
    low = fit_low_rank_ease(X, X.shape[1], ridge, random_state=0)
    assert isinstance(low, LowRankEase)
    np.testing.assert_allclose(low.scores(X), dense, atol=1e-9)
    # at a lower rank the approximation keeps the ranking of most top items
    approx = fit_low_rank_ease(X, 12, ridge, random_state=0).scores(X)
    top_dense = np.argsort(-dense, axis=1)[:, :3]
    top_approx = np.argsort(-approx, axis=1)[:, :3]
    overlap = np.mean([len(set(a) & set(b)) / 3 for a, b in zip(top_dense, top_approx, strict=True)])
    assert overlap > 0.5


# -- the ranking ------------------------------------------------------------------------------
def _sorted_lists(scores: np.ndarray, X: sp.csr_array, n: int) -> np.ndarray:
    """Brute force: sort (score desc, item asc), NaN after every number, the row's items left out."""
    out = np.full((scores.shape[0], n), -1)
    dense = X.toarray()
    for u, row in enumerate(scores):
        eligible = [j for j in range(row.size) if dense[u, j] == 0]
        eligible.sort(key=lambda j: (np.isnan(row[j]) or row[j] == -np.inf,
                                     -np.nan_to_num(row[j], neginf=0.0), j))
        out[u, :min(n, len(eligible))] = eligible[:n]
    return out


@pytest.mark.parametrize("n", [1, 4, 25])
def test_top_n_equals_a_brute_force_sort_with_ties_nan_and_full_rows(n: int) -> None:
    rng = np.random.default_rng(1)
    X = _interactions(30, 25, 0.3, seed=2).tolil()
    X[0, :] = 1.0  # a user with every item: no slot filled
    X[1, :] = 0.0  # a user with none
    X = check_interactions(X)
    scores = rng.integers(0, 4, size=X.shape).astype(float)  # many ties
    scores[2, :5] = np.nan
    scores[3, 3] = -np.inf
    result = top_n(lambda rows: scores[_row_ids(rows, X)], X, n)
    np.testing.assert_array_equal(result.items, _sorted_lists(scores, X, n))
    assert (result.items[0] == -1).all() and np.isnan(result.scores[0]).all()
    filled = result.items >= 0
    np.testing.assert_array_equal(result.scores[filled],
                                  scores[np.nonzero(filled)[0], result.items[filled]])


def _row_ids(rows: sp.csr_array, X: sp.csr_array) -> np.ndarray:
    """The rows of X that a block is (the test scores are looked up by row)."""
    dense, block = X.toarray(), rows.toarray()
    return np.array([int(np.flatnonzero((dense == row).all(axis=1))[0]) for row in block])


def test_top_n_in_blocks_equals_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    from dptensor.models.recommend import ranking

    X = _interactions(50, 20)
    weights = ease_from_gram((X.T @ X).toarray(), 3.0)
    whole = top_n(lambda rows: rows @ weights, X, 5)
    monkeypatch.setattr(ranking, "CELLS_PER_BLOCK", 7 * 20)
    blocked = top_n(lambda rows: rows @ weights, X, 5, np.arange(50)[::-1].copy())
    np.testing.assert_array_equal(blocked.items, whole.items[::-1])
    np.testing.assert_array_equal(blocked.users, np.arange(50)[::-1])


def test_recommendations_rows_and_checks() -> None:
    result = Recommendations(np.array([4]), np.array([[2, -1]]), np.array([[0.5, np.nan]]))
    rows = result.rows()
    assert rows[0] == (4, 1, 2, 0.5) and rows[1][:3] == (4, 2, -1) and result.n == 2
    assert check_top_n(None, 4) == 4 and check_top_n(None, 40) == 10
    for bad in (0, 41, 2.5, True):
        with pytest.raises(ValueError, match="n must be an integer from 1"):
            check_top_n(bad, 40)
    np.testing.assert_array_equal(check_users(None, 3), [0, 1, 2])
    np.testing.assert_array_equal(check_users(2, 3), [2])
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        check_users([3], 3)
    with pytest.raises(ValueError, match="integers"):
        check_users([0.5], 3)


def test_weighted_rows_count_a_pair_stored_twice_once() -> None:
    coo = sp.coo_array((np.ones(3), (np.array([0, 0, 0]), np.array([1, 1, 2]))), shape=(1, 3))
    rows = weighted_rows(sp.csr_matrix(coo), "unit")  # a raw block, duplicates not summed
    np.testing.assert_allclose(rows.toarray(), [[0.0, 1 / np.sqrt(2), 1 / np.sqrt(2)]])


@pytest.mark.parametrize(("shape", "density"), [((300, 40), 0.5), ((50, 700), 0.01), ((2000, 530), 0.3)])
def test_the_gram_is_the_same_by_either_route(shape, density, monkeypatch) -> None:
    from dptensor.models.recommend import statistics

    rows = sp.random(*shape, density=density, format="csr", random_state=0)
    rows.data[:] = np.random.default_rng(0).random(rows.nnz)
    reference = (rows.T @ rows).toarray()
    for advantage in (0.0, 1e12):  # always sparse, always dense
        monkeypatch.setattr(statistics, "DENSE_GRAM_ADVANTAGE", advantage)
        monkeypatch.setattr(statistics, "DENSE_GRAM_CELLS", 3 * shape[1])  # several slices of rows
        gram = statistics.rows_gram(sp.csr_array(rows))
        np.testing.assert_allclose(gram, reference, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(gram, gram.T)


def test_ease_inverts_through_the_cholesky_factor_and_holds_blas_to_one_thread_when_large() -> None:
    from threadpoolctl import threadpool_info

    from dptensor.models.recommend import ease

    rng = np.random.default_rng(0)
    for n in (1, 2, 513, 1100):  # across the mirroring's 512-column blocks
        factors = rng.random((n + 5, n))
        gram = factors.T @ factors
        precision = np.linalg.inv(gram + 0.7 * np.eye(n))
        expected = np.eye(n) - precision / np.diag(precision)[None, :]
        np.testing.assert_allclose(ease.ease_from_gram(gram, 0.7), expected, rtol=1e-9, atol=1e-10)
    with ease._cholesky_threads(ease.SINGLE_THREAD_CHOLESKY_ITEMS):
        assert all(pool["num_threads"] == 1 for pool in threadpool_info() if pool["user_api"] == "blas")
    with pytest.raises(ValueError, match="not positive definite"):
        ease.ease_from_gram(-np.eye(3), 0.5)
