"""Streaming readers: row batches of a data set that is never loaded whole.

The streaming tensor power method (Wang & Anandkumar 2016, Algorithm 2) reads each data point
once, ``n`` at a time, and keeps only ``O(d(k + L))`` numbers. These readers feed it from files
too large for memory, holding one batch at a time:

======================  =============================================================
:class:`NpyStream`        dense ``.npy`` (``n x d``) through :func:`numpy.load` memory mapping
:class:`CsvStream`        CSV / TSV / whitespace text, parsed ``batch_size`` lines at a time
:class:`SparseNpzStream`  SciPy sparse CSR ``.npz`` (compressed or not), decoded in row blocks
                          from the zip members; a single dense array saved by ``numpy.savez``
                          is streamed the same way
:class:`GeneratorStream`  any Python iterable / generator of rows or batches, re-chunked
:class:`ArrayStream`      an in-memory dense or sparse matrix, in row slices
:class:`DaskArrayStream`  a ``dask.array``, in lazy row slices summed on the workers
======================  =============================================================

Every reader is a :class:`BatchStream`: iterating it yields batches of exactly ``batch_size``
rows (the last may be shorter) as float64 ndarrays or CSR matrices, from the beginning each time
it is iterated, and :meth:`BatchStream.iter_from` starts at any row (used to resume a
checkpointed fit). :func:`open_stream` picks the reader from a file's suffix.
"""

from __future__ import annotations

import itertools
import zipfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from dptensor._files import check_binary
from dptensor._validation import check_positive_int

#: A batch of records as rows.
Batch = np.ndarray | sp.csr_matrix

_SKIP_CHUNK = 1 << 20  # items read at a time when skipping through a zip member


class BatchStream(ABC):
    """A re-iterable source of row batches.

    Parameters
    ----------
    batch_size : int
        Rows per batch; every batch but the last of a pass has exactly this many rows.
    """

    def __init__(self, batch_size: int) -> None:
        self.batch_size = check_positive_int(batch_size, "batch_size")

    @property
    def n_samples(self) -> int | None:
        """Number of rows, when known without reading the data (``None`` otherwise)."""
        return None

    def __iter__(self) -> Iterator[Batch]:
        return self.iter_from(0)

    def iter_from(self, start: int) -> Iterator[Batch]:
        """Yield the batches of rows ``start, start + 1, ...`` (batches aligned at ``start``)."""
        start = check_positive_int(start, "start", minimum=0)
        if self.n_samples is not None and start > self.n_samples:
            raise ValueError(f"start must be at most the number of rows {self.n_samples}, got {start}")
        return self._iter_from(start)

    @abstractmethod
    def _iter_from(self, start: int) -> Iterator[Batch]:
        """Yield batches from row ``start`` (already validated)."""


class ArrayStream(BatchStream):
    """Row slices of an in-memory dense array or SciPy sparse matrix (converted to CSR once)."""

    def __init__(self, data: np.ndarray | sp.spmatrix, batch_size: int) -> None:
        super().__init__(batch_size)
        if sp.issparse(data):
            self.data = sp.csr_matrix(data)
        else:
            self.data = np.asarray(data)
            if self.data.ndim != 2:
                raise ValueError(f"data must be a 2-dimensional array, got shape {self.data.shape}")

    @property
    def n_samples(self) -> int:
        return int(self.data.shape[0])

    @property
    def n_features(self) -> int:
        """Number of columns ``d``."""
        return int(self.data.shape[1])

    def _iter_from(self, start: int) -> Iterator[Batch]:
        for lo in range(start, self.n_samples, self.batch_size):
            yield self.data[lo : lo + self.batch_size]


class DaskArrayStream(ArrayStream):
    """Row slices of a 2-D ``dask.array``, left lazy: each batch is computed where it is summed.

    The online power method gives each batch to :mod:`dptensor.parallel`, which computes its
    row blocks on the workers of the active Dask scheduler and brings back only their sums, so
    the records never reach the client. Needs known chunk sizes.
    """

    def __init__(self, data: object, batch_size: int) -> None:
        BatchStream.__init__(self, batch_size)
        self.data = check_lazy_matrix(data, "data")


