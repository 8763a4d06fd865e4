"""The plan of DP-ALS's releases (Wei et al., Algorithm 5, corrected): which, and their shares of ``mu^2``.

:func:`plan_releases` lists, from public inputs only, the releases a DP-ALS fit makes under the
``"entry-value"`` or ``"user"`` relation (the offsets, the global mean, the spectral start, each
sweep's modes and core) and splits the fit's Gaussian-DP ``mu^2`` among them;
:func:`spectral_start_pays` and :func:`auto_max_ratings` are the public rules of ``start="auto"``
and ``max_ratings="auto"``. The releases themselves are in :mod:`~dptensor.models.completion._dp_als`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dptensor.privacy import gaussian_sigma_analytic

__all__ = ["DEFAULT_MAX_RATINGS", "RELATIONS", "SPECTRAL_MAX_ITEMS", "DpAlsPlan", "auto_max_ratings",
           "plan_releases", "spectral_start_pays"]

RELATIONS = ("entry-value", "user")
#: Under ``"user"``, each user's contribution to a release is bounded as if they had at most this
#: many ratings (``max_ratings``). Below the number of ratings of nearly every user, the bound binds
#: for all of them: each user then counts once whatever their number of ratings, which is what the
#: noise pays for (issue 38, MovieLens-100K-shaped users, 10^4 of them, epsilon 1 and 4: held-out
#: RMSE the same for 3, 10 and 20, 0.003-0.008 worse at 100, the former default).
DEFAULT_MAX_RATINGS = 10
#: ``max_ratings="auto"`` (:func:`auto_max_ratings`): the bound stays ``DEFAULT_MAX_RATINGS`` up to
#: ``u = n_users / (z sqrt(n_items)) = MAX_RATINGS_GROWTH_FROM`` (``z`` the items' noise multiplier)
#: and grows as ``u ** MAX_RATINGS_GROWTH_POWER`` beyond, up to ``MAX_RATINGS_CAP``.
MAX_RATINGS_GROWTH_FROM = 350.0
MAX_RATINGS_GROWTH_POWER = 1.25
MAX_RATINGS_CAP = 300

#: Under ``"user"``, the share of ``mu^2`` of the spectral start (:func:`spectral_start`), taken
#: from the sweeps (the mean keeps ``budget_split``). MovieLens-100K-shaped users, epsilon 1, one
#: sweep after it: 0.3 and 0.5 within 0.001 at 7e4 users, 0.5 worse at 1e4.
SPECTRAL_SHARE = 0.3
#: ``start="auto"`` makes the spectral start where ``n_users >= SPECTRAL_MIN_USERS * z sqrt(n_items)``
#: (``z`` its noise multiplier): the users' covariance grows with ``n_users``, the spectral norm of
#: its noise with ``z sqrt(n_items)``. MovieLens-100K-shaped users, held-out-user RMSE, one sweep
#: after it against the best number of sweeps without it: at ``n_users / (z sqrt(m))`` = 30, 91,
#: 106, 212, 318: 1.0306 / 1.0217, 1.0084 / 1.0079, 1.0042 / 1.0065, 0.9895 / 1.0017,
#: 0.9852 / 0.9943 (issue 38).
SPECTRAL_MIN_USERS = 100.0
#: The spectral start forms an ``n_items x n_items`` matrix: not above this many items (128 MB).
SPECTRAL_MAX_ITEMS = 4096

@dataclass(frozen=True)
class DpAlsPlan:
    """The releases of a DP-ALS fit, fixed before the data are read.

    Attributes
    ----------
    steps : tuple of str
        In order: ``"offsets"`` (``"entry-value"``: the pattern-weighted Laplace release of the
        mean and biases, :mod:`dptensor.models.completion._pattern_offsets`), ``"mean"``
        (``"user"``: the global mean), ``"spectrum"`` (``"user"``: the items' covariance that
        starts the item factors, :func:`spectral_start`), ``"0"``, ``"1"``, ``"2"`` (a mode's row
        statistics in one ALS sweep; under ``"user"`` mode 0 is never released), ``"core"``.
    multipliers : tuple of float
        The noise multiplier of each release: for a Gaussian release ``z_t`` (noise std /
        l2 sensitivity), for the Laplace release ``1 / epsilon_offsets`` (scale / l1 sensitivity).
    mu : float
        The Gaussian-DP parameter of the Gaussian releases, ``sqrt(sum 1 / z_t^2)`` (0 if none).
    offsets_epsilon : float
        The pure budget of the Laplace release (0 if there is none).
    """

    steps: tuple
    multipliers: tuple
    mu: float
    offsets_epsilon: float = 0.0


def plan_releases(
    relation: str,
    *,
    has_factors: bool,
    offsets: str,
    tucker: bool,
    n_iter: int,
    epsilon: float,
    delta: float,
    budget_split: float,
    one_row_modes: tuple = (),
    spectral: bool = False,
) -> DpAlsPlan:
    """The release schedule and its noise multipliers (from parameters only, never the data).

    ``"entry-value"``: the offsets' Laplace release gets ``budget_split * epsilon`` (all of it
    without factors) and the Gaussian sweeps the rest, ``(epsilon - epsilon_offsets, delta)``, by
    basic composition. ``"user"``: every release is Gaussian; the mean gets ``budget_split`` of
    ``mu^2`` and the sweeps share the rest equally. A mode of ``one_row_modes`` (item-side modes
    with a single row, e.g. the day mode of a user x item matrix given as ``(n, m, 1)``: public
    sizes) is not released under ``"user"`` while another mode is: its one row only rescales the
    factors and shifts the mean, which the other releases absorb, and its share of the budget
    goes to the rest. It keeps its data-independent start. ``spectral`` (``"user"`` with factors
    only; :func:`spectral_start_pays`): a ``"spectrum"`` release follows the mean, with
    :data:`SPECTRAL_SHARE` of ``mu^2`` taken from the sweeps.
    """
    biases = offsets == "biases"
    with_offsets = offsets in ("mean", "biases")
    if relation == "entry-value":
        sweep = ([str(m) for m in range(3)] + (["core"] if tucker else [])) if has_factors else []
        later = sweep * n_iter
        if not later and not with_offsets:
            raise ValueError("nothing to release: no factors and offsets='none'")
        offsets_epsilon = (epsilon * (budget_split if later else 1.0)) if with_offsets else 0.0
        if not later:
            return DpAlsPlan(("offsets",), (1.0 / offsets_epsilon,), 0.0, offsets_epsilon)
        mu = 1.0 / gaussian_sigma_analytic(epsilon - offsets_epsilon, delta)
        gaussian = _equal_multipliers(mu, len(later))
        first = ("offsets",) if with_offsets else ()
        head = (1.0 / offsets_epsilon,) if with_offsets else ()
        return DpAlsPlan(first + tuple(later), head + gaussian, _total_mu(gaussian), offsets_epsilon)
    first: list[str] = ["mean"] if with_offsets else []
    modes = [m for m in ("1", "2") if int(m) not in one_row_modes] or ["1", "2"]
    sweep = (modes + (["core"] if tucker and has_factors else [])) if (has_factors or biases) else []
    later = sweep * n_iter
    if spectral and not has_factors:
        raise ValueError("a spectral start needs factors (rank is None)")
    start = ["spectrum"] if spectral else []
    steps = first + start + later
    if not steps:
        raise ValueError("nothing to release: no factors and offsets='none'")
    shares = np.zeros(len(steps))
    if first and later:
        shares[0] = budget_split
    elif first:
        shares[0] = 1.0
    rest = 1.0 - shares[0]
    if start:
        shares[len(first)] = SPECTRAL_SHARE * rest
        rest -= shares[len(first)]
    if later:
        shares[len(first) + len(start):] = rest / len(later)
    mu = 1.0 / gaussian_sigma_analytic(epsilon, delta)
    multipliers = _never_above(mu, [1.0 / (mu * math.sqrt(share)) for share in shares])
    return DpAlsPlan(tuple(steps), multipliers, _total_mu(multipliers))


def spectral_start_pays(n_users: int, n_items: int, rank: int, z: float) -> bool:
    """``start="auto"``: whether the spectral start is made (public sizes and the plan only).

    Where ``n_users >= SPECTRAL_MIN_USERS * z sqrt(n_items)``, ``z`` the spectrum release's noise
    multiplier in the schedule :func:`plan_releases` makes with it, the items are at most
    :data:`SPECTRAL_MAX_ITEMS` and at least ``rank``.
    """
    if not 1 <= rank <= n_items <= SPECTRAL_MAX_ITEMS:
        return False
    return n_users >= SPECTRAL_MIN_USERS * z * math.sqrt(n_items)


def auto_max_ratings(n_users: int, n_items: int, z: float) -> int:
    """``max_ratings="auto"``: each user's contribution bound, from public sizes and the plan only.

    ``DEFAULT_MAX_RATINGS * max(1, u / MAX_RATINGS_GROWTH_FROM) ** MAX_RATINGS_GROWTH_POWER``, rounded
    and at most :data:`MAX_RATINGS_CAP`, with ``u = n_users / (z sqrt(n_items))`` and ``z`` the item
    release's noise multiplier. A low bound makes every user count once (what the noise pays for)
    but re-weights the ratings of heavy users; once the noise on each item's statistics is small
    against the users' sum, that re-weighting costs more than the noise a higher bound adds
    (issue 38, MovieLens-100K-shaped users, held-out-user RMSE; see the research log).
    """
    u = n_users / (z * math.sqrt(n_items))
    grown = DEFAULT_MAX_RATINGS * max(1.0, u / MAX_RATINGS_GROWTH_FROM) ** MAX_RATINGS_GROWTH_POWER
    return int(min(MAX_RATINGS_CAP, round(grown)))


def _total_mu(multipliers) -> float:
    return math.sqrt(sum(1.0 / z**2 for z in multipliers))


def _equal_multipliers(mu: float, count: int) -> tuple:
    return _never_above(mu, [math.sqrt(count) / mu] * count)


def _never_above(mu: float, multipliers: list) -> tuple:
    """Rounding: scale the multipliers up so that the composed ``mu`` never exceeds the budget."""
    total = _total_mu(multipliers)
    if total > mu:
        multipliers = [z * total / mu * (1.0 + 1e-12) for z in multipliers]
    return tuple(float(z) for z in multipliers)
