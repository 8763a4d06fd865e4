"""A budget ledger on a PostgreSQL server: ``BudgetLedger("postgresql://host/db?dataset=ratings")``.

:class:`ServerLedger` is the :class:`~dptensor.privacy.BudgetLedger` a ``postgresql://`` (or
``postgres://``) URL opens: the same API and the same exact composition (the events of every
charge composed by :func:`~dptensor.privacy.ledger.composed_epsilon`, the refusal decided by the
same code as the file's), kept in the tables of :mod:`dptensor.privacy.ledger._postgres_schema`
so that analysts on several machines share one budget. psycopg 3 (``pip install
'dptensor[server]'``) is imported only here, when a URL is given.

A charge. One transaction on the server: it takes a transaction-scoped advisory lock keyed by
the ledger's id (``pg_advisory_xact_lock``), so the charges of one ledger are serialised; looks
up its idempotency token (a charge whose commit was acknowledged to nobody is recognised, not
made twice); reads the charges it has not read yet (each process keeps those it has checked, so
a charge reads only the new ones), checks their chained SHA-256 checksum, composes them with the
new event, decides, inserts the next ``id`` and commits. The primary key ``(ledger, id)`` and a
trigger that accepts only the next ``id`` make any writer that skipped the lock fail instead of
overspending. Serialisation failures, deadlocks, a lost lock race and a lost connection
(the server restarting, a network error) are retried with the same token until ``timeout``
seconds have passed; a commit whose acknowledgement was lost is looked up by its token. Each
statement's values reach the server as parameters, never inside the SQL text.

Roles. The curator (the database user that creates the data set's ledger) names the database
role of its analysts (``analyst_role=``, default ``dptensor_analyst``; created ``NOLOGIN`` if it
does not exist and the curator may create roles). Analysts connect as their own database users,
members of that role: they can read and charge that data set's ledger, and by the grants,
row-level policies and triggers of the schema nothing else -- no ``UPDATE``, ``DELETE`` or
``TRUNCATE`` of a charge, no change of a budget, no ``DROP``. Every charge records, besides the
file ledger's fields (host, process, OS user, command line, caller, the release's parameters),
the database user and client address, set by the server. A curator changes a budget with
:meth:`ServerLedger.change_budget`, recorded in ``dptensor.budget_changes``.

Connection pools. ``pool_size=N`` (a pool of the ledger's own) or ``pool=`` (the caller's
``psycopg_pool.ConnectionPool``) gives every transaction a connection of the pool, so that the
threads sharing a ledger object do not take turns on one connection
(:mod:`dptensor.privacy.ledger._postgres_pool`).

Restores of the database from a backup are the database administrator's concern: the server
ledger keeps no high-water mark on the client (``accept_rollback`` does not apply).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any

import dp_accounting

from dptensor.privacy.errors import LedgerError
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.ledger._budget import SERVER_BACKENDS, BudgetLedger, _check_options
from dptensor.privacy.ledger._events import _decode_cached
from dptensor.privacy.ledger._postgres_pool import _INHERITED, is_pool_timeout, optional_module
from dptensor.privacy.ledger._postgres_schema import GRANTS, INSTALL, INSTALL_LOCK, SERVER_FORMAT
from dptensor.privacy.ledger._records import Charge
from dptensor.privacy.ledger._seen import SeenLedgers
from dptensor.privacy.ledger._storage import (
    _META_KEYS,
    _STORED_COLUMNS,
    CheckedCharges,
    _chain_next,
    _chain_start,
    new_ledger_metadata,
)

__all__ = ["DEFAULT_ANALYST_ROLE", "ServerLedger", "migrate_to_server"]

#: The analysts' database role when the curator names none.
DEFAULT_ANALYST_ROLE = "dptensor_analyst"
#: Query parameters of a ledger URL that dptensor reads (and does not pass to the server).
_OWN_PARAMETERS = ("dataset",)
_COLUMNS_SQL = ", ".join(f'"{name}"' for name in _STORED_COLUMNS)  # constant names, never user input
# connection errors that a retry cannot mend (the others -- refused, reset, the server starting -- may pass)
_PERMANENT = re.compile(r"authentication failed|does not exist|no pg_hba\.conf entry|permission denied", re.I)


def _psycopg():  # noqa: ANN202 - the module
    return optional_module("psycopg", "a budget ledger on a PostgreSQL server needs psycopg 3")


def parse_url(url: str, dataset: str | None) -> tuple[str, str, str]:
    """``(conninfo, shown, dataset)`` of a ledger URL: what libpq connects to (without ``dataset=``),
    the URL shown in messages (without a password) and the data set's name."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    named = [value for key, value in query if key == "dataset"]
    if len(named) > 1:
        raise ValueError(f"the ledger URL names dataset= more than once: {named}")
    if named and dataset is not None and named[0] != dataset:
        raise ValueError(f"the ledger URL names the data set {named[0]!r}, dataset= names {dataset!r}")
    name = named[0] if named else dataset
    if not name:
        raise ValueError(
            "a ledger on a server is one data set's: name it in the URL (postgresql://host/db?dataset=NAME) "
            "or with dataset="
        )
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k not in _OWN_PARAMETERS])
    conninfo = urllib.parse.urlunsplit(parts._replace(query=rest))
    netloc = parts.netloc.rsplit("@", 1)
    if len(netloc) == 2:
        netloc[0] = netloc[0].split(":", 1)[0]  # the user, without a password
    shown_query = urllib.parse.urlencode(
        [(k, v) for k, v in query if k not in ("password", "passfile")] if query else []
    )
    shown = urllib.parse.urlunsplit(parts._replace(netloc="@".join(netloc), query=shown_query))
    return conninfo, shown, name


