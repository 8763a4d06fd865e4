"""Partially observed three-way tensors as lists of entries (docs/design.md, layer 5).

A tensor completion problem is the shape of the tensor and its observed entries: ``n`` index
triples ``(i, j, k)`` (an ``n x 3`` integer array, zero-based) and ``n`` values. Nothing here forms
the dense tensor unless asked to (:meth:`TensorEntries.to_dense`), so a MovieLens-shaped problem
(``943 x 1682 x 212``, 336 million cells, ``10^5`` ratings) costs a few megabytes.

==========================================  ===============================================================
:class:`TensorEntries`                       observed entries and the tensor shape
:func:`check_entries`                        validate ``(indices, values, shape)``
:func:`read_entries`                         ``i j k value`` text files (CSV, TSV, whitespace)
:func:`read_ratings`                         ``user item rating`` (a matrix) or ``i j k value`` rows
:func:`entry_columns`                        3 (a user x item matrix) or 4 columns in an entries file
:func:`read_movielens`                       MovieLens ``u.data`` as user x item x day (Wei et al., Sec. 5.2)
:func:`read_recbole_inter`                   RecBole ``.inter`` files (``ml-100k.inter``) as that tensor
:func:`ratings_day_origin`                   one day origin for a train/test pair of MovieLens files
:func:`holdout_per_user`                     every user's ``k``-th to ``l``-th ratings held out (ua/ub)
:func:`entries_from_dense`                   a dense array with NaN for the missing cells
:func:`train_test_split_entries`             random split of the observed entries
:func:`make_low_rank_completion`             synthetic CP / Tucker tensors, SNR and missing ratio (Sec. 5.1)
==========================================  ===============================================================
"""

from __future__ import annotations

import csv
import numbers
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dptensor._files import refuse_binary_text
from dptensor._validation import (
    RandomStateLike,
    check_entries,
    check_positive_int,
    check_random_state,
    check_shape,
)

SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class TensorEntries:
    """Observed entries of a three-way tensor.

    Attributes
    ----------
    indices : ndarray of int64, shape (n, 3)
        Zero-based coordinates.
    values : ndarray of float64, shape (n,)
    shape : tuple of three ints
    """

    indices: np.ndarray
    values: np.ndarray
    shape: tuple[int, int, int]

    def __post_init__(self) -> None:
        indices, values, shape = check_entries(self.indices, self.values, self.shape)
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "shape", shape)

    @classmethod
    def empty(cls, shape: tuple[int, int, int]) -> TensorEntries:
        """No observed entries in a tensor of ``shape``: under the user relation (where the shape is
        public and every user's ratings may be removed) a data set without ratings is a valid input."""
        entries = object.__new__(cls)
        object.__setattr__(entries, "indices", np.zeros((0, 3), dtype=np.int64))
        object.__setattr__(entries, "values", np.zeros(0))
        object.__setattr__(entries, "shape", check_shape(shape))
        return entries

    def __len__(self) -> int:
        return int(self.values.shape[0])

    @property
    def density(self) -> float:
        """Fraction of the cells observed."""
        return len(self) / float(np.prod(self.shape))

    def subset(self, selection: np.ndarray) -> TensorEntries:
        """The entries picked by a boolean mask or an index array (same shape)."""
        return TensorEntries(self.indices[selection], self.values[selection], self.shape)

    def to_dense(self, fill: float = np.nan) -> np.ndarray:
        """The dense tensor with ``fill`` in the unobserved cells (only for small shapes)."""
        out = np.full(self.shape, fill, dtype=np.float64)
        out[tuple(self.indices.T)] = self.values
        return out


#: Delimiters :func:`read_entries` recognises, tried in this order on the first row.
DELIMITERS = (",", "\t", ";")


def _where(path: Path, line: int | None, private: bool) -> str:
    """``path, line N`` for an error message; the path alone where the values are private.

    docs/protection.md: on a private path a malformed row is reported without its value, count
    or position (a line number would say where a private rating sits in the file).
    """
    return f"{path}" if private or line is None else f"{path}, line {line}"


