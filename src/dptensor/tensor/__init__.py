"""Symmetric third-order tensors as operators (docs/design.md, layer 1)."""

from dptensor.tensor.norms import OperatorNormResult, operator_norm
from dptensor.tensor.operators import (
    DeflatedTensor,
    DenseTensor,
    LowRankTensor,
    SampleMoment,
    SumTensor,
    SymmetricTensor,
    WhitenedTensor,
    as_tensor,
    check_symmetric,
    symmetrize,
)
from dptensor.tensor.sphere import random_unit_vectors

__all__ = [
    "DeflatedTensor",
    "DenseTensor",
    "LowRankTensor",
    "OperatorNormResult",
    "SampleMoment",
    "SumTensor",
    "SymmetricTensor",
    "WhitenedTensor",
    "as_tensor",
    "check_symmetric",
    "operator_norm",
    "random_unit_vectors",
    "symmetrize",
]
