"""Vectorised building blocks of tensor completion over observed entries (CP and Tucker).

Shared by the SGD of Wei, Li, Mao & Wang (objectives (6)/(7)), the ALS solver and the private
solvers: the model's value at a batch of entries and its partial derivatives with respect to the
rows ``a_i, b_j, c_k`` (and the core ``G``), scatter-adds into factor rows, and overflow-safe
residual clipping, and ALS's per-row normal equations. Nothing here loops over entries in Python:
the loops over entries are compiled (numba) and add each entry's contribution in place, so no
``n x d^2`` array of outer products is ever formed. Compiled code does not check bounds: indices
must lie inside the factors' rows (the estimator checks them before anything reaches here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np

__all__ = [
    "clip_residuals",
    "core_design",
    "core_gradient",
    "cp_normal_equations",
    "design_normal_equations",
    "entry_blocks",
    "directions",
    "factor_values",
    "mode_design",
    "predict_entries",
    "row_steps",
    "scatter_add",
]


def scatter_add(matrix: np.ndarray, rows: np.ndarray, updates: np.ndarray) -> None:
    """``matrix[rows] += updates`` with repeated rows summed (one ``bincount``)."""
    n_rows, width = matrix.shape
    flat = (rows[:, None] * width + np.arange(width)).ravel()
    matrix += np.bincount(flat, weights=updates.ravel(), minlength=n_rows * width).reshape(n_rows, width)


def directions(
    model: str, core: np.ndarray | None, a: np.ndarray, b: np.ndarray, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Predictions and the partial derivatives of ``x_hat`` with respect to ``a_i, b_j, c_k``.

    CP: ``x_hat = sum_r a_r b_r c_r``, ``d x_hat / d a_i = b_j * c_k`` and so on. Tucker:
    ``x_hat = G(a_i, b_j, c_k)``, ``d x_hat / d a_i = G(I, b_j, c_k)``, ... (two matrix products
    of the batch against the unfolded core). ``d x_hat / d G = a_i (x) b_j (x) c_k``.
    """
    if model == "cp":
        wa, wb, wc = b * c, a * c, a * b
        return np.einsum("nr,nr->n", a, wa), wa, wb, wc
    p, q, t = core.shape
    # G(I, I, c_k): (n, p, q)
    gc = (c @ core.reshape(p * q, t).T).reshape(-1, p, q)
    wa = np.einsum("npq,nq->np", gc, b)
    wb = np.einsum("npq,np->nq", gc, a)
    # G(a_i, I, I): (n, q, t)
    ga = (a @ core.reshape(p, q * t)).reshape(-1, q, t)
    wc = np.einsum("nqt,nq->nt", ga, b)
    return np.einsum("np,np->n", a, wa), wa, wb, wc


def row_steps(
    eta: float,
    rows: np.ndarray,
    w: np.ndarray,
    n_rows: int,
    ridge: np.ndarray | None = None,
    damping: float = 1.0,
) -> np.ndarray:
    """``min(eta, damping / h_r)`` per row, ``h_r = 2 sum ||d x_hat / d row||^2`` over the batch's row ``r``.

    ``h_r`` is the trace (an upper bound of the largest eigenvalue) of the Gauss-Newton curvature of
    the batch's squared errors in row ``r``; a step of at most ``1 / h_r`` cannot overshoot. With
    ``batch_size=1`` and the paper's step size the cap practically never binds. It depends only on
    the current parameters and the public ``Omega``, so it costs no privacy. ``ridge`` (per entry)
    adds the penalty's curvature; ``damping < 1`` takes that fraction of the capped step (DP-SGD:
    successive noisy steps then average their noise instead of each replacing the last).
    """
    h = np.bincount(rows, weights=2.0 * np.einsum("nr,nr->n", w, w), minlength=n_rows)
    if ridge is not None:
        h = h + np.bincount(rows, weights=ridge, minlength=n_rows)
    return eta / np.maximum(1.0, eta * h / damping)


