"""The private releases of the top-N family: sensitivities by brute force, noise, budget, guarantee, ledger.

Brute force: 5 users x 4 items, user 0's row replaced by every one of the 16 possible rows (empty,
single items, every item), the other users fixed; the measured change of each release without
noise must stay within the stated sensitivity and reach it.
"""

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.models.recommend import release_plan, releases
from dptensor.models.recommend.release_plan import SENSITIVITY, recommender_guarantee
from dptensor.models.recommend.releases import (
    add_symmetric_frobenius_noise,
    cap_rows,
    private_item_counts,
    private_item_gram,
    private_item_selection,
    private_item_statistics,
    release_rows,
)
from dptensor.parallel import as_local_blocks
from dptensor.privacy import BudgetExceededError, BudgetLedger, NoiseSource, compose, insecure_test_noise
from dptensor.privacy.ledger import composed_epsilon
from dptensor.privacy.vocabulary import word_weights

pytestmark = pytest.mark.filterwarnings("ignore::dptensor.privacy.PrivacyWarning")

N_ITEMS = 4
OTHERS = np.array([[1, 1, 0, 0], [0, 1, 1, 1], [1, 0, 0, 1], [1, 1, 1, 1]], dtype=np.float64)
# (weighting, m, items) of the counts and the Gram: sqrt(2) needs two disjoint rows of m items, so
# 2m <= items (m = 3 on 6 items; the other users then also have the last two items)
WEIGHTINGS = [("unit", None, 4), ("capped", 1, 4), ("capped", 2, 4), ("capped", 3, 6)]


def _all_rows(n_items: int) -> list[np.ndarray]:
    """Every binary row of ``n_items`` items: the empty row, single items, every item, and the rest."""
    return [np.array(row, dtype=np.float64) for row in itertools.product((0, 1), repeat=n_items)]


class ExactSource(NoiseSource):
    """No noise at all, and the secret seeds of the caps from a fixed generator (tests only)."""

    def __init__(self, seed: int) -> None:
        super().__init__("numpy", np.random.default_rng(seed), secure=False)

    def add_gaussian(self, values, sigma):
        return np.array(values, dtype=np.float64, copy=True)


def _matrix(row: np.ndarray) -> sp.csr_array:
    others = np.hstack([OTHERS, np.ones((OTHERS.shape[0], row.size - N_ITEMS))])
    return sp.csr_array(np.vstack([row, others]))


def _counts(row, weighting, m, seed):
    return private_item_counts(_matrix(row), sigma=1.0, source=ExactSource(seed), weighting=weighting,
                               max_items_per_user=m)


def _gram(row, weighting, m, seed):
    return private_item_gram(_matrix(row), sigma=1.0, source=ExactSource(seed), weighting=weighting,
                             max_items_per_user=m)


def _selection_weights(row, m, seed):
    seeds = (ExactSource(seed).random(5) * 2.0**53).astype(np.uint64)
    return np.asarray(release_rows(_matrix(row), "unit", m, seeds).sum(axis=0)).ravel()


def _largest_change(statistic, n_items: int = N_ITEMS) -> float:
    values = [statistic(row) for row in _all_rows(n_items)]
    return max(float(np.linalg.norm(a - b)) for a, b in itertools.combinations(values, 2))


@pytest.mark.parametrize(("weighting", "m", "n_items"), WEIGHTINGS)
def test_counts_sensitivity_is_sqrt2_and_attained(weighting, m, n_items):
    for seed in range(3):
        change = _largest_change(lambda row, seed=seed: _counts(row, weighting, m, seed), n_items)
        assert change <= SENSITIVITY + 1e-12
        assert change >= SENSITIVITY - 1e-9


