"""The exact law of unique-entry noise on a ``d x d x d`` tensor after whitening, sampled in ``k`` dimensions.

The AGN and AVN algorithms of Imtiaz & Sarwate (2018, slide "Differentially-private OTD") add
noise to the ``D_sym = d(d+1)(d+2)/6`` unique entries of the symmetric moment ``M3`` and release
``(M3 + E)(W, W, W)`` for a public ``d x k`` whitening matrix ``W``. Only the ``k x k x k`` tensor
``E(W, W, W)`` ever matters, and its law can be drawn without a ``d^3`` array.

Notation
--------
An orbit ``o = {i <= j <= l}`` of index triples has ``|o|`` in {1, 3, 6} entries; the noise puts
one draw ``b_o`` on all of them, ``E = sum_o b_o S_o`` with ``S_o`` the orbit's indicator,
``S_o = |o| Sym(e_i (x) e_j (x) e_l)``. With ``w_i`` the rows of ``W``,

    E(W, W, W) = sum_o b_o |o| Sym(w_i (x) w_j (x) w_l) = Phi b,

a linear map ``Phi: R^{D_sym} -> R^{K_sym}`` into the unique entries of symmetric ``k``-tensors
(``K_sym = k(k+1)(k+2)/6``), column ``o`` equal to ``|o| s_o``, ``s_o`` the unique entries of
``Sym(w_i (x) w_j (x) w_l)``.

The Gram matrix ``M = Phi Phi^T`` in ``O(d k^2 + d K_sym^2 + K_sym^2)``
--------------------------------------------------------------------------
``M = sum_o |o|^2 s_o s_o^T = sum_{(i,j,l) ordered} |o(i,j,l)| s s^T``, since each orbit appears
``|o|`` times among the ordered triples. On ordered triples
``|o| = 6 - 3([i=j] + [j=l] + [i=l]) + 4 [i=j=l]``, and ``s`` is symmetric in ``(i, j, l)``, so

    M = 6 A - 9 B + 4 C,   A = sum_{i,j,l} s s^T,
    B = sum_{i,l} s(i,i,l) s(i,i,l)^T,   C = sum_i s(i,i,i) s(i,i,i)^T.

With ``G = W^T W`` (``k x k``) and ``F_{abcd} = sum_i W_ia W_ib W_ic W_id`` (from the ``d x k(k+1)/2``
matrix of products of pairs of columns), for unique index triples ``t, t'``:

* ``A[t, t'] = perm(G[t, t']) / 6`` (the permanent of the ``3 x 3`` submatrix), because
  ``Sym(x (x) y (x) z)_t = (1/6) sum_sigma x_{t_sigma1} y_{t_sigma2} z_{t_sigma3}`` and the sums over
  ``i, j, l`` factor into entries of ``G``;
* ``B[t, t'] = (1/9) sum_{m, m'} F[t_{-m}, t'_{-m'}] G[t_m, t'_{m'}]`` (``t_{-m}``: ``t`` without
  position ``m``), the same computation with the two equal indices summed together;
* ``C = U3^T U3`` with row ``i`` of ``U3`` the unique entries of ``w_i^{(x)3}`` (a ``d x K_sym``
  product, formed in chunks).

Numerical conditioning. A whitening ``W = U S^{-1/2}`` can be badly conditioned, and ``M`` then
as badly as ``cond(W)^6``. We compute ``M`` for the orthonormal factor instead: with the thin
SVD ``W = Q R`` (``Q = U_W``, ``R = S_W V_W^T``), ``E(W, W, W) = X(R, R, R)`` with
``X = E(Q, Q, Q)``, and for orthonormal ``Q`` the Gram matrix satisfies ``A <= M <= 6 A`` with
``A`` diagonal, ``1/6 <= A <= 1`` (the unique convention puts variance 1 on every orbit, the
Frobenius one ``1/|o|``), so it is well conditioned. Samples of ``X`` are mapped by the public
``R`` in ``O(k^4)``.

The two laws
------------
**Gaussian (AGN).** ``b ~ N(0, tau^2 I)`` gives ``Phi b ~ N(0, tau^2 M)``: ``X = tau L h`` with
``L L^T = M`` and ``h ~ N(0, I_{K_sym})``.

**Exponential-norm (AVN).** ``b = r theta`` with ``r ~ Gamma(D_sym, Delta/epsilon)`` and ``theta``
uniform on the sphere, ``theta = g / ||g||``, ``g ~ N(0, I_{D_sym})``. Let ``V`` (``D_sym x K_sym``)
be an orthonormal basis of the row space of ``Phi`` (``Phi`` is onto: ``Q`` has rank ``k``, so every
symmetric ``k``-tensor is ``E(Q, Q, Q)`` of ``E = X(Q^T, Q^T, Q^T)``). Split ``g = V h + g_perp``:
``h = V^T g ~ N(0, I_{K_sym})`` and ``||g_perp||^2 ~ chi^2_{D_sym - K_sym}`` are independent, and
``Phi g = Phi V h``. Hence

    Phi b  =_d  r (Phi V) h / sqrt(||h||^2 + q),   q ~ chi^2(D_sym - K_sym),

and ``Phi V`` may be replaced by any square root ``L`` of ``M`` (``L = Phi V O`` for an orthogonal
``O``, and ``O h`` has the law of ``h`` with the same norm). Only ``K_sym + 2`` random numbers
are drawn. The tests check both laws against the dense samplers on small ``d``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.linalg import blas

from dptensor._validation import check_finite_array, check_real
from dptensor.privacy.mechanisms import _shape, symmetric_from_unique, unique_indices
from dptensor.privacy.noise import NoiseLike, NoiseSource, resolve_noise

__all__ = ["WhitenedNoiseLaw", "whitened_noise_gram"]

#: Rows of ``W`` per chunk of the ``d x K_sym`` product behind ``C`` (bounds peak memory).
_CHUNK_ELEMENTS = 4_000_000


def whitened_noise_gram(whitening: np.ndarray) -> np.ndarray:
    """``M = Phi Phi^T``: covariance of the unique entries of ``E(W, W, W)`` for unit unique-entry noise.

    ``E`` is the symmetric ``d x d x d`` tensor with i.i.d. ``N(0, 1)`` unique entries; the result
    is ``K_sym x K_sym`` in the orbit order of :func:`~dptensor.privacy.mechanisms.unique_indices`
    (``k``). Computed as ``6 A - 9 B + 4 C`` (module docstring) in ``O(d k^2 + d K_sym^2)`` without
    any ``d^2`` or ``d^3`` array. Accurate when ``W`` is well conditioned; for whitening
    matrices use :class:`WhitenedNoiseLaw`, which works with the orthonormal factor.

    Parameters
    ----------
    whitening : ndarray of shape (d, k)

    Returns
    -------
    ndarray of shape (K_sym, K_sym)
    """
    W = check_finite_array(whitening, "whitening", ndim=2)
    d, k = W.shape
    t = unique_indices(k, 3)
    G = W.T @ W
    # A[t, t'] = perm(G[t, t']) / 6
    A = np.zeros((t.shape[0], t.shape[0]))
    for p in itertools.permutations(range(3)):
        A += G[t[:, None, 0], t[None, :, p[0]]] * G[t[:, None, 1], t[None, :, p[1]]] * G[
            t[:, None, 2], t[None, :, p[2]]
        ]
    A /= 6.0
    # B[t, t'] = (1/9) sum_{m, m'} F[t_{-m}, t'_{-m'}] G[t_m, t'_{m'}], F from pairs of columns
    rows, cols = np.triu_indices(k)
    pairs = W[:, rows] * W[:, cols]
    F = pairs.T @ pairs
    pair_index = np.zeros((k, k), dtype=np.int64)
    pair_index[rows, cols] = np.arange(rows.size)
    pair_index[cols, rows] = np.arange(rows.size)
    rest = [[x for x in range(3) if x != m] for m in range(3)]
    without = [pair_index[t[:, r[0]], t[:, r[1]]] for r in rest]
    B = np.zeros_like(A)
    for m in range(3):
        for mp in range(3):
            B += F[without[m][:, None], without[mp][None, :]] * G[t[:, None, m], t[None, :, mp]]
    B /= 9.0
    # C = sum_i u_i u_i^T, u_i the unique entries of w_i^(x)3 (symmetric rank-k updates, upper triangle)
    C = np.zeros_like(A, order="F")
    step = max(1, _CHUNK_ELEMENTS // t.shape[0])
    for start in range(0, d, step):
        block = W[start : start + step]
        cubes = np.asfortranarray(block[:, t[:, 0]] * block[:, t[:, 1]] * block[:, t[:, 2]])
        C = blas.dsyrk(1.0, cubes, beta=1.0, c=C, trans=1, lower=0, overwrite_c=1)
    C = np.triu(C) + np.triu(C, 1).T
    return 6.0 * A - 9.0 * B + 4.0 * C


@dataclass(frozen=True)
class WhitenedNoiseLaw:
    """Samplers for ``E(W, W, W)`` when ``E`` is unique-entry noise on a ``d x d x d`` symmetric tensor.

    Build with :meth:`from_whitening`; see the module docstring for the laws and their proof.

    Attributes
    ----------
    whitening : ndarray of shape (d, k)
        The public ``W``.
    root : ndarray of shape (K_sym, K_sym)
        ``L`` with ``L L^T = M_Q``, the Gram matrix of the orthonormal factor ``Q`` of ``W``.
    map_back : ndarray of shape (k, k)
        ``R`` with ``W = Q R``; a sample ``X`` for ``Q`` becomes ``X(R, R, R)`` for ``W``.
    """

    whitening: np.ndarray
    root: np.ndarray
    map_back: np.ndarray

    @classmethod
    def from_whitening(cls, whitening: np.ndarray) -> WhitenedNoiseLaw:
        """Factor the law for a public ``d x k`` matrix of rank ``k`` (``O(d K_sym^2 + K_sym^3)``)."""
        W = check_finite_array(whitening, "whitening", ndim=2)
        d, k = W.shape
        if k > d:
            raise ValueError(f"whitening must have at least as many rows as columns, got shape {W.shape}")
        Q, singular, right = np.linalg.svd(W, full_matrices=False)
        if singular[-1] <= singular[0] * np.finfo(float).eps * d:
            raise ValueError("whitening has rank below its number of columns")
        # For orthonormal Q, A <= M_Q <= 6 A with 1/6 <= A <= 1 (module docstring): Cholesky is safe.
        root = np.linalg.cholesky(whitened_noise_gram(Q))
        return cls(W, root, singular[:, None] * right)

    @property
    def n_words(self) -> int:
        """``d``."""
        return int(self.whitening.shape[0])

    @property
    def n_components(self) -> int:
        """``k``."""
        return int(self.whitening.shape[1])

    @property
    def n_unique_input(self) -> int:
        """``D_sym = d(d+1)(d+2)/6``, the dimension of the noise vector ``b``."""
        d = self.n_words
        return d * (d + 1) * (d + 2) // 6

    def _to_tensor(self, unique: np.ndarray) -> np.ndarray:
        """Unique entries (last axis) of ``X = E(Q, Q, Q)`` to ``X(R, R, R)``."""
        X = symmetric_from_unique(unique, self.n_components, 3)
        R = self.map_back
        return np.einsum("...pqr,pa,qb,rc->...abc", X, R, R, R, optimize=True)

    def covariance(self) -> np.ndarray:
        """Covariance of the unique entries of ``E(W, W, W)`` for unit unique-entry noise (``K_sym^2``)."""
        k = self.n_components
        index = unique_indices(k, 3)
        # columns of L mapped by R: Phi_W Phi_W^T = (R-map L)(R-map L)^T
        mapped = self._to_tensor(self.root.T)[:, index[:, 0], index[:, 1], index[:, 2]]
        return mapped.T @ mapped

    def gaussian(
        self,
        scale: float,
        *,
        size: int | tuple[int, ...] | None = None,
        noise: NoiseLike | NoiseSource = None,
    ) -> np.ndarray:
        """``E(W, W, W)`` for ``E`` with i.i.d. ``N(0, scale^2)`` unique entries (AGN's M3 noise).

        Same law as ``symmetric_gaussian_tensor(d, scale, convention="unique")`` pushed through
        ``(W, W, W)``. Returns an array of shape ``size + (k, k, k)``.
        """
        scale = check_real(scale, "scale", strict=False)
        batch = _shape(size)
        h = resolve_noise(noise).gaussian(batch + (self.root.shape[1],), 1.0)
        return self._to_tensor(scale * (h @ self.root.T))

    def exponential_norm(
        self,
        sensitivity: float,
        epsilon: float,
        *,
        size: int | tuple[int, ...] | None = None,
        noise: NoiseLike | NoiseSource = None,
    ) -> np.ndarray:
        """``E(W, W, W)`` for ``E`` from ``b`` with density ``~ exp(-epsilon ||b|| / sensitivity)`` (AVN).

        Same law as ``exponential_norm_noise(D_sym, sensitivity, epsilon)`` scattered to the
        orbits and pushed through ``(W, W, W)``: ``r L h / sqrt(||h||^2 + q)`` with
        ``r ~ Gamma(D_sym, sensitivity/epsilon)`` and ``q ~ chi^2(D_sym - K_sym)`` (module docstring).
        """
        sensitivity = check_real(sensitivity, "sensitivity")
        epsilon = check_real(epsilon, "epsilon")
        source = resolve_noise(noise)
        batch = _shape(size)
        dim_out = self.root.shape[1]
        h = source.standard_normal(batch + (dim_out,))
        radius = source.gamma(float(self.n_unique_input), sensitivity / epsilon, size=batch + (1,))
        remainder = self.n_unique_input - dim_out
        # ||g_perp||^2 ~ chi^2(D_sym - K_sym) = Gamma((D_sym - K_sym)/2, 2)
        rest = np.zeros(batch + (1,))
        if remainder > 0:
            rest = source.gamma(remainder / 2.0, 2.0, size=batch + (1,))
        norms = np.sqrt(np.sum(h * h, axis=-1, keepdims=True) + rest)
        return self._to_tensor(radius * (h @ self.root.T) / norms)

