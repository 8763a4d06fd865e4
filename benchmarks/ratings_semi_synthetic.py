"""Semi-synthetic ratings shaped like MovieLens-100K: fit the generator, draw users, compare.

Fits :class:`dptensor.datasets.RatingsModel` (rank 10 by default, ``reg="auto"``, 5-fold
cross-fitted residuals) on MovieLens-100K's ``ml-100k.inter`` (user x item x day), draws 10^4 new
users in chunks and prints how the draw matches the real set: ratings per user (quantiles, the
two-sample KS statistic), item popularity (rank and linear correlation, overlap of the top 100),
the rating histogram (total variation), the day marginal and days per user, and the time and
memory the draw took.

MovieLens-100K is not part of dptensor and this script never downloads it. It is read from, in
order: ``--inter PATH``; the ``recbole`` package if it is installed
(``recbole/dataset_example/ml-100k/ml-100k.inter``); the cache that ``bench_completion.py`` fills
(``~/.cache/dptensor/ml-100k.inter``, or a ``recbole-*.whl`` there). Without any of them it says
so and exits with status 2.

Usage::

    python benchmarks/ratings_semi_synthetic.py [--users 10000] [--chunk 5000] [--rank 10] [--inter PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
from scipy import stats

from dptensor.datasets import RatingsModel, read_recbole_inter

INTER = "dataset_example/ml-100k/ml-100k.inter"


def find_movielens(inter: str | None, cache: Path) -> Path | None:
    """``ml-100k.inter`` from ``--inter``, an installed ``recbole``, or the benchmark cache (no download)."""
    if inter is not None:
        return Path(inter)
    spec = importlib.util.find_spec("recbole")
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            candidate = Path(root) / INTER
            if candidate.exists():
                return candidate
    cached = cache / "ml-100k.inter"
    if cached.exists():
        return cached
    for wheel in sorted(cache.glob("recbole-*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            if f"recbole/{INTER}" in archive.namelist():
                cached.write_bytes(archive.read(f"recbole/{INTER}"))
                return cached
    return None


def total_variation(a: np.ndarray, b: np.ndarray, support: np.ndarray) -> float:
    pa = np.array([np.mean(a == v) for v in support])
    pb = np.array([np.mean(b == v) for v in support])
    return 0.5 * float(np.abs(pa - pb).sum())


def days_per_user(users: np.ndarray, days: np.ndarray) -> np.ndarray:
    pairs = np.unique(users.astype(np.int64) * (int(days.max()) + 1) + days)
    return np.bincount(pairs // (int(days.max()) + 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000, help="users to draw (default 10000)")
    parser.add_argument("--chunk", type=int, default=5000, help="users per chunk (default 5000)")
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inter", default=None, help="path of ml-100k.inter (RecBole format)")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "dptensor"))
    args = parser.parse_args()
    path = find_movielens(args.inter, Path(args.cache))
    if path is None:
        print(
            "MovieLens-100K not found. This benchmark does not download it (its licence forbids "
            "redistribution, and dptensor does not ship it). Give --inter PATH to an ml-100k.inter "
            "file, install the recbole wheel (it ships recbole/" + INTER + "), or run "
            "benchmarks/bench_completion.py once (it downloads the recbole wheel) to cache it under --cache.",
            file=sys.stderr,
        )
        return 2
    real = read_recbole_inter(path)
    users, items, days = real.indices.T
    print(f"MovieLens-100K from {path}: {real.shape[0]} users x {real.shape[1]} items x "
          f"{real.shape[2]} days, {len(real)} ratings")

    start = time.perf_counter()
    model = RatingsModel(args.rank, random_state=args.seed).fit(real)
    fit_seconds = time.perf_counter() - start
    print(f"fit: rank {args.rank}, reg {model.completion_.reg_:.3g}, {fit_seconds:.1f} s; "
          f"cross-fitted residual std {model.residuals_.std():.3f}; count strata edges "
          f"{model.count_edges_.tolist()}")

    start = time.perf_counter()
    tracemalloc.start()
    chunks = list(model.iter_samples(args.users, chunk_size=args.chunk))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    draw_seconds = time.perf_counter() - start
    g_users = np.concatenate([c.indices[:, 0] for c in chunks])
    g_items = np.concatenate([c.indices[:, 1] for c in chunks])
    g_days = np.concatenate([c.indices[:, 2] for c in chunks])
    g_values = np.concatenate([c.values for c in chunks])
    print(f"draw: {args.users} users, {g_values.size} ratings in {len(chunks)} chunks, "
          f"{draw_seconds:.2f} s, peak traced memory {peak / 2**20:.1f} MiB (all chunks kept)")

    real_counts = np.bincount(users)
    real_counts = real_counts[real_counts > 0]
    gen_counts = np.bincount(g_users, minlength=args.users)
    quantiles = [0.1, 0.5, 0.9, 0.99, 1.0]
    print("\nratings per user     " + "  ".join(f"q{q:g}" for q in quantiles) + "   mean")
    for name, counts in (("real", real_counts), ("generated", gen_counts)):
        print(f"  {name:<18} " + "  ".join(f"{np.quantile(counts, q):>4.0f}" for q in quantiles)
              + f"  {counts.mean():6.1f}")
    print(f"  KS statistic {stats.ks_2samp(gen_counts, real_counts).statistic:.4f}")

    real_pop = np.bincount(items, minlength=real.shape[1])
    gen_pop = np.bincount(g_items, minlength=real.shape[1])
    top = 100
    overlap = np.intersect1d(np.argsort(-real_pop)[:top], np.argsort(-gen_pop)[:top]).size
    print(f"\nitem popularity: Spearman {stats.spearmanr(real_pop, gen_pop).statistic:.4f}, "
          f"Pearson {np.corrcoef(real_pop, gen_pop)[0, 1]:.4f}, top-{top} overlap {overlap}/{top}")

    levels = model.levels_ if model.levels_ is not None else np.unique(real.values)
    print("\nrating histogram   " + "  ".join(f"{v:>5g}" for v in levels))
    for name, values in (("real", real.values), ("generated", g_values)):
        print(f"  {name:<16} " + "  ".join(f"{np.mean(values == v):5.3f}" for v in levels))
    print(f"  total variation {total_variation(g_values, real.values, levels):.4f}; mean (real / "
          f"generated) {real.values.mean():.3f} / {g_values.mean():.3f}, std {real.values.std():.3f} / "
          f"{g_values.std():.3f}")

    support = np.arange(real.shape[2])
    real_dpu, gen_dpu = days_per_user(users, days), days_per_user(g_users, g_days)
    print(f"\ndays: marginal total variation {total_variation(g_days, days, support):.4f}; distinct "
          f"days per user, mean (real / generated) {real_dpu[real_dpu > 0].mean():.2f} / "
          f"{gen_dpu[gen_dpu > 0].mean():.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
