"""Model files of the top-N family: :func:`save_recommender` and :func:`load_recommender`.

One ``.npz`` archive (``numpy.savez_compressed``; read back with ``allow_pickle=False``, so a file
can never make NumPy run code) holds a fitted model's :class:`~dptensor.models.recommend.ItemSide`
-- everything ``recommend_for`` and ``score_rows`` read -- and a JSON header:

============== ==================================================================================
``header``     JSON: the format name and version, the estimator's class and parameters (options
               as a dict), the method, the sizes, how the low-rank EASE and iALS fold-in are set,
               a private model's guarantee (``PrivacyGuarantee.to_dict()`` and its dp-accounting
               event as the ledger stores it, so that the guarantee is rebuilt exactly), the
               binarisation sentence of the interactions and where they came from
``popularity`` float64 ``(I,)``: the item counts (noisy for a private model)
``weights``    float64 ``(I, I)``: a dense EASE ``B``
``eigenvectors`` / ``eigenvalues``: a low-rank EASE (its ridge is in the header)
``factors``    float64 ``(I, k)``: implicit ALS's item factors
``columns``    int64: the columns of the users' rows the item side covers (a private model's
               ``items_``; the number of columns is in the header)
``item_ids``   the original id of each column (int64 or unicode), if given
============== ==================================================================================

The training rows are never saved: a loaded model lists items for users from their own rows
(``recommend_for``), and its ``recommend()`` refuses, saying so. A private model's file holds only
the release (the item side, ``items_``) and what its guarantee treats as public (the parameters,
the number of users, the public item list); nothing computed from the interactions without noise.

The file is written atomically (:func:`dptensor._files.atomic_path`): complete or absent. A file
from a newer format version, or one that is not such a model file (another archive, a tampered
header, arrays of the wrong shape), is refused with a ``ValueError`` that says which.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dptensor._files import atomic_path, check_binary, json_text
from dptensor._version import __version__
from dptensor.models.recommend.ease import LowRankEase
from dptensor.models.recommend.estimator import ItemSide, Recommender
from dptensor.models.recommend.options import RecommenderOptions
from dptensor.models.recommend.private_estimator import PrivateRecommender
from dptensor.privacy import PrivacyGuarantee
from dptensor.privacy.ledger import decode_event, encode_event

__all__ = ["FORMAT", "FORMAT_VERSION", "RecommenderFile", "load_recommender", "read_recommender_file",
           "save_recommender"]

#: The ``format`` entry of every header.
FORMAT = "dptensor-recommender"
#: The version this dptensor writes; it reads every version up to it.
FORMAT_VERSION = 1
#: Constructor parameters that are not settings of the model (data sources, run-time choices).
SKIPPED_PARAMETERS = ("random_state", "noise", "ledger", "verbose", "n_jobs")
#: The guarantee's float fields that JSON stores as "inf"/"nan" strings when not finite.
_GUARANTEE_FLOATS = ("epsilon", "delta", "noise_multiplier", "epsilon_exact", "nominal_epsilon")
_WRITTEN_BY = "a model file written by save_recommender or 'dptensor recommend fit --out'"


@dataclass(frozen=True)
class RecommenderFile:
    """What :func:`read_recommender_file` reads: the model, its item ids and the header.

    Attributes
    ----------
    model : Recommender or PrivateRecommender
        Fitted, without training rows (``recommend_for`` works, ``recommend`` refuses).
    item_ids : ndarray or None
        ``item_ids[j]`` is the original id of the model's item ``j`` (column ``j`` of the rows
        ``recommend_for`` reads); None when the file has none.
    binarisation : str or None
        How the training interactions were made binary (a sentence), if recorded.
    header : dict
        The whole JSON header.
    """

    model: Any
    item_ids: np.ndarray | None
    binarisation: str | None
    header: dict


#: The classes a file may name.
CLASSES = {"Recommender": Recommender, "PrivateRecommender": PrivateRecommender}


def _plain_parameters(model: Any) -> dict[str, Any]:
    params = {}
    for name, value in model.get_params(deep=False).items():
        if name in SKIPPED_PARAMETERS:
            continue
        if isinstance(value, RecommenderOptions):
            value = {"RecommenderOptions": value.get_params()}
        elif isinstance(value, np.ndarray):
            value = value.tolist()
        elif isinstance(value, np.generic):
            value = value.item()
        elif value is not None and not isinstance(value, bool | int | float | str | list | tuple | dict):
            raise TypeError(f"cannot save the parameter {name}={value!r} of {type(model).__name__} in a "
                            "model file (expected numbers, strings, lists or RecommenderOptions)")
        params[name] = value
    return params


def _guarantee_header(guarantee: PrivacyGuarantee) -> dict[str, Any]:
    record = guarantee.to_dict()
    record["dp_event"] = encode_event(guarantee.to_dp_event()) if guarantee.holds else None
    return record


def save_recommender(
    model: Any, path: str | Path, *, item_ids: Sequence[object] | np.ndarray | None = None,
    binarisation: str | None = None, source: str | None = None, selected_only: bool = False,
) -> Path:
    """Write a fitted :class:`Recommender` or :class:`PrivateRecommender` to one ``.npz`` file.

    Parameters
    ----------
    model : Recommender or PrivateRecommender
        A fitted model (its ``item_side_``); its training rows are not written.
    path : str or Path
        The file, written exactly there (no suffix is added) and atomically.
    item_ids : sequence of int or str, optional
        The original id of each column of the users' rows (``n_items_`` of them; with
        ``selected_only``, of each item of ``items_``). Integers are stored as int64, anything else
        as text.
    binarisation : str, optional
        How the interactions were made binary (e.g. "an interaction is a rating >= 4"), recorded
        for whoever reads the file.
    source : str, optional
        Where the interactions came from (a file name), recorded as given.
    selected_only : bool, default False
        For a model whose item side covers some columns only (a private model with
        ``catalogue="select"``): write it over those items alone, so that the file records neither
        the number of columns of the training rows nor where the selected items lay among them --
        necessary when the columns themselves came from the private data (the items found in an
        interaction file, as ``dptensor recommend fit --catalogue select`` reads them). The loaded
        model then reads rows over the selected items, in the order of ``items_``.

    Returns
    -------
    Path

    Raises
    ------
    NotFittedError
        ``model`` is not fitted.
    ValueError
        ``item_ids`` has the wrong length or repeats an id.
    """
    model._check_fitted()
    side: ItemSide = model.item_side_
    if selected_only:
        side = dataclasses.replace(side, columns=None, n_columns=None)
    n_items = side.width
    arrays: dict[str, np.ndarray] = {"popularity": np.asarray(side.popularity, dtype=np.float64)}
    layout: dict[str, Any] = {"weights": None, "regularization": float(side.regularization),
                              "alpha": float(side.alpha),
                              "regularization_exponent": float(side.regularization_exponent),
                              "n_columns": None if side.n_columns is None else int(side.n_columns)}
    if isinstance(side.weights, LowRankEase):
        arrays["eigenvectors"] = np.asarray(side.weights.eigenvectors, dtype=np.float64)
        arrays["eigenvalues"] = np.asarray(side.weights.eigenvalues, dtype=np.float64)
        layout.update(weights="low-rank", ridge=float(side.weights.ridge))
    elif side.weights is not None:
        arrays["weights"] = np.asarray(side.weights, dtype=np.float64)
        layout["weights"] = "dense"
    if side.factors is not None:
        arrays["factors"] = np.asarray(side.factors, dtype=np.float64)
    if side.columns is not None:
        arrays["columns"] = np.asarray(side.columns, dtype=np.int64)
    recounts = getattr(model, "recounts_", None)
    if recounts is not None and len(recounts):  # private popularity's two releases, beside its ranking
        arrays["counts"] = np.asarray(model.popularity_, dtype=np.float64)
        arrays["recounted"] = np.searchsorted(model.items_, model.candidates_).astype(np.int64)
        arrays["recounts"] = np.asarray(recounts, dtype=np.float64)
    id_kind = None
    if item_ids is not None:
        ids = _check_item_ids(item_ids, n_items)
        arrays["item_ids"] = ids
        id_kind = "int" if ids.dtype.kind == "i" else "str"
    guarantee = getattr(model, "guarantee_", None)
    header = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "dptensor_version": __version__,
        "class": type(model).__name__, "params": _plain_parameters(model), "method": side.method,
        "n_items": side.n_items, "n_users": int(model.n_users_), "item_side": layout,
        "guarantee": None if guarantee is None else _guarantee_header(guarantee),
        "item_ids": id_kind, "binarisation": binarisation, "source": source,
        "training_rows": "not saved: recommend_for(X_new) lists items for users from their own rows",
    }
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:  # a handle: NumPy adds no ".npz"
        np.savez_compressed(handle, header=np.array(json_text(header, indent=None)), **arrays)
    return path


def _check_item_ids(item_ids: object, n_items: int) -> np.ndarray:
    ids = np.asarray(item_ids)
    if ids.ndim != 1 or ids.shape[0] != n_items:
        raise ValueError(f"item_ids must be a 1-D sequence of the model's {n_items} item ids, got shape "
                         f"{ids.shape}")
    if ids.dtype.kind in "iu" and (ids.size == 0 or ids.max() < 2**63):
        ids = ids.astype(np.int64)
    else:
        ids = np.array([str(item) for item in ids.tolist()], dtype=str)
    if np.unique(ids).size != ids.size:
        raise ValueError("item_ids repeats an id: each of the model's items needs its own")
    return ids


def load_recommender(path: str | Path) -> Any:
    """Read a model written by :func:`save_recommender`, ready for ``recommend_for``.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    Recommender or PrivateRecommender
        Fitted; it keeps no training rows, so ``recommend()`` raises a ``ValueError`` pointing to
        ``recommend_for``. Use :func:`read_recommender_file` for the item ids and the header too.
    """
    return read_recommender_file(path).model


def read_recommender_file(path: str | Path) -> RecommenderFile:
    """Read a model file: the model, its item ids, its binarisation sentence and its header.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        The file is not a model file of this family (not a zip archive, no header, a header or
        arrays that do not fit together), or it was written by a newer dptensor (a newer format
        version).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such model file: {path}")
    check_binary(path, "npz")
    try:
        with np.load(path, allow_pickle=False) as archive:
            files = set(archive.files)
            if "header" not in files:
                raise ValueError(f"{path} has no header: it is not {_WRITTEN_BY}")
            header_text = archive["header"]
            arrays = {name: archive[name] for name in files - {"header"}}
    except (zipfile.BadZipFile, EOFError, OSError, KeyError) as exc:
        raise ValueError(f"{path} is not a readable .npz archive ({exc}): expected {_WRITTEN_BY}") from None
    except ValueError as exc:  # an object array (pickle refused), a broken member
        if str(exc).startswith(str(path)):
            raise
        raise ValueError(f"{path} holds an array that cannot be read without pickle ({exc}): it is not "
                         f"{_WRITTEN_BY}") from None
    header = _read_header(path, header_text)
    model = _rebuild(path, header, arrays)
    ids = arrays.get("item_ids")
    if header.get("item_ids") is not None:
        if ids is None:
            raise ValueError(f"{path}: the header names item ids but the file has none: it was altered")
        if ids.ndim != 1 or ids.shape[0] != model.n_items_ or ids.dtype.kind not in "iU":
            raise ValueError(f"{path}: item_ids must be {model.n_items_} ints or strings, got shape "
                             f"{ids.shape} ({ids.dtype}): the file was altered")
    binarisation = header.get("binarisation")
    return RecommenderFile(model, ids, binarisation if isinstance(binarisation, str) else None, header)


