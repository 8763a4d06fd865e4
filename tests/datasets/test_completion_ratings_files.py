"""Ratings files as people have them (issue 37): delimiters, headers, 3-column matrices, line numbers,
outputs that would overwrite an input, every missing option in one error, user => entry-value ledgers,
and the sweep count of the non-private summary."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest

from dptensor.cli import main
from dptensor.datasets import entry_columns, read_entries, read_movielens, read_ratings
from dptensor.privacy import BudgetLedger
from dptensor.privacy.relations import IMPLIES, implies, implies_any

RATINGS = [(1, 1, 4.5), (1, 2, 3.0), (2, 1, 5.0), (2, 3, 2.0), (3, 2, 4.0), (3, 3, 1.0), (4, 1, 3.5)]


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _write(path, header, rows, sep=","):
    lines = ([sep.join(header)] if header else []) + [sep.join(map(str, row)) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


# ----------------------------------------------------------------------------- readers


@pytest.mark.parametrize("sep", [",", "\t", " ", ";", ", "])
def test_a_three_column_ratings_file_is_a_user_by_item_matrix(tmp_path, sep):
    path = _write(tmp_path / "r.txt", ["user", "item", "rating"], RATINGS, sep)
    assert entry_columns(path) == 3
    matrix = read_ratings(path, one_based=True)
    assert matrix.shape == (4, 3, 1)
    np.testing.assert_array_equal(matrix.indices[:, 2], 0)
    np.testing.assert_array_equal(matrix.indices[:2], [[0, 0, 0], [0, 1, 0]])
    np.testing.assert_allclose(matrix.values, [r for *_, r in RATINGS])
    assert read_ratings(path, one_based=True, shape=(5, 4)).shape == (5, 4, 1)


def test_four_columns_user_item_time_rating_with_a_header(tmp_path):
    path = _write(tmp_path / "r.csv", ["user", "item", "time", "rating"], [(0, 1, 2, 3.5), (1, 0, 0, 4)])
    entries = read_ratings(path)
    assert entries.shape == (2, 2, 3) and entry_columns(path) == 4
    assert read_entries(path).shape == (2, 2, 3)  # the 4-column reader reads it alike


def test_reader_errors_name_the_file_and_line_unless_private(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("user,item,rating\n1,2,4\n# a comment\n2,x,5\n")
    with pytest.raises(ValueError, match=r"bad\.csv, line 4: a non-numeric cell"):
        read_ratings(path)
    with pytest.raises(ValueError) as private:
        read_ratings(path, private=True)
    assert "line" not in str(private.value) and "non-numeric" in str(private.value)
    path.write_text("1,2,4\n2,1\n")
    with pytest.raises(ValueError, match=r"line 2: expected 3 columns .* found 2"):
        read_ratings(path)
    with pytest.raises(ValueError) as private:
        read_ratings(path, private=True)
    assert "line" not in str(private.value) and "found" not in str(private.value)
    path.write_text("0,0,4\n7,1,5\n")
    with pytest.raises(ValueError, match=r"line 2: an index outside the shape.*at least \(8, 2, 1\)"):
        read_ratings(path, shape=(3, 3))
    with pytest.raises(ValueError) as private:
        read_ratings(path, shape=(3, 3), private=True)
    assert "line" not in str(private.value) and "7" not in str(private.value)
    with pytest.raises(ValueError, match="no third mode"):
        read_ratings(path, shape=(8, 3, 4))


def test_one_based_ids_with_zero_based_days_name_the_column_unless_private(tmp_path):
    """--one-based applies to every index column: ids from 1 with days from 0 name the day column."""
    path = tmp_path / "days.csv"
    path.write_text("user,item,day,rating\n1,2,3,4\n2,1,0,5\n")
    with pytest.raises(ValueError, match=r"line 3: index 0 found in column 3, .*shifted to one base"):
        read_entries(path, one_based=True)
    with pytest.raises(ValueError) as private:
        read_entries(path, one_based=True, shape=(2, 2, 4), private=True)
    assert "in column" not in str(private.value) and "line" not in str(private.value)
    assert "shifted to one base" in str(private.value)


def test_movielens_ratings_csv_with_a_header_and_half_stars(tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_text("userId,movieId,rating,timestamp\n1,2,4.5,964982703\n2,1,3.0,964982224\n"
                    "2,2,5.0,965082224\n")
    entries = read_movielens(path)
    assert entries.shape == (2, 2, 2)
    np.testing.assert_allclose(entries.values, [4.5, 3.0, 5.0])
    path.write_text("userId,movieId,rating,timestamp\n1,2,4.5,964982703\n2,1.5,3.0,964982224\n")
    with pytest.raises(ValueError, match=r"ratings\.csv, line 3: user and item ids"):
        read_movielens(path)
    with pytest.raises(ValueError) as private:
        read_movielens(path, private=True)
    assert "line" not in str(private.value)
    # a private day origin after the first rating: the rating's timestamp is not named
    path.write_text("1,2,4.5,964982703\n")
    with pytest.raises(ValueError) as private:
        read_movielens(path, day_origin=964982704, private=True)
    assert "964982703" not in str(private.value) and "precedes day_origin" in str(private.value)


# ----------------------------------------------------------------------------- the command


def test_complete_reads_a_plain_csv_with_a_header_as_a_matrix(tmp_path, capsys):
    train = _write(tmp_path / "ratings.csv", ["user", "item", "rating"], RATINGS)
    out, fit = tmp_path / "pred.csv", tmp_path / "fit.json"
    assert main(["complete", str(train), "--one-based", "--rank", "1", "--seed", "0", "--quiet",
                 "--out", str(out), "--json", str(fit)]) == 0
    assert "shape 4 x 3 (users x items)" in capsys.readouterr().out
    with open(out) as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["i", "j", "prediction", "value"]
    assert [(int(r["i"]), int(r["j"])) for r in rows] == [(u, i) for u, i, _ in RATINGS]  # back one-based
    assert json.loads(fit.read_text())["shape"] == [4, 3]


def test_a_private_user_level_fit_of_a_matrix_with_a_test_file_stays_a_matrix(tmp_path, capsys):
    """--shape U I and --test: the run says users x items and writes no day column, as without privacy
    (the shape read from both files has three sizes; the declared one has two)."""
    train = _write(tmp_path / "train.csv", ["user", "item", "rating"], RATINGS)
    test = _write(tmp_path / "test.csv", ["user", "item", "rating"], [(1, 3, 4.0), (4, 2, 2.0)])
    out = tmp_path / "pred.csv"
    assert main(["complete", str(train), "--test", str(test), "--one-based", "--rank", "1", "--seed", "0",
                 "--privacy", "als", "--neighbouring", "user", "--shape", "4", "3", "--epsilon", "1",
                 "--value-range", "1", "5", "--quiet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "shape 4 x 3 (users x items)" in printed
    assert "an error computed over the file is an aggregate the guarantee does not cover" in printed
    with open(out) as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["i", "j", "prediction", "value"]
    assert [(int(r["i"]), int(r["j"])) for r in rows] == [(1, 3), (4, 2)]


@pytest.mark.parametrize("sep", ["\t", " "])
def test_complete_reads_tab_and_whitespace_files(tmp_path, sep, capsys):
    train = _write(tmp_path / "ratings.txt", None, [(u - 1, i - 1, 0, r) for u, i, r in RATINGS], sep)
    assert main(["complete", str(train), "--rank", "1", "--seed", "0", "--quiet"]) == 0
    assert "shape (4, 3, 1)" in capsys.readouterr().out


def test_complete_errors_name_the_line_only_without_privacy(tmp_path, capsys):
    train = tmp_path / "ratings.csv"
    train.write_text("user,item,rating\n0,1,4\n1,0,x\n")
    assert main(["complete", str(train), "--rank", "1", "--quiet"]) == 2
    assert "ratings.csv, line 3: a non-numeric cell" in _error(capsys)
    private = ["--privacy", "als", "--neighbouring", "user", "--shape", "2", "2", "--epsilon", "1",
               "--value-range", "1", "5", "--quiet"]
    assert main(["complete", str(train), "--rank", "1", *private]) == 2
    message = _error(capsys)
    assert "non-numeric" in message and "line" not in message


@pytest.mark.parametrize("flag", ["--out", "--json"])
def test_an_output_naming_the_input_is_refused_before_any_work(tmp_path, flag, capsys):
    train = _write(tmp_path / "ratings.csv", ["user", "item", "rating"], RATINGS)
    before = train.read_text()
    assert main(["complete", str(train), "--one-based", "--rank", "1", "--quiet", flag,
                 str(tmp_path / "." / "ratings.csv")]) == 2
    message = _error(capsys)
    assert flag in message and "ENTRIES" in message and "overwrite" in message
    assert train.read_text() == before
    test = _write(tmp_path / "test.csv", ["user", "item", "rating"], RATINGS[:2])
    assert main(["complete", str(train), "--one-based", "--rank", "1", "--quiet", "--test", str(test),
                 flag, str(test)]) == 2
    message = _error(capsys)
    assert flag in message and "--test" in message


def test_outputs_naming_a_ledger_or_each_other_are_refused(tmp_path, capsys):
    train = _write(tmp_path / "ratings.csv", ["user", "item", "rating"], RATINGS)
    ledger = tmp_path / "b.ledger"
    assert main(["budget", "create", str(ledger), "--epsilon", "1", "--delta", "1e-5"]) == 0
    capsys.readouterr()
    assert main(["complete", str(train), "--one-based", "--rank", "1", "--privacy", "gradient_dpsgd",
                 "--neighbouring", "entry-value", "--epsilon", "1", "--ledger", str(ledger),
                 "--json", str(ledger)]) == 2
    assert "--json" in (message := _error(capsys)) and "--ledger" in message
    assert BudgetLedger(ledger).spent() == 0
    same = str(tmp_path / "x.json")
    assert main(["complete", str(train), "--one-based", "--rank", "1", "--out", same, "--json", same]) == 2
    assert "--out and --json both name" in _error(capsys)


def test_other_commands_refuse_an_output_over_their_input(tmp_path, capsys):
    docs = tmp_path / "docs.json"  # a name lda fit --out accepts: the overwrite is what is refused
    docs.write_text("apple banana apple\nbanana cherry cherry\n")
    for command in (["lda", "fit"], ["single-topic", "fit"]):
        assert main([*command, str(docs), "-k", "2", "--out", str(docs)]) == 2
        message = _error(capsys)
        assert "--out" in message and "overwrite" in message
    assert docs.read_text().startswith("apple")
    report = tmp_path / "r.html"
    report.write_text("<html></html>")
    assert main(["complete", str(report), "--rank", "1", "--report", str(report)]) == 2
    assert "--report" in (message := _error(capsys)) and "overwrite" in message


def test_every_missing_option_is_named_in_one_error(tmp_path, capsys):
    train = tmp_path / "u.data"
    train.write_text("1\t1\t5\t874965758\n")
    assert main(["complete", str(train), "--movielens", "--privacy", "als", "--neighbouring", "user",
                 "--out", str(tmp_path / "p.csv")]) == 2
    message = _error(capsys)
    for needed in ("--epsilon", "--value-range MIN MAX", "--shape U I [K]", "needs --day-origin",
                   "--out needs --test", "--rank"):
        assert needed in message, needed
    assert message.count("(") >= 6 and "6 options to fix" in message


def test_days_beyond_k_name_the_k_needed_only_without_privacy(tmp_path, capsys):
    day, t0 = 86_400, 874_965_758
    train = tmp_path / "u.data"
    train.write_text(f"1\t1\t5\t{t0}\n2\t2\t3\t{t0 + 9 * day}\n")
    assert main(["complete", str(train), "--movielens", "--shape", "2", "2", "4", "--no-factors",
                 "--quiet"]) == 2
    assert "days do not fit --shape K=4: the file's days need K >= 10" in _error(capsys)
    private = ["--privacy", "als", "--neighbouring", "user", "--epsilon", "1", "--value-range", "1", "5",
               "--day-origin", str(t0), "--no-factors", "--quiet"]
    assert main(["complete", str(train), "--movielens", "--shape", "2", "2", "4", *private]) == 2
    message = _error(capsys).replace(str(train), "<file>")  # the temporary path may hold "10"
    assert "K=4" in message and "10" not in message and "end of the collection period" in message


def test_the_summary_counts_the_sweeps_the_bar_counts(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("dptensor._progress.bars_shown", lambda stream=None: True)  # as on a terminal
    train = _write(tmp_path / "ratings.csv", ["user", "item", "rating"], RATINGS)
    fit = tmp_path / "fit.json"
    base = ["complete", str(train), "--one-based", "--rank", "1", "--seed", "0"]
    assert main([*base, "--json", str(fit)]) == 0
    captured = capsys.readouterr()
    bar = max(int(n) for n in re.findall(r"ALS sweeps: (\d+)step", captured.err))
    payload = json.loads(fit.read_text())
    assert payload["n_sweeps_total"] == bar > payload["n_iter"]  # reg="auto": the search's sweeps too
    assert f"{payload['n_iter']} ALS sweeps ({bar} with the --reg auto search" in captured.out
    assert main(["complete", str(train), "--one-based", "--rank", "1", "--seed", "0", "--reg", "0.1"]) == 0
    captured = capsys.readouterr()
    bar = max(int(n) for n in re.findall(r"ALS sweeps: (\d+)step", captured.err))
    assert f", {bar} ALS sweeps:" in captured.out


# ----------------------------------------------------------------------------- relations and the ledger


def test_user_level_dp_implies_entry_value_and_nothing_else():
    assert implies("user", "entry-value") and implies("entry-value", "entry-value")
    assert not implies("entry-value", "user")
    assert not implies("user", "entry") and not implies("user", "record") and not implies("user", "document")
    assert implies_any("user", ["entry-value", "record"]) and not implies_any("record", ["entry-value"])
    assert all(stronger not in weaker for stronger, weaker in IMPLIES.items())




def test_an_entry_value_ledger_accepts_a_user_level_release(tmp_path, capsys):
    train = tmp_path / "ratings.csv"
    train.write_text("user,item,rating\n" + "".join(f"{u},{i},{r}\n" for u, i, r in RATINGS))
    test = _write(tmp_path / "test.csv", ["user", "item", "rating"], RATINGS[:2])
    ledger = tmp_path / "b.ledger"
    assert main(["budget", "create", str(ledger), "--epsilon", "20", "--delta", "1e-4",
                 "--neighbouring", "entry-value"]) == 0
    user = ["complete", str(train), "--one-based", "--shape", "4", "3", "--rank", "1", "--privacy", "als",
            "--neighbouring", "user", "--epsilon", "2", "--value-range", "1", "5", "--max-ratings", "3",
            "--test", str(test), "--quiet", "--ledger", str(ledger)]
    assert main(user) == 0, capsys.readouterr().err
    charges = BudgetLedger(ledger).charges()
    assert [c.neighbouring for c in charges] == ["user"] and BudgetLedger(ledger).relations == ["entry-value"]
    # the converse stays refused: a user-level ledger does not accept an entry-value release
    strict = tmp_path / "user.ledger"
    assert main(["budget", "create", str(strict), "--epsilon", "20", "--delta", "1e-4",
                 "--neighbouring", "user"]) == 0
    capsys.readouterr()
    entry = ["complete", str(train), "--one-based", "--rank", "1", "--privacy", "gradient_dpsgd",
             "--neighbouring", "entry-value", "--epsilon", "1", "--epochs", "2", "--quiet",
             "--ledger", str(strict)]
    assert main(entry) == 2
    assert "'entry-value' relation" in _error(capsys)
    assert BudgetLedger(strict).charges() == []


def test_an_output_naming_a_ledger_the_run_creates_is_refused(tmp_path, capsys):
    """The ledger is an input even when the run creates it: --json over it would lose its charges."""
    train = _write(tmp_path / "ratings.csv", ["user", "item", "rating"], RATINGS)
    ledger = tmp_path / "new.ledger"
    assert main(["complete", str(train), "--one-based", "--rank", "1", "--privacy", "gradient_dpsgd",
                 "--neighbouring", "entry-value", "--epsilon", "1", "--ledger", str(ledger),
                 "--json", str(ledger)]) == 2
    assert "--json" in (message := _error(capsys)) and "--ledger" in message
    assert not ledger.exists()


def test_shape_sizes_then_the_file(tmp_path, capsys):
    """``--shape U I K FILE``: the file after the sizes is ENTRIES (nargs=3 read it so before)."""
    train = _write(tmp_path / "ratings.csv", None, [(0, 0, 0, 4), (1, 1, 0, 3), (0, 1, 0, 5), (1, 0, 0, 2)])
    assert main(["complete", "--shape", "2", "2", "1", str(train), "--rank", "1", "--quiet"]) == 0
    assert "shape (2, 2, 1)" in capsys.readouterr().out
    matrix = _write(tmp_path / "matrix.csv", None, [(0, 0, 4), (1, 1, 3), (0, 1, 5)])
    assert main(["complete", "--shape", "2", "2", str(matrix), "--rank", "1", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["complete", "--shape", "2", "2", "1", "--rank", "1", "--quiet"]) == 2
    assert "the ENTRIES file (the observed ratings) is required" in _error(capsys)
    assert main(["complete", "--shape", "2", "2", "1", str(train), "extra.csv", "--rank", "1"]) == 2
    assert "unexpected" in _error(capsys)
