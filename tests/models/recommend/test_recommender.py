"""``Recommender`` and ``PrivateRecommender``: ground truth, fold-in, options, joint DP, the budget.

Ground truth: users in planted taste groups choose most of their items from their group's items;
every personalised method must find a user's group far more often than popularity can. Joint DP:
a training user's list equals the list folded in from that user's row alone, so it depends on
nothing but their row and the release. The budget: the guarantee is charged before the data is
read and a refused charge leaves the model unfitted.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from dptensor.models.recommend import PrivateRecommender, Recommender, RecommenderOptions
from dptensor.privacy import BudgetLedger, insecure_test_noise
from dptensor.privacy.errors import BudgetExceededError, ReleaseUtilityWarning

GROUPS = 4
ITEMS_PER_GROUP = 10


def _planted(n_users: int = 400, seed: int = 0, per_user: int = 6) -> tuple[sp.csr_array, np.ndarray]:
    """Users of ``GROUPS`` taste groups; 5 of each user's 6 items from their group, 1 from anywhere."""
    rng = np.random.default_rng(seed)
    n_items = GROUPS * ITEMS_PER_GROUP
    group = rng.integers(0, GROUPS, n_users)
    rows, cols = [], []
    for user, g in enumerate(group):
        own = rng.choice(ITEMS_PER_GROUP, per_user - 1, replace=False) + g * ITEMS_PER_GROUP
        other = rng.choice(n_items, 1)
        items = np.unique(np.concatenate([own, other]))
        rows += [user] * items.size
        cols += items.tolist()
    X = sp.csr_array((np.ones(len(rows)), (rows, cols)), shape=(n_users, n_items))
    return X, group


