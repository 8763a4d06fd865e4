"""Private implicit ALS at user level: noised item-side statistics, users solved alone (DPALS / AdaDPALS).

Chien, Jain, Krichene, Rendle, Song, Thakurta & Zhang (2021, *Private alternating least squares*,
ICML) and Krichene, Jain, Song, Sundararajan, Thakurta & Zhang (2023, *Multi-task differential
privacy under distribution skew*, ICML; the adaptive weights of AdaDPALS): in every sweep the item
factors are solved from **noised** sums over users, and each user's factors are solved by that user
from their own row and the released item factors only (joint DP; never released).

Sweep ``t`` (``V_0`` random from the public ``random_state``, independent of the data):

1. every user solves ``x_u`` exactly from their row and ``V_{t-1}``
   (:func:`~dptensor.models.recommend.ials.solve_user_factors`), then clips it to the ball of the
   public radius ``C`` (``clip``), ``x_u <- x_u min(1, C / ||x_u||)`` (:func:`clip_factors`);
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
released ``V_{t-1}``, the same in both worlds). With ``||x|| <= C``, ``w = 1/sqrt(n)``:

* ``G``: the change is ``w x x^T - w' x' x'^T``; both terms are PSD of Frobenius norm ``<= C^2``,
  and ``<P, Q>_F >= 0`` for PSD ``P, Q``, so ``||P - Q||_F^2 <= ||P||^2 + ||Q||^2 <= 2 C^4``:
  ``sqrt(2) C^2``.
* ``A = (A_i)_i`` (the stacked ``I x k x k`` array, Frobenius norm): the user adds the PSD
  ``alpha w x x^T`` at each of their ``n`` items, of total squared norm
  ``n alpha^2 w^2 ||x||^4 <= alpha^2 C^4``; the same inner-product argument gives
  ``sqrt(2) alpha C^2``.
* ``b = (b_i)_i`` (``I x k``): the user adds ``(1 + alpha) w x`` at each item, total norm
  ``<= (1 + alpha) C``; the factors may point anywhere (``x' = -x`` on the same items), so the
  change is at most ``||.|| + ||.|| = 2 (1 + alpha) C``, attained.

The radius matters: the solved factors of MovieLens-100K's users have norms near 0.1 (``lambda`` 20,
16 factors), so noise calibrated to ``C = 1`` drowns sums that never use a tenth of it, while a
``C`` below the typical norm keeps each user's direction and bounds their weight
(:class:`~dptensor.models.recommend.RecommenderOptions`'s ``private_ials_clip``, measured in
docs/recommend.md). Clipping scales by ``C (1 - 1e-9) / ||x||``, a margin against rounding, so the
bound holds to the last bit.

The symmetric ``G`` and ``A_i`` take the ``"frobenius"`` noise of
:func:`~dptensor.models.recommend.releases.add_symmetric_frobenius_noise` (std ``sigma`` on the
diagonal, ``sigma / sqrt(2)`` off it), whose l2 metric is the Frobenius norm; ``b`` i.i.d. noise.
So a release of std ``sigma`` and sensitivity ``Delta`` has noise multiplier ``sigma / Delta``, and
the ``3 T`` Gaussian releases of ``T`` sweeps compose exactly into one ``mu``-GDP release
(Dong, Roth & Su 2022, Corollary 3.3), ``mu^2 = sum 1/z^2``, split by ``shares`` across the three
statistics (the same split in every sweep) and calibrated by the analytic Gaussian (Balle & Wang
2018) so that the composition spends ``(epsilon, delta)``: the ``"ials"`` release of
:func:`~dptensor.models.recommend.release_plan.recommender_guarantee` (:func:`ials_sweeps` describes
it), which composes it with the other releases of a fit (the item counts, the item selection) in
one guarantee.

Code. One sweep is one map over user blocks, then sum (:class:`dptensor.parallel.RowBlocks`: in
this process, on threads or on a Dask cluster): each block solves its users' factors from the
released ``V_{t-1}``, clips and weights them, and returns its part of ``G``, ``A`` and ``b``; the
noise is added once, to the sums (:func:`private_ials_sweeps`, which takes the
:class:`~dptensor.privacy.NoiseSource` of a release already begun, so that
:class:`~dptensor.models.recommend.PrivateRecommender` charges its whole fit once).
:func:`private_implicit_als` plans, charges and runs the sweeps on its own.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dptensor._validation import check_positive_int, check_random_state, check_real
from dptensor.models.recommend._input import check_interactions
from dptensor.models.recommend.ials import (
    IALSFactors,
    ItemSideStatistics,
    item_side_statistics,
    solve_item_factors,
    solve_user_factors,
)
from dptensor.models.recommend.options import RecommenderOptions
from dptensor.models.recommend.release_plan import ReleasePlan, SweepReleases, recommender_guarantee
from dptensor.models.recommend.releases import add_symmetric_frobenius_noise
from dptensor.parallel import RowBlocks, as_row_blocks, is_distributed, public_shape
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.noise import NoiseLike, NoiseSource
from dptensor.privacy.release import Ledger, begin_release

__all__ = [
    "IALS_STATISTICS",
    "PrivateIALS",
    "SweepRelease",
    "clip_factors",
    "ials_sensitivities",
    "ials_sweeps",
    "initial_item_factors",
    "plan_private_ials",
    "private_ials_sweeps",
    "private_implicit_als",
    "private_item_side_statistics",
]

#: The three statistics released every sweep.
IALS_STATISTICS = ("gram", "grams", "targets")


#: The clip radius ``C`` of the functions below: the estimator's default
#: (:class:`~dptensor.models.recommend.RecommenderOptions`'s ``private_ials_clip``).
DEFAULT_CLIP = RecommenderOptions.private_ials_clip
#: Clipped rows are scaled to this fraction of the radius, a margin against rounding.
_CLIP_MARGIN = 1.0 - 1e-9


def ials_sensitivities(alpha: float, clip: float = DEFAULT_CLIP) -> dict[str, float]:
    """Replace-one-user sensitivities of ``G``, ``A``, ``b`` for factors of norm ``<= clip`` (module doc)."""
    alpha = check_real(alpha, "alpha", strict=False)
    clip = check_real(clip, "clip")
    return {"gram": math.sqrt(2.0) * clip**2, "grams": math.sqrt(2.0) * alpha * clip**2,
            "targets": 2.0 * (1.0 + alpha) * clip}


def clip_factors(factors: np.ndarray, clip: float = DEFAULT_CLIP) -> np.ndarray:
    """Rows scaled into the ball of radius ``clip``: ``x min(1, clip (1 - 1e-9) / ||x||)``.

    Rows inside the ball are unchanged; the others are scaled to just inside it (the margin keeps
    ``||x|| <= clip`` after rounding).
    """
    factors = np.asarray(factors, dtype=np.float64)
    norms = np.linalg.norm(factors, axis=1, keepdims=True)
    limit = clip * _CLIP_MARGIN
    scale = np.divide(limit, norms, out=np.ones_like(norms), where=norms > limit)
    return factors * scale


def ials_sweeps(
    iterations: int, *, alpha: float, n_factors: int, regularization: float,
    shares: Mapping[str, float] | None = None, clip: float = DEFAULT_CLIP,
) -> SweepReleases:  # fmt: skip
    """The ``"ials"`` release of ``iterations`` private sweeps, for :func:`recommender_guarantee`.

    ``shares`` (statistic to weight among ``"gram"``, ``"grams"``, ``"targets"``; default equal)
    splits the sweeps' ``mu^2``; with ``alpha = 0`` the ``A_i`` are zero and not released.
    ``clip`` is the public radius ``C`` of the users' factors. The settings (all public) are
    recorded in the guarantee's ``details["ials"]``.
    """
    iterations = check_positive_int(iterations, "iterations")
    n_factors = check_positive_int(n_factors, "n_factors")
    regularization = check_real(regularization, "regularization")
    clip = check_real(clip, "clip")
    sensitivity = ials_sensitivities(alpha, clip)
    if float(alpha) == 0.0:  # the A_i are exactly zero: nothing to release
        del sensitivity["grams"]
    tiny = [name for name, value in sensitivity.items() if not value > 0]
    if tiny:  # a sensitivity that underflows would release its sums without noise
        raise ValueError(f"alpha={alpha!r} and clip={clip!r} give the sweeps' {', '.join(tiny)} a "
                         "sensitivity of 0 in floating point: use a larger clip")
    settings = {
        "model": "private implicit ALS (DPALS with adaptive weights 1/sqrt(n_u))",
        "alpha": float(alpha), "n_factors": n_factors, "regularization": regularization, "clip": clip,
        "user_factors": "solved by each user from their own row and the released item factors, clipped to "
                        f"norm {clip:g}; never released",
    }
    return SweepReleases(iterations, sensitivity, shares, settings)


def plan_private_ials(
    epsilon: float,
    delta: float,
    iterations: int,
    *,
    alpha: float,
    n_factors: int,
    regularization: float = 1.0,
    shares: Mapping[str, float] | None = None,
    clip: float = DEFAULT_CLIP,
) -> ReleasePlan:
    """Calibrate the ``3 T`` Gaussian releases of ``T`` private sweeps alone to ``(epsilon, delta)`` exactly.

    :func:`~dptensor.models.recommend.release_plan.recommender_guarantee` of the ``"ials"`` release
    (:func:`ials_sweeps`); its ``sweep_sigmas`` are the noise of each sweep's statistics.
    """
    sweeps = ials_sweeps(iterations, alpha=alpha, n_factors=n_factors, regularization=regularization,
                         shares=shares, clip=clip)
    return recommender_guarantee(("ials",), epsilon, delta, sweeps=sweeps)


def _binary(block: object) -> sp.csr_array:
    """A block's rows as canonical binary CSR (duplicates summed, zeros dropped, indices sorted)."""
    rows = sp.csr_array(block, dtype=np.float64, copy=True)
    rows.sum_duplicates()
    rows.data = (rows.data != 0).astype(np.float64)
    rows.eliminate_zeros()
    rows.sort_indices()
    return rows


