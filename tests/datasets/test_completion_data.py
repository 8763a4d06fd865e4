"""Observed-entry data for tensor completion: validation, readers, splits, synthetic tensors."""

from __future__ import annotations

import numpy as np
import pytest

from dptensor.datasets.entries import (
    TensorEntries,
    check_entries,
    entries_from_dense,
    holdout_per_user,
    make_low_rank_completion,
    read_entries,
    read_movielens,
    read_recbole_inter,
    train_test_split_entries,
    write_entries,
)


def test_check_entries_errors():
    idx = np.array([[0, 1, 2], [1, 0, 0]])
    with pytest.raises(ValueError, match=r"indices\[:, 2\] must lie in \[0, 1\]"):
        check_entries(idx, [1.0, 2.0], (2, 2, 2))
    with pytest.raises(ValueError, match=r"indices\[:, 0\]"):
        check_entries([[-1, 0, 0]], [1.0], (2, 2, 2))
    with pytest.raises(ValueError, match="NaN"):
        check_entries(idx, [np.nan, 2.0], (2, 2, 3))
    with pytest.raises(ValueError, match="no observed entries"):
        check_entries(np.zeros((0, 3), dtype=int), [], (2, 2, 2))
    with pytest.raises(ValueError, match="values has 1 entries"):
        check_entries(idx, [1.0], (2, 2, 3))
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        check_entries([[0, 0]], [1.0], (2, 2, 2))
    with pytest.raises(ValueError, match="three dimensions"):
        check_entries(idx, [1.0, 2.0], (2, 2))
    with pytest.raises(ValueError, match="whole numbers"):
        check_entries([[0.5, 0, 0]], [1.0], (2, 2, 2))
    with pytest.raises(TypeError, match="shape"):
        check_entries(idx, [1.0, 2.0], 5)


def test_read_entries_csv_tsv_and_header(tmp_path):
    csv_file = tmp_path / "e.csv"
    csv_file.write_text("i,j,k,value\n0,1,2,3.5\n1,0,0,-1\n")
    entries = read_entries(csv_file)
    assert entries.shape == (2, 2, 3)
    np.testing.assert_array_equal(entries.indices, [[0, 1, 2], [1, 0, 0]])
    np.testing.assert_allclose(entries.values, [3.5, -1.0])
    tsv_file = tmp_path / "e.tsv"
    tsv_file.write_text("# comment\n1\t2\t3\t3.5\n2\t1\t1\t-1\n")
    same = read_entries(tsv_file, one_based=True, shape=(4, 4, 4))
    assert same.shape == (4, 4, 4)
    np.testing.assert_array_equal(same.indices, entries.indices)
    ws = tmp_path / "e.txt"
    ws.write_text("0 1 2 3.5\n1 0 0 -1\n")
    assert read_entries(ws).shape == (2, 2, 3)
    # round trip through write_entries
    out = write_entries(tmp_path / "w.csv", entries)
    again = read_entries(out, shape=entries.shape)
    np.testing.assert_array_equal(again.values, entries.values)
    bad = tmp_path / "bad.csv"
    bad.write_text("0,1,2\n")
    with pytest.raises(ValueError, match="4 columns"):
        read_entries(bad)
    with pytest.raises(ValueError, match="must lie in"):
        read_entries(csv_file, shape=(1, 2, 3))
    with pytest.raises(FileNotFoundError):
        read_entries(tmp_path / "missing.csv")


def test_read_movielens_days(tmp_path):
    day = 86_400
    t0 = 874_965_758
    rows = [(1, 10, 5, t0), (2, 3, 3, t0 + 100), (1, 3, 4, t0 + day + 5), (3, 1, 1, t0 + 5 * day)]
    path = tmp_path / "u.data"
    path.write_text("".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows))
    entries = read_movielens(path)
    assert entries.shape == (3, 10, 6)
    np.testing.assert_array_equal(entries.indices, [[0, 9, 0], [1, 2, 0], [0, 2, 1], [2, 0, 5]])
    np.testing.assert_array_equal(entries.values, [5, 3, 4, 1])
    assert read_movielens(path, n_users=943, n_items=1682).shape == (943, 1682, 6)
    bad = tmp_path / "bad.data"
    bad.write_text("1\t2\t3\n")
    with pytest.raises(ValueError, match="4 columns"):
        read_movielens(bad)


def test_entries_from_dense_round_trip():
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((3, 4, 5))
    dense[rng.random(dense.shape) < 0.5] = np.nan
    entries = entries_from_dense(dense)
    np.testing.assert_array_equal(entries.to_dense(), dense)
    assert len(entries) == np.count_nonzero(~np.isnan(dense))
    with pytest.raises(ValueError, match="no observed"):
        entries_from_dense(np.full((2, 2, 2), np.nan))
    with pytest.raises(ValueError, match="infinite"):
        entries_from_dense(np.full((2, 2, 2), np.inf))


def test_train_test_split():
    entries = TensorEntries(np.argwhere(np.ones((5, 5, 4), bool)), np.arange(100.0), (5, 5, 4))
    train, test = train_test_split_entries(entries, 0.2, random_state=3)
    assert len(train) == 80 and len(test) == 20
    assert set(train.values) | set(test.values) == set(entries.values)
    assert not set(train.values) & set(test.values)
    train2, _ = train_test_split_entries(entries, 0.2, random_state=3)
    np.testing.assert_array_equal(train.values, train2.values)
    with pytest.raises(ValueError, match="test_fraction"):
        train_test_split_entries(entries, 1.0)


