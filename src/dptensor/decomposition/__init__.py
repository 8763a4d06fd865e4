"""Decomposition algorithms written against the operator protocol (DESIGN.md, layer 3)."""

from dptensor.decomposition.online import OnlineTensorPower
from dptensor.decomposition.power_method import (
    PowerMethodResult,
    default_n_iter,
    default_n_restarts,
    power_method,
)
from dptensor.decomposition.whitening import Whitening, unwhiten, whiten

__all__ = [
    "OnlineTensorPower",
    "PowerMethodResult",
    "Whitening",
    "default_n_iter",
    "default_n_restarts",
    "power_method",
    "unwhiten",
    "whiten",
]
