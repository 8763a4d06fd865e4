"""``dptensor complete``: CP / Tucker completion of a three-way tensor from its entries, optionally DP."""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np

from dptensor._files import atomic_path
from dptensor.cli._io import write_json
from dptensor.cli._options import (
    RESEARCH_HEADING,
    add_noise_argument,
    add_quiet_argument,
    flag_names,
    nonnegative_int,
    output_path,
    positive_float,
    positive_int,
    positive_int_or_auto,
    probability,
    refuse_problems,
    refuse_unused,
    research_options_last,
    seed,
)
from dptensor.cli._privacy import (
    CHARGED_AFTER_INPUT_CHECKS,
    add_ledger_argument,
    opened_ledger,
    refuse_before_parsing,
)
from dptensor.cli._report import add_report_arguments, begin_report, write_completion_report
from dptensor.datasets.entries import (
    TensorEntries,
    entry_columns,
    is_recbole_inter,
    ratings_day_origin,
    read_movielens,
    read_ratings,
    read_recbole_inter,
)
from dptensor.models._options import build_estimator, flat_params
from dptensor.models.completion import plan_completion
from dptensor.models.completion._dp_als_plan import DEFAULT_MAX_RATINGS, RELATIONS
from dptensor.models.completion.estimator import (
    OFFSETS,
    PRIVACY_MODES,
    SOLVERS,
    TensorCompletion,
    compare_with_mean,
)
from dptensor.models.completion.recommend import check_top_n
from dptensor.privacy import BudgetLedger, PrivacyGuarantee, enable_features

#: Privacy modes that use --delta (the others are pure epsilon-DP or the paper's pure claims).
DELTA_MODES = ("gradient_dpsgd", "als")
#: Options that configure a private fit (refused without --privacy).
PRIVACY_OPTIONS = ("neighbouring", "epsilon", "delta", "noise", "allow_unproven", "max_ratings", "start")
#: Options of the SGD solver (refused when the fit runs ALS).
SGD_OPTIONS = ("lr", "epochs", "batch_size")
#: Options of the ALS solver (refused when the fit runs SGD).
ALS_OPTIONS = ("max_iter", "early_stopping")
#: Refuse a model whose factors need more than this fraction of the machine's memory.
MEMORY_FRACTION = 0.5

EXAMPLES = """examples:
  # a plain ratings table: user,item,rating with a header (a user x item matrix; ids from 1)
  python -c "open('ratings.csv', 'w').write('user,item,rating\\n1,1,5\\n1,2,3\\n2,1,4\\n3,2,4\\n')"
  dptensor complete fit ratings.csv --one-based --rank 1 --out predictions.csv
  # 'i j k value' entries (e.g. user item day rating), train and test
  python -c "from dptensor.datasets import make_low_rank_completion as m, train_test_split_entries as s, \\
  write_entries as w; tr, te = s(m((30, 20, 10), 3, random_state=0).observed, random_state=0); \\
  w('train.csv', tr); w('test.csv', te)"
  dptensor complete fit train.csv --rank 3 --test test.csv --out predictions.csv
  dptensor complete fit train.csv --rank 3 --value-range 0 1 --test test.csv \\
      --privacy gradient_dpsgd --neighbouring entry-value --epsilon 1 --json fit.json
  # before spending any budget: the predicted RMSE ratio to non-private (public sizes only)
  dptensor complete plan --users 70000 --items 1682 --epsilon 1 --typical-ratings 106
"""

PLAN_EXAMPLES = """examples:
  dptensor complete plan --users 70000 --items 1682 --epsilon 1 --typical-ratings 106
  dptensor complete plan --users 10000 --items 1682 --days 215 --epsilon 4 --neighbouring entry-value
"""


#: ``complete``'s subcommands; ``dptensor complete FILE ...`` (a first argument that is none of these,
#: nor ``-h``/``--help``) means ``dptensor complete fit FILE ...`` (:func:`default_subcommand`).
SUBCOMMANDS = ("fit", "plan")

GROUP_EXAMPLES = """examples:
  dptensor complete fit train.csv --rank 3 --test test.csv --out predictions.csv
  dptensor complete train.csv --rank 3 --test test.csv   # the same: fit is the default
  dptensor complete plan --users 70000 --items 1682 --epsilon 1 --typical-ratings 106
"""


def default_subcommand(argv: list[str]) -> list[str]:
    """``argv`` (after ``dptensor``) with ``fit`` inserted after ``complete`` where no subcommand follows.

    ``dptensor complete FILE ...`` fits, as it did before ``complete`` had subcommands: ``fit`` is
    inserted when the argument after ``complete`` is neither a subcommand (:data:`SUBCOMMANDS`) nor
    ``-h``/``--help`` (which show ``complete``'s subcommands).
    """
    if len(argv) > 1 and argv[0] == "complete" and argv[1] not in (*SUBCOMMANDS, "-h", "--help"):
        return ["complete", "fit", *argv[1:]]
    return argv


