"""plan_completion: the plan a TensorCompletion fit uses, from parameters and public sizes alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

import dptensor.models.completion.estimator as estimator_module
from dptensor.models._options import build_estimator, flat_params
from dptensor.models.completion import CompletionPlan, TensorCompletion, plan_completion
from dptensor.models.completion._paper import data_range
from dptensor.privacy import enable_features

RANGE = (1.0, 5.0)
ENTRY = {"neighbouring": "entry-value"}
#: One estimator of every mode, the paper's unproven ones included.
MODES = {
    "none": {},
    "sgd": {"solver": "sgd", "n_epochs": 2},
    "input": {"privacy": "input", "epsilon": 1.0, "value_range": RANGE, "n_epochs": 2, **ENTRY},
    "input-als": {"privacy": "input", "epsilon": 1.0, "value_range": RANGE, "solver": "als", **ENTRY},
    "input-paper": {"privacy": "input", "epsilon": 1.0, "n_epochs": 2, **ENTRY},
    "gradient": {"privacy": "gradient", "epsilon": 1.0, "n_epochs": 2, **ENTRY},
    "output": {"privacy": "output", "epsilon": 1.0, "n_epochs": 2, **ENTRY},
    "gradient_dpsgd": {"privacy": "gradient_dpsgd", "epsilon": 1.0, "value_range": RANGE, **ENTRY},
    "output_clipped": {"privacy": "output_clipped", "epsilon": 1.0, "value_range": RANGE, "n_epochs": 2,
                       "output_epochs": 2, **ENTRY},
    "als": {"privacy": "als", "epsilon": 1.0, "value_range": RANGE, "model": "tucker", **ENTRY},
    "als-user": {"privacy": "als", "epsilon": 1.0, "value_range": RANGE, "neighbouring": "user"},
}


def _ratings(shape=(9, 8, 5), density=0.5, seed=0):
    rng = np.random.default_rng(seed)
    indices = np.argwhere(rng.random(shape) < density)
    values = rng.integers(1, 6, size=len(indices)).astype(float)
    return indices, values, shape


@pytest.mark.parametrize("mode", list(MODES))
def test_plan_equals_the_plan_the_fit_used(monkeypatch, mode):
    """The fit's plan is plan_completion's for its parameters and public sizes, noise and guarantee too."""
    indices, values, shape = _ratings()
    used = []

    def recording(*args, **kwargs):
        used.append(plan_completion(*args, **kwargs))
        return used[-1]

    monkeypatch.setattr(estimator_module, "plan_completion", recording)
    model = build_estimator(TensorCompletion, rank=2, random_state=0, **MODES[mode])
    with enable_features("unproven"):
        model.fit(indices, values, shape)
        n_public = None if model.neighbouring == "user" else len(values)
        paper_range = data_range(values) if mode == "input-paper" else None  # unproven: from the data
        plan = plan_completion(flat_params(model), shape, n_public, data_range=paper_range)
    assert used == [plan]
    assert isinstance(plan, CompletionPlan)
    assert (model.solver_, model.offsets_, model.context_modes_) == (plan.solver, plan.offsets,
                                                                       plan.context_modes)
    assert model.reg_ == plan.reg or plan.reg_auto
    # the default (secure) noise leaves the planned guarantee as it is
    assert model.guarantee_ == plan.guarantee
    if plan.guarantee is None:
        assert plan.releases == () and plan.dp_event is None
        return
    assert plan.dp_event == model.guarantee_.dp_event
    if mode == "gradient_dpsgd":
        assert plan.noise_multipliers == (model.guarantee_.noise_multiplier,)
        assert model.noise_std_ == plan.release("gradient sums").noise_scale
    if mode in ("als", "als-user"):
        assert plan.noise_multipliers == tuple(model.guarantee_.details["noise_multipliers"])
        assert plan.dp_als.steps == tuple(model.guarantee_.details["releases"])
    if mode in ("input", "input-als", "input-paper", "output_clipped"):
        assert model.input_noise_scale_ == plan.release("values").noise_scale
        assert model.value_range_ == plan.input_range
    if mode in ("output", "output_clipped"):
        assert model.output_sensitivity_ == plan.release("rows of C").sensitivity


def test_plan_needs_no_data():
    """Shape and the public count suffice, at any size; under "user" the count is not even asked for."""
    big = (10**6, 10**5, 365)
    entry = TensorCompletion(8, privacy="gradient_dpsgd", epsilon=1.0, value_range=RANGE, **ENTRY)
    plan = plan_completion(flat_params(entry), big, 10**8)
    assert plan.delta == pytest.approx(1e-9) and plan.batch_size == 10**8
    assert plan.guarantee.holds and plan.release("gradient sums").count == plan.n_epochs
    user = TensorCompletion(8, privacy="als", epsilon=1.0, value_range=RANGE, neighbouring="user")
    plan = plan_completion(flat_params(user), big)
    assert plan.relation == "user" and plan.delta == pytest.approx(1e-7)  # min(1e-6, 0.1 / users)
    with pytest.raises(ValueError, match="n_observed is required for the default delta"):
        plan_completion(flat_params(TensorCompletion(2, privacy="als", epsilon=1.0, value_range=RANGE,
                                                     **ENTRY)), big)


def test_plan_is_frozen_and_checks_its_parameters():
    params = flat_params(TensorCompletion(2, privacy="als", epsilon=1.0, value_range=RANGE, **ENTRY))
    plan = plan_completion(params, (9, 8, 5), 100)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.reg = 0.0  # type: ignore[misc]
    with pytest.raises(KeyError, match="no release 'values'"):
        plan.release("values")
    with pytest.raises(TypeError, match=r"missing \['model'"):
        plan_completion({"rank": 2}, (9, 8, 5), 100)
    with pytest.raises(TypeError, match=r"unknown \['alpha'\]"):
        plan_completion({**params, "alpha": 1}, (9, 8, 5), 100)
    with pytest.raises(InvalidParameterError, match="'epsilon' parameter of TensorCompletion"):
        plan_completion({**params, "epsilon": True}, (9, 8, 5), 100)
    with pytest.raises(ValueError, match="value_range is required for privacy='als'"):
        plan_completion({**params, "value_range": None}, (9, 8, 5), 100)
    with pytest.raises(ValueError, match="data_range is required"), enable_features("unproven"):
        plan_completion({**params, "privacy": "input", "value_range": None}, (9, 8, 5), 100)
