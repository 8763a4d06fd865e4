"""Online robust tensor power method (Wang & Anandkumar 2016, Algorithm 2)."""

import json
import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor._validation import NotFittedError
from dptensor.datasets.moment_stream import make_orthogonal_moment_stream
from dptensor.decomposition.online import OnlineTensorPower
from dptensor.decomposition.power_method import default_n_iter, default_n_restarts, power_method
from dptensor.metrics import match_components
from dptensor.streams import ArrayStream, GeneratorStream, NpyStream
from dptensor.tensor.operators import DeflatedTensor, SampleMoment
from dptensor.tensor.sphere import random_unit_vectors


def _data(n=400, d=12, k=3, seed=0, sparse=False):
    stream = make_orthogonal_moment_stream(d, k, noise=0.1, random_state=seed)
    X = stream.sample(n)
    return (sp.csr_matrix(X) if sparse else X), stream


# ---------------------------------------------------------------- recovery
def test_recovers_known_components_from_a_stream():
    stream = make_orthogonal_moment_stream(30, 3, weights=[1.0, 0.8, 0.6], noise=0.1, random_state=1)
    model = OnlineTensorPower(3, batch_size=10_000, n_iter=6, random_state=0)
    model.fit(stream.batches(4096))
    assert model.n_samples_seen_ == 3 * 6 * 10_000 == model.n_samples_needed_
    match = match_components(stream.factors, model.factors_, stream.weights, model.weights_)
    # sqrt(d/n) ~ 0.05; over seeds 0-4 the worst errors seen were 0.031 (vectors) and 0.073
    # (weights), while a wrong component would be at distance ~1.4 and weight gaps are 0.2.
    assert match.max_distance < 0.1
    assert np.max(match.weight_error) < 0.2
    assert np.all(np.diff(model.weights_) <= 0)
    np.testing.assert_allclose(np.linalg.norm(model.factors_, axis=0), 1.0)


def test_recovers_from_a_sparse_high_dimensional_stream():
    stream = make_orthogonal_moment_stream(
        5000, 2, weights=[1.0, 0.7], noise=0.05, noise_density=0.002, support=10, random_state=2
    )
    assert stream.is_sparse
    model = OnlineTensorPower(2, batch_size=20_000, n_iter=5, n_restarts=8, random_state=0)
    model.fit(stream.batches(1000))
    match = match_components(stream.factors, model.factors_)
    assert match.min_inner > 0.99  # observed 0.999


