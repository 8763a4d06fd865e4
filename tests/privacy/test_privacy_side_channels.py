"""Side channels: for each leak the audit found, a neighbouring pair whose observables must agree.

Each test runs a private path on two neighbouring inputs and compares everything a caller can
observe besides the noised release -- warnings, the exception or its absence, the attributes of
the result (names, types, shapes), printed text, the files a command writes and their structure
-- with :mod:`dptensor.privacy.audit`. Released numbers are masked; quantities that must not
depend on the data at all (the guarantee, declared ranges, noise scales) are compared exactly.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _helpers import random_ratings, write_ratings_csv

from dptensor import TensorCompletion, input_perturbation, private_power_method
from dptensor.cli import observe_command
from dptensor.models._options import build_estimator
from dptensor.models.completion import CompletionOptions
from dptensor.models.topics.dp_vi_options import DPVIOptions
from dptensor.privacy import UnprovenPrivacyError, enable_features
from dptensor.privacy.audit import observable_differences, observe
from dptensor.tensor import SampleMoment


def _assert_indistinguishable(first, second):
    assert observable_differences(first, second) == []


# ------------------------------------------------------------------ record relation


def _record_pair(n=40, d=5, bound=1.0, outlier=1e3):
    """X with every norm <= B, and X' with one record replaced by one far above B."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d))
    x /= 2 * np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1.0)  # all norms <= 0.5
    neighbour = x.copy()
    neighbour[3] = outlier
    with np.errstate(over="ignore"):
        assert np.all(np.linalg.norm(x, axis=1) <= bound) and np.linalg.norm(neighbour[3]) > bound
    return x, neighbour


@pytest.mark.parametrize("outlier", [1e3, 1e300, -1.7e308])
@pytest.mark.parametrize("func", [private_power_method, input_perturbation])
@pytest.mark.parametrize("as_moment", [False, True])
def test_record_relation_clipping_is_unobservable(func, outlier, as_moment):
    """The clipping warning (and the clip_records=False error) told X from X' with certainty."""
    x, neighbour = _record_pair(outlier=outlier)
    kwargs = dict(epsilon=1.0, delta=1e-6, neighbouring="record", record_bound=1.0, n_restarts=3)
    if func is private_power_method:
        kwargs["n_iter"] = 3
    wrap = SampleMoment if as_moment else (lambda data: data)
    first = observe(func, wrap(x), 2, **kwargs)
    second = observe(func, wrap(neighbour), 2, **kwargs)
    assert first.exception is None and first.warnings == []
    _assert_indistinguishable(first, second)
    assert first.result.guarantee == second.result.guarantee
    assert np.all(np.isfinite(second.result.factors)) and np.all(np.isfinite(second.result.weights))


# ------------------------------------------------------------------ tensor completion


def _ratings():
    return random_ratings(shape=(12, 10, 6), density=0.5)


@pytest.mark.parametrize("extreme", [1e155, 1e308, -1e308])
@pytest.mark.parametrize("model", ["cp", "tucker"])
def test_dpsgd_extreme_value_is_unobservable(extreme, model):
    """One value of 1e155 made every fit raise FloatingPointError while its neighbour never did."""
    indices, values, shape = _ratings()
    neighbour = values.copy()
    neighbour[7] = extreme

    def fit(vals):
        return TensorCompletion(2, model=model, privacy="gradient_dpsgd", neighbouring="entry-value",
                                epsilon=1.0, delta=1e-5, random_state=0,
                                options=CompletionOptions(n_epochs=3, batch_size=64)).fit(indices, vals,
                                                                                          shape)

    first, second = observe(fit, values), observe(fit, neighbour)
    assert first.exception is None and first.warnings == []
    _assert_indistinguishable(first, second)
    for obs in (first, second):
        model_ = obs.result
        assert model_.history_ == []  # never a training error on private values
        assert all(np.all(np.isfinite(f)) for f in model_.factors_)
    assert first.result.guarantee_ == second.result.guarantee_


@pytest.mark.parametrize("extreme", [1e308, -1e308, 6.0])
def test_output_clipped_reads_values_only_inside_the_declared_range(extreme):
    """At 1e308 the changed entry's row became NaN while the guarantee said it held."""
    indices, values, shape = _ratings()
    neighbour = values.copy()
    neighbour[5] = extreme

    def fit(vals):
        return TensorCompletion(2, privacy="output_clipped", neighbouring="entry-value", epsilon=1.0,
                                value_range=(1.0, 5.0), random_state=0,
                                options=CompletionOptions(n_epochs=3, output_epochs=3)).fit(indices, vals,
                                                                                            shape)

    first, second = observe(fit, values), observe(fit, neighbour)
    assert first.exception is None
    _assert_indistinguishable(first, second)
    for obs in (first, second):
        assert obs.result.guarantee_.holds
        assert all(np.all(np.isfinite(f)) for f in obs.result.factors_)
        assert np.all(np.isfinite(obs.result.predict(indices)))


