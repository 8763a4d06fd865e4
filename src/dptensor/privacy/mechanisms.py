"""Noise samplers for differential privacy, vectorised, each drawing from a secret ``noise`` source.

Every sampler takes ``noise`` (``None``, ``"numpy"``, ``"opendp"``,
:func:`~dptensor.privacy.insecure_test_noise` or a :class:`~dptensor.privacy.NoiseSource`),
never a public ``random_state``: see :mod:`dptensor.privacy.noise`.

=====================================  ==============================================================
:func:`gaussian_noise`                  ``N(0, sigma^2)`` of any shape
:func:`laplace_noise`                   ``Laplace(0, b)`` of any shape
:func:`exponential_norm_noise`          l2 "exponential-norm" vectors, density ``~ exp(-eps ||b|| / Delta)``
:func:`symmetric_gaussian_matrix`       symmetric ``d x d`` Gaussian matrices
:func:`symmetric_gaussian_tensor`       symmetric ``d x d x d`` Gaussian tensors
:func:`add_symmetric_gaussian`          a symmetric array plus that noise, added *to the values* by the
                                        noise source (OpenDP's measurement under ``noise="opendp"``)
=====================================  ==============================================================

Calibration (how large ``sigma`` or ``b`` must be) lives in :mod:`dptensor.privacy.calibration`;
these functions only draw noise.

Sensitivity conventions for symmetric noise
-------------------------------------------
A symmetric matrix or tensor has fewer free entries than it has entries: the *unique* entries
are those with sorted indices (``i <= j`` or ``i <= j <= k``); the entries with the same
multiset of indices form an *orbit* of size ``|O|`` (1 or 2 for matrices; 1, 3 or 6 for
third-order tensors). The ``convention`` argument fixes how noise is spread over orbits:

``"unique"``
    every unique entry is an independent ``N(0, scale^2)``, copied to its orbit. Adding it is
    the Gaussian mechanism for the vector of unique entries: its l2 sensitivity is the l2 norm
    of the change *of the unique entries* (each orbit counted once).
``"frobenius"``
    isotropic Gaussian on the space of symmetric arrays with the Frobenius inner product:
    entry std ``scale / sqrt(|O|)``. The sensitivity is the Frobenius norm of the (symmetric)
    change, ``||T - T'||_F``, because ``{sum_{p in O} e_p / sqrt(|O|)}`` is an orthonormal
    basis of the symmetric arrays.
``"entry"`` (tensors only)
    entry std ``scale * 6 / |O|``, matched to Wang & Anandkumar (2016), Definition 4.2:
    neighbouring tensors differ by ``+-symmetrize(e_i (x) e_j (x) e_k)`` (a sum of the six index
    permutations), which changes every entry of one orbit by ``6/|O|`` and nothing else. In the
    noise's own metric (the Mahalanobis norm) each such change has length exactly ``1 / scale``,
    so the sensitivity is **1 per unit scale** for every neighbouring pair. Under the
    ``"unique"`` convention the same relation has sensitivity 6 (the diagonal change
    ``6 e_i^{(x)3}``) and under ``"frobenius"`` also 6; the ``"entry"`` convention puts
    ``sqrt(6)`` (``"frobenius"``) to 6 (``"unique"``) times less noise on off-diagonal entries.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from dptensor._validation import check_positive_int, check_real
from dptensor.privacy.noise import NoiseLike, NoiseSource, resolve_noise

SymmetricConvention = Literal["unique", "frobenius", "entry"]


def _shape(size: int | tuple[int, ...] | None) -> tuple[int, ...]:
    if size is None:
        return ()
    if isinstance(size, int | np.integer):
        return (check_positive_int(size, "size", minimum=0),)
    return tuple(check_positive_int(s, "size", minimum=0) for s in size)


def gaussian_noise(
    shape: int | tuple[int, ...], sigma: float, *, noise: NoiseLike | NoiseSource = None
) -> np.ndarray:
    """I.i.d. ``N(0, sigma^2)`` noise of the given shape (the Gaussian mechanism's noise).

    Calibrate ``sigma`` with :func:`~dptensor.privacy.gaussian_sigma_analytic` or
    :func:`~dptensor.privacy.gaussian_sigma_classic` for a query of l2 sensitivity ``Delta_2``.
    To add it to a value, prefer ``resolve_noise(noise).add_gaussian(value, sigma)``, which is
    floating-point safe under the ``"opendp"`` backend.
    """
    sigma = check_real(sigma, "sigma", strict=False)
    return resolve_noise(noise).gaussian(_shape(shape), sigma)


def laplace_noise(
    shape: int | tuple[int, ...], scale: float, *, noise: NoiseLike | NoiseSource = None
) -> np.ndarray:
    """I.i.d. ``Laplace(0, b)`` noise (Dwork & Roth 2014, Definition 3.3).

    With ``b = Delta_1 / epsilon`` (:func:`~dptensor.privacy.laplace_scale`) adding it to a
    query of l1 sensitivity ``Delta_1`` is ``epsilon``-DP.
    """
    scale = check_real(scale, "scale", strict=False)
    return resolve_noise(noise).laplace(_shape(shape), scale)


def exponential_norm_noise(
    dim: int,
    sensitivity: float,
    epsilon: float,
    *,
    size: int | tuple[int, ...] | None = None,
    noise: NoiseLike | NoiseSource = None,
) -> np.ndarray:
    """Vectors with density ``p(b) ~ exp(-epsilon ||b||_2 / Delta_2)`` on ``R^dim``.

    The l2 "exponential-norm" (or "K-norm" for the l2 ball) mechanism: adding ``b`` to a query
    of l2 sensitivity ``Delta_2`` is ``epsilon``-DP (pure), since
    ``p(b) / p(b + v) <= exp(epsilon ||v|| / Delta_2)`` by the triangle inequality. Sampled as
    ``b = r theta`` with ``theta`` uniform on the unit sphere and, because the density of
    ``r = ||b||`` is ``~ r^{dim-1} exp(-epsilon r / Delta_2)``,
    ``r ~ Gamma(shape=dim, scale=Delta_2 / epsilon)``.

    Parameters
    ----------
    dim : int
    sensitivity : float
        ``Delta_2 > 0``.
    epsilon : float
        ``> 0``.
    size : int or tuple, optional
        Leading batch shape; the result has shape ``size + (dim,)``.
    noise : None, "numpy", "opendp", InsecureTestNoise or NoiseSource
        Secret randomness (NumPy's Gamma and normal samplers under every backend: OpenDP has no
        sampler for this mechanism).

    Returns
    -------
    ndarray of shape ``size + (dim,)``
    """
    dim = check_positive_int(dim, "dim")
    sensitivity = check_real(sensitivity, "sensitivity", strict=False)
    if sensitivity == 0:
        raise ValueError("sensitivity must be > 0")
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | np.floating) or not (
        math.isfinite(epsilon) and epsilon > 0
    ):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    source = resolve_noise(noise)
    batch = _shape(size)
    directions = source.standard_normal(batch + (dim,))
    norms = np.linalg.norm(directions, axis=-1, keepdims=True)
    radii = source.gamma(dim, sensitivity / epsilon, size=batch + (1,))
    return radii * directions / norms


def _sorted_index_map(dim: int, order: int) -> tuple[np.ndarray, np.ndarray]:
    """Flat index of each entry's sorted representative, and each entry's orbit size."""
    idx = np.indices((dim,) * order).reshape(order, -1)
    rep = np.sort(idx, axis=0)
    flat = np.ravel_multi_index(tuple(rep), (dim,) * order)
    if order == 2:
        orbit = np.where(rep[0] == rep[1], 1, 2)
    else:
        distinct = 1 + (rep[0] != rep[1]) + (rep[1] != rep[2])
        # 1 distinct value -> orbit 1; 2 distinct -> 3; 3 distinct -> 6
        orbit = np.choose(distinct - 1, [1, 3, 6])
    return flat, orbit


def _symmetric_noise(
    dim: int,
    order: int,
    scale: float,
    convention: str,
    size: int | tuple[int, ...] | None,
    noise: NoiseLike | NoiseSource,
) -> np.ndarray:
    dim = check_positive_int(dim, "dim")
    scale = check_real(scale, "scale", strict=False)
    source = resolve_noise(noise)
    batch = _shape(size)
    representatives, inverse, std = _orbits(dim, order, convention)
    # One independent draw per orbit (its sorted representative), copied to the whole orbit.
    draws = source.gaussian(batch + representatives.shape, scale * std)
    return draws[..., inverse].reshape(batch + (dim,) * order)


def _orbits(dim: int, order: int, convention: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat indices of the sorted representatives, each entry's orbit, and the noise std per orbit."""
    allowed = ("unique", "frobenius", "entry") if order == 3 else ("unique", "frobenius")
    if convention not in allowed:
        raise ValueError(f"convention must be one of {allowed}, got {convention!r}")
    flat, orbit = _sorted_index_map(dim, order)
    representatives, inverse = np.unique(flat, return_inverse=True)
    orbit_size = orbit[representatives]
    if convention == "unique":
        std = np.ones(representatives.shape)
    elif convention == "frobenius":
        std = 1.0 / np.sqrt(orbit_size)
    else:
        std = 6.0 / orbit_size
    return representatives, inverse.reshape(-1), std


def add_symmetric_gaussian(
    values: np.ndarray,
    scale: float,
    *,
    convention: SymmetricConvention = "unique",
    noise: NoiseLike | NoiseSource = None,
) -> np.ndarray:
    """A symmetric matrix or tensor plus symmetric Gaussian noise, added to its unique entries.

    The Gaussian mechanism on the vector of unique entries of ``values`` (each orbit's sorted
    representative; the conventions of :func:`symmetric_gaussian_tensor`), released by
    :meth:`NoiseSource.add_gaussian` **on the values**, then copied to every orbit. For a symmetric
    ``values`` the result has exactly the law of ``values + symmetric_gaussian_tensor(...)``
    (or ``_matrix``); the difference is where the addition happens: under ``noise="opendp"`` it is
    OpenDP's own floating-point-safe measurement applied to the released quantity, not OpenDP
    noise on zeros that NumPy then adds.

    Parameters
    ----------
    values : ndarray of shape (d, d) or (d, d, d)
        Symmetric (only each orbit's sorted representative is read).
    scale : float
    convention : {"unique", "frobenius", "entry"}, default "unique"
        ``"entry"`` for tensors only.
    noise : None, "numpy", "opendp", InsecureTestNoise or NoiseSource

    Returns
    -------
    ndarray of the shape of ``values``, symmetric
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim not in (2, 3) or len(set(values.shape)) != 1:
        raise ValueError(f"values must be a square matrix or a cubical tensor, got shape {values.shape}")
    scale = check_real(scale, "scale", strict=False)
    representatives, inverse, std = _orbits(values.shape[0], values.ndim, convention)
    released = resolve_noise(noise).add_gaussian(values.reshape(-1)[representatives], scale * std)
    return released[inverse].reshape(values.shape)


def symmetric_gaussian_matrix(
    dim: int,
    scale: float = 1.0,
    *,
    convention: Literal["unique", "frobenius"] = "unique",
    size: int | tuple[int, ...] | None = None,
    noise: NoiseLike | NoiseSource = None,
) -> np.ndarray:
    """A symmetric ``dim x dim`` Gaussian matrix (noise on the unique entries, then mirrored).

    ``convention="unique"`` (the "Analyze Gauss" noise of Dwork, Talwar, Thakurta & Zhang 2014):
    entries ``i <= j`` are i.i.d. ``N(0, scale^2)``; the l2 sensitivity of a symmetric query is
    the l2 norm of its upper triangle, which is at most its Frobenius norm.
    ``convention="frobenius"``: diagonal std ``scale``, off-diagonal ``scale / sqrt(2)``, an
    isotropic Gaussian on symmetric matrices; the sensitivity is the Frobenius norm of the change.
    See the module docstring.

    Returns
    -------
    ndarray of shape ``size + (dim, dim)``
    """
    return _symmetric_noise(dim, 2, scale, convention, size, noise)


def symmetric_gaussian_tensor(
    dim: int,
    scale: float = 1.0,
    *,
    convention: SymmetricConvention = "unique",
    size: int | tuple[int, ...] | None = None,
    noise: NoiseLike | NoiseSource = None,
) -> np.ndarray:
    """A symmetric ``dim x dim x dim`` Gaussian tensor (noise on the unique entries, symmetrised).

    Each orbit of entries (indices equal up to permutation) shares one independent Gaussian
    draw with standard deviation ``scale`` times ``1`` (``"unique"``), ``1/sqrt(|O|)``
    (``"frobenius"``) or ``6/|O|`` (``"entry"``, matched to Definition 4.2 of Wang &
    Anandkumar 2016). The sensitivity each convention calibrates against is given in the module
    docstring; in short, for ``scale = z * Delta``: ``Delta`` is the l2 norm of the change of the
    unique entries, its Frobenius norm, or (``"entry"``) 1 for every entry-neighbouring pair.

    Returns
    -------
    ndarray of shape ``size + (dim, dim, dim)``
    """
    return _symmetric_noise(dim, 3, scale, convention, size, noise)


def unique_indices(dim: int, order: int = 3) -> np.ndarray:
    """The sorted index tuples ``i <= j (<= k)`` of a symmetric array's unique entries, as rows.

    Row ``o`` names the orbit ``o``; the order is lexicographic, the order in which
    :func:`unique_entries` lists the entries and :func:`symmetric_from_unique` reads them.
    There are ``dim (dim + 1) / 2`` rows for ``order=2`` and ``dim (dim + 1) (dim + 2) / 6`` for
    ``order=3``.

    Returns
    -------
    ndarray of int, shape (n_unique, order)
    """
    dim = check_positive_int(dim, "dim")
    if order not in (2, 3):
        raise ValueError(f"order must be 2 or 3, got {order!r}")
    idx = np.indices((dim,) * order).reshape(order, -1)
    keep = np.all(idx[:-1] <= idx[1:], axis=0)
    return np.ascontiguousarray(idx[:, keep].T)


def unique_entries(array: np.ndarray, order: int = 3) -> np.ndarray:
    """The unique entries of symmetric arrays of shape ``(..., d, d)`` (``order=2``) or ``(..., d, d, d)``.

    Listed in the orbit order of :func:`unique_indices`; the inverse of
    :func:`symmetric_from_unique`. The sensitivity of a release under the ``"unique"`` convention
    is the l2 norm of the change of this vector.
    """
    array = np.asarray(array)
    index = unique_indices(array.shape[-1], order)
    return array[(...,) + tuple(index.T)]


def symmetric_from_unique(values: np.ndarray, dim: int, order: int = 3) -> np.ndarray:
    """Scatter unique entries (last axis, orbit order of :func:`unique_indices`) to their orbits.

    ``values[..., o]`` is copied to every entry whose sorted indices are row ``o`` of
    ``unique_indices(dim, order)``: the symmetric array whose unique entries are ``values``.

    Returns
    -------
    ndarray of shape ``values.shape[:-1] + (dim,) * order``
    """
    values = np.asarray(values, dtype=np.float64)
    flat, _ = _sorted_index_map(check_positive_int(dim, "dim"), order)
    representatives, inverse = np.unique(flat, return_inverse=True)
    if values.shape[-1] != representatives.size:
        raise ValueError(
            f"values must have {representatives.size} unique entries on its last axis for dim={dim}, "
            f"order={order}; got {values.shape[-1]}"
        )
    return values[..., inverse].reshape(values.shape[:-1] + (dim,) * order)


def orbit_sizes(dim: int) -> np.ndarray:
    """``|O|`` for every entry of a ``dim x dim x dim`` array (1, 3 or 6)."""
    dim = check_positive_int(dim, "dim")
    return _sorted_index_map(dim, 3)[1].reshape(dim, dim, dim)


def whitened_symmetric_gaussian_tensor(
    eigenvalues: np.ndarray, scale: float, *, noise: NoiseLike | NoiseSource = None
) -> np.ndarray:
    """The law of ``E(W, W, W)`` for a ``"frobenius"`` symmetric Gaussian ``E``, drawn in ``k^3``.

    Let ``E`` be ``d x d x d`` symmetric Gaussian noise with the ``"frobenius"`` convention and
    scale ``s`` (so ``E = s Sym(G)``, ``G`` i.i.d. standard normal, ``Sym`` the mean over the six
    index permutations) and ``W = U Sigma^{-1/2}`` with ``U`` ``d x k`` orthonormal. Then

    ``E(W, W, W) = s Sym(G)(U, U, U)(Sigma^{-1/2}, Sigma^{-1/2}, Sigma^{-1/2})``

    because ``Sym`` commutes with a multilinear map applied in every mode, and ``G(U, U, U)`` is
    a ``k x k x k`` i.i.d. standard normal tensor (the covariance of its vectorisation is
    ``(U^T U)^{(x)3} = I``). So the whitened noise is ``s Sym(H)`` with ``H`` i.i.d. ``k x k x k``,
    entry ``(i, j, l)`` divided by ``sqrt(sigma_i sigma_j sigma_l)``: no ``d^3`` array is needed
    (DeCarolis et al., Configuration 1, noise on ``M3_hat`` pushed through the whitening;
    reference notes B.6.1). ``tests/models/topics/test_private_lda.py`` checks the covariance against the
    ``d^3`` construction.

    Parameters
    ----------
    eigenvalues : ndarray of shape (k,)
        ``sigma_i > 0`` of the whitening ``W = U diag(sigma)^{-1/2}``.
    scale : float
        ``s``, the scale of the ``"frobenius"`` noise on ``M3`` (``z * Delta_F``).
    noise : None, "numpy", "opendp", InsecureTestNoise or NoiseSource

    Returns
    -------
    ndarray of shape (k, k, k)
        Symmetric.
    """
    sigma = np.asarray(eigenvalues, dtype=np.float64)
    if sigma.ndim != 1 or sigma.size == 0 or not np.all(np.isfinite(sigma)) or np.any(sigma <= 0):
        raise ValueError("eigenvalues must be a non-empty vector of positive numbers")
    k = sigma.shape[0]
    base = symmetric_gaussian_tensor(k, scale, convention="frobenius", noise=noise)
    inv = 1.0 / np.sqrt(sigma)
    return base * inv[:, None, None] * inv[None, :, None] * inv[None, None, :]
