"""``dptensor recommend``: top-N recommendations from implicit feedback (fit, top, plan, evaluate).

``fit`` reads an interaction file (:func:`~dptensor.datasets.interactions.read_interactions`),
fits a :class:`~dptensor.models.recommend.Recommender` -- or, with ``--epsilon``, a
:class:`~dptensor.models.recommend.PrivateRecommender`, private at user level (one user's whole
row replaced by any other) -- and saves it
(:func:`~dptensor.models.recommend.persistence.save_recommender`; the training rows are never
saved). ``top`` lists items for new users from their own file and the saved item side only.
``plan`` predicts, from public sizes, how a private fit compares with popularity. ``evaluate``
runs the field's protocols (:mod:`dptensor.evaluation.topn`) with popularity and private
popularity beside the model.

Privacy of ``fit --epsilon``: the number of users (the users listed in the file, also those none
of whose lines passes ``--threshold``) is public under the replace-one-user relation; the item
catalogue must be public too (``--items FILE``, interactions with other items dropped without a
word) or chosen under DP (``--catalogue select``). Nothing printed or written depends on the
interactions except through the release: no counts of lines, interactions or dropped items, no
timings, no line numbers in errors.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from dptensor._files import atomic_path
from dptensor.cli._io import write_json
from dptensor.cli._options import (
    add_noise_argument,
    add_quiet_argument,
    flag_names,
    output_path,
    positive_float,
    positive_int,
    probability,
    progress_line,
    refuse_problems,
    refuse_unused,
    seed,
)
from dptensor.cli._privacy import (
    ASKED_BEFORE_PARSING,
    add_ledger_argument,
    opened_ledger,
    refuse_before_parsing,
)
from dptensor.cli._report import begin_report, finish_report
from dptensor.datasets.interactions import FORMATS, Interactions, read_interactions
from dptensor.models.recommend.estimator import METHODS, Recommender
from dptensor.models.recommend.options import RecommenderOptions
from dptensor.models.recommend.persistence import read_recommender_file, save_recommender
from dptensor.models.recommend.private_estimator import PrivateRecommender
from dptensor.models.recommend.ranking import check_top_n
from dptensor.privacy import BudgetLedger
from dptensor.report import ReportPage, add_guarantee

#: ``fit``'s options of a private fit (refused without --epsilon).
PRIVATE_OPTIONS = ("delta", "catalogue", "max_items_per_user", "noise")
#: A private fit's delta when --delta is not given.
DEFAULT_DELTA = 1e-6
#: ``--report`` suffixes: an HTML page, or the summary as JSON.
REPORT_SUFFIXES = (".html", ".htm", ".json")
#: The columns of ``evaluate``'s table: (metric key, heading).
TABLE = (("ndcg@10", "NDCG@10"), ("recall@20", "Recall@20"), ("precision@10", "precision@10"),
         ("coverage", "coverage"))

FIT_EXAMPLES = """examples:
  python -c "from dptensor.datasets.interactions_model import planted_interactions as p
  X = p(random_state=0).tocoo(); rows = [f'u{u},m{i}\\n' for u, i in zip(X.row, X.col)]
  open('plays.csv', 'w').writelines(['user,item\\n', *rows])
  open('items.txt', 'w').writelines(f'm{i}\\n' for i in range(X.shape[1]))
  open('new_users.csv', 'w').writelines(['user,item\\n', 'ann,m1\\n', 'ann,m7\\n', 'bob,m3\\n'])"
  dptensor recommend fit plays.csv --out model.npz                      # EASE (the default)
  dptensor recommend top model.npz --for new_users.csv --top 5 --out top.csv
  dptensor recommend fit plays.csv --epsilon 1 --delta 1e-6 --items items.txt --out private.npz
  dptensor recommend fit plays.csv --method ials --set iterations=10 --out ials.npz
  dptensor recommend evaluate plays.csv --seeds 3 --epsilon 1 --out results.json
