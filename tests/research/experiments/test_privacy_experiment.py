"""Smoke test of the privacy-utility experiment (quick grid)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from dptensor.research.experiments.privacy_utility import METHODS, run  # noqa: E402


def test_quick_privacy_utility_writes_files(tmp_path: Path):
    result = run(tmp_path, quick=True, dim=12, rank=2, n_trials=2, epsilons=[1.0, 1e3], progress=False)
    for key in ("csv", "trials_csv", "png", "md", "json"):
        assert Path(result.files[key]).is_file()
    with open(result.files["csv"]) as handle:
        rows = list(csv.DictReader(handle))
    assert {r["method"] for r in rows} == set(METHODS)
    # with an enormous budget every private method recovers the top component
    big = [r for r in rows if r["epsilon"] == "1000.0"]
    assert all(float(r["cosine_median"]) > 0.99 for r in big)
    assert set(result.smallest_epsilon) == set(METHODS[:3])