def register(subparsers: argparse._SubParsersAction) -> None:
    group = subparsers.add_parser(
        "complete",
        help="complete a partially observed three-way tensor (CP or Tucker), optionally with DP; or plan "
             "a private fit",
        description="Tensor completion: 'fit' fits a model to observed entries (the default: 'dptensor "
                    "complete FILE ...' is 'dptensor complete fit FILE ...'); 'plan' predicts a private "
                    "fit's accuracy from public sizes, before any budget is spent.",
        epilog=GROUP_EXAMPLES,
    )
    commands = group.add_subparsers(dest="complete_command", metavar="ACTION", required=True)
    # prog: fit is the default, so its messages read "dptensor complete: error: ..." however it was typed
    parser = commands.add_parser(
        "fit", prog="dptensor complete",
        help="fit a CP or Tucker completion to observed entries (optionally DP) and predict",
        description=(
            "Fit objective (6) (CP) or (7) (Tucker) of Wei, Li, Mao & Wang, 'Applying Differential "
            "Privacy to Tensor Completion', with a global mean and per-mode biases, by ALS (default) or "
            "the paper's SGD, with input (Alg. 1), gradient (Alg. 2) or output (Alg. 3) perturbation as "
            "in the paper, or the modes whose guarantees hold (gradient_dpsgd, output_clipped, als). "
            "Entries are 'user item rating' rows (a user x item matrix) or 'i j k value' rows (e.g. user "
            "item day rating), comma, tab, semicolon or whitespace separated, a header row skipped; or "
            "MovieLens ratings (--movielens: u.data, ratings.csv or RecBole's ml-100k.inter). Malformed rows "
            "are named by line, except on a private run (the line would describe the private data). "
            "Outputs never overwrite an input. A private fit names its "
            "relation: --neighbouring entry-value (one rating's value; the observed indices are public) "
            "or user (all ratings of one user; --privacy als)."
        ),
        epilog=EXAMPLES,
        usage="%(prog)s [fit] [-h] entries --rank R [--privacy MODE --neighbouring REL --epsilon EPS] "
        "[option ...]",
    )
    add_fit_arguments(parser, ledger=True)
    parser.add_argument("--test", metavar="ENTRIES", help="held-out entries: predict them and report RMSE")
    # the bar is shown by default now; the old opt-in flag is accepted and does nothing
    parser.add_argument("--progress", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", metavar="FILE",
                        help="write predictions as CSV (i,j,k,prediction[,value]); i, j, k are written in "
                             "the base they came in (1-based with --one-based; MovieLens user and item ids "
                             "as in the file, the day index k from 0)")
    parser.add_argument("--json", metavar="FILE", help="write the fit summary and privacy guarantee as JSON")
    recommend = parser.add_argument_group("recommendations")
    recommend.add_argument("--recommend", metavar="FILE",
                           help="write each user's --top highest-predicted items that they have not "
                                "rated, as CSV (user,rank,item,prediction; ids in the base they came in; "
                                "ranked at the last day of a tensor)")
    recommend.add_argument("--top", type=positive_int, default=None, metavar="N",
                           help="items per user in --recommend (default 10, or every item of a smaller "
                                "catalogue)")
    add_report_arguments(parser)
    research_options_last(parser)
    parser.set_defaults(func=run)
    register_plan(commands)


