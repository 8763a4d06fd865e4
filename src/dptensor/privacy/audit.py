"""Auditing private code: side channels between neighbours, and empirical lower bounds on epsilon.

Two tools, used by dptensor's own tests and offered to anyone who changes a private path:

* **Side channels.** :func:`observe` runs a callable and records everything a caller can see
  besides the released numbers: the warnings (category and text), the exception (type and
  text) or its absence, the attributes of the returned object (names, types, shapes), and what
  it printed. :func:`observable_differences` compares the observations of two runs on
  neighbouring inputs; any difference is a side channel, since a private path may let the data
  show only through its noised release. Numbers in messages and printed lines are masked
  (released values differ between runs by design), so only their *presence* is compared.
  :func:`observe_main` does the same for a command line's entry point run in-process
  (:func:`dptensor.cli.observe_command` for a ``dptensor`` command): exit code, printed lines,
  the files written and the structure of JSON/CSV files. A
  :class:`~dptensor.privacy.ReleaseUtilityWarning` (such as a
  :class:`~dptensor.privacy.HeldOutUtilityWarning`; and the command line's one-line form of either)
  is left out: by its contract it is computed from the released result (and held-out data) only,
  so whether it appears is post-processing of the release -- like a released number, it may differ
  between runs without revealing anything beyond the release.
* **Empirical privacy audits.** :func:`epsilon_lower_bound` turns many runs of a mechanism on
  two neighbouring inputs into a high-confidence lower bound on its epsilon (a threshold test
  with Clopper--Pearson intervals, after Jagielski, Ullman & Oprea 2020 and Nasr et al. 2021).
  A correctly calibrated mechanism gives a bound at most its claimed epsilon; a deliberately
  under-noised one gives a larger bound, which shows the test has power.
* **End-to-end audits of a whole fit** (:func:`audit_estimator`, in
  :mod:`dptensor.privacy.end_to_end_audit`): canaries, membership scores from what a fitted
  estimator releases, and a lower bound on its epsilon by a distinguishing test or by auditing
  with one training run (Steinke, Nasr & Jagielski 2023).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dptensor.privacy.empirical_epsilon import epsilon_lower_bound
from dptensor.privacy.end_to_end_audit import (
    AuditResult,
    CanaryAdapter,
    audit_estimator,
    canary_adapter_for,
    one_run_epsilon_lower_bound,
    one_run_p_value,
    register_canaries,
)
from dptensor.privacy.errors import ReleaseUtilityWarning

# epsilon_lower_bound (in empirical_epsilon, below both audits) and the end-to-end audits of whole fits
# (in end_to_end_audit, one concept each) are importable from here too.
__all__ = [
    "AuditResult",
    "CanaryAdapter",
    "Observation",
    "audit_estimator",
    "canary_adapter_for",
    "one_run_epsilon_lower_bound",
    "one_run_p_value",
    "register_canaries",
    "epsilon_lower_bound",
    "observable_differences",
    "observe",
    "observe_main",
]

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\b(?:nan|inf)\b")
_DATA_URI = re.compile(r"data:[a-z/+]+;base64,[A-Za-z0-9+/=]+")


#: The command line's one-line form of a ReleaseUtilityWarning (``dptensor.cli.warning_line``).
_UTILITY_LINE = re.compile(r"^\S.*: warning: .*\((?:HeldOut|Release)UtilityWarning\)\s*$")


def _mask(text: str) -> str:
    """Replace every number by ``#`` (released values differ between runs by design)."""
    return _NUMBER.sub("#", text)