# ----------------------------------------------- agreement with Algorithm 1
@pytest.mark.parametrize("sparse", [False, True])
def test_reproduces_batch_power_method_on_the_empirical_moment(sparse):
    """n points, batch_size = n, cycle=True: every round sees all n points, so each accumulator is
    SampleMoment(X).contract_pair(U) and Algorithm 2 runs Algorithm 1 (tol=0) on the same restarts."""
    X, _ = _data(n=300, sparse=sparse)
    L, R, k = 8, 40, 3
    online = OnlineTensorPower(k, batch_size=300, n_restarts=L, n_iter=R, random_state=5).fit(X, cycle=True)
    batch = power_method(SampleMoment(X), k, n_restarts=L, n_iter=R, tol=0, random_state=5)
    assert online.n_samples_seen_ == k * R * 300
    # The only differences are summation order and lambda~ taken at u_{R-1} instead of u_R,
    # both at rounding level once the restarts have converged.
    np.testing.assert_allclose(online.weights_, batch.weights, rtol=1e-9, atol=0)
    np.testing.assert_allclose(online.factors_, batch.factors, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(online.extraction_order_, batch.extraction_order)


def test_each_round_is_one_deflated_power_step_of_the_sample_moment():
    X, _ = _data(n=250, d=10)
    L, R, seed = 6, 3, 11
    model = OnlineTensorPower(2, batch_size=250, n_restarts=L, n_iter=R, random_state=seed)
    moment = SampleMoment(X)
    vectors = random_unit_vectors(10, L, np.random.default_rng(seed))
    for t in range(R):  # component 1: plain power steps
        values = moment.contract_triple(vectors)  # lambda~ is estimated at u_t ...
        image = moment.contract_pair(vectors)
        updated = image / np.linalg.norm(image, axis=0)  # ... in the same pass as u_{t+1}
        model.partial_fit(X)
        if t < R - 1:
            np.testing.assert_allclose(model._vectors, updated, rtol=1e-12, atol=1e-13)
        vectors = updated
    best = int(np.argmax(values))
    np.testing.assert_allclose(model._found_weights, [values[best]], rtol=1e-12)
    np.testing.assert_allclose(model._found_factors[:, 0], vectors[:, best], atol=1e-13)
    weight, factor = model._found_weights.copy(), model._found_factors.copy()
    deflated = DeflatedTensor(moment, weight, factor)
    vectors = model._vectors.copy()  # restarts of component 2
    for _ in range(R - 1):
        model.partial_fit(X)
        image = deflated.contract_pair(vectors)
        vectors = image / np.linalg.norm(image, axis=0)
        np.testing.assert_allclose(model._vectors, vectors, rtol=1e-12, atol=1e-13)


# ------------------------------------------------------ batching invariance
def test_batches_straddling_round_boundaries_are_split_exactly():
    X, _ = _data(n=1000)
    reference = OnlineTensorPower(3, batch_size=100, n_restarts=5, n_iter=3, random_state=0)
    reference.fit(X[:900])
    ragged = OnlineTensorPower(3, batch_size=100, n_restarts=5, n_iter=3, random_state=0)
    edges = [0, 7, 150, 151, 399, 400, 401, 777, 900]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        ragged.partial_fit(X[lo:hi])
    assert ragged.n_samples_seen_ == 900 and ragged.is_complete
    np.testing.assert_allclose(ragged.weights_, reference.weights_, rtol=1e-10)
    np.testing.assert_allclose(ragged.factors_, reference.factors_, atol=1e-10)


def test_dense_and_sparse_streams_give_the_same_result():
    X, _ = _data(n=600)
    dense = OnlineTensorPower(3, batch_size=200, n_restarts=6, n_iter=4, random_state=3).fit(X, cycle=True)
    sparse = OnlineTensorPower(3, batch_size=200, n_restarts=6, n_iter=4, random_state=3)
    sparse.fit([sp.csr_matrix(X[i : i + 50]) for i in range(0, 600, 50)], cycle=True)
    mixed = OnlineTensorPower(3, batch_size=200, n_restarts=6, n_iter=4, random_state=3)
    for i in range(0, 2400, 60):
        piece = X[i % 600 : i % 600 + 60]
        mixed.partial_fit(sp.coo_matrix(piece) if i % 120 else piece)
    for other in (sparse, mixed):
        np.testing.assert_allclose(other.weights_, dense.weights_, rtol=1e-10)
        np.testing.assert_allclose(other.factors_, dense.factors_, atol=1e-10)


def test_same_seed_same_result_and_generator_state_continues():
    X, _ = _data(n=300)
    a = OnlineTensorPower(2, batch_size=100, n_restarts=4, n_iter=3, random_state=7).fit(X, cycle=True)
    b = OnlineTensorPower(2, batch_size=100, n_restarts=4, n_iter=3, random_state=7).fit(X, cycle=True)
    np.testing.assert_array_equal(a.factors_, b.factors_)
    rng = np.random.default_rng(7)
    c = OnlineTensorPower(2, batch_size=100, n_restarts=4, n_iter=3, random_state=rng).fit(X, cycle=True)
    np.testing.assert_array_equal(a.factors_, c.factors_)
    # fit again with the same seed restarts the algorithm from scratch
    a.fit(X, cycle=True)
    np.testing.assert_array_equal(a.factors_, b.factors_)


# ----------------------------------------------------- checkpoint / resume
@pytest.mark.parametrize("stop_after", [0, 1, 5, 9, 14, 23])
def test_checkpoint_resume_is_bit_identical(tmp_path, stop_after):
    X, _ = _data(n=1200, sparse=True)
    batches = [X[i : i + 50] for i in range(0, 1200, 50)]  # 24 batches; a round is 80 points
    kwargs = dict(batch_size=80, n_restarts=5, n_iter=5, random_state=np.random.default_rng(42))
    full = OnlineTensorPower(3, **kwargs)
    for batch in batches:
        full.partial_fit(batch)
    kwargs["random_state"] = np.random.default_rng(42)
    first = OnlineTensorPower(3, **kwargs)
    for batch in batches[:stop_after]:
        first.partial_fit(batch)
    path = tmp_path / "state.ckpt"
    first.save_checkpoint(path)
    del first
    resumed = OnlineTensorPower.load_checkpoint(path)
    assert resumed.n_samples_seen_ == 50 * stop_after
    for batch in batches[stop_after:]:
        resumed.partial_fit(batch)
    np.testing.assert_array_equal(resumed.weights_, full.weights_)
    np.testing.assert_array_equal(resumed.factors_, full.factors_)
    np.testing.assert_array_equal(resumed.extraction_order_, full.extraction_order_)


def test_checkpoint_of_a_complete_fit_and_fit_resume_from_a_file(tmp_path):
    X, _ = _data(n=700)
    np.save(tmp_path / "x.npy", X)
    reader = NpyStream(tmp_path / "x.npy", 64)
    full = OnlineTensorPower(2, batch_size=100, n_restarts=4, n_iter=3, random_state=1).fit(reader)
    partial = OnlineTensorPower(2, batch_size=100, n_restarts=4, n_iter=3, random_state=1)
    for batch in list(reader)[:4]:
        partial.partial_fit(batch)
    partial.save_checkpoint(tmp_path / "c.npz")
    resumed = OnlineTensorPower.load_checkpoint(tmp_path / "c.npz").fit(reader, resume=True)
    np.testing.assert_array_equal(resumed.factors_, full.factors_)
    full.save_checkpoint(tmp_path / "done.npz")
    done = OnlineTensorPower.load_checkpoint(tmp_path / "done.npz")
    assert done.is_complete
    np.testing.assert_array_equal(done.weights_, full.weights_)


def test_checkpoint_is_arrays_and_json_without_pickle(tmp_path):
    X, _ = _data(n=100)
    rng = np.random.Generator(np.random.MT19937(3))
    model = OnlineTensorPower(2, batch_size=60, n_restarts=3, n_iter=2, random_state=rng).partial_fit(X)
    model.save_checkpoint(tmp_path / "c.npz")
    with np.load(tmp_path / "c.npz", allow_pickle=False) as archive:
        assert all(archive[name].dtype != object for name in archive.files)
        meta = json.loads(str(archive["metadata"]))
    assert meta["state"]["rng"]["bit_generator"] == "MT19937"
    restored = OnlineTensorPower.load_checkpoint(tmp_path / "c.npz")
    assert restored._rng.bit_generator.state["state"]["pos"] == rng.bit_generator.state["state"]["pos"]
    np.testing.assert_array_equal(restored._rng.random(5), rng.random(5))
    # An unfitted estimator round-trips too.
    OnlineTensorPower(2, batch_size=5, random_state=1).save_checkpoint(tmp_path / "empty.npz")
    empty = OnlineTensorPower.load_checkpoint(tmp_path / "empty.npz")
    assert empty.n_samples_seen_ == 0 and empty.random_state == 1


def test_bad_checkpoints_are_refused(tmp_path):
    np.savez(tmp_path / "other.npz", a=np.ones(3))
    with pytest.raises(ValueError, match="not an OnlineTensorPower checkpoint"):
        OnlineTensorPower.load_checkpoint(tmp_path / "other.npz")
    with pytest.raises(FileNotFoundError):
        OnlineTensorPower.load_checkpoint(tmp_path / "missing.npz")
    np.savez(tmp_path / "objects.npz", metadata=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError):
        OnlineTensorPower.load_checkpoint(tmp_path / "objects.npz")


# ------------------------------------------------------------------ errors
def test_bad_batches_raise_clear_errors():
    model = OnlineTensorPower(2, batch_size=10, random_state=0)
    with pytest.raises(ValueError, match="X_batch contains NaN"):
        model.partial_fit(np.full((3, 4), np.nan))
    with pytest.raises(ValueError, match="X_batch is empty"):
        model.partial_fit(np.zeros((0, 4)))
    with pytest.raises(ValueError, match="X_batch is empty"):
        model.partial_fit(sp.csr_matrix((0, 4)))
    with pytest.raises(ValueError, match="2-dimensional"):
        model.partial_fit(np.ones(4))
    with pytest.raises(TypeError, match="X_batch must be a numeric array"):
        model.partial_fit([["a", "b"]])
    model.partial_fit(np.ones((3, 4)))
    with pytest.raises(ValueError, match="X_batch must have 4 columns"):
        model.partial_fit(np.ones((3, 5)))
    with pytest.raises(ValueError, match="X_batch contains NaN"):
        model.partial_fit(sp.csr_matrix(np.array([[np.inf, 0, 0, 0]])))
    with pytest.raises(ValueError, match="rank must be at most the tensor dimension 4"):
        OnlineTensorPower(5, batch_size=10).partial_fit(np.ones((3, 4)))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(rank=0, batch_size=5), ValueError, "'rank' parameter .* range \\[1, inf\\)"),
        (dict(rank=2.0, batch_size=5), TypeError, "'rank' parameter .* must be an int"),
        (dict(rank=2, batch_size=0), ValueError, "'batch_size' parameter"),
        (dict(rank=2, batch_size=5, n_restarts=0), ValueError, "'n_restarts' parameter"),
        (dict(rank=2, batch_size=5, n_iter=-1), ValueError, "'n_iter' parameter"),
        (dict(rank=2, batch_size=5, target_error=0.0), ValueError, "'target_error' parameter"),
        (dict(rank=2, batch_size=5, target_error=float("inf")), ValueError, "target_error.*inf"),
        (dict(rank=2, batch_size=5, random_state="x"), TypeError, "'random_state' parameter"),
    ],
)
def test_bad_parameters(kwargs, error, message):
    # scikit-learn convention: __init__ stores, fit and partial_fit validate (before reading data)
    model = OnlineTensorPower(**kwargs)
    for method in (model.fit, model.partial_fit):
        with pytest.raises(error, match=message):
            method(np.ones((10, 4)))