"""

TOP_EXAMPLES = """examples:
  dptensor recommend top model.npz --for new_users.csv --top 5 --out top.csv
"""

PLAN_EXAMPLES = """examples:
  dptensor recommend plan --users 100000 --items 2000 --epsilon 1 --delta 1e-6
"""

EVALUATE_EXAMPLES = """examples:
  dptensor recommend evaluate plays.csv --seeds 3 --out results.json
  dptensor recommend evaluate ml-100k.inter --relevant-threshold 4 --epsilon 1 --out results.json
  dptensor recommend evaluate plays.csv --protocol held-out-users --test-users 500
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "recommend",
        help="top-N recommendations from implicit feedback (popularity, EASE, implicit ALS), optionally "
             "private at user level",
        description="Top-N recommendations from implicit feedback: fit a model on an interaction file "
                    "(user,item[,value] rows, RecBole .inter, MovieLens u.data), list items for new "
                    "users from their own file, plan a private fit, evaluate as the field does "
                    "(docs/recommend.md).",
        epilog=FIT_EXAMPLES,
    )  # fmt: skip
    actions = parser.add_subparsers(dest="recommend_command", metavar="ACTION", required=True)
    _register_fit(actions)
    _register_top(actions)
    _register_plan(actions)
    _register_evaluate(actions)


def _file_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--format", choices=FORMATS, default="auto",
                        help="the file's format (default auto: RecBole .inter by its header, else "
                             "user,item[,value] rows with the delimiter and any header found)")
    parser.add_argument("--threshold", type=float, default=None, metavar="T",
                        help="a listed pair is an interaction when its value (third column, RecBole's "
                             "rating) is at least T (e.g. 4 for 'rated 4 or 5'); default: every listed pair")


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", choices=METHODS, default="auto",
                        help="popularity, ease (Steck 2019) or ials (implicit ALS, Hu, Koren & Volinsky "
                             "2008); default auto: EASE (private: the planner's choice)")
    parser.add_argument("--factors", type=positive_int, default=None, metavar="K",
                        help="implicit ALS factors (default 64)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="options",
                        help="a solver setting of RecommenderOptions, e.g. --set ridge_scale=4 --set "
                             "iterations=10 (ridge, ridge_scale, dense_items, low_rank, regularization, "
                             "alpha, iterations, ...); repeat it for several")
    parser.add_argument("--seed", type=seed, default=None,
                        help="seed of the public randomness (ALS start, splits); the privacy noise is "
                             "always fresh")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="threads for the passes over users (-1: every core)")


def _privacy_arguments(parser: argparse.ArgumentParser, *, ledger: bool) -> argparse._ArgumentGroup:
    group = parser.add_argument_group(
        "differential privacy (user level: one user's whole row replaced by any other row; the number of "
        "users -- those listed in FILE, also users none of whose lines passes --threshold -- is public)")
    group.add_argument("--epsilon", type=positive_float, default=None,
                       help="privacy budget: fit a PrivateRecommender (joint DP: the released item side "
                            "is DP; each user's list is computed from their own row and the release)")
    group.add_argument("--delta", type=probability, default=None,
                       help=f"delta (default {DEFAULT_DELTA:g})")
    if ledger:
        add_ledger_argument(group, when=ASKED_BEFORE_PARSING)
    group.add_argument("--items", metavar="ITEMFILE", default=None,
                       help="the public item list, one id per line: the model's columns, in that order; "
                            "interactions with other items are dropped (not counted, not reported). "
                            "Without --epsilon: a fixed catalogue")
    group.add_argument("--catalogue", choices=("public", "select"), default=None,
                       help="public: the --items list (the default with --items); select: choose the items "
                            "that may appear under DP (partition selection, charged in the same guarantee). "
                            "The ids in FILE itself are never a public catalogue: which items occur is "
                            "private")
    group.add_argument("--max-items-per-user", type=positive_int, default=None, metavar="M",
                       help="bound on one user's contribution to the item selection (and rows capped where "
                            "a method needs it); default: the estimator's rule")
    add_noise_argument(group, not_covered="--catalogue select's secret choice of the items kept from a row "
                       "longer than --max-items-per-user (PCG64)")
    return group


