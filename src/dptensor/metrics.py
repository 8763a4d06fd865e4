"""Recovery metrics: matching estimated components to the true ones."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist

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
    true_factors, est_factors = _column_pair(true_factors, est_factors, "true_factors", "est_factors")
    true_factors = true_factors / _column_norms(true_factors, "true_factors")
    est_factors = est_factors / _column_norms(est_factors, "est_factors")
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


def _column_norms(factors: np.ndarray, name: str) -> np.ndarray:
    norms = np.linalg.norm(factors, axis=0)
    if np.any(norms == 0):
        raise ValueError(f"{name} has a zero column")
    return norms


def _column_pair(
    first: object, second: object, first_name: str, second_name: str
) -> tuple[np.ndarray, np.ndarray]:
    """Two ``(d, k)`` component matrices (a vector is one column) with the same number of rows."""
    first, second = _columns(first, first_name), _columns(second, second_name)
    if first.shape[0] != second.shape[0]:
        raise ValueError(
            f"{first_name} and {second_name} must have the same number of rows, got "
            f"{first.shape[0]} and {second.shape[0]}"
        )
    return first, second


def component_distances(true_components: np.ndarray, est_components: np.ndarray) -> np.ndarray:
    """``||a_hat_j - a_i||_2`` for every true component ``i`` and estimate ``j`` (no sign flip, no scaling).

    Parameters
    ----------
    true_components : ndarray of shape (d, k_true)
    est_components : ndarray of shape (d, k_est)
        Components as columns, as in :func:`match_components`.

    Returns
    -------
    ndarray of shape (k_true, k_est)
    """
    true_components, est_components = _column_pair(
        true_components, est_components, "true_components", "est_components"
    )
    diff = true_components[:, :, None] - est_components[:, None, :]
    return np.sqrt(np.sum(diff * diff, axis=0))


def e_comp(true_components: np.ndarray, est_components: np.ndarray, *, matching: str = "min") -> float:
    """Component recovery error ``e_comp`` (Imtiaz & Sarwate 2018, slide "Dataset and performance measure").

    ``matching="min"`` is the slides' metric, ``e_comp = (1/K) sum_k min_{k'} ||a_hat_k - a_{k'}||_2``:
    each *estimate* is charged its distance to the nearest true component, so two estimates of
    the same component are not penalised. ``matching="hungarian"`` pairs estimates and true
    components one to one (:func:`scipy.optimize.linear_sum_assignment` on the same raw l2
    distances) and averages over the pairs, so a missed component counts. Distances are between
    the vectors as given (neither normalised nor sign-flipped: topics are probability vectors).

    Parameters
    ----------
    true_components : ndarray of shape (d, K)
    est_components : ndarray of shape (d, K_est)
        Components as columns (transpose a ``components_`` array of shape ``(K, d)``).
    matching : {"min", "hungarian"}

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> truth = np.eye(3)[:, :2]
    >>> twice_first = truth[:, [0, 0]]
    >>> e_comp(truth, twice_first), round(e_comp(truth, twice_first, matching="hungarian"), 4)
    (0.0, 0.7071)
    """
    distances = component_distances(true_components, est_components)
    if matching == "min":
        return float(np.mean(np.min(distances, axis=0)))
    if matching == "hungarian":
        rows, cols = linear_sum_assignment(distances)
        return float(np.mean(distances[rows, cols]))
    raise ValueError(f"matching must be 'min' or 'hungarian', got {matching!r}")


def matched_topic_l1(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """L1 distances of topics matched one to one (Hungarian matching on the L1 cost).

    The distance between two topic models used in the private-LDA experiments (DeCarolis et al.,
    Section 5: "mean L1 distance of matched topics") and for seed-to-seed stability: each row of
    ``first`` is paired with a row of ``second`` by :func:`scipy.optimize.linear_sum_assignment`
    minimising the summed L1 distance. For rows on the probability simplex each distance lies in
    ``[0, 2]``.

    Parameters
    ----------
    first, second : ndarray of shape (k, d)
        Topics as rows (``components_``), the same number of each.

    Returns
    -------
    ndarray of shape (k,)
        ``||first[i] - second[pi(i)]||_1`` for ``i = 0 .. k-1``.

    Examples
    --------
    >>> import numpy as np
    >>> topics = np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]])
    >>> matched_topic_l1(topics, topics[::-1]).tolist()
    [0.0, 0.0]
    """
    first = check_finite_array(first, "first", ndim=2)
    second = check_finite_array(second, "second", ndim=2)
    if first.shape != second.shape:
        raise ValueError(f"first and second must have the same shape, got {first.shape} and {second.shape}")
    cost = cdist(first, second, "cityblock")
    rows, cols = linear_sum_assignment(cost)
    return cost[rows, cols]


def _columns(components: np.ndarray, name: str) -> np.ndarray:
    components = check_finite_array(components, name)
    if components.ndim == 1:
        components = components[:, None]
    if components.ndim != 2:
        raise ValueError(f"{name} must be a (d, k) matrix, got shape {components.shape}")
    return components
