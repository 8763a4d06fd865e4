"""DP variational LDA started from the (private) moment estimate: the split and the composition.

Issue 35, item 2: :class:`~dptensor.models.topics.dp_vi.DPVariationalLDA` with ``init="moments"``
first releases the spectral moment estimate (:class:`~dptensor.models.topics.private_spectral.
PrivateSpectralLDA` with ``refine=None``, its own releases and sensitivities unchanged) on a share
of the budget, then starts online variational Bayes from those topics instead of
``Gamma(100, 1/100)`` noise and spends the rest on the full-batch VI releases.

Budget. Both parts are Gaussian mechanisms under the same relation (replace one document),
composed adaptively. In Gaussian differential privacy (Dong, Roth & Su 2022) ``mu``-GDP releases compose as
``mu^2 = mu_m^2 + mu_v^2``: with ``mu`` the GDP parameter of the target ``(epsilon, delta)``
(``1 / gaussian_sigma_analytic(epsilon, delta)``), the moments get ``mu_m = sqrt(share) mu`` and
the VI releases ``mu_v = sqrt(1 - share) mu``; each part calibrates its own noise to the
``epsilon`` of its ``mu`` at the same ``delta``. The composed ``epsilon`` is then recomputed from
the two parts' actual multipliers (:func:`composed_start_guarantee`), never assumed.

Start. ``lambda_0 = eta + START_SCALE * N * phi`` with ``phi`` the moment topics (rows on the
simplex) and ``N`` the public number of documents: post-processing of the released topics.
"""

from __future__ import annotations

import math

import dp_accounting

from dptensor.privacy import PrivacyGuarantee, gaussian_epsilon, gaussian_sigma_analytic
from dptensor.privacy.accounting import reduce_event

#: Default share of ``mu^2`` the moments take (``init_share``). Debian package descriptions,
#: ``V = 2000``, ``K = 10``, ``epsilon = 1``: 0.3 gave held-out perplexity 768.7 (NPMI 0.190),
#: 0.5 771.5 (0.158); the random start 770.2 (NPMI 0.076).
DEFAULT_START_SHARE = 0.3
#: ``lambda_0 = eta + START_SCALE * N * phi``: 1 gave 768.7, 0.2 770.1 and 5 788.3 (same corpus).
START_SCALE = 1.0


def split_epsilons(epsilon: float, delta: float, share: float) -> tuple[float, float]:
    """``(epsilon_m, epsilon_v)`` at ``delta`` of the two parts' GDP shares ``share`` and ``1 - share``.

    Parameters
    ----------
    epsilon, delta : float
        The whole fit's budget.
    share : float
        In ``(0, 1)``: the moments' share of ``mu^2``.

    Returns
    -------
    tuple of float
        The budgets each part calibrates its noise to (public: parameters only).
    """
    if not 0.0 < share < 1.0:
        raise ValueError(f"init_share must be in (0, 1), got {share!r}")
    mu = 1.0 / gaussian_sigma_analytic(float(epsilon), float(delta))
    moments = gaussian_epsilon(1.0 / (math.sqrt(share) * mu), float(delta))
    passes = gaussian_epsilon(1.0 / (math.sqrt(1.0 - share) * mu), float(delta))
    return moments, passes


def gdp_mu(event: dp_accounting.DpEvent) -> float:
    """The Gaussian-DP ``mu`` of an event made of Gaussian releases (``reduce_event`` merges them).

    Raises ``ValueError`` for any other event (a subsampled or Laplace release has no exact ``mu``).
    """
    reduced = reduce_event(event)
    if not isinstance(reduced, dp_accounting.GaussianDpEvent):
        raise ValueError(f"not a composition of Gaussian releases: {event!r}")
    return 1.0 / float(reduced.noise_multiplier)


def composed_start_guarantee(
    moments: PrivacyGuarantee, passes: PrivacyGuarantee, epsilon: float, delta: float, share: float
) -> PrivacyGuarantee:
    """One guarantee for the moment releases followed by the VI releases (exact GDP composition).

    Parameters
    ----------
    moments, passes : PrivacyGuarantee
        The planned guarantees of the two parts (both Gaussian, both holding, exact accountants
        whose ``noise_multiplier`` is their composed GDP ``1 / mu``).
    epsilon, delta : float
        The budget the fit was asked for.
    share : float
        The moments' share of ``mu^2``.

    Returns
    -------
    PrivacyGuarantee
        ``epsilon_exact`` recomputed from ``mu^2 = mu_m^2 + mu_v^2`` (:func:`gdp_mu` of each part's
        event, whatever its ``noise_multiplier`` convention); its ``dp_event`` composes the
        two parts' events, so a ledger composes it exactly with anything else.
    """
    for part in (moments, passes):
        if not part.holds or part.mechanism != "gaussian" or part.dp_event is None:
            raise ValueError("init='moments' composes Gaussian releases that hold (exact accountants)")
    mu = math.hypot(gdp_mu(moments.dp_event), gdp_mu(passes.dp_event))
    exact = gaussian_epsilon(1.0 / mu, float(delta))
    if exact > float(epsilon) * (1.0 + 1e-9):  # pragma: no cover - the split cannot overspend
        raise RuntimeError(f"the composed epsilon {exact} exceeds the budget {epsilon}")
    details = {
        "start": "moments (PrivateSpectralLDA, refine=None), then full-batch DP-VI",
        "start_share": float(share),
        "moments_epsilon": moments.epsilon,
        "passes_epsilon": passes.epsilon,
        "moments": dict(moments.details),
        **dict(passes.details),
        "composition": "Gaussian DP: mu^2 = mu_moments^2 + mu_passes^2",
    }
    return PrivacyGuarantee(
        epsilon=float(epsilon), delta=float(delta), neighbouring=moments.neighbouring,
        accountant="exact (Gaussian DP composition: moments, then full-batch VI)",
        n_releases=moments.n_releases + passes.n_releases, mechanism="gaussian", noise_multiplier=1.0 / mu,
        epsilon_exact=min(float(epsilon), exact), details=details, protected=moments.protected,
        public=passes.public + "; " + moments.public,
        dp_event=dp_accounting.ComposedDpEvent([moments.dp_event, passes.dp_event]),
    )  # fmt: skip
