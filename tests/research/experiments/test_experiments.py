"""The --quick sizes of the experiments run end to end and their outputs make sense."""

import json

import numpy as np
import pytest

from dptensor.cli import main
from dptensor.cli.experiment import EXPERIMENTS
from dptensor.research.experiments import noise_tolerance, whitening_comparison


def test_noise_tolerance_quick(tmp_path):
    result = noise_tolerance.run(tmp_path, quick=True, progress=False)
    for path in result.files.values():
        assert path.exists() and path.stat().st_size > 0
    rates = {(r["noise_model"], r["dim"], r["sigma"]): r["failure_rate"] for r in result.rows}
    sigmas = sorted({r["sigma"] for r in result.rows})
    for model in ("gaussian", "adversarial", "weakly_correlated"):
        # small noise never fails; failure grows with the noise level
        assert all(rates[(model, d, sigmas[0])] == 0 for d in (8, 16, 32))
        assert any(rates[(model, d, sigmas[-1])] > 0.5 for d in (8, 16, 32))
    # Gaussian noise: the transition point falls with d (Theorem 2.2: like d^-1/2).
    assert result.exponents["gaussian"]["d"] < 0


def test_noise_tolerance_transition_interpolation():
    sigmas = np.array([0.1, 0.2, 0.4])
    assert noise_tolerance._transition(sigmas, np.array([0.0, 0.0, 1.0])) == np.exp(
        (np.log(0.2) + np.log(0.4)) / 2
    )
    assert np.isnan(noise_tolerance._transition(sigmas, np.zeros(3)))


def test_whitening_comparison_quick(tmp_path):
    result = whitening_comparison.run(tmp_path, quick=True, progress=False)
    assert (tmp_path / "whitening.png").exists()
    # Proposition B.1: marginalisation loses a factor growing with sqrt(d) against the power method.
    ratios = result.summary["median_error_ratio_marginalisation_over_power"]
    assert all(ratio > 2 for ratio in ratios.values())


def test_experiment_cli(tmp_path, capsys):
    assert main(["experiment", "whitening", "--quick", "--trials", "2", "--out", str(tmp_path)]) == 0
    assert "wrote png" in capsys.readouterr().out
    summary = json.loads((tmp_path / "whitening.json").read_text())
    assert summary["n_trials"] == 2


#: completion's --quick grid is the longest (~10 s): slow, while cli/test_completion_cli.py runs a
#: smaller grid of the same experiment (every method, its figure) by default
SLOW_EXPERIMENTS = {"completion"}
NAMES = [pytest.param(name, marks=pytest.mark.slow) if name in SLOW_EXPERIMENTS else name
         for name in sorted(EXPERIMENTS)]


@pytest.mark.parametrize("name", NAMES)
def test_every_experiment_runs_quick_from_the_cli(name, tmp_path, capsys):
    # The contract: each experiment's --quick size runs in the test suite (completion's with -m slow).
    assert main(["experiment", name, "--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for kind in ("csv", "json"):
        assert f"wrote {kind}" in out
    pngs = list(tmp_path.glob("*.png"))
    assert pngs and all(path.stat().st_size > 1000 for path in pngs)
