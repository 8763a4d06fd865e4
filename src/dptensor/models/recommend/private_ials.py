"""Private implicit ALS at user level: noised item-side statistics, users solved alone (DPALS / AdaDPALS).

Chien, Jain, Krichene, Rendle, Song, Thakurta & Zhang (2021, *Private alternating least squares*,
ICML) and Krichene, Jain, Song, Sundararajan, Thakurta & Zhang (2023, *Multi-task differential
privacy under distribution skew*, ICML; the adaptive weights of AdaDPALS): in every sweep the item
factors are solved from **noised** sums over users, and each user's factors are solved by that user
from their own row and the released item factors only (joint DP; never released).

Sweep ``t`` (``V_0`` random from the public ``random_state``, independent of the data):

1. every user solves ``x_u`` exactly from their row and ``V_{t-1}``
   (:func:`~dptensor.models.recommend.ials.solve_user_factors`), then clips it to the unit ball,
   ``x_u <- x_u / max(1, ||x_u||)``;
2. the weighted statistics of the item half-step (:mod:`~dptensor.models.recommend.ials`, eq. 5,
   for the objective whose user ``u`` terms carry the weight ``w_u = 1/sqrt(n_u)``, ``0`` for an
   empty row) are released with Gaussian noise:
   ``G = sum_u w_u x_u x_u^T`` (the unobserved items' term, ``U^T W U``),
   ``A_i = alpha sum_{u: x_ui = 1} w_u x_u x_u^T`` and ``b_i = (1 + alpha) sum_{u: x_ui = 1} w_u x_u``;
3. ``V_t`` solves ``y_i = (G + A_i + lambda I)^{-1} b_i`` from the released sums, after projecting
   ``G`` and every ``A_i`` onto the positive semi-definite cone (post-processing)
   (:func:`~dptensor.models.recommend.ials.solve_item_factors`).

Sensitivities (``"user"`` relation: one user's row ``r`` replaced by ``r'``, and with it their
clipped factor ``x`` by ``x'``; every other user's factor is a function of their own row and the
released ``V_{t-1}``, the same in both worlds). With ``||x|| <= 1``, ``w = 1/sqrt(n)``:

* ``G``: the change is ``w x x^T - w' x' x'^T``; both terms are PSD of Frobenius norm ``<= 1``, and
  ``<P, Q>_F >= 0`` for PSD ``P, Q``, so ``||P - Q||_F^2 <= ||P||^2 + ||Q||^2 <= 2``: ``sqrt(2)``.
* ``A = (A_i)_i`` (the stacked ``I x k x k`` array, Frobenius norm): the user adds the PSD
  ``alpha w x x^T`` at each of their ``n`` items, of total squared norm
  ``n alpha^2 w^2 ||x||^4 <= alpha^2``; the same inner-product argument gives ``sqrt(2) alpha``.
* ``b = (b_i)_i`` (``I x k``): the user adds ``(1 + alpha) w x`` at each item, total norm
  ``<= (1 + alpha)``; the factors may point anywhere (``x' = -x`` on the same items), so the
  change is at most ``||.|| + ||.|| = 2 (1 + alpha)``, attained.

The symmetric ``G`` and ``A_i`` take the ``"frobenius"`` noise of
:func:`~dptensor.models.recommend.releases.add_symmetric_frobenius_noise` (std ``sigma`` on the
diagonal, ``sigma / sqrt(2)`` off it), whose l2 metric is the Frobenius norm; ``b`` i.i.d. noise.
So a release of std ``sigma`` and sensitivity ``Delta`` has noise multiplier ``sigma / Delta``, and
the ``3 T`` Gaussian releases of ``T`` sweeps compose exactly into one ``mu``-GDP release
(Dong, Roth & Su 2022, Corollary 3.3), ``mu^2 = sum 1/z^2``, split by ``shares`` across the three
statistics (the same split in every sweep) and calibrated by the analytic Gaussian (Balle & Wang
2018) so that the composition spends ``(epsilon, delta)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import dp_accounting
import numpy as np
import scipy.sparse as sp

from dptensor._validation import check_epsilon_delta, check_positive_int, check_random_state, check_real
from dptensor.models.recommend._input import check_interactions
from dptensor.models.recommend.ials import (
    IALSFactors,
    ItemSideStatistics,
    item_side_statistics,
    solve_item_factors,
    solve_user_factors,
)
from dptensor.models.recommend.release_plan import NEIGHBOURING, PROTECTED
from dptensor.models.recommend.releases import add_symmetric_frobenius_noise
from dptensor.parallel import as_row_blocks
from dptensor.privacy.calibration import gaussian_sigma_analytic
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.ledger import composed_epsilon
from dptensor.privacy.noise import NoiseLike, NoiseSource
from dptensor.privacy.release import Ledger, begin_release

__all__ = [
    "IALS_STATISTICS",
    "IALSReleasePlan",
    "PrivateIALS",
    "clip_factors",
    "ials_sensitivities",
    "plan_private_ials",
    "private_implicit_als",
    "private_item_side_statistics",
]

#: The three statistics released every sweep.
IALS_STATISTICS = ("gram", "grams", "targets")


def ials_sensitivities(alpha: float) -> dict[str, float]:
    """Replace-one-user sensitivities of ``G``, ``A`` and ``b`` (module docstring)."""
    alpha = check_real(alpha, "alpha", strict=False)
    return {"gram": math.sqrt(2.0), "grams": math.sqrt(2.0) * alpha, "targets": 2.0 * (1.0 + alpha)}


def clip_factors(factors: np.ndarray) -> np.ndarray:
    """Rows scaled into the unit ball: ``x / max(1, ||x||)``."""
    norms = np.linalg.norm(factors, axis=1, keepdims=True)
    return factors / np.maximum(norms, 1.0)


@dataclass(frozen=True)
class IALSReleasePlan:
    """Noise of every sweep's statistics and the guarantee of ``iterations`` sweeps (public inputs only)."""

    iterations: int
    alpha: float
    shares: Mapping[str, float]
    noise_multipliers: Mapping[str, float]
    sigmas: Mapping[str, float]
    mu: float
    guarantee: PrivacyGuarantee


