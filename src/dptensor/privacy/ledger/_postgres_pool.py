"""Connection pools of a server ledger: ``BudgetLedger(url, pool_size=4)`` or ``BudgetLedger(url, pool=p)``.

Without a pool a :class:`~dptensor.privacy.ledger._postgres.ServerLedger` keeps one connection per
process, and the ledger's lock makes the threads that share the object take turns on it. With a
pool every transaction (a charge, a read) takes a connection of the pool and gives it back at the
end, so threads sharing a ledger (a web service answering analysts) do not queue for one socket;
the charges of one ledger are still serialised by the server's advisory lock, so a pool adds no
throughput to one ledger's charges beyond overlapping their round trips and their composition
work outside the lock -- it saves a connection per thread and a connection's set-up per request.

Two kinds, both from psycopg_pool (``pip install 'dptensor[server]'``, imported only here):

* ``pool_size=N``: the ledger's own :class:`psycopg_pool.ConnectionPool` of ``N`` connections
  (opened on first use in each process; a forked child opens its own and never touches its
  parent's), closed by :meth:`ServerLedger.close`. Each connection gets the ledger's session
  settings (``lock_timeout``) once, by the pool's ``configure`` callback, and is checked before
  it is lent (``ConnectionPool.check_connection``: a connection the server dropped is replaced).
* ``pool=``: the caller's pool, shared with the rest of the program: the ledger neither closes it
  nor changes its connections' sessions -- ``lock_timeout`` is set for each of its transactions
  only (``set_config(..., true)``), and a connection lent in autocommit mode or with another row
  factory is used in a transaction with tuple rows and given back as it came. The pool must reach
  the URL's database (and user, if the URL names one): checked on first use. A pool crosses no
  fork: a child process makes its own.

A thread that uses the ledger again inside one of its transactions gets the same connection
(as the one connection under the ledger's lock), never a second one of the pool.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from dptensor.privacy.errors import LedgerError

# server connections a forked child inherited (the ledger's own and its pools'): kept referenced so
# that the child never closes them
_INHERITED: list[object] = []

__all__ = ["LedgerPool", "is_pool_timeout"]


def optional_module(name: str, needs: str) -> Any:
    """Import ``name`` (an optional dependency of the server ledger), or say how to install it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise LedgerError(f"{needs}, which is not installed: pip install 'dptensor[server]'") from exc


def _psycopg_pool():  # noqa: ANN202 - the module
    return optional_module("psycopg_pool",
                           "a connection pool for a budget ledger on a server needs psycopg_pool")


def is_pool_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is psycopg_pool's ``PoolTimeout`` (no connection of the pool free in time)."""
    return type(exc).__name__ == "PoolTimeout" and type(exc).__module__.startswith("psycopg_pool")


