"""The recommendation curve's summary logic: ratios, the crossing of 10%, tables, parts from a log."""

from __future__ import annotations

import json

import pytest
from _helpers import load_benchmark

load = load_benchmark


def fit(users, method, model, relation, epsilon, rmse):
    return {"users": users, "method": method, "model": model, "relation": relation, "epsilon": epsilon,
            "rmse": rmse, "seconds": 1.0, "peak_rss_bytes": 2**30, "reg": 1.0}


def sizes():
    return [
        {"users": 1000, "ratings": 106_000, "fits": [
            fit(1000, "nonprivate", "matrix", "none", None, 1.0),
            fit(1000, "dp-als", "matrix", "user", 1.0, 1.09),
            fit(1000, "dp-als", "matrix", "user", 1.0, 1.11)]},
        {"users": 10_000, "ratings": 1_060_000, "fits": [
            fit(10_000, "nonprivate", "matrix", "none", None, 0.9),
            fit(10_000, "dp-als", "matrix", "user", 1.0, 1.0)]},
        {"users": 100_000, "ratings": 10_600_000, "fits": [
            fit(100_000, "nonprivate", "matrix", "none", None, 0.9),
            fit(100_000, "dp-als", "matrix", "user", 1.0, 0.945)]},
    ]  # fmt: skip


def test_summary_ratios_and_the_users_from_which_the_ratio_stays_within_ten_percent():
    curve = load("bench_recommendation_curve")
    rows = curve.summarise(sizes())
    first = next(r for r in rows if r["users"] == 1000 and r["method"] == "dp-als")
    assert first["fits"] == 2
    assert first["rmse"] == pytest.approx(1.10) and first["ratio"] == pytest.approx(1.10)
    # 1.10 at 10^3 (not above), 1.111 at 10^4 (above), 1.05 at 10^5: crossing between 10^4 and 10^5
    crossing = curve.within(rows, "matrix", 1.0)
    assert 10_000 < crossing < 100_000
    assert curve.within(rows, "tensor", 1.0) is None
    table = curve.markdown(rows)
    assert "| dp-als | matrix | user | 1.0 | 1.1000 (1.100) | 1.0000 (1.111) | 0.9450 (1.050) |" in table


def test_parts_are_rebuilt_from_the_printed_lines(tmp_path, monkeypatch):
    curve = load("bench_recommendation_curve")
    log = tmp_path / "run.log"
    log.write_text(
        "1000 users ...\n"
        "  n=   1000 nonprivate   matrix none        eps=None RMSE 0.9764     11.9 s  peak 0.26 GiB\n"
        "a warning line\n"
        "  n=   1000 dp-als       tensor user        eps=4.0  RMSE 1.0696      1.4 s  peak 0.43 GiB\n"
    )

    class Generator:
        def iter_samples(self, n, **kwargs):
            return [list(range(5 * n))]

    monkeypatch.setattr(curve, "generator", lambda *args: Generator())
    args = type("Args", (), {"inter": None, "rank": 10, "seed": 0, "cache": str(tmp_path), "chunk": 10})()
    curve.parts_from_log(args, log, tmp_path)
    part = json.loads((tmp_path / "recommendation_curve_part_1000.json").read_text())
    assert part["ratings"] == 5000 and len(part["fits"]) == 2
    assert part["fits"][1] == {**part["fits"][1], "method": "dp-als", "model": "tensor", "relation": "user",
                               "epsilon": 4.0, "rmse": 1.0696, "from_log": True}
