"""Calibrate ``plan_recommendation`` on the measured curve and print its error at every point.

Reads ``recommendation_curve.json`` (``bench_recommendation_curve.py``), fits the constants of
:data:`dptensor.models.completion.plan.CALIBRATION` by least squares on the relative error of the
predicted ratio at every DP-ALS point (both relations, epsilon, matrix and tensor, every number of
users; log-parameters, so that every constant stays positive), and prints the constants, each
point's measured and predicted ratio and the largest relative error -- with the fitted constants
and with the ones in the module (``--check`` prints only the latter).

Usage::

    python benchmarks/plan_recommendation_calibration.py [--curve PATH] [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from dptensor.models.completion.plan import CALIBRATION, plan_recommendation

#: Fitted constants; the others keep their physical values (module docstring of the planner).
KEYS = ("tau2_bias", "tau2_factor", "g", "rho", "spectral", "spectral_floor")


def points(curve: Path, bounds: bool = False) -> list[dict]:
    """The DP-ALS points with a measured ratio (``bounds``: those whose ratio is only a lower bound)."""
    rows = json.loads(curve.read_text())["rows"]
    return [r for r in rows
            if r["method"] == "dp-als" and ("lower bound" in str(r.get("ratio_to"))) == bounds]


def predict(row: dict, calibration: dict) -> float:
    return plan_recommendation(
        row["users"], 1682, epsilon=row["epsilon"], relation=row["relation"],
        n_times=1 if row["model"] == "matrix" else 215,
        typical_ratings=round(row["ratings"] / row["users"]), calibration=calibration,
    ).ratio


def errors(rows: list[dict], calibration: dict) -> np.ndarray:
    return np.array([predict(r, calibration) / r["ratio"] - 1.0 for r in rows])


def table(rows: list[dict], calibration: dict) -> float:
    print(f"{'users':>7} {'model':<6} {'relation':<11} {'eps':>4} {'measured':>9} {'predicted':>9} "
          f"{'error':>7}")
    worst = 0.0
    for r in rows:
        p = predict(r, calibration)
        err = p / r["ratio"] - 1.0
        worst = max(worst, abs(err))
        print(f"{r['users']:>7} {r['model']:<6} {r['relation']:<11} {r['epsilon']:>4g} {r['ratio']:>9.4f} "
              f"{p:>9.4f} {100 * err:>6.2f}%")
    print(f"largest relative error {100 * worst:.2f}%")
    return worst


def markdown(rows: list[dict], calibration: dict, bounds: list[dict] = ()) -> str:
    """The module constants' predictions against every measured point (and bound), as Markdown."""
    lines = ["| users | model | relation | ε | measured ratio | predicted | relative error |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        p = predict(r, calibration)
        lines.append(f"| {r['users']:,} | {r['model']} | {r['relation']} | {r['epsilon']:g} "
                     f"| {r['ratio']:.4f} | {p:.4f} | {100 * (p / r['ratio'] - 1):+.2f}% |")
    for r in bounds:
        p = predict(r, calibration)
        lines.append(f"| {r['users']:,} | {r['model']} | {r['relation']} | {r['epsilon']:g} "
                     f"| ≥ {r['ratio']:.4f} | {p:.4f} | (consistent: {'yes' if p >= r['ratio'] else 'no'}) |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--curve", default="benchmarks/results/recommendation_curve.json")
    parser.add_argument("--check", action="store_true", help="only the module's constants")
    parser.add_argument("--markdown", default=None, metavar="FILE",
                        help="also write the module constants' table as Markdown")
    parser.add_argument("--fit-users", type=int, nargs="+", default=None,
                        help="fit on these numbers of users only (the others are predicted out of sample)")
    args = parser.parse_args()
    rows = points(Path(args.curve))
    if not args.check:
        fit_rows = rows if args.fit_users is None else [r for r in rows if r["users"] in args.fit_users]
        start = np.log([CALIBRATION[k] for k in KEYS])

        def residuals(x: np.ndarray) -> np.ndarray:
            return errors(fit_rows, {**CALIBRATION, **dict(zip(KEYS, np.exp(x), strict=True))})

        fit = least_squares(residuals, start, method="trf", loss="soft_l1", f_scale=0.01)
        fitted = {**CALIBRATION, **dict(zip(KEYS, (float(v) for v in np.exp(fit.x)), strict=True))}
        print("fitted constants:", json.dumps({k: float(f"{v:.4g}") for k, v in fitted.items()}))
        table(rows, fitted)
        print()
    print("module constants:", json.dumps(CALIBRATION))
    table(rows, CALIBRATION)
    for r in points(Path(args.curve), bounds=True):
        print(f"{r['users']:>7} {r['model']:<6} {r['relation']:<11} {r['epsilon']:>4g}  measured >= "
              f"{r['ratio']:.4f} (no non-private fit at this size), predicted {predict(r, CALIBRATION):.4f}")
    if args.markdown:
        Path(args.markdown).write_text(markdown(rows, CALIBRATION, points(Path(args.curve), bounds=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
