"""A data stream whose third moment is exactly orthogonally decomposable.

The generator below provides ground truth for the streaming tensor power method (Wang &
Anandkumar 2016, Algorithm 2, Section 3): a distribution ``D`` with
``E_{x~D}[x (x) x (x) x] = sum_i lambda_i v_i (x) v_i (x) v_i`` (Assumption 3.1) *exactly*,
bounded support (so Assumption 3.2 holds), and an optional sparse representation so that
dimensions like ``d = 100,000`` can be streamed.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp

from dptensor._validation import (
    RandomStateLike,
    check_finite_array,
    check_positive_int,
    check_random_state,
    check_rank,
)
from dptensor.tensor.operators import LowRankTensor


class OrthogonalMomentStream:
    r"""Samples ``x = V z + g`` whose third moment is ``sum_i lambda_i v_i^{(x)3}``.

    **Model.** ``V = [v_1, ..., v_k]`` has orthonormal columns. The latent coordinates
    ``z_1, ..., z_k`` are independent centred, scaled Bernoulli variables,

    .. math:: z_i = c_i \frac{b_i - p}{\sqrt{p(1-p)}}, \qquad b_i \sim \mathrm{Bernoulli}(p),

    so ``E[z_i] = 0``, ``E[z_i^2] = c_i^2`` and ``E[z_i^3] = c_i^3 gamma`` with
    ``gamma = (1 - 2p) / sqrt(p (1 - p))`` (the skewness of a Bernoulli(p) variable, positive
    for ``p < 1/2``). The noise ``g`` is independent of ``z`` with independent coordinates
    ``g_j = sigma r_j s_j / sqrt(q)``, ``r_j`` Rademacher (+-1) and ``s_j ~ Bernoulli(q)``:
    each ``g_j`` is symmetric (``g_j`` and ``-g_j`` have the same law) with variance
    ``sigma^2``; ``q < 1`` makes the noise sparse.

    **Derivation of the third moment.** Expand ``x^{(x)3} = (Vz + g)^{(x)3}`` into the eight
    ordered products of ``Vz`` and ``g`` factors and take expectations, using independence of
    ``z`` and ``g``:

    * one or three ``g`` factors: the term is odd in ``g``; since ``g`` and ``-g`` have the
      same law and ``g`` is independent of ``z``, its expectation is ``0``;
    * two ``g`` factors, e.g. ``E[Vz (x) g (x) g] = V E[z] (x) E[g (x) g] = 0`` because
      ``E[z] = 0`` (likewise for the other two orderings);
    * no ``g`` factor: ``E[(Vz)^{(x)3}] = sum_{a,b,c} E[z_a z_b z_c] v_a (x) v_b (x) v_c``.
      For independent zero-mean ``z``, ``E[z_a z_b z_c] = 0`` unless ``a = b = c`` (a lone
      index contributes a factor ``E[z_a] = 0``), so only ``sum_a E[z_a^3] v_a^{(x)3}``
      remains.

    Hence ``E[x^{(x)3}] = sum_i lambda_i v_i^{(x)3}`` with ``lambda_i = gamma c_i^3``, exactly;
    the generator sets ``c_i = (lambda_i / gamma)^{1/3}`` for the requested weights. Every
    coordinate of ``x`` is bounded, so ``vec(x^{(x)3} - E[x^{(x)3}])`` is sub-Gaussian
    (Assumption 3.2).

    Use :func:`make_orthogonal_moment_stream` to build one.

    Attributes
    ----------
    weights : ndarray of shape (k,)
        ``lambda_i``, descending.
    factors : ndarray of shape (d, k)
        Orthonormal ``v_i`` (dense array even when ``support`` makes them sparse).
    noise, noise_density, skew : float
        ``sigma``, ``q`` and ``p`` above.
    support : int or None
        Nonzeros per factor (disjoint supports) or ``None`` for dense factors.
    """

    def __init__(
        self,
        weights: np.ndarray,
        factors: np.ndarray,
        *,
        noise: float,
        noise_density: float,
        skew: float,
        support: int | None,
        rng: np.random.Generator,
    ) -> None:
        self.weights = weights
        self.factors = factors
        self.noise = noise
        self.noise_density = noise_density
        self.skew = skew
        self.support = support
        self.gamma = (1.0 - 2.0 * skew) / math.sqrt(skew * (1.0 - skew))
        self.scales = np.cbrt(weights / self.gamma)
        self._sparse_factors = sp.csr_matrix(factors.T) if support is not None else None
        self._rng = rng

    @property
    def dim(self) -> int:
        """The dimension ``d``."""
        return self.factors.shape[0]

    @property
    def rank(self) -> int:
        """The number of components ``k``."""
        return self.factors.shape[1]

    @property
    def is_sparse(self) -> bool:
        """Whether :meth:`sample` returns CSR matrices (sparse factors and ``noise_density < 1``)."""
        return self.support is not None and self.noise_density < 1.0

    def moment(self) -> LowRankTensor:
        """The population moment ``E[x^{(x)3}] = sum_i lambda_i v_i^{(x)3}`` as an operator."""
        return LowRankTensor(self.weights, self.factors)

    def sample(self, n_samples: int) -> np.ndarray | sp.csr_matrix:
        """Draw ``n_samples`` i.i.d. points as rows (CSR when :attr:`is_sparse`).

        Draws continue this stream's generator, so successive calls give fresh points.
        """
        n = check_positive_int(n_samples, "n_samples")
        rng = self._rng
        p = self.skew
        bern = rng.random((n, self.rank)) < p
        latent = (bern - p) / math.sqrt(p * (1.0 - p)) * self.scales
        d, q = self.dim, self.noise_density
        if self.is_sparse:
            signal = sp.csr_matrix(latent) @ self._sparse_factors
            if self.noise == 0:
                return signal.tocsr()
            total = rng.binomial(n * d, q)
            flat = rng.choice(n * d, size=total, replace=False)
            values = (self.noise / math.sqrt(q)) * (2.0 * rng.integers(0, 2, total) - 1.0)
            noise = sp.csr_matrix((values, (flat // d, flat % d)), shape=(n, d))
            return (signal + noise).tocsr()
        if self._sparse_factors is not None:
            signal = np.asarray((sp.csr_matrix(latent) @ self._sparse_factors).toarray())
        else:
            signal = latent @ self.factors.T
        if self.noise > 0:
            signs = 2.0 * rng.integers(0, 2, (n, d)) - 1.0
            if q < 1.0:
                signs *= rng.random((n, d)) < q
            signal += (self.noise / math.sqrt(q)) * signs
        return signal

    def batches(self, batch_size: int, n_batches: int | None = None) -> Iterator[np.ndarray | sp.csr_matrix]:
        """Yield batches of ``batch_size`` fresh points, forever or ``n_batches`` times."""
        batch_size = check_positive_int(batch_size, "batch_size")
        if n_batches is not None:
            n_batches = check_positive_int(n_batches, "n_batches", minimum=0)
        count = 0
        while n_batches is None or count < n_batches:
            yield self.sample(batch_size)
            count += 1


def make_orthogonal_moment_stream(
    dim: int,
    rank: int,
    *,
    weights: np.ndarray | None = None,
    noise: float = 0.1,
    noise_density: float = 1.0,
    support: int | None = None,
    skew: float = 0.1,
    random_state: RandomStateLike = None,
) -> OrthogonalMomentStream:
    """A stream of points whose third moment is exactly ``sum_i lambda_i v_i^{(x)3}``.

    Ground truth for Algorithm 2 of Wang & Anandkumar (2016): the population moment satisfies
    Assumption 3.1 exactly and the data are bounded (Assumption 3.2). The model and the
    derivation of its third moment are in :class:`OrthogonalMomentStream`.

    Parameters
    ----------
    dim : int
        Dimension ``d``.
    rank : int
        Number of components ``k <= d``.
    weights : array_like of shape (k,), optional
        Positive ``lambda_i``; default ``linspace(1, 0.5, k)``. Stored in descending order.
    noise : float, default 0.1
        Standard deviation ``sigma >= 0`` of each noise coordinate.
    noise_density : float in (0, 1], default 1.0
        Probability ``q`` that a noise coordinate is nonzero (sparse noise when < 1).
    support : int, optional
        Give each factor ``support`` nonzero entries ``+-1/sqrt(support)`` on disjoint
        coordinate sets (needs ``k * support <= d``); default: dense factors from the QR
        decomposition of a Gaussian matrix. With ``support`` and ``noise_density < 1`` the
        samples are CSR matrices with about ``k * support + q d`` nonzeros per row.
    skew : float in (0, 1/2), default 0.1
        Bernoulli parameter ``p`` of the latent coordinates; smaller is more skewed.
    random_state : None, int or numpy.random.Generator
        Seeds the factors and every sample drawn from the stream.

    Returns
    -------
    OrthogonalMomentStream

    Examples
    --------
    >>> from dptensor.datasets.moment_stream import make_orthogonal_moment_stream
    >>> stream = make_orthogonal_moment_stream(20, 2, random_state=0)
    >>> stream.sample(5).shape
    (5, 20)
    """
    dim = check_positive_int(dim, "dim")
    rank = check_rank(rank, dim)
    if weights is None:
        lam = np.linspace(1.0, 0.5, rank)
    else:
        lam = check_finite_array(weights, "weights", ndim=1)
        if lam.shape[0] != rank:
            raise ValueError(f"weights must have {rank} entries (one per component), got {lam.shape[0]}")
        if np.any(lam <= 0):
            raise ValueError("weights must be positive")
    order = np.argsort(-lam, kind="stable")
    lam = lam[order]
    for value, name in ((noise, "noise"), (noise_density, "noise_density"), (skew, "skew")):
        if not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise TypeError(f"{name} must be a finite real number, got {value!r}")
    if noise < 0:
        raise ValueError(f"noise must be >= 0, got {noise}")
    if not 0 < noise_density <= 1:
        raise ValueError(f"noise_density must lie in (0, 1], got {noise_density}")
    if not 0 < skew < 0.5:
        raise ValueError(f"skew must lie strictly between 0 and 1/2, got {skew}")
    rng = check_random_state(random_state)
    if support is None:
        factors, _ = np.linalg.qr(rng.standard_normal((dim, rank)))
    else:
        support = check_positive_int(support, "support")
        if rank * support > dim:
            raise ValueError(f"support * rank must be at most dim={dim}, got {support} * {rank}")
        coords = rng.permutation(dim)[: rank * support].reshape(rank, support)
        factors = np.zeros((dim, rank))
        signs = 2.0 * rng.integers(0, 2, (rank, support)) - 1.0
        factors[coords, np.arange(rank)[:, None]] = signs / math.sqrt(support)
    return OrthogonalMomentStream(
        lam,
        factors,
        noise=float(noise),
        noise_density=float(noise_density),
        skew=float(skew),
        support=support,
        rng=rng,
    )
