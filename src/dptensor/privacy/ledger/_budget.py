"""The :class:`BudgetLedger` class: opening, reading and charging a ledger (its file side is
:class:`~dptensor.privacy.ledger._storage.LedgerFile`; a server ledger subclasses it in
:mod:`dptensor.privacy.ledger._postgres`). The package's docstring describes it all."""


from __future__ import annotations

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dp_accounting

from dptensor._files import json_text
from dptensor.privacy.errors import BudgetExceededError, LedgerError
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.ledger._accounting import RecordCounts
from dptensor.privacy.ledger._events import decode_event, encode_event
from dptensor.privacy.ledger._records import _CHARGE_COLUMNS, Charge, _caller, _now, _user
from dptensor.privacy.ledger._seen import SeenLedgers
from dptensor.privacy.ledger._storage import (
    _STORED_COLUMNS,
    CheckedCharges,
    LedgerFile,
    _chain_next,
    _check_budget,
    _rollback,
)
from dptensor.privacy.relations import implies_any

#: URL schemes of a ledger on a PostgreSQL server (:mod:`dptensor.privacy.ledger._postgres`).
SERVER_SCHEMES = ("postgresql://", "postgres://")
#: The class of a server ledger, by backend: filled by :mod:`dptensor.privacy.ledger._postgres`.
SERVER_BACKENDS: dict[str, type] = {}

__all__ = ["SERVER_BACKENDS", "SERVER_SCHEMES", "BudgetLedger", "is_server_url"]


def is_server_url(path: object) -> bool:
    """Whether ``path`` names a ledger on a database server (``postgresql://`` or ``postgres://``)."""
    return isinstance(path, str) and path.lower().startswith(SERVER_SCHEMES)


def _check_relations(neighbouring: str | Sequence[str] | None) -> list[str]:
    if neighbouring is None:
        return []
    names = [neighbouring] if isinstance(neighbouring, str) else list(neighbouring)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"neighbouring must be a relation name or a list of them, got {neighbouring!r}")
    return sorted(set(names))


def _check_options(
    epsilon: object,
    delta: object,
    dataset: object,
    neighbouring: str | Sequence[str] | None,
    value_discretization_interval: object,
    timeout: object,
) -> tuple[float | None, float | None, list[str], float]:
    """Check a ledger's parameters before anything is created: ``(epsilon, delta, relations, timeout)``."""
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout >= 0:
        raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
    if dataset is not None and not isinstance(dataset, str):
        raise TypeError(f"dataset must be a string, got {type(dataset).__name__}")
    relations = _check_relations(neighbouring)
    if value_discretization_interval is not None and not (
        isinstance(value_discretization_interval, numbers.Real) and 0 < value_discretization_interval <= 0.1
    ):
        raise ValueError(
            f"value_discretization_interval must lie in (0, 0.1], got {value_discretization_interval!r}"
        )
    if (epsilon is None) != (delta is None):
        raise ValueError("pass both epsilon and delta (the budget), or neither to open an existing ledger")
    if epsilon is not None:
        epsilon, delta = _check_budget(epsilon, delta)
    return epsilon, delta, relations, float(timeout)


