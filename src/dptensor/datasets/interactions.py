"""Interaction files as binary user x item matrices, with the original ids and the binarisation stated.

A top-N recommender learns from *which* items a user chose (a purchase, a play, a rating above a
threshold the user names), not from the values. :func:`read_interactions` reads the files people
have into a binary ``scipy.sparse.csr_array`` (rows: users, columns: items, stored 1.0 = an
interaction) and keeps what a reader must know to use it:

* the original user and item ids, in row and column order (ids are mapped to ``0 .. n - 1`` in
  sorted order of the original id: numerically when every id is an integer, else as strings; or,
  with ``one_based``, an integer id *is* its row or column);
* the rule that made the matrix binary, as a sentence (``binarisation``), and the values read
  (``values``) so that an explicit-rating protocol can still use them
  (:func:`dptensor.evaluation.relevant_from_ratings`).

==========================  ==========================================================================
format                      what is read
==========================  ==========================================================================
``"csv"``, ``"tsv"``        ``user,item[,value[,...]]`` rows (comma or tab), with or without a header
``"recbole"``               RecBole atomic ``.inter`` files: a tab-separated header of ``name:type``
                            fields with ``user_id`` and ``item_id`` (``rating`` is the value if present)
``"movielens"``             MovieLens ``u.data`` (``user item rating timestamp``, tab-separated, no
                            header) or ``ratings.csv`` (read as by :func:`~dptensor.datasets.read_movielens`)
``"auto"`` (default)        RecBole when the first line is such a header (or the name ends in
                            ``.inter``), else a delimited file whose delimiter is sniffed (comma, tab,
                            semicolon, else whitespace) -- a ``u.data`` file reads as its columns
==========================  ==========================================================================

A listed pair counts once however often it is listed; its value is the largest listed. With
``threshold``, a pair is an interaction when that value is at least the threshold; every user and
item listed keeps its row and column even when none of its pairs passes (so a threshold never
changes the catalogue).

Errors on bad lines name the 1-based line and the column; with ``private=True`` they name the file,
the column and the kind of fault only -- never a line number, a cell or a count (docs/protection.md,
as the ratings readers of :mod:`dptensor.datasets.entries` do).
"""

from __future__ import annotations

import csv
import numbers
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from dptensor.datasets.entries import DELIMITERS, _is_number, _numbered_rows, _udata_columns, _where

FORMATS = ("auto", "csv", "tsv", "recbole", "movielens")

#: First header cells that name a user column (lower case, a RecBole ``:type`` left out).
USER_HEADERS = ("user", "users", "user_id", "userid", "uid", "visitorid", "customer_id")


@dataclass(frozen=True, repr=False)
class Interactions:
    """A binary user x item matrix read from an interaction file (:func:`read_interactions`).

    Attributes
    ----------
    matrix : scipy.sparse.csr_array of shape (n_users, n_items)
        float64, every stored value 1.0 (an interaction), sorted indices.
    user_ids, item_ids : ndarray
        The original ids of the rows and columns (int64 when every id is an integer, else str).
    binarisation : str
        The rule that made the matrix, e.g. ``"an interaction is a listed pair whose rating is >= 4"``.
    values : scipy.sparse.csr_array or None
        The value of every listed pair (the largest if listed more than once; a value of 0 is an
        explicitly stored zero), also those below the threshold; ``None`` when the file has no
        value column.
    """

    matrix: sp.csr_array
    user_ids: np.ndarray
    item_ids: np.ndarray
    binarisation: str
    values: sp.csr_array | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.matrix.shape[0]), int(self.matrix.shape[1]))

    @property
    def n_interactions(self) -> int:
        return int(self.matrix.nnz)

    def __repr__(self) -> str:
        users, items = self.shape
        count = self.n_interactions
        noun = "interaction" if count == 1 else "interactions"
        return f"Interactions({users} users x {items} items, {count} {noun}; {self.binarisation})"


