"""Benchmark: dptensor's SGD tensor completion against TensorLy's masked CP and Tucker.

One run, two parts:

1. Non-private completion of synthetic low-rank tensors (unit-RMS CP / Tucker, SNR 10 by
   variance) with 50% and 90% of the cells missing: held-out RMSE against the noiseless tensor on
   the missing cells, and wall time, for ``TensorCompletion`` (SGD over the observed entries) and
   TensorLy 0.10 ``parafac(..., mask=...)`` / ``tucker(..., mask=...)`` (ALS / HOOI with the
   missing cells imputed from the current model, on the dense tensor).
2. Training time of ``TensorCompletion`` on a MovieLens-shaped problem: ``943 x 1682 x 212`` with
   ``10^5`` observed entries (synthetic, no download; 80% used for training). TensorLy is not run
   there: its masked solvers work on the dense tensor, 336 million cells (2.7 GB per float64
   copy).

Usage::

    python benchmarks/bench_completion.py [--out benchmarks/results/completion.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from dptensor.datasets.entries import make_low_rank_completion, train_test_split_entries
from dptensor.models.completion import TensorCompletion, rmse


def _held_out(prob, observed_mask: np.ndarray, rng: np.random.Generator, n: int = 20_000):
    missing = np.argwhere(~observed_mask)
    pick = missing[rng.choice(missing.shape[0], size=min(n, missing.shape[0]), replace=False)]
    return pick, prob.truth_tensor[tuple(pick.T)]


def synthetic_rows(shape, rank, missing_ratios, n_epochs, seed=0) -> list[dict]:
    import tensorly as tl
    from tensorly.decomposition import parafac, tucker

    rows = []
    for model in ("cp", "tucker"):
        for ratio in missing_ratios:
            prob = make_low_rank_completion(shape, rank, model=model, snr=10.0, missing_ratio=ratio,
                                            min_max=False, random_state=seed)
            obs = prob.observed
            mask = np.zeros(shape, dtype=bool)
            mask[tuple(obs.indices.T)] = True
            cells, truth = _held_out(prob, mask, np.random.default_rng(seed + 1))
            noise_floor = prob.noise_std

            # dptensor: SGD over the observed entries only
            lr = 0.005  # the paper's learning rate; larger ones raise SGD's error floor
            start = time.perf_counter()
            fit = TensorCompletion(rank, model=model, reg=0.01, learning_rate=lr, n_epochs=n_epochs,
                                   batch_size=256, random_state=seed).fit(obs.indices, obs.values, shape)
            ours_time = time.perf_counter() - start
            ours_rmse = rmse(truth, fit.predict(cells))

            # TensorLy: masked ALS (CP) / HOOI (Tucker) on the dense tensor, zeros in the missing cells
            dense = np.where(mask, obs.to_dense(fill=0.0), 0.0)
            start = time.perf_counter()
            if model == "cp":
                cp = parafac(tl.tensor(dense), rank, mask=tl.tensor(mask.astype(float)), n_iter_max=200,
                             init="random", tol=1e-8, random_state=seed)
                full = tl.cp_to_tensor(cp)
            else:
                tk = tucker(tl.tensor(dense), rank=[rank] * 3, mask=tl.tensor(mask.astype(float)),
                            n_iter_max=200, init="random", tol=1e-8, random_state=seed)
                full = tl.tucker_to_tensor(tk)
            tl_time = time.perf_counter() - start
            tl_rmse = rmse(truth, np.asarray(full)[tuple(cells.T)])
            rows.append({
                "model": model, "shape": list(shape), "rank": rank, "missing_ratio": ratio,
                "n_observed": len(obs), "noise_std": noise_floor,
                "dptensor_rmse": ours_rmse, "dptensor_seconds": ours_time, "dptensor_epochs": n_epochs,
                "tensorly_rmse": tl_rmse, "tensorly_seconds": tl_time, "tensorly_iters_max": 200,
                "time_ratio_tensorly_over_dptensor": tl_time / ours_time,
            })
            print(f"{model:6s} missing {ratio:.0%}: dptensor RMSE {ours_rmse:.4f} in {ours_time:.2f} s | "
                  f"TensorLy RMSE {tl_rmse:.4f} in {tl_time:.2f} s (noise std {noise_floor:.3f})", flush=True)
    return rows


def movielens_rows(n_epochs: int, seed: int = 0) -> list[dict]:
    shape = (943, 1682, 212)
    rows = []
    for model, rank in (("cp", 10), ("tucker", 5)):
        prob = make_low_rank_completion(shape, rank, model=model, n_observed=100_000, snr=4.0,
                                        min_max=False, random_state=seed)
        train, test = train_test_split_entries(prob.observed, 0.2, random_state=seed)
        for privacy, extra in ((None, {}), ("gradient_dpsgd", {"epsilon": 1.0, "clip": 1.0}),
                               ("input", {"epsilon": 1.0, "value_range": (-4.0, 4.0)})):
            start = time.perf_counter()
            fit = TensorCompletion(rank, model=model, privacy=privacy, n_epochs=n_epochs, batch_size=1024,
                                   learning_rate=0.005, reg=0.01, random_state=seed, **extra)
            fit.fit(train.indices, train.values, shape)
            seconds = time.perf_counter() - start
            err = rmse(prob.truth_at(test.indices), fit.predict(test.indices))
            rows.append({"model": model, "rank": rank, "privacy": privacy or "none", "shape": list(shape),
                         "n_train": len(train), "epochs": n_epochs, "batch_size": 1024, "seconds": seconds,
                         "seconds_per_epoch": seconds / n_epochs, "test_rmse_vs_truth": err,
                         "truth_std": float(np.std(prob.truth.values))})
            print(f"MovieLens-shaped {model} rank {rank} {privacy or 'none':14s}: {seconds:.2f} s for "
                  f"{n_epochs} epochs over {len(train)} entries ({seconds / n_epochs * 1e3:.0f} ms/epoch), "
                  f"test RMSE {err:.4f} (truth std {np.std(prob.truth.values):.3f})", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/completion.json")
    parser.add_argument("--quick", action="store_true", help="small sizes, few epochs")
    args = parser.parse_args()
    shape = (20, 20, 20) if args.quick else (40, 40, 40)
    epochs = 10 if args.quick else 100
    synthetic = synthetic_rows(shape, 4, (0.5, 0.9), epochs)
    movielens = movielens_rows(2 if args.quick else 100)
    payload = {"python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine(),
               "synthetic": synthetic, "movielens_shaped": movielens}
    try:
        import tensorly

        payload["tensorly"] = tensorly.__version__
    except ImportError:  # pragma: no cover
        pass
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