def _weighted_terms(rows: sp.csr_array, user_factors: np.ndarray, alpha: float, clip: float
                    ) -> dict[str, np.ndarray]:  # fmt: skip
    """One block's part of ``G``, ``A``, ``b`` (module docstring): factors clipped, weighted ``1/sqrt(n_u)``.

    ``A`` and ``G`` are :func:`~dptensor.models.recommend.ials.item_side_statistics` of the factors
    ``sqrt(w_u) x_u``, ``b`` is ``(1 + alpha) sum_{u: x_ui = 1} w_u x_u``.
    """
    lengths = np.diff(rows.indptr).astype(np.float64)
    weights = np.divide(1.0, np.sqrt(lengths), out=np.zeros_like(lengths), where=lengths > 0)
    factors = clip_factors(user_factors, clip)
    stats = item_side_statistics(rows, factors * np.sqrt(weights)[:, None], alpha=alpha, n_jobs=1)
    targets = (1.0 + alpha) * np.asarray(rows.T @ (factors * weights[:, None]))
    return {"gram": stats.user_gram, "grams": stats.grams, "targets": targets}


def _factors_block(block: object, alpha: float, clip: float, user_factors: np.ndarray
                   ) -> dict[str, np.ndarray]:  # fmt: skip
    """A block's terms for the given user factors."""
    return _weighted_terms(_binary(block), user_factors, alpha, clip)


