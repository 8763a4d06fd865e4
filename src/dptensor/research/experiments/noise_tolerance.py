"""Phase transitions of the robust tensor power method (Wang & Anandkumar 2016, Appendix A, Fig. 1).

``T = v1^{(x)3} + 0.75 v2^{(x)3} + 0.5 v3^{(x)3} + E`` with canonical ``v_i`` and ``||E||_op = sigma``
under the three noise models of :func:`dptensor.datasets.make_orthogonal_tensor`. A trial succeeds
when every recovered component satisfies ``v_hat_i^T v_i >= 1/4`` (components paired by the
Hungarian method; the sign is the one the power method returns, for which ``T(v,v,v) > 0``).
The failure probability is plotted against ``sigma``, ``sigma sqrt(d)``, ``sigma d`` and
``sigma ln d``: the scaling under which the curves for different ``d`` coincide shows how the
tolerable noise scales with ``d``. Theorem 2.2 predicts ``d^{-1/2}`` for Gaussian noise, ``d^{-1}``
for the adversarial model and ``1/log d``-like behaviour for weakly correlated noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dptensor._files import pyplot, save_figure, write_csv, write_json
from dptensor._progress import progress_bar
from dptensor.datasets import NOISE_MODELS, make_orthogonal_tensor
from dptensor.decomposition import power_method
from dptensor.metrics import match_components
from dptensor.tensor import DenseTensor

WEIGHTS = (1.0, 0.75, 0.5)
SUCCESS_THRESHOLD = 0.25
SCALINGS = {
    "sigma": lambda d: 1.0,
    "sigma*sqrt(d)": np.sqrt,
    "sigma*d": lambda d: float(d),
    "sigma*ln(d)": np.log,
}


@dataclass(frozen=True)
class NoiseToleranceResult:
    """Failure rates on the grid and the fitted scaling of the transition point.

    Attributes
    ----------
    rows : list of dict
        One record per (noise model, d, sigma): ``failures``, ``trials``, ``failure_rate``.
    transitions : dict
        ``transitions[model][d]``: the smallest ``sigma`` at which the failure rate reaches 1/2
        (interpolated in ``log sigma``), ``nan`` if it never does on the grid.
    exponents : dict
        ``exponents[model]``: least-squares slopes of ``log sigma*`` against ``log d``
        (``"d"``) and against ``log ln d`` (``"ln_d"``), and the paper's prediction.
    files : dict
        Paths written (``csv``, ``png``, ``json``).
    """

    rows: list
    transitions: dict
    exponents: dict
    files: dict


PREDICTIONS = {
    "gaussian": "sigma* ~ d^-1/2",
    "adversarial": "sigma* ~ d^-1",
    "weakly_correlated": "sigma* ~ 1/log d",
}


def run(
    out_dir: str | Path,
    *,
    quick: bool = False,
    dims: Sequence[int] | None = None,
    sigmas: Sequence[float] | None = None,
    n_trials: int | None = None,
    noise_models: Sequence[str] = NOISE_MODELS,
    n_restarts: int | None = None,
    n_iter: int | None = None,
    tol: float = 1e-8,
    random_state: int = 0,
    progress: bool = True,
) -> NoiseToleranceResult:
    """Run the Appendix A experiment and write ``noise_tolerance.{csv,png,json}`` to ``out_dir``.

    Parameters
    ----------
    out_dir : str or Path
    quick : bool, default False
        A small grid (``d`` in 8, 16, 32; 10 noise levels; 4 trials) that runs in seconds.
    dims : sequence of int, optional
        Default ``(25, 50, 100, 200)`` as in the paper.
    sigmas : sequence of float, optional
        Noise levels ``||E||_op``; default 25 log-spaced values in ``[0.003, 3]``.
    n_trials : int, optional
        Trials per point; default 20 as in the paper.
    noise_models : sequence of str
        Any of ``"gaussian"``, ``"adversarial"``, ``"weakly_correlated"``.
    n_restarts, n_iter, tol
        Passed to :func:`dptensor.power_method` (defaults: its theory-based ``L`` and ``R``
        with early stopping). ``n_iter=10, tol=0`` runs a fixed, short budget of power steps.
    random_state : int
        Base seed; trial ``t`` of dimension ``d`` uses its own derived seed.
    progress : bool
        Show a progress bar.

    Returns
    -------
    NoiseToleranceResult
    """
    dims = tuple(dims or ((8, 16, 32) if quick else (25, 50, 100, 200)))
    sigmas = np.asarray(sigmas if sigmas is not None else np.geomspace(0.003, 3.0, 10 if quick else 25))
    n_trials = n_trials or (4 if quick else 20)
    out_dir = Path(out_dir)
    rows = []
    jobs = [(model, dim, trial) for model in noise_models for dim in dims for trial in range(n_trials)]
    failures: dict[tuple[str, int], np.ndarray] = {}
    for model, dim, trial in progress_bar(jobs, desc="noise tolerance", enabled=progress):
        seed = [random_state, dim, trial]
        case = make_orthogonal_tensor(
            dim, 3, weights=np.array(WEIGHTS), noise=1.0, noise_model=model,
            components="canonical", random_state=np.random.default_rng(seed),
        )
        signal = case.tensor - case.noise_tensor  # ||noise_tensor||_op = 1
        restarts = np.random.default_rng([*seed, 1])
        failed = failures.setdefault((model, dim), np.zeros(len(sigmas), dtype=int))
        for index, sigma in enumerate(sigmas):
            tensor = DenseTensor(signal + sigma * case.noise_tensor, check_symmetry=False)
            result = power_method(
                tensor, 3, n_restarts=n_restarts, n_iter=n_iter, tol=tol, random_state=restarts
            )
            failed[index] += not _succeeded(case.factors, result.factors)
    for (model, dim), failed in failures.items():
        for sigma, count in zip(sigmas, failed, strict=True):
            rows.append({"noise_model": model, "dim": dim, "sigma": float(sigma), "failures": int(count),
                         "trials": n_trials, "failure_rate": count / n_trials})
    transitions = {
        model: {dim: _transition(sigmas, failures[(model, dim)] / n_trials) for dim in dims}
        for model in noise_models
    }
    exponents = {model: _fit_exponents(transitions[model]) for model in noise_models}
    files = {
        "csv": write_csv(out_dir / "noise_tolerance.csv", rows),
        "json": write_json(
            out_dir / "noise_tolerance.json",
            {
                "experiment": "noise tolerance (Wang & Anandkumar 2016, Appendix A, Figure 1)",
                "weights": WEIGHTS, "success": "v_hat_i . v_i >= 1/4 for all i",
                "dims": dims, "n_trials": n_trials, "sigmas": sigmas,
                "power_method": {"n_restarts": n_restarts, "n_iter": n_iter, "tol": tol},
                "transition_sigma": {m: {str(d): s for d, s in t.items()} for m, t in transitions.items()},
                "fitted_exponents": exponents,
            },
        ),
    }
    files["png"] = _plot(out_dir / "noise_tolerance.png", rows, noise_models, dims)
    return NoiseToleranceResult(rows, transitions, exponents, files)


def _succeeded(true_factors: np.ndarray, est_factors: np.ndarray) -> bool:
    match = match_components(true_factors, est_factors)
    signed = np.einsum("ij,ij->j", true_factors[:, match.true_index], est_factors[:, match.est_index])
    return bool(np.all(signed >= SUCCESS_THRESHOLD))


def _transition(sigmas: np.ndarray, failure_rate: np.ndarray) -> float:
    """Smallest sigma where the failure rate reaches 1/2, interpolated in log sigma."""
    above = np.flatnonzero(failure_rate >= 0.5)
    if above.size == 0:
        return float("nan")
    j = int(above[0])
    if j == 0:
        return float(sigmas[0])
    lo, hi = failure_rate[j - 1], failure_rate[j]
    frac = (0.5 - lo) / (hi - lo)
    return float(np.exp(np.log(sigmas[j - 1]) + frac * (np.log(sigmas[j]) - np.log(sigmas[j - 1]))))


def _fit_exponents(transition: dict) -> dict:
    dims = np.array([d for d, s in transition.items() if np.isfinite(s)], dtype=float)
    values = np.array([s for s in transition.values() if np.isfinite(s)])
    out: dict = {"points": int(dims.size)}
    if dims.size >= 2:
        out["d"] = float(np.polyfit(np.log(dims), np.log(values), 1)[0])
        out["ln_d"] = float(np.polyfit(np.log(np.log(dims)), np.log(values), 1)[0])
    return out


def _plot(path: Path, rows: list, noise_models: Sequence[str], dims: Sequence[int]) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(
        len(noise_models), len(SCALINGS), figsize=(4 * len(SCALINGS), 3 * len(noise_models)),
        squeeze=False, constrained_layout=True,
    )
    for r, model in enumerate(noise_models):
        for c, (label, factor) in enumerate(SCALINGS.items()):
            ax = axes[r, c]
            for dim in dims:
                sub = [row for row in rows if row["noise_model"] == model and row["dim"] == dim]
                ax.plot([row["sigma"] * factor(dim) for row in sub], [row["failure_rate"] for row in sub],
                        marker="o", markersize=3, label=f"d={dim}")
            ax.set_xscale("log")
            ax.set_ylim(-0.05, 1.05)
            ax.set_xlabel(label)
            if c == 0:
                ax.set_ylabel(f"{model}\nfailure probability")
            if r == 0 and c == 0:
                ax.legend(fontsize=8)
    fig.suptitle("Robust tensor power method: failure probability against scaled noise ||E||_op")
    return save_figure(fig, path)
