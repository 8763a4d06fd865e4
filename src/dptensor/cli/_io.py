"""File helpers shared by the CLI subcommands."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from dptensor._files import write_json

__all__ = ["load_array", "write_json"]


def load_array(path: str | Path) -> np.ndarray | sp.csr_matrix:
    """Load a dense ``.npy`` array or a SciPy sparse ``.npz`` matrix.

    A ``.npz`` file is read with :func:`scipy.sparse.load_npz`; one written by
    :func:`numpy.savez` with a single array is accepted too.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    if path.suffix == ".npz":
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
