"""Opt-in for the papers' modes whose privacy proofs fail (after OpenDP's ``contrib`` features).

dptensor reproduces some published mechanisms whose stated guarantee does not follow from
their argument (Wei et al.'s gradient and output perturbation, input perturbation with a range
read from the data; the spectral-LDA configurations whose sensitivities are unbounded). They are
useful for reproducing a paper, never for protecting data, so they run only after an explicit
opt-in, and their guarantee then reports ``holds=False`` and ``epsilon = inf``:

>>> from dptensor.privacy import enable_features
>>> with enable_features("unproven"):
...     pass  # the paper's modes run here; outside the block they raise UnprovenPrivacyError

``enable_features`` also works as a plain call (process-wide until :func:`disable_features`).
"""

from __future__ import annotations

from types import TracebackType

from dptensor.privacy.errors import UnprovenPrivacyError

#: Features that can be enabled.
FEATURES: tuple[str, ...] = ("unproven",)
_enabled: set[str] = set()


class _FeatureScope:
    """Returned by :func:`enable_features`; on leaving a ``with`` block restores the previous set."""

    def __init__(self, previous: frozenset[str]) -> None:
        self._previous = previous

    def __enter__(self) -> _FeatureScope:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _enabled.clear()
        _enabled.update(self._previous)


def _check_names(names: tuple[str, ...]) -> None:
    for name in names:
        if name not in FEATURES:
            raise ValueError(f"unknown feature {name!r}; known features: {FEATURES}")


def enable_features(*names: str) -> _FeatureScope:
    """Enable features (``"unproven"``); usable as a context manager that restores the old set."""
    _check_names(names)
    previous = frozenset(_enabled)
    _enabled.update(names)
    return _FeatureScope(previous)


def disable_features(*names: str) -> None:
    """Disable features enabled by :func:`enable_features`."""
    _check_names(names)
    _enabled.difference_update(names)


def feature_enabled(name: str) -> bool:
    """Whether ``name`` is enabled."""
    _check_names((name,))
    return name in _enabled


def require_unproven(what: str, reason: str) -> None:
    """Raise :class:`UnprovenPrivacyError` unless ``"unproven"`` is enabled.

    Called before any work, with parameters only (never the data).

    Parameters
    ----------
    what : str
        The mode, e.g. ``"privacy='gradient' (Wei et al., Algorithm 2)"``.
    reason : str
        Why its privacy claim does not hold.
    """
    if "unproven" not in _enabled:
        raise UnprovenPrivacyError(
            f"{what} is a published mode whose privacy claim does not hold: {reason}. It runs only "
            "to reproduce the paper, after an explicit opt-in: "
            "dptensor.privacy.enable_features('unproven') (or --allow-unproven on the command line); "
            "its guarantee then reports holds=False and epsilon=inf"
        )
