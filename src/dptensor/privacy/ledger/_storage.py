"""A budget ledger's file: the SQLite format, its durability, and the checksum of the charges.

:class:`LedgerFile` is the file side of :class:`~dptensor.privacy.BudgetLedger`: creating the
file atomically, one connection per process (reopened after a fork), the rollback journal,
opening and upgrading older formats, reading the metadata, and reading the charges only when
their count and chained checksum match (:meth:`LedgerFile._verified`). SQLite errors become
:class:`~dptensor.privacy.LedgerError` naming what went wrong.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import sqlite3
import threading
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from dptensor._validation import check_epsilon_delta
from dptensor._version import __version__
from dptensor.privacy.errors import LedgerError, PrivacyWarning
from dptensor.privacy.ledger._events import _decode_cached
from dptensor.privacy.ledger._records import _CHARGE_COLUMNS, _now, _user
from dptensor.privacy.ledger._seen import Mark

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
#: How to accept, deliberately, a ledger older than one seen on this machine (a restored backup).
_ACCEPT = "BudgetLedger(path, accept_rollback=True) or `dptensor budget accept-restore FILE`"
#: The advice of every "damaged" error. A restore forgets the charges made after the backup, so
#: the advice says so, and that an older copy than one seen is refused unless accepted.
_RESTORE_ADVICE = (
    "restore it from a backup (dptensor will not guess the budget spent). A restored copy forgets "
    "every charge made after the backup, so that budget would be spent again: dptensor refuses a "
    "copy older than one it has seen on this machine unless you accept it deliberately with "
    f"{_ACCEPT}"
)

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

# Connections a forked child inherited: kept referenced so that the child never closes them.
_INHERITED: list[sqlite3.Connection] = []


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


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _version() -> str:
    return __version__


def new_ledger_metadata(epsilon: float, delta: float, dataset: str | None, relations: list[str],
                        value_discretization_interval: float | None) -> dict[str, Any]:
    """The fixed metadata of a new ledger (file or server): budget, data set, relations, who and when."""
    return {
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


class CheckedCharges:
    """The charges one process has checked against the ledger's checksum, and the chain value after
    each of them (``chains``; ``checksum`` is the last, or the chain's start without charges)."""

    __slots__ = ("chains", "checksum", "records")

    def __init__(self, checksum: str, records: tuple[dict[str, Any], ...], chains: tuple[str, ...]) -> None:
        self.checksum = checksum
        self.records = records
        self.chains = chains


class LedgerFile:
    """The file side of :class:`~dptensor.privacy.BudgetLedger` (whose ``__init__`` sets its attributes)."""

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
        meta = new_ledger_metadata(epsilon, delta, dataset, relations, value_discretization_interval)
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
        state.update(_conn=None, _conn_pid=None, _file_id=None, _seen=None)
        state.pop("_record_counts", None)
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
            "damaged": f"the {where} is damaged; {_RESTORE_ADVICE}",
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
                    f"{_RESTORE_ADVICE}"
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
            if "moved_to" in rows:  # the history was moved to a server (`dptensor budget migrate`)
                meta["moved_to"] = json.loads(rows["moved_to"])
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

    def _verified(self, conn: sqlite3.Connection) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
        """The metadata, every charge (a row as a dict, ``event`` decoded) and their chained checksum.

        The charges must be exactly those the ledger recorded: as many as its count, and the
        SHA-256 chain over the budget, every charge's row and the relations equal to the stored
        checksum. Otherwise the file lost charges or was changed (a truncated or damaged file, a
        copy taken in the middle of a commit): :class:`LedgerError`, never a smaller ``spent``.

        Each process checks a charge once, when it first reads it: it keeps the charges it has
        checked (``_seen``, :class:`CheckedCharges`) and afterwards reads and chains only
        the charges added since, so a read costs the new charges, not the whole ledger. The stored
        count and checksum are compared on every read, so a file that lost charges, was rolled
        back or continued from another history is still refused; the charges this process checked
        are composed from its own copy, so damage to them after the check cannot lower a total it
        computes (a process that opens the file afresh checks everything again).

        Then the charges are compared with the latest state of this ledger seen on this machine
        (:meth:`_check_history`), which is advanced to them when they are newer.
        """
        if not conn.in_transaction:  # one consistent read: no commit lands between its statements
            conn.execute("BEGIN")
            try:
                return self._verified(conn)
            finally:
                _rollback(conn)
        # the mark is read before the file: it records only committed states, so a file that has
        # not been rolled back holds at least as many charges as a mark read before it
        mark = self._seen_ledgers.read(self._meta["id"]) if self._meta is not None else None
        meta = self._read_meta(conn)
        damaged = f"the budget ledger {self._path} is damaged"
        advice = _RESTORE_ADVICE
        seen = self._seen
        if seen is not None and meta["n_charges"] < len(seen.records):
            raise LedgerError(
                f"{damaged}: it records {meta['n_charges']} charges, but this process has read "
                f"{len(seen.records)} from it; {advice}"
            )
        if seen is None:
            checksum, records, chains = _chain_start(meta), [], []
        else:
            checksum, records, chains = seen.checksum, list(seen.records), list(seen.chains)
        last = records[-1]["id"] if records else None
        query = f"SELECT {', '.join(_STORED_COLUMNS)} FROM charges"
        if last is None:
            rows = conn.execute(f"{query} ORDER BY id")
        else:
            rows = conn.execute(f"{query} WHERE id > ? ORDER BY id", (last,))
        for row in rows:
            record = dict(zip(_STORED_COLUMNS, row, strict=True))
            try:
                record["event_text"] = record["event"]
                record["event"] = _decode_cached(record["event"])
                checksum = _chain_next(checksum, row)
            except (ValueError, TypeError) as exc:
                raise LedgerError(f"{damaged}: charge {record['id']}: {exc}") from exc
            records.append(record)
            chains.append(checksum)
        if len(records) != meta["n_charges"]:
            raise LedgerError(
                f"{damaged}: it holds {len(records)} charges but recorded {meta['n_charges']}; {advice}"
            )
        if _sealed(checksum, meta["relations"]) != meta["checksum"]:
            raise LedgerError(
                f"{damaged}: its budget or charges do not match their checksum (bytes were changed); {advice}"
            )
        self._check_history(mark, meta, len(chains), chains)
        self._seen = CheckedCharges(checksum, tuple(records), tuple(chains))
        if len(records) > (mark.n_charges if mark is not None else 0):
            self._seen_ledgers.advance(meta["id"], len(records), checksum, str(self._path))
        return meta, records, checksum

    def _check_history(
        self, mark: Mark | None, meta: Mapping[str, Any], n: int, chains: Sequence[str] | None
    ) -> None:
        """Refuse charges that are older than, or another history than, the latest state seen.

        The file holds ``n`` charges; ``chains`` are the chain values after each of them
        (checked against its checksum), or ``None`` to compare the count alone. The file is
        refused when it holds fewer charges than ``mark`` or its chain does not pass through the
        mark's chain value -- unless the ledger was opened with ``accept_rollback=True`` (and
        ``chains`` are given): then the mark is replaced by the file's state, and the
        acknowledgement recorded (:attr:`accepted_restore`) and warned about.
        """
        if mark is None or mark.n_charges == 0:
            return
        if n >= mark.n_charges and (chains is None or chains[mark.n_charges - 1] == mark.chain):
            return
        if n < mark.n_charges:
            what = (
                f"is older than a copy seen on this machine: {mark.n_charges} charges were seen in it "
                f"(at {mark.path}, {mark.time}), the file holds {n}"
            )
        else:
            what = (
                f"does not continue the history seen on this machine: its charge {mark.n_charges} is "
                f"not the charge {mark.n_charges} seen (at {mark.path}, {mark.time}); it is an older "
                "copy that was charged since, or a copy charged apart from the original"
            )
        if self._accept_rollback and chains is not None:
            try:
                accepted = self._seen_ledgers.accept(
                    meta["id"], n, chains[-1] if chains else _chain_start(meta), str(self._path), mark
                )
            except OSError as exc:
                raise LedgerError(
                    f"the budget ledger {self._path} {what}; could not record that the restore is "
                    f"accepted: {exc}"
                ) from exc
            self._accepted_restore = accepted
            warnings.warn(
                f"accepted a restored budget ledger: {self._path} {what}. The charges made after the "
                "copy are forgotten and their budget can be spent again.",
                PrivacyWarning,
                stacklevel=4,
            )
            return
        raise LedgerError(
            f"the budget ledger {self._path} {what}. Was it restored from a backup? A restored copy "
            "forgets every charge made after the backup, so budget already spent would be spent again. "
            f"If you restored it on purpose, accept it deliberately with {_ACCEPT}; the acceptance is "
            f"recorded in {self._seen_ledgers.file(meta['id'])}"
        )

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

    def _mark_moved(self, url: str, n_charges: int, checksum: str) -> None:
        """Record that the history moved to ``url``: the file refuses every later charge.

        Only if the file still holds exactly the ``n_charges`` charges sealed by ``checksum``
        (those copied); otherwise a :class:`LedgerError` and nothing is marked.
        """
        with self._connection("could not mark the ledger as moved") as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                meta = self._read_meta(conn)
                if (meta["n_charges"], meta["checksum"]) != (n_charges, checksum):
                    raise LedgerError(
                        f"the budget ledger {self._path} was charged while it was being moved: run the "
                        "migration again"
                    )
                conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", ("moved_to", json.dumps(url))
                )
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
