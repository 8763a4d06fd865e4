"""A throwaway PostgreSQL cluster for the server ledger's tests: ``initdb`` in a temporary folder,
``postgres`` started as an unprivileged user on a loopback port (and a socket in that folder).

:func:`start_cluster` returns a :class:`Cluster` or raises :class:`NoServer` with one line saying
why none could be started (no PostgreSQL binaries, no psycopg, no unprivileged user to run it as).
PostgreSQL refuses to run as root; as root the server runs as the ``postgres`` user of Debian's
package (else ``nobody``) through ``runuser``. Authentication is ``trust`` on loopback only: the
tests connect as several database users (a curator, analysts) without passwords.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["Cluster", "NoServer", "start_cluster"]

#: Where Debian's (and Ubuntu's) packages put the server binaries; ``$PG_BIN`` overrides.
_BIN_GLOBS = ("/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/usr/local/pgsql/bin")


class NoServer(RuntimeError):
    """No PostgreSQL server can be started here (the message says why, in one line)."""


def _bin_dir() -> Path:
    explicit = os.environ.get("PG_BIN")
    candidates = [explicit] if explicit else sorted(
        (d for pattern in _BIN_GLOBS for d in glob.glob(pattern)), reverse=True
    )
    if not explicit and shutil.which("pg_ctl"):
        candidates.append(str(Path(shutil.which("pg_ctl")).parent))
    for directory in candidates:
        if directory and (Path(directory) / "initdb").is_file() and (Path(directory) / "pg_ctl").is_file():
            return Path(directory)
    raise NoServer("no PostgreSQL server binaries (initdb, pg_ctl) found: install Debian's `postgresql`")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A running cluster: :meth:`url` for a database user; :meth:`stop` (``-m immediate``), :meth:`start`."""

    def __init__(self, bin_dir: Path, folder: Path, port: int, run_as: str | None) -> None:
        self.bin_dir, self.folder, self.port, self.run_as = bin_dir, folder, port, run_as
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.superuser = "dptensor_test_admin"

    def _command(self, *args: str) -> list[str]:
        prefix = ["runuser", "-u", self.run_as, "--"] if self.run_as else []
        return [*prefix, *args]

    def _run(self, *args: str, timeout: float = 120) -> None:
        done = subprocess.run(self._command(*args), capture_output=True, text=True, timeout=timeout, cwd="/")
        if done.returncode:
            raise NoServer(f"{Path(args[0]).name} failed: {(done.stderr or done.stdout).strip()[-300:]}")

    def start(self) -> None:
        """Start the server (``pg_ctl start``) and wait until it accepts connections."""
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                  "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE`` (``immediate``: no shutdown checkpoint, as after a crash)."""
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def url(self, user: str | None = None, database: str = "dptensor", **query: str) -> str:
        """``postgresql://USER@127.0.0.1:PORT/DATABASE?key=value...``."""
        text = f"postgresql://{user or self.superuser}@127.0.0.1:{self.port}/{database}"
        if query:
            from urllib.parse import urlencode

            text += "?" + urlencode(query)
        return text

    def sql(
        self, statement: str, *params: object, user: str | None = None, database: str = "dptensor"
    ) -> list[tuple]:
        """Run one statement as ``user`` (default: the superuser), autocommit; its rows."""
        import psycopg

        with psycopg.connect(self.url(user, database), autocommit=True) as conn:
            cur = conn.execute(statement, params or None)
            return cur.fetchall() if cur.description else []

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)


def _unprivileged_user() -> str | None:
    if os.geteuid() != 0:
        return None
    if shutil.which("runuser") is None:
        raise NoServer("running as root without `runuser`: no unprivileged user to start PostgreSQL as")
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise NoServer("running as root and no unprivileged user (postgres, nobody) to start PostgreSQL as")


def start_cluster() -> Cluster:
    """``initdb`` a new cluster in a temporary folder and start it (see the module's notes)."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise NoServer(f"psycopg is not installed (pip install 'dptensor[server]'): {exc}") from exc
    bin_dir = _bin_dir()
    run_as = _unprivileged_user()
    folder = Path(tempfile.mkdtemp(prefix="dptensor-pg-"))
    if run_as:
        entry = pwd.getpwnam(run_as)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    cluster = Cluster(bin_dir, folder, _free_port(), run_as)
    try:
        cluster._run(str(bin_dir / "initdb"), "-D", str(cluster.data), "-U", cluster.superuser,
                     "--auth=trust", "--encoding=UTF8", "--no-instructions")  # fmt: skip
        with open(cluster.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {cluster.port}\n"
                f"unix_socket_directories = '{folder}'\nmax_connections = 100\n"
                "shared_buffers = 16MB\nfsync = on\nlog_line_prefix = '%m [%p] %u@%d '\n"
                "log_min_error_statement = error\n"
            )
        with open(cluster.data / "pg_hba.conf", "w") as hba:
            hba.write("local all all trust\nhost all all 127.0.0.1/32 trust\n")
        cluster.start()
        for _ in range(50):  # pg_ctl -w waited; the database is created next
            try:
                cluster.sql("CREATE DATABASE dptensor", database="postgres")
                break
            except Exception:  # noqa: BLE001 - the server may still be starting
                time.sleep(0.1)
        else:
            raise NoServer(f"the server started but refused connections; see {cluster.log}")
    except BaseException:
        cluster.close()
        raise
    return cluster
