"""Differential privacy: mechanisms, calibration and accounting, sensitivities, guarantees.

See DESIGN.md, layer 2. The private algorithms themselves live in
:mod:`dptensor.decomposition` (``private_power_method``, ``input_perturbation``).
"""

from dptensor.privacy.calibration import (
    ACCOUNTANTS,
    advanced_composition_epsilon,
    advanced_step_parameters,
    composed_gaussian_epsilon,
    composed_noise_multiplier,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
    laplace_scale,
    noise_ratio,
    pld_composed_epsilon,
)
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.mechanisms import (
    exponential_norm_noise,
    gaussian_noise,
    laplace_noise,
    orbit_sizes,
    symmetric_gaussian_matrix,
    symmetric_gaussian_tensor,
)
from dptensor.privacy.sensitivity import (
    EntryNeighbouring,
    NeighbouringRelation,
    RecordNeighbouring,
    clip_records,
    entry_neighbour_difference,
    record_norms,
)

__all__ = [
    "ACCOUNTANTS",
    "EntryNeighbouring",
    "NeighbouringRelation",
    "PrivacyGuarantee",
    "RecordNeighbouring",
    "advanced_composition_epsilon",
    "advanced_step_parameters",
    "clip_records",
    "composed_gaussian_epsilon",
    "composed_noise_multiplier",
    "entry_neighbour_difference",
    "exponential_norm_noise",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_noise",
    "gaussian_sigma_analytic",
    "gaussian_sigma_classic",
    "laplace_noise",
    "laplace_scale",
    "noise_ratio",
    "orbit_sizes",
    "pld_composed_epsilon",
    "record_norms",
    "symmetric_gaussian_matrix",
    "symmetric_gaussian_tensor",
]