def test_short_data_without_cycle_says_how_many_points_were_needed():
    X, _ = _data(n=100)
    model = OnlineTensorPower(2, batch_size=30, n_restarts=3, n_iter=2, random_state=0)
    with pytest.raises(ValueError, match=r"k\*R\*n = 2\*2\*30 = 120 points but the data set has 100"):
        model.fit(X)
    assert model.n_samples_seen_ == 0  # checked before any work
    with pytest.raises(ValueError, match=r"120 points but the stream ended after 100 points"):
        model.fit(iter([X[:50], X[50:]]))
    assert model.n_samples_seen_ == 100
    model.fit(X, cycle=True)
    assert model.is_complete and model.n_samples_seen_ == 120
    with pytest.raises(TypeError, match="re-iterable"):
        model.fit((b for b in [X]), cycle=True)
    with pytest.raises(TypeError, match="stream must be"):
        model.fit(3)


def test_default_restarts_and_rounds_follow_the_theorem():
    model = OnlineTensorPower(4, batch_size=5, random_state=0).partial_fit(np.ones((2, 40)))
    assert model.n_restarts_ == default_n_restarts(4) == max(10, math.ceil(8 * math.log(4)))
    assert model.n_iter_ == default_n_iter(40, 1e-2)
    assert model.n_samples_needed_ == 4 * model.n_iter_ * 5


