"""A server ledger on connection pools (``pool_size=``, ``pool=``): two pools racing one budget, every
part of the API on a pool of one connection, the caller's pool left as it was, forks and copies.

The race: 2 processes x 4 threads = 8 workers charging one budget through two pools of 2 connections
each. A pool lives in one process (its connections are sockets of that process), so two pools are
two processes: process 0 has one ledger object with a pool of its own (``pool_size=2``) shared by
its 4 threads; process 1 has one caller's ``psycopg_pool.ConnectionPool`` (2 connections) shared
by 3 ledger objects (threads 0 and 1 share one, threads 2 and 3 have one each). 8 workers on 4
connections: the threads also wait for each other's connections (``requests_queued``).
"""

from __future__ import annotations

import copy
import os
import pickle
import sys
import threading

import pytest
from _helpers import gaussian_guarantee, in_child
from test_privacy_ledger_reliability import check_race, run_stress

from dptensor.privacy import BudgetExceededError, BudgetLedger, LedgerError
from dptensor.privacy.ledger import ServerLedger

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
psycopg_pool = pytest.importorskip("psycopg_pool", reason="pip install 'dptensor[server]'")

DELTA = 1e-5


def two_pools(url: str, process: int) -> list[BudgetLedger]:
    """The ledgers of the 4 threads of ``process`` (0: a pool of its own; 1: the caller's pool)."""
    if process == 0:
        return [BudgetLedger(url, pool_size=2)] * 4
    pool = psycopg_pool.ConnectionPool(url.split("?")[0], min_size=2, max_size=2, open=True)
    shared = BudgetLedger(url, pool=pool)
    return [shared, shared, BudgetLedger(url, pool=pool), BudgetLedger(url, pool=pool)]


def test_8_workers_on_two_pools_never_overspend(server_url):
    url = server_url("stress")
    stats = run_stress(url, n_processes=2, n_attempts=30, n_threads=4, ledgers=two_pools)
    charges = check_race(stats, url)
    assert stats["attempted"] == 240 and len({c.pid for c in charges}) == 2  # both pools charged
    assert len(stats["pools"]) == 2 and all(p["pool_size"] == 2 for p in stats["pools"]), stats["pools"]
    assert all(p["requests_num"] >= 120 for p in stats["pools"])  # every attempt took a pooled connection
    print(f"pooled stress: {stats}", file=sys.stderr)


def test_the_whole_api_on_a_pool_of_one_connection(server_url):
    """Nothing takes a second connection inside a transaction (it would wait for itself)."""
    ledger = BudgetLedger(server_url("clinic"), epsilon=1.0, delta=DELTA, pool_size=1, timeout=5)
    assert isinstance(ledger, ServerLedger) and ledger.relations == []
    ledger.charge(gaussian_guarantee(20.0), description="first", token="t-1")
    assert ledger.charge(gaussian_guarantee(20.0), description="first", token="t-1").id == 1
    assert ledger.would_spend(gaussian_guarantee(20.0)) > ledger.spent() > 0
    assert [c.description for c in ledger.charges()] == ["first"] and ledger.relations == ["entry"]
    assert ledger.summary()["n_charges"] == 1 and ledger.history_checksum()
    assert len(ledger.charge_origins()) == 1 and ledger.budget_changes() == []
    with pytest.raises(BudgetExceededError):
        ledger.charge(gaussian_guarantee(2.0))
    ledger.change_budget(2.0, DELTA)
    assert ledger.epsilon == 2.0 and len(ledger.budget_changes()) == 1
    stats = ledger._pool.stats()
    assert (stats["pool_size"], stats["requests_waiting"]) == (1, 0)
    ledger.close()  # the pool is closed, and opened again when the ledger is used
    assert ledger._pool.stats() == {} and len(ledger.charges()) == 1
    # opened without a pool, the same ledger
    assert BudgetLedger(server_url("clinic")).charges() == ledger.charges()


