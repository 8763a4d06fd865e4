"""Private whitening: the top-``k`` eigenpairs of a second moment released under Gaussian noise.

Two mechanisms for the ``M2_hat`` edges of spectral LDA (DeCarolis et al., edges e2/e4 and e5/e8),
both Gaussian releases whose noise is drawn from a secret :class:`~dptensor.privacy.NoiseSource`:

``"analyze-gauss"`` (Dwork, Talwar, Thakurta & Zhang 2014)
    One release of the dense ``d x d`` matrix ``M2_hat + E``, ``E`` a symmetric Gaussian with the
    ``"frobenius"`` convention and scale ``z Delta_F`` (``Delta_F`` the Frobenius sensitivity), then
    its top-``k`` eigenpairs. ``O(d^2)`` memory and ``O(d^2 k)`` time: small vocabularies only.
``"noisy-power"`` (Hardt & Price 2014, *The noisy power method*)
    ``T`` steps of ``X_t = QR(M2_hat X_{t-1} + G_t)`` on ``p = k + n_oversamples`` columns, with
    ``G_t`` i.i.d. Gaussian of standard deviation ``z_step Delta(X_{t-1})``, where
    ``Delta(X)`` bounds the change of ``M2_hat X`` between neighbours for the *public* iterate
    ``X`` (it shrinks with the coherence of ``X``;
    :func:`~dptensor.models.topics.sensitivity.m2_sensitivity`). ``M2_hat X`` is applied through
    sparse products (:class:`~dptensor.models.topics.moments.LDASecondMoment`), so memory is
    ``O(nnz + d p)`` and no ``d x d`` array exists: vocabularies of ``10^5`` words and more. The
    eigenvalues come from the last release by Rayleigh--Ritz, ``B = X_{T-1}^T (M2_hat X_{T-1} + G_T)``
    (symmetrised), so the ``T`` releases are all that is charged.

Every step after the releases is post-processing. Eigenvalues below the noise level of the
release (``sqrt(2 m) s`` for an ``m x m`` symmetrised Gaussian block of scale ``s``, the edge of
its semicircle) are raised to it, so that the whitening ``W = U Sigma^{-1/2}`` always exists and
its norm is bounded by public quantities; no step raises an error that depends on the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from dptensor.decomposition.whitening import Whitening
from dptensor.models.topics.moments import LDASecondMoment
from dptensor.models.topics.nonnegative_subspace import nonnegative_subspace
from dptensor.models.topics.sensitivity import coherence
from dptensor.privacy.mechanisms import add_symmetric_gaussian
from dptensor.privacy.noise import NoiseSource

PRIVATE_WHITENINGS: tuple[str, ...] = ("analyze-gauss", "noisy-power")
#: How Analyze Gauss turns its release into a subspace (:func:`analyze_gauss_eigenpairs`).
WHITENING_SUBSPACES: tuple[str, ...] = ("auto", "eigen", "nonnegative")
#: ``subspace="auto"`` factorises when the release's top eigenvectors keep on average less than this
#: squared cosine (:func:`spike_alignment`). Measured on real text: the factorisation captured more of
#: the true subspace on WordNet glosses at epsilon 1, 2 and 4 (mean alignment 0.33, 0.75, 0.88;
#: ``benchmarks/bench_whitening_alignment.py``) and raised their NPMI in six fits per cell
#: (``benchmarks/bench_private_topics_repeats.py``); its subspace was worse where the eigenvectors are
#: already good (Debian descriptions at epsilon 4 and the change logs at epsilon 1: alignment 0.99, 0.97).
NONNEGATIVE_BELOW_ALIGNMENT = 0.9


@dataclass(frozen=True)
class PrivateEigenpairs:
    """Top-``k`` eigenpairs of a privately released second moment.

    Attributes
    ----------
    whitening : Whitening
        ``W = U Sigma^{-1/2}`` and ``(W^T)^+ = U Sigma^{1/2}`` (``Sigma`` floored at ``floor``).
    floor : float
        The public eigenvalue floor (noise level of the release).
    noise_scales : tuple of float
        Standard deviation of the noise of each release, in order (public: a function of the
        parameters and of earlier releases).
    alignment : ndarray of shape (k,) or None
        Analyze Gauss only: each eigenvector's estimated squared cosine with the matching
        eigenvector of the un-noised matrix (:func:`spike_alignment`; post-processing).
    subspace : str
        ``"eigen"`` (the release's top eigenvectors) or ``"nonnegative"``
        (:func:`analyze_gauss_eigenpairs`).
    """

    whitening: Whitening
    floor: float
    noise_scales: tuple[float, ...]
    alignment: np.ndarray | None = None
    subspace: str = "eigen"


def whitening_subspace_rule(subspace: str) -> str:
    """One sentence (no final stop) saying where the whitening subspace comes from, for reports.

    A function of the parameter ``subspace`` only (never of the release), so printed text built on it
    is the same for neighbouring corpora.
    """
    return {
        "auto": f"below {NONNEGATIVE_BELOW_ALIGNMENT:.2f} on average the whitening comes from a "
                "non-negative factorisation of the release instead of its eigenvectors",
        "nonnegative": "the whitening comes from a non-negative factorisation of the release",
        "eigen": "the whitening is the release's eigenvectors",
    }[subspace]  # fmt: skip


#: A released eigenvalue counts as a direction of the matrix only above ``edge (1 + c m^(-2/3))``: the
#: top eigenvalue of pure noise fluctuates above the edge on the Tracy--Widom scale ``m^(-2/3)``, and
#: with ``c = 1`` 99% of pure-noise releases stay below (simulated, ``m`` from 10 to 1000).
SPIKE_EDGE_MARGIN = 1.0


def spike_alignment(released: np.ndarray, edge: float, size: int) -> np.ndarray:
    """Estimated squared cosines between released eigenvectors and the un-noised ones (spiked Wigner model).

    Method (Benaych-Georges & Nadakuditi 2011, the Wigner case; Gaussian orthogonal ensemble):
    add to an ``m x m`` symmetric matrix a symmetric Gaussian whose off-diagonal entries have standard
    deviation ``tau`` (the ``"frobenius"`` convention of scale ``s = sqrt2 tau``). Its eigenvalues fill
    ``[-edge, edge]``, ``edge = 2 tau sqrt(m) = sqrt(2m) s``. A well-separated eigenvalue
    ``theta tau sqrt(m)`` of the matrix with ``theta > 1`` shows as the released eigenvalue
    ``tau sqrt(m) (theta + 1/theta)``, above the edge, and its released eigenvector has squared cosine
    ``1 - 1/theta^2`` with the true one; with ``theta <= 1`` the released eigenvalue sits at the edge
    and the eigenvector carries no information about it (cosine tending to zero). So a released
    eigenvalue ``rho edge`` with ``rho > 1`` gives ``theta = rho + sqrt(rho^2 - 1)``. At finite ``m``
    the top eigenvalue of pure noise exceeds the edge by about ``m^(-2/3)`` (Tracy--Widom), so only
    ``rho > 1 +`` :data:`SPIKE_EDGE_MARGIN` ``m^(-2/3)`` counts.

    First order: eigenvalues closer to each other than their shifts mix their eigenvectors (the
    estimate then holds for the subspace they span), and near the edge it overstates the cosine.
    A function of released eigenvalues and the public noise scale only.

    Parameters
    ----------
    released : ndarray
        Released (noisy) eigenvalues.
    edge : float
        ``sqrt(2m) s``, the noise's spectral edge.
    size : int
        ``m``, the released matrix's dimension.

    Returns
    -------
    ndarray
        Squared cosines in ``[0, 1)``; zero where the released eigenvalue is within the margin of
        the edge or below it.
    """
    ratio = np.asarray(released, dtype=np.float64) / edge
    above = ratio > 1.0 + SPIKE_EDGE_MARGIN * float(size) ** (-2.0 / 3.0)
    ratio = np.where(above, ratio, 1.0)
    theta = ratio + np.sqrt(ratio * ratio - 1.0)
    return np.where(above, 1.0 - 1.0 / (theta * theta), 0.0)


def _rayleigh_ritz(basis: np.ndarray, product: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """The top ``rank`` Ritz pairs of a symmetric matrix ``A`` in an orthonormal ``basis``, decreasing.

    ``product`` is ``A basis`` (possibly noisy); ``basis^T product`` is symmetrised.
    """
    small = basis.T @ product
    values, vectors = np.linalg.eigh((small + small.T) / 2.0)
    order = np.argsort(values)[::-1][:rank]
    return values[order], basis @ vectors[:, order]


def _from_eigenpairs(values: np.ndarray, vectors: np.ndarray, floor: float) -> Whitening:
    values = np.maximum(values, floor)
    return Whitening.from_eigenpairs(values, vectors)


def analyze_gauss_release(
    second_moment: LDASecondMoment | np.ndarray, *, noise_scale: float, source: NoiseSource
) -> np.ndarray:
    """Analyze Gauss's one release: ``M2_hat + E`` with ``E`` the ``"frobenius"`` symmetric Gaussian.

    Shared by :func:`analyze_gauss_eigenpairs` and the topics of
    :mod:`dptensor.models.topics.nonnegative_topics`; everything after it is post-processing.

    Parameters
    ----------
    second_moment : LDASecondMoment or ndarray of shape (d, d)
        Anything with ``to_dense()`` (the un-noised moment), or the symmetric matrix.
    noise_scale : float
        ``s = z Delta_F`` (diagonal standard deviation ``s``, off-diagonal ``s / sqrt2``).
    source : NoiseSource

    Returns
    -------
    ndarray of shape (d, d)
        Symmetric.
    """
    dense = second_moment if isinstance(second_moment, np.ndarray) else second_moment.to_dense()
    return add_symmetric_gaussian(dense, noise_scale, convention="frobenius", noise=source)


def analyze_gauss_eigenpairs(
    second_moment: LDASecondMoment | np.ndarray,
    rank: int,
    *,
    noise_scale: float,
    source: NoiseSource,
    subspace: str = "eigen",
) -> PrivateEigenpairs:
    """Analyze Gauss: the top-``rank`` eigenpairs of ``M2_hat + E`` (one ``d x d`` release).

    Parameters
    ----------
    second_moment : LDASecondMoment or ndarray of shape (d, d)
        Anything with ``shape`` and ``to_dense()`` (the un-noised moment), or the symmetric matrix.
    rank : int
        ``k``, the eigenpairs kept.
    noise_scale : float
        Scale ``s = z Delta_F`` of the ``"frobenius"`` symmetric noise (diagonal std ``s``,
        off-diagonal ``s / sqrt2``).
    source : NoiseSource
    subspace : {"eigen", "nonnegative", "auto"}, default "eigen"
        Post-processing of the one release. ``"eigen"``: its top eigenvectors. ``"nonnegative"``:
        the span of a symmetric non-negative factorisation of the thresholded release
        (:func:`~dptensor.models.topics.nonnegative_subspace.nonnegative_subspace`), then the
        release's eigenpairs within that span (Rayleigh--Ritz). ``"auto"``: ``"nonnegative"`` when
        the mean :func:`spike_alignment` of the top eigenvectors is below
        :data:`NONNEGATIVE_BELOW_ALIGNMENT`, else ``"eigen"``.

    Returns
    -------
    PrivateEigenpairs
        ``alignment`` is that of the release's top eigenvectors, whichever subspace is used;
        ``subspace`` says which was.
    """
    if subspace not in WHITENING_SUBSPACES:
        raise ValueError(f"subspace must be one of {WHITENING_SUBSPACES}, got {subspace!r}")
    d = second_moment.shape[0]
    noisy = analyze_gauss_release(second_moment, noise_scale=noise_scale, source=source)
    values, vectors = scipy.linalg.eigh(noisy, subset_by_index=[d - rank, d - 1])
    order = np.argsort(values)[::-1]
    floor = math.sqrt(2.0 * d) * noise_scale
    values, vectors = values[order], vectors[:, order]
    alignment = spike_alignment(values, floor, d)
    if subspace == "auto":
        subspace = "nonnegative" if float(np.mean(alignment)) < NONNEGATIVE_BELOW_ALIGNMENT else "eigen"
    if subspace == "nonnegative":
        basis = nonnegative_subspace(noisy, rank, noise_scale)
        values, vectors = _rayleigh_ritz(basis, noisy @ basis, rank)
    del noisy
    return PrivateEigenpairs(
        _from_eigenpairs(values, vectors, floor), floor, (noise_scale,), alignment, subspace
    )


def noisy_power_eigenpairs(
    second_moment: LDASecondMoment,
    rank: int,
    *,
    n_steps: int,
    width: int,
    noise_multiplier: float,
    sensitivity: Callable[[float], float],
    source: NoiseSource,
    rng: np.random.Generator,
) -> PrivateEigenpairs:
    """The noisy power method (Hardt & Price 2014) on the implicit ``M2_hat``, then Rayleigh--Ritz.

    Parameters
    ----------
    second_moment : LDASecondMoment
    rank : int
        ``k``.
    n_steps : int
        ``T`` releases of ``M2_hat X + G``.
    width : int
        ``p >= k`` columns.
    noise_multiplier : float
        Per-step ``z_step``: the noise standard deviation divided by the sensitivity.
    sensitivity : callable
        ``mu -> Delta``: the sensitivity of ``M2_hat X`` for an orthonormal ``X`` of coherence ``mu``
        (largest row norm).
    source : NoiseSource
        Secret noise.
    rng : numpy.random.Generator
        Public randomness (the start ``X_0``).

    Returns
    -------
    PrivateEigenpairs
    """
    d = second_moment.shape[0]
    X, _ = np.linalg.qr(rng.standard_normal((d, width)))
    scales = []
    Y = X
    previous = X
    for _ in range(n_steps):
        previous = X
        scale = noise_multiplier * sensitivity(coherence(X))
        scales.append(scale)
        Y = source.add_gaussian(second_moment.matmat(X), scale)
        X, _ = np.linalg.qr(Y)
    values, vectors = _rayleigh_ritz(previous, Y, rank)
    floor = math.sqrt(2.0 * width) * scales[-1]
    whitening = _from_eigenpairs(values, vectors, floor)
    return PrivateEigenpairs(whitening, floor, tuple(scales))
