"""BudgetLedger on a PostgreSQL server: URLs, roles (curator, analysts), what the database refuses,
idempotent retries, and migrating a file ledger.

The server is the session's throwaway cluster (``postgres_cluster``, conftest.py); each test has its
own database (``server_url``) and its own database users.
"""

from __future__ import annotations

import os
import sys
import time
import uuid

import pytest
from _helpers import gaussian_guarantee, in_child

from dptensor.privacy import BudgetExceededError, BudgetLedger, LedgerError
from dptensor.privacy.ledger._postgres import ServerLedger, migrate_to_server, parse_url

psycopg = pytest.importorskip("psycopg", reason="needs psycopg: pip install 'dptensor[server]'")

DELTA = 1e-5


# ----------------------------------------------------------------------------- URLs
def test_a_url_never_makes_a_local_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LedgerError, match="could not reach the server"):
        BudgetLedger("postgresql://curator@127.0.0.1:1/budgets?dataset=ratings", epsilon=2, delta=DELTA,
                     timeout=2)  # fmt: skip
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if psycopg were not installed
    with pytest.raises(LedgerError, match=r"needs psycopg 3.*pip install 'dptensor\[server\]'"):
        BudgetLedger("postgresql://curator@db/budgets?dataset=ratings", epsilon=2, delta=DELTA)
    assert list(tmp_path.iterdir()) == []  # no folder named `postgresql:`, no file


def test_url_parsing():
    conninfo, shown, dataset = parse_url("postgresql://ann:secret@db:5433/budgets?dataset=r%26d&sslmode=require",
                                         None)  # fmt: skip
    assert dataset == "r&d" and "dataset" not in conninfo and "sslmode=require" in conninfo
    assert "secret" in conninfo and "secret" not in shown and shown.startswith("postgresql://ann@db:5433/")
    assert parse_url("postgres://db/b", "x")[2] == "x"
    with pytest.raises(ValueError, match="name it in the URL"):
        parse_url("postgresql://db/b", None)
    with pytest.raises(ValueError, match="names the data set 'a', dataset= names 'b'"):
        parse_url("postgresql://db/b?dataset=a", "b")
    with pytest.raises(ValueError, match="accept_rollback applies to ledger files"):
        BudgetLedger("postgresql://db/b?dataset=a", accept_rollback=True)


def test_a_url_opens_a_server_ledger_with_its_analysts_role(server_url):
    """(Creating, opening and the fixed parameters: test_privacy_ledger.py, on both backends.)"""
    url = server_url("clinic")
    ledger = BudgetLedger(url, epsilon=2.0, delta=DELTA)  # the data set named by the URL only
    assert isinstance(ledger, ServerLedger) and isinstance(ledger, BudgetLedger)
    assert ledger.dataset == "clinic" and ledger.analyst_role == "dptensor_analyst" and ledger.path == url
    with pytest.raises(ValueError, match="charged by members of 'dptensor_analyst', not 'other'"):
        BudgetLedger(url, analyst_role="other")


# ----------------------------------------------------------------------------- roles
@pytest.fixture
def team(postgres_cluster, server_url):
    """A curator (may create roles, owns the schema), two analysts in the role, one outsider."""
    tag = uuid.uuid4().hex[:8]
    names = {key: f"{key}_{tag}" for key in ("curator", "alice", "bob", "eve", "analysts")}
    sql = postgres_cluster.sql
    sql(f"CREATE ROLE {names['curator']} LOGIN CREATEROLE")
    sql(f"GRANT CREATE ON DATABASE {server_url.database} TO {names['curator']}")
    for user in ("alice", "bob", "eve"):
        sql(f"CREATE ROLE {names[user]} LOGIN")
    curator = BudgetLedger(server_url("ratings", names["curator"]), epsilon=1.0, delta=DELTA,
                           analyst_role=names["analysts"])  # fmt: skip
    for user in ("alice", "bob"):  # the role was created by the curator (CREATE ROLE ... NOLOGIN)
        sql(f"GRANT {names['analysts']} TO {names[user]}")
    names["url"] = lambda user: server_url("ratings", names[user])
    names["curator_ledger"] = curator
    return names


def _as(team, user: str) -> psycopg.Connection:
    return psycopg.connect(team["url"](user).split("?")[0], autocommit=True)


