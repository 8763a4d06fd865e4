"""BudgetLedger under faults (issue 27, findings 5 and 6 and item 3).

What a caller was told must survive whatever happens to the processes and the files: every
charge acknowledged (``charge`` returned) stays in the ledger, and no release is admitted beyond
the budget. Faults: SIGKILL at random points of ``charge`` while other processes charge; the
main file copied alone; the main file and its log (the rollback journal a killed commit leaves)
truncated, deleted or with flipped bytes; a full file system. After each fault the ledger
either holds every acknowledged charge (and never more than the budget admits) or refuses to
be used with a :class:`~dptensor.privacy.LedgerError` -- never a silently smaller ``spent``.

Child processes are forked (fast: no re-import) and leave with ``os._exit``.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import resource
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import dp_accounting
import pytest
from _helpers import event_guarantee, gaussian_guarantee, in_child

from dptensor.privacy import BudgetExceededError, BudgetLedger, LedgerError, PrivacyWarning, gaussian_epsilon
from dptensor.privacy import ledger as ledger_module
from dptensor.privacy.ledger import composed_epsilon

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

DELTA = 1e-5
SIGMA = 40.0  # every test charge: one Gaussian release with this noise multiplier


def budget_for(n: int, sigma: float = SIGMA) -> float:
    """A budget that admits exactly ``n`` Gaussian charges of ``sigma`` (they compose in closed form)."""
    f_n = gaussian_epsilon(sigma / n**0.5, DELTA)
    f_next = gaussian_epsilon(sigma / (n + 1) ** 0.5, DELTA)
    assert composed_epsilon([dp_accounting.GaussianDpEvent(sigma)] * n, DELTA, 1e-4) == f_n
    return (f_n + f_next) / 2


def descriptions(path: Path) -> list[str]:
    return [c.description for c in BudgetLedger(path).charges()]


def charged(path: Path, n: int, *, first: int = 0, epsilon: float = 50.0) -> BudgetLedger:
    """The ledger at ``path`` (created with budget ``epsilon`` if new) after ``n`` more charges
    ``"charge {first}"``, ``"charge {first + 1}"``, ..."""
    ledger = BudgetLedger(path) if path.exists() else BudgetLedger(path, epsilon=epsilon, delta=DELTA)
    for i in range(first, first + n):
        ledger.charge(gaussian_guarantee(SIGMA), description=f"charge {i}")
    return ledger


def outcome(path: Path) -> list[str] | str:
    """The charges a ledger file shows, or ``"refused"`` when it refuses to be used (LedgerError)."""
    try:
        with BudgetLedger(path) as ledger:
            charges = ledger.charges()
            # others may charge in between: never less than the charges read before
            assert ledger.spent() >= composed_epsilon([c.event for c in charges], DELTA, 1e-4)
            return [c.description for c in charges]
    except LedgerError:
        return "refused"


def assert_kept(path: Path, acknowledged: list[str], budget_n: int | None = None) -> list[str] | str:
    """Every acknowledged charge is still there (or the file is refused); never beyond the budget."""
    found = outcome(path)
    if found != "refused":
        assert set(acknowledged) <= set(found), (sorted(set(acknowledged) - set(found)), found)
        if budget_n is not None:
            assert len(found) <= budget_n
    return found


def forked(function: Callable[[], object]) -> int:
    """Run ``function`` in a forked child that leaves with ``os._exit``; the child's pid."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            function()
        finally:
            os._exit(0)
    return pid


def _charge_then_die(path: Path, n: int) -> None:  # pragma: no cover - runs in a child that kills itself
    ledger = BudgetLedger(path)
    for i in range(n):
        ledger.charge(gaussian_guarantee(SIGMA), description=f"charge {i}")
    os.kill(os.getpid(), signal.SIGKILL)  # a crash: nothing is closed or checkpointed


# ----------------------------------------------------------------------------- finding 5: regressions
def test_a_copy_of_the_main_file_alone_has_every_acknowledged_charge(tmp_path):
    path = tmp_path / "b.ledger"
    ledger = charged(path, 10)
    copy = tmp_path / "copy.ledger"
    shutil.copyfile(path, copy)  # while the ledger is open: the user copies "the ledger file"
    assert descriptions(copy) == [f"charge {i}" for i in range(10)]
    assert BudgetLedger(copy).spent() == ledger.spent()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("b.ledger")] == ["b.ledger"]


