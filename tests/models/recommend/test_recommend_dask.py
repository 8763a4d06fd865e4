"""The top-N family on a Dask cluster (in-process, two threads): the cluster fit equals the local one.

A ``dask.array`` of SciPy sparse row chunks is fitted where its chunks are: popularity and EASE sum
their item statistics over the chunks, implicit ALS runs one pass over them per sweep, the private
releases add their noise once, to the sum. With the same seeds everything equals the in-memory fit
up to the rounding of a different order of addition.
"""

import numpy as np
import pytest
import scipy.sparse as sp

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

from dptensor.models.recommend import PrivateRecommender, Recommender, RecommenderOptions  # noqa: E402
from dptensor.models.recommend.ials import implicit_als  # noqa: E402
from dptensor.models.recommend.ials_blocks import implicit_als_blocks  # noqa: E402
from dptensor.models.recommend.releases import private_item_statistics  # noqa: E402
from dptensor.privacy import insecure_test_noise  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dptensor.privacy.PrivacyWarning")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None,
        worker_dashboard_address=None,
    )  # fmt: skip
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


@pytest.fixture(scope="module")
def interactions():
    """400 users x 30 items, popularity-skewed, some stored counts above 1 (binarised by every path)."""
    rng = np.random.default_rng(3)
    weights = 1.0 / np.arange(1, 31) ** 0.8
    rows = [rng.choice(30, size=rng.integers(0, 12), replace=False, p=weights / weights.sum())
            for _ in range(400)]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    indices = np.concatenate(rows).astype(np.int64)
    values = rng.integers(1, 4, size=indices.size).astype(np.float64)
    return sp.csr_array((values, indices, indptr), shape=(400, 30))


def _chunked(X, rows=90):
    return da.from_array(sp.csr_matrix(X), chunks=(rows, -1), asarray=False)


@pytest.mark.parametrize("method", ["popularity", "ease"])
def test_popularity_and_ease_on_dask_equal_the_local_fit(client, interactions, method):
    local = Recommender(method=method).fit(interactions)
    cluster = Recommender(method=method).fit(_chunked(interactions))
    assert (cluster.method_, cluster.n_users_, cluster.n_items_) == (method, 400, 30)
    np.testing.assert_allclose(cluster.popularity_, local.popularity_, rtol=1e-12)
    assert local.popularity_.sum() == interactions.nnz  # counts of users, not of stored values
    if method == "ease":
        np.testing.assert_allclose(cluster.item_side_.weights, local.item_side_.weights, rtol=1e-10,
                                   atol=1e-13)
    new = interactions[:50]
    a, b = local.recommend_for(new, 5), cluster.recommend_for(new, 5)
    np.testing.assert_array_equal(b.items, a.items)
    with pytest.raises(ValueError, match="keeps no training rows"):
        cluster.recommend(5)


def test_ials_on_dask_equals_the_exact_local_fit(client, interactions):
    options = RecommenderOptions(iterations=3)
    model = Recommender(method="ials", n_factors=6, options=options, random_state=0)
    cluster = model.fit(_chunked(interactions))
    exact = implicit_als(interactions, 6, regularization=options.regularization, alpha=options.alpha,
                         iterations=3, solver="cholesky", random_state=0)
    np.testing.assert_allclose(cluster.item_side_.factors, exact.item_factors, rtol=1e-8, atol=1e-10)
    # the sweeps did something: three sweeps are far from the starting point (zero sweeps)
    start = implicit_als_blocks(interactions, 6, iterations=0, random_state=0).item_factors
    assert np.abs(exact.item_factors - start).max() > 1e-2
    # the same sweep on two threads over row blocks in memory
    threads = implicit_als_blocks(interactions, 6, regularization=options.regularization, alpha=options.alpha,
                                  iterations=3, random_state=0, n_jobs=2)
    np.testing.assert_allclose(threads.item_factors, exact.item_factors, rtol=1e-8, atol=1e-10)
    # users fold in from the item side alone: the exact fit's own (last) user half-step
    rows = interactions[:40]
    scores = exact.user_factors[:40] @ exact.item_factors.T
    nonempty = np.diff(sp.csr_array(rows).indptr) > 0
    np.testing.assert_allclose(cluster.score_rows(rows)[nonempty], scores[nonempty], rtol=1e-7, atol=1e-9)


def test_low_rank_ease_on_dask_is_refused_with_a_way_out(client, interactions):
    with pytest.raises(ValueError, match="dense_items"):
        Recommender(method="ease", options=RecommenderOptions(dense_items=10)).fit(_chunked(interactions))


@pytest.mark.parametrize("releases", [("counts", "gram"), ("selection", "counts", "gram")])
def test_private_releases_on_dask_equal_the_local_ones(client, interactions, releases):
    # The noise is drawn once, on the client, after the reduction: equal seeds give equal noise.
    kw = dict(epsilon=4.0, delta=1e-6, releases=releases, max_items_per_user=8)
    local = private_item_statistics(interactions, noise=insecure_test_noise(0), **kw)
    cluster = private_item_statistics(_chunked(interactions), noise=insecure_test_noise(0), **kw)
    np.testing.assert_array_equal(cluster.items, local.items)
    np.testing.assert_allclose(cluster.counts, local.counts, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cluster.gram, local.gram, rtol=1e-12, atol=1e-12)
    other = private_item_statistics(interactions, noise=insecure_test_noise(1), **kw)
    assert not np.allclose(other.counts[: min(other.counts.size, local.counts.size)],
                           local.counts[: min(other.counts.size, local.counts.size)])


@pytest.mark.parametrize("method", ["popularity", "ease", "ials"])
def test_private_recommender_on_dask_equals_the_local_fit(client, interactions, method):
    kw = dict(epsilon=4.0, delta=1e-6, method=method, random_state=0,
              options=RecommenderOptions(recount_items=10))  # popularity: 10 of the 30 items recounted
    local = PrivateRecommender(noise=insecure_test_noise(0), **kw).fit(interactions)
    cluster = PrivateRecommender(noise=insecure_test_noise(0), **kw).fit(_chunked(interactions))
    assert (cluster.n_users_, cluster.n_items_, cluster.method_) == (400, 30, method)
    assert cluster.guarantee_.epsilon == local.guarantee_.epsilon
    np.testing.assert_allclose(cluster.popularity_, local.popularity_, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(cluster.candidates_, local.candidates_)
    np.testing.assert_allclose(cluster.recounts_, local.recounts_, rtol=1e-12, atol=1e-12)
    assert (cluster.candidates_.size, len(cluster.sweeps_)) == {"popularity": (10, 0), "ease": (0, 0),
                                                                 "ials": (0, 2)}[method]
    if method == "ials":  # each sweep's sums reduced in another order: equal up to rounding
        np.testing.assert_allclose(cluster.item_side_.factors, local.item_side_.factors, rtol=1e-8,
                                   atol=1e-10)
    if method == "ease":
        np.testing.assert_allclose(cluster.item_side_.weights, local.item_side_.weights, rtol=1e-9,
                                   atol=1e-12)
    np.testing.assert_array_equal(cluster.recommend_for(interactions[:50], 5).items,
                                  local.recommend_for(interactions[:50], 5).items)
