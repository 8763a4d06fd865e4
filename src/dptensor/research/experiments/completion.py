"""Private tensor completion on synthetic tensors: Figures 2 and 3 of Wei, Li, Mao & Wang.

Section 5.1 of *Applying Differential Privacy to Tensor Completion*: a ``20 x 20 x 20`` tensor of
rank 3 (CP: unit-norm Gaussian factor columns; Tucker: orthonormal factors and a Gaussian
``3 x 3 x 3`` core), min-max scaled to ``[0, 1]``, Gaussian noise at SNR 1, observed entries split
80% / 20% into train and test, RMSE on the test cells. Hyper-parameters as in the paper: CP
``lambda = 0.01``, Tucker ``lambda_o = 0.001``, ``lambda_g = 0.0001``, learning rate 0.005,
100 epochs.

* Figure 2 -- RMSE against ``epsilon`` at 50% missing, for input (IP, Algorithm 1), gradient
  (GP, Algorithm 2) and output (OP, Algorithm 3) perturbation and the non-private baseline, plus
  dptensor's two perturbations whose guarantees hold (DP-SGD and clipped output perturbation).
* Figure 3 -- RMSE against the missing ratio ``0.1 ... 0.9`` at ``epsilon = 1``.

The RMSE is measured against the noiseless tensor ``x_tilde`` (the paper's formula) and, in the
CSV, also against the noisy held-out values. A dashed line marks the RMSE of predicting the mean
of the training values. Choices the paper leaves open are recorded in :data:`SETTINGS` and in
``docs/completion.md``. The seed fixes the data and the public randomness; the privacy noise is
fresh in every run (secure by default), so reruns agree in distribution, not bit for bit.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dptensor._files import pyplot, save_figure, write_csv, write_json
from dptensor._progress import progress_bar
from dptensor._validation import RandomStateLike, check_random_state
from dptensor.datasets.entries import make_low_rank_completion, train_test_split_entries
from dptensor.models._options import build_estimator
from dptensor.models.completion.estimator import TensorCompletion, rmse
from dptensor.privacy import enable_features

SHAPE = (20, 20, 20)
RANK = 3
SNR = 1.0
TEST_FRACTION = 0.2
#: The paper's hyper-parameters (Section 5.1).
MODEL_PARAMS = {
    "cp": {"reg": 0.01, "learning_rate": 0.005, "n_epochs": 100},
    "tucker": {"reg": 0.001, "reg_core": 0.0001, "learning_rate": 0.005, "n_epochs": 100},
}
#: label -> TensorCompletion keyword arguments for each method (choices the paper leaves open
#: are ours: the clipping constants, the declared value range [0, 1] of the min-max scaled data,
#: and the DP-SGD schedule).
METHODS: dict[str, dict[str, Any]] = {
    "baseline": {"privacy": None, "solver": "sgd"},
    "IP (Alg. 1)": {"privacy": "input", "value_range": (0.0, 1.0)},
    "GP (Alg. 2, paper's claim)": {"privacy": "gradient", "clip": 0.05},
    "OP (Alg. 3, paper's claim)": {"privacy": "output", "clip": 0.1},
    "DP-SGD (holds)": {
        "privacy": "gradient_dpsgd", "clip": 0.1, "batch_size": 3200, "n_epochs": 20, "delta": 1e-5,
        "offsets": "none", "init_scale": 0.5,
    },
    "clipped OP (holds)": {
        "privacy": "output_clipped", "value_range": (0.0, 1.0), "clip": 0.1, "output_epochs": 10,
    },
}
#: Every private method protects one entry's value (the paper's setting).
NEIGHBOURING = "entry-value"
SETTINGS = {
    "shape": SHAPE, "rank": RANK, "snr": SNR, "snr_definition": "variance of x_tilde / noise variance",
    "test_fraction": TEST_FRACTION, "model_params": MODEL_PARAMS,
    "methods": {k: {kk: vv for kk, vv in v.items()} for k, v in METHODS.items()},
    "batch_size": 256,
}


@dataclass(frozen=True)
class CompletionExperimentResult:
    """Rows of both figures and the files written.

    Attributes
    ----------
    rows : list of dict
        One record per fit: ``figure``, ``model``, ``method``, ``epsilon``, ``missing_ratio``,
        ``repeat``, ``rmse`` (against the noiseless tensor), ``rmse_noisy`` (against the held-out
        noisy values), ``rmse_mean_predictor`` (the RMSE of predicting the training mean),
        ``holds``, ``seconds``.
    summary : list of dict
        Per (figure, model, method, x): ``rmse_avg`` and ``rmse_std`` (average and standard
        deviation of ``rmse`` over the ``n`` repeats), ``rmse_noisy_avg``, ``rmse_mean_predictor``
        (averaged over the repeats). ("mean" names the mean predictor only, never an average.)
    files : dict
        ``csv``, ``summary_csv``, ``figure2_png``, ``figure3_png``, ``json``.
    """

    rows: list
    summary: list
    files: dict


def _fit_one(model: str, method: str, epsilon: float, train, test, truth_test, seed: int) -> dict:
    kwargs = dict(MODEL_PARAMS[model])
    kwargs.update(METHODS[method])
    kwargs.setdefault("batch_size", SETTINGS["batch_size"])
    if kwargs["privacy"] is not None:
        kwargs["epsilon"] = epsilon
        kwargs["neighbouring"] = NEIGHBOURING
    start = time.perf_counter()
    try:
        # the paper's gradient and output perturbations are reproduced, so they are opted into
        with enable_features("unproven"):
            fit = build_estimator(TensorCompletion, rank=RANK, model=model, random_state=seed, **kwargs).fit(
                train.indices, train.values, train.shape
            )
        pred = fit.predict(test.indices)
        err, err_noisy = rmse(truth_test, pred), rmse(test.values, pred)
        holds = None if fit.guarantee_ is None else fit.guarantee_.holds
    except FloatingPointError:  # a diverged private run counts as a failure, reported as NaN
        err = err_noisy = float("nan")
        holds = None
    return {"rmse": err, "rmse_noisy": err_noisy, "holds": holds, "seconds": time.perf_counter() - start}


def _problem(model: str, missing_ratio: float, seed: int):
    prob = make_low_rank_completion(SHAPE, RANK, model=model, snr=SNR, missing_ratio=missing_ratio,
                                    random_state=seed)
    train, test = train_test_split_entries(prob.observed, TEST_FRACTION, random_state=seed + 1)
    truth = prob.truth_at(test.indices)
    return train, test, truth, rmse(truth, np.full(truth.shape, train.values.mean()))


def figure2(
    *,
    quick: bool = False,
    epsilons: Sequence[float] | None = None,
    n_repeats: int | None = None,
    models: Sequence[str] = ("cp", "tucker"),
    random_state: RandomStateLike = 0,
    progress: bool = False,
) -> list[dict]:
    """Rows of Figure 2: RMSE against ``epsilon`` at 50% missing (Wei et al., Section 5.1).

    ``quick`` uses 3 values of ``epsilon`` and 1 repeat; the full run 7 values in
    ``[0.01, 10]`` and 5 repeats (the paper averages 50; the machine is shared). ``progress``
    shows a bar that advances once per fit (the experiment's data are synthetic).
    """
    if epsilons is None:
        epsilons = (0.1, 1.0, 10.0) if quick else (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
    n_repeats = n_repeats or (1 if quick else 5)
    rng = check_random_state(random_state)
    rows = []
    n_fits = len(models) * n_repeats * sum(1 if m == "baseline" else len(epsilons) for m in METHODS)
    bar = progress_bar(total=n_fits, desc="Figure 2 (fits)", enabled=progress)
    for model in models:
        for rep in range(n_repeats):
            seed = int(rng.integers(2**31))
            train, test, truth, mean_err = _problem(model, 0.5, seed)
            for method in METHODS:
                for eps in (epsilons if method != "baseline" else (float("nan"),)):
                    res = _fit_one(model, method, eps, train, test, truth, seed + 2)
                    rows.append({"figure": 2, "model": model, "method": method, "epsilon": eps,
                                 "missing_ratio": 0.5, "repeat": rep, "rmse_mean_predictor": mean_err, **res})
                    bar.update()
    bar.close()
    return rows


def figure3(
    *,
    quick: bool = False,
    missing_ratios: Sequence[float] | None = None,
    epsilon: float = 1.0,
    n_repeats: int | None = None,
    models: Sequence[str] = ("cp", "tucker"),
    random_state: RandomStateLike = 1,
    progress: bool = False,
) -> list[dict]:
    """Rows of Figure 3: RMSE against the missing ratio at ``epsilon`` (Wei et al., Section 5.1).

    ``quick`` uses missing ratios 0.1, 0.5, 0.9 and 1 repeat; the full run 0.1, 0.2, ..., 0.9 and
    3 repeats (the paper averages 10). ``progress`` shows a bar that advances once per fit.
    """
    if missing_ratios is None:
        missing_ratios = (0.1, 0.5, 0.9) if quick else tuple(np.round(np.arange(0.1, 0.95, 0.1), 1))
    n_repeats = n_repeats or (1 if quick else 3)
    rng = check_random_state(random_state)
    rows = []
    bar = progress_bar(total=len(models) * n_repeats * len(missing_ratios) * len(METHODS),
                       desc="Figure 3 (fits)", enabled=progress)
    for model in models:
        for rep in range(n_repeats):
            for ratio in missing_ratios:
                seed = int(rng.integers(2**31))
                train, test, truth, mean_err = _problem(model, float(ratio), seed)
                for method in METHODS:
                    eps = float("nan") if method == "baseline" else epsilon
                    res = _fit_one(model, method, eps, train, test, truth, seed + 2)
                    rows.append({"figure": 3, "model": model, "method": method, "epsilon": eps,
                                 "missing_ratio": float(ratio), "repeat": rep,
                                 "rmse_mean_predictor": mean_err, **res})
                    bar.update()
    bar.close()
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """Average and standard deviation of the RMSE over repeats (``rmse_avg``, ``rmse_std``)."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        x = row["epsilon"] if row["figure"] == 2 else row["missing_ratio"]
        # one key for every NaN (the baseline's epsilon): NaN != NaN would make each repeat its own group
        key = (row["figure"], row["model"], row["method"], x if np.isfinite(x) else None)
        groups.setdefault(key, []).append(row)
    out = []
    for (figure, model, method, x), group in groups.items():
        x = float("nan") if x is None else x
        errs = np.array([g["rmse"] for g in group])
        noisy = np.array([g["rmse_noisy"] for g in group])
        out.append({
            "figure": figure, "model": model, "method": method,
            "x": "epsilon" if figure == 2 else "missing_ratio", "value": x,
            "rmse_avg": float(np.nanmean(errs)) if np.isfinite(errs).any() else float("nan"),
            "rmse_std": float(np.nanstd(errs)) if np.isfinite(errs).any() else float("nan"),
            "rmse_noisy_avg": float(np.nanmean(noisy)) if np.isfinite(noisy).any() else float("nan"),
            "rmse_mean_predictor": float(np.mean([g["rmse_mean_predictor"] for g in group])),
            "n": len(group), "n_failed": int(np.count_nonzero(~np.isfinite(errs))),
            "holds": group[0]["holds"],
        })
    return out


STYLES = {
    "baseline": dict(color="black", marker="o"),
    "IP (Alg. 1)": dict(color="tab:blue", marker="s"),
    "GP (Alg. 2, paper's claim)": dict(color="tab:orange", marker="^", linestyle="--"),
    "OP (Alg. 3, paper's claim)": dict(color="tab:green", marker="v", linestyle="--"),
    "DP-SGD (holds)": dict(color="tab:red", marker="D"),
    "clipped OP (holds)": dict(color="tab:purple", marker="P"),
}


Y_MAX = 3.0


def _spread_label(counts: Sequence[int]) -> str:
    """What the curves and bands show, for the number of repeats behind each point."""
    low, high = min(counts), max(counts)
    if high == 1:
        return "one repeat per point: no spread shown"
    repeats = f"{low}" if low == high else f"{low}-{high}"
    return f"average +- std over {repeats} repeats"


def _plot(summary: list[dict], figure: int, path: Path) -> Path:
    plt = pyplot()
    rows = [r for r in summary if r["figure"] == figure]
    models = sorted({r["model"] for r in rows})
    fig, axes = plt.subplots(1, len(models), figsize=(6.2 * len(models), 4.6), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        sub = [r for r in rows if r["model"] == model]
        xs_all = sorted({r["value"] for r in sub if np.isfinite(r["value"])})
        for method, style in STYLES.items():
            pts = sorted((r for r in sub if r["method"] == method), key=lambda r: r["value"])
            if not pts:
                continue
            if figure == 2 and method == "baseline":
                xs, mean, std = np.array(xs_all), np.full(len(xs_all), pts[0]["rmse_avg"]), np.full(
                    len(xs_all), pts[0]["rmse_std"])
            else:
                xs = np.array([r["value"] for r in pts])
                mean = np.array([r["rmse_avg"] for r in pts])
                std = np.array([r["rmse_std"] for r in pts])
            ax.plot(xs, mean, label=method, **style)
            ax.fill_between(xs, mean - std, mean + std, color=style["color"], alpha=0.12)
        ref = np.mean([r["rmse_mean_predictor"] for r in sub])
        ax.axhline(ref, color="grey", linestyle=":", label="predict the training mean")
        ax.set_yscale("log")
        if figure == 2:
            ax.set_xscale("log")
            ax.set_xlabel("epsilon")
            low, high = ax.get_ylim()
            if high > Y_MAX:  # curves that leave the panel (RMSE > Y_MAX) are in the CSV
                ax.set_ylim(low, Y_MAX)
        else:
            ax.set_xlabel("missing ratio")
        cut = f" (axis cut at {Y_MAX:g})" if figure == 2 else ""
        ax.set_ylabel("test RMSE against the noiseless tensor" + cut)
        ax.set_title(f"{model.upper()} completion, 20x20x20, rank 3"
                     + (", 50% missing" if figure == 2 else ", epsilon = 1"))
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Wei et al. Figure {figure} reproduced ({_spread_label([r['n'] for r in rows])})")
    fig.tight_layout()
    return save_figure(fig, path)


def redraw_from_rows(rows_csv: str | Path, out_dir: str | Path) -> dict:
    """Summarise a ``completion.csv`` written by :func:`run` again and redraw both PNGs (no refitting).

    Writes ``completion_summary.csv`` and the two figures to ``out_dir`` and replaces the
    ``summary`` of a ``completion.json`` there, so that a change of the summary or the plots
    reaches committed results without running the fits again.
    """
    with open(rows_csv, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["figure"], row["repeat"] = int(row["figure"]), int(row["repeat"])
        for key in ("epsilon", "missing_ratio", "rmse_mean_predictor", "rmse", "rmse_noisy", "seconds"):
            row[key] = float(row[key])
        row["holds"] = {"True": True, "False": False}.get(row["holds"])
    summary = summarise(rows)
    out = Path(out_dir)
    files = {"summary_csv": str(write_csv(out / "completion_summary.csv", summary))}
    files.update(plot_from_csv(files["summary_csv"], out))
    summary_json = out / "completion.json"
    if summary_json.exists():
        payload = json.loads(summary_json.read_text())
        payload["summary"] = summary
        files["json"] = str(write_json(summary_json, payload))
    return files


def plot_from_csv(summary_csv: str | Path, out_dir: str | Path) -> dict:
    """Redraw both PNGs from a ``completion_summary.csv`` written by :func:`run`."""
    with open(summary_csv, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["figure"] = int(row["figure"])
        for key in ("value", "rmse_avg", "rmse_std", "rmse_mean_predictor"):
            row[key] = float(row[key])
        row["n"] = int(row["n"])
    out = Path(out_dir)
    return {"figure2_png": str(_plot(rows, 2, out / "completion_figure2.png")),
            "figure3_png": str(_plot(rows, 3, out / "completion_figure3.png"))}


def run(
    out_dir: str | Path,
    *,
    quick: bool = False,
    n_repeats: int | None = None,
    random_state: RandomStateLike = 0,
    progress: bool = True,
) -> CompletionExperimentResult:
    """Run Figures 2 and 3 and write ``completion.csv``, ``completion_summary.csv``,
    ``completion_figure2.png``, ``completion_figure3.png`` and ``completion.json`` to ``out_dir``.

    Parameters
    ----------
    out_dir : str or Path
    quick : bool, default False
        A smoke-test grid (seconds) instead of the full one (minutes).
    n_repeats : int, optional
        Repeats per point (default 5 for Figure 2 and 3 for Figure 3; 1 with ``quick``).
    random_state : None, int or Generator
        Seeds both figures (identical seeds give identical files, apart from timings).
    progress : bool, default True
        Show a progress bar per figure (one step per fit; ``dptensor experiment --quiet`` turns
        it off).

    Returns
    -------
    CompletionExperimentResult
    """
    out = Path(out_dir)
    rng = check_random_state(random_state)
    seeds = rng.integers(2**31, size=2)
    start = time.perf_counter()
    rows = figure2(quick=quick, n_repeats=n_repeats, random_state=int(seeds[0]), progress=progress)
    rows += figure3(quick=quick, n_repeats=n_repeats, random_state=int(seeds[1]), progress=progress)
    summary = summarise(rows)
    files = {
        "csv": write_csv(out / "completion.csv", rows),
        "summary_csv": write_csv(out / "completion_summary.csv", summary),
        "figure2_png": _plot(summary, 2, out / "completion_figure2.png"),
        "figure3_png": _plot(summary, 3, out / "completion_figure3.png"),
    }
    payload = {"experiment": "Wei et al. Figures 2 and 3", "quick": quick,
               "seconds": time.perf_counter() - start, "settings": SETTINGS, "summary": summary}
    files["json"] = write_json(out / "completion.json", payload)
    return CompletionExperimentResult(rows=rows, summary=summary, files={k: str(v) for k, v in files.items()})


run_completion = run
