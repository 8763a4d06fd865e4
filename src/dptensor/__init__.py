"""dptensor: fast, streaming and differentially private tensor decomposition."""

from dptensor.decomposition import OnlineTensorPower, PowerMethodResult, power_method

__version__ = "0.1.0"

__all__ = ["OnlineTensorPower", "PowerMethodResult", "__version__", "power_method"]