def _numbered_rows(path: Path, delimiter: str | None) -> list[tuple[int, list[str]]]:
    """The file's data rows as ``(1-based line number, cells)``, a header row left out.

    Blank lines and lines starting with ``#`` are skipped. The delimiter is, unless given, the
    first of comma, tab and semicolon that the first row has, else runs of whitespace (cells are
    stripped, so ``1, 2, 3`` reads as a comma row). A first row of which no cell is a number is a
    header (``user,item,rating``) and is skipped.
    """
    refuse_binary_text(path)
    numbered = [(n, line) for n, line in enumerate(path.read_text().splitlines(), start=1)
                if line.strip() and not line.lstrip().startswith("#")]
    if not numbered:
        return []
    if delimiter is None:
        delimiter = next((d for d in DELIMITERS if d in numbered[0][1]), None)
    if delimiter is None:
        rows = [(n, line.split()) for n, line in numbered]
    else:
        cells = csv.reader([line for _, line in numbered], delimiter=delimiter)
        rows = [(n, [cell.strip() for cell in row]) for (n, _), row in zip(numbered, cells, strict=True)]
    if not any(_is_number(cell) for cell in rows[0][1]):
        rows = rows[1:]  # a header
    return rows


def _first_line(rows: list[tuple[int, list[str]]], bad: np.ndarray, private: bool) -> int | None:
    """The line number of the first row flagged in ``bad`` (``None`` where the values are private)."""
    return None if private else rows[int(np.argmax(bad))][0]


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _numeric_table(path: Path, rows: list[tuple[int, list[str]]], columns: int, what: str, private: bool
                   ) -> np.ndarray:
    """The rows as an ``(n, columns)`` float array; errors name the line unless ``private``."""
    for line, row in rows:
        if len(row) != columns:
            found = "" if private else f", found {len(row)}"
            raise ValueError(f"{_where(path, line, private)}: expected {columns} columns ({what}) in every "
                             f"row{found}")
    try:
        return np.array([row for _, row in rows], dtype=np.float64)
    except ValueError:
        pass
    where = None if private else next(line for line, row in rows if not all(map(_is_number, row)))
    raise ValueError(f"{_where(path, where, private)}: a non-numeric cell (every cell after the header "
                     f"must be a number: {what})")


