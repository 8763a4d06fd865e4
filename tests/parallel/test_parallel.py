"""dptensor.parallel: row blocks, the verified map-then-sum, and the thread backend of every pass."""

import threading

import numpy as np
import pytest
import scipy.sparse as sp
from _tolerances import spectral_fit_tolerances

from dptensor import OnlineTensorPower, power_method
from dptensor.datasets.lda import make_lda_corpus
from dptensor.models import PrivateSpectralLDA, SpectralLDA
from dptensor.models.topics._releases import check_private_counts
from dptensor.models.topics._third_moment import LDAMomentAccumulator, whitened_third_moment
from dptensor.models.topics.moments import (
    DocumentBlocks,
    LDASecondMoment,
    first_moment,
    prepare_counts,
    prepare_documents,
)
from dptensor.parallel import (
    BlockIntegrityError,
    LocalRowBlocks,
    as_row_blocks,
    documents_to_csr,
    effective_n_jobs,
    public_shape,
    split_rows,
)
from dptensor.parallel.blocks import Partial, _Seen, combine_partials
from dptensor.privacy import insecure_test_noise
from dptensor.tensor import SampleMoment

pytestmark = pytest.mark.filterwarnings("ignore::dptensor.privacy.PrivacyWarning")


@pytest.fixture(scope="module")
def corpus():
    return make_lda_corpus(3000, 60, 3, alpha=0.2, doc_length=30, random_state=0)


def _column_sums(block):
    return block.sum(axis=0)


def _sums_and_rows(block, scale, weights=None):
    w = np.ones(block.shape[0]) if weights is None else weights
    return {"sum": np.asarray(block.T @ w).ravel() * scale, "rows": (block.shape[0],)}


def test_effective_n_jobs():
    assert effective_n_jobs(None) == 1 and effective_n_jobs(3) == 3
    assert effective_n_jobs(-1) >= 1 and effective_n_jobs(-100) == 1
    with pytest.raises(ValueError, match="n_jobs"):
        effective_n_jobs(0)
    with pytest.raises(TypeError, match="n_jobs"):
        effective_n_jobs(1.5)


def test_split_rows_balances_stored_entries():
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 50, size=1000)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    ranges = split_rows(1000, 4, indptr)
    assert ranges[0][0] == 0 and ranges[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in zip(ranges[:-1], ranges[1:], strict=True))
    per_block = [indptr[b] - indptr[a] for a, b in ranges]
    assert max(per_block) - min(per_block) <= 2 * lengths.max()
    assert split_rows(3, 10) == [(0, 1), (1, 2), (2, 3)]


@pytest.mark.parametrize("n_jobs", [None, 2, 3])
def test_map_sum_equals_the_direct_sum_on_every_split(n_jobs):
    X = sp.random(503, 17, density=0.2, random_state=1, format="csr")
    blocks = as_row_blocks(X, n_jobs=n_jobs)
    assert blocks.n_blocks == (1 if n_jobs is None else 2 * n_jobs)
    assert blocks.backend == ("in-process" if n_jobs is None else "threads")
    np.testing.assert_allclose(blocks.map_sum(_column_sums), np.asarray(X.sum(axis=0)), rtol=1e-13)
    # shared arguments, per-row arguments and row selections reach the right rows
    w = np.arange(503.0)
    out = blocks.map_sum(_sums_and_rows, 2.0, row_args=(w,))
    np.testing.assert_allclose(out["sum"], 2.0 * (X.T @ w), rtol=1e-13)
    assert out["rows"] == (503,)
    rows = np.array([0, 5, 200, 201, 502])
    out = blocks.map_sum(_sums_and_rows, 1.0, rows=rows, row_args=(w[rows],))
    np.testing.assert_allclose(out["sum"], X[rows].T @ w[rows], rtol=1e-13)
    with pytest.raises(ValueError, match="sorted row indices"):
        blocks.map_sum(_sums_and_rows, 1.0, rows=np.array([5, 2]))


def _record_thread(block, log, barrier):
    log.append(threading.get_ident())
    barrier.wait()  # opens only when a second block is running at the same time
    return block.shape[0]


def test_thread_backend_runs_blocks_concurrently():
    """Two blocks at a time, not one after the other: each waits at a two-party barrier.

    A sequential run would break the barrier (its timeout) and fail. The former check timed four
    sleeps of 0.05 s against 0.2 s; on a loaded 2-core machine 1 run in 300 took 0.208 s.
    """
    log = []
    barrier = threading.Barrier(2, timeout=60)
    blocks = as_row_blocks(np.ones((40, 3)), n_jobs=2)
    assert blocks.map_sum(_record_thread, log, barrier) == 40
    assert len(log) == 4 and len(set(log)) == 2


