"""A ledger restored from an older copy: refused unless accepted, never a silent refund of spent budget.

Every test runs with its own state directory (``tests/conftest.py`` sets ``DPTENSOR_STATE_DIR``).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import shutil
import warnings
from pathlib import Path

import pytest
from _helpers import gaussian_guarantee

from dptensor.cli import main
from dptensor.privacy import BudgetLedger, LedgerError, PrivacyWarning
from dptensor.privacy.ledger import STATE_DIR_VARIABLE, default_state_dir
from dptensor.privacy.ledger._seen import SeenLedgers

DELTA = 1e-5
SIGMA = 40.0
OTHER = "does not continue the history seen on this machine: its charge 3 is not the charge 3 seen"
OLDER = r"older than a copy seen on this machine: 3 charges were seen in it .*, the file holds 1\b"


def charge(ledger: BudgetLedger, n: int, what: str = "release") -> None:
    for i in range(n):
        ledger.charge(gaussian_guarantee(SIGMA), description=f"{what} {i}")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def restored(tmp_path: Path) -> tuple[Path, float]:
    """A ledger backed up after 1 charge, charged twice more, then restored from the backup in place.

    Returns its path and the epsilon spent before the restore (3 charges).
    """
    path, backup = tmp_path / "b.ledger", tmp_path / "backup" / "b.ledger"
    with BudgetLedger(path, epsilon=5.0, delta=DELTA, dataset="d") as ledger:
        charge(ledger, 1)
        backup.parent.mkdir()
        shutil.copyfile(path, backup)
        charge(ledger, 2, "after the backup")
        spent = ledger.spent()
    shutil.copyfile(backup, path)  # the restore the "damaged" errors advise
    return path, spent


def test_a_restored_backup_is_refused_when_opened_and_charged(tmp_path):
    path, _ = restored(tmp_path)
    before = digest(path)
    for kwargs in ({}, {"epsilon": 5.0, "delta": DELTA}):
        with pytest.raises(LedgerError, match=OLDER) as info:
            BudgetLedger(path, **kwargs)
    message = str(info.value)
    assert "forgets every charge made after the backup" in message
    assert "accept_rollback=True" in message and "dptensor budget accept-restore" in message
    assert digest(path) == before  # never repaired or reset


def test_a_ledger_open_during_the_restore_refuses_to_charge(tmp_path):
    path, backup = tmp_path / "b.ledger", tmp_path / "backup.ledger"
    ledger = BudgetLedger(path, epsilon=5.0, delta=DELTA)
    charge(ledger, 1)
    shutil.copyfile(path, backup)
    charge(ledger, 2)
    ledger.close()
    other = BudgetLedger(path)  # opened before the restore, has read no charge yet
    with open(path, "r+b") as handle:  # the backup written back over the same file
        handle.write(backup.read_bytes())
        handle.truncate()
    with pytest.raises(LedgerError, match=OLDER):
        other.charge(gaussian_guarantee(SIGMA))
    with pytest.raises(LedgerError, match=OLDER):
        other.spent()
    assert digest(path) == digest(backup)  # nothing was charged


def test_another_history_is_refused(tmp_path, monkeypatch):
    """The restored copy charged elsewhere (another state directory) past the count seen here."""
    path, _ = restored(tmp_path)
    here = os.environ[STATE_DIR_VARIABLE]
    monkeypatch.setenv(STATE_DIR_VARIABLE, str(tmp_path / "elsewhere"))
    with BudgetLedger(path) as elsewhere:
        charge(elsewhere, 3, "elsewhere")  # 4 charges: more than the 3 seen here, not those 3
    monkeypatch.setenv(STATE_DIR_VARIABLE, here)
    ledger = BudgetLedger(path)  # opening compares the count only (4 >= 3) ...
    for action in (ledger.spent, ledger.charges, lambda: ledger.charge(gaussian_guarantee(SIGMA))):
        with pytest.raises(LedgerError, match=OTHER):
            action()  # ... the first read compares the chain
    assert len(BudgetLedger(path, state_dir=tmp_path / "elsewhere").charges()) == 4


def test_accepting_a_restore_is_deliberate_and_recorded(tmp_path):
    path, spent_before = restored(tmp_path)
    with pytest.warns(PrivacyWarning, match="accepted a restored budget ledger.* are forgotten"):
        ledger = BudgetLedger(path, accept_rollback=True)
    accepted = ledger.accepted_restore
    assert accepted is not None
    assert (accepted["seen_n_charges"], accepted["file_n_charges"], accepted["path"]) == (3, 1, str(path))
    assert ledger.spent() < spent_before and len(ledger.charges()) == 1  # the older total, knowingly
    record = json.loads(ledger.state_file.read_text())
    assert record["n_charges"] == 1 and record["accepted_restores"] == [accepted]
    assert ledger.state_file.parent.parent == Path(os.environ[STATE_DIR_VARIABLE])
    charge(ledger, 1, "after the restore")
    ledger.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = BudgetLedger(path)  # the accepted history is the one seen now: no error, no warning
        assert [c.description for c in again.charges()] == ["release 0", "after the restore 0"]
        assert BudgetLedger(path, accept_rollback=True).accepted_restore is None  # nothing to accept
    assert len(json.loads(again.state_file.read_text())["accepted_restores"]) == 1
    # acceptance covers the file as found when opening, not a later restore under the same object
    shutil.copyfile(tmp_path / "backup" / "b.ledger", path)
    with pytest.raises(LedgerError, match="older than a copy seen"):
        BudgetLedger(path)


def test_accept_restore_command(tmp_path, capsys):
    path, _ = restored(tmp_path)
    assert main(["budget", "show", str(path)]) == 2
    assert "older than a copy seen on this machine" in capsys.readouterr().err
    assert main(["budget", "accept-restore", str(path)]) == 0
    out = capsys.readouterr().out
    assert "accepted the restored ledger" in out and "3 charge(s) were seen" in out and "holds 1" in out
    assert main(["budget", "show", str(path)]) == 0
    assert "in 1 charge(s)" in capsys.readouterr().out
    assert main(["budget", "accept-restore", str(path)]) == 0
    assert "nothing to accept" in capsys.readouterr().out


def test_a_new_ledger_at_the_same_path_is_a_new_budget_not_a_rollback(tmp_path):
    """Deleting a ledger and creating one at its path gives a new id: a new budget, deliberately."""
    path = tmp_path / "b.ledger"
    with BudgetLedger(path, epsilon=5.0, delta=DELTA) as old:
        charge(old, 3)
        old_mark = old.state_file
    path.unlink()
    with BudgetLedger(path, epsilon=5.0, delta=DELTA) as new:
        charge(new, 1)
        assert new.state_file != old_mark and len(new.charges()) == 1
    assert json.loads(old_mark.read_text())["n_charges"] == 3  # the old ledger's mark stays


def test_a_copy_is_the_same_ledger(tmp_path):
    """The mark follows the ledger's id, not its path: charging a copy apart is another history."""
    path, copy = tmp_path / "b.ledger", tmp_path / "copy.ledger"
    with BudgetLedger(path, epsilon=5.0, delta=DELTA) as ledger:
        charge(ledger, 2)
        shutil.copyfile(path, copy)
        assert len(BudgetLedger(copy).charges()) == 2  # an up-to-date copy opens
        charge(ledger, 1)
    with pytest.raises(LedgerError, match="older than a copy seen on this machine: 3 charges"):
        BudgetLedger(copy)


