"""dptensor: fast, streaming and differentially private tensor decomposition."""

from dptensor._validation import NotFittedError
from dptensor._version import __version__
from dptensor.decomposition import (
    OnlineTensorPower,
    PowerMethodResult,
    PrivatePowerMethodResult,
    input_perturbation,
    power_method,
    private_power_method,
)
from dptensor.models import (
    DPVariationalLDA,
    PrivateCountVectorizer,
    PrivateRecommender,
    PrivateSpectralLDA,
    Recommender,
    SingleTopicModel,
    SpectralLDA,
    TensorCompletion,
)
from dptensor.privacy import PrivacyGuarantee

__all__ = [
    "DPVariationalLDA",
    "NotFittedError",
    "OnlineTensorPower",
    "PowerMethodResult",
    "PrivateCountVectorizer",
    "PrivateRecommender",
    "PrivateSpectralLDA",
    "PrivacyGuarantee",
    "PrivatePowerMethodResult",
    "__version__",
    "input_perturbation",
    "power_method",
    "private_power_method",
    "Recommender",
    "SingleTopicModel",
    "SpectralLDA",
    "TensorCompletion",
]
