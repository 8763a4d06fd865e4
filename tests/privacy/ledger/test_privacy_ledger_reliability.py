"""BudgetLedger under failure: bad files, read-only files, full disks, killed processes, racing processes.

Child processes are forked (fast: no re-import); each reports back through a pipe and leaves
with ``os._exit`` so that nothing of pytest runs in it.
"""

from __future__ import annotations

import gc
import hashlib
import multiprocessing as mp
import os
import signal
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from _helpers import event_guarantee, gaussian_guarantee, in_child
from dp_accounting import pld

from dptensor.models import TensorCompletion
from dptensor.models.completion import CompletionOptions
from dptensor.privacy import (
    BudgetExceededError,
    BudgetLedger,
    LedgerError,
)
from dptensor.privacy import ledger as ledger_module
from dptensor.privacy.ledger import SCHEMA_VERSION, composed_epsilon

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

DELTA = 1e-5


def integrity(path: Path) -> str:
    conn = sqlite3.connect(str(path))
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_ledger(
    path: Path,
    n_charges: int = 3,
    *,
    epsilon: float = 50.0,
    description: str = "",
    neighbouring: str = "entry",
) -> BudgetLedger:
    ledger = BudgetLedger(path, epsilon=epsilon, delta=DELTA, dataset="d")
    for _ in range(n_charges):
        ledger.charge(gaussian_guarantee(40.0, neighbouring=neighbouring), description=description)
    ledger.close()
    assert not Path(f"{path}-wal").exists()  # the last connection closed: the log is checkpointed
    return ledger


# ----------------------------------------------------------------------------- bad files
def _assert_refused_untouched(path: Path, match: str) -> None:
    before = digest(path)
    for kwargs in ({}, {"epsilon": 50.0, "delta": DELTA}):
        with pytest.raises(LedgerError, match=match):
            BudgetLedger(path, **kwargs)
    assert digest(path) == before  # never repaired, replaced or reset