def plan_private_ials(
    epsilon: float,
    delta: float,
    iterations: int,
    *,
    alpha: float,
    n_factors: int,
    shares: Mapping[str, float] | None = None,
) -> IALSReleasePlan:
    """Calibrate the ``3 T`` Gaussian releases of ``T`` private sweeps to ``(epsilon, delta)`` exactly.

    ``shares`` (release to weight among ``"gram"``, ``"grams"``, ``"targets"``; default equal) splits
    each sweep's ``mu^2``; the sweeps get equal parts. With ``alpha = 0`` the ``A_i`` are zero and
    not released.
    """
    check_epsilon_delta(epsilon, delta)
    epsilon, delta = float(epsilon), float(delta)
    iterations = check_positive_int(iterations, "iterations")
    n_factors = check_positive_int(n_factors, "n_factors")
    sensitivity = ials_sensitivities(alpha)
    names = tuple(n for n in IALS_STATISTICS if sensitivity[n] > 0)
    if shares is None:
        share = {n: 1.0 / len(names) for n in names}
    else:
        if not isinstance(shares, Mapping) or set(shares) != set(names):
            raise ValueError(f"shares must map each of {names} to a weight > 0, got {shares!r}")
        raw = {n: check_real(shares[n], f"shares[{n!r}]") for n in names}
        share = {n: raw[n] / math.fsum(raw.values()) for n in names}
    target = epsilon - 1e-5
    for _ in range(8):
        z_eff = gaussian_sigma_analytic(target, delta)  # of the one Gaussian all 3T releases compose into
        multipliers = {n: z_eff * math.sqrt(iterations / share[n]) for n in names}
        event = dp_accounting.ComposedDpEvent(
            [dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), iterations)
             for z in multipliers.values()]
        )  # fmt: skip
        spent = composed_epsilon([event], delta, 1e-4)
        if spent <= epsilon:
            break
        target -= (spent - epsilon) + 1e-5
    else:  # pragma: no cover - guard
        raise RuntimeError(f"calibration failed for epsilon={epsilon}, delta={delta}")
    mu = math.sqrt(iterations * math.fsum(1.0 / z**2 for z in multipliers.values()))
    sigmas = {n: multipliers[n] * sensitivity[n] for n in names}
    guarantee = PrivacyGuarantee(
        epsilon=epsilon, delta=delta, neighbouring=NEIGHBOURING, accountant="exact (Gaussian DP)",
        n_releases=len(names) * iterations, mechanism="gaussian", noise_multiplier=1.0 / mu,
        epsilon_exact=float(spent),
        details={
            "model": "private implicit ALS (DPALS with adaptive weights 1/sqrt(n_u))",
            "iterations": iterations, "alpha": float(alpha), "n_factors": n_factors,
            "releases_per_sweep": list(names), "shares": dict(share),
            "noise_multipliers": dict(multipliers), "sigmas": dict(sigmas),
            "sensitivities": {n: sensitivity[n] for n in names}, "gdp_mu": mu,
            "user_factors": "solved by each user from their own row and the released item factors, "
                            "clipped to norm 1; never released",
        },
        protected=PROTECTED,
        public=("the number of users, the item list (the columns), n_factors, iterations, alpha, the "
                "regularization, the shares, the public random_state of the initial item factors, "
                "epsilon and delta"),
        dp_event=event,
    )  # fmt: skip
    return IALSReleasePlan(iterations, float(alpha), MappingProxyType(share), MappingProxyType(multipliers),
                           MappingProxyType(sigmas), mu, guarantee)


