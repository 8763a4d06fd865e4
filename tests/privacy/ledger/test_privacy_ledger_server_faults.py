"""The server ledger under faults: racing processes, clients SIGKILLed mid-transaction, and the server
stopped with ``pg_ctl stop -m immediate`` (a crash) in the middle of a run and started again.

Child processes are forked; each charges with its own idempotency tokens and writes the token of
every *acknowledged* charge (``charge`` returned) to a pipe, so the parent knows exactly which
charges a client was told are recorded. After each fault: every acknowledged charge is in the
ledger (none lost), every token once and the ids 1..n without gaps (none doubled), the total is
the exact composition of the charges and within the budget (no overspend).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time

import dp_accounting
import pytest
from _helpers import event_guarantee, gaussian_guarantee
from test_privacy_ledger_reliability import STRESS_DISCRETIZATION, check_race, run_stress

from dptensor.privacy import BudgetExceededError, BudgetLedger, LedgerError
from dptensor.privacy.ledger import composed_epsilon

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

DELTA = 1e-5
#: One charge of every fault test: a Gaussian release (its total is the exact GDP composition).
SIGMA = 40.0


def test_racing_processes_never_overspend_on_a_server(server_url):
    """8 processes x 50 charges against a budget that allows exactly 100 (the file ledger's stress test)."""
    url = server_url("stress")
    stats = run_stress(url)
    charges = check_race(stats, url)
    assert len({c.pid for c in charges}) > 1  # several processes really charged
    print(f"server stress: {stats}", file=sys.stderr)


# ----------------------------------------------------------------------------- helpers
def _charging_child(url: str, n: int, write_fd: int, hold: float = 0.0) -> None:  # pragma: no cover - child
    """Charge ``n`` times (tokens ``pid-i``), writing each acknowledged token to ``write_fd``; then exit."""
    code = 0
    try:
        ledger = BudgetLedger(url, timeout=60)
        if hold:  # sleep inside the transaction, holding the ledger's lock (to be killed there)
            admit = ledger._admit

            def slow_admit(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
                time.sleep(hold)
                return admit(*args, **kwargs)

            ledger._admit = slow_admit
        for i in range(n):
            token = f"{os.getpid()}-{i}"
            try:
                ledger.charge(gaussian_guarantee(SIGMA), description=token, token=token)
            except BudgetExceededError:
                os.write(write_fd, f"refused {token}\n".encode())
                continue
            os.write(write_fd, f"ok {token}\n".encode())
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        os.write(write_fd, f"error {exc!r}\n".replace("\n", " ").encode() + b"\n")
        code = 1
    finally:
        os._exit(code)


def _spawn(url: str, n: int, hold: float = 0.0) -> tuple[int, int]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        _charging_child(url, n, write, hold)
    os.close(write)
    return pid, read


def _collect(read: int) -> list[str]:
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    return b"".join(chunks).decode().splitlines()


def _check_ledger(url: str, acknowledged: set[str], budget: float) -> dict:
    """No acknowledged charge lost, none doubled, no overspend; the figures."""
    ledger = BudgetLedger(url)
    charges = ledger.charges()
    tokens = [c.description for c in charges]  # (each charge's description is its token)
    assert [c.id for c in charges] == list(range(1, len(charges) + 1))
    assert len(set(tokens)) == len(tokens), "a charge was recorded twice"
    lost = acknowledged - set(tokens)
    assert not lost, f"acknowledged charges lost: {sorted(lost)}"
    exact = composed_epsilon([c.event for c in charges], DELTA, ledger.value_discretization_interval)
    assert ledger.spent() == exact <= budget
    return {"recorded": len(charges), "acknowledged": len(acknowledged), "lost": len(lost),
            "doubled": len(tokens) - len(set(tokens)), "spent": exact, "budget": budget}  # fmt: skip


def _wait_for(cluster, database: str, query: str, at_least: int, timeout: float = 20.0) -> bool:  # noqa: ANN001
    """Wait until ``query`` (one count) reaches ``at_least``; whether it did within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cluster.sql(query, database=database)[0][0] >= at_least:
            return True
        time.sleep(0.01)
    return False


def _budget_for(n: int) -> float:
    """A budget between the totals of ``n`` and ``n + 1`` charges of ``SIGMA``."""
    event = dp_accounting.GaussianDpEvent(SIGMA)
    return (composed_epsilon([event] * n, DELTA, 1e-4) + composed_epsilon([event] * (n + 1), DELTA, 1e-4)) / 2


# ----------------------------------------------------------------------------- killed clients
def test_a_client_killed_inside_its_transaction_leaves_no_trace_and_no_lock(server_url, postgres_cluster):
    url = server_url()
    ledger = BudgetLedger(url, epsilon=_budget_for(30), delta=DELTA)
    ledger.charge(gaussian_guarantee(SIGMA), description="before")
    pid, read = _spawn(url, 1, hold=30.0)  # it takes the ledger's lock, then sleeps inside the transaction
    if not _wait_for(postgres_cluster, server_url.database,
                     "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted", 1):  # fmt: skip
        pytest.fail("the child never took the ledger's lock")
    start = time.monotonic()  # a charge now waits for the lock, `timeout` seconds at most
    with pytest.raises(LedgerError, match="stayed locked by another charge for 0.5 s"):
        BudgetLedger(url, timeout=0.5).charge(gaussian_guarantee(SIGMA))
    assert time.monotonic() - start < 5
    assert [c.description for c in BudgetLedger(url).charges()] == ["before"]  # reads do not wait
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert _collect(read) == []  # it acknowledged nothing
    start = time.monotonic()
    ledger.charge(gaussian_guarantee(SIGMA), description="after")  # the lock went with the dead client
    assert time.monotonic() - start < 10
    assert [c.description for c in BudgetLedger(url).charges()] == ["before", "after"]


def _kill_at_random(url: str, n_clients: int, n_charges: int, budget_n: int, seed: int) -> dict:
    rng = random.Random(seed)
    BudgetLedger(url, epsilon=_budget_for(budget_n), delta=DELTA)
    acknowledged: set[str] = set()
    attempted = killed = 0
    for _ in range(n_clients):
        pid, read = _spawn(url, n_charges)
        time.sleep(rng.uniform(0.02, 0.4))
        os.kill(pid, signal.SIGKILL)
        killed += 1
        os.waitpid(pid, 0)
        lines = _collect(read)
        assert not [line for line in lines if line.startswith("error")], lines
        acknowledged |= {line.split()[1] for line in lines if line.startswith("ok")}
        attempted += len(lines) + 1  # (the charge it was killed in, if any)
    stats = _check_ledger(url, acknowledged, _budget_for(budget_n))
    stats.update(killed=killed, attempted_at_most=attempted)
    return stats


def test_clients_sigkilled_mid_run_lose_and_double_nothing(server_url):
    stats = _kill_at_random(server_url(), n_clients=4, n_charges=1000, budget_n=1000, seed=0)
    assert stats["recorded"] >= stats["acknowledged"] > 0
    assert stats["recorded"] <= stats["acknowledged"] + stats["killed"]  # at most one unacknowledged each
    print(f"server sigkill: {stats}", file=sys.stderr)


@pytest.mark.slow
def test_clients_sigkilled_at_40_random_points_lose_and_double_nothing(server_url):
    stats = _kill_at_random(server_url(), n_clients=40, n_charges=1000, budget_n=60, seed=1)
    assert stats["recorded"] <= 60
    print(f"server sigkill x40: {stats}", file=sys.stderr)


# ----------------------------------------------------------------------------- a crashed server
def _crash_run(url: str, database: str, cluster, n_clients: int, n_charges: int, budget_n: int,
               down: float) -> dict:  # fmt: skip  # noqa: ANN001
    BudgetLedger(url, epsilon=_budget_for(budget_n), delta=DELTA)
    children = [_spawn(url, n_charges) for _ in range(n_clients)]
    # crash once a quarter of the charges that fit are in: in the middle of the run
    assert _wait_for(cluster, database, "SELECT count(*) FROM dptensor.charges", budget_n // 4)
    try:
        cluster.stop("immediate")  # no shutdown checkpoint: a crash; the clients' connections drop
        time.sleep(down)
    finally:
        cluster.start()
    at_crash = cluster.sql("SELECT count(*) FROM dptensor.charges", database=database)[0][0]
    lines = []
    for pid, read in children:
        lines += _collect(read)
        os.waitpid(pid, 0)
    errors = [line for line in lines if line.startswith("error")]
    assert errors == []  # every client rode through the restart (retrying with the same token)
    acknowledged = {line.split()[1] for line in lines if line.startswith("ok")}
    refused = sum(line.startswith("refused") for line in lines)
    stats = _check_ledger(url, acknowledged, _budget_for(budget_n))
    assert stats["recorded"] == len(acknowledged)  # every client finished: nothing left unacknowledged
    assert len(acknowledged) == min(budget_n, n_clients * n_charges)
    assert refused == n_clients * n_charges - len(acknowledged)  # refused: exactly those beyond the budget
    assert at_crash < budget_n  # the run was not over when the server crashed
    stats.update(attempted=n_clients * n_charges, accepted=len(acknowledged), refused=refused, down_s=down,
                 recorded_at_restart=at_crash)  # fmt: skip
    return stats


def test_the_server_crashing_mid_run_loses_and_doubles_nothing(server_url, postgres_cluster):
    stats = _crash_run(server_url(), server_url.database, postgres_cluster, n_clients=4, n_charges=40,
                       budget_n=120, down=0.5)  # fmt: skip
    print(f"server crash and restart: {stats}", file=sys.stderr)


@pytest.mark.slow
def test_the_server_crashing_mid_run_of_8_clients(server_url, postgres_cluster):
    stats = _crash_run(server_url(), server_url.database, postgres_cluster, n_clients=8, n_charges=100,
                       budget_n=600, down=3.0)  # fmt: skip
    print(f"server crash and restart x8: {stats}", file=sys.stderr)


def test_an_event_of_every_kind_composes_like_the_file(server_url, tmp_path):
    """The same charges on both backends: the same totals, charge after charge."""
    events = [dp_accounting.LaplaceDpEvent(8.0), dp_accounting.GaussianDpEvent(12.0),
              dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(30.0), 4)]  # fmt: skip
    server = BudgetLedger(server_url(), epsilon=20.0, delta=DELTA,
                          value_discretization_interval=STRESS_DISCRETIZATION)  # fmt: skip
    file = BudgetLedger(tmp_path / "f.ledger", epsilon=20.0, delta=DELTA,
                        value_discretization_interval=STRESS_DISCRETIZATION)  # fmt: skip
    for event in events * 2:
        a, b = server.charge(event_guarantee(event)), file.charge(event_guarantee(event))
        assert a.spent_after == b.spent_after
    assert server.spent() == file.spent()
