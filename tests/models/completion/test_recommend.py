"""Top-N recommendations (``TensorCompletion.recommend``, ``recommend_folded``, ``complete --recommend``).

Checked against a brute-force ranking of the completed tensor, against ground truth on a planted
low-rank ratings tensor, for the exclusion of rated items, the clamping, ties, the left-over slots,
the errors, and under user-level joint DP for what each user's list may depend on.
"""

from __future__ import annotations

import csv
import warnings

import numpy as np
import pytest

from dptensor.cli import main
from dptensor.models import TensorCompletion
from dptensor.models.completion import CompletionOptions, fold_in_users, recommend_folded
from dptensor.models.completion import recommend as recommend_module
from dptensor.privacy import PrivacyWarning, insecure_test_noise

SHAPE = (40, 25, 3)


def _planted(seed: int = 0, density: float = 0.4, shape: tuple[int, int, int] = SHAPE):
    """1..5 ratings from a planted rank-2 user x item structure (the same every day), and the truth."""
    rng = np.random.default_rng(seed)
    users, items, days = shape
    truth = 3.0 + 0.8 * rng.normal(size=(users, 2)) @ rng.normal(size=(2, items)) / np.sqrt(2)
    idx = np.argwhere(rng.random(shape) < density)
    values = np.clip(truth[idx[:, 0], idx[:, 1]] + rng.normal(0, 0.3, len(idx)), 1, 5)
    return idx, values, truth


def _brute_force(model, users, n, exclude, day):
    """Each user's items sorted by (completed value before clamping desc, item asc), rated ones left out."""
    seen = set(map(tuple, exclude[:, :2].tolist())) if exclude is not None else set()
    cells = np.array([[u, j, day] for u in users for j in range(model.shape_[1])])
    values = model._completed(cells).reshape(len(users), model.shape_[1])
    expected = []
    for row, user in zip(values, users, strict=True):
        ranked = sorted((-value, j) for j, value in enumerate(row) if (user, j) not in seen)
        expected.append([j for _, j in ranked[:n]] + [-1] * (n - min(n, len(ranked))))
    return np.array(expected)


@pytest.fixture(scope="module")
def fitted():
    idx, values, truth = _planted()
    model = TensorCompletion(2, value_range=(1, 5), random_state=0, verbose=False,
        options=CompletionOptions(reg=1.0))
    return model.fit(idx, values, SHAPE), idx, values, truth


@pytest.mark.parametrize("day", [None, 0, 1])
def test_recommend_equals_the_brute_force_ranking(fitted, day):
    model, idx, _, _ = fitted
    top = model.recommend(8, exclude=idx, day=day)
    expected = _brute_force(model, np.arange(SHAPE[0]), 8, idx, SHAPE[2] - 1 if day is None else day)
    np.testing.assert_array_equal(top.items, expected)
    assert top.day == (SHAPE[2] - 1 if day is None else day)
    assert (top.items == -1).any() and (top.items != -1).all(axis=1).any()  # both kinds of user occur
    np.testing.assert_array_equal(np.isnan(top.predictions), top.items == -1)
    # the reported values are the clamped predictions at those cells, best first
    for user, items, reported in zip(top.users, top.items, top.predictions, strict=True):
        cells = np.array([[user, j, top.day] for j in items if j >= 0]).reshape(-1, 3)
        np.testing.assert_allclose(reported[:len(cells)], model.predict(cells))
        assert np.all(np.diff(model._completed(cells)) <= 0)


def test_rated_items_are_never_recommended_and_blocks_do_not_matter(fitted, monkeypatch):
    model, idx, _, _ = fitted
    whole = model.recommend(6, exclude=idx)
    rated = set(map(tuple, idx[:, :2].tolist()))
    for user, items in zip(whole.users, whole.items, strict=True):
        assert not {(int(user), int(j)) for j in items} & rated
    monkeypatch.setattr(recommend_module, "CELLS_PER_BLOCK", 3 * SHAPE[1])  # blocks of three users
    blocked = model.recommend(6, exclude=idx)
    np.testing.assert_array_equal(blocked.items, whole.items)
    np.testing.assert_array_equal(blocked.predictions, whole.predictions)


