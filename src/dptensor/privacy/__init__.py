"""Differential privacy: mechanisms, secret noise, calibration, accounting, sensitivities, guarantees,
budgets.

See docs/design.md, layer 2, and ``docs/privacy.md``. The private algorithms themselves live in
:mod:`dptensor.decomposition` (``private_power_method``, ``input_perturbation``) and
:mod:`dptensor.models`.
"""

from dptensor.privacy.accounting import (
    EpsilonDeltaDpEvent,
    compose,
    event_epsilon,
    make_accountant,
    reduce_event,
)
from dptensor.privacy.blocked_noise import SymmetricGaussianOperator
from dptensor.privacy.calibration import (
    ACCOUNTANTS,
    advanced_composition_epsilon,
    advanced_step_parameters,
    composed_gaussian_epsilon,
    composed_gaussian_holds,
    composed_noise_multiplier,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_pure_epsilon,
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
    laplace_scale,
    noise_ratio,
    pld_composed_epsilon,
)
from dptensor.privacy.errors import (
    BudgetExceededError,
    HeldOutUtilityWarning,
    LedgerError,
    PrivacyWarning,
    ReleaseUtilityWarning,
    UnprovenPrivacyError,
    UtilityWarning,
)
from dptensor.privacy.features import disable_features, enable_features, feature_enabled, require_unproven
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.ledger import BudgetLedger, Charge
from dptensor.privacy.mechanisms import (
    add_symmetric_gaussian,
    exponential_norm_noise,
    gaussian_noise,
    laplace_noise,
    orbit_sizes,
    symmetric_from_unique,
    symmetric_gaussian_matrix,
    symmetric_gaussian_tensor,
    unique_entries,
    unique_indices,
)
from dptensor.privacy.noise import (
    NOISE_BACKENDS,
    InsecureTestNoise,
    NoiseSource,
    insecure_test_noise,
    resolve_noise,
)
from dptensor.privacy.release import Ledger, begin_release
from dptensor.privacy.sensitivity import (
    EntryNeighbouring,
    NeighbouringRelation,
    RecordNeighbouring,
    WhitenedDocumentNeighbouring,
    clip_records,
    entry_neighbour_difference,
    record_bound_violations,
    record_norms,
)
from dptensor.privacy.whitened_noise import WhitenedNoiseLaw, whitened_noise_gram

__all__ = [
    "ACCOUNTANTS",
    "add_symmetric_gaussian",
    "NOISE_BACKENDS",
    "BudgetExceededError",
    "BudgetLedger",
    "Charge",
    "EntryNeighbouring",
    "EpsilonDeltaDpEvent",
    "InsecureTestNoise",
    "Ledger",
    "LedgerError",
    "NeighbouringRelation",
    "NoiseSource",
    "PrivacyGuarantee",
    "PrivacyWarning",
    "HeldOutUtilityWarning",
    "ReleaseUtilityWarning",
    "UtilityWarning",
    "RecordNeighbouring",
    "SymmetricGaussianOperator",
    "UnprovenPrivacyError",
    "WhitenedDocumentNeighbouring",
    "WhitenedNoiseLaw",
    "advanced_composition_epsilon",
    "advanced_step_parameters",
    "begin_release",
    "clip_records",
    "compose",
    "composed_gaussian_epsilon",
    "composed_gaussian_holds",
    "composed_noise_multiplier",
    "disable_features",
    "enable_features",
    "entry_neighbour_difference",
    "event_epsilon",
    "exponential_norm_noise",
    "feature_enabled",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_pure_epsilon",
    "gaussian_noise",
    "gaussian_sigma_analytic",
    "gaussian_sigma_classic",
    "insecure_test_noise",
    "laplace_noise",
    "laplace_scale",
    "make_accountant",
    "noise_ratio",
    "orbit_sizes",
    "pld_composed_epsilon",
    "record_bound_violations",
    "record_norms",
    "reduce_event",
    "require_unproven",
    "resolve_noise",
    "symmetric_from_unique",
    "symmetric_gaussian_matrix",
    "symmetric_gaussian_tensor",
    "unique_entries",
    "unique_indices",
    "whitened_noise_gram",
]