def _register_fit(actions: argparse._SubParsersAction) -> None:
    fit = actions.add_parser(
        "fit", help="fit a top-N model on an interaction file and save it",
        description="Fit a top-N model on FILE and save it to --out (.npz: the item side only; the "
                    "training rows are never saved). With --epsilon the fit is private at user level "
                    "and --ledger is asked before FILE is read and charged before the interactions are "
                    "fitted.",
        epilog=FIT_EXAMPLES,
        usage="%(prog)s [-h] FILE --out MODEL.npz [--method M] [--epsilon E --delta D --items ITEMFILE] "
              "[option ...]",
    )  # fmt: skip
    fit.add_argument("file", metavar="FILE", help="interactions: user,item[,value] rows (comma or tab, a "
                     "header optional), a RecBole .inter file or MovieLens u.data")
    fit.add_argument("--out", metavar="MODEL.npz", required=True, help="the model file to write (.npz)")
    _file_arguments(fit)
    _model_arguments(fit)
    add_quiet_argument(fit)
    _privacy_arguments(fit, ledger=True)
    fit.add_argument("--report", metavar="FILE.html",
                     help="also write a report: .html (guarantee, budget with --ledger, the model, the "
                          "command) or .json (the summary printed, as JSON)")
    fit.set_defaults(func=run_fit)


def _register_top(actions: argparse._SubParsersAction) -> None:
    top = actions.add_parser(
        "top", help="each new user's best items, from their own interactions and a saved model",
        description="List each user of --for's N best items not in their own row, from that row and the "
                    "model's item side only (recommend_for). Items the model does not know are left out of "
                    "the rows. Under a private model each list is for its user alone (joint DP).",
        epilog=TOP_EXAMPLES,
    )  # fmt: skip
    top.add_argument("model", metavar="MODEL", help="a model file written by 'dptensor recommend fit --out'")
    top.add_argument("--for", dest="users_file", metavar="FILE", required=True,
                     help="the users' own interactions (same formats as fit)")
    top.add_argument("--top", type=positive_int, default=None, metavar="N",
                     help="items per user (default 10, or every item of a smaller catalogue)")
    top.add_argument("--out", metavar="FILE.csv", required=True,
                     help="write user,rank,item,score rows (original ids; every user gets N rows, an empty "
                          "item and score in the slots left over)")
    _file_arguments(top)
    add_quiet_argument(top)
    top.set_defaults(func=run_top)


def _register_plan(actions: argparse._SubParsersAction) -> None:
    plan = actions.add_parser(
        "plan", help="predict, from public sizes only, how a private fit compares with popularity",
        description="Predict from public sizes (users, items, a per-user bound, epsilon, delta) the ratio of "
                    "a private fit's Recall@20 to the non-private one and to popularity, and the method the "
                    "default would choose; nothing is read or charged (plan_recommender).",
        epilog=PLAN_EXAMPLES,
    )  # fmt: skip
    plan.add_argument("--users", type=positive_int, required=True, metavar="U", help="number of users")
    plan.add_argument("--items", type=positive_int, required=True, metavar="I", help="number of items")
    plan.add_argument("--epsilon", type=positive_float, required=True, help="privacy budget epsilon")
    plan.add_argument("--delta", type=probability, default=DEFAULT_DELTA,
                      help=f"delta (default {DEFAULT_DELTA:g})")
    plan.add_argument("--max-items-per-user", type=positive_int, default=None, metavar="M",
                      help="the fit's bound on one user's items (default: the fit's rule)")
    plan.add_argument("--typical-items", type=positive_float, default=None, metavar="M",
                      help="a public guess of a typical user's number of interactions (default 100, or "
                           "fewer where the items or --max-items-per-user are fewer)")
    add_quiet_argument(plan)
    plan.set_defaults(func=run_plan)


