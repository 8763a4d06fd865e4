"""Decomposition algorithms written against the operator protocol (DESIGN.md, layer 3)."""

from dptensor.decomposition.power_method import (
    PowerMethodResult,
    default_n_iter,
    default_n_restarts,
    power_method,
)

__all__ = ["PowerMethodResult", "default_n_iter", "default_n_restarts", "power_method"]
