"""Private implicit ALS: brute-force sensitivities of the released sums, the weighted item step, budget."""

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.models.recommend import private_ials
from dptensor.models.recommend.ials import solve_user_factors
from dptensor.models.recommend.private_ials import (
    ials_sensitivities,
    plan_private_ials,
    private_implicit_als,
    private_item_side_statistics,
)
from dptensor.privacy import BudgetExceededError, NoiseSource, compose
from dptensor.privacy.ledger import composed_epsilon

pytestmark = pytest.mark.filterwarnings("ignore::dptensor.privacy.PrivacyWarning")

ALPHA = 3.0
K = 2


class ExactSource(NoiseSource):
    """No noise (tests only)."""

    def __init__(self) -> None:
        super().__init__("numpy", np.random.default_rng(0), secure=False)

    def add_gaussian(self, values, sigma):
        return np.array(values, dtype=np.float64, copy=True)


def _released(row, factor, others, other_factors, clip=1.0):
    X = sp.csr_array(np.vstack([row, others]))
    factors = np.vstack([factor, other_factors])
    sigmas = {"gram": 1.0, "grams": 1.0, "targets": 1.0}
    stats = private_item_side_statistics(X, factors, alpha=ALPHA, sigmas=sigmas, source=ExactSource(),
                                         clip=clip)
    return {"gram": stats.user_gram, "grams": stats.grams, "targets": stats.targets}


@pytest.mark.parametrize("clip", [1.0, 0.07])
def test_released_sums_stay_within_their_sensitivities_and_reach_them(clip):
    rng = np.random.default_rng(0)
    others = np.array([[1, 1, 0, 0], [0, 1, 1, 1], [1, 0, 0, 1], [1, 1, 1, 1]], dtype=np.float64)
    other_factors = rng.normal(size=(4, K))
    rows = [np.array(r, dtype=np.float64) for r in itertools.product((0, 1), repeat=4)]
    # directions on the clip sphere, their opposites, factors of norm 5 and 1e6 (clipped), a tiny one, zero
    angles = np.linspace(0, 2 * np.pi, 8, endpoint=False)
    factors = [clip * np.array([math.cos(a), math.sin(a)]) for a in angles]
    factors += [np.array([3.0, 4.0]), np.array([-6e5, 8e5]), np.array([1e-12, 0.0]), np.zeros(K)]
    cases = [_released(r, f, others, other_factors, clip) for r in rows for f in factors]
    bound = ials_sensitivities(ALPHA, clip)
    assert bound == pytest.approx({"gram": math.sqrt(2) * clip**2, "grams": math.sqrt(2) * ALPHA * clip**2,
                                   "targets": 2 * (1 + ALPHA) * clip})
    for name in ("gram", "grams", "targets"):
        values = np.array([c[name].ravel() for c in cases])
        # the largest pairwise distance, by the Gram trick on the flattened releases
        squares = np.sum(values**2, axis=1)
        distances = np.sqrt(np.maximum(squares[:, None] + squares[None, :] - 2 * values @ values.T, 0.0))
        largest = distances.max()
        assert largest <= bound[name] * (1 + 1e-9), name
        assert largest >= bound[name] * (1 - 1e-6), name


def test_the_function_defaults_are_the_estimators_and_underflow_is_refused():
    from dptensor.models.recommend import RecommenderOptions

    assert private_ials.DEFAULT_CLIP == RecommenderOptions().private_ials_clip == 0.1
    assert ials_sensitivities(ALPHA) == ials_sensitivities(ALPHA, 0.1)
    plan = plan_private_ials(1.0, 1e-6, 2, alpha=ALPHA, n_factors=4)
    assert plan.guarantee.details["ials"]["clip"] == 0.1
    # alpha = 0: the A_i are exactly zero and not released; a sensitivity that underflows is refused
    assert set(private_ials.ials_sweeps(1, alpha=0.0, n_factors=2, regularization=1.0).sensitivities) == {
        "gram", "targets"}
    with pytest.raises(ValueError, match="sensitivity of 0 in floating point"):
        private_ials.ials_sweeps(1, alpha=1.0, n_factors=2, regularization=1.0, clip=1e-200)


