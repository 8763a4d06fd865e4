"""Benchmark: top-N recommendation from implicit feedback on MovieLens-100K, private and not (issue 51).

Protocol (:func:`dptensor.evaluation.topn.per_user_split`): MovieLens-100K as a user x item matrix
(943 x 1682, RecBole's ``ml-100k.inter``); for each seed ``0 .. --repeats - 1`` a random 20% of each
user's ratings is held out. The training matrix is every training pair, binarised (any rating is an
interaction); a held-out pair is *relevant* when its rating is at least 4
(:func:`~dptensor.evaluation.topn.relevant_from_ratings`). Every model scores every item for every
training user from that user's row, the user's training items are excluded, the best 100 are listed
(:func:`dptensor.models.recommend.ranking.top_n`: ties to the smaller item id) and
:func:`~dptensor.evaluation.topn.evaluate_top_n` gives NDCG@10 (the main metric), Recall@20
(normalised by ``min(20, |relevant|)``), NDCG@100, precision@10 and coverage@10 over the users with a
relevant held-out item. Numbers are means over the seeds. Models, all in this run, scored alike:

* ``popularity``: training item counts; ``private popularity``: ``PrivateRecommender(method=
  "popularity")`` at ``(1, 1e-6)`` (unit rows, Gaussian noise, secure), ``--draws`` fits per split
  (the mean, the standard deviation and the worst over the draws are reported);
* ``PrivateRecommender eps=1`` with its defaults (``method="auto"``: the planner's choice) and
  ``PrivateRecommender(method="ease")`` (what a private EASE gives at 943 users);
* ``EASE lambda=L``: Steck (WWW 2019) over a grid of ``L`` (``Recommender(method="ease")`` with
  ``options.ridge = L``);
* ``implicit ALS``: ``implicit.als.AlternatingLeastSquares`` (Hu, Koren & Volinsky 2008; CPU, 15
  iterations) over a grid of factors, regularization and alpha (``pip install implicit``; imported
  only here);
* ``dptensor Recommender``: the defaults (``method="auto"``: EASE with the ridge rule
  ``8 * mean(diag X^T X)``) and ``method="ials"`` with its defaults; ``--rule-check`` also sets the
  rule against the ridge grid on two other data sets (only ratings >= 4 as interactions, and a
  random half of the users).

Fit times: the default ``Recommender`` against ``implicit``'s best setting of the grid, each fitted
``--timing-repeats`` times interleaved on the first split, the fastest kept, both with every core
(``--threads``); the ratio is dptensor's time over ``implicit``'s. Nothing is downloaded: the file
is a local path (``pip download --no-deps recbole==1.2.1``; the file is inside the wheel).

Usage::

    python benchmarks/bench_topn.py --inter ml-100k.inter [--repeats 3] [--draws 10] \\
        [--rule-check] [--out benchmarks/results/topn_ml100k.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from dptensor.datasets.interactions import read_interactions
from dptensor.evaluation.topn import evaluate_top_n, per_user_split, relevant_from_ratings
from dptensor.models.recommend import PrivateRecommender, Recommender, RecommenderOptions
from dptensor.models.recommend.ranking import top_n

EPSILON, DELTA = 1.0, 1e-6
LIST_LENGTH = 100
KS = (10, 20, 100)
KEEP = ("ndcg@10", "recall@20", "ndcg@100", "precision@10", "coverage@10")
EASE_RIDGES = (50.0, 100.0, 200.0, 300.0, 500.0, 700.0, 1000.0, 2000.0)
ALS_GRID = {"factors": (32, 64, 128), "regularization": (0.1, 1.0, 10.0, 20.0), "alpha": (1.0, 5.0, 10.0)}

ScoreRows = Callable[[sp.csr_array], np.ndarray]


class Split:
    """One seeded split: the binary training rows and the relevant held-out pairs.

    ``threshold``: only training ratings of at least that value are interactions.
    """

    def __init__(self, ratings: sp.csr_array, seed: int, threshold: float | None = None) -> None:
        train, test = per_user_split(ratings, 0.2, random_state=seed)
        if threshold is not None:
            train = sp.csr_array(train.multiply(train >= threshold))
            train.eliminate_zeros()
        self.seed = seed
        self.X = sp.csr_array((np.ones_like(train.data), train.indices, train.indptr), shape=train.shape)
        self.relevant = relevant_from_ratings(test, 4)

    def evaluate(self, score_rows: ScoreRows) -> dict[str, float]:
        return self.evaluate_lists(top_n(score_rows, self.X, LIST_LENGTH).items)

    def evaluate_lists(self, lists: np.ndarray) -> dict[str, float]:
        result = evaluate_top_n(lists, self.relevant, KS)
        return {key: float(result[key]) for key in KEEP}


def _row(name: str, runs: list[dict[str, float]], times: list[float] | None = None, **extra: object) -> dict:
    out: dict = {"model": name, **{key: float(np.mean([run[key] for run in runs])) for key in KEEP},
                 "ndcg@10 per run": [run["ndcg@10"] for run in runs]}
    if times:
        out["fit_s"] = float(np.mean(times))
    out.update(extra)
    return out


def _fitted(make: Callable[[int], object], split: Split) -> tuple[object, float]:
    model = make(split.seed)
    start = time.perf_counter()
    model.fit(split.X)
    return model, time.perf_counter() - start


def estimator_row(name: str, make: Callable[[int], object], splits: list[Split], draws: int = 1) -> dict:
    runs, times, methods = [], [], set()
    for split in splits:
        for _ in range(draws):
            model, seconds = _fitted(make, split)
            times.append(seconds)
            methods.add(str(model.method_))
            runs.append(split.evaluate(model.score_rows))
    ndcg = [run["ndcg@10"] for run in runs]
    extra = {"method": sorted(methods)}
    if draws > 1:
        extra |= {"draws per split": draws, "ndcg@10 sd": float(np.std(ndcg, ddof=1)),
                  "ndcg@10 worst": float(np.min(ndcg))}
    return _row(name, runs, times, **extra)


def implicit_model(factors: int, regularization: float, alpha: float, seed: int, threads: int) -> object:
    from implicit.als import AlternatingLeastSquares

    return AlternatingLeastSquares(factors=factors, regularization=regularization, alpha=alpha,
                                   iterations=15, random_state=seed, num_threads=threads, use_gpu=False)


def als_rows(splits: list[Split], threads: int) -> list[dict]:
    try:
        import implicit  # noqa: F401
    except ImportError:
        print("implicit is not installed (pip install implicit): its ALS rows are skipped", file=sys.stderr)
        return []
    rows = []
    for factors, regularization, alpha in itertools.product(*ALS_GRID.values()):
        runs, times = [], []
        for split in splits:
            model = implicit_model(factors, regularization, alpha, split.seed, threads)
            with threadpool_limits(1, "blas"):  # implicit's advice: its own threads, BLAS on one
                start = time.perf_counter()
                model.fit(sp.csr_matrix(split.X), show_progress=False)
                times.append(time.perf_counter() - start)
            runs.append(split.evaluate_lists(_implicit_lists(model, split.X)))
        rows.append(_row(f"implicit ALS k={factors} reg={regularization:g} alpha={alpha:g}", runs, times,
                         factors=factors, regularization=regularization, alpha=alpha))
        print(f"{rows[-1]['model']}: NDCG@10 {rows[-1]['ndcg@10']:.4f}", file=sys.stderr, flush=True)
    return rows


def _implicit_lists(model: object, X: sp.csr_array) -> np.ndarray:
    """``implicit``'s own lists: every user's 100 best items outside their training row."""
    ids, _ = model.recommend(np.arange(X.shape[0]), sp.csr_matrix(X), N=LIST_LENGTH,
                             filter_already_liked_items=True)
    return np.asarray(ids, dtype=np.int64)


def timing(split: Split, best_als: dict | None, threads: int, repeats: int) -> dict:
    """The fastest of ``repeats`` interleaved fits: the default Recommender and implicit's best."""
    ours, theirs = [], []
    for _ in range(repeats):
        ours.append(_fitted(lambda seed: Recommender(random_state=seed), split)[1])
        if best_als is not None:
            model = implicit_model(best_als["factors"], best_als["regularization"], best_als["alpha"],
                                   split.seed, threads)
            with threadpool_limits(1, "blas"):
                start = time.perf_counter()
                model.fit(sp.csr_matrix(split.X), show_progress=False)
                theirs.append(time.perf_counter() - start)
    out = {"dptensor Recommender s": min(ours), "threads": threads, "repeats": repeats}
    if theirs:
        out |= {"implicit ALS s": min(theirs), "ratio": min(ours) / min(theirs),
                "implicit setting": best_als["model"]}
    return out


