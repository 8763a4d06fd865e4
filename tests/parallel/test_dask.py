"""The Dask backend on a real two-process cluster started here (loopback only, no network).

Every fit on a ``dask.array`` (or blocks read from files or a bag by the workers) must give the
in-memory result up to rounding; a worker killed mid-fit must leave either that result or a clear
error; the privacy noise must be drawn on the client only.
"""

import json
import os
import pickle
import signal
import time

import numpy as np
import pytest
import scipy.sparse as sp

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
db = pytest.importorskip("dask.bag")

from _tolerances import spectral_fit_tolerances  # noqa: E402

from dptensor import OnlineTensorPower, power_method, private_power_method  # noqa: E402
from dptensor.cli import main  # noqa: E402
from dptensor.datasets.lda import make_lda_corpus  # noqa: E402
from dptensor.models import PrivateSpectralLDA, SpectralLDA  # noqa: E402
from dptensor.models.topics.moments import LDASecondMoment, prepare_documents  # noqa: E402
from dptensor.parallel import BlockIntegrityError, DaskRowBlocks, from_bag, from_files  # noqa: E402
from dptensor.privacy import NoiseSource, insecure_test_noise  # noqa: E402
from dptensor.privacy.audit import observable_differences, observe  # noqa: E402
from dptensor.tensor import SampleMoment  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dptensor.privacy.PrivacyWarning")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
        worker_dashboard_address=None,
    )  # fmt: skip
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


@pytest.fixture(scope="module")
def corpus():
    return make_lda_corpus(4000, 80, 3, alpha=0.2, doc_length=30, random_state=0)


def _chunked(matrix, rows=700):
    return da.from_array(sp.csr_matrix(matrix, dtype=np.float64), chunks=(rows, -1), asarray=False)


def test_spectral_lda_on_a_dask_array_equals_in_memory(client, corpus):
    X = _chunked(corpus.counts)
    # Dense whitening: equal up to what the power iteration's stopping tolerance allows
    # (tests/_tolerances.py); randomised (a fixed number of single-precision products): ~1e-7.
    for whitening in ("dense", "randomized"):
        kw = dict(whitening=whitening, whitening_tol=None, random_state=0)
        a = SpectralLDA(3, corpus.alpha0, **kw).fit(corpus.counts)
        b = SpectralLDA(3, corpus.alpha0, **kw).fit(X)
        components_rtol, (components_atol, alpha_rtol) = 0, spectral_fit_tolerances(a)
        if whitening == "randomized":
            components_rtol, components_atol, alpha_rtol = 1e-5, 1e-7, 1e-5
        np.testing.assert_allclose(b.components_, a.components_, rtol=components_rtol, atol=components_atol)
        np.testing.assert_allclose(b.alpha_, a.alpha_, rtol=alpha_rtol)
        assert (b.n_documents_, b.n_dropped_documents_) == (a.n_documents_, a.n_dropped_documents_)
    # partial_fit on Dask batches
    a, b = SpectralLDA(3, corpus.alpha0, random_state=0), SpectralLDA(3, corpus.alpha0, random_state=0)
    for start in (0, 2000):
        a.partial_fit(corpus.counts[start : start + 2000])
        b.partial_fit(X[start : start + 2000])
    components_atol, alpha_rtol = spectral_fit_tolerances(a)
    np.testing.assert_allclose(b.components_, a.components_, rtol=0, atol=components_atol)
    np.testing.assert_allclose(b.alpha_, a.alpha_, rtol=alpha_rtol)


def test_blocks_from_files_and_from_a_bag(client, corpus, tmp_path):
    counts = sp.csr_matrix(corpus.counts)
    paths = []
    for i, start in enumerate(range(0, 4000, 1500)):
        paths.append(tmp_path / f"part{i}.npz")
        sp.save_npz(paths[-1], counts[start : start + 1500])
    a = SpectralLDA(3, corpus.alpha0, random_state=0).fit(counts)
    b = SpectralLDA(3, corpus.alpha0, random_state=0).fit(from_files(paths))
    components_atol, alpha_rtol = spectral_fit_tolerances(a)
    np.testing.assert_allclose(b.components_, a.components_, rtol=0, atol=components_atol)
    documents = [dict(zip(row.indices.tolist(), row.data.tolist(), strict=True)) for row in counts]
    bag = db.from_sequence(documents, npartitions=3)
    c = SpectralLDA(3, corpus.alpha0, random_state=0).fit(from_bag(bag, counts.shape[1]))
    np.testing.assert_allclose(c.components_, a.components_, rtol=0, atol=components_atol)


