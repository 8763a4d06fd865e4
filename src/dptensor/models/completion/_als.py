"""Alternating least squares over the observed entries: CP / Tucker completion with offsets.

The model is

    x_hat_ijk = mu + beta1_i + beta2_j + beta3_k + [[A, B, C]]_ijk     (CP)
    x_hat_ijk = mu + beta1_i + beta2_j + beta3_k + [[G; A, B, C]]_ijk  (Tucker)

fitted to the observed entries ``Omega`` by minimising

    sum_Omega (x - x_hat)^2 + lambda sum_m ||F_m - P_m||_F^2 + lambda_b sum_m ||beta_m||^2
        + lambda_g ||G||_F^2,

objective (6) / (7) of Wei, Li, Mao & Wang with a global mean ``mu`` (unpenalised) and per-mode
biases added. ``P_m`` is zero (the paper's ridge) except for *context modes*, whose rows are shrunk
towards the all-ones row: a context (a day, say) then modulates a user-item interaction instead of
being required to carry it, and a heavily regularised context mode turns the model into biased
matrix factorisation of the other two modes.

With every factor but one fixed the objective is a ridge regression per row of that factor: for
row ``i`` of mode ``m``, ``(sum_{e in row i} w_e w_e^T + Lambda) theta_i = sum_{e in row i} w_e y_e
+ Lambda p``, where ``w_e`` is the derivative of ``x_hat_e`` with respect to the row (extended by
a 1 for the row's bias), ``y_e`` the value minus the offsets of the other modes, and
``theta_i = (row, bias)``. The Gram matrices and right-hand sides of *all* rows are accumulated in
one compiled pass over the entries (:mod:`~dptensor.models.completion._kernels`; for CP the design
``w_e`` is formed entry by entry, so nothing of size ``n x d`` or ``n x d^2`` is built) and solved as
one batched ``numpy.linalg.solve`` -- no Python loop over entries or rows. For Tucker the core is the ridge
regression of the residuals on ``a_i (x) b_j (x) c_k``. Each such step cannot increase the
objective, so ALS decreases it monotonically (block coordinate descent, e.g. Kolda & Bader 2009,
Section 3.4, and Zhou et al. 2008 for the per-row form on ratings).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
import scipy.sparse as sp

from dptensor.models.completion._kernels import (
    core_design,
    core_gradient,
    cp_normal_equations,
    design_normal_equations,
    entry_blocks,
    factor_values,
    mode_design,
    offsets_at,
    predict_entries,
)

#: Entries per chunk when outer products are formed (about 2 MB of float64: the outer products stay in cache).
CHUNK_VALUES = 1 << 18


#: Up to this many columns, per-row sums are one ``numpy.bincount`` per column (fastest for thin
#: designs); wider ones use one sparse-times-dense product.
BINCOUNT_COLUMNS = 128


class ModeIndex:
    """The observed entries of one mode grouped by row (for per-row sums).

    Parameters
    ----------
    rows : ndarray of int, shape (n,)
        The row of each entry in this mode.
    n_rows : int
        Number of rows of the mode (the tensor dimension).
    """

    def __init__(self, rows: np.ndarray, n_rows: int) -> None:
        self.rows = np.ascontiguousarray(rows, dtype=np.int64)
        self.n_rows = n_rows
        self.counts = np.bincount(self.rows, minlength=n_rows)
        self._matrix: sp.csc_matrix | None = None
        self._blocks: tuple | None = None

    @property
    def blocks(self) -> tuple:
        """The blocks of entries of the compiled sums (:func:`._kernels.entry_blocks`)."""
        if self._blocks is None:
            self._blocks = entry_blocks(self.rows, self.n_rows)
        return self._blocks

    @property
    def matrix(self) -> sp.csc_matrix:
        """The ``n_rows x n`` 0/1 matrix that sums entries into rows (built on first use)."""
        if self._matrix is None:
            n = self.rows.shape[0]
            self._matrix = sp.csc_matrix((np.ones(n), (self.rows, np.arange(n))), shape=(self.n_rows, n))
        return self._matrix

    def sums(self, contributions: np.ndarray) -> np.ndarray:
        """``sum_{e in row} contributions[e]`` for every row: ``(n, D)`` to ``(n_rows, D)``."""
        width = contributions.shape[1]
        if width <= BINCOUNT_COLUMNS:
            columns = np.ascontiguousarray(contributions.T)
            out = np.empty((width, self.n_rows))
            for col in range(width):
                out[col] = np.bincount(self.rows, weights=columns[col], minlength=self.n_rows)
            return out.T
        return np.asarray(self.matrix @ contributions)

    def normal_equations(
        self, design: np.ndarray, target: np.ndarray, weights: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``sum_{e in row} weights_e w_e w_e^T`` and ``sum_{e in row} w_e y_e`` for every row.

        One compiled pass over the entries
        (:func:`~dptensor.models.completion._kernels.design_normal_equations`).
        """
        return design_normal_equations(self.rows, design, target, self.n_rows, weights, self.blocks)

    def gram(self, design: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """``sum_{e in row} weights_e w_e w_e^T`` for every row, shape ``(n_rows, d, d)``."""
        return self.normal_equations(design, np.zeros(design.shape[0]), weights)[0]


def ridge_solve(gram: np.ndarray, rhs: np.ndarray, ridge: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """Solve ``(gram_r + diag(ridge)) theta_r = rhs_r + ridge * prior`` for every row ``r`` at once."""
    d = gram.shape[-1]
    system = gram + np.eye(d) * ridge[..., None, :] if ridge.ndim > 1 else gram + np.diag(ridge)
    return np.linalg.solve(system, (rhs + ridge * prior)[..., None])[..., 0]


def core_normal_equations(
    factors: list, indices: np.ndarray, target: np.ndarray, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Gram matrix and right-hand side of the Tucker core's least squares (``vec(G)`` unknown).

    The design of entry ``e`` is ``z_e = a_i (x) b_j (x) c_k`` (length ``p q t``), so the Gram
    matrix ``sum_e w_e z_e z_e^T`` has Kronecker structure: grouping the entries by their index
    ``g`` in the mode with the fewest distinct indices (say mode 0),
    ``sum_e w_e z_e z_e^T = sum_g (a_g a_g^T) (x) H_g`` with ``H_g = sum_{e in g} w_e y_e y_e^T``,
    ``y_e = b_j (x) c_k``. That costs ``n (qt)^2 + G p^2 (qt)^2`` operations instead of
    ``n (pqt)^2`` -- about ``p^2`` times fewer (25x for rank 5 on MovieLens-100K). When the groups'
    ``H_g`` would not fit in :data:`CHUNK_VALUES` numbers per group batch, or there are more groups
    than entries per group, the products ``z_e`` are formed directly in chunks.
    """
    ranks = [f.shape[1] for f in factors]
    size = ranks[0] * ranks[1] * ranks[2]
    n = target.shape[0]
    distinct = [np.unique(indices[:, m]).size for m in range(3)]
    mode = int(np.argmin(distinct))
    inner = size // ranks[mode]
    if distinct[mode] * inner * inner > 16 * CHUNK_VALUES or distinct[mode] * 8 > n:
        return _core_normal_equations_direct(factors, indices, target, weights)
    others = [m for m in range(3) if m != mode]
    order = np.argsort(indices[:, mode], kind="stable")
    keys = indices[order, mode]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(keys)) + 1])
    ends = np.concatenate([starts[1:], [n]])
    first, second = (factors[m][indices[order, m]] for m in others)
    design = (first[:, :, None] * second[:, None, :]).reshape(n, inner)  # y_e, n x (inner)
    weighted = design if weights is None else design * weights[order, None]
    blocks = np.empty((starts.size, inner, inner))
    for g, (lo, hi) in enumerate(zip(starts, ends, strict=True)):
        blocks[g] = weighted[lo:hi].T @ design[lo:hi]
    outer = factors[mode][keys[starts]]  # a_g, groups x r_mode
    gram = np.einsum("ga,gb,gxy->axby", outer, outer, blocks, optimize=True)
    rhs = outer.T @ np.add.reduceat(weighted * target[order, None], starts, axis=0)  # r_mode x inner
    # back from (mode, others...) to the (0, 1, 2) order of vec(G)
    grouped = [ranks[mode], ranks[others[0]], ranks[others[1]]]
    back = np.argsort([mode, *others])
    gram = gram.reshape(grouped + grouped).transpose([*back, *(3 + back)]).reshape(size, size)
    rhs = rhs.reshape(grouped).transpose(back).reshape(size)
    return gram, rhs


def _core_normal_equations_direct(
    factors: list, indices: np.ndarray, target: np.ndarray, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`core_normal_equations` forming ``z_e`` in chunks of at most :data:`CHUNK_VALUES` numbers."""
    p, q, t = (f.shape[1] for f in factors)
    size = p * q * t
    gram = np.zeros((size, size))
    rhs = np.zeros(size)
    step = max(1, CHUNK_VALUES // size)
    for lo in range(0, target.shape[0], step):
        z = core_design(factors, indices[lo : lo + step])
        zw = z if weights is None else z * weights[lo : lo + step, None]
        gram += zw.T @ z
        rhs += zw.T @ target[lo : lo + step]
    return gram, rhs


@dataclass
class CompletionParameters:
    """What a fitted completion model holds: factors (or none), core, global mean, biases."""

    model: str
    factors: list | None
    core: np.ndarray | None
    mean: float = 0.0
    biases: list | None = None
    #: the rows the ridge shrinks each factor towards (context modes: their starting rows)
    anchors: list | None = None

    def predict(self, indices: np.ndarray) -> np.ndarray:
        """``mu + biases + [[...]]`` at the entries (unclipped)."""
        return predict_entries(self.model, self.core, self.factors, self.mean, self.biases, indices)

    def copy(self) -> CompletionParameters:
        return copy.deepcopy(self)


@dataclass
class AlsSettings:
    """Hyper-parameters of :func:`fit_als` (see :class:`~dptensor.models.TensorCompletion`)."""

    reg: float
    reg_bias: float
    reg_core: float
    context_modes: tuple[int, ...]
    max_iter: int
    tol: float
    n_iter_no_change: int = 3
    value_range: tuple[float, float] | None = None


@dataclass
class AlsResult:
    """Fitted parameters and the per-sweep record of :func:`fit_als`."""

    params: CompletionParameters
    n_iter: int
    train_rmse: list = field(default_factory=list)
    validation_rmse: list = field(default_factory=list)
    objective: list = field(default_factory=list)
    best_iter: int = 0
    converged: bool = False


def anchor_rows(params: CompletionParameters) -> list[np.ndarray] | None:
    """The rows each factor's ridge shrinks towards (``params.anchors``; zeros when unset)."""
    if params.factors is None:
        return None
    if params.anchors is not None:
        return params.anchors
    return [np.zeros_like(f) for f in params.factors]


def initial_parameters(
    model: str,
    shape: tuple[int, int, int],
    ranks: tuple[int, int, int] | None,
    offsets: str,
    context_modes: tuple[int, ...],
    init_scale: float,
    rng: np.random.Generator,
    mean: float = 0.0,
) -> CompletionParameters:
    """Data-independent start: ``init_scale * N(0, 1)`` factors, context modes near one.

    A context mode starts at ``1 + 0.1 init_scale N(0, 1)`` (the small public perturbation breaks the
    symmetry between components) and its ridge pulls each row back to that start; the other
    factors are pulled to zero.

    Tucker's core starts as the superdiagonal of ones plus ``init_scale``-scaled noise, so that the
    starting model is a CP model (as in the SGD's start).
    """
    biases = [np.zeros(s) for s in shape] if offsets == "biases" else None
    if ranks is None:
        return CompletionParameters(model, None, None, mean, biases)
    factors = [init_scale * rng.standard_normal((shape[m], ranks[m])) for m in range(3)]
    for m in context_modes:
        factors[m] = np.ones((shape[m], ranks[m])) + init_scale * 0.1 * rng.standard_normal(
            (shape[m], ranks[m])
        )
    core = None
    if model == "tucker":
        core = init_scale * rng.standard_normal(ranks) / math.sqrt(float(np.prod(ranks)))
        core[np.diag_indices(min(ranks), 3)] += 1.0
    anchors = [factors[m].copy() if m in context_modes else np.zeros_like(factors[m]) for m in range(3)]
    return CompletionParameters(model, factors, core, mean, biases, anchors)


def mode_problem(
    params: CompletionParameters, mode: int, indices: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Design ``w_e`` (with a trailing 1 when the mode has biases) and target ``y_e`` of one mode.

    ``y_e = x_e - mu - (the biases of the other two modes)``, so that the row's unknowns
    ``(row, bias)`` enter linearly.
    """
    n = values.shape[0]
    target = values - offsets_at(params.mean, params.biases, indices, skip_mode=mode)
    parts = []
    if params.factors is not None:
        parts.append(mode_design(params.model, mode, params.core, params.factors, indices))
    if params.biases is not None:
        parts.append(np.ones((n, 1)))
    design = np.hstack(parts) if parts else np.zeros((n, 0))
    return design, target


class RidgeSettings(Protocol):
    """What :func:`mode_ridge` reads: :class:`AlsSettings` and DP-ALS's settings both have it."""

    reg: float
    reg_bias: float


def mode_ridge(
    params: CompletionParameters, mode: int, settings: RidgeSettings, anchors: list | None
) -> tuple[np.ndarray, np.ndarray]:
    """Ridge weights ``(d,)`` and the prior ``(n_rows, d)`` of every row's ``(row, bias)`` for one mode."""
    ridge, prior = [], []
    n_rows = (params.factors[mode] if params.factors is not None else params.biases[mode]).shape[0]
    if params.factors is not None:
        r = params.factors[mode].shape[1]
        ridge.append(np.full(r, settings.reg))
        prior.append(anchors[mode])
    if params.biases is not None:
        ridge.append([settings.reg_bias])
        prior.append(np.zeros((n_rows, 1)))
    return np.concatenate(ridge), np.hstack(prior)


def assign_mode(params: CompletionParameters, mode: int, solution: np.ndarray) -> None:
    """Write a solved ``(row, bias)`` block back into the parameters."""
    width = 0
    if params.factors is not None:
        width = params.factors[mode].shape[1]
        params.factors[mode] = np.ascontiguousarray(solution[:, :width])
    if params.biases is not None:
        params.biases[mode] = np.ascontiguousarray(solution[:, width])


#: Cores with at most this many entries are solved exactly (normal equations); larger ones by
#: conjugate gradients started at the current core (the Gram matrix would cost ``n (pqt)^2``).
DIRECT_CORE_SIZE = 256
CORE_CG_STEPS = 10


class EntryStatistics:
    """ALS's statistics from the observed entries themselves (any size; :class:`ModeIndex` sums).

    The same interface as :class:`~dptensor.models.completion._dense.DenseStatistics`.
    """

    def __init__(self, indices: np.ndarray, values: np.ndarray, shape: tuple[int, int, int]) -> None:
        self.indices = indices
        self.values = values
        self.n = values.shape[0]
        self.index = [ModeIndex(indices[:, m], shape[m]) for m in range(3)]

    def mode_system(self, params: CompletionParameters, mode: int) -> tuple[np.ndarray, np.ndarray]:
        index = self.index[mode]
        if params.model == "cp" or params.factors is None:
            columns = [i.rows for i in self.index]
            return cp_normal_equations(
                mode, params.factors, params.mean, params.biases, columns, self.values, index.n_rows,
                index.blocks,
            )
        return index.normal_equations(*mode_problem(params, mode, self.indices, self.values))

    def residuals(self, params: CompletionParameters) -> np.ndarray:
        return self.values - params.predict(self.indices)

    def _rows(self, params: CompletionParameters) -> list:
        return [np.take(f, self.indices[:, m], axis=0) for m, f in enumerate(params.factors)]

    def _target(self, params: CompletionParameters) -> np.ndarray:
        return self.values - CompletionParameters("cp", None, None, params.mean, params.biases).predict(
            self.indices
        )

    def core_system(self, params: CompletionParameters) -> tuple[np.ndarray, np.ndarray]:
        return core_normal_equations(params.factors, self.indices, self._target(params))

    def core_rhs(self, params: CompletionParameters) -> np.ndarray:
        return core_gradient(self._target(params), *self._rows(params))

    def core_apply(self, params: CompletionParameters, core: np.ndarray) -> np.ndarray:
        fitted = factor_values("tucker", core, params.factors, self.indices)
        return core_gradient(fitted, *self._rows(params))


def make_statistics(indices: np.ndarray, values: np.ndarray, shape: tuple[int, int, int], width: int = 1):
    """Dense-mask statistics for small, not too sparse tensors without repeated cells; else per entry."""
    from dptensor.models.completion._dense import DenseStatistics, use_dense

    if use_dense(shape, values.shape[0], width):
        flat = np.ravel_multi_index(tuple(indices.T), shape)
        if np.unique(flat).shape[0] == flat.shape[0]:
            return DenseStatistics(indices, values, shape)
    return EntryStatistics(indices, values, shape)


def update_core(params: CompletionParameters, stats, reg_core: float) -> None:
    """Ridge regression of the residuals (after offsets) on ``a_i (x) b_j (x) c_k``.

    Exact for small cores; otherwise up to :data:`CORE_CG_STEPS` conjugate-gradient steps on the
    same normal equations from the current core, each two passes over the entries (``n pqt``
    operations). Conjugate gradients decrease the (convex) core objective at every step, so the
    sweep still cannot increase the ALS objective.
    """
    core = params.core
    if core.size <= DIRECT_CORE_SIZE:
        gram, rhs = stats.core_system(params)
        gram[np.diag_indices_from(gram)] += reg_core
        params.core = np.linalg.solve(gram, rhs).reshape(core.shape)
        return

    def normal(v: np.ndarray) -> np.ndarray:
        return stats.core_apply(params, v) + reg_core * v

    x = core.copy()
    r = stats.core_rhs(params) - normal(x)
    p = r.copy()
    rr = float(np.sum(r * r))
    scale = rr
    for _ in range(min(core.size, CORE_CG_STEPS)):
        if rr <= 1e-24 * max(scale, 1e-300):
            break
        ap = normal(p)
        alpha = rr / float(np.sum(p * ap))
        x += alpha * p
        r -= alpha * ap
        rr_new = float(np.sum(r * r))
        p = r + (rr_new / rr) * p
        rr = rr_new
    params.core = x


def update_mean(params: CompletionParameters, stats) -> None:
    """The unpenalised global mean's least-squares value given everything else."""
    params.mean += float(np.mean(stats.residuals(params)))


def als_sweep(
    params: CompletionParameters,
    stats,
    settings: AlsSettings,
    anchors: list | None,
    fit_mean: bool,
) -> None:
    """One pass of block coordinate descent: every mode's rows, then the core, then the mean."""
    for mode in range(3):
        if params.factors is None and params.biases is None:
            break
        gram, rhs = stats.mode_system(params, mode)
        ridge, prior = mode_ridge(params, mode, settings, anchors)
        assign_mode(params, mode, ridge_solve(gram, rhs, ridge, prior))
    if params.core is not None:
        update_core(params, stats, settings.reg_core)
    rebalance(params, settings, anchors)
    if fit_mean:
        update_mean(params, stats)


def rebalance(params: CompletionParameters, settings: AlsSettings, anchors: list | None) -> None:
    """Rescale the factors' columns to the least penalty with the same predictions (in place).

    The model is unchanged by ``a_r -> c_m a_r`` over the modes of a CP component when
    ``prod_m c_m = 1`` (and by ``a_r -> c a_r`` with the core's slice ``r`` divided by ``c`` for
    Tucker), but the ridge ``lambda ||a_r||^2`` is not: it is least when the CP columns have equal
    norms (their geometric mean), and for Tucker when ``c^4 = lambda_g ||G_r||^2 / (lambda ||a_r||^2)``
    mode by mode. ALS moves along this direction only slowly (each sweep rebalances a little), so
    an objective-based stop could end far from the balanced minimum; rebalancing after each sweep
    cannot increase the objective. Only modes shrunk towards zero are rescaled (a context mode's
    rows are pulled to their anchors, where scaling would change the penalty's centre).
    """
    if params.factors is None or anchors is None or settings.reg <= 0:
        return
    free = [m for m in range(3) if not np.any(anchors[m])]
    if params.core is None:
        if len(free) < 2:
            return
        norms = np.stack([np.linalg.norm(params.factors[m], axis=0) for m in free])
        usable = np.all(norms > 0, axis=0)
        if not np.any(usable):
            return
        target = np.exp(np.mean(np.log(np.where(norms > 0, norms, 1.0)), axis=0))
        for i, m in enumerate(free):
            scale = np.where(usable, target / np.where(norms[i] > 0, norms[i], 1.0), 1.0)
            params.factors[m] = params.factors[m] * scale
        return
    reg_core = settings.reg_core
    if reg_core <= 0:
        return
    for m in free:
        columns = np.sum(params.factors[m] ** 2, axis=0)
        slices = np.sum(np.moveaxis(params.core, m, 0) ** 2, axis=tuple(range(1, params.core.ndim)))
        usable = (columns > 0) & (slices > 0)
        scale = np.ones_like(columns)
        scale[usable] = (reg_core * slices[usable] / (settings.reg * columns[usable])) ** 0.25
        params.factors[m] = params.factors[m] * scale
        shape = [1, 1, 1]
        shape[m] = -1
        params.core = params.core / scale.reshape(shape)


def objective(
    params: CompletionParameters, residuals: np.ndarray, settings: AlsSettings, anchors: list | None
) -> float:
    """The penalised least-squares objective that ALS decreases (module docstring)."""
    total = float(residuals @ residuals)
    if params.factors is not None:
        total += settings.reg * sum(
            float(np.sum((f - p) ** 2)) for f, p in zip(params.factors, anchors, strict=True)
        )
    if params.biases is not None:
        total += settings.reg_bias * sum(float(b @ b) for b in params.biases)
    if params.core is not None:
        total += settings.reg_core * float(np.sum(params.core**2))
    return total


def clipped_rmse(truth: np.ndarray, prediction: np.ndarray, value_range: tuple[float, float] | None) -> float:
    """RMSE of predictions clamped into the declared range (when there is one)."""
    if value_range is not None:
        prediction = np.clip(prediction, *value_range)
    return float(np.sqrt(np.mean((truth - prediction) ** 2)))


def fit_als(
    params: CompletionParameters,
    indices: np.ndarray,
    values: np.ndarray,
    shape: tuple[int, int, int],
    settings: AlsSettings,
    *,
    fit_mean: bool,
    validation: tuple[np.ndarray, np.ndarray] | None = None,
    progress: Callable[[int], None] | None = None,
) -> AlsResult:
    """Non-private ALS from ``params`` (updated in place) until convergence or early stopping.

    Without ``validation`` it stops when the objective's relative decrease falls below ``tol``.
    With ``validation = (indices, values)`` (entries held out of ``indices``/``values``) it
    tracks their RMSE after each sweep, stops after ``n_iter_no_change`` sweeps without an
    improvement of at least ``tol`` (relative) and returns the best sweep's parameters.
    """
    stats = entry_statistics(params, indices, values, shape)
    with _blas_threads(stats):
        return _fit_als(params, stats, settings, fit_mean=fit_mean, validation=validation, progress=progress)


def entry_statistics(
    params: CompletionParameters, indices: np.ndarray, values: np.ndarray, shape: tuple[int, int, int]
) -> object:
    """:func:`make_statistics` for the width of ``params``' rows (rank, plus one with biases)."""
    width = (max(f.shape[1] for f in params.factors) if params.factors is not None else 0) + (
        1 if params.biases is not None else 0
    )
    return make_statistics(indices, values, shape, max(width, 1))


def _blas_threads(stats):
    """One BLAS thread for the dense statistics' small products (threads cost more than they save)."""
    from dptensor.models.completion._dense import DenseStatistics

    if isinstance(stats, DenseStatistics):
        from threadpoolctl import threadpool_limits

        return threadpool_limits(limits=1, user_api="blas")
    import contextlib

    return contextlib.nullcontext()


def _fit_als(
    params: CompletionParameters,
    stats,
    settings: AlsSettings,
    *,
    fit_mean: bool,
    validation: tuple[np.ndarray, np.ndarray] | None,
    progress: Callable[[int], None] | None,
    early_stop: bool = True,
) -> AlsResult:
    """:func:`fit_als` on built statistics; ``early_stop=False`` only records the validation RMSE."""
    anchors = anchor_rows(params)
    result = AlsResult(params=params, n_iter=0)
    best, best_score, stale = params.copy(), math.inf, 0
    previous = objective(params, stats.residuals(params), settings, anchors)
    for sweep in range(1, settings.max_iter + 1):
        als_sweep(params, stats, settings, anchors, fit_mean)
        result.n_iter = sweep
        resid = stats.residuals(params)
        current = objective(params, resid, settings, anchors)
        result.objective.append(current)
        result.train_rmse.append(float(np.sqrt(np.mean(resid**2))))
        if progress is not None:
            progress(1)  # one more sweep (the callback counts steps)
        if not math.isfinite(current):
            raise FloatingPointError("ALS diverged (the objective is not finite); raise reg")
        if validation is not None:
            score = clipped_rmse(validation[1], params.predict(validation[0]), settings.value_range)
            result.validation_rmse.append(score)
        if validation is not None and early_stop:
            if score < best_score * (1.0 - settings.tol):
                best, best_score, stale, result.best_iter = params.copy(), score, 0, sweep
            else:
                stale += 1
                if stale >= settings.n_iter_no_change:
                    result.converged = True
                    break
        elif previous - current <= settings.tol * max(abs(previous), 1e-300):
            result.converged = True
            result.best_iter = sweep
            break
        previous = current
    if validation is not None and early_stop:
        result.params = best
    else:
        result.best_iter = result.n_iter
    return result


#: The regularisation grid of ``reg="auto"``: multiples of ``std(values)^(4/3)`` (the scale at
#: which ``lambda ||F||^2`` weighs as much as the squared error when the data are rescaled).
REG_PATH = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0)
#: Where the search starts (an index into :data:`REG_PATH`).
REG_START = 4
#: The warm-started fits along the path stop after this many sweeps that improve the validation
#: RMSE by less than ``tol`` (relative): they only rank the penalties, the refit converges.
PATH_NO_CHANGE = 1


@dataclass
class PathResult:
    """Outcome of :func:`fit_als_path`: the refitted model and the validation scores of the grid."""

    result: AlsResult
    reg: float
    path: list


def fit_als_path(
    params: CompletionParameters,
    indices: np.ndarray,
    values: np.ndarray,
    shape: tuple[int, int, int],
    settings: AlsSettings,
    *,
    fit_mean: bool,
    validation_mask: np.ndarray,
    tie_bias: bool,
    tie_core: bool,
    n_worse: int = 1,
    progress: Callable[[int], None] | None = None,
) -> PathResult:
    """``reg`` chosen on a validation split by a walk along :data:`REG_PATH`, then a refit on all entries.

    **Walk.** It starts at a moderate ``lambda`` (:data:`REG_START`), fitted from ``params``, and
    goes down, then up, each direction stopping after ``n_worse`` values without a better validation
    RMSE. Each fit is warm-started from its neighbour's on the path (continuation: neighbouring
    penalties have close solutions) and early-stopped on the held-out entries (``validation_mask``,
    drawn by the caller from the public ``random_state``) at the first sweep that improves their
    RMSE by less than ``tol`` (relative; :data:`PATH_NO_CHANGE`); the first fit, from the random
    start, stops after ``n_iter_no_change`` such sweeps. A warm-started penalty is scored by its
    *last* sweep, its own stopping point (scoring its best sweep, still near its neighbour's
    solution, let a penalty three times too strong win: Tucker rank 5 on MovieLens-100K, 0.9627
    against 0.9518). (Starting at either end is fragile: a large ``lambda`` shrinks every factor to
    the zero point, which ALS cannot leave, and a tiny one can settle in a poor over-fitted solution.)

    **Converged choice.** Early-stopped scores favour weak penalties, which over-fit later: at
    2·10⁵ MovieLens-shaped users the walk's 112 scored best after two sweeps, and its fit run to
    convergence predicted held-out users with RMSE 0.9708 against 0.9499 for 1122. So the walk's
    choice is then fitted to convergence (``tol`` on the objective) and so are its neighbours,
    upwards while a stronger penalty is preferred, else downwards, each warm-started from the
    current choice's converged fit. A stronger penalty is preferred only when its validation
    squared errors are lower than the weaker one's by more than one standard error of their paired
    difference: between penalties the split cannot tell apart the weaker one is kept (measured on
    noisy synthetic tensors and on MovieLens-100K ``ua``: of two penalties the split could not tell
    apart, the stronger predicted the test entries worse). The chosen ``lambda`` is refitted on
    every entry from its converged validation fit until the objective converges.
    ``tie_bias``/``tie_core`` set ``reg_bias``/``reg_core`` equal to ``reg``. The training
    entries' statistics are built once.
    """
    train, held = ~validation_mask, validation_mask
    scale = float(np.std(values)) ** (4.0 / 3.0) or 1.0
    validation = (indices[held], values[held])
    stats = entry_statistics(params, indices[train], values[train], shape)
    path: list[dict] = []
    fits: dict[int, tuple] = {}

    def penalty(position: int) -> AlsSettings:
        reg = REG_PATH[position] * scale
        return replace(
            settings,
            reg=reg,
            reg_bias=reg if tie_bias else settings.reg_bias,
            reg_core=reg if tie_core else settings.reg_core,
        )

    def run(position: int, start: CompletionParameters, warm: bool) -> float:
        step = penalty(position)
        stopping = replace(step, n_iter_no_change=PATH_NO_CHANGE)
        fitted = _fit_als(start.copy(), stats, stopping if warm else step, fit_mean=fit_mean,
                          validation=validation, progress=progress)
        scores = fitted.validation_rmse
        score = (scores[-1] if warm else min(scores)) if scores else math.inf
        path.append({"reg": step.reg, "validation_rmse": score, "n_iter": fitted.n_iter, "converged": False})
        fits[position] = (score, fitted.params, step)
        return score

    def settle(position: int, start: CompletionParameters) -> float:
        step = penalty(position)
        fitted = _fit_als(start.copy(), stats, step, fit_mean=fit_mean, validation=validation,
                          progress=progress, early_stop=False)
        score = fitted.validation_rmse[-1] if fitted.validation_rmse else math.inf
        path.append({"reg": step.reg, "validation_rmse": score, "n_iter": fitted.n_iter, "converged": True})
        settled[position] = (score, fitted.params, step)
        return score

    def squared_errors(position: int) -> np.ndarray:
        predicted = settled[position][1].predict(validation[0])
        if settings.value_range is not None:
            predicted = np.clip(predicted, *settings.value_range)
        return (predicted - validation[1]) ** 2

    def preferred(low: int, high: int) -> int:
        """The weaker penalty ``low`` unless ``high`` is better by more than one standard error of
        the paired difference of the validation entries' squared errors."""
        difference = squared_errors(high) - squared_errors(low)
        error = difference.std(ddof=1) / math.sqrt(difference.size) if difference.size > 1 else 0.0
        return high if difference.mean() < -error else low

    settled: dict[int, tuple] = {}
    with _blas_threads(stats):
        run(REG_START, params, warm=False)
        for direction in (-1, 1):
            best, worse, position = fits[REG_START][0], 0, REG_START + direction
            while 0 <= position < len(REG_PATH) and worse < n_worse:
                score = run(position, fits[position - direction][1], warm=True)
                if score < best:
                    best, worse = score, 0
                else:
                    worse += 1
                position += direction
        # the walk's early-stopped scores favour weak penalties (they over-fit later): converge
        # its choice, then its neighbours upwards (else downwards) while they are preferred
        chosen = min(fits, key=lambda k: fits[k][0])
        settle(chosen, fits[chosen][1])
        for direction in (1, -1):
            centre, position = chosen, chosen + direction
            while 0 <= position < len(REG_PATH):
                settle(position, settled[chosen][1])
                if preferred(min(chosen, position), max(chosen, position)) != position:
                    break
                chosen, position = position, position + direction
            if chosen != centre:
                break
    _, start, step = settled[chosen]
    # before the refit builds the statistics of every entry: drop the walk's (the training
    # entries' orderings) and its fits (at 1e6 users the walk and the refit held 17.9 GiB at once)
    stats = None
    fits.clear()
    settled.clear()
    final = fit_als(start, indices, values, shape, step, fit_mean=fit_mean, progress=progress)
    path.sort(key=lambda item: item["reg"])
    return PathResult(final, step.reg, path)
