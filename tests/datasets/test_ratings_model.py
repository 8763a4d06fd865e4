"""The semi-synthetic ratings generator (issue 38, item 1): dptensor.datasets.RatingsModel.

Fitted on a small generated "real" set (heavy-tailed counts, Zipf popularity, rank-3 structure,
1..5 ratings, session days), the draws must match it: counts per user (KS), item popularity
(rank correlation), the rating histogram (total variation), the time marginal; reproducible from
``random_state``; drawn in chunks in memory bounded by a chunk.
"""

from __future__ import annotations

import copy
import itertools
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

import dptensor.datasets.ratings_model as ratings_model
from dptensor.datasets import RatingsModel, TensorEntries, sample_items_by_popularity

N_USERS, N_ITEMS, N_TIMES = 300, 120, 30


def make_source(seed: int = 0) -> np.ndarray:
    """Rows ``(user, item, rating, time)`` shaped like a small real ratings set."""
    rng = np.random.default_rng(seed)
    counts = np.clip(np.round(rng.lognormal(2.4, 0.9, N_USERS)), 3, 100).astype(int)
    popularity = rng.permutation(1.0 / np.arange(1, N_ITEMS + 1) ** 1.1)
    popularity /= popularity.sum()
    users_f, items_f = rng.normal(0, 0.5, (N_USERS, 3)), rng.normal(0, 0.7, (N_ITEMS, 3))
    user_bias, item_bias = rng.normal(0, 0.4, N_USERS), rng.normal(0, 0.5, N_ITEMS)
    rows = []
    for u, n in enumerate(counts):
        items = rng.choice(N_ITEMS, size=n, replace=False, p=popularity)
        sessions = rng.choice(N_TIMES, size=rng.integers(1, 4), replace=False)
        days = rng.choice(sessions, size=n)
        x = 3.6 + user_bias[u] + item_bias[items] + items_f[items] @ users_f[u] + rng.normal(0, 0.8, n)
        rows.append(np.column_stack([np.full(n, u), items, np.clip(np.round(x), 1, 5), days]))
    return np.vstack(rows)


@pytest.fixture(scope="module")
def source() -> np.ndarray:
    return make_source()


@pytest.fixture(scope="module")
def fitted(source) -> RatingsModel:
    return RatingsModel(3, reg=3.0, max_iter=15, random_state=0).fit(source)


@pytest.fixture(scope="module")
def drawn(fitted) -> TensorEntries:
    return fitted.sample(3000, chunk_size=1000, random_state=1)


def total_variation(a: np.ndarray, b: np.ndarray, levels: np.ndarray) -> float:
    pa = np.array([np.mean(a == v) for v in levels])
    pb = np.array([np.mean(b == v) for v in levels])
    return 0.5 * float(np.abs(pa - pb).sum())


def inclusion_probabilities(weights: np.ndarray, k: int) -> np.ndarray:
    """Exact P(item in the sample) of successive sampling, by enumerating the ordered draws."""
    p = np.zeros(weights.shape[0])
    for order in itertools.permutations(range(weights.shape[0]), k):
        prob, left = 1.0, weights.sum()
        for item in order:
            prob *= weights[item] / left
            left -= weights[item]
        p[list(order)] += prob
    return p


@pytest.mark.parametrize(
    "rounds", [0, 1, ratings_model.REJECTION_ROUNDS], ids=["keys", "one-round", "default"]
)
def test_items_are_a_successive_sample_by_popularity(monkeypatch, rounds):
    """Both paths (with-replacement rounds, exponential keys) give numpy's choice(replace=False, p)."""
    monkeypatch.setattr(ratings_model, "REJECTION_ROUNDS", rounds)
    weights = np.array([6.0, 3.0, 1.0, 0.0, 1.0, 0.5])
    n_users = 20_000
    counts = np.full(n_users, 3)
    users, items = sample_items_by_popularity(counts, weights, np.random.default_rng(0))
    assert np.array_equal(np.bincount(users, minlength=n_users), counts)
    assert np.unique(users * 10 + items).shape[0] == users.shape[0]  # distinct items per user
    expected = inclusion_probabilities(weights, 3)
    observed = np.bincount(items, minlength=weights.shape[0]) / n_users
    se = np.sqrt(expected * (1 - expected) / n_users) + 1e-12
    assert observed[3] == 0.0
    assert np.all(np.abs(observed - expected) <= 4.5 * se)


def test_a_user_cannot_need_more_items_than_exist():
    with pytest.raises(ValueError, match="more items"):
        sample_items_by_popularity(np.array([3]), np.array([1.0, 0.0, 1.0]), np.random.default_rng(0))


def test_counts_per_user_follow_the_source(source, drawn):
    real = np.bincount(source[:, 0].astype(int))
    generated = np.bincount(drawn.indices[:, 0], minlength=3000)
    result = stats.ks_2samp(generated, real)
    n, m = generated.size, real.size
    assert result.statistic < 1.63 * np.sqrt((n + m) / (n * m))  # the KS critical value at 1%
    assert generated.min() >= real.min() and generated.max() <= real.max()


def test_item_popularity_follows_the_source(source, drawn):
    real = np.bincount(source[:, 1].astype(int), minlength=N_ITEMS)
    generated = np.bincount(drawn.indices[:, 1], minlength=N_ITEMS)
    assert stats.spearmanr(real, generated).statistic > 0.9
    assert np.corrcoef(real, generated)[0, 1] > 0.95
    pairs = drawn.indices[:, 0].astype(np.int64) * N_ITEMS + drawn.indices[:, 1]
    assert np.unique(pairs).shape[0] == pairs.shape[0]  # one rating per (user, item)


