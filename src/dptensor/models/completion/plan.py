"""The planner of private recommendations: the RMSE ratio to non-private, before any budget is spent.

:func:`plan_recommendation` predicts, from **public sizes only** -- the numbers of users, items and
days, a typical number of ratings per user (a public guess, as ``dptensor lda plan`` takes a typical
document length), the bound ``max_ratings``, the rank, ``epsilon``, ``delta``, the relation and the
declared rating range -- how much a default DP-ALS fit (:class:`~dptensor.models.TensorCompletion`,
``privacy="als"``) loses against the non-private fit of the same model: the ratio of their held-out
RMSEs (held-out users folded in, :func:`dptensor.evaluation.held_out_user_rmse`). It reads no data,
charges nothing, and takes the noise of every release from the fit's own plan
(:func:`~dptensor.models.completion.plan_completion`), so a prediction always describes the fit
those parameters would run. ``dptensor complete plan`` prints it.

The prediction
--------------
Held-out users are folded in from their own ratings exactly, so what privacy costs is the error of
the released **item side** -- every item's bias and factor row, each a ridge regression on the
item's ``n_j`` ratings solved from noisy statistics (:mod:`dptensor.models.completion._dp_als`).
For one such parameter with prior variance ``tau^2``, design scale ``g`` (``g = 1`` for a bias, the
mean square of a user-factor coordinate for a factor), residual variance ``s^2`` and privacy noise of
variance ``v`` on its right-hand side, the posterior's error is the fraction ``q / (1 + q)`` of
``tau^2`` with

    q = (rho s^2 g n_j + v) / (tau^2 g^2 n_j^2)

(the Bayes error of a normal mean observed ``n_j`` times with extra noise ``v``; ``rho`` is the
private fit's stronger fixed penalty and its two sweeps, against the non-private fit's ``rho = 1``).
The excess mean squared error of the private fit at one test rating of item ``j`` is the difference
of that error with and without ``v``, summed over the item's bias and factors; averaged over the
test ratings (items weighted by their popularity ``pi_j``) it gives

    ratio = sqrt(1 + sum_j pi_j excess_j / M),

``M`` the non-private mean squared error. ``n_j = users * m * pi_j`` with ``m`` the typical number
of ratings per user. The noise ``v`` of each relation follows from the plan:

* ``"user"``: the item release's noise multiplier ``z`` and sensitivity ``2 C``,
  ``C = sqrt(max_ratings) kappa`` (:func:`~dptensor.models.completion._dp_als.entry_scale` at the
  design bound ``clip``), inflated as the solve inflates it for the noise of the Gram matrices,
  ``v = (2 z C)^2 (1 + spread)``, and divided by the square of a typical user's scale
  ``min(1, sqrt(max_ratings / m))`` (their ratings' weight in the sums); the bias and the factors
  share it. Where the plan makes a spectral start (``start``), the factors' excess is multiplied
  by ``f + (1 - f) / max(1, theta)^2``, ``theta = c_s users / (z_s sqrt(items))`` (``z_s`` the
  spectrum release's multiplier): the item rows shrink towards the start, whose error falls as
  ``1 / theta^2`` (the squared overlap of a spiked covariance's eigenvector above the noise is
  ``1 - 1 / theta^2``), down to a floor ``f`` that no start removes;
* ``"entry-value"``: the factors' right-hand sides get ``v = (z w C_q)^2`` (``w`` the rating range,
  ``C_q`` the typical 90% quantile of the design norms, a calibrated constant); the item bias comes
  from the offsets' Laplace release (``epsilon_o``), whose per-entry weights give item ``j`` the
  effective count ``n_j m / (n_j + m)``: ``v = 2 w^2 n_j^2 / (epsilon_o n_eff)^2``.

Calibration
-----------
``tau^2`` (bias and factors), ``g``, ``rho``, ``C_q``, ``c_s``, ``f`` and ``M / s^2`` are constants
(:data:`CALIBRATION`) fitted by least squares on the measured curve of
``benchmarks/bench_recommendation_curve.py``
(semi-synthetic users shaped like MovieLens-100K, 10^3 to 7 10^4 users, epsilon 1 and 4, both
relations, matrix and tensor: ``benchmarks/plan_recommendation_calibration.py`` refits them and
prints each point's error). The item popularity is a public assumption: ``"movielens"`` (the
default: a smooth profile of relative popularity against the item's rank, shaped like
MovieLens-100K's), ``"uniform"``, or an array of relative popularities. On data of another shape
(other rating scales, other popularity, other residual noise) the prediction is a guide, not a
measurement; the planner never sees the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np

from dptensor._validation import check_epsilon_delta, check_positive_int, check_real
from dptensor.models.completion._dp_als import entry_scale
from dptensor.models.completion._dp_als_plan import RELATIONS
from dptensor.models.completion._plan import check_value_range, plan_completion

__all__ = [
    "CALIBRATION", "RecommendationPlan", "epsilon_within", "plan_recommendation", "popularity_profile",
    "users_within",
]

#: The constants of the prediction, fitted on the measured curve (module docstring).
CALIBRATION: dict[str, float] = {
    "tau2_bias": 0.1713,   # prior variance of an item bias (rating units squared)
    "tau2_factor": 0.1218,   # variance of the item factors' share of a prediction (r g tau'^2)
    "g": 0.01818,          # mean square of one coordinate of a user's design
    "rho": 5.427,            # the private fit's penalty over the non-private one
    "c_q": 1.2,            # entry-value: the 90% quantile of the design norms
    "mse": 0.90,           # non-private mean squared error over the residual scale ((hi - lo) / 4)^2
    "spectral": 0.008477,  # "user" with a spectral start: theta = spectral n_users / (z_s sqrt(items))
    "spectral_floor": 0.5287,  # the part of the factors' excess a spectral start leaves, however good
}

#: MovieLens-100K-shaped popularity: ``log(popularity / max)`` at these fractions of the item
#: ranking (rank / items), interpolated linearly (a smooth public profile, not the data).
_PROFILE_AT = (0.0, 0.03, 0.06, 0.12, 0.24, 0.48, 0.71, 0.95, 1.0)
_PROFILE_LOG = (0.0, -0.75, -0.99, -1.35, -1.96, -2.97, -4.27, -6.4, -6.4)


def popularity_profile(n_items: int, popularity: object = "movielens") -> np.ndarray:
    """Relative popularity of every item, summing to one (a public assumption of the planner).

    Parameters
    ----------
    n_items : int
    popularity : {"movielens", "uniform"} or array-like of shape (n_items,)
        ``"movielens"``: relative popularity against rank shaped like MovieLens-100K's (the most
        popular item about 600 times as popular as the least); ``"uniform"``: every item alike; an
        array: non-negative public weights (e.g. from a public catalogue).

    Returns
    -------
    ndarray of shape (n_items,)
    """
    n_items = check_positive_int(n_items, "n_items")
    if isinstance(popularity, str):
        if popularity == "uniform":
            return np.full(n_items, 1.0 / n_items)
        if popularity != "movielens":
            raise ValueError(f"popularity must be 'movielens', 'uniform' or an array, got {popularity!r}")
        at = (np.arange(n_items) + 0.5) / n_items
        weights = np.exp(np.interp(at, _PROFILE_AT, _PROFILE_LOG))
    else:
        weights = np.asarray(popularity, dtype=np.float64)
        if weights.shape != (n_items,) or not np.all(np.isfinite(weights)) or np.any(weights < 0) \
                or weights.sum() <= 0:
            raise ValueError(f"popularity must be {n_items} non-negative finite weights, not all zero")
    return weights / weights.sum()


@dataclass(frozen=True)
class RecommendationPlan:
    """What :func:`plan_recommendation` predicts for a default DP-ALS fit.

    Attributes
    ----------
    ratio : float
        Predicted held-out RMSE of the private fit over the non-private fit's (same model).
    excess_mse : float
        Predicted excess mean squared error of the private fit (rating units squared).
    item_noise_std : float
        Standard deviation of the privacy noise on one item's released right-hand side (the user
        relation's factor and bias release; under entry-value the factors' release).
    noisy_items : float
        Share of the test ratings whose item's statistics are dominated by the noise (``q > 1``
        for the bias).
    users, items, times, rank, typical_ratings, max_ratings : int
    epsilon, delta : float
    relation : str
    spectral_start : bool
        Whether the planned fit starts its item factors from the spectral release (``start="auto"``
        under ``"user"``, from public sizes).
    """

    ratio: float
    excess_mse: float
    item_noise_std: float
    noisy_items: float
    users: int
    items: int
    times: int
    rank: int
    typical_ratings: int
    max_ratings: int
    epsilon: float
    delta: float
    relation: str
    spectral_start: bool = False

    def describe(self) -> str:
        """One paragraph: the prediction and what it rests on."""
        return (
            f"predicted held-out RMSE ratio to non-private: {self.ratio:.3f} ({self.relation} relation, "
            f"epsilon {self.epsilon:g}, delta {self.delta:g}; {self.users} users x {self.items} items"
            + (f" x {self.times} days" if self.times > 1 else "")
            + f", rank {self.rank}, about {self.typical_ratings} ratings per user, "
            f"max_ratings {self.max_ratings}). Noise std on an item's statistics {self.item_noise_std:.3g}; "
            f"{100 * self.noisy_items:.0f}% of test ratings fall on items whose bias is mostly noise. "
            + ("The item factors start from a noisy release of the users' covariance (spectral start). "
               if self.spectral_start else "")
            + "Public sizes only; calibrated on MovieLens-100K-shaped data (docs/completion.md)."
        )


def _error_ratio(
    n: np.ndarray, noise_var: np.ndarray | float, tau2: float, g: float, s2: float, rho: float
) -> np.ndarray:
    """``q = (rho s^2 g n + v) / (tau^2 g^2 n^2)`` of a parameter seen ``n`` times (module docstring)."""
    n = np.maximum(n, 1e-12)
    return (rho * s2 * g * n + noise_var) / (tau2 * g * g * n * n)


def _excess(n: np.ndarray, noise_var: np.ndarray, tau2: float, g: float, s2: float, rho: float) -> np.ndarray:
    """Excess Bayes error of a parameter seen ``n`` times, with and without noise ``noise_var``."""
    q = _error_ratio(n, noise_var, tau2, g, s2, rho)
    q0 = _error_ratio(n, 0.0, tau2, g, s2, 1.0)
    return tau2 * (q / (1.0 + q) - q0 / (1.0 + q0))


def plan_recommendation(
    n_users: int,
    n_items: int,
    *,
    epsilon: float,
    delta: float = 1e-6,
    relation: str = "user",
    rank: int = 10,
    n_times: int = 1,
    typical_ratings: int = 100,
    max_ratings: int | str = "auto",
    value_range: tuple[float, float] = (1.0, 5.0),
    popularity: object = "movielens",
    calibration: dict[str, float] | None = None,
) -> RecommendationPlan:
    """Predict a default DP-ALS fit's held-out RMSE ratio to non-private from public sizes only.

    Parameters
    ----------
    n_users, n_items : int
        Numbers of users (public under both relations: the shape) and items.
    epsilon : float
        The fit's total budget.
    delta : float, default 1e-6
    relation : {"user", "entry-value"}, default "user"
    rank : int, default 10
    n_times : int, default 1
        Days (the time mode); 1 for a user x item matrix.
    typical_ratings : int, default 100
        A public guess of the number of ratings of a typical user (the mean; MovieLens-100K: 106).
    max_ratings : int or "auto", default "auto"
        The fit's ``max_ratings`` (each user's contribution bound under ``"user"``); ``"auto"``: the
        fit's rule (:class:`~dptensor.models.TensorCompletion`), from the same public sizes.
    value_range : (float, float), default (1, 5)
        The declared rating range.
    popularity : {"movielens", "uniform"} or array-like, default "movielens"
        The public assumption on item popularity (:func:`popularity_profile`).
    calibration : dict, optional
        Constants to use instead of :data:`CALIBRATION` (the calibration script passes its own).

    Returns
    -------
    RecommendationPlan

    Examples
    --------
    >>> from dptensor.models.completion import plan_recommendation
    >>> plan = plan_recommendation(70_000, 1682, epsilon=1.0, typical_ratings=106)
    >>> plan.ratio > 1.0
    True
    """
    n_users = check_positive_int(n_users, "n_users")
    n_items = check_positive_int(n_items, "n_items")
    n_times = check_positive_int(n_times, "n_times")
    rank = check_positive_int(rank, "rank")
    typical_ratings = check_positive_int(typical_ratings, "typical_ratings")
    if isinstance(max_ratings, str) and max_ratings != "auto":
        raise ValueError(f"max_ratings must be a positive integer or 'auto', got {max_ratings!r}")
    if max_ratings != "auto":
        max_ratings = check_positive_int(max_ratings, "max_ratings")
    check_epsilon_delta(epsilon, delta)
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    if value_range is None:
        raise TypeError("value_range must be a pair of numbers, got None")
    low, high = check_value_range(value_range)
    c = dict(CALIBRATION if calibration is None else calibration)
    for key in CALIBRATION:
        if not isinstance(c.get(key), Real) or c[key] <= 0:
            raise ValueError(f"calibration[{key!r}] must be a positive number")
    from dptensor.models._options import flat_params
    from dptensor.models.completion.estimator import TensorCompletion  # the fit's own parameters
    from dptensor.models.completion.options import CompletionOptions

    params = flat_params(TensorCompletion(
        rank, privacy="als", neighbouring=relation, epsilon=float(epsilon), delta=float(delta),
        value_range=(low, high), options=CompletionOptions(max_ratings=max_ratings),
    ))
    n_guess = n_users * typical_ratings  # only the entry-value plan's default delta would read it
    plan = plan_completion(params, (n_users, n_items, n_times), n_guess)
    max_ratings = plan.max_ratings  # resolved as a fit with these parameters (delta included) resolves it
    width = high - low
    s2 = (width / 4.0) ** 2
    z = plan.release("1").noise_multiplier
    pi = popularity_profile(n_items, popularity)
    n = n_users * typical_ratings * pi
    g, rho = c["g"], c["rho"]
    if relation == "user":
        kappa = entry_scale(rank, True, plan.clip, width / 4.0)
        sensitivity = 2.0 * math.sqrt(max_ratings) * kappa
        spread = rank * s2 / plan.reg + s2 / plan.reg_bias
        # a typical user beyond the bound has each rating scaled by sqrt(max_ratings / typical):
        # the same as the noise grown by the inverse square
        noise_var = (z * sensitivity) ** 2 * (1.0 + spread) * max(1.0, typical_ratings / max_ratings)
        bias_noise = np.full_like(n, noise_var)
        factor_noise = bias_noise
    else:
        noise_var = (z * width * c["c_q"]) ** 2
        factor_noise = np.full_like(n, noise_var)
        eps_o = plan.dp_als.offsets_epsilon
        n_eff = n * typical_ratings / (n + typical_ratings)
        bias_noise = 2.0 * width**2 * n**2 / (eps_o * np.maximum(n_eff, 1e-12)) ** 2
    bias = _excess(n, bias_noise, c["tau2_bias"], 1.0, s2, rho)
    factor = _excess(n, factor_noise, c["tau2_factor"], g, s2, rho)
    spectral = "spectrum" in plan.dp_als.steps
    if spectral:
        # the item rows shrink towards the spectral start, whose error falls as 1 / theta^2 (a spiked
        # covariance's eigenvector above the noise, theta > 1) down to the floor f (module docstring)
        theta = c["spectral"] * n_users / (plan.release("spectrum").noise_multiplier * math.sqrt(n_items))
        floor = c["spectral_floor"]
        factor = factor * (floor + (1.0 - floor) / max(1.0, theta) ** 2)
    excess = float(np.sum(pi * (bias + factor)))
    ratio = math.sqrt(1.0 + max(excess, 0.0) / (c["mse"] * s2))
    q_bias = _error_ratio(n, bias_noise, c["tau2_bias"], 1.0, s2, rho)
    return RecommendationPlan(
        ratio=ratio, excess_mse=excess, item_noise_std=math.sqrt(noise_var),
        noisy_items=float(np.sum(pi[q_bias > 1.0])), users=n_users, items=n_items, times=n_times,
        rank=rank, typical_ratings=typical_ratings, max_ratings=max_ratings, epsilon=float(epsilon),
        delta=float(delta), relation=relation, spectral_start=spectral,
    )


def users_within(
    level: float, n_items: int, *, low: int = 100, high: int = 10**8, **kwargs: object
) -> int | None:
    """The fewest users from which :func:`plan_recommendation` predicts a ratio ``<= level`` for good.

    The predicted ratio is not monotone in the number of users where the item side is all noise
    (the non-private fit improves with more users, the private one cannot yet), so this is the
    smallest ``n`` such that the ratio stays at or below ``level`` for every number of users from
    ``n`` to ``high`` (a grid of 40 points per decade, then bisection at the last crossing).

    Parameters
    ----------
    level : float
        The ratio to reach (e.g. 1.10: within 10% of non-private).
    n_items : int
    low, high : int
        The range searched.
    **kwargs
        The other arguments of :func:`plan_recommendation` (``epsilon`` is required).

    Returns
    -------
    int or None
        ``None`` when the ratio at ``high`` users is above ``level``.
    """
    level = check_real(level, "level", minimum=1.0)
    low, high = check_positive_int(low, "low"), check_positive_int(high, "high")
    grid = np.unique(np.round(np.geomspace(low, high, max(2, int(40 * math.log10(high / low)) + 1))))
    return _last_crossing(
        lambda n: plan_recommendation(n, n_items, **kwargs).ratio > level, [int(n) for n in grid],
        midpoint=lambda lo, hi: (lo + hi) // 2, close=lambda lo, hi: hi - lo <= max(1, lo // 1000),
    )  # fmt: skip


def _last_crossing(
    above: Callable[[Any], bool], grid: list, *, midpoint: Callable[[Any, Any], Any],
    close: Callable[[Any, Any], bool],
) -> Any:
    """The smallest point of ``grid``'s range from which ``above`` is false for good.

    ``above`` at every grid point; ``None`` if true at the last, the first point if false
    everywhere; else bisection between the last grid point where it is true and the next
    (``midpoint``) until ``close``.
    """
    over = [above(x) for x in grid]
    if over[-1]:
        return None
    if not any(over):
        return grid[0]
    last = max(i for i, a in enumerate(over) if a)
    lo, hi = grid[last], grid[last + 1]  # above at lo, at or below from hi on
    while not close(lo, hi):
        mid = midpoint(lo, hi)
        if above(mid):
            lo = mid
        else:
            hi = mid
    return hi


def epsilon_within(
    level: float, n_users: int, n_items: int, *, low: float = 0.01, high: float = 100.0, **kwargs: object
) -> float | None:
    """The smallest budget from which :func:`plan_recommendation` predicts a ratio ``<= level`` for good.

    The inverse of :func:`users_within` for a fixed number of users: what ``epsilon`` a fit needs
    before it is worth running. ``max_ratings="auto"`` grows with the budget, so the ratio need not
    fall strictly everywhere; as in :func:`users_within` this is the smallest ``epsilon`` such that
    the ratio stays at or below ``level`` for every budget from it to ``high`` (a grid of 40 points
    per decade, then bisection at the last crossing to a relative width of ``1e-3``).

    Checked against fits (user level, 7·10⁴ MovieLens-shaped users, 1682 items, δ = 10⁻⁶): the
    predicted ratio at ε = 1 / 1.5 / 2 / 3 is 1.044 / 1.036 / 1.032 / 1.027, measured 1.041 / 1.035 /
    1.031 / 1.026 (``docs/notes/completion-research-log.md``).

    Parameters
    ----------
    level : float
        The ratio to reach (e.g. 1.03: within 3% of non-private).
    n_users, n_items : int
    low, high : float
        The range of budgets searched.
    **kwargs
        The other arguments of :func:`plan_recommendation` except ``epsilon`` (``delta``,
        ``relation``, ``typical_ratings``, ...).

    Returns
    -------
    float or None
        ``None`` when the ratio at ``high`` is above ``level``.

    Examples
    --------
    >>> from dptensor.models.completion.plan import epsilon_within
    >>> needed = epsilon_within(1.03, 70_000, 1682, typical_ratings=106)
    >>> 1.0 < needed < 4.0
    True
    """
    level = check_real(level, "level", minimum=1.0)
    low = check_real(low, "low", minimum=0.0)
    high = check_real(high, "high", minimum=0.0)
    if "epsilon" in kwargs:
        raise TypeError("epsilon_within searches the budget: give low and high, not epsilon")
    if not 0.0 < low < high:
        raise ValueError(f"low and high must satisfy 0 < low < high, got {low!r} and {high!r}")

    grid = np.geomspace(low, high, max(2, int(40 * math.log10(high / low)) + 1))
    return _last_crossing(
        lambda e: plan_recommendation(n_users, n_items, epsilon=e, **kwargs).ratio > level,
        [float(e) for e in grid], midpoint=lambda lo, hi: math.sqrt(lo * hi),
        close=lambda lo, hi: hi / lo <= 1.0 + 1e-3,
    )  # fmt: skip