def _read_header(path: Path, value: np.ndarray) -> dict:
    if value.shape != () or value.dtype.kind != "U":
        raise ValueError(f"{path}: its header is not one JSON text: it is not {_WRITTEN_BY}")
    try:
        header = json.loads(str(value))
    except json.JSONDecodeError:
        raise ValueError(f"{path}: its header is not valid JSON: the file was altered") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{path} is not {_WRITTEN_BY} (its header names no format {FORMAT!r})")
    version = header.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{path}: format_version must be a positive integer, got {version!r}: the file "
                         "was altered")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{path} was written by a newer dptensor ({header.get('dptensor_version', 'unknown')}, model "
            f"file format {version}); this dptensor ({__version__}) reads formats up to {FORMAT_VERSION}: "
            "upgrade dptensor to read it"
        )
    return header


def _field(path: Path, header: Mapping, key: str, kinds: type | tuple[type, ...]) -> Any:
    value = header.get(key)
    if isinstance(value, bool) or not isinstance(value, kinds):  # (no field of the header is a bool)
        raise ValueError(f"{path}: the header's {key!r} is {value!r}: the file was altered")
    return value


def _array(path: Path, arrays: Mapping[str, np.ndarray], name: str, shape: tuple) -> np.ndarray:
    """A float64 array of the given shape (``None`` in ``shape``: any length), finite."""
    value = arrays.get(name)
    if value is None:
        raise ValueError(f"{path} has no {name!r} array: it is not {_WRITTEN_BY}, or it was altered")
    fits = value.ndim == len(shape) and all(want is None or got == want
                                            for got, want in zip(value.shape, shape, strict=True))
    if not fits or value.dtype.kind not in "fiu":
        raise ValueError(f"{path}: {name!r} has shape {value.shape} ({value.dtype}), expected "
                         f"{tuple('any' if s is None else s for s in shape)} numbers: the file was altered")
    value = np.ascontiguousarray(value, dtype=np.float64)
    if not np.all(np.isfinite(value)):
        raise ValueError(f"{path}: {name!r} has NaN or infinite values: the file was altered")
    return value