def test_power_method_online_and_private_power_method_on_dask(client):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6000, 15)) ** 3
    Xd = da.from_array(X, chunks=(1500, 15))
    # tol=0: exactly n_iter steps each, the same path whatever the rounding (tests/_tolerances.py)
    a = power_method(SampleMoment(X), 2, n_iter=30, tol=0, random_state=0)
    b = power_method(SampleMoment(Xd), 2, n_iter=30, tol=0, random_state=0)
    np.testing.assert_allclose(b.weights, a.weights, rtol=1e-10)
    np.testing.assert_allclose(np.abs(b.factors.T @ a.factors).diagonal(), 1.0, atol=1e-9)
    o1 = OnlineTensorPower(2, batch_size=1000, n_iter=3, random_state=0).fit(X)
    o2 = OnlineTensorPower(2, batch_size=1000, n_iter=3, random_state=0).fit(Xd)
    np.testing.assert_allclose(o2.factors_, o1.factors_, rtol=1e-10, atol=1e-13)
    p = [
        private_power_method(data, 2, epsilon=5.0, delta=1e-6, record_bound=4.0, n_iter=8, random_state=0,
                             noise=insecure_test_noise(2))
        for data in (X, Xd)
    ]  # fmt: skip
    np.testing.assert_allclose(p[1].factors, p[0].factors, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("whitening", ["analyze-gauss", "noisy-power"])
def test_private_lda_on_dask_equals_in_memory_and_draws_noise_on_the_client(
    client, corpus, whitening, monkeypatch
):
    def fit(X):
        return PrivateSpectralLDA(
            3, corpus.alpha0, epsilon=50.0, delta=1e-6, private_whitening=whitening, random_state=0,
            noise=insecure_test_noise(5),
        ).fit(X)  # fmt: skip

    a = fit(corpus.counts)

    # The secret noise source cannot be sent to a worker: pickling it fails during this fit.
    def refuse(self, protocol):
        raise pickle.PicklingError("the noise source must stay on the client")

    monkeypatch.setattr(NoiseSource, "__reduce_ex__", refuse)
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(NoiseSource("numpy", np.random.default_rng(0), secure=True))
    b = fit(_chunked(corpus.counts))
    np.testing.assert_allclose(b.components_, a.components_, rtol=1e-9, atol=1e-12)
    assert b.guarantee_.to_dict() == a.guarantee_.to_dict()


def test_private_lda_on_dask_neighbouring_pair_observables(client, corpus):
    first = sp.csr_matrix(corpus.counts, dtype=np.float64)
    second = first.tolil(copy=True)
    second[17, :] = 0
    second[17, 5] = 40
    pair = [_chunked(first), _chunked(second.tocsr())]

    def fit(X):
        model = PrivateSpectralLDA(3, corpus.alpha0, epsilon=1.0, delta=1e-6, random_state=0, verbose=True)
        return model.fit(X)

    a, b = observe(fit, pair[0]), observe(fit, pair[1])
    assert a.exception is None and not observable_differences(a, b)


def test_cli_with_a_scheduler_gives_the_in_process_result(client, corpus, tmp_path, capsys):
    address = client.scheduler.address
    counts = sp.csr_matrix(corpus.counts)
    sp.save_npz(tmp_path / "counts.npz", counts)
    parts = tmp_path / "parts"
    parts.mkdir()
    for i, start in enumerate(range(0, 4000, 2000)):
        sp.save_npz(parts / f"p{i}.npz", counts[start : start + 2000])
    base = ["lda", "fit", "--topics", "3", "--alpha0", str(corpus.alpha0), "--seed", "0", "--quiet"]
    outputs = {}
    for name, extra in {
        "here": [str(tmp_path / "counts.npz")],
        "threads": [str(tmp_path / "counts.npz"), "--jobs", "2"],
        "cluster": [str(tmp_path / "counts.npz"), "--scheduler", address],
        "parts": [str(parts), "--scheduler", address],
    }.items():
        assert main(base + extra + ["--out", str(tmp_path / f"{name}.json")]) == 0
        outputs[name] = np.asarray(json.loads((tmp_path / f"{name}.json").read_text())["components"])
    capsys.readouterr()
    for name in ("threads", "cluster", "parts"):
        np.testing.assert_allclose(outputs[name], outputs["here"], rtol=1e-8, atol=1e-12)
    private = ["--epsilon", "20", "--delta", "1e-6"]
    loud = [arg for arg in base if arg != "--quiet"]
    assert main(loud + [str(tmp_path / "counts.npz"), "--scheduler", address] + private) == 0
    assert "passes over the documents: Dask cluster" in capsys.readouterr().err
    assert main(["decompose", "--moment-of", str(tmp_path / "counts.npz"), "--rank", "2", "--iters", "20",
                 "--seed", "0", "--scheduler", address]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "passes over the records: Dask cluster" in printed
    assert main(["decompose", "--moment-of", str(tmp_path / "counts.npz"), "--rank", "2", "--jobs", "2",
                 "--scheduler", address]) == 2  # fmt: skip
    assert "--jobs sets threads in this process" in capsys.readouterr().err


class _KillOnce(distributed.WorkerPlugin):
    """Kill the worker process the first time it starts a task of the given pass."""

    def __init__(self, prefix: str, marker: str) -> None:
        self.prefix, self.marker = prefix, marker

    def transition(self, key, start, finish, **kwargs):
        if finish == "executing" and str(key).startswith(self.prefix) and not os.path.exists(self.marker):
            with open(self.marker, "w"):
                pass
            os.kill(os.getpid(), signal.SIGKILL)


def _wait_for_workers(client, n, timeout=30.0):
    deadline = time.monotonic() + timeout
    while len(client.scheduler_info()["workers"]) != n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cluster did not get back to {n} workers")
        time.sleep(0.1)


def test_a_worker_killed_mid_fit_gives_the_same_result(client, corpus, tmp_path):
    a = SpectralLDA(3, corpus.alpha0, random_state=0).fit(corpus.counts)
    marker = tmp_path / "killed"
    client.register_plugin(_KillOnce("dptensor-whitened-m3", str(marker)), name="kill-once")
    try:
        b = SpectralLDA(3, corpus.alpha0, random_state=0).fit(_chunked(corpus.counts, 500))
    finally:
        client.unregister_worker_plugin("kill-once")
    assert marker.exists()  # a worker did die during the pass
    np.testing.assert_allclose(b.components_, a.components_, rtol=1e-9, atol=1e-12)
    _wait_for_workers(client, 2)


def test_a_block_recomputed_from_a_changed_source_is_refused(client, corpus, tmp_path):
    counts = sp.csr_matrix(corpus.counts)
    paths = [tmp_path / "a.npz", tmp_path / "b.npz"]
    sp.save_npz(paths[0], counts[:2000])
    sp.save_npz(paths[1], counts[2000:])
    docs = prepare_documents(from_files(paths))
    LDASecondMoment(docs, 1.0)  # a clean pass
    sp.save_npz(paths[0], counts[1000:3000])  # same shape, other documents
    assert isinstance(docs.blocks, DaskRowBlocks)
    key = docs.blocks.blocks[0].key
    holders = client.who_has()[key]
    pids = client.run(os.getpid, workers=list(holders))
    for pid in pids.values():
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while any(w in client.scheduler_info()["workers"] for w in holders):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    with pytest.raises(BlockIntegrityError, match=r"block\(s\) \[0\] changed since they were prepared"):
        LDASecondMoment(docs, 1.0)
    _wait_for_workers(client, 2)
