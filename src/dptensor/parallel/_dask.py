"""The Dask backend of :mod:`dptensor.parallel.blocks`: blocks on a cluster, sums on the workers.

Blocks come from a ``dask.array`` (row chunks of SciPy sparse or dense blocks;
``to_delayed()``), a ``dask.bag`` of documents (one block per partition) or a list of files
read by the workers. Nothing here needs a ``distributed.Client``: every computation goes to the
active Dask scheduler -- a client's cluster when one is the default, else Dask's local
scheduler. What the client holds is independent of the number of records: the shared arguments
of a pass (e.g. a ``d x m`` block ``V``), the final sum, and one row count and checksum per
block.

* :meth:`DaskRowBlocks.map` applies a block function on the workers, keeps the results there
  (``persist``) and records each new block's rows and checksum (computed on the worker).
* :meth:`DaskRowBlocks.map_sum` applies a block function to every block and adds the partial
  results in a tree of ``fan_in``-way sums built from ``Delayed`` objects (``dask.array``'s own
  reductions assume dense NumPy chunks and fail on SciPy sparse blocks); only the root comes back
  to the client. Arrays larger than :data:`SCATTER_BYTES` are scattered to the cluster once per
  pass (when a distributed client is active) instead of being copied into every task.

A worker that dies is handled by Dask: its running tasks and the blocks it held are recomputed
from their lineage on the other workers. Each recomputed block carries its own new checksum, so a
source that gives different records the second time is caught at the reduction
(:class:`~dptensor.parallel.blocks.BlockIntegrityError`); a task that kills several workers in
turn ends the fit with Dask's ``KilledWorker``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from dptensor.parallel.blocks import (
    BlockFunction,
    Partial,
    RowBlocks,
    _Seen,
    apply_to_block,
    block_checksum,
    combine_partials,
    nbytes_of,
    rows_of,
)

#: Shared arrays above this size are scattered to the cluster once per pass.
SCATTER_BYTES = 1 << 20
#: Partial sums added per task of the reduction tree.
FAN_IN = 8


def _require_dask() -> None:
    try:
        import dask  # noqa: F401
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "Dask is not installed; install the optional extra: pip install 'dptensor[dask]'"
        ) from exc


@dataclass(frozen=True)
class _Block:
    """A prepared block on a worker, with its row count and checksum taken when it was made."""

    payload: object
    rows: int
    checksum: tuple

    def __sizeof__(self) -> int:
        # The scheduler places tasks by the sizes of their inputs (sys.getsizeof): report the arrays.
        return object.__sizeof__(self) + nbytes_of(self.payload)


def _make_block(func: BlockFunction, source: object, *args: object) -> _Block:
    payload = _unwrap(source)
    result = func(payload, *args)
    return _Block(result, rows_of(result), block_checksum(result))


def _unwrap(block: object) -> object:
    return block.payload if isinstance(block, _Block) else block


def _describe(block: _Block) -> tuple[int, tuple, int | None]:
    shape = getattr(block.payload, "shape", None)
    return block.rows, block.checksum, (int(shape[1]) if shape is not None and len(shape) > 1 else None)


def _apply(
    func: BlockFunction, index: int, block: object, *args: object, local: np.ndarray | None = None,
    row_args: Sequence[np.ndarray] = (),
) -> Partial:  # fmt: skip
    seen = _Seen(block.rows, block.checksum) if isinstance(block, _Block) and local is None else None
    partial = apply_to_block(func, index, seen, _unwrap(block), *args, local=local, row_args=row_args)
    if isinstance(block, _Block) and local is not None:
        partial.seen[index] = _Seen(partial.seen[index].rows, block.checksum)
    return partial


def _active_client() -> object | None:
    """The default ``distributed.Client``, if one is active (never creates one)."""
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - distributed not installed
        return None
    try:
        return default_client()
    except ValueError:
        return None


class DaskRowBlocks(RowBlocks):
    """Row blocks on a Dask cluster (or Dask's local scheduler), as ``Delayed`` objects.

    Parameters
    ----------
    blocks : sequence of dask.delayed.Delayed
        One per block, in row order.
    n_cols : int
    rows : sequence of int, optional
        Rows per block when known without computing.
    checksums : sequence, optional
        Checksums of prepared blocks (set by :meth:`map`).
    """

    backend = "dask"

    def __init__(
        self, blocks: Sequence[object], n_cols: int, rows: Sequence[int] | None = None,
        checksums: Sequence[tuple] | None = None,
    ) -> None:  # fmt: skip
        _require_dask()
        self.blocks = list(blocks)
        if not self.blocks:
            raise ValueError("there must be at least one block")
        super().__init__(n_cols, rows, checksums)

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    def _share(self, value: object) -> object:
        """Send a large array to the cluster once for this pass (a future), else pass it as it is."""
        if isinstance(value, np.ndarray) and value.nbytes > SCATTER_BYTES:
            client = _active_client()
            if client is not None:
                return client.scatter(value, hash=False)
            import dask

            return dask.delayed(value, name=f"dptensor-shared-{uuid.uuid4().hex}")
        return value

    def _groups_by_worker(self) -> list[list[int]] | None:
        """Block indices grouped by the worker holding them (prepared blocks on a distributed cluster)."""
        client = _active_client()
        if client is None or self._checksums is None:
            return None
        keys = [getattr(b, "key", None) for b in self.blocks]
        try:
            holders = client.who_has()
        except Exception:  # noqa: BLE001 - grouping is an optimisation; without it the tree is by index
            return None
        groups: dict[str, list[int]] = {}
        for index, key in enumerate(keys):
            where = holders.get(key) or ["?"]
            groups.setdefault(sorted(where)[0], []).append(index)
        return list(groups.values())

    def map(
        self, func: BlockFunction, *args: object, label: str = "map"
    ) -> DaskRowBlocks:
        import dask

        shared = [self._share(a) for a in args]
        token = uuid.uuid4().hex[:12]
        made = [
            dask.delayed(_make_block, pure=False)(
                func, block, *shared, dask_key_name=f"dptensor-{label}-{token}-{i}"
            )
            for i, block in enumerate(self.blocks)
        ]
        made = list(dask.persist(*made))
        described = dask.compute(*[dask.delayed(_describe, pure=False)(b) for b in made])
        rows = [d[0] for d in described]
        widths = {d[2] for d in described if d[2] is not None}
        n_cols = widths.pop() if len(widths) == 1 else self.n_cols
        return DaskRowBlocks(made, n_cols, rows, [d[1] for d in described])

    def _reduce(
        self,
        func: BlockFunction,
        args: tuple,
        selections: list[tuple[np.ndarray | None, list[np.ndarray]]] | None,
        label: str = "sum",
    ) -> Partial:
        import dask

        shared = [self._share(a) for a in args]
        token = uuid.uuid4().hex[:12]
        pieces = selections or [(None, [])] * self.n_blocks
        level = [
            dask.delayed(_apply, pure=False)(
                func,
                i,
                block,
                *shared,
                local=local,
                row_args=row_args,
                dask_key_name=f"dptensor-{label}-{token}-0-{i}",
            )  # fmt: skip
            for i, (block, (local, row_args)) in enumerate(zip(self.blocks, pieces, strict=True))
        ]
        # Partial sums of the blocks one worker holds are added there first (no network), then across.
        groups = self._groups_by_worker() or [list(range(len(level)))]
        roots = [
            _tree([level[i] for i in group], f"dptensor-{label}-{token}-w{g}")
            for g, group in enumerate(groups)
        ]
        root = _tree(roots, f"dptensor-{label}-{token}-all")
        (partial,) = dask.compute(root)
        return partial


def _tree(parts: list, name: str) -> object:
    """Add ``Delayed`` partial sums in a tree of :data:`FAN_IN`-way :func:`combine_partials` tasks."""
    import dask

    depth = 0
    while len(parts) > 1:
        depth += 1
        parts = [
            dask.delayed(combine_partials, pure=False)(
                *parts[j : j + FAN_IN], dask_key_name=f"{name}-{depth}-{j // FAN_IN}"
            )
            for j in range(0, len(parts), FAN_IN)
        ]
    return parts[0]


def is_dask_collection(value: object) -> bool:
    """Whether ``value`` is a Dask collection (checked without importing Dask when it is not loaded)."""
    if not type(value).__module__.startswith("dask"):
        return False
    import dask

    return dask.is_dask_collection(value)


def from_dask_array(array: object) -> DaskRowBlocks:
    """The row chunks of a 2-D ``dask.array`` (dense or SciPy sparse chunks) as blocks.

    Column chunks are merged first (``rechunk({1: -1})``), so each block holds whole records.
    """
    shape = array.shape
    if len(shape) != 2:
        raise ValueError(f"X must be a 2-D dask array (records x features), got shape {shape}")
    if np.isnan(shape[1]):
        raise ValueError("X has an unknown number of columns; call X.compute_chunk_sizes() first")
    if array.numblocks[1] != 1:
        array = array.rechunk({1: -1})
    rows = None if any(np.isnan(c) for c in array.chunks[0]) else [int(c) for c in array.chunks[0]]
    return DaskRowBlocks(list(array.to_delayed().ravel()), int(shape[1]), rows)


def documents_to_csr(documents: Sequence[object], n_cols: int) -> sp.csr_matrix:
    """A partition of documents as a CSR count matrix, one row per document.

    A document is a mapping ``{word index: count}``, a sequence of word indices (its tokens), or a
    ``1 x n_cols`` SciPy sparse row. Indices outside ``[0, n_cols)`` raise ``ValueError``.
    """
    indptr, indices, data = [0], [], []
    for number, doc in enumerate(documents):
        if isinstance(doc, Mapping):
            words = np.fromiter((int(w) for w in doc.keys()), dtype=np.int64, count=len(doc))
            counts = np.fromiter((float(c) for c in doc.values()), dtype=np.float64, count=len(doc))
        elif sp.issparse(doc):
            row = sp.csr_matrix(doc)
            if row.shape != (1, n_cols):
                raise ValueError(
                    f"document {number} is a sparse matrix of shape {row.shape}, expected (1, {n_cols})"
                )
            words, counts = row.indices.astype(np.int64), row.data.astype(np.float64)
        else:
            tokens = np.asarray(doc, dtype=np.int64).ravel()
            words, inverse = np.unique(tokens, return_inverse=True)
            counts = np.bincount(inverse, minlength=words.size).astype(np.float64)
        if words.size and (words.min() < 0 or words.max() >= n_cols):
            raise ValueError(f"document {number} has a word index outside [0, {n_cols})")
        indices.append(words)
        data.append(counts)
        indptr.append(indptr[-1] + words.size)
    values = np.concatenate(data) if data else np.zeros(0)
    columns = np.concatenate(indices) if indices else np.zeros(0, dtype=np.int64)
    matrix = sp.csr_matrix((values, columns, np.asarray(indptr)), shape=(len(indptr) - 1, n_cols))
    matrix.sum_duplicates()
    return matrix


def from_bag(bag: object, n_cols: int) -> DaskRowBlocks:
    """A ``dask.bag`` of documents as blocks (one per partition; see :func:`documents_to_csr`)."""
    import dask

    n_cols = int(n_cols)
    if n_cols < 1:
        raise ValueError(f"n_cols must be >= 1, got {n_cols}")
    parts = bag.to_delayed()
    return DaskRowBlocks([dask.delayed(documents_to_csr, pure=True)(p, n_cols) for p in parts], n_cols)


def from_files(
    paths: Sequence[str | Path], n_cols: int | None = None, reader: Callable[[str], object] | None = None
) -> DaskRowBlocks:
    """Files read by the workers, one block each (``.npz`` SciPy sparse or ``.npy`` dense by default).

    The paths must be readable from the workers (a shared file system). ``n_cols`` defaults to the
    width of the first file, read from its header on the client.
    """
    import dask

    from dptensor.streams import load_matrix, matrix_shape

    paths = [str(p) for p in paths]
    if not paths:
        raise ValueError("paths is empty: give at least one file")
    read = reader or load_matrix
    if n_cols is None:
        if reader is not None:
            raise ValueError("n_cols is required with a custom reader")
        n_cols = matrix_shape(paths[0])[1]
    return DaskRowBlocks([dask.delayed(read, pure=True)(p) for p in paths], int(n_cols))
