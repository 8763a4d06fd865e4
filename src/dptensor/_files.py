"""Writing results as files a person can open: JSON, CSV and PNG."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
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


def write_json(path: str | Path, payload: Mapping[str, Any]) -> Path:
    """Write ``payload`` as indented, strict JSON (NumPy values as plain Python, ``inf`` as ``"inf"``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json_text(payload) + "\n")
    return path


def write_csv(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write a list of flat records as CSV with a header taken from the first record."""
    if not rows:
        raise ValueError("no rows to write")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({key: _plain(value) if isinstance(value, np.generic) else value
                             for key, value in row.items()})
    return path


def pyplot():
    """Import matplotlib's pyplot with the file-only Agg backend, or explain how to get it."""
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "plots need matplotlib: pip install 'dptensor[plot]' (CSV and JSON were still written)"
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
