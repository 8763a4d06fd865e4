"""Private spectral LDA: overhead over the non-private fit, private whitening, memory at scale.

Each measurement runs in its own subprocess (one BLAS thread), on corpora from
``benchmarks/bench_lda.py`` (``alpha_i = 1/k``, topics from ``Dirichlet(0.05)``, mean length 100),
and reports fit time, peak resident memory (``VmHWM``) and mean L1 topic error after Hungarian
matching. Rows (all in one run, so ratios compare like with like on a shared machine):

* ``overhead``: ``SpectralLDA`` vs ``PrivateSpectralLDA`` (Configuration 1, epsilon = 1,
  delta = 1e-6; the noisy power method at this vocabulary) at N = 10^5, d = 2 10^4, k = 20;
* ``whitening``: Analyze Gauss (dense ``d x d`` noise) vs the noisy power method at
  N = 5 10^4, d = 2000, k = 10, epsilon in {1, 3};
* ``scale``: the private fit at N = 10^5, d = 10^5, k = 50 (peak memory must stay under 4 GB);
* ``dp-vi``: ``DPVariationalLDA`` (one pass, Poisson minibatches of 1000) at equal epsilon and cell.

Usage::

    python benchmarks/bench_private_lda.py --out benchmarks/results/private_lda.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_lda import load_cell, make_cell, peak_rss_mb, topic_l1_error  # noqa: E402

DELTA = 1e-6


def worker(args: argparse.Namespace) -> None:
    from dptensor.models import DPVariationalLDA, PrivateSpectralLDA, SpectralLDA
    from dptensor.models.topics.dp_vi_options import DPVIOptions

    counts, topics, _ = load_cell(args.cell)
    k = topics.shape[0]
    start = time.perf_counter()
    if args.method == "spectral":
        model = SpectralLDA(k, 1.0, random_state=0).fit(counts)
    elif args.method == "dp-vi":
        model = DPVariationalLDA(
            k, epsilon=args.epsilon, delta=DELTA, random_state=0,
            options=DPVIOptions(batch_size=1000, n_passes=1, clip=None),
        ).fit(counts)
    else:
        model = PrivateSpectralLDA(
            k, 1.0, epsilon=args.epsilon, delta=DELTA, private_whitening=args.method, random_state=0
        ).fit(counts)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "peak_mb": peak_rss_mb(),
                      "error": topic_l1_error(topics, model.components_)}))  # fmt: skip


def measure(cell: Path, method: str, epsilon: float | None) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    argv = [sys.executable, __file__, "--worker", "--cell", str(cell), "--method", method]
    if epsilon is not None:
        argv += ["--epsilon", str(epsilon)]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/private_lda.json"))
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "dptensor_bench_lda")
    parser.add_argument("--skip-scale", action="store_true", help="skip the N = d = 10^5 cell")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cell", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    parser.add_argument("--epsilon", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    plan = [("overhead", (100_000, 20_000, 20), [("spectral", None), ("noisy-power", 1.0)])]
    plan.append(("whitening", (50_000, 2000, 10), [("spectral", None)] + [
        (m, e) for e in (1.0, 3.0) for m in ("analyze-gauss", "noisy-power")]))  # fmt: skip
    plan.append(("dp-vi", (100_000, 20_000, 20), [("dp-vi", 1.0)]))
    if not args.skip_scale:
        plan.append(("scale", (100_000, 100_000, 50), [("spectral", None), ("noisy-power", 1.0)]))
    for name, (n, d, k), methods in plan:
        cell = make_cell(n, d, k, 0, args.workdir)
        for method, eps in methods:
            result = measure(cell, method, eps)
            row = {"benchmark": name, "N": n, "d": d, "k": k, "method": method, "epsilon": eps, **result}
            rows.append(row)
            print(json.dumps(row), flush=True)
    base = {(r["benchmark"]): r["seconds"] for r in rows if r["method"] == "spectral"}
    for row in rows:
        known = row["benchmark"] in base
        row["time_ratio_vs_spectral"] = row["seconds"] / base[row["benchmark"]] if known else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print("| benchmark | N | d | k | method | epsilon | fit time (s) | time / non-private | peak RSS (MB) "
          "| error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = "" if r["time_ratio_vs_spectral"] is None else f"{r['time_ratio_vs_spectral']:.2f}"
        eps = "" if r["epsilon"] is None else f"{r['epsilon']:g}"
        print(f"| {r['benchmark']} | {r['N']} | {r['d']} | {r['k']} | {r['method']} | {eps} | "
              f"{r['seconds']:.2f} | {ratio} | {r['peak_mb']:.0f} | {r['error']:.4f} |")  # fmt: skip


if __name__ == "__main__":
    main()
