"""Benchmark: peak memory of the online tensor power method at d = 100,000, k = 10.

Proposition 3.1 of Wang & Anandkumar (2016): Algorithm 2 needs ``O(d(k + L))`` memory. Here
the state is ``k`` found factors, ``L`` current restart vectors and ``L`` accumulators, i.e.
``d (k + 2L)`` float64 numbers, plus the batch being read and its ``rows x L`` projections; the
moment tensor itself would need ``8 d^3`` bytes = 8 PB.

Two generated streams from :func:`dptensor.datasets.moment_stream.make_orthogonal_moment_stream`
(third moment exactly ``sum_i lambda_i v_i^{(x)3}``) are decomposed:

* ``sparse``: factors with 50 nonzeros each, noise on 0.1% of the coordinates (~600 nonzeros
  per point), CSR batches of 1,000 points;
* ``dense``: dense batches of 100 points (80 MB each).

Peak memory is measured with :mod:`tracemalloc` (NumPy and SciPy report their array buffers
to it) around ``fit`` -- so it counts everything the fit and the generator allocate -- and the
process's peak resident set size with :func:`resource.getrusage` is reported alongside.

Run from the repository root (about 1-2 minutes on 2 cores)::

    python benchmarks/online_memory.py [--out docs]
"""

from __future__ import annotations

import os

# One BLAS thread unless the caller chose otherwise: on a small, shared machine OpenBLAS's
# busy-waiting threads make tall-skinny products (d x k by d x L) erratically slow -- seconds
# instead of milliseconds -- which would measure the machine's load, not the algorithm.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from dptensor._files import write_csv  # noqa: E402
from dptensor.datasets.moment_stream import make_orthogonal_moment_stream  # noqa: E402
from dptensor.decomposition.online import OnlineTensorPower  # noqa: E402
from dptensor.metrics import match_components  # noqa: E402

DIM, RANK = 100_000, 10
CASES = {
    # name: (stream options, points per round n, rounds R, rows per batch)
    "sparse": (dict(support=50, noise=0.1, noise_density=1e-3), 4000, 3, 1000),
    "dense": (dict(support=None, noise=0.1, noise_density=1.0), 400, 2, 100),
}


def batch_bytes(batch: np.ndarray | sp.csr_matrix) -> int:
    if sp.issparse(batch):
        return batch.data.nbytes + batch.indices.nbytes + batch.indptr.nbytes
    return batch.nbytes


def run_case(name: str) -> dict:
    options, n, rounds, rows = CASES[name]
    stream = make_orthogonal_moment_stream(DIM, RANK, random_state=0, **options)
    one_batch = batch_bytes(stream.sample(rows))
    model = OnlineTensorPower(RANK, batch_size=n, n_iter=rounds, random_state=0)
    tracemalloc.start()
    tracemalloc.reset_peak()
    start = time.perf_counter()
    model.fit(stream.batches(rows))
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    restarts = model.n_restarts_
    state = 8 * DIM * (RANK + 2 * restarts)
    work = 8 * 2 * rows * restarts  # projections X U and their squares
    match = match_components(stream.factors, model.factors_)
    return {
        "stream": name,
        "d": DIM,
        "k": RANK,
        "L": restarts,
        "R": rounds,
        "n": n,
        "rows_per_batch": rows,
        "points_read": model.n_samples_seen_,
        "seconds": round(elapsed, 2),
        "d_k_plus_L_MB": round(8 * DIM * (RANK + restarts) / 1e6, 1),
        "state_d_k_plus_2L_MB": round(state / 1e6, 1),
        "one_batch_MB": round(one_batch / 1e6, 1),
        "tracemalloc_peak_MB": round(peak / 1e6, 1),
        "peak_over_d_k_plus_L": round(peak / (8 * DIM * (RANK + restarts)), 2),
        "peak_over_state_plus_batch": round(peak / (state + one_batch + work), 2),
        "ru_maxrss_MB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3, 1),
        "dense_moment_PB": 8 * DIM**3 / 1e15,
        "median_inner_with_truth": round(float(np.median(match.inner)), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs", help="folder for online_memory.csv (default docs)")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    rows = []
    for name in args.cases:
        row = run_case(name)
        rows.append(row)
        print(
            f"{name:>6}: d={DIM}, k={RANK}, L={row['L']}, {row['points_read']} points in {row['seconds']} s; "
            f"peak {row['tracemalloc_peak_MB']} MB = {row['peak_over_d_k_plus_L']} x d(k+L) floats "
            f"({row['d_k_plus_L_MB']} MB) = {row['peak_over_state_plus_batch']} x (state d(k+2L) + one batch "
            f"+ projections); ru_maxrss {row['ru_maxrss_MB']} MB; "
            f"dense moment {row['dense_moment_PB']:.0f} PB"
        )
    print(f"wrote {write_csv(Path(args.out) / 'online_memory.csv', rows)}")


if __name__ == "__main__":
    main()
