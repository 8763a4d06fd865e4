"""End-to-end audits of PrivateRecommender (dptensor.models.recommend.audit): canary users, every release.

The fits use seeded test noise: ``scaled_test_noise(1.0, seed)`` is correctly scaled (an honest fit, whose
claim must not be refuted), ``scaled_test_noise(0.05, seed)`` divides every draw by 20 (the under-noised
variant each release's own score must catch). Un-noising one release at its release point while the other
keeps its noise shows that each release is caught by its own score, not by the other's.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.models.recommend import PrivateRecommender, private_estimator, private_ials, releases
from dptensor.models.recommend.audit import ITEMS_PER_CANARY, RecommenderCanaries, release_scores
from dptensor.models.recommend.ials import solve_item_factors, solve_user_factors
from dptensor.privacy import NoiseSource, PrivacyWarning, ReleaseUtilityWarning
from dptensor.privacy.audit import AuditResult, audit_estimator, canary_adapter_for
from dptensor.privacy.noise import scaled_test_noise

pytestmark = pytest.mark.filterwarnings("ignore::dptensor.privacy.PrivacyWarning")


class ExactSource(NoiseSource):
    """No noise at all (tests only: the released numbers are the sums themselves)."""

    def __init__(self) -> None:
        super().__init__("numpy", np.random.default_rng(0), secure=False)

    def add_gaussian(self, values, sigma):
        return np.array(values, dtype=np.float64, copy=True)


def _interactions(n_users: int = 200, n_items: int = 64, density: float = 0.08, unused: tuple = (),
                  seed: int = 0) -> sp.csr_array:
    """Random interactions; nobody chooses the ``unused`` items."""
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_users, n_items)) < density).astype(float)
    dense[:, list(unused)] = 0.0
    return sp.csr_array(dense)


def _popular(n_users: int = 2000, popular: int = 32, unused: int = 32, seed: int = 0) -> sp.csr_array:
    """Each user chooses 2 of ``popular`` items (far above the selection's threshold); nobody the rest."""
    rng = np.random.default_rng(seed)
    cols = np.concatenate([rng.choice(popular, 2, replace=False) for _ in range(n_users)])
    rows = np.repeat(np.arange(n_users), 2)
    return sp.csr_array((np.ones(2 * n_users), (rows, cols)), shape=(n_users, popular + unused))


def _audit(make, X, **kw) -> AuditResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return audit_estimator(make, X, random_state=0, **kw)


def _per_release(result: AuditResult) -> dict[str, float]:
    return {name: r["epsilon_lower"] for name, r in result.details["per_release"].items()}


# --------------------------------------------------------------------------- canaries
def test_canaries_respect_the_user_relation() -> None:
    X = _interactions(40, 20, unused=(3, 17))  # two items nobody chose: the rarest
    estimator = PrivateRecommender()
    adapter = canary_adapter_for(estimator)
    assert isinstance(adapter, RecommenderCanaries) and adapter.relation == "user" and adapter.items == "rare"
    plan = adapter.plan(estimator, X, 32, np.random.default_rng(0))
    assert plan.n_canaries == 20 // (2 * ITEMS_PER_CANARY) == 5  # as many as the items hold
    assert plan.items.shape == plan.others.shape == (5, ITEMS_PER_CANARY)
    used = np.concatenate([plan.items.ravel(), plan.others.ravel()])
    assert len(set(used.tolist())) == used.size  # canaries and neighbours: disjoint items
    included = np.array([True, False, True, False, True])
    (with_some,) = adapter.fit_args(plan, included)
    (without,) = adapter.fit_args(plan, ~included)
    assert with_some.shape == without.shape == (45, 20)  # replace-one: the number of users is kept
    assert (with_some[:40] != X).nnz == 0 and (without[:40] != X).nnz == 0  # the other users untouched
    for c in range(5):
        row_in, row_out = with_some[[40 + c]], without[[40 + c]]
        mine, theirs = (plan.items[c], plan.others[c]) if included[c] else (plan.others[c], plan.items[c])
        assert set(row_in.indices.tolist()) == set(mine.tolist())
        assert set(row_out.indices.tolist()) == set(theirs.tolist())
        assert row_in.data.tolist() == [1.0, 1.0]
    one = adapter.plan(estimator, X, 1, np.random.default_rng(0))
    assert set(np.concatenate([one.items.ravel(), one.others.ravel()]).tolist()) >= {3, 17}
    # a selected catalogue: the most frequent items, among those some user chose
    select = PrivateRecommender(catalogue="select")
    frequent = canary_adapter_for(select)
    assert frequent.items == "frequent" and "most frequent" in frequent.description
    popular = _popular(100, 12, 20)
    plan = frequent.plan(select, popular, 32, np.random.default_rng(0))
    assert plan.n_canaries == 3
    assert set(np.concatenate([plan.items.ravel(), plan.others.ravel()]).tolist()) == set(range(12))
    with pytest.raises(ValueError, match="at least 4 items"):
        adapter.plan(estimator, _interactions(10, 3), 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="items must be"):
        RecommenderCanaries("common")


def test_scores_read_each_release_exactly() -> None:
    # without noise the counts score is the canary's whole l2 contribution: items 8-11 nobody else chose,
    # 1/sqrt(2) each, so +sqrt(2) in and -sqrt(2) out; the EASE weights between the canary's two items
    # (B from the un-noised Gram of two isolated blocks) are positive, as its neighbour's, and equal
    X = _interactions(40, 12, density=0.4, unused=(8, 9, 10, 11))
    adapter = RecommenderCanaries()
    plan = adapter.plan(PrivateRecommender(), X, 1, np.random.default_rng(0))
    assert set(np.concatenate([plan.items.ravel(), plan.others.ravel()]).tolist()) == {8, 9, 10, 11}
    scores = {}
    for included in (True, False):
        data = adapter.fit_args(plan, np.array([included]))
        model = PrivateRecommender(method="ease", noise=ExactSource()).fit(*data)
        scores[included] = adapter.features(model, plan)
        assert set(scores[included]) == {"counts", "gram"} == set(release_scores(model))
    assert scores[True]["counts"][0][0] == pytest.approx(math.sqrt(2), abs=1e-12)
    assert scores[False]["counts"][0][0] == pytest.approx(-math.sqrt(2), abs=1e-12)
    np.testing.assert_allclose(scores[True]["counts"][0][1:], [1 / math.sqrt(2)] * 2 + [0, 0], atol=1e-12)
    assert scores[True]["gram"][0][0] > 0 and scores[True]["gram"][0].shape == (1,)
    assert scores[False]["gram"][0][0] == pytest.approx(-scores[True]["gram"][0][0], rel=1e-9)
    # popularity: the counts release only; a selected catalogue adds the selection's score, and a release
    # that does not cover every item of a canary or its neighbour abstains (nan)
    model = PrivateRecommender(method="popularity", noise=ExactSource()).fit(X)
    assert set(adapter.features(model, plan)) == {"counts", "recount"}
    with pytest.warns(ReleaseUtilityWarning, match="no item passed"):
        model = PrivateRecommender(method="ease", catalogue="select", noise=ExactSource()).fit(X)
    assert model.items_.size == 0  # 40 users: nothing passes the threshold
    features = adapter.features(model, plan)
    assert set(features) == {"selection", "counts", "gram"}
    assert features["selection"][0][0] == 0.0 and np.isnan(features["counts"][0][0])
    assert np.isnan(features["gram"][0][0])
    # a release without a canary score is refused, not left unaudited
    model.guarantee_ = dataclasses.replace(model.guarantee_, details={"releases": ["counts", "sweeps"]})
    with pytest.raises(ValueError, match="no canary score.*sweeps"):
        adapter.features(model, plan)


# --------------------------------------------------------------------------- audits of whole fits
@pytest.mark.parametrize("method", ["popularity", "ease", "ials"])
@pytest.mark.parametrize("scale", [1.0, 0.05])
def test_audit_catches_under_noised_fits_in_every_release(method: str, scale: float) -> None:
    # 200 users, 64 items: 16 canaries per fit, 10 fits (~0.1 s). Measured (seed 3): honest 0.00 in every
    # release; noise / 20: popularity counts 1.64 and recount 2.10 (every item a candidate: 64 <= 200);
    # EASE counts 2.10 and gram 2.10 (32 of 32 guesses right)
    # -- against the claim 1 (20 fits: 3.04; 2.11 and 2.82). The implicit ALS gives its counts 0.05 of
    # mu^2 and its 6 sweep releases the rest: 40 fits (~1 s), honest 0.00 in both; noise / 20: counts 1.11,
    # ials 2.84 (30 fits: 0.83 and 2.81). Its V_0 comes from the public seed, the same in every fit, so the
    # other users' part of each sweep stays put and the centred scores read the canaries (with a fresh
    # V_0 per fit, ials reads between 0.89 and 1.60)
    source = scaled_test_noise(scale, seed=3)
    runs = 40 if method == "ials" else 10
    result = _audit(lambda: PrivateRecommender(method=method, noise=source, random_state=0), _interactions(),
                    n_runs=runs)
    per_release = _per_release(result)
    model = {"popularity": ("recount",), "ease": ("gram",), "ials": ("ials",)}[method]
    assert set(per_release) == {"counts", *model}
    assert result.n_canaries == 16 and result.neighbouring == "user" and result.epsilon_claimed == 1.0
    assert "canary users" in result.attack
    if scale == 1.0:
        assert all(bound <= 1.0 for bound in per_release.values())
    else:
        assert all(bound > 1.0 for bound in per_release.values())  # each release's own score refutes it
        assert "REFUTED" in result.describe()


def _counts_without_noise(kept, *, sigma, source, n_jobs=None):
    return releases.private_item_counts(kept, sigma=sigma, source=ExactSource(), n_jobs=n_jobs)


def _gram_without_noise(matrix, sigma, source):
    return np.array(matrix, dtype=np.float64, copy=True)


@pytest.mark.parametrize("release", ["counts", "gram"])
def test_each_release_is_caught_by_its_own_score(release: str, monkeypatch) -> None:
    # One release un-noised at its release point, the other with its full noise (the plan and the claim
    # unchanged): the un-noised release's score refutes the claim, the other's does not. Measured (seed 3,
    # 10 fits): counts un-noised: counts 2.10, gram 0.00; gram un-noised: gram 2.10, counts 0.00 (20 fits:
    # 2.82 and 0.00 both ways)
    if release == "counts":
        monkeypatch.setattr(private_estimator, "private_item_counts", _counts_without_noise)
    else:
        monkeypatch.setattr(releases, "add_symmetric_frobenius_noise", _gram_without_noise)
    source = scaled_test_noise(1.0, seed=3)
    result = _audit(lambda: PrivateRecommender(method="ease", noise=source), _interactions(), n_runs=10)
    per_release = _per_release(result)
    assert result.details["release"] == release and per_release[release] > 1.0 == result.epsilon_claimed
    assert all(bound <= 1.0 for name, bound in per_release.items() if name != release)
    assert result.details["release_confidence"] == pytest.approx(1 - 0.05 / 2)
    assert f"the {release} release's" in result.describe()


def _one_canary(n_users: int, density: float) -> tuple:
    """The adapter, the plan of one canary on the four items nobody else chose, and the data with it in."""
    X = _interactions(n_users, 12, density=density, unused=(8, 9, 10, 11))
    adapter = RecommenderCanaries()
    plan = adapter.plan(PrivateRecommender(), X, 1, np.random.default_rng(0))
    (data,) = adapter.fit_args(plan, np.array([True]))
    return adapter, plan, data


def test_ials_score_reads_every_sweep_as_the_fit_released_it(monkeypatch) -> None:
    # Without noise, the first sweep's b at the canary's items (nobody else chose them) is exactly the
    # canary's (1 + alpha) x / sqrt(2), x solved from its row against the public start and clipped: the
    # auditor's solve is the fit's. Every sweep is kept and scored; the ials release un-noised (the
    # counts keep their noise) is caught by its own score only.
    adapter, plan, data = _one_canary(40, 0.4)
    model = PrivateRecommender(method="ials", noise=ExactSource(), random_state=0).fit(data)
    details = model.guarantee_.details["ials"]
    assert len(model.sweeps_) == details["iterations"] == 2 and details["clip"] == 0.1
    items = np.sort(plan.items[0])
    row = sp.csr_array((np.ones(2), items, [0, 2]), shape=(1, 12))
    for t, sweep in enumerate(model.sweeps_):
        solved = solve_user_factors(row, sweep.start, regularization=details["regularization"],
                                    alpha=details["alpha"])
        x = private_ials.clip_factors(solved, details["clip"])[0]
        assert np.linalg.norm(x) <= details["clip"]
        if t == 0:  # from V_0 the clip binds
            assert np.linalg.norm(solved) > details["clip"] == pytest.approx(np.linalg.norm(x), rel=1e-8)
        expected = (1 + details["alpha"]) * x / math.sqrt(2)
        np.testing.assert_allclose(sweep.statistics.targets[items], [expected, expected], rtol=1e-10)
    # the starts: V_0 from the public seed, then each sweep's solve of the previous release
    np.testing.assert_array_equal(model.sweeps_[0].start, private_ials.initial_item_factors(12, 16, 0))
    np.testing.assert_allclose(model.sweeps_[1].start, solve_item_factors(
        model.sweeps_[0].statistics, regularization=details["regularization"]), rtol=1e-10)
    np.testing.assert_allclose(model.item_side_.factors, solve_item_factors(
        model.sweeps_[1].statistics, regularization=details["regularization"]), rtol=1e-10)
    # the same public V_0 in and out (random_state), as in an audit: the score moves with the canary only
    exact = {"method": "ials", "noise": ExactSource(), "random_state": 0}
    scores = {inc: adapter.features(PrivateRecommender(**exact).fit(*adapter.fit_args(plan, np.array([inc]))),
                                    plan)["ials"][0][0] for inc in (True, False)}
    assert scores[True] > 0 > scores[False]
    # the sweeps un-noised at their release point, the counts noised: ials refutes the claim, counts not
    released = private_ials._released
    monkeypatch.setattr(private_ials, "_released",
                        lambda sums, sigmas, source, n: released(sums, sigmas, ExactSource(), n))
    source = scaled_test_noise(1.0, seed=3)
    result = _audit(lambda: PrivateRecommender(method="ials", noise=source, random_state=0), _interactions(),
                    n_runs=10)
    per_release = _per_release(result)
    assert per_release["ials"] > 1.0 >= per_release["counts"] and result.details["release"] == "ials"


def test_the_recount_un_noised_is_caught_by_its_own_score(monkeypatch) -> None:
    # private popularity's recount without noise at its release point, the counts with theirs (the plan
    # and the claim unchanged): the recount's score refutes the claim, the counts' does not. Measured
    # (seed 3, 10 fits): recount 2.10, counts 0.00
    from dptensor.models.recommend import private_popularity

    def recounts_without_noise(kept, candidates, *, sigma, source, n_jobs=None):
        return private_popularity.private_recounts(kept, candidates, sigma=sigma, source=ExactSource(),
                                                   n_jobs=n_jobs)

    monkeypatch.setattr(private_estimator, "private_recounts", recounts_without_noise)
    source = scaled_test_noise(1.0, seed=3)
    result = _audit(lambda: PrivateRecommender(method="popularity", noise=source), _interactions(), n_runs=10)
    per_release = _per_release(result)
    assert result.details["release"] == "recount" and per_release["recount"] > 1.0 >= per_release["counts"]


@pytest.mark.parametrize("scale", [1.0, 0.05])
def test_selected_catalogue_audit(scale: float) -> None:
    # catalogue="select": the canaries use the 32 chosen items (8 canaries per fit), which pass the
    # selection and are all candidates of the recount; every release scored. Measured (seed 3, 20 fits):
    # honest 0.00 everywhere; noise / 20: counts 1.26, recount 1.99 (the selection's score 0.00: one user
    # moves a far-passing item's selection by nothing)
    source = scaled_test_noise(scale, seed=3)
    result = _audit(lambda: PrivateRecommender(method="popularity", catalogue="select", max_items_per_user=2,
                                               noise=source), _popular(), n_runs=20)
    per_release = _per_release(result)
    assert set(per_release) == {"selection", "counts", "recount"} and result.n_canaries == 8
    assert "most frequent" in result.attack
    if scale == 1.0:
        assert result.epsilon_lower <= result.epsilon_claimed == 1.0
    else:
        assert per_release["counts"] > 1.0 and per_release["recount"] > 1.0
        assert result.details["release"] == "recount"


@pytest.mark.slow
@pytest.mark.parametrize("scale", [1.0, 0.05])
def test_distinguishing_audit_reads_every_release(scale: float) -> None:
    # one canary, 200 fits, half with it (~1 s). Measured (seed 3): honest 0.00 in both releases; noise / 20:
    # counts 0.85, gram 1.96 (the Gram's score, with most of mu^2, refutes the claim 1)
    source = scaled_test_noise(scale, seed=3)
    result = _audit(lambda: PrivateRecommender(method="ease", noise=source), _interactions(), n_runs=200,
                    method="distinguish")
    assert result.method == "distinguish" and result.n_canaries == 1
    assert set(result.details["per_release"]) == {"counts", "gram"} and result.epsilon_claimed == 1.0
    if scale == 1.0:
        assert result.epsilon_lower <= 1.0
    else:
        assert result.epsilon_lower > 1.0 and result.details["release"] == "gram"


def test_a_large_catalogue_keeps_no_grams_and_its_score_reads_the_rest(monkeypatch) -> None:
    # above KEPT_GRAMS numbers (public sizes) the A_i stacks are not kept: sweeps_ holds None there, the
    # starts and the other statistics as before, and the ials score reads b and G only
    adapter, plan, data = _one_canary(60, 0.3)
    full = PrivateRecommender(method="ials", noise=ExactSource(), random_state=0).fit(data)
    monkeypatch.setattr(private_estimator, "KEPT_GRAMS", 12 * 16**2 * 2 - 1)  # one number too many
    small = PrivateRecommender(method="ials", noise=ExactSource(), random_state=0).fit(data)
    assert all(s.statistics.grams is None for s in small.sweeps_) and len(small.sweeps_) == 2
    assert all(s.statistics.grams.shape == (12, 16, 16) for s in full.sweeps_)
    for a, b in zip(full.sweeps_, small.sweeps_, strict=True):
        np.testing.assert_array_equal(a.start, b.start)
        np.testing.assert_array_equal(a.statistics.targets, b.statistics.targets)
    np.testing.assert_array_equal(full.item_side_.factors, small.item_side_.factors)
    score = release_scores(small)["ials"](np.sort(plan.items[0]))
    assert np.isfinite(score) and score != release_scores(full)["ials"](np.sort(plan.items[0]))