def register_plan(commands: argparse._SubParsersAction) -> None:
    """``dptensor complete plan``: the predicted accuracy of a private fit, from public sizes."""
    plan = commands.add_parser(
        "plan", help="predict a private fit's RMSE ratio to non-private from public sizes (nothing read)",
        description="Predict, from public sizes only, the held-out RMSE ratio of a default DP-ALS fit "
        "(privacy als) to the non-private fit of the same model, before any budget is spent; nothing "
        "is read or charged (dptensor.models.completion.plan_recommendation; docs/completion.md, "
        "'Planning a private recommender').",
        epilog=PLAN_EXAMPLES,
    )
    plan.add_argument("--users", type=positive_int, required=True, metavar="U",
                      help="number of users (the shape's U)")
    plan.add_argument("--items", type=positive_int, required=True, metavar="I",
                      help="number of items (the shape's I)")
    plan.add_argument("--days", type=positive_int, default=1, metavar="K",
                      help="days, the time mode (default 1: a matrix)")
    plan.add_argument("--rank", type=positive_int, default=10, help="rank (default 10)")
    plan.add_argument("--epsilon", type=positive_float, required=True, help="total privacy budget epsilon")
    plan.add_argument("--delta", type=probability, default=1e-6, help="delta (default 1e-6)")
    plan.add_argument("--neighbouring", choices=RELATIONS, default="user",
                      help="the relation: user (all ratings of one user; default) or entry-value")
    plan.add_argument("--typical-ratings", type=positive_int, default=None, metavar="M",
                      help="a public guess of a typical user's number of ratings (default 100, or --items x "
                           "--days where that is fewer)")
    plan.add_argument("--max-ratings", type=positive_int_or_auto, default="auto",
                      help="the fit's --max-ratings (default auto: the fit's rule)")
    plan.add_argument("--value-range", type=float, nargs=2, default=(1.0, 5.0), metavar=("MIN", "MAX"),
                      help="the declared rating range (default 1 5)")
    plan.add_argument("--popularity", choices=("movielens", "uniform"), default="movielens",
                      help="the assumed item popularity (default movielens: a MovieLens-shaped profile)")
    plan.add_argument("--within", type=positive_float, default=1.10, metavar="RATIO",
                      help="also say from how many users, and from what epsilon at these users, the ratio is "
                           "predicted at most RATIO (default 1.10)")
    add_quiet_argument(plan)
    plan.set_defaults(func=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    """``dptensor complete plan``: :func:`~dptensor.models.completion.plan_recommendation`'s prediction."""
    from dptensor.models.completion.plan import epsilon_within, plan_recommendation, users_within

    most = args.items * args.days  # ratings one user can have
    if args.typical_ratings is not None and args.typical_ratings > most:
        raise ValueError(f"--typical-ratings ({args.typical_ratings}) is more than a user can have: at most "
                         f"--items x --days = {most}")
    typical = min(100, most) if args.typical_ratings is None else args.typical_ratings
    sizes = {"epsilon": args.epsilon, "delta": args.delta, "relation": args.neighbouring,
             "rank": args.rank, "n_times": args.days, "typical_ratings": typical,
             "max_ratings": args.max_ratings, "value_range": tuple(args.value_range),
             "popularity": args.popularity}
    if args.within < 1.0:
        raise ValueError(f"--within must be at least 1 (a ratio to non-private; 1 leaves the lines out), "
                         f"got {args.within:g}")
    with flag_names({"value_range": "--value-range"}):  # the library's check, naming the flag
        prediction = plan_recommendation(args.users, args.items, **sizes)
    print(prediction.describe())
    if args.within > 1.0:
        # "for every ... from": the ratio can rise before it falls (users_within, epsilon_within), so the
        # size or budget named is where it stays at or below the level, which can be above the one planned
        level = f"ratio <= {args.within:g}"
        needed = users_within(args.within, args.items, low=100, **sizes)
        print(f"{level} is not predicted below 10^8 users" if needed is None
              else f"{level} predicted at every number of users searched (100 and more)" if needed <= 100
              else f"{level} predicted for every number of users from about {needed}")
        others = {key: value for key, value in sizes.items() if key != "epsilon"}
        budget = epsilon_within(args.within, args.users, args.items, low=0.01, **others)
        print(f"{level} with {args.users} users is not predicted below epsilon 100" if budget is None
              else f"{level} with {args.users} users predicted at every epsilon searched (0.01 and more)"
              if budget <= 0.01
              else f"{level} with {args.users} users predicted for every epsilon from about {budget:.3g}")
    return 0


class _ShapeSizes(argparse.Action):
    """``--shape U I [K]``: the sizes, and a file name typed right after them is ``ENTRIES``.

    ``nargs="+"`` (two sizes for a user x item file, three for a tensor) would otherwise take
    ``complete --shape 943 1682 215 ratings.csv``'s file as a fourth size, as ``nargs=3`` did not.
    """

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        tokens = list(values)  # type: ignore[call-overload]
        sizes = []
        while tokens and tokens[0].lstrip("+").isdigit() and len(sizes) < 3:
            sizes.append(positive_int(tokens.pop(0)))
        if not sizes:
            parser.error(f"argument --shape: expected 2 or 3 sizes, got {values[0]!r}")  # type: ignore[index]
        if tokens:
            if len(tokens) > 1 or getattr(namespace, "entries", None) is not None:
                parser.error(f"argument --shape: takes 2 or 3 sizes; unexpected {' '.join(tokens)!r}")
            namespace.entries = tokens[0]
        setattr(namespace, self.dest, sizes)


def add_fit_arguments(parser: argparse.ArgumentParser, *, ledger: bool = False) -> None:
    """The options of ``complete`` that configure the model and read the entries (shared with ``audit``).

    The everyday options come first (the main options, the entries, differential privacy, with
    ``--ledger`` where ``ledger``); the paper's modes and tuning knobs sit in a group headed
    :data:`~dptensor.cli._options.RESEARCH_HEADING`, which
    :func:`~dptensor.cli._options.research_options_last` lists last in ``--help``. Argument groups
    change only the listing, never the parsing.
    """
    parser.add_argument("--rank", "-r", type=positive_int, default=None, metavar="R",
                        help="CP rank / Tucker core size (required unless --no-factors)")
    parser.add_argument("--seed", type=seed, default=None,
                        help="seed of the public randomness (initialisation, shuffles, validation split); "
                             "the privacy noise is always fresh")
    add_quiet_argument(parser)
    entries = parser.add_argument_group("entries")
    # nargs="?" with SUPPRESS: --shape (2 or 3 sizes, nargs="+") hands over a file name typed right
    # after its sizes (_ShapeSizes); missing_options names ENTRIES when neither gave it
    entries.add_argument("entries", nargs="?", default=argparse.SUPPRESS,
                         help="observed entries: 'user item rating' rows (a matrix) or 'i j k value' rows, "
                              "e.g. user item day rating (zero-based unless --one-based); comma, tab, "
                              "semicolon or whitespace separated, an optional header row")
    entries.add_argument("--one-based", action="store_true", help="indices in the files start at 1")
    entries.add_argument("--shape", action=_ShapeSizes, nargs="+", metavar="SIZE",
                         help="public sizes: U I K (users, items, days / third mode) or, for a 3-column "
                              "user item rating file, U I (default: largest index + 1 in each mode, over all "
                              "files; required with --neighbouring user)")
    entries.add_argument("--value-range", type=float, nargs=2, metavar=("MIN", "MAX"),
                         help="declared value range: values are clipped into it, predictions clamped to it "
                              "(input perturbation's sensitivity Delta = MAX - MIN)")
    entries.add_argument("--movielens", action="store_true",
                         help="files are MovieLens ratings: u.data (user item rating timestamp) or a RecBole "
                              ".inter file")
    entries.add_argument("--day-origin", type=nonnegative_int, metavar="SECONDS",
                         help="--movielens: the Unix timestamp where day 0 starts (default: the earliest "
                              "rating of the training and test files, so both number the same calendar day "
                              "alike; needed with --neighbouring user, whose earliest rating is private)")
    private = parser.add_argument_group("differential privacy")
    private.add_argument("--privacy", choices=[m for m in PRIVACY_MODES if m], default=None,
                         help="perturbation (default: none); the modes whose guarantee holds are "
                              "gradient_dpsgd, output_clipped and als")
    private.add_argument("--neighbouring", choices=RELATIONS, default=None,
                         help="neighbouring relation, required with --privacy: entry-value or user (als "
                              "only)")
    private.add_argument("--epsilon", type=positive_float, help="privacy budget (required with --privacy)")
    private.add_argument("--delta", type=probability,
                         help="delta for gradient_dpsgd and als (default: min(1e-5, 0.1/n) for n observed "
                         "entries; min(1e-6, 0.1/users) under --neighbouring user)")
    if ledger:
        add_ledger_argument(private, when=USER_LEDGER_TIMING)
    research = parser.add_argument_group(
        RESEARCH_HEADING,
        "The paper's modes and tuning knobs (Wei, Li, Mao & Wang). The defaults are what "
        "docs/completion.md measured ('Private defaults', the benchmarks), so a fit needs none of these; "
        "change them to reproduce the paper or to tune a fit.",
    )
    research.add_argument("--model", choices=("cp", "tucker"), default="cp",
                          help="CP (the paper's objective (6), default) or Tucker (objective (7)) model of "
                               "the completed tensor")
    research.add_argument("--no-factors", action="store_true",
                          help="fit the offsets alone (global mean and biases: the bias baseline)")
    research.add_argument("--solver", choices=SOLVERS, default="auto",
                          help="als (default without privacy and for --privacy als) or the paper's sgd")
    research.add_argument("--offsets", choices=OFFSETS, default="auto",
                          help="global mean and biases (auto: biases for als/gradient_dpsgd), or bi-scaling")
    research.add_argument("--lr", type=positive_float, default=None,
                          help="SGD learning rate (default 0.005; 0.5 for gradient_dpsgd)")
    research.add_argument("--reg", default=None,
                          help="penalty lambda / lambda_o: a number, or 'auto' (non-private ALS default: "
                               "chosen on a validation split); SGD default 0.01")
    research.add_argument("--reg-core", type=float,
                          help="penalty lambda_g of the Tucker core (default reg / 10 for SGD, reg for ALS)")
    research.add_argument("--reg-bias", type=float, help="penalty of the biases (default: reg)")
    research.add_argument("--epochs", type=positive_int, default=None,
                          help="SGD passes over the entries (default 100; 10 for gradient_dpsgd)")
    research.add_argument("--max-iter", type=positive_int, default=None,
                          help="ALS sweeps (default: up to 100 until converged; exactly 2 for --privacy als, "
                               "1 with --neighbouring user)")
    research.add_argument("--early-stopping", action="store_true",
                          help="non-private ALS with a fixed --reg: stop on a validation split")
    research.add_argument("--batch-size", type=positive_int, default=None,
                          help="SGD entries per vectorised step (default 256; all for gradient_dpsgd)")
    research.add_argument("--clip", type=positive_float, default=None,
                          help="clipping constant m (Alg. 2) / Lipschitz constant L (Alg. 3) / DP-SGD clip "
                               "(default 1; (MAX - MIN) / 2 for gradient_dpsgd with --value-range)")
    research.add_argument("--max-ratings", type=positive_int_or_auto, default="auto",
                          help="--neighbouring user: bound a user's contribution as if they had this many "
                               f"ratings; auto (default): {DEFAULT_MAX_RATINGS}, growing as "
                               f"{DEFAULT_MAX_RATINGS}*(u/350)^1.25 up to 300 where "
                               "u = users / (z sqrt(items)) passes 350, z the item release's noise "
                               "multiplier (public sizes only)")
    research.add_argument("--start", choices=("auto", "spectral", "random"), default="auto",
                          help="--neighbouring user: start the item factors from a noisy release of the "
                               "users' covariance (spectral) or data-independently (random); auto: spectral "
                               "where the users are many enough (public sizes; default)")
    add_noise_argument(research, not_covered="--privacy output_clipped's exponential-norm noise (NumPy)")
    research.add_argument("--allow-unproven", action="store_true",
                          help="run the paper's modes whose privacy claim does not hold (gradient, output, "
                               "input without --value-range), to reproduce the paper")


def _read(
    path: str, args: argparse.Namespace, shape: tuple | None, day_origin: int | None, *,
    allow_empty: bool = False,
) -> TensorEntries:
    private = args.privacy is not None
    if args.movielens:
        reader = read_recbole_inter if is_recbole_inter(path) else read_movielens
        if shape is not None:
            entries = reader(path, n_users=shape[0], n_items=shape[1], day_origin=day_origin, private=private)
            if len(shape) == 2:  # the days from the file: a non-private run only (check_options)
                return TensorEntries(entries.indices, entries.values, (*shape, entries.shape[2]))
            if entries.shape[2] > shape[2]:
                raise ValueError(_days_do_not_fit(path, shape[2], None if private else entries.shape[2]))
            return TensorEntries(entries.indices, entries.values, shape)
        return reader(path, day_origin=day_origin, private=private)
    # the timestamp check reads every value: only where the values are not private (the default)
    return read_ratings(path, shape=shape, one_based=args.one_based, private=private, allow_empty=allow_empty)


def _write_recommendations(args: argparse.Namespace, model: TensorCompletion, train: TensorEntries,
                           base: tuple[int, int, int], *, user: bool) -> None:
    """``--recommend``: every user's ``--top`` best unrated items (``TensorCompletion.recommend``).

    Every user of the shape gets ``--top`` rows, an empty item and prediction in the slots left over
    when the user has rated nearly every item, so the file's number of rows depends on the public shape
    only.
    """
    found = model.recommend(args.top, exclude=train.indices)  # --top None: min(10, items)
    n = found.items.shape[1]
    path = Path(args.recommend)
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["user", "rank", "item", "prediction"])
        for who, rank, item, value in found.rows():
            kept = item >= 0
            writer.writerow([who + base[0], rank, item + base[1] if kept else "",
                             repr(value) if kept else ""])
    day = "" if train.shape[2] == 1 else f", ranked at day {found.day + base[2]} (the last)"
    print(f"wrote the top {n} unrated items of each of the {train.shape[0]} users to {path}{day}"
          + (" (each user's rows for that user alone: joint DP)" if user else ""))
    print("these lists rank by predicted rating; as top-N lists they lose to the most popular items "
          "(MovieLens-100K NDCG@10 0.82x popularity, 0.20x at user-level epsilon 1): "
          "'dptensor recommend fit' lists what users choose (2.08x, private 0.87x; docs/recommend.md)")


