"""Implicit ALS where the users are: one pass over user blocks per sweep (threads or a Dask cluster).

:func:`~dptensor.models.recommend.ials.implicit_als` holds the whole matrix in this process. Here
the users stay in their blocks (:class:`dptensor.parallel.RowBlocks`: a ``dask.array``'s row chunks
on the workers, or row blocks on a thread pool) and only the item side travels. One sweep of the
exact solver (Hu, Koren & Volinsky 2008, eqs. 4-5; the module docstring of
:mod:`~dptensor.models.recommend.ials` has the objective) is one :meth:`~RowBlocks.map_sum`:

1. on each block, the exact user half-step from the current item factors ``V``
   (:func:`~dptensor.models.recommend.ials.solve_user_factors`): the block's user factors ``U_b``
   are made where the block is and never leave it;
2. on the same block, its terms of the item-side sums ``A_i``, ``b_i``, ``m_i`` and ``U_b^T U_b``
   (:func:`~dptensor.models.recommend.ials.item_side_statistics`), summed over the blocks;
3. on the client, the exact item half-step from the sums
   (:func:`~dptensor.models.recommend.ials.solve_item_factors`).

The exact user half-step depends on ``V`` and the user's row only, so steps 1-2 fused into one
block function compute the same sweep as ``implicit_als(..., solver="cholesky")`` without storing
``U`` anywhere between sweeps (``n_users k`` numbers: 512 MB for ``10^6`` users and ``k = 64``).
The item factors equal that fit's up to rounding (the sums are added in another order). What a
sweep moves is ``V`` (``I k``) out to every block and one partial sum (``I k^2``, the ``A_i``) back
per worker: it grows with the catalogue, not with the users.

The conjugate-gradient solver (``solver="cg"``, the in-memory default) warm-starts each user
from their previous factors and each item from its own users' factors, which would keep ``U`` and
the item-major matrix on the workers; it is not offered here.
"""

from __future__ import annotations

import numpy as np

from dptensor._progress import progress_bar
from dptensor._validation import check_positive_int, check_random_state, check_real
from dptensor.models.recommend._input import check_interactions
from dptensor.models.recommend.ials import (
    IALSFactors,
    ItemSideStatistics,
    item_side_statistics,
    solve_item_factors,
    solve_user_factors,
)
from dptensor.parallel import RowBlocks, as_row_blocks

__all__ = ["block_sweep_statistics", "implicit_als_blocks"]


def _interaction_block(block: object) -> object:
    """A block's rows as checked binary interactions (prepared once, kept where the block is)."""
    return check_interactions(block)


def _sweep_block(
    block: object, item_factors: np.ndarray, regularization: float, alpha: float, exponent: float
) -> dict[str, np.ndarray]:
    """One block's terms of a sweep: its users' exact half-step, then their item-side sums."""
    users = solve_user_factors(block, item_factors, regularization=regularization, alpha=alpha,
                               regularization_exponent=exponent)
    stats = item_side_statistics(block, users, alpha=alpha)
    return {"grams": stats.grams, "targets": stats.targets, "counts": stats.counts,
            "user_gram": stats.user_gram}


def block_sweep_statistics(
    blocks: RowBlocks, item_factors: np.ndarray, *, regularization: float, alpha: float,
    regularization_exponent: float = 0.0,
) -> ItemSideStatistics:
    """The item-side sums after an exact user half-step on every block (steps 1-2 of the module docstring).

    Parameters
    ----------
    blocks : RowBlocks
        Binary user rows (prepared by :func:`implicit_als_blocks`, or any checked interactions).
    item_factors : ndarray, shape (n_items, k)
        ``V`` of the previous item half-step.
    regularization, alpha, regularization_exponent : float
        As in :func:`~dptensor.models.recommend.ials.implicit_als`.

    Returns
    -------
    ItemSideStatistics
        The sums over every user; a private model would noise them here, once.
    """
    sums = blocks.map_sum(_sweep_block, np.ascontiguousarray(item_factors, dtype=np.float64), regularization,
                          alpha, regularization_exponent, label="ials-sweep")
    return ItemSideStatistics(sums["grams"], sums["targets"], sums["counts"], sums["user_gram"],
                              blocks.n_rows)


def implicit_als_blocks(
    X: object,
    n_factors: int = 64,
    *,
    regularization: float = 0.1,
    alpha: float = 10.0,
    iterations: int = 15,
    regularization_exponent: float = 0.0,
    random_state: object = None,
    n_jobs: int | None = None,
    verbose: bool = False,
) -> IALSFactors:
    """Implicit ALS with exact half-steps, one pass over the user blocks per sweep (module docstring).

    The same fit as ``implicit_als(X, ..., solver="cholesky")`` up to rounding: the same starting
    item factors for the same ``random_state``, ``iterations`` sweeps (users, then items).

    Parameters
    ----------
    X : dask.array, RowBlocks, scipy sparse matrix or array_like, shape (n_users, n_items)
        Non-zero = an interaction. A ``dask.array`` runs on the active Dask scheduler, its row
        chunks where they are; in-memory input runs on ``n_jobs`` threads.
    n_factors : int, default 64
    regularization : float, default 0.1
    alpha : float, default 10.0
    iterations : int, default 15
    regularization_exponent : float, default 0.0
    random_state : None, int or numpy.random.Generator
        Seeds the starting item factors (as :func:`~dptensor.models.recommend.ials.implicit_als`).
    n_jobs : int, optional
        Threads for in-memory input (ignored for Dask input).
    verbose : bool, default False
        A progress bar over the sweeps.

    Returns
    -------
    IALSFactors
        ``user_factors`` is empty (``(0, k)``): the users' factors stay in their blocks; fold users
        in from the item factors with :func:`~dptensor.models.recommend.ials.solve_user_factors`.
    """
    k = check_positive_int(n_factors, "n_factors")
    regularization = check_real(regularization, "regularization")
    alpha = check_real(alpha, "alpha", strict=False)
    exponent = check_real(regularization_exponent, "regularization_exponent", strict=False)
    iterations = check_positive_int(iterations, "iterations", minimum=0)
    if not isinstance(verbose, bool | np.bool_):
        raise TypeError(f"verbose must be a bool, got {type(verbose).__name__}")
    rng = check_random_state(random_state)
    blocks = as_row_blocks(X, n_jobs=n_jobs).map(_interaction_block, label="ials-rows")
    # The starting point of implicit_als: N(0, 0.01 / k) entries, drawn in the same order.
    items = rng.normal(0.0, 0.1 / np.sqrt(k), size=(blocks.n_cols, k))
    with progress_bar(total=iterations, enabled=verbose, desc="implicit ALS (blocks)", unit="sweep") as bar:
        for _ in range(iterations):
            stats = block_sweep_statistics(blocks, items, regularization=regularization, alpha=alpha,
                                           regularization_exponent=exponent)
            items = solve_item_factors(stats, regularization=regularization, alpha=alpha,
                                       regularization_exponent=exponent)
            bar.update(1)
    return IALSFactors(np.zeros((0, k)), items, regularization, alpha, exponent)
