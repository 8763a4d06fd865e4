"""Benchmark: recovery error of the online tensor power method against the sample size n.

Wang & Anandkumar (2016), Theorem 3.1: Algorithm 2 with ``n = Omega~(sigma^2 d / eps^2)`` points
per round recovers ``||v_i - v^_i|| <= C eps / lambda_i`` -- the error falls like ``sqrt(d / n)``.
This script streams fresh samples from
:func:`dptensor.datasets.moment_stream.make_orthogonal_moment_stream` (third moment exactly
``sum_i lambda_i v_i^{(x)3}``), runs :class:`~dptensor.decomposition.online.OnlineTensorPower`
for a grid of ``n`` (and, separately, of ``d``), matches components by the Hungarian method and
fits the slopes of ``log(error)`` against ``log(n)`` (theory: -1/2) and ``log(d)`` (theory:
+1/2).

Run from the repository root (about 1-2 minutes on 2 cores)::

    python benchmarks/online_statistics.py [--out docs] [--seeds 5]
    python benchmarks/online_statistics.py --from-csv docs/online_statistics.csv  # redraw only

Writes ``online_statistics.csv`` and ``online_statistics.png`` to ``--out``.
"""

from __future__ import annotations

import os

# One BLAS thread unless the caller chose otherwise: on a small, shared machine OpenBLAS's
# busy-waiting threads make tall-skinny products (d x k by d x L) erratically slow -- seconds
# instead of milliseconds -- which would measure the machine's load, not the algorithm.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from dptensor.datasets.moment_stream import make_orthogonal_moment_stream  # noqa: E402
from dptensor.decomposition.online import OnlineTensorPower  # noqa: E402
from dptensor.metrics import match_components  # noqa: E402

RANK, N_ITER, N_RESTARTS, NOISE = 3, 8, 10, 0.1
N_GRID = (500, 1000, 2000, 5000, 10_000, 20_000, 50_000)
DIM_FOR_N = 50
D_GRID = (25, 50, 100, 200, 400)
N_FOR_D = 10_000


def run_one(dim: int, n: int, seed: int) -> tuple[float, float]:
    """Worst matched vector distance and weight error of one streaming fit."""
    stream = make_orthogonal_moment_stream(
        dim, RANK, weights=[1.0, 0.75, 0.5], noise=NOISE, random_state=10_000 + seed
    )
    model = OnlineTensorPower(RANK, batch_size=n, n_iter=N_ITER, n_restarts=N_RESTARTS, random_state=seed)
    model.fit(stream.batches(min(n, 5000)))
    match = match_components(stream.factors, model.factors_, stream.weights, model.weights_)
    return match.max_distance, float(np.max(match.weight_error))


def slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope of log(y) on log(x)."""
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs", help="folder for the CSV and PNG (default docs)")
    parser.add_argument("--seeds", type=int, default=5, help="independent streams per grid point")
    parser.add_argument("--from-csv", metavar="CSV", type=Path,
                        help="redraw the PNG (and reprint the slopes) from an online_statistics.csv; no fits")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.from_csv is not None:
        report(read_rows(args.from_csv), out)
        return
    start = time.perf_counter()
    rows = []
    sweeps = [("n", DIM_FOR_N, n) for n in N_GRID] + [("d", d, N_FOR_D) for d in D_GRID]
    for sweep, dim, n in sweeps:
        results = np.array([run_one(dim, n, seed) for seed in range(args.seeds)])
        rows.append(
            {
                "sweep": sweep,
                "d": dim,
                "n": n,
                "points_read": RANK * N_ITER * n,
                "sqrt_d_over_n": float(np.sqrt(dim / n)),
                "median_vector_error": float(np.median(results[:, 0])),
                "max_vector_error": float(np.max(results[:, 0])),
                "median_weight_error": float(np.median(results[:, 1])),
                "seeds": args.seeds,
            }
        )
        print(
            f"{sweep}-sweep d={dim:4d} n={n:6d}: median ||v - v^|| = {rows[-1]['median_vector_error']:.4f}, "
            f"median |lambda - lambda^| = {rows[-1]['median_weight_error']:.4f}"
        )
    print(f"total {time.perf_counter() - start:.1f} s")
    with open(out / "online_statistics.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    report(rows, out)


def read_rows(path: Path) -> list[dict]:
    """The rows of an ``online_statistics.csv`` written by this script, with numbers as numbers."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        for key, value in row.items():
            if key != "sweep":
                row[key] = float(value) if "." in value or "e" in value else int(value)
    return rows