def check_lazy_matrix(data: object, name: str = "X") -> object:
    """Check the shape of a lazy (Dask) data matrix: 2-D, known sizes, at least one row and column.

    The values are checked block by block where they are computed.
    """
    shape = getattr(data, "shape", None)
    if shape is None or len(shape) != 2:
        raise ValueError(f"{name} must be a 2-D (records x features) array, got shape {shape}")
    if any(isinstance(s, float) and np.isnan(s) for s in shape):
        raise ValueError(f"{name} has unknown chunk sizes; call {name}.compute_chunk_sizes() first")
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(shape)})")
    return data


class NpyStream(BatchStream):
    """Batches of a dense 2-D ``.npy`` file read through memory mapping.

    Only the rows of the current batch are copied into memory (as float64).

    Parameters
    ----------
    path : str or Path
        A ``.npy`` file holding a numeric ``n x d`` array.
    batch_size : int
    """

    def __init__(self, path: str | Path, batch_size: int) -> None:
        super().__init__(batch_size)
        self.path = _existing(path)
        self._array = np.load(check_binary(self.path, "npy"), mmap_mode="r", allow_pickle=False)
        if self._array.ndim != 2:
            raise ValueError(f"{self.path} must hold a 2-dimensional array, got shape {self._array.shape}")
        if self._array.dtype.kind not in "biuf":
            raise ValueError(f"{self.path} must hold a numeric array, got dtype {self._array.dtype}")

    @property
    def n_samples(self) -> int:
        return int(self._array.shape[0])

    @property
    def n_features(self) -> int:
        """Number of columns ``d``."""
        return int(self._array.shape[1])

    def _iter_from(self, start: int) -> Iterator[Batch]:
        for lo in range(start, self.n_samples, self.batch_size):
            yield np.array(self._array[lo : lo + self.batch_size], dtype=np.float64)


class CsvStream(BatchStream):
    """Batches of a delimited text file (CSV, TSV, whitespace), parsed a batch at a time.

    Blank lines and lines starting with ``comments`` are not rows; every other line is one
    record. All rows must have the same number of fields.

    Parameters
    ----------
    path : str or Path
    batch_size : int
    delimiter : str, optional
        Field separator; default tab for ``.tsv``/``.tab`` files, comma for ``.csv`` and any
        whitespace otherwise.
    skip_header : int or "auto", default "auto"
        Lines to skip at the top of the file. ``"auto"`` skips the first row when none of its
        fields is a number (a header such as ``a,b,c``; a row such as ``1,x`` is a data row with a
        bad cell, an error); an integer skips exactly that many lines.
    comments : str, default "#"
    """

    def __init__(
        self,
        path: str | Path,
        batch_size: int,
        *,
        delimiter: str | None = None,
        skip_header: int | str = "auto",
        comments: str = "#",
    ) -> None:
        super().__init__(batch_size)
        self.path = _existing(path)
        if delimiter is None:
            suffix = self.path.suffix.lower()
            delimiter = "\t" if suffix in (".tsv", ".tab") else "," if suffix == ".csv" else None
        self.delimiter = delimiter
        self.comments = comments
        if skip_header == "auto":
            first = next(self._rows(0), None)
            skip_header = 1 if first is not None and _is_header(first, delimiter) else 0
        self.skip_header = check_positive_int(skip_header, "skip_header", minimum=0)

    def _rows(self, skip: int) -> Iterator[str]:
        """The data lines after the first ``skip`` lines (no blank or comment lines)."""
        with open(self.path, encoding="utf-8") as handle:
            for line in itertools.islice(handle, skip, None):
                if line.strip() and not line.lstrip().startswith(self.comments):
                    yield line

    def _iter_from(self, start: int) -> Iterator[Batch]:
        rows = self._rows(self.skip_header)
        try:
            for _ in itertools.islice(rows, start):
                pass
            width = None
            position = start
            while True:
                chunk = list(itertools.islice(rows, self.batch_size))
                if not chunk:
                    return
                try:
                    batch = np.loadtxt(
                        chunk, delimiter=self.delimiter, comments=self.comments, dtype=np.float64, ndmin=2
                    )
                except ValueError as exc:
                    raise ValueError(
                        f"{self.path}: cannot parse data rows {position}..{position + len(chunk) - 1}: {exc}"
                    ) from exc
                if width is None:
                    width = batch.shape[1]
                elif batch.shape[1] != width:
                    raise ValueError(
                        f"{self.path}: data rows {position}.. have {batch.shape[1]} fields, "
                        f"earlier rows have {width}"
                    )
                position += len(chunk)
                yield batch
        finally:
            rows.close()


