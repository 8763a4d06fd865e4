"""Post-processing of a Gaussian release: empirical-Bayes posterior means of non-negative values.

A private release ``x_j = theta_j + N(0, s^2)`` of many non-negative numbers (word frequencies,
counts) with a public noise level ``s`` is often used entry by entry. ``max(x_j, 0)`` (or the
projection onto the simplex) keeps the noise of the many small ``theta_j`` and zeroes words that
are merely rare. Empirical Bayes does better without any assumption on the ``theta_j``: estimate
their distribution ``g`` from the release itself by maximum marginal likelihood over a grid of
support points (the nonparametric maximum-likelihood estimator of Kiefer & Wolfowitz 1956, in the
EM form of Jiang & Zhang, *General maximum likelihood empirical Bayes estimation of normal means*,
Ann. Statist. 2009, with the grid and binning of Koenker & Mizera, JASA 2014), then report each
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

from dptensor._validation import check_positive_int

#: Bins of the released values for the EM steps (each bin's count weights its likelihood row).
N_BINS = 2000
#: Positive support points of the prior, log-spaced from ``1e-3 s`` to the largest value.
N_SUPPORT = 120
#: EM steps for the prior's weights (the marginal likelihood's increase is negligible by then).
N_EM_STEPS = 300


def nonnegative_posterior_means(
    values: np.ndarray, noise_std: float, *, n_support: int = N_SUPPORT, n_iter: int = N_EM_STEPS
) -> np.ndarray:
    """Empirical-Bayes posterior means of non-negative ``theta`` from ``values = theta + N(0, s^2)``.

    The prior is a distribution on ``{0} and n_support`` log-spaced points from ``1e-3 s`` to
    ``max(values)``, fitted to ``values`` by EM on the marginal likelihood (module docstring); the
    values are binned into :data:`N_BINS` bins for the EM steps (exact posterior means follow
    for each value).

    Parameters
    ----------
    values : ndarray of shape (n,)
        The released values (any real numbers).
    noise_std : float
        The noise's standard deviation ``s`` (public). ``0``: the values are returned clipped at 0.
    n_support : int, default 120
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
    n_support = check_positive_int(n_support, "n_support", minimum=2)
    n_iter = check_positive_int(n_iter, "n_iter")
    if s == 0 or x.size == 0:
        return np.maximum(x, 0.0)
    top = max(float(x.max()), 2.0 * s)
    support = np.concatenate([[0.0], np.geomspace(1e-3 * s, top, n_support)])
    edges = np.linspace(float(x.min()), float(x.max()) + 1e-12 * max(1.0, abs(top)), N_BINS + 1)
    counts, _ = np.histogram(x, bins=edges)
    centres = 0.5 * (edges[:-1] + edges[1:])[counts > 0]
    counts = counts[counts > 0].astype(np.float64)
    log_lik = -0.5 * ((centres[:, None] - support[None, :]) / s) ** 2
    lik = np.exp(log_lik - log_lik.max(axis=1, keepdims=True))  # rows rescaled: EM is invariant
    weights = np.full(support.size, 1.0 / support.size)
    for _ in range(n_iter):
        posterior = lik * weights
        posterior /= posterior.sum(axis=1, keepdims=True)
        weights = counts @ posterior / counts.sum()
    log_weights = np.log(np.maximum(weights, np.finfo(np.float64).tiny))
    out = np.empty_like(x)
    for start in range(0, x.size, 8192):  # exact posterior means, O(chunk x support) memory
        chunk = x[start : start + 8192]
        log_post = log_weights - 0.5 * ((chunk[:, None] - support[None, :]) / s) ** 2
        post = np.exp(log_post - log_post.max(axis=1, keepdims=True))
        out[start : start + 8192] = post @ support / post.sum(axis=1)
    return out


__all__ = ["nonnegative_posterior_means"]
