"""Implicit alternating least squares (Hu, Koren & Volinsky, ICDM 2008), as pure functions.

Objective. For a binary user x item matrix ``X`` (``x_ui = 1``: user ``u`` chose item ``i``),
preferences ``p_ui = x_ui`` and confidences ``c_ui = 1 + alpha x_ui`` (eqs. 1-2 of the paper with
``r_ui = x_ui``), the factors ``x_u`` (rows of ``U``) and ``y_i`` (rows of ``V``) minimise eq. 3,

    L(U, V) = sum_{u, i} c_ui (p_ui - x_u^T y_i)^2
              + sum_u lambda_u ||x_u||^2 + sum_i lambda_i ||y_i||^2,

over *every* pair ``(u, i)``, observed or not. With ``regularization_exponent = 0`` (the default)
``lambda_u = lambda_i = regularization``, the paper's ridge. With ``nu = regularization_exponent >
0`` the ridge grows with the weight a row carries, as in Rendle, Krichene, Zhang & Koren 2021
("Revisiting the performance of iALS on item recommendation benchmarks", eq. 6), written in the
paper's confidences: ``lambda_u = regularization * (sum_i c_ui)^nu = regularization * (n_items +
alpha n_u)^nu`` and ``lambda_i = regularization * (n_users + alpha m_i)^nu``, ``n_u`` the items of
user ``u`` and ``m_i`` the users of item ``i`` (Rendle et al.'s unobserved weight ``alpha_0`` is
``1 / alpha`` here, up to a rescaling of the objective). On MovieLens-100K (``benchmarks/ials_grid.py``,
three splits) the scaled ridge helped only on a coarse ridge grid: NDCG@10 0.363 at ``nu = 1`` and
0.360 at ``nu = 0.5`` against 0.356 for the plain ridge on {0.01, 0.1, 1, 10}; the plain ridge tuned
as finely (``regularization=20``, ``alpha=1``, 64 factors) reached 0.368, so the simplest form is
the default and ``nu`` an option.

Half-steps. With ``V`` fixed the objective is a ridge regression per user (eq. 4):

    x_u = (V^T C_u V + lambda_u I)^{-1} V^T C_u p_u,

and with the Gram trick ``V^T C_u V = V^T V + V^T (C_u - I) V`` only the user's own items enter
besides the shared ``V^T V``: ``V^T (C_u - I) V = alpha sum_{i: x_ui = 1} y_i y_i^T`` and
``V^T C_u p_u = (1 + alpha) sum_{i: x_ui = 1} y_i``. The item half-step is the same with the roles
exchanged (eq. 5): per item ``i``,

    y_i = (U^T U + A_i + lambda_i I)^{-1} b_i,
    A_i = sum_{u: x_ui = 1} (c_ui - 1) x_u x_u^T,    b_i = sum_u c_ui p_ui x_u,

sums over users that :func:`item_side_statistics` computes as map over user blocks, then sum
(:mod:`dptensor.parallel`), so that a Dask cluster runs them and a private model can noise the sums
before :func:`solve_item_factors` solves from them. Scores of user rows are ``U V^T`` (eq. 6).

Solvers. ``solver="cholesky"`` solves every half-step exactly (batched ``numpy.linalg.solve`` of the
``k x k`` systems, the item side through the statistics above): each half-step minimises ``L`` over
one side, so ``L`` never increases. ``solver="cg"`` (the default) replaces each solve by
``cg_steps`` conjugate-gradient steps started at the current factors (Takacs, Pilaszy & Tikk,
RecSys 2011), one compiled pass per user (or item) that applies ``V^T C_u V`` through the Gram
trick in ``O(k^2 + n_u k)`` without forming it; each step still lowers the (convex) half-step
objective, so ``L`` never increases either (up to the rounding of the sweeps' type: float32 by
default, which doubles the SIMD width and is what ``implicit`` computes in). Both end with an
exact user half-step in float64, so the returned user factors are exactly those
:func:`solve_user_factors` folds in from the returned item factors: a training user's list equals
the list of a new user with the same row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from dptensor._progress import progress_bar
from dptensor._validation import check_finite_array, check_positive_int, check_random_state, check_real
from dptensor.models.recommend._input import check_interactions
from dptensor.parallel import LocalRowBlocks, RowBlocks, as_row_blocks, effective_n_jobs, split_rows

__all__ = [
    "SOLVERS",
    "IALSFactors",
    "ItemSideStatistics",
    "ials_objective",
    "implicit_als",
    "item_side_statistics",
    "solve_item_factors",
    "solve_user_factors",
]

#: The half-step solvers of :func:`implicit_als`.
SOLVERS = ("cg", "cholesky")

#: Numbers of ``k x k`` systems held at once by the exact solves (about 32 MB of float64).
SYSTEM_VALUES = 1 << 22


@dataclass(frozen=True)
class IALSFactors:
    """A fitted implicit ALS model: scores of user ``u`` are ``user_factors[u] @ item_factors.T``.

    Attributes
    ----------
    user_factors : ndarray, shape (n_users, n_factors)
    item_factors : ndarray, shape (n_items, n_factors)
    regularization : float
        ``lambda`` of the objective (module docstring).
    alpha : float
        The confidence ``c = 1 + alpha x``.
    regularization_exponent : float
        ``nu`` of the frequency-scaled ridge (0: the paper's plain ridge).
    objective : tuple of float
        ``L`` after each sweep (and after the final exact user half-step), when the fit was asked
        to record it (``verbose=True``); empty otherwise.
    """

    user_factors: np.ndarray
    item_factors: np.ndarray
    regularization: float
    alpha: float
    regularization_exponent: float = 0.0
    objective: tuple[float, ...] = ()


@dataclass(frozen=True)
class ItemSideStatistics:
    """The sums over users that an item half-step needs (module docstring, eq. 5).

    Attributes
    ----------
    grams : ndarray, shape (n_items, k, k)
        ``A_i = sum_{u: x_ui = 1} (c_ui - 1) x_u x_u^T = alpha sum_{u: x_ui = 1} x_u x_u^T``.
    targets : ndarray, shape (n_items, k)
        ``b_i = sum_u c_ui p_ui x_u = (1 + alpha) sum_{u: x_ui = 1} x_u``.
    counts : ndarray, shape (n_items,)
        ``m_i``, the users of each item (the frequency-scaled ridge needs them).
    user_gram : ndarray, shape (k, k)
        ``U^T U = sum_u x_u x_u^T`` over every user.
    n_users : int
        The users summed over.
    """

    grams: np.ndarray
    targets: np.ndarray
    counts: np.ndarray
    user_gram: np.ndarray
    n_users: int


# -- checks ---------------------------------------------------------------------------------------


def _check_scalars(regularization: object, alpha: object, exponent: object) -> tuple[float, float, float]:
    return (
        check_real(regularization, "regularization"),
        check_real(alpha, "alpha", strict=False),
        check_real(exponent, "regularization_exponent", strict=False),
    )


def _check_factors(factors: object, name: str, n_rows: int | None = None) -> np.ndarray:
    out = np.ascontiguousarray(check_finite_array(factors, name, ndim=2))
    if n_rows is not None and out.shape[0] != n_rows:
        raise ValueError(f"{name} must have {n_rows} rows, got shape {out.shape}")
    return out


def _ridge(
    regularization: float, exponent: float, total: int, alpha: float, lengths: np.ndarray
) -> np.ndarray:
    """``lambda (total + alpha n)^nu`` per row (``total`` the other side's size, ``n`` the row's length)."""
    lengths = np.asarray(lengths, dtype=np.float64)
    if exponent == 0.0:
        return np.full(lengths.shape[0], regularization)
    return regularization * (total + alpha * lengths) ** exponent


# -- exact half-steps ------------------------------------------------------------------------------


def _row_grams(matrix: sp.csr_array, factors: np.ndarray, rows: range) -> np.ndarray:
    """``sum_{j in row} f_j f_j^T`` for each row of ``rows`` of a binary CSR matrix, ``(len, k, k)``."""
    k = factors.shape[1]
    out = np.zeros((len(rows), k, k))
    indptr, indices = matrix.indptr, matrix.indices
    for slot, row in enumerate(rows):
        lo, hi = indptr[row], indptr[row + 1]
        if hi > lo:
            part = factors[indices[lo:hi]]
            np.matmul(part.T, part, out=out[slot])
    return out


def _solve_systems(gram: np.ndarray, grams: np.ndarray, ridge: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``(gram + grams_r + ridge_r I)^{-1} rhs_r`` for every row ``r`` (one batched LAPACK call)."""
    k = gram.shape[0]
    systems = grams + gram
    systems[:, np.arange(k), np.arange(k)] += ridge[:, None]
    return np.linalg.solve(systems, rhs[..., None])[..., 0]


def solve_user_factors(
    X_rows: object,
    item_factors: object,
    *,
    regularization: float,
    alpha: float,
    regularization_exponent: float = 0.0,
) -> np.ndarray:
    """Each row's factors from its own interactions and the item side only: the exact user half-step.

    ``x_u = (V^T V + alpha sum_{i in u} y_i y_i^T + lambda_u I)^{-1} (1 + alpha) sum_{i in u} y_i``,
    the exact minimiser of the iALS objective over ``x_u`` with ``V`` fixed (Hu et al. 2008, eq. 4,
    through the Gram trick; module docstring). Used for the fit's user half-steps and to fold in
    new users (a row with no interaction gets zero factors).

    Parameters
    ----------
    X_rows : sparse matrix or array_like, shape (n_rows, n_items)
        The rows' interactions (non-zero = an interaction).
    item_factors : array_like, shape (n_items, k)
    regularization : float
        ``lambda > 0``.
    alpha : float
        ``alpha >= 0`` of ``c = 1 + alpha x``.
    regularization_exponent : float, default 0.0
        ``nu >= 0`` of the frequency-scaled ridge ``lambda (n_items + alpha n_u)^nu``.

    Returns
    -------
    ndarray, shape (n_rows, k)
    """
    regularization, alpha, exponent = _check_scalars(regularization, alpha, regularization_exponent)
    factors = _check_factors(item_factors, "item_factors")
    rows = check_interactions(X_rows, name="X_rows", n_items=factors.shape[0])
    return _exact_rows(rows, factors, regularization, alpha, exponent)


def _exact_rows(
    rows: sp.csr_array, factors: np.ndarray, regularization: float, alpha: float, exponent: float
) -> np.ndarray:
    """:func:`solve_user_factors` on checked input (rows of a binary CSR array)."""
    n, k = rows.shape[0], factors.shape[1]
    gram = factors.T @ factors
    ridge = _ridge(regularization, exponent, factors.shape[0], alpha, np.diff(rows.indptr))
    rhs = (1.0 + alpha) * np.asarray(rows @ factors)
    out = np.empty((n, k))
    step = max(1, SYSTEM_VALUES // (k * k))
    for lo in range(0, n, step):
        chunk = range(lo, min(n, lo + step))
        grams = alpha * _row_grams(rows, factors, chunk)
        out[lo : chunk.stop] = _solve_systems(gram, grams, ridge[lo : chunk.stop], rhs[lo : chunk.stop])
    return out


def _statistics_block(block: object, alpha: float, user_factors: np.ndarray) -> dict[str, np.ndarray]:
    """One user block's terms of :class:`ItemSideStatistics` (its rows of ``U`` come as ``user_factors``)."""
    rows = sp.csr_array(block, copy=True)  # binarised here, the block itself left as it is
    rows.data = (rows.data != 0).astype(np.float64)
    rows.eliminate_zeros()
    items = sp.csr_array(rows.T)  # item x (block users), each item's users of this block
    items.sort_indices()
    factors = np.asarray(user_factors, dtype=np.float64)
    return {
        "grams": alpha * _row_grams(items, factors, range(items.shape[0])),
        "targets": (1.0 + alpha) * np.asarray(items @ factors),
        "counts": np.diff(items.indptr).astype(np.float64),
        "user_gram": factors.T @ factors,
    }


def item_side_statistics(
    X: object, user_factors: object, *, alpha: float, n_jobs: int | None = 1
) -> ItemSideStatistics:
    """The per-item sums of the item half-step (eq. 5), as map over user blocks, then sum.

    For every item ``i``: ``A_i = sum_{u: x_ui = 1} (c_ui - 1) x_u x_u^T`` and ``b_i = sum_u c_ui
    p_ui x_u``, with the item's user count ``m_i``, and the Gram ``U^T U = sum_u x_u x_u^T`` over
    every user. Each is a sum over users of a term of one user's row and factors, computed per
    block of users by :meth:`dptensor.parallel.RowBlocks.map_sum` (in-process, on threads, or on a
    Dask cluster), so a private model can add its noise once, to the sums.

    Parameters
    ----------
    X : sparse matrix, array_like or RowBlocks, shape (n_users, n_items)
        The interactions (non-zero = an interaction). :class:`~dptensor.parallel.RowBlocks` are
        used as they are (their stored values are binarised block by block).
    user_factors : array_like, shape (n_users, k)
    alpha : float
        ``alpha >= 0`` of ``c = 1 + alpha x``.
    n_jobs : int, optional
        Threads for in-memory input.

    Returns
    -------
    ItemSideStatistics
        ``grams`` holds ``n_items k^2`` numbers (55 MB for 1682 items and ``k = 64``).
    """
    alpha = check_real(alpha, "alpha", strict=False)
    if not isinstance(X, RowBlocks):
        X = check_interactions(X)
    blocks = as_row_blocks(X, n_jobs=n_jobs)
    factors = _check_factors(user_factors, "user_factors", blocks.n_rows)
    sums = blocks.map_sum(_statistics_block, alpha, row_args=[factors], label="ials-item-statistics")
    return ItemSideStatistics(
        sums["grams"], sums["targets"], sums["counts"], sums["user_gram"], blocks.n_rows
    )


def solve_item_factors(
    stats: ItemSideStatistics,
    user_gram: object | None = None,
    *,
    regularization: float,
    alpha: float = 0.0,
    regularization_exponent: float = 0.0,
) -> np.ndarray:
    """The exact item half-step from the item-side statistics: ``y_i = (U^T U + A_i + lambda_i I)^{-1} b_i``.

    Parameters
    ----------
    stats : ItemSideStatistics
        From :func:`item_side_statistics` (or their noised release).
    user_gram : array_like, shape (k, k), optional
        ``U^T U``; default ``stats.user_gram`` (a private model passes its own).
    regularization : float
        ``lambda > 0``.
    alpha : float, default 0.0
        Needed only by the frequency-scaled ridge ``lambda (n_users + alpha m_i)^nu``.
    regularization_exponent : float, default 0.0
        ``nu >= 0``; with ``nu > 0`` the ridge uses ``stats.counts`` and ``stats.n_users``.

    Returns
    -------
    ndarray, shape (n_items, k)
    """
    if not isinstance(stats, ItemSideStatistics):
        raise TypeError(f"stats must be an ItemSideStatistics, got {type(stats).__name__}")
    regularization, alpha, exponent = _check_scalars(regularization, alpha, regularization_exponent)
    targets = _check_factors(stats.targets, "stats.targets")
    n_items, k = targets.shape
    grams = check_finite_array(stats.grams, "stats.grams", ndim=3)
    if grams.shape != (n_items, k, k):
        raise ValueError(f"stats.grams must have shape {(n_items, k, k)}, got {grams.shape}")
    gram = check_finite_array(stats.user_gram if user_gram is None else user_gram, "user_gram", ndim=2)
    if gram.shape != (k, k):
        raise ValueError(f"user_gram must have shape {(k, k)}, got {gram.shape}")
    ridge = _ridge(regularization, exponent, stats.n_users, alpha, np.maximum(stats.counts, 0.0))
    out = np.empty((n_items, k))
    step = max(1, SYSTEM_VALUES // (k * k))
    for lo in range(0, n_items, step):
        hi = min(n_items, lo + step)
        out[lo:hi] = _solve_systems(gram, grams[lo:hi], ridge[lo:hi], targets[lo:hi])
    return out


# -- conjugate-gradient half-steps ------------------------------------------------------------------


@numba.njit(nogil=True, cache=True, fastmath=True)
def _cg_rows(indptr, indices, factors, gram, ridge, alpha, start, steps):  # noqa: ANN001, ANN202
    """``steps`` CG steps on ``(G + alpha sum_{j in r} f_j f_j^T + ridge_r I) z = (1 + alpha) sum_j f_j``.

    One row ``r`` of the binary CSR matrix ``(indptr, indices)`` at a time, started at ``start[r]``;
    the matrix is applied through the Gram trick, never formed (Takacs et al. 2011, Algorithm 2).
    """
    n, k = start.shape
    out = np.empty_like(start)
    x = np.empty(k, dtype=start.dtype)  # the working type is the factors' (float32 or float64)
    r = np.empty_like(x)
    p = np.empty_like(x)
    ap = np.empty_like(x)
    zero = start.dtype.type(0.0)
    one = start.dtype.type(1.0)
    for row in range(n):
        lam = ridge[row]
        for a in range(k):  # r = b - A x
            x[a] = start[row, a]
            r[a] = -lam * x[a]
        for b in range(k):
            xb = x[b]
            for a in range(k):
                r[a] -= gram[b, a] * xb
        for e in range(indptr[row], indptr[row + 1]):
            y = factors[indices[e]]
            dot = zero
            for a in range(k):
                dot += y[a] * x[a]
            weight = (one + alpha) - alpha * dot
            for a in range(k):
                r[a] += weight * y[a]
        rs = zero
        for a in range(k):
            p[a] = r[a]
            rs += r[a] * r[a]
        for _ in range(steps):
            if not rs > zero:  # converged, or the residual underflowed (tiny factors in float32)
                break
            for a in range(k):  # ap = A p
                ap[a] = lam * p[a]
            for b in range(k):
                pb = p[b]
                for a in range(k):
                    ap[a] += gram[b, a] * pb
            for e in range(indptr[row], indptr[row + 1]):
                y = factors[indices[e]]
                dot = zero
                for a in range(k):
                    dot += y[a] * p[a]
                dot *= alpha
                for a in range(k):
                    ap[a] += dot * y[a]
            pap = zero
            for a in range(k):
                pap += p[a] * ap[a]
            if not pap > zero:  # p = 0 (or underflowed)
                break
            step = rs / pap
            new = zero
            for a in range(k):
                x[a] += step * p[a]
                r[a] -= step * ap[a]
                new += r[a] * r[a]
            beta = new / rs
            for a in range(k):
                p[a] = r[a] + beta * p[a]
            rs = new
        for a in range(k):
            out[row, a] = x[a]
    return out


@dataclass(frozen=True)
class _RowRange:
    """A block of rows of a CSR matrix with their current factors and ridge (a CG step's input)."""

    matrix: sp.csr_array
    start: np.ndarray
    ridge: np.ndarray

    @property
    def n_rows(self) -> int:
        return self.start.shape[0]


def _cg_block(
    block: _RowRange, factors: np.ndarray, gram: np.ndarray, alpha: float, steps: int
) -> np.ndarray:
    """:func:`_cg_rows` on one block of rows."""
    rows = block.matrix
    return _cg_rows(rows.indptr, rows.indices, factors, gram, block.ridge, alpha, block.start, steps)


class _Side:
    """One side of the fit (the users or the items): its rows, cut into blocks, and their ridge."""

    def __init__(self, matrix: sp.csr_array, ridge: np.ndarray, n_jobs: int) -> None:
        self.n_jobs = n_jobs
        self.ranges = split_rows(matrix.shape[0], 1 if n_jobs == 1 else 2 * n_jobs, matrix.indptr)
        # One index type for the compiled pass (int32 where it fits, as SciPy's own choice varies):
        # one compilation, not one per type.
        index = np.int32 if max(matrix.nnz, *matrix.shape) < np.iinfo(np.int32).max else np.int64
        self.pieces = [
            sp.csr_array((piece.data, piece.indices.astype(index), piece.indptr.astype(index)),
                         shape=piece.shape)
            for piece in (matrix[a:b] for a, b in self.ranges)
        ]
        self.ridge = ridge

    def cg_step(self, start: np.ndarray, other: np.ndarray, alpha: float, steps: int) -> np.ndarray:
        """``steps`` CG steps of this side's half-step from ``start``, block by block (threads).

        Computed in the type of ``start`` and ``other`` (the fit's ``dtype``).
        """
        dtype = start.dtype.type
        ridge, alpha = self.ridge.astype(dtype), dtype(alpha)
        blocks = [
            _RowRange(piece, start[a:b], ridge[a:b])
            for piece, (a, b) in zip(self.pieces, self.ranges, strict=True)
        ]
        mapped = LocalRowBlocks(blocks, start.shape[1], self.n_jobs).map(
            _cg_block, other, other.T @ other, alpha, steps
        )
        return np.concatenate(mapped.payloads)


# -- the fit ----------------------------------------------------------------------------------------


def ials_objective(
    X: object,
    user_factors: object,
    item_factors: object,
    *,
    regularization: float,
    alpha: float,
    regularization_exponent: float = 0.0,
) -> float:
    """The iALS objective ``L(U, V)`` of the module docstring (over every user-item pair).

    Computed without the dense ``U V^T``: ``sum_{u,i} c_ui (p_ui - s_ui)^2 = sum_u x_u^T (V^T V) x_u
    + sum_{x_ui = 1} [(1 + alpha)(1 - s_ui)^2 - s_ui^2]`` with ``s_ui = x_u^T y_i``.
    """
    regularization, alpha, exponent = _check_scalars(regularization, alpha, regularization_exponent)
    items = _check_factors(item_factors, "item_factors")
    rows = check_interactions(X, n_items=items.shape[0])
    users = _check_factors(user_factors, "user_factors", rows.shape[0])
    if users.shape[1] != items.shape[1]:
        raise ValueError(f"user_factors and item_factors must have the same columns, got "
                         f"{users.shape[1]} and {items.shape[1]}")
    return _objective(rows, users, items, regularization, alpha, exponent)


def _objective(rows: sp.csr_array, users: np.ndarray, items: np.ndarray, regularization: float,
               alpha: float, exponent: float) -> float:
    users, items = users.astype(np.float64, copy=False), items.astype(np.float64, copy=False)
    user_of = np.repeat(np.arange(rows.shape[0]), np.diff(rows.indptr))
    scores = np.einsum("ek,ek->e", users[user_of], items[rows.indices])
    fit = float(np.sum((users @ (items.T @ items)) * users))
    fit += float(np.sum((1.0 + alpha) * (1.0 - scores) ** 2 - scores**2))
    lengths_u = np.diff(rows.indptr)
    lengths_i = np.bincount(rows.indices, minlength=rows.shape[1])
    ridge_u = _ridge(regularization, exponent, rows.shape[1], alpha, lengths_u)
    ridge_i = _ridge(regularization, exponent, rows.shape[0], alpha, lengths_i)
    return fit + float(ridge_u @ np.sum(users**2, axis=1) + ridge_i @ np.sum(items**2, axis=1))


def implicit_als(
    X: object,
    n_factors: int = 64,
    *,
    regularization: float = 0.1,
    alpha: float = 10.0,
    iterations: int = 15,
    regularization_exponent: float = 0.0,
    solver: str = "cg",
    cg_steps: int = 3,
    dtype: type = np.float32,
    random_state: object = None,
    n_jobs: int | None = 1,
    verbose: bool = False,
) -> IALSFactors:
    """Fit implicit ALS (Hu, Koren & Volinsky 2008) to a binary user x item matrix.

    Minimises the objective of the module docstring by alternating user and item half-steps:
    ``iterations`` sweeps (users, then items), then one exact user half-step.

    Parameters
    ----------
    X : sparse matrix or array_like, shape (n_users, n_items)
        Non-zero = an interaction (:func:`~dptensor.models.recommend._input.check_interactions`).
    n_factors : int, default 64
        ``k``, the columns of the factors.
    regularization : float, default 0.1
        ``lambda > 0``.
    alpha : float, default 10.0
        ``alpha >= 0``: confidence ``1 + alpha`` on an interaction, 1 elsewhere.
    iterations : int, default 15
        Sweeps (``>= 0``; 0 gives the exact user factors of the random item factors).
    regularization_exponent : float, default 0.0
        ``nu >= 0`` of the frequency-scaled ridge (Rendle et al. 2021; module docstring).
    solver : {"cg", "cholesky"}, default "cg"
        ``"cg"``: ``cg_steps`` conjugate-gradient steps per half-step, warm-started (fast);
        ``"cholesky"``: exact half-steps, the item side through :func:`item_side_statistics`.
    cg_steps : int, default 3
        CG steps per half-step (``solver="cg"``).
    dtype : {numpy.float32, numpy.float64}, default numpy.float32
        The floating type of the CG sweeps (``solver="cg"``; twice the SIMD width in float32, as
        ``implicit`` computes by default). The exact steps, and so the returned factors, are float64.
    random_state : None, int or numpy.random.Generator
        Seeds the starting item factors, ``N(0, 0.01 / k)`` entries. Equal seeds (and ``n_jobs``)
        give equal factors; with ``solver="cg"`` they do not depend on ``n_jobs`` either (every row
        is solved on its own; the exact item step adds the blocks' sums, whose cut depends on it).
    n_jobs : int, optional
        Threads (row blocks run on a thread pool; ``-1``: every core).
    verbose : bool, default False
        Show a progress bar and record the objective after each sweep in ``objective``.

    Returns
    -------
    IALSFactors
    """
    k = check_positive_int(n_factors, "n_factors")
    regularization, alpha, exponent = _check_scalars(regularization, alpha, regularization_exponent)
    iterations = check_positive_int(iterations, "iterations", minimum=0)
    steps = check_positive_int(cg_steps, "cg_steps")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if not isinstance(verbose, bool | np.bool_):
        raise TypeError(f"verbose must be a bool, got {type(verbose).__name__}")
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be numpy.float32 or numpy.float64, got {dtype!r}")
    jobs = effective_n_jobs(n_jobs)
    rng = check_random_state(random_state)
    rows = check_interactions(X)
    n_users, n_items = rows.shape
    items = rng.normal(0.0, 0.1 / np.sqrt(k), size=(n_items, k))
    users = np.zeros((n_users, k))
    columns = sp.csr_array(rows.T)
    columns.sort_indices()
    ridges = [_ridge(regularization, exponent, size, alpha, np.diff(matrix.indptr))
              for size, matrix in ((n_items, rows), (n_users, columns))]
    user_side, item_side = _Side(rows, ridges[0], jobs), _Side(columns, ridges[1], jobs)
    blocks = as_row_blocks(rows, n_jobs=jobs) if solver == "cholesky" else None
    history: list[float] = []
    with progress_bar(total=iterations, enabled=verbose, desc="implicit ALS", unit="sweep") as bar:
        for _ in range(iterations):
            if solver == "cg":
                users = user_side.cg_step(users.astype(dtype, copy=False), items.astype(dtype, copy=False),
                                          alpha, steps)
                items = item_side.cg_step(items.astype(dtype, copy=False), users, alpha, steps)
            else:
                users = _exact_rows(rows, items, regularization, alpha, exponent)
                stats = item_side_statistics(blocks, users, alpha=alpha)
                items = solve_item_factors(stats, regularization=regularization, alpha=alpha,
                                           regularization_exponent=exponent)
            if verbose:
                history.append(_objective(rows, users, items, regularization, alpha, exponent))
                bar.set_postfix(objective=f"{history[-1]:.6g}")
            bar.update(1)
    items = items.astype(np.float64)
    users = _exact_rows(rows, items, regularization, alpha, exponent)
    if verbose:
        history.append(_objective(rows, users, items, regularization, alpha, exponent))
    return IALSFactors(users, items, regularization, alpha, exponent, tuple(history))
