"""One recorded charge (:class:`Charge`) and who made it: time, user and calling function."""

from __future__ import annotations

import dataclasses
import datetime
import getpass
import os
from typing import Any

import dp_accounting

from dptensor._callers import outside_frame
from dptensor._files import json_text
from dptensor.privacy.ledger._events import encode_event

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
    frame, _ = outside_frame()
    if frame is None:
        return ""
    return f"{frame.f_globals.get('__name__', '')}:{frame.f_code.co_name}:{frame.f_lineno}"


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user database entry (containers); the uid still identifies
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else ""


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
