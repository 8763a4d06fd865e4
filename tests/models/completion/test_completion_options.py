"""CompletionOptions (models/completion/options.py): TensorCompletion's tuning as a nested option object."""

from __future__ import annotations

import inspect
import pickle
import warnings

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold

from dptensor.models._options import build_estimator, flat_params
from dptensor.models.completion import CompletionOptions, TensorCompletion, plan_completion
from dptensor.models.completion._plan import PARAMETER_CONSTRAINTS
from dptensor.models.completion.options import OPTION_NAMES
from dptensor.privacy import PrivacyWarning, insecure_test_noise


def _ratings(shape=(12, 9, 3), density=0.6, seed=0):
    rng = np.random.default_rng(seed)
    indices = np.argwhere(rng.random(shape) < density)
    return indices, rng.integers(1, 6, size=len(indices)).astype(float), shape


def test_the_constructor_keeps_what_a_user_chooses_and_the_options_the_rest():
    own = [name for name in inspect.signature(TensorCompletion).parameters]
    assert len(own) <= 15 and own[0] == "rank" and "options" in own
    assert set(OPTION_NAMES) == set(inspect.signature(CompletionOptions).parameters)
    # together they are the planner's flat parameters, each declared once (the options' constraints derived)
    assert set(own) - {"options"} | set(OPTION_NAMES) == set(PARAMETER_CONSTRAINTS)
    assert not set(own) & set(OPTION_NAMES)
    derived = {name: PARAMETER_CONSTRAINTS[name] for name in OPTION_NAMES}
    assert CompletionOptions._parameter_constraints == derived
    assert TensorCompletion._options_class is CompletionOptions
    with pytest.raises(TypeError):
        TensorCompletion(2, 0.1)  # everything but the rank is keyword-only


def test_options_are_nested_parameters_that_clone_and_set_params_reach():
    model = TensorCompletion(2, privacy="als", options=CompletionOptions(clip=0.5, budget_split=0.2))
    params = model.get_params()
    assert params["options__clip"] == 0.5 and params["options__budget_split"] == 0.2
    assert params["options__max_iter"] is None  # a default, resolved per mode at fit
    model.set_params(options__clip=0.7)
    assert model.options.clip == 0.7
    copy = clone(model)
    assert copy.options is not model.options and copy.get_params()["options__clip"] == 0.7
    assert flat_params(model)["clip"] == 0.7 and "options" not in flat_params(model)
    assert flat_params(TensorCompletion(2)) == flat_params(TensorCompletion(2, options=CompletionOptions()))


def test_grid_search_over_an_option():
    indices, values, shape = _ratings()
    model = TensorCompletion(2, random_state=0, options=CompletionOptions(max_iter=5))
    search = GridSearchCV(model, {"options__reg": [0.01, 10.0]}, cv=KFold(3, shuffle=True, random_state=0))
    search.fit(indices, values, shape=shape)
    assert search.best_params_["options__reg"] in (0.01, 10.0)
    assert search.best_estimator_.reg_ == search.best_params_["options__reg"]
    assert len(search.cv_results_["mean_test_score"]) == 2


def test_options_and_flat_settings_fit_bit_for_bit_alike():
    indices, values, shape = _ratings()
    flat = dict(privacy="als", neighbouring="entry-value", epsilon=1.0, delta=1e-5, value_range=(1, 5),
                random_state=0, max_iter=3, budget_split=0.8, reg=2.0)
    fits = [build_estimator(TensorCompletion, rank=2, noise=insecure_test_noise(4), **flat),
            TensorCompletion(2, privacy="als", neighbouring="entry-value", epsilon=1.0, delta=1e-5,
                             value_range=(1, 5), random_state=0, noise=insecure_test_noise(4),
                             options=CompletionOptions(max_iter=3, budget_split=0.8, reg=2.0))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)  # insecure_test_noise: reproducible on purpose
        for fit in fits:
            fit.fit(indices, values, shape)
    for a, b in zip(fits[0].factors_ + fits[0].biases_, fits[1].factors_ + fits[1].biases_, strict=True):
        np.testing.assert_array_equal(a, b)
    assert fits[0].guarantee_ == fits[1].guarantee_
    plan = plan_completion(flat_params(fits[1]), shape, len(values))
    assert plan.budget_split == 0.8 and plan.max_iter == 3


def test_a_bad_option_is_refused_clearly_before_the_ledger_is_charged():
    charges = []

    class Ledger:
        def charge(self, guarantee, *, description=""):
            charges.append(description)

    indices, values, shape = _ratings()
    private = dict(privacy="als", neighbouring="entry-value", epsilon=1.0, value_range=(1, 5),
                   ledger=Ledger())
    for bad, match in ((CompletionOptions(clip=-1.0), "'clip' parameter of CompletionOptions"),
                       (CompletionOptions(budget_split=1.5), "'budget_split' parameter of CompletionOptions"),
                       (CompletionOptions(start="warm"), "'start' parameter of CompletionOptions"),
                       ({"clip": 1.0}, "'options' parameter of TensorCompletion")):
        model = TensorCompletion(2, options=bad, **private)
        with pytest.raises(ValueError, match=match):
            model.fit(indices, values, shape)
        assert not hasattr(model, "factors_")
    assert charges == []
    with pytest.raises(TypeError, match="clip"):
        TensorCompletion(2, clip=1.0)  # a moved knob is no constructor parameter
    with pytest.raises(TypeError, match="TensorCompletion has no parameter or option 'clipping'"):
        build_estimator(TensorCompletion, rank=2, clipping=1.0)


def test_an_old_pickle_with_flat_knobs_loads_predicts_and_refits_alike():
    """A model pickled before the options moved stored every knob as an attribute of its own."""
    indices, values, shape = _ratings()
    new = TensorCompletion(2, random_state=0, options=CompletionOptions(reg=0.5, max_iter=4, tol=1e-6))
    new.fit(indices, values, shape)
    # the state the old class pickled: the same fitted attributes, the knobs flat, no options
    old_state = {key: value for key, value in new.__dict__.items() if key != "options"}
    old_state.update(flat_params(new))
    old_state["_sklearn_version"] = sklearn.__version__
    old = TensorCompletion.__new__(TensorCompletion)
    old.__dict__.update(old_state)
    data = pickle.dumps(old)
    assert b"CompletionOptions" not in data  # what the old class wrote
    loaded = pickle.loads(data)
    assert isinstance(loaded.options, CompletionOptions)
    assert not set(OPTION_NAMES) & set(vars(loaded))
    assert flat_params(loaded) == flat_params(new)
    np.testing.assert_array_equal(loaded.predict(indices), new.predict(indices))
    refit = clone(loaded).fit(indices, values, shape)
    np.testing.assert_array_equal(refit.predict(indices), new.predict(indices))
    # an old pickle of a model with every knob at its default loads too, and a new one round-trips
    plain = {key: value for key, value in TensorCompletion(2).__dict__.items() if key != "options"}
    old = TensorCompletion.__new__(TensorCompletion)
    old.__dict__.update({**plain, **CompletionOptions().get_params()})
    assert flat_params(pickle.loads(pickle.dumps(old))) == flat_params(TensorCompletion(2))
    assert flat_params(pickle.loads(pickle.dumps(new))) == flat_params(new)
