"""docs/privacy.md's team example (a ledger on PostgreSQL) runs, against the throwaway server.

The docs test (tests/docs) cannot reach a database server, so it skips that block; this test runs
it here with the example's host (``db.example.org/budgets``) replaced by the test cluster, after
the database administrator's part of the set-up (the SQL shown just before it in the docs).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[3] / "docs" / "privacy.md"
EXAMPLE_HOST = "@db.example.org/budgets"


def _team_example() -> str:
    text = DOCS.read_text()
    section = text[text.index("### A budget a team shares"):]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return blocks[0]


def test_the_team_example_of_the_docs_runs(postgres_cluster, tmp_path, monkeypatch):
    code = _team_example()
    assert EXAMPLE_HOST in code
    sql = postgres_cluster.sql
    for role, options in (("curator", "LOGIN CREATEROLE"), ("alice", "LOGIN")):
        if not sql("SELECT 1 FROM pg_roles WHERE rolname = %s", role):
            sql(f"CREATE ROLE {role} {options}")
    sql("CREATE DATABASE budgets OWNER curator", database="postgres")
    code = code.replace(EXAMPLE_HOST, f"@127.0.0.1:{postgres_cluster.port}/budgets")
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{DOCS}:team example", "exec"), {"__name__": "__docs__"})  # noqa: S102
    lines = out.getvalue().splitlines()
    printed = re.search(r"```python\n.*?```\n\nprints `(.*?)` and `(.*?)`", DOCS.read_text()[
        DOCS.read_text().index("### A budget a team shares"):], flags=re.S)  # fmt: skip
    assert printed is not None and lines == [printed.group(1), printed.group(2)]
    assert list(tmp_path.iterdir()) == []  # nothing written locally


def test_the_pool_example_of_the_docs_runs(postgres_cluster, tmp_path, monkeypatch):
    """The connection-pool block (the second of the section), after the team example made the ledger."""
    if not postgres_cluster.sql("SELECT 1 FROM pg_database WHERE datname = 'budgets'", database="postgres"):
        test_the_team_example_of_the_docs_runs(postgres_cluster, tmp_path, monkeypatch)
    text = DOCS.read_text()
    code = re.findall(r"```python\n(.*?)```", text[text.index("### A budget a team shares"):], flags=re.S)[1]
    assert EXAMPLE_HOST in code
    code = code.replace(EXAMPLE_HOST, f"@127.0.0.1:{postgres_cluster.port}/budgets")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{DOCS}:pool example", "exec"), {"__name__": "__docs__"})  # noqa: S102
    assert out.getvalue() == "spent 0.695 of 2.0\n"