def _targets_block(block: object, alpha: float, weighted_factors: np.ndarray) -> np.ndarray:
    """``(1 + alpha) sum_{u in block: x_ui = 1} w_u x_u`` per item."""
    rows = sp.csr_array(block, dtype=np.float64, copy=True)
    rows.sum_duplicates()
    rows.data = (rows.data != 0).astype(np.float64)
    rows.eliminate_zeros()
    return (1.0 + alpha) * np.asarray(rows.T @ weighted_factors)


def _psd(matrices: np.ndarray) -> np.ndarray:
    """Each symmetric matrix of a stack projected onto the PSD cone (negative eigenvalues set to 0)."""
    values, vectors = np.linalg.eigh(matrices)
    return (vectors * np.maximum(values, 0.0)[..., None, :]) @ np.swapaxes(vectors, -1, -2)


def private_item_side_statistics(
    X: sp.csr_array, user_factors: np.ndarray, *, alpha: float, sigmas: Mapping[str, float],
    source: NoiseSource, n_jobs: int | None = None,
) -> ItemSideStatistics:  # fmt: skip
    """One sweep's released statistics ``G``, ``A_i``, ``b_i`` (module docstring), noised.

    ``user_factors`` are clipped here (:func:`clip_factors`) and weighted by ``w_u = 1/sqrt(n_u)``;
    ``A`` and ``G`` come from :func:`~dptensor.models.recommend.ials.item_side_statistics` on the
    factors ``sqrt(w_u) x_u``, ``b`` from the factors ``w_u x_u``. The item counts are not released
    (``counts`` is zero: the frequency-scaled ridge is not available privately).
    """
    rows = check_interactions(X)
    lengths = np.diff(rows.indptr).astype(np.float64)
    weights = np.divide(1.0, np.sqrt(lengths), out=np.zeros_like(lengths), where=lengths > 0)
    factors = clip_factors(np.asarray(user_factors, dtype=np.float64))
    stats = item_side_statistics(rows, factors * np.sqrt(weights)[:, None], alpha=alpha, n_jobs=n_jobs)
    blocks = as_row_blocks(rows, n_jobs=n_jobs)
    targets = blocks.map_sum(_targets_block, alpha, row_args=[factors * weights[:, None]],
                             label="private-ials-targets")
    gram = _psd(add_symmetric_frobenius_noise(stats.user_gram, sigmas["gram"], source))
    grams = stats.grams
    if "grams" in sigmas:
        grams = _psd(np.stack([add_symmetric_frobenius_noise(a, sigmas["grams"], source) for a in grams]))
    targets = source.add_gaussian(targets, sigmas["targets"])
    return ItemSideStatistics(grams, targets, np.zeros(rows.shape[1]), gram, rows.shape[0])


@dataclass(frozen=True)
class PrivateIALS:
    """A private implicit ALS fit: the released item factors and the guarantee.

    ``factors.user_factors`` are the training users' own solves from the final item factors (each
    for that user alone, as in joint DP); ``factors.item_factors`` is the release.
    """

    factors: IALSFactors
    guarantee: PrivacyGuarantee
    plan: IALSReleasePlan


def private_implicit_als(
    X: object,
    n_factors: int = 32,
    *,
    epsilon: float,
    delta: float,
    iterations: int = 3,
    regularization: float = 1.0,
    alpha: float = 10.0,
    shares: Mapping[str, float] | None = None,
    random_state: object = None,
    noise: NoiseLike | NoiseSource = None,
    ledger: Ledger | None = None,
    n_jobs: int | None = None,
) -> PrivateIALS:
    """Implicit ALS whose item factors are ``(epsilon, delta)``-DP under the ``"user"`` relation.

    Plan (public inputs) -> charge (:func:`~dptensor.privacy.begin_release`) -> ``iterations``
    private sweeps (module docstring) -> each user's factors from the final item factors. The
    initial item factors are ``N(0, 1/k)`` from the public ``random_state``.

    Returns
    -------
    PrivateIALS
    """
    n_factors = check_positive_int(n_factors, "n_factors")
    regularization = check_real(regularization, "regularization")
    plan = plan_private_ials(epsilon, delta, iterations, alpha=alpha, n_factors=n_factors, shares=shares)
    guarantee, source = begin_release(plan.guarantee, noise, ledger=ledger, description="private iALS")
    rows = check_interactions(X)
    rng = check_random_state(random_state)
    items = rng.normal(scale=1.0 / math.sqrt(n_factors), size=(rows.shape[1], n_factors))
    for _ in range(plan.iterations):
        users = solve_user_factors(rows, items, regularization=regularization, alpha=alpha)
        stats = private_item_side_statistics(rows, users, alpha=alpha, sigmas=plan.sigmas, source=source,
                                             n_jobs=n_jobs)
        items = solve_item_factors(stats, regularization=regularization)
    users = solve_user_factors(rows, items, regularization=regularization, alpha=alpha)
    return PrivateIALS(IALSFactors(users, items, regularization, alpha), guarantee, plan)
