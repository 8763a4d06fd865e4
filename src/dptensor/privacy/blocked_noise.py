"""A symmetric Gaussian noise matrix that is never stored: regenerated block by block from a secret key.

The Analyze-Gauss mechanism (Dwork, Talwar, Thakurta & Zhang 2014) adds a symmetric ``d x d``
matrix ``E`` whose unique entries ``E_ij, i <= j`` are i.i.d. ``N(0, scale^2)`` (the ``"unique"``
convention of :func:`~dptensor.privacy.symmetric_gaussian_matrix`). At ``d = 10^4`` that matrix
takes 800 MB, and an eigensolver only ever needs products ``(M + E) V`` with thin blocks ``V``.
:class:`SymmetricGaussianOperator` draws a secret 212-bit key once from the release's
:class:`~dptensor.privacy.NoiseSource` and, for every product, regenerates the rows of ``E`` panel
by panel from counter-style seeds ``(key, panel)``: the same key always gives the same matrix,
so every product is with *one* fixed draw of ``E``, whose law is exactly the unique-convention
symmetric Gaussian. The release is therefore the Analyze-Gauss mechanism itself -- same noise
law, same guarantee -- in ``O(d b)`` memory for panels of ``b`` rows, at the cost of drawing
``d^2 / 2`` normals per product.

Panel ``p`` (rows ``R_p = [p b, (p + 1) b)``) draws the entries of ``E`` in rows ``R_p`` and columns
``>= p b`` as one ``b x (d - p b)`` Gaussian array from its own seed: its first ``b`` columns give
the diagonal block (upper triangle with the diagonal, mirrored), the rest the block right of it
(and, transposed, the block below it). Every unique entry is drawn exactly once.

The normals come from NumPy's PCG64 seeded with the secret key, under every noise backend (OpenDP
has no keyed sampler); see :mod:`dptensor.privacy.noise` for what that means for floating-point
safety.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse.linalg as spla

from dptensor._validation import check_positive_int, check_real
from dptensor.privacy.noise import NoiseLike, NoiseSource, resolve_noise

__all__ = ["SymmetricGaussianOperator"]


class SymmetricGaussianOperator:
    """A ``d x d`` symmetric Gaussian matrix with i.i.d. ``N(0, scale^2)`` unique entries, as an operator.

    Parameters
    ----------
    dim : int
        ``d``.
    scale : float
        Standard deviation of each unique entry ``E_ij, i <= j`` (``>= 0``).
    noise : None, "numpy", "opendp", InsecureTestNoise or NoiseSource
        Where the secret key comes from (:func:`~dptensor.privacy.resolve_noise`).
    block_size : int, default 256
        Rows per panel ``b``; peak memory of a product is about ``8 b d`` bytes plus the block.

    Examples
    --------
    >>> import numpy as np
    >>> from dptensor.privacy import insecure_test_noise
    >>> E = SymmetricGaussianOperator(500, 2.0, noise=insecure_test_noise(0), block_size=64)
    >>> V = np.eye(500)[:, :3]
    >>> bool(np.array_equal(E.matmat(V), E.matmat(V)))  # one fixed matrix
    True
    >>> dense = E.to_dense()
    >>> bool(np.array_equal(dense, dense.T))
    True
    """

    def __init__(
        self,
        dim: int,
        scale: float,
        *,
        noise: NoiseLike | NoiseSource = None,
        block_size: int = 256,
    ) -> None:
        self.dim = check_positive_int(dim, "dim")
        self.scale = check_real(scale, "scale", strict=False)
        self.block_size = check_positive_int(block_size, "block_size")
        source = resolve_noise(noise)
        # 4 x 53 secret bits from the release's noise source: the key of every panel's stream.
        self._key = [int(x) for x in np.floor(source.random(4) * 2.0**53).astype(np.uint64)]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.dim, self.dim)

    def _panel(self, index: int, rows: int, width: int) -> np.ndarray:
        seed = np.random.SeedSequence(entropy=self._key, spawn_key=(index,))
        draws = np.random.Generator(np.random.PCG64(seed)).standard_normal((rows, width))
        return draws * self.scale if self.scale != 1.0 else draws

    def matmat(self, vectors: np.ndarray) -> np.ndarray:
        """``E @ V`` for a ``d x m`` block ``V`` (or a ``d`` vector), regenerating ``E`` panel by panel."""
        V = np.asarray(vectors, dtype=np.float64)
        single = V.ndim == 1
        if single:
            V = V[:, None]
        if V.ndim != 2 or V.shape[0] != self.dim:
            raise ValueError(
                f"vectors must have shape ({self.dim},) or ({self.dim}, m), got {np.shape(vectors)}"
            )
        d, b = self.dim, self.block_size
        out = np.zeros_like(V)
        for index, start in enumerate(range(0, d, b)):
            stop = min(start + b, d)
            rows = stop - start
            panel = self._panel(index, rows, d - start)
            diagonal = np.triu(panel[:, :rows])
            diagonal = diagonal + np.triu(diagonal, 1).T
            out[start:stop] += diagonal @ V[start:stop]
            if stop < d:
                right = panel[:, rows:]
                out[start:stop] += right @ V[stop:]
                out[stop:] += right.T @ V[start:stop]
        return out[:, 0] if single else out

    def __matmul__(self, vectors: np.ndarray) -> np.ndarray:
        return self.matmat(vectors)

    def as_linear_operator(self) -> spla.LinearOperator:
        """The matrix as a :class:`scipy.sparse.linalg.LinearOperator` (symmetric)."""
        return spla.LinearOperator(
            self.shape, matvec=self.matmat, matmat=self.matmat, rmatvec=self.matmat, rmatmat=self.matmat,
            dtype=np.float64,
        )

    def to_dense(self) -> np.ndarray:
        """The ``d x d`` matrix (small ``d`` only): ``E @ I``."""
        return self.matmat(np.eye(self.dim))
