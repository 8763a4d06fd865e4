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
