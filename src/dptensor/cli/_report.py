"""``--report FILE.html`` of the fitting subcommands, registered and written in one place.

A subcommand adopts it in three lines: :func:`add_report_arguments` in its ``register``,
:func:`begin_report` before any work (checks the path, notes the start time and the ledger's
budget before the run), and ``write_topic_report`` / ``write_completion_report`` at the end.

What a private fit's page shows is only what its printed output may show: the guarantee, public
sizes, the released model, errors on held-out data, the ledger. The start time (taken before the
data is read) is shown, never a duration; baselines fitted on the private training data without
noise are left out (the page says so).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dptensor.cli._options import output_path
from dptensor.privacy import BudgetLedger
from dptensor.privacy.ledger import is_server_url
from dptensor.report import (
    ReportPage,
    add_budget,
    add_completion_errors,
    add_guarantee,
    add_provenance,
    add_vocabulary,
    topic_report,
)

__all__ = ["ReportRun", "add_report_arguments", "begin_report", "finish_report",
           "write_completion_report", "write_topic_report"]

REPORT_SUFFIXES = (".html", ".htm")


@dataclass
class ReportRun:
    """A requested report: where it goes, the command, its start time and the budget before it."""

    path: Path
    argv: list[str] | None
    started: str
    ledger_before: dict[str, Any] | None


def add_report_arguments(parser: argparse.ArgumentParser, *, test: bool = False) -> None:
    """Add ``--report FILE.html`` (and, for topic models, ``--report-test CORPUS``)."""
    group = parser.add_argument_group("report")
    group.add_argument("--report", metavar="FILE.html",
                       help="also write a self-contained HTML report: guarantee, budget (with --ledger), "
                       "charts, held-out evaluation, the command and versions")
    if test:
        group.add_argument("--report-test", metavar="CORPUS",
                           help="held-out corpus (same vocabulary) for the report's perplexity and coherence")


def _utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def begin_report(args: argparse.Namespace) -> ReportRun | None:
    """Check ``--report`` before any work and note the start; ``None`` without ``--report``."""
    path = getattr(args, "report", None)
    if path is None:
        if getattr(args, "report_test", None) is not None:
            raise ValueError("--report-test: needs --report FILE.html (it evaluates the model for it)")
        return None
    output_path(path, "--report", suffixes=REPORT_SUFFIXES)
    before = None
    ledger = getattr(args, "ledger", None)
    if ledger is not None and (is_server_url(ledger) or Path(ledger).exists()):
        with contextlib.closing(BudgetLedger(ledger)) as opened:
            before = opened.summary()
    run = ReportRun(Path(path), getattr(args, "_argv", None), _utc_now(), before)
    args._report = run
    return run


def finish_report(args: argparse.Namespace, page: ReportPage, *, note: str = "") -> None:
    """Add the budget (with ``--ledger``) and provenance sections, write the page, say so."""
    run: ReportRun | None = getattr(args, "_report", None)
    if run is None:
        return
    if getattr(args, "ledger", None) is not None:
        with contextlib.closing(BudgetLedger(args.ledger)) as ledger:
            add_budget(page, run.ledger_before, ledger.summary(), ledger.charges())
    add_provenance(page, run.argv, run.started, note=note)
    page.write(run.path)
    print(f"wrote report {run.path}")


def _load_test_counts(
    path: str, vocabulary: list[str] | None, vocab_file: str | None, n_words: int, args: argparse.Namespace
) -> Any:
    """``--report-test``: counts over the model's words, split and decoded as the fit's corpus was."""
    from dptensor.datasets.corpus import (
        DEFAULT_ENCODING,
        SKLEARN_TOKEN_PATTERN,
        is_count_file,
        load_corpus,
        load_text_corpus,
    )

    encoding = getattr(args, "encoding", DEFAULT_ENCODING)
    if not is_count_file(Path(path)) and vocabulary is not None:  # plain text, as the fit's corpus
        counts = load_text_corpus(path, fixed_vocabulary=vocabulary, encoding=encoding,
                                  token_pattern=getattr(args, "token_pattern", SKLEARN_TOKEN_PATTERN)).counts
    else:
        counts = load_corpus(path, vocabulary=vocab_file, encoding=encoding).counts
    if counts.shape[1] != n_words:
        raise ValueError(f"--report-test {path} has {counts.shape[1]} words but the model has {n_words}")
    return counts


def write_topic_report(
    args: argparse.Namespace, model: Any, vocabulary: list[str] | None, train_counts: Any = None,
    *, title: str = "dptensor topic model report", test: str | None = None,
    guarantees: dict[str, Any] | None = None,
) -> None:
    """Write a topic model's report if ``--report`` was given.

    ``train_counts`` (a non-private fit's corpus) gives the unigram baseline; a private fit passes
    none: its word frequencies are private and not released. ``guarantees`` (``lda fit``'s with a
    private vocabulary) puts the ``total_guarantee`` (vocabulary + model) on the page.
    """
    if getattr(args, "_report", None) is None:
        return
    test = test if test is not None else getattr(args, "report_test", None)
    counts = None
    if test is not None:
        counts = _load_test_counts(test, vocabulary, getattr(args, "vocab", None), model.components_.shape[1],
                                   args)
    guarantee = (guarantees or {}).get("total_guarantee") or getattr(model, "guarantee_", None)
    private = guarantee is not None
    train, note = None, ""
    if train_counts is not None and not private:
        train = train_counts
    elif private:
        note = ("No unigram baseline: it would be the training corpus's word frequencies, computed from the "
                "private documents without noise.")
    else:
        note = "No unigram baseline: the training corpus is not at hand."
    page = topic_report(model, vocabulary, title=title, test=counts, train=train, unigram_note=note,
                        top=getattr(args, "top", 10), guarantee=guarantee)
    vocabulary = getattr(args, "_private_vocabulary", None)  # lda fit --private-vocab: public sizes
    if vocabulary is not None:
        add_vocabulary(page, vocabulary["asked"], vocabulary["released"], vocabulary.get("predicted"),
                       (guarantees or {}).get("vocabulary_guarantee"))
    finish_report(args, page)


def write_completion_report(
    args: argparse.Namespace, model: Any, train: Any, test: Any | None, *, private: bool, user: bool
) -> None:
    """Write a completion fit's report if ``--report`` was given (``train``/``test``: TensorEntries).

    Joint-DP rule (``user``: a private fit under the user relation): user i's predictions use user
    i's ratings without noise, so no aggregate over users (RMSE, counts per user) is shown. On other
    private fits the observed indices are public (entry-value) but the values are not: the mean and
    bias baselines, fitted on them without noise, are left out.
    """
    if getattr(args, "_report", None) is None:
        return
    page = ReportPage("dptensor tensor completion report")
    add_guarantee(page, model.guarantee_)
    # joint DP however it is stated: the relation, or the guarantee's own details
    user = user or bool(private and model.guarantee_ is not None and model.guarantee_.details.get("joint_dp"))
    page.heading("Model")
    settings = [("model", args.model.upper()), ("rank", args.rank), ("shape", str(train.shape)),
                ("privacy", args.privacy or "none"), ("neighbouring", args.neighbouring or "-")]
    page.table(["setting", "value"], settings)
    if user:
        page.heading("Held-out error")
        page.paragraph(
            "Not shown, by the joint-DP rule: under the 'user' relation the prediction for user i uses user "
            "i's own ratings without noise, so any aggregate of predictions over users (an RMSE, an error by "
            "number of ratings) -- and the number of ratings per user itself -- is not covered by the "
            "guarantee. Give each user their own predictions only.", css="note")
    elif test is None:
        page.heading("Held-out error")
        page.paragraph("No --test entries given: no held-out error.")
    else:
        predictions = {"this model": model.predict(test.indices),
                       # the held-out values' own mean: a public constant (as 'complete' prints it)
                       "constant: the test entries' mean": np.full(len(test), float(np.mean(test.values)))}
        if not private:
            from dptensor.models.completion import TensorCompletion

            predictions["mean baseline"] = np.full(len(test), float(np.mean(train.values)))
            biases = TensorCompletion(None, value_range=model.value_range, random_state=args.seed).fit(
                train.indices, train.values, train.shape)
            predictions["bias baseline (mean + user/item/day biases)"] = biases.predict(test.indices)
        add_completion_errors(page, test.indices, test.values, predictions, train.indices)
        if private:
            page.paragraph("The mean and bias baselines are left out: they are fitted on the private "
                           "training "
                           "values without noise. The counts of ratings per user and item come from the "
                           "observed indices, public under the 'entry-value' relation.", css="note")
    finish_report(args, page)


def model_file_guarantee(path: str | Path) -> dict[str, Any] | None:
    """The guarantee recorded in a model file (``.json`` or ``.npz`` with a ``meta`` entry).

    The ``total_guarantee`` (vocabulary + model, ``lda fit --private-vocab``) when the file has one.
    """
    path = Path(path)
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"])) if "meta" in f.files else {}
    else:
        meta = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(meta, dict):
        return None
    return meta.get("total_guarantee") or meta.get("guarantee")


def command_line(argv: list[str] | None) -> list[str]:
    """The arguments of this run (``sys.argv[1:]`` when ``main`` was called without a list)."""
    return list(sys.argv[1:] if argv is None else argv)
