"""``dptensor budget``: create and inspect a persistent privacy budget (a :class:`BudgetLedger` file)."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from dptensor._files import atomic_path
from dptensor.cli._io import write_json
from dptensor.cli._options import add_quiet_argument, output_path, positive_float, probability
from dptensor.privacy import BudgetLedger, Charge, LedgerError, PrivacyWarning
from dptensor.privacy.ledger import is_server_url

_WHERE = "the ledger: a file (SQLite), or a server URL postgresql://USER@HOST/DB?dataset=NAME"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "budget",
        help="create and inspect a privacy budget ledger shared by every run on one data set",
        description=(
            "A budget ledger holds one (epsilon, delta) budget for a data set. Every private dptensor run "
            "given --ledger FILE is charged to it before it reads the data and is refused (exit code 2, "
            "nothing written) if the exact composition (PLD, dp-accounting) of all charges would exceed "
            "the budget. A file ledger is safe for many processes at once on one machine's disk; a ledger "
            "on a PostgreSQL server (--ledger postgresql://USER@HOST/DB?dataset=NAME, pip install "
            "'dptensor[server]') is shared by a team's analysts on several machines."
        ),
        epilog="examples:\n"
        "  dptensor budget create ratings.ledger --epsilon 2 --delta 1e-5 --dataset ratings\n"
        "  dptensor complete train.csv --rank 3 --privacy gradient_dpsgd --neighbouring entry-value \\\n"
        "      --epsilon 0.8 --ledger ratings.ledger\n  dptensor budget show ratings.ledger\n"
        "  dptensor budget create 'postgresql://curator@db/budgets?dataset=ratings' --epsilon 2 "
        "--delta 1e-5 --analyst-role ratings_analysts\n"
        "  dptensor budget migrate ratings.ledger 'postgresql://curator@db/budgets?dataset=ratings'\n",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser(
        "create",
        help="create a new ledger (a file, or a data set's ledger on a server) with a budget",
        description="Create a new budget ledger; an existing one is never replaced.",
        epilog="example:\n"
        "  dptensor budget create ratings.ledger --epsilon 2 --delta 1e-5 --dataset ratings\n",
    )
    create.add_argument("file", metavar="LEDGER", help=f"{_WHERE}; created")
    create.add_argument("--epsilon", type=positive_float, required=True, help="total epsilon budget")
    create.add_argument("--delta", type=probability, required=True, help="total delta budget")
    create.add_argument("--dataset", metavar="NAME", help="name of the data set the budget protects")
    create.add_argument(
        "--neighbouring",
        metavar="RELATION",
        action="append",
        help="relation the ledger accepts (e.g. entry, record, entry-value); repeat it to "
        "accept several (you assert that one change of the protected unit is a "
        "neighbouring change under each); default: fixed by the first charge",
    )
    create.add_argument(
        "--analyst-role",
        metavar="ROLE",
        help="server ledgers: the database role whose members (the analysts) may read and charge it; "
        "they can never change or delete a charge or the budget (default: dptensor_analyst)",
    )
    add_quiet_argument(create)
    create.set_defaults(func=run_create)

    show = actions.add_parser(
        "show", help="the budget, what is spent and left, and a table of charges",
        epilog="example:\n  dptensor budget show ratings.ledger --json budget.json --plot budget.png\n",
    )  # fmt: skip
    show.add_argument("file", metavar="LEDGER", help=_WHERE)
    show.add_argument("--json", metavar="FILE", help="also write the summary and every charge as JSON")
    show.add_argument(
        "--plot", metavar="FILE.png", help="also draw the epsilon spent over time, by caller (PNG)",
    )
    add_quiet_argument(show)
    show.set_defaults(func=run_show)

    history = actions.add_parser(
        "history", help="every charge as a table; with --csv, every field (caller, command line, event, "
                        "guarantee)",
        epilog="example:\n  dptensor budget history ratings.ledger --csv charges.csv\n",
    )  # fmt: skip
    history.add_argument("file", metavar="LEDGER", help=_WHERE)
    history.add_argument(
        "--csv",
        metavar="OUT",
        nargs="?",
        const="-",
        help="write every charge as CSV to OUT (default: standard output)",
    )
    add_quiet_argument(history)
    history.set_defaults(func=run_history)

    accept = actions.add_parser(
        "accept-restore",
        help="accept, deliberately, a ledger restored from an older copy (it forgets later charges)",
        description=(
            "A ledger file restored from a backup forgets every charge made after the backup, so budget "
            "already spent could be spent again; dptensor therefore refuses a ledger that holds fewer "
            "charges than it has seen of it on this machine, or another history. Run this once you have "
            "made sure the restore is what you want: the file's state becomes the one seen, and the "
            "acknowledgement is recorded in dptensor's state directory ($DPTENSOR_STATE_DIR, else "
            "$XDG_STATE_HOME/dptensor, else ~/.local/state/dptensor)."
        ),
        epilog="example:\n  dptensor budget accept-restore ratings.ledger\n",
    )
    accept.add_argument("file", help="the restored ledger file")
    add_quiet_argument(accept)
    accept.set_defaults(func=run_accept_restore)

    change = actions.add_parser(
        "change",
        help="change the budget of a ledger on a server (its curator only; recorded)",
        description=(
            "Set a server ledger's (epsilon, delta) budget: only its curator (the database user that "
            "created it) may, and the server records the change (who, when, before, after) in "
            "dptensor.budget_changes; `budget show` lists them. A file ledger's budget is fixed."
        ),
        epilog="example:\n  dptensor budget change 'postgresql://curator@db/budgets?dataset=ratings' "
        "--epsilon 3 --delta 1e-5\n",
    )
    change.add_argument("file", metavar="URL", help="the server ledger: postgresql://USER@HOST/DB?dataset=NAME")
    change.add_argument("--epsilon", type=positive_float, required=True, help="the new total epsilon budget")
    change.add_argument("--delta", type=probability, required=True, help="the new total delta budget")
    add_quiet_argument(change)
    change.set_defaults(func=run_change)

    migrate = actions.add_parser(
        "migrate",
        help="move a ledger file's history to a ledger on a PostgreSQL server",
        description=(
            "Copy every charge of a ledger file, with its budget and relations, into a new ledger on a "
            "PostgreSQL server (one transaction), check that the server's chained checksum equals the "
            "file's, then mark the file as moved: it stays readable and refuses every further charge."
        ),
        epilog="example:\n  dptensor budget migrate ratings.ledger "
        "'postgresql://curator@db/budgets?dataset=ratings' --analyst-role ratings_analysts\n",
    )
    migrate.add_argument("file", help="the ledger file")
    migrate.add_argument("url", help="the server ledger to create: postgresql://USER@HOST/DB[?dataset=NAME] "
                         "(default name: the file's data set)")  # fmt: skip
    migrate.add_argument("--analyst-role", metavar="ROLE", help="the analysts' database role (default: "
                         "dptensor_analyst)")  # fmt: skip
    add_quiet_argument(migrate)
    migrate.set_defaults(func=run_migrate)


def _open(path: str) -> BudgetLedger:
    return BudgetLedger(path)


def run_create(args: argparse.Namespace) -> int:
    server = is_server_url(args.file)
    if server:
        try:
            existing = BudgetLedger(args.file, dataset=args.dataset)
        except LedgerError as exc:
            if "no budget ledger" not in str(exc):
                raise
        else:
            existing.close()
            raise LedgerError(f"{existing.path} already exists; a ledger is never replaced")
    else:
        if args.analyst_role is not None:
            raise ValueError("--analyst-role is for a ledger on a server (a postgresql:// URL)")
        output_path(args.file, "LEDGER")
        if Path(args.file).exists():
            raise LedgerError(
                f"{args.file} already exists; a ledger is never replaced (delete it to start a new budget)"
            )
    ledger = BudgetLedger(
        args.file,
        epsilon=args.epsilon,
        delta=args.delta,
        dataset=args.dataset,
        neighbouring=args.neighbouring,
        **({"analyst_role": args.analyst_role} if server and args.analyst_role else {}),
    )
    _say(
        args,
        f"created {ledger.path}: budget epsilon={ledger.epsilon:g}, delta={ledger.delta:g}"
        + (f", data set {ledger.dataset!r}" if ledger.dataset is not None else "")
        + (f", relation(s) {', '.join(ledger.relations)}" if ledger.relations else "")
        + (f"; analysts: members of the database role {ledger.analyst_role!r}" if server else "")
    )
    return 0


def _table(charges: Sequence[Charge]) -> list[str]:
    lines = [
        f"{'#':>4}  {'time (UTC)':<19}  {'epsilon':>9}  {'delta':>8}  {'relation':<11}  {'total after':>11}  "
        f"{'who':<24}  description"
    ]
    for c in charges:
        who = f"{c.user}@{c.host}:{c.pid}"
        lines.append(
            f"{c.id:>4}  {c.time[:19].replace('T', ' '):<19}  {c.epsilon:>9.4g}  {c.delta:>8.2g}  "
            f"{c.neighbouring:<11}  {c.spent_after:>11.5g}  {who[:24]:<24}  {c.description}"
        )
    return lines


def _say(args: argparse.Namespace, line: str) -> None:
    if not args.quiet:
        print(line)


def run_show(args: argparse.Namespace) -> int:
    output_path(args.json, "--json")
    output_path(args.plot, "--plot", suffixes=(".png",))
    ledger = _open(args.file)
    summary = ledger.summary()
    charges = ledger.charges()
    print(
        f"budget ledger {ledger.path}"
        + (f" (data set {ledger.dataset!r})" if ledger.dataset is not None else "")
    )
    print(
        f"budget: epsilon={ledger.epsilon:g}, delta={ledger.delta:g}; relation(s): "
        f"{', '.join(summary['relations']) or 'not fixed yet'}; created {ledger.created}"
    )
    print(
        f"spent:  epsilon={summary['spent_epsilon']:.6g} in {len(charges)} charge(s) (exact composition "
        f"at delta={ledger.delta:g})"
    )
    print(f"left:   epsilon={summary['left_epsilon']:.6g}")
    if is_server_url(args.file):
        print(f"analysts: members of the database role {ledger.analyst_role!r}; curator {ledger.curator!r}")
        for change in ledger.budget_changes():
            print(f"changed: {change['time']:%Y-%m-%d %H:%M:%S} by {change['db_user']}: epsilon "
                  f"{change['epsilon_before']:g} -> {change['epsilon_after']:g}, delta "
                  f"{change['delta_before']:g} -> {change['delta_after']:g}")  # fmt: skip
    elif ledger.moved_to:
        print(f"moved:  to {ledger.moved_to} (dptensor budget migrate); this file refuses every charge")
    if any(c.delta < ledger.delta for c in charges):  # why "spent" can be below the charges' epsilons
        print("        (each charge is listed at its own delta; the total is the charges composed exactly "
              f"and stated at the ledger's larger delta={ledger.delta:g}, where the same releases cost less "
              "epsilon)")
    if charges:
        print()
        for line in _table(charges):
            print(line)
    if args.json:
        write_json(args.json, summary)
        _say(args, f"wrote {args.json}")
    if args.plot:
        from dptensor._files import save_figure
        from dptensor.report import plot_budget

        save_figure(plot_budget(charges, budget=ledger.epsilon), args.plot, dpi=90)
        _say(args, f"wrote {args.plot}")
    return 0


def run_history(args: argparse.Namespace) -> int:
    output_path(args.csv, "--csv")
    ledger = _open(args.file)
    charges = ledger.charges()
    if args.csv is None:
        for line in _table(charges):
            print(line)
        return 0
    fields = [f.name for f in dataclasses.fields(Charge)]
    if is_server_url(args.file):  # who inserted each charge, as the server saw it
        origins = {o["id"]: o for o in ledger.charge_origins()}
        fields += ["db_user", "client_addr", "server_time"]
        charges = [_ServerRow(c, origins[c.id]) for c in charges]
    if args.csv == "-":
        _write_rows(sys.stdout, fields, charges)
        return 0
    path = Path(args.csv)
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as handle:
        _write_rows(handle, fields, charges)
    if not args.quiet:
        print(f"wrote {len(charges)} charge(s) to {path}", file=sys.stderr)
    return 0


def run_accept_restore(args: argparse.Namespace) -> int:
    with warnings.catch_warnings():  # (said below, in the command's own words)
        warnings.filterwarnings("ignore", "accepted a restored budget ledger", PrivacyWarning)
        ledger = BudgetLedger(args.file, accept_rollback=True)
    with ledger:
        accepted = ledger.accepted_restore
        if accepted is None:
            _say(args, f"{ledger.path} continues the history seen on this machine: nothing to accept")
            return 0
        _say(
            args,
            f"accepted the restored ledger {ledger.path}: {accepted['seen_n_charges']} charge(s) were seen "
            f"(at {accepted['seen_time']}), the file holds {accepted['file_n_charges']}; the charges made "
            f"after the copy are forgotten. Recorded in {ledger.state_file}",
        )
    return 0


class _ServerRow:
    """A server charge's CSV row: the charge's fields and the server's record of who inserted it."""

    def __init__(self, charge: Charge, origin: dict) -> None:
        self.charge, self.origin = charge, origin

    def to_row(self) -> dict:
        row = self.charge.to_row()
        row.update(db_user=self.origin["db_user"], client_addr=self.origin["client_addr"],
                   server_time=self.origin["server_time"].isoformat())  # fmt: skip
        return row