def test_threads_sharing_a_ledger_charge_on_the_pool_s_connections(server_url):
    ledger = BudgetLedger(server_url(), epsilon=100.0, delta=DELTA, pool_size=3)
    barrier = threading.Barrier(6)

    def charge(k: int) -> None:
        barrier.wait()
        for i in range(5):
            ledger.charge(gaussian_guarantee(200.0), description=f"{k}.{i}")

    threads = [threading.Thread(target=charge, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    charges = ledger.charges()
    assert sorted(c.description for c in charges) == sorted(f"{k}.{i}" for k in range(6) for i in range(5))
    assert [c.id for c in charges] == list(range(1, 31))
    assert ledger._pool.stats()["pool_size"] == 3


def test_the_caller_s_pool_is_used_as_it_is_and_given_back_as_it_came(server_url, postgres_cluster):
    from psycopg.rows import dict_row

    url = server_url("ratings")
    caller_settings = {"autocommit": True, "row_factory": dict_row}
    with psycopg_pool.ConnectionPool(url.split("?")[0], min_size=1, max_size=1, open=True,
                                     kwargs=caller_settings) as pool:  # fmt: skip
        ledger = BudgetLedger(url, epsilon=1.0, delta=DELTA, pool=pool, timeout=7)
        ledger.charge(gaussian_guarantee(20.0))
        assert len(ledger.charges()) == 1 and ledger.spent() > 0
        with pool.connection() as conn:  # its session untouched: lock_timeout was the transaction's only
            assert conn.autocommit and conn.row_factory is dict_row
            assert conn.execute("SHOW lock_timeout").fetchone() == {"lock_timeout": "0"}
        ledger.close()  # the caller's pool stays open
        assert not pool.closed and len(ledger.charges()) == 1
        # a copy connects on its own (the pool is not copied): pickle, and deepcopy (sklearn's clone)
        for other in (pickle.loads(pickle.dumps(ledger)), copy.deepcopy(ledger)):
            assert other._pool is None and len(other.charges()) == 1
        # the pool must reach the URL's database and user
        elsewhere = f"elsewhere_{server_url.database}"
        postgres_cluster.sql(f"CREATE DATABASE {elsewhere}", database="postgres")
        with pytest.raises(LedgerError, match="reaches dbname .*the ledger's URL names 'elsewhere_"):
            BudgetLedger(url.replace(f"/{server_url.database}?", f"/{elsewhere}?"), pool=pool)
        with pytest.raises(LedgerError, match="pool given reaches user .* names 'someone_else'"):
            BudgetLedger(url.replace("//", "//someone_else@").replace(f"{postgres_cluster.superuser}@", ""),
                         pool=pool)  # fmt: skip
        # every connection of the pool busy for the whole timeout: a LedgerError that says so
        with pool.connection():
            with pytest.raises(LedgerError, match="no connection of the pool .* free within 0.5 s"):
                BudgetLedger(url, pool=pool, timeout=0.5).spent()
    with pytest.raises(ValueError, match="not both"):
        BudgetLedger(url, pool=pool, pool_size=2)
    with pytest.raises(TypeError, match="psycopg_pool.ConnectionPool"):
        BudgetLedger(url, pool="postgresql://db")
    with pytest.raises(ValueError, match="pool_size must be"):
        BudgetLedger(url, pool_size=0)


def test_a_pool_crosses_no_fork(server_url):
    url = server_url()
    own = BudgetLedger(url, epsilon=2.0, delta=DELTA, pool_size=2)
    own.charge(gaussian_guarantee(20.0), description="parent before")
    parent_pool = own._pool._pool

    def child() -> int:  # the child opens a pool of its own, and leaves its parent's alone
        own.charge(gaussian_guarantee(20.0), description="child")
        assert own._pool._pool is not parent_pool
        return len(own.charges())

    assert in_child(child) == 2
    assert own._pool._pool is parent_pool and not parent_pool.closed
    own.charge(gaussian_guarantee(20.0), description="parent after")
    assert [c.description for c in own.charges()] == ["parent before", "child", "parent after"]
    with psycopg_pool.ConnectionPool(url.split("?")[0], min_size=1, open=True) as pool:
        theirs = BudgetLedger(url, pool=pool)
        refused = in_child(lambda: theirs.charge(gaussian_guarantee(20.0)))
        assert isinstance(refused, tuple) and isinstance(refused[1], LedgerError), refused
        assert "made in another process" in str(refused[1])
        theirs.charge(gaussian_guarantee(20.0), description="parent's pool")
    assert len(own.charges()) == 4


def test_without_psycopg_pool_a_pool_is_a_ledger_error(server_url, monkeypatch):
    url = server_url()
    BudgetLedger(url, epsilon=1.0, delta=DELTA)
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)
    with pytest.raises(LedgerError, match=r"needs psycopg_pool.*pip install 'dptensor\[server\]'"):
        BudgetLedger(url, pool_size=2)
    assert BudgetLedger(url).spent() == 0.0  # without a pool, psycopg alone