def _days_do_not_fit(path: str, k: int, needed: int | None) -> str:
    """The error for MovieLens days beyond ``--shape``'s K; ``needed`` only where it is not private."""
    if needed is not None:
        return (f"{path}: the ratings' days do not fit --shape K={k}: the file's days need K >= {needed} "
                "(counted from --day-origin, or from the earliest rating)")
    # on a private path the last day is private: say how to get K from public knowledge instead
    return (f"{path}: the ratings' days do not fit --shape K={k}: pass a K from public knowledge, "
            "K = (the end of the collection period - --day-origin) // 86400 + 1 (days), not from the ratings")


def missing_options(args: argparse.Namespace) -> list[str]:
    """Every option the chosen mode needs and lacks (or has in an invalid form), each with what to pass.

    ``complete`` names them all in one error, before any file is read. Only the command line is
    looked at (public).
    """
    problems = []
    if getattr(args, "entries", None) is None:
        problems.append("the ENTRIES file (the observed ratings) is required")
    user = args.privacy is not None and args.neighbouring == "user"
    if args.shape is not None and len(args.shape) not in (2, 3):
        problems.append(f"--shape takes 2 sizes (U I, for a user item rating file) or 3 (U I K), got "
                        f"{len(args.shape)}")
    if args.privacy is not None:
        if args.epsilon is None:
            problems.append(f"--privacy {args.privacy} needs --epsilon: pass --epsilon E (the budget)")
        if args.neighbouring is None:
            problems.append(f"--privacy {args.privacy} needs --neighbouring: entry-value (one rating's "
                            "value; who rated what is public) or user (all ratings of one user; "
                            "--privacy als)")
        if args.neighbouring == "user" and args.privacy != "als":
            problems.append(f"--neighbouring user needs --privacy als (--privacy {args.privacy} protects one "
                            "entry's value only)")
        if args.privacy in ("als", "output_clipped") and args.value_range is None:
            problems.append(f"--privacy {args.privacy} needs --value-range: pass --value-range MIN MAX, the "
                            "declared range of a rating (e.g. 1 5; public)")
    if user:
        if args.shape is None:
            problems.append("--neighbouring user needs --shape: pass --shape U I [K] (public sizes: users, "
                            "items and, with days, K); inferring them from the ratings would reveal the "
                            "largest user, item and day")
        elif args.movielens and len(args.shape) == 2:
            problems.append("--neighbouring user with --movielens needs the number of days in --shape U I K "
                            "(K = (the end of the collection period - --day-origin) // 86400 + 1; the last "
                            "rating's day is private)")
        if args.movielens and args.day_origin is None:
            problems.append("--neighbouring user with --movielens needs --day-origin: pass --day-origin "
                            "SECONDS, a public Unix time at or before the first rating (e.g. the start of "
                            "the collection period); numbering the days from the earliest rating would "
                            "reveal when the first user rated")
        if hasattr(args, "test") and args.out and not args.test:  # complete's --out (not audit's)
            problems.append("--neighbouring user: --out needs --test (predictions at the training entries "
                            "would reveal which ratings exist)")
    if not args.no_factors and args.rank is None:
        problems.append("--rank is required (the CP rank or Tucker core size), unless --no-factors fits the "
                        "offsets alone")
    return problems


