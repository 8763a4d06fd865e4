"""What this user has seen of each budget ledger: a high-water mark kept outside the ledger file.

A ledger file cannot tell, from its contents alone, that it is an older copy of itself: a backup
restored over it is a consistent ledger that has forgotten every charge made after the backup.
So each process that reads or charges a ledger remembers, in a per-user state directory, the
latest state it has seen of that ledger (keyed by the ledger's unique ``id``, fixed when the
file is created): the number of charges and the chained checksum after the last of them
(:class:`Mark`). A file that holds fewer charges than its mark, or whose chain does not pass
through the mark's checksum (another history), is refused by
:class:`~dptensor.privacy.BudgetLedger` unless the restore is accepted deliberately.

The state directory is ``$DPTENSOR_STATE_DIR`` if set, else ``$XDG_STATE_HOME/dptensor``, else
``~/.local/state/dptensor`` (:func:`default_state_dir`); marks live in its ``ledgers/`` folder,
one JSON file per ledger. It is kept away from the ledger on purpose: a backup of the ledger's
folder, restored with it, would restore a sidecar file too. A mark only moves forward (under a
lock, written to a temporary file and renamed into place), and is written only after the state
it records was committed, so concurrent charges never make a file look older than its mark. A
directory that cannot be read or written does not stop charging: one :class:`PrivacyWarning`
per directory and process, and no detection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dptensor.privacy.errors import PrivacyWarning
from dptensor.privacy.ledger._records import _now, _user

try:  # POSIX: a lock file serialises updates of a mark so that it only moves forward
    import fcntl
except ImportError:  # pragma: no cover - Windows: replacing is still atomic, only not serialised
    fcntl = None  # type: ignore[assignment]

#: Environment variable naming the directory where marks are kept (overrides ``XDG_STATE_HOME``).
STATE_DIR_VARIABLE = "DPTENSOR_STATE_DIR"
_FORMAT = "dptensor budget ledger high-water mark"
_HEX_ID = re.compile(r"[0-9a-f]{32}")
_WARNED: set[str] = set()  # state directories this process has warned about


def default_state_dir() -> Path | None:
    """The directory where marks are kept: ``$DPTENSOR_STATE_DIR``, ``$XDG_STATE_HOME/dptensor``
    or ``~/.local/state/dptensor``; ``None`` when there is no home directory to put it in."""
    explicit = os.environ.get(STATE_DIR_VARIABLE)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG specification: relative paths are ignored
        return Path(xdg) / "dptensor"
    try:
        return Path.home() / ".local" / "state" / "dptensor"
    except (RuntimeError, KeyError):  # no home directory (a bare container)
        return None


@dataclasses.dataclass(frozen=True)
class Mark:
    """The latest state of one ledger seen by this user.

    Attributes
    ----------
    n_charges : int
        Number of charges the ledger held.
    chain : str
        The ledger's chained checksum right after its ``n_charges``-th charge.
    time : str
        When it was seen (UTC, ISO 8601).
    path : str
        Where the ledger was then.
    """

    n_charges: int
    chain: str
    time: str
    path: str


class SeenLedgers:
    """The marks of the ledgers seen by this user, in ``directory/ledgers/`` (``None``: none kept).

    Parameters
    ----------
    directory : str, Path or None
        The state directory; ``None`` for :func:`default_state_dir`.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_state_dir()

    def file(self, ledger_id: str) -> Path | None:
        """The mark file of the ledger with this ``id`` (``None`` without a state directory)."""
        if self.directory is None:
            return None
        text = str(ledger_id)
        name = text if _HEX_ID.fullmatch(text) else hashlib.sha256(text.encode()).hexdigest()[:32]
        return self.directory / "ledgers" / f"{name}.json"

    def _warn(self, what: str, exc: BaseException | None) -> None:
        key = str(self.directory)
        if key in _WARNED:
            return
        _WARNED.add(key)
        why = f": {exc}" if exc is not None else ""
        warnings.warn(
            f"dptensor could not {what} in its state directory {self.directory}{why}. Budget ledgers "
            "still charge, but a ledger restored from an older copy (which forgets the charges made "
            f"after the copy) will not be detected. Set {STATE_DIR_VARIABLE} to a writable directory "
            "to keep detecting it.",
            PrivacyWarning,
            stacklevel=4,
        )

    def _load(self, path: Path) -> dict[str, Any] | None:
        """The mark file's record, ``None`` when there is none (raises ``OSError``/``ValueError``)."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        record = json.loads(text)
        if not (
            isinstance(record, dict)
            and record.get("format") == _FORMAT
            and type(record.get("n_charges")) is int
            and record["n_charges"] >= 0
            and isinstance(record.get("chain"), str)
        ):
            raise ValueError(f"{path} is not a {_FORMAT}")
        return record

    def read(self, ledger_id: str) -> Mark | None:
        """The mark of a ledger, or ``None`` when none was kept (or it cannot be read: one warning)."""
        path = self.file(ledger_id)
        if path is None:
            self._warn("find a home directory to keep what it has seen of each ledger", None)
            return None
        try:
            record = self._load(path)
        except (OSError, ValueError) as exc:
            self._warn("read what it has seen of a ledger", exc)
            return None
        if record is None:
            return None
        return Mark(
            record["n_charges"], record["chain"], str(record.get("time", "")), str(record.get("path", ""))
        )

    @contextlib.contextmanager
    def _locked(self, ledger_id: str) -> Iterator[tuple[Path, dict[str, Any] | None]]:
        """Hold the lock of a ledger's mark; yield its file and its record (``None``: none or unreadable)."""
        path = self.file(ledger_id)
        assert path is not None
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(path.with_suffix(".lock"), "a") as lock:
            if fcntl is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                record = self._load(path)
            except (OSError, ValueError):
                record = None  # unreadable: replaced by the state seen now
            yield path, record

    def _write(self, path: Path, record: dict[str, Any]) -> None:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "w") as handle:
                handle.write(json.dumps(record, indent=1, sort_keys=True) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def advance(self, ledger_id: str, n_charges: int, chain: str, ledger_path: str) -> None:
        """Record that the ledger held ``n_charges`` (committed) charges ending in ``chain``.

        A mark only moves forward: a record of as many charges or more is kept. Failures to
        write are one warning, never an error (charging goes on without detection).
        """
        if n_charges <= 0 or self.directory is None:
            return
        try:
            with self._locked(ledger_id) as (path, record):
                if record is not None and record["n_charges"] >= n_charges:
                    return
                record = dict(record or {}, format=_FORMAT, ledger_id=str(ledger_id))
                record.update(n_charges=n_charges, chain=chain, time=_now(), path=ledger_path)
                self._write(path, record)
        except OSError as exc:
            self._warn("record what it has seen of a ledger", exc)

    def accept(
        self, ledger_id: str, n_charges: int, chain: str, ledger_path: str, seen: Mark
    ) -> dict[str, Any]:
        """Replace a ledger's mark by its current, older state and record the acknowledgement.

        Returns the acknowledgement (also appended to the mark's ``accepted_restores``).
        Raises ``OSError`` when it cannot be recorded.
        """
        accepted = {
            "time": _now(),
            "user": _user(),
            "path": ledger_path,
            "seen_n_charges": seen.n_charges,
            "seen_time": seen.time,
            "file_n_charges": n_charges,
        }
        with self._locked(ledger_id) as (path, record):
            record = dict(record or {}, format=_FORMAT, ledger_id=str(ledger_id))
            record["accepted_restores"] = [*record.get("accepted_restores", []), accepted]
            record.update(n_charges=n_charges, chain=chain, time=_now(), path=ledger_path)
            self._write(path, record)
        return accepted
