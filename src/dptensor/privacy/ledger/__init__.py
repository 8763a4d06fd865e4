"""A persistent privacy budget: one file that every private release on a data set is charged to.

:class:`BudgetLedger` keeps an ``(epsilon, delta)`` budget for one data set in an SQLite file
(the standard library's :mod:`sqlite3`) and records every release made on that data set as
its :class:`dp_accounting.DpEvent`, with the time, the caller (host, process, user, command
line, calling function), a description and the release's own guarantee. The budget spent is
the **exact composition** of all recorded events, never the sum of their epsilons: the events
are regrouped (:func:`~dptensor.privacy.accounting.reduce_event`: Gaussian releases merge into
one Gaussian, Dong, Roth & Su 2022) and composed by dp-accounting's privacy-loss-distribution
(PLD) accountant (Meiser & Mohammadi 2018; Koskela et al. 2020; Doroshenko et al. 2022) via
:func:`dptensor.privacy.accounting.event_epsilon` -- or, when they are all Gaussian, by the
exact analytic Gaussian epsilon (Balle & Wang 2018).

Every private dptensor function and estimator takes ``ledger=`` and charges it through
:func:`dptensor.privacy.begin_release` *before* it reads the private data; a charge that would
take the composed total above the budget raises :class:`~dptensor.privacy.BudgetExceededError`
and nothing is computed.

Concurrency. A charge is one SQLite ``BEGIN IMMEDIATE`` transaction: it takes the database's
write lock, reads every recorded event, composes them with the new one, decides, inserts and
commits. Two charges -- from threads, processes or machines sharing a local disk -- are
therefore serialised, and the budget can never be overspent by a race.

Durability. The journal is SQLite's rollback journal (``journal_mode=DELETE``), not a write-ahead
log, with ``synchronous=EXTRA``: a commit writes the charge into the main file, syncs it, and
deletes the journal (syncing the directory) before :meth:`BudgetLedger.charge` returns. Once it
returns, the charge is in the main file: it survives a crash of the process or a power loss, and
a copy of the file alone holds it. A process killed after its charge keeps the charge (no silent
refund); one killed during the charge leaves no trace of it (its half-written commit is rolled
back from the journal by the next process), and it never started computing either.

Integrity. The file stores the number of charges and a SHA-256 checksum chained over the budget,
every charge's row and the accepted relations; every read of the charges checks both, so a file
that lost charges or has changed bytes (truncated, a flipped bit, a torn copy, a half-written
commit whose journal was lost) is a :class:`~dptensor.privacy.LedgerError`, never a smaller
``spent``.

Restores. A copy restored from a backup is a consistent older ledger: it forgets every charge
made after the backup. Each process therefore remembers, outside the file, the latest state seen
of each ledger (:mod:`dptensor.privacy.ledger._seen`: its number of charges and chained checksum,
keyed by the ledger's ``id``, in a per-user state directory), and refuses a file that holds
fewer charges or another history unless it is opened with ``accept_rollback=True`` (CLI:
``dptensor budget accept-restore FILE``), which records the acknowledgement.

File format. The file's SQLite ``application_id`` marks it as a dptensor ledger and its
``user_version`` is the schema version (2; format 1, WAL mode without checksum, is upgraded
when opened); a file that is not SQLite, an SQLite file of another application, a ledger
written by a newer dptensor, a damaged file, a read-only file or a full disk each give a
:class:`~dptensor.privacy.LedgerError` that says so, and no charge is lost or half-written.
Events are stored as JSON of :meth:`dp_accounting.DpEvent.to_named_tuple`; only event classes
of dp-accounting and dptensor are ever decoded.

On a server. ``BudgetLedger("postgresql://USER@HOST/DB?dataset=NAME")`` is the same ledger kept
in PostgreSQL (:mod:`dptensor.privacy.ledger._postgres`), for a team whose analysts charge one
budget from several machines: grants, row-level security and triggers let analysts charge and
read but never change or remove a charge or the budget.
"""

from __future__ import annotations

from dptensor.privacy.ledger._accounting import (
    _EPSILON_CACHE,  # noqa: F401 - the per-process cache, cleared by tests and the benchmark
    MAX_PLD_POINTS,
    composed_epsilon,
    pld_discretization,
)
from dptensor.privacy.ledger._budget import SERVER_SCHEMES, BudgetLedger, is_server_url
from dptensor.privacy.ledger._events import decode_event, encode_event
from dptensor.privacy.ledger._postgres import ServerLedger, migrate_to_server
from dptensor.privacy.ledger._records import Charge
from dptensor.privacy.ledger._seen import STATE_DIR_VARIABLE, default_state_dir
from dptensor.privacy.ledger._storage import (
    _INHERITED,  # noqa: F401 - connections inherited through a fork (tests check them)
    APPLICATION_ID,
    SCHEMA_VERSION,
)

__all__ = [
    "APPLICATION_ID",
    "MAX_PLD_POINTS",
    "SCHEMA_VERSION",
    "STATE_DIR_VARIABLE",
    "BudgetLedger",
    "Charge",
    "SERVER_SCHEMES",
    "ServerLedger",
    "composed_epsilon",
    "decode_event",
    "default_state_dir",
    "encode_event",
    "is_server_url",
    "migrate_to_server",
    "pld_discretization",
]
