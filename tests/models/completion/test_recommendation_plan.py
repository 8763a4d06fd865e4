"""plan_recommendation: the RMSE ratio of a private recommender predicted from public sizes only."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest

from dptensor.models.completion import plan_recommendation
from dptensor.models.completion.plan import CALIBRATION, epsilon_within, popularity_profile, users_within

CURVE = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "recommendation_curve.json"
ML = {"typical_ratings": 106}


def test_the_planner_reads_public_sizes_only():
    """Its parameters are sizes, the budget and the fit's public parameters: no data, no estimator."""
    names = set(inspect.signature(plan_recommendation).parameters)
    assert names == {"n_users", "n_items", "epsilon", "delta", "relation", "rank", "n_times",
                     "typical_ratings", "max_ratings", "value_range", "popularity", "calibration"}
    plan = plan_recommendation(10_000, 1682, epsilon=1.0, **ML)
    assert plan.ratio > 1.0 and plan.excess_mse > 0
    assert "public sizes only" in plan.describe().lower()


def test_the_plan_says_whether_the_fit_makes_a_spectral_start():
    """The fit's own rule (public sizes): about 3.3e4 users of 1682 items at epsilon 1, never entry-value."""
    small, large = (plan_recommendation(n, 1682, epsilon=1.0, **ML) for n in (10_000, 100_000))
    assert not small.spectral_start and large.spectral_start
    assert "spectral start" in large.describe() and "spectral start" not in small.describe()
    assert not plan_recommendation(100_000, 1682, epsilon=1.0, relation="entry-value", **ML).spectral_start
    # the spectral start lowers the predicted ratio against the same fit without its item excess cut
    no_start_gain = {**CALIBRATION, "spectral": 1e-9}  # theta < 1: the factors' excess unchanged
    without = plan_recommendation(100_000, 1682, epsilon=1.0, calibration=no_start_gain, **ML)
    assert large.ratio < without.ratio


@pytest.mark.parametrize("relation", ["user", "entry-value"])
def test_the_ratio_falls_with_epsilon(relation):
    ratios = [plan_recommendation(20_000, 1682, epsilon=e, relation=relation, **ML).ratio
              for e in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)]
    assert np.all(np.diff(ratios) < 0), ratios


@pytest.mark.parametrize("relation", ["user", "entry-value"])
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_the_ratio_falls_with_the_number_of_users_once_the_item_side_carries_signal(relation, epsilon):
    """From 10^5 users on the ratio falls monotonically towards 1; below, it may rise.

    Where every item's statistics are mostly noise the private fit cannot use more users while the
    non-private one can, so the *ratio* rises (measured: 1.100 at 10^3 users, 1.110 at 10^4, user
    level, epsilon 1); the private RMSE itself does not.
    """
    users = [10**5, 2 * 10**5, 5 * 10**5, 10**6, 3 * 10**6, 10**7, 10**8]
    ratios = [plan_recommendation(n, 1682, epsilon=epsilon, relation=relation, **ML).ratio for n in users]
    assert np.all(np.diff(ratios) < 0), ratios
    assert ratios[-1] < 1.005
    assert max(plan_recommendation(n, 1682, epsilon=epsilon, relation=relation, **ML).ratio
               for n in (10**3, 10**4, 3 * 10**4)) < 1.2


def test_users_within_is_where_the_prediction_crosses_the_level():
    needed = users_within(1.05, 1682, epsilon=1.0, **ML)
    assert needed is not None
    after = [plan_recommendation(int(needed * f), 1682, epsilon=1.0, **ML).ratio for f in (1, 1.5, 3, 10)]
    assert max(after) <= 1.05
    assert plan_recommendation(int(needed * 0.98), 1682, epsilon=1.0, **ML).ratio > 1.05
    assert users_within(1.0001, 1682, epsilon=0.01, high=10**5, **ML) is None


def test_epsilon_within_is_the_budget_where_the_prediction_crosses_the_level():
    """The inverse in the budget: at and above it the ratio is at most the level, just below it is not."""
    needed = epsilon_within(1.03, 70_000, 1682, **ML)
    assert needed is not None and 1.0 < needed < 4.0  # measured: 1.031 at epsilon 2 (research log)
    after = [plan_recommendation(70_000, 1682, epsilon=needed * f, **ML).ratio for f in (1, 1.5, 3, 10)]
    assert max(after) <= 1.03
    assert plan_recommendation(70_000, 1682, epsilon=needed * 0.99, **ML).ratio > 1.03
    # consistent with users_within: from the users it finds at epsilon 1, epsilon 1 is (just) enough
    users = users_within(1.05, 1682, epsilon=1.0, **ML)
    assert 0.9 < epsilon_within(1.05, users, 1682, **ML) <= 1.0 * (1 + 1e-3)
    assert epsilon_within(1.0001, 1000, 1682, high=10.0, **ML) is None  # out of reach below the high end
    assert epsilon_within(5.0, 70_000, 1682, **ML) == pytest.approx(0.01)  # already below at the low end
    with pytest.raises(TypeError, match="epsilon"):
        epsilon_within(1.03, 70_000, 1682, epsilon=1.0, **ML)
    with pytest.raises(ValueError, match="low and high"):
        epsilon_within(1.03, 70_000, 1682, low=2.0, high=1.0, **ML)


def test_the_prediction_matches_the_measured_curve():
    """Every measured DP-ALS point of the committed curve is predicted within 5% of its ratio."""
    rows = json.loads(CURVE.read_text())["rows"]
    points = [r for r in rows if r["method"] == "dp-als"]
    assert len(points) >= 14
    for r in points:
        bound = "lower bound" in str(r.get("ratio_to"))  # no non-private fit at that size
        ratings = round(r["ratings"] / r["users"])
        predicted = plan_recommendation(r["users"], 1682, epsilon=r["epsilon"], relation=r["relation"],
                                        n_times=1 if r["model"] == "matrix" else 215,
                                        typical_ratings=ratings).ratio
        if bound:
            assert predicted >= 0.95 * r["ratio"], (r, predicted)
        else:
            assert abs(predicted - r["ratio"]) <= 0.05 * r["ratio"], (r, predicted)


def test_popularity_profiles():
    movielens = popularity_profile(1682)
    assert movielens.shape == (1682,) and np.isclose(movielens.sum(), 1.0)
    assert np.all(np.diff(movielens) <= 0) and 300 < movielens[0] / movielens[-1] < 1000
    assert np.allclose(popularity_profile(4, "uniform"), 0.25)
    assert np.allclose(popularity_profile(3, [1, 1, 2]), [0.25, 0.25, 0.5])
    uniform = plan_recommendation(10_000, 500, epsilon=1.0, popularity="uniform").ratio
    assert uniform > 1.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"relation": "row"}, "relation"),
    ({"epsilon": 0.0}, "epsilon"),
    ({"delta": 1.5}, "delta"),
    ({"value_range": (5, 1)}, "value_range"),
    ({"popularity": "zipf"}, "popularity"),
    ({"popularity": [1, 2]}, "popularity"),
    ({"calibration": {**CALIBRATION, "g": -1.0}}, "calibration"),
])  # fmt: skip
def test_bad_arguments_are_named(kwargs, message):
    arguments = {"epsilon": 1.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        plan_recommendation(1000, 100, **arguments)
