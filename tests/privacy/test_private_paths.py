"""Regression tests for issue 27 (private paths that no input breaks), one per finding.

The neighbouring-input fuzzer (``tests/privacy/test_privacy_fuzzer.py``) covers every entry point; these
tests pin each finding down directly, with the exact input the audit reported.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from _helpers import write_ratings_csv

from dptensor import SingleTopicModel, TensorCompletion
from dptensor.cli import main
from dptensor.datasets.corpus import load_corpus
from dptensor.datasets.entries import read_entries
from dptensor.models._options import build_estimator
from dptensor.models.completion import CompletionOptions
from dptensor.models.topics.dp_vi import DPVariationalLDA
from dptensor.models.topics.moments import check_count_matrix
from dptensor.models.topics.private_spectral import PrivateSpectralLDA
from dptensor.models.topics.single_topic import single_topic_release
from dptensor.privacy import NoiseSource, PrivacyWarning
from dptensor.privacy.audit import observable_differences, observe

SHAPE = (5, 4, 2)


def _counts(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 4, size=(30, 6)).astype(float)
    counts[:, 0] += 3
    return counts


# -- finding 1: extreme but valid documents (the single-topic model and the corpus readers)


@pytest.mark.parametrize("mechanism", ["agn", "avn", "dp_tpm"])
@pytest.mark.parametrize("count", [1e110, 1e160, 1.7e308])
def test_single_topic_model_extreme_document_is_unobservable(mechanism, count):
    """1e110 warned (overflow), 1e160 raised 'tensor contains NaN or infinite entries'."""
    counts = _counts()
    neighbour = counts.copy()
    neighbour[0] = 0.0
    neighbour[0, 1] = neighbour[0, 2] = count

    def fit(x):
        return SingleTopicModel(2, mechanism=mechanism, epsilon=1.0, delta=1e-6, moments="all", n_restarts=2,
                                n_iter=3, random_state=0).fit(sp.csr_matrix(x))

    first, second = observe(fit, counts), observe(fit, neighbour)
    assert first.exception is None and first.warnings == []
    assert observable_differences(first, second) == []
    assert np.all(np.isfinite(second.result.components_)) and np.all(np.isfinite(second.result.weights_))


@pytest.mark.parametrize("suffix", [".mtx", ".npz", "uci"])
def test_corpus_counts_beyond_int64_are_read_without_wrapping(tmp_path, suffix):
    """A count >= 2**63 wrapped negative ('negative counts (min -9.2e18)'), or was called non-integer."""
    if suffix == "uci":
        path = tmp_path / "docword.x.txt"
        path.write_text("2\n3\n3\n1 1 4\n1 2 10000000000000000000\n2 3 5\n")
    else:
        path = tmp_path / f"counts{suffix}"
        matrix = sp.csr_matrix(np.array([[4.0, 1e19, 0.0], [0.0, 0.0, 5.0]]))
        if suffix == ".npz":
            sp.save_npz(path, matrix)
        else:
            import scipy.io

            scipy.io.mmwrite(str(path), matrix)
    counts = load_corpus(path).counts
    assert counts.toarray().tolist() == [[4.0, 1e19, 0.0], [0.0, 0.0, 5.0]]


def test_corpus_reads_the_largest_int64_count_without_wrapping(tmp_path):
    path = tmp_path / "counts.npz"
    sp.save_npz(path, sp.csr_matrix(np.array([[2**63 - 1, 0, 3]], dtype=np.int64)))
    counts = load_corpus(path).counts.toarray()
    assert counts.min() == 0 and counts.max() == float(2**63 - 1)


# -- findings 2 and 3: joint DP aggregated, and the empty neighbour, under the user relation


def _ratings(user_values: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    indices = np.array([[0, 0, 0], [0, 1, 1], [0, 2, 0], [1, 1, 0], [2, 3, 1], [3, 0, 1], [4, 2, 1]])
    values = np.array([user_values] * 3 + [3.0, 4.0, 2.0, 5.0])
    return indices, values


def _complete_user(tmp_path, train_name: str) -> tuple[int, dict, str]:
    argv = ["complete", str(tmp_path / train_name), "--shape", *map(str, SHAPE), "--rank", "2",
            "--privacy", "als", "--neighbouring", "user", "--epsilon", "1", "--value-range", "1", "5",
            "--max-iter", "2",
            "--test", str(tmp_path / "test.csv"), "--json", str(tmp_path / f"{train_name}.json"), "--quiet"]
    observation = observe(main, argv)
    payload = json.loads((tmp_path / f"{train_name}.json").read_text()) if observation.result == 0 else {}
    return observation.result, payload, observation.printed


def test_complete_user_relation_releases_no_aggregate_of_user_predictions(tmp_path):
    """The test RMSE came from every user's un-noised row (0.45-0.55 vs 3.43-3.59 for neighbours)."""
    write_ratings_csv(tmp_path / "train.csv", *_ratings())
    (tmp_path / "test.csv").write_text("0,0,1,5.0\n1,2,1,4.0\n")
    code, payload, printed = _complete_user(tmp_path, "train.csv")
    assert code == 0
    assert payload["test_rmse"] is None and payload["n_test"] is None
    assert "not computed under --neighbouring user" in printed and "test RMSE #" not in printed