def _sweep_block(block: object, item_factors: np.ndarray, regularization: float, alpha: float, clip: float
                 ) -> dict[str, np.ndarray]:  # fmt: skip
    """A block's terms of one private sweep: its users solved from the released item factors first."""
    rows = _binary(block)
    users = solve_user_factors(rows, item_factors, regularization=regularization, alpha=alpha)
    return _weighted_terms(rows, users, alpha, clip)


def _psd(matrices: np.ndarray) -> np.ndarray:
    """Each symmetric matrix of a stack projected onto the PSD cone (negative eigenvalues set to 0)."""
    values, vectors = np.linalg.eigh(matrices)
    return (vectors * np.maximum(values, 0.0)[..., None, :]) @ np.swapaxes(vectors, -1, -2)


def _released(sums: Mapping[str, np.ndarray], sigmas: Mapping[str, float], source: NoiseSource,
              n_users: int) -> ItemSideStatistics:  # fmt: skip
    """The noised statistics of one sweep (``G`` and the ``A_i`` projected onto the PSD cone after)."""
    if not isinstance(source, NoiseSource):
        raise TypeError("source must be the NoiseSource returned by dptensor.privacy.begin_release (charge "
                        f"first), got {type(source).__name__}")
    gram = _psd(add_symmetric_frobenius_noise(sums["gram"], sigmas["gram"], source))
    grams = np.zeros_like(sums["grams"])  # alpha = 0: the A_i are exactly zero, not released
    if "grams" in sigmas:
        noisy = [add_symmetric_frobenius_noise(a, sigmas["grams"], source) for a in sums["grams"]]
        grams = _psd(np.stack(noisy))
    targets = source.add_gaussian(sums["targets"], sigmas["targets"])
    return ItemSideStatistics(grams, targets, np.zeros(targets.shape[0]), gram, n_users)