def check_options(args: argparse.Namespace) -> None:
    """Refuse, before any file is read, options that do nothing with the chosen mode and solver."""
    for flag, path in (("--out", args.out), ("--json", args.json), ("--recommend", args.recommend)):
        output_path(path, flag)
    if args.recommend is None:
        refuse_unused(args, ["top"], "--top sets the items per user of --recommend FILE")
    elif args.top is not None and args.shape is not None and len(args.shape) >= 2:
        check_top_n(args.top, args.shape[1], "--top")  # before any file is read (the shape: declared)
    if args.privacy is None:
        refuse_unused(args, PRIVACY_OPTIONS,
                      "privacy options need --privacy MODE; without it the fit is not private")
    else:
        if args.privacy not in DELTA_MODES:
            refuse_unused(args, ["delta"], f"--privacy {args.privacy} is pure epsilon-DP and uses no delta "
                          f"(delta applies to {' and '.join(DELTA_MODES)})")
        if args.neighbouring != "user":
            refuse_unused(args, ["max_ratings", "start"], "applies only with --neighbouring user")
    if args.movielens:
        refuse_unused(args, ["one_based"], "MovieLens ids are read as one-based already (--movielens)")
    else:
        refuse_unused(args, ["day_origin"], "--day-origin numbers the days of MovieLens timestamps "
                      "(--movielens)")
    if args.no_factors:
        refuse_unused(args, ["rank", "model", "reg_core", "start"],
                      "--no-factors fits the offsets alone (no factors)")
    if args.model != "tucker":
        refuse_unused(args, ["reg_core"], "--reg-core applies only to --model tucker")
    refuse_problems(missing_options(args))
    solver = args.solver
    if solver == "auto":  # as TensorCompletion resolves it
        solver = "als" if args.privacy in (None, "als") else "sgd"
    if solver == "als":
        refuse_unused(args, SGD_OPTIONS, "--lr, --epochs and --batch-size apply to the SGD solver "
                      "(--solver sgd); this fit runs ALS")
    else:
        refuse_unused(args, ALS_OPTIONS, "--max-iter and --early-stopping apply to the ALS solver; this fit "
                      "runs SGD")


