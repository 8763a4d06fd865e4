"""Synthetic data with known ground truth and readers (DESIGN.md, layer 5)."""

from dptensor.datasets.moment_stream import OrthogonalMomentStream, make_orthogonal_moment_stream
from dptensor.datasets.orthogonal import NOISE_MODELS, OrthogonalTensor, make_orthogonal_tensor

__all__ = [
    "NOISE_MODELS",
    "OrthogonalMomentStream",
    "OrthogonalTensor",
    "make_orthogonal_moment_stream",
    "make_orthogonal_tensor",
]