def read_interactions(
    path: str | Path,
    *,
    format: str = "auto",
    threshold: float | None = None,
    value_column: int | str | None = None,
    header: bool | None = None,
    one_based: bool | None = None,
    shape: tuple[int, int] | None = None,
    private: bool = False,
) -> Interactions:
    """Read an interaction file into a binary user x item matrix with its id maps.

    Parameters
    ----------
    path : str or Path
    format : {"auto", "csv", "tsv", "recbole", "movielens"}, default "auto"
        See the module documentation.
    threshold : float, optional
        A pair is an interaction when its value is ``>= threshold`` (e.g. 4 for "rated 4 or 5");
        by default every listed pair is one, whatever its value.
    value_column : int or str, optional
        The column holding the values: a 0-based position or a header name. By default the third
        column of a delimited file (if it has one), ``rating`` in a RecBole file (if present), the
        rating in a MovieLens file.
    header : bool, optional
        Whether a delimited file's first row is a header. By default it is one when none of its
        cells is a number and the next row has a number, or when its first cell names a user
        column (:data:`USER_HEADERS`, e.g. ``user_id``). RecBole files always have one, MovieLens
        ``u.data`` never.
    one_based : bool, optional
        By default ids are mapped to ``0 .. n - 1`` in sorted order. ``True`` (``False``): ids are
        integers counted from 1 (from 0) and id ``j`` is row or column ``j - 1`` (``j``); the
        ``user_ids``/``item_ids`` are then every position, listed or not. Use it (with ``shape``) to
        read a train/test pair of files onto the same rows and columns.
    shape : (int, int), optional
        ``(n_users, n_items)`` with ``one_based``; by default one more than the largest position.
    private : bool, default False
        Error messages name the file, the column and the fault, never a line number or a cell.

    Returns
    -------
    Interactions

    Examples
    --------
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "ratings.csv"
    >>> _ = path.write_text("user,item,rating\\nann,b,5\\nann,a,2\\nbob,a,4\\n")
    >>> data = read_interactions(path, threshold=4)
    >>> data
    Interactions(2 users x 2 items, 2 interactions; an interaction is a listed pair whose rating is >= 4)
    >>> data.user_ids.tolist(), data.item_ids.tolist(), data.matrix.toarray().tolist()
    (['ann', 'bob'], ['a', 'b'], [[0.0, 1.0], [1.0, 0.0]])
    """
    path = Path(path)
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(map(repr, FORMATS))}, got {format!r}")
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not np.isfinite(
            threshold
        ):
            raise ValueError(f"threshold must be a finite number or None, got {threshold!r}")
        threshold = float(threshold)
    if one_based is not None and not isinstance(one_based, bool):
        raise TypeError(f"one_based must be True, False or None, got {type(one_based).__name__}")
    if shape is not None:
        if one_based is None:
            raise ValueError("shape applies to ids read as positions: pass one_based=True or False with it")
        sizes = list(shape) if isinstance(shape, tuple | list) else []
        if len(sizes) != 2 or not all(isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 1
                                      for n in sizes):
            raise ValueError(f"shape must be two positive integers (n_users, n_items), got {shape!r}")
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if format == "auto":
        format = "recbole" if path.suffix == ".inter" or _recbole_header(path) is not None else "delimited"
    if format == "movielens":
        if header or (value_column not in (None, 2, "rating")):
            raise ValueError("a MovieLens file has no header and its value is the rating (the third column)")
        users, items, values, _ = _udata_columns(path, private)
        name = "rating"
    else:
        users, items, values, name = _columns(path, format, value_column, header, private)
    if threshold is not None and values is None:
        raise ValueError(f"{path}: threshold={threshold:g} needs a value column, and the file has none "
                         "(pass value_column)")
    user_ids, rows = _index(users, one_based, None if shape is None else shape[0], "user", path, private)
    item_ids, cols = _index(items, one_based, None if shape is None else shape[1], "item", path, private)
    return _build(rows, cols, values, user_ids, item_ids, threshold, name)


def _recbole_header(path: Path) -> list[str] | None:
    """The field names of a RecBole header (``user_id:token<TAB>item_id:token...``), else ``None``."""
    first = _first_line(path)
    fields = first[1].rstrip("\r\n").split("\t") if first is not None else []
    if not fields or not all(":" in field for field in fields):
        return None
    names = [field.split(":")[0].strip() for field in fields]
    return names if "user_id" in names and "item_id" in names else None


