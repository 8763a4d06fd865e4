"""Bi-scaling of each slice of a partially observed tensor (Wei et al., Section 5.2).

Section 5.2 of *Applying Differential Privacy to Tensor Completion* standardises the
user x item matrix of every day "to have rows and columns of means zero and variances one"
before completion, citing Olshen & Rajaratnam (2010), *Successive normalization of rectangular
arrays*. For slice ``k`` of mode 2 this is the model

    x_ijk = m_k + alpha_ik + beta_jk + s_ik t_jk z_ijk,

fitted on the observed entries by alternating the four normalisations (row centring, column
centring, row scaling, column scaling) a fixed number of times; the completion model is then
fitted to ``z`` and predictions are mapped back. The paper does not say what to do with a row or
column that has fewer than two entries in a slice (its variance is undefined), nor how a test
entry in an unseen (row, slice) is mapped back; here such scales are 1 and unseen offsets 0, so a
test entry in an unseen row of a slice is predicted from the slice mean, the column offset and the
model. A scale is never below :data:`MIN_SCALE` times the slice's standard deviation.

The statistics are computed from the values without noise: on a private fit they are a release
that no guarantee covers (see :class:`~dptensor.models.TensorCompletion`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Successive normalisation passes (Olshen & Rajaratnam prove convergence; a few dozen suffice).
N_PASSES = 30
#: Smallest scale, relative to the slice's standard deviation.
MIN_SCALE = 0.1


def _group_mean(keys: np.ndarray, values: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    counts = np.bincount(keys, minlength=size)
    sums = np.bincount(keys, weights=values, minlength=size)
    return np.divide(sums, counts, out=np.zeros(size), where=counts > 0), counts


def _centring_shift(keys: np.ndarray, unscaled: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """Per group, ``sum unscaled / sum weights``: the offset change that zeroes the group's mean of ``z``.

    For a row, ``z_ij s_i = (r_ij - alpha_i - beta_j) / t_j``, so ``sum_j z_ij = 0`` needs
    ``alpha_i`` to move by ``sum_j z_ij s_i / sum_j (1 / t_j)``.
    """
    total = np.bincount(keys, weights=weights, minlength=size)
    shift = np.bincount(keys, weights=unscaled, minlength=size)
    return np.divide(shift, total, out=np.zeros(size), where=total > 0)


@dataclass(frozen=True)
class BiScaling:
    """Per-slice offsets and scales; ``transform`` and ``inverse`` map values and predictions."""

    shape: tuple[int, int, int]
    slice_mean: np.ndarray  # (K,)
    row_offset: np.ndarray  # (I * K,) indexed by i * K + k
    col_offset: np.ndarray  # (J * K,)
    row_scale: np.ndarray
    col_scale: np.ndarray

    def _parts(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = indices[:, 2]
        rk = indices[:, 0] * self.shape[2] + k
        ck = indices[:, 1] * self.shape[2] + k
        offset = self.slice_mean[k] + self.row_offset[rk] + self.col_offset[ck]
        return offset, self.row_scale[rk] * self.col_scale[ck]

    def transform(self, indices: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Standardised values ``z``."""
        offset, scale = self._parts(indices)
        return (values - offset) / scale

    def inverse(self, indices: np.ndarray, standardised: np.ndarray) -> np.ndarray:
        """Values on the original scale from standardised predictions."""
        offset, scale = self._parts(indices)
        return offset + scale * standardised


def fit_biscaling(indices: np.ndarray, values: np.ndarray, shape: tuple[int, int, int]) -> BiScaling:
    """Successive row/column centring and scaling of every slice of mode 2 (module docstring)."""
    n_i, n_j, n_k = shape
    k = indices[:, 2]
    rk = indices[:, 0] * n_k + k
    ck = indices[:, 1] * n_k + k
    slice_mean, _ = _group_mean(k, values, n_k)
    resid = values - slice_mean[k]
    slice_sd = np.sqrt(_group_mean(k, resid**2, n_k)[0])
    floor = MIN_SCALE * np.where(slice_sd > 0, slice_sd, 1.0)
    row_off, col_off = np.zeros(n_i * n_k), np.zeros(n_j * n_k)
    row_sc, col_sc = np.ones(n_i * n_k), np.ones(n_j * n_k)
    size_r, size_c = n_i * n_k, n_j * n_k
    for _ in range(N_PASSES):
        # centring: the weighted means making sum_j z_ij = 0 (rows) and sum_i z_ij = 0 (columns)
        z = (resid - row_off[rk] - col_off[ck]) / (row_sc[rk] * col_sc[ck])
        row_off += _centring_shift(rk, z * row_sc[rk], 1.0 / col_sc[ck], size_r)
        z = (resid - row_off[rk] - col_off[ck]) / (row_sc[rk] * col_sc[ck])
        col_off += _centring_shift(ck, z * col_sc[ck], 1.0 / row_sc[rk], size_c)
        z = (resid - row_off[rk] - col_off[ck]) / (row_sc[rk] * col_sc[ck])
        var, counts = _group_mean(rk, z**2, size_r)
        row_sc = np.where(
            counts >= 2, np.maximum(row_sc * np.sqrt(var), floor[np.arange(size_r) % n_k]), row_sc
        )
        z = (resid - row_off[rk] - col_off[ck]) / (row_sc[rk] * col_sc[ck])
        var, counts = _group_mean(ck, z**2, size_c)
        col_sc = np.where(
            counts >= 2, np.maximum(col_sc * np.sqrt(var), floor[np.arange(size_c) % n_k]), col_sc
        )
    return BiScaling(shape, slice_mean, row_off, col_off, row_sc, col_sc)
