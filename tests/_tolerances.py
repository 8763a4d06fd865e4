"""Tolerances of comparisons between fits whose sums were added in different orders (issue 26).

Threads, Dask blocks, BLAS thread counts and BLAS kernels change the rounding of every sum; a test
comparing such fits must allow what the method lets that rounding become, derived here, and no more.
"""

import numpy as np


def spectral_fit_tolerances(model) -> tuple[float, float]:
    """How far two fits whose sums differ only by rounding may differ: bounds from the method.

    Both follow the same path (the whitening's eigenvector signs are fixed by a convention, so the
    rounding cannot negate a slice of the whitened tensor), but the power iteration may stop one
    step apart: each ``v_j`` then moves by at most ``tol`` (its stopping test). ``lambda = T(v,v,v)``
    moves by at most ``3 ||T||_F tol``, ``mu = c lambda B v`` (``c = (alpha0+2)/2``,
    ``B = (W^T)^+``) by ``c (|d lambda| ||B|| + lambda ||B|| tol)`` in the Euclidean norm, which the
    (1-Lipschitz) simplex projection keeps, and ``alpha ~ lambda^-2`` by ``2 |d lambda| / lambda``
    relatively. A factor 2 covers the rounding of the sums themselves (~1e-15 here).

    Returns ``(components_atol, alpha_rtol)`` for a fitted :class:`~dptensor.models.SpectralLDA`
    with dense or eigsh whitening (the randomised one adds single-precision range finding).
    """
    tol, c = model.tol, (model.alpha0 + 2.0) / 2.0
    norm_t = np.linalg.norm(model.whitened_tensor_)
    norm_b = np.linalg.norm(model.whitening_.inverse, 2)
    lam = model.decomposition_.weights
    d_lambda = 3.0 * norm_t * tol
    components_atol = 2.0 * c * norm_b * (d_lambda + lam.max() * tol)
    alpha_rtol = 2.0 * 2.0 * d_lambda / lam.min()
    return components_atol, alpha_rtol
