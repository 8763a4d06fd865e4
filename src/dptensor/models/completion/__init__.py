"""Tensor completion (Wei et al.): the estimator, its plan, ALS, DP-ALS, SGD, offsets and kernels."""

from dptensor.models.completion._plan import CompletionPlan, Release, plan_completion
from dptensor.models.completion.estimator import (
    OFFSETS,
    PRIVACY_MODES,
    SOLVERS,
    TensorCompletion,
    rmse,
)
from dptensor.models.completion.fold_in import FoldedUsers, fold_in_users, predict_folded, recommend_folded
from dptensor.models.completion.options import CompletionOptions
from dptensor.models.completion.plan import RecommendationPlan, plan_recommendation
from dptensor.models.completion.recommend import Recommendations

__all__ = [
    "OFFSETS",
    "PRIVACY_MODES",
    "SOLVERS",
    "CompletionOptions",
    "CompletionPlan",
    "FoldedUsers",
    "RecommendationPlan",
    "Recommendations",
    "Release",
    "TensorCompletion",
    "fold_in_users",
    "plan_completion",
    "plan_recommendation",
    "predict_folded",
    "recommend_folded",
    "rmse",
]
