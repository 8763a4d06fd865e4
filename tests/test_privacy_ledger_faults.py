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

import os
import random
import re
import resource
import shutil
import signal
import time
from pathlib import Path

import dp_accounting
import pytest
from test_privacy_ledger import event_guarantee, gaussian_guarantee  # tests/ is on sys.path (no package)
from test_privacy_ledger_reliability import in_child

from dptensor.privacy import BudgetExceededError, BudgetLedger, LedgerError, gaussian_epsilon
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


def outcome(path: Path) -> list[str] | str:
    """The charges a ledger file shows, or ``"refused"`` when it refuses to be used (LedgerError)."""
    try:
        with BudgetLedger(path) as ledger:
            found = [c.description for c in ledger.charges()]
            assert ledger.spent() == composed_epsilon([c.event for c in ledger.charges()], DELTA, 1e-4)
            return found
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


def _charge_then_die(path: Path, n: int) -> None:  # pragma: no cover - runs in a child that kills itself
    ledger = BudgetLedger(path)
    for i in range(n):
        ledger.charge(gaussian_guarantee(SIGMA), description=f"charge {i}")
    os.kill(os.getpid(), signal.SIGKILL)  # a crash: nothing is closed or checkpointed


# ----------------------------------------------------------------------------- finding 5: regressions
def test_a_copy_of_the_main_file_alone_has_every_acknowledged_charge(tmp_path):
    path = tmp_path / "b.ledger"
    ledger = BudgetLedger(path, epsilon=50.0, delta=DELTA)
    for i in range(10):
        ledger.charge(gaussian_guarantee(SIGMA), description=f"charge {i}")
    copy = tmp_path / "copy.ledger"
    shutil.copyfile(path, copy)  # while the ledger is open: the user copies "the ledger file"
    assert descriptions(copy) == [f"charge {i}" for i in range(10)]
    assert BudgetLedger(copy).spent() == ledger.spent()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("b.ledger")] == ["b.ledger"]


def test_a_lost_log_after_a_crash_admits_nothing_beyond_the_budget(tmp_path):
    path = tmp_path / "b.ledger"
    BudgetLedger(path, epsilon=budget_for(10), delta=DELTA).close()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            _charge_then_die(path, 10)
        finally:
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == signal.SIGKILL
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
    with BudgetLedger(path, epsilon=50.0, delta=DELTA) as ledger:
        for i in range(10):
            ledger.charge(gaussian_guarantee(SIGMA), description=f"charge {i}")
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
    with BudgetLedger(path, epsilon=50.0, delta=DELTA) as ledger:
        for i in range(12):
            ledger.charge(gaussian_guarantee(SIGMA), description=f"charge {i}")
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
    with open("/proc/self/status") as status:  # what the process maps already (libraries, thread stacks)
        used = int(re.search(r"VmSize:\s+(\d+) kB", status.read()).group(1)) * 1024
    limit = used + 2 * 2**30  # 2 GiB more: 150 GiB fails at once instead of swapping the machine
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


@pytest.mark.parametrize("epsilon", [1e4, 1e9])
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
