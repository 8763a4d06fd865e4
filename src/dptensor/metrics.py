"""Recovery metrics: matching estimated components to the true ones."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from dptensor._validation import check_finite_array


@dataclass(frozen=True)
class ComponentMatch:
    """A sign-invariant one-to-one matching of true to estimated components.

    Attributes
    ----------
    true_index, est_index : ndarray of int, shape (m,)
        Matched pairs, ``m = min(k_true, k_est)``, ordered by ``true_index``.
    inner : ndarray of shape (m,)
        ``|<v, v_hat>|`` for each pair (1 is perfect).
    distance : ndarray of shape (m,)
        ``min(||v - v_hat||, ||v + v_hat||)``.
    weight_error : ndarray of shape (m,) or None
        ``|lambda - lambda_hat|`` when both weight vectors were given.
    """

    true_index: np.ndarray
    est_index: np.ndarray
    inner: np.ndarray
    distance: np.ndarray
    weight_error: np.ndarray | None

    @property
    def min_inner(self) -> float:
        """The worst matched ``|<v, v_hat>|``."""
        return float(np.min(self.inner))

    @property
    def max_distance(self) -> float:
        """The worst matched ``||v - v_hat||`` (up to sign)."""
        return float(np.max(self.distance))


def match_components(
    true_factors: np.ndarray,
    est_factors: np.ndarray,
    true_weights: np.ndarray | None = None,
    est_weights: np.ndarray | None = None,
) -> ComponentMatch:
    """Match estimated to true components by the Hungarian method, ignoring sign.

    Solves the assignment problem maximising ``sum |<v_i, v_hat_pi(i)>|`` with
    :func:`scipy.optimize.linear_sum_assignment`, the matching under which Theorem 2.2 of
    Wang & Anandkumar (2016) states its error bounds (``exists a permutation pi``).

    Parameters
    ----------
    true_factors : ndarray of shape (d, k_true)
    est_factors : ndarray of shape (d, k_est)
        Columns are components; they need not be normalised (inner products and distances
        are computed after normalising each column).
    true_weights, est_weights : ndarray, optional
        When both are given, ``weight_error`` holds ``|lambda - lambda_hat|`` per pair.

    Returns
    -------
    ComponentMatch
    """
    true_factors = _unit_columns(true_factors, "true_factors")
    est_factors = _unit_columns(est_factors, "est_factors")
    if true_factors.shape[0] != est_factors.shape[0]:
        raise ValueError(
            f"true_factors and est_factors must have the same number of rows, got "
            f"{true_factors.shape[0]} and {est_factors.shape[0]}"
        )
    cosine = true_factors.T @ est_factors
    rows, cols = linear_sum_assignment(-np.abs(cosine))
    inner = np.abs(cosine[rows, cols])
    distance = np.sqrt(np.maximum(2.0 - 2.0 * inner, 0.0))
    weight_error = None
    if true_weights is not None and est_weights is not None:
        true_weights = check_finite_array(true_weights, "true_weights", ndim=1)
        est_weights = check_finite_array(est_weights, "est_weights", ndim=1)
        if true_weights.shape[0] != true_factors.shape[1] or est_weights.shape[0] != est_factors.shape[1]:
            raise ValueError("each weight vector must have one entry per column of its factors")
        weight_error = np.abs(true_weights[rows] - est_weights[cols])
    return ComponentMatch(rows, cols, np.minimum(inner, 1.0), distance, weight_error)


def _unit_columns(factors: np.ndarray, name: str) -> np.ndarray:
    factors = check_finite_array(factors, name)
    if factors.ndim == 1:
        factors = factors[:, None]
    if factors.ndim != 2:
        raise ValueError(f"{name} must be a (d, k) matrix, got shape {factors.shape}")
    norms = np.linalg.norm(factors, axis=0)
    if np.any(norms == 0):
        raise ValueError(f"{name} has a zero column")
    return factors / norms
