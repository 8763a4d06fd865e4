"""Vectorised building blocks of tensor completion over observed entries (CP and Tucker).

Shared by the SGD of Wei, Li, Mao & Wang (objectives (6)/(7)), the ALS solver and the private
solvers: the model's value at a batch of entries and its partial derivatives with respect to the
rows ``a_i, b_j, c_k`` (and the core ``G``), scatter-adds into factor rows, and overflow-safe
residual clipping, and ALS's per-row normal equations. Nothing here loops over entries in Python:
the loops over entries are compiled (numba) and add each entry's contribution in place, so no
``n x d^2`` array of outer products is ever formed.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = [
    "clip_residuals",
    "core_gradient",
    "cp_normal_equations",
    "design_normal_equations",
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
        a, b, c = (np.ascontiguousarray(f, dtype=np.float64) for f in factors)
        return _cp_values(np.asarray(indices, dtype=np.int64), a, b, c)
    first = np.take(factors[0], indices[:, 0], axis=0)
    return np.einsum("np,np->n", first, mode_design(model, 0, core, factors, indices))


@numba.njit(nogil=True, cache=True)
def _cp_values(indices, a, b, c):  # noqa: ANN001, ANN202
    """``sum_r a_ir b_jr c_kr`` at every entry (one pass, no ``n x rank`` temporaries)."""
    n, rank = indices.shape[0], a.shape[1]
    out = np.empty(n)
    for e in range(n):
        i, j, k = indices[e, 0], indices[e, 1], indices[e, 2]
        total = 0.0
        for r in range(rank):
            total += a[i, r] * (b[j, r] * c[k, r])
        out[e] = total
    return out


def predict_entries(
    model: str,
    core: np.ndarray | None,
    factors: list | None,
    mean: float,
    biases: list | None,
    indices: np.ndarray,
) -> np.ndarray:
    """``mu + beta^(1)_i + beta^(2)_j + beta^(3)_k + x_hat_ijk`` at the entries."""
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
def _mirror(gram):  # noqa: ANN001, ANN202
    """Copy each Gram matrix's upper triangle into its lower one."""
    d = gram.shape[1]
    for r in range(gram.shape[0]):
        for a in range(d):
            for b in range(a + 1, d):
                gram[r, b, a] = gram[r, a, b]


@numba.njit(nogil=True, cache=True)
def _design_normal_equations(rows, design, weights, target, n_rows):  # noqa: ANN001, ANN202
    n, d = design.shape
    gram = np.zeros((n_rows, d, d))
    rhs = np.zeros((n_rows, d))
    for e in range(n):
        _add_entry(gram, rhs, rows[e], design[e], weights[e], target[e])
    _mirror(gram)
    return gram, rhs


def design_normal_equations(
    rows: np.ndarray,
    design: np.ndarray,
    target: np.ndarray,
    n_rows: int,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row Gram matrices and right-hand sides of a least-squares design, in one pass.

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

    Returns
    -------
    gram : ndarray, shape (n_rows, d, d)
        ``sum_{e in row} v_e w_e w_e^T``.
    rhs : ndarray, shape (n_rows, d)
        ``sum_{e in row} w_e y_e``.
    """
    n = design.shape[0]
    return _design_normal_equations(
        np.ascontiguousarray(rows, dtype=np.int64),
        np.ascontiguousarray(design, dtype=np.float64),
        np.ones(n) if weights is None else np.ascontiguousarray(weights, dtype=np.float64),
        np.ascontiguousarray(target, dtype=np.float64),
        n_rows,
    )


@numba.njit(nogil=True, cache=True)
def _cp_normal_equations(rows, first, second, f1, f2, b1, b2, mean, values, n_rows, bias_column):  # noqa: ANN001, ANN202
    n = values.shape[0]
    r = f1.shape[1]
    d = r + (1 if bias_column else 0)
    gram = np.zeros((n_rows, d, d))
    rhs = np.zeros((n_rows, d))
    w = np.ones(d)
    for e in range(n):
        j, k = first[e], second[e]
        for a in range(r):
            w[a] = f1[j, a] * f2[k, a]
        _add_entry(gram, rhs, rows[e], w, 1.0, values[e] - ((mean + b1[j]) + b2[k]))
    _mirror(gram)
    return gram, rhs


def cp_normal_equations(
    mode: int,
    factors: list | None,
    mean: float,
    biases: list | None,
    columns: list,
    values: np.ndarray,
    n_rows: int,
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
    return _cp_normal_equations(
        columns[mode], columns[o1], columns[o2], f1, f2, b1, b2, float(mean),
        np.ascontiguousarray(values, dtype=np.float64), n_rows, biases is not None,
    )
