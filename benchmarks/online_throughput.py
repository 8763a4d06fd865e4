"""Benchmark: throughput of the online tensor power method against bare NumPy matrix products.

Each batch of Algorithm 2 (Wang & Anandkumar 2016, steps 5-6) costs two matrix products for
all ``L`` restarts: ``P = X U`` and ``u~ += X^T P^2`` (plus ``lambda~ += sum P^3``). This script
feeds the same pre-generated batches to

* ``OnlineTensorPower.partial_fit`` -- validation (finite entries, width), round splitting,
  deflation and normalisation at round ends included;
* a bare loop of exactly those NumPy/SciPy products on a fixed ``U``;

and reports samples per second per restart for both and their ratio (target: <= 2). Timings
alternate between the two, repeat, and keep the best of each.

Run from the repository root (well under a minute on 2 cores)::

    python benchmarks/online_throughput.py [--out docs] [--repeats 5]
"""

from __future__ import annotations

import os

# One BLAS thread unless the caller chose otherwise: on a small, shared machine OpenBLAS's
# busy-waiting threads make tall-skinny products (d x k by d x L) erratically slow -- seconds
# instead of milliseconds -- which would measure the machine's load, not the algorithm.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from dptensor._files import write_csv  # noqa: E402
from dptensor.datasets.moment_stream import make_orthogonal_moment_stream  # noqa: E402
from dptensor.decomposition.online import OnlineTensorPower  # noqa: E402

RANK, RESTARTS = 10, 47  # L = default_n_restarts(10)
CASES = {
    # name: (d, stream options, rows per batch, batches)
    "dense d=1,000": (1000, dict(noise=0.1), 1000, 20),
    "dense d=10,000": (10_000, dict(noise=0.1), 250, 16),
    "sparse d=100,000": (100_000, dict(support=50, noise=0.1, noise_density=1e-3), 1000, 20),
}


def bare_products(batches: list, vectors: np.ndarray) -> None:
    images = np.zeros_like(vectors)
    values = np.zeros(vectors.shape[1])
    for batch in batches:
        proj = np.asarray(batch @ vectors)
        squared = proj * proj
        images += np.asarray(batch.T @ squared)
        values += np.einsum("ij,ij->j", squared, proj)


def prepared_model(batches: list, rows: int) -> OnlineTensorPower:
    """A model in the middle of component 6 of 10 (5 components to deflate), not timed."""
    # n = 5 batches per round, so rounds end (deflation + normalisation) four times per run.
    model = OnlineTensorPower(RANK, batch_size=5 * rows, n_restarts=RESTARTS, n_iter=100, random_state=0)
    model.partial_fit(batches[0][:1])
    dim = batches[0].shape[1]
    model._component = 5
    model._found_weights = np.linspace(1.0, 0.5, 5)
    model._found_factors = np.linalg.qr(np.random.default_rng(0).standard_normal((dim, 5)))[0]
    model._clear_accumulators()
    model.n_samples_seen_ = 0
    return model


def online(batches: list, model: OnlineTensorPower) -> None:
    for batch in batches:
        model.partial_fit(batch)


def best_time(function, *args, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        function(*args)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs", help="folder for online_throughput.csv (default docs)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows_out = []
    for name, (dim, options, rows, count) in CASES.items():
        stream = make_orthogonal_moment_stream(dim, RANK, random_state=0, **options)
        batches = list(stream.batches(rows, count))
        vectors = np.linalg.qr(np.random.default_rng(1).standard_normal((dim, RESTARTS)))[0]
        points = rows * count
        bare, ours = np.inf, np.inf
        for _ in range(args.repeats):  # alternate so that machine load hits both alike
            bare = min(bare, best_time(bare_products, batches, vectors, repeats=1))
            ours = min(ours, best_time(online, batches, prepared_model(batches, rows), repeats=1))
        row = {
            "case": name,
            "d": dim,
            "L": RESTARTS,
            "rows_per_batch": rows,
            "points": points,
            "numpy_seconds": round(bare, 4),
            "online_seconds": round(ours, 4),
            "numpy_samples_per_s_per_restart": round(points * RESTARTS / bare),
            "online_samples_per_s_per_restart": round(points * RESTARTS / ours),
            "ratio_online_over_numpy": round(ours / bare, 3),
            "cpu_count": os.cpu_count(),
            "load_average_1min": round(os.getloadavg()[0], 2),
        }
        rows_out.append(row)
        print(
            f"{name:>17}: numpy {row['numpy_samples_per_s_per_restart']:>10,} samples/s/restart, "
            f"online {row['online_samples_per_s_per_restart']:>10,}; "
            f"time ratio {row['ratio_online_over_numpy']}"
        )
    print(f"wrote {write_csv(Path(args.out) / 'online_throughput.csv', rows_out)}")


if __name__ == "__main__":
    main()