class ServerLedger(BudgetLedger):
    """A :class:`~dptensor.privacy.BudgetLedger` kept on a PostgreSQL server (see the module's notes).

    Created by ``BudgetLedger("postgresql://user@host/db?dataset=NAME", ...)``; the parameters are
    :class:`~dptensor.privacy.BudgetLedger`'s, with ``dataset`` required (in the URL or as the
    argument) and one more:

    Parameters
    ----------
    analyst_role : str, optional
        Creating a ledger: the database role whose members (the analysts) may read and charge
        it. Default ``dptensor_analyst``. Opening one: checked against the stored role if given.
    pool_size : int, optional
        Connect through a pool of the ledger's own of this many connections (psycopg_pool), one
        per process, instead of one connection: every charge and read is a transaction on a
        connection of the pool, so threads sharing the ledger do not wait for each other's
        round trips. :meth:`close` closes it.
    pool : psycopg_pool.ConnectionPool, optional
        Connect through the caller's pool instead (to the URL's database): the ledger takes a
        connection for each transaction, sets ``lock_timeout`` for that transaction only and
        never closes the pool. A copy of the ledger (pickle, deepcopy) does not take it along.
    """

    def __init__(
        self,
        path: str,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        dataset: str | None = None,
        neighbouring: str | Sequence[str] | None = None,
        value_discretization_interval: float | None = None,
        timeout: float = 60.0,
        accept_rollback: bool = False,
        state_dir: str | os.PathLike[str] | None = None,
        analyst_role: str | None = None,
        pool_size: int | None = None,
        pool: Any = None,
    ) -> None:
        if accept_rollback:
            raise ValueError(
                "accept_rollback applies to ledger files; restores of a database are its administrator's "
                "concern"
            )
        if analyst_role is not None and not (isinstance(analyst_role, str) and analyst_role):
            raise ValueError(f"analyst_role must be a database role's name, got {analyst_role!r}")
        self._setup(path, dataset, state_dir)
        epsilon, delta, relations, self._timeout = _check_options(
            epsilon, delta, self._dataset, neighbouring, value_discretization_interval, timeout
        )
        if pool is not None or pool_size is not None:
            from dptensor.privacy.ledger._postgres_pool import LedgerPool

            self._pool = LedgerPool(self._conninfo, self._connect_options(), self._lock_wait(),
                                    size=pool_size, pool=pool, inherited=_INHERITED)  # fmt: skip
        try:
            self._meta = self._create_or_open(epsilon, delta, relations, value_discretization_interval,
                                              analyst_role)  # fmt: skip
            if analyst_role is not None and analyst_role != self._meta["analyst_role"]:
                raise ValueError(
                    f"the budget ledger {self._path} is charged by members of "
                    f"{self._meta['analyst_role']!r}, not {analyst_role!r}"
                )
            self._check_matches(epsilon, delta, None, relations, value_discretization_interval)
        except BaseException:
            self.close()
            raise

    def _setup(self, url: str, dataset: str | None, state_dir: str | os.PathLike[str] | None) -> None:
        self._conn: Any = None
        self._conn_pid: int | None = None
        self._pool: Any = None  # a LedgerPool (pool_size= or pool=), else one connection per process
        self._last_used = 0.0
        self._file_id = None
        self._meta: dict[str, Any] | None = None
        self._lock = threading.RLock()
        self._seen: CheckedCharges | None = None
        self._seen_ledgers = SeenLedgers(state_dir)
        self._accept_rollback = False
        self._accepted_restore = None
        self._timeout = 60.0
        self._conninfo, self._path, self._dataset = parse_url(url, dataset)
        _psycopg()

    # ------------------------------------------------------------------ connection
    def _live_connection(self) -> Any:
        """This process's connection to the server, opened on first use (one per process)."""
        if self._conn is not None and self._conn_pid != os.getpid():
            _INHERITED.append(self._conn)  # opened before a fork: the child must not use or close it
            self._conn = None
        conn = self._conn
        if conn is not None and (conn.closed or conn.broken):
            self.close()
            conn = None
        elif conn is not None and time.monotonic() - self._last_used > 1.0:
            try:  # idle for a while: the server may have restarted since
                conn.execute("SELECT 1")
                conn.rollback()
            except _psycopg().Error:
                self.close()
                conn = None
        if conn is None:
            psycopg = _psycopg()
            conn = psycopg.connect(self._conninfo, **self._connect_options())
            # how long a charge waits for another's lock
            conn.execute("SELECT set_config('lock_timeout', %s, false)", (self._lock_wait(),))
            conn.commit()
            self._conn, self._conn_pid = conn, os.getpid()
        self._last_used = time.monotonic()
        return conn

    def _connect_options(self) -> dict[str, Any]:
        return {"connect_timeout": max(2, int(min(self._timeout, 30))),
                "application_name": "dptensor budget ledger"}  # fmt: skip

    def _lock_wait(self) -> str:
        """``lock_timeout``: how long a charge waits for another's lock (0 means forever: at least 1 ms)."""
        return f"{max(1, int(self._timeout * 1000))}ms"

    @contextlib.contextmanager
    def _borrowed(self, timeout: float) -> Iterator[Any]:
        """A connection for one transaction: the pool's, or this process's own under the ledger's lock."""
        if self._pool is not None:
            with self._pool.connection(timeout) as conn:
                yield conn
        else:
            with self._lock:
                yield self._live_connection()

    def _drop_connection(self) -> None:
        """After a connection error: close this process's connection (a pool replaces its own broken ones)."""
        if self._pool is None:
            self.close()

    @contextlib.contextmanager
    def _connection(self, action: str) -> Iterator[Any]:
        """A connection, in a transaction that is rolled back at the end (reads), errors translated."""
        psycopg = _psycopg()
        try:
            with self._borrowed(self._timeout) as conn:
                try:
                    yield conn
                finally:
                    if not conn.closed and not conn.broken:
                        conn.rollback()
        except psycopg.Error as exc:
            self._drop_connection()
            raise self._error(exc, action) from exc

    def _error(self, exc: Exception, action: str) -> LedgerError:
        psycopg = _psycopg()
        where = f"budget ledger {self._path}"
        if self._pool is not None and is_pool_timeout(exc):
            what = f"no connection of the pool of the {where} was free within {self._timeout:g} s"
        elif isinstance(exc, psycopg.errors.InsufficientPrivilege):
            what = f"the database refused it (permission denied) on the {where}"
        elif isinstance(exc, psycopg.errors.LockNotAvailable | psycopg.errors.QueryCanceled):
            what = f"the {where} stayed locked by another charge for {self._timeout:g} s"
        elif isinstance(exc, psycopg.OperationalError) and _PERMANENT.search(str(exc)):
            what = f"the server of the {where} refused the connection"
        elif isinstance(exc, psycopg.OperationalError):
            what = f"could not reach the server of the {where}"
        else:
            what = f"the {where} failed"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]  # (one line: the CLI's error line)
        return LedgerError(f"{what}: {action} [postgresql: {first}]")

    def close(self) -> None:
        """Close this process's connection to the server, or the ledger's own pool (the ledger
        reconnects when used again); a pool given as ``pool=`` is the caller's to close."""
        if self._pool is not None:
            self._pool.close()
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                if self._conn_pid == os.getpid():
                    with contextlib.suppress(Exception):
                        conn.close()
                else:
                    _INHERITED.append(conn)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        if self._pool is not None and self._pool.size is None:
            state["_pool"] = None  # the caller's pool stays with the caller: a copy connects on its own
        return state

    # ------------------------------------------------------------------ creating and opening
    def _read_ledger_row(self, conn: Any) -> dict[str, Any] | None:
        cur = conn.execute(
            "SELECT id, format, epsilon, delta, relations, fixed, analyst_role, curator "
            "FROM dptensor.ledgers WHERE dataset = %s",
            (self._dataset,),
        )
        row = cur.fetchone()
        if row is None:
            return None
        names = ("id", "format", "epsilon", "delta", "relations", "fixed", "analyst_role", "curator")
        stored = dict(zip(names, row, strict=True))
        if stored["format"] > SERVER_FORMAT:
            raise LedgerError(
                f"the budget ledger {self._path} was written by a newer dptensor (server format "
                f"{stored['format']}; this dptensor reads {SERVER_FORMAT}): upgrade dptensor to use it"
            )
        try:
            fixed = json.loads(stored["fixed"])
            meta = {key: fixed[key] for key in _META_KEYS}
            meta.update(
                epsilon=float(stored["epsilon"]),
                delta=float(stored["delta"]),
                relations=json.loads(stored["relations"]),
                dataset=self._dataset,
                fixed=fixed,
                analyst_role=stored["analyst_role"],
                curator=stored["curator"],
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise LedgerError(f"the budget ledger {self._path} is damaged: bad metadata ({exc})") from exc
        return meta

    def _create_or_open(
        self,
        epsilon: float | None,
        delta: float | None,
        relations: list[str],
        value_discretization_interval: float | None,
        analyst_role: str | None,
        history: tuple[dict[str, Any], list[dict[str, Any]]] | None = None,
    ) -> dict[str, Any]:
        """Open the data set's ledger, or create it (with ``history``: the fixed metadata and the
        charges of a migrated file, inserted in the same transaction as the ledger)."""
        psycopg = _psycopg()
        with self._connection("could not open the ledger") as conn:
            installed = conn.execute("SELECT to_regclass('dptensor.ledgers') IS NOT NULL").fetchone()[0]
            meta = self._read_ledger_row(conn) if installed else None
            if meta is not None and history is not None and meta["id"] != history[0]["id"]:
                raise LedgerError(
                    f"the data set {self._dataset!r} already has another ledger at {self._path}: migrate "
                    "into a new data set name"
                )
            if meta is not None:
                return meta
            if epsilon is None:
                raise LedgerError(
                    f"no budget ledger for the data set {self._dataset!r} at {self._path}"
                    + ("" if installed else " (no dptensor ledgers in that database)")
                    + ", or your database user is not in its analysts' role: the curator creates it with "
                    "BudgetLedger(url, epsilon=..., delta=...) or `dptensor budget create URL --epsilon E "
                    "--delta D`"
                )
        fixed = history[0] if history is not None else new_ledger_metadata(
            epsilon, delta, self._dataset, relations, value_discretization_interval)
        try:
            with self._connection("could not create the ledger") as conn:
                self._install(conn, analyst_role or DEFAULT_ANALYST_ROLE)
                conn.execute(
                    "INSERT INTO dptensor.ledgers (dataset, id, format, epsilon, delta, relations, fixed, "
                    "analyst_role) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (dataset) DO NOTHING",
                    (self._dataset, fixed["id"], SERVER_FORMAT, epsilon, delta, json.dumps(relations),
                     json.dumps(fixed), analyst_role or DEFAULT_ANALYST_ROLE),
                )  # fmt: skip
                if history is not None:
                    self._insert_history(conn, fixed, history[1])
                conn.commit()
        except LedgerError as exc:
            if isinstance(exc.__cause__, psycopg.errors.InsufficientPrivilege):
                raise LedgerError(
                    f"{exc}. Creating a ledger is the curator's act: connect as the database user that owns "
                    "the dptensor schema (or may create it)"
                ) from exc.__cause__
            raise
        with self._connection("could not open the ledger") as conn:
            meta = self._read_ledger_row(conn)
        if meta is None:  # pragma: no cover - created and committed just above
            raise LedgerError(f"the budget ledger {self._path} could not be read back after creating it")
        return meta

    def _install(self, conn: Any, analyst_role: str) -> None:
        """Create the schema (once per database) and grant ``analyst_role`` its rights (in ``conn``'s
        transaction)."""
        psycopg = _psycopg()
        from psycopg import sql

        conn.execute("SELECT pg_advisory_xact_lock(%s)", (INSTALL_LOCK,))
        # a plain query of the catalog (a new snapshot, taken after the lock), not to_regclass, whose
        # catalog lookup may still miss a schema another process installed while this one waited
        installed = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = 'dptensor' AND c.relname = 'ledgers')"
        ).fetchone()[0]
        if not installed:
            for statement in INSTALL:
                conn.execute(statement)
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (analyst_role,)).fetchone() is None:
            try:
                with conn.transaction():  # a savepoint: the error below leaves the transaction usable
                    conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(analyst_role)))
            except psycopg.errors.InsufficientPrivilege as exc:
                raise LedgerError(
                    f"the analysts' role {analyst_role!r} does not exist and this database user may not "
                    f"create it: ask an administrator to run CREATE ROLE (NOLOGIN) named {analyst_role!r}, "
                    f"then GRANT it to each analyst [postgresql: {exc}]"
                ) from exc
        for grant in GRANTS:
            conn.execute(sql.SQL(grant).format(role=sql.Identifier(analyst_role)))

    def _check_matches(
        self,
        epsilon: float | None,
        delta: float | None,
        dataset: str | None,
        relations: list[str],
        value_discretization_interval: float | None,
    ) -> None:
        if relations and not self.relations:  # fixing them is a change of the ledger (its curator's)
            with self._connection("could not fix the ledger's neighbouring relation") as conn:
                conn.execute(
                    "UPDATE dptensor.ledgers SET relations = %s WHERE id = %s AND relations = '[]'",
                    (json.dumps(relations), self._meta["id"]),
                )
                conn.commit()
        with self._connection("could not read the ledger") as conn:
            self._verified(conn)  # self._meta, with the relations fixed by the first charge
        super()._check_matches(epsilon, delta, dataset, relations, value_discretization_interval)

    def _read_meta(self, conn: Any = None, *, with_state: bool = True) -> dict[str, Any]:
        if conn is None:
            with self._connection("could not read the ledger") as own:
                return self._read_meta(own)
        meta = self._read_ledger_row(conn)
        if meta is None:
            raise LedgerError(f"the budget ledger {self._path} is no longer readable by this database user")
        return meta

    def _insert_history(self, conn: Any, fixed: dict[str, Any], records: list[dict[str, Any]]) -> None:
        """Insert a migrated file's charges, each with its chain value (in ``conn``'s transaction)."""
        checksum = _chain_start(fixed)
        for record in records:
            values = [record["event_text"] if n == "event" else record[n] for n in _STORED_COLUMNS]
            checksum = _chain_next(checksum, values)
            conn.execute(
                f"INSERT INTO dptensor.charges (ledger, {_COLUMNS_SQL}, chain) "
                f"VALUES (%s, {', '.join(['%s'] * len(_STORED_COLUMNS))}, %s)",
                (fixed["id"], *values, checksum),
            )

    # ------------------------------------------------------------------ reading
    @property
    def path(self) -> str:  # type: ignore[override]
        """The ledger's URL (without a password)."""
        return self._path

    @property
    def moved_to(self) -> None:
        """``None``: a server ledger is never moved (see :func:`migrate_to_server`)."""
        return None

    @property
    def analyst_role(self) -> str:
        """The database role whose members may read and charge this ledger."""
        return str(self._meta["analyst_role"])

    @property
    def curator(self) -> str:
        """The database user that created this ledger (the only one who changes its budget)."""
        return str(self._meta["curator"])

    @property
    def relations(self) -> list[str]:
        """Neighbouring relations the ledger accepts (empty until the first charge fixes it)."""
        with self._connection("could not read the ledger") as conn:
            return list(self._verified(conn)[0]["relations"])

    def _verified(self, conn: Any) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
        """The metadata, every charge (``event`` decoded) and the chained checksum after the last.

        Only the charges this process has not checked yet are read; each must be the next ``id``
        and carry the chain value of the SHA-256 chain over the ledger's fixed metadata and every
        charge's row before it, or the ledger is damaged (:class:`LedgerError`).
        """
        meta = self._read_meta(conn)
        self._meta = meta
        seen = self._seen
        if seen is None:
            checksum, records = _chain_start(meta["fixed"]), []
        else:
            checksum, records = seen.checksum, list(seen.records)
        last = records[-1]["id"] if records else 0
        rows = conn.execute(
            f"SELECT {_COLUMNS_SQL}, chain FROM dptensor.charges WHERE ledger = %s AND id > %s ORDER BY id",
            (meta["id"], last),
        )
        damaged = f"the budget ledger {self._path} is damaged"
        for *values, chain in rows:
            record = dict(zip(_STORED_COLUMNS, values, strict=True))
            if record["id"] != len(records) + 1:
                raise LedgerError(f"{damaged}: charge {len(records) + 1} is missing")
            checksum = _chain_next(checksum, values)
            if chain != checksum:
                raise LedgerError(f"{damaged}: charge {record['id']} does not match its checksum")
            try:
                record["event_text"] = record["event"]
                record["event"] = _decode_cached(record["event"])
            except (ValueError, TypeError) as exc:
                raise LedgerError(f"{damaged}: charge {record['id']}: {exc}") from exc
            records.append(record)
        if not meta["relations"] and records:
            meta["relations"] = [records[0]["neighbouring"]]
        meta["n_charges"] = len(records)
        self._seen = CheckedCharges(checksum, tuple(records), ())
        return meta, records, checksum

    def history_checksum(self) -> str:
        """The sealed checksum of the history (as a file ledger stores it): compare with a migrated file's."""
        from dptensor.privacy.ledger._storage import _sealed

        with self._connection("could not read the ledger") as conn:
            meta, _, checksum = self._verified(conn)
        return _sealed(checksum, meta["relations"])

    def budget_changes(self) -> list[dict[str, Any]]:
        """Every change of this ledger's budget or relations: when, by which database user, before, after."""
        with self._connection("could not read the ledger") as conn:
            cur = conn.execute(
                "SELECT time, db_user, epsilon_before, delta_before, epsilon_after, delta_after, "
                "relations_before, relations_after FROM dptensor.budget_changes WHERE ledger = %s "
                "ORDER BY time",
                (self._meta["id"],),
            )
            names = [d.name for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def charge_origins(self) -> list[dict[str, Any]]:
        """Who inserted each charge, as the server saw it: ``id``, ``db_user``, ``client_addr``,
        ``server_time``."""
        with self._connection("could not read the ledger") as conn:
            cur = conn.execute(
                "SELECT id, db_user, client_addr, server_time FROM dptensor.charges WHERE ledger = %s "
                "ORDER BY id",
                (self._meta["id"],),
            )
            names = [d.name for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    # ------------------------------------------------------------------ changing
    def change_budget(self, epsilon: float, delta: float) -> None:
        """Set the budget to ``(epsilon, delta)``: the curator's act, recorded in ``dptensor.budget_changes``.

        Raises
        ------
        LedgerError
            This database user is not the ledger's curator (the server refuses it).
        """
        epsilon, delta, _, _ = _check_options(epsilon, delta, None, None, None, 0)
        with self._connection("the budget was not changed") as conn:
            conn.execute(
                "UPDATE dptensor.ledgers SET epsilon = %s, delta = %s WHERE id = %s",
                (epsilon, delta, self._meta["id"]),
            )
            conn.commit()
        self._meta = self._read_meta()

    # ------------------------------------------------------------------ charging
    def charge(
        self, guarantee: PrivacyGuarantee, *, description: str = "", token: str | None = None
    ) -> Charge:
        """Record a release before it is made, or refuse it (see :meth:`BudgetLedger.charge`).

        Parameters
        ----------
        guarantee : PrivacyGuarantee
        description : str
        token : str, optional
            Idempotency token. A charge already recorded with this token is returned as it is,
            not charged again (a retry of a charge whose acknowledgement was lost). Default: a
            new random token, used by every retry inside this call.
        """
        if token is not None and not (isinstance(token, str) and 0 < len(token) <= 200):
            raise ValueError(f"token must be a non-empty string of at most 200 characters, got {token!r}")
        event = self._event_of(guarantee)
        assert event is not None
        row = self._new_row(guarantee, event, description, token)
        psycopg = _psycopg()
        retried = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected,
                   psycopg.errors.UniqueViolation)  # fmt: skip
        deadline = time.monotonic() + self._timeout
        pause = 0.01
        what = "the charge was not recorded and nothing was computed"
        while True:
            try:
                return self._charge_once(guarantee, event, row, deadline)
            except (psycopg.OperationalError, *retried) as exc:
                if isinstance(exc, psycopg.OperationalError):
                    self._drop_connection()  # reconnect: the server may be restarting
                    if _PERMANENT.search(str(exc)):  # a wrong password or name: retrying cannot help
                        raise self._error(exc, what) from exc
                if time.monotonic() + pause > deadline:
                    raise self._error(exc, what) from exc
                time.sleep(pause)
                pause = min(1.0, pause * 2)
            except psycopg.Error as exc:  # refused by the server (permissions, a damaged schema)
                raise self._error(exc, what) from exc

    def _charge_once(
        self, guarantee: PrivacyGuarantee, event: dp_accounting.DpEvent, row: dict[str, Any], deadline: float
    ) -> Charge:
        with self._borrowed(max(0.001, deadline - time.monotonic())) as conn:
            return self._charge_on(conn, guarantee, event, row)

    def _charge_on(
        self, conn: Any, guarantee: PrivacyGuarantee, event: dp_accounting.DpEvent, row: dict[str, Any]
    ) -> Charge:
        try:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (int(self._meta["id"][:15], 16),))
            found = conn.execute(
                f"SELECT {_COLUMNS_SQL} FROM dptensor.charges WHERE token = %s", (row["token"],)
            ).fetchone()
            if found is not None:  # recorded by an earlier try whose acknowledgement was lost
                conn.rollback()
                return self._recognised(dict(zip(_STORED_COLUMNS, found, strict=True)), row)
            meta, records, checksum = self._verified(conn)
            total = self._admit(guarantee, event, meta["relations"], records)
            row = dict(row, id=len(records) + 1, spent_after=float(total))
            chain = _chain_next(checksum, [row[name] for name in _STORED_COLUMNS])
            conn.execute(
                f"INSERT INTO dptensor.charges (ledger, {_COLUMNS_SQL}, chain) "
                f"VALUES (%s, {', '.join(['%s'] * len(_STORED_COLUMNS))}, %s)",
                (meta["id"], *[row[name] for name in _STORED_COLUMNS], chain),
            )
            conn.commit()
        except BaseException:
            if not conn.closed and not conn.broken:
                with contextlib.suppress(Exception):
                    conn.rollback()
            raise
        return self._charge_from_row(row)

    def _recognised(self, stored: dict[str, Any], row: dict[str, Any]) -> Charge:
        if (stored["event"], stored["description"]) != (row["event"], row["description"]):
            raise ValueError(
                f"the token {row['token']!r} was used by charge {stored['id']} of {self._path} for another "
                "release; give each charge its own token"
            )
        return self._charge_from_row(stored)


