"""End-to-end privacy audits of a whole private fit: canaries, membership scores, an empirical epsilon.

:func:`audit_estimator` fits a user's estimator, as configured, many times on their data with
**canaries** inserted, scores each canary's membership from what the fitted model releases, and
turns the attacker's success into a lower confidence bound on epsilon, reported next to the
claimed epsilon (:class:`AuditResult`). An honest configuration never shows a lower bound above
its claim, except with probability at most ``1 - confidence``; an under-noised or unproven one
can.

Two attacks (``method``):

``"distinguish"``
    Half the runs contain the canary, half a neighbouring filler in its place (the replace-one
    relation), or the same entry with the other extreme value (``"entry-value"``). The first half
    of each set learns a linear attack on the release's features (difference of means, scaled by
    the pooled variance; the canary's score alone when there are fewer than two fits per feature)
    and its threshold; on the second half, Clopper--Pearson bounds on the
    two rates give ``epsilon >= ln((p_in - delta) / p_out)``
    (:func:`dptensor.privacy.audit.epsilon_lower_bound`; Jagielski, Ullman & Oprea 2020; Nasr
    et al. 2021). Strong, needs many fits.
``"one-run"``
    Steinke, Nasr & Jagielski (2023), *Privacy auditing with one (1) training run*: ``m``
    canaries per fit, each included independently with probability 1/2; the attacker guesses
    "in" for the ``k`` highest-scored canaries and "out" for the ``k`` lowest (``k`` fixed in
    advance; each canary slot's score centred on its mean over the fits);
    :func:`one_run_epsilon_lower_bound` converts the number of correct guesses into a
    bound (their Theorem 3.1 and its ``(epsilon, delta)`` version, the p-value of their
    Algorithm 2). Several fits pool their canaries (each canary lives in one fit, so the pooled
    mechanism is as private per canary as one fit).

**Every release is scored.** A fit makes several releases (``PrivateSpectralLDA``: ``m1``, ``m2``,
with the tensor recovery ``e3``, and where its private CVB0 refinement runs ``rf``, the passes'
releases; ``DPVariationalLDA(init="moments")``: its moment start's releases and the VI releases;
``SingleTopicModel``: ``M2`` and ``M3``; user-level DP-ALS with a spectral start: the covariance
release and the item releases), and a claim can fail in any one of them: an attack that reads one
release only is blind to the others (a spectral model with an un-noised ``m2`` passes an audit of
its ``m1``). So an adapter's ``features`` may return
one score per release (a mapping from the release's name to one feature vector per canary), each a
function of released attributes only. Both bounds hold for any score that is a fixed function of
the outputs (post-processing; Steinke, Nasr & Jagielski 2023, Theorem 3.1; Jagielski, Ullman &
Oprea 2020), but reporting the largest of ``R`` bounds is a choice among ``R`` tests. It is paid
for by Bonferroni's inequality: each release's bound is computed at confidence
``1 - (1 - confidence) / R``, so that for an honest fit the probability that *any* of them exceeds
the claim is at most ``R (1 - confidence) / R = 1 - confidence``, and the largest of them is
reported, with the release that gave it (``details["release"]``) and every release's bound
(``details["per_release"]``). A release whose score is ``nan`` for a canary makes no guess on it
(abstention, which the one-run bound allows). An adapter that returns one sequence has one release
(``R = 1``, no correction).

Layering: the privacy layer does not import the models. What a canary is for an estimator --
its neighbouring relation, the canary and its neighbour, how to insert it, which released
numbers score it -- is a :class:`CanaryAdapter` that the models layer registers with
:func:`register_canaries` (``dptensor.models.audit_canaries`` does it for every private
estimator of dptensor on import). ``audit_estimator`` looks the adapter up by the estimator's
type (``canary="auto"``) or takes one.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from scipy import stats

from dptensor.privacy.empirical_epsilon import epsilon_lower_bound

__all__ = [
    "AuditResult",
    "CanaryAdapter",
    "audit_estimator",
    "canary_adapter_for",
    "one_run_epsilon_lower_bound",
    "one_run_p_value",
    "register_canaries",
]

METHODS = ("one-run", "distinguish")


# ---------------------------------------------------------------------------------------------
# Steinke, Nasr & Jagielski (2023): the one-run bound
# ---------------------------------------------------------------------------------------------
def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Probability of ``>= v`` correct guesses out of ``r`` under ``(epsilon, delta)``-DP.

    Steinke, Nasr & Jagielski (2023), Theorem 3.1 (``delta = 0``: the number of correct guesses
    is dominated by ``Binomial(r, e^eps / (1 + e^eps))``) and its approximate-DP extension
    (their Proposition 5.7 / Algorithm 2): the tail gains ``2 m delta max_i P[v > B >= v - i] / i``.

    Parameters
    ----------
    m : int
        Canaries, each included independently with probability 1/2.
    r : int
        Guesses made (``<= m``; the others abstain).
    v : int
        Correct guesses (``<= r``).
    epsilon, delta : float
        The null hypothesis: the mechanism is ``(epsilon, delta)``-DP per canary.
    """
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    if epsilon < 0 or not 0 <= delta <= 1:
        raise ValueError(f"need epsilon >= 0 and 0 <= delta <= 1, got {epsilon}, {delta}")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(stats.binom.sf(v - 1, r, q))
    if delta == 0 or v == 0:
        return min(tail, 1.0)
    below = stats.binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[B = v - i], i = 1..v
    alpha = float(np.max(np.cumsum(below) / np.arange(1, v + 1)))
    return min(tail + 2.0 * m * delta * alpha, 1.0)


