"""Privacy--utility trade-off of private tensor decomposition (Wang & Anandkumar 2016, Section 4).

An incoherent orthogonal tensor ``T = sum_i lambda_i v_i^{(x)3}`` (Haar-random orthonormal ``v_i``,
so the incoherence ``mu_0`` of Assumption 4.1 is small) is decomposed under the entry-level
relation (Definition 4.2) by

* ``ppm-exact`` -- Algorithm 3 with exact Gaussian-DP calibration;
* ``ppm-advanced`` -- Algorithm 3 with the paper's own constants;
* ``input-perturbation`` -- one symmetric Gaussian noise tensor, then the robust power method;
* ``non-private`` -- Algorithm 1 (the ceiling).

For each ``epsilon`` (``delta`` fixed) and trial we record the recovery of the first extracted
pair, ``|<v_1, v_hat_1>|`` and ``|lambda_1 - lambda_hat_1| / lambda_1`` (Theorem 4.2), and
report the fraction of trials with ``|<v_1, v_hat_1>| >= 0.9`` and the smallest ``epsilon`` of the
grid from which on that fraction stays above one half.

Under the entry relation the noise of every method is proportional to ``z(epsilon)`` while the
signal is proportional to the weights, so rescaling the weights only slides all curves along
the ``epsilon`` axis together. We use ``lambda_1 = d^{3/2}``, which makes the typical entry of
``T`` of the order of the unit change the relation protects. The seed fixes the tensors and the
restarts (public randomness); the privacy noise is fresh in every run.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dptensor._files import pyplot, save_figure, write_csv, write_json
from dptensor._progress import progress_bar
from dptensor._validation import check_random_state
from dptensor.datasets import make_orthogonal_tensor
from dptensor.decomposition.input_perturbation import input_perturbation
from dptensor.decomposition.power_method import PowerMethodResult, power_method
from dptensor.decomposition.private_power_method import private_power_method
from dptensor.privacy import PrivacyWarning
from dptensor.privacy.calibration import composed_noise_multiplier
from dptensor.privacy.warnings import EPSILON_WARNING_THRESHOLD
from dptensor.tensor import DenseTensor

METHODS = ("ppm-exact", "ppm-advanced", "input-perturbation", "non-private")
SUCCESS_COSINE = 0.9


@dataclass(frozen=True)
class PrivacyUtilityResult:
    """Aggregated recovery per (method, epsilon), the smallest recovering epsilon, file paths.

    Attributes
    ----------
    rows : list of dict
        One record per (method, epsilon): ``success_rate``, ``cosine_median``, ``cosine_q25``,
        ``cosine_q75``, ``weight_error_median`` (relative), ``trials``.
    smallest_epsilon : dict
        ``method -> epsilon`` (``None`` if never reached on the grid).
    settings : dict
    files : dict
        ``csv``, ``trials_csv``, ``png``, ``md``, ``json``.
    """

    rows: list
    smallest_epsilon: dict
    settings: dict
    files: dict


def incoherence(factors: np.ndarray) -> float:
    """``mu_0 = (d/k) max_i ||V^T e_i||^2`` (Assumption 4.1)."""
    dim, rank = factors.shape
    return float(dim / rank * np.max(np.sum(factors**2, axis=1)))


def _first_pair(result: PowerMethodResult) -> tuple[float, np.ndarray]:
    first = int(np.flatnonzero(result.extraction_order == 0)[0])
    return float(result.weights[first]), result.factors[:, first]


def run(
    out_dir: str | Path,
    *,
    quick: bool = False,
    dim: int = 100,
    rank: int = 5,
    epsilons: Sequence[float] | None = None,
    delta: float = 1e-6,
    n_trials: int | None = None,
    n_restarts: int = 10,
    n_iter: int = 10,
    weight_scale: float | None = None,
    random_state: int = 0,
    progress: bool = True,
) -> PrivacyUtilityResult:
    """Run the privacy--utility comparison and write CSV, PNG, Markdown and JSON to ``out_dir``.

    Parameters
    ----------
    out_dir : path
    quick : bool, default False
        Small grid for a smoke test (``d = 30``, 5 epsilons, 3 trials).
    dim, rank : int
        ``d`` and ``k`` of the synthetic tensor (default 100 and 5).
    epsilons : sequence of float, optional
        Default: 13 values log-spaced from 0.01 to 1e3.
    delta : float, default 1e-6
    n_trials : int, optional
        Independent tensors and seeds per (method, epsilon); default 10 (3 when ``quick``).
    n_restarts, n_iter : int
        ``L`` and ``R`` of Algorithm 3 (default 10 and 10: ``K = k L (R+1) = 550`` releases).
        The non-private and input-perturbation runs use the same ``L``, at most 30 steps with
        early stopping (they are not charged per step).
    weight_scale : float, optional
        ``lambda_1``; the weights are ``lambda_1 * linspace(1, 0.5, k)``. Default ``d^{3/2}``.
    random_state : int
    progress : bool
        Show a progress bar.
    """
    out_dir = Path(out_dir)
    if quick:
        dim, n_trials = min(dim, 30), n_trials or 3
        epsilons = epsilons if epsilons is not None else np.geomspace(0.1, 1e3, 5)
    n_trials = n_trials or 10
    epsilons = np.asarray(epsilons if epsilons is not None else np.geomspace(0.01, 1e3, 13), dtype=float)
    weight_scale = float(weight_scale if weight_scale is not None else dim**1.5)
    weights = weight_scale * np.linspace(1.0, 0.5, rank)
    rng = check_random_state(random_state)
    seeds = rng.integers(2**32, size=n_trials)

    runners: dict[str, Callable[[np.ndarray, float, int], PowerMethodResult]] = {
        "ppm-exact": lambda t, e, s: private_power_method(
            t, rank, epsilon=e, delta=delta, n_restarts=n_restarts, n_iter=n_iter,
            accountant="exact", random_state=s),
        "ppm-advanced": lambda t, e, s: private_power_method(
            t, rank, epsilon=e, delta=delta, n_restarts=n_restarts, n_iter=n_iter,
            accountant="advanced", random_state=s),
        "input-perturbation": lambda t, e, s: input_perturbation(
            t, rank, epsilon=e, delta=delta, n_restarts=n_restarts, n_iter=30, random_state=s),
    }
    trials: list[dict] = []
    start = time.perf_counter()
    mu0 = []
    bar = progress_bar(total=n_trials * (len(epsilons) * len(runners) + 1), enabled=progress,
                       desc="privacy-utility")
    # the grid reaches past epsilon = 10 on purpose (to find where recovery starts); the library's
    # warning that such an epsilon guarantees little would repeat for every fit of every trial
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=rf".*epsilon=\S+ exceeds {EPSILON_WARNING_THRESHOLD:g};",
                                category=PrivacyWarning)
        for trial, seed in enumerate(seeds):
            data = make_orthogonal_tensor(dim, rank, weights=weights, random_state=int(seed))
            tensor = DenseTensor(data.tensor, check_symmetry=False)
            v1, lam1 = data.factors[:, 0], float(data.weights[0])
            mu0.append(incoherence(data.factors))
            baseline = power_method(tensor, rank, n_restarts=n_restarts, n_iter=30,
                                    random_state=int(seed) + 1)
            outcomes = [("non-private", math.inf, baseline)]
            bar.update()
            for method, runner in runners.items():
                for eps in epsilons:
                    outcomes.append((method, float(eps), runner(tensor, float(eps), int(seed) + 1)))
                    bar.update()
            for method, eps, result in outcomes:
                lam, vec = _first_pair(result)
                trials.append({
                    "method": method, "epsilon": eps, "trial": trial,
                    "cosine": abs(float(v1 @ vec)), "weight_error": abs(lam1 - lam) / lam1,
                })
        bar.close()
    elapsed = time.perf_counter() - start

    rows = []
    for method in METHODS:
        grid = [math.inf] if method == "non-private" else list(map(float, epsilons))
        for eps in grid:
            sel = [t for t in trials if t["method"] == method and t["epsilon"] == eps]
            cos = np.array([t["cosine"] for t in sel])
            err = np.array([t["weight_error"] for t in sel])
            rows.append({
                "method": method, "epsilon": eps, "trials": len(sel),
                "success_rate": float(np.mean(cos >= SUCCESS_COSINE)),
                "cosine_median": float(np.median(cos)), "cosine_q25": float(np.quantile(cos, 0.25)),
                "cosine_q75": float(np.quantile(cos, 0.75)),
                "weight_error_median": float(np.median(err)),
            })
    smallest = {}
    for method in METHODS[:3]:
        rates = [(r["epsilon"], r["success_rate"]) for r in rows if r["method"] == method]
        ok = [e for i, (e, _) in enumerate(rates) if all(rate > 0.5 for _, rate in rates[i:])]
        smallest[method] = ok[0] if ok else None
    n_releases = rank * n_restarts * (n_iter + 1)
    settings = {
        "dim": dim, "rank": rank, "weights": weights.tolist(), "delta": delta, "n_trials": n_trials,
        "n_restarts": n_restarts, "n_iter": n_iter, "n_releases": n_releases,
        "neighbouring": "entry", "success_cosine": SUCCESS_COSINE,
        "mu0_median": float(np.median(mu0)), "mu0_max": float(np.max(mu0)),
        "noise_ratio_advanced_over_exact": composed_noise_multiplier(1.0, delta, n_releases, "advanced")
        / composed_noise_multiplier(1.0, delta, n_releases, "exact"),
        "seconds": elapsed,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "csv": write_csv(out_dir / "privacy_utility.csv", rows),
        "trials_csv": write_csv(out_dir / "privacy_utility_trials.csv", trials),
        "md": _write_markdown(out_dir / "privacy_utility.md", rows, smallest, settings),
        "json": write_json(out_dir / "privacy_utility.json",
                           {"settings": settings, "smallest_epsilon": smallest, "rows": rows}),
    }
    files["png"] = _plot(out_dir / "privacy_utility.png", rows, settings)
    return PrivacyUtilityResult(rows, smallest, settings, {k: str(v) for k, v in files.items()})


def _write_markdown(path: Path, rows: list, smallest: dict, settings: dict) -> Path:
    methods = METHODS[:3]
    lines = [
        f"d={settings['dim']}, k={settings['rank']}, lambda_1={settings['weights'][0]:.4g}, "
        f"delta={settings['delta']:g}, L={settings['n_restarts']}, R={settings['n_iter']} "
        f"(K={settings['n_releases']} releases), {settings['n_trials']} trials, entry relation, "
        f"median mu_0={settings['mu0_median']:.2f}.",
        "",
        "Cells: median |<v1, v1_hat>| (fraction of trials with |<v1, v1_hat>| >= "
        f"{settings['success_cosine']}) / median |lambda1 - lambda1_hat| / lambda1.",
        "",
        "| epsilon | " + " | ".join(methods) + " |",
        "|---:|" + "---|" * len(methods),
    ]
    epsilons = sorted({r["epsilon"] for r in rows if r["method"] != "non-private"})
    for eps in epsilons:
        cells = []
        for m in methods:
            r = next(x for x in rows if x["method"] == m and x["epsilon"] == eps)
            cells.append(
                f"{r['cosine_median']:.3f} ({r['success_rate']:.2f}) / {r['weight_error_median']:.3g}"
            )
        lines.append(f"| {eps:.3g} | " + " | ".join(cells) + " |")
    base = next(x for x in rows if x["method"] == "non-private")
    lines += [
        "",
        f"Non-private power method: median |<v1, v1_hat>| = {base['cosine_median']:.4f} "
        f"(success {base['success_rate']:.2f}), median relative weight error "
        f"{base['weight_error_median']:.2g}.",
        "",
        "Smallest epsilon on the grid from which each method recovers v1 in more than half the trials:",
        "",
    ]
    lines += [f"- {m}: {'not reached' if e is None else f'{e:.3g}'}" for m, e in smallest.items()]
    if max(epsilons) > EPSILON_WARNING_THRESHOLD:
        lines += ["", f"The grid goes past epsilon = {EPSILON_WARNING_THRESHOLD:g} on purpose, to show where "
                  "recovery begins; a budget that large guarantees little (outside this experiment dptensor "
                  "warns about it: dptensor.privacy.warnings.check_privacy_parameters)."]
    path.write_text("\n".join(lines) + "\n")
    return path


def _plot(path: Path, rows: list, settings: dict) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"ppm-exact": "C0-o", "ppm-advanced": "C1-s", "input-perturbation": "C2-^"}
    for method, style in styles.items():
        sel = [r for r in rows if r["method"] == method]
        eps = [r["epsilon"] for r in sel]
        axes[0].plot(eps, [r["cosine_median"] for r in sel], style, label=method, ms=4)
        axes[0].fill_between(eps, [r["cosine_q25"] for r in sel], [r["cosine_q75"] for r in sel],
                             color=style[:2], alpha=0.15)
        axes[1].plot(eps, [r["weight_error_median"] for r in sel], style, label=method, ms=4)
    base = next(r for r in rows if r["method"] == "non-private")
    axes[0].axhline(base["cosine_median"], color="k", ls="--", lw=1, label="non-private")
    axes[1].axhline(max(base["weight_error_median"], 1e-12), color="k", ls="--", lw=1, label="non-private")
    axes[0].set(xscale="log", xlabel="epsilon", ylabel="|<v1, v1_hat>| (median, IQR)", ylim=(0, 1.02))
    axes[1].set(xscale="log", yscale="log", xlabel="epsilon", ylabel="|lambda1 - lambda1_hat| / lambda1")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(
        f"Private tensor power method, d={settings['dim']}, k={settings['rank']}, "
        f"delta={settings['delta']:g}, L={settings['n_restarts']}, R={settings['n_iter']}, entry relation",
        fontsize=10,
    )
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)