def test_analysts_charge_and_read_and_the_server_records_who(team, postgres_cluster):
    alice = BudgetLedger(team["url"]("alice"))
    bob = BudgetLedger(team["url"]("bob"))
    alice.charge(gaussian_guarantee(20.0), description="alice's release")
    bob.charge(gaussian_guarantee(20.0), description="bob's release")
    assert [c.description for c in alice.charges()] == ["alice's release", "bob's release"]
    assert alice.spent() == pytest.approx(bob.spent()) == pytest.approx(team["curator_ledger"].spent())
    origins = team["curator_ledger"].charge_origins()
    assert [o["db_user"] for o in origins] == [team["alice"], team["bob"]]
    assert all(o["client_addr"] == "127.0.0.1" for o in origins)
    (first, _) = alice.charges()
    assert first.host and first.pid == os.getpid() and first.argv
    assert first.guarantee["noise_multiplier"] == 20.0  # the release's parameters
    # an outsider sees no ledger at all, and cannot charge one
    with pytest.raises(LedgerError, match="permission denied for schema dptensor"):
        BudgetLedger(team["url"]("eve"))
    with _as(team, "eve") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT * FROM dptensor.charges")
    # ... nor does the analyst of another data set's ledger in the same database (row-level security)
    curator = team["curator_ledger"]
    BudgetLedger(curator.path.replace("dataset=ratings", "dataset=census"), epsilon=1.0, delta=DELTA,
                 analyst_role=f"census_{team['analysts']}")  # fmt: skip
    postgres_cluster.sql(f"GRANT census_{team['analysts']} TO {team['eve']}")
    assert BudgetLedger(team["url"]("eve").replace("dataset=ratings", "dataset=census")).charges() == []
    with pytest.raises(LedgerError, match="no budget ledger for the data set 'ratings'.*analysts' role"):
        BudgetLedger(team["url"]("eve"))
    with _as(team, "eve") as conn:
        assert conn.execute("SELECT count(*) FROM dptensor.charges").fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            conn.execute(
                "INSERT INTO dptensor.charges (ledger, id, token, time, host, pid, \"user\", argv, caller, "
                "description, neighbouring, epsilon, delta, mechanism, n_releases, event, guarantee, "
                "spent_after, chain) VALUES "
                "(%s, 1, 'tok', '', '', 1, '', '', '', '', '', 0, 0, '', 1, '', '', 0, '')",
                (curator._meta["id"],),
            )


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE dptensor.charges SET epsilon = 0, spent_after = 0",
        "DELETE FROM dptensor.charges",
        "TRUNCATE dptensor.charges",
        "DROP TABLE dptensor.charges",
        "DROP SCHEMA dptensor CASCADE",
        "UPDATE dptensor.ledgers SET epsilon = 100",
        "DELETE FROM dptensor.ledgers",
        "ALTER TABLE dptensor.charges DISABLE TRIGGER charges_append_only",
        "DELETE FROM dptensor.budget_changes",
        "INSERT INTO dptensor.ledgers (dataset, id, format, epsilon, delta, relations, fixed, analyst_role) "
        "VALUES ('mine', 'x', 1, 100, 0.1, '[]', '{}', 'public')",
    ],
)
def test_an_analyst_cannot_alter_or_remove_a_charge_or_the_budget(team, postgres_cluster, statement):
    alice = BudgetLedger(team["url"]("alice"))
    alice.charge(gaussian_guarantee(20.0))
    before = alice.charges(), alice.spent(), alice.epsilon
    with _as(team, "alice") as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(statement)
    fresh = BudgetLedger(team["url"]("alice"))
    assert (fresh.charges(), fresh.spent(), fresh.epsilon) == before
    # refused and recorded: the server's log names the statement and the user
    log = postgres_cluster.log.read_text(errors="replace").splitlines()
    assert any(f"{team['alice']}@" in line and f"STATEMENT:  {statement}" in line for line in log)


def test_nobody_updates_deletes_or_truncates_a_charge_not_even_its_curator(team):
    BudgetLedger(team["url"]("alice")).charge(gaussian_guarantee(20.0))
    with _as(team, "curator") as conn:  # the tables' owner
        for statement in ("UPDATE dptensor.charges SET epsilon = 0", "DELETE FROM dptensor.charges",
                          "TRUNCATE dptensor.charges"):  # fmt: skip
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                conn.execute(statement)
        # a charge inserted by hand must be the next one (a gap or a duplicate is refused)
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("INSERT INTO dptensor.charges SELECT * FROM dptensor.charges")
    assert len(team["curator_ledger"].charges()) == 1


def test_a_charge_forged_by_hand_is_refused_as_damage_naming_who(team):
    alice = BudgetLedger(team["url"]("alice"))
    alice.charge(gaussian_guarantee(20.0))
    with _as(team, "alice") as conn:  # a well-formed next id, but not the chain's next checksum
        conn.execute(
            "INSERT INTO dptensor.charges SELECT ledger, 2, 'forged', time, host, pid, \"user\", argv, "
            "caller, description, neighbouring, epsilon, delta, mechanism, n_releases, event, guarantee, "
            "0.0, chain FROM dptensor.charges WHERE id = 1"
        )
    with pytest.raises(LedgerError, match="damaged: charge 2 does not match its checksum"):
        BudgetLedger(team["url"]("bob")).spent()
    for use in (alice.spent, lambda: alice.charge(gaussian_guarantee(20.0))):  # never a smaller total
        with pytest.raises(LedgerError, match="charge 2 does not match"):
            use()
    assert [o["db_user"] for o in team["curator_ledger"].charge_origins()] == [team["alice"]] * 2