def _register_evaluate(actions: argparse._SubParsersAction) -> None:
    evaluate = actions.add_parser(
        "evaluate", help="evaluate a model as the field does, popularity and private popularity beside it",
        description="Split FILE (per-user: 20%% of each user's listed pairs held out; held-out-users: test "
                    "users' rows 80%% folded in, 20%% to find), fit popularity, private popularity, the "
                    "model (and, with --epsilon, its private version) on the training part, and score the "
                    "lists with NDCG@10, Recall@20, precision@10 and coverage, averaged over --seeds "
                    "splits. An evaluation reads the held-out interactions without noise: its numbers are "
                    "not private (no ledger).",
        epilog=EVALUATE_EXAMPLES,
    )  # fmt: skip
    evaluate.add_argument("file", metavar="FILE", help="interactions (same formats as fit)")
    _file_arguments(evaluate)
    evaluate.add_argument("--relevant-threshold", type=float, default=None, metavar="R",
                          help="a held-out pair is relevant when its value is at least R (e.g. 4: the "
                               "MovieLens protocol); default: every held-out interaction")
    _model_arguments(evaluate)
    evaluate.add_argument("--epsilon", type=positive_float, default=None,
                          help="also evaluate the private model at this epsilon (private popularity uses it "
                               "too; default 1)")
    evaluate.add_argument("--delta", type=probability, default=DEFAULT_DELTA,
                          help=f"delta (default {DEFAULT_DELTA:g})")
    evaluate.add_argument("--protocol", choices=("per-user", "held-out-users"), default="per-user",
                          help="per-user random 80/20 split (default) or held-out users folded in")
    evaluate.add_argument("--test-users", type=positive_int, default=None, metavar="N",
                          help="held-out-users: the number of test users (default a fifth, at most 10000)")
    evaluate.add_argument("--seeds", type=positive_int, default=3, metavar="S",
                          help="random splits averaged (default 3)")
    evaluate.add_argument("--out", metavar="FILE.json",
                          help="write every split's metrics and the means as JSON")
    add_quiet_argument(evaluate)
    evaluate.set_defaults(func=run_evaluate)


# ----------------------------------------------------------------------------- shared pieces


def parse_options(settings: list[str]) -> RecommenderOptions | None:
    """``--set KEY=VALUE ...`` as :class:`RecommenderOptions` (``None`` when none is given)."""
    if not settings:
        return None
    options = RecommenderOptions()
    for setting in settings:
        key, sep, text = setting.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE (e.g. --set ridge_scale=4), got {setting!r}")
        value: object
        if text.lower() == "none":
            value = None
        else:
            try:
                value = int(text)
            except ValueError:
                try:
                    value = float(text)
                except ValueError:
                    raise ValueError(f"--set {key}: expected a number or 'none', got {text!r}") from None
        try:
            options.set_params(**{key.strip(): value})
        except ValueError as exc:
            raise ValueError(f"--set: {exc}") from None
    with flag_names({"options": "--set"}):
        return options.checked()


def read_item_list(path: str) -> np.ndarray:
    """``--items``: one id per line (blank lines skipped), int64 when every id is an integer."""
    lines = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()]
    ids = [line for line in lines if line]
    if not ids:
        raise ValueError(f"--items {path} lists no item (one id per line)")
    if len(set(ids)) != len(ids):
        raise ValueError(f"--items {path} lists an id twice: each item needs its own line")
    try:
        return np.array([int(item) for item in ids], dtype=np.int64)
    except ValueError:
        return np.array(ids, dtype=str)