def migrate_to_server(
    file: str | os.PathLike[str], url: str, *, analyst_role: str | None = None, timeout: float = 60.0
) -> ServerLedger:
    """Move a file ledger's history into a new ledger on a server; the file then refuses every charge.

    The ledger is created on the server with the file's budget, relations, id and fixed metadata,
    and every charge copied with all its fields, in one transaction; so the server's chained
    checksum must equal the file's. It is compared on a fresh read of the server before the
    file is marked as moved (``dptensor budget migrate FILE URL``). Run again after a failure,
    it finishes the move (a server ledger with the file's id and history is reused).

    Parameters
    ----------
    file : str or Path
        The ledger file.
    url : str
        The server ledger to create (``postgresql://...?dataset=NAME``; without ``dataset=``,
        the file's data set name).
    analyst_role : str, optional
        The analysts' database role (default ``dptensor_analyst``).
    timeout : float, default 60

    Returns
    -------
    ServerLedger
        The server ledger, holding every charge of the file.

    Raises
    ------
    LedgerError
        The file was already moved or is damaged, the data set already has another ledger on the
        server, or the checksums differ (the file is then not marked).
    """
    source = BudgetLedger(file)
    with source:
        with source._connection("could not read the ledger") as conn:
            meta, records, _ = source._verified(conn)
        if meta.get("moved_to"):
            raise LedgerError(f"the budget ledger {source.path} was already moved to {meta['moved_to']}")
        name = meta["dataset"]
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        if name is not None and "dataset" not in query:
            sep = "&" if urllib.parse.urlsplit(url).query else "?"
            url = f"{url}{sep}{urllib.parse.urlencode({'dataset': name})}"
        server = ServerLedger.__new__(ServerLedger)
        server._setup(url, None, None)
        if name is not None and server._dataset != name:
            raise ValueError(f"{source.path} is the ledger of the data set {name!r}, the URL names "
                             f"{server._dataset!r}")  # fmt: skip
        server._timeout = float(timeout)
        fixed = {key: meta[key] for key in _META_KEYS}
        with server:
            server._create_or_open(
                meta["epsilon"], meta["delta"], meta["relations"], meta["value_discretization_interval"],
                analyst_role, (fixed, records),
            )  # fmt: skip
        fresh = ServerLedger(url, timeout=timeout)
        if fresh.history_checksum() != meta["checksum"]:
            raise LedgerError(
                f"the history copied to {fresh.path} does not match the checksum of {source.path}: the file "
                "was not marked as moved"
            )
        source._mark_moved(fresh.path, meta["n_charges"], meta["checksum"])
    return fresh


SERVER_BACKENDS["postgresql"] = ServerLedger  # BudgetLedger("postgresql://...") makes a ServerLedger
