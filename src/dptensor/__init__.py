"""dptensor: fast, streaming and differentially private tensor decomposition.

The estimators and functions below are importable from the package itself
(``from dptensor import PrivateRecommender``); each is loaded from its module on first use, so that
``import dptensor`` (and ``dptensor --version``) does not pay for scikit-learn, SciPy, Dask or
numba until something needs them.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from dptensor._version import __version__

#: Each top-level name and the module that defines it.
_EXPORTS = {
    "DPVariationalLDA": "dptensor.models",
    "NotFittedError": "dptensor._validation",
    "OnlineTensorPower": "dptensor.decomposition",
    "PowerMethodResult": "dptensor.decomposition",
    "PrivateCountVectorizer": "dptensor.models",
    "PrivateRecommender": "dptensor.models",
    "PrivateSpectralLDA": "dptensor.models",
    "PrivateTopicModel": "dptensor.models",
    "PrivacyGuarantee": "dptensor.privacy",
    "PrivatePowerMethodResult": "dptensor.decomposition",
    "input_perturbation": "dptensor.decomposition",
    "power_method": "dptensor.decomposition",
    "private_power_method": "dptensor.decomposition",
    "Recommender": "dptensor.models",
    "SingleTopicModel": "dptensor.models",
    "SpectralLDA": "dptensor.models",
    "TensorCompletion": "dptensor.models",
}

__all__ = [
    "DPVariationalLDA",
    "NotFittedError",
    "OnlineTensorPower",
    "PowerMethodResult",
    "PrivateCountVectorizer",
    "PrivateRecommender",
    "PrivateSpectralLDA",
    "PrivateTopicModel",
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

if TYPE_CHECKING:  # the names as static analysis sees them
    from dptensor._validation import NotFittedError
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
        PrivateTopicModel,
        Recommender,
        SingleTopicModel,
        SpectralLDA,
        TensorCompletion,
    )
    from dptensor.privacy import PrivacyGuarantee


def __getattr__(name: str) -> Any:
    """Load a top-level name from its module on first use (PEP 562), then keep it here.

    A subpackage (``dptensor.privacy``, ``dptensor.models``, ...) is imported on first use too, as
    an eager ``__init__`` would have left it.
    """
    module = _EXPORTS.get(name)
    if module is None:
        if not name.startswith("_") and importlib.util.find_spec(f"dptensor.{name}") is not None:
            return importlib.import_module(f"dptensor.{name}")
        raise AttributeError(f"module 'dptensor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