@pytest.mark.parametrize(("weighting", "m", "n_items"), WEIGHTINGS)
def test_gram_sensitivity_is_sqrt2_in_frobenius_and_attained(weighting, m, n_items):
    for seed in range(2):
        change = _largest_change(lambda row, seed=seed: _gram(row, weighting, m, seed), n_items)
        assert change <= SENSITIVITY + 1e-12
        assert change >= SENSITIVITY - 1e-9
    # the noise's own metric: the vector (G_ii, sqrt2 G_ij) moves by the Frobenius norm of the change
    upper = np.triu_indices(n_items, k=1)

    def isometric(row):
        gram = _gram(row, weighting, m, 0)
        return np.concatenate([np.diag(gram), math.sqrt(2.0) * gram[upper]])

    frobenius = _largest_change(lambda row: _gram(row, weighting, m, 0), n_items)
    assert _largest_change(isometric, n_items) == pytest.approx(frobenius)
    # the unique entries alone (the "unique" convention's metric) also reach sqrt(2): single items
    unique = _largest_change(lambda row: _gram(row, weighting, m, 0)[np.triu_indices(n_items)], n_items)
    assert unique <= SENSITIVITY + 1e-12


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_selection_weights_sensitivity_and_exclusive_items(m):
    for seed in range(3):
        change = _largest_change(lambda row, seed=seed: _selection_weights(row, m, seed))
        assert SENSITIVITY - 1e-9 <= change <= SENSITIVITY + 1e-12
        rows = _all_rows(N_ITEMS)
        seeds = (ExactSource(seed).random(len(rows)) * 2.0**53).astype(np.uint64)
        kept = release_rows(sp.csr_array(np.array(rows)), "unit", m, seeds)
        # what the threshold's proof needs of one user: at most m items, each of weight <= 1
        assert np.all(np.diff(kept.indptr) <= m) and np.all(kept.data <= 1.0)
        # the same weights as the vocabulary's, users as documents and items as words
        documents = [kept.indices[kept.indptr[u]:kept.indptr[u + 1]].tolist() for u in range(kept.shape[0])]
        expected = word_weights(documents, m)
        total = np.asarray(kept.sum(axis=0)).ravel()
        assert {i: total[i] for i in np.flatnonzero(total)} == pytest.approx(expected)


def test_huge_values_and_duplicates_count_once():
    row = np.array([0.0, 3e12, 0.0, 7.0])
    binary = _matrix((row > 0).astype(float))
    weird = sp.coo_array(_matrix(row))
    # a duplicated entry and an explicit zero: neither may add weight
    entries = (np.append(weird.row, [0, 0]), np.append(weird.col, [3, 0]))
    weird = sp.coo_array((np.append(weird.data, [5.0, 0.0]), entries), shape=weird.shape)
    blocks = as_local_blocks(weird.tocsr())  # straight to the block functions, not checked first
    for weighting, m, _ in WEIGHTINGS:
        options = {"sigma": 1.0, "weighting": weighting, "max_items_per_user": m}
        np.testing.assert_allclose(private_item_gram(blocks, source=ExactSource(0), **options),
                                   private_item_gram(binary, source=ExactSource(0), **options))


def test_noiseless_gram_and_counts_match_a_dense_reference_on_threads():
    rng = np.random.default_rng(1)
    X = sp.csr_array((rng.random((300, 12)) < 0.3).astype(float))
    dense = X.toarray()
    lengths = dense.sum(axis=1, keepdims=True)
    unit = np.divide(dense, np.sqrt(lengths), out=np.zeros_like(dense), where=lengths > 0)
    for n_jobs in (1, 2):
        gram = private_item_gram(X, sigma=1.0, source=ExactSource(0), n_jobs=n_jobs)
        np.testing.assert_allclose(gram, unit.T @ unit, rtol=1e-12, atol=1e-12)
        counts = private_item_counts(X, sigma=1.0, source=ExactSource(0), n_jobs=n_jobs)
        np.testing.assert_allclose(counts, unit.sum(axis=0), rtol=1e-12)
    # capped: rows of <= m items are the plain rows over sqrt(m); longer ones keep m of their items
    m = 3
    gram = private_item_gram(X, sigma=1.0, source=ExactSource(0), weighting="capped", max_items_per_user=m,
                             n_jobs=2)
    short = lengths.ravel() <= m
    np.testing.assert_allclose(np.trace(gram), np.minimum(lengths.ravel(), m).sum() / m)
    reference = dense[short].T @ dense[short] / m
    assert np.all(gram + 1e-12 >= reference)


