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

from typing import TypeVar

from sklearn.base import BaseEstimator

__all__ = ["Options", "resolve_options"]

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