def test_recommendations_find_the_planted_favourites():
    """Ground truth: the recommended unrated items are among each user's truly best unrated ones."""
    idx, values, truth = _planted(seed=1, shape=(200, 40, 1), density=0.3)
    model = TensorCompletion(2, value_range=(1, 5), random_state=0, verbose=False)
    top = model.fit(idx, values, (200, 40, 1)).recommend(5, exclude=idx)
    rated = np.zeros(truth.shape, dtype=bool)
    rated[idx[:, 0], idx[:, 1]] = True
    hits, random_hits = [], []
    for user, items in zip(top.users, top.items, strict=True):
        unrated = np.flatnonzero(~rated[user])
        best = set(unrated[np.argsort(-truth[user, unrated])[:5]].tolist())
        hits.append(len(best & set(items.tolist())) / 5)
        random_hits.append(5 / len(unrated))
    # a random pick of 5 of ~28 unrated items holds ~0.18 of the best 5; the fit holds far more
    assert np.mean(hits) > 0.7 > 3 * np.mean(random_hits)


def test_ranking_reads_the_values_before_clamping():
    """Predictions above the range's top all report 5, yet keep their order."""
    model = TensorCompletion(None, value_range=(1, 5), verbose=False, options=CompletionOptions(reg=1.0))
    idx = np.array([[0, j, 0] for j in range(4)] + [[1, j, 0] for j in range(4)])
    values = np.array([5, 5, 5, 5, 1, 5, 5, 5], dtype=float)
    model.fit(idx, values, (3, 4, 1))
    model.mean_ = 4.0
    model.biases_[1][:] = [0.5, 3.0, 2.0, -1.0]  # items 1 and 2 above 5, item 0 at 4.5
    top = model.recommend(3, users=[2])
    np.testing.assert_array_equal(top.items, [[1, 2, 0]])
    np.testing.assert_array_equal(top.predictions, [[5.0, 5.0, 4.5]])


def test_ties_go_to_the_smaller_item_and_left_over_slots_are_marked():
    model = TensorCompletion(None, verbose=False, options=CompletionOptions(reg=1.0)).fit(
        np.array([[0, 0, 0], [1, 1, 0]]), np.array([3.0, 3.0]), (2, 5, 1))
    model.biases_[1][:] = 0.0  # every item ties
    top = model.recommend(3, exclude=np.array([[0, 1, 0], [0, 3, 0], [0, 4, 0]]))
    np.testing.assert_array_equal(top.items, [[0, 2, -1], [0, 1, 2]])
    assert np.isnan(top.predictions[0, 2]) and np.all(np.isfinite(top.predictions[1]))
    assert top.rows()[2] == (0, 3, -1, pytest.approx(np.nan, nan_ok=True))


def test_users_are_listed_in_the_order_asked(fitted):
    model, idx, _, _ = fitted
    everyone = model.recommend(4, exclude=idx)
    some = model.recommend(4, users=[7, 2, 30], exclude=idx)
    np.testing.assert_array_equal(some.users, [7, 2, 30])
    np.testing.assert_array_equal(some.items, everyone.items[[7, 2, 30]])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(n=0), ValueError, "n must be between 1 and the number of items"),
        (dict(n=26), ValueError, r"number of items \(25\)"),
        (dict(n=2.5), TypeError, "n must be an integer"),
        (dict(users=[0, 40]), ValueError, r"users must lie in \[0, 39\]"),
        (dict(users=[1, 1]), ValueError, "users must be distinct"),
        (dict(users=[[1]]), ValueError, "1-D"),
        (dict(users=[0.5]), TypeError, "users must hold integers"),
        (dict(day=3), ValueError, r"day must lie in \[0, 2\]"),
        (dict(exclude=np.zeros((2, 2), dtype=int)), ValueError, r"exclude must have shape \(n, 3\)"),
    ],
)
def test_bad_arguments_are_named(fitted, kwargs, error, match):
    with pytest.raises(error, match=match):
        fitted[0].recommend(**kwargs)


def test_an_unfitted_model_refuses():
    from dptensor._validation import NotFittedError

    with pytest.raises(NotFittedError):
        TensorCompletion(2).recommend()