def _same_kind(ids: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``ids`` comparable with ``like``: both integers, else both text."""
    if ids.dtype.kind == "i" and like.dtype.kind == "i":
        return ids
    return ids.astype(str)


def onto_items(data: Interactions, item_ids: np.ndarray) -> tuple[sp.csr_array, int]:
    """The interactions' columns put onto ``item_ids`` (in that order); returns the matrix and the number of
    interactions with items outside the list (dropped)."""
    known = _same_kind(item_ids, data.item_ids)
    mine = _same_kind(data.item_ids, item_ids)
    order = np.argsort(known, kind="stable")
    place = np.searchsorted(known[order], mine)
    place = np.minimum(place, known.size - 1)
    found = known[order][place] == mine
    column = np.where(found, order[place], -1)
    coo = sp.coo_array(data.matrix)
    new_col = column[coo.col]
    keep = new_col >= 0
    matrix = sp.csr_array((coo.data[keep], (coo.row[keep], new_col[keep])), shape=(data.shape[0], known.size))
    matrix.sort_indices()
    return matrix, int(np.count_nonzero(~keep))


def _read(args: argparse.Namespace, path: str, *, private: bool) -> Interactions:
    with flag_names({"threshold": "--threshold", "format": "--format"}):
        return read_interactions(path, format=args.format, threshold=args.threshold, private=private)


# ----------------------------------------------------------------------------- fit


def check_fit_options(args: argparse.Namespace) -> None:
    """Refuse, before any file is read, options that do nothing or that would leak."""
    output_path(args.out, "--out", suffixes=(".npz",))
    if args.report is not None:
        output_path(args.report, "--report", suffixes=REPORT_SUFFIXES)
    if args.method != "ials":
        refuse_unused(args, ["factors"], "--factors sets the implicit ALS factors (--method ials)")
    if args.epsilon is None:
        refuse_unused(args, PRIVATE_OPTIONS,
                      "privacy options need --epsilon; without it the fit is not private")
        return
    problems = []
    if args.catalogue == "select" and args.items is not None:
        problems.append("--items and --catalogue select exclude each other: the catalogue is either the "
                        "public list or chosen under DP")
    if args.catalogue is None and args.items is None:
        problems.append(f"--epsilon needs a public item catalogue: pass --items ITEMFILE (the public list "
                        f"of item ids, one a line) or --catalogue select (choose the items under DP); the "
                        f"item ids in {args.file} are not public (which items occur depends on the users)")
    if args.catalogue == "select" and args.method == "auto":
        problems.append(f"--catalogue select needs --method popularity, ease or ials: --method auto asks "
                        f"the planner, which reads the number of items, and here that is the number of "
                        f"distinct items in {args.file} (private)")
    if args.catalogue == "public" and args.items is None:
        problems.append("--catalogue public needs the public list: pass --items ITEMFILE")
    refuse_problems(problems)


def build_model(args: argparse.Namespace, ledger: BudgetLedger | None = None, noise: object = None) -> object:
    """The estimator ``recommend fit`` configures (``noise`` replaces ``--noise``, e.g. for tests)."""
    options = parse_options(args.options)
    n_jobs = args.jobs
    if args.epsilon is None:
        return Recommender(method=args.method, n_factors=args.factors, options=options,
                           random_state=args.seed, n_jobs=n_jobs, verbose=not args.quiet)
    return PrivateRecommender(
        epsilon=args.epsilon, delta=DEFAULT_DELTA if args.delta is None else args.delta, method=args.method,
        n_factors=args.factors, max_items_per_user=args.max_items_per_user,
        catalogue=args.catalogue or "public", options=options,
        random_state=args.seed, n_jobs=n_jobs, noise=noise or args.noise, ledger=ledger,
        verbose=not args.quiet,
    )


#: The estimator's parameters as ``recommend fit``'s flags, in its errors.
FIT_FLAGS = {"n_factors": "--factors", "max_items_per_user": "--max-items-per-user", "n_jobs": "--jobs",
             "catalogue": "--catalogue"}


def run_fit(args: argparse.Namespace) -> int:
    check_fit_options(args)
    model = build_model(args)  # checks --set before anything is read (the ledger is attached below)
    if args.report is not None and Path(args.report).suffix.lower() != ".json":
        begin_report(args)
    private = args.epsilon is not None
    with opened_ledger(args, private=private) as ledger:
        if ledger is not None:
            # the fit's charges depend on its parameters alone: asked before a line of FILE is read
            refuse_before_parsing(ledger, lambda: [model.planned_guarantees()], what="the model of this run")
            model.set_params(ledger=ledger)
        data = _read(args, args.file, private=private)
        item_ids = data.item_ids
        matrix = data.matrix
        if args.items is not None:
            item_ids = read_item_list(args.items)
            matrix, _ = onto_items(data, item_ids)  # the count dropped is private: never shown
        items = "items chosen under DP" if args.catalogue == "select" else f"{matrix.shape[1]} items"
        progress_line(f"{matrix.shape[0]} users, {items}" + (" (public)" if private and args.items else
                      " (users public)" if private else ""), args.quiet)
        start = time.perf_counter()
        with flag_names(FIT_FLAGS):
            model.fit(matrix)
        seconds = time.perf_counter() - start
    selected = args.catalogue == "select"  # the file's items are private: keep the selected ones only
    saved_ids = item_ids[model.items_] if selected else item_ids
    save_recommender(model, args.out, item_ids=saved_ids, binarisation=data.binarisation, source=args.file,
                     selected_only=selected)
    summary = _fit_summary(args, model, data, seconds, len(saved_ids))
    print(summary["line"])
    guarantee = getattr(model, "guarantee_", None)
    if guarantee is not None:
        print("privacy: " + guarantee.describe())
        print("joint DP: a user's list is computed from their own row and the released item side -- give it "
              "to that user alone")
    print(f"wrote the model to {args.out}")
    _write_fit_report(args, model, summary, saved_ids)
    return 0


def _fit_summary(args: argparse.Namespace, model: object, data: Interactions, seconds: float, n_items: int
                 ) -> dict:
    """What ``fit`` prints and its JSON report holds: public sizes and the guarantee on a private fit.

    ``n_items``: the model's items as saved (under ``--catalogue select`` the ones selected, a release;
    the number of items in the file is private and never shown).
    """
    private = args.epsilon is not None
    guarantee = getattr(model, "guarantee_", None)
    summary = {"method": model.method_, "n_users": int(model.n_users_), "n_items": n_items,
               "binarisation": data.binarisation, "model_file": args.out,
               "catalogue": None if not private else (args.catalogue or "public"),
               "guarantee": None if guarantee is None else guarantee.to_dict()}
    what = f"private {model.method_}" if private else model.method_
    items = (f"{n_items} items selected under DP" if args.catalogue == "select"
             else f"{n_items} items" + (" (the public list)" if private else ""))
    line = f"{what} model: {model.n_users_} users, {items}"
    if not private:  # counts and timings of the interactions are shown only when nothing is private
        summary["n_interactions"] = int(data.n_interactions)
        summary["seconds"] = seconds
        line += f", {data.n_interactions} interactions ({data.binarisation}): {seconds:.2f} s"
    summary["line"] = line
    return summary


def _write_fit_report(args: argparse.Namespace, model: object, summary: dict, item_ids: np.ndarray) -> None:
    if args.report is None:
        return
    if Path(args.report).suffix.lower() == ".json":
        write_json(args.report, {key: value for key, value in summary.items() if key != "line"})
        print(f"wrote report {args.report}")
        return
    shown = np.argsort(-np.asarray(model.popularity_), kind="stable")[:10]
    rows = [("method", summary["method"]), ("users", summary["n_users"]), ("items", summary["n_items"]),
            ("catalogue", summary["catalogue"] or "the file's items (not private)"),
            ("binarisation", summary["binarisation"])]
    page = ReportPage("dptensor recommender report")
    add_guarantee(page, getattr(model, "guarantee_", None))
    page.heading("Model")
    page.table(["setting", "value"], rows)
    page.heading("Most popular items" + (" (by the released, noisy counts)" if args.epsilon else ""))
    page.paragraph("What a user with no interactions is recommended (and what breaks ties of the others).")
    page.table(["rank", "item"], [(rank + 1, str(item_ids[j])) for rank, j in enumerate(shown)])
    if args.epsilon is not None:
        page.paragraph("Joint DP: a user's list is computed from their own row and the released item side; "
                       "no aggregate over the training users' lists is shown.", css="note")
    finish_report(args, page)


# ----------------------------------------------------------------------------- top


def run_top(args: argparse.Namespace) -> int:
    output_path(args.out, "--out", suffixes=(".csv",))
    saved = read_recommender_file(args.model)
    model = saved.model
    n = check_top_n(args.top, model.n_items_, "--top")
    item_ids = saved.item_ids if saved.item_ids is not None else np.arange(model.n_items_, dtype=np.int64)
    data = _read(args, args.users_file, private=False)  # the users' own rows: for them, not a release
    rows, unknown = onto_items(data, item_ids)
    found = model.recommend_for(rows, n)
    with atomic_path(args.out) as tmp, open(tmp, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["user", "rank", "item", "score"])
        for who, rank, item, score in found.rows():
            kept = item >= 0
            writer.writerow([data.user_ids[who], rank, item_ids[item] if kept else "",
                             repr(score) if kept else ""])
    left = "" if not unknown else f" ({unknown} interactions with items the model does not know left out)"
    print(f"wrote the top {n} items of each of the {rows.shape[0]} users of {args.users_file} to {args.out}"
          + left)
    return 0


# ----------------------------------------------------------------------------- plan


def run_plan(args: argparse.Namespace) -> int:
    """``dptensor recommend plan``: :func:`~dptensor.models.recommend.plan.plan_recommender`'s verdict."""
    from dptensor.models.recommend.plan import plan_recommender

    flags = {"n_users": "--users", "n_items": "--items", "max_items_per_user": "--max-items-per-user",
             "typical_items_per_user": "--typical-items"}
    with flag_names(flags):
        plan = plan_recommender(args.users, args.items, epsilon=args.epsilon, delta=args.delta,
                                max_items_per_user=args.max_items_per_user,
                                typical_items_per_user=args.typical_items)
    print(plan.verdict)
    print(f"assumed: {plan.typical_items_per_user:g} interactions per user; a private EASE would reach "
          f"{plan.ease_ratio_to_popularity:.2f}x popularity's Recall@20 and "
          f"{plan.ease_ratio_to_nonprivate:.2f}x non-private EASE's")
    print(f"'dptensor recommend fit --epsilon {args.epsilon:g}' with --method auto fits {plan.method}")
    return 0


