"""Records in row blocks and the one reduction every pass over them uses: map, then sum.

Every statistic dptensor computes from records -- ``M2_hat V`` and the whitened ``M3_hat`` of
spectral LDA, the contractions of a sample moment, the batch sums of the online power method, the
sufficient statistics of the private models -- is a sum over records of a term that depends on
one record (and on a few shared arrays and scalars). Written once as

``statistic = sum_b f(block_b, *shared)``

it runs unchanged on any backend that can apply ``f`` to row blocks and add the results:

==================  ==========================================================================
``"in-process"``    a list of blocks in this process, one after the other (one block, no copy:
                    the default, with no overhead over calling ``f`` directly)
``"threads"``       the same list, ``n_jobs`` blocks at a time in a thread pool (SciPy's sparse
                    kernels and BLAS release the GIL; BLAS is held to one thread per block)
``"dask"``          blocks that live on a Dask cluster (:mod:`dptensor.parallel._dask`): ``f``
                    runs on the workers and the partial sums are added in a tree on the workers
==================  ==========================================================================

Integrity. Every partial sum carries the set of blocks it covers (with each block's row count
and checksum); combining two partials that share a block is an error, and the final sum must
cover every block exactly once, with the rows and checksums recorded when the blocks were
prepared (:meth:`RowBlocks.map`). A block that a cluster lost and recomputed from a source that
no longer gives the same records therefore stops the pass with :class:`BlockIntegrityError`
instead of mixing two data sets into one statistic.

Block functions must be module-level functions (so that they can be sent to Dask workers) and
must not depend on anything but their arguments. Their results may be NumPy arrays, SciPy sparse
matrices, numbers, or tuples, lists and dicts of those; sums are taken element by element.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import zlib
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

BlockFunction = Callable[..., Any]

__all__ = [
    "BlockIntegrityError",
    "LocalRowBlocks",
    "RowBlocks",
    "block_checksum",
    "effective_n_jobs",
    "rows_of",
    "split_rows",
    "take_rows",
]


class BlockIntegrityError(RuntimeError):
    """A reduction did not see every block exactly once, or a block changed between passes."""


@dataclass(frozen=True)
class _Seen:
    """What a partial sum knows about one block it covers."""

    rows: int
    checksum: tuple | None


@dataclass
class Partial:
    """A partial sum over some blocks, with the blocks it covers (see the module docstring)."""

    value: Any
    seen: dict[int, _Seen]

    def __sizeof__(self) -> int:
        # Dask's scheduler sizes objects with sys.getsizeof: count the arrays, or it would move
        # blocks to the partial sums instead of the sums to the blocks.
        return object.__sizeof__(self) + nbytes_of(self.value)


def effective_n_jobs(n_jobs: int | None) -> int:
    """Threads to use: ``None`` means 1, ``-1`` every core, ``-2`` all but one (joblib's convention).

    Raises ``ValueError`` for 0 and ``TypeError`` for a non-integer.
    """
    if n_jobs is None:
        return 1
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral):
        raise TypeError(f"n_jobs must be None or an integer, got {type(n_jobs).__name__}")
    if n_jobs == 0:
        raise ValueError(
            "n_jobs must be a positive number of threads or a negative count from all cores, got 0"
        )
    if n_jobs > 0:
        return int(n_jobs)
    return max(1, (os.cpu_count() or 1) + 1 + int(n_jobs))


def rows_of(payload: object) -> int:
    """Number of rows (records) of a block: ``payload.n_rows``, else ``payload.shape[0]``, else ``len``."""
    rows = getattr(payload, "n_rows", None)
    if rows is not None:
        return int(rows)
    shape = getattr(payload, "shape", None)
    if shape is not None:
        return int(shape[0])
    return len(payload)  # type: ignore[arg-type]


def take_rows(payload: object, local: np.ndarray) -> object:
    """The rows ``local`` (indices within the block) of a block: ``payload.take_rows`` or indexing."""
    take = getattr(payload, "take_rows", None)
    if take is not None:
        return take(local)
    if isinstance(payload, tuple):
        return tuple(take_rows(part, local) for part in payload)
    return payload[local]  # type: ignore[index]


def block_checksum(payload: object) -> tuple:
    """A checksum of a block's contents (CRC-32 of every array, with shapes and dtypes).

    It detects a block that was recomputed with different records; it is not a cryptographic hash
    (and never leaves the machinery: it is not reported anywhere).
    """
    if sp.issparse(payload):
        matrix = payload.tocsr() if payload.format not in ("csr", "csc") else payload
        return (
            matrix.format,
            matrix.shape,
            *(block_checksum(a) for a in (matrix.data, matrix.indices, matrix.indptr)),
        )
    if isinstance(payload, np.ndarray):
        array = np.ascontiguousarray(payload)
        return (array.shape, array.dtype.str, zlib.crc32(memoryview(array).cast("B")) if array.size else 0)
    if dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        return tuple(block_checksum(getattr(payload, f.name)) for f in dataclasses.fields(payload))
    if isinstance(payload, tuple | list):
        return tuple(block_checksum(part) for part in payload)
    if payload is None or isinstance(payload, numbers.Number | str | bytes):
        return (repr(payload),)
    return (type(payload).__name__, zlib.crc32(repr(payload).encode()))


def nbytes_of(value: object) -> int:
    """Bytes held in the arrays of a block or a block-function result (for schedulers' size estimates)."""
    if sp.issparse(value):
        return sum(
            nbytes_of(getattr(value, name, None)) for name in ("data", "indices", "indptr", "row", "col")
        )
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(nbytes_of(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return sum(nbytes_of(v) for v in value.values())
    if isinstance(value, tuple | list):
        return sum(nbytes_of(v) for v in value)
    return 0


def add_values(left: Any, right: Any) -> Any:
    """Element-wise sum of two block-function results of the same structure."""
    if isinstance(left, dict):
        if left.keys() != right.keys():
            raise ValueError(f"block results have different keys: {sorted(left)} and {sorted(right)}")
        return {key: add_values(left[key], right[key]) for key in left}
    if isinstance(left, tuple | list):
        if len(left) != len(right):
            raise ValueError("block results have different lengths")
        return type(left)(add_values(a, b) for a, b in zip(left, right, strict=True))
    return left + right


def combine_partials(*partials: Partial) -> Partial:
    """Add partial sums; a block covered twice raises :class:`BlockIntegrityError`."""
    seen: dict[int, _Seen] = {}
    value: Any = None
    for part in partials:
        twice = seen.keys() & part.seen.keys()
        if twice:
            raise BlockIntegrityError(
                f"block(s) {sorted(twice)} entered a reduction twice; the sum would count their records twice"
            )
        seen.update(part.seen)
        value = part.value if value is None else add_values(value, part.value)
    return Partial(value, seen)


def apply_to_block(
    func: BlockFunction,
    index: int,
    seen: _Seen | None,
    payload: object,
    *args: object,
    local: np.ndarray | None = None,
    row_args: Sequence[np.ndarray] = (),
) -> Partial:
    """One block's term of a reduction, as a :class:`Partial` that names the block it covers."""
    if local is not None:
        payload = take_rows(payload, local)
    value = func(payload, *args, *row_args)
    if seen is None:
        seen = _Seen(rows_of(payload) if local is None else int(local.size), None)
    return Partial(value, {index: seen})


def split_rows(n_rows: int, n_blocks: int, indptr: np.ndarray | None = None) -> list[tuple[int, int]]:
    """Row ranges of ``n_blocks`` near-equal blocks (equal stored entries when ``indptr`` is given)."""
    n_blocks = max(1, min(int(n_blocks), n_rows))
    if indptr is None or indptr[-1] == 0:
        bounds = np.linspace(0, n_rows, n_blocks + 1).round().astype(int)
    else:
        targets = np.linspace(0, indptr[-1], n_blocks + 1)
        bounds = np.searchsorted(indptr, targets, side="left")
        bounds[0], bounds[-1] = 0, n_rows
        bounds = np.maximum.accumulate(np.clip(bounds, 0, n_rows))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


class RowBlocks(ABC):
    """Records (rows) cut into blocks on one backend; the only way dptensor reads them.

    Attributes
    ----------
    backend : str
        ``"in-process"``, ``"threads"`` or ``"dask"``.
    n_cols : int
        Columns of every block.
    """

    backend: str = ""

    def __init__(
        self, n_cols: int, rows: Sequence[int] | None, checksums: Sequence[tuple | None] | None
    ) -> None:
        self.n_cols = int(n_cols)
        self._rows = None if rows is None else [int(r) for r in rows]
        self._checksums = None if checksums is None else list(checksums)

    # -- sizes ---------------------------------------------------------------------------------
    @property
    @abstractmethod
    def n_blocks(self) -> int:
        """Number of blocks."""

    @property
    def block_rows(self) -> list[int]:
        """Rows of each block (counted on the backend the first time they are not known)."""
        if self._rows is None:
            self._rows = self._count_rows()
        return list(self._rows)

    @property
    def rows_known(self) -> bool:
        """Whether the rows per block are known without a pass over the blocks."""
        return self._rows is not None

    @property
    def n_rows(self) -> int:
        """Total number of rows."""
        return int(sum(self.block_rows))

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_rows, n_cols)``."""
        return (self.n_rows, self.n_cols)

    @property
    def offsets(self) -> list[int]:
        """Global index of the first row of each block."""
        return [int(x) for x in np.concatenate([[0], np.cumsum(self.block_rows)[:-1]])]

    def _count_rows(self) -> list[int]:
        partial = self._reduce(_count_block_rows, (), None)
        return [partial.seen[i].rows for i in range(self.n_blocks)]

    # -- the two operations --------------------------------------------------------------------
    @abstractmethod
    def map(
        self, func: BlockFunction, *args: object, label: str = "map"
    ) -> RowBlocks:
        """Blocks ``func(block, *args)``.

        The new blocks stay where the old ones are (on a cluster: in the workers' memory), and
        their rows and checksums are recorded for the integrity checks of later reductions.
        """

    def map_sum(
        self,
        func: BlockFunction,
        *args: object,
        rows: np.ndarray | None = None,
        row_args: Sequence[np.ndarray] = (),
        label: str = "sum",
    ) -> Any:
        """``sum_b func(block_b, *args, *row_args_b)`` over every block, verified.

        Parameters
        ----------
        func : callable
            A module-level function of a block and ``args``.
        *args
            Shared arguments (arrays are sent to a cluster once per pass, not once per block).
        rows : ndarray of int, optional
            Sorted global row indices: each block is first cut to its rows among them.
        row_args : sequence of ndarray
            Arrays with one entry (row) per selected row (per row of the data when ``rows`` is
            None), cut into the blocks' pieces and passed after ``args``.
        label : str
            Name of the pass (in the task names on a cluster).

        Returns
        -------
        The sum, with the structure of ``func``'s result.

        Raises
        ------
        BlockIntegrityError
            When the reduction did not cover every block exactly once, with the rows and
            checksums the blocks had when they were prepared.
        """
        selections = None
        if rows is not None or row_args:
            selections = self._selections(rows, row_args)
        partial = self._reduce(func, args, selections, label=label)
        self._verify(partial, selected=rows is not None)
        return partial.value

    @abstractmethod
    def _reduce(
        self,
        func: BlockFunction,
        args: tuple,
        selections: list[tuple[np.ndarray | None, list[np.ndarray]]] | None,
        label: str = "sum",
    ) -> Partial:
        """The combined :class:`Partial` of ``func`` over every block."""

    def _selections(
        self, rows: np.ndarray | None, row_args: Sequence[np.ndarray]
    ) -> list[tuple[np.ndarray | None, list[np.ndarray]]]:
        offsets, sizes = self.offsets, self.block_rows
        if rows is None:
            for arg in row_args:
                if len(arg) != sum(sizes):
                    raise ValueError(f"row_args must have one entry per row ({sum(sizes)}), got {len(arg)}")
            return [(None, [arg[o : o + s] for arg in row_args]) for o, s in zip(offsets, sizes, strict=True)]
        rows = np.asarray(rows)
        if rows.ndim != 1 or (
            rows.size and (np.any(np.diff(rows) < 0) or rows[0] < 0 or rows[-1] >= sum(sizes))
        ):
            raise ValueError(f"rows must be sorted row indices in [0, {sum(sizes)}), got {rows!r:.80}")
        for arg in row_args:
            if len(arg) != rows.size:
                raise ValueError(
                    f"row_args must have one entry per selected row ({rows.size}), got {len(arg)}"
                )
        cuts = np.searchsorted(rows, np.append(offsets, sum(sizes)))
        return [
            (rows[a:b] - offset, [arg[a:b] for arg in row_args])
            for a, b, offset in zip(cuts[:-1], cuts[1:], offsets, strict=True)
        ]

    def _verify(self, partial: Partial, *, selected: bool = False) -> None:
        expected = set(range(self.n_blocks))
        missing, extra = expected - partial.seen.keys(), partial.seen.keys() - expected
        if missing or extra:
            raise BlockIntegrityError(
                f"a {self.backend} reduction covered {len(partial.seen)} of {self.n_blocks} blocks"
                + (f"; missing {sorted(missing)[:10]}" if missing else "")
                + (f"; unknown {sorted(extra)[:10]}" if extra else "")
                + "; the result would leave records out, so it is refused"
            )
        changed = []
        for index in sorted(expected):
            seen = partial.seen[index]
            if not selected and self._rows is not None and seen.rows != self._rows[index]:
                changed.append(index)
            elif self._checksums is not None and seen.checksum != self._checksums[index]:
                changed.append(index)
        if changed:
            raise BlockIntegrityError(
                f"block(s) {changed[:10]} changed since they were prepared (a worker was lost and the "
                "block was recomputed from a source that no longer gives the same records); the pass "
                "would mix two data sets, so it is refused. Use a source that gives the same records "
                "when read again (seeded generators, files that do not change)"
            )


def _count_block_rows(payload: object) -> int:
    return rows_of(payload)


class LocalRowBlocks(RowBlocks):
    """Blocks held in this process; ``n_jobs > 1`` runs them in a thread pool.

    Parameters
    ----------
    payloads : sequence
        The blocks (matrices, arrays, or objects with ``n_rows``/``shape``).
    n_cols : int
    n_jobs : int, default 1
        Threads (already resolved by :func:`effective_n_jobs`).
    """

    def __init__(self, payloads: Sequence[object], n_cols: int, n_jobs: int = 1) -> None:
        self.payloads = list(payloads)
        if not self.payloads:
            raise ValueError("there must be at least one block")
        self.n_jobs = max(1, int(n_jobs))
        self.backend = "threads" if self.n_jobs > 1 and len(self.payloads) > 1 else "in-process"
        super().__init__(n_cols, [rows_of(p) for p in self.payloads], None)

    @property
    def n_blocks(self) -> int:
        return len(self.payloads)

    def _run(self, calls: list[Callable[[], Any]]) -> Iterator[Any]:
        """The calls' results in order; on threads at most ``2 n_jobs`` run or wait at a time."""
        if self.backend == "in-process":
            yield from (call() for call in calls)
            return
        from threadpoolctl import threadpool_limits

        # One BLAS thread per block: the pool is the parallelism (no oversubscription).
        window = 2 * self.n_jobs
        with (
            threadpool_limits(limits=1, user_api="blas"),
            ThreadPoolExecutor(min(self.n_jobs, len(calls))) as pool,
        ):
            pending = deque(pool.submit(call) for call in calls[:window])
            for call in calls[window:]:
                yield pending.popleft().result()
                pending.append(pool.submit(call))
            while pending:
                yield pending.popleft().result()

    def map(
        self, func: BlockFunction, *args: object, label: str = "map"
    ) -> LocalRowBlocks:
        calls = [lambda p=p: func(p, *args) for p in self.payloads]
        payloads = list(self._run(calls))
        width = getattr(payloads[0], "shape", (0, self.n_cols))
        return LocalRowBlocks(payloads, int(width[1]) if len(width) > 1 else self.n_cols, self.n_jobs)

    def _reduce(
        self,
        func: BlockFunction,
        args: tuple,
        selections: list[tuple[np.ndarray | None, list[np.ndarray]]] | None,
        label: str = "sum",
    ) -> Partial:
        pieces = selections or [(None, [])] * self.n_blocks
        calls = [
            (lambda i=i, p=p, s=s: apply_to_block(func, i, None, p, *args, local=s[0], row_args=s[1]))
            for i, (p, s) in enumerate(zip(self.payloads, pieces, strict=True))
        ]
        # Added in block order, as they come: the result does not depend on which thread finished
        # first, and only a few partial sums are held at a time.
        total: Partial | None = None
        for partial in self._run(calls):
            total = partial if total is None else combine_partials(total, partial)
        return total


def as_local_blocks(data: object, n_jobs: int | None = None, n_blocks: int | None = None) -> LocalRowBlocks:
    """An in-memory matrix as :class:`LocalRowBlocks`: one block, or row blocks for ``n_jobs`` threads.

    With more than one thread the rows are cut into ``n_blocks`` (default ``2 n_jobs``) blocks of
    near-equal stored entries (sparse) or rows (dense); SciPy sparse input is read as CSR.
    """
    jobs = effective_n_jobs(n_jobs)
    shape = getattr(data, "shape", None)
    if shape is None or len(shape) != 2:
        data = np.asarray(data)
        shape = data.shape
        if len(shape) != 2:
            raise ValueError(f"X must be a 2-D matrix (records x features), got shape {shape}")
    count = n_blocks if n_blocks is not None else (1 if jobs == 1 else 2 * jobs)
    if count <= 1 or shape[0] <= 1:
        return LocalRowBlocks([data], shape[1], jobs)
    if sp.issparse(data):
        data = sp.csr_matrix(data)
        ranges = split_rows(shape[0], count, data.indptr)
    else:
        ranges = split_rows(shape[0], count)
    return LocalRowBlocks([data[a:b] for a, b in ranges], shape[1], jobs)