def _positive(path: Path, layout: Mapping, key: str) -> float:
    value = _field(path, layout, key, (int, float))
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{path}: the header's {key!r} must be a positive number, got {value!r}: the file "
                         "was altered")
    return float(value)


def _core_side(path: Path, method: str, n_items: int, layout: Mapping, arrays: Mapping[str, np.ndarray]
               ) -> ItemSide:
    """The item side's arrays of ``method`` (columns attached by :func:`_item_side`)."""
    popularity = _array(path, arrays, "popularity", (n_items,))
    if method == "popularity":
        return ItemSide("popularity", popularity)
    if method == "ease":
        kind = layout.get("weights")
        if kind == "dense":
            return ItemSide("ease", popularity, weights=_array(path, arrays, "weights", (n_items, n_items)))
        if kind == "low-rank":
            vectors = _array(path, arrays, "eigenvectors", (n_items, None))
            values = _array(path, arrays, "eigenvalues", (vectors.shape[1],))
            if np.any(values < 0):
                raise ValueError(f"{path}: the low-rank EASE has negative eigenvalues: the file was altered")
            return ItemSide("ease", popularity,
                            weights=LowRankEase(vectors, values, _positive(path, layout, "ridge")))
        raise ValueError(f"{path}: an EASE model file names weights {kind!r} (expected 'dense' or "
                         "'low-rank'): the file was altered")
    if method == "ials":
        exponent = _field(path, layout, "regularization_exponent", (int, float))
        if not math.isfinite(exponent):
            raise ValueError(f"{path}: the header's 'regularization_exponent' is not finite: the file was "
                             "altered")
        return ItemSide("ials", popularity, factors=_array(path, arrays, "factors", (n_items, None)),
                        regularization=_positive(path, layout, "regularization"),
                        alpha=_positive(path, layout, "alpha"), regularization_exponent=float(exponent))
    raise ValueError(f"{path}: unknown method {method!r} (expected popularity, ease or ials)")