def _is_header(line: str, delimiter: str | None) -> bool:
    """Whether no field of a text row is a number (column names, not data)."""
    for cell in line.split(delimiter):
        try:
            float(cell)
        except ValueError:
            continue
        return False
    return True


class _NpyMember:
    """Sequential reader of a 1-D or C-ordered ``.npy`` member of a zip archive."""

    def __init__(self, archive: zipfile.ZipFile, name: str, path: Path) -> None:
        self.name = f"{path}:{name}"
        self.handle = archive.open(name)
        version = np.lib.format.read_magic(self.handle)
        if version == (1, 0):
            header = np.lib.format.read_array_header_1_0(self.handle)
        elif version == (2, 0):
            header = np.lib.format.read_array_header_2_0(self.handle)
        else:
            raise ValueError(f"{self.name}: unsupported .npy format version {version}")
        self.shape, fortran_order, self.dtype = header
        if self.dtype.hasobject:
            raise ValueError(f"{self.name} holds Python objects; refusing to unpickle")
        if fortran_order and len(self.shape) > 1:
            raise ValueError(f"{self.name} is stored in Fortran order; rows cannot be streamed")

    def read(self, count: int) -> np.ndarray:
        nbytes = int(count) * self.dtype.itemsize
        buffer = bytearray()
        while len(buffer) < nbytes:
            piece = self.handle.read(nbytes - len(buffer))
            if not piece:
                raise ValueError(f"{self.name} is truncated")
            buffer += piece
        return np.frombuffer(buffer, dtype=self.dtype)

    def skip(self, count: int) -> None:
        while count > 0:
            step = min(count, _SKIP_CHUNK)
            self.read(step)
            count -= step

    def close(self) -> None:
        self.handle.close()


