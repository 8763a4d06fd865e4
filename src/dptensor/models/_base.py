"""The pattern every dptensor estimator follows: scikit-learn's base classes, declared parameters.

Estimators subclass :class:`sklearn.base.BaseEstimator` (plus ``TransformerMixin`` where they
transform), list their parameters in ``_parameter_constraints`` with scikit-learn's declarative
constraints (as ``sklearn/decomposition`` does) and decorate ``fit``/``partial_fit`` with
``sklearn.base._fit_context`` so the constraints are checked on every fit. Private estimators
also mix in :class:`PrivateEstimatorMixin`, which declares the privacy parameters once and
starts every release the same way (noise source, honest guarantee, ledger charge, in that
order; :func:`dptensor.privacy.begin_release`)::

    class MyPrivateModel(PrivateEstimatorMixin, TransformerMixin, BaseEstimator):
        _parameter_constraints = {
            "n_components": [Interval(Integral, 1, None, closed="left")],
            **PrivateEstimatorMixin._privacy_parameter_constraints,
        }

        @_fit_context(prefer_skip_nested_validation=True)
        def fit(self, X, y=None):
            self._check_privacy_parameters()          # before any data is read
            guarantee = ...                           # from parameters and public sizes only
            source = self._begin_release(guarantee, "MyPrivateModel fit")
            ...                                       # now read X; draw noise from source
            return self

The rest of the pattern (checked for every estimator by ``tests/models/test_sklearn_api.py``, which runs
scikit-learn's ``check_estimator``; a new estimator is added there, with any check that cannot
apply listed in ``EXPECTED_FAILED_CHECKS`` with its reason):

* ``__init__`` only stores its arguments; every check happens in ``fit``/``partial_fit``
  (``_parameter_constraints``, then the estimator's own checks), before the data are read;
* ``score`` is greater-is-better (a log-likelihood, or ``-RMSE``), so ``GridSearchCV`` and
  ``cross_val_score`` pick the right model;
* transformers mix in ``TransformerMixin`` and ``ClassNamePrefixFeaturesOutMixin`` (define
  ``_n_features_out``); ``__sklearn_tags__`` declares what ``X`` may be (sparse, non-negative);
* private estimators pass ``n_public`` to :meth:`PrivateEstimatorMixin._begin_release` when the
  number of protected units is public under their neighbouring relation (``PrivacyWarning`` for
  ``delta >= 1/n`` and ``epsilon > 10``; :func:`dptensor.privacy.warnings.check_privacy_parameters`),
  never a count that is private.
"""

from __future__ import annotations

import sys
import warnings
import weakref
from collections.abc import Callable, Mapping
from numbers import Real

import numpy as np
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

from dptensor._callers import outside_frame
from dptensor.privacy import (
    NOISE_BACKENDS,
    InsecureTestNoise,
    NoiseSource,
    PrivacyGuarantee,
    PrivacyWarning,
    begin_release,
)
from dptensor.privacy.warnings import check_privacy_parameters

__all__ = [
    "PIPELINE_PLANNERS",
    "PLAIN_SEARCH_WARNING",
    "PrivateEstimatorMixin",
    "RealNotBool",
    "declare_count_input",
    "enclosing_pipeline",
    "forget_fitted_attributes",
    "refuse_stray_privacy_parameters",
    "warn_if_in_plain_search",
]


def forget_fitted_attributes(estimator: object) -> None:
    """Remove every fitted attribute (``name_``) an earlier fit left, before a new fit sets its own.

    A refit with other parameters must not keep what only the earlier fit computed -- a
    non-private fit's validation error on a model refitted privately, an earlier release's noisy
    values -- and a refit whose charge is refused leaves the estimator unfitted.
    """
    for name in [key for key in vars(estimator) if key.endswith("_") and not key.startswith("_")]:
        del estimator.__dict__[name]


