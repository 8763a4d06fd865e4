"""Where a call into dptensor came from: the first frame outside dptensor and the wrappers around it.

A warning should point at the user's line, and a ledger record should name the user's function,
whatever chain of dptensor functions and scikit-learn wrappers (``_fit_context``, ``Pipeline.fit``,
``fit_transform``, joblib's cache in a pipeline) lies between.
"""

from __future__ import annotations

import sys
from types import FrameType

#: Modules whose frames are not the caller's: dptensor's own and the wrappers it is called through.
_WRAPPER_PREFIXES = ("dptensor.", "sklearn.", "joblib.", "contextlib", "functools")


def _inside(module: str) -> bool:
    return module == "dptensor" or module.startswith(_WRAPPER_PREFIXES)


def outside_frame() -> tuple[FrameType | None, int]:
    """The first frame outside dptensor and its wrappers, and its ``stacklevel``.

    The level counts from the function that calls this one (``1``), so
    ``warnings.warn(message, category, stacklevel=outside_frame()[1])`` from that function points
    at the user's line. ``(None, depth)`` when every frame is inside (a call from dptensor itself).
    """
    frame = sys._getframe(1)
    level = 1
    while frame is not None and _inside(str(frame.f_globals.get("__name__", ""))):
        frame = frame.f_back
        level += 1
    return frame, level