# ----------------------------------------------------------------------------- evaluate


def _binary(matrix: sp.csr_array, threshold: float | None) -> sp.csr_array:
    """The pairs of ``matrix`` whose value is at least ``threshold`` (every pair without one), as 1.0."""
    out = sp.csr_array(matrix, copy=True)
    if threshold is not None:
        out.data = np.where(out.data >= threshold, 1.0, 0.0)
        out.eliminate_zeros()
    out.data[:] = 1.0
    return out


def _evaluated_models(args: argparse.Namespace, options: RecommenderOptions | None, seed_value: int
                      ) -> dict[str, object]:
    """The models ``evaluate`` compares, by the name shown (``{method}``: the method fitted)."""
    epsilon = 1.0 if args.epsilon is None else args.epsilon
    auto = " (auto)" if args.method == "auto" else ""
    models: dict[str, object] = {
        "popularity": Recommender(method="popularity"),
        f"private popularity (eps={epsilon:g})": PrivateRecommender(epsilon=epsilon, delta=args.delta,
                                                                    method="popularity"),
        "{method}" + auto: Recommender(method=args.method, n_factors=args.factors, options=options,
                                       random_state=seed_value, n_jobs=args.jobs),
    }
    if args.epsilon is not None:
        models["private {method}" + auto + f" (eps={epsilon:g})"] = PrivateRecommender(
            epsilon=epsilon, delta=args.delta, method=args.method, options=options, random_state=seed_value,
            n_jobs=args.jobs)
    return models


