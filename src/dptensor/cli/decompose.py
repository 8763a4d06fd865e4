"""``dptensor decompose``: the robust tensor power method on a tensor or a data moment."""

from __future__ import annotations

import argparse
import time

import numpy as np

from dptensor.cli._io import load_array, write_json
from dptensor.datasets import make_orthogonal_tensor
from dptensor.decomposition import power_method
from dptensor.metrics import match_components
from dptensor.tensor import DenseTensor, SampleMoment, SymmetricTensor

EXAMPLE_DIM, EXAMPLE_RANK, EXAMPLE_NOISE = 50, 3, 0.05


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "decompose",
        help="decompose a symmetric tensor with the robust tensor power method",
        description=(
            "Robust tensor power method (Wang & Anandkumar 2016, Algorithm 1) on a dense "
            "d x d x d tensor (.npy), on the third moment (1/n) sum x_i^(x)3 of a data matrix "
            "that is never formed (--moment-of), or on a built-in example (--example)."
        ),
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("tensor", nargs="?", help="dense symmetric tensor, .npy of shape (d, d, d)")
    source.add_argument(
        "--moment-of", metavar="X", help="data matrix (.npy dense or .npz sparse, rows are records)"
    )
    source.add_argument(
        "--example",
        action="store_true",
        help=f"a noisy orthogonal tensor, d={EXAMPLE_DIM}, k={EXAMPLE_RANK}, ||E||_op={EXAMPLE_NOISE}",
    )
    parser.add_argument("--rank", "-k", type=int, help="number of components (default 3 with --example)")
    parser.add_argument("--restarts", type=int, help="restarts L per component (default max(10, 2k ln k))")
    parser.add_argument("--iters", type=int, help="maximum power steps R (default ceil(log2(d/tol)) + 10)")
    parser.add_argument("--tol", type=float, default=1e-8, help="convergence tolerance (default 1e-8)")
    parser.add_argument("--seed", type=int, default=None, help="random seed")
    parser.add_argument("--out", metavar="FILE", help="write weights and factors as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    truth = None
    if args.example:
        example = make_orthogonal_tensor(
            EXAMPLE_DIM, EXAMPLE_RANK, noise=EXAMPLE_NOISE, random_state=args.seed
        )
        operator: SymmetricTensor = DenseTensor(example.tensor)
        truth = example
        rank = args.rank or EXAMPLE_RANK
        source = f"example: orthogonal tensor d={EXAMPLE_DIM}, k={EXAMPLE_RANK}, gaussian noise"
    elif args.moment_of:
        operator = SampleMoment(load_array(args.moment_of))
        rank = _require_rank(args)
        source = f"third moment of {args.moment_of} ({operator.n_samples} records, d={operator.dim})"
    else:
        operator = DenseTensor(load_array(args.tensor))
        rank = _require_rank(args)
        source = f"tensor {args.tensor} (d={operator.dim})"

    start = time.perf_counter()
    result = power_method(
        operator, rank, n_restarts=args.restarts, n_iter=args.iters, tol=args.tol, random_state=args.seed
    )
    elapsed = time.perf_counter() - start

    print(f"{source}\nrank {rank}, {elapsed:.3f} s")
    print(f"{'#':>3}  {'weight':>12}  {'steps':>5}  converged")
    for i, (weight, steps, done) in enumerate(
        zip(result.weights, result.n_iter, result.converged, strict=True), start=1
    ):
        print(f"{i:>3}  {weight:>12.6g}  {steps:>5d}  {'yes' if done else 'no'}")
    payload: dict = {
        "source": source,
        "rank": rank,
        "weights": result.weights,
        "factors": result.factors,
        "factors_layout": "d x k, column i is the unit component of weights[i]",
        "n_iter": result.n_iter,
        "converged": result.converged,
        "seconds": elapsed,
    }
    if truth is not None:
        match = match_components(truth.factors, result.factors, truth.weights, result.weights)
        print(
            f"recovery vs truth: min |<v, v_hat>| = {match.min_inner:.6f}, "
            f"max |lambda - lambda_hat| = {np.max(match.weight_error):.2e}"
        )
        payload["recovery"] = {"inner": match.inner, "weight_error": match.weight_error}
    if args.out:
        write_json(args.out, payload)
        print(f"wrote {args.out}")
    return 0


def _require_rank(args: argparse.Namespace) -> int:
    if args.rank is None:
        raise ValueError("--rank is required")
    return args.rank
