"""The curve of issue 38: held-out RMSE of private recommendations against the number of users.

Semi-synthetic users are drawn from :class:`dptensor.datasets.RatingsModel` fitted on
MovieLens-100K (rank-10 structure ``mu + b_u + b_i + <p_u, q_i>``, the real residual noise, the real
per-user counts, item popularity and days). For every number of training users ``n`` (default
10^3, 10^4, 7 10^4) the benchmark fits, on the same ``n`` users:

* the **global mean** and the **bias baseline** (``TensorCompletion(None)``, mean + user + item
  [+ day] biases, non-private);
* the **non-private fit** with the defaults (rank 10, ALS, biases, ``reg="auto"``), as a user x
  item matrix (``shape (n, items, 1)``) and as a user x item x day tensor (the time mode, a context
  mode by default);
* **DP-ALS** (``privacy="als"``, the defaults) on the matrix and on the tensor (DP tensor completion
  with the time mode), under ``neighbouring="user"`` (joint DP) and ``"entry-value"``, at each
  epsilon (default 1 and 4), ``delta = 1e-6``.

**Evaluation (every method, both relations): held-out users.** ``--held-out`` users (default 2000)
are drawn once, independently of the training users (another random stream), and are the same
for every ``n``; each shows 80% of their ratings (chosen at random) and the model predicts the
other 20%, every user folded in from their shown ratings through the released item side
(:func:`dptensor.evaluation.held_out_user_rmse`). Under ``"user"`` that is the evaluation joint DP
allows; under ``"entry-value"`` and without privacy it is the same number, so that every ratio is
taken on the same test ratings (it does not measure the entry-value fit's own, noisier, training
user rows). The ratio is private RMSE over the non-private RMSE of the same model (matrix or
tensor), and over the best non-private RMSE.

Each size runs in its own process (``--single``), so its peak resident memory is its own; fits
are timed with ``time.perf_counter`` and the resident memory sampled during each fit. The privacy
noise is fresh in every fit (secure source); ``--repeats`` private fits per point (default 3 at
``n < 5000``, else 1) are averaged. Writes ``recommendation_curve.json`` (every fit, settings,
timings, memory), ``recommendation_curve.csv`` (one row per point) and
``recommendation_curve.png`` (RMSE and ratio against users) to ``--out-dir``.

MovieLens-100K is never downloaded: ``--inter PATH`` (``ml-100k.inter`` from the recbole wheel:
``pip download recbole --no-deps -d DIR`` and unzip ``recbole/dataset_example/ml-100k/ml-100k.inter``),
an installed recbole, or ``~/.cache/dptensor`` (see ``ratings_semi_synthetic.py``).

Usage::

    python benchmarks/bench_recommendation_curve.py --inter /tmp/ml-100k.inter
    python benchmarks/bench_recommendation_curve.py --inter /tmp/ml-100k.inter --users 1000 10000 70000 \\
        --epsilons 1 4 --out-dir benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ratings_semi_synthetic import find_movielens  # noqa: E402

from dptensor.datasets import RatingsModel, TensorEntries, read_recbole_inter  # noqa: E402
from dptensor.datasets.entries import train_test_split_entries  # noqa: E402
from dptensor.evaluation import held_out_user_rmse  # noqa: E402
from dptensor.models import TensorCompletion  # noqa: E402
from dptensor.models.completion import CompletionOptions

VALUE_RANGE = (1.0, 5.0)
NAME = "recommendation_curve"


class PeakMemory:
    """The largest resident set size (bytes) of this process while the block runs (sampled)."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        self.peak = self.rss()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())


def generator(inter: str | None, rank: int, seed: int, cache: Path) -> RatingsModel:
    """The RatingsModel fitted on ML-100K (pickled under ``cache`` so that sizes share one fit)."""
    cache.mkdir(parents=True, exist_ok=True)
    stored = cache / f"ratings_model_rank{rank}_seed{seed}.pkl"
    if stored.exists():
        with open(stored, "rb") as f:
            return pickle.load(f)
    path = find_movielens(inter, cache)
    if path is None:
        sys.exit("MovieLens-100K not found: give --inter PATH to ml-100k.inter (never downloaded here)")
    model = RatingsModel(rank, random_state=seed).fit(read_recbole_inter(path))
    with open(stored, "wb") as f:
        pickle.dump(model, f)
    return model


