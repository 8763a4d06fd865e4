"""``dptensor decompose``: the robust tensor power method on a tensor, a data moment or a stream.

``--online DATA`` runs the online robust tensor power method (Wang & Anandkumar 2016,
Algorithm 2) on a data file read in batches -- ``.npy`` (memory-mapped), SciPy sparse ``.npz``
(row blocks), CSV/TSV -- in ``O(d(k + L))`` memory, with a progress bar and an optional
checkpoint file that is written after every completed round and resumed from when it exists.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import scipy.sparse

from dptensor.cli._io import load_array, write_json
from dptensor.cli._options import (
    add_quiet_argument,
    output_path,
    positive_float,
    positive_int,
    refuse_unused,
    seed,
)
from dptensor.cli._parallel import ParallelSession, add_parallel_arguments, parallel_session
from dptensor.datasets import make_orthogonal_tensor
from dptensor.decomposition import power_method
from dptensor.decomposition.online import OnlineTensorPower, StreamTooShortError
from dptensor.metrics import match_components
from dptensor.streams import open_stream
from dptensor.tensor import DenseTensor, SampleMoment, SymmetricTensor

EXAMPLE_DIM, EXAMPLE_RANK, EXAMPLE_NOISE = 50, 3, 0.05
#: Default convergence tolerance of the batch power method (``--tol``).
DEFAULT_TOL = 1e-8
#: Options of the online mode only (refused without ``--online``).
ONLINE_OPTIONS = ("batch_size", "chunk_size", "cycle", "checkpoint", "target_error")

EXAMPLES = """examples:
  dptensor decompose --example --seed 0                 # built-in noisy orthogonal tensor, d=50, k=3
  python -c "import numpy as np; np.save('X.npy', np.random.default_rng(0).random((2000, 20)))"
  dptensor decompose --moment-of X.npy --rank 3 --out result.json
  dptensor decompose --online X.npy --rank 3 --batch-size 500 --cycle --out online.json
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "decompose",
        help="decompose a symmetric tensor with the robust tensor power method",
        description=(
            "Robust tensor power method (Wang & Anandkumar 2016, Algorithm 1) on a dense "
            "d x d x d tensor (.npy), on the third moment (1/n) sum x_i^(x)3 of a data matrix "
            "that is never formed (--moment-of), or on a built-in example (--example). With "
            "--online DATA, the online robust tensor power method (Algorithm 2) reads a data file "
            "(.npy, sparse .npz, .csv/.tsv) once, batch by batch, in O(d(k + L)) memory."
        ),
        epilog=EXAMPLES,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("tensor", nargs="?", help="dense symmetric tensor, .npy of shape (d, d, d)")
    source.add_argument(
        "--moment-of", metavar="X",
        help="data matrix (.npy dense or .npz sparse, rows are records), or a directory of such parts "
        "(row blocks; read by the workers with --scheduler)",
    )  # fmt: skip
    source.add_argument(
        "--example",
        action="store_true",
        help=f"a noisy orthogonal tensor, d={EXAMPLE_DIM}, k={EXAMPLE_RANK}, ||E||_op={EXAMPLE_NOISE}",
    )
    source.add_argument(
        "--online",
        metavar="DATA",
        help="stream a data file (.npy, scipy.sparse .npz, .csv/.tsv; rows are records) through "
        "Algorithm 2; needs --rank and --batch-size",
    )
    parser.add_argument("--rank", "-k", type=positive_int,
                        help="number of components (default 3 with --example)")
    parser.add_argument("--restarts", type=positive_int,
                        help="restarts L per component (default max(10, 2k ln k))")
    parser.add_argument("--iters", type=positive_int,
                        help="maximum power steps R (default ceil(log2(d/tol)) + 10)")
    parser.add_argument("--tol", type=positive_float, default=None,
                        help=f"convergence tolerance of the batch method (default {DEFAULT_TOL:g}; not with "
                             "--online, whose steps are set by --target-error)")
    parser.add_argument("--seed", type=seed, default=None, help="random seed (a non-negative integer)")
    parser.add_argument("--out", metavar="FILE", help="write weights and factors as JSON")
    add_quiet_argument(parser, old_spellings=("--no-progress",))
    online = parser.add_argument_group("online mode (--online)")
    online.add_argument("--batch-size", "-n", type=positive_int, help="points n read per round (power step)")
    online.add_argument(
        "--chunk-size", type=positive_int,
        help="rows read from the file at a time (default: n, capped to ~32 MB)",
    )  # fmt: skip
    online.add_argument(
        "--cycle",
        action="store_true",
        help="cycle over a file shorter than the k*R*n points Algorithm 2 reads (fits its empirical moment)",
    )
    online.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="save the state after every round; if FILE exists, resume from it",
    )
    online.add_argument(
        "--target-error",
        type=positive_float,
        default=1e-2,
        help="relative accuracy eps/lambda_max that sets the default R = ceil(log2(d/eps)) + 10",
    )
    add_parallel_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    output_path(args.out)
    if args.online:
        refuse_unused(args, ["tol"], "--online sets its steps with --target-error (or --iters), not --tol")
        refuse_unused(args, ["scheduler"], "--online reads the file here once; use --jobs")
        output_path(args.checkpoint, "--checkpoint")
    else:
        refuse_unused(args, ONLINE_OPTIONS, "these options of the online mode apply only with --online DATA")
    if (args.jobs is not None or args.scheduler is not None) and not (args.moment_of or args.online):
        raise ValueError("--jobs and --scheduler apply to the passes over records: --moment-of or --online")
    with parallel_session(args) as session:
        if args.online:
            return run_online(args, session.n_jobs)
        return run_batch(args, session)