def check_memory(shape: tuple[int, int, int], rank: int | None, model: str) -> None:
    """Refuse, before anything is allocated, factor matrices that cannot fit in this machine's memory."""
    if rank is None:
        return
    values = rank * sum(shape) + (rank**3 if model == "tucker" else 0)
    # the solvers hold a few copies (factors, gradients or normal equations): count four
    needed = 4 * 8 * values
    available = _physical_memory()
    if needed > MEMORY_FRACTION * available:
        raise ValueError(
            f"--rank {rank} with shape {shape} needs about {needed / 2**30:.3g} GiB for the "
            f"{model.upper()} factors, more than this machine can hold ({available / 2**30:.3g} GiB); "
            "choose a smaller --rank"
        )


def _physical_memory() -> int:
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - platforms without sysconf
        return 1 << 40


def build_model(args: argparse.Namespace, ledger: BudgetLedger | None = None, noise: object = None
                ) -> TensorCompletion:
    """The :class:`TensorCompletion` ``complete`` configures (``noise`` replaces ``--noise``)."""
    reg = args.reg
    if reg is not None and reg != "auto":
        try:
            reg = float(reg)
        except ValueError:
            raise ValueError(f"--reg must be a number or 'auto', got {args.reg!r}") from None
    return build_estimator(
        TensorCompletion, rank=None if args.no_factors else args.rank, model=args.model, privacy=args.privacy,
        neighbouring=args.neighbouring,
        epsilon=args.epsilon, delta=args.delta, solver=args.solver, offsets=args.offsets,
        learning_rate=args.lr, reg=reg, reg_core=args.reg_core, reg_bias=args.reg_bias, n_epochs=args.epochs,
        max_iter=args.max_iter, early_stopping=args.early_stopping, batch_size=args.batch_size,
        clip=args.clip,
        max_ratings=args.max_ratings, start=args.start,
        value_range=tuple(args.value_range) if args.value_range else None, random_state=args.seed,
        noise=(noise or args.noise) if args.privacy else None, ledger=ledger,
        verbose=not args.quiet,
    )


