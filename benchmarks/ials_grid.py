"""Benchmark: dptensor's implicit ALS against ``implicit``'s CPU ALS on MovieLens-100K (NDCG@10 and fit time).

Protocol (the top-N protocol of issue 51): the RecBole file ``ml-100k.inter`` as a binary user x item
matrix; for each user a random 20% of their ratings (rounded) is held out, seeded per split; a
held-out item is *relevant* when its rating is at least 4. Each model scores every item for every
user (``U V^T``), the user's training items are excluded, and the 10 best are scored by NDCG@10
over the users with at least one relevant held-out item, averaged over the splits.

* ``grid``: both libraries over factors {32, 64, 128} x regularization {0.01, 0.1, 1, 10} x alpha
  {1, 5, 10, 40}, 15 iterations, three splits; the table lists the best of each and its settings.
  (``implicit``'s confidence on an interaction is ``alpha``, dptensor's ``1 + alpha``: each gets its
  best of the same grid.)
* ``--exponents``: dptensor's frequency-scaled ridge ``lambda (sum_i c_ui)^nu`` (Rendle et al.
  2021) at the best factors and alpha of the plain grid, over a wider ridge grid for each ``nu``.
* ``--refine``: both libraries at equal *confidences* on an interaction ``c`` in {1, 2, 3}
  (dptensor's ``alpha = c - 1``, ``implicit``'s ``alpha = c``), factors {32, 64} and
  regularization {5, 10, 20, 30}: around the best of the grid, finer than it.
* ``timing``: one fit of each library at 64 factors, 15 iterations, the same regularization and
  alpha, on 1 and on every core, repeated (interleaved) and the fastest kept; the ratio is
  dptensor's time over ``implicit``'s.

``implicit`` is imported here only (it is not a dependency of dptensor). Nothing is downloaded.

Usage::

    python benchmarks/ials_grid.py PATH/ml-100k.inter [--quick] [--exponents 0.5 1] [--out results.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from dptensor.models.recommend.ials import implicit_als

N = 10
RELEVANT = 4.0
SEEDS = (0, 1, 2)
FACTORS = (32, 64, 128)
REGULARIZATIONS = (0.01, 0.1, 1.0, 10.0)
ALPHAS = (1.0, 5.0, 10.0, 40.0)
ITERATIONS = 15


def read(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Users, items (both 0-based, in order of first id) and ratings of a RecBole ``.inter`` file."""
    data = np.loadtxt(path, skiprows=1, usecols=(0, 1, 2))
    users = np.unique(data[:, 0], return_inverse=True)[1]
    items = np.unique(data[:, 1], return_inverse=True)[1]
    return users.astype(np.int64), items.astype(np.int64), data[:, 2]


def split(users: np.ndarray, items: np.ndarray, ratings: np.ndarray, seed: int) -> tuple[sp.csr_array, list]:
    """Training matrix and each user's relevant held-out items (a random 20% of every user's ratings)."""
    rng = np.random.default_rng(seed)
    held = np.zeros(users.size, dtype=bool)
    order = np.argsort(users, kind="stable")
    bounds = np.flatnonzero(np.diff(np.concatenate([[-1], users[order], [users.max() + 1]])))
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        mine = order[lo:hi]
        held[rng.permutation(mine)[: int(round(0.2 * mine.size))]] = True
    shape = (int(users.max()) + 1, int(items.max()) + 1)
    train = sp.csr_array((np.ones(int((~held).sum())), (users[~held], items[~held])), shape=shape)
    relevant = [[] for _ in range(shape[0])]
    wanted = held & (ratings >= RELEVANT)
    for user, item in zip(users[wanted], items[wanted], strict=True):
        relevant[user].append(int(item))
    return train, relevant


def ndcg(user_factors: np.ndarray, item_factors: np.ndarray, train: sp.csr_array, relevant: list) -> float:
    """Mean NDCG@10 over users with a relevant held-out item, training items excluded."""
    scores = np.asarray(user_factors, dtype=np.float64) @ np.asarray(item_factors, dtype=np.float64).T
    scores[train.nonzero()] = -np.inf
    top = np.argpartition(-scores, N, axis=1)[:, :N]
    top = np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1), axis=1)
    discounts = 1.0 / np.log2(np.arange(2, N + 2))
    values = []
    for user, wanted in enumerate(relevant):
        if wanted:
            hits = np.isin(top[user], wanted).astype(float)
            values.append(float(hits @ discounts) / discounts[: min(len(wanted), N)].sum())
    return float(np.mean(values))


