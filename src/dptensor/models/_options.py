"""Option objects: a model's method tuning and solver settings, apart from what a user chooses.

An estimator's constructor holds what a user of the model chooses (the number of topics, the
budget, the seed, the ledger); the knobs of its method (clipping levels, iteration counts, solver
tolerances) live in an option object passed as ``options=``. An option object is a small
scikit-learn estimator of its own (it only stores its parameters), so everything scikit-learn
does with nested estimators works on it::

    model = PrivateSpectralLDA(5, epsilon=1.0, options=SpectralOptions(clip=2))
    model.get_params()["options__clip"]              # 2
    model.set_params(options__clip=4)                # GridSearchCV's {"options__clip": [2, 4]}
    clone(model).options is not model.options        # cloned with the estimator

``options=None`` (the default) means the option class's defaults; :func:`resolve_options` turns
it into an instance and checks it (its ``_parameter_constraints``) when the estimator fits.
"""

from __future__ import annotations

import inspect
from typing import Any, TypeVar

from sklearn.base import BaseEstimator

__all__ = ["Options", "build_estimator", "flat_params", "resolve_options"]

O = TypeVar("O", bound="Options")  # noqa: E741


class Options(BaseEstimator):
    """Base of the option objects (see the module's notes).

    A subclass's ``__init__`` takes keyword-only arguments and stores each one unchanged, and its
    ``_parameter_constraints`` declares them (scikit-learn's declarative constraints), checked by
    :func:`resolve_options` when the owning estimator fits.
    """

    _parameter_constraints: dict = {}


def resolve_options(options: O | None, cls: type[O], owner: str) -> O:
    """The option object an estimator fits with: ``cls()`` for ``None``, else ``options`` checked.

    Parameters
    ----------
    options : Options or None
        The estimator's ``options`` parameter.
    cls : type
        The option class the estimator takes.
    owner : str
        The estimator's name, for the error message.

    Returns
    -------
    Options
        An instance of ``cls`` whose parameters satisfy its constraints.

    Raises
    ------
    TypeError
        If ``options`` is neither ``None`` nor an instance of ``cls``.
    sklearn.utils._param_validation.InvalidParameterError
        If one of its parameters breaks its constraint (a ``ValueError``).
    """
    if options is None:
        return cls()
    if not isinstance(options, cls):
        raise TypeError(
            f"{owner}'s options must be a {cls.__name__} (or None for its defaults), "
            f"got {type(options).__name__}"
        )
    options._validate_params()
    return options


def _constructor_names(cls: type) -> set[str]:
    return {name for name in inspect.signature(cls.__init__).parameters if name != "self"}


def build_estimator(cls: type, **params: Any) -> Any:
    """An estimator from one flat set of parameters: the constructor's own, the rest its options.

    The command line, model files and the reproduction of seeded fits name every setting flatly
    (``clip=2``); this puts each one where it lives now: a constructor parameter as it is, any other
    into ``cls._options_class`` (the estimator's option object), which then checks the names.

    Parameters
    ----------
    cls : type
        The estimator class; its ``_options_class`` attribute names its option class, if any.
    **params
        Constructor parameters and option parameters by name (``options=`` itself is allowed when
        no option parameter is given flatly).

    Returns
    -------
    estimator
        ``cls(**constructor_params, options=options_class(**option_params))``.

    Raises
    ------
    TypeError
        If a name is neither a constructor parameter nor an option, or ``options=`` is given
        beside flat option parameters.
    """
    own = _constructor_names(cls)
    direct = {k: v for k, v in params.items() if k in own}
    rest = {k: v for k, v in params.items() if k not in own}
    if not rest:
        return cls(**direct)
    options_class = getattr(cls, "_options_class", None)
    unknown = sorted(set(rest) - (_constructor_names(options_class) if options_class else set()))
    if unknown:
        raise TypeError(f"{cls.__name__} has no parameter or option {', '.join(map(repr, unknown))}")
    if direct.get("options") is not None:
        raise TypeError(f"{cls.__name__}: give options= or flat option parameters, not both")
    direct["options"] = options_class(**rest)
    return cls(**direct)


def flat_params(estimator: Any) -> dict[str, Any]:
    """The estimator's parameters, its options' spread out flatly (the inverse of :func:`build_estimator`).

    ``options=None`` contributes the option class's defaults, so that a saved model names every
    setting it was fitted with.
    """
    params = estimator.get_params(deep=False)
    options_class = getattr(type(estimator), "_options_class", None)
    if options_class is None or "options" not in params:
        return params
    options = params.pop("options")
    params.update((options if options is not None else options_class()).get_params(deep=False))
    return params
