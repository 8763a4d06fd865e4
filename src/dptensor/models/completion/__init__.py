"""Tensor completion (Wei et al.): the estimator, its plan, ALS, DP-ALS, SGD, offsets and kernels."""

from dptensor.models.completion._plan import CompletionPlan, Release, plan_completion
from dptensor.models.completion.estimator import (
    OFFSETS,
    PRIVACY_MODES,
    SOLVERS,
    TensorCompletion,
    rmse,
)

__all__ = [
    "OFFSETS",
    "PRIVACY_MODES",
    "SOLVERS",
    "CompletionPlan",
    "Release",
    "TensorCompletion",
    "plan_completion",
    "rmse",
]