def test_rating_histogram_and_time_marginal_are_close(source, fitted, drawn):
    levels = np.arange(1.0, 6.0)
    np.testing.assert_array_equal(fitted.levels_, levels)
    assert set(np.unique(drawn.values)) <= set(levels)
    assert total_variation(drawn.values, source[:, 2], levels) < 0.05
    times = np.arange(N_TIMES)
    assert total_variation(drawn.indices[:, 2], source[:, 3], times) < 0.1
    assert drawn.shape == (3000, N_ITEMS, N_TIMES)


def test_ratings_are_structure_plus_resampled_residuals(fitted):
    """The same draw with a zero residual pool gives the rounded structure: the difference is the
    resampled residuals (rounded), and the structure itself varies across users and items."""
    assert fitted.item_factors_.shape == (N_ITEMS, 3)
    n_strata = fitted.count_edges_.shape[0] + 1
    assert fitted.user_mean_.shape == (n_strata, 4) and fitted.user_covariance_.shape == (n_strata, 4, 4)
    assert n_strata >= 3
    draw = fitted.sample(2000, random_state=3)
    quiet = copy.copy(fitted)
    quiet.residuals_ = np.zeros(1)
    clean = quiet.sample(2000, random_state=3)
    np.testing.assert_array_equal(clean.indices, draw.indices)
    noise = draw.values - clean.values
    assert abs(noise.mean()) < 0.1
    assert 0.7 * fitted.residuals_.std() < noise.std() < 1.3 * fitted.residuals_.std()
    assert clean.values.std() > 0.4


def test_reproducible_from_random_state(fitted):
    a = fitted.sample(500, chunk_size=200, random_state=7)
    b = fitted.sample(500, chunk_size=200, random_state=7)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.values, b.values)
    c = fitted.sample(500, chunk_size=200, random_state=8)
    assert not np.array_equal(a.values[:100], c.values[:100]) or not np.array_equal(a.indices, c.indices)
    # the first chunks of a larger draw are the smaller draw's users
    larger = fitted.sample(900, chunk_size=200, random_state=7)
    head = larger.indices[:, 0] < 400
    np.testing.assert_array_equal(larger.indices[head], a.indices[a.indices[:, 0] < 400])
    # the model's own random_state by default
    seeded = RatingsModel(3, reg=3.0, max_iter=5, random_state=5).fit(make_source(1))
    np.testing.assert_array_equal(seeded.sample(50).values, seeded.sample(50).values)


def peak_memory_of_chunks(model: RatingsModel, n_users: int, chunk_size: int) -> tuple[int, int]:
    """Peak traced memory while iterating over the chunks of a draw, and the ratings drawn."""
    seen, ratings = 0, 0
    tracemalloc.start()
    try:
        for chunk in model.iter_samples(n_users, chunk_size=chunk_size, random_state=0):
            assert chunk.shape == (n_users, N_ITEMS, N_TIMES)
            users = np.unique(chunk.indices[:, 0])
            assert users.min() == seen and users.max() < seen + chunk_size  # global user numbers
            seen = int(users.max()) + 1
            ratings += len(chunk)
            del chunk
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, ratings


def test_chunks_draw_many_users_in_bounded_memory(fitted):
    """10^5 users in chunks of 5000: the peak does not grow with the number of users, and stays far
    below one users x items array (96 MB)."""
    small, _ = peak_memory_of_chunks(fitted, 20_000, 5000)
    peak, ratings = peak_memory_of_chunks(fitted, 100_000, 5000)
    assert ratings > 100_000 * 5
    assert peak < 1.5 * small
    assert peak < 0.25 * 100_000 * N_ITEMS * 8


def test_accepts_a_sparse_matrix_and_tensor_entries(source):
    users, items, values = source[:, 0].astype(int), source[:, 1].astype(int), source[:, 2]
    matrix = sp.csr_matrix((values, (users, items)), shape=(N_USERS + 5, N_ITEMS + 2))
    model = RatingsModel(2, reg=3.0, max_iter=5, random_state=0).fit(matrix)
    assert (model.n_items_, model.n_times_) == (N_ITEMS + 2, 1)
    assert model.user_counts_.shape == (N_USERS,)  # users without ratings are no donors
    draw = model.sample(100, random_state=0)
    assert np.all(draw.indices[:, 2] == 0)
    assert not np.any(np.isin(draw.indices[:, 1], [N_ITEMS, N_ITEMS + 1]))  # never-rated items
    entries = TensorEntries(np.column_stack([users, items, source[:, 3].astype(int)]), values,
                            (N_USERS, N_ITEMS, N_TIMES))
    assert RatingsModel(2, reg=3.0, max_iter=5, random_state=0).fit(entries).n_times_ == N_TIMES


def test_continuous_ratings_are_clipped_not_rounded(source):
    rng = np.random.default_rng(0)
    table = source[:, :3].copy()
    table[:, 2] = np.clip(table[:, 2] + rng.normal(0, 0.3, len(table)), 0.5, 5.5)
    model = RatingsModel(2, reg=3.0, max_iter=5, random_state=0).fit(table)
    assert model.levels_ is None
    draw = model.sample(200, random_state=0)
    assert draw.values.min() >= model.rating_range_[0] and draw.values.max() <= model.rating_range_[1]
    assert np.unique(draw.values).shape[0] > 50


def test_refuses_bad_input():
    with pytest.raises(ValueError, match="rows"):
        RatingsModel().fit(np.zeros((4, 5)))
    with pytest.raises(ValueError, match="non-negative integers"):
        RatingsModel().fit(np.array([[0, 1.5, 3.0]]))
    with pytest.raises(ValueError, match="not fitted"):
        RatingsModel().sample(10)