class SparseNpzStream(BatchStream):
    """Row blocks of a SciPy sparse ``.npz`` file (CSR), never loading the whole matrix.

    :func:`scipy.sparse.save_npz` writes the arrays ``indptr``, ``indices`` and ``data`` as
    ``.npy`` members of a zip archive (deflate-compressed by default). This reader decodes the
    three members sequentially, side by side, so each batch costs ``O(batch nnz)`` memory. A
    ``.npz`` holding a single dense 2-D array (as written by ``numpy.savez``) is streamed row
    by row the same way.

    Parameters
    ----------
    path : str or Path
    batch_size : int
    """

    def __init__(self, path: str | Path, batch_size: int) -> None:
        super().__init__(batch_size)
        self.path = _existing(path)
        try:
            with zipfile.ZipFile(self.path) as archive:
                names = set(archive.namelist())
                if "format.npy" in names:
                    with archive.open("format.npy") as handle:
                        fmt = np.lib.format.read_array(handle, allow_pickle=False).item()
                    fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
                    if fmt != "csr":
                        raise ValueError(
                            f"{self.path} holds a sparse '{fmt}' matrix; streaming row blocks needs CSR: "
                            "save X.tocsr() with scipy.sparse.save_npz"
                        )
                    with archive.open("shape.npy") as handle:
                        shape = np.lib.format.read_array(handle, allow_pickle=False)
                    self._dense_member = None
                    self._shape = (int(shape[0]), int(shape[1]))
                elif len(names) == 1:
                    (name,) = names
                    member = _NpyMember(archive, name, self.path)
                    member.close()
                    if len(member.shape) != 2 or member.dtype.kind not in "biuf":
                        raise ValueError(
                            f"{self.path} must hold a numeric 2-D array, got shape {member.shape} "
                            f"and dtype {member.dtype}"
                        )
                    self._dense_member = name
                    self._shape = (int(member.shape[0]), int(member.shape[1]))
                else:
                    raise ValueError(
                        f"{self.path} is neither a scipy.sparse .npz nor a .npz holding a single array "
                        f"(members: {sorted(names)})"
                    )
        except zipfile.BadZipFile as exc:
            raise ValueError(f"{self.path} is not a valid .npz (zip) file") from exc

    @property
    def n_samples(self) -> int:
        return self._shape[0]

    @property
    def n_features(self) -> int:
        """Number of columns ``d``."""
        return self._shape[1]

    def _iter_from(self, start: int) -> Iterator[Batch]:
        n_rows, n_cols = self._shape
        with zipfile.ZipFile(self.path) as archive:
            if self._dense_member is not None:
                member = _NpyMember(archive, self._dense_member, self.path)
                member.skip(start * n_cols)
                for lo in range(start, n_rows, self.batch_size):
                    rows = min(self.batch_size, n_rows - lo)
                    yield member.read(rows * n_cols).reshape(rows, n_cols).astype(np.float64)
                return
            indptr = _NpyMember(archive, "indptr.npy", self.path)
            indices = _NpyMember(archive, "indices.npy", self.path)
            data = _NpyMember(archive, "data.npy", self.path)
            indptr.skip(start)
            first = int(indptr.read(1)[0])
            indices.skip(first)
            data.skip(first)
            for lo in range(start, n_rows, self.batch_size):
                rows = min(self.batch_size, n_rows - lo)
                ends = indptr.read(rows).astype(np.int64)
                nnz = int(ends[-1]) - first
                pointers = np.empty(rows + 1, dtype=np.int64)
                pointers[0] = 0
                pointers[1:] = ends - first
                block = sp.csr_matrix(
                    (data.read(nnz).astype(np.float64), indices.read(nnz), pointers), shape=(rows, n_cols)
                )
                first = int(ends[-1])
                yield block


class GeneratorStream(BatchStream):
    """Re-chunk a Python iterable of rows or batches into batches of ``batch_size`` rows.

    Parameters
    ----------
    source : callable or iterable
        Either a zero-argument callable returning a fresh iterable each time (then the stream
        can be iterated again, e.g. to cycle over it), or an iterable. Items may be 1-D rows,
        2-D dense blocks or SciPy sparse blocks, of any number of rows; all must have the same
        width. A one-shot iterator (such as a generator object) can be iterated only once.
    batch_size : int
    """

    def __init__(self, source: Callable[[], Iterable] | Iterable, batch_size: int) -> None:
        super().__init__(batch_size)
        if not callable(source) and not isinstance(source, Iterable):
            raise TypeError(
                f"source must be an iterable or a callable returning one, got {type(source).__name__}"
            )
        self.source = source
        self._used = False

    @property
    def reiterable(self) -> bool:
        """Whether the stream can be iterated more than once."""
        return callable(self.source) or iter(self.source) is not self.source

    def _iter_from(self, start: int) -> Iterator[Batch]:
        if callable(self.source):
            items = self.source()
        else:
            if self._used and not self.reiterable:
                raise TypeError("this GeneratorStream wraps a one-shot iterator that was already consumed")
            items = self.source
        self._used = True
        return rebatch(items, self.batch_size, skip=start)


