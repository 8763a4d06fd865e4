"""``dptensor audit lda|single-topic|complete``: an empirical privacy audit of a fit as configured.

Each subcommand takes the options of the fit command it audits (registered by that command:
``lda.add_fit_arguments``, ``single_topic.add_fit_arguments``, ``complete.add_fit_arguments``),
builds the estimator the fit command would (their ``build_*`` functions), and runs
:func:`dptensor.privacy.audit.audit_estimator` on the given data with ``--runs`` fits: it prints
the claimed epsilon, the empirical lower bound at ``--confidence`` and the attack, with a
progress bar on stderr (``--quiet`` hides it), and writes the result as JSON with ``--out``.

The audit fits the data many times; it is a test of the configuration, not a release: its output
(the lower bound, the canaries' scores) is computed from the data without the guarantee's
accounting, so run it on data you may look at (a synthetic or public stand-in, or your own data
on your own machine), never publish it as a private result.
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext

from dptensor._progress import progress_bar
from dptensor.cli import complete, lda, single_topic
from dptensor.cli._io import write_json
from dptensor.cli._options import (
    output_path,
    positive_int,
    probability,
    refuse_unused,
    research_options_last,
    seed,
)
from dptensor.privacy import enable_features
from dptensor.privacy.audit import audit_estimator
from dptensor.privacy.end_to_end_audit import METHODS

EXAMPLES = """examples:
  python -c "from dptensor.datasets import make_single_topic_corpus as m; import numpy as np
  np.save('tokens.npy', m(40, 10, 2, random_state=0).tokens)"
  dptensor audit single-topic tokens.npy -k 2 --n-words 10 --mechanism agn --epsilon 1 --delta 1e-5 \\
      --runs 20
  dptensor audit complete train.csv --rank 2 --value-range 1 5 --privacy als --neighbouring entry-value \\
      --epsilon 1 --runs 30 --out audit.json
"""


def _audit_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("audit")
    group.add_argument("--runs", type=positive_int, default=None,
                       help="fits (default 20 for one-run, 400 for distinguish)")
    group.add_argument("--method", choices=METHODS, default="one-run",
                       help="one-run: many canaries per fit (Steinke, Nasr & Jagielski 2023); distinguish: "
                            "one canary, half the fits with it (default one-run)")
    group.add_argument("--canaries", type=positive_int, default=None,
                       help="one-run: canaries per fit (default: up to 32)")
    group.add_argument("--confidence", type=probability, default=0.95, help="confidence of the bound (0.95)")
    group.add_argument("--audit-seed", type=seed, default=None,
                       help="seed of the audit's public randomness (which canaries, which are included)")
    # replaces the fit command's --out (conflict_handler="resolve")
    group.add_argument("--out", metavar="FILE", help="write the audit result as JSON")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="empirical privacy audit of a private fit: a lower bound on epsilon next to the claim",
        description=(
            "Fit the configured private model many times with canaries (documents of one rare word, "
            "extreme ratings, whole users) and turn membership guesses into a lower confidence bound on "
            "epsilon, printed next to the claimed epsilon. A bound above the claim refutes it."
        ),
        epilog=EXAMPLES,
    )
    actions = parser.add_subparsers(dest="audit_command", metavar="MODEL", required=True)
    for name, module, run, help_text in (
        ("lda", lda, run_lda,
         "PrivateSpectralLDA, or DPVariationalLDA with --method vi (same options as lda fit)"),
        ("single-topic", single_topic, run_single_topic,
         "SingleTopicModel (same options as single-topic fit)"),
        ("complete", complete, run_complete, "TensorCompletion (same options as complete)"),
    ):
        sub = actions.add_parser(name, help=help_text, epilog=EXAMPLES, conflict_handler="resolve")
        module.add_fit_arguments(sub)
        _audit_arguments(sub)
        research_options_last(sub)
        sub.set_defaults(func=run)


def _report(args: argparse.Namespace, make, data, unproven: bool) -> int:  # noqa: ANN001
    output_path(args.out, "--out", suffixes=(".json",))
    runs = args.runs or (400 if args.method == "distinguish" else 20)
    with progress_bar(total=runs, desc="audit fits", unit="fit", enabled=not args.quiet) as bar, \
            (enable_features("unproven") if unproven else nullcontext()):
        result = audit_estimator(
            make, data, n_runs=runs, method=args.method, n_canaries=args.canaries,
            confidence=args.confidence, random_state=args.audit_seed,
            progress=lambda done: bar.update(done - bar.n),
        )
    print(f"claimed: epsilon = {result.epsilon_claimed:g}, delta = {result.delta:g} "
          f"({result.neighbouring!r} relation{'' if result.holds else '; the guarantee does NOT hold'})")
    print(f"empirical lower bound: epsilon >= {result.epsilon_lower:.4g} at confidence "
          f"{result.confidence:g} ({result.method}, {result.n_runs} fits)"
          + (": the claim is REFUTED" if result.violated else ""))
    per_release = result.details.get("per_release", {})
    if len(per_release) > 1:  # one bound per release (Bonferroni), the largest reported above
        print(f"per release (confidence {result.details['release_confidence']:.4g} each): "
              + ", ".join(f"{name} {r['epsilon_lower']:.4g}" for name, r in per_release.items()))
    print(f"attack: {result.attack}")
    if args.out:
        write_json(args.out, result.to_dict())
        print(f"wrote {args.out}")
    return 0


def _quiet_fits(args: argparse.Namespace) -> argparse.Namespace:
    """The options with each fit's own progress output off (the audit shows one bar over the fits)."""
    return argparse.Namespace(**{**vars(args), "quiet": True})


def _refuse_fit_only_options(args: argparse.Namespace) -> None:
    """Fit options the audit would ignore: it charges no ledger and fits one fixed vocabulary many times."""
    refuse_unused(args, ("ledger", "private_vocab", "vocab_share", "max_doc_words"),
                  "not used by the audit (it charges no ledger and audits a fit over a fixed vocabulary)")


def run_lda(args: argparse.Namespace) -> int:
    if args.epsilon is None:
        raise ValueError("--epsilon is required: the audit checks a private fit's claim")
    _refuse_fit_only_options(args)
    lda.check_fit_options(args)
    corpus, fits = lda.load_fit_corpus(args, private=True), _quiet_fits(args)
    return _report(args, lambda: lda.build_private_model(fits), corpus.counts, args.allow_unproven)


def run_single_topic(args: argparse.Namespace) -> int:
    if args.mechanism is None:
        raise ValueError("--mechanism is required: the audit checks a private fit's claim")
    _refuse_fit_only_options(args)
    documents, form, n_words, _ = single_topic.read_documents(
        args.corpus, vocabulary=args.vocab, n_words=args.n_words, private=True,
        token_pattern=args.token_pattern, encoding=args.encoding,
    )
    if form == "tokens" and not isinstance(documents, list):
        documents = list(documents)
    fits = _quiet_fits(args)
    return _report(args, lambda: single_topic.build_model(fits, form, n_words), documents, False)


def run_complete(args: argparse.Namespace) -> int:
    if args.privacy is None:
        raise ValueError("--privacy is required: the audit checks a private fit's claim")
    _refuse_fit_only_options(args)
    train = complete.read_training(args)
    data, fits = (train.indices, train.values, train.shape), _quiet_fits(args)
    return _report(args, lambda: complete.build_model(fits), data, args.allow_unproven)