def as_matrix(entries: TensorEntries) -> TensorEntries:
    """The same ratings with the time mode collapsed: a users x items x 1 tensor."""
    idx = entries.indices.copy()
    idx[:, 2] = 0
    return TensorEntries(idx, entries.values, (entries.shape[0], entries.shape[1], 1))


def timed_fit(model: TensorCompletion, data: TensorEntries) -> tuple[TensorCompletion, float, int]:
    with PeakMemory() as memory:
        start = time.perf_counter()
        model.fit(data.indices, data.values, data.shape)
        seconds = time.perf_counter() - start
    return model, seconds, memory.peak


def run_size(args: argparse.Namespace) -> dict:
    """Every fit at one number of users (run in its own process)."""
    n = args.single
    gen = generator(args.inter, args.rank, args.seed, Path(args.cache))
    start = time.perf_counter()
    train = gen.sample(n, chunk_size=args.chunk, random_state=args.seed + 1)
    held = gen.sample(args.held_out, chunk_size=args.chunk, random_state=args.seed + 2)
    shown, hidden = train_test_split_entries(held, 0.2, random_state=args.seed + 3)
    draw_seconds = time.perf_counter() - start
    data = {"tensor": train, "matrix": as_matrix(train)}
    evaluation = {"tensor": (shown, hidden), "matrix": (as_matrix(shown), as_matrix(hidden))}
    repeats = args.repeats if args.repeats is not None else (3 if n < 5000 else 1)
    fits: list[dict] = []

    def result() -> dict:
        return {"users": n, "ratings": len(train), "mean_ratings_per_user": len(train) / n,
                "draw_seconds": draw_seconds, "repeats": repeats, "fits": fits,
                "peak_rss_bytes": max((f["peak_rss_bytes"] for f in fits), default=0)}

    def record(method: str, shape: str, relation: str, epsilon: float | None, model, seconds, peak,
               rmse: float | None = None) -> None:
        if rmse is None:
            rmse = held_out_user_rmse(model, *evaluation[shape])
        fits.append({"users": n, "method": method, "model": shape, "relation": relation,
                     "epsilon": epsilon, "rmse": rmse, "seconds": seconds, "peak_rss_bytes": peak,
                     "reg": None if model is None else float(model.reg_),
                     "max_ratings": getattr(model, "max_ratings_", None)})  # None but for user-level DP-ALS
        print(f"  n={n:>7} {method:<12} {shape:<6} {relation:<11} eps={epsilon!s:<4} "
              f"RMSE {rmse:.4f}  {seconds:7.1f} s  peak {peak / 2**30:.2f} GiB", flush=True)
        Path(args.part).write_text(json.dumps(result()))  # after every fit: a stopped run keeps its fits

    mean = float(np.mean(train.values))
    if not args.no_baselines:
        record("mean", "matrix", "none", None, None, 0.0, PeakMemory.rss(),
               float(np.sqrt(np.mean((hidden.values - mean) ** 2))))
    for shape in args.models:
        if args.no_baselines:
            continue
        biases = TensorCompletion(None, value_range=VALUE_RANGE, random_state=args.seed)
        record("biases", shape, "none", None, *timed_fit(biases, data[shape]))
        if "nonprivate" in args.methods and not args.no_baselines:
            reg = "auto"
            if n > args.auto_up_to:  # reg="auto" takes too long here: the penalty chosen on fewer users
                reg = dict(zip(("matrix", "tensor"), args.fixed_reg, strict=True))[shape]
            model = TensorCompletion(args.rank, value_range=VALUE_RANGE, random_state=args.seed,
                options=CompletionOptions(reg=reg))
            record("nonprivate", shape, "none", None, *timed_fit(model, data[shape]))
            fits[-1]["reg_choice"] = "auto" if reg == "auto" else "fixed (reg='auto' on fewer users)"
    for shape in [] if args.no_private else args.models:
        for relation in args.relations:
            for epsilon in args.epsilons:
                for _ in range(repeats):
                    model = TensorCompletion(args.rank, privacy="als", neighbouring=relation,
                                             epsilon=epsilon, delta=args.delta,
                                             value_range=VALUE_RANGE, random_state=args.seed)
                    record("dp-als", shape, relation, epsilon, *timed_fit(model, data[shape]))
    return result()