def test_reductions_refuse_incomplete_or_double_coverage():
    blocks = LocalRowBlocks([np.ones((2, 2)), np.ones((3, 2))], 2)
    value = np.zeros(2)
    with pytest.raises(BlockIntegrityError, match="twice"):
        combine_partials(Partial(value, {0: _Seen(2, None)}), Partial(value, {0: _Seen(2, None)}))
    with pytest.raises(BlockIntegrityError, match="covered 1 of 2 blocks; missing \\[1\\]"):
        blocks._verify(Partial(value, {0: _Seen(2, None)}))
    with pytest.raises(BlockIntegrityError, match="changed"):
        blocks._verify(Partial(value, {0: _Seen(2, None), 1: _Seen(4, None)}))
    blocks._verify(Partial(value, {0: _Seen(2, None), 1: _Seen(3, None)}))
    checked = LocalRowBlocks([np.ones((2, 2))], 2)
    checked._checksums = [("a",)]
    with pytest.raises(BlockIntegrityError, match="changed since they were prepared"):
        checked._verify(Partial(value, {0: _Seen(2, ("b",))}))


def test_documents_to_csr_reads_the_three_document_forms():
    docs = [{0: 2, 3: 1}, [1, 1, 4], sp.csr_matrix(np.array([[0, 0, 5, 0, 0]]))]
    matrix = documents_to_csr(docs, 5)
    np.testing.assert_array_equal(matrix.toarray(), [[2, 0, 0, 1, 0], [0, 2, 0, 0, 1], [0, 0, 5, 0, 0]])
    with pytest.raises(ValueError, match="document 1 has a word index outside"):
        documents_to_csr([[0], [7]], 5)


def test_public_shape_and_bad_input():
    assert public_shape(np.zeros((4, 3))) == (4, 3)
    assert public_shape(as_row_blocks(np.zeros((4, 3)), n_jobs=2)) == (4, 3)
    with pytest.raises(ValueError, match="2-D"):
        public_shape(np.zeros(3))


