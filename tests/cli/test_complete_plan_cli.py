"""``dptensor complete plan``: the planner of private recommendations on the command line."""

from __future__ import annotations

from dptensor.cli import main
from dptensor.models.completion import plan_recommendation
from dptensor.models.completion.plan import epsilon_within, users_within


def test_complete_plan_prints_the_prediction(capsys):
    argv = ["complete", "plan", "--users", "70000", "--items", "1682", "--epsilon", "1",
            "--typical-ratings", "106"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    expected = plan_recommendation(70_000, 1682, epsilon=1.0, typical_ratings=106).ratio
    assert f"ratio to non-private: {expected:.3f}" in out
    assert main([*argv, "--within", "1.03"]) == 0
    out = capsys.readouterr().out
    needed = users_within(1.03, 1682, epsilon=1.0, typical_ratings=106)
    assert f"ratio <= 1.03 predicted for every number of users from about {needed}\n" in out
    budget = epsilon_within(1.03, 70_000, 1682, typical_ratings=106)
    assert f"ratio <= 1.03 with 70000 users predicted for every epsilon from about {budget:.3g}\n" in out


def test_complete_plan_says_when_the_level_holds_over_the_whole_range_searched(capsys):
    """Below the level at the bottom of the range: no "from about 0.01" that reads like a threshold."""
    argv = ["complete", "plan", "--users", "70000", "--items", "1682", "--epsilon", "1", "--within", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "ratio <= 3 predicted at every number of users searched (100 and more)" in out
    assert "ratio <= 3 with 70000 users predicted at every epsilon searched (0.01 and more)" in out


def test_complete_plan_entry_value_with_days(capsys):
    argv = ["complete", "plan", "--users", "10000", "--items", "500", "--days", "215", "--epsilon", "4",
            "--neighbouring", "entry-value", "--within", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "entry-value relation" in out and "predicted for every" not in out


def test_complete_plan_errors_are_one_line(capsys):
    assert main(["complete", "plan", "--users", "100", "--epsilon", "1"]) == 2
    err = capsys.readouterr().err
    assert "dptensor complete plan" in err and "--items" in err
    assert main(["complete", "plan", "--users", "100", "--items", "10", "--epsilon", "1",
                 "--value-range", "5", "1"]) == 2
    assert "--value-range must be finite with max > min, got (5.0, 1.0)" in capsys.readouterr().err


def test_complete_plan_refuses_impossible_inputs_in_one_line(capsys):
    """A ratio below 1 is never reached, and a typical user cannot rate more than items x days."""
    base = ["complete", "plan", "--users", "943", "--items", "1682", "--epsilon", "1"]
    assert main([*base, "--within", "0.9"]) == 2
    err = capsys.readouterr().err
    assert "--within must be at least 1" in err and len(err.strip().splitlines()) == 1
    assert main(["complete", "plan", "--users", "10", "--items", "10", "--epsilon", "1",
                 "--typical-ratings", "50"]) == 2
    err = capsys.readouterr().err
    assert "--typical-ratings (50) is more than a user can have" in err and "= 10" in err
    assert main(["complete", "plan", "--users", "10", "--items", "10", "--days", "5", "--epsilon", "1",
                 "--typical-ratings", "50"]) == 0  # 10 items over 5 days: 50 is possible
    capsys.readouterr()
