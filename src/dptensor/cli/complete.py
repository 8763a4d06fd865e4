"""``dptensor complete``: CP / Tucker completion of a three-way tensor from its entries, optionally DP."""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np

from dptensor.cli._io import write_json
from dptensor.cli._privacy import add_ledger_argument, opened_ledger
from dptensor.datasets.entries import TensorEntries, read_entries, read_movielens
from dptensor.models.completion import PRIVACY_MODES, TensorCompletion, rmse
from dptensor.privacy import NOISE_BACKENDS, BudgetLedger, enable_features


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "complete",
        help="complete a partially observed three-way tensor (CP or Tucker), optionally with DP",
        description=(
            "Fit objective (6) (CP) or (7) (Tucker) of Wei, Li, Mao & Wang, 'Applying Differential "
            "Privacy to Tensor Completion', by SGD over the observed entries, with input (Alg. 1), "
            "gradient (Alg. 2) or output (Alg. 3) perturbation as in the paper, or the variants whose "
            "guarantees hold (gradient_dpsgd, output_clipped). Entries are 'i j k value' rows "
            "(CSV, TSV or whitespace; a header row is skipped) or MovieLens u.data (--movielens). "
            "Privacy protects the value of one observed entry; the shape and the observed indices "
            "are public."
        ),
    )
    parser.add_argument("entries", help="observed entries: i j k value rows (zero-based unless --one-based)")
    parser.add_argument("--shape", type=int, nargs=3, metavar=("I", "J", "K"),
                        help="tensor shape (default: largest index + 1 in each mode, over all files)")
    parser.add_argument("--rank", "-r", type=int, required=True, help="CP rank / Tucker core size")
    parser.add_argument("--model", choices=("cp", "tucker"), default="cp")
    parser.add_argument("--privacy", choices=[m for m in PRIVACY_MODES if m], default=None,
                        help="perturbation (default: none)")
    parser.add_argument("--epsilon", type=float, help="privacy budget (required with --privacy)")
    parser.add_argument("--delta", type=float, help="delta for gradient_dpsgd (default min(1e-5, 1/n))")
    parser.add_argument("--lr", type=float, default=0.005, help="per-entry learning rate (default 0.005)")
    parser.add_argument("--reg", type=float, default=0.01, help="lambda / lambda_o (default 0.01)")
    parser.add_argument("--reg-core", type=float, help="lambda_g for Tucker (default reg / 10)")
    parser.add_argument("--epochs", type=int, default=100, help="passes over the entries (default 100)")
    parser.add_argument("--batch-size", type=int, default=256,
                        help="entries per vectorised step (default 256)")
    parser.add_argument("--clip", type=float, default=1.0,
                        help="clipping constant m (Alg. 2) / Lipschitz constant L (Alg. 3) (default 1)")
    parser.add_argument("--value-range", type=float, nargs=2, metavar=("MIN", "MAX"),
                        help="declared value range (input perturbation's Delta = MAX - MIN)")
    parser.add_argument("--test", metavar="ENTRIES", help="held-out entries: predict them and report RMSE")
    parser.add_argument("--movielens", action="store_true",
                        help="files are MovieLens u.data (user item rating timestamp)")
    parser.add_argument("--one-based", action="store_true", help="indices in the files start at 1")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the public randomness (initialisation, shuffles); the privacy noise "
                             "is always fresh")
    parser.add_argument("--noise", choices=NOISE_BACKENDS, default="numpy",
                        help="sampler of the privacy noise: numpy (default) or opendp (floating-point "
                             "safe; needs pip install 'dptensor[opendp]')")
    parser.add_argument("--allow-unproven", action="store_true",
                        help="run the paper's modes whose privacy claim does not hold (gradient, output, "
                             "input without --value-range), to reproduce the paper")
    add_ledger_argument(parser)
    parser.add_argument("--out", metavar="FILE", help="write predictions as CSV (i,j,k,prediction[,value])")
    parser.add_argument("--json", metavar="FILE", help="write the fit summary and privacy guarantee as JSON")
    parser.set_defaults(func=run)


