"""A persistent privacy budget: one file that every private release on a data set is charged to.

:class:`BudgetLedger` keeps an ``(epsilon, delta)`` budget for one data set in an SQLite file
(the standard library's :mod:`sqlite3`) and records every release made on that data set as
its :class:`dp_accounting.DpEvent`, with the time, the caller (host, process, user, command
line, calling function), a description and the release's own guarantee. The budget spent is
the **exact composition** of all recorded events, never the sum of their epsilons: the events
are regrouped (:func:`~dptensor.privacy.accounting.reduce_event`: Gaussian releases merge into
one Gaussian, Dong, Roth & Su 2022) and composed by dp-accounting's privacy-loss-distribution
(PLD) accountant (Meiser & Mohammadi 2018; Koskela et al. 2020; Doroshenko et al. 2022) via
:func:`dptensor.privacy.accounting.event_epsilon` -- or, when they are all Gaussian, by the
exact analytic Gaussian epsilon (Balle & Wang 2018).

Every private dptensor function and estimator takes ``ledger=`` and charges it through
:func:`dptensor.privacy.begin_release` *before* it reads the private data; a charge that would
take the composed total above the budget raises :class:`~dptensor.privacy.BudgetExceededError`
and nothing is computed.

Concurrency. A charge is one SQLite ``BEGIN IMMEDIATE`` transaction: it takes the database's
write lock, reads every recorded event, composes them with the new one, decides, inserts and
commits. Two charges -- from threads, processes or machines sharing a local disk -- are
therefore serialised, and the budget can never be overspent by a race.

Durability. The journal is SQLite's rollback journal (``journal_mode=DELETE``), not a write-ahead
log, with ``synchronous=EXTRA``: a commit writes the charge into the main file, syncs it, and
deletes the journal (syncing the directory) before :meth:`BudgetLedger.charge` returns. Once it
returns, the charge is in the main file: it survives a crash of the process or a power loss, and
a copy of the file alone holds it. A process killed after its charge keeps the charge (no silent
refund); one killed during the charge leaves no trace of it (its half-written commit is rolled
back from the journal by the next process), and it never started computing either.

Integrity. The file stores the number of charges and a SHA-256 checksum chained over the budget,
every charge's row and the accepted relations; every read of the charges checks both, so a file
that lost charges or has changed bytes (truncated, a flipped bit, a torn copy, a half-written
commit whose journal was lost) is a :class:`~dptensor.privacy.LedgerError`, never a smaller
``spent``.

File format. The file's SQLite ``application_id`` marks it as a dptensor ledger and its
``user_version`` is the schema version (2; format 1, WAL mode without checksum, is upgraded
when opened); a file that is not SQLite, an SQLite file of another application, a ledger
written by a newer dptensor, a damaged file, a read-only file or a full disk each give a
:class:`~dptensor.privacy.LedgerError` that says so, and no charge is lost or half-written.
Events are stored as JSON of :meth:`dp_accounting.DpEvent.to_named_tuple`; only event classes
of dp-accounting and dptensor are ever decoded.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import getpass
import hashlib
import json
import math
import numbers
import os
import shlex
import socket
import sqlite3
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import dp_accounting

from dptensor._files import json_text
from dptensor._validation import check_epsilon_delta
from dptensor.privacy.accounting import EpsilonDeltaDpEvent, event_epsilon, reduce_event
from dptensor.privacy.calibration import gaussian_epsilon
from dptensor.privacy.errors import BudgetExceededError, LedgerError
from dptensor.privacy.guarantee import PrivacyGuarantee

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "BudgetLedger", "Charge", "decode_event", "encode_event"]

#: SQLite ``application_id`` of a dptensor budget ledger (the bytes ``"dPTB"``).
APPLICATION_ID = 0x64505442
#: Schema version written to SQLite's ``user_version``; files with a larger one are refused.
#: Version 2: rollback journal (not WAL) and a chained checksum of the charges; version 1 files
#: are upgraded when opened.
SCHEMA_VERSION = 2
#: SQLite's rollback journal, deleted to commit, with the directory synced after the delete
#: (``synchronous=EXTRA``): a committed charge is in the main file, durably, when ``charge`` returns.
_JOURNAL_MODE = "delete"
_SYNCHRONOUS = "EXTRA"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_DEFAULT_DISCRETIZATION = 1e-4

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)",
    """CREATE TABLE charges (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        token TEXT NOT NULL UNIQUE,
        time TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        user TEXT NOT NULL,
        argv TEXT NOT NULL,
        caller TEXT NOT NULL,
        description TEXT NOT NULL,
        neighbouring TEXT NOT NULL,
        epsilon REAL NOT NULL,
        delta REAL NOT NULL,
        mechanism TEXT NOT NULL,
        n_releases INTEGER NOT NULL,
        event TEXT NOT NULL,
        guarantee TEXT NOT NULL,
        spent_after REAL NOT NULL
    )""",
)
_META_KEYS = (
    "format",
    "id",
    "epsilon",
    "delta",
    "dataset",
    "relations",
    "accountant",
    "value_discretization_interval",
    "created",
    "created_by",
    "dptensor_version",
)
# Metadata that changes with the charges: their number and the chained checksum of them all.
_STATE_KEYS = ("n_charges", "checksum")
_CHARGE_COLUMNS = (
    "id",
    "time",
    "host",
    "pid",
    "user",
    "argv",
    "caller",
    "description",
    "neighbouring",
    "epsilon",
    "delta",
    "mechanism",
    "n_releases",
    "event",
    "guarantee",
    "spent_after",
)

# Connections a forked child inherited: kept referenced so that the child never closes them.
_INHERITED: list[sqlite3.Connection] = []

# Modules whose DpEvent classes a ledger may name; nothing else is ever imported from a file.
_EVENT_MODULES = ("dp_accounting.dp_event", "dptensor.privacy.accounting")


# ----------------------------------------------------------------------------- events as JSON
def _plain_tuple(value: object) -> object:
    if hasattr(value, "_fields"):  # a DpEvent's named tuple
        return {name: _plain_tuple(getattr(value, name)) for name in value._fields}
    if isinstance(value, list | tuple):
        return [_plain_tuple(item) for item in value]
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, numbers.Real):
        return float(value)
    raise ValueError(f"cannot store a DpEvent field of type {type(value).__name__}")


def encode_event(event: dp_accounting.DpEvent) -> str:
    """A :class:`dp_accounting.DpEvent` as canonical JSON text (from ``to_named_tuple()``).

    Examples
    --------
    >>> import dp_accounting
    >>> encode_event(dp_accounting.GaussianDpEvent(2.5))
    '{"class_name":"GaussianDpEvent","module_name":"dp_accounting.dp_event","noise_multiplier":2.5}'
    """
    if not isinstance(event, dp_accounting.DpEvent):
        raise TypeError(f"expected a dp_accounting.DpEvent, got {type(event).__name__}")
    plain = _plain_tuple(event.to_named_tuple())
    try:
        return json.dumps(plain, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:
        raise ValueError(f"cannot store {event!r}: its parameters must be finite numbers") from exc


def _as_named_tuple(value: object) -> object:
    if isinstance(value, dict):
        module, name = value.get("module_name"), value.get("class_name")
        if module not in _EVENT_MODULES or not isinstance(name, str):
            raise ValueError(f"not a dp-accounting or dptensor event: {module!r}.{name!r}")
        cls = getattr(sys.modules.get(module) or __import__(module, fromlist=[name]), name, None)
        if not (isinstance(cls, type) and issubclass(cls, dp_accounting.DpEvent)):
            raise ValueError(f"{module}.{name} is not a DpEvent class")
        fields = sorted(value)
        wrapper = collections.namedtuple(f"_{name}NamedTuple", fields)  # noqa: PYI024 - built at run time
        return wrapper(**{key: _as_named_tuple(value[key]) for key in fields})
    if isinstance(value, list):
        return [_as_named_tuple(item) for item in value]
    return value


def decode_event(text: str) -> dp_accounting.DpEvent:
    """The :class:`dp_accounting.DpEvent` that :func:`encode_event` wrote.

    Only event classes of ``dp_accounting.dp_event`` and :mod:`dptensor.privacy.accounting` are
    accepted, so a crafted file cannot make dptensor import or call anything else.

    Raises
    ------
    ValueError
        The text is not such an event.
    """
    try:
        plain = json.loads(text)
        if not isinstance(plain, dict):
            raise ValueError("not a JSON object")
        event = dp_accounting.DpEvent.from_named_tuple(_as_named_tuple(plain))
    except (ValueError, TypeError, AttributeError, ImportError) as exc:
        raise ValueError(f"not a stored dp-accounting event ({exc}): {text[:200]!r}") from exc
    if not isinstance(event, dp_accounting.DpEvent):  # pragma: no cover - from_named_tuple's contract
        raise ValueError(f"not a stored dp-accounting event: {text[:200]!r}")
    return event


# ----------------------------------------------------------------------------- records
@dataclasses.dataclass(frozen=True)
class Charge:
    """One release recorded in a :class:`BudgetLedger`.

    Attributes
    ----------
    id : int
        Position in the ledger (1, 2, ...).
    time : str
        UTC time of the charge, ISO 8601.
    host, pid, user, argv, caller : str, int, str, str, str
        Who charged: machine, process id, user name, command line and the calling function
        (``module:function:line``, the first frame outside dptensor).
    description : str
        What was released (given by the private function).
    neighbouring : str
        The release's neighbouring relation.
    epsilon, delta : float
        The release's own guarantee.
    mechanism : str
    n_releases : int
        Noisy releases inside this charge (e.g. the power method's ``K``).
    event : dp_accounting.DpEvent
        What is composed.
    spent_after : float
        Composed epsilon of the ledger (at its delta) right after this charge.
    guarantee : dict
        The full :meth:`PrivacyGuarantee.to_dict` of the release.
    """

    id: int
    time: str
    host: str
    pid: int
    user: str
    argv: str
    caller: str
    description: str
    neighbouring: str
    epsilon: float
    delta: float
    mechanism: str
    n_releases: int
    event: dp_accounting.DpEvent = dataclasses.field(repr=False)
    spent_after: float
    guarantee: dict = dataclasses.field(repr=False, compare=False)

    def to_row(self) -> dict[str, Any]:
        """A flat record (event and guarantee as JSON text), e.g. for a CSV file."""
        row = {name: getattr(self, name) for name in _CHARGE_COLUMNS}
        row["event"] = encode_event(self.event)
        row["guarantee"] = json_text(self.guarantee, indent=None)
        return row


def _caller() -> str:
    """``module:function:line`` of the first frame outside dptensor (and scikit-learn's wrappers)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if not (name == "dptensor" or name.startswith(("dptensor.", "sklearn.", "contextlib", "functools"))):
            return f"{name}:{frame.f_code.co_name}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user database entry (containers); the uid still identifies
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else ""


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


# ----------------------------------------------------------------------------- composition
_EPSILON_CACHE: dict[tuple[str, float, float], float] = {}
_EVENT_CACHE: dict[str, dp_accounting.DpEvent] = {}


def _decode_cached(text: str) -> dp_accounting.DpEvent:
    event = _EVENT_CACHE.get(text)
    if event is None:
        if len(_EVENT_CACHE) > 4096:
            _EVENT_CACHE.clear()
        event = _EVENT_CACHE[text] = decode_event(text)
    return event


#: Most grid points a composition's privacy-loss distribution may have (a few hundred MB at most).
MAX_PLD_POINTS = 1_000_000
# dp-accounting truncates a Gaussian's privacy loss where the log of the tail mass is -50
_GAUSSIAN_TAIL = math.sqrt(2 * 50.0)


def _loss_width(event: dp_accounting.DpEvent) -> float:
    """An upper bound on the width of the privacy-loss range dp-accounting's PLD of ``event`` spans.

    The number of grid points of the PLD is this width over the discretisation interval. A
    Gaussian release of noise multiplier ``z`` (sensitivity 1) has the privacy loss
    ``(2x - 1) / (2 z^2)`` for ``x`` within ``t z`` of 0 or 1, a width of ``2t/z + 1/z^2``; a
    Laplace release of scale ``b`` one of ``2/b``; an ``(epsilon, delta)`` release ``2 epsilon``;
    sampling only shrinks the loss. A ``k``-fold self-composition spans at most ``k`` widths, and
    dp-accounting truncates its tails (mass 1e-15), so by Hoeffding's inequality about
    ``9 sqrt(k)`` of them. ``0.0`` for an event this does not know (it is composed as before).
    """
    if isinstance(event, dp_accounting.GaussianDpEvent):
        z = float(event.noise_multiplier)
        return 2 * _GAUSSIAN_TAIL / z + 1 / z**2 if z > 0 else math.inf
    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return 2 / float(event.noise_multiplier) if event.noise_multiplier > 0 else math.inf
    if isinstance(event, EpsilonDeltaDpEvent):
        return 2 * float(event.epsilon)
    sampled = (dp_accounting.PoissonSampledDpEvent, dp_accounting.SampledWithoutReplacementDpEvent)
    if isinstance(event, sampled):
        return _loss_width(event.event)
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        k = int(event.count)
        return _loss_width(event.event) * min(k, 9 * math.sqrt(k))
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return math.fsum(_loss_width(part) for part in event.events)
    return 0.0


def pld_discretization(event: dp_accounting.DpEvent, value_discretization_interval: float) -> float:
    """The discretisation at which ``event``'s PLD has at most :data:`MAX_PLD_POINTS` grid points.

    ``value_discretization_interval`` itself unless the event's privacy loss spans more than
    ``MAX_PLD_POINTS`` intervals (releases whose epsilon is in the thousands, whose PLD at
    ``1e-4`` would need hundreds of GB); then the interval that gives ``MAX_PLD_POINTS`` points.
    dp-accounting's pessimistic PLD is an upper bound on the privacy loss at any discretisation
    (Meiser & Mohammadi 2018, Theorem 5; Koskela et al. 2020), so a coarser grid only adds a
    little to a total that is huge anyway, and memory stays bounded.
    """
    width = _loss_width(event)
    if not math.isfinite(width):
        return math.inf
    return max(float(value_discretization_interval), width / MAX_PLD_POINTS)


def composed_epsilon(
    events: Sequence[dp_accounting.DpEvent], delta: float, value_discretization_interval: float
) -> float:
    """Epsilon at ``delta`` of all ``events`` composed exactly; ``0.0`` for none.

    The events are first regrouped by :func:`~dptensor.privacy.accounting.reduce_event`, so the
    result is a function of the multiset of events alone (their order does not matter) and is
    memoised. When they reduce to one Gaussian release (a ledger of Gaussian mechanisms only:
    the power method, DP-SGD, input perturbation), its epsilon is the exact analytic one
    (Balle & Wang 2018, :func:`~dptensor.privacy.gaussian_epsilon`, rounded up); otherwise it
    is dp-accounting's PLD accountant (pessimistic, so an upper bound) with the given
    discretisation -- coarsened by :func:`pld_discretization` where the PLD would have more than
    :data:`MAX_PLD_POINTS` points, so that memory stays bounded whatever the epsilons. ``inf``
    when the total is too large to account (dp-accounting overflows: epsilons near 1e9 and
    above) or the pure delta parts exceed ``delta``.
    """
    if not events:
        return 0.0
    reduced = reduce_event(dp_accounting.ComposedDpEvent(list(events)))
    if isinstance(reduced, dp_accounting.NoOpDpEvent):
        return 0.0
    if isinstance(reduced, dp_accounting.NonPrivateDpEvent):
        return math.inf
    key = (repr(reduced), float(delta), float(value_discretization_interval))
    epsilon = _EPSILON_CACHE.get(key)
    if epsilon is None:
        if len(_EPSILON_CACHE) > 1024:
            _EPSILON_CACHE.clear()
        if isinstance(reduced, dp_accounting.GaussianDpEvent):
            epsilon = gaussian_epsilon(reduced.noise_multiplier, delta)
        else:
            interval = pld_discretization(reduced, value_discretization_interval)
            try:
                epsilon = (
                    event_epsilon(reduced, delta, "pld", value_discretization_interval=interval)
                    if math.isfinite(interval)
                    else math.inf
                )
            except (OverflowError, FloatingPointError):
                epsilon = math.inf  # too large for floating point: no finite budget pays for it
        _EPSILON_CACHE[key] = epsilon
    return epsilon


# ----------------------------------------------------------------------------- the charges' checksum
_STORED_COLUMNS = ("token", *_CHARGE_COLUMNS)  # everything a charge's row holds


def _chain_start(meta: Mapping[str, Any]) -> str:
    """The checksum of a ledger without charges: SHA-256 of the metadata fixed at its creation."""
    fixed = {key: meta[key] for key in _META_KEYS if key != "relations"}
    return hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()


def _chain_next(checksum: str, row: Sequence[object]) -> str:
    """The checksum after one more charge: SHA-256 of the previous one and the charge's row."""
    text = json.dumps([checksum, *row], separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _sealed(checksum: str, relations: Sequence[str]) -> str:
    """The stored checksum: the chain over the charges, then the relations the ledger accepts."""
    return _chain_next(checksum, ["relations", *sorted(relations)])


# ----------------------------------------------------------------------------- the ledger
def _error_kind(exc: sqlite3.Error) -> str:
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    text = str(exc).lower()
    if name.startswith("SQLITE_BUSY") or name.startswith("SQLITE_LOCKED") or "locked" in text:
        return "locked"
    if name.startswith("SQLITE_READONLY") or "readonly" in text or "read-only" in text:
        return "read-only"
    if name.startswith(("SQLITE_FULL", "SQLITE_IOERR")) or "disk is full" in text or "i/o error" in text:
        return "write"
    if (
        name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))
        or "malformed" in text
        or "not a database" in text
    ):
        return "damaged"
    if name.startswith("SQLITE_CANTOPEN") or "unable to open" in text:
        return "open"
    return "other"


def _check_budget(epsilon: object, delta: object) -> tuple[float, float]:
    if epsilon is None or delta is None:
        raise ValueError("a new budget ledger needs both epsilon and delta")
    check_epsilon_delta(epsilon, delta)
    return float(epsilon), float(delta)


def _check_relations(neighbouring: str | Sequence[str] | None) -> list[str]:
    if neighbouring is None:
        return []
    names = [neighbouring] if isinstance(neighbouring, str) else list(neighbouring)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"neighbouring must be a relation name or a list of them, got {neighbouring!r}")
    return sorted(set(names))