def test_a_lost_log_after_a_crash_admits_nothing_beyond_the_budget(tmp_path):
    path = tmp_path / "b.ledger"
    BudgetLedger(path, epsilon=budget_for(10), delta=DELTA).close()
    assert os.waitpid(forked(lambda: _charge_then_die(path, 10)), 0)[1] == signal.SIGKILL
    for suffix in ("-wal", "-journal"):  # whatever log the crash left: lost (truncated)
        log = Path(f"{path}{suffix}")
        if log.exists():
            log.write_bytes(b"")
    ledger = BudgetLedger(path)
    assert len(ledger.charges()) == 10
    with pytest.raises(BudgetExceededError):
        ledger.charge(gaussian_guarantee(SIGMA), description="the 11th")
    assert len(BudgetLedger(path).charges()) == 10


def _flip_in_record(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert data.count(old) >= 1 and len(old) == len(new)
    at = data.rindex(old)
    path.write_bytes(data[:at] + new + data[at + len(old) :])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b'"noise_multiplier":40.0', b'"noise_multiplier":90.0'),  # a charge's event: less noise counted
        (b"charge 7", b"charge 8"),  # a description (nothing the budget depends on; still detected)
    ],
)
def test_a_flipped_byte_in_a_charge_is_detected(tmp_path, old, new):
    path = tmp_path / "b.ledger"
    with charged(path, 10) as ledger:
        spent = ledger.spent()
    _flip_in_record(path, old, new)
    with pytest.raises(LedgerError, match="damaged"):
        ledger = BudgetLedger(path)
        ledger.spent()
    with pytest.raises(LedgerError, match="damaged"):
        BudgetLedger(path).charge(gaussian_guarantee(SIGMA))
    assert spent > 0


def test_a_changed_budget_is_detected(tmp_path):
    path = tmp_path / "b.ledger"
    with BudgetLedger(path, epsilon=2.0, delta=DELTA) as ledger:
        ledger.charge(gaussian_guarantee(SIGMA))
    _flip_in_record(path, b"2.0", b"9.0")  # the stored budget, epsilon (JSON text in the meta table)
    with pytest.raises(LedgerError, match="damaged"):
        BudgetLedger(path).charge(gaussian_guarantee(SIGMA))


def test_random_byte_flips_never_show_fewer_charges(tmp_path):
    """Any single flipped byte of the main file: the ledger is refused or shows exactly what it held."""
    path = tmp_path / "b.ledger"
    charged(path, 12).close()
    original = path.read_bytes()
    expected = [f"charge {i}" for i in range(12)]
    rng = random.Random(0)
    damaged = tmp_path / "damaged.ledger"
    refused = 0
    for _ in range(150):
        data = bytearray(original)
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
        damaged.write_bytes(bytes(data))
        found = outcome(damaged)
        refused += found == "refused"
        assert found in ("refused", expected), (at, found)
        for suffix in ("-journal", "-wal", "-shm"):
            Path(f"{damaged}{suffix}").unlink(missing_ok=True)
    assert refused > 0


# ----------------------------------------------------------------------------- finding 6: huge epsilon
def _huge_gaussian_after_laplace(path: Path, epsilon: float) -> tuple[float, float, str]:
    status = Path("/proc/self/status")
    if status.exists():  # what the process maps already (libraries, thread stacks), plus 2 GiB
        used = int(re.search(r"VmSize:\s+(\d+) kB", status.read_text()).group(1)) * 1024
        limit = used + 2 * 2**30  # 150 GiB fails at once instead of swapping the machine
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    ledger = BudgetLedger(path)
    sigma = 1.0 / (2 * epsilon) ** 0.5 * 0.99  # a Gaussian release of epsilon (at DELTA) a little above
    g = event_guarantee(
        dp_accounting.GaussianDpEvent(sigma), epsilon=gaussian_epsilon(sigma, DELTA), mechanism="gaussian"
    )
    try:
        ledger.charge(g, description="huge")
    except BudgetExceededError as exc:
        return g.epsilon, ledger.spent(), f"refused: {exc}"
    return g.epsilon, ledger.spent(), "charged"