def test_lda_moments_on_thread_blocks_equal_in_memory(corpus):
    one = prepare_counts(corpus.counts)
    many = prepare_documents(corpus.counts, n_jobs=2)
    assert isinstance(many, DocumentBlocks) and many.blocks.backend == "threads"
    assert (many.n_documents, many.n_words, many.n_dropped) == (one.n_documents, one.n_words, one.n_dropped)
    V = np.random.default_rng(0).standard_normal((60, 7))
    m_one, m_many = LDASecondMoment(one, 0.6), LDASecondMoment(many, 0.6)
    np.testing.assert_allclose(m_many.matmat(V), m_one.matmat(V), rtol=1e-12, atol=1e-16)
    np.testing.assert_allclose(m_many.to_dense(), m_one.to_dense(), rtol=1e-12, atol=1e-16)
    np.testing.assert_allclose(first_moment(many), first_moment(one), rtol=1e-12)
    W = np.random.default_rng(1).standard_normal((60, 3))
    t_one = whitened_third_moment(one, 0.6, W)
    np.testing.assert_allclose(whitened_third_moment(many, 0.6, W), t_one, rtol=1e-11, atol=1e-14)
    acc = LDAMomentAccumulator(W, 0.6).update(many)
    np.testing.assert_allclose(acc.third_moment(), t_one, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(acc.second_moment_basis(), m_one.matmat(W), rtol=1e-11, atol=1e-16)


def test_spectral_lda_with_threads_equals_one_thread(corpus):
    # Dense whitening: the eigensolver sees M2 summed in another order; the results may differ by
    # the stopping tolerance of the tensor power iteration (bounds derived in _stopping_bounds).
    a = SpectralLDA(3, corpus.alpha0, whitening="dense", random_state=0).fit(corpus.counts)
    components_atol, alpha_rtol = spectral_fit_tolerances(a)
    assert components_atol < 1e-8 and alpha_rtol < 1e-8  # tight enough to catch another path
    for n_jobs in (1, 2, 3):
        b = SpectralLDA(3, corpus.alpha0, whitening="dense", random_state=0, n_jobs=n_jobs).fit(corpus.counts)
        assert a.decomposition_.converged.all() and b.decomposition_.converged.all()
        np.testing.assert_allclose(b.components_, a.components_, rtol=0, atol=components_atol)
        np.testing.assert_allclose(b.alpha_, a.alpha_, rtol=alpha_rtol)
        assert b.n_documents_ == a.n_documents_ and b.n_dropped_documents_ == a.n_dropped_documents_
    # Randomised whitening: the range finder's passes run in single precision, so the subspace it
    # finds differs by single-precision rounding (~1e-7) between summation orders. A fixed number of
    # products (whitening_tol=None): with a tolerance the two could stop one product apart, and then
    # differ by up to what the tolerance allows (see top_eigenpairs).
    kw = dict(whitening="randomized", whitening_tol=None, random_state=0)
    a = SpectralLDA(3, corpus.alpha0, **kw).fit(corpus.counts)
    b = SpectralLDA(3, corpus.alpha0, n_jobs=2, **kw).fit(corpus.counts)
    np.testing.assert_allclose(b.components_, a.components_, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b.alpha_, a.alpha_, rtol=1e-5)
    # partial_fit over thread-split batches
    a = SpectralLDA(3, corpus.alpha0, random_state=0)
    b = SpectralLDA(3, corpus.alpha0, random_state=0, n_jobs=2)
    for start in (0, 1500):
        a.partial_fit(corpus.counts[start : start + 1500])
        b.partial_fit(corpus.counts[start : start + 1500])
    components_atol, alpha_rtol = spectral_fit_tolerances(a)
    np.testing.assert_allclose(b.components_, a.components_, rtol=0, atol=components_atol)
    np.testing.assert_allclose(b.alpha_, a.alpha_, rtol=alpha_rtol)


@pytest.mark.parametrize("whitening", ["analyze-gauss", "noisy-power"])
def test_private_lda_with_threads_equals_one_thread(corpus, whitening):
    def fit(n_jobs):
        return PrivateSpectralLDA(
            3, corpus.alpha0, epsilon=50.0, delta=1e-6, private_whitening=whitening, random_state=0,
            noise=insecure_test_noise(7), n_jobs=n_jobs,
        ).fit(corpus.counts)  # fmt: skip

    a, b = fit(None), fit(2)
    np.testing.assert_allclose(b.components_, a.components_, rtol=1e-9, atol=1e-12)
    assert b.noise_scales_.keys() == a.noise_scales_.keys()
    for key in a.noise_scales_:
        np.testing.assert_allclose(b.noise_scales_[key], a.noise_scales_[key], rtol=1e-12)


def test_private_counts_on_blocks_name_no_count_and_no_row(corpus):
    X = corpus.counts.tolil(copy=True)
    X[2500, :] = 0
    X[2500, 0] = 2
    with pytest.raises(ValueError, match=r"^X has documents with fewer than 3 tokens; ") as raised:
        check_private_counts(X.tocsr(), n_jobs=2)
    assert "2500" not in str(raised.value) and "rows" not in str(raised.value)
    docs = check_private_counts(corpus.counts, n_jobs=2)
    assert docs.n_documents == corpus.counts.shape[0] and docs.n_dropped == 0


def test_sample_moment_and_online_with_threads(corpus):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((2000, 12)) ** 3
    # tol=0: exactly n_iter steps each, so both take the same path whatever the rounding (with a
    # tolerance they could stop a step apart and differ by up to tol)
    a = power_method(SampleMoment(X), 2, n_iter=40, tol=0, random_state=0)
    b = power_method(SampleMoment(X, n_jobs=2), 2, n_iter=40, tol=0, random_state=0)
    np.testing.assert_allclose(b.weights, a.weights, rtol=1e-10)
    np.testing.assert_allclose(np.abs(b.factors.T @ a.factors).diagonal(), 1.0, atol=1e-9)
    weights = rng.random(2000)
    np.testing.assert_allclose(
        SampleMoment(X, weights=weights, n_jobs=3).to_dense(), SampleMoment(X, weights=weights).to_dense(),
        rtol=1e-11, atol=1e-12,
    )  # fmt: skip
    o1 = OnlineTensorPower(2, batch_size=500, n_iter=3, random_state=0).fit(X, cycle=True)
    o2 = OnlineTensorPower(2, batch_size=500, n_iter=3, random_state=0, n_jobs=2).fit(X, cycle=True)
    np.testing.assert_allclose(o2.weights_, o1.weights_, rtol=1e-12)
    np.testing.assert_allclose(o2.factors_, o1.factors_, rtol=1e-10, atol=1e-13)


def test_dask_input_without_a_client_runs_on_the_local_scheduler(corpus):
    da = pytest.importorskip("dask.array")
    import dask

    X = da.from_array(sp.csr_matrix(corpus.counts, dtype=np.float64), chunks=(800, -1), asarray=False)
    a = SpectralLDA(3, corpus.alpha0, random_state=0).fit(corpus.counts)
    for scheduler in ("sync", "threads"):
        with dask.config.set(scheduler=scheduler):
            b = SpectralLDA(3, corpus.alpha0, random_state=0).fit(X)
        components_atol, alpha_rtol = spectral_fit_tolerances(a)
        np.testing.assert_allclose(b.components_, a.components_, rtol=0, atol=components_atol)
        np.testing.assert_allclose(b.alpha_, a.alpha_, rtol=alpha_rtol)
