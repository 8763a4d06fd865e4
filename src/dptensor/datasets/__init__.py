"""Synthetic data with known ground truth (DESIGN.md, layer 5)."""

from dptensor.datasets.orthogonal import NOISE_MODELS, OrthogonalTensor, make_orthogonal_tensor

__all__ = ["NOISE_MODELS", "OrthogonalTensor", "make_orthogonal_tensor"]
