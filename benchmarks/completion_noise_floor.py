"""How much test error the entry-value privacy noise must add to user biases on MovieLens-100K.

An idealised lower bound for the offsets release of ``TensorCompletion(privacy="als",
neighbouring="entry-value")`` (docs/completion.md, "Private offsets under entry-value"): suppose
every user's sum received *all* of the budget of every rating of that user (in the library it
receives most, but the item and day sums take a share), and the item and day biases and the mean
were known exactly. One rating may move by the declared width ``W``, so the Laplace noise on the
user's mean rating has variance ``v_u = 2 W^2 / (epsilon n_u)^2``. With a Gaussian prior of
variance ``tau^2`` for the part of the user's bias that the public pattern does not predict, the
Bayes estimate's excess squared error is ``tau^2 v_u / (tau^2 + v_u)``. The test sets ``ua`` and
``ub`` hold 10 ratings of every user, so the excess test MSE is the plain mean over users.

Usage::

    python benchmarks/completion_noise_floor.py [--cache ~/.cache/dptensor]

Prints, per split, width and ``tau^2``, the excess MSE and the RMSE it implies on top of the
non-private biases' MSE (``0.9638^2`` on the ua/ub mean, docs/completion.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from bench_completion import movielens_100k, splits  # this folder is on the path when run as a script

#: Non-private biases (mean + user + item + day by ALS), ua/ub mean RMSE (docs/completion.md).
BIASES_RMSE = 0.9638


def user_noise_excess(counts: np.ndarray, epsilon: float, width: float, prior_var: float) -> float:
    """Mean over users of ``tau^2 v_u / (tau^2 + v_u)`` with ``v_u = 2 (width / (epsilon n_u))^2``."""
    noise_var = 2.0 * (width / (epsilon * counts)) ** 2
    return float(np.mean(prior_var * noise_var / (prior_var + noise_var)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "dptensor"))
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    print("split | width | tau^2 | excess MSE | implied RMSE floor")
    for split, (train, _) in splits(movielens_100k(Path(args.cache))).items():
        counts = np.bincount(train.indices[:, 0], minlength=train.shape[0])
        counts = counts[counts > 0]
        for width in (4.0, 3.0, 2.0):
            for prior_var in (0.12, 0.15):
                excess = user_noise_excess(counts, args.epsilon, width, prior_var)
                floor = np.sqrt(BIASES_RMSE**2 + excess)
                print(f"{split} | {width:g} | {prior_var:g} | {excess:.4f} | {floor:.4f}")


if __name__ == "__main__":
    main()