@pytest.mark.parametrize("model", ["cp", "tucker"])
def test_synthetic_low_rank(model):
    prob = make_low_rank_completion((20, 20, 20), 3, model=model, snr=1.0, missing_ratio=0.5, random_state=0)
    assert len(prob.observed) == 4000
    assert prob.truth_tensor.min() == pytest.approx(0.0) and prob.truth_tensor.max() == pytest.approx(1.0)
    # variance SNR = 1: noise std equals the standard deviation of the scaled tensor
    assert prob.noise_std == pytest.approx(prob.truth_tensor.std())
    noise = prob.observed.values - prob.truth.values
    assert noise.std() == pytest.approx(prob.noise_std, rel=0.05)
    np.testing.assert_allclose(prob.truth_at(prob.observed.indices), prob.truth.values, atol=1e-12)
    # the observed cells are distinct
    assert np.unique(prob.observed.indices, axis=0).shape[0] == 4000
    if model == "tucker":
        for f in prob.factors:
            np.testing.assert_allclose(f.T @ f, np.eye(3), atol=1e-12)
    else:
        for f in prob.factors:
            np.testing.assert_allclose(np.linalg.norm(f, axis=0), 1.0)
    again = make_low_rank_completion((20, 20, 20), 3, model=model, random_state=0)
    np.testing.assert_array_equal(again.observed.values, prob.observed.values)


def test_synthetic_sampled_movielens_shape():
    prob = make_low_rank_completion((943, 1682, 212), 5, n_observed=20_000, snr=4.0, random_state=1)
    assert prob.truth_tensor is None
    assert len(prob.observed) == 20_000
    assert np.unique(prob.observed.indices, axis=0).shape[0] == 20_000
    assert prob.truth.values.min() == pytest.approx(0.0) and prob.truth.values.max() == pytest.approx(1.0)


def test_synthetic_errors():
    with pytest.raises(ValueError, match="missing_ratio"):
        make_low_rank_completion((4, 4, 4), 2, missing_ratio=1.0)
    with pytest.raises(ValueError, match="rank"):
        make_low_rank_completion((4, 4, 4), 0)
    with pytest.raises(ValueError, match="snr"):
        make_low_rank_completion((4, 4, 4), 2, snr=0)
    with pytest.raises(ValueError, match="model"):
        make_low_rank_completion((4, 4, 4), 2, model="tt")


def test_read_recbole_inter_matches_read_movielens(tmp_path):
    """RecBole's atomic .inter format (as in recbole/dataset_example/ml-100k) gives u.data's tensor."""
    rng = np.random.default_rng(0)
    t0 = 874_965_758
    rows = [(int(u), int(i), int(r), t0 + int(s)) for u, i, r, s in
            zip(rng.integers(1, 8, 40), rng.integers(1, 12, 40), rng.integers(1, 6, 40),
                rng.integers(0, 6 * 86_400, 40), strict=True)]
    inter = tmp_path / "toy.inter"
    inter.write_text("user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
                     + "".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows))
    udata = tmp_path / "u.data"
    udata.write_text("".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows))
    got, want = read_recbole_inter(inter), read_movielens(udata)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.indices, want.indices)  # same rows, same (file) order
    np.testing.assert_array_equal(got.values, want.values)
    # fields in another order, an extra field, and declared mode sizes
    shuffled = tmp_path / "other.inter"
    shuffled.write_text("timestamp:float\tuser_id:token\tlabel:float\trating:float\titem_id:token\n"
                        + "".join(f"{t}\t{u}\t1\t{r}\t{i}\n" for u, i, r, t in rows))
    other = read_recbole_inter(shuffled, n_users=10, n_items=20)
    assert other.shape == (10, 20, want.shape[2])
    np.testing.assert_array_equal(other.indices, want.indices)
    bad = tmp_path / "bad.inter"
    bad.write_text("user_id\titem_id\trating\ttimestamp\n1\t2\t3\t4\n")
    with pytest.raises(ValueError, match="RecBole"):
        read_recbole_inter(bad)
    ragged = tmp_path / "ragged.inter"
    ragged.write_text("user_id:token\titem_id:token\trating:float\ttimestamp:float\n1\t2\t3\n")
    with pytest.raises(ValueError, match="fields"):
        read_recbole_inter(ragged)


def test_holdout_per_user_is_the_ua_ub_rule():
    # user u's ratings appear interleaved with others'; the rule counts each user's in file order
    users = np.array([0, 1, 0, 2, 1, 0, 0, 1, 2, 0])
    entries = TensorEntries(np.column_stack([users, np.arange(10) % 4, np.zeros(10, int)]),
                            np.arange(10.0), (3, 4, 1))
    train, test = holdout_per_user(entries, 1, 2)
    # user 0: positions 0, 2 held out; user 1: 1, 4; user 2: 3, 8
    np.testing.assert_array_equal(np.sort(test.values), [0, 1, 2, 3, 4, 8])
    assert len(train) + len(test) == 10 and not set(train.values) & set(test.values)
    _, second = holdout_per_user(entries, 3, 4)  # ub-style: the next ratings of each user
    np.testing.assert_array_equal(np.sort(second.values), [5, 6, 7])
    with pytest.raises(ValueError, match="stop"):
        holdout_per_user(entries, 3, 2)