@pytest.mark.parametrize("epsilon", [1e4, pytest.param(1e9, marks=pytest.mark.slow)])
def test_huge_epsilon_is_accounted_within_a_memory_bound_or_refused(tmp_path, epsilon):
    path = tmp_path / "b.ledger"
    with BudgetLedger(path, epsilon=1e12, delta=DELTA) as ledger:
        ledger.charge(event_guarantee(dp_accounting.LaplaceDpEvent(1.0), delta=0.0, mechanism="laplace"))
    start = time.perf_counter()
    result = in_child(lambda: _huge_gaussian_after_laplace(path, epsilon), timeout=120)
    assert not (isinstance(result, tuple) and result[0] == "raised"), result
    own, spent, status = result
    assert time.perf_counter() - start < 60
    if status == "charged":  # an upper bound on the composition: at least the parts, at most their sum
        assert own <= spent <= own + 1.0 + 1e-3 * own, (own, spent)
        assert len(BudgetLedger(path).charges()) == 2
    else:
        assert "too large to account" in status, status
        assert len(BudgetLedger(path).charges()) == 1


def test_bools_are_refused(tmp_path):
    with pytest.raises(ValueError, match="epsilon"):
        BudgetLedger(tmp_path / "a.ledger", epsilon=True, delta=DELTA)
    with pytest.raises(ValueError, match="delta"):
        BudgetLedger(tmp_path / "b.ledger", epsilon=1.0, delta=True)
    with pytest.raises(ValueError, match="timeout"):
        BudgetLedger(tmp_path / "c.ledger", epsilon=1.0, delta=DELTA, timeout=True)
    with pytest.raises(ValueError, match="value_discretization_interval"):
        BudgetLedger(tmp_path / "d.ledger", epsilon=1.0, delta=DELTA, value_discretization_interval=True)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- a killed commit's journal
def _die_at_commit(path: Path, description: str) -> None:  # pragma: no cover - the child kills itself
    class Dying(BudgetLedger):
        def _connect(self) -> sqlite3.Connection:
            conn = super()._connect()
            conn.execute("PRAGMA cache_size=10")  # a large charge spills into the main file before COMMIT
            conn.set_trace_callback(lambda sql: sql == "COMMIT" and os.kill(os.getpid(), signal.SIGKILL))
            return conn

    Dying(path).charge(gaussian_guarantee(SIGMA), description=description)


def killed_in_commit(tmp_path: Path) -> tuple[Path, list[str], str]:
    """A ledger of 5 charges whose 6th charge was killed while committing: main file half written."""
    path = tmp_path / "b.ledger"
    charged(path, 5, epsilon=budget_for(6)).close()
    before = path.read_bytes()
    big = "killed " + "x" * 300_000
    assert os.waitpid(forked(lambda: _die_at_commit(path, big)), 0)[1] == signal.SIGKILL
    journal = Path(f"{path}-journal")
    assert journal.stat().st_size > 0 and path.read_bytes() != before  # a hot journal, a changed file
    return path, [f"charge {i}" for i in range(5)], big


@pytest.mark.parametrize(
    "fault",
    ["none", "copy main file alone", "delete journal", "truncate journal", "flip journal", "flip main"],
)
def test_a_killed_commit_and_a_damaged_journal_lose_no_charge(tmp_path, fault):
    path, acknowledged, big = killed_in_commit(tmp_path)
    journal = Path(f"{path}-journal")
    rng = random.Random(fault)
    if fault == "copy main file alone":
        copy = tmp_path / "copy.ledger"
        shutil.copyfile(path, copy)
        path = copy
    elif fault == "delete journal":
        journal.unlink()
    elif fault == "truncate journal":
        with open(journal, "r+b") as handle:
            handle.truncate(rng.randrange(1, journal.stat().st_size))
    elif fault in ("flip journal", "flip main"):
        target = journal if fault == "flip journal" else path
        data = bytearray(target.read_bytes())
        for _ in range(3):
            data[rng.randrange(len(data))] ^= 0xFF
        target.write_bytes(bytes(data))
    found = assert_kept(path, acknowledged, budget_n=6)
    if found != "refused":
        assert set(found) <= {*acknowledged, big}
    if fault == "none":  # the journal is rolled back: exactly what was acknowledged, and usable
        assert found == acknowledged
        BudgetLedger(path).charge(gaussian_guarantee(SIGMA), description="after")
        with pytest.raises(BudgetExceededError):
            BudgetLedger(path).charge(gaussian_guarantee(SIGMA))
        assert descriptions(path) == [*acknowledged, "after"]


