"""Folding new users into a fitted completion model from the released item side only.

A user who was not in the training data (a *held-out* user) gets a row of the user factor and a
user bias by one ridge regression on their own observed ratings, with everything else of the fitted
model fixed: for CP ``w_e = b_j * c_k`` (Tucker: ``G(I, b_j, c_k)``), extended by a 1 for the bias,
and target ``y_e = x_e - mu - beta2_j - beta3_k``,

    theta_u = argmin_theta  sum_{e of u} (y_e - <w_e, theta>)^2 + reg ||row||^2 + reg_bias bias^2,

i.e. ``(sum_e w_e w_e^T + diag(reg, ..., reg, reg_bias)) theta_u = sum_e w_e y_e``, with the fit's
own ``reg_`` and ``reg_bias_``. This is the minimiser of the fit's objective over one more user's
row, and exactly what DP-ALS under ``neighbouring="user"`` computes for each of its training users
at the end of the fit (``local_user_rows`` of :mod:`dptensor.models.completion._dp_als`).

What is read
------------
From the model: ``mean_``, the item and day factors and biases (``factors_[1]``, ``factors_[2]``,
``biases_[1]``, ``biases_[2]``), ``core_``, ``reg_``, ``reg_bias_``, ``prediction_range_`` and
``shape_`` -- under user-level DP-ALS exactly the (epsilon, delta)-DP release plus public
hyper-parameters. **Never** ``factors_[0]`` or ``biases_[0]``: the training users' own rows, which
under joint differential privacy belong to each training user alone. From the caller: the
held-out users' own ratings. Whatever is computed here is therefore post-processing of the DP
release as far as the training users are concerned; it is *not* private with respect to the
held-out users, whose ratings are read exactly (they are the evaluator's data).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dptensor._validation import NotFittedError
from dptensor.models.completion._als import ModeIndex, ridge_solve
from dptensor.models.completion.recommend import (
    Recommendations,
    check_day,
    check_top_n,
    check_users,
    top_items,
)

__all__ = ["FoldedUsers", "fold_in_users", "predict_folded", "recommend_folded"]


@dataclass(frozen=True)
class FoldedUsers:
    """Rows of new users computed by :func:`fold_in_users`.

    Attributes
    ----------
    users : ndarray of int64, shape (n_users,)
        The distinct user ids, sorted (the caller's own labels, unrelated to the training users).
    factors : ndarray, shape (n_users, rank_0), or None
        Each user's row of the user factor (``None`` for a model without factors).
    biases : ndarray, shape (n_users,), or None
        Each user's bias (``None`` for a model without biases).
    """

    users: np.ndarray
    factors: np.ndarray | None
    biases: np.ndarray | None


def _released(model: object) -> tuple:
    """The item-side parameters of a fitted model, refusing models whose users cannot be folded in."""
    if not hasattr(model, "factors_"):
        raise NotFittedError("the model is not fitted yet; call fit first")
    if getattr(model, "offsets_", None) == "biscale":
        raise ValueError(
            "cannot fold in new users under offsets='biscale': the bi-scaling's per-user statistics "
            "exist only for the training users"
        )
    if model.factors_ is not None and 0 in tuple(model.context_modes_):
        raise ValueError(
            "cannot fold in new users when mode 0 is a context mode: its rows are shrunk towards "
            "their random starting rows, which a new user does not have"
        )
    if not hasattr(model, "reg_bias_"):
        raise ValueError("the model has no reg_bias_ (fitted by an older dptensor): refit it")
    return model.mean_, model.factors_, model.biases_, model.core_


def _check_user_entries(model: object, indices: object, values: object | None) -> tuple:
    """Validated ``(n, 3)`` int64 indices (items and days inside the model's shape) and values."""
    _released(model)  # fitted, and a model whose users can be folded in
    indices = np.asarray(indices)
    if indices.ndim != 2 or indices.shape[1] != 3:
        raise ValueError(f"indices must have shape (n, 3), got {indices.shape}")
    if indices.size and not np.issubdtype(indices.dtype, np.integer):
        if not np.all(np.isfinite(indices)) or np.any(indices != np.round(indices)):
            raise ValueError("indices must be integers")
    indices = indices.astype(np.int64)
    if np.any(indices < 0):
        raise ValueError("indices must be non-negative")
    _, n_items, n_times = model.shape_
    if np.any(indices[:, 1] >= n_items) or np.any(indices[:, 2] >= n_times):
        raise ValueError(f"item and time indices must be below the model's shape {model.shape_[1:]}")
    if values is None:
        return indices, None
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (indices.shape[0],):
        raise ValueError(f"values must have shape ({indices.shape[0]},), got {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError("values must be finite")
    return indices, values


def _user_design(model: object, indices: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """``(w_e, mu + beta2_j + beta3_k)`` at the entries, from the item side only."""
    mean, factors, biases, core = _released(model)
    offsets = np.full(indices.shape[0], float(mean))
    if biases is not None:
        offsets += np.take(biases[1], indices[:, 1]) + np.take(biases[2], indices[:, 2])
    if factors is None:
        return None, offsets
    b = np.take(factors[1], indices[:, 1], axis=0)
    c = np.take(factors[2], indices[:, 2], axis=0)
    if model.model == "cp":
        return b * c, offsets
    gc = np.einsum("nt,pqt->npq", c, core)  # G(I, I, c_k)
    return np.einsum("npq,nq->np", gc, b), offsets


def fold_in_users(model: object, indices: object, values: object) -> FoldedUsers:
    """Rows (and biases) of new users from their own ratings and the model's released item side.

    Parameters
    ----------
    model : TensorCompletion
        A fitted model (any solver; not ``offsets="biscale"``, not with mode 0 as a context mode).
    indices : array-like of int, shape (n, 3)
        ``(user, item, time)`` of the new users' observed ratings. Column 0 holds the caller's own
        user labels (any non-negative integers; they do not refer to the training users and are
        not checked against ``model.shape_[0]``); items and times must lie inside the model's shape.
    values : array-like of float, shape (n,)
        The ratings; clipped into the model's declared ``value_range`` when it has one, as the fit
        clips its training values.

    Returns
    -------
    FoldedUsers
        One row per distinct user label, the ridge solution described in the module docstring
        (reads ``reg_``, ``reg_bias_``; never the training users' ``factors_[0]``/``biases_[0]``).
    """
    indices, values = _check_user_entries(model, indices, values)
    if model.prediction_range_ is not None:
        values = np.clip(values, *model.prediction_range_)
    users, local = np.unique(indices[:, 0], return_inverse=True)
    local = local.reshape(-1)
    design, offsets = _user_design(model, indices)
    has_bias = model.biases_ is not None
    parts, ridge = [], []
    if design is not None:
        parts.append(design)
        ridge.append(np.full(design.shape[1], float(model.reg_)))
    if has_bias:
        parts.append(np.ones((indices.shape[0], 1)))
        ridge.append([float(model.reg_bias_)])
    if not parts:
        return FoldedUsers(users, None, None)
    full = np.hstack(parts)
    ridge_vec = np.concatenate(ridge).astype(np.float64)
    index = ModeIndex(local, users.shape[0])
    theta = ridge_solve(*index.normal_equations(full, values - offsets), ridge_vec, np.zeros(full.shape[1]))
    width = 0 if design is None else design.shape[1]
    return FoldedUsers(
        users,
        None if design is None else np.ascontiguousarray(theta[:, :width]),
        theta[:, width] if has_bias else None,
    )


def predict_folded(model: object, folded: FoldedUsers, indices: object) -> np.ndarray:
    """Predictions for folded-in users at ``(user, item, time)`` entries, clamped like ``predict``.

    A user label absent from ``folded`` (a user without observed ratings) gets the prior row: zero
    factors and bias, so their predictions are the mean plus the item and time offsets.

    Parameters
    ----------
    model : TensorCompletion
        The model ``folded`` was computed from.
    folded : FoldedUsers
    indices : array-like of int, shape (n, 3)

    Returns
    -------
    ndarray of float64, shape (n,)
    """
    indices, _ = _check_user_entries(model, indices, None)
    out = _folded_values(model, folded, indices)
    if model.prediction_range_ is not None:
        out = np.clip(out, *model.prediction_range_)
    return out


def _folded_values(model: object, folded: FoldedUsers, indices: np.ndarray) -> np.ndarray:
    """The folded-in users' completed values at checked ``indices``, before clamping."""
    design, out = _user_design(model, indices)
    n_known = folded.users.shape[0]
    if n_known:
        position = np.minimum(np.searchsorted(folded.users, indices[:, 0]), n_known - 1)
        known = folded.users[position] == indices[:, 0]
        if folded.biases is not None:
            out = out + np.where(known, folded.biases[position], 0.0)
        if design is not None and folded.factors is not None:
            rows = np.where(known[:, None], folded.factors[position], 0.0)
            out = out + np.einsum("nr,nr->n", rows, design)
    return out


def recommend_folded(
    model: object, folded: FoldedUsers, n: int | None = None, *, users: object = None,
    exclude: object = None, day: int | None = None,
) -> Recommendations:
    """Each folded-in user's ``n`` highest-predicted items among those they have not rated.

    The ranking of :meth:`TensorCompletion.recommend <dptensor.models.completion.TensorCompletion.recommend>`
    for users who were not in the training data: their rows come from :func:`fold_in_users`, and
    nothing of the training users' own rows is read.

    Parameters
    ----------
    model : TensorCompletion
        The model ``folded`` was computed from.
    folded : FoldedUsers
    n : int, optional
        Items per user, between 1 and the number of items; default 10 (every item of a smaller
        catalogue).
    users : array-like of int, optional
        Distinct user labels (default ``folded.users``); a label absent from ``folded`` gets the
        prior row, as in :func:`predict_folded`.
    exclude : array-like of int, shape (m, 3), optional
        ``(user label, item, day)`` entries whose ``(user, item)`` pair is never recommended: usually
        the entries the users were folded in from.
    day : int, optional
        The third mode's index to rank at; default the last.

    Returns
    -------
    Recommendations
    """
    _released(model)
    _, n_items, n_days = model.shape_
    n = check_top_n(n, n_items)
    day = check_day(day, n_days)
    users = folded.users if users is None else check_users(users, None)
    excluded = None if exclude is None else _check_user_entries(model, exclude, None)[0][:, :2]

    return top_items(lambda cells: _folded_values(model, folded, cells), users, n_items, n,
                     excluded=excluded, day=day, value_range=model.prediction_range_)