def test_folded_in_users_get_the_brute_force_ranking_from_the_item_side(fitted):
    model, idx, values, _ = fitted
    new_idx, new_values, _ = _planted(seed=5, shape=(4, 25, 3))
    new_idx[:, 0] += 500  # their own labels
    folded = fold_in_users(model, new_idx, new_values)
    top = recommend_folded(model, folded, 4, exclude=new_idx)
    np.testing.assert_array_equal(top.users, folded.users)
    from dptensor.models.completion.fold_in import _folded_values

    seen = set(map(tuple, new_idx[:, :2].tolist()))
    for user, items in zip(top.users, top.items, strict=True):
        cells = np.array([[user, j, SHAPE[2] - 1] for j in range(SHAPE[1])])
        scores = _folded_values(model, folded, cells)
        ranked = sorted((-s, j) for j, s in enumerate(scores) if (int(user), j) not in seen)
        assert items.tolist() == [j for _, j in ranked[:4]] + [-1] * max(0, 4 - len(ranked))
    # the training users' own rows are not read: removing them changes nothing
    stripped = TensorCompletion(2).set_params(**model.get_params())
    stripped.__dict__.update({k: v for k, v in vars(model).items() if k.endswith("_")})
    stripped.factors_ = [np.full_like(model.factors_[0], np.nan), *model.factors_[1:]]
    stripped.biases_ = [np.full_like(model.biases_[0], np.nan), *model.biases_[1:]]
    again = recommend_folded(stripped, folded, 4, exclude=new_idx)
    np.testing.assert_array_equal(again.items, top.items)
    # a label with no ratings gets the prior row: mean + item offsets
    prior = recommend_folded(model, folded, 3, users=[999])
    offsets = model.mean_ + model.biases_[1] + model.biases_[2][SHAPE[2] - 1]
    np.testing.assert_array_equal(prior.items[0], np.argsort(-offsets, kind="stable")[:3])


def test_user_level_list_depends_on_the_user_and_the_release_only():
    """Joint DP: with the same noise, changing another user's ratings moves user 0's list only through
    the release; with the release fixed, user 0's list is a function of user 0's ratings alone."""
    idx, values, _ = _planted(seed=3, shape=(30, 12, 1), density=0.5)
    other = idx[:, 0] == 5

    def fit(indices, vals):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            return TensorCompletion(2, privacy="als", neighbouring="user", epsilon=1.0, value_range=(1, 5),
                                    noise=insecure_test_noise(4), random_state=0, verbose=False
                                    ).fit(indices, vals, (30, 12, 1))

    model = fit(idx, values)
    top = model.recommend(4, exclude=idx)
    # user 0's row is refitted from user 0's ratings and the released item side: fold it in again
    own = idx[:, 0] == 0
    folded = fold_in_users(model, idx[own], values[own])
    again = recommend_folded(model, folded, 4, exclude=idx[own])
    np.testing.assert_array_equal(again.items[0], top.items[0])
    # a neighbour without user 5's ratings: the list changes at most through the release (the
    # same noise), and user 5's own list is then that of a user with no ratings
    neighbour = fit(idx[~other], values[~other])
    lonely = neighbour.recommend(4, users=[5], exclude=idx[~other])
    prior = recommend_folded(neighbour, fold_in_users(neighbour, idx[own], values[own]), 4, users=[77])
    np.testing.assert_array_equal(lonely.items, prior.items)


def _write(path, idx, values):
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows([(i, j, v) for (i, j, _), v in zip(idx.tolist(), values.tolist(),
                                                                         strict=True)])


def test_cli_writes_every_users_top_items_in_the_files_base(tmp_path, capsys):
    idx, values, _ = _planted(seed=2, shape=(12, 8, 1), density=0.5)
    train = tmp_path / "ratings.csv"
    _write(train, idx + np.array([1, 1, 0]), values)
    out = tmp_path / "top.csv"
    code = main(["complete", str(train), "--one-based", "--rank", "2", "--reg", "1", "--seed", "0",
                 "--quiet", "--recommend", str(out), "--top", "3"])
    assert code == 0
    assert "wrote the top 3 unrated items of each of the 12 users" in capsys.readouterr().out
    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 12 * 3 and rows[0].keys() == {"user", "rank", "item", "prediction"}
    rated = {(i + 1, j + 1) for i, j, _ in idx.tolist()}
    listed = [(int(r["user"]), int(r["item"])) for r in rows if r["item"]]
    assert listed and not set(listed) & rated
    assert {int(r["user"]) for r in rows} == set(range(1, 13))
    assert all(1 <= int(item) <= 8 for _, item in listed)
    # the same lists as the library's
    model = TensorCompletion(2, random_state=0, verbose=False, options=CompletionOptions(reg=1.0))
    model.fit(idx, values, (12, 8, 1))
    expected = model.recommend(3, exclude=idx)
    got = np.array([int(r["item"]) - 1 if r["item"] else -1 for r in rows]).reshape(12, 3)
    np.testing.assert_array_equal(got, expected.items)


