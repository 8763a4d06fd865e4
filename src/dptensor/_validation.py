"""Input checks shared by every layer of dptensor.

Each check raises a ``ValueError`` or ``TypeError`` that names the offending argument and
states what was expected (docs/design.md, *Conventions*): bad input never yields a silent wrong
answer.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.sparse as sp
import sklearn.exceptions

RandomStateLike = None | int | np.integer | np.random.Generator | np.random.RandomState


class NotFittedError(sklearn.exceptions.NotFittedError):
    """An estimator was used before it was fitted: scikit-learn's error (a ``ValueError`` and an
    ``AttributeError``), so that ``except sklearn.exceptions.NotFittedError`` catches it too."""


def check_random_state(random_state: RandomStateLike, name: str = "random_state") -> np.random.Generator:
    """Turn ``random_state`` into a :class:`numpy.random.Generator`.

    Parameters
    ----------
    random_state : None, int, numpy.random.Generator or numpy.random.RandomState
        ``None`` draws fresh OS entropy, an integer seeds a new PCG64 generator, and a
        ``Generator`` is used as it is (so successive calls continue its stream). A legacy
        ``RandomState`` (accepted as scikit-learn accepts it) seeds a new generator with a number
        drawn from it, so successive calls continue its stream too and equal states give equal
        results.
    name : str
        Argument name used in error messages.

    Returns
    -------
    numpy.random.Generator
    """
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"{name} must be a non-negative integer seed, got {random_state}")
        return np.random.default_rng(int(random_state))
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(int(random_state.randint(0, 2**63 - 1, dtype=np.int64)))
    raise TypeError(
        f"{name} must be None, a non-negative int, a numpy.random.Generator or a numpy.random.RandomState, "
        f"got {type(random_state).__name__}"
    )


def check_positive_int(value: object, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as an ``int`` after checking it is an integer ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_real(value: object, name: str, *, minimum: float = 0.0, strict: bool = True) -> float:
    """Return ``value`` as a float after checking it is a finite real ``> minimum``.

    With ``strict=False`` the bound is ``>= minimum``. Booleans are refused (they are ints to
    Python but never a meaningful scale, tolerance or budget).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or (value <= minimum if strict else value < minimum):
        relation = ">" if strict else ">="
        raise ValueError(f"{name} must be a finite number {relation} {minimum:g}, got {value!r}")
    return value


def check_alpha0(alpha0: object) -> float:
    """Check the Dirichlet concentration ``alpha_0 = sum_i alpha_i`` is a finite number ``> 0``."""
    return check_real(alpha0, "alpha0")


def check_rank(rank: object, dim: int, name: str = "rank") -> int:
    """Check ``1 <= rank <= dim`` for a decomposition of a ``dim``-dimensional tensor."""
    rank = check_positive_int(rank, name)
    if rank > dim:
        raise ValueError(f"{name} must be at most the tensor dimension {dim}, got {rank}")
    return rank


def check_finite_array(array: object, name: str, *, ndim: int | None = None) -> np.ndarray:
    """Return ``array`` as a float64 ndarray after checking its shape and finiteness."""
    try:
        out = np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a numeric array, got {type(array).__name__}") from exc
    if ndim is not None and out.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-dimensional array, got shape {out.shape}")
    if out.size == 0:
        raise ValueError(f"{name} is empty (shape {out.shape})")
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name} contains NaN or infinite entries")
    return out


def check_data_matrix(data: object, name: str = "X") -> np.ndarray | sp.csr_matrix:
    """Check a data matrix of records (rows) for a moment operator or a stream batch.

    Dense input becomes a C-contiguous float64 ndarray; sparse input becomes CSR float64.
    Raises on wrong dimensionality, no rows or columns, and NaN or infinite entries.
    """
    if sp.issparse(data):
        out = sp.csr_matrix(data, dtype=np.float64)
        if out.shape[0] == 0 or out.shape[1] == 0:
            raise ValueError(f"{name} is empty (shape {out.shape})")
        if not np.all(np.isfinite(out.data)):
            raise ValueError(f"{name} contains NaN or infinite entries")
        return out
    return np.ascontiguousarray(check_finite_array(data, name, ndim=2))


