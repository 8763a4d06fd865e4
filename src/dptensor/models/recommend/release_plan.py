"""The budget of the top-N family's private releases: noise multipliers and one guarantee, from public inputs.

A private top-N model releases some of five sums over users (:mod:`dptensor.models.recommend.releases`):
``"selection"`` (the items that may appear, Gaussian partition selection), ``"counts"`` (item
popularity), ``"recount"`` (the counts again over the candidates the counts chose:
:mod:`dptensor.models.recommend.private_popularity`), ``"gram"`` (the item Gram that EASE solves) and
``"ials"`` (the item-side statistics of the private implicit ALS, once per sweep:
:mod:`dptensor.models.recommend.private_ials`). Each of the first four Gaussian parts has l2
sensitivity ``sqrt(2)`` under the ``"user"`` relation (one user's
whole row replaced by any other row), so with noise standard deviation ``sigma_r`` the release ``r``
is a Gaussian mechanism of noise multiplier ``z_r = sigma_r / sqrt(2)``, i.e. ``(1 / z_r)``-GDP (Dong,
Roth & Su 2022, Corollary 2.13). ``"ials"`` is described by :class:`SweepReleases`: statistics
``s`` of sensitivity ``Delta_s``, each released ``T`` times (once per sweep, adaptively), its share
of ``mu^2`` split by the statistics' own shares and equally over the sweeps:
``1 / z_s^2 = share_ials * share_s * mu^2 / T``, ``sigma_s = z_s Delta_s``.

Exact composition. Gaussian releases compose, adaptively, into one ``mu``-GDP release with
``mu^2 = sum_r 1 / z_r^2`` (Dong, Roth & Su 2022, Corollary 3.3; a sweep statistic counts ``T``
times). :func:`recommender_guarantee`
splits ``mu^2`` by ``shares`` (``1 / z_r^2 = share_r mu^2``; equal shares, the default, give every
release the same multiplier ``z = sqrt(K) / mu``). Item selection adds its threshold part, an
``(epsilon_t, delta_t)`` release with ``delta_t = threshold_delta_share * delta`` and
``epsilon_t = -log(1 - delta_t)`` (:mod:`dptensor.privacy.vocabulary`); its worst case is the
four-point pair of Kairouz, Oh & Viswanath (2015), so the whole composition has the privacy curve

``delta(eps) = delta_t + (1 - delta_t) [p delta_mu(eps - epsilon_t) + (1 - p) delta_mu(eps + epsilon_t)]``,

``p = e^{epsilon_t} / (1 + e^{epsilon_t})``, ``delta_mu`` the curve of one Gaussian of multiplier
``1 / mu`` (Balle & Wang 2018, Theorem 8). ``mu`` is the largest for which ``delta(epsilon) <=
delta`` (bisection on that closed form, on the safe side), then checked against the accountant
the ledger uses (:func:`dptensor.privacy.ledger.composed_epsilon`: the analytic Gaussian for
Gaussian releases only, dp-accounting's PLD with the threshold part), aiming at ``epsilon - 1e-5``
and lowered until that accountant reports at most ``epsilon`` -- and at least ``epsilon - 1e-3`` --
so that a ledger
holding exactly ``epsilon`` accepts the charge and nearly nothing of the budget is left unused.

Everything here is a function of the releases asked for, the budget, the shares, the weighting and
the per-user bound: nothing is read from the data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import dp_accounting

from dptensor._validation import check_epsilon_delta, check_positive_int, check_real
from dptensor.privacy.accounting import EpsilonDeltaDpEvent
from dptensor.privacy.calibration import gaussian_delta, gaussian_sigma_analytic
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.ledger import composed_epsilon
from dptensor.privacy.vocabulary import (
    DEFAULT_THRESHOLD_DELTA_SHARE,
    VocabularyCalibration,
    vocabulary_threshold,
)

__all__ = [
    "NEIGHBOURING",
    "PROTECTED",
    "RELEASES",
    "SENSITIVITY",
    "WEIGHTINGS",
    "ReleasePlan",
    "SweepReleases",
    "check_weighting",
    "counts_guarantee",
    "gram_guarantee",
    "recommender_guarantee",
]

#: The releases, in the order they are made (selection first: the others are over its items).
RELEASES = ("selection", "counts", "recount", "gram", "ials")
#: Row weightings of the counts and the Gram (:mod:`dptensor.models.recommend.releases`).
WEIGHTINGS = ("unit", "capped")
#: l2 (counts, selection) and Frobenius (Gram) sensitivity of every release under the "user" relation.
SENSITIVITY = math.sqrt(2.0)
#: How far below the asked epsilon the calibrated composition may land.
EPSILON_TOLERANCE = 1e-3
#: The discretisation of the PLD accountant (the ledger's default).
VALUE_DISCRETIZATION = 1e-4

NEIGHBOURING = "user"
PROTECTED = "one user's whole row of interactions, replaced by any other row (empty, one item, every item)"
_PUBLIC_ITEMS = "the item list (the columns of the matrix)"
_SELECTED_ITEMS = (
    "the item id space (the number of columns; which items occur is private: the items are chosen by "
    "the private item selection, charged within this guarantee)"
)
_DESCRIPTIONS = {
    "selection": "the items whose noisy unit-weighted count passes the threshold (partition selection)",
    "counts": "item counts sum_u xhat_u plus N(0, sigma^2) per item",
    "recount": "item counts again over the candidates (the largest noisy counts): each row cut to them and "
    "weighted anew to norm 1, plus N(0, sigma^2) per candidate",
    "gram": "item Gram sum_u xhat_u xhat_u^T plus symmetric Gaussian noise (std sigma on the diagonal, "
    "sigma/sqrt(2) off it)",
    "ials": "the private implicit ALS's item-side sums, once per sweep, each plus Gaussian noise "
    "(details['ials'])",
}


def check_weighting(weighting: object, max_items_per_user: object) -> int | None:
    """The per-user bound ``m`` a weighting needs (``None`` for ``"unit"`` without a bound)."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    if max_items_per_user is None:
        if weighting == "capped":
            raise ValueError("weighting='capped' needs max_items_per_user (the public bound m)")
        return None
    return check_positive_int(max_items_per_user, "max_items_per_user")