def test_extra_points_warn_and_progress_is_reported():
    X, _ = _data(n=200)
    model = OnlineTensorPower(1, batch_size=50, n_restarts=3, n_iter=2, random_state=0)
    calls = []
    model.fit(ArrayStream(X, 30), progress=lambda seen, needed: calls.append((seen, needed)))
    assert calls[-1] == (100, 100) and [c[0] for c in calls] == [30, 60, 90, 100]
    with pytest.warns(UserWarning, match="last 5 points of this batch were not used"):
        model.partial_fit(X[:5])
    assert model.n_samples_seen_ == 100
    fresh = OnlineTensorPower(1, batch_size=50, n_restarts=3, n_iter=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh.fit(GeneratorStream(lambda: iter(X), 7))  # fit stops reading quietly
    np.testing.assert_allclose(fresh.factors_, model.factors_, atol=1e-12)  # other batch edges


def test_unfitted_attributes_and_result():
    model = OnlineTensorPower(2, batch_size=10, n_restarts=3, n_iter=2, random_state=0)
    assert not hasattr(model, "weights_")
    with pytest.raises(NotFittedError, match="not fitted yet"):
        model.to_result()
    X, _ = _data(n=40)
    model.fit(X)
    result = model.to_result()
    np.testing.assert_array_equal(result.weights, model.weights_)
    assert result.rank == 2 and list(result.n_iter) == [2, 2]


def test_negative_third_moment_is_reported_with_flipped_sign():
    X = np.zeros((10, 3))
    X[:, 0] = -1.0  # moment = -e1^3
    model = OnlineTensorPower(1, batch_size=10, n_restarts=4, n_iter=3, random_state=0).fit(X, cycle=True)
    np.testing.assert_allclose(model.weights_, [1.0])
    np.testing.assert_allclose(model.factors_[:, 0], [-1.0, 0, 0], atol=1e-12)
