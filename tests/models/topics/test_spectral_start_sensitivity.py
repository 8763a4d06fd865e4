"""The spectral start of user-level DP-ALS: the users' covariance release (issue 38).

One user's ratings replaced moves ``sum_u x_u x_u^T`` by ``||a a^T - b b^T||_F <= sqrt(2) C_s^2``:
checked by brute force over every rating set of one user on a small grid (values, absences,
duplicates over days, extremes), shown to be nearly attained (a claim of ``C_s^2`` would fail),
and audited (an honest release passes, one with a tenth of the noise is caught).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse

from dptensor.models.completion import _dp_als as dpals
from dptensor.models.completion._als import initial_parameters
from dptensor.privacy import insecure_test_noise
from dptensor.privacy.audit import epsilon_lower_bound
from dptensor.privacy.calibration import gaussian_sigma_analytic
from dptensor.privacy.noise import resolve_noise

SHAPE = (4, 4, 2)
LOW, HIGH = 1.0, 5.0
MAX_RATINGS = 2
#: Other users' ratings, fixed: (user, item, day, value).
OTHERS = [(1, 0, 0, 4.0), (1, 1, 0, 2.0), (2, 2, 1, 5.0), (2, 3, 0, 1.0), (2, 0, 0, 3.0), (3, 1, 1, 5.0)]


def _fit(ratings: list, seed: int = 0) -> dpals.DpAlsFit:
    rows = OTHERS + ratings
    indices = np.array([r[:3] for r in rows], dtype=np.int64).reshape(-1, 3)
    values = np.array([r[3] for r in rows], dtype=float)
    settings = dpals.DpAlsSettings("user", (LOW, HIGH), 10.0, 5.0, 10.0, (2,), "biases", MAX_RATINGS)
    params = initial_parameters("cp", SHAPE, (2, 2, 2), "biases", (2,), 0.5, np.random.default_rng(0))
    fit = dpals.DpAlsFit(params, indices, values, SHAPE, settings, resolve_noise(insecure_test_noise(seed)))
    fit.params.mean = 3.2  # a released mean: public
    return fit


def _user_zero_rating_sets() -> list[list]:
    """Every set of user 0's ratings with each item absent or rated 1, 2.5 or 5 on day 0, and extremes."""
    sets = []
    for cells in itertools.product([None, 1.0, 2.5, 5.0], repeat=SHAPE[1]):
        sets.append([(0, item, 0, v) for item, v in enumerate(cells) if v is not None])
    every_day = [(0, item, day, HIGH if item % 2 else LOW) for item in range(SHAPE[1]) for day in range(2)]
    sets += [
        every_day,  # duplicates over days: summed per item before the bound
        [(0, item, day, 1e308) for item in range(SHAPE[1]) for day in range(2)],  # beyond the range
        [(0, item, 0, -1e308 if item < 2 else 1e308) for item in range(SHAPE[1])],
        [(0, 3, 1, 5.0)],  # one rating: a zero vector once the user's own mean is removed
    ]
    return sets


def test_brute_force_replace_one_user_sensitivity():
    bound = math.sqrt(MAX_RATINGS) * (HIGH - LOW) / 4.0
    fits = [_fit(ratings) for ratings in _user_zero_rating_sets()]
    assert math.isclose(dpals.spectrum_bound(fits[0]), bound)
    covariances = np.array([dpals.user_item_covariance(f, bound).ravel() for f in fits])
    assert np.all(np.isfinite(covariances))
    square = covariances.reshape(-1, SHAPE[1], SHAPE[1])
    np.testing.assert_allclose(square, square.transpose(0, 2, 1))
    squared = np.einsum("ij,ij->i", covariances, covariances)
    gaps = squared[:, None] + squared[None, :] - 2.0 * covariances @ covariances.T
    largest = math.sqrt(max(float(gaps.max()), 0.0))
    assert largest <= math.sqrt(2.0) * bound**2  # the rows' rounding margin leaves room for the sums'
    assert largest > 1.2 * bound**2  # a claim of C_s^2 (the one-term norm) would fail


def _exact_squared_norms(rows) -> list[Fraction]:
    rows = rows.tocsr()
    return [sum((Fraction(float(v)) ** 2 for v in rows.data[a:b]), Fraction(0))
            for a, b in zip(rows.indptr[:-1], rows.indptr[1:], strict=True)]


