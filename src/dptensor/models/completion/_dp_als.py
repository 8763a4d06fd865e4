"""DP-ALS: completion offsets and factors from noisy per-row sufficient statistics.

ALS (:mod:`dptensor.models.completion._als`) reads the data only through per-row sufficient
statistics: for row ``r`` of a mode, the Gram matrix ``sum_{e in r} w_e w_e^T`` and the right-hand
side ``sum_{e in r} w_e y_e`` of its ridge regression (``w_e`` the design: the derivative of the
model with respect to the row, extended by a 1 for the row's bias; ``y_e`` the value minus the
offsets of the other modes). The global mean is the same with the one-row design ``w_e = 1``, the
Tucker core with ``w_e = a_i (x) b_j (x) c_k``. DP-ALS releases these statistics with Gaussian
noise, one release per mode and sweep, and solves each row's regression from the noisy ones --
post-processing, so the solve may use any prior (below). This is the sufficient-statistics
perturbation of McSherry & Mironov (2009) and of private ALS (Chien et al. 2021, "Private
Alternating Least Squares"), written for CP and Tucker with offsets.

Two neighbouring relations
--------------------------
``"entry-value"`` -- the value of one observed entry changes within the declared range
``[lo, hi]``; the shape and the set Omega of observed indices are public.
    Every Gram matrix is then a function of public quantities (Omega and the already released
    parameters) and is used exactly. Only the right-hand sides are noised. One entry enters one
    row's right-hand side, as ``w_e y_e`` with ``|y_e - y'_e| <= hi - lo``, so the release's l2
    sensitivity is ``(hi - lo) max_e ||w_e||`` -- a public number.
``"user"`` -- all ratings of one user (one row of mode 0) may change arbitrarily: their number,
their items and days, their values. The shape (number of users, items, days) is public; Omega,
the counts and the number of ratings are not.
    The model is released under *joint* differential privacy (Kearns et al. 2014; Jain, Thakkar &
    Thakurta 2018; Chien et al. 2021, the "billboard" model): the global mean, the item and day
    factors and biases (and the core) are (epsilon, delta)-DP with respect to one user's ratings;
    each user's own row of the user factor and bias is then computed from that user's ratings
    and the released model only. Anything computed for user ``u`` (their row, their predictions)
    therefore reveals nothing about any *other* user beyond the DP release -- but it does depend
    on ``u``'s own ratings, so it must be given to ``u`` alone. Statistics of modes 1 and 2 (and
    the core and the mean) are released with noise on the Gram matrices (upper triangle) *and*
    the right-hand sides. To bound one user's influence, each entry's design ``w_e`` (without the
    bias coordinate) is clipped to norm ``B``, ``y_e`` to ``[-(hi - lo), hi - lo]``, and the
    user's whole contribution to a release (the concatenation over rows of the user's summed
    ``upper(w w^T)`` and ``w y``) is scaled to norm at most ``C`` -- silently, by a factor that
    no output reveals. Replacing a user's ratings then moves the release by at most ``2 C``.
    ``C = sqrt(max_ratings) kappa`` for per-row modes and ``max_ratings kappa`` for one-row
    releases, with ``kappa`` the largest norm of one entry's contribution, so a user with at most
    ``max_ratings`` ratings, each in its own row, is never scaled down.

Noise and accounting
--------------------
Under ``"entry-value"`` the offsets (mean and biases) come from one pattern-weighted Laplace
release of row sums, ``epsilon_o``-DP with ``epsilon_o = budget_split * epsilon`` (all of
``epsilon`` without factors), estimated with a pattern-informed prior
(:mod:`dptensor.models.completion._pattern_offsets`); every later bias update re-solves that
posterior with the released factors' fit, post-processing of the same release.
Every other release ``t`` adds ``N(0, (z_t s_t)^2)`` to each released coordinate, ``s_t`` its
sensitivity; these are adaptively composed Gaussian mechanisms, ``mu``-GDP with
``mu^2 = sum_t 1 / z_t^2`` (Dong, Roth & Su 2022, Corollary 3.3), which is exactly
``(epsilon_g, delta)``-DP for ``mu = 1 / sigma_analytic(epsilon_g, delta)`` (Balle & Wang 2018),
with ``epsilon_g = epsilon - epsilon_o`` (basic composition with the Laplace release) under
``"entry-value"`` and ``epsilon_g = epsilon`` under ``"user"``, where the mean gets
``budget_split`` of ``mu^2`` and the sweeps share the rest equally (a mode with a single row, such
as the day mode of a matrix given as ``(n, m, 1)``, is not released: :func:`plan_releases`).

The solve from noisy statistics
-------------------------------
Each row's parameters get the posterior mean under the prior ``theta ~ N(p, diag(tau^2))`` (``p``
the ridge's anchor, ``tau^2 = sigma_e^2 / lambda``) and the model ``rhs = G theta + e + n``,
``e ~ N(0, sigma_e^2 G)`` (residuals of standard deviation ``sigma_e = (hi - lo) / 4``) and ``n``
the privacy noise: ``theta = p + (G W^-1 G + diag(tau^-2))^-1 G W^-1 (rhs - G p)`` with ``W =
sigma_e^2 G + sigma_n^2 I``. Without privacy noise this is the ridge solution; with it, rows
whose statistics are dominated by the noise shrink to the prior instead of amplifying the noise
(for a bias: ``sum / (n + lambda + sigma_n^2 / (n tau^2))``). A noisy Gram matrix is first projected
onto the positive semi-definite cone, and its noise is counted into ``sigma_n``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numba
import numpy as np
import scipy.linalg
import scipy.sparse

from dptensor.models.completion._als import (
    CompletionParameters,
    ModeIndex,
    anchor_rows,
    assign_mode,
    mode_problem,
    mode_ridge,
    ridge_solve,
)
from dptensor.models.completion._dp_als_plan import DEFAULT_MAX_RATINGS, DpAlsPlan
from dptensor.models.completion._kernels import core_design, mode_design, offsets_at
from dptensor.models.completion._pattern_offsets import (
    laplace_release,
    offsets_posterior,
    pattern_design,
)
from dptensor.privacy import NoiseSource
from dptensor.privacy.mechanisms import add_symmetric_gaussian

#: The spectral start's item rows: the leading eigenvectors times ``SPECTRAL_SCALE sqrt(n_items)``
#: and ``sqrt(lambda_k / lambda_1)`` (so a typical row has about the size of a fitted one; at 7e4
#: users, epsilon 1, means of 2 fits: 0.1 gave 0.9883, 0.2 0.9890, 0.4 1.0001).
SPECTRAL_SCALE = 0.2
#: ``2^-53``, the unit roundoff of float64 (the rounding margin of :func:`bounded_rows`).
_UNIT_ROUNDOFF = 2.0**-53


# ---------------------------------------------------------------------------------------------
# Statistics of one release and their sensitivity
# ---------------------------------------------------------------------------------------------


def unpack_statistics(stats: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``(n_rows, d(d+1)/2 + d)`` released vectors to symmetric Gram matrices and right-hand sides."""
    iu = np.triu_indices(d)
    k = iu[0].shape[0]
    gram = np.zeros((stats.shape[0], d, d))
    gram[:, iu[0], iu[1]] = stats[:, :k]
    gram[:, iu[1], iu[0]] = stats[:, :k]
    return gram, stats[:, k:]