def entry_columns(path: str | Path, *, delimiter: str | None = None) -> int | None:
    """How many columns the data rows of an entries file have (3 or 4 expected), ``None`` if none.

    3 columns are ``user item rating`` (a matrix: :func:`read_entries` gives shape ``(U, I, 1)``),
    4 are ``i j k value``. The format is read from the first data row; the file's other rows must
    match it (:func:`read_entries` checks).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    rows = _numbered_rows(path, delimiter)
    return len(rows[0][1]) if rows else None


#: What each layout of :func:`read_entries` means, by number of columns.
LAYOUTS = {3: "user item rating", 4: "i j k value"}


def read_entries(
    path: str | Path,
    *,
    shape: tuple[int, int, int] | None = None,
    delimiter: str | None = None,
    one_based: bool = False,
    allow_empty: bool = False,
    check_timestamps: bool | None = None,
    private: bool = False,
) -> TensorEntries:
    """Read ``i j k value`` rows from a CSV, TSV or whitespace-separated file.

    Parameters
    ----------
    path : str or Path
    shape : tuple of three ints, optional
        The tensor shape; by default one more than the largest index in each mode.
    delimiter : str, optional
        ``","``, ``"\\t"``...; by default sniffed from the first row (comma, tab, semicolon, else
        whitespace).
    one_based : bool, default False
        Indices in the file start at 1.
    allow_empty : bool, default False
        A file without entries gives :meth:`TensorEntries.empty` (needs ``shape``) instead of an
        error: under the user relation a data set without ratings is a valid neighbour.
    check_timestamps : bool, optional
        Refuse a file whose every value is a whole number of seconds in the Unix-time range of
        :data:`TIMESTAMP_RANGE` (1973 to 2106): that is a MovieLens-style ``user item rating
        timestamp`` file, whose timestamps would otherwise be completed as values. The check reads
        every value, so by default it is on only where the data are not ``private``.
    private : bool, default False
        The values (or the indices) are private: error messages name the file and what is wrong,
        never a line number, a value or a count (docs/protection.md). Otherwise they name the
        1-based line.

    Lines starting with ``#`` are skipped, and so is a first row of which no cell is a number
    (a header). For ``user item rating`` files (a matrix) see :func:`read_ratings`.
    """
    return _read_table(path, (4,), shape, delimiter, one_based, allow_empty, check_timestamps, private)


def read_ratings(
    path: str | Path,
    *,
    shape: tuple[int, ...] | None = None,
    delimiter: str | None = None,
    one_based: bool = False,
    allow_empty: bool = False,
    check_timestamps: bool | None = None,
    private: bool = False,
) -> TensorEntries:
    """Read a ratings table: ``user item rating`` rows (a matrix) or ``i j k value`` rows.

    The file's first data row decides the layout (:func:`entry_columns`): 3 columns are a user x
    item matrix, read as a tensor of shape ``(U, I, 1)`` (every ``k = 0``); 4 columns are read as
    by :func:`read_entries` (e.g. ``user item day rating``). Every row must have that many.

    Parameters
    ----------
    shape : tuple of two or three ints, optional
        ``(U, I)`` (or ``(U, I, 1)``) for a 3-column file, ``(I, J, K)`` for a 4-column one; by
        default one more than the largest index in each mode.
    path, delimiter, one_based, allow_empty, check_timestamps, private
        As in :func:`read_entries`. An empty file (``allow_empty``) is a matrix when ``shape``
        has two sizes.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "ratings.csv"
    >>> _ = path.write_text("user,item,rating\\n1,1,4.5\\n1,2,3\\n2,1,5\\n")
    >>> read_ratings(path, one_based=True).shape
    (2, 2, 1)
    """
    return _read_table(path, tuple(LAYOUTS), shape, delimiter, one_based, allow_empty, check_timestamps,
                       private)


def _read_table(
    path: str | Path, layouts: tuple[int, ...], shape: tuple[int, ...] | None, delimiter: str | None,
    one_based: bool, allow_empty: bool, check_timestamps: bool | None, private: bool,
) -> TensorEntries:
    """The reader behind :func:`read_entries` and :func:`read_ratings` (``layouts``: column counts)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if check_timestamps is None:
        check_timestamps = not private
    rows = _numbered_rows(path, delimiter)
    columns = len(rows[0][1]) if rows else (3 if 3 in layouts and shape is not None and len(shape) == 2
                                            else 4)
    if columns not in layouts:
        found = "" if private else f", found {columns}"
        expected = " or ".join(f"{n} columns ({LAYOUTS[n]})" for n in layouts)
        raise ValueError(f"{_where(path, rows[0][0], private)}: expected {expected} in every row{found}")
    shape = _layout_shape(path, shape, columns)
    if not rows:
        if allow_empty and shape is not None:
            return TensorEntries.empty(shape)
        raise ValueError(f"{path}: no entries")
    table = _numeric_table(path, rows, columns, LAYOUTS[columns], private)
    values = table[:, -1]
    if check_timestamps and _looks_like_timestamps(values):
        raise ValueError(
            f"{path}: every value in the last column is a whole number between "
            f"{TIMESTAMP_RANGE[0]:.0e} and {TIMESTAMP_RANGE[1]:.1e}, like a Unix timestamp: this looks like "
            "a MovieLens file (user item rating timestamp); read it with --movielens (read_movielens)"
        )
    indices = table[:, :-1]
    if columns == 3:
        indices = np.column_stack([indices, np.full(len(rows), 1.0 if one_based else 0.0)])
    if np.any(indices != np.round(indices)):
        line = _first_line(rows, np.any(indices != np.round(indices), axis=1), private)
        raise ValueError(f"{_where(path, line, private)}: indices (the columns before the value) must be "
                         "whole numbers")
    indices = indices.astype(np.int64)
    if np.any(indices < 0):
        line = _first_line(rows, np.any(indices < 0, axis=1), private)
        raise ValueError(f"{_where(path, line, private)}: a negative index (indices are counted from 0, or "
                         "from 1 with one_based=True / --one-based)")
    if one_based:
        if np.any(indices == 0):
            line = _first_line(rows, np.any(indices == 0, axis=1), private)
            # which column holds the 0 is a fact about the data: named only without privacy
            zero = np.flatnonzero(np.any(indices == 0, axis=0))
            where = "" if private else " in column " + " and ".join(str(c + 1) for c in zero)
            raise ValueError(f"{_where(path, line, private)}: index 0 found{where}, so the indices are "
                             "zero-based; leave out one_based=True (the --one-based flag), which applies to "
                             "every index column: a file whose ids count from 1 and days from 0 needs its "
                             "days (or its ids) shifted to one base")
        indices -= 1
    if shape is None:
        shape = tuple(int(m) + 1 for m in indices.max(axis=0))
    elif not private:
        outside = np.any(indices >= np.asarray(shape), axis=1)
        if outside.any():
            needed = tuple(int(m) + 1 for m in indices.max(axis=0))
            line = _first_line(rows, outside, private)
            raise ValueError(f"{_where(path, line, private)}: an index outside "
                             f"the shape: indices must lie in [0, size - 1] for shape {tuple(shape)}; the "
                             f"file's indices need a shape of at least {needed}")
    return TensorEntries(indices, values, shape)