def check_epsilon_delta(epsilon: float, delta: float | None = None) -> None:
    """Check privacy parameters: ``epsilon > 0`` finite and ``0 < delta < 1`` when given (no bools)."""
    def real(value: object) -> bool:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)

    if not real(epsilon) or not np.isfinite(epsilon) or epsilon <= 0:
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if delta is not None and (not real(delta) or not 0 < delta < 1):
        raise ValueError(f"delta must lie strictly between 0 and 1, got {delta!r}")


# Observed entries of a three-way tensor (tensor completion).
def check_shape(shape: object, name: str = "shape") -> tuple[int, int, int]:
    """Return ``shape`` as a tuple of three positive ints."""
    if isinstance(shape, str | bytes) or not hasattr(shape, "__len__"):
        raise TypeError(f"{name} must be a sequence of three positive integers, got {shape!r}")
    if len(shape) != 3:
        raise ValueError(f"{name} must have three dimensions (a three-way tensor), got {tuple(shape)}")
    return tuple(check_positive_int(s, f"{name}[{n}]") for n, s in enumerate(shape))  # type: ignore[return-value]


def check_indices(
    indices: object, shape: tuple[int, int, int], name: str = "indices", *, allow_empty: bool = False
) -> np.ndarray:
    """Return ``indices`` as a C-contiguous ``(n, 3)`` int64 array inside ``shape``.

    ``allow_empty`` accepts ``n = 0`` (under the user relation an empty data set is a neighbour).
    """
    arr = np.asarray(indices)
    numeric = np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    if arr.dtype == object or not numeric:
        raise TypeError(f"{name} must be an integer array of shape (n, 3), got dtype {arr.dtype}")
    if allow_empty and arr.size == 0 and arr.ndim in (1, 2) and arr.shape[-1] in (0, 3):
        return np.zeros((0, 3), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"{name} must have shape (n, 3), got {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty: no observed entries")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(f"{name} must hold whole numbers, got non-integer values")
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    low = arr.min(axis=0)
    high = arr.max(axis=0)
    for mode in range(3):
        if low[mode] < 0 or high[mode] >= shape[mode]:
            # The offending index is not named: under the user relation the indices are private.
            raise ValueError(f"{name}[:, {mode}] must lie in [0, {shape[mode] - 1}] for shape {shape}")
    return arr


def check_entries(
    indices: object, values: object, shape: object, *, allow_empty: bool = False
) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int]]:
    """Validate observed entries of a three-way tensor.

    Parameters
    ----------
    indices : array-like of shape (n, 3)
        Zero-based ``(i, j, k)`` of each observed entry.
    values : array-like of shape (n,)
        Finite observed values.
    shape : sequence of three ints
    allow_empty : bool, default False
        Accept no entries at all (an empty neighbour under the user relation).

    Returns
    -------
    indices : ndarray of int64, shape (n, 3)
    values : ndarray of float64, shape (n,)
    shape : tuple of three ints

    Raises
    ------
    ValueError
        No observations, indices outside ``shape``, NaN or infinite values, length mismatch.
    TypeError
        Non-numeric input.
    """
    shape = check_shape(shape)
    indices = check_indices(indices, shape, allow_empty=allow_empty)
    try:
        vals = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"values must be a numeric array, got {type(values).__name__}") from exc
    if vals.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got shape {vals.shape}")
    if vals.shape[0] != indices.shape[0]:
        raise ValueError(f"values has {vals.shape[0]} entries but indices has {indices.shape[0]} rows")
    if not np.all(np.isfinite(vals)):
        raise ValueError("values contains NaN or infinite entries")
    return indices, np.ascontiguousarray(vals), shape
