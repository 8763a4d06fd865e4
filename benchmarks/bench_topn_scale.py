"""Top-N at scale (issue 51, item 4): 10^6 users x 2 10^4 items, time and peak memory, private or not.

Users are generated block by block from one seed per block (a benchmark tool, not data): each
user's row length is log-normal (median ``--median-length``, sigma 1, at least 1 item, at most
``--max-length``) and their items are drawn with replacement from a Zipf popularity profile
(``p_i ~ 1 / (i + 10)^--zipf``) and binarised, so popular items co-occur as in real interaction
logs and the Gram is dense among them. :class:`dptensor.datasets.ImplicitFeedbackModel` (the
semi-synthetic generator with user-dependent choice) would draw Gumbel keys over every item for
every user, ``2 10^10`` numbers here, far longer than the fits it would feed; the quality of the
lists is not measured here, only what the fits cost.

Each configuration runs in its own process (``--single``), so its peak resident memory
(``ru_maxrss``, the kernel's high-water mark: the data, the fit, and on Dask the in-process
workers) is its own. Backends:

* ``local``: the users generated here into one SciPy CSR matrix, ``fit(X)`` with ``n_jobs``
  threads (``--jobs``; one block in-process for ``--jobs 1``);
* ``dask``: a ``dask.array`` of ``--block-users``-row chunks made *on the workers* from their
  seeds (``da.from_delayed``), on an in-process ``distributed.LocalCluster`` with ``--jobs``
  threads (``processes=False``, so ``ru_maxrss`` covers the workers too), persisted there before
  the fit; the client never holds a user's row.

Methods: ``popularity``, ``ease`` (dense EASE from the ``I x I`` Gram summed over user blocks) and
``private-ease`` (``PrivateRecommender(method="ease", epsilon=1, delta=1e-6)``: noisy item counts
and noisy unit-row Gram, EASE on them).

Usage::

    python benchmarks/bench_topn_scale.py --users 100000 --items 5000 --backends local dask \\
        --methods popularity ease private-ease --out benchmarks/results/topn_scale.json
    python benchmarks/bench_topn_scale.py --users 1000000 --items 20000 --backends local --jobs 1 \\
        --methods popularity ease private-ease --out benchmarks/results/topn_scale.json --append
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

METHODS = ("popularity", "ease", "private-ease")
BACKENDS = ("local", "dask")


def make_block(seed: int, n_users: int, n_items: int, median_length: float, max_length: int,
               zipf: float) -> sp.csr_matrix:
    """One block of users (module docstring), from its own seed."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.rint(rng.lognormal(np.log(median_length), 1.0, n_users)), 1, max_length)
    lengths = lengths.astype(np.int64)
    weights = 1.0 / (np.arange(n_items) + 10.0) ** zipf
    cdf = np.cumsum(weights / weights.sum())
    items = np.minimum(np.searchsorted(cdf, rng.random(int(lengths.sum()))), n_items - 1)
    rows = np.repeat(np.arange(n_users), lengths)
    block = sp.csr_matrix((np.ones(rows.size), (rows, items)), shape=(n_users, n_items))
    block.sum_duplicates()
    block.data[:] = 1.0
    return block


def block_seeds(seed: int, n_users: int, block_users: int) -> list[tuple[int, int]]:
    """``(seed, rows)`` of every block."""
    sizes = [min(block_users, n_users - start) for start in range(0, n_users, block_users)]
    children = np.random.SeedSequence(seed).generate_state(len(sizes), dtype=np.uint32)
    return [(int(s), n) for s, n in zip(children, sizes, strict=True)]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def estimator(method: str, jobs: int | None):
    from dptensor.models.recommend import PrivateRecommender, Recommender

    if method == "private-ease":
        return PrivateRecommender(epsilon=1.0, delta=1e-6, method="ease", n_jobs=jobs)
    return Recommender(method=method, n_jobs=jobs)