class BudgetLedger(LedgerFile):
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
        (see *Notes*). Or a URL ``postgresql://USER@HOST/DB?dataset=NAME``: the data set's ledger
        on a PostgreSQL server, shared by analysts on several machines, with database roles
        (:class:`~dptensor.privacy.ledger._postgres.ServerLedger`: the same API, plus
        ``analyst_role=``; needs ``pip install 'dptensor[server]'``).
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
    accept_rollback : bool, default False
        Accept, deliberately, a file older than one seen on this machine (a copy restored from a
        backup, which forgets every charge made after the backup): its state becomes the one
        seen, the acknowledgement is recorded in the state directory (and in
        :attr:`accepted_restore`) and a :class:`~dptensor.privacy.PrivacyWarning` is issued.
        Without it such a file is a :class:`~dptensor.privacy.LedgerError`. It applies to the
        file as found when opening only.
    state_dir : str or Path, optional
        Where the latest state seen of each ledger is kept (see *Notes*). Default:
        ``$DPTENSOR_STATE_DIR``, else ``$XDG_STATE_HOME/dptensor``, else
        ``~/.local/state/dptensor``.

    Notes
    -----
    A charge is one ``BEGIN IMMEDIATE`` transaction (read every event, compose exactly,
    decide, insert, commit), so concurrent processes never overspend. SQLite's locking relies
    on the file system: a local disk (one machine, any number of processes) is safe; network
    file systems (NFS, SMB) often implement the locks incorrectly -- do not put a ledger on one,
    run a single charging host instead. A charge is in the main file when :meth:`charge`
    returns, and a file missing charges or with changed bytes is refused (see the module's
    notes). The ledger protects a budget against accidents, crashes and races, not against a
    user who can write the file (or delete it: a new file is a new budget).

    Restored copies. A copy of the file restored from a backup is a consistent, older ledger
    that has forgotten every charge made after the backup. So every process remembers, outside
    the file, the latest state it has seen of each ledger (keyed by the ledger's unique id: its
    number of charges and the chained checksum after the last), in ``state_dir/ledgers/``; a
    file that holds fewer charges, or another history, is refused (``LedgerError``, opening or
    charging) unless opened with ``accept_rollback=True`` (CLI: ``dptensor budget
    accept-restore FILE``). This detects restores of what this user saw on this machine only;
    a state directory that cannot be written gives one warning and no detection.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import numpy as np
    >>> from dptensor import private_power_method
    >>> from dptensor.privacy import BudgetExceededError, BudgetLedger
    >>> from dptensor.tensor import LowRankTensor
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "clinic.ledger"
    >>> ledger = BudgetLedger(path, epsilon=1.5, delta=1e-5, dataset="clinic",
    ...                       state_dir=path.parent / "state")  # (a scratch state directory)
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

    def __new__(cls, path: object = None, *args: object, **kwargs: object) -> BudgetLedger:  # noqa: D102
        # BudgetLedger("postgresql://...") is a ledger on a PostgreSQL server (ledger._postgres,
        # which registers its class in SERVER_BACKENDS when the package is imported)
        if cls is BudgetLedger and is_server_url(path):
            return super().__new__(SERVER_BACKENDS["postgresql"])
        return super().__new__(cls)

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
        accept_rollback: bool = False,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self._path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._conn_pid: int | None = None
        self._file_id: tuple[int, int] | None = None
        self._meta: dict[str, Any] | None = None
        self._lock = threading.RLock()
        self._seen: CheckedCharges | None = None  # the charges this process has checked (_verified)
        self._seen_ledgers = SeenLedgers(state_dir)  # the latest state seen of each ledger, outside it
        self._accept_rollback = bool(accept_rollback)  # for the state found when opening only
        self._accepted_restore: dict[str, Any] | None = None
        epsilon, delta, relations, self._timeout = _check_options(
            epsilon, delta, dataset, neighbouring, value_discretization_interval, timeout
        )
        if not self._path.exists():
            if epsilon is None:
                raise LedgerError(
                    f"no budget ledger at {self._path}: create one with BudgetLedger(path, epsilon=..., "
                    f"delta=...) or `dptensor budget create {self._path} --epsilon E --delta D`"
                )
            self._create(epsilon, delta, dataset, relations, value_discretization_interval)
        try:
            self._meta = self._open()
            self._check_seen()
            self._check_matches(epsilon, delta, dataset, relations, value_discretization_interval)
        except BaseException:
            self.close()
            raise
        finally:
            self._accept_rollback = False

    def _check_seen(self) -> None:
        """Refuse, on opening, a file that holds fewer charges than seen of it on this machine.

        Only the stored count is compared (the charges are checked, and their chain compared
        with the one seen, by the first read or charge), so that a file whose records are
        damaged still opens. With ``accept_rollback=True`` every charge is checked now, in one
        consistent read, and an older or other history is accepted (:meth:`_check_history`).
        """
        with self._connection("could not open the ledger") as conn:
            if self._accept_rollback:
                self._verified(conn)
                return
            mark = self._seen_ledgers.read(self._meta["id"])  # (before the file: see _verified)
            if mark is not None:
                meta = self._read_meta(conn)
                self._check_history(mark, meta, meta["n_charges"], None)

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

    @property
    def moved_to(self) -> str | None:
        """Where this file's history was moved (``dptensor budget migrate``), else ``None``.

        A moved file stays readable and refuses every charge.
        """
        return self._read_meta().get("moved_to")

    @property
    def accepted_restore(self) -> dict[str, Any] | None:
        """The restore accepted when this object opened the file (``accept_rollback=True``), else ``None``.

        A dict: when and by whom it was accepted, the path, and the number of charges seen before
        (``seen_n_charges``, at ``seen_time``) and held by the file (``file_n_charges``).
        """
        return None if self._accepted_restore is None else dict(self._accepted_restore)

    @property
    def state_file(self) -> Path | None:
        """Where the latest state seen of this ledger is kept (``None`` without a state directory)."""
        return self._seen_ledgers.file(self._meta["id"])

    def __repr__(self) -> str:
        name = f", dataset={self.dataset!r}" if self.dataset is not None else ""
        return f"BudgetLedger({str(self._path)!r}, epsilon={self.epsilon:g}, delta={self.delta:g}{name})"

    def __enter__(self) -> BudgetLedger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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

    def _total(self, records: Sequence[dict[str, Any]], extra: dp_accounting.DpEvent | None = None) -> float:
        """Composed epsilon of the checked ``records`` (and ``extra``): :func:`composed_epsilon`, with
        the events of the records counted before reused (:class:`RecordCounts`)."""
        with self._lock:
            counts = self.__dict__.get("_record_counts")
            if counts is None:
                counts = self._record_counts = RecordCounts()
            return counts.epsilon(records, self.delta, self.value_discretization_interval, extra)

    def spent(self) -> float:
        """Composed epsilon (at the ledger's delta) of every recorded charge: the budget used."""
        with self._connection("could not read the ledger") as conn:
            return self._total(self._verified(conn)[1])

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
            return self._total(self._verified(conn)[1], event)

    def charges(self) -> list[Charge]:
        """Every recorded charge, oldest first."""
        with self._connection("could not read the ledger") as conn:
            records = self._verified(conn)[1]
        return [self._charge_of(stored) for stored in records]

    def _charge_of(self, stored: dict[str, Any]) -> Charge:
        """The :class:`Charge` of a checked record (a new one each time: its ``guarantee`` is mutable)."""
        record = {name: stored[name] for name in _CHARGE_COLUMNS}
        try:
            record["guarantee"] = json.loads(record["guarantee"])
        except ValueError as exc:
            raise LedgerError(
                f"the budget ledger {self._path} is damaged: charge {record['id']}: {exc}"
            ) from exc
        return Charge(**record)

    @staticmethod
    def _row_of(stored: dict[str, Any]) -> dict[str, Any]:
        """:meth:`Charge.to_row` of a checked record, from its stored texts (no re-encoding)."""
        row = {name: stored[name] for name in _CHARGE_COLUMNS}
        row["event"] = stored["event_text"]
        return row

    def summary(self) -> dict[str, Any]:
        """The budget, what is spent and left, and every charge, as plain data (e.g. for JSON)."""
        with self._connection("could not read the ledger") as conn:
            records = self._verified(conn)[1]
        spent = self._total(records)
        return {
            "path": str(self._path),
            "dataset": self.dataset,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "relations": self.relations,
            "accountant": self._meta["accountant"],
            "value_discretization_interval": self.value_discretization_interval,
            "created": self.created,
            "n_charges": len(records),
            "spent_epsilon": spent,
            "left_epsilon": max(0.0, self.epsilon - spent),
            "charges": [self._row_of(stored) for stored in records],
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
        row = self._new_row(guarantee, event, description)
        committing = False
        try:
            with self._connection("the charge was not recorded and nothing was computed") as conn:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    meta, records, checksum = self._verified(conn)
                    self._refuse_moved(meta)
                    relations = meta["relations"]
                    total = self._admit(guarantee, event, relations, records)
                    row["id"] = records[-1]["id"] + 1 if records else 1
                    row["spent_after"] = float(total)
                    conn.execute(
                        f"INSERT INTO charges ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                        tuple(row.values()),
                    )
                    checksum = _chain_next(checksum, [row[name] for name in _STORED_COLUMNS])
                    n_after = len(records) + 1
                    self._write_state(conn, n_after, checksum, relations or [guarantee.neighbouring])
                    committing = True
                    conn.execute("COMMIT")
                except BaseException:
                    _rollback(conn)
                    raise
        except LedgerError:
            # COMMIT reported an error: was the charge durably recorded all the same?
            if not (committing and self._recorded(row["token"])):
                raise
        # committed: the latest state seen of the ledger moves to it
        self._seen_ledgers.advance(self._meta["id"], n_after, checksum, str(self._path))
        return self._charge_from_row(row)

    def _new_row(
        self,
        guarantee: PrivacyGuarantee,
        event: dp_accounting.DpEvent,
        description: str,
        token: str | None = None,
    ) -> dict[str, Any]:
        """A charge's row, without its ``id`` and ``spent_after`` (known inside the transaction)."""
        return {
            "token": token or uuid.uuid4().hex,
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

    def _refuse_moved(self, meta: dict[str, Any]) -> None:
        """Refuse to charge a file ledger whose history was moved to a server (``budget migrate``)."""
        if meta.get("moved_to"):
            raise LedgerError(
                f"the budget ledger {self._path} was moved to {meta['moved_to']} (dptensor budget migrate): "
                "charge that ledger instead. Nothing was computed."
            )

    def _admit(
        self,
        guarantee: PrivacyGuarantee,
        event: dp_accounting.DpEvent,
        relations: Sequence[str],
        records: Sequence[dict[str, Any]],
    ) -> float:
        """The composed total with ``event`` added to the checked ``records``, or the refusal
        (relation, budget)."""
        if relations and not implies_any(guarantee.neighbouring, relations):
            raise ValueError(
                f"the budget ledger {self._path} accepts releases under "
                f"{_names(relations)}; this "
                f"release protects the {guarantee.neighbouring!r} relation. Releases under "
                "different relations do not compose into one guarantee: use a ledger per "
                "relation, or create one with neighbouring=[...] listing both if one change of "
                "the unit you protect is a neighbouring change under each. Nothing was computed."
            )
        total = self._total(records, event)
        if not total <= self.epsilon:
            raise self._exceeded(guarantee, self._total(records), total)
        return total

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


def _names(relations: Sequence[str]) -> str:
    return ", ".join(repr(r) for r in relations) or "(none yet)"
