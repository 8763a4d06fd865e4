"""``dptensor complete`` and the completion experiment (smoke test)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from dptensor.cli import main
from dptensor.datasets.entries import make_low_rank_completion, train_test_split_entries, write_entries


@pytest.fixture()
def entry_files(tmp_path):
    prob = make_low_rank_completion((12, 10, 8), 2, snr=100.0, missing_ratio=0.5, min_max=False,
                                    random_state=0)
    train, test = train_test_split_entries(prob.observed, 0.2, random_state=1)
    return write_entries(tmp_path / "train.csv", train), write_entries(tmp_path / "test.csv", test), test


def test_complete_cli_private_with_test_rmse(entry_files, tmp_path, capsys):
    train_path, test_path, test = entry_files
    out, summary = tmp_path / "pred.csv", tmp_path / "fit.json"
    args = ["complete", str(train_path), "--shape", "12", "10", "8", "--rank", "2", "--model", "cp",
            "--privacy", "gradient", "--neighbouring", "entry-value", "--epsilon", "1", "--clip", "0.1",
            "--test", str(test_path),
            "--seed", "0", "--out", str(out), "--json", str(summary)]
    # the paper's gradient perturbation does not hold: refused without the opt-in, nothing written
    assert main(args) == 2
    assert "--allow-unproven" in capsys.readouterr().err and not out.exists() and not summary.exists()
    code = main(args + ["--allow-unproven"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "test RMSE" in printed and "NOT PRIVATE" in printed
    with open(out) as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(test)
    payload = json.loads(summary.read_text())
    assert payload["guarantee"]["holds"] is False and payload["n_test"] == len(test)
    preds = np.array([float(r["prediction"]) for r in rows])
    assert np.sqrt(np.mean((preds - test.values) ** 2)) == pytest.approx(payload["test_rmse"])


def test_complete_cli_non_private_recovers(entry_files, tmp_path):
    train_path, test_path, _ = entry_files
    summary = tmp_path / "fit.json"
    assert main(["complete", str(train_path), "--rank", "2", "--reg", "0",
                 "--test", str(test_path), "--seed", "0", "--json", str(summary)]) == 0
    payload = json.loads(summary.read_text())
    assert payload["shape"] == [12, 10, 8]
    assert payload["test_rmse"] < 0.3  # noise std 0.1; unit-RMS tensor


def test_complete_cli_errors(entry_files, capsys):
    train_path, _, _ = entry_files
    assert main(["complete", str(train_path), "--rank", "2", "--privacy", "input"]) == 2
    assert "--privacy input needs --epsilon" in capsys.readouterr().err
    assert main(["complete", str(train_path), "--rank", "2", "--shape", "2", "2", "2"]) == 2
    assert "must lie in" in capsys.readouterr().err
    assert main(["complete", str(train_path), "--rank", "0"]) == 2


def test_complete_cli_movielens(tmp_path):
    rng = np.random.default_rng(0)
    t0 = 880_000_000
    cells = zip(rng.integers(1, 6, 60), rng.integers(1, 8, 60), rng.integers(1, 6, 60),
                t0 + rng.integers(0, 4 * 86_400, 60), strict=True)
    lines = ["\t".join(str(v) for v in row) for row in cells]
    path = tmp_path / "u.data"
    path.write_text("\n".join(lines) + "\n")
    summary = tmp_path / "fit.json"
    out = tmp_path / "pred.csv"
    assert main(["complete", str(path), "--movielens", "--rank", "2", "--epochs", "5", "--privacy",
                 "gradient_dpsgd", "--neighbouring", "entry-value", "--epsilon", "2", "--seed", "1",
                 "--json", str(summary),
                 "--out", str(out)]) == 0
    payload = json.loads(summary.read_text())
    assert payload["guarantee"]["holds"] is True and payload["shape"][2] <= 4
    # A private fit's output carries predictions only, never the private training values.
    assert out.read_text().splitlines()[0] == "i,j,k,prediction"
    assert payload["train_rmse"] is None


def test_completion_experiment_quick(tmp_path, monkeypatch, capsys):
    from dptensor.research.experiments import completion

    monkeypatch.setattr("dptensor._progress.bars_shown", lambda stream=None: True)  # as on a terminal
    rows = completion.figure2(quick=True, epsilons=(1.0,), models=("cp",), progress=True)
    assert {r["method"] for r in rows} == set(completion.METHODS)
    n_fits = len(completion.METHODS)  # one epsilon: every method fits once
    err = capsys.readouterr().err
    assert "Figure 2 (fits): 100%" in err and f"{n_fits}/{n_fits}" in err and len(rows) == n_fits
    assert all(np.isfinite(r["rmse"]) for r in rows)
    summary = completion.summarise(rows)
    path = completion._plot(summary, 2, tmp_path / "f2.png")
    assert path.stat().st_size > 1000


def test_complete_cli_value_range_clamps_predictions(tmp_path):
    """Regression: ``--value-range 1 5`` clipped the training values but not the predictions."""
    rng = np.random.default_rng(3)
    shape = (15, 12, 3)
    indices = np.argwhere(rng.random(shape) < 0.5)
    values = np.clip(np.round(3 + 2.5 * rng.standard_normal(len(indices))), 1, 5)
    from dptensor.datasets.entries import TensorEntries

    train = write_entries(tmp_path / "train.csv", TensorEntries(indices, values, shape))
    cells = np.argwhere(np.ones(shape, bool))
    test = write_entries(tmp_path / "test.csv", TensorEntries(cells, np.full(len(cells), 3.0), shape))
    out = tmp_path / "pred.csv"
    assert main(["complete", str(train), "--rank", "4", "--reg", "0.001", "--value-range", "1", "5",
                 "--test", str(test), "--out", str(out), "--seed", "0"]) == 0
    with open(out) as handle:
        preds = np.array([float(row["prediction"]) for row in csv.DictReader(handle)])
    assert preds.min() >= 1 and preds.max() <= 5
    assert np.isclose(preds, 1).any() or np.isclose(preds, 5).any()  # the clamp binds somewhere


def test_complete_fit_and_plan_are_subcommands_and_a_file_first_means_fit(entry_files, tmp_path, capsys):
    """``complete fit FILE`` and ``complete FILE`` are one command; ``complete plan`` its sibling."""
    from dptensor.cli import build_parser
    from dptensor.cli.complete import default_subcommand

    train_path, test_path, _ = entry_files
    common = ["--shape", "12", "10", "8", "--rank", "2", "--seed", "0", "--quiet", "--test", str(test_path),
              "--reg", "0.1", "--max-iter", "5"]
    outputs = []
    for argv in (["complete", "fit", str(train_path)], ["complete", str(train_path)]):
        out = tmp_path / f"pred{len(outputs)}.csv"
        assert main([*argv, *common, "--out", str(out)]) == 0
        outputs.append(out.read_text())
    assert outputs[0] == outputs[1]
    capsys.readouterr()
    assert default_subcommand(["complete", "t.csv", "-r", "2"]) == ["complete", "fit", "t.csv", "-r", "2"]
    for kept in (["complete", "plan", "--users", "9"], ["complete", "--help"], ["complete", "-h"],
                 ["complete"], ["lda", "fit", "c.txt"]):
        assert default_subcommand(kept) == kept
    args = build_parser().parse_args(["complete", "plan", "--users", "9", "--items", "4", "--epsilon", "1"])
    assert (args.complete_command, args.users, args.items) == ("plan", 9, 4)
    assert main(["complete", "--help"]) == 0
    listed = capsys.readouterr().out
    assert "fit" in listed and "plan" in listed and "dptensor complete FILE" in " ".join(listed.split())
    assert main(["complete", "fit", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: dptensor complete [fit] [-h] entries --rank R")
    # errors and run records keep the command's name as typed most often: "dptensor complete"
    assert main(["complete", "fit", str(train_path), "--rank", "0"]) == 2
    assert capsys.readouterr().err.startswith("dptensor complete: error:")
    assert main(["complete", "plan", "--users", "100", "--items", "10", "--epsilon", "1"]) == 0
    assert "predicted held-out RMSE ratio" in capsys.readouterr().out
