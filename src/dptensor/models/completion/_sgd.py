"""The SGD family of tensor completion: the paper's SGD and its perturbations, and DP-SGD.

Wei, Li, Mao & Wang, *Applying Differential Privacy to Tensor Completion*, fit objectives (6) (CP)
and (7) (Tucker) by per-entry SGD; :func:`sgd_epochs` runs it in mini-batches (a batch of one is the
sequential algorithm; see the module docstring of :mod:`dptensor.models.completion.estimator`,
"Solvers"). Around it:

* input perturbation (Algorithm 1, :func:`perturb_values`): Laplace noise on every value before a
  solver (SGD or ALS) sees them;
* DP-SGD (``privacy="gradient_dpsgd"``): per-entry clipping of the squared error's gradient over
  all parameters and Gaussian noise on every batch's gradient sum, inside :func:`sgd_epochs`;
* the clipped output perturbation (``privacy="output_clipped"``, :func:`refit_c_clipped`): a
  convex, clipped refit of ``C`` with the other factors fixed, then exponential-norm noise on its
  rows (:func:`noisy_rows`);
* the paper's Algorithms 2 and 3 as written (unproven), whose own steps live in
  :mod:`dptensor.models.completion._paper`.

Every function takes the fit's :class:`~dptensor.models.completion._plan.CompletionPlan` (resolved
options and releases), the public randomness ``rng`` (initialisation, shuffles) and the secret
``source`` of the noise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dptensor.models.completion import _paper
from dptensor.models.completion._als import CompletionParameters
from dptensor.models.completion._biscale import BiScaling
from dptensor.models.completion._kernels import (
    clip_residuals,
    core_gradient,
    directions,
    row_steps,
    scatter_add,
)
from dptensor.models.completion._plan import CompletionPlan
from dptensor.privacy import NoiseSource, exponential_norm_noise

#: DP-SGD takes this fraction of each row's curvature-capped step (the penalty's curvature
#: included), so that the noise of successive steps is averaged rather than replaced.
DP_DAMPING = 0.5


def perturb_values(plan: CompletionPlan, values: np.ndarray, source: NoiseSource) -> np.ndarray:
    """Algorithm 1: ``x' = x + Lap(Delta / epsilon)`` on every observed entry.

    Parameters
    ----------
    plan : CompletionPlan
        Of ``privacy="input"`` or ``"output_clipped"`` (its ``"values"`` release and range).
    values : ndarray of shape (n,)
        The observed values.
    source : NoiseSource
        The secret noise.

    Returns
    -------
    ndarray of shape (n,)
        The perturbed values, clamped back to the range when ``plan.clamp`` (post-processing).
    """
    low, high = plan.input_range
    noisy = source.add_laplace(np.clip(values, low, high), plan.release("values").noise_scale)
    if plan.clamp:
        noisy = np.clip(noisy, low, high)
    return noisy


def offsets_start(model: str, offsets: str, values: np.ndarray, shape: tuple) -> CompletionParameters:
    """Offsets before training: the values' mean (non-private or perturbed values) and zero biases.

    Parameters
    ----------
    model : {"cp", "tucker"}
    offsets : {"none", "mean", "biases"}
    values : ndarray of shape (n,)
        Values the solver may read without a privacy cost.
    shape : tuple of three ints

    Returns
    -------
    CompletionParameters
        Without factors.
    """
    mean = float(np.mean(values)) if offsets in ("mean", "biases") else 0.0
    biases = [np.zeros(s) for s in shape] if offsets == "biases" else None
    return CompletionParameters(model, None, None, mean, biases)


def initial_factors(
    plan: CompletionPlan, shape: tuple, rng: np.random.Generator
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """SGD's data-independent start: ``init_scale * |N(0, 1)|`` factors and a near-diagonal core.

    Parameters
    ----------
    plan : CompletionPlan
        With factors (``plan.ranks`` is not ``None``).
    shape : tuple of three ints
    rng : numpy.random.Generator
        The public randomness.

    Returns
    -------
    factors : list of three ndarrays
    core : ndarray or None
        ``None`` for CP.
    """
    ranks = plan.ranks
    init_scale = 0.5 if plan.init_scale is None else plan.init_scale
    factors = [init_scale * np.abs(rng.standard_normal((shape[m], ranks[m]))) for m in range(3)]
    core = init_scale * rng.standard_normal(ranks) if plan.model == "tucker" else None
    if plan.model == "tucker":
        # keep the initial predictions O(init_scale^3): the core acts like a diagonal at start
        core = core / np.sqrt(float(np.prod(ranks)))
        core[np.diag_indices(min(ranks), 3)] += 1.0
    return factors, core


def fit_sgd(
    plan: CompletionPlan,
    indices: np.ndarray,
    values: np.ndarray,
    train: np.ndarray,
    shape: tuple,
    rng: np.random.Generator,
    source: NoiseSource | None,
    *,
    biscaling: BiScaling | None = None,
    history: list[float] | None = None,
    progress: Any = None,
) -> CompletionParameters:
    """The paper's SGD and its perturbations (and DP-SGD), with offsets when asked for.

    Parameters
    ----------
    plan : CompletionPlan
        With ``solver="sgd"``.
    indices : ndarray of shape (n, 3)
    values : ndarray of shape (n,)
        The true values, clipped into the declared range if there is one (read by DP-SGD and by
        ``"output_clipped"``'s refit; the paper's modes read them through ``train``).
    train : ndarray of shape (n,)
        What SGD fits: the values, or their input perturbation (``"input"``,
        ``"output_clipped"``), bi-scaled when ``plan.offsets == "biscale"``.
    shape : tuple of three ints
    rng : numpy.random.Generator
        The public randomness (initialisation, shuffles).
    source : NoiseSource or None
        The secret noise (``None`` without privacy).
    biscaling : BiScaling, optional
        The bi-scaling fitted to ``train``.
    history : list of float, optional
        Gets the training RMSE of each epoch where it may be computed (:func:`sgd_epochs`).
    progress : callable, optional
        Called with 1 after each epoch.

    Returns
    -------
    CompletionParameters
    """
    factors, core = initial_factors(plan, shape, rng)
    inner = plan.inner_offsets
    mode = plan.privacy
    offs = None
    if mode == "gradient_dpsgd":
        if inner != "none":
            # data-independent start: the declared range's centre, zero biases
            centre = 0.0 if plan.value_range is None else 0.5 * sum(plan.value_range)
            offs = offsets_start(plan.model, inner, np.zeros(1), shape)
            offs.mean = centre if inner in ("mean", "biases") else 0.0
        sgd_epochs(plan, indices, train, factors, core, rng, mode="gradient_dpsgd", source=source,
                   sigma=plan.release("gradient sums").noise_scale, offsets=offs, progress=progress,
                   history=history)
    else:
        # None, "gradient", "output": the offsets are computed from the values (no claim holds);
        # "input", "output_clipped": from the perturbed values (post-processing)
        if inner != "none":
            offs = offsets_start(plan.model, inner, train, shape)
        sgd_epochs(plan, indices, train, factors, core, rng, mode="gradient" if mode == "gradient" else None,
                   source=source, offsets=offs, progress=progress, history=history)
        if mode == "output_clipped":
            # stage 2 reads the true values, shifted/scaled by the (public) stage-1 offsets
            target = values if biscaling is None else biscaling.transform(indices, values)
            if offs is not None:
                target = target - offs.predict(indices)
            refit_c_clipped(plan, indices, target, factors, core, rng, source)
        elif mode == "output":
            # Algorithm 3 (unproven): noise with Delta = 2 tau L eta on every row of C
            rows = plan.release("rows of C")
            noisy_rows(factors[2], rows.sensitivity, rows.epsilon, source)
    mean = 0.0 if offs is None else offs.mean
    return CompletionParameters(plan.model, factors, core, mean, None if offs is None else offs.biases)


def noisy_rows(c: np.ndarray, sensitivity: float, epsilon: float, source: NoiseSource) -> None:
    """Exponential-norm noise ``p(n) ~ exp(-epsilon ||n|| / Delta)`` on every row of ``C``, in place.

    The output perturbation of Algorithm 3 and of ``privacy="output_clipped"``.

    Parameters
    ----------
    c : ndarray of shape (n_2, rank)
        The factor ``C``.
    sensitivity : float
        ``Delta``.
    epsilon : float
        The release's budget.
    source : NoiseSource
        The secret noise.
    """
    c += exponential_norm_noise(c.shape[1], sensitivity, epsilon, size=c.shape[0], noise=source)


def refit_c_clipped(
    plan: CompletionPlan,
    indices: np.ndarray,
    values: np.ndarray,
    factors: list,
    core: np.ndarray | None,
    rng: np.random.Generator,
    source: NoiseSource,
) -> None:
    """Convex refit of ``C`` with A, B, G fixed, clipped per-row permutation SGD, then noise.

    ``privacy="output_clipped"``'s stage 2: with the other factors fixed, each entry's loss is
    convex in its row ``c_k``; clipped to ``L = clip`` it is ``L``-Lipschitz and
    ``beta_e``-smooth, and a step of at most ``2 / beta_e`` keeps Lemma 3's sensitivity
    ``2 tau L eta`` of the plan's ``"rows of C"`` release.

    Parameters
    ----------
    plan : CompletionPlan
        Of ``privacy="output_clipped"``.
    indices : ndarray of shape (n, 3)
    values : ndarray of shape (n,)
        Already clipped into the declared range (and shifted by the public stage-1 offsets).
    factors : list of three ndarrays
        ``C`` (``factors[2]``) is refitted and noised in place.
    core : ndarray or None
    rng : numpy.random.Generator
        The public randomness (the order within each row).
    source : NoiseSource
        The secret noise.
    """
    lam, eta, lip, tau = plan.reg, plan.learning_rate, plan.clip, plan.output_epochs
    a, b, c = factors
    k = indices[:, 2]
    _, _, _, w = directions(plan.model, core, a[indices[:, 0]], b[indices[:, 1]], c[k])
    lam_e = lam / np.bincount(k, minlength=c.shape[0])[k]
    beta = 2.0 * np.einsum("nr,nr->n", w, w) + 2.0 * lam_e
    steps = np.minimum(eta, 2.0 / beta)
    for _ in range(tau):
        # a random order within each row (public randomness); round r takes each row's r-th entry
        order = rng.permutation(values.shape[0])
        order = order[np.argsort(k[order], kind="stable")]
        ks = k[order]
        starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        counts = np.diff(np.r_[starts, ks.shape[0]])
        position = np.arange(ks.shape[0]) - np.repeat(starts, counts)
        by_round = np.argsort(position, kind="stable")
        bounds = np.searchsorted(position[by_round], np.arange(counts.max() + 1))
        for r in range(counts.max()):
            sel = order[by_round[bounds[r]:bounds[r + 1]]]
            rows = k[sel]
            crow = c[rows]
            resid = values[sel] - np.einsum("nr,nr->n", w[sel], crow)
            # the entry's gradient -2 r w clipped to norm L: |r| <= L / (2 ||w||)
            limited = clip_residuals(resid, np.linalg.norm(w[sel], axis=1), lip / 2.0)
            grad = -2.0 * limited[:, None] * w[sel]
            grad += 2.0 * lam_e[sel, None] * crow
            c[rows] = crow - steps[sel, None] * grad
    release = plan.release("rows of C")
    noisy_rows(c, release.sensitivity, release.epsilon, source)


# Overflow inside an epoch is not an error yet: non-private fits check the training error
# after each epoch, private fits the released parameters.
@np.errstate(over="ignore", invalid="ignore")
def sgd_epochs(
    plan: CompletionPlan,
    indices: np.ndarray,
    values: np.ndarray,
    factors: list,
    core: np.ndarray | None,
    rng: np.random.Generator,
    *,
    mode: str | None,
    source: NoiseSource | None = None,
    sigma: float = 0.0,
    offsets: CompletionParameters | None = None,
    progress: Any = None,
    frozen: tuple = (),
    history: list[float] | None = None,
) -> list[float]:
    """Mini-batch form of the paper's per-entry SGD on (6)/(7); updates in place.

    ``rng`` is the public randomness (shuffles); ``source`` the secret noise. With
    ``mode="gradient_dpsgd"`` each batch's gradient sum over all parameters -- every
    per-entry squared-error gradient clipped to ``clip`` -- gets ``N(0, sigma^2)`` on every
    coordinate before the step; with ``mode="gradient"``, Algorithm 2's noise on ``c_k``'s
    gradient (:func:`dptensor.models.completion._paper.noisy_gradient_rows`). ``offsets`` (a mean
    and optional biases, updated in place) are learned with the factors: their gradients join
    each entry's (clipped) gradient, with the bias penalty ``reg_bias`` spread over the rows'
    entries like ``lambda``. ``frozen`` lists modes whose factor (and the core, if ``"core"`` is
    listed) stay fixed, so that SGD solves the convex sub-problem of the others (used to test it
    against ALS).

    Parameters
    ----------
    plan : CompletionPlan
        ``learning_rate``, ``reg``, ``reg_core``, ``reg_bias``, ``clip``, ``batch_size`` and
        ``n_epochs`` of the steps; ``privacy`` says whether a training error may be computed.
    indices : ndarray of shape (n, 3)
    values : ndarray of shape (n,)
    factors : list of three ndarrays
        Updated in place.
    core : ndarray or None
        Updated in place (Tucker).
    rng : numpy.random.Generator
    mode : {None, "gradient", "gradient_dpsgd"}
    source : NoiseSource, optional
    sigma : float, default 0.0
        DP-SGD's per-coordinate noise std.
    offsets : CompletionParameters, optional
    progress : callable, optional
        Called with 1 after each epoch.
    frozen : tuple, default ()
    history : list of float, optional
        Appended the training RMSE after each epoch, for non-private fits and under ``"input"``
        (elsewhere it would be computed from the private values without noise).

    Returns
    -------
    list of float
        ``history``.

    Raises
    ------
    FloatingPointError
        When the training error (or, for the private modes, a released parameter) is not finite.
    """
    history = [] if history is None else history
    # Objective (6)/(7) charges lambda ||A||_F^2 once; spread over the entries of each row it
    # is lambda / n_i per visit of row i (n_i from the public Omega), so one epoch of SGD
    # steps follows the gradient of (6)/(7) itself.
    inv_counts = [1.0 / np.bincount(indices[:, axis], minlength=f.shape[0])[indices[:, axis]]
                  for axis, f in enumerate(factors)]
    n = values.shape[0]
    eta, lam, lam_g, m = plan.learning_rate, plan.reg, plan.reg_core, plan.clip
    batch = min(plan.batch_size, n)
    a_mat, b_mat, c_mat = factors
    tucker = plan.model == "tucker"
    dpsgd = mode == "gradient_dpsgd"
    biases = None if offsets is None else offsets.biases
    # offset coordinates in each entry's gradient: the mean, and one bias per mode
    n_offset = 0 if offsets is None else 1 + (3 if biases is not None else 0)
    # A training error on the raw values is only computed where the values are not private.
    track_error = plan.privacy is None or plan.privacy == "input"
    for _ in range(plan.n_epochs):
        order = rng.permutation(n)
        sq_err = 0.0
        for start in range(0, n, batch):
            sel = order[start:start + batch]
            i, j, k = indices[sel, 0], indices[sel, 1], indices[sel, 2]
            a, b, c = a_mat[i], b_mat[j], c_mat[k]
            pred, wa, wb, wc = directions(plan.model, core, a, b, c)
            if offsets is not None:
                pred = pred + offsets.mean
                if biases is not None:
                    pred = pred + biases[0][i] + biases[1][j] + biases[2][k]
            resid = values[sel] - pred
            if track_error:
                sq_err += float(resid @ resid)
            if dpsgd:
                # per-entry clipping of the squared-error gradient over all parameters:
                # ||2 r w|| <= m  <=>  |r| <= m / (2 ||w||), with w the gradient of x_hat
                norm2 = (wa * wa).sum(1) + (wb * wb).sum(1) + (wc * wc).sum(1)
                if tucker:
                    norm2 = norm2 + (a * a).sum(1) * (b * b).sum(1) * (c * c).sum(1)
                resid = clip_residuals(resid, np.sqrt(norm2 + n_offset), m / 2.0)
            ga = -2.0 * resid[:, None] * wa + (2.0 * lam * inv_counts[0][sel])[:, None] * a
            gb = -2.0 * resid[:, None] * wb + (2.0 * lam * inv_counts[1][sel])[:, None] * b
            gc = -2.0 * resid[:, None] * wc + (2.0 * lam * inv_counts[2][sel])[:, None] * c
            if mode == "gradient":
                _paper.noisy_gradient_rows(gc, m, plan.epsilon, source)
            if tucker:
                g_core = -2.0 * core_gradient(resid, a, b, c) + (2.0 * lam_g * sel.shape[0] / n) * core
            # step of each row: eta, capped at 1/h where h is the trace of the row's Gauss-Newton
            # curvature over this batch (keeps the Jacobi form stable for large batches); it
            # depends on the parameters and the public Omega only
            if dpsgd:
                blocks = ((i, wa, a_mat), (j, wb, b_mat), (k, wc, c_mat))
                steps = [row_steps(eta, rows, w, mat.shape[0], 2.0 * lam * inv_counts[axis][sel],
                                   DP_DAMPING) for axis, (rows, w, mat) in enumerate(blocks)]
            else:
                steps = [row_steps(eta, rows, w, mat.shape[0])
                         for rows, w, mat in ((i, wa, a_mat), (j, wb, b_mat), (k, wc, c_mat))]
            updates = ((i, ga, a_mat, steps[0]), (j, gb, b_mat, steps[1]), (k, gc, c_mat, steps[2]))
            for axis, (rows, g, mat, step) in enumerate(updates):
                if axis in frozen:
                    continue
                if dpsgd:
                    # the batch's gradient sum, noised on every coordinate, then the step
                    total = np.zeros_like(mat)
                    scatter_add(total, rows, g)
                    mat -= step[:, None] * source.add_gaussian(total, sigma)
                else:
                    scatter_add(mat, rows, -step[rows, None] * g)
            if tucker and "core" not in frozen:
                if dpsgd:
                    g_core = source.add_gaussian(g_core, sigma)
                h_core = 2.0 * float(np.sum((a * a).sum(1) * (b * b).sum(1) * (c * c).sum(1)))
                if dpsgd:
                    h_core = (h_core + 2.0 * lam_g * sel.shape[0] / n) / DP_DAMPING
                core -= eta / max(1.0, eta * h_core) * g_core
            if offsets is not None:
                _offset_step(plan, offsets, resid, (i, j, k), sel, inv_counts, dpsgd, source, sigma)
        if progress is not None:
            progress(1)
        if track_error:
            history.append(math.sqrt(sq_err / n))
            if not math.isfinite(history[-1]):
                raise FloatingPointError(
                    "SGD diverged (training error is not finite); lower learning_rate or batch_size"
                )
        elif not all(np.all(np.isfinite(f)) for f in factors) or (
            tucker and not np.all(np.isfinite(core))
        ) or (offsets is not None and not math.isfinite(offsets.mean)):
            # a check of the released (noised) parameters only: post-processing
            raise FloatingPointError(
                "SGD diverged (the noised parameters are not finite); lower learning_rate"
            )
    return history


def _offset_step(
    plan: CompletionPlan,
    offsets: CompletionParameters,
    resid: np.ndarray,
    rows: tuple,
    sel: np.ndarray,
    inv_counts: list,
    dpsgd: bool,
    source: NoiseSource | None,
    sigma: float,
) -> None:
    """One SGD step of the mean and the biases from the batch's (clipped) residuals.

    Steps are ``eta`` capped at a share of ``1 / h`` with ``h = 2 x`` (entries of the batch in
    the row), the same Gauss-Newton cap as the factors'; under DP-SGD every coordinate's
    gradient sum is noised before the step.
    """
    eta, lam_b = plan.learning_rate, plan.reg_bias
    # the mean and the biases share each entry's residual: without privacy each takes at most
    # its share of the capped step (all of them taking the whole step would overshoot); DP-SGD
    # takes DP_DAMPING of it (its clipped residuals bound every step)
    damping = DP_DAMPING if dpsgd else 1.0 / (1 + (3 if offsets.biases is not None else 0))
    g_mean = -2.0 * float(np.sum(resid))
    if dpsgd:
        g_mean = float(source.add_gaussian(np.array([g_mean]), sigma)[0])
    offsets.mean -= eta / max(1.0, eta * 2.0 * resid.shape[0] / damping) * g_mean
    if offsets.biases is None:
        return
    for axis, (bias, r) in enumerate(zip(offsets.biases, rows, strict=True)):
        ridge = 2.0 * lam_b * inv_counts[axis][sel]
        grad = -2.0 * resid + ridge * bias[r]
        total = np.bincount(r, weights=grad, minlength=bias.shape[0])
        if dpsgd:
            total = source.add_gaussian(total, sigma)
        curvature = 2.0 + (ridge if dpsgd else np.zeros_like(ridge))
        h = np.bincount(r, weights=curvature, minlength=bias.shape[0])
        bias -= eta / np.maximum(1.0, eta * h / damping) * total