def test_not_a_ledger(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("epsilon = 1\n" * 50)
    _assert_refused_untouched(text, "not a dptensor budget ledger: not an SQLite file")
    empty = tmp_path / "empty.ledger"
    empty.write_bytes(b"")
    _assert_refused_untouched(empty, "empty file, not a dptensor budget ledger")
    foreign = tmp_path / "app.sqlite"
    conn = sqlite3.connect(str(foreign))
    conn.execute("CREATE TABLE charges (id INTEGER, amount REAL)")
    conn.execute("INSERT INTO charges VALUES (1, 2.5)")
    conn.commit()
    conn.close()
    _assert_refused_untouched(
        foreign, r"an SQLite database but not a dptensor budget ledger \(application_id 0x0"
    )


def test_newer_schema_version(tmp_path):
    path = tmp_path / "b.ledger"
    make_ledger(path)
    conn = sqlite3.connect(str(path))
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    _assert_refused_untouched(
        path, f"written by a newer dptensor \\(ledger format {SCHEMA_VERSION + 1}.*upgrade"
    )


@pytest.mark.parametrize("damage", ["header", "page", "truncate", "event", "meta"])
def test_damaged_file(tmp_path, damage):
    path = tmp_path / "b.ledger"
    make_ledger(path, 40, description="x" * 300)  # several pages
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) >= 6 * page
    if damage == "header":
        data[:16] = b"\x00" * 16
        match = "not an SQLite file"
    elif damage == "page":
        data[3 * page : 4 * page] = np.random.default_rng(0).integers(0, 256, page, dtype=np.uint8).tobytes()
        match = "damaged"
    elif damage == "truncate":
        data = data[: len(data) // 2]
        match = "damaged"
    if damage in ("header", "page", "truncate"):
        path.write_bytes(bytes(data))
    else:  # well-formed SQLite, but a record dptensor cannot trust
        conn = sqlite3.connect(str(path))
        if damage == "event":
            conn.execute(
                'UPDATE charges SET event = \'{"module_name": "os", "class_name": "system"}\' WHERE id = 17'
            )
            match = "damaged: charge 17"
        else:
            conn.execute("DELETE FROM meta WHERE key = 'epsilon'")
            match = "damaged: bad metadata"
        conn.commit()
        conn.close()
    if damage == "event":  # opens (the structure is sound) but refuses to compose, charge or list
        ledger = BudgetLedger(path)
        before = digest(path)
        for action in (ledger.spent, ledger.charges, lambda: ledger.charge(gaussian_guarantee(40.0))):
            with pytest.raises(LedgerError, match=match):
                action()
        assert digest(path) == before
    else:
        _assert_refused_untouched(path, match)


# ----------------------------------------------------------------------------- read-only
def _readonly_attempt(path: Path) -> tuple:
    if os.geteuid() == 0:  # root ignores file permissions: act as an ordinary user
        os.setgid(65534)
        os.setuid(65534)
    ledger = BudgetLedger(path)
    spent, n = ledger.spent(), len(ledger.charges())
    try:
        ledger.charge(gaussian_guarantee(40.0))
    except LedgerError as exc:
        return spent, n, str(exc)
    return spent, n, "charged"


def test_read_only_file(tmp_path):
    # a directory an unprivileged user can reach (pytest's own base directory is private to its owner)
    base = Path(tempfile.mkdtemp(prefix="ledger-ro-"))
    try:
        os.chmod(base, 0o777)
        path = base / "b.ledger"
        ledger = make_ledger(path)
        spent = ledger.spent()
        ledger.close()  # this (root) process's log files would not be writable by the other user
        os.chmod(path, 0o444)
        before = digest(path)
        result = in_child(lambda: _readonly_attempt(path))
        assert result[:2] == (spent, 3), result
        assert "is read-only" in result[2] and "charge was not recorded and nothing was computed" in result[2]
        assert digest(path) == before
        with BudgetLedger(path) as check:  # closed again before the other user's turn
            assert len(check.charges()) == 3
        # made writable again, it works
        os.chmod(path, 0o666)
        assert in_child(lambda: _readonly_attempt(path))[2] == "charged"
    finally:
        for p in base.iterdir():
            p.unlink()
        base.rmdir()


# ----------------------------------------------------------------------------- full disk
def _charge_until_full(path: Path, limit: int) -> tuple[int, str]:
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes beyond the limit fail with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    ledger = BudgetLedger(path)
    for n in range(10_000):
        try:
            ledger.charge(gaussian_guarantee(40.0), description="y" * 2000)
        except LedgerError as exc:
            return n, str(exc)
    return -1, "never full"


def test_full_disk_loses_no_charge(tmp_path):
    """A failing write (file-size limit: the OS refuses to grow the files) records nothing, loses nothing."""
    path = tmp_path / "b.ledger"
    make_ledger(path, 3)
    n_ok, message = in_child(lambda: _charge_until_full(path, 256 * 1024))
    assert n_ok > 0 and "disk full or I/O error" in message and "nothing was computed" in message, message
    assert integrity(path) == "ok"
    ledger = BudgetLedger(path)
    charges = ledger.charges()
    assert len(charges) == 3 + n_ok  # exactly the charges that returned
    assert all(c.description == "y" * 2000 for c in charges[3:])
    ledger.charge(gaussian_guarantee(40.0))  # room again: the ledger carries on
    assert len(ledger.charges()) == 4 + n_ok


class _SmallDisk(BudgetLedger):
    """A ledger whose database may not grow (SQLite's max_page_count): SQLITE_FULL on growth."""

    def _connect(self) -> sqlite3.Connection:
        conn = super()._connect()
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count={pages}")
        return conn


def test_database_full_loses_no_charge(tmp_path):
    path = tmp_path / "b.ledger"
    make_ledger(path, 2)
    small = _SmallDisk(path)
    accepted = 0
    with pytest.raises(LedgerError, match="disk full or I/O error.*charge was not recorded"):
        for _ in range(200):
            small.charge(gaussian_guarantee(40.0), description="z" * 3000)
            accepted += 1
    assert integrity(path) == "ok"
    assert len(BudgetLedger(path).charges()) == 2 + accepted


# ----------------------------------------------------------------------------- killed processes
def _fit_forever(path: str) -> None:  # pragma: no cover - runs in a child that is killed
    rng = np.random.default_rng(0)
    indices = np.stack([rng.integers(0, 20, 2000) for _ in range(3)], axis=1)
    model = TensorCompletion(3, privacy="gradient_dpsgd", neighbouring="entry-value", epsilon=0.5, delta=1e-6,
        ledger=BudgetLedger(path), options=CompletionOptions(n_epochs=10**6))
    model.fit(indices, rng.standard_normal(2000), (20, 20, 20))
    Path(path + ".finished").touch()


def _wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError("condition not reached")
        time.sleep(0.02)


def test_sigkill_during_fit_keeps_the_charge(tmp_path):
    path = tmp_path / "b.ledger"
    ledger = make_ledger(path, 1, neighbouring="entry-value")
    ctx = mp.get_context("fork")
    child = ctx.Process(target=_fit_forever, args=(str(path),))
    child.start()
    try:
        _wait_for(lambda: len(ledger.charges()) == 2 or not child.is_alive())
        time.sleep(0.3)  # inside the SGD epochs now
        assert child.is_alive()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    assert child.exitcode == -signal.SIGKILL and not Path(f"{path}.finished").exists()
    assert integrity(path) == "ok"
    charges = BudgetLedger(path).charges()
    assert len(charges) == 2 and "TensorCompletion" in charges[1].description and charges[1].pid == child.pid
    ledger.charge(gaussian_guarantee(40.0, neighbouring="entry-value"))  # no lock left behind
    assert len(ledger.charges()) == 3


def _charge_and_hang(path: str, ready) -> None:  # noqa: ANN001 - pragma: no cover - killed in the child
    original = BudgetLedger._total  # the composition, inside the charge's write transaction

    def hang(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - holds the write transaction open
        value = original(*args, **kwargs)
        ready.set()
        time.sleep(600)
        return value

    BudgetLedger._total = hang
    BudgetLedger(path).charge(gaussian_guarantee(40.0), description="never committed")


def test_sigkill_during_charge_leaves_no_trace_and_no_lock(tmp_path):
    path = tmp_path / "b.ledger"
    ledger = make_ledger(path, 2)
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    child = ctx.Process(target=_charge_and_hang, args=(str(path), ready))
    child.start()
    try:
        assert ready.wait(60)
        # the child holds the write lock: a charge now would wait, a read does not
        assert len(ledger.charges()) == 2
        with pytest.raises(LedgerError, match="locked by another process"):
            BudgetLedger(path, timeout=0.2).charge(gaussian_guarantee(40.0))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    assert integrity(path) == "ok"
    assert [c.description for c in ledger.charges()] == ["", ""]
    ledger.charge(gaussian_guarantee(40.0), description="after")
    assert [c.description for c in ledger.charges()] == ["", "", "after"]


def test_forked_child_reuses_the_ledger_object(tmp_path):
    """A child forked while the parent's connection is open opens its own; the parent's stays usable."""
    ledger = make_ledger(tmp_path / "b.ledger", 1)
    ledger.charge(gaussian_guarantee(40.0), description="parent before")
    parent_conn = ledger._conn
    assert parent_conn is not None

    def child() -> int:
        ledger.charge(gaussian_guarantee(40.0), description="child")
        # the inherited connection was set aside, never used nor closed (SQLite's rule for fork)
        assert ledger._conn is not parent_conn and any(c is parent_conn for c in ledger_module._INHERITED)
        ledger.close()
        gc.collect()
        return len(ledger.charges())

    assert in_child(child) == 3
    assert ledger._conn is parent_conn
    ledger.charge(gaussian_guarantee(40.0), description="parent after")
    assert [c.description for c in ledger.charges()] == ["", "parent before", "child", "parent after"]
    assert integrity(tmp_path / "b.ledger") == "ok"


# ----------------------------------------------------------------------------- racing processes
#: Every racing charge is one Laplace release of scale 50 (pure epsilon 0.02 on its own; e.g. an
#: input-perturbation completion): it goes through dp-accounting's PLD accountant.
STRESS_EVENT = dp_accounting.LaplaceDpEvent(50.0)
STRESS_DISCRETIZATION = 1e-4


def _race(path: str, n_attempts: int, barrier, queue, worker: int, n_threads: int,  # noqa: ANN001
          ledgers: Callable[[str, int], list[BudgetLedger]] | None) -> None:  # pragma: no cover - child
    """One racing process: ``n_threads`` threads (thread ``k`` charging ``ledgers(path, worker)[k]``,
    default one ``BudgetLedger(path)``), ``n_attempts`` charges each; reports every acknowledged
    charge's description and every refusal's ``(spent, total)``."""
    ledger_module._EPSILON_CACHE.clear()  # compute like a fresh process would
    try:
        opened = ledgers(path, worker) if ledgers is not None else [BudgetLedger(path)] * n_threads
        g = event_guarantee(
            STRESS_EVENT,
            epsilon=1 / STRESS_EVENT.noise_multiplier,
            delta=0.0,
            neighbouring="entry-value",
            mechanism="laplace",
        )

        def attempts(thread: int) -> tuple[list[str], list[tuple[float, float]], str]:
            acknowledged: list[str] = []
            refusals: list[tuple[float, float]] = []
            try:
                barrier.wait()
                for i in range(n_attempts):
                    description = f"process {worker} thread {thread} attempt {i}"
                    try:
                        opened[thread].charge(g, description=description)
                        acknowledged.append(description)
                    except BudgetExceededError as exc:
                        refusals.append((exc.spent, exc.total))
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                return acknowledged, refusals, repr(exc)
            return acknowledged, refusals, ""

        if n_threads == 1:  # (in the main thread: a file ledger's SQLite connection stays in its thread)
            results = [attempts(0)]
        else:
            with ThreadPoolExecutor(n_threads) as threads:
                results = list(threads.map(attempts, range(n_threads)))
        pools = {id(led._pool._pool): led._pool.stats()  # (ledgers on one caller's pool: one pool)
                 for led in opened if getattr(led, "_pool", None) is not None}  # fmt: skip
        queue.put((results, list(pools.values()), ""))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        queue.put(([], [], repr(exc)))


def stress_budget(n_allowed: int = 100) -> tuple[float, float, float]:
    """``(f(n), budget, f(n + 1))``: a budget halfway between the totals of ``n`` and ``n + 1`` charges.

    Every charge is the same event, so the ledger's total after ``k`` charges is one number
    ``f(k)``: the recorded events are regrouped into ``SelfComposedDpEvent(event, k)`` before
    the PLD accountant sees them, whatever order the processes charged in, and the PLD
    computation is deterministic. Near ``k = 100``, ``f`` grows by about 0.005 per charge --
    some 50 PLD discretisation intervals -- so the budget between ``f(100)`` and ``f(101)``
    admits the 100th charge and refuses the 101st, under any interleaving.
    """
    f_n = composed_epsilon([STRESS_EVENT] * n_allowed, DELTA, STRESS_DISCRETIZATION)
    f_next = composed_epsilon([STRESS_EVENT] * (n_allowed + 1), DELTA, STRESS_DISCRETIZATION)
    return f_n, (f_n + f_next) / 2, f_next


def run_stress(path: Path | str, n_processes: int = 8, n_attempts: int = 50, n_allowed: int = 100, *,
               n_threads: int = 1, ledgers: Callable[[str, int], list[BudgetLedger]] | None = None) -> dict:
    """Race ``n_processes`` processes of ``n_threads`` threads, ``n_attempts`` charges each, against a
    budget for ``n_allowed``; ``ledgers(path, process)`` opens each process's ledgers (see :func:`_race`)."""
    f_n, budget, f_next = stress_budget(n_allowed)
    ledger = BudgetLedger(
        path,
        epsilon=budget,
        delta=DELTA,
        dataset="stress",
        value_discretization_interval=STRESS_DISCRETIZATION,
    )
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(n_processes * n_threads), ctx.Queue()
    procs = [
        ctx.Process(target=_race, args=(str(path), n_attempts, barrier, queue, k, n_threads, ledgers))
        for k in range(n_processes)
    ]
    start = time.perf_counter()
    for p in procs:
        p.start()
    reports = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    seconds = time.perf_counter() - start
    workers = [r for report in reports for r in report[0]]
    acknowledged = [d for r in workers for d in r[0]]
    recorded = [c.description for c in ledger.charges()]
    return {
        "processes": n_processes,
        "threads_per_process": n_threads,
        "attempts_per_worker": n_attempts,
        "attempted": n_processes * n_threads * n_attempts,
        "accepted": len(acknowledged),
        "refused": sum(len(r[1]) for r in workers),
        "lost": len(set(acknowledged) - set(recorded)),  # acknowledged, not in the ledger
        "doubled": len(recorded) - len(set(recorded)),  # one attempt recorded twice
        "unacknowledged": len(set(recorded) - set(acknowledged)),  # recorded, its client told otherwise
        "refusals": sorted(set(t for r in workers for t in r[1])),  # (spent, total) of each refusal
        "errors": [r[2] for r in reports if r[2]] + [r[2] for r in workers if r[2]],
        "per_worker_accepted": [len(r[0]) for r in workers],
        "pools": [pool for report in reports for pool in report[1]],
        "event": repr(STRESS_EVENT),
        "event_epsilon": 1 / STRESS_EVENT.noise_multiplier,
        "budget_epsilon": budget,
        "budget_delta": DELTA,
        "value_discretization_interval": STRESS_DISCRETIZATION,
        f"epsilon_after_{n_allowed}": f_n,
        f"epsilon_after_{n_allowed + 1}": f_next,
        "final_epsilon": ledger.spent(),
        "n_charges": len(recorded),
        "seconds": seconds,
        "attempts_per_second": n_processes * n_threads * n_attempts / seconds,
    }


def check_race(stats: dict, where: Path | str, n_allowed: int = 100) -> list:
    """The checks of every race (:func:`run_stress`), whatever the backend and the connections: the
    accepted charges compose to at most the budget, and the refused attempts are exactly those that
    would have exceeded it -- ``n_allowed`` accepted, every other attempt refused with the ledger's
    total then at ``f(n_allowed)`` and the attempt's at ``f(n_allowed + 1)`` > budget; nothing lost
    or doubled; ids 1..n, totals increasing. Returns the ledger's charges."""
    f_n, budget, f_next = stress_budget(n_allowed)
    assert stats["errors"] == [], stats["errors"]
    assert (stats["accepted"], stats["refused"], stats["n_charges"]) == (
        n_allowed, stats["attempted"] - n_allowed, n_allowed,
    ), stats  # fmt: skip
    assert (stats["lost"], stats["doubled"], stats["unacknowledged"]) == (0, 0, 0), stats
    assert stats["refusals"] == [(f_n, f_next)], stats["refusals"]
    assert stats["final_epsilon"] == f_n <= budget < f_next
    charges = BudgetLedger(where).charges()
    assert [c.id for c in charges] == list(range(1, n_allowed + 1))
    after = [c.spent_after for c in charges]
    assert all(a < b for a, b in zip(after, after[1:], strict=False)) and after[-1] == f_n
    return charges


def test_racing_processes_never_overspend(tmp_path):
    path = tmp_path / "stress.ledger"
    f100, budget, f101 = stress_budget()
    assert f101 - f100 > 20 * STRESS_DISCRETIZATION  # far apart on the PLD grid
    stats = run_stress(path)
    check_race(stats, path)
    assert stats["final_epsilon"] < 100 * stats["event_epsilon"]  # far below the sum
    # the same total, independently: dp-accounting's own PLD accountant
    direct = pld.PLDAccountant(
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=STRESS_DISCRETIZATION,
    )
    direct.compose(dp_accounting.SelfComposedDpEvent(STRESS_EVENT, 100))
    assert direct.get_epsilon(DELTA) == pytest.approx(f100, abs=1e-9) and direct.get_epsilon(DELTA) <= budget
    assert integrity(path) == "ok"
    print(f"stress: {stats}", file=sys.stderr)
