"""Symmetric third-order tensors as operators.

Every algorithm in dptensor needs only two things from a symmetric tensor ``T`` of
dimension ``d`` (docs/design.md, layer 1):

* ``T(I, u, u)`` for a batch of vectors -- :meth:`SymmetricTensor.contract_pair` maps a
  ``d x m`` matrix ``U`` to the ``d x m`` matrix whose column ``j`` is ``T(I, U[:, j], U[:, j])``;
* ``T(u, u, u)`` for a batch -- :meth:`SymmetricTensor.contract_triple` maps ``U`` to the
  ``m`` values ``T(U[:, j], U[:, j], U[:, j])``.

Multilinear notation follows Wang & Anandkumar (2016), Section 2:
``T(A, B, C)_{pqr} = sum_{ijk} T_{ijk} A_{ip} B_{jq} C_{kr}``. Implementations:

=======================  ==========================================================
:class:`DenseTensor`      an ndarray ``d x d x d``; one BLAS product per batch
:class:`SampleMoment`     ``(1/n) sum_i x_i (x) x_i (x) x_i`` of a data matrix (or Dask array), never formed
:class:`LowRankTensor`    ``sum_j w_j v_j (x) v_j (x) v_j`` from weights and factors
:class:`SumTensor`        a linear combination of operators of the same dimension
:class:`DeflatedTensor`   ``T - sum_j lambda_j v_j^{(x)3}`` (Algorithm 1, step 6), implicit
:class:`WhitenedTensor`   ``T(W, W, W)`` applied as ``W^T T(I, WU, WU)``
=======================  ==========================================================

Each class can return its dense form (:meth:`SymmetricTensor.to_dense`) for small ``d``,
which the test-suite uses to check that dense and implicit forms agree to rounding.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from dptensor._validation import check_data_matrix, check_finite_array
from dptensor.parallel import RowBlocks, as_row_blocks, is_distributed

#: Relative tolerance used to decide whether a dense array is symmetric.
SYMMETRY_RTOL = 1e-8


class SymmetricTensor(ABC):
    """A symmetric ``d x d x d`` tensor known through its multilinear contractions.

    Subclasses implement :attr:`dim` and :meth:`contract_pair`; :meth:`contract_triple`
    defaults to ``sum_i U_ij * T(I, u_j, u_j)_i`` and may be overridden when a cheaper
    formula exists.
    """

    @property
    @abstractmethod
    def dim(self) -> int:
        """The dimension ``d`` of each mode."""

    @abstractmethod
    def _contract_pair(self, vectors: np.ndarray) -> np.ndarray:
        """``T(I, U, U)`` column by column for a validated ``d x m`` float array."""

    def _contract_triple(self, vectors: np.ndarray) -> np.ndarray:
        return np.einsum("im,im->m", vectors, self._contract_pair(vectors))

    def contract_pair(self, vectors: np.ndarray) -> np.ndarray:
        """Return ``T(I, u, u)`` for each column ``u`` of ``vectors``.

        Parameters
        ----------
        vectors : ndarray of shape (d,) or (d, m)
            One vector or a batch of ``m`` vectors as columns.

        Returns
        -------
        ndarray of shape (d,) or (d, m)
            Column ``j`` is the vector ``T(I, u_j, u_j)`` with entries
            ``sum_{jk} T_{ijk} u_j u_k``.
        """
        batch, single = self._as_batch(vectors)
        out = self._contract_pair(batch)
        return out[:, 0] if single else out

    def contract_triple(self, vectors: np.ndarray) -> np.ndarray | float:
        """Return ``T(u, u, u)`` for each column ``u`` of ``vectors``.

        Parameters
        ----------
        vectors : ndarray of shape (d,) or (d, m)

        Returns
        -------
        float or ndarray of shape (m,)
        """
        batch, single = self._as_batch(vectors)
        out = self._contract_triple(batch)
        return float(out[0]) if single else out

    def marginal(self, theta: np.ndarray) -> np.ndarray:
        """Return the ``d x d`` matrix ``T(I, I, theta)`` (one view contracted with ``theta``).

        Polarisation gives its columns from pair contractions only:
        ``T(I, e_j, theta) = (T(I, e_j + theta, e_j + theta) - T(I, e_j - theta, e_j - theta)) / 4``.
        This is the random marginalisation ``M(theta)`` of Wang & Anandkumar (2016), Appendix B.
        """
        theta = self._as_batch(theta)[0][:, 0]
        eye = np.eye(self.dim)
        plus = self._contract_pair(eye + theta[:, None])
        minus = self._contract_pair(eye - theta[:, None])
        matrix = (plus - minus) / 4.0
        return (matrix + matrix.T) / 2.0

    def to_dense(self) -> np.ndarray:
        """Materialise the tensor as a ``d x d x d`` array (for small ``d`` only).

        Uses polarisation: contracting against all pairs of basis vectors gives every slice,
        ``T(I, e_j, e_k) = (T(I, e_j+e_k, e_j+e_k) - T(I, e_j-e_k, e_j-e_k)) / 4``.
        """
        d = self.dim
        eye = np.eye(d)
        plus = (eye[:, :, None] + eye[:, None, :]).reshape(d, d * d)
        minus = (eye[:, :, None] - eye[:, None, :]).reshape(d, d * d)
        dense = (self._contract_pair(plus) - self._contract_pair(minus)) / 4.0
        return dense.reshape(d, d, d)

    def _as_batch(self, vectors: np.ndarray) -> tuple[np.ndarray, bool]:
        array = np.asarray(vectors, dtype=np.float64)
        single = array.ndim == 1
        if single:
            array = array[:, None]
        if array.ndim != 2 or array.shape[0] != self.dim:
            raise ValueError(
                f"vectors must have shape ({self.dim},) or ({self.dim}, m), got {np.shape(vectors)}"
            )
        if not np.all(np.isfinite(array)):
            raise ValueError("vectors contains NaN or infinite entries")
        return array, single

    # Arithmetic that keeps everything implicit.
    def __add__(self, other: SymmetricTensor) -> SumTensor:
        return SumTensor([self, other], [1.0, 1.0])

    def __sub__(self, other: SymmetricTensor) -> SumTensor:
        return SumTensor([self, other], [1.0, -1.0])

    def __mul__(self, scale: float) -> SumTensor:
        return SumTensor([self], [float(scale)])

    __rmul__ = __mul__


class DenseTensor(SymmetricTensor):
    """A symmetric tensor stored as a dense ``d x d x d`` array.

    ``T(I, U, U)`` is one matrix product of the mode-1 unfolding with the Khatri-Rao product
    ``U (.) U``. Symmetry in the last two indices halves the work: with ``P`` the
    ``d(d+1)/2`` pairs ``j <= k``,
    ``T(I, u, u)_i = sum_{(j,k) in P} c_jk T_ijk u_j u_k`` with ``c_jj = 1`` and ``c_jk = 2``,
    so the packed ``d x d(d+1)/2`` matrix ``c_jk T_ijk`` (built once, half the size of ``T``)
    meets the packed Khatri-Rao product ``(u_j u_k)_{(j,k) in P}``. Power steps are bound by
    memory bandwidth, so reading half as much makes them about twice as fast.

    Parameters
    ----------
    array : array_like of shape (d, d, d)
        Must be finite and symmetric under every permutation of its indices (to a relative
        tolerance of :data:`SYMMETRY_RTOL`), unless ``check_symmetry=False``.
    check_symmetry : bool, default True
        Skip the symmetry check only for arrays known to be symmetric by construction.
    """

    def __init__(self, array: np.ndarray, *, check_symmetry: bool = True) -> None:
        tensor = np.ascontiguousarray(check_finite_array(array, "tensor", ndim=3))
        d = tensor.shape[0]
        if tensor.shape != (d, d, d):
            raise ValueError(f"tensor must be cubic (d, d, d), got shape {tensor.shape}")
        if check_symmetry:
            check_symmetric(tensor)
        self.array = tensor
        self._rows, self._cols = np.triu_indices(d)
        pair_weight = np.where(self._rows == self._cols, 1.0, 2.0)
        self._packed = tensor[:, self._rows, self._cols] * pair_weight

    @property
    def dim(self) -> int:
        return self.array.shape[0]

    def _contract_pair(self, vectors: np.ndarray) -> np.ndarray:
        return self._packed @ (vectors[self._rows] * vectors[self._cols])

    def marginal(self, theta: np.ndarray) -> np.ndarray:
        theta = self._as_batch(theta)[0][:, 0]
        return self.array @ theta

    def to_dense(self) -> np.ndarray:
        return self.array.copy()


def check_symmetric(tensor: np.ndarray, name: str = "tensor") -> None:
    """Raise ``ValueError`` unless a cubic array is invariant under all index permutations."""
    scale = max(float(np.max(np.abs(tensor))), np.finfo(float).tiny)
    buffer = np.empty_like(tensor)
    # The transpositions (1 0 2) and (0 2 1) generate all six permutations.
    for axes in ((1, 0, 2), (0, 2, 1)):
        np.subtract(tensor, tensor.transpose(axes), out=buffer)
        gap = float(np.max(np.abs(buffer, out=buffer)))
        if gap > SYMMETRY_RTOL * scale:
            raise ValueError(
                f"{name} is not symmetric: it changes by {gap:.3g} under the index "
                f"permutation {axes} (largest entry {scale:.3g}); symmetrise it first, e.g. "
                "with dptensor.tensor.symmetrize"
            )


def symmetrize(tensor: np.ndarray) -> np.ndarray:
    """Average a cubic array over the six permutations of its indices."""
    tensor = check_finite_array(tensor, "tensor", ndim=3)
    perms = ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))
    return sum(tensor.transpose(p) for p in perms) / 6.0


def moment_contractions(
    block: np.ndarray | sp.csr_matrix,
    vectors: np.ndarray,
    scale: float,
    what: str,
    weights: np.ndarray | None = None,
    validate: bool = False,
) -> tuple[np.ndarray, ...]:
    """One block's terms of the third-moment contractions: a block function of :mod:`dptensor.parallel`.

    With ``P = X U`` for the block's records ``X`` and ``w`` the per-record ``weights`` (or the
    constant ``scale``): ``what="pair"`` gives ``(X^T (w * P^2),)``, ``"triple"`` gives
    ``(w^T P^3,)`` and ``"both"`` gives both -- the sums that :class:`SampleMoment` (``T(I, u, u)``,
    ``T(u, u, u)``) and the online power method (Wang & Anandkumar 2016, Algorithm 2, steps 5-6)
    add over blocks. ``validate`` checks the records first (blocks read straight from a source).
    """
    if validate:
        block = check_data_matrix(block, "data block")
    proj = np.asarray(block @ vectors)
    squared = proj * proj
    if weights is not None:
        weighted = weights[:, None] * squared
    elif scale != 1.0:
        weighted = scale * squared
    else:
        weighted = squared
    out = []
    if what in ("pair", "both"):
        out.append(np.asarray(block.T @ weighted))
    if what in ("triple", "both"):
        out.append(np.einsum("ij,ij->j", weighted, proj))
    if not out:
        raise ValueError(f"what must be 'pair', 'triple' or 'both', got {what!r}")
    return tuple(out)


def _dense_moment_block(
    block: np.ndarray | sp.csr_matrix, chunk_size: int, scale: float, weights: np.ndarray | None = None
) -> np.ndarray:
    """``X^T diag(w) (X (.) X)`` (``d x d^2``) for one block, over row chunks of ``chunk_size``."""
    d = block.shape[1]
    out = np.zeros((d, d * d))
    for start in range(0, block.shape[0], chunk_size):
        rows = block[start : start + chunk_size]
        rows = rows.toarray() if sp.issparse(rows) else rows
        pairs = (rows[:, :, None] * rows[:, None, :]).reshape(rows.shape[0], d * d)
        w = scale if weights is None else weights[start : start + chunk_size, None]
        out += (rows * w).T @ pairs
    return out


def _checked_block(block: object) -> np.ndarray | sp.csr_matrix:
    return check_data_matrix(block, "data block")


class SampleMoment(SymmetricTensor):
    """The empirical third moment ``(1/n) sum_i x_i (x) x_i (x) x_i`` of a data matrix.

    The ``d^3`` tensor is never formed: with the ``n x d`` data matrix ``X`` (rows are
    records),

    * ``T(I, U, U) = X^T ((X U) * (X U)) / n`` -- two matrix products, ``O(nnz(X) m)``;
    * ``T(U, U, U) = sum_i (X U)_i^3 / n``.

    Both are sums over records (:func:`moment_contractions`), computed by
    :meth:`dptensor.parallel.RowBlocks.map_sum`: in process (the default), on ``n_jobs``
    threads over row blocks, or on a Dask cluster when ``data`` is a ``dask.array`` (then the
    validated blocks stay on the workers and each contraction is one pass there).

    Parameters
    ----------
    data : array_like, scipy.sparse matrix, dask.array.Array or RowBlocks, shape (n, d)
        Records as rows; dense arrays and any SciPy sparse format are accepted.
    weights : array_like of shape (n,), optional
        Per-record weights replacing ``1/n``: ``T = sum_i w_i x_i^{(x)3}``.
    n_jobs : int, optional
        Threads for in-memory ``data`` (``None``: one, ``-1``: every core).

    Attributes
    ----------
    data : ndarray or scipy.sparse.csr_matrix, or None
        The validated records when they are in memory (``None`` for Dask input).
    blocks : dptensor.parallel.RowBlocks
        The records as row blocks.
    """

    def __init__(
        self,
        data: np.ndarray | sp.spmatrix | object,
        *,
        weights: np.ndarray | None = None,
        n_jobs: int | None = None,
    ) -> None:
        if isinstance(data, RowBlocks) or is_distributed(data):
            self.data = None
            self.blocks = as_row_blocks(data).map(_checked_block, label="moment-records")
        else:
            self.data = check_data_matrix(data, "data")
            self.blocks = as_row_blocks(self.data, n_jobs=n_jobs)
        n = self.blocks.n_rows
        self._custom_weights = weights is not None
        if weights is None:
            # Kept as an array only in memory: Dask input may have more records than the client holds.
            self.weights = np.full(n, 1.0 / n) if self.data is not None else None
        else:
            self.weights = check_finite_array(weights, "weights", ndim=1)
            if self.weights.shape[0] != n:
                raise ValueError(
                    f"weights must have length {n} (one per record), got {self.weights.shape[0]}"
                )

    @property
    def dim(self) -> int:
        return self.blocks.n_cols

    @property
    def n_samples(self) -> int:
        """Number of records ``n``."""
        return self.blocks.n_rows

    @property
    def has_uniform_weights(self) -> bool:
        """Whether this is the plain sample moment ``(1/n) sum_i x_i^{(x)3}``."""
        return not self._custom_weights

    def _sum(self, func: object, *args: object, label: str) -> object:
        if self._custom_weights:
            return self.blocks.map_sum(func, *args, 1.0, row_args=(self.weights,), label=label)
        return self.blocks.map_sum(func, *args, 1.0 / self.n_samples, label=label)

    def _contract_pair(self, vectors: np.ndarray) -> np.ndarray:
        return self._sum(_moment_part, vectors, "pair", label="moment-pair")

    def _contract_triple(self, vectors: np.ndarray) -> np.ndarray:
        return self._sum(_moment_part, vectors, "triple", label="moment-triple")

    def to_dense(self, chunk_size: int = 512) -> np.ndarray:
        """Form ``sum_i w_i x_i^{(x)3}`` as ``X^T diag(w) (X (.) X)`` over row chunks (small ``d`` only).

        One BLAS product per chunk of ``chunk_size`` records; memory ``O(d^3 + chunk_size d^2)``
        (per block).
        """
        d = self.dim
        return self._sum(_dense_moment_block, chunk_size, label="moment-dense").reshape(d, d, d)


def _moment_part(
    block: np.ndarray | sp.csr_matrix, vectors: np.ndarray, what: str, scale: float,
    weights: np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    """The one contraction ``what`` of :func:`moment_contractions` (argument order of ``_sum``)."""
    return moment_contractions(block, vectors, scale, what, weights)[0]


class LowRankTensor(SymmetricTensor):
    """``sum_j w_j v_j (x) v_j (x) v_j`` given weights ``w`` (k,) and factors ``V`` (d x k).

    ``T(I, U, U) = V diag(w) (V^T U)^2`` (elementwise square) and
    ``T(U, U, U) = w^T (V^T U)^3``: ``O(dkm)`` work.
    """

    def __init__(self, weights: np.ndarray, factors: np.ndarray) -> None:
        self.factors = check_finite_array(factors, "factors", ndim=2)
        self.weights = check_finite_array(weights, "weights", ndim=1)
        if self.weights.shape[0] != self.factors.shape[1]:
            raise ValueError(
                f"weights has {self.weights.shape[0]} entries but factors has "
                f"{self.factors.shape[1]} columns"
            )

    @property
    def dim(self) -> int:
        return self.factors.shape[0]

    def _contract_pair(self, vectors: np.ndarray) -> np.ndarray:
        inner = self.factors.T @ vectors
        return self.factors @ (self.weights[:, None] * inner * inner)

    def _contract_triple(self, vectors: np.ndarray) -> np.ndarray:
        inner = self.factors.T @ vectors
        return self.weights @ (inner * inner * inner)


class SumTensor(SymmetricTensor):
    """A linear combination ``sum_j c_j T_j`` of symmetric tensors of one dimension."""

    def __init__(self, terms: Sequence[SymmetricTensor], coefficients: Sequence[float]) -> None:
        if len(terms) == 0 or len(terms) != len(coefficients):
            raise ValueError("terms and coefficients must be non-empty and of equal length")
        dims = {term.dim for term in terms}
        if len(dims) != 1:
            raise ValueError(f"all terms must have the same dimension, got {sorted(dims)}")
        self.terms = list(terms)
        self.coefficients = [float(c) for c in coefficients]

    @property
    def dim(self) -> int:
        return self.terms[0].dim

    def _contract_pair(self, vectors: np.ndarray) -> np.ndarray:
        pairs = zip(self.coefficients, self.terms, strict=True)
        return sum(c * t._contract_pair(vectors) for c, t in pairs)

    def _contract_triple(self, vectors: np.ndarray) -> np.ndarray:
        pairs = zip(self.coefficients, self.terms, strict=True)
        return sum(c * t._contract_triple(vectors) for c, t in pairs)


class DeflatedTensor(SymmetricTensor):
    """``T - sum_j lambda_j v_j^{(x)3}``: deflation (Algorithm 1, step 6) kept implicit.

    Applying it costs one application of ``T`` plus ``O(dkm)`` for the rank-``k`` correction;
    no new ``d^3`` array is ever formed.

    Parameters
    ----------
    base : SymmetricTensor
    weights : ndarray of shape (k,)
    factors : ndarray of shape (d, k)
    """

    def __init__(self, base: SymmetricTensor, weights: np.ndarray, factors: np.ndarray) -> None:
        factors = np.asarray(factors, dtype=np.float64)
        if factors.ndim == 1:
            factors = factors[:, None]
        if factors.ndim != 2 or factors.shape[0] != base.dim:
            raise ValueError(
                f"factors must have shape ({base.dim}, k) with one component per column, "
                f"got {factors.shape}"
            )
        self.base = base
        self.correction = LowRankTensor(weights, factors)

    @property
    def dim(self) -> int:
        return self.base.dim

    def _contract_pair(self, vectors: np.ndarray) -> np.ndarray:
        return self.base._contract_pair(vectors) - self.correction._contract_pair(vectors)

    def _contract_triple(self, vectors: np.ndarray) -> np.ndarray:
        return self.base._contract_triple(vectors) - self.correction._contract_triple(vectors)


class WhitenedTensor(SymmetricTensor):
    """``T(W, W, W)`` for a ``d x k`` matrix ``W``: a ``k``-dimensional symmetric tensor.

    ``T(W, W, W)(I, U, U) = W^T T(I, W U, W U)`` and ``T(W,W,W)(U, U, U) = T(WU, WU, WU)``,
    so whitening a large implicit tensor costs one application of it on ``k``-vectors
    mapped up to ``d``.
    """

    def __init__(self, base: SymmetricTensor, whitening: np.ndarray) -> None:
        self.base = base
        self.whitening = check_finite_array(whitening, "whitening", ndim=2)
        if self.whitening.shape[0] != base.dim:
            raise ValueError(
                f"whitening must have {base.dim} rows (the tensor dimension), "
                f"got shape {self.whitening.shape}"
            )

    @property
    def dim(self) -> int:
        return self.whitening.shape[1]

    def _contract_pair(self, vectors: np.ndarray) -> np.ndarray:
        return self.whitening.T @ self.base._contract_pair(self.whitening @ vectors)

    def _contract_triple(self, vectors: np.ndarray) -> np.ndarray:
        return self.base._contract_triple(self.whitening @ vectors)


def as_tensor(tensor: np.ndarray | SymmetricTensor) -> SymmetricTensor:
    """Return ``tensor`` as a :class:`SymmetricTensor` (wrapping ndarrays in :class:`DenseTensor`)."""
    if isinstance(tensor, SymmetricTensor):
        return tensor
    if sp.issparse(tensor):
        raise TypeError(
            "a sparse matrix is not a third-order tensor; to decompose the third moment of a "
            "data matrix use dptensor.tensor.SampleMoment(X)"
        )
    return DenseTensor(tensor)
