"""Scale out: every pass over records as "map over row blocks, then sum", on one backend of three.

:func:`as_row_blocks` turns the input of a fit into :class:`RowBlocks`:

* a NumPy array or SciPy sparse matrix: one block in this process (the default), or row blocks
  run by ``n_jobs`` threads;
* a ``dask.array`` (SciPy sparse or dense chunks): its row chunks, on the active Dask scheduler;
* :class:`RowBlocks` already made, e.g. by :func:`from_bag` (a ``dask.bag`` of documents) or
  :func:`from_files` (files read by the workers).

Estimators then call :meth:`RowBlocks.map` (prepare blocks where they are) and
:meth:`RowBlocks.map_sum` (one verified sum over records). See ``docs/scale.md``.

Examples
--------
>>> import numpy as np
>>> from dptensor.parallel import as_row_blocks
>>> def column_sums(block):
...     return block.sum(axis=0)
>>> X = np.arange(12.0).reshape(6, 2)
>>> as_row_blocks(X, n_jobs=2).map_sum(column_sums)
array([30., 36.])
"""

from __future__ import annotations

from dptensor.parallel._dask import (
    DaskRowBlocks,
    documents_to_csr,
    from_bag,
    from_dask_array,
    from_files,
    is_dask_collection,
)
from dptensor.parallel.blocks import (
    BlockIntegrityError,
    LocalRowBlocks,
    RowBlocks,
    as_local_blocks,
    effective_n_jobs,
    rows_of,
    split_rows,
    take_rows,
)

__all__ = [
    "BlockIntegrityError",
    "DaskRowBlocks",
    "LocalRowBlocks",
    "RowBlocks",
    "as_row_blocks",
    "documents_to_csr",
    "effective_n_jobs",
    "from_bag",
    "from_dask_array",
    "from_files",
    "is_dask_collection",
    "is_distributed",
    "public_shape",
    "rows_of",
    "split_rows",
    "take_rows",
]


def as_row_blocks(X: object, *, n_jobs: int | None = None, n_blocks: int | None = None) -> RowBlocks:
    """The records of ``X`` as :class:`RowBlocks` (see the module docstring for the inputs).

    Parameters
    ----------
    X : array_like, scipy.sparse matrix, dask.array.Array or RowBlocks
    n_jobs : int, optional
        Threads for in-memory input (``None``: 1; ``-1``: every core). Ignored for Dask input,
        whose parallelism is the cluster's.
    n_blocks : int, optional
        Row blocks of in-memory input (default: 1 for one thread, ``2 n_jobs`` otherwise).

    Returns
    -------
    RowBlocks
    """
    if isinstance(X, RowBlocks):
        return X
    if is_dask_collection(X):
        if not hasattr(X, "chunks"):
            raise TypeError(
                f"X is a Dask {type(X).__name__}; pass a dask.array, or make blocks with "
                "dptensor.parallel.from_bag(bag, n_cols) or from_files(paths)"
            )
        return from_dask_array(X)
    return as_local_blocks(X, n_jobs=n_jobs, n_blocks=n_blocks)


def is_distributed(X: object) -> bool:
    """Whether ``X`` is input for the Dask backend (a Dask collection or Dask row blocks)."""
    return isinstance(X, DaskRowBlocks) or is_dask_collection(X)


def public_shape(X: object, *, layout: str = "records x features") -> tuple[int, int]:
    """``(n_rows, n_cols)`` of the input without reading its values where the shape is metadata.

    For Dask input with unknown chunk sizes, or blocks read from files or a bag, the rows are
    counted on the workers (the number of records, which the private estimators treat as public).
    """
    if isinstance(X, RowBlocks):
        return X.shape
    if is_dask_collection(X):
        return from_dask_array(X).shape
    import numpy as np
    import scipy.sparse as sp

    shape = X.shape if sp.issparse(X) or isinstance(X, np.ndarray) else np.shape(X)
    if len(shape) != 2:
        raise ValueError(f"X must be a 2-D ({layout}) matrix, got shape {tuple(shape)}")
    return int(shape[0]), int(shape[1])