def ease_grid(splits: list[Split]) -> list[dict]:
    return [estimator_row(f"EASE lambda={ridge:g}", lambda seed, r=ridge: Recommender(
        method="ease", options=RecommenderOptions(ridge=r)), splits) for ridge in EASE_RIDGES]


def rule_check(ratings: sp.csr_array, repeats: int) -> dict:
    """The default ridge rule against the best fixed ridge on two other data sets."""
    half = np.sort(np.random.default_rng(7).choice(ratings.shape[0], ratings.shape[0] // 2, replace=False))
    checks = {}
    for label, data, threshold in (("ratings >= 4 as interactions", ratings, 4.0),
                                   ("a random half of the users", sp.csr_array(ratings[half]), None)):
        splits = [Split(data, seed, threshold) for seed in range(repeats)]
        rows = [estimator_row("popularity", lambda seed: Recommender(method="popularity"), splits),
                estimator_row("dptensor Recommender (defaults)", lambda seed: Recommender(), splits),
                *ease_grid(splits)]
        print(f"\nrule check: {label}\n" + table(rows))
        checks[label] = rows
    return checks


def best(rows: list[dict], prefix: str) -> dict | None:
    chosen = [r for r in rows if r["model"].startswith(prefix)]
    return max(chosen, key=lambda r: r["ndcg@10"]) if chosen else None


def table(rows: list[dict]) -> str:
    popularity = next(r for r in rows if r["model"] == "popularity")
    peers = [b for b in (best(rows, "EASE lambda="), best(rows, "implicit ALS")) if b is not None]
    peer = max(peers, key=lambda r: r["ndcg@10"])
    lines = ["| model | NDCG@10 | Recall@20 | NDCG@100 | P@10 | coverage@10 | fit s | x popularity "
             "| x best peer |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fit = f"{r['fit_s']:.3f}" if "fit_s" in r else ""
        lines.append(
            f"| {r['model']} | {r['ndcg@10']:.4f} | {r['recall@20']:.4f} | {r['ndcg@100']:.4f} | "
            f"{r['precision@10']:.4f} | {r['coverage@10']:.3f} | {fit} | "
            f"{r['ndcg@10'] / popularity['ndcg@10']:.3f} | {r['ndcg@10'] / peer['ndcg@10']:.3f} |")
    lines.append(f"\nbest peer: {peer['model']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inter", type=Path, required=True, help="RecBole ml-100k.inter")
    parser.add_argument("--repeats", type=int, default=3, help="random splits")
    parser.add_argument("--draws", type=int, default=10, help="private popularity fits per split")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timing-repeats", type=int, default=5)
    parser.add_argument("--no-als", action="store_true", help="leave implicit's grid out")
    parser.add_argument("--rule-check", action="store_true",
                        help="also the EASE ridge rule against the grid on ratings >= 4 and half the users")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    ratings = sp.csr_array(read_interactions(args.inter, format="recbole").values)
    splits = [Split(ratings, seed) for seed in range(args.repeats)]
    print(f"{ratings.shape[0]} users x {ratings.shape[1]} items, {ratings.nnz} ratings, "
          f"{args.repeats} splits", file=sys.stderr)
    private = {"epsilon": EPSILON, "delta": DELTA}
    rows = [
        estimator_row("popularity", lambda seed: Recommender(method="popularity"), splits),
        estimator_row(f"private popularity eps={EPSILON:g}",
                      lambda seed: PrivateRecommender(method="popularity", **private), splits, args.draws),
        estimator_row(f"dptensor PrivateRecommender eps={EPSILON:g} (defaults)",
                      lambda seed: PrivateRecommender(**private), splits),
        estimator_row(f"dptensor PrivateRecommender eps={EPSILON:g} method=ease",
                      lambda seed: PrivateRecommender(method="ease", **private), splits),
        estimator_row(f"dptensor PrivateRecommender eps={EPSILON:g} method=ials",
                      lambda seed: PrivateRecommender(method="ials", random_state=seed, **private), splits),
        estimator_row("dptensor Recommender (defaults)", lambda seed: Recommender(random_state=seed), splits),
        estimator_row("dptensor Recommender method=ials",
                      lambda seed: Recommender(method="ials", random_state=seed), splits),
    ]
    rows += ease_grid(splits)
    if not args.no_als:
        rows += als_rows(splits, args.threads)
    times = timing(splits[0], best(rows, "implicit ALS"), args.threads, args.timing_repeats)
    print(table(rows))
    summary = [r for r in rows if not r["model"].startswith(("EASE", "implicit"))]
    summary += [b for b in (best(rows, "EASE lambda="), best(rows, "implicit ALS")) if b is not None]
    print("\nsummary\n" + table(summary))
    print("\nfit time (fastest of interleaved fits, first split): " + json.dumps(times))
    checks = rule_check(ratings, args.repeats) if args.rule_check else None
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "protocol": "per-user 80/20, relevant = held-out rating >= 4, binary training, history excluded",
            "command": " ".join(["python", *sys.argv]), "machine": platform.platform(),
            "cores": os.cpu_count(), "shape": list(ratings.shape), "seeds": list(range(args.repeats)),
            "rows": rows, "timing": times, "rule_check": checks}, indent=1) + "\n")


if __name__ == "__main__":
    main()