def _charge_and_open(path: str, n: int, barrier, queue) -> None:  # noqa: ANN001 - pragma: no cover - child
    try:
        ledger = BudgetLedger(path)
        barrier.wait()
        for i in range(n):
            ledger.charge(gaussian_guarantee(SIGMA), description=f"{os.getpid()} {i}")
            with BudgetLedger(path) as fresh:  # a fresh process's view, while the others charge
                fresh.spent()
        queue.put("")
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        queue.put(repr(exc))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_concurrent_charges_never_look_like_a_restore(tmp_path):
    path = tmp_path / "b.ledger"
    BudgetLedger(path, epsilon=50.0, delta=DELTA).close()
    n_processes, n = 3, 12
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(n_processes), ctx.Queue()
    procs = [
        ctx.Process(target=_charge_and_open, args=(str(path), n, barrier, queue)) for _ in range(n_processes)
    ]
    for p in procs:
        p.start()
    errors = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    assert errors == [""] * n_processes
    ledger = BudgetLedger(path)
    assert len(ledger.charges()) == n_processes * n
    record = json.loads(ledger.state_file.read_text())
    assert record["n_charges"] == n_processes * n  # the mark reached the last charge, never beyond


def test_a_mark_only_moves_forward(tmp_path):
    seen = SeenLedgers(tmp_path / "state")
    seen.advance("0" * 32, 5, "five", "b.ledger")
    seen.advance("0" * 32, 3, "three", "b.ledger")  # a slower process, reporting an earlier state
    mark = seen.read("0" * 32)
    assert (mark.n_charges, mark.chain) == (5, "five")
    assert seen.file("../../x").parent == tmp_path / "state" / "ledgers"  # no path from a file's id


def test_an_unwritable_state_directory_warns_once_and_charges_on(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    state = blocker / "state"  # cannot be created, even by root
    path = tmp_path / "b.ledger"
    unwritable = "could not (read|record) what it has seen .* will not be detected"
    with pytest.warns(PrivacyWarning, match=unwritable) as record:
        ledger = BudgetLedger(path, epsilon=5.0, delta=DELTA, state_dir=state)
        charge(ledger, 3)
        BudgetLedger(path, state_dir=state).charge(gaussian_guarantee(SIGMA))
    assert len([w for w in record if issubclass(w.category, PrivacyWarning)]) == 1
    assert len(ledger.charges()) == 4


def test_the_default_state_directory(monkeypatch, tmp_path):
    monkeypatch.setenv(STATE_DIR_VARIABLE, str(tmp_path / "explicit"))
    assert default_state_dir() == tmp_path / "explicit"
    monkeypatch.delenv(STATE_DIR_VARIABLE)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_dir() == tmp_path / "xdg" / "dptensor"
    monkeypatch.setenv("XDG_STATE_HOME", "relative")  # ignored, as the XDG specification says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_state_dir() == tmp_path / "home" / ".local" / "state" / "dptensor"