LOG_LINE = re.compile(
    r"^\s*n=\s*(\d+) (\S+)\s+(\S+)\s+(\S+)\s+eps=(\S+)\s+RMSE ([\d.]+)\s+([\d.]+) s\s+peak ([\d.]+) GiB")


def parts_from_log(args: argparse.Namespace, log: Path, out: Path) -> None:
    """Part files rebuilt from the lines a stopped run printed (RMSE to 4 decimals; ``from_log``).

    Sizes that already have a part file keep it."""
    sizes: dict[int, list[dict]] = {}
    for line in log.read_text().splitlines():
        match = LOG_LINE.match(line)
        if match is None:
            continue
        n, method, shape, relation, eps, rmse, seconds, peak = match.groups()
        sizes.setdefault(int(n), []).append({
            "users": int(n), "method": method, "model": shape, "relation": relation,
            "epsilon": None if eps == "None" else float(eps), "rmse": float(rmse),
            "seconds": float(seconds), "peak_rss_bytes": float(peak) * 2**30, "reg": None,
            "from_log": True})
    gen = generator(args.inter, args.rank, args.seed, Path(args.cache))
    for n, fits in sizes.items():
        if (out / f"{NAME}_part_{n}.json").exists():  # a complete part file is kept
            continue
        ratings = sum(len(c) for c in gen.iter_samples(n, chunk_size=args.chunk, random_state=args.seed + 1))
        part = {"users": n, "ratings": ratings, "mean_ratings_per_user": ratings / n, "draw_seconds": None,
                "repeats": None, "fits": fits, "peak_rss_bytes": max(f["peak_rss_bytes"] for f in fits),
                "from_log": str(log)}
        (out / f"{NAME}_part_{n}.json").write_text(json.dumps(part))
        print(f"{n} users: {len(fits)} fits from {log}")


def summarise(results: list[dict]) -> list[dict]:
    """One row per (users, method, model, relation, epsilon): mean RMSE over fits and the ratios."""
    rows = []
    previous: dict = {}
    for size in sorted(results, key=lambda s: s["users"]):
        fits = size["fits"]
        baseline = {f["model"]: f["rmse"] for f in fits if f["method"] == "nonprivate"}
        bound = not baseline and bool(previous)
        if bound:  # no non-private fit at this size: a smaller size's RMSE bounds it above (ratio >=)
            baseline = {f"{model} at {previous['users']} users (ratio is a lower bound)": rmse
                        for model, rmse in previous["baseline"].items()}
        elif baseline:
            previous = {"users": size["users"], "baseline": baseline}
        best = min(baseline.values()) if baseline else float("nan")
        keys = []
        for f in fits:
            key = (f["method"], f["model"], f["relation"], f["epsilon"])
            if key not in keys:
                keys.append(key)
        for method, shape, relation, epsilon in keys:
            group = [f for f in fits if (f["method"], f["model"], f["relation"], f["epsilon"])
                     == (method, shape, relation, epsilon)]
            values = np.array([f["rmse"] for f in group])
            own = baseline.get(shape, best)  # a missing non-private fit: the other model's (noted)
            rows.append({
                "users": size["users"], "ratings": size["ratings"], "method": method, "model": shape,
                "relation": relation, "epsilon": epsilon, "rmse": float(values.mean()),
                "rmse_se": float(values.std(ddof=1) / np.sqrt(values.size)) if values.size > 1 else None,
                "fits": int(values.size), "ratio": float(values.mean() / own),
                "ratio_to": shape if shape in baseline or not baseline else min(baseline, key=baseline.get),
                "ratio_best": float(values.mean() / best),
                "seconds": float(np.mean([f["seconds"] for f in group])),
                "peak_rss_gib": max(f["peak_rss_bytes"] for f in group) / 2**30,
            })
    return rows


