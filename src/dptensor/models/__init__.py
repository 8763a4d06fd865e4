"""Estimators users fit (docs/design.md, layer 4), with scikit-learn conventions."""

from dptensor.models.completion import TensorCompletion
from dptensor.models.dp_vi_lda import DPVariationalLDA
from dptensor.models.pipeline_guarantee import pipeline_guarantee
from dptensor.models.private_spectral_lda import PrivateSpectralLDA
from dptensor.models.private_vectorizer import PrivateCountVectorizer
from dptensor.models.single_topic import SingleTopicModel
from dptensor.models.spectral_lda import SpectralLDA

__all__ = [
    "DPVariationalLDA",
    "PrivateCountVectorizer",
    "PrivateSpectralLDA",
    "SingleTopicModel",
    "SpectralLDA",
    "TensorCompletion",
    "pipeline_guarantee",
]