def run_single(args: argparse.Namespace) -> dict:
    """One (backend, method) fit in this process; returns its record."""
    import warnings

    warnings.simplefilter("ignore")
    backend, method = args.single
    seeds = block_seeds(args.seed, args.users, args.block_users)
    shape = dict(n_items=args.items, median_length=args.median_length, max_length=args.max_length,
                 zipf=args.zipf)
    record = {"backend": backend, "method": method, "users": args.users, "items": args.items,
              "jobs": args.jobs, "block_users": args.block_users, "blocks": len(seeds)}
    base = rss_mb()
    cluster = client = None
    start = time.perf_counter()
    if backend == "local":
        X = sp.csr_matrix(sp.vstack([make_block(s, n, **shape) for s, n in seeds], format="csr"))
        record["interactions"] = int(X.nnz)
        jobs = args.jobs
    else:
        import dask
        import dask.array as da
        import distributed

        cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=args.jobs, processes=False,
                                           dashboard_address=None, worker_dashboard_address=None)
        client = distributed.Client(cluster)
        meta = sp.csr_matrix((0, args.items))
        X = da.concatenate([
            da.from_delayed(dask.delayed(make_block, pure=True)(s, n, **shape), (n, args.items), float,
                            meta=meta)
            for s, n in seeds
        ]).persist()  # made and kept on the workers, as data loaded on a cluster
        distributed.wait(X)
        jobs = None
    record["generate_s"] = round(time.perf_counter() - start, 2)
    record["rss_after_data_mb"] = round(rss_mb(), 1)
    model = estimator(method, jobs)
    start = time.perf_counter()
    model.fit(X)
    record["fit_s"] = round(time.perf_counter() - start, 2)
    record["peak_rss_mb"] = round(peak_mb(), 1)
    record["rss_at_start_mb"] = round(base, 1)
    record["popularity_sum"] = float(np.sum(model.popularity_))
    if method == "private-ease":
        record["epsilon"] = model.guarantee_.epsilon
    if client is not None:
        client.close()
        cluster.close()
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=5_000)
    parser.add_argument("--block-users", type=int, default=50_000)
    parser.add_argument("--median-length", type=float, default=20.0)
    parser.add_argument("--max-length", type=int, default=2_000)
    parser.add_argument("--zipf", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=["local"])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--append", action="store_true", help="add to the runs already in --out")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per configuration")
    parser.add_argument("--label", default=None, help="a note stored with each run (e.g. the code measured)")
    parser.add_argument("--single", nargs=2, metavar=("BACKEND", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.single:
        print(json.dumps(run_single(args)))
        return
    runs = []
    if args.append and args.out is not None and args.out.exists():
        runs = json.loads(args.out.read_text())["runs"]
    passed = [a for a in sys.argv[1:] if a not in ("--append",)]
    for backend in args.backends:
        for method in args.methods:
            command = [sys.executable, __file__, *_strip(passed), "--single", backend, method]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                record = {"backend": backend, "method": method, "users": args.users, "items": args.items,
                          "jobs": args.jobs, "error": f"timed out after {args.timeout:.0f} s"}
            else:
                if done.returncode == 0:
                    record = json.loads(done.stdout.strip().splitlines()[-1])
                else:
                    record = {"backend": backend, "method": method, "users": args.users, "items": args.items,
                              "jobs": args.jobs,
                              "error": f"exit {done.returncode}: {_last_error(done.stderr)}"}
            if args.label:
                record["label"] = args.label
            record["command"] = " ".join(["python", "benchmarks/bench_topn_scale.py", *sys.argv[1:]])
            print(json.dumps(record), flush=True)
            runs.append(record)
    if args.out is not None:
        meta = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                           f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
                "python": platform.python_version(),
                "generator": "log-normal lengths (sigma 1), Zipf items p_i ~ 1/(i+10)^zipf, per-block seeds"}
        args.out.write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")


def _last_error(stderr: str) -> str:
    """The last line of a child's standard error that names an exception (else its last line)."""
    lines = stderr.strip().splitlines() or [""]
    named = [line for line in lines if "Error" in line.split(":")[0]]
    return (named or lines)[-1][:300]


def _strip(argv: list[str]) -> list[str]:
    """The command line without the driver's own options (output file, backends, methods)."""
    out, skip = [], False
    for arg in argv:
        if skip and not arg.startswith("--"):
            continue
        skip = arg in ("--out", "--backends", "--methods", "--timeout")
        if not skip:
            out.append(arg)
    return out


if __name__ == "__main__":
    main()
