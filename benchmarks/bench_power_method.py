"""Benchmark: dptensor.power_method against TensorLy's symmetric_parafac_power_iteration.

Run from the repository root after ``pip install -e ".[bench]"``::

    python benchmarks/bench_power_method.py [--dims 50 100 200] [--trials 3] [--out benchmarks/results]

Both methods decompose the same noisy orthogonal tensors (Wang & Anandkumar 2016, Appendix A
Gaussian model, ``||E||_op = 0.5 lambda_min / sqrt(d)``, ``k = 10``, weights 1 ... 0.5) with the
same number of restarts and the same number of power steps per restart. TensorLy's
``n_iteration = R`` performs ``3R`` power steps per restart (one per mode) and then ``3R`` more
on the best restart, so dptensor gets ``n_iter = 3R`` with ``tol = 0`` (identical work, no early
stopping) and, separately, its default early stopping (``tol = 1e-8``).

A second table times the implicit third-moment operator against forming the dense moment of
``n = 10^4`` samples in ``d = 200`` and decomposing that.
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path

import numpy as np

from dptensor import power_method
from dptensor._files import write_csv
from dptensor.datasets import make_orthogonal_tensor
from dptensor.metrics import match_components
from dptensor.tensor import SampleMoment


def tensorly_power(tensor: np.ndarray, rank: int, n_repeat: int, n_iteration: int, seed: int):
    import tensorly as tl
    from tensorly.decomposition import symmetric_parafac_power_iteration

    tl.set_backend("numpy")
    np.random.seed(seed)  # noqa: NPY002 - TensorLy draws its restarts from the global generator
    weights, factors = symmetric_parafac_power_iteration(
        tl.tensor(tensor), rank, n_repeat=n_repeat, n_iteration=n_iteration
    )
    return np.asarray(weights), np.asarray(factors)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def recovery(truth, weights, factors):
    match = match_components(truth.factors, factors, truth.weights, np.abs(weights))
    return float(np.mean(match.inner)), float(np.min(match.inner)), float(np.max(match.weight_error))


def compare_with_tensorly(dims, rank, n_repeat, n_iteration, trials):
    rows = []
    for dim in dims:
        sigma = 0.5 * 0.5 / np.sqrt(dim)
        for trial in range(trials):
            truth = make_orthogonal_tensor(dim, rank, noise=sigma, random_state=1000 * dim + trial)
            (tl_w, tl_f), tl_time = timed(
                partial(tensorly_power, truth.tensor, rank, n_repeat, n_iteration, trial)
            )
            same_work = partial(
                power_method, truth.tensor, rank,
                n_restarts=n_repeat, n_iter=3 * n_iteration, random_state=trial,
            )
            equal, equal_time = timed(partial(same_work, tol=0))
            early, early_time = timed(same_work)
            for method, (w, f), seconds in (
                ("tensorly", (tl_w, tl_f), tl_time),
                ("dptensor tol=0", (equal.weights, equal.factors), equal_time),
                ("dptensor tol=1e-8", (early.weights, early.factors), early_time),
            ):
                mean_inner, min_inner, weight_err = recovery(truth, w, f)
                rows.append(
                    {
                        "dim": dim, "trial": trial, "method": method, "seconds": seconds,
                        "mean_inner": mean_inner, "min_inner": min_inner, "max_weight_error": weight_err,
                        "sigma": sigma,
                    }
                )
            print(f"d={dim} trial={trial}: tensorly {tl_time:.3f}s, dptensor {equal_time:.4f}s "
                  f"(tol=0), {early_time:.4f}s (early stop)", flush=True)
    return rows


def compare_moment(n=10_000, dim=200, rank=10, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    labels = rng.integers(0, rank, size=n)
    X = Q[:, labels].T * rng.uniform(0.5, 1.5, size=(n, 1)) + 0.05 * rng.standard_normal((n, dim))
    dense, form_time = timed(SampleMoment(X).to_dense)
    dense_result, dense_time = timed(lambda: power_method(dense, rank, random_state=seed))
    implicit_result, implicit_time = timed(lambda: power_method(SampleMoment(X), rank, random_state=seed))
    gap = float(np.max(np.abs(dense_result.weights - implicit_result.weights)))
    return {
        "n": n, "dim": dim, "rank": rank,
        "form_dense_s": form_time, "decompose_dense_s": dense_time,
        "implicit_s": implicit_time, "weight_gap": gap,
        "dense_bytes": dense.nbytes, "data_bytes": X.nbytes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--restarts", type=int, default=10, help="TensorLy n_repeat = dptensor L")
    parser.add_argument("--iterations", type=int, default=10, help="TensorLy n_iteration (3 steps each)")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    rows = compare_with_tensorly(args.dims, args.rank, args.restarts, args.iterations, args.trials)
    write_csv(args.out / "power_method_vs_tensorly.csv", rows)

    print(f"\nk={args.rank}, L={args.restarts}, {3 * args.iterations} power steps per restart, "
          f"median over {args.trials} tensors\n")
    print("| d | TensorLy s | dptensor s (tol=0) | speed-up | dptensor s (early stop) | speed-up "
          "| mean/min inner TensorLy | mean/min inner dptensor | max weight err TensorLy / dptensor |")
    print("|---|---|---|---|---|---|---|---|---|")
    for dim in args.dims:
        sub = {m: [r for r in rows if r["dim"] == dim and r["method"] == m]
               for m in ("tensorly", "dptensor tol=0", "dptensor tol=1e-8")}
        med = {m: float(np.median([r["seconds"] for r in v])) for m, v in sub.items()}
        inner = {m: (np.mean([r["mean_inner"] for r in v]), min(r["min_inner"] for r in v))
                 for m, v in sub.items()}
        werr = {m: max(r["max_weight_error"] for r in v) for m, v in sub.items()}
        print(f"| {dim} | {med['tensorly']:.3f} | {med['dptensor tol=0']:.4f} | "
              f"{med['tensorly'] / med['dptensor tol=0']:.0f}x | {med['dptensor tol=1e-8']:.4f} | "
              f"{med['tensorly'] / med['dptensor tol=1e-8']:.0f}x | "
              f"{inner['tensorly'][0]:.4f} / {inner['tensorly'][1]:.4f} | "
              f"{inner['dptensor tol=0'][0]:.4f} / {inner['dptensor tol=0'][1]:.4f} | "
              f"{werr['tensorly']:.2e} / {werr['dptensor tol=0']:.2e} |")

    moment = compare_moment()
    write_csv(args.out / "moment_operator.csv", [moment])
    total_dense = moment["form_dense_s"] + moment["decompose_dense_s"]
    print(f"\nThird moment of n={moment['n']} samples, d={moment['dim']}, k={moment['rank']} "
          "(default L, R, tol):\n")
    print("| path | seconds | memory for the tensor |")
    print("|---|---|---|")
    print(f"| form dense moment | {moment['form_dense_s']:.2f} | {moment['dense_bytes'] / 2**20:.0f} MiB |")
    print(f"| power method on dense | {moment['decompose_dense_s']:.2f} | |")
    print(f"| dense total | {total_dense:.2f} | |")
    print(f"| power method on SampleMoment (implicit) | {moment['implicit_s']:.2f} | "
          f"0 (data only, {moment['data_bytes'] / 2**20:.0f} MiB) |")
    print(f"| ratio dense total / implicit | {total_dense / moment['implicit_s']:.1f}x | |")
    print(f"| max weight difference | {moment['weight_gap']:.1e} | |")


if __name__ == "__main__":
    main()