def _blocks(X: object, n_jobs: int | None) -> RowBlocks:
    """Dask input and RowBlocks as they are; the rest checked and split for ``n_jobs`` threads."""
    if isinstance(X, RowBlocks) or is_distributed(X):
        return as_row_blocks(X)
    return as_row_blocks(check_interactions(X), n_jobs=n_jobs)


def private_item_side_statistics(
    X: object, user_factors: np.ndarray, *, alpha: float, sigmas: Mapping[str, float],
    source: NoiseSource, n_jobs: int | None = None, clip: float = DEFAULT_CLIP,
) -> ItemSideStatistics:  # fmt: skip
    """One sweep's released statistics ``G``, ``A_i``, ``b_i`` (module docstring) for given factors, noised.

    ``user_factors`` are clipped here to norm ``clip`` (:func:`clip_factors`) and weighted by
    ``w_u = 1/sqrt(n_u)``; ``sigmas`` must be calibrated to :func:`ials_sensitivities` of the same
    ``alpha`` and ``clip``.
    The item counts are not released (``counts`` is zero: the frequency-scaled ridge is not
    available privately).
    """
    blocks = _blocks(X, n_jobs)
    sums = blocks.map_sum(_factors_block, alpha, clip, row_args=[np.asarray(user_factors, dtype=np.float64)],
                          label="private-ials-statistics")
    return _released(sums, sigmas, source, blocks.n_rows)


def initial_item_factors(n_items: int, n_factors: int, random_state: object = None) -> np.ndarray:
    """``V_0``: ``N(0, 1/k)`` entries from the public ``random_state`` (independent of the data)."""
    rng = check_random_state(random_state)
    return rng.normal(scale=1.0 / math.sqrt(n_factors), size=(n_items, n_factors))


def private_ials_sweeps(
    X: object, item_factors: np.ndarray, *, plan: ReleasePlan, source: NoiseSource,
    n_jobs: int | None = None, history: list | None = None, keep_grams: bool = True,
) -> np.ndarray:  # fmt: skip
    """The released item factors after the private sweeps of ``plan`` (charged already), from ``V_0``.

    Each sweep is one map over the user blocks of ``X`` (a checked matrix, a ``dask.array`` or
    :class:`~dptensor.parallel.RowBlocks`): the users solve their factors from the current item
    factors, and the blocks return the weighted sums, which are noised once with ``plan``'s
    ``sweep_sigmas`` from ``source`` -- the :class:`~dptensor.privacy.NoiseSource` that
    :func:`~dptensor.privacy.begin_release` returned for a guarantee that includes ``plan``'s
    ``"ials"`` release -- and solved for the next item factors (post-processing).

    Parameters
    ----------
    X : scipy sparse matrix, array_like, dask.array or RowBlocks, shape (n_users, n_items)
    item_factors : ndarray, shape (n_items, k)
        ``V_0`` (public: :func:`initial_item_factors`).
    plan : ReleasePlan
        With the ``"ials"`` release (its ``sweeps`` hold the iterations and the settings).
    source : NoiseSource
    n_jobs : int, optional
        Threads for in-memory input.
    history : list, optional
        If given, one :class:`SweepRelease` is appended per sweep: the item factors the users solved
        against (public: ``V_0`` or an earlier release) and the sweep's released statistics, for
        audits (:mod:`~dptensor.models.recommend.audit`); everything in it is public or released.
    keep_grams : bool, default True
        Whether ``history`` keeps each sweep's ``A_i`` stack (``n_items x k x k``); ``False`` keeps
        ``None`` there, so that the history of a large catalogue costs no more than the factors.

    Returns
    -------
    ndarray, shape (n_items, k)
    """
    if not isinstance(plan, ReleasePlan) or plan.sweeps is None:
        raise ValueError("plan must be a ReleasePlan with the 'ials' release (recommender_guarantee(..., "
                         "sweeps=ials_sweeps(...)))")
    settings = plan.sweeps.settings
    regularization, alpha = float(settings["regularization"]), float(settings["alpha"])
    clip = float(settings["clip"])
    blocks = _blocks(X, n_jobs)
    items = np.ascontiguousarray(item_factors, dtype=np.float64)
    if items.shape != (blocks.n_cols, settings["n_factors"]):
        raise ValueError(f"item_factors must have shape {(blocks.n_cols, settings['n_factors'])}, got "
                         f"{items.shape}")
    for _ in range(plan.sweeps.iterations):
        sums = blocks.map_sum(_sweep_block, items, regularization, alpha, clip, label="private-ials-sweep")
        stats = _released(sums, plan.sweep_sigmas, source, blocks.n_rows)
        if history is not None:
            kept = stats if keep_grams else dataclasses.replace(stats, grams=None)
            history.append(SweepRelease(items, kept))
        items = solve_item_factors(stats, regularization=regularization)
    return items