def test_empty_neighbour_fits_under_the_user_relation(tmp_path):
    """Only user 0 has ratings; its neighbour without them is empty and fit raised."""
    indices, values = _ratings()
    mine = indices[:, 0] == 0

    def fit(idx, vals):
        return TensorCompletion(2, privacy="als", neighbouring="user", epsilon=1.0, delta=1e-5,
                                value_range=(1, 5), random_state=0,
                                options=CompletionOptions(max_ratings=4, max_iter=2)).fit(idx, vals, SHAPE)

    first = observe(fit, indices[mine], values[mine])
    second = observe(fit, np.zeros((0, 3), dtype=np.int64), np.zeros(0))
    assert first.exception is None and observable_differences(first, second) == []
    assert second.result.guarantee_ == first.result.guarantee_
    assert np.all(np.isfinite(second.result.predict(np.array([[0, 0, 0], [4, 3, 1]]))))
    # through the command line: an empty ratings file is a neighbour as well
    write_ratings_csv(tmp_path / "one.csv", indices[mine], values[mine])
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "test.csv").write_text("0,0,1,5.0\n")
    assert _complete_user(tmp_path, "one.csv")[0] == _complete_user(tmp_path, "empty.csv")[0] == 0
    # outside the user relation no entries is still an input error
    with pytest.raises(ValueError, match="no observed entries"):
        TensorCompletion(1).fit(np.zeros((0, 3), int), [], (2, 2, 2))


# -- finding 6: bools are not budgets


@pytest.mark.parametrize("make", [
    lambda **b: SingleTopicModel(2, mechanism="agn", moments="all", **b),
    lambda **b: PrivateSpectralLDA(2, alpha0=1.0, **b),
    lambda **b: DPVariationalLDA(2, **b),
    lambda **b: build_estimator(TensorCompletion, rank=2, privacy="als", neighbouring="entry-value",
        value_range=(1, 5), **b),
])
@pytest.mark.parametrize("budget", [{"epsilon": True, "delta": 1e-6}, {"epsilon": 1.0, "delta": np.True_}])
def test_bool_budgets_are_refused(make, budget):
    """epsilon=True was accepted and charged as epsilon = 1."""
    model = make(**budget)
    with pytest.raises((ValueError, TypeError), match="not a bool"):
        if isinstance(model, TensorCompletion):
            model.fit(*_ratings(), SHAPE)
        else:
            model.fit(sp.csr_matrix(_counts()))
    assert not hasattr(model, "guarantee_") or model.__dict__.get("guarantee_") is None
    with pytest.raises(ValueError, match="epsilon"):
        single_topic_release("agn", True, 1e-6, 100, 2)


# -- finding 7: messages on private paths name only public facts


def test_messages_name_no_private_values(tmp_path):
    """'min -7', the count of NaNs and the offending index were in the messages."""
    with pytest.raises(ValueError, match="negative counts") as info:
        check_count_matrix(np.array([[1.0, -7.0, 3.0]]))
    assert "7" not in str(info.value)
    indices, values = _ratings()
    nan_values = values.copy()
    nan_values[:3] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite") as info:
        TensorCompletion(2).fit(indices, nan_values, SHAPE)
    assert "3" not in str(info.value)
    outside = indices.copy()
    outside[0, 0] = 7
    with pytest.raises(ValueError, match=r"indices\[:, 0\] must lie in \[0, 4\]") as info:
        TensorCompletion(2, privacy="als", neighbouring="user", epsilon=1.0, value_range=(1, 5)).fit(
            outside, values, SHAPE)
    assert "7" not in str(info.value)
    path = tmp_path / "bad.csv"
    path.write_text("0,0,0,1\n-6,1,1,2\n")
    with pytest.raises(ValueError, match="negative index") as info:
        read_entries(path)
    assert "6" not in str(info.value).replace(str(path), "")


