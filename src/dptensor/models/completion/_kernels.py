"""Vectorised building blocks of tensor completion over observed entries (CP and Tucker).

Shared by the SGD of Wei, Li, Mao & Wang (objectives (6)/(7)), the ALS solver and the private
solvers: the model's value at a batch of entries and its partial derivatives with respect to the
rows ``a_i, b_j, c_k`` (and the core ``G``), scatter-adds into factor rows, and overflow-safe
residual clipping. Nothing here loops over entries in Python.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "clip_residuals",
    "core_gradient",
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
    first = np.take(factors[0], indices[:, 0], axis=0)
    return np.einsum("np,np->n", first, mode_design(model, 0, core, factors, indices))


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