def _layout_shape(path: Path, shape: tuple[int, ...] | None, columns: int) -> tuple[int, int, int] | None:
    """The three-way shape for a file of ``columns`` columns, from a given shape of 2 or 3 sizes."""
    if shape is None:
        return None
    shape = tuple(shape)
    if len(shape) == 2:
        if columns == 4:
            raise ValueError(f"{path}: 4 columns (i j k value) need a third size: pass a shape (I, J, K) "
                             "(--shape I J K)")
        return check_shape((*shape, 1))
    if columns == 3 and len(shape) == 3 and shape[2] != 1:
        raise ValueError(f"{path}: 3 columns (user item rating) have no third mode: pass a shape (U, I) "
                         f"(--shape U I), not K={shape[2]}")
    return check_shape(shape)


#: Seconds since 1970 that :func:`read_entries` takes for timestamps (March 1973 to February 2106).
TIMESTAMP_RANGE = (1e8, 2.0**32)


def _looks_like_timestamps(values: np.ndarray) -> bool:
    """Whether every value is a whole number of seconds inside :data:`TIMESTAMP_RANGE`."""
    return bool(np.all((values >= TIMESTAMP_RANGE[0]) & (values < TIMESTAMP_RANGE[1]))
                and np.all(values == np.round(values)))