def report(rows: list[dict], out: Path) -> None:
    """Print the fitted slopes and draw ``online_statistics.png`` from the rows."""
    n_rows = [r for r in rows if r["sweep"] == "n"]
    d_rows = [r for r in rows if r["sweep"] == "d"]
    slope_n = slope([r["n"] for r in n_rows], [r["median_vector_error"] for r in n_rows])
    slope_d = slope([r["d"] for r in d_rows], [r["median_vector_error"] for r in d_rows])
    slope_n_weight = slope([r["n"] for r in n_rows], [r["median_weight_error"] for r in n_rows])
    # error^2 ~ (A + B d) / n: a d-free part (the latent z's own spread) plus the noise part;
    # the local slope in d tends to +1/2 once B d dominates.
    d_arr = np.array([r["d"] for r in d_rows], dtype=float)
    sq = np.array([r["median_vector_error"] ** 2 * r["n"] for r in d_rows])
    (coef_b, coef_a) = np.polyfit(d_arr, sq, 1)
    local = slope(d_arr[-2:].tolist(), [r["median_vector_error"] for r in d_rows[-2:]])
    print(f"fitted slope of log error vs log n: {slope_n:+.3f} (theory -0.5); weights {slope_n_weight:+.3f}")
    print(f"slope of log error vs log d: {slope_d:+.3f} overall, {local:+.3f} between the largest two d")
    print(
        f"fit n * error^2 = A + B d: A = {coef_a:.3g}, B = {coef_b:.3g} "
        f"(the d-free part equals B d at d = {coef_a / coef_b:.0f})"
    )

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ns = np.array([r["n"] for r in n_rows], dtype=float)
    errs = np.array([r["median_vector_error"] for r in n_rows])
    axes[0].loglog(ns, errs, "o-", label="median max_i ||v_i - v^_i||")
    werrs = [r["median_weight_error"] for r in n_rows]
    axes[0].loglog(ns, werrs, "s--", label="median max_i |lambda_i - lambda^_i|")
    ref = errs[0] * np.sqrt(ns[0] / ns)
    axes[0].loglog(ns, ref, "k:", label="slope -1/2")
    axes[0].set_xlabel("n (points per round)")
    axes[0].set_ylabel("error")
    axes[0].set_title(f"d = {DIM_FOR_N}, k = {RANK}: fitted slope {slope_n:+.2f}")
    axes[0].legend(fontsize=8)
    ds = np.array([r["d"] for r in d_rows], dtype=float)
    derrs = np.array([r["median_vector_error"] for r in d_rows])
    axes[1].loglog(ds, derrs, "o-", label="median max_i ||v_i - v^_i||")
    axes[1].loglog(ds, derrs[0] * np.sqrt(ds / ds[0]), "k:", label="slope +1/2")
    # label the grid's values only: log-axis minor labels (3 x 10^1, 4 x 10^1, ...) overlap
    axes[1].set_xticks(ds)
    axes[1].set_xticklabels([f"{int(d)}" for d in ds])
    axes[1].xaxis.set_minor_formatter(NullFormatter())
    axes[1].set_xlabel("d")
    axes[1].set_title(f"n = {N_FOR_D}, k = {RANK}: fitted slope {slope_d:+.2f}")
    axes[1].legend(fontsize=8)
    fig.suptitle("Online tensor power method (Algorithm 2): error ~ sqrt(d / n) (Theorem 3.1)")
    fig.tight_layout()
    fig.savefig(out / "online_statistics.png", dpi=120)
    print(f"wrote {out / 'online_statistics.png'}")


if __name__ == "__main__":
    main()