def test_cli_top_without_recommend_and_too_many_items_are_refused(tmp_path, capsys):
    idx, values, _ = _planted(seed=2, shape=(6, 4, 1), density=0.6)
    train = tmp_path / "ratings.csv"
    _write(train, idx, values)
    assert main(["complete", str(train), "--rank", "1", "--top", "3"]) == 2
    assert "--top" in capsys.readouterr().err
    code = main(["complete", str(train), "--rank", "1", "--quiet", "--recommend", str(tmp_path / "t.csv"),
                 "--top", "5"])
    error = capsys.readouterr().err
    assert code == 2 and "--top must be between 1 and the number of items (4), got 5" in error
    # with a declared --shape the refusal comes before any file is read (here: none exists)
    code = main(["complete", str(tmp_path / "missing.csv"), "--shape", "6", "4", "--rank", "1", "--quiet",
                 "--recommend", str(tmp_path / "t.csv"), "--top", "5"])
    assert code == 2 and "--top must be between 1" in capsys.readouterr().err
    code = main(["complete", str(train), "--rank", "1", "--recommend", str(train)])
    assert code == 2 and "--recommend" in capsys.readouterr().err


def test_cli_user_level_file_has_every_users_slots_whatever_they_rated(tmp_path, monkeypatch):
    """Under --neighbouring user the file's size is U x N, even for a user who rated every item."""
    from dptensor.cli import observe_command
    from dptensor.privacy.audit import observable_differences

    idx, values, _ = _planted(seed=4, shape=(10, 6, 1), density=0.4)
    full = np.array([[3, j, 0] for j in range(6)])  # user 3 rates every item in the neighbour
    keep = idx[:, 0] != 3
    seen = []
    for tag, (i, v) in {"a": (idx[keep], values[keep]),
                        "b": (np.vstack([idx[keep], full]), np.r_[values[keep], np.full(6, 5.0)])}.items():
        work = tmp_path / tag
        work.mkdir()
        _write(work / "r.csv", i, v)
        argv = ["complete", "r.csv", "--shape", "10", "6", "--rank", "2", "--privacy", "als",
                "--neighbouring", "user", "--epsilon", "1", "--value-range", "1", "5", "--seed", "0",
                "--quiet", "--recommend", "top.csv", "--top", "4"]
        monkeypatch.chdir(work)  # relative paths: both runs print the same
        seen.append(observe_command(argv, work))
        rows = list(csv.DictReader(open(work / "top.csv")))
        assert len(rows) == 10 * 4
        assert ("joint DP" in seen[-1].printed) and "observed entries" not in seen[-1].printed
    assert seen[0].result == seen[1].result == 0
    assert not observable_differences(seen[0], seen[1])
    assert all(not r["item"] for r in rows if r["user"] == "3")  # user 3 rated everything: empty slots


def test_a_non_finite_prediction_ranks_last_and_breaks_no_other_list(fitted):
    model, idx, _, _ = fitted
    broken = TensorCompletion(2).set_params(**model.get_params())
    broken.__dict__.update(vars(model))
    broken.factors_ = [model.factors_[0].copy(), model.factors_[1].copy(), model.factors_[2]]
    broken.factors_[1][4] = np.nan  # item 4: NaN for every user
    broken.factors_[0][3] = np.inf  # user 3: +/-inf wherever the item factors are not zero
    top = broken.recommend(SHAPE[1], users=[0, 1, 2])
    assert np.all(top.items[:, -1] == 4) and np.isnan(top.predictions[:, -1]).all()
    np.testing.assert_array_equal(top.items[:, :-1], model.recommend(SHAPE[1] - 1, users=[0, 1, 2],
                                                                     exclude=np.array([[0, 4, 0], [1, 4, 0],
                                                                                       [2, 4, 0]])).items)
    assert broken.recommend(5, users=[3]).items.min() >= 0  # infinite values still give a full list


def test_the_default_list_fits_a_small_catalogue_and_results_compare_by_identity():
    model = TensorCompletion(None, verbose=False, options=CompletionOptions(reg=1.0)).fit(
        np.array([[0, 0, 0], [1, 1, 0]]), np.array([3.0, 4.0]), (2, 4, 1))
    top = model.recommend()
    assert top.items.shape == (2, 4) and top == top and top != model.recommend()
