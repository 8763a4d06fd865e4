"""The privacy--utility planner of :class:`~dptensor.models.PrivateSpectralLDA`: the public planning API.

Everything here is computed from public quantities only, before any budget is spent:

* :func:`plan_private_spectral_lda`: the fit's own plan -- resolved options, releases, shares, noise
  multipliers, ``DpEvent`` and guarantee -- from the estimator's parameters and ``(N, d)``
  (:mod:`dptensor.models.topics._private_plan`; the fit and ``planned_guarantee`` call it too);
* :func:`plan_private_lda`: the predicted signal-to-noise of the fit's ``M2`` release, its verdict
  and what would improve it (``dptensor lda plan``; :mod:`dptensor.models.topics._utility_plan`,
  whose docstring derives the prediction), built on that plan's noise multipliers;
* the ``"auto"`` rules that rest on the prediction (:func:`auto_whitening_words`,
  :func:`prefers_nonnegative_topics`) and the shrinkage weight inference derives from it.
"""

from dptensor.models.topics._private_plan import (
    DEFAULT_TYPICAL_LENGTH,
    GOOD_LEVEL,
    NOISE_LEVEL,
    WHITENING_WORDS_LEVEL,
    WHITENING_WORDS_MIN,
    WHITENING_WORDS_STEPS,
    SpectralLDAPlan,
    auto_whitening_words,
    fewest_whitening_words,
    noise_norm,
    plan_private_spectral_lda,
    predicted_snr,
    prefers_nonnegative_topics,
    release_words,
    shrinkage_weight,
    signal_guess,
)
from dptensor.models.topics._utility_plan import (
    DEFAULT_VOCABULARY_SHARE,
    VOCABULARY_SHARE_RULE,
    VOCABULARY_SHARES,
    PrivateLDAPlan,
    choose_vocabulary_share,
    model_words,
    plan_private_lda,
)

#: The former private name of :func:`predicted_snr`.
_snr = predicted_snr

__all__ = [
    "DEFAULT_TYPICAL_LENGTH",
    "DEFAULT_VOCABULARY_SHARE",
    "GOOD_LEVEL",
    "NOISE_LEVEL",
    "WHITENING_WORDS_LEVEL",
    "WHITENING_WORDS_MIN",
    "WHITENING_WORDS_STEPS",
    "PrivateLDAPlan",
    "SpectralLDAPlan",
    "VOCABULARY_SHARES",
    "VOCABULARY_SHARE_RULE",
    "auto_whitening_words",
    "choose_vocabulary_share",
    "fewest_whitening_words",
    "model_words",
    "noise_norm",
    "plan_private_lda",
    "plan_private_spectral_lda",
    "predicted_snr",
    "prefers_nonnegative_topics",
    "release_words",
    "shrinkage_weight",
    "signal_guess",
]