def run_batch(args: argparse.Namespace, session: ParallelSession) -> int:
    """A dense tensor, the example, or the moment of a data matrix (``--moment-of``)."""
    truth = None
    # Independent streams for the example's data and the restarts (one seed, no overlap).
    data_seed, method_seed = np.random.SeedSequence(args.seed).spawn(2)
    if args.example:
        example = make_orthogonal_tensor(
            EXAMPLE_DIM, EXAMPLE_RANK, noise=EXAMPLE_NOISE, random_state=np.random.default_rng(data_seed)
        )
        operator: SymmetricTensor = DenseTensor(example.tensor)
        truth = example
        rank = args.rank or EXAMPLE_RANK
        source = f"example: orthogonal tensor d={EXAMPLE_DIM}, k={EXAMPLE_RANK}, gaussian noise"
    elif args.moment_of:
        path = Path(args.moment_of)
        records = session.parts(path) if path.is_dir() else session.records(load_array(path))
        operator = SampleMoment(records, n_jobs=session.n_jobs)
        rank = _require_rank(args)
        source = f"third moment of {args.moment_of} ({operator.n_samples} records, d={operator.dim})"
    else:
        operator = DenseTensor(_dense_tensor(args.tensor))
        rank = _require_rank(args)
        source = f"tensor {args.tensor} (d={operator.dim})"

    start = time.perf_counter()
    bar = None
    if not args.quiet:
        from dptensor._progress import progress_bar

        bar = progress_bar(total=rank, desc="components", unit="comp", leave=False)
    try:
        result = power_method(
            operator, rank, n_restarts=args.restarts, n_iter=args.iters,
            tol=DEFAULT_TOL if args.tol is None else args.tol,
            random_state=np.random.default_rng(method_seed),
            callback=None if bar is None else (lambda i, weight: bar.update(1)),
        )
    finally:
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - start

    print(f"{source}\nrank {rank}, {elapsed:.3f} s")
    if args.moment_of:
        print(f"passes over the records: {session.describe()}")
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


def _dense_tensor(path: str) -> np.ndarray:
    """The positional tensor file, refused (naming the options that fit) when it is a data matrix."""
    array = load_array(path)
    if scipy.sparse.issparse(array) or np.ndim(array) == 2:
        kind = "a sparse matrix" if scipy.sparse.issparse(array) else "a matrix"
        raise ValueError(
            f"tensor {path} is {kind} of shape {array.shape}, not a d x d x d tensor; to decompose the third "
            f"moment of its rows use --moment-of {path} (or --online {path}); for a topic model of a count "
            "matrix use dptensor lda fit"
        )
    return array


def _require_rank(args: argparse.Namespace) -> int:
    if args.rank is None:
        raise ValueError("--rank is required")
    return args.rank


