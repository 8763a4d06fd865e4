"""A local NumPy error state for arithmetic whose underflow is by design.

The scaled forms of the per-document estimators (word frequencies ``p = c / l`` and powers of
``1 / l``, :mod:`dptensor.models.topics.moments`) and several post-processing steps (likelihoods
far in a Gaussian's tails, multiplicative updates that drive entries to zero) produce numbers
below float64's smallest normal value; rounding them to a subnormal or to zero *is* their value.
Under NumPy's default error state that is silent, but a caller who set
``np.seterr(under="raise")`` (or ``all="raise"``) would see a ``FloatingPointError`` that depends
on the data: a fit would fail on one corpus and succeed on its neighbour. Functions decorated
with :func:`underflow_ignored` run with underflow ignored and every other setting (overflow,
division by zero, invalid operations) left as the caller set it, so they behave alike under any
error state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import numpy as np

F = TypeVar("F", bound=Callable)


def underflow_ignored(function: F) -> F:
    """Run ``function`` under ``np.errstate(under="ignore")`` (a fresh context per call: thread-safe).

    ``np.errstate`` used as a decorator keeps one instance for every call, which before NumPy 2
    is not safe across threads; this enters a new one each time.
    """

    @functools.wraps(function)
    def wrapper(*args: object, **kwargs: object) -> object:
        with np.errstate(under="ignore"):
            return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