def read_training(args: argparse.Namespace) -> TensorEntries:
    """The training entries ``complete`` reads (``--shape``, ``--movielens``, ``--day-origin``, ...).

    Used by ``dptensor audit complete``; under ``--neighbouring user`` the shape must be given.
    """
    problems = missing_options(args)
    if problems:
        raise ValueError("; ".join(problems))
    day_origin = args.day_origin
    if args.movielens and day_origin is None:
        day_origin = ratings_day_origin(args.entries)
    return _read(args.entries, args, tuple(args.shape) if args.shape else None, day_origin)


def run(args: argparse.Namespace) -> int:
    with flag_names({"value_range": "--value-range"}):
        check_options(args)
        begin_report(args)
        with opened_ledger(args, private=args.privacy is not None) as ledger:
            return _run(args, ledger)


#: ``complete``'s ``--ledger`` timing: asked from ``--shape`` under the user relation, else charged
#: after the input checks.
USER_LEDGER_TIMING = (
    "under --neighbouring user the ledger is asked from --shape before any file is opened; "
    + CHARGED_AFTER_INPUT_CHECKS
)


def _planned_user_fit(args: argparse.Namespace) -> list[list[PrivacyGuarantee]]:
    """Under ``--neighbouring user``: the fit's charge from the options and ``--shape`` alone."""
    shape = tuple(args.shape) if len(args.shape) == 3 else (*args.shape, 1)
    with enable_features(*(("unproven",) if args.allow_unproven else ())):
        return [[plan_completion(flat_params(build_model(args)), shape, None).guarantee]]