@dataclass(frozen=True)
class SweepReleases:
    """Statistics released once per sweep, ``iterations`` times: the ``"ials"`` release of a plan.

    Attributes
    ----------
    iterations : int
        ``T``, the sweeps (each statistic is released ``T`` times).
    sensitivities : mapping
        Statistic to its l2 (Frobenius) sensitivity under the ``"user"`` relation (``> 0``).
    shares : mapping
        Statistic to its share of the sweeps' ``mu^2`` (normalised here; default equal).
    settings : mapping
        Public settings recorded in the guarantee's details (factors, regularisation, ...).
    """

    iterations: int
    sensitivities: Mapping[str, float]
    shares: Mapping[str, float] | None = None
    settings: Mapping[str, object] = field(default_factory=dict)

    def checked(self) -> SweepReleases:
        """The description with its sizes checked and its shares normalised."""
        iterations = check_positive_int(self.iterations, "iterations")
        names = tuple(self.sensitivities)
        if not names:
            raise ValueError("sweeps must release at least one statistic")
        sensitivity = {n: check_real(self.sensitivities[n], f"sensitivities[{n!r}]") for n in names}
        return SweepReleases(iterations, MappingProxyType(sensitivity),
                             MappingProxyType(_check_shares(self.shares, names, what="statistic")),
                             MappingProxyType(dict(self.settings)))


@dataclass(frozen=True)
class ReleasePlan:
    """The noise of each planned release and their joint guarantee (public inputs only).

    Attributes
    ----------
    releases : tuple of str
        Among :data:`RELEASES`, in that order.
    epsilon, delta : float
        The budget the composition spends.
    shares : mapping
        Release to its share of ``mu^2`` (sum 1).
    noise_multipliers : mapping
        Release to ``z_r = sigma_r / sqrt(2)``.
    sigmas : mapping
        Release to its noise standard deviation (the Gram's: on the diagonal).
    mu : float
        The Gaussian parts' composed GDP parameter, ``sqrt(sum_r 1 / z_r^2)``.
    selection : VocabularyCalibration or None
        The item selection's noise and threshold (``None`` without selection).
    weighting : str
        Of the counts and the Gram.
    max_items_per_user : int or None
        ``m``.
    guarantee : PrivacyGuarantee
    sweeps : SweepReleases or None
        The ``"ials"`` release's statistics (``None`` without it).
    sweep_multipliers, sweep_sigmas : mapping
        Each sweep statistic's noise multiplier ``z_s`` and standard deviation ``z_s Delta_s``
        (every sweep the same).
    """

    releases: tuple[str, ...]
    epsilon: float
    delta: float
    shares: Mapping[str, float]
    noise_multipliers: Mapping[str, float]
    sigmas: Mapping[str, float]
    mu: float
    selection: VocabularyCalibration | None
    weighting: str
    max_items_per_user: int | None
    guarantee: PrivacyGuarantee
    sweeps: SweepReleases | None = None
    sweep_multipliers: Mapping[str, float] = field(default_factory=dict)
    sweep_sigmas: Mapping[str, float] = field(default_factory=dict)

    def sigma(self, release: str) -> float:
        """The noise standard deviation of ``release``."""
        if release not in self.sigmas:
            raise ValueError(f"release {release!r} is not in this plan ({', '.join(self.releases)})")
        return float(self.sigmas[release])


