"""Top-N evaluation: the splits and the metrics against pure-Python references on small cases."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.evaluation import (
    HeldOutUsers,
    coverage,
    evaluate_top_n,
    held_out_users_split,
    ndcg_at_k,
    per_user_split,
    precision_at_k,
    recall_at_k,
    relevant_from_ratings,
)


def brute_metrics(lists, relevant_sets, k, n_items):
    """Recall (both denominators), precision and NDCG at k by loops, over users with a relevant item."""
    recall, plain, precision, ndcg = [], [], [], []
    for items, rel in zip(lists, relevant_sets, strict=True):
        if not rel:
            continue
        top = [i for i in list(items)[:k]]
        hits = [1 if (i >= 0 and i in rel) else 0 for i in top]
        recall.append(sum(hits) / min(k, len(rel)))
        plain.append(sum(hits) / len(rel))
        precision.append(sum(hits) / k)
        dcg = sum(h / math.log2(j + 2) for j, h in enumerate(hits))
        idcg = sum(1 / math.log2(j + 2) for j in range(min(k, len(rel))))
        ndcg.append(dcg / idcg)
    shown = {i for items in lists for i in list(items)[:k] if i >= 0}
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    return mean(recall), mean(plain), mean(precision), mean(ndcg), len(shown) / n_items, len(recall)


def random_case(rng, n_users, n_items, n, density=0.3, empty_slots=True):
    relevant = sp.csr_array((rng.random((n_users, n_items)) < density).astype(float))
    lists = np.stack([rng.permutation(n_items)[:n] for _ in range(n_users)]).astype(np.int64)
    if empty_slots:  # trailing empty slots, as Recommendations leaves them
        for u in range(n_users):
            cut = rng.integers(0, n + 1)
            lists[u, cut:] = -1
    sets = [set(relevant[[u]].indices.tolist()) for u in range(n_users)]
    return lists, relevant, sets


@pytest.mark.parametrize("seed", range(6))
def test_metrics_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    n_items = int(rng.integers(5, 15))
    lists, relevant, sets = random_case(rng, int(rng.integers(3, 12)), n_items, int(rng.integers(1, n_items)))
    if not any(sets):
        relevant[0, 0] = 1.0
        sets[0].add(0)
    ks = (1, 3, 5, 20)  # 20: longer than every list
    result = evaluate_top_n(lists, relevant, ks)
    for k in ks:
        rec, plain, prec, ndcg, cov, n_users = brute_metrics(lists, sets, k, n_items)
        assert result[f"recall@{k}"] == pytest.approx(rec, abs=1e-12)
        assert result[f"precision@{k}"] == pytest.approx(prec, abs=1e-12)
        assert result[f"ndcg@{k}"] == pytest.approx(ndcg, abs=1e-12)
        assert result[f"coverage@{k}"] == pytest.approx(cov, abs=1e-12)
        assert result["n_users"] == n_users
        assert recall_at_k(lists, relevant, k) == pytest.approx(rec, abs=1e-12)
        assert recall_at_k(lists, relevant, k, denominator="relevant") == pytest.approx(plain, abs=1e-12)
        assert precision_at_k(lists, relevant, k) == pytest.approx(prec, abs=1e-12)
        assert ndcg_at_k(lists, relevant, k) == pytest.approx(ndcg, abs=1e-12)
        assert coverage(lists, n_items, k) == pytest.approx(cov, abs=1e-12)
    assert result["coverage"] == pytest.approx(brute_metrics(lists, sets, lists.shape[1], n_items)[4])


def test_hand_computed_case():
    # user 0: relevant {1, 3}, list [1, 0, 3]; user 1: relevant {2}, list [0, -1, -1]; user 2: none
    relevant = sp.csr_array(np.array([[0, 1, 0, 1], [0, 0, 1, 0], [0, 0, 0, 0]], dtype=float))
    lists = np.array([[1, 0, 3], [0, -1, -1], [2, 3, -1]])
    ndcg0 = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(lists, relevant, 3) == pytest.approx(ndcg0 / 2)
    assert recall_at_k(lists, relevant, 1) == pytest.approx(0.5)  # user 0: 1/min(1, 2); user 1: 0
    assert recall_at_k(lists, relevant, 1, denominator="relevant") == pytest.approx(0.25)
    assert precision_at_k(lists, relevant, 3) == pytest.approx((2 / 3) / 2)
    result = evaluate_top_n(lists, relevant, ks=(3,))
    assert result["n_users"] == 2  # the user without a relevant item is left out
    assert result["coverage"] == 1.0  # ... but their list counts for coverage
    assert coverage(lists[:2], 4) == 0.75


def test_user_without_relevant_items_is_excluded():
    relevant = sp.csr_array(np.array([[1, 0, 0], [0, 0, 0]], dtype=float))
    perfect = np.array([[0, 1], [1, 2]])
    assert evaluate_top_n(perfect, relevant, ks=(1, 2))["recall@1"] == 1.0
    assert evaluate_top_n(perfect, relevant, ks=(2,))["ndcg@2"] == 1.0
    with pytest.raises(ValueError, match="no user with a relevant item"):
        recall_at_k(perfect, sp.csr_array((2, 3)), 1)


def test_explicit_zeros_and_values_are_not_relevance():
    relevant = sp.csr_array((np.array([0.0, 5.0]), (np.array([0, 0]), np.array([0, 1]))), shape=(1, 3))
    assert recall_at_k(np.array([[0, 2]]), relevant, 2) == 0.0  # the stored zero is no interaction
    assert recall_at_k(np.array([[1, 2]]), relevant, 2) == 1.0


def test_bad_lists_refused():
    relevant = sp.csr_array(np.eye(3))
    with pytest.raises(ValueError, match="twice"):
        recall_at_k(np.array([[0, 1, 0], [1, 2, 0], [0, 1, 2]]), relevant, 2)
    recall_at_k(np.array([[0, -1, -1], [1, 2, 0], [0, 1, 2]]), relevant, 2)  # repeated -1 is fine
    with pytest.raises(ValueError, match="outside"):
        recall_at_k(np.array([[0], [3], [1]]), relevant, 1)
    with pytest.raises(ValueError, match="outside"):
        recall_at_k(np.array([[0], [-2], [1]]), relevant, 1)
    with pytest.raises(ValueError, match="3 rows"):
        recall_at_k(np.array([[0], [1]]), relevant, 1)
    with pytest.raises(TypeError, match="integer"):
        recall_at_k(np.array([[0.0], [1.0], [2.0]]), relevant, 1)
    with pytest.raises(ValueError, match=r"\(users, n\)"):
        recall_at_k(np.array([0, 1, 2]), relevant, 1)
    with pytest.raises(TypeError, match="relevant must be a SciPy sparse"):
        recall_at_k(np.array([[0], [1], [2]]), np.eye(3), 1)
    with pytest.raises(ValueError, match="k must be >= 1"):
        ndcg_at_k(np.array([[0], [1], [2]]), relevant, 0)
    with pytest.raises(ValueError, match="denominator"):
        recall_at_k(np.array([[0], [1], [2]]), relevant, 1, denominator="k")


@dataclass
class FakeRecommendations:
    users: np.ndarray
    items: np.ndarray


def test_recommendations_object_selects_rows():
    relevant = sp.csr_array(np.eye(4))
    recs = FakeRecommendations(np.array([3, 1]), np.array([[3, 0], [0, 2]]))
    assert recall_at_k(recs, relevant, 1) == 0.5  # user 3 finds item 3, user 1 misses item 1
    assert evaluate_top_n(recs, relevant, ks=(2,))["n_users"] == 2


def test_relevant_from_ratings():
    ratings = sp.csr_array(np.array([[5, 3, 0], [4, 4.5, 1]], dtype=float))
    assert relevant_from_ratings(ratings).toarray().tolist() == [[1, 0, 0], [1, 1, 0]]
    assert relevant_from_ratings(ratings, threshold=1).nnz == 5
    with pytest.raises(ValueError, match="threshold"):
        relevant_from_ratings(ratings, threshold=float("nan"))


def interactions(n_users=200, n_items=50, seed=0):
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_users, n_items)) < rng.uniform(0.01, 0.4, size=(n_users, 1))) * rng.integers(
        1, 6, size=(n_users, n_items)
    )
    return sp.csr_array(dense.astype(float))


def test_per_user_split_fractions_and_values():
    X = interactions()
    train, test = per_user_split(X, 0.2, random_state=3)
    assert (train + test - X).count_nonzero() == 0  # disjoint, values kept
    assert train.multiply(test).nnz == 0
    counts = np.diff(X.indptr)
    held = np.diff(test.indptr)
    expected = np.clip(np.floor(0.2 * counts + 0.5), 1, np.maximum(counts - 1, 1)) * (counts >= 2)
    np.testing.assert_array_equal(held, expected)
    assert np.all(np.diff(train.indptr)[counts >= 1] >= 1)  # nobody loses every training item
    a, b = per_user_split(X, 0.2, random_state=3)
    assert (a != train).nnz == 0 and (b != test).nnz == 0
    c, _ = per_user_split(X, 0.2, random_state=4)
    assert (c != train).nnz > 0


def test_per_user_split_is_uniform_within_a_row():
    X = sp.csr_array(np.ones((4000, 5)))
    _, test = per_user_split(X, 0.2, random_state=0)  # one of the 5 items held out per user
    share = np.asarray(test.sum(axis=0)).ravel() / 4000
    np.testing.assert_allclose(share, 0.2, atol=0.03)  # 5 sigma is about 0.032


def test_per_user_split_min_interactions_and_bad_input():
    X = sp.csr_array(np.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=float))
    train, test = per_user_split(X, 0.5, random_state=0, min_interactions=3)
    assert np.diff(test.indptr).tolist() == [2, 0, 0]  # floor(0.5 * 3 + 1/2)
    assert (train + test != X).nnz == 0
    with pytest.raises(ValueError, match="test_fraction"):
        per_user_split(X, 1.0)
    with pytest.raises(ValueError, match="min_interactions"):
        per_user_split(X, min_interactions=1)
    with pytest.raises(TypeError, match="X must be a SciPy sparse"):
        per_user_split(X.toarray())
    with pytest.raises(ValueError, match="NaN"):
        per_user_split(sp.csr_array(np.array([[np.nan, 1.0]])))


def test_held_out_users_split():
    X = interactions(300, 40, seed=1)
    split = held_out_users_split(X, 50, random_state=0)
    assert isinstance(split, HeldOutUsers)
    assert split.test_users.size == 50 and np.all(np.diff(split.test_users) > 0)
    assert np.intersect1d(split.train_users, split.test_users).size == 0
    assert np.union1d(split.train_users, split.test_users).tolist() == list(range(300))
    assert (split.train != X[split.train_users]).nnz == 0
    assert (split.fold_in + split.target != X[split.test_users]).nnz == 0
    assert np.all(np.diff(split.target.indptr) >= 1) and np.all(np.diff(split.fold_in.indptr) >= 1)
    counts = np.diff(X[split.test_users].indptr)
    expected = np.clip(np.floor(0.2 * counts + 0.5), 1, counts - 1)
    np.testing.assert_array_equal(np.diff(split.target.indptr), expected)
    again = held_out_users_split(X, 50, random_state=0)
    np.testing.assert_array_equal(again.test_users, split.test_users)
    assert (again.target != split.target).nnz == 0


def test_held_out_users_need_eligible_users():
    X = sp.csr_array(np.array([[1, 1, 0], [1, 0, 0], [0, 1, 1]], dtype=float))
    assert set(held_out_users_split(X, 2, random_state=0).test_users.tolist()) == {0, 2}
    with pytest.raises(ValueError, match="at most the 2 users"):
        held_out_users_split(X, 3)
    with pytest.raises(ValueError, match="fold_in_fraction"):
        held_out_users_split(X, 1, fold_in_fraction=0)


@pytest.mark.slow
def test_large_evaluation_is_fast():
    rng = np.random.default_rng(0)
    n_users, n_items = 100_000, 20_000
    entries = (rng.integers(0, n_users, 10**6), rng.integers(0, n_items, 10**6))
    relevant = sp.csr_array((np.ones(10**6), entries), shape=(n_users, n_items))
    offsets = rng.integers(0, n_items, size=(n_users, 1))
    lists = (offsets + 197 * np.arange(100)) % n_items  # 100 distinct items per list
    start = time.perf_counter()
    result = evaluate_top_n(lists, relevant)
    elapsed = time.perf_counter() - start
    assert result["n_users"] == np.count_nonzero(np.diff(relevant.indptr))
    assert elapsed < 5.0  # about 0.6 s on one core; generous for a loaded CI machine
