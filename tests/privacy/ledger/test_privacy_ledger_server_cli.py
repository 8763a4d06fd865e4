"""``dptensor budget`` and ``--ledger`` with a ledger on a PostgreSQL server (a URL instead of a file)."""

from __future__ import annotations

import csv
import io
import uuid

import pytest
from _helpers import gaussian_guarantee

from dptensor.cli import main
from dptensor.datasets.entries import make_low_rank_completion, write_entries
from dptensor.privacy import BudgetLedger


def test_budget_commands_on_a_server_ledger(tmp_path, server_url, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = server_url("ratings")
    assert main(["budget", "create", url, "--epsilon", "0.5", "--delta", "1e-5", "--analyst-role",
                 "ratings_analysts"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "created postgresql://" in out and "'ratings_analysts'" in out
    assert main(["budget", "create", url, "--epsilon", "5", "--delta", "1e-5"]) == 2
    assert "already exists" in capsys.readouterr().err and BudgetLedger(url).epsilon == 0.5
    assert main(["budget", "create", str(tmp_path / "f.ledger"), "--epsilon", "1", "--delta", "1e-5",
                 "--analyst-role", "x"]) == 2  # fmt: skip
    assert "--analyst-role is for a ledger on a server" in capsys.readouterr().err
    # a private run charges the server ledger given as --ledger URL
    prob = make_low_rank_completion((8, 7, 6), 2, snr=100.0, missing_ratio=0.5, min_max=False, random_state=0)
    entries = write_entries(tmp_path / "train.csv", prob.observed)
    run = ["complete", str(entries), "--rank", "2", "--privacy", "gradient_dpsgd", "--neighbouring",
           "entry-value", "--epsilon", "0.45", "--delta", "1e-6", "--epochs", "3", "--ledger", url,
           "--out", str(tmp_path / "pred.csv")]  # fmt: skip
    assert main([*run, "--report", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "before this run" in page and "after this run" in page  # the budget section, before and after
    assert main(run) == 2  # the second run would exceed the budget: refused, nothing written
    assert "privacy budget exceeded" in capsys.readouterr().err
    assert main(["budget", "show", url, "--plot", str(tmp_path / "b.png")]) == 0
    out = capsys.readouterr().out
    spent = BudgetLedger(url).spent()
    assert "in 1 charge(s)" in out and f"epsilon={spent:.6g}" in out and (tmp_path / "b.png").stat().st_size
    assert main(["budget", "history", url, "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 1 and all("TensorCompletion" in row["description"] for row in rows)
    assert rows[0]["db_user"] == "dptensor_test_admin" and rows[0]["client_addr"] == "127.0.0.1"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("postgres")] == []


def test_budget_migrate(tmp_path, server_url, capsys):
    path = tmp_path / "ratings.ledger"
    assert main(["budget", "create", str(path), "--epsilon", "1", "--delta", "1e-5", "--dataset",
                 "ratings"]) == 0  # fmt: skip
    for sigma in (20.0, 30.0):
        BudgetLedger(path).charge(gaussian_guarantee(sigma))
    before = [c.to_row() for c in BudgetLedger(path).charges()]
    url = server_url("ratings")
    capsys.readouterr()
    assert main(["budget", "migrate", str(path), url]) == 0
    assert "moved 2 charge(s)" in capsys.readouterr().out
    assert [c.to_row() for c in BudgetLedger(url).charges()] == before
    with pytest.raises(Exception, match="was moved to postgresql://"):
        BudgetLedger(path).charge(gaussian_guarantee(20.0))
    assert main(["budget", "migrate", str(path), url]) == 2
    assert "already moved" in capsys.readouterr().err
    assert main(["budget", "show", str(path)]) == 0
    assert "moved:  to postgresql://" in capsys.readouterr().out
    assert main(["budget", "migrate", str(path), str(tmp_path / "x.ledger")]) == 2
    assert "must be a postgresql:// URL" in capsys.readouterr().err


def test_budget_change_by_the_curator_only(postgres_cluster, server_url, capsys):
    role = f"analyst_{uuid.uuid4().hex[:8]}"
    postgres_cluster.sql(f"CREATE ROLE {role} LOGIN")
    url = server_url("ratings")
    assert main(["budget", "create", url, "--epsilon", "1", "--delta", "1e-5"]) == 0
    postgres_cluster.sql(f"GRANT dptensor_analyst TO {role}")
    assert main(["budget", "change", server_url("ratings", role), "--epsilon", "9", "--delta", "1e-5"]) == 2
    assert "permission denied" in capsys.readouterr().err and BudgetLedger(url).epsilon == 1.0
    assert main(["budget", "change", url, "--epsilon", "3", "--delta", "1e-5"]) == 0
    assert "epsilon 1 -> 3" in capsys.readouterr().out and BudgetLedger(url).epsilon == 3.0
    assert main(["budget", "show", server_url("ratings", role)]) == 0
    assert "changed: " in (out := capsys.readouterr().out) and "by dptensor_test_admin: epsilon 1 -> 3" in out
    assert main(["budget", "change", "some.ledger", "--epsilon", "3", "--delta", "1e-5"]) == 2
    assert "budget is fixed" in capsys.readouterr().err