def _check_releases(releases: object) -> tuple[str, ...]:
    if isinstance(releases, str):
        releases = (releases,)
    try:
        names = list(releases)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"releases must be a sequence of names among {RELEASES}, got {releases!r}") from None
    for name in names:
        if name not in RELEASES:
            raise ValueError(f"releases must be among {RELEASES}, got {name!r}")
    if not names or len(set(names)) != len(names):
        raise ValueError(f"releases must name each release at most once and at least one, got {names!r}")
    if "recount" in names and "counts" not in names:
        raise ValueError("the 'recount' release recounts the candidates that the 'counts' release chose: "
                         "plan both")
    return tuple(name for name in RELEASES if name in names)


def _check_shares(shares: Mapping[str, float] | None, releases: tuple[str, ...],
                  what: str = "planned release") -> dict[str, float]:
    if shares is None:
        return {name: 1.0 / len(releases) for name in releases}
    if not isinstance(shares, Mapping) or set(shares) != set(releases):
        raise ValueError(f"shares must map each {what} {releases} to a weight > 0, got {shares!r}")
    values = {name: check_real(shares[name], f"shares[{name!r}]") for name in releases}
    total = math.fsum(values.values())
    return {name: values[name] / total for name in releases}


def _composed_delta(z: float, epsilon: float, epsilon_t: float, delta_t: float) -> float:
    """``delta(epsilon)`` of a Gaussian of multiplier ``z`` composed with an ``(epsilon_t, delta_t)`` part."""
    if delta_t == 0.0:
        return gaussian_delta(z, epsilon)
    p = 1.0 / (1.0 + math.exp(-epsilon_t))
    inner = p * gaussian_delta(z, epsilon - epsilon_t) + (1.0 - p) * gaussian_delta(z, epsilon + epsilon_t)
    return delta_t + (1.0 - delta_t) * inner


def _effective_multiplier(epsilon: float, delta: float, epsilon_t: float, delta_t: float) -> float:
    """The smallest ``z`` (``1 / mu``) whose composition with the threshold is ``(epsilon, delta)``-DP."""
    low = gaussian_sigma_analytic(epsilon, delta)  # the threshold part only adds privacy loss
    if delta_t == 0.0:
        return low
    high = gaussian_sigma_analytic(epsilon - epsilon_t, delta - delta_t)  # basic composition suffices
    while _composed_delta(high, epsilon, epsilon_t, delta_t) > delta:  # pragma: no cover - guard
        high *= 1.01
    for _ in range(200):
        middle = 0.5 * (low + high)
        if middle in (low, high):
            break
        if _composed_delta(middle, epsilon, epsilon_t, delta_t) <= delta:
            high = middle
        else:
            low = middle
    return high


def _events(
    multipliers: Mapping[str, float], selection: VocabularyCalibration | None,
    sweep_multipliers: Mapping[str, float], iterations: int,
) -> dp_accounting.DpEvent:
    events: list[dp_accounting.DpEvent] = [dp_accounting.GaussianDpEvent(z) for z in multipliers.values()]
    events += [dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), iterations)
               for z in sweep_multipliers.values()]
    if selection is not None:
        events.append(EpsilonDeltaDpEvent(selection.threshold_epsilon, selection.threshold_delta))
    return events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events)