def test_an_analyst_cannot_spoof_what_the_server_records_through_her_search_path(team, postgres_cluster,
                                                                                server_url):  # fmt: skip
    postgres_cluster.sql(f"CREATE SCHEMA evil_{team['alice']} AUTHORIZATION {team['alice']}",
                         database=server_url.database)  # fmt: skip
    with _as(team, "alice") as conn:  # her own functions, named like those the trigger calls
        conn.execute(f"CREATE FUNCTION evil_{team['alice']}.host(inet) RETURNS text LANGUAGE sql "
                     "AS $$ SELECT 'spoofed'::text $$")  # fmt: skip
        conn.execute(f"CREATE FUNCTION evil_{team['alice']}.max(bigint) RETURNS bigint LANGUAGE sql "
                     "AS $$ SELECT 0::bigint $$")  # fmt: skip
    url = team["url"]("alice") + f"&options=-csearch_path%3Devil_{team['alice']}%2Cpg_catalog"
    alice = BudgetLedger(url)
    alice.charge(gaussian_guarantee(20.0))
    alice.charge(gaussian_guarantee(20.0))
    origins = team["curator_ledger"].charge_origins()
    assert [(o["id"], o["client_addr"]) for o in origins] == [(1, "127.0.0.1"), (2, "127.0.0.1")]


def test_only_the_curator_changes_the_budget_and_it_is_recorded(team):
    alice = BudgetLedger(team["url"]("alice"))
    alice.charge(gaussian_guarantee(8.0))
    with pytest.raises(BudgetExceededError):
        alice.charge(gaussian_guarantee(2.0))
    with pytest.raises(LedgerError, match="permission denied"):
        alice.change_budget(5.0, DELTA)
    assert alice.epsilon == 1.0 and team["curator_ledger"].budget_changes() == []
    team["curator_ledger"].change_budget(5.0, DELTA)
    (change,) = team["curator_ledger"].budget_changes()
    assert (change["db_user"], change["epsilon_before"], change["epsilon_after"]) == (
        team["curator"], 1.0, 5.0,
    )  # fmt: skip
    alice.charge(gaussian_guarantee(2.0))  # the raised budget holds for every analyst at once
    assert BudgetLedger(team["url"]("bob")).epsilon == 5.0 and len(alice.charges()) == 2


def test_sql_metacharacters_are_stored_verbatim(postgres_cluster, server_url):
    nasty = "x'); DROP TABLE dptensor.charges; -- \"quoted\" \\ $1 %s %(name)s ;"
    role = f'ana"lyst\'s; DROP ROLE postgres; --{uuid.uuid4().hex[:6]}'
    ledger = BudgetLedger(server_url(nasty), epsilon=2.0, delta=DELTA, analyst_role=role)
    ledger.charge(gaussian_guarantee(20.0, neighbouring=nasty), description=nasty)
    again = BudgetLedger(server_url(nasty))
    (charge,) = again.charges()
    assert (again.dataset, again.analyst_role, charge.description, charge.neighbouring) == (
        nasty, role, nasty, nasty,
    )  # fmt: skip
    assert postgres_cluster.sql("SELECT 1 FROM pg_roles WHERE rolname = %s", role) == [(1,)]
    counted = postgres_cluster.sql("SELECT count(*) FROM dptensor.charges", database=server_url.database)
    assert counted == [(1,)]


def test_a_revoked_analyst_or_an_unknown_user_gets_a_ledger_error(team, postgres_cluster):
    alice = BudgetLedger(team["url"]("alice"))
    alice.charge(gaussian_guarantee(20.0))
    postgres_cluster.sql(f"REVOKE {team['analysts']} FROM {team['alice']}")
    with pytest.raises(LedgerError, match=r"permission denied.*nothing was computed \[postgresql: [^\n]*\]$"):
        alice.charge(gaussian_guarantee(20.0))
    start = time.monotonic()
    with pytest.raises(LedgerError, match="server of the budget ledger .* refused the connection.*not exist"):
        BudgetLedger(team["url"]("alice").replace(team["alice"], "nobody_at_all"))
    assert time.monotonic() - start < 10  # not retried for the whole timeout
    assert len(team["curator_ledger"].charges()) == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_charges_through_its_own_connection(server_url):
    ledger = BudgetLedger(server_url(), epsilon=2.0, delta=DELTA)
    ledger.charge(gaussian_guarantee(20.0), description="parent before")
    parent_conn = ledger._conn

    def child() -> int:
        ledger.charge(gaussian_guarantee(20.0), description="child")
        return len(ledger.charges())

    assert in_child(child) == 2
    assert ledger._conn is parent_conn and not parent_conn.closed  # the child neither used nor closed it
    ledger.charge(gaussian_guarantee(20.0), description="parent after")
    assert [c.description for c in ledger.charges()] == ["parent before", "child", "parent after"]