class BudgetLedger:
    """A persistent ``(epsilon, delta)`` privacy budget for one data set, shared by every process.

    ``BudgetLedger(path, epsilon=..., delta=...)`` creates the ledger file if it does not exist
    (atomically: the file appears complete or not at all) and opens it if it does; without
    ``epsilon`` and ``delta`` the file must exist. The budget, the data set's name and the
    neighbouring relation are fixed when the file is created; opening it with different values
    is an error, so a script cannot silently grant itself a larger budget or charge the wrong
    data set's ledger. Pass the ledger to any private dptensor function or estimator
    (``ledger=``) or to :func:`~dptensor.privacy.begin_release`; the CLI takes ``--ledger FILE``.

    Parameters
    ----------
    path : str or Path
        The ledger file (SQLite). Keep it on a local disk shared by the processes that charge it
        (see *Notes*).
    epsilon, delta : float, optional
        The total budget: the composition of all charges must stay ``(epsilon, delta)``-DP.
        Required to create the file; checked against the file when given on opening.
    dataset : str, optional
        Name of the data set the budget protects. Opening a ledger created for another name
        (or without one) with ``dataset=`` given is an error.
    neighbouring : str or list of str, optional
        The neighbouring relation(s) whose releases the ledger accepts. By default the first
        charge fixes it, and a release under any other relation is refused: releases under
        different relations protect different units and do not compose into one guarantee
        (:func:`~dptensor.privacy.compose` refuses them for the same reason). Listing several
        relations states that one change of the unit you protect is a neighbouring change under
        each of them (e.g. one person contributes one record and one entry value); the total is
        then a guarantee for that unit. dptensor cannot check this claim.
    value_discretization_interval : float, optional
        The PLD accountant's discretisation (default ``1e-4``), fixed at creation so that every
        process composes identically.
    timeout : float, default 60
        Seconds to wait for another process's charge to finish before giving up.

    Notes
    -----
    A charge is one ``BEGIN IMMEDIATE`` transaction (read every event, compose exactly,
    decide, insert, commit), so concurrent processes never overspend. SQLite's locking relies
    on the file system: a local disk (one machine, any number of processes) is safe; network
    file systems (NFS, SMB) often implement the locks incorrectly -- do not put a ledger on one,
    run a single charging host instead. A charge is in the main file when :meth:`charge`
    returns, and a file missing charges or with changed bytes is refused (see the module's
    notes). The ledger protects a budget against accidents, crashes and races, not against a
    user who can write the file (or delete it: a new file is a new budget; or restore an older
    copy of it, which is a consistent older ledger).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import numpy as np
    >>> from dptensor import private_power_method
    >>> from dptensor.privacy import BudgetExceededError, BudgetLedger
    >>> from dptensor.tensor import LowRankTensor
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "clinic.ledger"
    >>> ledger = BudgetLedger(path, epsilon=1.5, delta=1e-5, dataset="clinic")
    >>> T = LowRankTensor(np.array([3000.0]), np.eye(20)[:, :1])
    >>> runs = [private_power_method(T, 1, epsilon=0.5, delta=1e-6, n_restarts=2, n_iter=3,
    ...                              ledger=ledger) for _ in range(4)]
    >>> round(ledger.spent(), 2)                # exact composition: not 4 x 0.5 = 2
    0.92
    >>> len(ledger.charges())
    4
    >>> try:
    ...     private_power_method(T, 1, epsilon=1.5, delta=1e-6, n_restarts=2, n_iter=3, ledger=ledger)
    ... except BudgetExceededError as exc:
    ...     print(f"refused: {exc.spent:.2f} spent, {exc.total:.2f} > {exc.budget_epsilon}")
    refused: 0.92 spent, 1.66 > 1.5
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        dataset: str | None = None,
        neighbouring: str | Sequence[str] | None = None,
        value_discretization_interval: float | None = None,
        timeout: float = 60.0,
    ) -> None:
        self._path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._conn_pid: int | None = None
        self._file_id: tuple[int, int] | None = None
        self._meta: dict[str, Any] | None = None
        self._lock = threading.RLock()
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout >= 0:
            raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        self._timeout = float(timeout)
        if dataset is not None and not isinstance(dataset, str):
            raise TypeError(f"dataset must be a string, got {type(dataset).__name__}")
        relations = _check_relations(neighbouring)
        if value_discretization_interval is not None and not (
            isinstance(value_discretization_interval, numbers.Real)
            and 0 < value_discretization_interval <= 0.1
        ):
            raise ValueError(
                f"value_discretization_interval must lie in (0, 0.1], got {value_discretization_interval!r}"
            )
        if (epsilon is None) != (delta is None):
            raise ValueError(
                "pass both epsilon and delta (the budget), or neither to open an existing ledger"
            )
        if epsilon is not None:
            epsilon, delta = _check_budget(epsilon, delta)
        if not self._path.exists():
            if epsilon is None:
                raise LedgerError(
                    f"no budget ledger at {self._path}: create one with BudgetLedger(path, epsilon=..., "
                    f"delta=...) or `dptensor budget create {self._path} --epsilon E --delta D`"
                )
            self._create(epsilon, delta, dataset, relations, value_discretization_interval)
        try:
            self._meta = self._open()
            self._check_matches(epsilon, delta, dataset, relations, value_discretization_interval)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ properties
    @property
    def path(self) -> Path:
        """The ledger file."""
        return self._path

    @property
    def epsilon(self) -> float:
        """The total epsilon budget."""
        return float(self._meta["epsilon"])

    @property
    def delta(self) -> float:
        """The total delta budget (the delta at which the composed epsilon is stated)."""
        return float(self._meta["delta"])

    @property
    def dataset(self) -> str | None:
        """The data set's name (``None`` if the ledger was created without one)."""
        return self._meta["dataset"]

    @property
    def relations(self) -> list[str]:
        """Neighbouring relations the ledger accepts (empty until the first charge fixes it)."""
        return list(self._read_meta()["relations"])

    @property
    def value_discretization_interval(self) -> float:
        """The PLD discretisation every charge is composed with."""
        return float(self._meta["value_discretization_interval"])

    @property
    def created(self) -> str:
        """UTC creation time, ISO 8601."""
        return str(self._meta["created"])

    def __repr__(self) -> str:
        name = f", dataset={self.dataset!r}" if self.dataset is not None else ""
        return f"BudgetLedger({str(self._path)!r}, epsilon={self.epsilon:g}, delta={self.delta:g}{name})"

    # ------------------------------------------------------------------ files
    def _create(
        self,
        epsilon: float,
        delta: float,
        dataset: str | None,
        relations: list[str],
        value_discretization_interval: float | None,
    ) -> None:
        """Write a complete ledger under a temporary name, then link it into place atomically."""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        stale = [
            f"{self._path}{suffix}"
            for suffix in ("-journal", "-wal", "-shm")
            if os.path.exists(f"{self._path}{suffix}")
        ]
        if stale:
            # SQLite would replay a deleted database's log (or roll back its journal) into the new one
            raise LedgerError(
                f"{' and '.join(stale)} exist(s) without {self._path}: a ledger was deleted while a process "
                "still "
                "had it open. Remove them once no process uses the old ledger, then create the new one"
            )
        tmp = self._path.with_name(f".{self._path.name}.{uuid.uuid4().hex}.tmp")
        meta = {
            "format": "dptensor budget ledger",
            "id": uuid.uuid4().hex,
            "epsilon": epsilon,
            "delta": delta,
            "dataset": dataset,
            "relations": relations,
            "accountant": "exact: Gaussian (GDP, analytic) or PLD (dp-accounting)",
            "value_discretization_interval": float(value_discretization_interval or _DEFAULT_DISCRETIZATION),
            "created": _now(),
            "created_by": f"{_user()}@{socket.gethostname()}",
            "dptensor_version": _version(),
        }
        meta = {key: json.loads(json.dumps(value)) for key, value in meta.items()}  # as it is read back
        meta.update(n_charges=0, checksum=_sealed(_chain_start(meta), relations))
        try:
            conn = sqlite3.connect(str(tmp), isolation_level=None)
            try:
                conn.execute(f"PRAGMA journal_mode={_JOURNAL_MODE}")
                conn.execute(f"PRAGMA synchronous={_SYNCHRONOUS}")
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [(key, json.dumps(value)) for key, value in meta.items()],
                )
                conn.execute("COMMIT")
            finally:
                conn.close()
            try:
                os.link(tmp, self._path)
            except FileExistsError:
                pass  # created meanwhile by another process: open that one (its parameters are checked)
            except OSError:  # pragma: no cover - file systems without hard links
                if not self._path.exists():
                    os.replace(tmp, self._path)
        except sqlite3.Error as exc:
            raise self._error(exc, "could not create the ledger") from exc
        finally:
            for suffix in ("", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{tmp}{suffix}")

    def _connect(self) -> sqlite3.Connection:
        # mode=rw never creates a file: a ledger deleted meanwhile is an error, not a new budget
        uri = self._path.resolve().as_uri() + "?mode=rw"
        conn = sqlite3.connect(
            uri, uri=True, timeout=self._timeout, isolation_level=None, check_same_thread=False
        )
        try:
            # a rollback journal, not a write-ahead log: a commit writes the main file itself, so the
            # file alone always holds every committed charge; EXTRA syncs the journal's deletion too
            try:
                mode = str(conn.execute(f"PRAGMA journal_mode={_JOURNAL_MODE}").fetchone()[0]).lower()
            except sqlite3.OperationalError as exc:
                if _error_kind(exc) != "locked" or not self._in_wal_mode():
                    raise
                mode = "wal"  # converting needs the file to itself
            conn.execute(f"PRAGMA synchronous={_SYNCHRONOUS}")
        except BaseException:
            conn.close()
            raise
        if mode != _JOURNAL_MODE:  # a WAL file (format 1) that another process still has open
            conn.close()
            raise LedgerError(
                f"the budget ledger {self._path} is in SQLite's WAL mode (ledger format 1) and another "
                "process has it open, so it cannot be converted to the current format: close the other "
                "processes (an older dptensor?) and open it again"
            )
        return conn

    def _in_wal_mode(self) -> bool:
        """Whether the file's header says WAL (its read and write versions, bytes 18 and 19, are 2)."""
        try:
            with open(self._path, "rb") as handle:
                return handle.read(20)[18:20] == b"\x02\x02"
        except OSError:
            return False

    def _file_identity(self) -> tuple[int, int]:
        try:
            st = os.stat(self._path)
        except FileNotFoundError as exc:
            raise LedgerError(f"the budget ledger {self._path} was deleted after it was opened") from exc
        return st.st_dev, st.st_ino

    def _live_connection(self) -> sqlite3.Connection:
        """This process's connection to the ledger, opened on first use (one per process)."""
        if self._conn is not None and self._conn_pid != os.getpid():
            # opened before a fork: the child must neither use nor close it (SQLite's rule)
            _INHERITED.append(self._conn)
            self._conn = None
        identity = self._file_identity()
        if self._conn is not None and identity != self._file_id:  # (no inode reuse while we hold it open)
            self.close()
            raise LedgerError(
                f"the budget ledger {self._path} was replaced by another file after it was opened; open it "
                "again (BudgetLedger(path)) to use the new file"
            )
        if self._conn is None:
            conn = self._connect()
            if self._meta is not None:
                # reopening: the file must still be the ledger opened first (inode numbers are reused)
                try:
                    same = self._read_meta(conn)["id"] == self._meta["id"]
                except BaseException:
                    conn.close()
                    raise
                if not same:
                    conn.close()
                    raise LedgerError(
                        f"the budget ledger {self._path} was replaced by another file after it was opened; "
                        "open it again (BudgetLedger(path)) to use the new file"
                    )
            self._conn, self._conn_pid, self._file_id = conn, os.getpid(), identity
        return self._conn

    @contextlib.contextmanager
    def _connection(self, action: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                conn = self._live_connection()
            except sqlite3.Error as exc:
                raise self._error(exc, action) from exc
            with self._translated(action):
                yield conn

    @contextlib.contextmanager
    def _translated(self, action: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            self.close()  # after a failure, start from a fresh connection
            raise self._error(exc, action) from exc

    def close(self) -> None:
        """Close this process's connection to the file (the ledger reopens it when used again)."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                if self._conn_pid == os.getpid():
                    with contextlib.suppress(sqlite3.Error):
                        conn.close()
                else:
                    _INHERITED.append(conn)

    def __enter__(self) -> BudgetLedger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # sqlite3 connections sit in a reference cycle (their statement cache): close ours now
        # rather than at the next garbage collection -- but never one inherited through a fork
        try:
            conn = getattr(self, "_conn", None)
            if conn is None:
                return
            if getattr(self, "_conn_pid", None) == os.getpid():
                conn.close()
            else:
                _INHERITED.append(conn)
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown
            pass

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_conn=None, _conn_pid=None, _file_id=None)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def _error(self, exc: sqlite3.Error, action: str) -> LedgerError:
        kind = _error_kind(exc)
        where = f"budget ledger {self._path}"
        what = {
            "locked": f"the {where} stayed locked by another process for {self._timeout:g} s",
            "read-only": f"the {where} is read-only (file or directory permissions)",
            "write": f"could not write the {where} (disk full or I/O error)",
            "damaged": f"the {where} is damaged; restore it from a backup (dptensor will not guess the "
            "budget spent)",
            "open": f"cannot open the {where}",
            "other": f"the {where} failed",
        }[kind]
        return LedgerError(f"{what}: {action} [sqlite: {exc}]")

    def _open(self) -> dict[str, Any]:
        """Check that the file is a complete ledger this dptensor can read; return its metadata."""
        try:
            with open(self._path, "rb") as handle:
                header = handle.read(100)
        except OSError as exc:
            raise LedgerError(f"cannot read the budget ledger {self._path}: {exc}") from exc
        if not header:
            raise LedgerError(f"{self._path} is an empty file, not a dptensor budget ledger")
        if not header.startswith(_SQLITE_MAGIC):
            raise LedgerError(
                f"{self._path} is not a dptensor budget ledger: not an SQLite file (or its header is damaged)"
            )
        with self._connection("could not open the ledger") as conn:
            application_id = conn.execute("PRAGMA application_id").fetchone()[0]
            if application_id != APPLICATION_ID:
                raise LedgerError(
                    f"{self._path} is an SQLite database but not a dptensor budget ledger "
                    f"(application_id {application_id:#x}, expected {APPLICATION_ID:#x})"
                )
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise LedgerError(
                    f"{self._path} was written by a newer dptensor (ledger format {version}; this dptensor "
                    f"reads format {SCHEMA_VERSION} and older): upgrade dptensor to use it"
                )
            if version < 1:
                raise LedgerError(f"the budget ledger {self._path} is damaged: no schema version")
            check = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
            if check != ["ok"]:
                raise LedgerError(
                    f"the budget ledger {self._path} is damaged ({'; '.join(map(str, check[:3]))}); "
                    "restore it "
                    "from a backup (dptensor will not guess the budget spent)"
                )
            if version < SCHEMA_VERSION:
                self._upgrade(conn)
            return self._read_meta(conn)

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        """Format 1 to 2: store the number of charges and their chained checksum (the journal is
        already a rollback journal: :meth:`_connect` converted the WAL file)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:  # not done meanwhile
                meta = self._read_meta(conn, with_state=False)
                checksum, n = _chain_start(meta), 0
                for row in conn.execute(f"SELECT {', '.join(_STORED_COLUMNS)} FROM charges ORDER BY id"):
                    checksum, n = _chain_next(checksum, row), n + 1
                conn.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [
                        ("n_charges", json.dumps(n)),
                        ("checksum", json.dumps(_sealed(checksum, meta["relations"]))),
                    ],
                )
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def _read_meta(
        self, conn: sqlite3.Connection | None = None, *, with_state: bool = True
    ) -> dict[str, Any]:
        if conn is None:
            with self._connection("could not read the ledger") as own:
                return self._read_meta(own)
        try:
            rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            meta = {key: json.loads(rows[key]) for key in _META_KEYS + (_STATE_KEYS if with_state else ())}
            _check_budget(meta["epsilon"], meta["delta"])
            if not isinstance(meta["relations"], list):
                raise ValueError("relations is not a list")
            count = meta.get("n_charges", 0)
            if with_state and not (type(count) is int and count >= 0 and isinstance(meta["checksum"], str)):
                raise ValueError("no count or checksum of the charges")
        except sqlite3.DatabaseError as exc:
            if _error_kind(exc) != "other":
                raise
            raise LedgerError(f"the budget ledger {self._path} is damaged: {exc}") from exc
        except (KeyError, ValueError, TypeError) as exc:
            raise LedgerError(f"the budget ledger {self._path} is damaged: bad metadata ({exc})") from exc
        return meta

    def _check_matches(
        self,
        epsilon: float | None,
        delta: float | None,
        dataset: str | None,
        relations: list[str],
        value_discretization_interval: float | None,
    ) -> None:
        meta = self._meta
        if epsilon is not None and (epsilon, delta) != (meta["epsilon"], meta["delta"]):
            raise ValueError(
                f"the budget ledger {self._path} has the budget epsilon={meta['epsilon']:g}, "
                f"delta={meta['delta']:g}, not epsilon={epsilon:g}, delta={delta:g}; a ledger's budget is "
                "fixed when it is created (open it without epsilon and delta)"
            )
        if dataset is not None and dataset != meta["dataset"]:
            stored = "no data set name" if meta["dataset"] is None else f"the data set {meta['dataset']!r}"
            raise ValueError(f"the budget ledger {self._path} is for {stored}, not {dataset!r}")
        if value_discretization_interval is not None and float(value_discretization_interval) != float(
            meta["value_discretization_interval"]
        ):
            raise ValueError(
                f"the budget ledger {self._path} composes with value_discretization_interval="
                f"{meta['value_discretization_interval']:g}, not {value_discretization_interval:g}"
            )
        if relations and meta["relations"] and relations != sorted(meta["relations"]):
            raise ValueError(
                f"the budget ledger {self._path} accepts releases under {_names(meta['relations'])}, not "
                f"{_names(relations)}"
            )
        if relations and not meta["relations"]:
            with self._connection("could not fix the ledger's neighbouring relation") as conn:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    stored_meta, _, checksum = self._verified(conn)
                    stored = stored_meta["relations"]
                    if stored and sorted(stored) != relations:
                        raise ValueError(
                            f"the budget ledger {self._path} accepts releases under {_names(stored)}, not "
                            f"{_names(relations)}"
                        )
                    if not stored:
                        self._write_state(conn, stored_meta["n_charges"], checksum, relations)
                    conn.execute("COMMIT")
                except BaseException:
                    _rollback(conn)
                    raise
            self._meta = dict(meta, relations=relations)

    # ------------------------------------------------------------------ reading
    def _verified(self, conn: sqlite3.Connection) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
        """The metadata, every charge (a row as a dict, ``event`` decoded) and their chained checksum.

        The charges must be exactly those the ledger recorded: as many as its count, and the
        SHA-256 chain over the budget, every charge's row and the relations equal to the stored
        checksum. Otherwise the file lost charges or was changed (a truncated or damaged file, a
        copy taken in the middle of a commit): :class:`LedgerError`, never a smaller ``spent``.
        """
        meta = self._read_meta(conn)
        checksum, records = _chain_start(meta), []
        for row in conn.execute(f"SELECT {', '.join(_STORED_COLUMNS)} FROM charges ORDER BY id"):
            record = dict(zip(_STORED_COLUMNS, row, strict=True))
            try:
                record["event"] = _decode_cached(record["event"])
                checksum = _chain_next(checksum, row)
            except (ValueError, TypeError) as exc:
                raise LedgerError(
                    f"the budget ledger {self._path} is damaged: charge {record['id']}: {exc}"
                ) from exc
            records.append(record)
        damaged = f"the budget ledger {self._path} is damaged"
        advice = "restore it from a backup (dptensor will not guess the budget spent)"
        if len(records) != meta["n_charges"]:
            raise LedgerError(
                f"{damaged}: it holds {len(records)} charges but recorded {meta['n_charges']}; {advice}"
            )
        if _sealed(checksum, meta["relations"]) != meta["checksum"]:
            raise LedgerError(
                f"{damaged}: its budget or charges do not match their checksum (bytes were changed); {advice}"
            )
        return meta, records, checksum

    def _write_state(
        self, conn: sqlite3.Connection, n_charges: int, checksum: str, relations: Sequence[str]
    ) -> None:
        """Store the count, the sealed checksum and the relations (inside the caller's transaction)."""
        conn.executemany(
            "UPDATE meta SET value = ? WHERE key = ?",
            [
                (json.dumps(n_charges), "n_charges"),
                (json.dumps(_sealed(checksum, relations)), "checksum"),
                (json.dumps(list(relations)), "relations"),
            ],
        )

    def _events(self, conn: sqlite3.Connection) -> list[dp_accounting.DpEvent]:
        return [record["event"] for record in self._verified(conn)[1]]

    def _compose(self, events: Sequence[dp_accounting.DpEvent]) -> float:
        return composed_epsilon(events, self.delta, self.value_discretization_interval)

    def spent(self) -> float:
        """Composed epsilon (at the ledger's delta) of every recorded charge: the budget used."""
        with self._connection("could not read the ledger") as conn:
            return self._compose(self._events(conn))

    def remaining(self) -> float:
        """``epsilon - spent()``, floored at 0.

        Composition is not additive: a release whose own epsilon is below this may still be
        refused, and one above it may fit. Use :meth:`would_spend` to know.
        """
        return max(0.0, self.epsilon - self.spent())

    def would_spend(self, guarantee: PrivacyGuarantee) -> float:
        """The composed epsilon the ledger would reach if ``guarantee`` were charged now (no charge).

        ``inf`` for a guarantee that does not hold. Another process may charge in between; only
        :meth:`charge` decides atomically.
        """
        event = self._event_of(guarantee, check=False)
        if event is None:
            return math.inf
        with self._connection("could not read the ledger") as conn:
            return self._compose([*self._events(conn), event])

    def charges(self) -> list[Charge]:
        """Every recorded charge, oldest first."""
        with self._connection("could not read the ledger") as conn:
            records = self._verified(conn)[1]
        out = []
        for stored in records:
            record = {name: stored[name] for name in _CHARGE_COLUMNS}
            try:
                record["guarantee"] = json.loads(record["guarantee"])
            except ValueError as exc:
                raise LedgerError(
                    f"the budget ledger {self._path} is damaged: charge {record['id']}: {exc}"
                ) from exc
            out.append(Charge(**record))
        return out

    def summary(self) -> dict[str, Any]:
        """The budget, what is spent and left, and every charge, as plain data (e.g. for JSON)."""
        charges = self.charges()
        spent = self._compose([c.event for c in charges])
        return {
            "path": str(self._path),
            "dataset": self.dataset,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "relations": self.relations,
            "accountant": self._meta["accountant"],
            "value_discretization_interval": self.value_discretization_interval,
            "created": self.created,
            "n_charges": len(charges),
            "spent_epsilon": spent,
            "left_epsilon": max(0.0, self.epsilon - spent),
            "charges": [c.to_row() for c in charges],
        }

    # ------------------------------------------------------------------ charging
    def _event_of(self, guarantee: PrivacyGuarantee, *, check: bool = True) -> dp_accounting.DpEvent | None:
        if not isinstance(guarantee, PrivacyGuarantee):
            raise TypeError(f"a ledger charges PrivacyGuarantee objects, got {type(guarantee).__name__}")
        if not guarantee.holds or not math.isfinite(guarantee.epsilon):
            if not check:
                return None
            raise BudgetExceededError(
                f"refused by the budget ledger {self._path}: this release is not private "
                f"({guarantee.describe()}); its epsilon is infinite and no budget can pay for it. Nothing "
                "was computed.",
                path=str(self._path),
                budget_epsilon=self.epsilon,
                budget_delta=self.delta,
                spent=math.nan,
                requested=math.inf,
                total=math.inf,
            )
        event = guarantee.to_dp_event()
        text = encode_event(event)
        if decode_event(text) != event:
            raise ValueError(f"{event!r} cannot be stored faithfully in a budget ledger")
        return event

    def charge(self, guarantee: PrivacyGuarantee, *, description: str = "") -> Charge:
        """Record a release before it is made, or refuse it.

        One ``BEGIN IMMEDIATE`` transaction: every recorded event is read and composed exactly
        with the new one (:func:`composed_epsilon`); if the total stays within ``epsilon`` (at
        ``delta``) the charge is inserted and committed, otherwise nothing is written.

        Parameters
        ----------
        guarantee : PrivacyGuarantee
            The release's guarantee, computed from parameters and public sizes only.
        description : str
            What is released, for the records.

        Returns
        -------
        Charge
            The recorded charge.

        Raises
        ------
        BudgetExceededError
            The composed total would exceed the budget, or the guarantee does not hold.
        ValueError
            The release's neighbouring relation is not the ledger's.
        LedgerError
            The file cannot be written (read-only, disk full, damaged, locked for ``timeout``).
            The charge was not recorded.
        """
        event = self._event_of(guarantee)
        assert event is not None
        row = {
            "token": uuid.uuid4().hex,
            "time": _now(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "user": _user(),
            "argv": shlex.join(sys.argv) if sys.argv else "",
            "caller": _caller(),
            "description": str(description),
            "neighbouring": guarantee.neighbouring,
            "epsilon": float(guarantee.epsilon),
            "delta": float(guarantee.delta),
            "mechanism": guarantee.mechanism,
            "n_releases": int(guarantee.n_releases),
            "event": encode_event(event),
            "guarantee": json_text(guarantee.to_dict(), indent=None),
        }
        committing = False
        try:
            with self._connection("the charge was not recorded and nothing was computed") as conn:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    meta, records, checksum = self._verified(conn)
                    relations = meta["relations"]
                    if relations and guarantee.neighbouring not in relations:
                        raise ValueError(
                            f"the budget ledger {self._path} accepts releases under "
                            f"{_names(relations)}; this "
                            f"release protects the {guarantee.neighbouring!r} relation. Releases under "
                            "different relations do not compose into one guarantee: use a ledger per "
                            "relation, or create one with neighbouring=[...] listing both if one change of "
                            "the unit you protect is a neighbouring change under each. Nothing was computed."
                        )
                    events = [record["event"] for record in records]
                    total = self._compose([*events, event])
                    if not total <= self.epsilon:
                        raise self._exceeded(guarantee, self._compose(events), total)
                    row["id"] = records[-1]["id"] + 1 if records else 1
                    row["spent_after"] = float(total)
                    conn.execute(
                        f"INSERT INTO charges ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                        tuple(row.values()),
                    )
                    checksum = _chain_next(checksum, [row[name] for name in _STORED_COLUMNS])
                    self._write_state(conn, len(records) + 1, checksum, relations or [guarantee.neighbouring])
                    committing = True
                    conn.execute("COMMIT")
                except BaseException:
                    _rollback(conn)
                    raise
        except LedgerError:
            # COMMIT reported an error: was the charge durably recorded all the same?
            if committing and self._recorded(row["token"]):
                return self._charge_from_row(row)
            raise
        return self._charge_from_row(row)

    def _recorded(self, token: str) -> bool:
        try:
            with self._connection("could not read the ledger") as conn:
                return conn.execute("SELECT 1 FROM charges WHERE token = ?", (token,)).fetchone() is not None
        except LedgerError:
            return False

    def _charge_from_row(self, row: dict[str, Any]) -> Charge:
        values = {name: row[name] for name in _CHARGE_COLUMNS}
        values["event"] = decode_event(row["event"])
        values["guarantee"] = json.loads(row["guarantee"])
        return Charge(**values)

    def _exceeded(self, guarantee: PrivacyGuarantee, spent: float, total: float) -> BudgetExceededError:
        name = f" (data set {self.dataset!r})" if self.dataset is not None else ""
        why = (
            ""
            if math.isfinite(total)
            else " (too large to account in floating point, or pure delta parts above the ledger's delta)"
        )
        return BudgetExceededError(
            f"privacy budget exceeded: the ledger {self._path}{name} has spent epsilon={spent:.6g} of "
            f"{self.epsilon:g} (delta={self.delta:g}), {max(0.0, self.epsilon - spent):.6g} left; this "
            f"release, ({guarantee.epsilon:g}, {guarantee.delta:g})-DP on its own, would bring the composed "
            f"total to epsilon={total:.6g}{why}. The charge was refused and nothing was computed.",
            path=str(self._path),
            budget_epsilon=self.epsilon,
            budget_delta=self.delta,
            spent=spent,
            requested=float(guarantee.epsilon),
            total=total,
        )


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _names(relations: Sequence[str]) -> str:
    return ", ".join(repr(r) for r in relations) or "(none yet)"


def _version() -> str:
    from dptensor import __version__

    return __version__