def one_run_epsilon_lower_bound(
    m: int, r: int, v: int, delta: float = 0.0, *, confidence: float = 0.95, tol: float = 1e-6
) -> float:
    """The largest ``epsilon`` that ``v`` correct guesses out of ``r`` reject at ``confidence``.

    A mechanism that is ``(epsilon, delta)``-DP for every ``epsilon`` below the returned value
    would have produced ``>= v`` correct guesses with probability less than ``1 - confidence``
    (:func:`one_run_p_value`), so with that confidence the mechanism is not ``(epsilon', delta)``-DP
    for any smaller ``epsilon'``. ``0.0`` when even ``epsilon = 0`` is not rejected.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    beta = 1.0 - confidence
    if one_run_p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    low, high = 0.0, 1.0
    while one_run_p_value(m, r, v, high, delta) < beta:
        low, high = high, 2 * high
        if high > 1e3:
            return math.inf
    while high - low > tol:
        mid = 0.5 * (low + high)
        if one_run_p_value(m, r, v, mid, delta) < beta:
            low = mid
        else:
            high = mid
    return low


# ---------------------------------------------------------------------------------------------
# Canaries: what the models layer provides
# ---------------------------------------------------------------------------------------------
@runtime_checkable
class CanaryAdapter(Protocol):
    """How to audit one family of estimators (registered by the models layer).

    ``plan`` picks ``n_canaries`` canaries valid under the estimator's neighbouring relation and,
    for each, the neighbour that replaces it when it is left out; ``fit_args`` builds the data of
    one fit; ``features`` reads, from the fitted estimator's released attributes only, one
    feature vector per canary whose **first entry** is its membership score (higher: more
    likely in; ``nan``: no guess on that canary), the rest extra released numbers the
    distinguishing attack may weigh -- or a mapping from each release's name to such vectors, one
    score per release (module docstring, *Every release is scored*).
    """

    relation: str
    description: str

    def plan(self, estimator: Any, X: Any, n_canaries: int, rng: np.random.Generator) -> Any:
        """Choose the canaries and their neighbours in ``X`` (public randomness ``rng``)."""

    def fit_args(self, plan: Any, included: np.ndarray) -> tuple:
        """The positional arguments of ``fit`` with canary ``i`` in iff ``included[i]``."""

    def features(
        self, estimator: Any, plan: Any
    ) -> Sequence[np.ndarray] | Mapping[str, Sequence[np.ndarray]]:
        """One 1-D array per canary (entry 0: its membership score), or such arrays per release."""


_REGISTRY: list[tuple[type, Callable[[Any], CanaryAdapter]]] = []


def register_canaries(estimator_type: type, factory: Callable[[Any], CanaryAdapter]) -> None:
    """Register ``factory(estimator) -> CanaryAdapter`` for ``estimator_type`` (and subclasses)."""
    _REGISTRY.insert(0, (estimator_type, factory))


def canary_adapter_for(estimator: Any) -> CanaryAdapter:
    """The registered adapter for ``estimator`` (``TypeError`` if none)."""
    for estimator_type, factory in _REGISTRY:
        if isinstance(estimator, estimator_type):
            return factory(estimator)
    known = ", ".join(t.__name__ for t, _ in _REGISTRY) or "none (import dptensor.models)"
    raise TypeError(
        f"canary='auto' has no canaries for {type(estimator).__name__}; registered: {known}; "
        "pass canary=<a CanaryAdapter>"
    )


# ---------------------------------------------------------------------------------------------
# The result
# ---------------------------------------------------------------------------------------------
@dataclass
class AuditResult:
    """An empirical lower bound on epsilon next to the claim (see :func:`audit_estimator`).

    Attributes
    ----------
    epsilon_lower : float
        With probability at least ``confidence``, the audited configuration is not
        ``(epsilon, delta)``-DP for any ``epsilon < epsilon_lower`` (``delta`` the claimed one).
    epsilon_claimed, delta : float
        The estimator's claim: ``guarantee_.epsilon``, or the claim as written
        (``nominal_epsilon``) when the guarantee does not hold (a paper's unproven mode, or
        test-only noise).
    holds : bool
        Whether the estimator's guarantee is proved (``guarantee_.holds``).
    neighbouring : str
        The relation the canaries respect.
    confidence : float
    n_runs : int
        Fits made.
    method : {"one-run", "distinguish"}
    attack : str
        The canary and the membership scores, in words, and which release's score gave the bound.
    n_canaries : int
        Canaries per fit.
    guesses, correct : int
        ``"one-run"``: guesses made and how many were right.
    seconds : float
        Wall time of the audit.
    details : dict
        ``release``: the release whose score gave ``epsilon_lower``; ``per_release``: each release's
        bound (and, ``"one-run"``, its guesses and correct guesses), at ``release_confidence``
        (``1 - (1 - confidence) / R`` for ``R`` releases: Bonferroni, module docstring).
    """

    epsilon_lower: float
    epsilon_claimed: float
    delta: float
    holds: bool
    neighbouring: str
    confidence: float
    n_runs: int
    method: str
    attack: str
    n_canaries: int
    guesses: int = 0
    correct: int = 0
    seconds: float = 0.0
    details: dict = field(default_factory=dict)

    @property
    def violated(self) -> bool:
        """Whether the lower bound exceeds the claim: the claim is refuted at ``confidence``."""
        return self.epsilon_lower > self.epsilon_claimed

    def describe(self) -> str:
        """A short report: claim, lower bound, verdict, attack."""
        claim = (f"claimed epsilon {self.epsilon_claimed:g} (delta {self.delta:g}, "
                 f"{self.neighbouring!r} relation")
        claim += ")" if self.holds else "; the guarantee does NOT hold: the claim as written)"
        verdict = (
            "REFUTED: the lower bound exceeds the claim" if self.violated
            else ("no evidence against the claim" if self.epsilon_lower > 0
                  else "no evidence against the claim (the attack found nothing)")
        )
        return (
            f"{claim}; empirical lower bound epsilon >= {self.epsilon_lower:.3g} at confidence "
            f"{self.confidence:g} ({self.method}, {self.n_runs} fits, {self.n_canaries} canar"
            f"{'y' if self.n_canaries == 1 else 'ies'} per fit"
            + (f", {self.correct}/{self.guesses} correct guesses" if self.method == "one-run" else "")
            + f", {self.seconds:.1f} s): {verdict}. Attack: {self.attack}"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dictionary (``describe()`` included)."""
        out = {k: getattr(self, k) for k in (
            "epsilon_lower", "epsilon_claimed", "delta", "holds", "neighbouring", "confidence", "n_runs",
            "method", "attack", "n_canaries", "guesses", "correct", "seconds", "violated")}
        out["details"] = dict(self.details)
        out["describe"] = self.describe()
        return out