class RealNotBool(Interval):
    """An :class:`~sklearn.utils._param_validation.Interval` of reals that refuses bools.

    ``bool`` is a subclass of ``int``, so a plain ``Interval(Real, ...)`` accepts ``epsilon=True``
    and a fit would be charged as ``epsilon = 1``; a privacy budget must be a number.
    """

    def is_satisfied_by(self, val: object) -> bool:
        return not isinstance(val, bool | np.bool_) and super().is_satisfied_by(val)

    def __str__(self) -> str:
        return f"{super().__str__()} (a number, not a bool)"


def refuse_stray_privacy_parameters(
    params: Mapping[str, object], names: tuple[str, ...], *, switch: str, who: str, example: str = "..."
) -> None:
    """Raise when any of ``names`` (or a noise other than the default) is set on a non-private fit.

    The check of :meth:`PrivateEstimatorMixin._refuse_stray_privacy_parameters` on a mapping of
    parameters, for planners that hold no estimator.

    Parameters
    ----------
    params : mapping of str to object
        The parameters (a missing one counts as ``None``).
    names : tuple of str
        Privacy parameters that must be ``None`` without ``switch``.
    switch : str
        The parameter that makes the fit private.
    who : str
        The estimator's name, for the message.
    example : str, default "..."
        ``switch``'s value in the message.

    Raises
    ------
    ValueError
        Naming every stray parameter.
    """
    stray = [name for name in names if params.get(name) is not None]
    if params.get("noise") not in (None, "numpy"):
        stray.append("noise")
    if stray:
        raise ValueError(
            f"{', '.join(stray)} given without {switch}: {who} would train a "
            f"non-private model; pass {switch}={example} for a private fit, or drop "
            + ("them" if len(stray) > 1 else "it")
        )


#: Searches already warned about (:func:`warn_if_in_plain_search`): once per search object.
_WARNED_SEARCHES: weakref.WeakSet = weakref.WeakSet()

#: Said once per scikit-learn search whose candidates are private fits.
PLAIN_SEARCH_WARNING = (
    "{who} fitted by scikit-learn's {search}: each fit is charged and carries its own guarantee_, but "
    "the choice of the best candidate, made from held-out scores of the private documents without "
    "noise, is covered by no guarantee, and best_estimator_.guarantee_ is one fit's, not the "
    "search's; dptensor.model_selection.PrivateGridSearchCV composes every fit, a noisy choice and "
    "the refit into one guarantee charged once"
)


def _plain_search() -> object | None:
    """The scikit-learn search this fit runs in: its object (in the search's process), ``True`` (a
    candidate's fit in a joblib worker) or ``None``; read from the call stack (public)."""
    from sklearn.model_selection._search import BaseSearchCV

    frame, candidate = sys._getframe(2), False
    while frame is not None:
        name = frame.f_code.co_name
        if name == "fit" and isinstance(frame.f_locals.get("self"), BaseSearchCV):
            return frame.f_locals["self"]
        module = frame.f_globals.get("__name__")
        if (name == "_fit_and_score" and module == "sklearn.model_selection._validation"
                and frame.f_locals.get("parameters") is not None):
            candidate = True  # a search's candidate (cross_validate passes no parameters)
        frame = frame.f_back
    return True if candidate else None


#: Called as ``planner(pipeline, step, n_public)`` before a private step of a scikit-learn
#: ``Pipeline`` is charged (registered by :mod:`dptensor.models.pipeline_plan`, which plans the
#: whole pipeline before its first private step's charge).
PIPELINE_PLANNERS: list[Callable[[object, object, int | None], None]] = []


def enclosing_pipeline(step: object) -> object | None:
    """The scikit-learn ``Pipeline`` fitting ``step`` right now (one of its steps is ``step`` itself),
    read from the call stack; ``None`` outside one (or in a pipeline with ``memory=``, which fits
    clones)."""
    from sklearn.pipeline import Pipeline

    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in ("fit", "fit_transform", "fit_predict"):
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, Pipeline) and any(s is step for _, s in candidate.steps):
                return candidate
        frame = frame.f_back
    return None


