"""Checkpoints of :class:`~dptensor.decomposition.OnlineTensorPower`: its whole state in a ``.npz`` file.

Algorithm 2 of Wang & Anandkumar (2016) reads a stream once; a checkpoint taken after any batch
(the accumulators, the current restart vectors, the components found, the counters and the random
generator's bit-generator state, as arrays plus JSON metadata, never a pickle) lets a run stop and
resume with bit-identical results. :func:`data_fingerprint` names the data source a state was
computed on, so that a resumed fit refuses another one.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from dptensor._files import ZIP_MAGIC
from dptensor.streams import ArrayStream, BatchStream, DaskArrayStream

__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_VERSION", "FINGERPRINT_HEAD_BYTES", "data_fingerprint",
           "read_checkpoint", "write_checkpoint"]

CHECKPOINT_FORMAT = "dptensor.OnlineTensorPower"
#: Version 2 adds the data fingerprint (version 1 files still load, without one).
CHECKPOINT_VERSION = 2
#: Bytes of a file (or of an in-memory array's first rows) hashed into the data fingerprint.
FINGERPRINT_HEAD_BYTES = 1 << 20
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def write_checkpoint(model: Any, path: str | Path) -> None:
    """Write ``model``'s whole state to ``path`` (:meth:`OnlineTensorPower.save_checkpoint`)."""
    path = Path(path)
    if "_dim" not in model.__dict__:
        model._reset()
    rng = model._rng
    if rng is None and isinstance(model.random_state, np.random.Generator):
        rng = model.random_state  # not drawn from yet: its current state is where the fit starts
    metadata = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "params": {
            "rank": model.rank,
            "batch_size": model.batch_size,
            "n_restarts": model.n_restarts,
            "n_iter": model.n_iter,
            "target_error": model.target_error,
            "random_state": int(model.random_state)
            if isinstance(model.random_state, numbers.Integral)
            else None,
        },
        "state": {
            "dim": model._dim,
            "n_restarts_": getattr(model, "n_restarts_", None),
            "n_iter_": getattr(model, "n_iter_", None),
            "component": model._component,
            "round": model._round,
            "round_count": model._round_count,
            "n_samples_seen": model.n_samples_seen_,
            "rng": None if rng is None else _encode_state(rng.bit_generator.state),
        },
        "data": model._data_fingerprint,
    }
    arrays = {
        "vectors": model._vectors,
        "images": model._images,
        "values": model._values,
        "found_weights": model._found_weights,
        "found_factors": model._found_factors,
        "metadata": np.array(json.dumps(metadata)),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            np.savez(stream, **arrays)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def read_checkpoint(cls: type, path: str | Path) -> Any:
    """An estimator of class ``cls`` restored from ``path`` (:meth:`OnlineTensorPower.load_checkpoint`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    with open(path, "rb") as handle:
        if handle.read(len(ZIP_MAGIC)) != ZIP_MAGIC:
            raise ValueError(
                f"{path} is not an OnlineTensorPower checkpoint (a .npz archive written by "
                "save_checkpoint) but another file; name a new file to start afresh (e.g. state.npz)"
            )
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (ValueError, OSError) as exc:
        raise ValueError(f"{path} is not an OnlineTensorPower checkpoint: {exc}") from exc
    try:
        metadata = json.loads(str(arrays.pop("metadata").item()))
    except KeyError:
        raise ValueError(f"{path} is not an OnlineTensorPower checkpoint (no metadata)") from None
    if metadata.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not an OnlineTensorPower checkpoint")
    if metadata.get("version") not in (1, CHECKPOINT_VERSION):
        raise ValueError(f"{path}: unsupported checkpoint version {metadata.get('version')}")
    params, state = metadata["params"], metadata["state"]
    model = cls(
        params["rank"],
        batch_size=params["batch_size"],
        n_restarts=params["n_restarts"],
        n_iter=params["n_iter"],
        target_error=params["target_error"],
        random_state=params["random_state"],
    )
    model._check_parameters()
    model._reset()
    model._data_fingerprint = metadata.get("data")
    model._checkpoint_path = path
    if state["rng"] is not None:
        model._rng = _decode_generator(state["rng"])
    model.n_samples_seen_ = int(state["n_samples_seen"])
    if state["dim"] is None:
        return model
    dim, n_restarts, n_iter = int(state["dim"]), int(state["n_restarts_"]), int(state["n_iter_"])
    model._dim = dim
    model.n_features_in_, model.n_restarts_, model.n_iter_ = dim, n_restarts, n_iter
    model._component = int(state["component"])
    model._round = int(state["round"])
    model._round_count = int(state["round_count"])
    model._vectors = arrays["vectors"]
    model._images = arrays["images"]
    model._values = arrays["values"]
    model._found_weights = arrays["found_weights"]
    model._found_factors = arrays["found_factors"]
    done = model._component >= model.rank
    width = 0 if done else n_restarts
    expected = {
        "vectors": (dim, width),
        "images": (dim, width),
        "values": (width,),
        "found_weights": (model._component,),
        "found_factors": (dim, model._component),
    }
    for name, shape in expected.items():
        if arrays[name].shape != shape or arrays[name].dtype != np.float64:
            raise ValueError(
                f"{path}: array '{name}' has shape {arrays[name].shape} and dtype {arrays[name].dtype}, "
                f"expected {shape} float64"
            )
    if not (0 <= model._round < n_iter and 0 <= model._round_count < model.batch_size) and not done:
        raise ValueError(f"{path}: inconsistent round counters in the checkpoint")
    if done:
        model._finalise()
    return model


def _encode_state(value: Any) -> Any:
    """Bit-generator state as JSON: ndarrays become ``{"ndarray": list, "dtype": str}``."""
    if isinstance(value, dict):
        return {key: _encode_state(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return {"ndarray": value.tolist(), "dtype": value.dtype.str}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _decode_state(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"ndarray", "dtype"}:
            return np.array(value["ndarray"], dtype=np.dtype(value["dtype"]))
        return {key: _decode_state(item) for key, item in value.items()}
    return value


def _decode_generator(encoded: dict) -> np.random.Generator:
    name = encoded.get("bit_generator")
    if name not in _BIT_GENERATORS:
        raise ValueError(f"checkpoint names an unsupported bit generator {name!r}")
    bit_generator = getattr(np.random, name)()
    bit_generator.state = _decode_state(encoded)
    return np.random.Generator(bit_generator)


def data_fingerprint(stream: object) -> dict | None:
    """A cheap fingerprint of a data source: name, shape and a hash of its first bytes.

    Read without a pass over the data: a file reader (``.npy``, ``.csv``, ``.npz``) hashes the
    first :data:`FINGERPRINT_HEAD_BYTES` bytes of its file, an in-memory matrix its first rows
    (as many as fit in that many bytes); a Dask array is named and sized only. Plain
    iterables of batches have no fingerprint (``None``): nothing can be compared.

    Returns
    -------
    dict or None
        ``{"source", "n_samples", "n_features", "head_sha256"}`` (unknown entries ``None``).
    """
    if not isinstance(stream, BatchStream):
        return None
    n_samples = stream.n_samples
    n_features = getattr(stream, "n_features", None)
    digest = hashlib.sha256()
    path = getattr(stream, "path", None)
    if path is not None:
        source = Path(path).name
        with open(path, "rb") as handle:
            digest.update(handle.read(FINGERPRINT_HEAD_BYTES))
        head: str | None = digest.hexdigest()
    elif isinstance(stream, DaskArrayStream):
        source, head = "dask array", None
    elif isinstance(stream, ArrayStream):
        source = "sparse matrix" if sp.issparse(stream.data) else "array"
        data = stream.data
        rows = max(1, FINGERPRINT_HEAD_BYTES // max(8 * int(n_features or 1), 1))
        block = data[:rows]
        if sp.issparse(block):
            block = sp.csr_matrix(block)
            for part in (np.diff(block.indptr), block.indices, block.data):
                digest.update(np.ascontiguousarray(part, dtype=np.float64).tobytes())
        else:
            digest.update(np.ascontiguousarray(block, dtype=np.float64).tobytes())
        head = digest.hexdigest()
    else:
        source, head = type(stream).__name__, None
    return {
        "source": source,
        "n_samples": None if n_samples is None else int(n_samples),
        "n_features": None if n_features is None else int(n_features),
        "head_sha256": head,
    }