def _hit_rate(items: np.ndarray, group: np.ndarray) -> float:
    """Share of listed items that belong to the user's group."""
    return float(np.mean(items // ITEMS_PER_GROUP == group[:, None]))


@pytest.mark.parametrize("method", ["ease", "ials", "auto"])
def test_personalised_methods_find_each_users_group(method: str) -> None:
    X, group = _planted()
    model = Recommender(method, n_factors=8, random_state=0).fit(X)
    hits = _hit_rate(model.recommend(3).items, group)
    popular = _hit_rate(Recommender("popularity").fit(X).recommend(3).items, group)
    assert hits > 0.9 and popular < 0.4
    assert model.method_ == ("ease" if method == "auto" else method)


@pytest.mark.parametrize("method", ["popularity", "ease", "ials"])
def test_recommend_for_a_training_row_equals_recommend(method: str) -> None:
    X, _ = _planted(120)
    model = Recommender(method, n_factors=6, random_state=0).fit(X)
    trained = model.recommend(5, users=[3, 7])
    folded = model.recommend_for(X[[3, 7]], 5)
    np.testing.assert_array_equal(trained.items, folded.items)
    np.testing.assert_allclose(trained.scores, folded.scores, atol=1e-8)
    np.testing.assert_array_equal(trained.users, [3, 7])
    listed = set(trained.items[0].tolist())
    assert not listed & set(X[[3]].indices.tolist())  # the user's own items are left out


def test_an_empty_row_gets_the_most_popular_items() -> None:
    X, _ = _planted(200)
    model = Recommender().fit(X)
    expected = np.lexsort((np.arange(X.shape[1]), -model.popularity_))[:4]
    np.testing.assert_array_equal(model.recommend_for(np.zeros((1, X.shape[1])), 4).items[0], expected)


def test_options_are_nested_parameters_and_are_checked() -> None:
    model = Recommender(options=RecommenderOptions())
    model.set_params(options__ridge_scale=2.0)
    assert model.get_params()["options__ridge_scale"] == 2.0
    assert clone(model).options.ridge_scale == 2.0
    X, _ = _planted(60)
    with pytest.raises(ValueError, match="options.ridge_scale must be a positive number"):
        Recommender(options=RecommenderOptions(ridge_scale=-1)).fit(X)
    with pytest.raises(ValueError, match="no option 'ridge_scal'"):
        RecommenderOptions().set_params(ridge_scal=1)


def test_ridge_option_is_the_ease_lambda() -> None:
    X, _ = _planted(100)
    dense = X.toarray()
    gram = dense.T @ dense
    model = Recommender("ease", options=RecommenderOptions(ridge=3.0)).fit(X)
    precision = np.linalg.inv(gram + 3.0 * np.eye(gram.shape[0]))
    expected = np.eye(gram.shape[0]) - precision / np.diag(precision)
    np.testing.assert_allclose(model.item_side_.weights, expected, atol=1e-10)


def test_low_rank_form_above_the_dense_limit() -> None:
    X, group = _planted(300)
    model = Recommender(options=RecommenderOptions(dense_items=10, low_rank=16), random_state=0).fit(X)
    assert model.item_side_.weights.eigenvectors.shape == (X.shape[1], 16)
    assert _hit_rate(model.recommend(3).items, group) > 0.9


def test_errors_name_the_problem() -> None:
    X, _ = _planted(50)
    with pytest.raises(NotFittedError, match="not fitted"):
        Recommender().recommend()
    model = Recommender().fit(X)
    with pytest.raises(ValueError, match="X_new must have 40 items"):
        model.recommend_for(np.ones((2, 3)))
    with pytest.raises(ValueError, match="n must be an integer from 1"):
        model.recommend(0)
    with pytest.raises(ValueError, match="method"):
        Recommender("svd").fit(X)


# -- private --------------------------------------------------------------------------------
class _OrderLedger:
    """A ledger that records when it is charged, and refuses on demand."""

    def __init__(self, refuse: bool = False) -> None:
        self.calls: list[str] = []
        self.refuse = refuse

    def charge(self, guarantee: object, *, description: str = "") -> None:
        self.calls.append(description)
        if self.refuse:
            raise BudgetExceededError("refused", path="-", budget_epsilon=1.0, budget_delta=1e-6, spent=1.0,
                                      requested=1.0, total=2.0)


@pytest.mark.parametrize(("method", "catalogue", "releases"), [
    ("popularity", "public", 2), ("popularity", "select", 3), ("ease", "public", 2), ("ease", "select", 3),
])
def test_private_guarantee_spends_the_budget_asked_for(method: str, catalogue: str, releases: int) -> None:
    X, _ = _planted(3000)
    model = PrivateRecommender(epsilon=1.0, delta=1e-6, method=method, catalogue=catalogue,
                               max_items_per_user=8).fit(X)
    g = model.guarantee_
    assert g.holds and g.neighbouring == "user" and g.delta == 1e-6
    assert 1.0 - 1e-3 <= g.epsilon_exact <= 1.0
    assert model.method_ == method and g.n_releases == releases


def test_private_fit_is_charged_before_the_data_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from dptensor.models.recommend import private_estimator

    order: list[str] = []
    real = private_estimator.private_item_counts

    def counts(*args: object, **kwargs: object) -> np.ndarray:
        order.append("read")
        return real(*args, **kwargs)

    monkeypatch.setattr(private_estimator, "private_item_counts", counts)
    ledger = _OrderLedger()
    ledger_charge = ledger.charge
    ledger.charge = lambda g, description="": (order.append("charge"),
                                               ledger_charge(g, description=description))
    X, _ = _planted(100)
    PrivateRecommender(method="popularity", ledger=ledger).fit(X)
    assert order == ["charge", "read"]


def test_a_refused_charge_leaves_the_model_unfitted(tmp_path) -> None:
    X, _ = _planted(100)
    ledger = BudgetLedger(tmp_path / "budget.db", epsilon=1.2, delta=1e-5)
    model = PrivateRecommender(epsilon=1.0, delta=1e-6, method="popularity", ledger=ledger).fit(X)
    with pytest.raises(BudgetExceededError):
        model.fit(X)
    assert not hasattr(model, "item_side_") and not hasattr(model, "guarantee_")
    assert len(ledger.charges()) == 1


def test_private_lists_are_joint_dp_and_leave_out_unselected_items() -> None:
    X, group = _planted(3000)
    model = PrivateRecommender(epsilon=4.0, delta=1e-6, method="ease", catalogue="select",
                               max_items_per_user=8, noise=insecure_test_noise(0)).fit(X)
    assert not model.guarantee_.holds  # test noise voids the guarantee
    trained = model.recommend(4, users=[0, 1, 2])
    folded = model.recommend_for(X[[0, 1, 2]], 4)
    np.testing.assert_array_equal(trained.items, folded.items)
    listed = trained.items[trained.items >= 0]
    assert set(listed.tolist()) <= set(model.items_.tolist())
    # with 3 000 users the noisy Gram still finds each user's group
    assert _hit_rate(model.recommend(3).items, group) > 0.8


def test_an_empty_selection_gives_empty_lists_and_says_why() -> None:
    X, _ = _planted(20)
    with pytest.warns(ReleaseUtilityWarning, match="no item passed"):
        model = PrivateRecommender(epsilon=0.1, method="popularity", catalogue="select",
                                   noise=insecure_test_noise(0)).fit(X)
    assert model.items_.size == 0
    assert (model.recommend(3).items == -1).all()


def test_private_lists_never_name_an_unselected_item() -> None:
    X, _ = _planted(3000)
    rare = sp.csr_array((np.ones(10), (np.arange(10), np.arange(10))), shape=(3000, 10))
    X = sp.csr_array(sp.hstack([X, rare]))  # 10 items chosen by one user each
    model = PrivateRecommender(epsilon=1.0, method="popularity", catalogue="select", max_items_per_user=8,
                               noise=insecure_test_noise(1)).fit(X)
    assert set(model.items_.tolist()) == set(range(40))  # the 40 common items pass, the rare ones do not
    everything = model.recommend(X.shape[1])
    kept = everything.items[everything.items >= 0]
    assert set(kept.tolist()) <= set(range(40))
    assert (everything.items[:, -10:] == -1).all()


def test_a_selected_catalogue_records_no_number_of_items() -> None:
    X, _ = _planted(3000)
    wider = sp.csr_array(sp.hstack([X, sp.csr_array((3000, 7))]))  # 7 more columns nobody chose
    fits = [PrivateRecommender(method="ease", catalogue="select", max_items_per_user=8,
                               noise=insecure_test_noise(0)).fit(data) for data in (X, wider)]
    assert "n_items" not in fits[0].guarantee_.details
    assert fits[0].guarantee_ == fits[1].guarantee_
    with pytest.raises(ValueError, match="catalogue='select' does not have"):
        PrivateRecommender(catalogue="select").fit(X)
    # a private EASE too wide for a dense Gram: refused on the selected items, never on the columns
    small = RecommenderOptions(dense_items=3)
    for data in (X, wider):
        with pytest.raises(ValueError, match="was spent on the item selection") as refused:
            PrivateRecommender(method="ease", catalogue="select", max_items_per_user=8, options=small,
                               noise=insecure_test_noise(0)).fit(data)
        assert f"{fits[0].items_.size} x {fits[0].items_.size}" in str(refused.value)


def test_private_parameters_are_checked_before_the_charge() -> None:
    X, _ = _planted(50)
    ledger = _OrderLedger()
    for bad in ({"epsilon": 0.0}, {"delta": 1.0}, {"method": "ials2"}, {"catalogue": "file"}):
        with pytest.raises(ValueError):
            PrivateRecommender(ledger=ledger, **bad).fit(X)
    with pytest.raises(ValueError, match="negative"):
        PrivateRecommender(ledger=ledger).fit(-X)
    assert ledger.calls == []

