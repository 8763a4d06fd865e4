"""Progress bars that appear only where someone watches them: a terminal or a notebook.

A tqdm bar redraws itself with carriage returns; written to a log file or a CI log (standard
error not a terminal) it becomes one long line of hundreds of copies. :func:`progress_bar` is
the one place a bar is made: drawn when it is enabled and standard error is a terminal (or a
Jupyter kernel shows it as a widget), disabled -- updates are no-ops -- otherwise. The commands'
one-line progress messages (:func:`dptensor.cli._options.progress_line`) are printed either way.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from tqdm.auto import tqdm

__all__ = ["bars_shown", "progress_bar"]


def _in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (tqdm.auto draws a widget there, not carriage returns)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def bars_shown(stream: TextIO | None = None) -> bool:
    """Whether a progress bar on ``stream`` (default: standard error) would be watched."""
    stream = sys.stderr if stream is None else stream
    try:
        terminal = bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        terminal = False
    return terminal or _in_notebook()


def progress_bar(iterable: Iterable | None = None, *, enabled: bool = True, **options: Any) -> tqdm:
    """A tqdm bar on standard error, drawn only when ``enabled`` and someone watches (:func:`bars_shown`).

    Parameters
    ----------
    iterable : iterable, optional
        Wrapped as by :class:`tqdm.tqdm`.
    enabled : bool, default True
        False (``--quiet``, ``verbose=False``) disables the bar everywhere.
    **options
        Passed to :class:`tqdm.tqdm` (``total``, ``desc``, ``unit``, ``file``, ...).

    Returns
    -------
    tqdm.tqdm
        A disabled bar (iteration and ``update`` do nothing visible) when not drawn.
    """
    options.setdefault("file", sys.stderr)
    return tqdm(iterable, disable=not (enabled and bars_shown(options["file"])), **options)
