"""Simultaneous tensor power iteration (Wang & Lu 2017), the decomposition used by DeCarolis et al.

*Tensor Decomposition via Simultaneous Power Iteration* (Po-An Wang and Chi-Jen Lu, ICML 2017)
runs the power update on all ``k`` vectors together and re-orthonormalises them with a QR
factorisation after every step -- orthogonal iteration lifted from matrices to tensors:

1. draw ``V_0`` with orthonormal columns (``d x k``);
2. ``Y_t = [T(I, v_1, v_1), ..., T(I, v_k, v_k)]`` for the columns ``v_j`` of ``V_{t-1}``;
3. ``V_t = Q`` from ``Y_t = Q R`` (signs chosen so that ``diag(R) >= 0``);
4. stop when every column has stopped turning, then ``lambda_j = T(v_j, v_j, v_j)``.

The stopping test is on the distance ``||v_j^t - v_j^{t-1}||`` (sign-invariant, as in
:func:`~dptensor.decomposition.power_method.power_method`), not on ``1 - |<v_j^t, v_j^{t-1}>|``,
which is about half its square: a test ``1 - |cos| <= 1e-10`` stops while the columns still turn
by ``1.4e-5`` per step, so two runs whose inputs differ only by rounding (another summation order)
could stop one step apart and differ by that much. With the distance test the iteration stops at
the fixed point to about ``tol`` (the iteration converges fast near an orthogonally decomposable
tensor), and runs that differ only by rounding agree to about ``tol`` whichever step they stop at.

For an orthogonally decomposable ``T`` (such as a whitened LDA moment, Section 4 step (4) of
DeCarolis et al.), every column converges to a distinct eigenvector. ``n_restarts`` independent
starts run as one batch (a single operator application on ``d x (L k)`` vectors and a batched
QR); the start with the smallest residual ``||T - sum_j lambda_j v_j^{(x)3}||_F`` (dense input) or
the largest ``sum_j lambda_j^2`` (implicit input, equivalent for orthonormal ``V``) is kept.
"""

from __future__ import annotations

import numpy as np

from dptensor._validation import (
    RandomStateLike,
    check_positive_int,
    check_random_state,
    check_rank,
    check_real,
)
from dptensor.decomposition.power_method import PowerMethodResult
from dptensor.tensor.operators import DenseTensor, SymmetricTensor, as_tensor


def simultaneous_power_method(
    tensor: np.ndarray | SymmetricTensor,
    rank: int,
    *,
    n_restarts: int = 5,
    n_iter: int = 200,
    tol: float = 1e-10,
    random_state: RandomStateLike = None,
) -> PowerMethodResult:
    """Decompose a symmetric tensor by simultaneous power iteration with QR (Wang & Lu 2017).

    Parameters
    ----------
    tensor : ndarray of shape (d, d, d) or SymmetricTensor
    rank : int
        Number of components ``k <= d`` iterated together.
    n_restarts : int, default 5
        Independent orthonormal starts, iterated as one batch.
    n_iter : int, default 200
        Maximum number of steps.
    tol : float, default 1e-10
        Stop once ``max_j min(||v_j^t - v_j^{t-1}||, ||v_j^t + v_j^{t-1}||) <= tol`` for every
        start (``tol=0`` runs exactly ``n_iter`` steps).
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    PowerMethodResult
        Non-negative weights in descending order and unit factors (a column with
        ``T(v, v, v) < 0`` is reported as ``(-lambda, -v)``). ``n_iter`` and ``converged``
        describe the selected start (the same for every component).
    """
    op = as_tensor(tensor)
    d = op.dim
    rank = check_rank(rank, d)
    n_restarts = check_positive_int(n_restarts, "n_restarts")
    n_iter = check_positive_int(n_iter, "n_iter")
    tol = check_real(tol, "tol", strict=False)
    rng = check_random_state(random_state)

    # Step 1: L orthonormal d x k starts, stored as an (L, d, k) batch.
    V, _ = np.linalg.qr(rng.standard_normal((n_restarts, d, rank)))
    steps = 0
    done = False
    for steps in range(1, n_iter + 1):
        # Step 2: one operator application on all L*k columns.
        flat = V.transpose(1, 0, 2).reshape(d, n_restarts * rank)
        images = op.contract_pair(flat).reshape(d, n_restarts, rank).transpose(1, 0, 2)
        # Step 3: batched QR with a sign convention that makes the iteration continuous.
        Q, R = np.linalg.qr(images)
        signs = np.sign(np.diagonal(R, axis1=1, axis2=2))
        signs[signs == 0] = 1.0
        Q = Q * signs[:, None, :]
        change = np.minimum(np.linalg.norm(Q - V, axis=1), np.linalg.norm(Q + V, axis=1))
        V = Q
        if tol > 0 and float(np.max(change)) <= tol:
            done = True
            break

    # Step 4: eigenvalues, and the best start.
    flat = V.transpose(1, 0, 2).reshape(d, n_restarts * rank)
    values = np.asarray(op.contract_triple(flat)).reshape(n_restarts, rank)
    if isinstance(op, DenseTensor):
        dense = op.array
        residual = [
            np.linalg.norm(dense - np.einsum("r,ir,jr,kr->ijk", values[s], V[s], V[s], V[s]))
            for s in range(n_restarts)
        ]
        best = int(np.argmin(residual))
    else:
        best = int(np.argmax(np.sum(values**2, axis=1)))
    weights = values[best]
    factors = V[best] * np.where(weights < 0, -1.0, 1.0)
    weights = np.abs(weights)
    order = np.argsort(-weights, kind="stable")
    return PowerMethodResult(
        weights=weights[order],
        factors=factors[:, order],
        n_iter=np.full(rank, steps),
        converged=np.full(rank, done),
        extraction_order=order,
    )