# ---------------------------------------------------------------------------------------------
# The audit
# ---------------------------------------------------------------------------------------------
def _claim(estimator: Any) -> tuple[float, float, bool, str]:
    guarantee = getattr(estimator, "guarantee_", None)
    if guarantee is None:
        raise ValueError(
            f"{type(estimator).__name__} released no guarantee_: make_estimator() must return a "
            "private estimator (epsilon set)"
        )
    if guarantee.holds:
        claimed = float(guarantee.epsilon)
    else:
        claimed = math.inf if guarantee.nominal_epsilon is None else float(guarantee.nominal_epsilon)
    return claimed, float(guarantee.delta), bool(guarantee.holds), str(guarantee.neighbouring)


def _default_runs(method: str) -> int:
    return 400 if method == "distinguish" else 20


def audit_estimator(
    make_estimator: Callable[[], Any],
    X: Any,
    *,
    canary: str | CanaryAdapter = "auto",
    n_runs: int | None = None,
    method: str = "one-run",
    n_canaries: int | None = None,
    n_guesses: int | None = None,
    confidence: float = 0.95,
    random_state: int | np.random.Generator | None = None,
    progress: Callable[[int], None] | None = None,
) -> AuditResult:
    """Audit a private estimator end to end: a lower confidence bound on its epsilon.

    Parameters
    ----------
    make_estimator : callable
        Returns a fresh, unfitted, private estimator as the user configured it (called once per
        fit).
    X : object
        The data the canaries are added to, in the form the estimator's ``fit`` takes (a count
        matrix; token lists; ``(indices, values, shape)`` for tensor completion).
    canary : "auto" or CanaryAdapter
        ``"auto"``: the adapter registered for the estimator's type (:func:`register_canaries`).
    n_runs : int, optional
        Fits; default 400 for ``"distinguish"`` (half with the canary), 20 for ``"one-run"``.
    method : {"one-run", "distinguish"}
        See the module docstring.
    n_canaries : int, optional
        ``"one-run"``: canaries per fit (default: as many as the adapter offers, at most 32);
        ``"distinguish"`` always uses one.
    n_guesses : int, optional
        ``"one-run"``: guesses in total, half "in" (the top scores) and half "out" (the bottom
        ones), fixed before the fits; default a fifth of all canaries (at least 2).
    confidence : float, default 0.95
    random_state : int, Generator or None
        Public randomness of the audit: which canaries, which are included. The estimators' own
        noise stays theirs.
    progress : callable, optional
        Called with the number of fits done after each fit (e.g. a tqdm bar's ``update``).

    Returns
    -------
    AuditResult
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not (isinstance(confidence, float | int) and 0 < confidence < 1):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if not callable(make_estimator):
        raise TypeError("make_estimator must be a callable returning a fresh unfitted estimator")
    runs = _default_runs(method) if n_runs is None else n_runs
    least = 4 if method == "distinguish" else 1
    if isinstance(runs, bool) or not isinstance(runs, int | np.integer) or runs < least:
        raise ValueError(f"n_runs must be an integer >= {least}, got {n_runs!r}")
    runs = int(runs)
    rng = np.random.default_rng(random_state)
    first = make_estimator()
    adapter = canary_adapter_for(first) if isinstance(canary, str) and canary == "auto" else canary
    if not isinstance(adapter, CanaryAdapter):
        raise TypeError(f"canary must be 'auto' or a CanaryAdapter, got {canary!r}")
    if method == "distinguish":
        m = 1
    else:
        m = 32 if n_canaries is None else int(n_canaries)
        if m < 1:
            raise ValueError(f"n_canaries must be >= 1, got {n_canaries!r}")
    plan = adapter.plan(first, X, m, rng)
    m = int(getattr(plan, "n_canaries", m))
    start = time.perf_counter()
    seen_warnings: dict[tuple[str, str], warnings.WarningMessage] = {}
    claim: tuple[float, float, bool, str] | None = None

    def fit_once(estimator: Any, included: np.ndarray) -> dict[str, list[np.ndarray]]:
        nonlocal claim
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            estimator.fit(*adapter.fit_args(plan, included))
        for w in caught:
            seen_warnings.setdefault((w.category.__name__, str(w.message)), w)
        if claim is None:
            claim = _claim(estimator)
        return _release_features(adapter.features(estimator, plan))

    if method == "distinguish":
        labels = np.tile([True, False], runs // 2 + 1)[:runs]
        rng.shuffle(labels)
    else:
        labels = rng.random((runs, m)) < 0.5
    features = []
    for run in range(runs):
        estimator = first if run == 0 else make_estimator()
        included = labels[run:run + 1] if method == "distinguish" else labels[run]
        features.append(fit_once(estimator, np.atleast_1d(included)))
        if progress is not None:
            progress(run + 1)
    for w in seen_warnings.values():  # each distinct warning once, not once per fit
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    assert claim is not None
    claimed, delta, holds, relation = claim
    seconds = time.perf_counter() - start
    releases = list(features[0])
    if any(list(f) != releases for f in features):
        raise ValueError("the adapter scored different releases in different fits: the releases a "
                         "configuration makes must not depend on the data")
    # Bonferroni over the R scores (module docstring): each at 1 - (1 - confidence) / R
    level = 1.0 - (1.0 - confidence) / len(releases)
    per_release: dict[str, dict[str, Any]] = {}
    for name in releases:
        if method == "distinguish":
            rows = [f[name][0] for f in features]
            if not np.all(np.isfinite([row[0] for row in rows])):
                per_release[name] = {"epsilon_lower": 0.0, "note": "the release does not score the canary"}
                continue
            bound, info = _distinguish(np.stack(rows), labels, delta, level)
            per_release[name] = {"epsilon_lower": float(bound), **info}
        else:
            scores = np.array([[row[0] for row in f[name]] for f in features])
            per_release[name] = _one_run(scores, labels, n_guesses, delta, level)
    best = max(releases, key=lambda name: per_release[name]["epsilon_lower"])  # the first on ties
    lower = per_release[best]["epsilon_lower"]
    attack = f"{adapter.description}"
    if method == "distinguish":
        guesses = correct = 0
        details = {k: v for k, v in per_release[best].items() if k != "epsilon_lower"}
        attack += "; scored by a linear attack on the released features learned on half the fits"
    else:
        guesses, correct = per_release[best]["guesses"], per_release[best]["correct"]
        details = {"canaries_total": per_release[best]["canaries_total"], "included": int(labels.sum())}
        k = guesses // 2
        attack += f"; guesses 'in' for the {k} highest and 'out' for the {k} lowest scores"
    if len(releases) > 1:
        attack += (f"; one score per release ({', '.join(releases)}), each bound at confidence "
                   f"{level:.4g} (Bonferroni over {len(releases)}), the largest reported")
        if lower > 0:
            attack += f": the {best} release's"
    return AuditResult(
        epsilon_lower=float(lower), epsilon_claimed=claimed, delta=delta, holds=holds, neighbouring=relation,
        confidence=float(confidence), n_runs=runs, method=method, attack=attack, n_canaries=m,
        guesses=guesses, correct=correct, seconds=seconds,
        details={**details, "release": best, "per_release": per_release, "release_confidence": level,
                 "adapter_relation": adapter.relation},
    )


def _release_features(features: Sequence[np.ndarray] | Mapping[str, Sequence[np.ndarray]]) -> dict:
    """An adapter's ``features`` as ``{release: [1-D float array per canary]}`` (one release: ``"score"``)."""
    by_release = features if isinstance(features, Mapping) else {"score": features}
    if not by_release:
        raise ValueError("the adapter scored no release")
    return {str(name): [np.asarray(row, dtype=float).ravel() for row in rows]
            for name, rows in by_release.items()}