def _read(path: str, args: argparse.Namespace, shape: tuple | None) -> TensorEntries:
    if args.movielens:
        if shape is not None:
            entries = read_movielens(path, n_users=shape[0], n_items=shape[1])
            if entries.shape[2] > shape[2]:
                raise ValueError(f"{path}: {entries.shape[2]} days do not fit --shape K={shape[2]}")
            return TensorEntries(entries.indices, entries.values, shape)
        return read_movielens(path)
    return read_entries(path, shape=shape, one_based=args.one_based)


def run(args: argparse.Namespace) -> int:
    with opened_ledger(args, private=args.privacy is not None) as ledger:
        return _run(args, ledger)


def _run(args: argparse.Namespace, ledger: BudgetLedger | None) -> int:
    shape = tuple(args.shape) if args.shape else None
    train = _read(args.entries, args, shape)
    test = _read(args.test, args, shape) if args.test else None
    if shape is None and test is not None:
        shape = tuple(max(a, b) for a, b in zip(train.shape, test.shape, strict=True))
        train = TensorEntries(train.indices, train.values, shape)
        test = TensorEntries(test.indices, test.values, shape)
    if args.movielens and test is not None and train.shape != test.shape:
        raise ValueError("train and test MovieLens files give different shapes; pass --shape")
    model = TensorCompletion(
        args.rank, model=args.model, privacy=args.privacy, epsilon=args.epsilon, delta=args.delta,
        learning_rate=args.lr, reg=args.reg, reg_core=args.reg_core, n_epochs=args.epochs,
        batch_size=args.batch_size, clip=args.clip,
        value_range=tuple(args.value_range) if args.value_range else None, random_state=args.seed,
        noise=args.noise, ledger=ledger,
    )
    start = time.perf_counter()
    with enable_features(*(("unproven",) if args.allow_unproven else ())):
        model.fit(train.indices, train.values, train.shape)
    seconds = time.perf_counter() - start
    # the training error is computed from the private values without noise: shown only without --privacy
    train_rmse = model.history_[-1] if args.privacy is None else None
    print(f"{args.model.upper()} completion, rank {args.rank}, shape {train.shape}, {len(train)} observed "
          f"entries, {args.epochs} epochs: {seconds:.2f} s"
          + ("" if train_rmse is None else f", training RMSE {train_rmse:.4f}"))
    guarantee = model.guarantee_
    if guarantee is not None:
        print("privacy: " + guarantee.describe())
    payload: dict = {"shape": train.shape, "n_observed": len(train), "model": args.model, "rank": args.rank,
                     "privacy": args.privacy, "seconds": seconds, "train_rmse": train_rmse,
                     "guarantee": None if guarantee is None else guarantee.to_dict()}
    target = test if test is not None else train
    predictions = model.predict(target.indices)
    if test is not None:
        payload["test_rmse"] = rmse(test.values, predictions)
        payload["n_test"] = len(test)
        print(f"test RMSE {payload['test_rmse']:.4f} on {len(test)} entries")
    if args.out:
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            # A private fit's output must not carry the private training values it was fitted on.
            with_values = test is not None or args.privacy is None
            writer.writerow(["i", "j", "k", "prediction"] + (["value"] if with_values else []))
            for (i, j, k), pred, value in zip(target.indices.tolist(), predictions.tolist(),
                                              target.values.tolist(), strict=True):
                writer.writerow([i, j, k, repr(float(pred))] + ([repr(float(value))] if with_values else []))
        print(f"wrote {len(predictions)} predictions to {path}")
    if args.json:
        payload["predictions_file"] = args.out
        write_json(args.json, {k: (list(v) if isinstance(v, tuple) else v) for k, v in payload.items()})
    return 0 if np.all(np.isfinite(predictions)) else 1