def test_clipped_factors_never_exceed_the_radius():
    rng = np.random.default_rng(5)
    for clip in (1.0, 0.1, 0.3, 1e-3, 7.0):
        # adversarial rows: on the sphere by rounding, just outside, far outside, huge, inside
        rows = rng.normal(size=(4000, 16))
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        rows = np.vstack([rows * clip, rows * clip * (1 + 1e-15), rows * clip * 3, rows * 1e8,
                          rows * clip * 0.5])
        clipped = private_ials.clip_factors(rows, clip)
        assert np.linalg.norm(clipped, axis=1).max() <= clip
        inside = slice(4 * 4000, None)
        np.testing.assert_array_equal(clipped[inside], rows[inside])
        # directions are kept
        cos = np.sum(clipped * rows, axis=1) / np.linalg.norm(clipped, axis=1) / np.linalg.norm(rows, axis=1)
        assert cos.min() > 1 - 1e-12


def test_one_private_sweep_is_the_weighted_item_step():
    rng = np.random.default_rng(1)
    X = sp.csr_array((rng.random((60, 9)) < 0.3).astype(float))
    user_factors = rng.normal(size=(60, K))
    sigmas = {"gram": 1, "grams": 1, "targets": 1}
    stats = private_item_side_statistics(X, user_factors, alpha=ALPHA, sigmas=sigmas, source=ExactSource(),
                                         clip=1.0)
    dense = X.toarray()
    n = dense.sum(axis=1)
    w = np.divide(1.0, np.sqrt(n), out=np.zeros_like(n), where=n > 0)
    x = user_factors / np.maximum(np.linalg.norm(user_factors, axis=1, keepdims=True), 1.0)
    gram = (x * w[:, None]).T @ x
    np.testing.assert_allclose(stats.user_gram, gram, atol=1e-12)
    for i in range(9):
        users = dense[:, i] > 0
        a = ALPHA * (x[users] * w[users, None]).T @ x[users]
        b = (1 + ALPHA) * (w[users, None] * x[users]).sum(axis=0)
        np.testing.assert_allclose(stats.grams[i], a, atol=1e-12)
        np.testing.assert_allclose(stats.targets[i], b, atol=1e-12)


@pytest.mark.parametrize(("epsilon", "iterations"), [(1.0, 3), (4.0, 1)])
def test_plan_spends_the_asked_epsilon(epsilon, iterations):
    plan = plan_private_ials(epsilon, 1e-6, iterations, alpha=ALPHA, n_factors=8)
    g = plan.guarantee
    assert g.n_releases == 3 * iterations and g.neighbouring == "user" and g.holds
    ledger = composed_epsilon([g.dp_event], 1e-6, 1e-4)
    for spent in (g.epsilon_exact, compose(g, delta=1e-6).epsilon, ledger):
        assert epsilon - 1e-3 <= spent <= epsilon
    sens = ials_sensitivities(ALPHA)
    assert set(plan.sweep_multipliers) == {"gram", "grams", "targets"}
    for name, z in plan.sweep_multipliers.items():
        assert plan.sweep_sigmas[name] == pytest.approx(z * sens[name])
        assert g.details["ials"]["sensitivities"][name] == sens[name]
    assert plan.mu == pytest.approx(1 / g.noise_multiplier)


def test_charge_before_reading_and_refusal(monkeypatch):
    log = []

    class Ledger:
        def charge(self, guarantee, *, description=""):
            log.append("charge")
            raise BudgetExceededError("refused", path="", budget_epsilon=0.0, budget_delta=0.0, spent=0.0,
                                      requested=1.0, total=1.0)

    def watched(X, **kwargs):
        log.append("read")
        raise AssertionError("the data was read")

    monkeypatch.setattr(private_ials, "check_interactions", watched)
    with pytest.raises(BudgetExceededError):
        private_implicit_als(sp.csr_array((3, 3)), 2, epsilon=1.0, delta=1e-6, ledger=Ledger())
    assert log == ["charge"]


def test_without_noise_the_fit_recommends_like_the_data():
    # two groups of users with disjoint tastes: the private fit at a huge epsilon must keep them apart
    rng = np.random.default_rng(2)
    first = np.hstack([(rng.random((200, 5)) < 0.6), np.zeros((200, 5))])
    second = np.hstack([np.zeros((200, 5)), (rng.random((200, 5)) < 0.6)])
    X = sp.csr_array(np.vstack([first, second]).astype(float))
    fit = private_implicit_als(X, 4, epsilon=1e6, delta=1e-6, iterations=4, regularization=0.1, alpha=ALPHA,
                               random_state=0, noise="numpy")
    scores = solve_user_factors(X, fit.factors.item_factors, regularization=0.1, alpha=ALPHA) @ \
        fit.factors.item_factors.T
    assert np.mean(scores[:200, :5].mean(axis=1) > scores[:200, 5:].mean(axis=1)) > 0.95
    assert np.mean(scores[200:, 5:].mean(axis=1) > scores[200:, :5].mean(axis=1)) > 0.95