def _item_side(path: Path, header: dict, arrays: Mapping[str, np.ndarray]) -> ItemSide:
    method = _field(path, header, "method", str)
    n_items = _field(path, header, "n_items", int)
    layout = _field(path, header, "item_side", dict)
    side = _core_side(path, method, n_items, layout, arrays)
    columns = arrays.get("columns")
    n_columns = layout.get("n_columns")
    if columns is None and n_columns is None:
        return side
    if isinstance(n_columns, bool) or not isinstance(n_columns, int) or columns is None:
        raise ValueError(f"{path}: the item side's columns and their number must come together: the file "
                         "was altered")
    if columns.ndim != 1 or columns.dtype.kind not in "iu" or columns.size != n_items or (
            columns.size and (columns.min() < 0 or columns.max() >= n_columns
                              or np.any(np.diff(columns.astype(np.int64)) <= 0))):
        raise ValueError(f"{path}: the item side's columns must be {n_items} increasing positions below "
                         f"{n_columns}: the file was altered")
    return dataclasses.replace(side, columns=columns.astype(np.int64), n_columns=n_columns)


def _number(value: object) -> object:
    """A guarantee float as :meth:`PrivacyGuarantee.to_dict` wrote it through strict JSON."""
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    return value


def rebuild_guarantee(record: Mapping[str, Any]) -> PrivacyGuarantee:
    """The :class:`PrivacyGuarantee` of a header's ``guarantee`` entry (its constructor's checks run).

    Raises
    ------
    ValueError
        The entry is not such a record (a field missing or of the wrong kind, an event that is not a
        dp-accounting event).
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"a guarantee record must be a JSON object, got {type(record).__name__}")
    fields = {name: record.get(name) for name in (
        "epsilon", "delta", "neighbouring", "accountant", "n_releases", "mechanism", "noise_multiplier",
        "epsilon_exact", "holds", "claim", "reason", "nominal_epsilon", "protected", "public")}
    fields = {name: _number(value) for name, value in fields.items()}
    details = record.get("details", {})
    if not isinstance(details, Mapping):
        raise ValueError("a guarantee record's details must be a JSON object")
    event = record.get("dp_event")
    try:
        return PrivacyGuarantee(**fields, details=dict(details),
                                dp_event=decode_event(event) if isinstance(event, str) else None)
    except TypeError as exc:
        raise ValueError(f"not a guarantee record ({exc})") from None


def _rebuild(path: Path, header: dict, arrays: Mapping[str, np.ndarray]) -> Any:
    name = header.get("class")
    if name not in CLASSES:
        raise ValueError(f"{path} holds a {name!r} model; this dptensor reads {' and '.join(CLASSES)} files")
    params = dict(_field(path, header, "params", dict))
    options = params.get("options")
    if isinstance(options, dict):
        try:
            params["options"] = RecommenderOptions(**options["RecommenderOptions"]).checked()
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: its options do not fit RecommenderOptions ({exc}): the file was "
                             "altered or written by another version") from None
    try:
        model = CLASSES[name](**params)
    except TypeError as exc:
        raise ValueError(f"{path}: its parameters do not fit {name} ({exc}): the file was altered") from None
    side = _item_side(path, header, arrays)
    n_users = _field(path, header, "n_users", int)
    record = header.get("guarantee")
    if name == "PrivateRecommender":
        if record is None:
            raise ValueError(f"{path}: a PrivateRecommender file without its guarantee: the file was altered")
        try:
            model.guarantee_ = rebuild_guarantee(record)
        except ValueError as exc:
            raise ValueError(f"{path}: its guarantee cannot be read ({exc}): the file was altered") from None
        model.plan_ = None  # the planner's verdict is not kept; the guarantee is
        model.items_ = side.columns if side.columns is not None else np.arange(side.n_items, dtype=np.int64)
        model.candidates_, model.recounts_, model.sweeps_ = np.zeros(0, dtype=np.int64), np.zeros(0), []
    model.item_side_ = side
    model.method_ = side.method
    model.popularity_ = side.popularity
    recount_arrays = {"counts", "recounted", "recounts"} & set(arrays)
    if name == "PrivateRecommender" and recount_arrays:
        if len(recount_arrays) != 3:
            raise ValueError(f"{path}: a private popularity file needs its counts, candidates and recounts "
                             "together: the file was altered")
        counts = _array(path, arrays, "counts", (side.n_items,))
        recounts = _array(path, arrays, "recounts", (None,))
        where = np.asarray(arrays["recounted"])
        if (where.shape != recounts.shape or where.dtype.kind not in "iu" or np.any(np.diff(where) <= 0)
                or where.size and (where.min() < 0 or where.max() >= side.n_items)):
            raise ValueError(f"{path}: its recounted items do not fit its item side (increasing positions, "
                             "one a recount): the file was altered")
        where = where.astype(np.int64)
        model.popularity_, model.candidates_, model.recounts_ = counts, model.items_[where], recounts
    model.n_items_ = side.width
    model.n_users_ = n_users
    return model