def run_online(args: argparse.Namespace, n_jobs: int | None = None) -> int:
    """``--online``: Algorithm 2 on a data file, with progress bar and checkpoint/resume."""
    rank = _require_rank(args)
    if args.batch_size is None:
        raise ValueError("--batch-size is required with --online")
    checkpoint = Path(args.checkpoint) if args.checkpoint else None
    if checkpoint is not None and checkpoint.exists():
        try:
            model = OnlineTensorPower.load_checkpoint(checkpoint)
        except ValueError as exc:
            raise ValueError(f"--checkpoint {checkpoint}: {exc}") from exc
        _check_resumable(model, args, checkpoint)
        model.n_jobs = n_jobs
        resumed = True
    else:
        model = OnlineTensorPower(
            rank,
            batch_size=args.batch_size,
            n_restarts=args.restarts,
            n_iter=args.iters,
            target_error=args.target_error,
            random_state=args.seed,
            n_jobs=n_jobs,
        )
        resumed = False
    if args.chunk_size is not None:
        chunk = args.chunk_size
    else:
        probe = open_stream(args.online, 1)
        width = getattr(probe, "n_features", None)
        chunk = min(args.batch_size, max(1, (1 << 22) // width)) if width else min(args.batch_size, 4096)
    stream = open_stream(args.online, chunk)
    source = f"online: {args.online} in batches of {chunk} rows, n={args.batch_size} points per round"
    if resumed:
        print(f"resuming from {checkpoint} at {model.n_samples_seen_} points")

    bar = None
    if not args.quiet:
        from dptensor._progress import progress_bar

        bar = progress_bar(total=model.n_samples_needed_, initial=model.n_samples_seen_, unit="pt")
    rounds_saved = _rounds_done(model)

    def progress(seen: int, needed: int) -> None:
        nonlocal rounds_saved
        if bar is not None:
            if bar.total != needed:
                bar.total = needed
            bar.update(seen - bar.n)
        if checkpoint is not None and _rounds_done(model) > rounds_saved:
            model.save_checkpoint(checkpoint)
            rounds_saved = _rounds_done(model)

    start = time.perf_counter()
    try:
        model.fit(stream, cycle=args.cycle, resume=resumed, progress=progress)
    except StreamTooShortError as exc:  # the library's advice (partial_fit, cycle=True) in the CLI's words
        saved = checkpoint is not None and checkpoint.exists()
        resume = (f"; the rounds done are saved in --checkpoint {checkpoint}, so a rerun with a longer file "
                  "resumes" if saved else "")
        raise ValueError(
            f"--online {args.online}: Algorithm 2 reads k*R*n = {exc.needed} points but the data set has "
            f"{exc.available} (k = --rank, R from --target-error or --iters, n = --batch-size); pass --cycle "
            f"to cycle over it (fits its empirical moment), or a smaller --batch-size{resume}"
        ) from exc
    finally:
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - start
    if checkpoint is not None:
        model.save_checkpoint(checkpoint)

    print(f"{source}\nrank {rank}, d={model.n_features_in_}, L={model.n_restarts_}, R={model.n_iter_}")
    print(f"read {model.n_samples_seen_} points, {elapsed:.3f} s")
    print(f"{'#':>3}  {'weight':>12}")
    for i, weight in enumerate(model.weights_, start=1):
        print(f"{i:>3}  {weight:>12.6g}")
    if args.out:
        write_json(
            args.out,
            {
                "source": source,
                "algorithm": "online robust tensor power method (Wang & Anandkumar 2016, Algorithm 2)",
                "rank": rank,
                "weights": model.weights_,
                "factors": model.factors_,
                "factors_layout": "d x k, column i is the unit component of weights[i]",
                "batch_size": model.batch_size,
                "n_restarts": model.n_restarts_,
                "n_iter": model.n_iter_,
                "n_samples_seen": model.n_samples_seen_,
                "resumed_from_checkpoint": resumed,
                "seconds": elapsed,
            },
        )
        print(f"wrote {args.out}")
    return 0


def _rounds_done(model: OnlineTensorPower) -> int:
    return model.n_samples_seen_ // model.batch_size


def _check_resumable(model: OnlineTensorPower, args: argparse.Namespace, path: Path) -> None:
    given = {"--rank": (args.rank, model.rank), "--batch-size": (args.batch_size, model.batch_size)}
    if args.restarts is not None:
        given["--restarts"] = (args.restarts, getattr(model, "n_restarts_", model.n_restarts))
    if args.iters is not None:
        given["--iters"] = (args.iters, getattr(model, "n_iter_", model.n_iter))
    for flag, (value, saved) in given.items():
        if saved is not None and value != saved:
            raise ValueError(
                f"{flag} {value} differs from the checkpoint {path} ({saved}); use the same settings "
                "to resume, or another --checkpoint file to start afresh"
            )
