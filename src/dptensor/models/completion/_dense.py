"""ALS's per-row normal equations from a dense observation mask (small tensors).

The same statistics as :class:`~dptensor.models.completion._als.EntryStatistics` -- for row ``i``
of mode ``m``, ``sum_{e in row i} w_e w_e^T`` and ``sum_{e in row i} w_e y_e`` over the *observed*
entries only -- computed as matrix products against the mode-``m`` unfolding of the 0/1 mask
``M`` and of ``M * Y``: with ``W`` the design of every cell of the other two modes
(``(J K) x d``, the Khatri-Rao product of their rows for CP), the Gram matrices are
``M_(m) (W * W)`` (one product per upper-triangle pair, as one matrix) and the right-hand sides
``(M * Y)_(m) W``. Nothing is imputed: a missing cell has weight zero, so ALS is exactly the one
on observed entries. This costs ``O(cells d^2)`` per sweep in BLAS products instead of
``O(n d^2)`` scattered adds, which is faster when the tensor is small and not too sparse
(:func:`use_dense`); memory is two float arrays of the tensor's size.
"""

from __future__ import annotations

import numpy as np

#: Largest number of cells for which the dense statistics are used.
DENSE_CELLS = 1 << 21
#: ... and only when at least this fraction of the cells is observed.
DENSE_DENSITY = 1.0 / 64.0


#: Largest design block formed at once: ``(cells / n_m) x d(d+1)/2`` numbers for mode ``m``.
DENSE_BLOCK = 1 << 23


def use_dense(shape: tuple[int, int, int], n: int, width: int = 1) -> bool:
    """Whether :class:`DenseStatistics` is the faster choice for ``n`` entries of ``shape``.

    ``width`` is the number of unknowns per row (rank, plus one with biases): each mode's update
    forms a ``(cells / n_m) x width(width+1)/2`` block, which must stay small.
    """
    cells = int(np.prod(shape))
    block = cells // min(shape) * width * (width + 1) // 2
    return cells <= DENSE_CELLS and n >= DENSE_DENSITY * cells and block <= DENSE_BLOCK


_UPPER: dict[int, tuple] = {}


def _upper(d: int) -> tuple:
    if d not in _UPPER:
        _UPPER[d] = np.triu_indices(d)
    return _UPPER[d]


def _others(mode: int) -> tuple[int, int]:
    return tuple(m for m in range(3) if m != mode)  # type: ignore[return-value]


def dense_design(model: str, mode: int, core: np.ndarray | None, factors: list) -> np.ndarray:
    """``d x_hat / d row`` of ``mode`` at every cell of the other two modes, ``(J K) x rank``."""
    o1, o2 = _others(mode)
    f1, f2 = factors[o1], factors[o2]
    if model == "cp":
        return (f1[:, None, :] * f2[None, :, :]).reshape(-1, f1.shape[1])
    spec = {0: "pqt,jq,kt->jkp", 1: "pqt,ip,kt->ikq", 2: "pqt,ip,jq->ijt"}[mode]
    out = np.einsum(spec, core, f1, f2, optimize=True)
    return out.reshape(-1, out.shape[-1])


