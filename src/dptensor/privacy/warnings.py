"""Warnings a differential-privacy user expects: a budget too large to mean much, a delta too large.

One helper, :func:`check_privacy_parameters`, used by every private estimator
(:class:`dptensor.models._base.PrivateEstimatorMixin`, :class:`~dptensor.models.TensorCompletion`)
and the functional APIs (:func:`~dptensor.decomposition.private_power_method`,
:func:`~dptensor.decomposition.input_perturbation`). Its warnings depend only on the parameters
and on sizes that are public under the release's neighbouring relation, so they leak nothing.

Not warned about: a fixed ``random_state``. In dptensor the privacy noise never comes from
``random_state`` (it is public randomness: restarts, initialisations, shuffles); the noise comes
from fresh OS entropy unless the caller passes :func:`~dptensor.privacy.insecure_test_noise`,
which does warn (and voids the guarantee).
"""

from __future__ import annotations

import math
import warnings

from dptensor.privacy.errors import PrivacyWarning

__all__ = ["EPSILON_WARNING_THRESHOLD", "check_privacy_parameters"]

#: ``epsilon`` above this draws a :class:`PrivacyWarning` (see :func:`check_privacy_parameters`).
EPSILON_WARNING_THRESHOLD = 10.0


def check_privacy_parameters(
    epsilon: float | None,
    delta: float | None,
    *,
    n_public: int | None = None,
    unit: str = "records",
    who: str = "this release",
    stacklevel: int = 3,
) -> None:
    """Warn (:class:`~dptensor.privacy.PrivacyWarning`) when ``(epsilon, delta)`` promise little.

    * ``epsilon > EPSILON_WARNING_THRESHOLD`` (10). Rationale: (epsilon, 0)-DP bounds how much
      any outcome's probability may change between neighbours by the factor ``e^epsilon``;
      ``e^10 ~ 22,000``, so an adversary's odds about one person may move from 1:1000 to 22:1 --
      the guarantee no longer rules out learning the protected item. Values in ``(1, 10]`` are
      common in deployed systems; above 10 practitioners (e.g. Dwork, Kohli & Mulligan 2019,
      *Differential privacy in practice: expose your epsilons!*) regard the bound as vacuous.
    * ``delta >= 1 / n_public``: a mechanism that publishes one random record in full is
      ``(0, 1/n)``-DP, so such a ``delta`` allows releasing someone's data outright (the usual
      advice is ``delta << 1/n``). ``n_public`` must be the number of protected units (documents,
      users, observed entries) **and public under the neighbouring relation** -- a caller whose
      ``n`` is private passes ``None`` (no check; warning on a private count would be a side
      channel).

    Parameters
    ----------
    epsilon, delta : float or None
        The requested budget (``None``: not given; nothing to check).
    n_public : int, optional
        Number of protected units when it is public under the relation.
    unit : str
        What ``n_public`` counts, for the message ("documents", "users", ...).
    who : str
        The estimator or function, for the message.
    stacklevel : int
        Passed to :func:`warnings.warn`.
    """
    if epsilon is not None and float(epsilon) > EPSILON_WARNING_THRESHOLD:
        warnings.warn(
            f"{who}: epsilon={float(epsilon):g} exceeds {EPSILON_WARNING_THRESHOLD:g}; an outcome's "
            f"probability may change by a factor e^epsilon = {math.exp(min(float(epsilon), 700)):.3g} "
            "between neighbours, so the guarantee means little (see "
            "dptensor.privacy.warnings.check_privacy_parameters)",
            PrivacyWarning,
            stacklevel=stacklevel,
        )
    if delta is not None and n_public is not None and n_public > 0 and float(delta) >= 1.0 / n_public:
        warnings.warn(
            f"{who}: delta={float(delta):g} >= 1/n = 1/{int(n_public)} ({unit}, public under the "
            "neighbouring relation); a mechanism that publishes one random record in full meets "
            "such a delta: choose delta much smaller than 1/n",
            PrivacyWarning,
            stacklevel=stacklevel,
        )