def test_cap_keeps_a_uniform_random_subset():
    draws = 6000
    rows = sp.csr_array(np.ones((draws, 4)))
    seeds = np.random.default_rng(3).integers(0, 2**53, size=draws, dtype=np.uint64)
    kept = cap_rows(rows, 2, seeds)
    counts = {}
    for u in range(draws):
        pair = tuple(kept.indices[kept.indptr[u]:kept.indptr[u + 1]].tolist())
        counts[pair] = counts.get(pair, 0) + 1
    assert len(counts) == 6 and all(set(k) <= {0, 1, 2, 3} and len(k) == 2 for k in counts)
    # each of the 6 pairs has probability 1/6: 6000 draws give 1000 +- 29 (sd); 200 is 7 sd
    assert all(abs(c - draws / 6) < 200 for c in counts.values())


def test_noise_scale_read_back_from_releases_on_zero_matrices():
    source = NoiseSource("numpy", np.random.default_rng(7), secure=False)
    counts = private_item_counts(sp.csr_array((3, 40000)), sigma=2.5, source=source)
    # std of 40000 normal draws: relative standard error 0.35%; 3% is 8 standard errors
    assert np.std(counts) == pytest.approx(2.5, rel=0.03) and abs(np.mean(counts)) < 0.1
    gram = private_item_gram(sp.csr_array((3, 800)), sigma=2.5, source=source)
    assert np.array_equal(gram, gram.T)
    off = gram[np.triu_indices(800, k=1)]
    # 800 diagonal draws: relative standard error 2.5%, 15% is 6 of them; 319600 off-diagonal: 0.13%, 1%
    assert np.std(np.diag(gram)) == pytest.approx(2.5, rel=0.15)
    assert np.std(off) == pytest.approx(2.5 / math.sqrt(2.0), rel=0.01)


def test_chunked_symmetric_noise_does_not_depend_on_the_chunk(monkeypatch):
    values = np.arange(49.0).reshape(7, 7)
    values = values + values.T

    def noisy():
        source = NoiseSource("numpy", np.random.default_rng(0), secure=False)
        return add_symmetric_frobenius_noise(values, 1.0, source)

    whole = noisy()
    monkeypatch.setattr(releases, "NOISE_CELLS_PER_CHUNK", 8)
    np.testing.assert_array_equal(noisy(), whole)
    assert np.array_equal(whole, whole.T)


def test_statistics_use_the_plan_sigmas():
    X = sp.csr_array((2, 30000))
    out = private_item_statistics(X, epsilon=1.0, delta=1e-6, releases="counts", noise=insecure_test_noise(0))
    assert np.std(out.counts) == pytest.approx(out.plan.sigma("counts"), rel=0.03)


# ---------------------------------------------------------------------------------------- budget
PLANS = [(("counts",), 0.5), (("gram",), 4.0), (("counts", "gram"), 1.0), (("selection",), 0.5),
         (("selection", "counts", "gram"), 2.0)]


@pytest.mark.parametrize(("names", "epsilon"), PLANS)
def test_composition_spends_the_asked_epsilon(names, epsilon):
    plan = recommender_guarantee(names, epsilon, 1e-6, max_items_per_user=20)
    g = plan.guarantee
    pld = compose(g, delta=1e-6).epsilon  # dp-accounting's PLD of the unmerged events
    ledger = composed_epsilon([g.to_dp_event()], 1e-6, 1e-4)  # what a BudgetLedger computes
    for spent in (pld, ledger, g.epsilon_exact):
        assert epsilon - 1e-3 <= spent <= epsilon
    # the Gaussian parts are one mu-GDP release
    assert plan.mu == pytest.approx(math.sqrt(sum(1 / z**2 for z in plan.noise_multipliers.values())))


