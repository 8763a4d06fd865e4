"""The planner of private top-N: popularity or EASE, and what each costs, before any budget is spent.

:func:`plan_recommender` predicts, from **public sizes only** -- the numbers of users and items, a
typical number of interactions per user (a public guess), ``epsilon`` and ``delta`` -- how a private
EASE (:class:`~dptensor.models.recommend.PrivateRecommender`: the unit-row Gram with symmetric
Gaussian noise, EASE with a ridge above the noise) compares with the non-private default EASE and
with popularity, in Recall@20 of held-out users folded in. It reads no data, charges nothing and
builds no estimator; ``PrivateRecommender(method="auto")`` calls it to choose: popularity below the
crossover, EASE above.

The prediction
--------------
The noisy Gram is a spiked matrix: its signal, the Gram of ``n_users`` unit-norm rows of about
``m`` items each, has its leading eigenvalues of order ``n_users * m / n_items`` (``n_users`` times
the squared norm ``m / n_items`` of a typical unit row's mean, for items of comparable popularity),
while the noise's spectral norm is about ``sqrt(2) sigma sqrt(n_items)`` (a symmetric Gaussian
matrix of off-diagonal standard deviation ``sigma / sqrt(2)``; ``sigma`` the Gram release's noise).
Their ratio is the signal-to-noise ratio

    s = n_users * m / (sigma * n_items ** 1.5),

and the private EASE keeps the share of the non-private Recall@20

    ratio(s) = s ** p / (s ** p + s0 ** p)

(a logistic law in ``log s``: nothing below the noise, everything far above it). ``s0`` (the SNR at
which half is kept) and ``p`` are fitted by least squares in ``log ratio`` on the measured curve of
``benchmarks/bench_topn_curve.py`` (semi-synthetic users shaped like MovieLens-100K, 10^3 to 10^5
users and more, ``epsilon`` 1 and 4, ``delta = 1e-6``: :data:`CALIBRATION`,
``docs/notes/topn-curve.md``). The ratio to popularity is ``ratio * lift``, ``lift`` the non-private
EASE's Recall@20 over popularity's on that curve (a property of the data the planner cannot see:
about 2.1 on MovieLens-100K and on its semi-synthetic users); private popularity keeps
``popularity_ratio`` of popularity's Recall@20 (close to 1 from a few hundred users on). The
crossover is the number of users at which ``ratio * lift`` reaches ``popularity_ratio``; below it
the plan chooses popularity. On data of another shape the prediction is a guide, not a measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dptensor._validation import check_epsilon_delta, check_positive_int, check_real
from dptensor.models.recommend.options import RecommenderOptions, check_share
from dptensor.privacy.calibration import gaussian_sigma_analytic

__all__ = ["CALIBRATION", "METHODS", "RecommenderPlan", "plan_recommender", "predicted_ratio"]

#: What ``method`` may be.
METHODS = ("auto", "popularity", "ease")

#: Replace-one-user sensitivity of the unit-row releases (counts and Gram), in l2 / Frobenius norm.
SENSITIVITY = math.sqrt(2.0)

#: The constants of the prediction, fitted on the measured curve (module docstring): least squares
#: in ``log ratio`` over the 14 private-EASE points of ``benchmarks/results/topn_curve.json``
#: (10^3 .. 10^6 users, epsilon 1 and 4) gave ``s0 = 0.753``, ``p = 1.004``; ``p`` is rounded to 1.
CALIBRATION: dict[str, float] = {
    "s0": 0.75,  # the SNR at which the private EASE keeps half of the non-private Recall@20
    "p": 1.0,  # the steepness of the logistic law in log s
    "lift": 2.14,  # non-private EASE's Recall@20 over popularity's (MovieLens-100K-shaped users)
    "popularity_ratio": 0.99,  # private popularity's Recall@20 over popularity's
}

#: The typical interactions per user assumed when none is given (MovieLens-100K's mean, 106).
DEFAULT_TYPICAL_ITEMS = 100


@dataclass(frozen=True)
class RecommenderPlan:
    """What a private top-N fit would be, from public sizes (:func:`plan_recommender`).

    Attributes
    ----------
    method : {"popularity", "ease"}
        The method chosen (``"auto"``: popularity below the crossover, EASE from it on).
    n_users, n_items : int
    epsilon, delta : float
    typical_items_per_user : float
        The ``m`` of the prediction.
    sigma_counts, sigma_recount, sigma_gram : float
        The noise standard deviations of the count, recount and Gram releases the prediction
        assumes (``sigma_recount`` is ``nan`` for EASE, ``sigma_gram`` for popularity; private
        popularity counts, then recounts its candidates:
        :mod:`~dptensor.models.recommend.private_popularity`).
    snr : float
        ``s`` of the module docstring.
    ratio_to_nonprivate : float
        Predicted Recall@20 of the chosen private method over the non-private default EASE's.
    ratio_to_popularity : float
        Predicted Recall@20 of the chosen private method over (non-private) popularity's.
    ease_ratio_to_nonprivate, ease_ratio_to_popularity : float
        The same for a private EASE whatever the choice.
    crossover_users : int
        The number of users from which a private EASE is predicted to beat private popularity.
    verdict : str
        One line for a person.
    """

    method: str
    n_users: int
    n_items: int
    epsilon: float
    delta: float
    typical_items_per_user: float
    sigma_counts: float
    sigma_recount: float
    sigma_gram: float
    snr: float
    ratio_to_nonprivate: float
    ratio_to_popularity: float
    ease_ratio_to_nonprivate: float
    ease_ratio_to_popularity: float
    crossover_users: int
    verdict: str


def predicted_ratio(snr: float, calibration: dict[str, float] | None = None) -> float:
    """The private EASE's share of the non-private Recall@20 at signal-to-noise ratio ``snr``."""
    c = CALIBRATION if calibration is None else calibration
    if snr <= 0:
        return 0.0
    x = (snr / c["s0"]) ** c["p"]
    return x / (1.0 + x)


