"""Command-line options shared by the subcommands that release private output.

A subcommand adopts the privacy budget in two lines: ``add_ledger_argument(parser)`` in its
``register``, and ``with opened_ledger(args, private=...) as ledger:`` around its work (before it
reads the data), passing ``ledger=ledger`` to the private function or estimator. A refused charge is
a :class:`~dptensor.privacy.BudgetExceededError` (a ``ValueError``), which ``dptensor``'s main
turns into one ``error:`` line on stderr and exit code 2; the subcommand raises before it
writes any output.
"""

from __future__ import annotations

import argparse
import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence

from dptensor.models.pipeline_plan import check_pipeline_budget
from dptensor.privacy import BudgetLedger, PrivacyGuarantee

__all__ = [
    "ASKED_BEFORE_PARSING",
    "CHARGED_AFTER_INPUT_CHECKS",
    "add_ledger_argument",
    "open_ledger",
    "opened_ledger",
    "refuse_before_parsing",
]


#: When a command's ledger is asked and charged, as its ``--ledger`` help says it.
CHARGED_AFTER_INPUT_CHECKS = (
    "the release is charged to it before anything is computed from the data (the input is read and "
    "checked first, so that an invalid file costs no budget)"
)
ASKED_BEFORE_PARSING = (
    "the ledger is asked for the whole run from the input's public sizes before the input is parsed, "
    "and each release is charged before anything is computed from the data (after the input checks, so "
    "that an invalid file costs no budget)"
)


def add_ledger_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, when: str = CHARGED_AFTER_INPUT_CHECKS
) -> None:
    """Add ``--ledger FILE``: the privacy budget (``dptensor budget create``) charged before any release.

    ``when`` says when the command asks and charges the ledger: :data:`ASKED_BEFORE_PARSING` for a
    command that plans its run from public sizes before it parses the input (``lda fit``),
    :data:`CHARGED_AFTER_INPUT_CHECKS` otherwise.
    """
    parser.add_argument(
        "--ledger",
        metavar="FILE",
        help=f"privacy budget ledger (create it with `dptensor budget create`): {when}; refused (exit code "
        "2, nothing written) if it would exceed the budget",
    )


def open_ledger(args: argparse.Namespace, *, private: bool = True) -> BudgetLedger | None:
    """The ledger named by ``--ledger`` (it must exist), or ``None``.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed arguments of a parser given :func:`add_ledger_argument`.
    private : bool, default True
        Whether this run releases private output; ``--ledger`` without it is an error, since
        nothing would be charged.
    """
    path = getattr(args, "ledger", None)
    if path is None:
        return None
    if not private:
        raise ValueError("--ledger given for a run that releases nothing private: there is nothing to charge")
    return BudgetLedger(path)


@contextlib.contextmanager
def opened_ledger(args: argparse.Namespace, *, private: bool = True) -> Iterator[BudgetLedger | None]:
    """:func:`open_ledger` as a context manager that closes the ledger file when the command ends."""
    ledger = open_ledger(args, private=private)
    try:
        yield ledger
    finally:
        if ledger is not None:
            ledger.close()


def refuse_before_parsing(
    ledger: BudgetLedger | None, plan: Callable[[], Sequence[Sequence[PrivacyGuarantee]]], *, what: str
) -> None:
    """Ask ``ledger`` for a run's planned charges before its input is parsed; refuse if it cannot pay.

    ``plan()`` gives, from the options and the input's public sizes only, each release's possible
    charges in order (:func:`~dptensor.models.pipeline_plan.check_pipeline_budget`, which raises
    :class:`~dptensor.privacy.BudgetExceededError`). A plan that cannot be made (a configuration the
    fit refuses: ``ValueError``) is left to the run's own checks, which say so in their words; the
    plan's warnings come again, in order, from the run itself. The charges are made later, by the
    releases, after the input checks (an invalid file costs no budget).
    """
    if ledger is None:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            steps = plan()
        except ValueError:
            return
    if steps and all(steps):
        check_pipeline_budget(ledger, steps, what=what)