# ----------------------------------------------------------------------------- SIGKILL while others charge
def _charge_until_refused(path: Path, acks: Path) -> None:  # pragma: no cover - runs in a child
    ledger = BudgetLedger(path)
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    for i in range(10**6):
        name = f"{os.getpid()}-{i}"
        try:
            ledger.charge(gaussian_guarantee(SIGMA), description=name)
        except BudgetExceededError:
            return
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            Path(f"{acks}.errors").open("a").write(f"{name}: {exc!r}\n")
            return
        os.write(fd, f"{name}\n".encode())  # acknowledged: charge returned


def kill_at_random_points(tmp_path: Path, n_kills: int, budget_n: int, seed: int, n_workers: int = 3) -> dict:
    """``n_workers`` processes charge until the budget is spent; ``n_kills`` times one is SIGKILLed
    at a random moment (and replaced). After every kill the ledger -- and a copy of its main file
    alone -- holds every acknowledged charge; at the end exactly ``budget_n`` charges."""
    path, acks = tmp_path / "k.ledger", tmp_path / "acks"
    BudgetLedger(path, epsilon=budget_for(budget_n), delta=DELTA).close()
    acks.touch()
    rng = random.Random(seed)
    workers = [forked(lambda: _charge_until_refused(path, acks)) for _ in range(n_workers)]
    killed_alive = k = 0
    try:
        while killed_alive < n_kills:  # kill points: moments at which a charging process is killed
            k += 1
            assert k <= 3 * n_kills, f"the budget was spent after {killed_alive} kill points: raise budget_n"
            time.sleep(rng.uniform(0.0, 0.01))
            victim = rng.randrange(n_workers)
            if os.waitpid(workers[victim], os.WNOHANG) == (0, 0):  # still charging: kill it
                os.kill(workers[victim], signal.SIGKILL)
                os.waitpid(workers[victim], 0)
                killed_alive += 1
            acknowledged = acks.read_text().split()
            assert_kept(path, acknowledged, budget_n)
            if k % 5 == 0:  # the main file alone, copied while the others charge
                copy = tmp_path / "copy.ledger"
                shutil.copyfile(path, copy)
                assert_kept(copy, acknowledged, budget_n)
                for p in tmp_path.glob("copy.ledger*"):
                    p.unlink()
            workers[victim] = forked(lambda: _charge_until_refused(path, acks))
        for pid in workers:
            with contextlib.suppress(ChildProcessError):  # (reaped above when it had finished)
                os.waitpid(pid, 0)
    finally:
        for pid in workers:
            with contextlib.suppress(ChildProcessError, ProcessLookupError):
                if os.waitpid(pid, os.WNOHANG) == (0, 0):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
    errors = Path(f"{acks}.errors")
    assert not errors.exists(), errors.read_text()
    acknowledged = acks.read_text().split()
    found = descriptions(path)
    assert set(acknowledged) <= set(found) and len(found) == budget_n  # none lost, none beyond the budget
    ledger = BudgetLedger(path)
    assert [c.id for c in ledger.charges()] == list(range(1, budget_n + 1))
    assert ledger.spent() <= ledger.epsilon
    return {"kills_of_running_chargers": killed_alive, "acknowledged": len(acknowledged)}


def test_sigkill_at_random_points_of_charge_loses_no_acknowledged_charge(tmp_path):
    stats = kill_at_random_points(tmp_path, n_kills=5, budget_n=60, seed=1)
    assert stats["kills_of_running_chargers"] == 5, stats


@pytest.mark.slow
def test_sigkill_at_100_random_points_of_charge_loses_no_acknowledged_charge(tmp_path):
    stats = kill_at_random_points(tmp_path, n_kills=100, budget_n=2500, seed=2)
    assert stats["kills_of_running_chargers"] == 100, stats


# ----------------------------------------------------------------------------- a full file system
def test_a_full_file_system_loses_no_charge(tmp_path):
    """A real size-limited file system (tmpfs, mounted when running as root): ENOSPC mid-charge."""
    mount = Path(tempfile.mkdtemp(prefix="ledger-full-"))
    try:
        if subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(mount)], capture_output=True, check=False
        ).returncode:
            pytest.skip("cannot mount a small tmpfs here (not root); see test_full_disk_loses_no_charge")
        try:
            (mount / "filler").write_bytes(b"\0" * 48 * 1024)  # removed later to make room
            path = mount / "b.ledger"
            ledger = BudgetLedger(path, epsilon=1e6, delta=DELTA)
            acknowledged = []
            with pytest.raises(LedgerError, match="disk full or I/O error.*charge was not recorded"):
                for i in range(1000):
                    ledger.charge(gaussian_guarantee(SIGMA), description=f"charge {i} " + "f" * 3000)
                    acknowledged.append(f"charge {i} " + "f" * 3000)
            ledger.close()
            assert len(acknowledged) > 5
            assert outcome(path) == acknowledged  # exactly: nothing lost, nothing half-written
            for p in mount.glob("filler*"):
                p.unlink()
            with BudgetLedger(path) as again:  # room again (the journal needs it): the ledger carries on
                again.charge(gaussian_guarantee(SIGMA), description="after")
            assert outcome(path) == [*acknowledged, "after"]
        finally:
            subprocess.run(["umount", str(mount)], capture_output=True, check=False)
    finally:
        mount.rmdir()