def _write_rows(handle, fields: list[str], charges: Sequence[Charge]) -> None:  # noqa: ANN001 - a text file
    writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(c.to_row() for c in charges)


def run_change(args: argparse.Namespace) -> int:
    if not is_server_url(args.file):
        raise ValueError(f"{args.file}: a ledger file's budget is fixed when it is created; `budget change` "
                         "is for a ledger on a server (a postgresql:// URL)")  # fmt: skip
    with _open(args.file) as ledger:
        before = (ledger.epsilon, ledger.delta)
        ledger.change_budget(args.epsilon, args.delta)
        _say(args, f"changed the budget of {ledger.path}: epsilon {before[0]:g} -> {ledger.epsilon:g}, delta "
                   f"{before[1]:g} -> {ledger.delta:g} (recorded)")  # fmt: skip
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    from dptensor.privacy.ledger._postgres import migrate_to_server

    if not is_server_url(args.url):
        raise ValueError(f"URL must be a postgresql:// URL, got {args.url!r}")
    ledger = migrate_to_server(args.file, args.url, analyst_role=args.analyst_role)
    with ledger:
        _say(
            args,
            f"moved {len(ledger.charges())} charge(s) of {args.file} to {ledger.path} (checksum "
            f"{ledger.history_checksum()[:16]}... verified); {args.file} now refuses every charge",
        )
    return 0
