"""Exceptions whose keyword-only fields survive ``pickle`` (joblib workers, multiprocessing).

Python pickles an exception as ``(type(error), error.args, error.__dict__)`` and rebuilds it by
calling ``type(error)(*args)``; an ``__init__`` with required keyword-only fields (the ledger's
:class:`~dptensor.privacy.BudgetExceededError`) then fails with ``missing ... required keyword-only
arguments``, and a joblib worker whose fit was refused reports ``BrokenProcessPool`` instead of the
refusal. :class:`PicklableFieldsError` rebuilds the error without calling ``__init__``: the base
exception's ``__new__`` restores ``args`` (hence the message), the instance dictionary the fields.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PicklableFieldsError"]


def _rebuild(cls: type[BaseException], args: tuple) -> BaseException:
    """An instance of ``cls`` with ``args``, ``__init__`` not called (``__setstate__`` adds the fields)."""
    return cls.__new__(cls, *args)


class PicklableFieldsError:
    """Mixin for the exceptions that take fields as keyword-only arguments: they pickle and copy.

    List it before the exception base (``class E(PicklableFieldsError, ValueError)``) so that its
    ``__reduce__`` is found before the built-in one.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        assert isinstance(self, BaseException)
        return (_rebuild, (type(self), self.args), dict(self.__dict__))
