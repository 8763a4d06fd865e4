"""Issue 17: PrivacyWarning for weak budgets, stray privacy parameters, fresh noise per fit,
online checkpoints refusing other data."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.datasets.lda import make_lda_corpus
from dptensor.decomposition import input_perturbation, private_power_method
from dptensor.decomposition._online_checkpoint import data_fingerprint
from dptensor.decomposition.online import OnlineTensorPower
from dptensor.models import DPVariationalLDA, PrivateSpectralLDA, SingleTopicModel, TensorCompletion
from dptensor.models.completion import CompletionOptions
from dptensor.models.topics.dp_vi_options import DPVIOptions
from dptensor.privacy import PrivacyWarning, insecure_test_noise
from dptensor.privacy.audit import observable_differences, observe
from dptensor.privacy.warnings import EPSILON_WARNING_THRESHOLD, check_privacy_parameters
from dptensor.streams import NpyStream


def _privacy_warnings(function, *args, **kwargs) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        function(*args, **kwargs)
    return [str(w.message) for w in caught if issubclass(w.category, PrivacyWarning)]


def test_helper_thresholds():
    assert EPSILON_WARNING_THRESHOLD == 10.0
    assert _privacy_warnings(check_privacy_parameters, 10.0, 1e-3, n_public=999) == []
    (message,) = _privacy_warnings(check_privacy_parameters, 10.5, None)
    assert "epsilon=10.5 exceeds 10" in message
    (message,) = _privacy_warnings(check_privacy_parameters, 1.0, 1e-3, n_public=1000, unit="users")
    assert "delta=0.001 >= 1/n = 1/1000 (users" in message
    # no public n: no delta check (warning on a private count would be a side channel)
    assert _privacy_warnings(check_privacy_parameters, 1.0, 0.5) == []


@pytest.fixture(scope="module")
def corpus():
    return make_lda_corpus(400, 30, 2, alpha=0.3, doc_length=30, random_state=0)


def _lda_models(epsilon, delta):
    return {
        "PrivateSpectralLDA": PrivateSpectralLDA(2, alpha0=0.6, epsilon=epsilon, delta=delta, random_state=0),
        "DPVariationalLDA": DPVariationalLDA(2, epsilon=epsilon, delta=delta, random_state=0,
                                             options=DPVIOptions(n_passes=1, batch_size=100)),
        "SingleTopicModel": SingleTopicModel(2, mechanism="agn", input="counts", moments="all",
                                             epsilon=epsilon, delta=delta, random_state=0),
    }


@pytest.mark.parametrize("name", ["PrivateSpectralLDA", "DPVariationalLDA", "SingleTopicModel"])
def test_lda_models_warn_on_weak_budgets_identically_on_neighbours(corpus, name):
    X = corpus.counts.tocsr()
    n = X.shape[0]
    # replace-one neighbour: the last document's counts replaced by another document's
    neighbour = sp.vstack([X[:-1], X[:1]]).tocsr()
    model = _lda_models(20.0, 2.0 / n)[name]
    first = observe(lambda data: model.fit(data).guarantee_, X)
    second = observe(lambda data: model.fit(data).guarantee_, neighbour)
    assert [c for c, _ in first.warnings].count("PrivacyWarning") == 2  # (observe masks the numbers)
    assert observable_differences(first, second) == []
    messages = _privacy_warnings(model.fit, X)
    assert any("epsilon=20 exceeds" in m for m in messages), messages
    assert any(f"1/n = 1/{n} (documents" in m for m in messages), messages
    quiet = _lda_models(1.0, 1e-6)[name]
    assert _privacy_warnings(quiet.fit, X) == []


def test_tensor_completion_warnings_use_public_counts_only():
    rng = np.random.default_rng(0)
    shape = (20, 6, 3)
    indices = np.column_stack([rng.integers(0, s, 300) for s in shape])
    values = rng.uniform(1, 5, 300)
    neighbour = values.copy()
    neighbour[0] = 5.0 if values[0] < 3 else 1.0  # entry-value: one observed value changes
    model = TensorCompletion(2, privacy="als", neighbouring="entry-value", epsilon=11.0, delta=0.01,
                             value_range=(1, 5), random_state=0, options=CompletionOptions(max_iter=2))
    first = observe(lambda v: model.fit(indices, v, shape).guarantee_, values)
    second = observe(lambda v: model.fit(indices, v, shape).guarantee_, neighbour)
    assert [c for c, _ in first.warnings].count("PrivacyWarning") == 2
    assert observable_differences(first, second) == []
    messages = _privacy_warnings(model.fit, indices, values, shape)
    assert any("epsilon=11 exceeds" in m for m in messages)
    assert any("1/n = 1/300 (observed entries" in m for m in messages)
    # user relation: n is the number of users (shape[0]), public; 1/20 = 0.05
    user = TensorCompletion(2, privacy="als", neighbouring="user", epsilon=1.0, delta=0.06,
                            value_range=(1, 5), random_state=0, options=CompletionOptions(max_iter=2))
    (message,) = _privacy_warnings(user.fit, indices, values, shape)
    assert "1/n = 1/20 (users" in message


def test_functional_apis_warn():
    rng = np.random.default_rng(0)
    records = rng.standard_normal((50, 4)) / 4
    messages = _privacy_warnings(private_power_method, records, 1, epsilon=12.0, delta=0.05,
                                 record_bound=1.0, noise=insecure_test_noise(0))
    assert any("epsilon=12 exceeds" in m for m in messages)
    assert any("1/n = 1/50 (records" in m for m in messages)
    messages = _privacy_warnings(input_perturbation, records, 1, epsilon=12.0, delta=1e-6,
                                 record_bound=1.0, noise=insecure_test_noise(0))
    assert any("private_power_method" not in m and "epsilon=12 exceeds" in m for m in messages)


@pytest.mark.parametrize("kwargs", [{"epsilon": 1.0}, {"delta": 1e-6}, {"noise": insecure_test_noise(0)},
                                    {"noise": "opendp"}, {"neighbouring": "entry-value"}])
def test_tensor_completion_privacy_parameters_without_privacy_mode_are_an_error(kwargs):
    indices = np.array([[0, 0, 0], [1, 1, 1], [0, 1, 0], [1, 0, 1]])
    model = TensorCompletion(1, **kwargs)  # __init__ accepts (scikit-learn convention) ...
    with pytest.raises(ValueError, match=f"{next(iter(kwargs))} given without privacy"):
        model.fit(indices, np.ones(4), (2, 2, 2))  # ... fit refuses
    assert not hasattr(model, "factors_")


def test_same_random_state_gives_different_private_outputs(corpus):
    X = corpus.counts.tocsr()
    for name, model in _lda_models(1.0, 1e-6).items():
        a = model.fit(X).components_.copy()
        b = model.fit(X).components_.copy()
        assert not np.allclose(a, b), name
    rng = np.random.default_rng(0)
    shape = (20, 6, 3)
    indices = np.column_stack([rng.integers(0, s, 300) for s in shape])
    values = rng.uniform(1, 5, 300)
    model = TensorCompletion(2, privacy="als", neighbouring="entry-value", epsilon=1.0, delta=1e-6,
                             value_range=(1, 5), random_state=0, options=CompletionOptions(max_iter=2))
    assert not np.allclose(model.fit(indices, values, shape).predict(indices),
                           model.fit(indices, values, shape).predict(indices))


# -- online checkpoints (issue 17, bug 2a) ---------------------------------------------------------
def test_checkpoint_refuses_other_data(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((200, 6))
    b = rng.standard_normal((200, 6))
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    model = OnlineTensorPower(2, batch_size=50, n_iter=2, n_restarts=3, random_state=0)
    model.partial_fit(a[:60])
    model._data_fingerprint = data_fingerprint(NpyStream(tmp_path / "a.npy", 50))
    model.save_checkpoint(tmp_path / "state.npz")
    resumed = OnlineTensorPower.load_checkpoint(tmp_path / "state.npz")
    with pytest.raises(ValueError, match=r"checkpoint .*state\.npz was computed on other data.*b\.npy"):
        resumed.fit(NpyStream(tmp_path / "b.npy", 50), resume=True, cycle=True)
    assert resumed.n_samples_seen_ == 60  # nothing was read
    np.save(tmp_path / "wide.npy", rng.standard_normal((200, 4)))
    with pytest.raises(ValueError, match="n_features 6 vs 4"):
        OnlineTensorPower.load_checkpoint(tmp_path / "state.npz").fit(
            NpyStream(tmp_path / "wide.npy", 50), resume=True, cycle=True)
    # the same data resumes, and the result equals an uninterrupted run
    done = OnlineTensorPower.load_checkpoint(tmp_path / "state.npz").fit(
        NpyStream(tmp_path / "a.npy", 60), resume=True, cycle=True)
    whole = OnlineTensorPower(2, batch_size=50, n_iter=2, n_restarts=3, random_state=0).fit(
        NpyStream(tmp_path / "a.npy", 60), cycle=True)
    np.testing.assert_allclose(done.weights_, whole.weights_)


def test_checkpoint_written_by_fit_carries_the_fingerprint(tmp_path):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((100, 5))
    b = a.copy()
    b[0, 0] += 1.0  # same name, shape: the content hash tells them apart
    model = OnlineTensorPower(1, batch_size=40, n_iter=3, n_restarts=2, random_state=0)
    seen = []

    def stop_after_first_round(done, needed):
        seen.append(done)
        if done >= 40 and len(seen) == 1:
            model.save_checkpoint(tmp_path / "ck.npz")

    model.fit(a, cycle=True, progress=stop_after_first_round)
    resumed = OnlineTensorPower.load_checkpoint(tmp_path / "ck.npz")
    assert resumed._data_fingerprint["source"] == "array"
    with pytest.raises(ValueError, match="head_sha256"):
        resumed.fit(b, resume=True, cycle=True)
    OnlineTensorPower.load_checkpoint(tmp_path / "ck.npz").fit(a, resume=True, cycle=True)
