"""The planner of private top-N (``plan_recommender``): its arithmetic is the fit's, its choice is the
fit's, and its prediction stays within 10% of the measured curve it was fitted on (issue 51)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.models.recommend import PrivateRecommender, RecommenderOptions
from dptensor.models.recommend.plan import CALIBRATION, plan_recommender, predicted_ratio
from dptensor.models.recommend.release_plan import recommender_guarantee
from dptensor.privacy import insecure_test_noise

CURVE = Path(__file__).parents[3] / "benchmarks" / "results" / "topn_curve.json"


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("share", [0.05, 0.3])
def test_the_planner_prices_the_noise_as_the_fit_does(epsilon: float, share: float) -> None:
    plan = plan_recommender(20000, 1500, epsilon=epsilon, delta=1e-6, method="ease", counts_share=share)
    fit = recommender_guarantee(("counts", "gram"), epsilon, 1e-6,
                                shares={"counts": share, "gram": 1.0 - share})
    # the fit calibrates the composition to [epsilon - 1e-3, epsilon]: the same noise to 1e-3
    assert plan.sigma_gram == pytest.approx(fit.sigma("gram"), rel=2e-3)
    assert plan.sigma_counts == pytest.approx(fit.sigma("counts"), rel=2e-3)
    assert plan.snr == pytest.approx(20000 * 100 / (plan.sigma_gram * 1500**1.5))
    assert math.isnan(plan.sigma_recount)
    alone = plan_recommender(20000, 1500, epsilon=epsilon, delta=1e-6, method="popularity",
                             recount_share=1.0 - share)
    popularity = recommender_guarantee(("counts", "recount"), epsilon, 1e-6,
                                       shares={"counts": share, "recount": 1.0 - share})
    assert alone.sigma_counts == pytest.approx(popularity.sigma("counts"), rel=2e-3)
    assert alone.sigma_recount == pytest.approx(popularity.sigma("recount"), rel=2e-3)
    assert math.isnan(alone.sigma_gram)
    # the fit's own plan: PrivateRecommender(method="popularity") with its options' recount share
    options = RecommenderOptions(recount_share=1.0 - share)
    X = sp.csr_array(np.eye(4, 6))
    with pytest.warns(UserWarning):
        model = PrivateRecommender(epsilon=epsilon, method="popularity", options=options,
                                   noise=insecure_test_noise(0)).fit(X)
    sigmas = model.guarantee_.details["sigmas"]
    assert sigmas["counts"] == pytest.approx(popularity.sigma("counts"))
    assert sigmas["recount"] == pytest.approx(popularity.sigma("recount"))


def test_the_choice_changes_at_the_crossover_and_grows_with_users_and_epsilon() -> None:
    plan = plan_recommender(1000, 1682, epsilon=1.0, delta=1e-6)
    assert plan.method == "popularity" and plan.ratio_to_popularity == CALIBRATION["popularity_ratio"]
    cross = plan.crossover_users
    assert plan_recommender(cross, 1682, epsilon=1.0, delta=1e-6).method == "ease"
    assert plan_recommender(cross - 1, 1682, epsilon=1.0, delta=1e-6).method == "popularity"
    assert 1000 < cross < 10000  # the measured curve: EASE loses at 10^3 users and wins at 3 10^3
    ratios = [plan_recommender(n, 1682, epsilon=1.0, delta=1e-6).ease_ratio_to_nonprivate
              for n in (10**3, 10**4, 10**5, 10**6)]
    assert (np.diff(ratios) > 0).all() and ratios[-1] < 1.0
    assert plan_recommender(10**4, 1682, epsilon=4.0, delta=1e-6).ease_ratio_to_nonprivate > ratios[1]
    # more items: more noise per user's signal; a bound shorter than the typical row lowers the signal
    base = plan_recommender(10**4, 1682, epsilon=1.0, delta=1e-6)
    assert plan_recommender(10**4, 5000, epsilon=1.0, delta=1e-6).snr < base.snr
    bounded = plan_recommender(10**4, 1682, epsilon=1.0, delta=1e-6, max_items_per_user=10)
    assert bounded.typical_items_per_user == 10 and bounded.snr == pytest.approx(base.snr / 10)
    assert predicted_ratio(0.0) == 0.0 and predicted_ratio(CALIBRATION["s0"]) == pytest.approx(0.5)


def test_the_prediction_is_within_ten_percent_of_the_measured_curve() -> None:
    """Every point of ``benchmarks/bench_topn_curve.py``'s recorded run (semi-synthetic users,
    5 000 held out, Recall@20), for the method the planner chooses there."""
    curve = json.loads(CURVE.read_text())
    checked = 0
    for point in curve["points"]:
        n, methods = point["n_users"], point["methods"]
        nonprivate = methods["ease"]["recall@20"]
        for epsilon in curve["settings"]["epsilons"]:
            plan = plan_recommender(n, point["n_items"], epsilon=epsilon, delta=curve["settings"]["delta"])
            measured = methods.get(f"PrivateRecommender eps={epsilon:g}") or methods[
                f"private {'ease' if plan.method == 'ease' else 'popularity'} eps={epsilon:g}"]
            ratio = measured["recall@20"] / nonprivate
            assert plan.ratio_to_nonprivate == pytest.approx(ratio, rel=0.10), (n, epsilon, plan.method)
            checked += 1
    assert checked >= 10


def test_auto_fits_the_method_the_planner_chose() -> None:
    rng = np.random.default_rng(0)
    dense = (rng.random((300, 40)) < 0.2).astype(float)
    dense[:, 0] = 1.0  # no empty column
    X = sp.csr_array(dense)
    model = PrivateRecommender(noise=insecure_test_noise(0),
                               options=RecommenderOptions(counts_share=0.2)).fit(X)
    expected = plan_recommender(300, 40, epsilon=1.0, delta=1e-6, counts_share=0.2)
    assert model.plan_ == expected and model.method_ == expected.method


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"counts_share": 1.0}, "counts_share must lie strictly between 0 and 1, got 1.0"),
    ({"counts_share": 0.0}, "counts_share"),
    ({"recount_share": 1.0}, "recount_share must lie strictly between 0 and 1, got 1.0"),
    ({"recount_share": True}, "recount_share"),
    ({"method": "als"}, "method must be"),
    ({"epsilon": 0.0}, "epsilon"),
])
def test_bad_planner_input(kwargs: dict, message: str) -> None:
    params = {"epsilon": 1.0, "delta": 1e-6, **kwargs}
    with pytest.raises(ValueError, match=message):
        plan_recommender(1000, 100, **params)


def test_the_verdict_names_the_choice_and_the_crossover() -> None:
    plan = plan_recommender(100000, 1682, epsilon=1.0, delta=1e-6)
    assert plan.method == "ease" and str(plan.crossover_users) in plan.verdict
    assert f"{plan.ratio_to_popularity:.2f}x popularity" in plan.verdict
    assert math.isnan(plan_recommender(100, 10, epsilon=1.0, delta=1e-6, method="popularity").sigma_gram)
