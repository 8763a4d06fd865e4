"""Robust tensor power method (Wang & Anandkumar 2016, Algorithm 1).

The ``L`` random restarts of one component are iterated together as the columns of one
``d x L`` matrix, so each power step is a single application of the tensor operator (one BLAS
product for a dense tensor, two sparse/dense products for a sample moment). Deflation is the
implicit :class:`~dptensor.tensor.DeflatedTensor`; no ``d^3`` array is formed after the input.

The same loop, with noise hooks, runs the differentially private variant (Algorithm 3) in
:mod:`dptensor.decomposition.private_power_method`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dptensor._validation import (
    RandomStateLike,
    check_positive_int,
    check_random_state,
    check_rank,
    check_real,
)
from dptensor.tensor.operators import DeflatedTensor, LowRankTensor, SymmetricTensor, as_tensor
from dptensor.tensor.sphere import random_unit_vectors

#: ``noisy = hook(images, vectors)``: perturbs the power-step images ``T(I, U, U)`` (d x m)
#: computed from the current unit vectors ``U``.
StepHook = Callable[[np.ndarray, np.ndarray], np.ndarray]
#: ``noisy = hook(values, vectors)``: perturbs the eigenvalue estimates ``T(u, u, u)``.
ValueHook = Callable[[np.ndarray, np.ndarray], np.ndarray]
#: ``callback(i, weight)``: called after component ``i`` (0-based, extraction order) is found.
ComponentCallback = Callable[[int, float], None]


def default_n_restarts(rank: int) -> int:
    """``L = max(10, ceil(2 k ln k))``: a concrete ``L = Omega(k log k)`` (Theorem 2.2)."""
    return max(10, math.ceil(2 * rank * math.log(rank))) if rank > 1 else 10


def default_n_iter(dim: int, tol: float) -> int:
    """``R = ceil(log2(d / tol)) + 10``: a concrete ``R = Omega(log(lambda_max d / eps))``.

    Theorem 2.2 asks for ``R = Omega(log(lambda_max d / eps))`` power steps for an error
    ``eps``; taking the target error relative to ``lambda_max`` as ``tol`` (floored at
    ``1e-12``) gives ``log(d / tol)``. Ten extra steps cover the constant. With ``tol > 0``
    the loop usually stops well before this cap.
    """
    return math.ceil(math.log2(dim / max(tol, 1e-12))) + 10


@dataclass(frozen=True)
class PowerMethodResult:
    """Eigenpairs ``{(lambda_i, v_i)}`` of a symmetric tensor, ``T ~ sum_i lambda_i v_i^{(x)3}``.

    Attributes
    ----------
    weights : ndarray of shape (k,)
        Non-negative eigenvalues ``lambda_i``, sorted in descending order.
    factors : ndarray of shape (d, k)
        Unit eigenvectors ``v_i`` as columns, in the order of ``weights``.
    n_iter : ndarray of shape (k,)
        Power steps taken for each component (the slowest restart's count).
    converged : ndarray of shape (k,)
        Whether the selected restart of each component met the convergence test before the
        iteration cap (always ``False`` when run with ``tol=0``).
    extraction_order : ndarray of shape (k,)
        ``extraction_order[i]`` is the deflation step at which component ``i`` was found.
    """

    weights: np.ndarray
    factors: np.ndarray
    n_iter: np.ndarray
    converged: np.ndarray
    extraction_order: np.ndarray = field(repr=False)

    @property
    def rank(self) -> int:
        """Number of components ``k``."""
        return int(self.weights.shape[0])

    def to_tensor(self) -> LowRankTensor:
        """The fitted low-rank tensor as an implicit operator."""
        return LowRankTensor(self.weights, self.factors)

    def to_dense(self) -> np.ndarray:
        """``sum_i lambda_i v_i^{(x)3}`` as a dense ``d x d x d`` array (small ``d`` only)."""
        return np.einsum("r,ir,jr,kr->ijk", self.weights, self.factors, self.factors, self.factors)


def power_method(
    tensor: np.ndarray | SymmetricTensor,
    rank: int,
    *,
    n_restarts: int | None = None,
    n_iter: int | None = None,
    tol: float = 1e-8,
    random_state: RandomStateLike = None,
    callback: ComponentCallback | None = None,
) -> PowerMethodResult:
    """Decompose a symmetric tensor with the robust tensor power method.

    Implements Algorithm 1 of Wang & Anandkumar, *Online and Differentially-Private Tensor
    Decomposition* (NeurIPS 2016), after Anandkumar et al. (JMLR 2014). For each of the
    ``rank`` components:

    1. *Initialisation* -- draw ``L = n_restarts`` vectors uniformly on the unit sphere;
    2. *Power iteration* -- ``u_t = T(I, u_{t-1}, u_{t-1}) / ||T(I, u_{t-1}, u_{t-1})||`` for
       ``t = 1..R`` on all restarts at once;
    3. *Boosting* -- keep the restart with the largest ``T(u_R, u_R, u_R)``, giving
       ``(lambda_i, v_i)``;
    4. *Deflation* -- ``T <- T - lambda_i v_i^{(x)3}``, applied implicitly.

    Parameters
    ----------
    tensor : ndarray of shape (d, d, d) or SymmetricTensor
        A symmetric dense array, or any operator such as
        :class:`~dptensor.tensor.SampleMoment` (the third moment of a data matrix).
    rank : int
        Number of components ``k``, ``1 <= k <= d``.
    n_restarts : int, optional
        ``L``; default :func:`default_n_restarts` (``max(10, ceil(2 k ln k))``).
    n_iter : int, optional
        ``R``, the maximum number of power steps per component; default
        :func:`default_n_iter` (``ceil(log2(d / tol)) + 10``).
    tol : float, default 1e-8
        Sign-invariant convergence test: a restart stops once
        ``min(||u_t - u_{t-1}||, ||u_t + u_{t-1}||) <= tol``; all stop when every restart has.
        ``tol=0`` always runs exactly ``R`` steps, as the paper's pseudocode does.
    random_state : None, int or numpy.random.Generator
        Seed for the restarts; equal seeds give identical results.
    callback : callable, optional
        ``callback(i, weight)`` after each component is extracted (for progress bars).

    Returns
    -------
    PowerMethodResult
        ``weights`` (non-negative, descending) and unit ``factors``. A selected restart with
        ``T(u,u,u) < 0`` is reported as ``(-lambda, -u)``, the same rank-one term.

    Examples
    --------
    >>> from dptensor import power_method
    >>> from dptensor.datasets import make_orthogonal_tensor
    >>> tensor, weights, factors, _ = make_orthogonal_tensor(30, 3, random_state=0)
    >>> result = power_method(tensor, 3, random_state=0)
    >>> bool(abs(result.weights[0] - weights[0]) < 1e-8)
    True
    """
    op = as_tensor(tensor)
    rank = check_rank(rank, op.dim)
    tol = check_real(tol, "tol", strict=False)
    n_restarts = default_n_restarts(rank) if n_restarts is None else n_restarts
    n_restarts = check_positive_int(n_restarts, "n_restarts")
    n_iter = default_n_iter(op.dim, tol) if n_iter is None else n_iter
    n_iter = check_positive_int(n_iter, "n_iter")
    rng = check_random_state(random_state)
    return deflation_power_method(
        op, rank, n_restarts=n_restarts, n_iter=n_iter, tol=tol, rng=rng, callback=callback
    )


def deflation_power_method(
    op: SymmetricTensor,
    rank: int,
    *,
    n_restarts: int,
    n_iter: int,
    tol: float,
    rng: np.random.Generator,
    step_hook: StepHook | None = None,
    value_hook: ValueHook | None = None,
    callback: ComponentCallback | None = None,
) -> PowerMethodResult:
    """The deflation loop shared by Algorithms 1 and 3 (arguments already validated).

    ``step_hook`` and ``value_hook`` add noise to each released power-step image and each
    eigenvalue estimate (Algorithm 3, steps 7 and 10); without them this is Algorithm 1.
    """
    dim = op.dim
    weights = np.zeros(rank)
    factors = np.zeros((dim, rank))
    steps = np.zeros(rank, dtype=int)
    converged = np.zeros(rank, dtype=bool)
    for i in range(rank):
        deflated = DeflatedTensor(op, weights[:i], factors[:, :i]) if i else op
        vectors = random_unit_vectors(dim, n_restarts, rng)
        vectors, done, steps[i] = power_iterations(deflated, vectors, n_iter, tol, step_hook)
        values = deflated.contract_triple(vectors)
        if value_hook is not None:
            values = value_hook(values, vectors)
        weights[i], factors[:, i], best = select_restart(values, vectors)
        converged[i] = done[best]
        if callback is not None:
            callback(i, float(weights[i]))
    order = np.argsort(-weights, kind="stable")
    return PowerMethodResult(
        weights=weights[order],
        factors=factors[:, order],
        n_iter=steps[order],
        converged=converged[order],
        extraction_order=order,
    )


def select_restart(values: np.ndarray, vectors: np.ndarray) -> tuple[float, np.ndarray, int]:
    """Boosting (Algorithm 1 step 5, Algorithm 2 step 10): keep the restart with the largest value.

    Returns ``(weight, vector, index)``; a negative ``T(u,u,u)`` is reported as the same rank-one
    term ``(-lambda, -u)`` so that weights are non-negative.
    """
    best = int(np.argmax(values))
    sign = 1.0 if values[best] >= 0 else -1.0
    return sign * float(values[best]), sign * vectors[:, best], best


def power_iterations(
    op: SymmetricTensor,
    vectors: np.ndarray,
    n_iter: int,
    tol: float,
    step_hook: StepHook | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Run up to ``n_iter`` normalised power steps on the columns of ``vectors`` together.

    Only restarts that have not yet converged are updated (with ``tol > 0``), so converged
    columns cost nothing. A column whose image is exactly zero is a fixed point and is kept.

    Returns
    -------
    vectors : ndarray of shape (d, m)
    converged : ndarray of bool, shape (m,)
    steps : int
        Number of power steps taken by the slowest column.
    """
    vectors = vectors.copy()
    converged = np.zeros(vectors.shape[1], dtype=bool)
    active = np.arange(vectors.shape[1])
    steps = 0
    for steps in range(1, n_iter + 1):
        current = vectors[:, active]
        images = op.contract_pair(current)
        if step_hook is not None:
            images = step_hook(images, current)
        norms = np.linalg.norm(images, axis=0)
        updated = np.where(norms > 0, images / np.where(norms > 0, norms, 1.0), current)
        vectors[:, active] = updated
        if tol > 0:
            change = np.minimum(
                np.linalg.norm(updated - current, axis=0), np.linalg.norm(updated + current, axis=0)
            )
            newly = change <= tol
            converged[active[newly]] = True
            active = active[~newly]
            if active.size == 0:
                break
    return vectors, converged, steps