def test_shares_move_the_noise_not_the_privacy():
    even = recommender_guarantee(("counts", "gram"), 1.0, 1e-6)
    tilted = recommender_guarantee(("counts", "gram"), 1.0, 1e-6, shares={"counts": 1, "gram": 4})
    assert tilted.mu == pytest.approx(even.mu, rel=1e-9)
    z = tilted.noise_multipliers
    assert z["counts"] / z["gram"] == pytest.approx(2.0)
    assert even.noise_multipliers["counts"] == even.noise_multipliers["gram"]
    assert tilted.sigma("gram") == pytest.approx(z["gram"] * math.sqrt(2))


def test_guarantee_fields():
    plan = recommender_guarantee(("selection", "counts", "gram"), 1.0, 1e-6, weighting="capped",
                                 max_items_per_user=50, n_users=1000, n_items=300)
    g = plan.guarantee
    assert g.holds and g.neighbouring == "user" and g.n_releases == 3
    assert g.accountant == "exact (PLD, dp-accounting)"
    assert g.mechanism == "composition of gaussian, gaussian partition selection"
    assert g.noise_multiplier == pytest.approx(1 / plan.mu)
    assert g.protected == (
        "one user's whole row of interactions, replaced by any other row (empty, one item, every item)")
    for word in ("number of users", "max_items_per_user=50", "epsilon and delta", "item id space"):
        assert word in g.public
    d = g.details
    assert d["sigmas"] == dict(plan.sigmas)
    assert d["sensitivities"] == dict.fromkeys(plan.releases, SENSITIVITY)
    assert d["weighting"] == "capped" and d["max_items_per_user"] == 50 and d["n_users"] == 1000
    assert d["selection_threshold"] == plan.selection.threshold
    only = recommender_guarantee(("counts", "gram"), 1.0, 1e-6).guarantee
    assert only.accountant == "exact (Gaussian DP)" and only.mechanism == "gaussian"
    assert "the item list" in only.public


def test_guarantee_reads_nothing_of_the_data():
    rng = np.random.default_rng(0)
    a = sp.csr_array((rng.random((50, 8)) < 0.5).astype(float))
    b = sp.csr_array((50, 8))
    kw = {"epsilon": 1.0, "delta": 1e-6, "releases": ("selection", "counts", "gram"), "max_items_per_user": 3}
    ga = private_item_statistics(a, noise="numpy", **kw).guarantee
    gb = private_item_statistics(b, noise="numpy", **kw).guarantee
    assert ga.to_dict() == gb.to_dict()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="max_items_per_user"):
        recommender_guarantee(("gram",), 1.0, 1e-6, weighting="capped")
    with pytest.raises(ValueError, match="max_items_per_user"):
        recommender_guarantee(("selection",), 1.0, 1e-6)
    with pytest.raises(ValueError, match="releases"):
        recommender_guarantee(("counts", "counts"), 1.0, 1e-6)
    with pytest.raises(ValueError, match="weighting"):
        recommender_guarantee(("gram",), 1.0, 1e-6, weighting="log")
    with pytest.raises(ValueError, match="shares"):
        recommender_guarantee(("counts", "gram"), 1.0, 1e-6, shares={"counts": 1.0})
    with pytest.raises(TypeError, match="source"):
        private_item_counts(sp.csr_array((2, 2)), sigma=1.0, source="numpy")


# ---------------------------------------------------------------------------------------- ledger
class WatchedBlocks(type(as_local_blocks(np.zeros((1, 1))))):
    """Row blocks that record every pass over the data in a shared log."""

    def __init__(self, matrix, log):
        super().__init__([matrix], matrix.shape[1])
        self.log = log

    def map_sum(self, *args, **kwargs):
        self.log.append("read")
        return super().map_sum(*args, **kwargs)

    def map(self, *args, **kwargs):
        self.log.append("read")
        return super().map(*args, **kwargs)


