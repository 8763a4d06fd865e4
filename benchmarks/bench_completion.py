"""Benchmark: dptensor's tensor completion against TensorLy and against private baselines.

One run, three parts (``--parts`` picks some):

1. ``synthetic`` -- non-private completion of synthetic low-rank tensors (unit-RMS CP / Tucker,
   40 x 40 x 40, rank 4, SNR 10 by variance) with 50% and 90% of the cells missing: RMSE against
   the noiseless tensor on 20 000 missing cells, and wall time, for ``TensorCompletion`` with ALS
   (its defaults, and configured like the data: no offsets, fixed ``reg``), with the paper's SGD,
   and TensorLy 0.10 ``parafac(..., mask=...)`` / ``tucker(..., mask=...)`` (ALS / HOOI with the
   missing cells imputed from the current model, on the dense tensor).
2. ``movielens`` -- MovieLens-100K as user x item x day (943 x 1682 x 215), the canonical ``ua`` and
   ``ub`` splits (10 test ratings per user; :func:`dptensor.datasets.holdout_per_user`), RMSE on the
   test ratings averaged over both: the global mean, the biases, biased matrix factorisation, dptensor
   CP and Tucker without privacy, and private models at epsilon 0.1, 1 and 10 under each
   neighbouring relation: the private mean and biases (DP-ALS without factors), DP-ALS and DP-SGD.
3. ``figure4`` -- Wei et al.'s Figure 4 reproduced: CP and Tucker on ``ua``/``ub`` with the paper's
   Section 5.2 settings (bi-scaling per day, SGD, CP lambda 0.01 and learning rate 0.005, Tucker
   lambda_o 0.01, lambda_g 0.001 and learning rate 0.003, 100 epochs), the non-private baseline and
   the three perturbations (IP with the declared range [1, 5]; GP and OP, the paper's claims, which
   do not hold) at epsilon 0.1, 1 and 10.

MovieLens-100K is not redistributed with dptensor (its licence forbids it) and is never used in
the tests. It ships inside the ``recbole`` wheel (``recbole/dataset_example/ml-100k/ml-100k.inter``):
the benchmark downloads that wheel once with ``pip download --no-deps recbole==1.2.1`` into a
cache directory outside the repository (``--cache``, default ``~/.cache/dptensor``) and reads the
file from it.

Usage::

    python benchmarks/bench_completion.py --out benchmarks/results/completion.json [--parts ...] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np

from dptensor._files import write_csv
from dptensor.datasets.entries import (
    TensorEntries,
    holdout_per_user,
    make_low_rank_completion,
    read_recbole_inter,
)
from dptensor.models._options import build_estimator
from dptensor.models.completion.estimator import TensorCompletion, rmse
from dptensor.privacy import enable_features

RECBOLE = "recbole==1.2.1"
INTER = "recbole/dataset_example/ml-100k/ml-100k.inter"
RATINGS = (1.0, 5.0)


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------


def movielens_100k(cache: Path) -> Path:
    """``ml-100k.inter`` from the RecBole wheel, downloaded once into ``cache`` (outside the repo)."""
    target = cache / "ml-100k.inter"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("recbole-*.whl"))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", RECBOLE, "-d", str(cache)],
            check=True,
        )
        wheels = sorted(cache.glob("recbole-*.whl"))
    with zipfile.ZipFile(wheels[-1]) as wheel:
        target.write_bytes(wheel.read(INTER))
    return target


def splits(path: Path) -> dict[str, tuple[TensorEntries, TensorEntries]]:
    """The ``ua`` (1st-10th rating of each user held out) and ``ub`` (11th-20th) splits."""
    entries = read_recbole_inter(path)
    return {"ua": holdout_per_user(entries, 1, 10), "ub": holdout_per_user(entries, 11, 20)}


def matrix(entries: TensorEntries) -> TensorEntries:
    """The user x item matrix as a tensor with one day (biased matrix factorisation)."""
    idx = entries.indices.copy()
    idx[:, 2] = 0
    return TensorEntries(idx, entries.values, (entries.shape[0], entries.shape[1], 1))


# ---------------------------------------------------------------------------------------------
# 1. synthetic tensors against TensorLy
# ---------------------------------------------------------------------------------------------


def _tensorly(model: str, dense: np.ndarray, mask: np.ndarray, rank: int, seed: int) -> np.ndarray:
    import tensorly as tl
    from tensorly.decomposition import parafac, tucker

    if model == "cp":
        cp = parafac(
            tl.tensor(dense),
            rank,
            mask=tl.tensor(mask.astype(float)),
            n_iter_max=200,
            init="random",
            tol=1e-8,
            random_state=seed,
        )
        return np.asarray(tl.cp_to_tensor(cp))
    tk = tucker(
        tl.tensor(dense),
        rank=[rank] * 3,
        mask=tl.tensor(mask.astype(float)),
        n_iter_max=200,
        init="random",
        tol=1e-8,
        random_state=seed,
    )
    return np.asarray(tl.tucker_to_tensor(tk))


def synthetic_rows(shape, rank, missing_ratios, seed: int = 0, repeats: int = 3) -> list[dict]:
    methods = {
        "dptensor ALS (defaults)": {},
        "dptensor ALS (no offsets, reg 0.1)": {"offsets": "none", "context_modes": (), "reg": 0.1},
        "dptensor SGD (paper: lr 0.005, reg 0.01, 100 epochs)": {"solver": "sgd"},
    }
    rows = []
    for model in ("cp", "tucker"):
        for ratio in missing_ratios:
            prob = make_low_rank_completion(
                shape, rank, model=model, snr=10.0, missing_ratio=ratio, min_max=False, random_state=seed
            )
            obs = prob.observed
            mask = np.zeros(shape, dtype=bool)
            mask[tuple(obs.indices.T)] = True
            missing = np.argwhere(~mask)
            cells = missing[
                np.random.default_rng(seed + 1).choice(len(missing), min(20_000, len(missing)), replace=False)
            ]
            truth = prob.truth_tensor[tuple(cells.T)]
            base = {
                "model": model,
                "shape": list(shape),
                "rank": rank,
                "missing_ratio": ratio,
                "n_observed": len(obs),
                "noise_std": prob.noise_std,
            }
            dense = np.where(mask, obs.to_dense(fill=0.0), 0.0)
            timings = {}
            for name, kwargs in methods.items():
                times, errs = [], []
                for rep in range(repeats):  # timings on a shared machine: the median of repeats
                    start = time.perf_counter()
                    fit = build_estimator(TensorCompletion, rank=rank, model=model, random_state=seed + rep,
                        **kwargs).fit(
                        obs.indices, obs.values, shape
                    )
                    times.append(time.perf_counter() - start)
                    errs.append(rmse(truth, fit.predict(cells)))
                timings[name] = float(np.median(times))
                rows.append(
                    {
                        **base,
                        "method": name,
                        "rmse": float(np.median(errs)),
                        "rmse_best": float(min(errs)),
                        "rmse_runs": errs,
                        "seconds": timings[name],
                    }
                )
            times, errs = [], []
            for rep in range(repeats):
                start = time.perf_counter()
                full = _tensorly(model, dense, mask, rank, seed + rep)
                times.append(time.perf_counter() - start)
                errs.append(rmse(truth, full[tuple(cells.T)]))
            tl_name = "TensorLy masked " + ("parafac" if model == "cp" else "tucker")
            rows.append(
                {
                    **base,
                    "method": tl_name,
                    "rmse": float(np.median(errs)),
                    "rmse_best": float(min(errs)),
                    "rmse_runs": errs,
                    "seconds": float(np.median(times)),
                }
            )
            for row in rows[-len(methods) - 1 :]:
                row["time_over_tensorly"] = row["seconds"] / rows[-1]["seconds"]
                print(
                    f"{model:6s} missing {ratio:.0%} {row['method']:52s} RMSE {row['rmse']:.4f} "
                    f"(best {row['rmse_best']:.4f})  "
                    f"{row['seconds']:.3f} s ({row['time_over_tensorly']:.2f}x TensorLy)",
                    flush=True,
                )
    return rows


# ---------------------------------------------------------------------------------------------
# 2. MovieLens-100K: baselines, non-private and private models
# ---------------------------------------------------------------------------------------------


def _movielens_methods(quick: bool) -> list[tuple[str, str | None, float | None, dict, bool]]:
    """(name, relation, epsilon, TensorCompletion keywords, on the user x item matrix)."""
    out = [
        ("global mean", None, None, {"rank": None, "offsets": "mean"}, False),
        ("biases (mean + user + item + day)", None, None, {"rank": None}, False),
        ("biased MF, rank 10 (user x item matrix, ALS)", None, None, {"rank": 10, "context_modes": ()}, True),
        ("dptensor CP rank 10 (defaults)", None, None, {"rank": 10}, False),
        ("dptensor Tucker rank 5 (defaults)", None, None, {"rank": 5, "model": "tucker"}, False),
    ]
    for eps in (1.0,) if quick else (0.1, 1.0, 10.0):
        for relation in ("entry-value", "user"):
            private = {"privacy": "als", "neighbouring": relation, "epsilon": eps}
            out += [
                (
                    "private mean (DP-ALS, no factors)",
                    relation,
                    eps,
                    {"rank": None, "offsets": "mean", **private},
                    False,
                ),
                ("private biases (DP-ALS, no factors)", relation, eps, {"rank": None, **private}, False),
                ("DP-ALS CP rank 10 (defaults)", relation, eps, {"rank": 10, **private}, False),
            ]
            if relation == "entry-value":
                out.append(
                    (
                        "DP-SGD CP rank 10 (defaults)",
                        relation,
                        eps,
                        {"rank": 10, "privacy": "gradient_dpsgd", "neighbouring": relation, "epsilon": eps},
                        False,
                    )
                )
    return out


def movielens_rows(data: dict, quick: bool, repeats: int) -> list[dict]:
    rows = []
    for name, relation, eps, kwargs, as_matrix in _movielens_methods(quick):
        kwargs = dict(kwargs)
        rank = kwargs.pop("rank")
        errs, seconds, per_split = [], [], []
        reps = repeats if eps is not None else 1  # private fits: fresh noise, averaged
        for split, (train, test) in data.items():
            per_split.append([])
            if as_matrix:
                train, test = matrix(train), matrix(test)
            for rep in range(reps):
                start = time.perf_counter()
                fit = build_estimator(TensorCompletion, rank=rank, value_range=RATINGS, random_state=rep,
                    **kwargs).fit(
                    train.indices, train.values, train.shape
                )
                seconds.append(time.perf_counter() - start)
                errs.append(rmse(test.values, fit.predict(test.indices)))
                per_split[-1].append(errs[-1])
        # the noise's standard error of the mean: the splits differ by design, not by noise
        variances = [np.var(e, ddof=1) / len(e) for e in per_split if len(e) > 1]
        noise_se = float(np.sqrt(sum(variances))) / len(per_split)
        row = {
            "method": name,
            "relation": relation or "none",
            "epsilon": eps,
            "rmse": float(np.mean(errs)),
            "rmse_std": float(np.std(errs)),
            "rmse_se": noise_se if reps > 1 else None,
            "n_fits": len(errs),
            "seconds_per_fit": float(np.mean(seconds)),
        }
        rows.append(row)
        label = "non-private" if eps is None else f"{relation}, eps={eps:g}"
        spread = f"s.e. {noise_se:.4f}" if reps > 1 else "no noise"
        print(
            f"ML-100K {name:46s} [{label:20s}] RMSE {row['rmse']:.4f} ({spread}, "
            f"{len(errs)} fits, {row['seconds_per_fit']:.1f} s/fit)",
            flush=True,
        )
    return rows


# ---------------------------------------------------------------------------------------------
# 3. Wei et al., Figure 4
# ---------------------------------------------------------------------------------------------

#: Section 5.2's settings; the rank is not stated for ML-100K (10 here), nor the clipping constants
#: (m = 0.05 for GP, L = 0.1 for OP, as in dptensor's Figure 2).
FIGURE4_MODELS = {
    "cp": {"reg": 0.01, "learning_rate": 0.005},
    "tucker": {"reg": 0.01, "reg_core": 0.001, "learning_rate": 0.003},
}
FIGURE4_METHODS = {
    "baseline": {},
    "IP (Alg. 1, holds)": {"privacy": "input", "neighbouring": "entry-value", "value_range": RATINGS},
    "GP (Alg. 2, paper's claim)": {"privacy": "gradient", "neighbouring": "entry-value", "clip": 0.05},
    "OP (Alg. 3, paper's claim)": {"privacy": "output", "neighbouring": "entry-value", "clip": 0.1},
}


def figure4_rows(data: dict, quick: bool, rank: int = 10) -> list[dict]:
    rows = []
    epsilons = (1.0,) if quick else (0.1, 1.0, 10.0)
    for model, params in FIGURE4_MODELS.items():
        for method, extra in FIGURE4_METHODS.items():
            for eps in (None,) if method == "baseline" else epsilons:
                errs, seconds = [], []
                for split, (train, test) in data.items():
                    kwargs = {**params, **extra, "epsilon": eps} if eps is not None else {**params, **extra}
                    start = time.perf_counter()
                    with enable_features("unproven"), warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        try:
                            fit = build_estimator(TensorCompletion, rank=rank, model=model, solver="sgd",
                                offsets="biscale", n_epochs=5 if quick else 100, batch_size=1024,
                                random_state=0, **kwargs).fit(train.indices, train.values, train.shape)
                            pred = np.clip(fit.predict(test.indices), *RATINGS)
                            errs.append(rmse(test.values, pred))
                        except FloatingPointError:
                            errs.append(float("nan"))
                    seconds.append(time.perf_counter() - start)
                row = {
                    "model": model,
                    "method": method,
                    "epsilon": eps,
                    "rmse": float(np.mean(errs)),
                    "rmse_ua": errs[0],
                    "rmse_ub": errs[-1],
                    "seconds_per_fit": float(np.mean(seconds)),
                }
                rows.append(row)
                print(
                    f"Figure 4 {model:6s} {method:28s} eps={eps!s:5s} RMSE {row['rmse']:.4f} "
                    f"({row['seconds_per_fit']:.1f} s/fit)",
                    flush=True,
                )
    return rows


def markdown(payload: dict) -> str:
    """The tables of docs/completion.md from a results payload."""
    out = []
    if "synthetic" in payload:
        out += [
            "| model | missing | method | RMSE (median of 3) | best of 3 | seconds | time / TensorLy |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in payload["synthetic"]:
            out.append(
                f"| {r['model'].upper()} | {r['missing_ratio']:.0%} | {r['method']} | {r['rmse']:.4f} | "
                f"{r['rmse_best']:.4f} | {r['seconds']:.3f} | {r['time_over_tensorly']:.2f} |"
            )
        out.append("")
    if "movielens" in payload:
        out += [
            "| model | relation | epsilon | test RMSE (ua/ub mean) | s.e. (noise) | std over fits | fits "
            "| s / fit |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in payload["movielens"]:
            eps = "—" if r["epsilon"] is None else f"{r['epsilon']:g}"
            se = "—" if r.get("rmse_se") is None else f"{r['rmse_se']:.4f}"
            out.append(
                f"| {r['method']} | {r['relation']} | {eps} | {r['rmse']:.4f} | {se} | {r['rmse_std']:.4f} | "
                f"{r['n_fits']} | {r['seconds_per_fit']:.1f} |"
            )
        out.append("")
    if "figure4" in payload:
        out += ["| model | method | epsilon | RMSE ua | RMSE ub | mean |", "|---|---|---|---|---|---|"]
        for r in payload["figure4"]:
            eps = "—" if r["epsilon"] is None else f"{r['epsilon']:g}"
            out.append(
                f"| {r['model'].upper()} | {r['method']} | {eps} | {r['rmse_ua']:.4f} | {r['rmse_ub']:.4f} | "
                f"{r['rmse']:.4f} |"
            )
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/completion.json")
    parser.add_argument(
        "--parts",
        nargs="+",
        default=["synthetic", "movielens", "figure4"],
        choices=["synthetic", "movielens", "figure4"],
    )
    parser.add_argument(
        "--cache",
        default=str(Path.home() / ".cache" / "dptensor"),
        help="where the RecBole wheel with MovieLens-100K is kept (outside the repository)",
    )
    parser.add_argument("--repeats", type=int, default=10, help="fits per private setting and split")
    parser.add_argument("--quick", action="store_true", help="small sizes, few settings")
    args = parser.parse_args()
    payload: dict = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "command": " ".join(sys.argv),
    }
    try:
        import tensorly

        payload["tensorly"] = tensorly.__version__
    except ImportError:  # pragma: no cover
        pass
    start = time.perf_counter()
    out = Path(args.out)
    if out.exists():  # a run of some parts keeps the others' results (each part records its command)
        previous = json.loads(out.read_text())
        payload = {**previous, **payload}
    payload.setdefault("part_commands", {}).update({part: payload["command"] for part in args.parts})
    if "synthetic" in args.parts:
        shape = (20, 20, 20) if args.quick else (40, 40, 40)
        payload["synthetic"] = synthetic_rows(shape, 4, (0.5, 0.9), repeats=1 if args.quick else 3)
        write_csv(out.with_name(out.stem + "_synthetic.csv"), payload["synthetic"])
    if "movielens" in args.parts or "figure4" in args.parts:
        data = splits(movielens_100k(Path(args.cache)))
        if "movielens" in args.parts:
            payload["movielens"] = movielens_rows(data, args.quick, 1 if args.quick else args.repeats)
            write_csv(out.with_name(out.stem + "_movielens.csv"), payload["movielens"])
        if "figure4" in args.parts:
            payload["figure4"] = figure4_rows(data, args.quick)
            write_csv(out.with_name(out.stem + "_figure4.csv"), payload["figure4"])
    payload["seconds"] = time.perf_counter() - start
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    out.with_suffix(".md").write_text(markdown(payload))
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