@dataclass(frozen=True)
class SweepRelease:
    """One private sweep as an observer sees it: the public start and the released statistics.

    Attributes
    ----------
    start : ndarray, shape (n_items, k)
        The item factors the users solved against (``V_{t-1}``: public or released).
    statistics : ItemSideStatistics
        The sweep's noised ``G`` (``user_gram``), ``A_i`` (``grams``) and ``b_i`` (``targets``).
    """

    start: np.ndarray
    statistics: ItemSideStatistics


@dataclass(frozen=True)
class PrivateIALS:
    """A private implicit ALS fit: the released item factors and the guarantee.

    ``factors.user_factors`` are the training users' own solves from the final item factors (each
    for that user alone, as in joint DP; empty for Dask input); ``factors.item_factors`` is the
    release.
    """

    factors: IALSFactors
    guarantee: PrivacyGuarantee
    plan: ReleasePlan


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
    clip: float = DEFAULT_CLIP,
    random_state: object = None,
    noise: NoiseLike | NoiseSource = None,
    ledger: Ledger | None = None,
    n_jobs: int | None = None,
) -> PrivateIALS:
    """Implicit ALS whose item factors are ``(epsilon, delta)``-DP under the ``"user"`` relation.

    Plan (public inputs: :func:`plan_private_ials`) -> charge
    (:func:`~dptensor.privacy.begin_release`) -> ``iterations`` private sweeps
    (:func:`private_ials_sweeps`) -> each user's factors from the final item factors. The initial
    item factors are :func:`initial_item_factors` of the public ``random_state``.
    :class:`~dptensor.models.recommend.PrivateRecommender` (``method="ials"``) runs the same sweeps
    within one guarantee with private popularity for the empty rows.

    Returns
    -------
    PrivateIALS
    """
    plan = plan_private_ials(epsilon, delta, iterations, alpha=alpha, n_factors=n_factors,
                             regularization=regularization, shares=shares, clip=clip)
    n_users, n_items = public_shape(X, layout="users x items")
    k = plan.sweeps.settings["n_factors"]
    guarantee, source = begin_release(plan.guarantee, noise, ledger=ledger, description="private iALS")
    rows = None if is_distributed(X) or isinstance(X, RowBlocks) else check_interactions(X)
    data = X if rows is None else rows
    items = private_ials_sweeps(data, initial_item_factors(n_items, k, random_state), plan=plan,
                                source=source, n_jobs=n_jobs)
    users = (np.zeros((0, k)) if rows is None
             else solve_user_factors(rows, items, regularization=plan.sweeps.settings["regularization"],
                                     alpha=plan.sweeps.settings["alpha"]))
    return PrivateIALS(IALSFactors(users, items, plan.sweeps.settings["regularization"],
                                   plan.sweeps.settings["alpha"]), guarantee, plan)