def write_entries(path: str | Path, entries: TensorEntries, *, delimiter: str = ",") -> Path:
    """Write ``i,j,k,value`` rows (zero-based) with a header, readable by :func:`read_entries`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(["i", "j", "k", "value"])
        for (i, j, k), v in zip(entries.indices.tolist(), entries.values.tolist(), strict=True):
            writer.writerow([i, j, k, repr(float(v))])
    return path


def read_movielens(
    path: str | Path,
    *,
    n_users: int | None = None,
    n_items: int | None = None,
    day_seconds: int = SECONDS_PER_DAY,
    day_origin: int | None = None,
    private: bool = False,
) -> TensorEntries:
    """Read MovieLens ``u.data`` (``user item rating timestamp``) as a tensor.

    Tab-separated ``u.data`` or comma-separated ``ratings.csv`` (a header row is skipped, ratings
    may be fractional).

    Wei, Li, Mao & Wang, *Applying Differential Privacy to Tensor Completion*, Section 5.2: the
    rating matrix is unfolded into a user x item x day tensor. User and item ids (one-based in the
    file) become zero-based indices; the day index is
    ``(timestamp - day_origin) // day_seconds``, so the third mode has
    ``max day + 1`` entries (the paper reports 212 days for ML-100K; the exact count depends on
    where day boundaries are put, and the first-to-last span of ML-100K covers 215 calendar days).

    Parameters
    ----------
    path : str or Path
        A ``u.data``-style file (``ua.base``, ``ua.test``... have the same format).
    n_users, n_items : int, optional
        Mode sizes (943 and 1682 for ML-100K); by default the largest id in the file. Pass them
        when reading a train/test pair so both get the same shape.
    day_seconds : int, default 86400
    day_origin : int, optional
        The Unix timestamp (seconds) of the start of day 0; by default this file's earliest
        timestamp. **Pass one origin to every file of a train/test pair**
        (``ratings_day_origin(train, test)``): each file's own earliest rating would number
        different calendar days alike (a temporal split's test days would restart at 0).
    private : bool, default False
        The ratings are private: errors name no line number, timestamp or value
        (docs/protection.md); otherwise they name the 1-based line.

    Returns
    -------
    TensorEntries
        Values are the ratings.

    Examples
    --------
    >>> origin = ratings_day_origin("ua.base", "ua.test")  # doctest: +SKIP
    >>> train = read_movielens("ua.base", n_users=943, n_items=1682, day_origin=origin)  # doctest: +SKIP
    >>> test = read_movielens("ua.test", n_users=943, n_items=1682, day_origin=origin)  # doctest: +SKIP
    """
    path = Path(path)
    users, items, ratings, stamps = _udata_columns(path, private)
    return _ratings_tensor(users, items, ratings, stamps, n_users, n_items, day_seconds, day_origin, path,
                           private)


def _udata_columns(
    path: Path, private: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Users, items, ratings and timestamps of a ``u.data``-style file.

    Tab-separated ``u.data`` and MovieLens's comma-separated ``ratings.csv`` (with its
    ``userId,movieId,rating,timestamp`` header, half-star ratings) alike: the rows are read as by
    :func:`read_entries`. Errors name the 1-based line unless ``private``.
    """
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    rows = _numbered_rows(path, None)
    if not rows:
        raise ValueError(f"{path}: no ratings")
    what = "user item rating timestamp"
    table = _numeric_table(path, rows, 4, what, private)
    ids = table[:, [0, 1, 3]]  # the rating may be 4.5
    whole = np.all(np.isfinite(ids) & (ids == np.round(ids)), axis=1)
    if not whole.all():
        line = None if private else rows[int(np.argmin(whole))][0]
        raise ValueError(f"{_where(path, line, private)}: user and item ids and timestamps must be whole "
                         f"numbers ({what})")
    users, items, stamps = (table[:, c].astype(np.int64) for c in (0, 1, 3))
    return users, items, table[:, 2], stamps


def _ratings_tensor(
    users: np.ndarray, items: np.ndarray, ratings: np.ndarray, stamps: np.ndarray, n_users: int | None,
    n_items: int | None, day_seconds: int, day_origin: int | None, path: Path, private: bool = False,
) -> TensorEntries:
    """User x item x day entries from one-based ids, ratings and Unix timestamps (shared by the readers)."""
    day_seconds = check_positive_int(day_seconds, "day_seconds")
    if users.min() < 1 or items.min() < 1:
        raise ValueError(f"{path}: user and item ids must start at 1")
    if day_origin is None:
        day_origin = int(stamps.min())
    elif not isinstance(day_origin, numbers.Integral) or isinstance(day_origin, bool):
        raise TypeError(f"day_origin must be an integer Unix timestamp, got {type(day_origin).__name__}")
    elif stamps.min() < day_origin:
        # on a private path the earliest timestamp is private: it is not named
        when = "a rating" if private else f"a rating at timestamp {int(stamps.min())}"
        raise ValueError(
            f"{path}: {when} precedes day_origin={int(day_origin)}; pass the earliest timestamp of all "
            "the files read together (ratings_day_origin)" + (", or a public time before the collection "
                                                               "began" if private else "")
        )
    days = (stamps - int(day_origin)) // day_seconds
    shape = (
        int(users.max()) if n_users is None else check_positive_int(n_users, "n_users"),
        int(items.max()) if n_items is None else check_positive_int(n_items, "n_items"),
        int(days.max()) + 1,
    )
    indices = np.column_stack([users - 1, items - 1, days])
    return TensorEntries(indices, ratings.astype(np.float64), shape)


def is_recbole_inter(path: str | Path) -> bool:
    """Whether ``path`` starts with RecBole's header of ``name:type`` fields (else: ``u.data``)."""
    with open(path) as handle:
        return ":" in handle.readline()


def ratings_day_origin(*paths: str | Path) -> int:
    """The earliest timestamp of several MovieLens files (``u.data`` or RecBole ``.inter``).

    Pass it as ``day_origin`` to :func:`read_movielens` / :func:`read_recbole_inter` for every
    file of a train/test pair, so that the same calendar day gets the same day index in both.
    """
    if not paths:
        raise ValueError("ratings_day_origin needs at least one file")
    earliest = []
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"no such file: {path}")
        columns = _inter_columns(path) if is_recbole_inter(path) else _udata_columns(path)
        earliest.append(int(columns[3].min()))
    return min(earliest)


#: The columns :func:`read_recbole_inter` needs, by RecBole field name.
INTER_FIELDS = ("user_id", "item_id", "rating", "timestamp")