def core_gradient(weights: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``sum_n weights_n a_n (x) b_n (x) c_n`` as a ``p x q x t`` array."""
    p, q, t = a.shape[1], b.shape[1], c.shape[1]
    ab = (a[:, :, None] * b[:, None, :]).reshape(-1, p * q)
    return ((ab * weights[:, None]).T @ c).reshape(p, q, t)


def clip_residuals(resid: np.ndarray, direction_norm: np.ndarray, bound: float) -> np.ndarray:
    """Residuals ``r`` limited so that ``|r| * ||w|| <= bound``, for any finite or infinite ``r``.

    The clipped gradient ``-2 r w`` is computed from the limited residual, never as ``r * w``
    rescaled afterwards, so even ``r = 1e308`` cannot overflow into ``inf`` or ``nan``. A zero
    direction contributes no gradient whatever ``r`` is (its residual becomes 0).
    """
    with np.errstate(divide="ignore"):
        limit = np.where(direction_norm > 0, bound / direction_norm, 0.0)
    return np.clip(np.nan_to_num(resid, nan=0.0), -limit, limit)


def mode_design(
    model: str, mode: int, core: np.ndarray | None, factors: list, indices: np.ndarray
) -> np.ndarray:
    """``d x_hat / d row`` of ``mode`` at every entry: the design of that mode's least squares.

    With the other two factors (and the core) fixed, the model is linear in the rows of ``mode``:
    ``x_hat_e = <w_e, row_{e, mode}>``, and this returns ``w`` (``n x rank_mode``). CP: the
    elementwise product of the other two rows. Tucker: the core contracted with them, e.g.
    ``G(I, b_j, c_k)`` for mode 0 -- two contractions, ``n (pqt + pq)`` operations (einsum: no
    BLAS threads for these thin products).
    """
    a, b, c = (np.take(f, indices[:, m], axis=0) for m, f in enumerate(factors))
    if model == "cp":
        others = [x for m, x in enumerate((a, b, c)) if m != mode]
        return others[0] * others[1]
    if mode == 2:
        return np.einsum("nqt,nq->nt", np.einsum("np,pqt->nqt", a, core), b)  # G(a_i, b_j, I)
    gc = np.einsum("nt,pqt->npq", c, core)  # G(I, I, c_k)
    if mode == 0:
        return np.einsum("npq,nq->np", gc, b)
    return np.einsum("npq,np->nq", gc, a)


def factor_values(
    model: str, core: np.ndarray | None, factors: list | None, indices: np.ndarray
) -> np.ndarray:
    """``[[A, B, C]]`` or ``[[G; A, B, C]]`` at the entries (zeros when there are no factors)."""
    if factors is None:
        return np.zeros(indices.shape[0])
    if model == "cp":
        return _cp_entries(factors, 0.0, None, indices)
    first = np.take(factors[0], indices[:, 0], axis=0)
    return np.einsum("np,np->n", first, mode_design(model, 0, core, factors, indices))


def core_design(factors: list, indices: np.ndarray) -> np.ndarray:
    """``a_i (x) b_j (x) c_k`` at the entries, ``(n, p q t)``: the Tucker core's design."""
    a, b, c = (np.take(f, indices[:, m], axis=0) for m, f in enumerate(factors))
    return (a[:, :, None, None] * b[:, None, :, None] * c[:, None, None, :]).reshape(indices.shape[0], -1)


#: Compiled passes over fewer entries than this run on one thread (waking threads costs more).
PARALLEL_ENTRIES = 1 << 17


def _run(n: int, kernel: Callable, *args: object) -> Any:
    """``kernel(*args)``, a parallel numba kernel over ``n`` entries, on one thread when ``n`` is small."""
    if n >= PARALLEL_ENTRIES:
        return kernel(*args)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        return kernel(*args)
    finally:
        numba.set_num_threads(threads)


@numba.njit(nogil=True, cache=True, parallel=True)
def _cp_predict(indices, a, b, c, mean, b0, b1, b2, has_biases):  # noqa: ANN001, ANN202
    """``sum_r a_ir b_jr c_kr`` plus the offsets at every entry (one pass, no ``n x rank`` temporaries)."""
    n, rank = indices.shape[0], a.shape[1]
    out = np.empty(n)
    for e in numba.prange(n):
        i, j, k = indices[e, 0], indices[e, 1], indices[e, 2]
        total = 0.0
        for r in range(rank):
            total += a[i, r] * (b[j, r] * c[k, r])
        if has_biases:
            out[e] = total + (((mean + b0[i]) + b1[j]) + b2[k])
        else:
            out[e] = total + mean
    return out


def _cp_entries(factors: list, mean: float, biases: list | None, indices: np.ndarray) -> np.ndarray:
    """CP's values plus ``mean`` and the biases (when given) at the entries, compiled."""
    a, b, c = (np.ascontiguousarray(f, dtype=np.float64) for f in factors)
    b0, b1, b2 = (np.zeros(0),) * 3 if biases is None else (np.ascontiguousarray(x) for x in biases)
    indices = np.asarray(indices, dtype=np.int64)
    return _run(indices.shape[0], _cp_predict, indices, a, b, c, float(mean), b0, b1, b2, biases is not None)


def predict_entries(
    model: str,
    core: np.ndarray | None,
    factors: list | None,
    mean: float,
    biases: list | None,
    indices: np.ndarray,
) -> np.ndarray:
    """``mu + beta^(1)_i + beta^(2)_j + beta^(3)_k + x_hat_ijk`` at the entries."""
    if model == "cp" and factors is not None:
        return _cp_entries(factors, mean, biases, indices)
    return factor_values(model, core, factors, indices) + offsets_at(mean, biases, indices)


def offsets_at(
    mean: float, biases: list | None, indices: np.ndarray, skip_mode: int | None = None
) -> np.ndarray:
    """``mu`` plus the biases of every mode but ``skip_mode`` at the entries (all modes by default)."""
    out = np.full(indices.shape[0], float(mean))
    if biases is not None:
        for m, bias in enumerate(biases):
            if m != skip_mode:
                out += np.take(bias, indices[:, m])
    return out


#: Entries per block of the compiled normal equations (at most :data:`MAX_BLOCKS` blocks; the
#: blocks run in parallel, each summing into partial sums of the rows it touches).
BLOCK_ENTRIES = 1 << 16
MAX_BLOCKS = 16
#: The blocks' partial sums may cover at most this many rows beyond twice the number of rows
#: (entries sorted by row: the blocks' rows do not overlap; unsorted: fewer blocks).
PARTIAL_ROWS = 1 << 16


@numba.njit(nogil=True, cache=True)
def _block_spans(rows, n_blocks):  # noqa: ANN001, ANN202
    n = rows.shape[0]
    starts = np.empty(n_blocks + 1, np.int64)
    for b in range(n_blocks + 1):
        starts[b] = (n * b) // n_blocks
    lo = np.zeros(n_blocks, np.int64)
    offsets = np.zeros(n_blocks + 1, np.int64)
    for b in range(n_blocks):
        low, high = np.iinfo(np.int64).max, -1
        for e in range(starts[b], starts[b + 1]):
            low, high = min(low, rows[e]), max(high, rows[e])
        lo[b] = low if high >= 0 else 0
        offsets[b + 1] = offsets[b] + (high - low + 1 if high >= 0 else 0)
    return starts, lo, offsets


def entry_blocks(rows: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How the compiled normal equations split the entries into blocks (a function of ``rows`` only).

    Parameters
    ----------
    rows : ndarray of int64, shape (n,)
        The row of each entry.
    n_rows : int
        Number of rows.

    Returns
    -------
    starts : ndarray of int64, shape (n_blocks + 1,)
        Block ``b`` holds entries ``starts[b]:starts[b + 1]``.
    lo : ndarray of int64, shape (n_blocks,)
        The lowest row of each block.
    offsets : ndarray of int64, shape (n_blocks + 1,)
        Where each block's partial sums (rows ``lo[b]`` to its highest) start in one buffer.
    """
    n_blocks = max(1, min(MAX_BLOCKS, -(-rows.shape[0] // BLOCK_ENTRIES)))
    while True:
        starts, lo, offsets = _block_spans(rows, n_blocks)
        if n_blocks == 1 or offsets[-1] <= 2 * n_rows + PARTIAL_ROWS:
            return starts, lo, offsets
        n_blocks //= 2


@numba.njit(nogil=True, cache=True)
def _add_entry(gram, rhs, row, w, weight, y):  # noqa: ANN001, ANN202
    """``gram[row] += weight w w^T`` (upper triangle) and ``rhs[row] += w y``, in place."""
    d = w.shape[0]
    for a in range(d):
        wa = w[a]
        rhs[row, a] += wa * y
        wa = wa * weight
        for b in range(a, d):
            gram[row, a, b] += wa * w[b]


@numba.njit(nogil=True, cache=True)
def _sum_blocks(gram_parts, rhs_parts, lo, offsets, n_rows):  # noqa: ANN001, ANN202
    """Add the blocks' partial sums into every row's, then mirror each Gram matrix's upper triangle."""
    d = rhs_parts.shape[1]
    gram = np.zeros((n_rows, d, d))
    rhs = np.zeros((n_rows, d))
    for b in range(lo.shape[0]):
        for p in range(offsets[b], offsets[b + 1]):
            r = lo[b] + p - offsets[b]
            for a in range(d):
                rhs[r, a] += rhs_parts[p, a]
                for c in range(a, d):
                    gram[r, a, c] += gram_parts[p, a, c]
    for r in range(n_rows):
        for a in range(d):
            for c in range(a + 1, d):
                gram[r, c, a] = gram[r, a, c]
    return gram, rhs


@numba.njit(nogil=True, cache=True, parallel=True)
def _design_normal_equations(rows, design, weights, target, n_rows, starts, lo, offsets):  # noqa: ANN001, ANN202
    d = design.shape[1]
    gram = np.zeros((offsets[-1], d, d))
    rhs = np.zeros((offsets[-1], d))
    for b in numba.prange(lo.shape[0]):
        shift = offsets[b] - lo[b]
        for e in range(starts[b], starts[b + 1]):
            _add_entry(gram, rhs, shift + rows[e], design[e], weights[e], target[e])
    return _sum_blocks(gram, rhs, lo, offsets, n_rows)


def design_normal_equations(
    rows: np.ndarray,
    design: np.ndarray,
    target: np.ndarray,
    n_rows: int,
    weights: np.ndarray | None = None,
    blocks: tuple | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row Gram matrices and right-hand sides of a least-squares design, in one pass.

    The entries are summed in blocks (:func:`entry_blocks`) that run in parallel; within a block
    in their order. No ``n x d^2`` array is formed.

    Parameters
    ----------
    rows : ndarray of int, shape (n,)
        The row of each entry.
    design : ndarray, shape (n, d)
        ``w_e``, the entry's design.
    target : ndarray, shape (n,)
        ``y_e``, the entry's target.
    n_rows : int
        Number of rows.
    weights : ndarray, shape (n,), optional
        ``v_e``, weights of the Gram matrices (not of the right-hand sides); ones by default.
    blocks : tuple, optional
        ``entry_blocks(rows, n_rows)``, when already known.

    Returns
    -------
    gram : ndarray, shape (n_rows, d, d)
        ``sum_{e in row} v_e w_e w_e^T``.
    rhs : ndarray, shape (n_rows, d)
        ``sum_{e in row} w_e y_e``.
    """
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    n = design.shape[0]
    return _run(
        n,
        _design_normal_equations,
        rows,
        np.ascontiguousarray(design, dtype=np.float64),
        np.ones(n) if weights is None else np.ascontiguousarray(weights, dtype=np.float64),
        np.ascontiguousarray(target, dtype=np.float64),
        n_rows,
        *(entry_blocks(rows, n_rows) if blocks is None else blocks),
    )


@numba.njit(nogil=True, cache=True, parallel=True)
def _cp_normal_equations(  # noqa: ANN202
    rows, first, second, f1, f2, b1, b2, mean, values, n_rows, bias_column, starts, lo, offsets  # noqa: ANN001
):
    r = f1.shape[1]
    d = r + (1 if bias_column else 0)
    gram = np.zeros((offsets[-1], d, d))
    rhs = np.zeros((offsets[-1], d))
    for b in numba.prange(lo.shape[0]):
        shift = offsets[b] - lo[b]
        w = np.ones(d)
        for e in range(starts[b], starts[b + 1]):
            j, k = first[e], second[e]
            for a in range(r):
                w[a] = f1[j, a] * f2[k, a]
            _add_entry(gram, rhs, shift + rows[e], w, 1.0, values[e] - ((mean + b1[j]) + b2[k]))
    return _sum_blocks(gram, rhs, lo, offsets, n_rows)


def cp_normal_equations(
    mode: int,
    factors: list | None,
    mean: float,
    biases: list | None,
    columns: list,
    values: np.ndarray,
    n_rows: int,
    blocks: tuple | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """CP's per-row normal equations of one mode, design and target formed entry by entry.

    The same numbers as :func:`design_normal_equations` of ``w_e = (b_j * c_k, 1)`` (for mode 0;
    the trailing 1 only with biases) and ``y_e = x_e - mu - beta2_j - beta3_k``, without forming
    ``w`` or ``y`` for all entries: one pass over the entries, ``n d^2 / 2`` multiply-adds.

    Parameters
    ----------
    mode : int
        The mode whose rows are the unknowns.
    factors : list of three ndarrays or None
        The CP factors (None: offsets only).
    mean : float
        The global mean ``mu``.
    biases : list of three ndarrays or None
        Per-mode biases (None: no bias column).
    columns : list of three ndarrays of int64, shape (n,)
        Each entry's index in each mode (contiguous; ``indices[:, m]``).
    values : ndarray, shape (n,)
    n_rows : int
        Number of rows of ``mode``.
    blocks : tuple, optional
        ``entry_blocks(columns[mode], n_rows)``, when already known.

    Returns
    -------
    gram : ndarray, shape (n_rows, d, d)
    rhs : ndarray, shape (n_rows, d)
    """
    if factors is None and biases is None:
        raise ValueError("cp_normal_equations needs factors or biases")
    o1, o2 = (m for m in range(3) if m != mode)
    if factors is None:
        f1 = f2 = np.zeros((1, 0))
    else:
        f1, f2 = np.ascontiguousarray(factors[o1]), np.ascontiguousarray(factors[o2])
    if biases is None:
        b1, b2 = np.zeros(f1.shape[0]), np.zeros(f2.shape[0])
    else:
        b1, b2 = np.ascontiguousarray(biases[o1]), np.ascontiguousarray(biases[o2])
    return _run(
        values.shape[0], _cp_normal_equations,
        columns[mode], columns[o1], columns[o2], f1, f2, b1, b2, float(mean),
        np.ascontiguousarray(values, dtype=np.float64), n_rows, biases is not None,
        *(entry_blocks(columns[mode], n_rows) if blocks is None else blocks),
    )