# ----------------------------------------------------------------------------- format 1 files
def format_1_ledger(path: Path, n: int) -> list[str]:
    """A ledger as dptensor wrote it before format 2: WAL mode, no count and no checksum."""
    charged(path, n).close()
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("DELETE FROM meta WHERE key IN ('n_charges', 'checksum')")
    conn.execute("PRAGMA user_version=1")
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.close()
    return [f"charge {i}" for i in range(n)]


def test_a_format_1_ledger_is_upgraded_when_opened(tmp_path):
    path = tmp_path / "b.ledger"
    expected = format_1_ledger(path, 4)
    ledger = BudgetLedger(path)
    assert [c.description for c in ledger.charges()] == expected
    ledger.charge(gaussian_guarantee(SIGMA), description="after")
    ledger.close()
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == ledger_module.SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
    assert not Path(f"{path}-wal").exists()
    copy = tmp_path / "copy.ledger"
    shutil.copyfile(path, copy)
    assert descriptions(copy) == [*expected, "after"]
    _flip_in_record(path, b"charge 2", b"charge 9")  # upgraded files are checked like new ones
    with pytest.raises(LedgerError, match="checksum"):
        BudgetLedger(path).spent()


def test_a_format_1_ledger_open_elsewhere_is_not_converted_under_it(tmp_path):
    path = tmp_path / "b.ledger"
    format_1_ledger(path, 2)
    other = sqlite3.connect(str(path), isolation_level=None)  # an older dptensor, still running
    other.execute("SELECT count(*) FROM charges").fetchone()
    try:
        with pytest.raises(LedgerError, match="WAL mode .* another process has it open"):
            BudgetLedger(path, timeout=0.2)
    finally:
        other.close()
    assert len(BudgetLedger(path).charges()) == 2


# ----------------------------------------------------------------------------- what a process has read
def test_a_process_notices_a_file_rolled_back_under_it(tmp_path):
    """A process checks each charge once; a file that later holds fewer, or another history, is refused."""
    path = tmp_path / "b.ledger"
    charged(path, 3).close()
    older = path.read_bytes()
    ledger = charged(path, 2, first=3)
    spent = ledger.spent()
    with open(path, "r+b") as handle:  # the older copy written back over the same file
        handle.write(older)
        handle.truncate()
    with pytest.raises(LedgerError, match="records 3 charges, but this process has read 5"):
        ledger.spent()
    # a fresh process has read nothing yet, but this machine has seen 5 charges: refused too
    with pytest.raises(LedgerError, match="older than a copy seen on this machine: 5 charges"):
        BudgetLedger(path)
    # another process accepts the restore and continues the older copy: 3 + 2 charges again,
    # but not the ones read here
    with pytest.warns(PrivacyWarning, match="accepted a restored budget ledger"):
        other = BudgetLedger(path, accept_rollback=True)
    in_child(lambda: [other.charge(gaussian_guarantee(SIGMA), description="other") for _ in "ab"])
    with pytest.raises(LedgerError, match="checksum"):
        ledger.spent()
    assert descriptions(path)[3:] == ["other", "other"]  # (once accepted, this history is the one seen)
    assert spent > 0


def test_damage_after_a_process_read_the_charges(tmp_path):
    path = tmp_path / "b.ledger"
    ledger = charged(path, 4)
    spent = ledger.spent()
    _flip_in_record(path, b'"noise_multiplier":40.0', b'"noise_multiplier":90.0')
    assert ledger.spent() == spent  # composed from what this process checked, never the damaged text
    with pytest.raises(LedgerError, match="checksum"):
        BudgetLedger(path).spent()  # a fresh process checks everything
