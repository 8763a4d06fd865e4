"""Benchmark: top-N recommendations from dptensor's completion, private and not, against popularity.

MovieLens-100K as a user x item matrix (943 x 1682), a random 20% of each user's ratings held out
(seeded). A held-out item is *relevant* when its rating is at least 4. Each model recommends 10
items per user among those the user has not rated in training (``TensorCompletion.recommend`` with
``exclude`` = the training entries), and is scored by precision@10, recall@10 and NDCG@10 over the
users with at least one relevant held-out item -- the usual top-N protocol (Cremonesi, Koren &
Turrin 2010). Models:

* ``popularity`` -- the items with the most training ratings (non-private; a strong baseline on
  MovieLens, where most held-out ratings fall on popular items);
* ``random`` -- uniformly random unrated items (seeded);
* ``biases`` -- the non-private mean and biases (``TensorCompletion(None)``);
* ``cp`` -- non-private rank-10 CP completion (``reg="auto"``);
* ``dp-als user eps=E`` -- user-level DP-ALS, rank 10, ``value_range=(1, 5)``, delta 1e-6 (joint DP:
  each user's list is for that user alone; the evaluation, an aggregate, is the evaluator's);
* ``dp biases user eps=E`` -- the private mean and biases alone.

The file is read from a local path (``--inter``; RecBole's ``ml-100k.inter``, inside the ``recbole``
wheel: ``pip download --no-deps recbole==1.2.1``); nothing is downloaded here.

Usage::

    python benchmarks/bench_recommend.py --inter ml-100k.inter [--repeats 3] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from dptensor.datasets.entries import TensorEntries, read_recbole_inter
from dptensor.models.completion import TensorCompletion

N = 10
RELEVANT = 4.0


def split(path: Path, seed: int) -> tuple[TensorEntries, TensorEntries]:
    """User x item matrix (days collapsed), 20% of each user's ratings held out at random."""
    full = read_recbole_inter(path)
    indices = full.indices.copy()
    indices[:, 2] = 0
    rng = np.random.default_rng(seed)
    held = rng.random(len(indices)) < 0.2
    shape = (full.shape[0], full.shape[1], 1)
    return (TensorEntries(indices[~held], full.values[~held], shape),
            TensorEntries(indices[held], full.values[held], shape))


def scores(items: np.ndarray, test: TensorEntries) -> dict[str, float]:
    """precision@N, recall@N, NDCG@N over users with a relevant held-out item."""
    relevant: dict[int, set[int]] = {}
    for (user, item, _), value in zip(test.indices.tolist(), test.values.tolist(), strict=True):
        if value >= RELEVANT:
            relevant.setdefault(user, set()).add(item)
    discounts = 1.0 / np.log2(np.arange(2, N + 2))
    precision, recall, ndcg = [], [], []
    for user, wanted in relevant.items():
        hits = np.array([item in wanted for item in items[user]], dtype=float)
        precision.append(hits.sum() / N)
        recall.append(hits.sum() / len(wanted))
        ideal = discounts[: min(len(wanted), N)].sum()
        ndcg.append(float(hits @ discounts) / ideal)
    return {"precision@10": float(np.mean(precision)), "recall@10": float(np.mean(recall)),
            "ndcg@10": float(np.mean(ndcg)), "users": len(relevant)}


def ranked_by(order: np.ndarray, train: TensorEntries) -> np.ndarray:
    """Each user's first N items of one global ``order`` among those they have not rated."""
    rated = np.zeros(train.shape[:2], dtype=bool)
    rated[train.indices[:, 0], train.indices[:, 1]] = True
    return np.array([[j for j in order if not rated[user, j]][:N] for user in range(train.shape[0])])


def run(path: Path, repeats: int, epsilons: list[float]) -> list[dict]:
    rows = []
    for seed in range(repeats):
        train, test = split(path, seed)
        counts = np.bincount(train.indices[:, 1], minlength=train.shape[1])
        rng = np.random.default_rng(100 + seed)
        lists = {"popularity": ranked_by(np.argsort(-counts, kind="stable"), train),
                 "random": ranked_by(rng.permutation(train.shape[1]), train)}
        seconds = {"popularity": 0.0, "random": 0.0}
        models = {"biases": TensorCompletion(None, value_range=(1, 5), random_state=seed, verbose=False),
                  "cp": TensorCompletion(10, value_range=(1, 5), random_state=seed, verbose=False)}
        for eps in epsilons:
            private = {"privacy": "als", "neighbouring": "user", "epsilon": eps, "delta": 1e-6,
                       "value_range": (1, 5), "random_state": seed, "verbose": False}
            models[f"dp biases user eps={eps:g}"] = TensorCompletion(None, **private)
            models[f"dp-als user eps={eps:g}"] = TensorCompletion(10, **private)
        for name, model in models.items():
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(train.indices, train.values, train.shape)
            fitted = time.perf_counter()
            lists[name] = model.recommend(N, exclude=train.indices).items
            seconds[name] = time.perf_counter() - fitted
            print(f"seed {seed} {name}: fit {fitted - start:.1f} s, recommend {seconds[name]:.2f} s",
                  flush=True)
        for name, items in lists.items():
            rows.append({"model": name, "seed": seed, "recommend_seconds": seconds[name],
                         **scores(items, test)})
    return rows


def summary(rows: list[dict]) -> str:
    names = list(dict.fromkeys(row["model"] for row in rows))
    popular = np.mean([r["ndcg@10"] for r in rows if r["model"] == "popularity"])
    lines = ["| model | precision@10 | recall@10 | NDCG@10 | NDCG / popularity's |",
             "|---|---:|---:|---:|---:|"]
    for name in names:
        mine = [r for r in rows if r["model"] == name]
        p, r, n = (np.mean([row[key] for row in mine]) for key in ("precision@10", "recall@10", "ndcg@10"))
        lines.append(f"| {name} | {p:.4f} | {r:.4f} | {n:.4f} | {n / popular:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inter", type=Path, required=True, help="RecBole's ml-100k.inter")
    parser.add_argument("--repeats", type=int, default=3, help="random splits (default 3)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--out", type=Path, help="write the rows and the table as JSON")
    args = parser.parse_args()
    rows = run(args.inter, args.repeats, args.epsilons)
    table = summary(rows)
    print(table)
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "table": table}, indent=1))


if __name__ == "__main__":
    main()