def within(rows: list[dict], shape: str, epsilon: float, level: float = 1.10) -> float | None:
    """Users from which user-level DP-ALS at ``epsilon`` stays at ratio <= ``level`` (log-interpolated).

    ``None`` when the largest size measured is above ``level``; the smallest size when every one is
    at or below it (the crossing may lie below the curve then).
    """
    points = sorted((r["users"], r["ratio"]) for r in rows if r["method"] == "dp-als"
                    and r["model"] == shape and r["relation"] == "user" and r["epsilon"] == epsilon
                    and "lower bound" not in str(r.get("ratio_to")))  # measured ratios only
    if not points or points[-1][1] > level:
        return None
    above = [i for i, (_, ratio) in enumerate(points) if ratio > level]
    if not above:
        return float(points[0][0])
    (n0, r0), (n1, r1) = points[above[-1]], points[above[-1] + 1]
    t = (r0 - level) / (r0 - r1)
    return float(np.exp(np.log(n0) + t * (np.log(n1) - np.log(n0))))


def markdown(rows: list[dict]) -> str:
    """The curve as a Markdown table: one row per method, one column per number of users."""
    users = sorted({r["users"] for r in rows})
    keys = []
    for r in rows:
        key = (r["method"], r["model"], r["relation"], r["epsilon"])
        if key not in keys:
            keys.append(key)
    order = {"mean": 0, "biases": 1, "nonprivate": 2, "nonprivate-fixed-reg": 3, "dp-als": 4}
    keys.sort(key=lambda k: (order.get(k[0], 5), k[2], k[3] or 0, k[1]))
    lines = ["| method | model | relation | ε | " + " | ".join(f"{n:,} users" for n in users) + " |",
             "|---|---|---|---|" + "---|" * len(users)]
    for method, shape, relation, epsilon in keys:
        cells = []
        for n in users:
            hit = [r for r in rows if (r["users"], r["method"], r["model"], r["relation"], r["epsilon"])
                   == (n, method, shape, relation, epsilon)]
            to = hit[0].get("ratio_to", shape) if hit else shape
            mark = "" if to == shape else ("≥" if "lower bound" in str(to) else "*")
            cells.append(f"{hit[0]['rmse']:.4f} ({'≥' if mark == '≥' else ''}{hit[0]['ratio']:.3f}"
                         f"{'*' if mark == '*' else ''})" if hit else "—")
        lines.append(f"| {method} | {shape} | {relation} | {epsilon if epsilon is not None else '—'} | "
                     + " | ".join(cells) + " |")
    if any("lower bound" in str(r.get("ratio_to")) for r in rows):
        lines.append("\n≥ no non-private fit at this size: ratio to the largest smaller size's non-private "
                     "RMSE, which bounds this size's from above, so the ratio is a lower bound")
    if any(r.get("ratio_to", r["model"]) not in (r["model"], None)
           and "lower bound" not in str(r.get("ratio_to")) for r in rows):
        lines.append("\n\\* ratio to the other model's non-private fit (this model's was not run at this "
                     "size)")
    return "\n".join(lines) + "\n"


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    styles = {"user": "-", "entry-value": "--", "none": ":"}
    colours = iter(plt.get_cmap("tab20").colors)
    for (method, shape, relation, epsilon) in sorted({(r["method"], r["model"], r["relation"],
                                                        r["epsilon"] or 0) for r in rows}, key=str):
        sel = sorted((r for r in rows if (r["method"], r["model"], r["relation"], r["epsilon"] or 0)
                      == (method, shape, relation, epsilon)), key=lambda r: r["users"])
        users = [r["users"] for r in sel]
        label = f"{method} {shape}" + (f" {relation} ε={epsilon:g}" if method == "dp-als" else "")
        marker = "o" if shape == "matrix" else "s"
        colour = next(colours)
        left.plot(users, [r["rmse"] for r in sel], styles[relation], marker=marker, label=label, color=colour)
        if method == "dp-als":
            right.plot(users, [r["ratio"] for r in sel], styles[relation], marker=marker, label=label,
                       color=colour)
            for r in sel:  # no non-private fit at that size: the ratio is a lower bound
                if "lower bound" in str(r.get("ratio_to")):
                    right.annotate("≥", (r["users"], r["ratio"]), textcoords="offset points",
                                   xytext=(-12, -4), color=colour)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xlabel("training users")
        ax.grid(True, which="both", alpha=0.3)
    left.set_ylabel("held-out-user RMSE")
    right.set_ylabel("RMSE ratio to non-private, same model (≥: bound)")
    right.axhline(1.10, color="grey", lw=0.8)
    right.axhline(1.0, color="black", lw=0.8)
    left.legend(fontsize=6, ncol=2)
    right.legend(fontsize=6)
    fig.suptitle("DP-ALS on semi-synthetic MovieLens-100K-shaped users (δ = 1e-6)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[1000, 10_000, 70_000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--relations", nargs="+", default=["user", "entry-value"])
    parser.add_argument("--methods", nargs="+", default=["nonprivate"], help="'nonprivate' or none")
    parser.add_argument("--auto-up-to", type=int, default=1_000_000,
                        help="the non-private fits choose reg='auto' up to this many users (default 10^6: "
                             "92 s at 7 10^4 users); above, --fixed-reg")
    parser.add_argument("--fixed-reg", type=float, nargs=2, default=[33.41, 11.14],
                        metavar=("MATRIX", "TENSOR"),
                        help="reg of the non-private fits above --auto-up-to users (default: the choices of "
                             "reg='auto' at 10^3 users, 33.41 and 11.14)")
    parser.add_argument("--models", nargs="+", default=["matrix", "tensor"])
    parser.add_argument("--no-baselines", action="store_true",
                        help="skip the mean, biases and non-private fits")
    parser.add_argument("--no-private", action="store_true", help="skip the DP-ALS fits")
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--held-out", type=int, default=2000, help="held-out users (default 2000)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inter", default=None, help="path of ml-100k.inter (RecBole format)")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "dptensor"))
    parser.add_argument("--out-dir", default="benchmarks/results")
    parser.add_argument("--reuse", action="store_true", help="keep sizes already in the partial files")
    parser.add_argument("--parts-from-log", default=None, metavar="LOG",
                        help="rebuild the part files of a stopped run from its printed lines, then merge")
    parser.add_argument("--single", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--part", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.single is not None:
        result = run_size(args)
        Path(args.part).write_text(json.dumps(result))
        return 0
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    generator(args.inter, args.rank, args.seed, Path(args.cache))  # fitted once, before the sizes
    if args.parts_from_log is not None:
        parts_from_log(args, Path(args.parts_from_log), out)
        args.reuse = True
    results = []
    for n in args.users:
        part = out / f"{NAME}_part_{n}.json"
        if not (args.reuse and part.exists()):
            argv = [a for a in sys.argv[1:]]
            cmd = [sys.executable, __file__, *argv, "--single", str(n), "--part", str(part)]
            print(f"{n} users ...", flush=True)
            subprocess.run(cmd, check=True)
        size = json.loads(part.read_text())
        for extra in sorted(out.glob(f"{NAME}_part_{n}_*.json")):  # fits of the same draw run apart
            more = json.loads(extra.read_text())
            size["fits"] += more["fits"]
            size["peak_rss_bytes"] = max(size["peak_rss_bytes"], more["peak_rss_bytes"])
        results.append(size)
    rows = summarise(results)
    summary = {
        "within_10pct_user_eps1": {shape: within(rows, shape, 1.0) for shape in ("matrix", "tensor")},
        "settings": {k: v for k, v in vars(args).items() if k not in ("single", "part")},
        "machine": {"python": platform.python_version(), "numpy": np.__version__,
                    "cpus": os.cpu_count(), "platform": platform.platform()},
    }
    (out / f"{NAME}.json").write_text(json.dumps({"summary": summary, "rows": rows, "sizes": results},
                                                  indent=1))
    columns = ["users", "ratings", "method", "model", "relation", "epsilon", "rmse", "rmse_se", "fits",
               "ratio", "ratio_to", "ratio_best", "seconds", "peak_rss_gib"]
    with open(out / f"{NAME}.csv", "w") as f:
        f.write(",".join(columns) + "\n")
        for r in rows:
            f.write(",".join("" if r[c] is None else (f"{r[c]:.5g}" if isinstance(r[c], float) else str(r[c]))
                             for c in columns) + "\n")
    figure(rows, out / f"{NAME}.png")
    (out / f"{NAME}.md").write_text(markdown(rows))
    print(json.dumps(summary["within_10pct_user_eps1"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
