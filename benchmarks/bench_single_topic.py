"""Benchmark: the private single-topic model at vocabulary scale (D = 10^4, K = 20, N = 10^5).

Target (issue 13): a private fit in under 60 s and 2 GB. Every fit runs in a fresh subprocess, so
its peak resident memory (``ru_maxrss``) is its own; ``baseline`` is a subprocess that only imports
dptensor and draws the corpus, so ``peak - baseline`` is what the fit adds. The peer is the
slides' algorithm as written (``noise_sampler="dense"``: a ``D x D`` noise matrix and a
``D x D x D`` noise tensor), which cannot run at ``D = 10^4`` (the tensor alone would be 8 TB);
it is compared with the scalable path at sizes where both run, in the same invocation, as ratios.

    python benchmarks/bench_single_topic.py [--threads 1] [--out benchmarks/results/single_topic.json]

BLAS threads are set for the children (``OPENBLAS_NUM_THREADS`` and friends): on a busy shared
machine one thread is faster than two (multi-threaded BLAS spins under contention).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

SCALE = {"n_documents": 100_000, "n_words": 10_000, "n_topics": 20, "topic_concentration": 0.01}
COMPARE = [{"n_documents": 100_000, "n_words": d, "n_topics": 10, "topic_concentration": 0.1}
           for d in (50, 100, 150)]
MECHANISMS = (None, "agn", "avn", "dp_tpm")


def child(spec: dict) -> dict:
    """Draw the corpus, fit once (unless ``spec['mechanism'] == 'baseline'``), report time and memory."""
    import numpy as np

    from dptensor import SingleTopicModel
    from dptensor.datasets import make_single_topic_corpus
    from dptensor.metrics import e_comp

    data = {k: spec[k] for k in ("n_documents", "n_words", "n_topics", "topic_concentration")}
    corpus = make_single_topic_corpus(**data, random_state=0)
    out = {**spec}
    if spec["mechanism"] != "baseline":
        mechanism = spec["mechanism"]
        model = SingleTopicModel(
            spec["n_topics"], mechanism=mechanism, epsilon=None if mechanism is None else 1.0,
            delta=None if mechanism is None else 1e-5, n_words=spec["n_words"], input="tokens",
            noise_sampler=spec["sampler"], random_state=0,
        )  # fmt: skip
        start = time.perf_counter()
        model.fit(corpus.tokens)
        out["seconds"] = time.perf_counter() - start
        out["e_comp"] = e_comp(corpus.topics.T, model.components_.T)
        out["finite"] = bool(np.all(np.isfinite(model.components_)))
    out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_child(spec: dict, threads: int) -> dict:
    env = dict(os.environ)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(threads)
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True, env=env,
        check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "single_topic.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    rows = []
    baseline = run_child({**SCALE, "mechanism": "baseline", "sampler": "scalable"}, args.threads)
    print(f"D=10^4 baseline (imports + corpus): {baseline['peak_mb']:.0f} MB")
    for mechanism in MECHANISMS:
        row = run_child({**SCALE, "mechanism": mechanism, "sampler": "scalable"}, args.threads)
        row["added_mb"] = row["peak_mb"] - baseline["peak_mb"]
        rows.append(row)
        print(f"D=10^4 {mechanism or 'non-private':<11} {row['seconds']:6.1f} s  peak "
              f"{row['peak_mb']:6.0f} MB (+{row['added_mb']:.0f})  e_comp {row['e_comp']:.4g}",
              flush=True)  # fmt: skip
    clean = next(r for r in rows if r["mechanism"] is None)
    for row in rows:
        row["time_ratio_to_non_private"] = row["seconds"] / clean["seconds"]
    comparisons = []
    for size in COMPARE:
        for mechanism in ("agn", "avn"):
            pair = {s: run_child({**size, "mechanism": mechanism, "sampler": s}, args.threads)
                    for s in ("dense", "scalable")}  # fmt: skip
            comparisons.append({
                **size, "mechanism": mechanism,
                "dense_seconds": pair["dense"]["seconds"], "scalable_seconds": pair["scalable"]["seconds"],
                "dense_peak_mb": pair["dense"]["peak_mb"], "scalable_peak_mb": pair["scalable"]["peak_mb"],
                "speedup": pair["dense"]["seconds"] / pair["scalable"]["seconds"],
                "dense_e_comp": pair["dense"]["e_comp"], "scalable_e_comp": pair["scalable"]["e_comp"],
            })  # fmt: skip
            c = comparisons[-1]
            print(f"D={size['n_words']:<4} {mechanism}: dense {c['dense_seconds']:.2f} s / "
                  f"{c['dense_peak_mb']:.0f} MB, scalable {c['scalable_seconds']:.2f} s / "
                  f"{c['scalable_peak_mb']:.0f} MB, speedup {c['speedup']:.2f}x", flush=True)  # fmt: skip
    result = {
        "command": f"python benchmarks/bench_single_topic.py --threads {args.threads}",
        "threads": args.threads, "cpu_count": os.cpu_count(), "load_average": os.getloadavg(),
        "scale": SCALE, "baseline_peak_mb": baseline["peak_mb"], "scale_rows": rows,
        "dense_vs_scalable": comparisons,
        "target": "private fit at D=10^4, K=20, N=10^5 under 60 s and 2 GB",
        "target_met": all(r["seconds"] < 60 and r["peak_mb"] < 2048 for r in rows),
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"target met: {result['target_met']}; wrote {args.out}")


if __name__ == "__main__":
    main()