#: Under ``"entry-value"`` an entry's weight in its row's regression is ``min(1, C / ||w_e||)`` with
#: ``C`` this quantile of ``||w_e||`` over the entries (a public number: ``w`` is public), so that a
#: few entries with large designs do not set the noise of every row.
DESIGN_QUANTILE = 0.9


def entry_value_weights(design: np.ndarray) -> tuple[np.ndarray, float]:
    """Weights ``u_e = min(1, C / ||w_e||)`` and ``C`` (:data:`DESIGN_QUANTILE` of the norms)."""
    norms = np.sqrt(np.einsum("nd,nd->n", design, design))
    bound = float(np.quantile(norms, DESIGN_QUANTILE)) if norms.size else 0.0
    weights = np.ones_like(norms)
    over = norms > bound
    weights[over] = bound / norms[over]
    return weights, bound


def entry_value_rhs(
    index: ModeIndex, design: np.ndarray, values: np.ndarray, weights: np.ndarray, bound: float, width: float
) -> tuple[np.ndarray, float]:
    """Weighted right-hand sides ``sum_{e in row} u_e w_e x_e`` and their sensitivity ``width C``.

    Under ``"entry-value"`` one entry's value moves by at most ``width`` and enters exactly one
    row, as ``u_e w_e x_e`` with ``||u_e w_e|| <= C``; ``w`` and ``u`` are public (Omega and
    released parameters).
    """
    return index.sums(design * (weights * values)[:, None]), width * bound