def read_recbole_inter(
    path: str | Path,
    *,
    n_users: int | None = None,
    n_items: int | None = None,
    day_seconds: int = SECONDS_PER_DAY,
    day_origin: int | None = None,
    private: bool = False,
) -> TensorEntries:
    """Read a RecBole atomic interaction file (``ml-100k.inter``) as a user x item x day tensor.

    The format (RecBole's "atomic files"): a tab-separated header of ``name:type`` fields, e.g.
    ``user_id:token  item_id:token  rating:float  timestamp:float``, then one interaction per line.
    The fields may come in any order and others may be present. User and item tokens must be
    positive integers (as in the MovieLens files RecBole ships); they become zero-based indices
    exactly as :func:`read_movielens` makes them, and the rows keep the file's order (which
    :func:`holdout_per_user` relies on). Days (and ``day_origin``, ``private``) as in
    :func:`read_movielens`.
    """
    path = Path(path)
    users, items, ratings, stamps = _inter_columns(path)
    return _ratings_tensor(users, items, ratings, stamps, n_users, n_items, day_seconds, day_origin, path,
                           private)


def _inter_columns(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Users, items, ratings and timestamps of a RecBole ``.inter`` file."""
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{path}: empty file")
    header = [field.split(":")[0].strip() for field in lines[0].split("\t")]
    missing = [name for name in INTER_FIELDS if name not in header]
    if missing or not all(":" in field for field in lines[0].split("\t")):
        raise ValueError(
            f"{path}: not a RecBole .inter file (the header must be tab-separated name:type fields "
            f"with {', '.join(INTER_FIELDS)}); missing {missing or 'types'}"
        )
    rows = [line.split("\t") for line in lines[1:]]
    if not rows:
        raise ValueError(f"{path}: no interactions")
    bad = [n for n, row in enumerate(rows) if len(row) != len(header)]
    if bad:
        raise ValueError(f"{path}: expected {len(header)} tab-separated fields in every row")
    cols = {name: header.index(name) for name in INTER_FIELDS}
    try:
        users, items = (np.array([int(row[cols[f]]) for row in rows], dtype=np.int64)
                        for f in ("user_id", "item_id"))
        ratings = np.array([float(row[cols["rating"]]) for row in rows])
        stamps = np.array([int(float(row[cols["timestamp"]])) for row in rows], dtype=np.int64)
    except ValueError:
        raise ValueError(
            f"{path}: user and item tokens must be integers, rating and timestamp numbers"
        ) from None
    return users, items, ratings, stamps


def holdout_per_user(entries: TensorEntries, start: int, stop: int) -> tuple[TensorEntries, TensorEntries]:
    """Hold out each user's ``start``-th to ``stop``-th ratings (1-based, in the entries' order).

    This is the rule by which MovieLens-100K's ``mku.sh`` builds its canonical splits with
    ``allbut.pl``: ``ua`` holds out every user's 1st-10th ratings in ``u.data``'s order
    (``start=1, stop=10``), ``ub`` the 11th-20th (``start=11, stop=20``); both test sets have
    exactly 10 ratings per user (every ML-100K user has at least 20) and are disjoint.

    Returns
    -------
    train, test : TensorEntries
    """
    start = check_positive_int(start, "start")
    stop = check_positive_int(stop, "stop")
    if stop < start:
        raise ValueError(f"stop must be >= start, got start={start}, stop={stop}")
    users = entries.indices[:, 0]
    order = np.argsort(users, kind="stable")
    sorted_users = users[order]
    first = np.flatnonzero(np.r_[True, sorted_users[1:] != sorted_users[:-1]])
    counts = np.diff(np.r_[first, sorted_users.shape[0]])
    position = np.empty_like(users)
    position[order] = np.arange(users.shape[0]) - np.repeat(first, counts) + 1
    test = (position >= start) & (position <= stop)
    return entries.subset(~test), entries.subset(test)


def entries_from_dense(array: object) -> TensorEntries:
    """The observed (non-NaN) cells of a dense three-way array; NaN marks a missing cell.

    Raises ``ValueError`` for infinite values or when every cell is NaN.
    """
    try:
        arr = np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"array must be numeric, got {type(array).__name__}") from exc
    if arr.ndim != 3:
        raise ValueError(f"array must be three-dimensional, got shape {arr.shape}")
    if np.any(np.isinf(arr)):
        raise ValueError("array contains infinite entries (use NaN for missing cells)")
    observed = ~np.isnan(arr)
    if not observed.any():
        raise ValueError("array has no observed (non-NaN) entries")
    indices = np.argwhere(observed)
    return TensorEntries(indices, arr[observed], arr.shape)


def train_test_split_entries(
    entries: TensorEntries, test_fraction: float = 0.2, *, random_state: RandomStateLike = None
) -> tuple[TensorEntries, TensorEntries]:
    """Split observed entries at random into train and test sets (Wei et al., Sec. 5: 80% / 20%).

    Returns
    -------
    train, test : TensorEntries
        Both non-empty, same shape as ``entries``.
    """
    if not isinstance(entries, TensorEntries):
        raise TypeError(f"entries must be TensorEntries, got {type(entries).__name__}")
    if not isinstance(test_fraction, numbers.Real) or not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction!r}")
    n = len(entries)
    n_test = int(round(test_fraction * n))
    if n_test == 0 or n_test == n:
        raise ValueError(f"test_fraction={test_fraction} leaves an empty train or test set for {n} entries")
    rng = check_random_state(random_state)
    order = rng.permutation(n)
    return entries.subset(np.sort(order[n_test:])), entries.subset(np.sort(order[:n_test]))


@dataclass(frozen=True)
class LowRankCompletion:
    """A synthetic completion problem with known ground truth.

    Attributes
    ----------
    observed : TensorEntries
        Observed noisy entries ``X = X_tilde + N`` at the observed cells.
    truth : TensorEntries
        The noiseless (min-max scaled) values ``X_tilde`` at the same cells, for error measures.
    truth_tensor : ndarray or None
        The whole noiseless tensor (only when it was formed, ``dense=True``).
    factors : list of three ndarrays
        Ground-truth factor matrices (before scaling).
    core : ndarray or None
        Ground-truth Tucker core.
    noise_std : float
    scale : tuple of float
        ``(offset, factor)`` of the min-max scaling: ``X_tilde = (model - offset) * factor``.
    """

    observed: TensorEntries
    truth: TensorEntries
    truth_tensor: np.ndarray | None
    factors: list
    core: np.ndarray | None
    noise_std: float
    scale: tuple[float, float]

    def truth_at(self, indices: np.ndarray) -> np.ndarray:
        """Noiseless scaled values at any cells (computed from the factors)."""
        offset, factor = self.scale
        return (_model_values(self.factors, self.core, np.asarray(indices, dtype=np.int64)) - offset) * factor


def _model_values(factors: list, core: np.ndarray | None, indices: np.ndarray) -> np.ndarray:
    a, b, c = (f[indices[:, m]] for m, f in enumerate(factors))
    if core is None:
        return np.einsum("nr,nr,nr->n", a, b, c)
    return np.einsum("pqt,np,nq,nt->n", core, a, b, c, optimize=True)


def make_low_rank_completion(
    shape: tuple[int, int, int],
    rank: int,
    *,
    model: str = "cp",
    snr: float = 1.0,
    missing_ratio: float = 0.5,
    n_observed: int | None = None,
    min_max: bool = True,
    random_state: RandomStateLike = None,
) -> LowRankCompletion:
    """Synthetic low-rank CP or Tucker tensor with noise and missing cells (Wei et al., Sec. 5.1).

    * CP (after Acar et al. 2011): ``[[A, B, C]]`` with standard normal factors whose columns are
      normalised to unit length.
    * Tucker: ``[[G; A, B, C]]`` with orthonormal factor columns (QR of Gaussian matrices) and a
      standard normal ``rank x rank x rank`` core.

    The noiseless tensor ``X_tilde`` is min-max scaled to ``[0, 1]`` *before* the noise is added,
    as in the paper (``min_max=False`` scales it to unit root-mean-square instead, which keeps it
    exactly low-rank: min-max scaling adds a constant, i.e. one more rank-one term). Then
    ``X = X_tilde + N`` with i.i.d. Gaussian ``N`` of standard deviation ``std(X_tilde) /
    sqrt(snr)``: ``snr`` is the ratio of the *variance* of the entries of ``X_tilde`` to the noise
    variance. The paper does not say which power it means; measured on the raw power
    ``||X_tilde||^2`` of a min-max scaled tensor (mean about 0.5, standard deviation about 0.09
    for the 20 x 20 x 20 rank-3 case) ``snr = 1`` would make the noise six times the signal's
    spread, and no completion method could beat predicting the mean.

    Parameters
    ----------
    shape : tuple of three ints
    rank : int
    model : {"cp", "tucker"}
    snr : float, default 1
    missing_ratio : float in [0, 1), default 0.5
        Fraction of cells left unobserved (cells chosen uniformly without replacement).
    n_observed : int, optional
        Observe exactly this many cells instead (sampled mode: the dense tensor is never formed,
        and the min-max scaling uses the extremes over the observed cells). For large shapes
        such as ``(943, 1682, 212)``.
    min_max : bool, default True
        Min-max scale ``X_tilde`` to ``[0, 1]`` (the paper); else scale it to unit RMS.
    random_state : None, int or Generator

    Returns
    -------
    LowRankCompletion
    """
    shape = check_shape(shape)
    rank = check_positive_int(rank, "rank")
    if model not in ("cp", "tucker"):
        raise ValueError(f"model must be 'cp' or 'tucker', got {model!r}")
    if model == "tucker" and rank > min(shape):
        raise ValueError(f"rank must be at most the smallest dimension {min(shape)} for Tucker, got {rank}")
    if not isinstance(snr, numbers.Real) or not np.isfinite(snr) or snr <= 0:
        raise ValueError(f"snr must be a finite number > 0, got {snr!r}")
    rng = check_random_state(random_state)
    size = int(np.prod(shape))
    if n_observed is None:
        if not isinstance(missing_ratio, numbers.Real) or not 0 <= missing_ratio < 1:
            raise ValueError(f"missing_ratio must lie in [0, 1), got {missing_ratio!r}")
        n_obs = int(round((1 - missing_ratio) * size))
        if n_obs == 0:
            raise ValueError(f"missing_ratio={missing_ratio} leaves no observed entry in shape {shape}")
    else:
        n_obs = check_positive_int(n_observed, "n_observed")
        if n_obs > size:
            raise ValueError(f"n_observed={n_obs} exceeds the number of cells {size}")

    if model == "cp":
        factors = [rng.standard_normal((dim, rank)) for dim in shape]
        factors = [f / np.linalg.norm(f, axis=0, keepdims=True) for f in factors]
        core = None
    else:
        factors = [np.linalg.qr(rng.standard_normal((dim, rank)))[0] for dim in shape]
        core = rng.standard_normal((rank, rank, rank))

    dense = n_observed is None
    if dense:
        if core is None:
            full = np.einsum("ir,jr,kr->ijk", *factors)
        else:
            full = np.einsum("pqt,ip,jq,kt->ijk", core, *factors, optimize=True)
        flat = np.sort(rng.choice(size, size=n_obs, replace=False))
        indices = np.column_stack(np.unravel_index(flat, shape))
        raw = full.ravel()[flat]
        low, high = float(full.min()), float(full.max())
    else:
        flat = _sample_cells(size, n_obs, rng)
        indices = np.column_stack(np.unravel_index(flat, shape))
        raw = _model_values(factors, core, indices)
        low, high = float(raw.min()), float(raw.max())
        full = None
    if min_max:
        factor = 1.0 / (high - low) if high > low else 1.0
    else:
        low = 0.0
        rms = float(np.sqrt(np.mean((full if dense else raw) ** 2)))
        factor = 1.0 / rms if rms > 0 else 1.0
    truth_values = (raw - low) * factor
    truth_tensor = (full - low) * factor if full is not None else None
    noise_std = float(np.std(truth_tensor if dense else truth_values)) / float(np.sqrt(snr))
    values = truth_values + noise_std * rng.standard_normal(n_obs)
    return LowRankCompletion(
        observed=TensorEntries(indices, values, shape),
        truth=TensorEntries(indices, truth_values, shape),
        truth_tensor=truth_tensor,
        factors=factors,
        core=core,
        noise_std=noise_std,
        scale=(low, factor),
    )


def _sample_cells(size: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` distinct flat cell numbers out of ``size``, sorted, without an array of ``size``."""
    if n > size // 4:
        return np.sort(rng.choice(size, size=n, replace=False))
    picked = np.unique(rng.integers(0, size, size=int(n * 1.1) + 16))
    while picked.shape[0] < n:
        picked = np.unique(np.concatenate([picked, rng.integers(0, size, size=n)]))
    return np.sort(rng.choice(picked, size=n, replace=False))