def _one_run(
    scores: np.ndarray, labels: np.ndarray, n_guesses: int | None, delta: float, confidence: float
) -> dict[str, Any]:
    """Steinke, Nasr & Jagielski's guesses on one release's scores (``runs x m``; ``nan``: abstain).

    Each canary slot's score is centred on its mean over the fits (slots differ by fixed offsets:
    their word's prior, the entry's baseline); a function of the outputs only, so the guesses remain
    post-processing of the pooled release, as their Theorem 3.1 requires. The ``k`` highest scores
    are guessed "in" and the ``k`` lowest "out" (``2 k = n_guesses``, default a fifth of the scored
    canaries), and :func:`one_run_epsilon_lower_bound` gives the bound at ``confidence``.
    """
    scores = np.asarray(scores, dtype=float)
    if scores.shape[0] > 1:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a slot no fit scores: all nan
            scores = scores - np.nanmean(scores, axis=0, keepdims=True)
    scores, truth = scores.ravel(), np.asarray(labels, dtype=bool).ravel()
    total = scores.size
    scored = np.isfinite(scores)
    k = max(1, (n_guesses if n_guesses is not None else max(2, int(scored.sum()) // 5)) // 2)
    if 2 * k > total:
        raise ValueError(f"n_guesses={n_guesses} exceeds the {total} canaries of the audit")
    if 2 * k > scored.sum():
        return {"epsilon_lower": 0.0, "guesses": 0, "correct": 0, "canaries_total": total,
                "note": f"{int(scored.sum())} canaries scored, fewer than the {2 * k} guesses"}
    kept, truth = scores[scored], truth[scored]
    order = np.argsort(kept, kind="stable")
    correct = int(truth[order[-k:]].sum() + (~truth[order[:k]]).sum())
    # m = every canary of the audit (abstentions included): the delta term of their Algorithm 2
    lower = one_run_epsilon_lower_bound(total, 2 * k, correct, delta, confidence=confidence)
    return {"epsilon_lower": float(lower), "guesses": 2 * k, "correct": correct, "canaries_total": total}


def _distinguish(
    features: np.ndarray, labels: np.ndarray, delta: float, confidence: float
) -> tuple[float, dict]:
    """Learn a linear score on the first half of each set, then :func:`epsilon_lower_bound`."""
    inside, outside = features[labels], features[~labels]
    half = min(len(inside), len(outside)) // 2
    if half < 2:
        raise ValueError("method='distinguish' needs at least 4 fits with and 4 without the canary")
    if half < 2 * features.shape[1]:
        features = features[:, :1]  # too few fits to learn a weighting of every feature: the score alone
        inside, outside = features[labels], features[~labels]
    train_in, train_out = inside[:half], outside[:half]
    diff = train_in.mean(axis=0) - train_out.mean(axis=0)
    pooled = 0.5 * (train_in.var(axis=0) + train_out.var(axis=0))
    scale = np.where(pooled > 0, pooled, np.inf)
    direction = np.where(np.isfinite(scale), diff / scale, 0.0)
    if not np.any(direction):
        return 0.0, {"note": "the released features do not move with the canary"}
    s_in, s_out = inside @ direction, outside @ direction
    # the first half of each set picks the threshold; the second half is untouched by both choices
    lower = epsilon_lower_bound(s_out, s_in, delta, confidence=(1.0 - confidence) / 2.0)
    return lower, {"fits_with_canary": int(len(inside)), "fits_without": int(len(outside))}
