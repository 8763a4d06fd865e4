"""``dptensor recommend``: fit, top, plan and evaluate; a private fit shows nothing beyond its release."""

from __future__ import annotations

import csv
import json
import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from dptensor.cli import main, observe_command
from dptensor.models.recommend.estimator import METHODS
from dptensor.models.recommend.persistence import read_recommender_file
from dptensor.privacy import BudgetLedger
from dptensor.privacy.audit import observable_differences

N_USERS, N_ITEMS = 40, 12
ITEMS = [f"m{j}" for j in range(N_ITEMS)]


def _rows(seed: int = 0) -> list[list[bool]]:
    """Two taste groups over two halves of the items."""
    rng = np.random.default_rng(seed)
    group = rng.integers(2, size=N_USERS)
    half = (np.arange(N_ITEMS) < N_ITEMS // 2).astype(int)
    p = np.where(group[:, None] == half[None, :], 0.6, 0.1)
    return (rng.random((N_USERS, N_ITEMS)) < p).tolist()


def _write(path: Path, rows: list[list[bool]], extra: str = "", items: list[str] = ITEMS) -> Path:
    """``user,item,value`` lines: value 1 for an interaction; a user without any gets one line of value 0
    (listed, so the number of users stays public, but no interaction under ``--threshold 1``)."""
    lines = ["user,item,value"]
    for u, row in enumerate(rows):
        chosen = [items[j] for j, on in enumerate(row) if on]
        lines += [f"u{u},{item},1" for item in chosen] or [f"u{u},{items[0]},0"]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


@pytest.fixture()
def files(tmp_path):
    plays = _write(tmp_path / "plays.csv", _rows())
    (tmp_path / "items.txt").write_text("\n".join(ITEMS) + "\n")
    (tmp_path / "new.csv").write_text("user,item\nann,m0\nann,m1\nann,zzz\nbob,m7\n")
    return tmp_path, plays


def _run(capsys, *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


# ----------------------------------------------------------------------------- fit and top


def test_fit_then_top_lists_new_users_with_original_ids(files, capsys):
    tmp, plays = files
    code, out, _ = _run(capsys, "recommend", "fit", plays, "--threshold", "1", "--out", tmp / "m.npz", "-q")
    assert code == 0
    assert f"ease model: {N_USERS} users, {N_ITEMS} items, " in out and "interactions" in out
    saved = read_recommender_file(tmp / "m.npz")
    assert saved.item_ids.tolist() == sorted(ITEMS)  # the file's ids, in sorted order
    assert "value is >= 1" in saved.binarisation
    code, out, _ = _run(capsys, "recommend", "top", tmp / "m.npz", "--for", tmp / "new.csv", "--top", "3",
                        "--out", tmp / "top.csv")
    assert code == 0
    assert "each of the 2 users" in out and "1 interactions with items the model does not know" in out
    with open(tmp / "top.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["user", "rank", "item", "score"]
    assert [r[0] for r in rows[1:]] == ["ann"] * 3 + ["bob"] * 3
    assert [r[1] for r in rows[1:]] == ["1", "2", "3"] * 2
    ann = [r[2] for r in rows[1:4]]
    assert set(ann) <= set(ITEMS) and not {"m0", "m1"} & set(ann)  # their own items are left out
    # the same lists as the model's recommend_for on the users' rows
    model = saved.model
    ids = list(saved.item_ids)
    x = np.zeros((2, N_ITEMS))
    x[0, [ids.index("m0"), ids.index("m1")]] = 1
    x[1, ids.index("m7")] = 1
    expected = model.recommend_for(x, 3)
    assert [ids[i] for i in expected.items.ravel()] == [r[2] for r in rows[1:]]


def test_top_fills_every_slot_and_refuses_a_too_large_top(files, capsys):
    tmp, plays = files
    assert _run(capsys, "recommend", "fit", plays, "--method", "popularity", "--out", tmp / "m.npz")[0] == 0
    every = tmp / "every.csv"
    every.write_text("user,item\n" + "".join(f"cat,{item}\n" for item in ITEMS[:-1]))
    code, _, _ = _run(capsys, "recommend", "top", tmp / "m.npz", "--for", every, "--top", "3", "--out",
                      tmp / "t.csv")
    assert code == 0
    rows = list(csv.reader(open(tmp / "t.csv", newline="")))
    assert rows[1][2:] != ["", ""] and rows[2][2:] == ["", ""] and rows[3][2:] == ["", ""]
    code, _, err = _run(capsys, "recommend", "top", tmp / "m.npz", "--for", every, "--top", "13", "--out",
                        tmp / "t.csv")
    assert code == 2 and "--top must be an integer from 1 to the number of items (12)" in err


@pytest.mark.parametrize(("extra", "message"), [
    (["--epsilon", "1"], "--epsilon needs a public item catalogue: pass --items ITEMFILE"),
    (["--epsilon", "1", "--items", "items.txt", "--catalogue", "select"], "exclude each other"),
    (["--epsilon", "1", "--catalogue", "public"], "--catalogue public needs the public list"),
    (["--epsilon", "1", "--catalogue", "select"],
     "--catalogue select needs --method popularity, ease or ials"),
    (["--delta", "1e-6"], "--delta: privacy options need --epsilon"),
    (["--ledger", "b.ledger"], "releases nothing private"),
    (["--factors", "3"], "--factors sets the implicit ALS factors"),
    (["--set", "nope=1"], "RecommenderOptions has no option 'nope'"),
    (["--set", "ridge_scale=abc"], "--set ridge_scale: expected a number"),
    (["--set", "ridge_scale"], "--set expects KEY=VALUE"),
    (["--set", "ridge_scale=-1"], "options.ridge_scale must be a positive number"),
    (["--report", "r.txt"], "--report r.txt: the file name must end in"),
])
def test_fit_refusals_are_one_line_and_write_nothing(files, capsys, monkeypatch, extra, message):
    tmp, plays = files
    monkeypatch.chdir(tmp)
    code, out, err = _run(capsys, "recommend", "fit", plays, "--out", "m.npz", *extra)
    assert code == 2
    assert message in err and err.count("\n") == 1 and err.startswith("dptensor recommend fit: error:")
    assert not (tmp / "m.npz").exists()


def test_fit_refuses_an_out_that_is_not_npz_or_an_input(files, capsys):
    tmp, plays = files
    code, _, err = _run(capsys, "recommend", "fit", plays, "--out", tmp / "m.csv")
    assert code == 2 and "must end in .npz" in err
    code, _, err = _run(capsys, "recommend", "top", plays, "--for", plays, "--out", plays)
    assert code == 2 and "would overwrite that input" in err


def test_set_options_reach_the_model(files, capsys):
    tmp, plays = files
    assert _run(capsys, "recommend", "fit", plays, "--method", "ials", "--factors", "2", "--set",
                "iterations=1", "--set", "alpha=5", "--seed", "0", "--out", tmp / "m.npz", "-q")[0] == 0
    model = read_recommender_file(tmp / "m.npz").model
    assert model.method_ == "ials" and model.n_factors == 2
    assert model.options.iterations == 1 and model.options.alpha == 5


# ----------------------------------------------------------------------------- private fit


def _private(plays, out, *extra) -> list[str]:
    return ["recommend", "fit", str(plays), "--threshold", "1", "--epsilon", "1", "--delta", "1e-6",
            "--items", "items.txt", "--method", "ease", "--out", str(out), *map(str, extra)]


def test_private_fit_prints_the_release_only_and_drops_unlisted_items_silently(files, capsys, monkeypatch):
    tmp, plays = files
    monkeypatch.chdir(tmp)
    code, out, err = _run(capsys, *_private(plays, "p.npz"))
    assert code == 0
    assert f"private ease model: {N_USERS} users, {N_ITEMS} items (the public list)" in out
    assert "privacy: (1, 1e-06)-DP under the 'user' relation" in out and "joint DP" in out
    assert "interactions" not in out.replace("row of interactions", "") and " s\n" not in out
    saved = read_recommender_file(tmp / "p.npz")
    assert saved.item_ids.tolist() == ITEMS  # the order of --items
    assert saved.model.guarantee_.neighbouring == "user"
    # interactions with items outside the public list: dropped, and nothing says how many
    more = _write(tmp / "more.csv", _rows(), extra="u0,unlisted,1\nu3,unlisted,1\nu3,other,1\n")
    code, out_more, err_more = _run(capsys, *_private(more, "q.npz"))
    assert code == 0
    assert out_more.replace("q.npz", "p.npz") == out and err_more == err
    assert read_recommender_file(tmp / "q.npz").header["guarantee"] == saved.header["guarantee"]


def test_private_ials_fit_saves_a_model_that_lists_new_users(files, capsys, monkeypatch):
    # every model method has a private version: the private implicit ALS fits, saves its released item
    # factors and the guarantee, and lists new users from their own file
    from dptensor.models.recommend.private_estimator import PRIVATE_METHODS

    assert set(PRIVATE_METHODS) == set(METHODS)
    tmp, plays = files
    monkeypatch.chdir(tmp)
    args = _private(plays, "i.npz")
    args[args.index("--method") + 1] = "ials"
    code, out, _ = _run(capsys, *args, "--factors", "3", "--seed", "0")
    assert code == 0 and "private ials model" in out and "'user' relation" in out
    saved = read_recommender_file(tmp / "i.npz").model
    assert saved.method_ == "ials" and saved.item_side_.factors.shape == (N_ITEMS, 3)
    assert saved.guarantee_.details["ials"]["clip"] == 0.1
    Path("new.csv").write_text("user,item\nann,m0\nann,m1\n")
    code, _, err = _run(capsys, "recommend", "top", "i.npz", "--for", "new.csv", "--top", "2", "--out",
                        "t.csv")
    assert code == 0, err
    rows = list(csv.reader(open("t.csv", newline="")))
    listed = [r[2] for r in rows[1:]]
    assert [r[0] for r in rows[1:]] == ["ann"] * 2 and set(listed) <= set(ITEMS)
    assert not {"m0", "m1"} & set(listed)  # their own items are left out


@contextmanager
def _inside(folder: Path):
    here = os.getcwd()
    folder.mkdir(parents=True, exist_ok=True)
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(here)


def _model_profile(path: Path) -> tuple:
    """A model file by structure: its header (every entry public) and its arrays' names, shapes, dtypes."""
    with np.load(path, allow_pickle=False) as archive:
        header = json.loads(str(archive["header"]))
        arrays = tuple(sorted((key, archive[key].shape, str(archive[key].dtype))
                              for key in archive.files if key != "header"))
    return header, arrays


def _observe_fit_and_top(rows: list[list[bool]], folder: Path, fit_extra: list[str],
                         items: list[str] = ITEMS) -> tuple:
    """Run a private fit and a top on ``rows`` inside ``folder`` (relative paths, as a user would)."""
    with _inside(folder):
        _write(Path("plays.csv"), rows, items=items)
        Path("items.txt").write_text("\n".join(ITEMS) + "\n")
        Path("new.csv").write_text("user,item\nann,m0\nann,m1\nbob,m7\n")
        Path("out").mkdir()
        fit = observe_command(["recommend", "fit", "plays.csv", "--threshold", "1", "--epsilon", "1",
                               "--delta", "1e-6", "--method", "ease", "--out", "out/model.npz", "--report",
                               "out/fit.json", *fit_extra], Path("out"))
        top = observe_command(["recommend", "top", "out/model.npz", "--for", "new.csv", "--top", "4", "--out",
                               "out/top.csv"], Path("out"))
        return fit, top, _model_profile(Path("out/model.npz"))


def _neighbours() -> dict[str, tuple[list[list[bool]], list[list[bool]]]]:
    rows = _rows()
    empty = [list(r) for r in rows]
    empty[0] = [False] * N_ITEMS
    every = [list(r) for r in rows]
    every[0] = [True] * N_ITEMS
    one = [list(r) for r in rows]
    one[0] = [j == 5 for j in range(N_ITEMS)]
    return {"empty-row": (rows, empty), "every-item": (rows, every), "one-item": (empty, one)}


@pytest.mark.parametrize("pair", ["empty-row", "every-item", "one-item"])
def test_private_fit_and_top_look_alike_on_neighbouring_files(tmp_path, pair):
    first, second = _neighbours()[pair]
    a_fit, a_top, a_model = _observe_fit_and_top(first, tmp_path / "a", ["--items", "items.txt"])
    b_fit, b_top, b_model = _observe_fit_and_top(second, tmp_path / "b", ["--items", "items.txt"])
    assert a_fit.result == 0 and a_top.result == 0
    assert observable_differences(a_fit, b_fit) == []
    assert observable_differences(a_top, b_top) == []
    assert a_model == b_model  # the header exactly (guarantee, sizes, parameters), the arrays' shapes


def test_select_fit_header_does_not_count_the_files_items(tmp_path):
    """Under --catalogue select the columns are the distinct items of the file (private): their number
    must not reach the model file (the guarantee's details, the item side's columns) nor the printed text."""
    items = [*ITEMS, "only-mine"]  # an item that only user 0 of the second file has
    first = [[*row, False] for row in _rows()]
    second = [list(row) for row in first]
    first[0] = [False] * len(items)
    second[0] = [True] * len(items)
    select = ["--catalogue", "select", "--method", "popularity"]
    a = _observe_fit_and_top(first, tmp_path / "a", select, items)
    b = _observe_fit_and_top(second, tmp_path / "b", select, items)
    assert a[0].result == 0 and b[0].result == 0
    assert observable_differences(a[0], b[0]) == [] and observable_differences(a[1], b[1]) == []
    header_a, header_b = a[2][0], b[2][0]
    for header in (header_a, header_b):
        header.pop("n_items")  # the number selected: the release
    assert header_a == header_b
    assert header_a["item_side"]["n_columns"] is None


def test_private_fit_is_charged_and_refused_past_the_budget(files, capsys, monkeypatch):
    tmp, plays = files
    monkeypatch.chdir(tmp)
    assert _run(capsys, "budget", "create", "b.ledger", "--epsilon", "1.2", "--delta", "1e-5")[0] == 0
    assert _run(capsys, *_private(plays, "p.npz", "--ledger", "b.ledger"))[0] == 0
    code, _, err = _run(capsys, *_private(plays, "q.npz", "--ledger", "b.ledger"))
    assert code == 2 and "budget" in err
    assert not (tmp / "q.npz").exists()


@pytest.mark.parametrize("method", ["auto", "popularity", "ease", "ials"])
def test_a_ledger_that_cannot_pay_refuses_before_the_file_is_read(files, capsys, monkeypatch, method):
    # the plays file's last line is broken: reading it would fail there; the ledger is asked first
    # (issue 53, finding 3), from the fit's parameters alone, so the refusal names the budget
    tmp, plays = files
    monkeypatch.chdir(tmp)
    bad = tmp / "bad.csv"
    bad.write_text(plays.read_text() + "u9\n")
    assert _run(capsys, "budget", "create", "small.ledger", "--epsilon", "0.5", "--delta", "1e-5")[0] == 0
    assert _run(capsys, "budget", "create", "large.ledger", "--epsilon", "50", "--delta", "1e-5")[0] == 0
    args = _private(bad, "q.npz", "--ledger", "small.ledger")
    args[args.index("--method") + 1] = method
    code, _, err = _run(capsys, *args)
    assert code == 2 and "privacy budget exceeded" in err and "line" not in err, err
    # a ledger that can pay: the broken file is refused by its reader, and nothing is charged
    args[args.index("small.ledger")] = "large.ledger"
    code, _, err = _run(capsys, *args)
    assert code == 2 and "privacy budget" not in err, err
    assert BudgetLedger("large.ledger").spent() == 0.0
    assert not (tmp / "q.npz").exists()


def test_fit_reports(files, capsys, monkeypatch):
    tmp, plays = files
    monkeypatch.chdir(tmp)
    assert _run(capsys, *_private(plays, "p.npz", "--report", "r.html"))[0] == 0
    page = (tmp / "r.html").read_text()
    assert "Privacy guarantee" in page and "Most popular items" in page and "Reproduce" in page
    assert _run(capsys, "recommend", "fit", plays, "--out", "m.npz", "--report", "r.json")[0] == 0
    summary = json.loads((tmp / "r.json").read_text())
    assert summary["n_users"] == N_USERS and summary["n_interactions"] > 0 and summary["guarantee"] is None


# ----------------------------------------------------------------------------- plan, evaluate, help


def test_plan_prints_the_verdict(capsys):
    code, out, _ = _run(capsys, "recommend", "plan", "--users", "100000", "--items", "2000", "--epsilon", "1")
    assert code == 0
    assert "predicted Recall@20" in out and "with --method auto fits" in out
    code, _, err = _run(capsys, "recommend", "plan", "--users", "0", "--items", "2000", "--epsilon", "1")
    assert code == 2 and "--users" in err


def test_evaluate_prints_the_table_and_writes_json(files, capsys):
    tmp, plays = files
    code, out, _ = _run(capsys, "recommend", "evaluate", plays, "--seeds", "1", "--method", "ease", "--out",
                        tmp / "e.json", "-q")
    assert code == 0
    for word in ("NDCG@10", "Recall@20", "precision@10", "coverage", "popularity", "private popularity",
                 "not private"):
        assert word in out
    result = json.loads((tmp / "e.json").read_text())
    assert result["protocol"] == "per-user" and result["ndcg@10_ratio_to_popularity"]["popularity"] == 1.0
    assert set(result["means"]) == {"popularity", "private popularity (eps=1)", "ease"}
    assert "ndcg@10" in result["means"]["ease"]
    code, out, _ = _run(capsys, "recommend", "evaluate", plays, "--seeds", "1", "--protocol",
                        "held-out-users", "--test-users", "8", "--epsilon", "4", "--method", "popularity",
                        "-q")
    assert code == 0 and "private popularity (eps=4)" in out and "held-out-users protocol" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["--test-users", "5"], "--test-users sets the held-out-users protocol"),
    (["--protocol", "held-out-users", "--test-users", "40"], "--test-users"),
])
def test_evaluate_refusals(files, capsys, extra, message):
    tmp, plays = files
    code, _, err = _run(capsys, "recommend", "evaluate", plays, "--seeds", "1", *extra)
    assert code == 2 and message in err


def test_help_ends_with_examples(capsys):
    for argv in (["recommend", "--help"], ["recommend", "fit", "--help"], ["recommend", "top", "--help"],
                 ["recommend", "plan", "--help"], ["recommend", "evaluate", "--help"]):
        code, out, _ = _run(capsys, *argv)
        assert code == 0 and "\nexamples:\n  " in out and "dptensor recommend" in out.split("examples:")[-1]
    code, _, err = _run(capsys, "recommend")
    assert code == 2 and "ACTION" in err