def _describe_value(value: object) -> object:
    """What an attribute reveals besides its numbers: type, shape, dtype, keys, length."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.shape, str(value.dtype))
    if isinstance(value, bool | type(None) | str):
        return (type(value).__name__, value if not isinstance(value, str) else _mask(value))
    if isinstance(value, int | float | np.number):
        return (type(value).__name__,)
    if isinstance(value, Mapping):
        return ("mapping", tuple(sorted((str(k), _describe_value(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return (type(value).__name__, len(value), tuple(_describe_value(v) for v in value[:20]))
    if hasattr(value, "__dict__") or hasattr(value, "__dataclass_fields__"):
        return (type(value).__name__, _attributes(value))
    return (type(value).__name__,)


def _attributes(obj: object) -> tuple:
    names = set(getattr(obj, "__dict__", {}))
    names |= set(getattr(obj, "__dataclass_fields__", {}))
    out = []
    for name in sorted(names):
        try:
            out.append((name, _describe_value(getattr(obj, name))))
        except Exception as exc:  # noqa: BLE001 - a failing attribute is itself an observation
            out.append((name, ("raises", type(exc).__name__)))
    return tuple(out)


@dataclass
class Observation:
    """Everything a caller of one run could observe, with released numbers masked."""

    warnings: list[tuple[str, str]] = field(default_factory=list)
    exception: tuple[str, str] | None = None
    attributes: tuple = ()
    printed: str = ""
    result: Any = None

    def summary(self) -> dict[str, Any]:
        """The observation without the raw result (for comparison and reports)."""
        return {"warnings": self.warnings, "exception": self.exception,
                "attributes": self.attributes, "printed": self.printed}


def observe(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Observation:
    """Run ``function(*args, **kwargs)`` and record what a caller observes (see module docstring).

    Every warning is recorded (filters set to ``"always"``); an exception is caught and
    recorded, not raised; standard output and error are captured.
    """
    obs = Observation()
    out = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(out):
        warnings.simplefilter("always")
        try:
            obs.result = function(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - observing, not handling
            obs.exception = (type(exc).__name__, _mask(str(exc)))
    obs.warnings = [(w.category.__name__, _mask(str(w.message))) for w in caught
                    if not issubclass(w.category, ReleaseUtilityWarning)]
    printed = "".join(line for line in out.getvalue().splitlines(keepends=True)
                      if not _UTILITY_LINE.match(line))
    obs.printed = _mask(printed)
    if obs.result is not None:
        obs.attributes = _describe_value(obs.result)
    return obs


def _file_structure(path: Path) -> object:
    if path.suffix == ".json":
        try:
            return ("json", _describe_value(json.loads(path.read_text())))
        except ValueError:
            return ("json-unreadable",)
    if path.suffix in (".csv", ".tsv"):
        with open(path, newline="") as handle:
            rows = list(csv.reader(handle, delimiter="\t" if path.suffix == ".tsv" else ","))
        return ("csv", tuple(rows[0]) if rows else (), len(rows))
    if path.suffix in (".html", ".htm"):  # a report: its text with numbers masked, inline images dropped
        return ("html", _mask(_DATA_URI.sub("data:", path.read_text(encoding="utf-8"))))
    return (path.suffix, "exists")


def observe_main(main: Callable[[list[str]], int], argv: Sequence[str], workdir: str | Path) -> Observation:
    """Run a command's entry point ``main(ARGV)`` in-process; record exit code, printed text and files.

    :func:`dptensor.cli.observe_command` passes the ``dptensor`` command's ``main`` (this layer
    does not import the command line).

    Parameters
    ----------
    main : callable
        The entry point: takes the argument list, returns the exit status.
    argv : sequence of str
        The arguments, without the program name.
    workdir : str or Path
        A fresh directory that the command writes its outputs into; every file under it after the
        run is described by name and structure (JSON keys and value types, CSV header and row
        count, an HTML report's text with inline images dropped), never by its numbers.

    Returns
    -------
    Observation
        ``attributes`` holds the exit code and the files written.
    """
    workdir = Path(workdir)
    before = {p for p in workdir.rglob("*")}
    obs = observe(main, list(argv))
    written = sorted(p for p in workdir.rglob("*") if p not in before and p.is_file())
    obs.attributes = (("exit_code", obs.result),
                      ("files", tuple((str(p.relative_to(workdir)), _file_structure(p)) for p in written)))
    return obs


def observable_differences(first: Observation, second: Observation) -> list[str]:
    """Human-readable differences between two observations (empty: nothing tells them apart)."""
    diffs = []
    a, b = first.summary(), second.summary()
    for key in a:
        if a[key] != b[key]:
            diffs.append(f"{key}: {a[key]!r} != {b[key]!r}")
    return diffs