#: Numbers (entries x design width) formed at once by the user-level releases and the users' local
#: rows (about 128 MB of float64): the entries are taken in chunks of whole users, so memory beyond
#: the data does not grow with the number of ratings.
USER_CHUNK_VALUES = 1 << 24


def user_statistics(
    index: ModeIndex,
    design: np.ndarray,
    target: np.ndarray,
    users: np.ndarray,
    *,
    width: float,
    design_bound: float,
    user_bound: float,
    bias_column: bool,
    order: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """``(upper(Gram), rhs)`` per row with each user's contribution bounded; sensitivity ``2 C``.

    The design without its bias coordinate is clipped to norm ``B = design_bound``, the target to
    ``[-width / 2, width / 2]``, and each user's contribution ``V_u`` -- for every row the sum of
    the user's entries' ``(upper(w w^T), w y)`` in that row, concatenated over rows -- is scaled by
    ``min(1, C / ||V_u||)``, ``C = user_bound``. Replacing all of one user's entries moves the sum
    by at most ``||V_u|| + ||V'_u|| <= 2 C``. One compiled pass per user over the entries in
    ``order`` (sorted by user, then row: :func:`user_row_order`; computed if not given) forms the
    norm, a second adds the scaled contributions: memory is the output and the order, whatever
    the number of ratings.
    """
    if order is None:
        order = user_row_order(users, index.rows)
    d = design.shape[1]
    out = np.zeros((index.n_rows, d * (d + 1) // 2 + d))
    n_factor = d - 1 if bias_column else d
    users = np.ascontiguousarray(users, dtype=np.int64)
    rows = np.ascontiguousarray(index.rows, dtype=np.int64)
    design = np.ascontiguousarray(design, dtype=float)
    target = np.ascontiguousarray(target, dtype=float)
    bounds = (width / 2.0, float(design_bound), n_factor, float(user_bound))
    _bounded_user_sums(order, users, rows, design, target, *bounds, out)
    return out, 2.0 * user_bound


def user_row_order(users: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The entries sorted by user, then by row (the order :func:`user_statistics` walks)."""
    return np.lexsort((rows, users)).astype(np.int64)


@numba.njit(nogil=True, cache=True)
def _entry_contribution(design, target, e, half_width, design_bound, n_factor, w, out):  # noqa: ANN001, ANN202
    """``(upper(w w^T), w y)`` of entry ``e`` into ``out`` (design clipped to ``B``, target to +-half)."""
    d = design.shape[1]
    norm2 = 0.0
    for i in range(d):
        w[i] = design[e, i]
        if i < n_factor:
            norm2 += w[i] * w[i]
    if norm2 > design_bound * design_bound:
        factor = design_bound / math.sqrt(norm2)
        for i in range(n_factor):
            w[i] *= factor
    y = min(max(target[e], -half_width), half_width)
    k = 0
    for i in range(d):
        for j in range(i, d):
            out[k] = w[i] * w[j]
            k += 1
    for i in range(d):
        out[k + i] = w[i] * y


@numba.njit(nogil=True, cache=True)
def _bounded_user_sums(  # noqa: ANN202
    order, users, rows, design, target, half_width, design_bound, n_factor, user_bound, out,  # noqa: ANN001
):
    """:func:`user_statistics`'s sums, added to ``out`` (``n_rows x width``)."""
    width = out.shape[1]
    w = np.empty(design.shape[1])
    c = np.empty(width)
    group = np.empty(width)
    n = order.shape[0]
    start = 0
    while start < n:
        user = users[order[start]]
        stop = start
        while stop < n and users[order[stop]] == user:
            stop += 1
        norm2 = 0.0  # ||V_u||^2: the user's per-row sums, squared and added over rows
        p = start
        while p < stop:
            row = rows[order[p]]
            group[:] = 0.0
            while p < stop and rows[order[p]] == row:
                _entry_contribution(design, target, order[p], half_width, design_bound, n_factor, w, c)
                for q in range(width):
                    group[q] += c[q]
                p += 1
            for q in range(width):
                norm2 += group[q] * group[q]
        norm = math.sqrt(norm2)
        scale = user_bound / norm if norm > user_bound else 1.0
        for p in range(start, stop):
            e = order[p]
            _entry_contribution(design, target, e, half_width, design_bound, n_factor, w, c)
            for q in range(width):
                out[rows[e], q] += scale * c[q]
        start = stop


def entry_scale(d_factors: int, bias_column: bool, design_bound: float, residual: float) -> float:
    """``kappa``: the norm of one entry's ``(upper(w w^T), w y)`` at the largest design, ``|y| = residual``.

    ``||upper(w w^T)|| <= ||w w^T||_F = ||w||^2`` and ``||w y|| = ||w|| |y|``, with
    ``||w||^2 <= B^2 (+ 1 for the bias coordinate)``. The user bound ``C`` is a multiple of it
    for a typical residual; the guarantee rests on the clipping to ``C``, not on this value.
    """
    w2 = (design_bound**2 if d_factors else 0.0) + (1.0 if bias_column else 0.0)
    return math.sqrt(w2 * w2 + w2 * residual**2)


# ---------------------------------------------------------------------------------------------
# Solving rows from noisy statistics
# ---------------------------------------------------------------------------------------------


def posterior_rows(
    gram: np.ndarray,
    rhs: np.ndarray,
    ridge: np.ndarray,
    prior: np.ndarray,
    residual_var: float,
    noise_var: np.ndarray | float,
) -> np.ndarray:
    """Posterior mean of every row's ``theta`` from (noisy) statistics (module docstring).

    ``noise_var`` is the variance of the privacy noise on each right-hand-side coordinate (a
    number or one per coordinate); with zero noise this is the ridge solution.
    """
    d = gram.shape[-1]
    noise_var = np.broadcast_to(np.asarray(noise_var, dtype=float), (d,))
    if not np.any(noise_var > 0):
        return ridge_solve(gram, rhs, ridge, prior)
    w = residual_var * gram + np.diag(noise_var)
    # W^-1 G with each row's W and G divided by W's largest entry: the same quotient, but factors
    # that a noisy fit has shrunk towards zero (entries ~1e-158, Grams of denormals) stay finite.
    scale = np.max(np.abs(w), axis=(-2, -1), keepdims=True)
    w_inv_g = np.linalg.solve(w / scale, gram / scale)  # W^-1 G
    system = gram @ w_inv_g + np.diag(ridge / residual_var)
    prior = np.broadcast_to(prior, rhs.shape)
    centred = rhs - np.einsum("rij,rj->ri", gram, prior)
    vector = np.einsum("rji,rj->ri", w_inv_g, centred)  # G W^-1 = (W^-1 G)^T
    return prior + np.linalg.solve(system, vector[..., None])[..., 0]


def psd_projection(gram: np.ndarray) -> np.ndarray:
    """Nearest positive semi-definite matrices (negative eigenvalues set to zero)."""
    vals, vecs = np.linalg.eigh(gram)
    return np.einsum("rij,rj,rkj->rik", vecs, np.maximum(vals, 0.0), vecs)


# ---------------------------------------------------------------------------------------------
# The fit
# ---------------------------------------------------------------------------------------------


@dataclass
class DpAlsSettings:
    """Hyper-parameters of :func:`dp_als` (see :class:`~dptensor.models.TensorCompletion`)."""

    relation: str
    value_range: tuple[float, float]
    reg: float
    reg_bias: float
    reg_core: float
    context_modes: tuple[int, ...]
    offsets: str = "biases"
    max_ratings: int = DEFAULT_MAX_RATINGS
    design_bound: float = 1.0
    bias_iterations: int = 20


class DpAlsFit:
    """State shared by the steps of one DP-ALS fit."""

    def __init__(self, params, indices, values, shape, settings, source) -> None:
        self.params = params
        self.indices = indices
        self.values = values
        self.settings = settings
        self.source = source
        low, high = settings.value_range
        self.width = high - low
        self.centre = 0.5 * (low + high) if settings.offsets != "none" else 0.0
        self.residual_var = (self.width / 4.0) ** 2
        self.shape = shape
        self.anchors = anchor_rows(params)
        self.offsets: tuple[Callable, np.ndarray] | None = None  # the posterior's solve, the release
        self._user_orders: dict[int, np.ndarray] = {}
        self._user_starts: np.ndarray | None = None
        self.noise_stds: list[float] = []

    # -- helpers ---------------------------------------------------------------------------
    def offsets_except(self, mode: int | None) -> np.ndarray:
        """``mu + biases`` of the modes other than ``mode`` at every entry."""
        return offsets_at(self.params.mean, self.params.biases, self.indices, skip_mode=mode)

    def noise(self, stats: np.ndarray, sigma: float) -> np.ndarray:
        self.noise_stds.append(sigma)
        return self.source.add_gaussian(stats, sigma)

    def user_order(self, mode: int | None) -> np.ndarray:
        """The entries sorted by user, then by ``mode``'s row (``None``: one row), computed once."""
        key = -1 if mode is None else mode
        if key not in self._user_orders:
            if mode is None:
                self._user_orders[key] = np.argsort(self.indices[:, 0], kind="stable").astype(np.int64)
            else:
                self._user_orders[key] = user_row_order(self.indices[:, 0], self.indices[:, mode])
        return self._user_orders[key]

    def user_chunks(self, mode: int | None, width: int) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(first user, end user, entries)`` of consecutive users, about :data:`USER_CHUNK_VALUES`
        numbers at ``width`` per entry, covering every user (those without ratings too).

        The entries come in :meth:`user_order` (by user, then by ``mode``'s row), so every chunk
        holds all the entries of its users.
        """
        if self._user_starts is None:
            counts = np.bincount(self.indices[:, 0], minlength=self.shape[0])
            self._user_starts = np.concatenate([[0], np.cumsum(counts)])
        starts, order = self._user_starts, self.user_order(mode)
        step = max(1, USER_CHUNK_VALUES // max(width, 1))
        first, n_users = 0, self.shape[0]
        while first < n_users:
            end = int(np.searchsorted(starts, starts[first] + step, side="right")) - 1
            end = min(max(end, first + 1), n_users)
            yield first, end, order[starts[first] : starts[end]]
            first = end

    def one_row_ridge(self) -> tuple[np.ndarray, np.ndarray]:
        return np.array([self.settings.reg_bias]), np.zeros(1)


def dp_als(
    params: CompletionParameters,
    indices: np.ndarray,
    values: np.ndarray,
    shape: tuple[int, int, int],
    plan: DpAlsPlan,
    settings: DpAlsSettings,
    source: NoiseSource,
    progress: Callable[[int], object] | None = None,
) -> list[float]:
    """Run the releases of ``plan`` from ``params`` (updated in place); return each release's noise std.

    ``values`` must already be clipped into ``settings.value_range``; the mean starts at the
    range's centre when there are offsets. Under ``"user"`` the user rows are computed locally
    before every sweep and at the end. ``progress(1)`` is called after each release. The
    returned list has one entry per release: the Gaussian noise std, or for the Laplace release
    its scale ``1 / epsilon_o`` (l1 sensitivity 1).
    """
    fit = DpAlsFit(params, indices, values, shape, settings, source)
    params.mean = fit.centre
    user = settings.relation == "user"
    for step, z in zip(plan.steps, plan.multipliers, strict=True):
        if step == "offsets":
            entry_offsets(fit, 1.0 / z)
        elif step == "mean":
            user_mean(fit, z)
        elif step == "spectrum":
            spectral_start(fit, z)
        elif step == "core":
            core_release(fit, z, user)
        else:
            mode = int(step)
            if user and mode == 1:
                local_user_rows(fit)
            (user_mode if user else entry_mode)(fit, mode, z)
        if progress is not None:  # one tick per release: the plan is public
            progress(1)
    if user:
        local_user_rows(fit)
    return fit.noise_stds


# -- entry-value --------------------------------------------------------------------------------


def entry_offsets(fit: DpAlsFit, epsilon: float) -> None:
    """The mean and biases from one pattern-weighted Laplace release (``epsilon``-DP, l1 sensitivity 1)."""
    design = pattern_design(fit.indices, fit.shape, fit.width, fit.params.biases is not None)
    released = laplace_release(design, fit.values - fit.centre, epsilon, fit.source)
    fit.noise_stds.append(1.0 / epsilon)
    solve = offsets_posterior(
        design,
        epsilon=epsilon,
        residual_var=fit.residual_var,
        bias_var=fit.residual_var / max(fit.settings.reg_bias, 1e-6),  # reg_bias = 0: a flat prior
        mean_var=fit.width**2,
    )
    fit.offsets = (solve, released)
    entry_offsets_given(fit, np.zeros(fit.values.shape[0]))


def entry_offsets_given(fit: DpAlsFit, explained: np.ndarray) -> None:
    """Re-estimate the mean and biases from the kept release, given what the factors explain."""
    solve, released = fit.offsets
    mean, biases = solve(released, explained)
    fit.params.mean = fit.centre + mean
    if fit.params.biases is not None:
        fit.params.biases = list(biases)


def entry_mode(fit: DpAlsFit, mode: int, z: float) -> None:
    """One mode's factor rows from noisy weighted right-hand sides, then its biases from the kept sums."""
    params = fit.params
    index = ModeIndex(fit.indices[:, mode], fit.shape[mode])
    design = mode_design(params.model, mode, params.core, params.factors, fit.indices)
    weights, bound = entry_value_weights(design)
    noisy_part, sensitivity = entry_value_rhs(
        index, design, fit.values - fit.centre, weights, bound, fit.width
    )
    rhs = fit.noise(noisy_part, z * sensitivity)
    known = fit.offsets_except(None) - fit.centre  # public: released offsets at public entries
    rhs = rhs - index.sums(design * (weights * known)[:, None])
    gram = index.gram(design, weights)
    ridge = np.full(design.shape[1], fit.settings.reg)
    prior = fit.anchors[mode]
    params.factors[mode] = posterior_rows(gram, rhs, ridge, prior, fit.residual_var, fit.noise_stds[-1] ** 2)
    if fit.offsets is not None:
        fitted = CompletionParameters(params.model, params.factors, params.core, 0.0, None)
        entry_offsets_given(fit, fitted.predict(fit.indices))


# -- user ---------------------------------------------------------------------------------------


def _user_bound(fit: DpAlsFit, d_factors: int, bias_column: bool, one_row: bool) -> float:
    kappa = entry_scale(d_factors, bias_column, fit.settings.design_bound, fit.width / 4.0)
    m = fit.settings.max_ratings
    return kappa * (m if one_row else math.sqrt(m))


def _solve_noisy(fit, stats, d, sigma, ridge, prior) -> np.ndarray:
    """Unpack noisy ``(upper(Gram), rhs)``, project the Grams to PSD, solve every row."""
    gram, rhs = unpack_statistics(stats, d)
    largest_prior = float(np.max(np.sum(np.atleast_2d(prior) ** 2, axis=-1)))
    spread = float(np.sum(fit.residual_var / ridge)) + largest_prior
    return posterior_rows(
        psd_projection(gram), rhs, ridge, prior, fit.residual_var, sigma * sigma * (1.0 + spread)
    )


def _chunked_user_statistics(
    fit: DpAlsFit,
    mode: int | None,
    n_rows: int,
    width: int,
    problem: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    *,
    user_bound: float,
    bias_column: bool,
) -> tuple[np.ndarray, float]:
    """:func:`user_statistics` summed over chunks of whole users (:meth:`DpAlsFit.user_chunks`).

    ``problem(entries)`` gives the chunk's design and target; ``mode`` is the released mode whose
    rows the entries fall in (``None``: one row). Each user's scale sees all the user's entries, so
    the sums are those of one call on every entry.
    """
    out = np.zeros((n_rows, width * (width + 1) // 2 + width))
    for _, _, entries in fit.user_chunks(mode, width * (width + 3) // 2):
        if entries.shape[0] == 0:
            continue
        design, target = problem(entries)
        rows = np.zeros(entries.shape[0], dtype=np.int64) if mode is None else fit.indices[entries, mode]
        part, _ = user_statistics(
            ModeIndex(rows, n_rows), design, target, fit.indices[entries, 0], width=fit.width,
            design_bound=fit.settings.design_bound, user_bound=user_bound, bias_column=bias_column,
            order=np.arange(entries.shape[0], dtype=np.int64),
        )
        out += part
    return out, 2.0 * user_bound  # user_statistics' sensitivity, whatever the chunks


def user_mean(fit: DpAlsFit, z: float) -> None:
    """Noisy ``(count, sum (x - c))`` with each user's pair bounded; ``mu`` from their ratio."""
    stats, sensitivity = _chunked_user_statistics(
        fit, None, 1, 1, lambda entries: (np.ones((entries.shape[0], 1)), fit.values[entries] - fit.centre),
        user_bound=_user_bound(fit, 0, True, True), bias_column=True,
    )
    sigma = z * sensitivity
    ridge, prior = fit.one_row_ridge()
    theta = _solve_noisy(fit, fit.noise(stats, sigma), 1, sigma, ridge, prior)
    fit.params.mean = fit.centre + float(theta[0, 0])


def user_mode(fit: DpAlsFit, mode: int, z: float) -> None:
    """One item-side mode's rows (factor and bias) from noisy Gram matrices and right-hand sides."""
    params = fit.params
    bias_column = params.biases is not None
    ridge, prior = mode_ridge(params, mode, fit.settings, fit.anchors)
    d = ridge.shape[0]
    d_factors = d - (1 if bias_column else 0)
    stats, sensitivity = _chunked_user_statistics(
        fit, mode, fit.shape[mode], d,
        lambda entries: mode_problem(params, mode, fit.indices[entries], fit.values[entries]),
        user_bound=_user_bound(fit, d_factors, bias_column, False), bias_column=bias_column,
    )
    sigma = z * sensitivity
    assign_mode(params, mode, _solve_noisy(fit, fit.noise(stats, sigma), d, sigma, ridge, prior))


def spectrum_bound(fit: DpAlsFit) -> float:
    """``C_s = sqrt(max_ratings) (hi - lo) / 4``: the bound on a user's vector in :func:`spectral_start`."""
    return math.sqrt(fit.settings.max_ratings) * fit.width / 4.0


def user_item_covariance(fit: DpAlsFit, bound: float) -> np.ndarray:
    """``sum_u x_u x_u^T`` (items x items), each ``||x_u|| <= C_s = bound``; sensitivity ``sqrt(2) C_s^2``.

    ``x_u`` holds, for each item, the sum of user ``u``'s residuals ``clip(x_e - mu, +-(hi - lo) / 2)``
    on it (over days), less the mean of those residuals over the user's ratings (so that a user's
    own offset does not enter), scaled to norm at most ``C_s`` (:func:`bounded_rows`, with a rounding
    margin). Replacing one user's ratings
    changes one term ``a a^T`` into ``b b^T``, and ``||a a^T - b b^T||_F^2 = ||a||^4 + ||b||^4 -
    2 (a^T b)^2 <= 2 C_s^4``. Chunks of whole users (:meth:`DpAlsFit.user_chunks`).
    """
    n_items = fit.shape[1]
    half = fit.width / 2.0
    covariance = np.zeros((n_items, n_items))
    for first, end, entries in fit.user_chunks(None, 1):
        if entries.shape[0] == 0:
            continue
        users = fit.indices[entries, 0] - first
        n_users = end - first
        residual = np.clip(fit.values[entries] - fit.params.mean, -half, half)
        counts = np.bincount(users, minlength=n_users)
        own = np.bincount(users, weights=residual, minlength=n_users) / np.maximum(counts, 1)
        rows = scipy.sparse.csr_matrix(
            (residual - own[users], (users, fit.indices[entries, 1])), shape=(n_users, n_items)
        )  # duplicates (one item on several days) are summed
        rows.sum_duplicates()
        rows = bounded_rows(rows, bound)
        covariance += (rows.T @ rows).toarray()
    return covariance


def bounded_rows(rows: scipy.sparse.csr_matrix, bound: float) -> scipy.sparse.csr_matrix:
    """``rows`` with each row scaled to norm at most ``bound (1 - margin)``, so at most ``bound``.

    The computed norm of a row of ``m`` entries may err by about ``m`` units of rounding, so a row
    scaled to a computed norm of exactly ``bound`` could exceed it by an ulp (and ``sqrt(2)
    bound^2`` with it, issue 53): the target is ``bound (1 - margin)``, ``margin = max(1e-9, 4 m
    2^-53)``, as in the refinement kernel (:mod:`dptensor.models.topics.refinement`).
    """
    rows = scipy.sparse.csr_matrix(rows, dtype=np.float64, copy=True)
    norms = np.sqrt(np.asarray(rows.multiply(rows).sum(axis=1)).ravel())
    margin = np.maximum(1e-9, 4.0 * np.diff(rows.indptr) * _UNIT_ROUNDOFF)
    target = bound * (1.0 - margin)
    over = norms > target
    scale = np.ones(rows.shape[0])
    scale[over] = target[over] / norms[over]
    rows.data *= np.repeat(scale, np.diff(rows.indptr))
    return rows


def covariance_release(fit: DpAlsFit, z: float) -> np.ndarray:
    """:func:`user_item_covariance` with Gaussian noise of std ``z sqrt(2) C_s^2`` on its upper triangle.

    The released numbers are the upper triangle (diagonal included); the lower one mirrors it
    (:func:`~dptensor.privacy.mechanisms.add_symmetric_gaussian`, the "unique" convention).
    """
    bound = spectrum_bound(fit)
    sigma = z * math.sqrt(2.0) * bound * bound
    fit.noise_stds.append(sigma)
    return add_symmetric_gaussian(user_item_covariance(fit, bound), sigma, noise=fit.source)


def spectral_start(fit: DpAlsFit, z: float) -> None:
    """Item factors from the leading eigenvectors of the noisy covariance of users' residual vectors.

    The release :func:`covariance_release`, then post-processing: the item factor (and the anchor
    its rows shrink to in the sweeps) is the top ``rank`` eigenvectors, times ``SPECTRAL_SCALE
    sqrt(n_items)`` and ``sqrt(lambda_k / lambda_1)`` (clipped to ``[0.1, 1]``), in place of the
    data-independent start from which a few noisy sweeps cannot find the items' subspace (issue 38:
    at 7e4 MovieLens-100K-shaped users and epsilon 1, held-out-user RMSE 0.989 against 1.002).
    This is the "Analyze Gauss" covariance release (Dwork, Talwar, Thakurta & Zhang 2014) of the
    users' rating vectors; the users' rows then come from each user's own ratings (joint DP), as
    after every release.
    """
    params = fit.params
    noisy = covariance_release(fit, z)
    n_items, rank = noisy.shape[0], params.factors[1].shape[1]
    values, vectors = scipy.linalg.eigh(noisy, subset_by_index=(n_items - rank, n_items - 1))
    values, vectors = values[::-1], vectors[:, ::-1]
    weights = np.sqrt(np.clip(values / values[0], 0.01, 1.0)) if values[0] > 0 else np.ones(rank)
    start = vectors * weights * (SPECTRAL_SCALE * math.sqrt(n_items))
    params.factors[1] = start
    fit.anchors[1] = start.copy()


def local_user_rows(fit: DpAlsFit) -> None:
    """Each user's row and bias from their own ratings and the released model (joint DP).

    Users are solved in chunks of whole users (:meth:`DpAlsFit.user_chunks`): each row's ridge
    regression reads that user's ratings only, so the rows are those of one solve over everyone.
    """
    params = fit.params
    if params.factors is None and params.biases is None:
        return
    ridge, prior = mode_ridge(params, 0, fit.settings, fit.anchors)
    rank = 0 if params.factors is None else params.factors[0].shape[1]
    for first, end, entries in fit.user_chunks(None, ridge.shape[0] * (ridge.shape[0] + 1)):
        design, target = mode_problem(params, 0, fit.indices[entries], fit.values[entries])
        index = ModeIndex(fit.indices[entries, 0] - first, end - first)
        theta = ridge_solve(index.gram(design), index.sums(design * target[:, None]), ridge, prior[first:end])
        if params.factors is not None:
            params.factors[0][first:end] = theta[:, :rank]
        if params.biases is not None:
            params.biases[0][first:end] = theta[:, rank]


# -- Tucker core ----------------------------------------------------------------------------------


def core_release(fit: DpAlsFit, z: float, user: bool) -> None:
    """The core's ridge regression from noisy statistics (a one-row release with ``w_e = a (x) b (x) c``)."""
    params = fit.params
    p, q, t = params.core.shape
    ridge, prior = np.full(p * q * t, fit.settings.reg_core), np.zeros(p * q * t)
    if user:

        def problem(entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            chunk = fit.indices[entries]
            known = offsets_at(params.mean, params.biases, chunk, skip_mode=None)
            return core_design(params.factors, chunk), fit.values[entries] - known

        stats, sensitivity = _chunked_user_statistics(
            fit, None, 1, p * q * t, problem, user_bound=_user_bound(fit, p * q * t, False, True),
            bias_column=False,
        )
        sigma = z * sensitivity
        theta = _solve_noisy(fit, fit.noise(stats, sigma), p * q * t, sigma, ridge, prior)
    else:
        n = fit.values.shape[0]
        design = core_design(params.factors, fit.indices)
        index = ModeIndex(np.zeros(n, dtype=np.int64), 1)
        known = fit.offsets_except(None)
        weights, bound = entry_value_weights(design)
        noisy_part, sensitivity = entry_value_rhs(
            index, design, fit.values - fit.centre, weights, bound, fit.width
        )
        rhs = fit.noise(noisy_part, z * sensitivity) - index.sums(
            design * (weights * (known - fit.centre))[:, None]
        )
        theta = posterior_rows(
            index.gram(design, weights), rhs, ridge, prior, fit.residual_var, fit.noise_stds[-1] ** 2
        )
    params.core = theta[0].reshape(p, q, t)


__all__ = ["DpAlsSettings", "dp_als"]