# ----------------------------------------------------------------------------- retries
def test_a_retry_with_the_same_token_is_recognised(server_url):
    ledger = BudgetLedger(server_url(), epsilon=2.0, delta=DELTA)
    first = ledger.charge(gaussian_guarantee(20.0), description="once", token="job-17")
    again = BudgetLedger(server_url()).charge(gaussian_guarantee(20.0), description="once", token="job-17")
    assert again == first and len(ledger.charges()) == 1
    with pytest.raises(ValueError, match="token 'job-17' was used by charge 1 .* for another release"):
        ledger.charge(gaussian_guarantee(30.0), description="other", token="job-17")
    with pytest.raises(ValueError, match="token must be"):
        ledger.charge(gaussian_guarantee(30.0), token="")


def test_a_lost_commit_acknowledgement_is_neither_doubled_nor_dropped(server_url, monkeypatch):
    """The commit reaches the server, the client sees the connection drop: the retry finds the charge."""
    ledger = BudgetLedger(server_url(), epsilon=2.0, delta=DELTA)
    real_commit = psycopg.Connection.commit
    calls = []

    def commit_then_drop(conn):  # noqa: ANN001, ANN202
        real_commit(conn)
        if not calls and conn.info.transaction_status is not None:
            calls.append("dropped")
            conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly (simulated)")

    monkeypatch.setattr(psycopg.Connection, "commit", commit_then_drop)
    charge = ledger.charge(gaussian_guarantee(20.0), description="acknowledgement lost")
    monkeypatch.undo()
    assert calls == ["dropped"]
    assert [c.description for c in BudgetLedger(server_url()).charges()] == ["acknowledgement lost"]
    assert charge.id == 1
    # a commit that did not happen (the connection dropped before it) is made by the retry, once
    real_execute = psycopg.Connection.execute
    dropped = []

    def drop_before_insert(conn, query, *args, **kwargs):  # noqa: ANN001, ANN202
        if not dropped and "INSERT INTO dptensor.charges" in str(query):
            dropped.append(1)
            conn.close()
            raise psycopg.OperationalError("connection lost before the insert (simulated)")
        return real_execute(conn, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", drop_before_insert)
    ledger.charge(gaussian_guarantee(20.0), description="retried")
    monkeypatch.undo()
    assert dropped == [1] and [c.description for c in ledger.charges()] == ["acknowledgement lost", "retried"]


# ----------------------------------------------------------------------------- migration
def test_migrate_a_file_ledger_with_its_checksum(tmp_path, server_url):
    path = tmp_path / "ratings.ledger"
    source = BudgetLedger(path, epsilon=2.0, delta=DELTA, dataset="ratings")
    for sigma in (20.0, 30.0, 40.0):
        source.charge(gaussian_guarantee(sigma), description=f"sigma {sigma}")
    rows = [c.to_row() for c in source.charges()]
    spent = source.spent()
    url = server_url("ratings").split("?")[0]  # the data set's name comes from the file
    server = migrate_to_server(path, url)
    assert [c.to_row() for c in server.charges()] == rows and server.spent() == spent
    assert server.history_checksum() == source._read_meta()["checksum"]
    assert server.dataset == "ratings" and server.relations == ["entry"]
    with pytest.raises(LedgerError, match="was moved to postgresql://.*dataset=ratings"):
        source.charge(gaussian_guarantee(40.0))
    with pytest.raises(LedgerError, match="moved to"):
        BudgetLedger(path).charge(gaussian_guarantee(40.0))
    with pytest.raises(LedgerError, match="already moved"):
        migrate_to_server(path, url)
    assert BudgetLedger(path).spent() == spent  # the file can still be read
    server.charge(gaussian_guarantee(40.0))  # the history continues on the server
    assert len(BudgetLedger(server_url("ratings")).charges()) == 4
    # a data set that already has another ledger on the server is not overwritten
    other = tmp_path / "other.ledger"
    BudgetLedger(other, epsilon=1.0, delta=DELTA, dataset="ratings").charge(gaussian_guarantee(20.0))
    with pytest.raises(LedgerError, match="already has another ledger"):
        migrate_to_server(other, url)
    assert BudgetLedger(other).charge(gaussian_guarantee(20.0)).id == 2  # not marked as moved
