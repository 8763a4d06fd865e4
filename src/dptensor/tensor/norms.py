"""Spectral (operator) norm of a symmetric third-order tensor."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dptensor._validation import RandomStateLike, check_positive_int, check_random_state
from dptensor.tensor.operators import SymmetricTensor, as_tensor
from dptensor.tensor.sphere import random_unit_vectors


@dataclass(frozen=True)
class OperatorNormResult:
    """Estimate of ``||T||_op = max_{||u||=1} |T(u, u, u)|``.

    Attributes
    ----------
    norm : float
        ``|T(u, u, u)|`` at the best vector found: a lower bound on the operator norm.
    vector : ndarray of shape (d,)
        The maximising unit vector (sign chosen so that ``T(u, u, u) >= 0``).
    n_iter : int
        Iterations run.
    """

    norm: float
    vector: np.ndarray
    n_iter: int


def operator_norm(
    tensor: np.ndarray | SymmetricTensor,
    *,
    n_starts: int = 20,
    n_iter: int = 200,
    tol: float = 1e-10,
    shift: float | None = None,
    random_state: RandomStateLike = None,
) -> OperatorNormResult:
    """Estimate the operator norm of a symmetric tensor by the shifted power method.

    Implements SS-HOPM (Kolda & Mayo, *Shifted power method for computing tensor eigenpairs*,
    SIAM J. Matrix Anal. Appl. 32(4), 2011), the routine behind the MATLAB Tensor Toolbox's
    ``eig_sshopm`` that Wang & Anandkumar (2016, Appendix A) used to scale noise tensors:
    ``u <- (T(I, u, u) + alpha u) / ||T(I, u, u) + alpha u||``, run from ``n_starts`` random
    starts at once. For a symmetric tensor of odd order ``||T||_op = max_u |T(u,u,u)|``
    (Banach), and since ``T(-u,-u,-u) = -T(u,u,u)`` it suffices to maximise ``T(u,u,u)``.

    Parameters
    ----------
    tensor : ndarray of shape (d, d, d) or SymmetricTensor
    n_starts : int, default 20
        Random starting vectors, uniform on the sphere, iterated together.
    n_iter : int, default 200
        Maximum number of iterations.
    tol : float, default 1e-10
        Stop when no start's value ``T(u,u,u)`` changes by more than ``tol`` (relative).
    shift : float, optional
        The shift ``alpha``. Kolda & Mayo prove monotone convergence for
        ``alpha > 2 ||T||_op`` (order 3). By default it is set at each iteration to
        ``2 max_j ||T(I, u_j, u_j)||``, which tracks that bound from below.
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    OperatorNormResult
        The best value is a certified *lower* bound on ``||T||_op``.
    """
    op = as_tensor(tensor)
    n_starts = check_positive_int(n_starts, "n_starts")
    n_iter = check_positive_int(n_iter, "n_iter")
    rng = check_random_state(random_state)
    vectors = random_unit_vectors(op.dim, n_starts, rng)
    values = op.contract_triple(vectors)
    iteration = 0
    for iteration in range(1, n_iter + 1):
        image = op.contract_pair(vectors)
        alpha = 2.0 * float(np.max(np.linalg.norm(image, axis=0))) if shift is None else shift
        image += alpha * vectors
        vectors = image / np.linalg.norm(image, axis=0)
        new_values = op.contract_triple(vectors)
        change = np.max(np.abs(new_values - values)) / max(np.max(np.abs(new_values)), 1e-300)
        values = new_values
        if change <= tol:
            break
    best = int(np.argmax(values))
    return OperatorNormResult(norm=float(abs(values[best])), vector=vectors[:, best], n_iter=iteration)