class DenseStatistics:
    """Dense mask and masked values of the training entries, and the statistics ALS needs.

    Parameters
    ----------
    indices, values : the training entries
    shape : tuple of three ints
    """

    def __init__(self, indices: np.ndarray, values: np.ndarray, shape: tuple[int, int, int]) -> None:
        self.shape = shape
        self.n = values.shape[0]
        self.mask = np.zeros(shape)
        self.masked = np.zeros(shape)
        cells = tuple(indices.T)
        self.mask[cells] = 1.0
        self.masked[cells] = values
        self.flat = np.ravel_multi_index(cells, shape)
        self.values = values
        self._unfold = [
            (
                np.moveaxis(self.mask, m, 0).reshape(shape[m], -1),
                np.moveaxis(self.masked, m, 0).reshape(shape[m], -1),
            )
            for m in range(3)
        ]

    def _other_offsets(self, params, mode: int) -> np.ndarray | float:
        """``mu + biases of the other two modes`` at every cell of the other two modes (flattened)."""
        if params.biases is None:
            return params.mean
        o1, o2 = _others(mode)
        return (params.mean + params.biases[o1][:, None] + params.biases[o2][None, :]).ravel()

    def mode_system(self, params, mode: int) -> tuple[np.ndarray, np.ndarray]:
        """Gram matrices and right-hand sides of every row of ``mode`` (with the bias column last)."""
        mask, masked = self._unfold[mode]
        parts = []
        if params.factors is not None:
            parts.append(dense_design(params.model, mode, params.core, params.factors))
        if params.biases is not None:
            parts.append(np.ones((mask.shape[1], 1)))
        design = np.hstack(parts) if len(parts) > 1 else parts[0]
        d = design.shape[1]
        offsets = self._other_offsets(params, mode)
        target = masked - mask * offsets if np.ndim(offsets) or offsets != 0.0 else masked
        upper = _upper(d)
        flat = mask @ (design[:, upper[0]] * design[:, upper[1]])
        gram = np.empty((mask.shape[0], d, d))
        gram[:, upper[0], upper[1]] = flat
        gram[:, upper[1], upper[0]] = flat
        return gram, target @ design

    def _offset_tensor(self, params) -> np.ndarray | float:
        if params.biases is None:
            return params.mean
        b0, b1, b2 = params.biases
        return params.mean + b0[:, None, None] + b1[None, :, None] + b2[None, None, :]

    def model_tensor(self, params) -> np.ndarray:
        """The model's value at every cell (offsets included)."""
        out = np.zeros(self.shape)
        if params.factors is not None:
            a = params.factors[0]
            design = dense_design(params.model, 0, params.core, params.factors)  # (J K) x p
            out = (a @ design.T).reshape(self.shape)
        return out + self._offset_tensor(params)

    def residuals(self, params) -> np.ndarray:
        """``x - x_hat`` at the training entries (in the given order)."""
        return self.values - np.take(self.model_tensor(params).ravel(), self.flat)

    def core_system(self, params) -> tuple[np.ndarray, np.ndarray]:
        """Gram matrix and right-hand side of the core's least squares (``vec(G)`` unknown).

        ``sum_cells M (a a^T (x) b b^T (x) c c^T)`` by three successive contractions of the mask.
        """
        a, b, c = params.factors
        p, q, t = params.core.shape
        aa = a[:, :, None] * a[:, None, :]
        bb = b[:, :, None] * b[:, None, :]
        cc = c[:, :, None] * c[:, None, :]
        t1 = np.tensordot(self.mask, aa, axes=([0], [0]))  # (J, K, p, p')
        t2 = np.einsum("jkab,jcd->kabcd", t1, bb, optimize=True)
        t3 = np.einsum("kabcd,kef->acebdf", t2, cc, optimize=True)
        size = p * q * t
        target = self.masked - self.mask * self._offset_tensor(params)
        rhs = np.einsum("ijk,ip,jq,kt->pqt", target, a, b, c, optimize=True).ravel()
        return t3.reshape(size, size), rhs

    def core_rhs(self, params) -> np.ndarray:
        """``sum_cells M (x - offsets) a (x) b (x) c`` (the core's right-hand side)."""
        a, b, c = params.factors
        target = self.masked - self.mask * self._offset_tensor(params)
        return np.einsum("ijk,ip,jq,kt->pqt", target, a, b, c, optimize=True)

    def core_apply(self, params, core: np.ndarray) -> np.ndarray:
        """``sum_cells M (z . vec(core)) z`` with ``z = a (x) b (x) c`` (the core's Gram applied)."""
        a, b, c = params.factors
        fitted = self.mask * np.einsum("pqt,ip,jq,kt->ijk", core, a, b, c, optimize=True)
        return np.einsum("ijk,ip,jq,kt->pqt", fitted, a, b, c, optimize=True)
