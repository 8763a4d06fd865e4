"""Option objects (models/_options.py): defaults, checks, and scikit-learn's nested parameters."""

from __future__ import annotations

from numbers import Integral

import pytest
from sklearn.base import BaseEstimator, clone
from sklearn.utils._param_validation import Interval

from dptensor.models._options import Options, resolve_options


class _Knobs(Options):
    _parameter_constraints = {"steps": [Interval(Integral, 1, None, closed="left")]}

    def __init__(self, *, steps: int = 3) -> None:
        self.steps = steps


class _Model(BaseEstimator):
    def __init__(self, k: int = 2, options: _Knobs | None = None) -> None:
        self.k = k
        self.options = options


def test_none_means_the_defaults_and_an_instance_is_checked():
    assert resolve_options(None, _Knobs, "_Model").steps == 3
    given = _Knobs(steps=5)
    assert resolve_options(given, _Knobs, "_Model") is given
    with pytest.raises(ValueError, match="steps"):
        resolve_options(_Knobs(steps=0), _Knobs, "_Model")
    with pytest.raises(TypeError, match="_Model's options must be a _Knobs.*got dict"):
        resolve_options({"steps": 2}, _Knobs, "_Model")


def test_nested_parameters_reach_the_options_and_clone_copies_them():
    model = _Model(options=_Knobs(steps=4))
    assert model.get_params()["options__steps"] == 4
    model.set_params(options__steps=6)
    assert model.options.steps == 6
    copy = clone(model)
    assert copy.options is not model.options and copy.options.steps == 6
    assert "steps=6" in repr(model)


class _Tuned(BaseEstimator):
    _options_class = _Knobs

    def __init__(self, k: int = 2, *, options: _Knobs | None = None) -> None:
        self.k = k
        self.options = options


def test_build_estimator_puts_flat_names_where_they_live_and_flat_params_inverts_it():
    from dptensor.models._options import build_estimator, flat_params

    model = build_estimator(_Tuned, k=3, steps=7)
    assert model.k == 3 and isinstance(model.options, _Knobs) and model.options.steps == 7
    assert build_estimator(_Tuned, k=4).options is None
    assert flat_params(model) == {"k": 3, "steps": 7}
    assert flat_params(_Tuned()) == {"k": 2, "steps": 3}
    assert flat_params(build_estimator(_Tuned, **flat_params(model))) == flat_params(model)
    with pytest.raises(TypeError, match="_Tuned has no parameter or option 'speed'"):
        build_estimator(_Tuned, speed=1)
    with pytest.raises(TypeError, match="not both"):
        build_estimator(_Tuned, steps=1, options=_Knobs())
    with pytest.raises(TypeError, match="_Model has no parameter or option 'steps'"):
        build_estimator(_Model, steps=1)