def _snr(n_users: float, n_items: int, typical: float, sigma: float) -> float:
    return n_users * typical / (sigma * n_items**1.5)


def plan_recommender(
    n_users: int,
    n_items: int,
    *,
    epsilon: float,
    delta: float,
    max_items_per_user: int | None = None,
    typical_items_per_user: float | None = None,
    method: str = "auto",
    counts_share: float | None = None,
    recount_share: float | None = None,
) -> RecommenderPlan:
    """Predict a private top-N fit's Recall@20 against non-private EASE and popularity (no data read).

    Parameters
    ----------
    n_users, n_items : int
        Public sizes of the training matrix.
    epsilon, delta : float
        The budget of the whole fit.
    max_items_per_user : int, optional
        A public bound on a user's row (the unit-row releases need none; it caps the typical
        number when that is larger).
    typical_items_per_user : float, optional
        A public guess of the mean row length (default ``min(100, max_items_per_user, n_items)``).
    method : {"auto", "popularity", "ease"}, default "auto"
        ``"auto"`` chooses by the prediction; the others predict that method.
    counts_share : float, optional
        A private EASE's share of ``mu^2`` spent on the item counts (default
        :class:`~dptensor.models.recommend.RecommenderOptions`'s, 0.05): the Gram's noise is
        ``sqrt(2) z / sqrt(1 - counts_share)``, ``z`` the analytic Gaussian multiplier of the whole
        budget.
    recount_share : float, optional
        Private popularity's share of ``mu^2`` spent on the recount of its candidates (default
        :class:`~dptensor.models.recommend.RecommenderOptions`'s, 0.75); the first counts get the rest.

    Returns
    -------
    RecommenderPlan
    """
    n_users = check_positive_int(n_users, "n_users")
    n_items = check_positive_int(n_items, "n_items")
    check_epsilon_delta(epsilon, delta)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    cap = n_items
    if max_items_per_user is not None:
        cap = min(cap, check_positive_int(max_items_per_user, "max_items_per_user"))
    typical = float(min(DEFAULT_TYPICAL_ITEMS, cap)) if typical_items_per_user is None else min(
        check_real(typical_items_per_user, "typical_items_per_user"), float(cap))
    share = check_share(RecommenderOptions.counts_share if counts_share is None else counts_share,
                        "counts_share")
    recount = check_share(RecommenderOptions.recount_share if recount_share is None else recount_share,
                          "recount_share")
    c = CALIBRATION
    z = gaussian_sigma_analytic(float(epsilon), float(delta))
    sigma_gram = SENSITIVITY * z / math.sqrt(1.0 - share)
    snr = _snr(n_users, n_items, typical, sigma_gram)
    ease_np = predicted_ratio(snr)
    ease_pop = ease_np * c["lift"]
    pop_pop = c["popularity_ratio"]
    # the crossover: ratio(s) * lift = popularity_ratio, s = s0 * (q / (1 - q)) ** (1 / p), q = pop / lift
    q = pop_pop / c["lift"]
    s_cross = c["s0"] * (q / (1.0 - q)) ** (1.0 / c["p"]) if q < 1.0 else math.inf
    crossover = s_cross * sigma_gram * n_items**1.5 / typical
    crossover_users = int(math.ceil(crossover)) if math.isfinite(crossover) else 2**63 - 1
    chosen = method
    if method == "auto":
        chosen = "ease" if ease_pop > pop_pop else "popularity"
    # popularity spends the whole budget on its counts and recount; a private EASE its counts share
    sigma_counts = SENSITIVITY * z / math.sqrt(share if chosen == "ease" else 1.0 - recount)
    sigma_recount = math.nan if chosen == "ease" else SENSITIVITY * z / math.sqrt(recount)
    if chosen == "ease":
        to_np, to_pop = ease_np, ease_pop
    else:
        to_np, to_pop = pop_pop / c["lift"], pop_pop
    verdict = (
        f"{chosen}: predicted Recall@20 {to_pop:.2f}x popularity's and {to_np:.2f}x non-private EASE's "
        f"at {n_users} users (a private EASE beats private popularity from about {crossover_users} users)"
    )
    return RecommenderPlan(
        method=chosen, n_users=n_users, n_items=n_items, epsilon=float(epsilon), delta=float(delta),
        typical_items_per_user=typical, sigma_counts=sigma_counts, sigma_recount=sigma_recount,
        sigma_gram=sigma_gram if chosen == "ease" or method == "auto" else math.nan, snr=snr,
        ratio_to_nonprivate=to_np, ratio_to_popularity=to_pop, ease_ratio_to_nonprivate=ease_np,
        ease_ratio_to_popularity=ease_pop, crossover_users=crossover_users, verdict=verdict,
    )