def warn_if_in_plain_search(who: str) -> None:
    """A :class:`~dptensor.privacy.PrivacyWarning`, once per search, for a private fit inside a
    scikit-learn hyperparameter search (``GridSearchCV``, ``RandomizedSearchCV``, ...): its choice is
    covered by no guarantee (:data:`PLAIN_SEARCH_WARNING`). Depends on the call stack only."""
    search = _plain_search()
    if search is None:
        return
    if search is not True:
        if search in _WARNED_SEARCHES:
            return
        _WARNED_SEARCHES.add(search)
    name = "search" if search is True else type(search).__name__
    warnings.warn(PLAIN_SEARCH_WARNING.format(who=who, search=name), PrivacyWarning,
                  stacklevel=outside_frame()[1])


class PrivateEstimatorMixin:
    """Privacy parameters and the start of a release, shared by dptensor's private estimators.

    Expects the estimator to have the parameters ``epsilon`` (``None`` = not private),
    ``delta``, ``noise`` and ``ledger``; sets ``guarantee_`` on every release.
    """

    #: Merge into the estimator's ``_parameter_constraints``.
    _privacy_parameter_constraints: dict = {
        "epsilon": [RealNotBool(Real, 0, None, closed="neither"), None],
        "delta": [RealNotBool(Real, 0, 1, closed="neither"), None],
        "noise": [None, StrOptions(set(NOISE_BACKENDS)), InsecureTestNoise, NoiseSource],
        "ledger": [None, HasMethods(["charge"])],
    }

    @property
    def _is_private(self) -> bool:
        return getattr(self, "epsilon", None) is not None

    def _check_privacy_parameters(self, *, requires_delta: bool = True) -> None:
        """Privacy parameters without a budget are an error, not a silently non-private fit."""
        if self._is_private:
            if requires_delta and getattr(self, "delta", None) is None:
                raise ValueError(f"delta is required with epsilon for {type(self).__name__}")
            return
        self._refuse_stray_privacy_parameters(("delta", "ledger"), switch="epsilon")

    def _refuse_stray_privacy_parameters(
        self, names: tuple[str, ...], *, switch: str, example: str = "..."
    ) -> None:
        """Raise when any of ``names`` (or a noise other than the default) is set on a non-private fit.

        ``switch`` is the parameter that makes the fit private; ``example`` its value in the message.
        """
        given = {name: getattr(self, name, None) for name in (*names, "noise")}
        refuse_stray_privacy_parameters(given, names, switch=switch, who=type(self).__name__,
                                        example=example)

    def _begin_release(
        self, guarantee: PrivacyGuarantee, description: str, *, n_public: int | None = None,
        unit: str = "documents",
    ) -> NoiseSource:
        """Warn about weak parameters, resolve the noise, store ``guarantee_``, charge the ledger.

        ``n_public`` is the number of protected units (``unit``) when it is public under the
        estimator's neighbouring relation (``None`` otherwise): ``delta >= 1/n_public`` and
        ``epsilon`` above :data:`~dptensor.privacy.warnings.EPSILON_WARNING_THRESHOLD` draw a
        :class:`~dptensor.privacy.PrivacyWarning`
        (:func:`~dptensor.privacy.warnings.check_privacy_parameters`).
        """
        check_privacy_parameters(
            getattr(self, "epsilon", None), getattr(self, "delta", None), n_public=n_public, unit=unit,
            who=type(self).__name__, stacklevel=4,
        )
        pipeline = enclosing_pipeline(self) if PIPELINE_PLANNERS else None
        if pipeline is not None:  # the whole pipeline's plan, before its first private step's charge
            for planner in PIPELINE_PLANNERS:
                planner(pipeline, self, n_public)
        warn_if_in_plain_search(type(self).__name__)
        self.guarantee_, source = begin_release(
            guarantee, getattr(self, "noise", None), ledger=getattr(self, "ledger", None),
            description=description,
        )
        return source


def declare_count_input(tags):  # noqa: ANN001, ANN201 - sklearn.utils.Tags
    """Tags of an estimator whose ``X`` is word counts: non-negative whole numbers, dense or sparse.

    ``categorical`` is the tag with which scikit-learn's estimator checks feed non-negative
    integer matrices (they round their test data); ``positive_only`` says counts are >= 0.
    """
    tags.input_tags.sparse = True
    tags.input_tags.positive_only = True
    tags.input_tags.categorical = True
    return tags
