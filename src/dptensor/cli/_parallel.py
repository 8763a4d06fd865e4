"""Command-line options shared by the subcommands that pass over records: ``--scheduler`` and ``--jobs``.

A subcommand adopts them in two lines: ``add_parallel_arguments(parser)`` in its ``register``,
and ``with parallel_session(args) as session:`` around its work, giving ``session.records(X)``
to the estimator as its data and ``n_jobs=session.n_jobs`` to its constructor. With
``--scheduler ADDRESS`` the command connects to that Dask scheduler for its duration, scatters
the records it loaded to the workers in row blocks (files named by a directory of parts are
read by the workers themselves) and every pass runs there; with ``--jobs N`` the passes run on
``N`` threads of this process.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dptensor.parallel import (
    DaskRowBlocks,
    LocalRowBlocks,
    RowBlocks,
    effective_n_jobs,
    from_files,
    rows_of,
    split_rows,
)
from dptensor.streams import load_matrix

__all__ = ["ParallelSession", "add_parallel_arguments", "parallel_session"]

#: Row blocks per worker when records loaded by the command are scattered to a cluster.
BLOCKS_PER_WORKER = 4


def add_parallel_arguments(parser: argparse.ArgumentParser, *, scheduler: bool = True) -> None:
    """Add ``--jobs N`` and (unless ``scheduler=False``) ``--scheduler ADDRESS``."""
    group = parser.add_argument_group(
        "scale out",
        "Run the passes over the records on N threads (--jobs) or on a Dask cluster (--scheduler; "
        "needs pip install 'dptensor[dask]'). Results equal the one-thread run up to rounding.",
    )
    group.add_argument(
        "--jobs", type=int, default=None, metavar="N",
        help="threads for the passes over the records (-1: every core)",
    )  # fmt: skip
    if scheduler:
        group.add_argument(
            "--scheduler",
            metavar="ADDRESS",
            default=None,
            help="address of a running Dask scheduler (e.g. tcp://10.0.0.5:8786): the records are sent to "
            "its workers in row blocks and every pass runs there",
        )


@dataclass
class ParallelSession:
    """What a command needs to run its passes where ``--scheduler``/``--jobs`` say.

    Attributes
    ----------
    n_jobs : int or None
        For the estimator's ``n_jobs`` (``None`` with a scheduler: the cluster's threads are its own).
    client : distributed.Client or None
    """

    n_jobs: int | None
    client: object | None = None

    @property
    def distributed(self) -> bool:
        """Whether the passes run on a Dask cluster."""
        return self.client is not None

    def describe(self) -> str:
        """One line for the command's output: where the passes ran."""
        if self.client is not None:
            workers = self.client.scheduler_info().get("workers", {})
            threads = sum(int(w.get("nthreads", 1)) for w in workers.values())
            address = self.client.scheduler.address
            return f"Dask cluster at {address} ({len(workers)} workers, {threads} threads)"
        jobs = effective_n_jobs(self.n_jobs)
        return "this process, 1 thread" if jobs == 1 else f"this process, {jobs} threads"

    def records(self, data: object) -> object:
        """The records as the estimator should get them: scattered row blocks on a cluster, else ``data``."""
        if self.client is None:
            return data
        workers = max(1, len(self.client.scheduler_info().get("workers", {})))
        n_rows = rows_of(data)
        indptr = getattr(data, "indptr", None)
        ranges = split_rows(n_rows, min(n_rows, BLOCKS_PER_WORKER * workers), indptr)
        blocks = [data[a:b] for a, b in ranges]
        futures = self.client.scatter(blocks, hash=False)
        return DaskRowBlocks(futures, data.shape[1], [b - a for a, b in ranges])

    def parts(self, directory: str | Path) -> RowBlocks:
        """The ``.npz``/``.npy`` files of a directory (by name), one row block each.

        With a scheduler the workers read them (the paths must be visible to them); otherwise they
        are read here and run on ``n_jobs`` threads.
        """
        paths = sorted(p.resolve() for p in Path(directory).iterdir() if p.suffix in (".npz", ".npy"))
        if not paths:
            raise ValueError(f"{directory} holds no .npz or .npy parts")
        if self.client is not None:
            return from_files([str(p) for p in paths])
        blocks = [load_matrix(p) for p in paths]
        widths = {b.shape[1] for b in blocks}
        if len(widths) != 1:
            raise ValueError(f"the parts in {directory} have different numbers of columns: {sorted(widths)}")
        return LocalRowBlocks(blocks, widths.pop(), effective_n_jobs(self.n_jobs))


@contextlib.contextmanager
def parallel_session(args: argparse.Namespace) -> Iterator[ParallelSession]:
    """Connect to ``--scheduler`` for the duration of a command (or check ``--jobs``); yields the session."""
    jobs = getattr(args, "jobs", None)
    address = getattr(args, "scheduler", None)
    if jobs is not None:
        if address is not None:
            raise ValueError(
                "--jobs sets threads in this process; with --scheduler the cluster's workers run the passes"
            )
        effective_n_jobs(jobs)
    if address is None:
        yield ParallelSession(jobs)
        return
    try:
        from distributed import Client
    except ImportError:
        raise ValueError("--scheduler needs Dask: pip install 'dptensor[dask]'") from None
    client = Client(address, timeout="20s", set_as_default=True)
    try:
        yield ParallelSession(None, client)
    finally:
        client.close()
