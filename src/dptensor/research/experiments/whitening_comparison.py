"""Whitening by random marginalisation against the power method (Wang & Anandkumar 2016, App. B).

With only the noisy tensor ``T~ = sum_i lambda_i v_i^{(x)3} + E`` available, a common route to a
``k``-dimensional problem collapses one view: ``M(theta) = T~(I, I, theta)`` for ``theta`` uniform
on the sphere, keeps its top-``k`` eigenspace ``W_hat`` (by eigenvalue magnitude: the signal part
``sum_i lambda_i (v_i^T theta) v_i v_i^T`` has eigenvalues of either sign) and decomposes the
projected ``k x k x k`` tensor ``T~(U, U, U)`` (``U`` an orthonormal basis of ``W_hat``), mapping
eigenvectors back with ``U``. Proposition B.1 bounds the subspace error by
``||Pi_W - Pi_W_hat|| = O~(sqrt(d) ||E||_op / lambda_min)``, because ``|v_i^T theta| ~ 1/sqrt(d)``
shrinks the signal of ``M(theta)`` while the noise ``E(I, I, theta)`` keeps its size; the power
method on ``T~`` itself has error ``O(||E||_op / lambda_i)`` (Theorem 2.2). This experiment measures
both errors against ``||E||_op`` for several ``d``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dptensor._files import pyplot, save_figure, write_csv, write_json
from dptensor._progress import progress_bar
from dptensor.datasets import make_orthogonal_tensor
from dptensor.decomposition import power_method
from dptensor.decomposition.whitening import whiten
from dptensor.metrics import match_components
from dptensor.tensor import DenseTensor, WhitenedTensor, random_unit_vectors

WEIGHTS = (1.0, 0.75, 0.5)
METHODS = ("power method", "random marginalisation")


@dataclass(frozen=True)
class WhiteningComparisonResult:
    """Per-trial errors and their medians.

    Attributes
    ----------
    rows : list of dict
        One record per (d, sigma, trial, method): ``subspace_error`` (spectral norm of the
        difference of projections onto the true and the estimated span), ``max_error``
        (largest ``||v_i - v_hat_i||`` up to sign, after Hungarian matching).
    summary : dict
        Median errors per (method, d, sigma) and the median ratio marginalisation / power
        method of ``max_error`` per ``d``.
    files : dict
        Paths written (``csv``, ``png``, ``json``).
    """

    rows: list
    summary: dict
    files: dict


def run(
    out_dir: str | Path,
    *,
    quick: bool = False,
    dims: Sequence[int] | None = None,
    sigmas: Sequence[float] | None = None,
    n_trials: int | None = None,
    random_state: int = 0,
    progress: bool = True,
) -> WhiteningComparisonResult:
    """Run the Appendix B comparison; write ``whitening.{csv,png,json}`` to ``out_dir``.

    Parameters
    ----------
    out_dir : str or Path
    quick : bool, default False
        ``d`` in 10, 20; 5 noise levels; 3 trials.
    dims : sequence of int, optional
        Default ``(25, 50, 100, 200)``.
    sigmas : sequence of float, optional
        ``||E||_op`` (Gaussian noise model); default 9 log-spaced values in ``[1e-3, 0.3]``.
    n_trials : int, optional
        Default 10.
    random_state : int
    progress : bool

    Returns
    -------
    WhiteningComparisonResult
    """
    dims = tuple(dims or ((10, 20) if quick else (25, 50, 100, 200)))
    sigmas = np.asarray(sigmas if sigmas is not None else np.geomspace(1e-3, 0.3, 5 if quick else 9))
    n_trials = n_trials or (3 if quick else 10)
    rows = []
    for dim in progress_bar(dims, desc="whitening comparison", enabled=progress):
        for trial in range(n_trials):
            seed = [random_state, dim, trial]
            case = make_orthogonal_tensor(
                dim, 3, weights=np.array(WEIGHTS), noise=1.0, random_state=np.random.default_rng(seed)
            )
            signal = case.tensor - case.noise_tensor
            rng = np.random.default_rng([*seed, 1])
            for sigma in sigmas:
                tensor = DenseTensor(signal + sigma * case.noise_tensor, check_symmetry=False)
                direct = power_method(tensor, 3, random_state=rng).factors
                theta = random_unit_vectors(dim, 1, rng)[:, 0]
                basis = whiten(tensor.marginal(theta), 3, scale=False).matrix
                projected = power_method(WhitenedTensor(tensor, basis), 3, random_state=rng)
                for method, estimate in zip(METHODS, (direct, basis @ projected.factors), strict=True):
                    match = match_components(case.factors, estimate)
                    rows.append({
                        "dim": dim, "sigma": float(sigma), "trial": trial, "method": method,
                        "subspace_error": _subspace_error(case.factors, estimate),
                        "max_error": match.max_distance,
                    })
    summary = _summarise(rows, dims, sigmas)
    out_dir = Path(out_dir)
    files = {
        "csv": write_csv(out_dir / "whitening.csv", rows),
        "json": write_json(out_dir / "whitening.json", {
            "experiment": "whitening by random marginalisation vs power method "
                          "(Wang & Anandkumar 2016, Appendix B)",
            "weights": WEIGHTS, "noise_model": "gaussian", "dims": dims, "sigmas": sigmas,
            "n_trials": n_trials, **summary,
        }),
    }
    files["png"] = _plot(out_dir / "whitening.png", summary, dims, sigmas)
    return WhiteningComparisonResult(rows, summary, files)


def _subspace_error(true_factors: np.ndarray, estimate: np.ndarray) -> float:
    """``||Pi_W - Pi_W_hat||_2`` for the column spans of the two matrices."""
    q_true, _ = np.linalg.qr(true_factors)
    q_est, _ = np.linalg.qr(estimate)
    return float(np.linalg.norm(q_true @ q_true.T - q_est @ q_est.T, 2))


def _summarise(rows: list, dims: Sequence[int], sigmas: np.ndarray) -> dict:
    median = {
        method: {
            str(dim): {
                key: [float(np.median([r[key] for r in rows if r["method"] == method and r["dim"] == dim
                                       and r["sigma"] == float(s)])) for s in sigmas]
                for key in ("subspace_error", "max_error")
            }
            for dim in dims
        }
        for method in METHODS
    }
    ratio = {
        str(dim): float(np.median(np.array(median[METHODS[1]][str(dim)]["max_error"])
                                  / np.array(median[METHODS[0]][str(dim)]["max_error"])))
        for dim in dims
    }
    return {"median": median, "median_error_ratio_marginalisation_over_power": ratio}


def _plot(path: Path, summary: dict, dims: Sequence[int], sigmas: np.ndarray) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for ax, key, title in zip(axes, ("max_error", "subspace_error"),
                              ("max_i ||v_i - v_hat_i||", "||Pi_W - Pi_W_hat||"), strict=True):
        for dim, colour in zip(dims, plt.cm.viridis(np.linspace(0, 0.9, len(dims))), strict=True):
            for method, style in zip(METHODS, ("-", "--"), strict=True):
                ax.plot(sigmas, summary["median"][method][str(dim)][key], style, color=colour, marker="o",
                        markersize=3, label=f"{method}, d={dim}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("||E||_op")
        ax.set_title(f"median {title}")
    axes[0].legend(fontsize=7)
    fig.suptitle("Power method (solid) vs whitening by random marginalisation (dashed)")
    return save_figure(fig, path)