class RecordingLedger:
    def __init__(self, log, refuse=False):
        self.log, self.refuse = log, refuse

    def charge(self, guarantee, *, description=""):
        self.log.append("charge")
        if self.refuse:
            raise BudgetExceededError("refused", path="", budget_epsilon=0.0, budget_delta=0.0, spent=0.0,
                                      requested=guarantee.epsilon, total=guarantee.epsilon)


def _users():
    return sp.csr_array((np.random.default_rng(0).random((40, 6)) < 0.5).astype(float))


def test_the_ledger_is_charged_before_the_data_is_read():
    log = []
    private_item_statistics(WatchedBlocks(_users(), log), epsilon=1.0, delta=1e-6, max_items_per_user=3,
                            releases=("selection", "counts", "gram"), ledger=RecordingLedger(log))
    assert log[0] == "charge" and log.count("charge") == 1 and "read" in log


def test_a_refused_charge_leaves_nothing_computed(tmp_path):
    log = []
    with pytest.raises(BudgetExceededError):
        private_item_statistics(WatchedBlocks(_users(), log), epsilon=1.0, delta=1e-6,
                                ledger=RecordingLedger(log, refuse=True))
    assert log == ["charge"]
    path = tmp_path / "budget.sqlite"
    ledger = BudgetLedger(path, epsilon=1.0, delta=1e-6)
    kw = {"epsilon": 1.0, "delta": 1e-6, "releases": ("selection", "counts", "gram"), "max_items_per_user": 3}
    private_item_statistics(_users(), ledger=ledger, **kw)  # the whole budget, to 1e-3, is accepted
    log.clear()
    with pytest.raises(BudgetExceededError):
        private_item_statistics(WatchedBlocks(_users(), log), ledger=ledger, **kw)
    assert log == [] and len(BudgetLedger(path).charges()) == 1


def test_selection_then_releases_over_the_selected_items():
    rng = np.random.default_rng(0)
    popular = (rng.random((4000, 3)) < 0.6).astype(float)
    rare = np.zeros((4000, 5))
    rare[0, :] = 1.0  # items only one user has
    X = sp.csr_array(np.hstack([popular, rare]))
    out = private_item_statistics(X, epsilon=1.0, delta=1e-6, releases=("selection", "counts", "gram"),
                                  max_items_per_user=4, noise=insecure_test_noise(0))
    assert out.items.tolist() == [0, 1, 2]
    assert out.counts.shape == (3,) and out.gram.shape == (3, 3)
    chosen = private_item_selection(X, epsilon=1.0, delta=1e-6, max_items_per_user=4,
                                    source=ExactSource(0), max_items=2)
    assert chosen.size <= 2


@pytest.mark.slow
def test_dask_blocks_give_the_local_release():
    da = pytest.importorskip("dask.array")
    import dask

    rng = np.random.default_rng(2)
    X = sp.csr_matrix((rng.random((90, 7)) < 0.5).astype(float))
    chunked = da.from_array(X, chunks=(25, -1), asarray=False)
    with dask.config.set(scheduler="synchronous"):
        for weighting, m in (("unit", None), ("capped", 2)):
            remote = private_item_gram(chunked, sigma=1.0, source=ExactSource(0), weighting=weighting,
                                       max_items_per_user=m)
            local = private_item_gram(X, sigma=1.0, source=ExactSource(0), weighting=weighting,
                                      max_items_per_user=m)
            np.testing.assert_allclose(remote, local, rtol=1e-12, atol=1e-12)


def test_module_sizes_stay_reviewable():
    for module in (releases, release_plan):
        with open(module.__file__) as handle:
            assert len(handle.readlines()) <= 800
