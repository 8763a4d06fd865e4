"""Decomposition algorithms written against the operator protocol (docs/design.md, layer 3)."""

from dptensor.decomposition.input_perturbation import input_perturbation
from dptensor.decomposition.online import OnlineTensorPower
from dptensor.decomposition.power_method import (
    PowerMethodResult,
    default_n_iter,
    default_n_restarts,
    power_method,
)
from dptensor.decomposition.private_power_method import (
    PrivatePowerMethodResult,
    default_private_n_iter,
    private_power_method,
)
from dptensor.decomposition.simultaneous_power import simultaneous_power_method
from dptensor.decomposition.whitening import Whitening, unwhiten, whiten

__all__ = [
    "OnlineTensorPower",
    "PowerMethodResult",
    "PrivatePowerMethodResult",
    "Whitening",
    "default_n_iter",
    "default_n_restarts",
    "default_private_n_iter",
    "input_perturbation",
    "power_method",
    "private_power_method",
    "simultaneous_power_method",
    "unwhiten",
    "whiten",
]
