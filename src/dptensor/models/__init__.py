"""Estimators users fit (DESIGN.md, layer 4), with scikit-learn conventions."""

from dptensor.models.completion import TensorCompletion
from dptensor.models.single_topic import SingleTopicModel
from dptensor.models.spectral_lda import SpectralLDA

__all__ = ["SingleTopicModel", "SpectralLDA", "TensorCompletion"]
