"""Issue 51's curve: Recall@20 of private top-N against the number of users, on semi-synthetic users.

Users are drawn from :class:`dptensor.datasets.ImplicitFeedbackModel` fitted on MovieLens-100K
(every rating an interaction; a low-rank choice model with the real row lengths, the real item
popularity and the real co-occurrence energy: see its module). For every number of training users
``n`` (default 10^3, 3 10^3, 10^4, 3 10^4, 10^5) the same ``--held-out`` users (default 5000, drawn
once from another stream) are folded in: each shows 80% of their items (``per_user_split``, 20%
held out), the models score every item from those 80% and the item side only, the shown items are
excluded, and Recall@20 (Liang et al. 2018's ``min(k, |target|)`` denominator) and NDCG@10 are
taken on the 20%. The methods, all on the same users:

* ``popularity``: item counts; ``private popularity``: counts of unit-norm rows
  (``w_u = 1 / sqrt(n_u)``) plus Gaussian noise (replace-one sensitivity ``sqrt(2)``);
* ``ease``: non-private EASE on ``X^T X`` with the library's default ridge
  (:func:`dptensor.models.recommend.ease.ease_ridge`), and ``ease best``: the best ridge of a grid
  (chosen on the test users: an optimistic reference);
* ``private ease``: the Gram of unit-norm rows plus symmetric Gaussian noise (Frobenius-isotropic:
  off-diagonal entries get ``sigma / sqrt(2)``, the diagonal ``sigma``; sensitivity ``sqrt(2)`` in
  Frobenius norm), then EASE with ridge ``ridge_scale * mean(diag) + ridge_noise * edge``,
  ``edge = sqrt(2) sigma sqrt(I)`` the noise's spectral edge (a public number). No popularity
  release: EASE's scores need none, so the whole budget goes to the Gram.

The noise comes from ``insecure_test_noise`` seeds (reproducible runs; a benchmark on synthetic
users). Training sets are nested: the generator's blocks for ``n`` users are the first blocks of a
larger draw, so one pass over ``max(n)`` users gives every point's statistics.

Usage::

    python benchmarks/bench_topn_curve.py --inter /work/data/ml-100k.inter
    python benchmarks/bench_topn_curve.py --inter /work/data/ml-100k.inter \\
        --users 1000 3000 10000 30000 100000 300000 --out benchmarks/results/topn_curve.json
    python benchmarks/bench_topn_curve.py --inter ml-100k.inter --users 1000 10000 100000 \\
        --epsilons 1 --repeats 1 --ials --out benchmarks/results/topn_curve_ials.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from dptensor.datasets import ImplicitFeedbackModel
from dptensor.evaluation.topn import evaluate_top_n, per_user_split
from dptensor.models.recommend import PrivateRecommender, Recommender
from dptensor.models.recommend.ease import ease_from_gram, ease_ridge
from dptensor.models.recommend.options import RecommenderOptions
from dptensor.models.recommend.private_estimator import private_ease_ridge
from dptensor.models.recommend.ranking import top_n
from dptensor.models.recommend.releases import add_symmetric_frobenius_noise
from dptensor.models.recommend.statistics import weighted_rows
from dptensor.privacy.calibration import gaussian_sigma_analytic
from dptensor.privacy.noise import insecure_test_noise, resolve_noise

SENSITIVITY = math.sqrt(2.0)
RIDGE_GRID = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


@dataclass
class Statistics:
    """The item sums of ``n_users`` training users (and their rows, while they are kept)."""

    n_users: int
    counts: np.ndarray
    unit_counts: np.ndarray
    gram: np.ndarray
    unit_gram: np.ndarray
    interactions: int
    rows: sp.csr_array | None = None


def statistics_stream(model: ImplicitFeedbackModel, sizes: list[int], seed: int, *, keep_rows: int = 0,
                      chunk: int = 1000):
    """Yield the statistics at each size of ``sizes`` from one pass over ``max(sizes)`` users (the
    rows too, up to ``keep_rows`` users, for the estimators that read them)."""
    n_items = model.n_items_
    counts, unit_counts = np.zeros(n_items), np.zeros(n_items)
    gram, unit_gram = np.zeros((n_items, n_items)), np.zeros((n_items, n_items))
    n_users = interactions = 0
    kept: list[sp.csr_array] = []
    wanted = sorted(sizes)
    for block in model.iter_samples(wanted[-1], chunk_size=chunk, random_state=seed):
        unit = weighted_rows(block, "unit")
        counts += np.asarray(block.sum(axis=0)).ravel()
        unit_counts += np.asarray(unit.sum(axis=0)).ravel()
        gram += (block.T @ block).toarray()
        unit_gram += (unit.T @ unit).toarray()
        n_users += block.shape[0]
        interactions += block.nnz
        if n_users <= keep_rows:
            kept.append(block)
        while wanted and n_users >= wanted[0]:
            wanted.pop(0)
            rows = sp.csr_array(sp.vstack(kept, format="csr")) if n_users <= keep_rows else None
            yield Statistics(n_users, counts.copy(), unit_counts.copy(), gram.copy(), unit_gram.copy(),
                             interactions, rows)


def score(given: sp.csr_array, target: sp.csr_array, score_rows) -> dict:
    """Recall@20, NDCG@10 and coverage@20 of the lists ``score_rows`` makes from the shown rows."""
    recs = top_n(score_rows, given, 20)
    metrics = evaluate_top_n(recs, target, (10, 20))
    return {"recall@20": metrics["recall@20"], "ndcg@10": metrics["ndcg@10"],
            "coverage@20": metrics["coverage@20"]}


def popularity_scores(counts: np.ndarray):
    return lambda rows: np.broadcast_to(counts, (rows.shape[0], counts.shape[0]))


def ease_scores(weights: np.ndarray):
    return lambda rows: np.asarray(rows @ weights)


def noise_sigma(epsilon: float, delta: float, share: float = 1.0) -> float:
    """The noise std of a release of sensitivity sqrt(2) given ``share`` of the budget's ``mu^2``
    (Gaussian DP: ``mu^2`` adds up over releases), as ``recommender_guarantee`` calibrates it."""
    return SENSITIVITY * gaussian_sigma_analytic(epsilon, delta) / math.sqrt(share)


def noise_edge(sigma: float, n_items: int) -> float:
    """The spectral norm of the Frobenius-convention noise, ``2 (sigma / sqrt(2)) sqrt(I)``."""
    return math.sqrt(2.0) * sigma * math.sqrt(n_items)


def clipped_ease(noisy: np.ndarray, sigma: float, ridge_noise: float = 1.0,
                 options: RecommenderOptions | None = None) -> np.ndarray:
    """EASE on the noisy Gram's eigen-part above the noise edge (the rest set to zero), ridge
    ``ridge_scale * mean(diag) + ridge_noise * edge`` (post-processing of the release)."""
    options = options or RecommenderOptions()
    edge = noise_edge(sigma, noisy.shape[0])
    values, vectors = np.linalg.eigh(noisy)
    kept = np.where(values > edge, values, 0.0)
    ridge = ease_ridge(np.diag(noisy), options.ridge_scale) + ridge_noise * edge
    return ease_from_gram((vectors * kept) @ vectors.T, ridge)


def default_ease(noisy: np.ndarray, sigma: float) -> np.ndarray:
    """EASE with PrivateRecommender's ridge rule (non-private rule on the noisy diagonal plus
    ``private_ridge_scale`` times the edge)."""
    options = RecommenderOptions()
    ridge = private_ease_ridge(np.diag(noisy), sigma, noisy.shape[0], options)
    while True:
        try:
            return ease_from_gram(noisy, ridge)
        except ValueError:
            ridge *= 1.5


def run_point(stats: Statistics, given, target, args) -> dict:
    """Every method at one number of users."""
    n_items = stats.counts.shape[0]
    out: dict = {"n_users": stats.n_users, "interactions": stats.interactions, "n_items": n_items,
                 "methods": {}}
    methods = out["methods"]
    t0 = time.perf_counter()
    methods["popularity"] = score(given, target, popularity_scores(stats.counts))
    ridge = ease_ridge(np.diag(stats.gram))
    methods["ease"] = {**score(given, target, ease_scores(ease_from_gram(stats.gram, ridge))), "ridge": ridge}
    if args.grid:
        best = None
        for scale in RIDGE_GRID:
            weights = ease_from_gram(stats.gram, ease_ridge(np.diag(stats.gram), scale))
            point = {**score(given, target, ease_scores(weights)), "ridge_scale": scale}
            if best is None or point["recall@20"] > best["recall@20"]:
                best = point
        methods["ease best"] = best
    if args.ials and stats.rows is not None:
        model = Recommender(method="ials", random_state=0).fit(stats.rows)
        methods["ials"] = score(given, target, model.score_rows)
    repeats = args.repeats if stats.n_users <= args.repeat_below else 1
    for epsilon in args.epsilons:
        sigma = noise_sigma(epsilon, args.delta)
        runs: dict[str, list[dict]] = {}
        for rep in range(repeats):
            seed = 1000 * rep + int(10 * epsilon)
            source = resolve_noise(insecure_test_noise(seed))
            counts = source.add_gaussian(stats.unit_counts, sigma)
            runs.setdefault("private popularity", []).append(score(given, target, popularity_scores(counts)))
            noisy = add_symmetric_frobenius_noise(stats.unit_gram, sigma, source)
            runs.setdefault("private ease", []).append(
                score(given, target, ease_scores(default_ease(noisy, sigma))))
            runs.setdefault("private ease clip", []).append(
                score(given, target, ease_scores(clipped_ease(noisy, sigma))))
            if stats.rows is not None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = PrivateRecommender(epsilon, args.delta, noise=insecure_test_noise(seed + 1))
                    model.fit(stats.rows)
                recs = model.recommend_for(given, 20)
                metrics = evaluate_top_n(recs, target, (10, 20))
                runs.setdefault("PrivateRecommender", []).append(
                    {"recall@20": metrics["recall@20"], "ndcg@10": metrics["ndcg@10"],
                     "coverage@20": metrics["coverage@20"], "method": model.method_})
                if args.ials:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        model = PrivateRecommender(epsilon, args.delta, method="ials", random_state=seed,
                                                   noise=insecure_test_noise(seed + 2)).fit(stats.rows)
                    runs.setdefault("private ials", []).append(score(given, target, model.score_rows))
        for name, values in runs.items():
            summary = {key: float(np.mean([v[key] for v in values])) for key in ("recall@20", "ndcg@10",
                                                                                  "coverage@20")}
            summary["recall@20 sd"] = float(np.std([v["recall@20"] for v in values]))
            if "method" in values[0]:
                summary["method"] = values[0]["method"]
            methods[f"{name} eps={epsilon:g}"] = summary | {"sigma": sigma, "repeats": len(values)}
    out["seconds"] = time.perf_counter() - t0
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inter", type=Path, default=Path("/work/data/ml-100k.inter"))
    parser.add_argument("--users", type=int, nargs="+", default=[1000, 3000, 10000, 30000, 100000])
    parser.add_argument("--held-out", type=int, default=5000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--grid", action="store_true", help="also the best non-private ridge of a grid")
    parser.add_argument("--repeat-below", type=int, default=30000,
                        help="noise repeats only up to this many users (one above)")
    parser.add_argument("--estimator-below", type=int, default=100000,
                        help="fit PrivateRecommender itself up to this many users (it needs the rows)")
    parser.add_argument("--ials", action="store_true",
                        help="also the implicit ALS, non-private and private "
                             "(PrivateRecommender(method='ials')), where the rows are kept")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--figure", type=Path, default=None)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    model = ImplicitFeedbackModel(random_state=args.seed).fit(args.inter)
    fit_seconds = time.perf_counter() - t0
    print(f"generator fitted in {fit_seconds:.1f} s, beta {model.beta_:.4f}", flush=True)
    held = model.sample(args.held_out, random_state=args.seed + 1_000_003)
    given, target = per_user_split(held, 0.2, random_state=args.seed + 17)
    result = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "generator": {"beta": model.beta_, "n_factors": model.n_factors, "taste_noise": model.taste_noise,
                      "fit_seconds": fit_seconds},
        "machine": platform.platform(),
        "points": [],
    }
    stream = statistics_stream(model, args.users, args.seed + 2, keep_rows=args.estimator_below)
    for stats in stream:
        point = run_point(stats, given, target, args)
        result["points"].append(point)
        line = "  ".join(f"{name} {m['recall@20']:.4f}" for name, m in point["methods"].items())
        print(f"n={stats.n_users} ({point['seconds']:.0f} s): {line}", flush=True)
        if args.out is not None:  # after every point, so a long run leaves what it measured
            args.out.write_text(json.dumps(result, indent=1))
    if args.figure is not None:
        figure(result, args.figure)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def figure(result: dict, path: Path) -> None:
    """Recall@20 against users (log scale), one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = result["points"]
    users = [p["n_users"] for p in points]
    names = [n for n in points[0]["methods"] if n != "ease best"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in names:
        ys = [p["methods"].get(name, {}).get("recall@20", np.nan) for p in points]
        style = "--" if "popularity" in name else "-"
        ax.plot(users, ys, style, marker="o", ms=3, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("training users")
    ax.set_ylabel("Recall@20 (5000 held-out users folded in)")
    ax.set_title("Private top-N on semi-synthetic MovieLens-shaped users (delta = 1e-6)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
