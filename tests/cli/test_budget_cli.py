"""``dptensor budget`` and ``--ledger`` on the subcommands that release private output."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shlex
import sys
from pathlib import Path

import pytest
import scipy.sparse as sp

from dptensor.cli import main, observe_command
from dptensor.cli._privacy import add_ledger_argument, open_ledger, opened_ledger
from dptensor.datasets.entries import make_low_rank_completion, write_entries
from dptensor.datasets.lda import make_lda_corpus
from dptensor.privacy import BudgetLedger, LedgerError
from dptensor.privacy.audit import observable_differences


@pytest.fixture()
def entries(tmp_path):
    prob = make_low_rank_completion((8, 7, 6), 2, snr=100.0, missing_ratio=0.5, min_max=False, random_state=0)
    return write_entries(tmp_path / "train.csv", prob.observed)


def _complete(entries, ledger, tmp_path, tag: str, epsilon: str = "0.45") -> list[str]:
    return [
        "complete",
        str(entries),
        "--rank",
        "2",
        "--privacy",
        "gradient_dpsgd",
        "--neighbouring",
        "entry-value",
        "--epsilon",
        epsilon,
        "--delta",
        "1e-6",
        "--epochs",
        "3",
        "--ledger",
        str(ledger),
        "--out",
        str(tmp_path / f"pred{tag}.csv"),
        "--json",
        str(tmp_path / f"fit{tag}.json"),
    ]


def test_budget_create_show_history(tmp_path, entries, capsys):
    ledger = tmp_path / "b.ledger"
    assert (
        main(["budget", "create", str(ledger), "--epsilon", "1", "--delta", "1e-5", "--dataset", "ratings"])
        == 0
    )
    assert "created" in capsys.readouterr().out
    # never replaced
    assert main(["budget", "create", str(ledger), "--epsilon", "5", "--delta", "1e-5"]) == 2
    assert "already exists" in capsys.readouterr().err and BudgetLedger(ledger).epsilon == 1.0
    assert main(["budget", "show", str(ledger)]) == 0
    out = capsys.readouterr().out
    assert "spent:  epsilon=0 in 0 charge(s)" in out and "left:   epsilon=1" in out and "'ratings'" in out
    for tag in "ab":
        assert main(_complete(entries, ledger, tmp_path, tag)) == 0
    capsys.readouterr()
    summary = tmp_path / "summary.json"
    assert main(["budget", "show", str(ledger), "--json", str(summary)]) == 0
    out = capsys.readouterr().out
    spent = BudgetLedger(ledger).spent()
    assert "in 2 charge(s)" in out and f"epsilon={spent:.6g}" in out and f"epsilon={1 - spent:.6g}" in out
    # the charges (at delta 1e-6) are composed at the ledger's delta 1e-5: the total is below their sum
    assert spent < 2 * 0.45 and "stated at the ledger's larger delta=1e-05" in out
    table = [line for line in out.splitlines() if "TensorCompletion" in line]
    assert len(table) == 2 and all("entry-value" in line for line in table)
    payload = json.loads(summary.read_text())
    assert payload["n_charges"] == 2 and payload["spent_epsilon"] == pytest.approx(spent)
    assert payload["relations"] == ["entry-value"] and len(payload["charges"]) == 2
    # history: a table, CSV on stdout, CSV in a file
    assert main(["budget", "history", str(ledger)]) == 0
    assert len([line for line in capsys.readouterr().out.splitlines() if "TensorCompletion" in line]) == 2
    assert main(["budget", "history", str(ledger), "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [int(r["id"]) for r in rows] == [1, 2] and rows[0]["argv"] == shlex.join(sys.argv)  # this process
    assert float(rows[1]["spent_after"]) == pytest.approx(spent)
    assert json.loads(rows[0]["event"])["class_name"] == "SelfComposedDpEvent"
    out_csv = tmp_path / "hist" / "charges.csv"
    (tmp_path / "hist").mkdir()  # an output's folder must exist (checked before any work)
    assert main(["budget", "history", str(ledger), "--csv", str(out_csv)]) == 0
    with open(out_csv, newline="") as handle:
        assert list(csv.DictReader(handle)) == rows


def test_complete_refused_when_over_budget(tmp_path, entries, capsys):
    ledger = tmp_path / "b.ledger"
    assert main(["budget", "create", str(ledger), "--epsilon", "0.5", "--delta", "1e-5"]) == 0
    assert main(_complete(entries, ledger, tmp_path, "1")) == 0
    capsys.readouterr()
    code = main(_complete(entries, ledger, tmp_path, "2"))
    captured = capsys.readouterr()
    assert code == 2
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dptensor complete: error: privacy budget exceeded")
    assert "nothing was computed" in err[0] and captured.out == ""
    assert not (tmp_path / "pred2.csv").exists() and not (tmp_path / "fit2.json").exists()
    assert len(BudgetLedger(ledger).charges()) == 1


def test_lda_fit_charges_the_ledger(tmp_path, capsys):
    """``dptensor lda fit --epsilon`` (PrivateSpectralLDA) takes --ledger too."""
    corpus = make_lda_corpus(600, 30, 3, alpha=0.1, doc_length=40, topic_concentration=0.1, random_state=0)
    path = tmp_path / "corpus.npz"
    sp.save_npz(path, corpus.counts)
    ledger = tmp_path / "docs.ledger"
    BudgetLedger(ledger, epsilon=1.2, delta=1e-5, dataset="docs")
    fit = ["lda", "fit", str(path), "--topics", "3", "--alpha0", "0.3", "--epsilon", "1", "--delta", "1e-6",
           "--quiet", "--ledger", str(ledger)]  # fmt: skip
    assert main(fit + ["--out", str(tmp_path / "m1.json")]) == 0
    charges = BudgetLedger(ledger).charges()
    assert len(charges) == 1 and charges[0].neighbouring == "document" and charges[0].epsilon == 1.0
    capsys.readouterr()
    assert main(fit + ["--out", str(tmp_path / "m2.json")]) == 2  # two composed: above 1.2
    captured = capsys.readouterr()
    assert captured.err.startswith("dptensor lda fit: error: privacy budget exceeded") and captured.out == ""
    assert not (tmp_path / "m2.json").exists() and len(BudgetLedger(ledger).charges()) == 1
    assert main(["lda", "fit", str(path), "--topics", "3", "--quiet", "--ledger", str(ledger)]) == 2
    assert "releases nothing private" in capsys.readouterr().err


def test_ledger_flag_errors(tmp_path, entries, capsys):
    missing = tmp_path / "missing.ledger"
    assert main(_complete(entries, missing, tmp_path, "x")) == 2
    assert "no budget ledger" in capsys.readouterr().err and not missing.exists()
    ledger = tmp_path / "b.ledger"
    BudgetLedger(ledger, epsilon=1.0, delta=1e-5)
    assert main(["complete", str(entries), "--rank", "2", "--ledger", str(ledger)]) == 2
    assert "releases nothing private" in capsys.readouterr().err
    (tmp_path / "bad.ledger").write_text("not a ledger")
    assert main(["budget", "show", str(tmp_path / "bad.ledger")]) == 2
    assert "not a dptensor budget ledger" in capsys.readouterr().err
    assert main(["budget", "create", str(tmp_path / "c.ledger"), "--epsilon", "-1", "--delta", "1e-5"]) == 2
    assert "argument --epsilon: must be" in capsys.readouterr().err and not (tmp_path / "c.ledger").exists()


def test_budget_create_with_relations(tmp_path, capsys):
    ledger = tmp_path / "b.ledger"
    args = ["budget", "create", str(ledger), "--epsilon", "1", "--delta", "1e-5"]
    assert main(args + ["--neighbouring", "record", "--neighbouring", "entry-value"]) == 0
    assert "relation(s) entry-value, record" in capsys.readouterr().out
    assert BudgetLedger(ledger).relations == ["entry-value", "record"]
    assert main(["budget", "create", str(tmp_path / "c.ledger"), "--epsilon", "1", "--delta", "1e-5"]) == 0
    capsys.readouterr()
    assert main(["budget", "show", str(tmp_path / "c.ledger")]) == 0
    assert "relation(s): not fixed yet" in capsys.readouterr().out


def test_ledger_helpers():
    parser = argparse.ArgumentParser()
    add_ledger_argument(parser)
    assert open_ledger(parser.parse_args([])) is None
    with pytest.raises(ValueError, match="releases nothing private"):
        open_ledger(parser.parse_args(["--ledger", "x.ledger"]), private=False)
    with pytest.raises(LedgerError, match="no budget ledger"):
        open_ledger(parser.parse_args(["--ledger", "/nonexistent/x.ledger"]))


def test_opened_ledger_closes_the_file(tmp_path):
    parser = argparse.ArgumentParser()
    add_ledger_argument(parser)
    path = tmp_path / "b.ledger"
    BudgetLedger(path, epsilon=1.0, delta=1e-5)
    def handles() -> int:  # this process's open file descriptors on the ledger file
        fds = Path("/proc/self/fd")
        if not fds.exists():
            return -1
        return sum(os.path.realpath(fd) == str(path.resolve()) for fd in fds.iterdir())

    with opened_ledger(parser.parse_args(["--ledger", str(path)])) as ledger:
        assert ledger.spent() == 0.0 and handles() != 0 and ledger._conn is not None
    assert handles() in (0, -1) and ledger._conn is None  # closed when the command ends
    with opened_ledger(parser.parse_args([])) as ledger:
        assert ledger is None


def test_complete_with_ledger_has_no_side_channel(tmp_path):
    """Neighbouring entry files (one value changed): same exit codes, lines and files, charged or refused."""
    prob = make_low_rank_completion((8, 7, 6), 2, snr=100.0, missing_ratio=0.5, min_max=False, random_state=3)
    observations = []
    for k, value in enumerate((None, 1e6)):
        work = tmp_path / f"run{k}"
        work.mkdir()
        observed = prob.observed
        if value is not None:
            observed.values[5] = value
        entries = write_entries(work / "train.csv", observed)
        ledger = tmp_path / "b.ledger"  # one path: messages name it
        BudgetLedger(ledger, epsilon=0.5, delta=1e-5)
        runs = [observe_command(_complete(entries, ledger, work, tag), work) for tag in "12"]
        assert runs[0].attributes[0] == ("exit_code", 0) and runs[1].attributes[0] == ("exit_code", 2)
        observations.append(runs)
        ledger.unlink()
    for first, second in zip(*observations, strict=True):
        assert observable_differences(first, second) == []
        assert first.attributes == second.attributes
