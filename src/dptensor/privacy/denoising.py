"""Post-processing of a Gaussian release: empirical-Bayes posterior means of non-negative values.

A private release ``x_j = theta_j + N(0, s^2)`` of many non-negative numbers (word frequencies,
counts) with a public noise level ``s`` is often used entry by entry. ``max(x_j, 0)`` (or the
projection onto the simplex) keeps the noise of the many small ``theta_j`` and zeroes words that
are merely rare. Empirical Bayes does better without any assumption on the ``theta_j``: estimate
their distribution ``g`` from the release itself by maximum marginal likelihood over a grid of
support points (the nonparametric maximum-likelihood estimator of Kiefer & Wolfowitz 1956, in the
EM form of Jiang & Zhang, *General maximum likelihood empirical Bayes estimation of normal means*,
Ann. Statist. 2009, with the grid and binning of Koenker & Mizera, JASA 2014; the grid's step is a
quarter of ``s`` and values far above the noise pass through), then report each
posterior mean ``E[theta_j | x_j] = sum_g g(t) t phi((x_j - t)/s) / sum_g g(t) phi((x_j - t)/s)``.

The estimate reads only the released values and the public ``s``: post-processing, with no
privacy cost. The posterior mean is non-decreasing in ``x_j`` (Tweedie: its derivative is a
posterior variance over ``s^2``), so the order of the released values is kept.

On Debian package descriptions (2000 words, word frequencies released with noise of standard
deviation ``s = 1.1e-4``, about a fifth of an average word's frequency) the held-out perplexity of
the released unigram distribution is 414 with the posterior means and 428 with ``max(x, 0)`` plus
half a noise standard deviation, against 396 without noise (docs/lda.md).
"""

from __future__ import annotations

import numpy as np

from dptensor._errstate import underflow_ignored
from dptensor._validation import check_positive_int

#: Values above this many noise standard deviations are returned as they are: there the posterior
#: mean under any prior that is smooth on the scale of ``s`` is the value itself.
PASS_THROUGH = 6.0
#: The prior is fitted to the values below this many noise standard deviations (the others only
#: matter to it through its tail, and the posterior means below :data:`PASS_THROUGH` barely see it).
FIT_LIMIT = 10.0
#: Values below ``-FLOOR_LIMIT * s`` are treated as that value (their posterior is all at zero's side).
FLOOR_LIMIT = 8.0
#: Width of the bins of the fitted values and spacing of the prior's support above ``s``, in ``s``.
GRID_STEP = 0.25
#: EM steps for the prior's weights (the marginal likelihood's increase is negligible by then).
N_EM_STEPS = 300


@underflow_ignored  # likelihoods far out in the tails are zero, by design
def nonnegative_posterior_means(
    values: np.ndarray, noise_std: float, *, n_iter: int = N_EM_STEPS
) -> np.ndarray:
    """Empirical-Bayes posterior means of non-negative ``theta`` from ``values = theta + N(0, s^2)``.

    In units of ``s``: the prior lives on ``0``, 40 log-spaced points from ``1e-3`` to ``1`` and a
    grid of step :data:`GRID_STEP` from ``1`` to ``FIT_LIMIT + 4``; it is fitted by EM on the
    marginal likelihood of the values below :data:`FIT_LIMIT` (binned at step :data:`GRID_STEP`,
    those below ``-FLOOR_LIMIT`` set to it). Values above :data:`PASS_THROUGH` are returned as
    they are (at least the posterior mean at the threshold, so that the result stays
    non-decreasing); the others get their exact posterior mean.

    Parameters
    ----------
    values : ndarray of shape (n,)
        The released values (any real numbers).
    noise_std : float
        The noise's standard deviation ``s`` (public). ``0``: the values are returned clipped at 0.
    n_iter : int, default 300

    Returns
    -------
    ndarray of shape (n,)
        Posterior means, non-negative and non-decreasing in ``values``.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or not np.all(np.isfinite(x)):
        raise ValueError(f"values must be a finite 1-d array, got shape {x.shape}")
    s = float(noise_std)
    if not (s >= 0 and np.isfinite(s)):
        raise ValueError(f"noise_std must be finite and >= 0, got {noise_std!r}")
    n_iter = check_positive_int(n_iter, "n_iter")
    if s == 0 or x.size == 0:
        return np.maximum(x, 0.0)
    low = x <= PASS_THROUGH * s
    near = x <= FIT_LIMIT * s
    if not near.any():  # every value far above the noise
        return x.copy()
    # in units of s, only where |x| is within a few s (no overflow whatever the values)
    fitted = np.maximum(x[near], -FLOOR_LIMIT * s) / s
    support = np.concatenate([[0.0], np.geomspace(1e-3, 1.0, 40, endpoint=False),
                              np.arange(1.0, FIT_LIMIT + 4.0 + GRID_STEP / 2, GRID_STEP)])  # fmt: skip
    n_bins = max(1, int(np.ceil((FIT_LIMIT - float(fitted.min())) / GRID_STEP)))
    counts, edges = np.histogram(fitted, bins=n_bins, range=(float(fitted.min()), FIT_LIMIT))
    centres = 0.5 * (edges[:-1] + edges[1:])[counts > 0]
    counts = counts[counts > 0].astype(np.float64)
    log_lik = -0.5 * (centres[:, None] - support[None, :]) ** 2
    lik = np.exp(log_lik - log_lik.max(axis=1, keepdims=True))  # rows rescaled: EM is invariant
    weights = np.full(support.size, 1.0 / support.size)
    for _ in range(n_iter):
        posterior = lik * weights
        posterior /= posterior.sum(axis=1, keepdims=True)
        weights = counts @ posterior / counts.sum()
    log_weights = np.log(np.maximum(weights, np.finfo(np.float64).tiny))

    def posterior_mean(points: np.ndarray) -> np.ndarray:
        log_post = log_weights - 0.5 * (points[:, None] - support[None, :]) ** 2
        post = np.exp(log_post - log_post.max(axis=1, keepdims=True))
        return post @ support / post.sum(axis=1)

    out = np.empty_like(x)
    at_threshold = float(posterior_mean(np.array([PASS_THROUGH]))[0]) * s
    out[~low] = np.maximum(x[~low], at_threshold)
    index = np.flatnonzero(low)
    for start in range(0, index.size, 8192):  # O(chunk x support) memory
        chunk = index[start : start + 8192]
        out[chunk] = posterior_mean(np.maximum(x[chunk], -FLOOR_LIMIT * s) / s) * s
    return out


__all__ = ["nonnegative_posterior_means"]