# -- finding 4: under noise="opendp" the Gaussian releases go through OpenDP's measurement on the values


class _RecordingNoise(NoiseSource):
    """A NumPy noise source that records what each ``add_gaussian`` call was given."""

    def __init__(self) -> None:
        super().__init__("numpy", np.random.default_rng(), secure=True)
        self.inputs: list[np.ndarray] = []

    def add_gaussian(self, values, sigma):
        self.inputs.append(np.array(values, dtype=float, copy=True))
        return super().add_gaussian(values, sigma)


@pytest.mark.parametrize("release", ["single-topic agn", "input_perturbation entry",
                                     "input_perturbation record", "private spectral LDA"])
def test_dense_symmetric_releases_add_noise_to_the_values(release):
    """OpenDP sampled the noise on zeros and NumPy added it: every add_gaussian call got zeros."""
    from dptensor import input_perturbation
    from dptensor.tensor import SampleMoment

    source = _RecordingNoise()
    rng = np.random.default_rng(3)
    if release == "single-topic agn":
        SingleTopicModel(2, mechanism="agn", epsilon=1.0, delta=1e-6, moments="all", noise_sampler="dense",
                         noise=source, random_state=0).fit(sp.csr_matrix(_counts()))
    elif release == "input_perturbation entry":
        v = rng.standard_normal(4)
        input_perturbation(np.einsum("a,b,c->abc", v, v, v), 1, epsilon=1.0, delta=1e-6, noise=source)
    elif release == "input_perturbation record":
        x = rng.standard_normal((20, 4)) / 4
        input_perturbation(SampleMoment(x), 1, epsilon=1.0, delta=1e-6, neighbouring="record",
                           record_bound=1.0, noise=source)
    else:
        PrivateSpectralLDA(2, alpha0=1.0, epsilon=1.0, delta=1e-6, private_whitening="analyze-gauss",
                           noise=source, random_state=0).fit(sp.csr_matrix(_counts()))
    assert source.inputs and all(np.any(values != 0) for values in source.inputs)


def test_add_symmetric_gaussian_has_the_law_of_symmetric_noise_and_uses_opendp_on_values():
    from dptensor.privacy import add_symmetric_gaussian, insecure_test_noise, symmetric_gaussian_tensor

    rng = np.random.default_rng(0)
    v = rng.standard_normal(4)
    tensor = np.einsum("a,b,c->abc", v, v, v)
    with pytest.warns(PrivacyWarning):
        added = add_symmetric_gaussian(tensor, 0.5, convention="entry", noise=insecure_test_noise(7))
        noise = symmetric_gaussian_tensor(4, 0.5, convention="entry", noise=insecure_test_noise(7))
    reference = tensor + noise
    np.testing.assert_allclose(added, reference, rtol=0, atol=1e-15)
    released = add_symmetric_gaussian(tensor, 0.5, noise="opendp")
    np.testing.assert_array_equal(released, np.transpose(released, (1, 0, 2)))
    np.testing.assert_array_equal(released, np.transpose(released, (2, 1, 0)))
    assert np.all(released != tensor)


def test_bool_budgets_are_refused_by_the_calibration_functions():
    from dptensor.models.topics._dp_vi_accounting import dp_vi_noise_multiplier
    from dptensor.privacy.calibration import classic_gaussian_formula, gaussian_delta

    with pytest.raises(ValueError, match="epsilon"):
        gaussian_delta(1.0, True)
    with pytest.raises(ValueError, match="epsilon"):
        classic_gaussian_formula(True, 1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        dp_vi_noise_multiplier(True, 1e-5, 0.1, 10)
    with pytest.raises(ValueError, match="delta"):
        dp_vi_noise_multiplier(1.0, True, 0.1, 10)
