"""Writing results as files a person can open: JSON, CSV and PNG."""

from __future__ import annotations

import contextlib
import contextvars
import csv
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _plain(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot serialise {type(value).__name__} to JSON")


def _strict(value: object) -> object:
    """Replace non-finite floats by the strings ``"inf"``, ``"-inf"`` and ``"nan"`` (strict JSON)."""
    if isinstance(value, float | np.floating):
        return float(value) if np.isfinite(value) else str(float(value))
    if isinstance(value, Mapping):
        return {key: _strict(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(item) for item in value]
    if isinstance(value, np.ndarray) and value.dtype.kind == "f" and not np.all(np.isfinite(value)):
        return _strict(value.tolist())
    return value


def json_text(payload: object, *, indent: int | None = 2) -> str:
    """``payload`` as strict JSON text (NumPy values as plain Python, ``inf`` as ``"inf"``)."""
    return json.dumps(_strict(payload), indent=indent, default=_plain, allow_nan=False)


#: The first bytes of a NumPy ``.npy`` file and of a zip archive (``.npz``).
NPY_MAGIC, ZIP_MAGIC = b"\x93NUMPY", b"PK\x03\x04"


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path`` in one step.

    Whatever writes to the yielded path, a reader never sees a half-written ``path``: the
    temporary file lives in the same directory (so :func:`os.replace` is atomic) and is removed
    if the block raises, including on ``KeyboardInterrupt``. The parent directory is created.
    The finished file has the permissions a plain ``open(path, "w")`` would give it (``0666``
    less the umask), not the private ``0600`` of a temporary file.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> with atomic_path(target) as tmp:
    ...     _ = tmp.write_text("done")
    >>> target.read_text()
    'done'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # keep the suffix: writers such as numpy.save and savefig choose the format from it
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(handle)
    tmp = Path(name)
    try:
        yield tmp
        # mkstemp creates the file with mode 0600; a finished output gets the mode open() would have
        # given it (0666 less the umask), as every other program's output does
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's file-creation mask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_path`)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return path


#: How the running command was invoked (dptensor version, command, every option): set by the CLI.
_RUN = contextvars.ContextVar("dptensor_run", default=None)


@contextlib.contextmanager
def recording_run(record: Mapping[str, Any]) -> Iterator[None]:
    """Add ``record`` as the key ``"run"`` to every JSON file :func:`write_json` writes in the block.

    The command line wraps each command in it, so that a result file says which version of
    dptensor made it, with which command, seed and settings.
    """
    token = _RUN.set(dict(record))
    try:
        yield
    finally:
        _RUN.reset(token)


def write_json(path: str | Path, payload: Mapping[str, Any]) -> Path:
    """Write ``payload`` as indented, strict JSON (NumPy values as plain Python, ``inf`` as ``"inf"``).

    The file is written atomically (:func:`atomic_path`): it is complete or absent. Inside
    :func:`recording_run` the payload gains a ``"run"`` entry (unless it has one).
    """
    record = _RUN.get()
    if record is not None and "run" not in payload:
        payload = {**payload, "run": record}
    return write_text(path, json_text(payload) + "\n")


def check_binary(path: str | Path, kind: str) -> Path:
    """Refuse a file whose content is not the binary format its suffix names.

    Parameters
    ----------
    path : str or Path
        An existing file.
    kind : {"npy", "npz"}
        The format the caller is about to read.

    Raises
    ------
    ValueError
        Naming the file and what it holds instead, e.g. a text file named ``.npy`` (rather than
        NumPy's message about ``allow_pickle``).
    """
    path = Path(path)
    magic = NPY_MAGIC if kind == "npy" else ZIP_MAGIC
    with open(path, "rb") as handle:
        head = handle.read(len(magic))
    if head != magic:
        if head.startswith(NPY_MAGIC[:4]):
            found = "a NumPy .npy file"
        elif head == ZIP_MAGIC:
            found = "a zip archive (.npz)"
        else:
            found = "not a binary NumPy file (text, or another format)"
        what = "a NumPy .npy array (numpy.save)" if kind == "npy" else "a .npz archive (save_npz)"
        raise ValueError(
            f"{path} is named .{kind} but is {found}; expected {what}"
            + ("; text data belongs in a .csv/.tsv/.txt file" if kind == "npy" else "")
        )
    return path


def refuse_binary_text(path: str | Path) -> None:
    """Refuse a binary NumPy file (``.npy``/``.npz`` content) where a text file is expected."""
    path = Path(path)
    if not path.is_file():
        return
    with open(path, "rb") as handle:
        head = handle.read(len(NPY_MAGIC))
    if head.startswith(NPY_MAGIC) or head.startswith(ZIP_MAGIC):
        kind = ".npy array" if head.startswith(NPY_MAGIC) else "zip archive (.npz)"
        raise ValueError(
            f"{path} is a binary NumPy {kind}, not a text file; a count matrix goes in a scipy.sparse "
            ".npz (scipy.sparse.save_npz) or Matrix Market .mtx file"
        )


def write_csv(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write a list of flat records as CSV with a header taken from the first record."""
    if not rows:
        raise ValueError("no rows to write")
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({key: _plain(value) if isinstance(value, np.generic) else value
                             for key, value in row.items()})
    return path


def save_figure(figure: Any, path: str | Path, *, dpi: int = 110) -> Path:
    """Save a matplotlib ``figure`` to ``path`` atomically (format from the suffix) and close it."""
    path = Path(path)
    try:
        with atomic_path(path) as tmp:
            figure.savefig(tmp, dpi=dpi)
    finally:
        pyplot().close(figure)
    return path


def pyplot():
    """Import matplotlib's pyplot with the file-only Agg backend (matplotlib is a core dependency)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
