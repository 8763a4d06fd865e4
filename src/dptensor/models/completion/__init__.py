"""Tensor completion (Wei et al.): the estimator, ALS and DP-ALS, the offsets and their kernels."""

from dptensor.models.completion.estimator import (
    OFFSETS,
    PRIVACY_MODES,
    SOLVERS,
    TensorCompletion,
    rmse,
)

__all__ = ["OFFSETS", "PRIVACY_MODES", "SOLVERS", "TensorCompletion", "rmse"]
