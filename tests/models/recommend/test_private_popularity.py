"""Private popularity in two rounds: the recount's sensitivity by brute force, the candidates, the ranking."""

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.models.recommend import PrivateRecommender, RecommenderOptions
from dptensor.models.recommend.private_popularity import candidate_items, popularity_ranking, private_recounts
from dptensor.models.recommend.release_plan import SENSITIVITY, recommender_guarantee
from dptensor.privacy import NoiseSource

pytestmark = pytest.mark.filterwarnings("ignore::dptensor.privacy.PrivacyWarning")

OTHERS = np.array([[1, 1, 0, 0, 1], [0, 1, 1, 1, 0], [1, 0, 0, 1, 1], [1, 1, 1, 1, 1]], dtype=np.float64)


class ExactSource(NoiseSource):
    """No noise (tests only)."""

    def __init__(self) -> None:
        super().__init__("numpy", np.random.default_rng(0), secure=False)

    def add_gaussian(self, values, sigma):
        return np.array(values, dtype=np.float64, copy=True)


def _recount(row: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    X = sp.csr_array(np.vstack([row, OTHERS]))
    return private_recounts(X, candidates, sigma=1.0, source=ExactSource())


@pytest.mark.parametrize("candidates", [[0, 1], [1, 3, 4], [0, 1, 2, 3, 4], [2]])
def test_recount_sensitivity_is_sqrt2_and_attained(candidates):
    # user 0's row replaced by every one of the 32 rows of 5 items (empty, single items, every item),
    # the candidates fixed (they are a function of the first release, the same in both worlds)
    candidates = np.array(candidates)
    values = [_recount(np.array(r, dtype=float), candidates) for r in itertools.product((0, 1), repeat=5)]
    change = max(float(np.linalg.norm(a - b)) for a, b in itertools.combinations(values, 2))
    assert change <= SENSITIVITY + 1e-12
    # two different single candidates reach sqrt(2); with one candidate only empty against it, 1
    assert change >= (SENSITIVITY if candidates.size > 1 else 1.0) - 1e-9


def test_recount_weighs_each_row_anew_on_the_candidates():
    rng = np.random.default_rng(3)
    dense = (rng.random((40, 9)) < 0.4).astype(float)
    dense[0] = 0.0  # an empty row
    dense[1] = 0.0
    dense[1, [0, 8]] = 1.0  # a row with no candidate
    candidates = np.array([2, 3, 5, 7])
    got = private_recounts(sp.csr_array(dense), candidates, sigma=1.0, source=ExactSource())
    cut = dense[:, candidates]
    n = cut.sum(axis=1)
    expected = (cut / np.where(n > 0, np.sqrt(n), 1.0)[:, None]).sum(axis=0)
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_candidates_are_the_largest_counts_ties_to_the_smaller_item():
    counts = np.array([3.0, 5.0, 5.0, -1.0, 4.0, 5.0])
    np.testing.assert_array_equal(candidate_items(counts, 2), [1, 2])
    np.testing.assert_array_equal(candidate_items(counts, 4), [1, 2, 4, 5])
    np.testing.assert_array_equal(candidate_items(counts, 9), np.arange(6))
    with pytest.raises(ValueError, match="n_candidates"):
        candidate_items(counts, 0)


def test_ranking_puts_the_candidates_first_by_their_recounts():
    counts = np.array([9.0, 1.0, 7.0, 8.0, 2.0])
    candidates = np.array([0, 2, 3])
    recounts = np.array([-4.0, 6.0, 1.0])  # noisy recounts may fall below every count
    scores = popularity_ranking(counts, candidates, recounts, sigma_counts=1.0, sigma_recount=1.0)
    np.testing.assert_array_equal(np.argsort(-scores, kind="stable"), [2, 3, 0, 4, 1])
    # every item a candidate: the inverse-variance mean of both releases
    scores = popularity_ranking(counts[:3], np.arange(3), np.array([1.0, 2.0, 3.0]), sigma_counts=1.0,
                                sigma_recount=2.0)
    np.testing.assert_allclose(scores, (counts[:3] + np.array([1.0, 2.0, 3.0]) / 4) / 1.25)


def test_private_popularity_fit_recounts_the_top_of_its_counts():
    rng = np.random.default_rng(1)
    dense = (rng.random((300, 12)) < np.linspace(0.05, 0.6, 12)).astype(float)
    options = RecommenderOptions(recount_items=4)
    model = PrivateRecommender(method="popularity", noise=ExactSource(), options=options)
    model.fit(sp.csr_array(dense))
    n = dense.sum(axis=1)
    unit = (dense / np.sqrt(np.maximum(n, 1))[:, None]).sum(axis=0)
    np.testing.assert_allclose(model.popularity_, unit, atol=1e-10)
    np.testing.assert_array_equal(model.candidates_, [8, 9, 10, 11])  # the most chosen items
    np.testing.assert_allclose(model.recounts_, private_recounts(
        sp.csr_array(dense), model.candidates_, sigma=1.0, source=ExactSource()), atol=1e-12)
    # the lists: the candidates by their recounts, then the rest by the counts
    order = np.argsort(-model.item_side_.popularity, kind="stable")
    expected = list(model.candidates_[np.argsort(-model.recounts_, kind="stable")])
    expected += [i for i in np.argsort(-unit, kind="stable") if i not in model.candidates_]
    np.testing.assert_array_equal(order, expected)
    new = model.recommend_for(sp.csr_array(np.eye(1, 12, 11)), n=3)
    assert new.items[0].tolist() == [i for i in expected if i != 11][:3]
    # the budget: counts 0.25 and recount 0.75 of mu^2, composed into the epsilon asked for
    g = model.guarantee_
    assert g.details["releases"] == ["counts", "recount"] and g.n_releases == 2
    z = g.details["noise_multipliers"]
    assert (z["counts"] / z["recount"]) ** 2 == pytest.approx(3.0)
    plan = recommender_guarantee(("counts", "recount"), 1.0, 1e-6, shares={"counts": 0.25, "recount": 0.75})
    assert g.details["sigmas"] == pytest.approx(plan.guarantee.details["sigmas"])
    assert 1.0 - 1e-3 <= plan.guarantee.epsilon_exact <= 1.0 and math.isclose(g.delta, 1e-6)
    assert not g.holds  # the test's exact source is not private, and the guarantee says so


def test_a_recount_needs_the_counts_and_unit_rows():
    with pytest.raises(ValueError, match="recount.*plan both"):
        recommender_guarantee(("recount",), 1.0, 1e-6)
    with pytest.raises(ValueError, match="recount.*unit"):
        recommender_guarantee(("counts", "recount"), 1.0, 1e-6, weighting="capped", max_items_per_user=3)
    with pytest.raises(ValueError, match="recount_share"):
        PrivateRecommender(method="popularity", options=RecommenderOptions(recount_share=1.0)).fit(
            sp.csr_array(np.eye(3)))