def test_input_perturbation_releases_nothing_data_derived():
    """Without a declared range, min and max were released in sensitivity, laplace_scale, value_range_."""
    indices, values, shape = _ratings()
    neighbour = values.copy()
    neighbour[0] = 40.0  # changes the data's max

    def fit(vals, **extra):
        return build_estimator(TensorCompletion, rank=2, privacy="input", neighbouring="entry-value",
                                epsilon=1.0, n_epochs=2, random_state=0, **extra).fit(indices, vals, shape)

    # the paper's data-derived range is refused for both neighbours alike
    first, second = observe(fit, values), observe(fit, neighbour)
    assert first.exception is not None and first.exception[0] == "UnprovenPrivacyError"
    _assert_indistinguishable(first, second)
    # with a declared range, every released parameter is the same for both neighbours
    a, b = fit(values, value_range=(1.0, 5.0)), fit(neighbour, value_range=(1.0, 5.0))
    assert a.guarantee_ == b.guarantee_ and a.guarantee_.holds
    assert a.value_range_ == b.value_range_ == (1.0, 5.0)
    assert a.input_noise_scale_ == b.input_noise_scale_ == 4.0
    assert a.guarantee_.details["sensitivity"] == 4.0
    # and after opting in, the paper's mode says plainly that it releases the range
    with enable_features("unproven"):
        paper = fit(values)
    assert not paper.guarantee_.holds and paper.guarantee_.epsilon == math.inf
    assert "released" in paper.guarantee_.reason


def test_unproven_modes_refused_without_opt_in_before_any_work():
    indices, values, shape = _ratings()
    for mode in ("gradient", "output"):
        model = TensorCompletion(2, privacy=mode, neighbouring="entry-value", epsilon=1.0,
            options=CompletionOptions(n_epochs=1))
        with pytest.raises(UnprovenPrivacyError, match="does not hold"):
            model.fit(indices, values, shape)
        assert not hasattr(model, "factors_")


# ------------------------------------------------------------------ the command line


@pytest.mark.parametrize("privacy", ["gradient_dpsgd", "output_clipped", "input"])
def test_complete_command_is_indistinguishable_on_neighbours(privacy, tmp_path, monkeypatch):
    indices, values, shape = _ratings()
    neighbour = values.copy()
    neighbour[2] = 1e300
    observations = []
    for name, vals in (("a", values), ("b", neighbour)):
        work = tmp_path / name
        (work / "out").mkdir(parents=True)
        monkeypatch.chdir(work)  # the same relative paths for both runs
        write_ratings_csv(work / "train.csv", indices, vals)
        argv = ["complete", "train.csv", "--shape", *map(str, shape), "--rank", "2",
                "--privacy", privacy, "--neighbouring", "entry-value", "--epsilon", "1",
                "--value-range", "1", "5", "--epochs", "2",
                "--seed", "0", "--out", "out/pred.csv", "--json", "out/fit.json"]
        observations.append(observe_command(argv, work))
    first, second = observations
    assert first.result == 0
    assert first.attributes == second.attributes  # exit code, written files and their structure
    _assert_indistinguishable(first, second)
    payloads = [json.loads((tmp_path / n / "out" / "fit.json").read_text()) for n in ("a", "b")]
    assert payloads[0]["guarantee"] == payloads[1]["guarantee"]
    assert payloads[0]["train_rmse"] is None  # no training error on private values


# ------------------------------------------------------------------ a raising NumPy error state (issue 36)


def _topic_corpus(n=300, d=12, seed=0):
    """Poisson counts with every document of three tokens or more (every relation's domain)."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(0.6, (n, d)).astype(float)
    counts[counts.sum(axis=1) < 3, 5] += 3
    return counts


def _topic_fits():
    from dptensor import SingleTopicModel
    from dptensor.models.topics.dp_vi import DPVariationalLDA
    from dptensor.models.topics.private_spectral import PrivateSpectralLDA

    budget = dict(epsilon=1.0, delta=1e-6, random_state=0)
    spectral = {"default": {}, "tensor": {"topic_recovery": "tensor"}, "nmf": {"topic_recovery": "nmf"},
                "clip=None": {"clip": None}, "shared_m2=False": {"shared_m2": False},
                "classic": {"calibration": "classic"}}  # fmt: skip
    fits = {f"PrivateSpectralLDA({name})": lambda x, kw=params: PrivateSpectralLDA(3, 0.5, **budget, **kw)
            .fit(x) for name, params in spectral.items()}  # fmt: skip
    fits["DPVariationalLDA"] = lambda x: DPVariationalLDA(3, options=DPVIOptions(n_passes=1), **budget).fit(x)
    fits["SingleTopicModel"] = lambda x: SingleTopicModel(3, mechanism="agn", moments="all", **budget).fit(x)
    return fits


@pytest.mark.parametrize("name", list(_topic_fits()))
def test_topic_fits_behave_alike_under_a_raising_error_state(name):
    """``np.seterr(all="raise")`` turned the scaled forms' underflow (by design) into a
    ``FloatingPointError`` on ordinary corpora, and one that told an extreme neighbour apart (a
    document with one word counted 1.8e308). Underflow is now ignored locally; the rest of the
    caller's error state stands, and both inputs fit, under the default state and the raising one."""
    import scipy.sparse as sp

    fit = _topic_fits()[name]
    ordinary = _topic_corpus()
    extreme = ordinary.copy()
    extreme[0] = 0.0
    extreme[0, 0] = np.finfo(np.float64).max
    seen = {}
    for state in ("default", "raise"):
        for label, counts in (("ordinary", ordinary), ("extreme", extreme)):
            with np.errstate(all="raise") if state == "raise" else np.errstate():
                seen[state, label] = observe(fit, sp.csr_matrix(counts))
            assert np.geterr()["under"] == "ignore"  # the caller's state is restored afterwards
    first = seen["default", "ordinary"]
    assert first.exception is None and first.warnings == []
    for key, obs in seen.items():
        _assert_indistinguishable(first, obs)
        assert np.all(np.isfinite(obs.result.components_)), key