def _run(args: argparse.Namespace, ledger: BudgetLedger | None) -> int:
    # under --neighbouring user the shape and --day-origin are declared (check_options)
    shape = tuple(args.shape) if args.shape else None
    user = args.neighbouring == "user" and args.privacy is not None
    if user and shape is not None:  # the public sizes are declared: asked before any file is opened
        refuse_before_parsing(ledger, lambda: _planned_user_fit(args), what="the model of this run")
    # MovieLens days count from the earliest rating of all the files, so that the same calendar day
    # has the same index in the training and the test file (a temporal split's test days follow on)
    files = [args.entries] + ([args.test] if args.test else [])
    day_origin = args.day_origin
    if args.movielens and day_origin is None:
        day_origin = ratings_day_origin(*files)
    # under the user relation a file without ratings is a neighbour of one with one user's ratings
    train = _read(args.entries, args, shape, day_origin, allow_empty=user)
    test = _read(args.test, args, shape, day_origin, allow_empty=user) if args.test else None
    if (shape is None or len(shape) == 2) and test is not None:  # sizes from the files: one for both
        shape = tuple(max(a, b) for a, b in zip(train.shape, test.shape, strict=True))
        train = TensorEntries(train.indices, train.values, shape)
        test = TensorEntries(test.indices, test.values, shape)
    # a user x item matrix (3-column file): told by the declared --shape U I, else by the file's
    # format (without --shape the run is not under the user relation, whose format must be public)
    # (args.shape as declared: ``shape`` above may have become the entries' three sizes)
    matrix = not args.movielens and (len(args.shape) == 2 if args.shape else entry_columns(args.entries) == 3)
    if args.movielens and test is not None and train.shape != test.shape:
        raise ValueError("train and test MovieLens files give different shapes; pass --shape")
    check_memory(train.shape, None if args.no_factors else args.rank, args.model)
    if args.top is not None and args.shape is None:  # a declared --shape was checked in check_options
        check_top_n(args.top, train.shape[1], "--top")  # before the fit, with the files' sizes (not private)
    model = build_model(args, ledger)
    start = time.perf_counter()
    with enable_features(*(("unproven",) if args.allow_unproven else ())):
        model.fit(train.indices, train.values, train.shape)
    seconds = time.perf_counter() - start
    # the training error is computed from the private values without noise: shown only without --privacy
    train_rmse = model.history_[-1] if args.privacy is None and model.history_ else None
    # under the user relation even the number of ratings is private: it is not printed
    observed = "" if user else f", {len(train)} observed entries"
    steps = f"{model.n_iter_} {'ALS sweeps' if model.solver_ == 'als' else 'epochs'}"
    n_sweeps = model.n_iter_ + sum(int(step["n_iter"]) for step in model.reg_path_)
    if model.reg_path_:
        # the progress bar counts every sweep, the --reg auto search's included: say both
        steps += f" ({n_sweeps} with the --reg auto search; reg {model.reg_:.3g})"
    what = ("offsets alone (--no-factors)" if args.no_factors
            else f"{args.model.upper()} completion, rank {args.rank}")
    shown = f"{train.shape[0]} x {train.shape[1]} (users x items)" if matrix else f"{train.shape}"
    print(f"{what}, shape {shown}{observed}, {steps}: "
          f"{seconds:.2f} s" + ("" if train_rmse is None else f", training RMSE {train_rmse:.4f}"))
    guarantee = model.guarantee_
    if guarantee is not None:
        print("privacy: " + guarantee.describe())
    if user:
        print("joint DP: the predictions for user i use user i's own ratings -- give them to user i only")
    payload: dict = {"shape": train.shape[:2] if matrix else train.shape,
                     "n_observed": None if user else len(train), "model": args.model,
                     "rank": args.rank, "privacy": args.privacy, "neighbouring": args.neighbouring,
                     "solver": model.solver_, "offsets": model.offsets_, "reg": model.reg_,
                     "n_iter": model.n_iter_, "n_sweeps_total": n_sweeps, "seconds": seconds,
                     "train_rmse": train_rmse,
                     "guarantee": None if guarantee is None else guarantee.to_dict()}
    target = test if test is not None else train
    predictions = model.predict(target.indices)
    if test is not None and user:
        # Joint DP: user i's predictions come from user i's un-noised ratings and may go to user i
        # only; an aggregate over users (an RMSE, a count, a non-finite check) is not released.
        payload["test_rmse"] = payload["test_rmse_constant"] = payload["n_test"] = None
        print("test RMSE: not computed under --neighbouring user (joint DP: an error aggregated over "
              "users' own predictions is not private)")
    elif test is not None:
        if args.privacy:
            choices = ([] if args.privacy == "als" else ["--privacy als (DP-ALS)"]) + ["a larger --epsilon"]
            choices += [] if args.value_range else ["a declared --value-range"]
            advice = (f"--privacy {args.privacy} at --epsilon {args.epsilon:g} adds too much noise: try "
                      + ", ".join(choices))
        else:
            advice = "try another --rank or --reg" + ("" if args.no_factors else ", or --no-factors")
        payload["test_rmse"], payload["test_rmse_constant"] = compare_with_mean(test.values, predictions,
                                                                               advice=advice)
        payload["n_test"] = len(test)
        print(f"test RMSE {payload['test_rmse']:.4f} on {len(test)} entries (predicting their mean: "
              f"{payload['test_rmse_constant']:.4f})")
    # IDs are written back in the base they came in: --one-based files, MovieLens's 1-based user and
    # item ids (its day index k is derived from the timestamps and stays zero-based, as documented)
    base = (1, 1, 1) if args.one_based else (1, 1, 0) if args.movielens else (0, 0, 0)
    if args.out:
        path = Path(args.out)
        with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
            writer = csv.writer(handle)
            # A private fit's output must not carry the private training values it was fitted on.
            with_values = test is not None or args.privacy is None
            modes = ["i", "j"] if matrix else ["i", "j", "k"]  # a matrix has no k
            writer.writerow(modes + ["prediction"] + (["value"] if with_values else []))
            for (i, j, k), pred, value in zip(target.indices.tolist(), predictions.tolist(),
                                              target.values.tolist(), strict=True):
                ids = [i + base[0], j + base[1], k + base[2]][:len(modes)]
                writer.writerow(ids + [repr(float(pred))] + ([repr(float(value))] if with_values else []))
        print(f"wrote predictions to {path} (each user's rows for that user alone: an error computed over "
              "the file is an aggregate the guarantee does not cover; docs/completion.md, 'Held-out users')"
              if user else f"wrote {len(predictions)} predictions to {path}")
    if args.recommend:
        payload["recommendations_file"] = args.recommend
        _write_recommendations(args, model, train, base, user=user)
    if args.json:
        payload["predictions_file"] = args.out
        write_json(args.json, {k: (list(v) if isinstance(v, tuple) else v) for k, v in payload.items()})
    write_completion_report(args, model, train, test, private=args.privacy is not None, user=user)
    if user:
        return 0  # a check over every user's predictions would be an aggregate too
    return 0 if np.all(np.isfinite(predictions)) else 1