def test_bounded_rows_never_exceed_the_bound_by_an_ulp():
    """Adversarial rows (issue 53): norms a few ulps above ``C_s``, at ``C_s`` exactly and below, of
    1 to 3000 entries and of very different magnitudes. Scaling to a computed norm of ``C_s`` leaves
    some of them above it in exact arithmetic; :func:`bounded_rows` leaves none."""
    rng = np.random.default_rng(53)
    bound = math.sqrt(MAX_RATINGS) * (HIGH - LOW) / 4.0
    rows = []
    for length in [1, 2, 3, 7, 50, 400, 3000]:
        for _ in range(40):
            v = rng.standard_normal(length) * rng.choice([1e-3, 1.0, 1e3], size=length)
            v *= bound / np.linalg.norm(v)
            rows.append(v * (1.0 + rng.integers(-2, 6) * 2.0**-52))
    width = max(len(v) for v in rows)
    matrix = scipy.sparse.csr_matrix(
        (np.concatenate(rows), np.concatenate([np.arange(len(v)) for v in rows]),
         np.concatenate([[0], np.cumsum([len(v) for v in rows])])), shape=(len(rows), width))
    limit = Fraction(bound) ** 2
    naive_norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
    naive = scipy.sparse.diags(np.minimum(1.0, bound / naive_norms)) @ matrix
    assert max(_exact_squared_norms(naive)) > limit  # the set is adversarial: the plain scaling fails
    bounded = dpals.bounded_rows(matrix, bound)
    assert all(norm <= limit for norm in _exact_squared_norms(bounded))
    # rows already inside the margin are left as they are, the others lose at most a 1e-6 of their norm
    norms = np.sqrt(np.asarray(bounded.multiply(bounded).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms, np.minimum(naive_norms, bound), rtol=1e-6)


def test_each_user_vector_is_bounded_and_centred():
    """One user alone: the term is ``x x^T`` with ``||x|| <= C_s``, ``x`` summed over days and centred."""
    bound = math.sqrt(MAX_RATINGS) * (HIGH - LOW) / 4.0
    ratings = [(0, 0, 0, 5.0), (0, 0, 1, 5.0), (0, 2, 0, 2.0)]
    with_user = dpals.user_item_covariance(_fit(ratings), bound)
    without = dpals.user_item_covariance(_fit([]), bound)
    residuals = np.clip(np.array([5.0, 5.0, 2.0]) - 3.2, -2, 2)
    residuals -= residuals.mean()
    x = np.zeros(SHAPE[1])
    np.add.at(x, [0, 0, 2], residuals)
    x *= min(1.0, bound / np.linalg.norm(x))
    np.testing.assert_allclose(with_user - without, np.outer(x, x), atol=1e-12)


def test_the_release_adds_symmetric_noise_of_the_stated_std():
    fit = _fit([(0, 1, 0, 5.0), (0, 2, 0, 1.0)])
    bound = dpals.spectrum_bound(fit)
    exact = dpals.user_item_covariance(fit, bound)
    noisy = dpals.covariance_release(fit, 3.0)
    np.testing.assert_allclose(noisy, noisy.T)
    assert fit.noise_stds == [pytest.approx(3.0 * math.sqrt(2.0) * bound**2)]
    assert not np.allclose(noisy, exact)
    upper = np.triu_indices(SHAPE[1])
    draws = np.array([dpals.covariance_release(_fit([], seed), 1.0)[upper] for seed in range(400)])
    exact_empty = dpals.user_item_covariance(_fit([]), bound)[upper]
    assert np.std(draws - exact_empty) == pytest.approx(math.sqrt(2.0) * bound**2, rel=0.1)


def _audit(multiplier_factor: float, runs: int = 1000) -> float:
    """epsilon lower bound of the release from two data sets differing in user 0's ratings."""
    first = [(0, 0, 0, 5.0), (0, 1, 0, 1.0)]  # orthogonal vectors of norm C_s: ~sqrt(2) C_s^2 apart
    second = [(0, 2, 0, 5.0), (0, 3, 0, 1.0)]
    bound = dpals.spectrum_bound(_fit(first))
    upper = np.triu_indices(SHAPE[1])
    difference = dpals.user_item_covariance(_fit(second), bound)
    difference -= dpals.user_item_covariance(_fit(first), bound)
    direction = difference[upper]
    direction /= np.linalg.norm(direction)
    z = gaussian_sigma_analytic(1.0, 1e-5) * multiplier_factor
    samples = []
    for seed, ratings in ((0, first), (1, second)):
        fit = _fit(ratings, seed)
        releases = [dpals.covariance_release(fit, z)[upper] for _ in range(runs)]
        samples.append(np.array([float(direction @ release) for release in releases]))
    return epsilon_lower_bound(samples[0], samples[1], 1e-5)


def test_audit_the_release_and_catch_an_under_noised_variant():
    assert _audit(1.0) <= 1.0
    assert _audit(0.1) > 1.5