class LedgerPool:
    """The connections of one ledger object's transactions: a pool of its own or the caller's.

    Parameters
    ----------
    conninfo : str
        What libpq connects to (the ledger's URL without ``dataset=``).
    connect : dict
        Keyword arguments of every new connection (``connect_timeout``, ``application_name``).
    lock_wait : str
        The ``lock_timeout`` of every transaction (e.g. ``"60000ms"``).
    size : int, optional
        A pool of the ledger's own, of this many connections.
    pool : psycopg_pool.ConnectionPool, optional
        The caller's pool.
    inherited : list
        Where pools made before a fork are kept referenced (the child never closes them).
    """

    def __init__(
        self,
        conninfo: str,
        connect: dict[str, Any],
        lock_wait: str,
        *,
        size: int | None = None,
        pool: Any = None,
        inherited: list[object],
    ) -> None:
        if (size is None) == (pool is None):
            raise ValueError("give pool= (a psycopg_pool.ConnectionPool) or pool_size=, not both")
        if pool is not None and not isinstance(pool, _psycopg_pool().ConnectionPool):
            raise TypeError(f"pool must be a psycopg_pool.ConnectionPool, got {type(pool).__name__}")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"pool_size must be a positive number of connections, got {size!r}")
        self._conninfo, self._connect, self._wait = conninfo, dict(connect), lock_wait
        self._size, self._pool, self._own = size, pool, pool is None
        self._pid = os.getpid()
        self._checked = False  # a caller's pool: its database (and user) compared with the URL's
        self._inherited = inherited
        self._held = threading.local()

    @property
    def size(self) -> int | None:
        """The size of the ledger's own pool (``None``: the caller's pool)."""
        return self._size

    def __getstate__(self) -> dict[str, Any]:
        if not self._own:  # (ServerLedger.__getstate__ gives a copy no caller's pool)
            raise TypeError("a caller's connection pool is not copied")
        state = dict(self.__dict__, _pool=None, _checked=False)
        del state["_held"], state["_inherited"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _held=threading.local(), _inherited=_INHERITED, _pid=os.getpid())

    # ------------------------------------------------------------------ the pool
    def _live(self) -> Any:
        if self._own:
            if self._pool is not None and self._pid != os.getpid():
                self._inherited.append(self._pool)  # made before a fork: the parent's, never closed here
                self._pool = None
            if self._pool is None:
                self._pool, self._pid = self._make(), os.getpid()
        elif self._pid != os.getpid():
            raise LedgerError(
                "a server ledger's connection pool was made in another process (before a fork): "
                "make a pool in each process"
            )
        return self._pool

    def _make(self) -> Any:
        import psycopg

        psycopg_pool = _psycopg_pool()
        # one connection first: a wrong name or password is its error now, not a pool timeout later
        psycopg.connect(self._conninfo, **self._connect).close()
        return psycopg_pool.ConnectionPool(
            self._conninfo,
            kwargs=self._connect,
            min_size=self._size,
            max_size=self._size,
            open=True,
            configure=self._configure,
            check=psycopg_pool.ConnectionPool.check_connection,
            name="dptensor budget ledger",
            num_workers=1,
        )

    def _configure(self, conn: Any) -> None:
        """The ledger's session settings on each new connection of its own pool."""
        # how long a charge waits for another's lock (0 would mean forever: at least 1 ms)
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (self._wait,))
        conn.commit()

    def _check_target(self, conn: Any) -> None:
        from psycopg.conninfo import conninfo_to_dict

        wanted = conninfo_to_dict(self._conninfo)
        for key, actual in (("dbname", conn.info.dbname), ("user", conn.info.user)):
            if wanted.get(key) and wanted[key] != actual:
                raise LedgerError(
                    f"the connection pool given reaches {key} {actual!r}, the ledger's URL names "
                    f"{wanted[key]!r}"
                )
        self._checked = True

    @contextlib.contextmanager
    def connection(self, timeout: float) -> Iterator[Any]:
        """A connection for one transaction, waiting up to ``timeout`` seconds for a free one."""
        held = getattr(self._held, "conn", None)
        if held is not None:  # this thread, inside one of its transactions: the same connection
            yield held
            return
        with self._live().connection(timeout=timeout) as conn:
            came = None
            if not self._own:
                from psycopg.rows import tuple_row

                came = conn.autocommit, conn.row_factory
                conn.autocommit, conn.row_factory = False, tuple_row
                if not self._checked:
                    self._check_target(conn)
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (self._wait,))
            self._held.conn = conn
            try:
                yield conn
            finally:
                self._held.conn = None
                if came is not None and not conn.closed:
                    with contextlib.suppress(Exception):
                        conn.rollback()  # (a no-op after the ledger's commit or rollback)
                        conn.autocommit, conn.row_factory = came

    def stats(self) -> dict[str, int]:
        """psycopg_pool's counters of the pool (``pool_size``, ``requests_num``, ``requests_waiting``, ...);
        empty before the ledger's own pool is opened."""
        return dict(self._pool.get_stats()) if self._pool is not None else {}

    def close(self) -> None:
        """Close the ledger's own pool (opened again when used); a caller's pool is left alone."""
        pool, own = self._pool, self._own
        if own and pool is not None:
            self._pool = None
            if self._pid == os.getpid():
                with contextlib.suppress(Exception):
                    pool.close()
            else:
                self._inherited.append(pool)