def recommender_guarantee(
    releases: Sequence[str],
    epsilon: float,
    delta: float,
    *,
    shares: Mapping[str, float] | None = None,
    weighting: str = "unit",
    max_items_per_user: int | None = None,
    threshold_delta_share: float = DEFAULT_THRESHOLD_DELTA_SHARE,
    n_users: int | None = None,
    n_items: int | None = None,
    max_selected_items: int | None = None,
    sweeps: SweepReleases | None = None,
) -> ReleasePlan:
    """Calibrate the planned releases' noise so that their exact composition spends ``(epsilon, delta)``.

    Parameters
    ----------
    releases : sequence of str
        Among ``"selection"``, ``"counts"``, ``"recount"`` (with ``"counts"``), ``"gram"``,
        ``"ials"`` (each at most once; made in that order).
    epsilon, delta : float
        The total budget under the ``"user"`` relation.
    shares : mapping, optional
        Release to a positive weight: release ``r`` gets the share ``shares[r] / sum(shares)`` of the
        composed ``mu^2`` (``1 / z_r^2 = share_r mu^2``). Default: equal shares, one common noise
        multiplier. The split does not change the privacy, only where the noise goes.
    weighting : {"unit", "capped"}, default "unit"
        The rows' weighting of the counts and the Gram (:mod:`~dptensor.models.recommend.releases`).
    max_items_per_user : int, optional
        ``m``: required by ``"selection"`` and by ``weighting="capped"``.
    threshold_delta_share : float, default 0.5
        The share of ``delta`` the selection's threshold spends.
    n_users, n_items, max_selected_items : int, optional
        Public sizes, recorded in the details when given.
    sweeps : SweepReleases, optional
        The statistics of the ``"ials"`` release (required by it, refused without it).

    Returns
    -------
    ReleasePlan
        Its ``guarantee`` holds (the caller voids it for insecure noise by
        :func:`~dptensor.privacy.begin_release`), with ``epsilon_exact`` from the ledger's accountant.

    Examples
    --------
    >>> plan = recommender_guarantee(("counts", "gram"), 1.0, 1e-6)
    >>> round(plan.noise_multipliers["gram"], 3) == round(plan.noise_multipliers["counts"], 3)
    True
    >>> abs(plan.guarantee.epsilon_exact - 1.0) <= 1e-3
    True
    """
    names = _check_releases(releases)
    check_epsilon_delta(epsilon, delta)
    epsilon, delta = float(epsilon), float(delta)
    share = _check_shares(shares, names)
    m = check_weighting(weighting, max_items_per_user) if {"counts", "gram"} & set(names) else None
    if "recount" in names and weighting != "unit":
        raise ValueError(f"the 'recount' release weighs rows 'unit' (norm 1 on the candidates), got "
                         f"weighting={weighting!r}")
    if "selection" in names:
        if max_items_per_user is None:
            raise ValueError("item selection needs max_items_per_user (the public bound m on a user's items)")
        m = check_positive_int(max_items_per_user, "max_items_per_user")
        fraction = check_real(threshold_delta_share, "threshold_delta_share")
        if not fraction < 1:
            raise ValueError(f"threshold_delta_share must lie strictly between 0 and 1, got {fraction!r}")
        delta_t = fraction * delta
        epsilon_t = -math.log1p(-delta_t)
        if not epsilon_t < epsilon:
            raise ValueError(f"epsilon={epsilon!r} is too small for the threshold's share of delta")
    else:
        delta_t = epsilon_t = 0.0
    if ("ials" in names) != (sweeps is not None):
        raise ValueError("the 'ials' release and sweeps=SweepReleases(...) come together")
    sweeps = sweeps.checked() if sweeps is not None else None
    iterations = sweeps.iterations if sweeps is not None else 0
    sizes = {"n_users": n_users, "n_items": n_items, "max_selected_items": max_selected_items}
    sizes = {name: check_positive_int(size, name) for name, size in sizes.items() if size is not None}

    # a hair below epsilon, so that dp-accounting's PLD of the unmerged events (dptensor.privacy.compose)
    # stays within it too
    target = epsilon - 1e-5
    for _ in range(8):
        z_eff = _effective_multiplier(target, delta, epsilon_t, delta_t)
        multipliers = {name: z_eff / math.sqrt(share[name]) for name in names if name != "ials"}
        sweep_multipliers = {} if sweeps is None else {
            stat: z_eff * math.sqrt(iterations / (share["ials"] * part))
            for stat, part in sweeps.shares.items()}
        selection = None
        if "selection" in names:
            sigma_s = multipliers["selection"] * SENSITIVITY
            selection = VocabularyCalibration(
                epsilon=epsilon, delta=delta, max_words_per_document=m, sigma=sigma_s,
                threshold=vocabulary_threshold(sigma_s, delta_t, m), threshold_delta=delta_t,
                threshold_epsilon=epsilon_t, sensitivity=SENSITIVITY,
            )  # fmt: skip
        event = _events(multipliers, selection, sweep_multipliers, iterations)
        spent = composed_epsilon([event], delta, VALUE_DISCRETIZATION)
        if spent <= epsilon:
            break
        target -= (spent - epsilon) + 1e-5  # the accountant's rounding: aim a little lower
    else:  # pragma: no cover - guard
        raise RuntimeError(f"calibration failed for epsilon={epsilon}, delta={delta}")
    if not epsilon - EPSILON_TOLERANCE <= spent <= epsilon:  # pragma: no cover - guard
        raise RuntimeError(f"calibration spends epsilon={spent} of {epsilon}")
    mu = math.sqrt(math.fsum([1.0 / z**2 for z in multipliers.values()]
                             + [iterations / z**2 for z in sweep_multipliers.values()]))
    sigmas = {name: z * SENSITIVITY for name, z in multipliers.items()}
    sweep_sigmas = {} if sweeps is None else {
        stat: z * sweeps.sensitivities[stat] for stat, z in sweep_multipliers.items()}

    details: dict[str, object] = {
        "model": "private top-N item statistics",
        "releases": list(names),
        "release_descriptions": {name: _DESCRIPTIONS[name] for name in names},
        "weighting": weighting if {"counts", "gram"} & set(names) else None,
        "max_items_per_user": m,
        "shares": dict(share),
        "noise_multipliers": dict(multipliers),
        "sigmas": dict(sigmas),
        "sensitivities": dict.fromkeys(multipliers, SENSITIVITY),
        "gdp_mu": mu,
    }
    if sweeps is not None:
        details["ials"] = {
            "iterations": iterations, "statistics": list(sweeps.sensitivities),
            "shares": dict(sweeps.shares), "noise_multipliers": dict(sweep_multipliers),
            "sigmas": dict(sweep_sigmas), "sensitivities": dict(sweeps.sensitivities), **sweeps.settings,
        }
    if "gram" in names:
        details["gram_noise"] = "frobenius: std sigma on the diagonal, sigma/sqrt(2) off it, mirrored"
    if selection is not None:
        details.update({"selection_threshold": selection.threshold, "threshold_delta": delta_t,
                        "threshold_epsilon": epsilon_t})
    details.update(sizes)
    gaussian_only = selection is None
    public = (
        "the number of users, "
        + (_SELECTED_ITEMS if not gaussian_only else _PUBLIC_ITEMS)
        + (f", the per-user bound max_items_per_user={m}" if m is not None else "")
        + ", the releases and their shares, the weighting, epsilon and delta"
    )
    guarantee = PrivacyGuarantee(
        epsilon=epsilon,
        delta=delta,
        neighbouring=NEIGHBOURING,
        accountant="exact (Gaussian DP)" if gaussian_only else "exact (PLD, dp-accounting)",
        n_releases=len(multipliers) + len(sweep_multipliers) * iterations,
        mechanism="gaussian" if gaussian_only else "composition of gaussian, gaussian partition selection",
        noise_multiplier=1.0 / mu,
        epsilon_exact=float(spent),
        details=details,
        protected=PROTECTED,
        public=public,
        dp_event=event,
    )
    return ReleasePlan(
        releases=names, epsilon=epsilon, delta=delta, shares=MappingProxyType(share),
        noise_multipliers=MappingProxyType(multipliers), sigmas=MappingProxyType(sigmas), mu=mu,
        selection=selection, weighting=weighting, max_items_per_user=m, guarantee=guarantee, sweeps=sweeps,
        sweep_multipliers=MappingProxyType(sweep_multipliers), sweep_sigmas=MappingProxyType(sweep_sigmas),
    )  # fmt: skip


def counts_guarantee(epsilon: float, delta: float, **options: object) -> ReleasePlan:
    """:func:`recommender_guarantee` of the item counts alone."""
    return recommender_guarantee(("counts",), epsilon, delta, **options)  # type: ignore[arg-type]


def gram_guarantee(epsilon: float, delta: float, **options: object) -> ReleasePlan:
    """:func:`recommender_guarantee` of the item Gram alone."""
    return recommender_guarantee(("gram",), epsilon, delta, **options)  # type: ignore[arg-type]