def rebatch(items: Iterable, batch_size: int, *, skip: int = 0) -> Iterator[Batch]:
    """Re-chunk an iterable of rows or blocks into batches of exactly ``batch_size`` rows.

    Rows are concatenated across items; the last batch may be shorter. The first ``skip`` rows
    are dropped. Blocks that are all sparse stay sparse (CSR); a mix is made dense.

    Parameters
    ----------
    items : iterable
        1-D rows, 2-D arrays or SciPy sparse matrices, all of the same width.
    batch_size : int
    skip : int, default 0

    Yields
    ------
    ndarray or csr_matrix
    """
    batch_size = check_positive_int(batch_size, "batch_size")
    skip = check_positive_int(skip, "skip", minimum=0)
    pending: list[Batch] = []
    pending_rows = 0
    width = None
    for number, item in enumerate(items):
        piece = _as_rows(item, number)
        if width is None:
            width = piece.shape[1]
        elif piece.shape[1] != width:
            raise ValueError(
                f"item {number} of the stream has {piece.shape[1]} columns, earlier items have {width}"
            )
        if skip:
            if piece.shape[0] <= skip:
                skip -= piece.shape[0]
                continue
            piece, skip = piece[skip:], 0
        if piece.shape[0] == 0:
            continue
        pending.append(piece)
        pending_rows += piece.shape[0]
        if pending_rows >= batch_size:
            block = _stack(pending)
            offset = 0
            while block.shape[0] - offset >= batch_size:
                yield block[offset : offset + batch_size]
                offset += batch_size
            pending = [block[offset:]] if offset < block.shape[0] else []
            pending_rows = block.shape[0] - offset
    if pending_rows:
        yield _stack(pending)


def open_stream(path: str | Path, batch_size: int, **options: object) -> BatchStream:
    """Open a data file as a :class:`BatchStream`, choosing the reader by suffix.

    ``.npy`` -> :class:`NpyStream`; ``.npz`` -> :class:`SparseNpzStream`; ``.csv``, ``.tsv``,
    ``.tab``, ``.txt`` -> :class:`CsvStream` (``options`` are passed to it).
    """
    path = _existing(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return NpyStream(path, batch_size)
    if suffix == ".npz":
        return SparseNpzStream(path, batch_size)
    if suffix in (".csv", ".tsv", ".tab", ".txt"):
        return CsvStream(path, batch_size, **options)
    raise ValueError(f"{path}: cannot stream a '{suffix}' file; expected .npy, .npz, .csv, .tsv or .txt")


def load_matrix(path: str | Path) -> np.ndarray | sp.csr_matrix:
    """Load a whole data matrix: a dense ``.npy`` array or a SciPy sparse ``.npz`` matrix (as CSR).

    A ``.npz`` file is read with :func:`scipy.sparse.load_npz`; one written by :func:`numpy.savez`
    with a single array is accepted too. (The CLI's input files, and the blocks that
    :func:`dptensor.parallel.from_files` reads on the workers.)
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if path.suffix == ".npy":
        return np.load(check_binary(path, "npy"), allow_pickle=False)
    if path.suffix == ".npz":
        check_binary(path, "npz")
        try:
            return sp.load_npz(path).tocsr()
        except (ValueError, KeyError):
            with np.load(path, allow_pickle=False) as archive:
                if len(archive.files) != 1:
                    raise ValueError(
                        f"{path} holds {len(archive.files)} arrays; expected a scipy.sparse matrix "
                        "or a single array"
                    ) from None
                return archive[archive.files[0]]
    raise ValueError(f"{path}: expected a .npy or .npz file")


def matrix_shape(path: str | Path) -> tuple[int, int]:
    """``(rows, columns)`` of a ``.npy`` or ``.npz`` data matrix, read from its header only."""
    path = _existing(path)
    if path.suffix.lower() not in (".npy", ".npz"):
        raise ValueError(f"{path}: expected a .npy or .npz file")
    stream = open_stream(path, 1)
    return int(stream.n_samples), int(stream.n_features)


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    return path


def _as_rows(item: object, number: int) -> Batch:
    if sp.issparse(item):
        return sp.csr_matrix(item)
    array = np.asarray(item)
    if array.ndim == 1:
        return array.reshape(1, -1)
    if array.ndim != 2:
        raise ValueError(f"item {number} of the stream must be a row or a 2-D block, got shape {array.shape}")
    return array


def _stack(pieces: list[Batch]) -> Batch:
    if len(pieces) == 1:
        return pieces[0]
    if all(sp.issparse(piece) for piece in pieces):
        return sp.vstack(pieces, format="csr")
    return np.vstack([piece.toarray() if sp.issparse(piece) else piece for piece in pieces])