def run_evaluate(args: argparse.Namespace) -> int:
    from dptensor.evaluation.topn import evaluate_top_n, held_out_users_split, per_user_split

    output_path(args.out, "--out", suffixes=(".json",))
    if args.protocol != "held-out-users":
        refuse_unused(args, ["test_users"], "--test-users sets the held-out-users protocol's test users")
    options = parse_options(args.options)
    data = _read(args, args.file, private=False)
    listed = data.values if data.values is not None else data.matrix
    relevant_threshold = args.relevant_threshold if args.relevant_threshold is not None else args.threshold
    if args.relevant_threshold is not None and data.values is None:
        raise ValueError(f"--relevant-threshold needs values: {args.file} has no value column")
    n_users, n_items = data.shape
    n = min(100, n_items)
    ks = tuple(k for k in (10, 20, 100) if k <= n) or (n,)
    base = 0 if args.seed is None else args.seed
    results: dict[str, list[dict]] = {}
    for split in range(args.seeds):
        seed_value = base + split
        if args.protocol == "per-user":
            train_values, test_values = per_user_split(listed, 0.2, random_state=seed_value)
            train, fold_in, relevant = _binary(train_values, args.threshold), None, _binary(test_values,
                                                                                            relevant_threshold)
        else:
            test_users = args.test_users if args.test_users is not None else max(1, min(10000, n_users // 5))
            with flag_names({"n_test_users": "--test-users"}):
                parts = held_out_users_split(listed, test_users, random_state=seed_value)
            train, fold_in = _binary(parts.train, args.threshold), _binary(parts.fold_in, args.threshold)
            relevant = _binary(parts.target, relevant_threshold)
        for name, model in _evaluated_models(args, options, seed_value).items():
            progress_line(f"split {split + 1}/{args.seeds}: {name}", args.quiet)
            with flag_names(FIT_FLAGS):
                model.fit(train)
            lists = model.recommend(n) if fold_in is None else model.recommend_for(fold_in, n)
            shown = name.format(method=model.method_)  # auto: the method it chose (public sizes only)
            results.setdefault(shown, []).append(evaluate_top_n(lists.items, relevant, ks))
    means = {name: {key: float(np.mean([run[key] for run in runs])) for key in runs[0]}
             for name, runs in results.items()}
    reference = means["popularity"].get("ndcg@10", float("nan"))
    header = ["model", *(title for _, title in TABLE), "NDCG@10 / popularity"]
    ratios = {name: (scores.get("ndcg@10", float("nan")) / reference if reference > 0 else None)
              for name, scores in means.items()}
    rows = [[name, *(_cell(scores.get(key)) for key, _ in TABLE), _cell(ratios[name], "{:.2f}x")]
            for name, scores in means.items()]
    print(f"{args.protocol} protocol, {args.seeds} split(s), {n_users} users x {n_items} items "
          f"({data.binarisation}); relevant: "
          + ("every held-out interaction" if relevant_threshold is None
             else f"a held-out value >= {relevant_threshold:g}"))
    _print_table(header, rows)
    print("not private: an evaluation reads the held-out interactions without noise")
    if args.out:
        write_json(args.out, {"protocol": args.protocol, "seeds": [base + s for s in range(args.seeds)],
                              "n_users": n_users, "n_items": n_items, "binarisation": data.binarisation,
                              "relevant_threshold": relevant_threshold, "list_length": n,
                              "means": means, "per_split": results,
                              "ndcg@10_ratio_to_popularity": ratios})
        print(f"wrote {args.out}")
    return 0


def _cell(value: float | None, spec: str = "{:.4f}") -> str:
    return "-" if value is None or not np.isfinite(value) else spec.format(value)


def _print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(row[c])) for row in [header, *rows]) for c in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) if c == 0 else str(cell).rjust(width)
                        for c, (cell, width) in enumerate(zip(row, widths, strict=True))))