def fit_dptensor(train: sp.csr_array, factors: int, reg: float, alpha: float, seed: int, jobs: int = 1,
                 exponent: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    model = implicit_als(train, factors, regularization=reg, alpha=alpha, iterations=ITERATIONS,
                         regularization_exponent=exponent, random_state=seed, n_jobs=jobs)
    return model.user_factors, model.item_factors


def fit_implicit(train: sp.csr_array, factors: int, reg: float, alpha: float, seed: int,
                 jobs: int = 1) -> tuple[np.ndarray, np.ndarray]:
    from implicit.cpu.als import AlternatingLeastSquares

    with threadpool_limits(1, "blas"):  # implicit asks for this (its threads are the parallelism)
        model = AlternatingLeastSquares(factors=factors, regularization=reg, alpha=alpha,
                                        iterations=ITERATIONS, random_state=seed, num_threads=jobs)
        model.fit(sp.csr_matrix(train), show_progress=False)
    return model.user_factors, model.item_factors


FITS = {"dptensor": fit_dptensor, "implicit": fit_implicit}


def grid(splits: list, settings: list, library: str, exponent: float = 0.0) -> list[dict]:
    rows = []
    for factors, reg, alpha in settings:
        values = []
        for seed, (train, relevant) in zip(SEEDS, splits, strict=True):
            extra = {"exponent": exponent} if exponent else {}
            values.append(ndcg(*FITS[library](train, factors, reg, alpha, seed, **extra), train, relevant))
        rows.append({"library": library, "factors": factors, "regularization": reg, "alpha": alpha,
                     "exponent": exponent, "ndcg@10": float(np.mean(values)), "per_split": values})
        print(f"{library} k={factors} reg={reg:g} alpha={alpha:g} nu={exponent:g}: "
              f"NDCG@10 {rows[-1]['ndcg@10']:.4f}", flush=True)
    return rows


def timing(train: sp.csr_array, reg: float, alpha: float, repeats: int) -> list[dict]:
    rows = []
    for jobs in sorted({1, os.cpu_count() or 1}):
        seconds: dict[str, list[float]] = {"dptensor": [], "implicit": []}
        for _ in range(repeats):
            for library, fit in FITS.items():
                start = time.perf_counter()
                fit(train, 64, reg, alpha, 0, jobs)
                seconds[library].append(time.perf_counter() - start)
        best = {library: min(values) for library, values in seconds.items()}
        rows.append({"threads": jobs, **{f"{lib}_seconds": s for lib, s in best.items()},
                     "ratio": best["dptensor"] / best["implicit"]})
        print(f"timing {jobs} thread(s): dptensor {best['dptensor']:.3f} s, "
              f"implicit {best['implicit']:.3f} s, "
              f"ratio {rows[-1]['ratio']:.2f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", type=Path, help="RecBole's ml-100k.inter")
    parser.add_argument("--quick", action="store_true", help="only factors 64 (a smoke run)")
    parser.add_argument("--exponents", type=float, nargs="*", default=[],
                        help="frequency-scaled ridge exponents nu to try for dptensor")
    parser.add_argument("--repeats", type=int, default=5, help="timing repeats (default 5)")
    parser.add_argument("--refine", action="store_true", help="the finer grid at equal confidences")
    parser.add_argument("--skip-grid", action="store_true", help="timing only")
    parser.add_argument("--out", type=Path, help="write every row as JSON")
    args = parser.parse_args()
    users, items, ratings = read(args.path)
    splits = [split(users, items, ratings, seed) for seed in SEEDS]
    factors = (64,) if args.quick else FACTORS
    settings = list(itertools.product(factors, REGULARIZATIONS, ALPHAS))
    rows: list[dict] = []
    best: dict[str, dict] = {}
    if not args.skip_grid:
        for library in FITS:
            found = grid(splits, settings, library)
            rows += found
            best[library] = max(found, key=lambda row: row["ndcg@10"])
        for exponent in args.exponents:
            k, alpha = best["dptensor"]["factors"], best["dptensor"]["alpha"]
            plain = best["dptensor"]["regularization"]
            ridges = [plain * 10.0 ** (-3.0 * exponent + s) for s in (-1.5, -1.0, -0.5, 0.0, 0.5, 1.0)]
            found = grid(splits, [(k, reg, alpha) for reg in ridges], "dptensor", exponent)
            rows += found
            best[f"dptensor nu={exponent:g}"] = max(found, key=lambda row: row["ndcg@10"])
    if args.refine:
        for library, shift in (("dptensor", 1.0), ("implicit", 0.0)):
            near = [(k, reg, c - shift) for k, reg, c in itertools.product((32, 64), (5.0, 10.0, 20.0, 30.0),
                                                                          (1.0, 2.0, 3.0))]
            found = grid(splits, near, library)
            rows += found
            best[f"{library} refined"] = max(found, key=lambda row: row["ndcg@10"])
    times = timing(splits[0][0], 0.1, 10.0, args.repeats)
    print("| model | factors | regularization | alpha | nu | NDCG@10 (3 splits) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, row in best.items():
        print(f"| {name} | {row['factors']} | {row['regularization']:g} | {row['alpha']:g} | "
              f"{row['exponent']:g} | {row['ndcg@10']:.4f} |")
    print("| threads | dptensor s | implicit s | ratio |")
    print("|---:|---:|---:|---:|")
    for row in times:
        print(f"| {row['threads']} | {row['dptensor_seconds']:.3f} | {row['implicit_seconds']:.3f} | "
              f"{row['ratio']:.2f} |")
    if args.out:
        args.out.write_text(json.dumps({"grid": rows, "best": best, "timing": times}, indent=1))


if __name__ == "__main__":
    main()