def _first_line(path: Path) -> tuple[int, str] | None:
    """The 1-based number and the text of the first line that is neither blank nor a ``#`` comment."""
    with open(path, errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip() and not line.lstrip().startswith("#"):
                return number, line
    return None


def _columns(
    path: Path, format: str, value_column: int | str | None, header: bool | None, private: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, str | None]:
    """User and item cells (str), values (float) and the value column's name of a delimited file."""
    if format == "recbole":
        names = _recbole_header(path)
        if names is None:
            raise ValueError(f"{path}: not a RecBole .inter file (the first line must be tab-separated "
                             "name:type fields with user_id and item_id)")
        if header is False:
            raise ValueError("a RecBole .inter file always has a header")
        rows = _numbered_rows(path, "\t")
        positions = (names.index("user_id"), names.index("item_id"))
        if value_column is None and "rating" in names:
            value_column = "rating"
    else:
        delimiter = {"csv": ",", "tsv": "\t"}.get(format)
        rows = _numbered_rows(path, delimiter)
        first = _first_line(path)
        if first is None:
            raise ValueError(f"{path}: no interactions")
        names, rows = _header(rows, first, delimiter, header)
        positions = (0, 1)
        if value_column is None and rows and len(rows[0][1]) >= 3:
            value_column = 2
    if not rows:
        raise ValueError(f"{path}: no interactions")
    value_at = _value_position(value_column, names, positions, path)
    needed = max(*positions, -1 if value_at is None else value_at) + 1
    for line, row in rows:
        if len(row) < needed:
            found = "" if private else f", found {len(row)}"
            raise ValueError(f"{_where(path, line, private)}: expected at least {needed} columns in every "
                             f"row (user, item{', value' if value_at is not None else ''}){found}")
    users, items = (np.array([row[p] for _, row in rows]) for p in positions)
    for cells, role, position in ((users, "user", positions[0]), (items, "item", positions[1])):
        empty = cells == ""
        if empty.any():
            line = None if private else rows[int(np.argmax(empty))][0]
            where = _where(path, line, private)
            raise ValueError(f"{where}: an empty {role} id ({_column(position, names)})")
    if value_at is None:
        return users, items, None, None
    values = _numbers([row[value_at] for _, row in rows], rows, path, _column(value_at, names), private)
    return users, items, values, names[value_at] if names else f"value (column {value_at + 1})"


def _header(
    rows: list[tuple[int, list[str]]], first: tuple[int, str], delimiter: str | None, header: bool | None
) -> tuple[list[str] | None, list[tuple[int, list[str]]]]:
    """The header's names and the data rows, the header decided as :func:`read_interactions` says.

    :func:`dptensor.datasets.entries._numbered_rows` has left out a first row without a number;
    it is put back where it is data.
    """
    number, text = first
    if not rows or rows[0][0] != number:
        sep = delimiter if delimiter is not None else next((d for d in DELIMITERS if d in text), None)
        cells = ([cell.strip() for cell in next(csv.reader([text.rstrip("\r\n")], delimiter=sep))]
                 if sep is not None else text.split())
        candidate = (number, cells)
    else:
        candidate = rows[0]
        rows = rows[1:]
    cells = candidate[1]
    if header is None:
        numeric_below = any(_is_number(cell) for _, row in rows[:1] for cell in row)
        names_user = bool(cells) and cells[0].split(":")[0].strip().lower() in USER_HEADERS
        header = not any(_is_number(cell) for cell in cells) and (numeric_below or names_user)
    if header:
        return [cell.split(":")[0].strip() for cell in cells], rows
    return None, [candidate, *rows]


def _column(position: int, names: list[str] | None) -> str:
    return f"column {position + 1}" + (f", {names[position]!r}" if names and position < len(names) else "")


def _value_position(
    value_column: int | str | None, names: list[str] | None, ids: tuple[int, int], path: Path
) -> int | None:
    """The 0-based position of the value column (``ids``: those of the user and item columns)."""
    if value_column is None:
        return None
    if isinstance(value_column, str):
        if not names or value_column not in names:
            known = f"the header has {', '.join(map(repr, names))}" if names else "the file has no header"
            raise ValueError(f"{path}: value_column={value_column!r} is not a column ({known})")
        position = names.index(value_column)
    elif isinstance(value_column, bool) or not isinstance(value_column, numbers.Integral) or value_column < 0:
        raise ValueError(f"value_column must be a header name or a 0-based position, got {value_column!r}")
    else:
        position = int(value_column)
    if position in ids:
        raise ValueError(f"value_column={value_column!r} is the user or the item column (positions {ids})")
    return position


def _numbers(cells: list[str], rows: list[tuple[int, list[str]]], path: Path, column: str, private: bool
             ) -> np.ndarray:
    """The value cells as finite floats; the first bad one is named by its line unless ``private``."""
    try:
        values = np.array(cells, dtype=np.float64)
    except ValueError:
        values = None
    bad = (np.array([not _is_number(cell) for cell in cells]) if values is None else ~np.isfinite(values))
    if bad.any():
        line = None if private else rows[int(np.argmax(bad))][0]
        raise ValueError(f"{_where(path, line, private)}: values ({column}) must be finite numbers")
    return values


def _index(
    cells: np.ndarray, one_based: bool | None, size: int | None, role: str, path: Path, private: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The ids (in row or column order) and each cell's row or column."""
    integer = _as_integers(cells)
    if one_based is None:
        ids, positions = np.unique(integer if integer is not None else cells.astype(str), return_inverse=True)
        return ids, positions.astype(np.int64).ravel()
    if integer is None:
        raise ValueError(f"{path}: {role} ids must be whole numbers to be read as positions (one_based="
                         f"{one_based}); leave one_based out to map them in sorted order")
    positions = integer - int(one_based)
    if positions.size and positions.min() < 0:
        hint = "ids counted from 0: use one_based=False" if one_based else "a negative id"
        raise ValueError(f"{_where(path, None, private)}: a {role} id below {int(one_based)} ({hint})")
    needed = int(positions.max()) + 1 if positions.size else 0
    if size is None:
        size = needed
    elif needed > size:
        more = "" if private else f" (the file needs {needed})"
        raise ValueError(f"{path}: a {role} id outside shape's {int(size)} {role}s{more}")
    return np.arange(int(one_based), int(size) + int(one_based), dtype=np.int64), positions


def _as_integers(cells: np.ndarray) -> np.ndarray | None:
    """The cells as int64 when every one is a whole number written as an integer, else ``None``."""
    if np.issubdtype(cells.dtype, np.integer):
        return cells.astype(np.int64)
    try:
        return cells.astype(np.int64)
    except (ValueError, OverflowError):
        return None


def _build(
    rows: np.ndarray, cols: np.ndarray, values: np.ndarray | None, user_ids: np.ndarray, item_ids: np.ndarray,
    threshold: float | None, name: str | None,
) -> Interactions:
    """The binary matrix (and the values) of the listed pairs; a pair's value is its largest."""
    shape = (user_ids.size, item_ids.size)
    keys = rows * np.int64(max(item_ids.size, 1)) + cols
    if values is None:
        unique = np.unique(keys)
        largest = None
    else:
        order = np.lexsort((values, keys))  # by pair, the largest value last
        sorted_keys = keys[order]
        last = np.r_[sorted_keys[1:] != sorted_keys[:-1], True]
        unique, largest = sorted_keys[last], values[order][last]
    pair_rows, pair_cols = np.divmod(unique, np.int64(max(item_ids.size, 1)))
    keep = np.ones(unique.size, dtype=bool) if threshold is None else largest >= threshold
    matrix = sp.csr_array((np.ones(int(keep.sum())), (pair_rows[keep], pair_cols[keep])), shape=shape)
    matrix.sort_indices()
    stored = None
    if largest is not None:
        stored = sp.csr_array((largest, (pair_rows, pair_cols)), shape=shape)
        stored.sort_indices()
    if threshold is None:
        rule = "every listed pair is an interaction" + (f" (its {name} is not used)" if name else "")
    else:
        rule = f"an interaction is a listed pair whose {name} is >= {threshold:g}"
    return Interactions(matrix, user_ids, item_ids, rule, stored)


def write_interactions(path: str | Path, interactions: Interactions, *, delimiter: str = ",") -> Path:
    """Write ``user,item[,value]`` rows with a header, in the original ids.

    Every listed pair is written (with its value when ``values`` is known, also below a
    threshold), so :func:`read_interactions` with the same ``threshold`` (and ``one_based`` and
    ``shape`` for ids read as positions) gives the same matrix and ids back. Users and items
    without any listed pair are not in the file.
    """
    if not isinstance(interactions, Interactions):
        raise TypeError(f"interactions must be Interactions, got {type(interactions).__name__}")
    if delimiter not in (",", "\t", ";"):
        raise ValueError(f"delimiter must be ',', '\\t' or ';', got {delimiter!r}")
    source = interactions.values if interactions.values is not None else interactions.matrix
    coo = sp.coo_array(source)
    order = np.lexsort((coo.col, coo.row))
    users = interactions.user_ids[coo.row[order]].tolist()
    items = interactions.item_ids[coo.col[order]].tolist()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        if interactions.values is None:
            writer.writerow(["user", "item"])
            writer.writerows(zip(users, items, strict=True))
        else:
            writer.writerow(["user", "item", "value"])
            writer.writerows(zip(users, items, map(repr, coo.data[order].tolist()), strict=True))
    return path


__all__ = ["FORMATS", "USER_HEADERS", "Interactions", "read_interactions", "write_interactions"]
