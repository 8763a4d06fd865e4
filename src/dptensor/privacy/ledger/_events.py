"""A budget ledger's events as JSON: :func:`encode_event`, :func:`decode_event` (only dp-accounting's and
dptensor's event classes are ever decoded) and a cache of decoded events."""

from __future__ import annotations

import collections
import json
import numbers
import sys

import dp_accounting

# Modules whose DpEvent classes a ledger may name; nothing else is ever imported from a file.
_EVENT_MODULES = ("dp_accounting.dp_event", "dptensor.privacy.accounting")


def _plain_tuple(value: object) -> object:
    if hasattr(value, "_fields"):  # a DpEvent's named tuple
        return {name: _plain_tuple(getattr(value, name)) for name in value._fields}
    if isinstance(value, list | tuple):
        return [_plain_tuple(item) for item in value]
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, numbers.Real):
        return float(value)
    raise ValueError(f"cannot store a DpEvent field of type {type(value).__name__}")


def encode_event(event: dp_accounting.DpEvent) -> str:
    """A :class:`dp_accounting.DpEvent` as canonical JSON text (from ``to_named_tuple()``).

    Examples
    --------
    >>> import dp_accounting
    >>> encode_event(dp_accounting.GaussianDpEvent(2.5))
    '{"class_name":"GaussianDpEvent","module_name":"dp_accounting.dp_event","noise_multiplier":2.5}'
    """
    if not isinstance(event, dp_accounting.DpEvent):
        raise TypeError(f"expected a dp_accounting.DpEvent, got {type(event).__name__}")
    plain = _plain_tuple(event.to_named_tuple())
    try:
        return json.dumps(plain, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:
        raise ValueError(f"cannot store {event!r}: its parameters must be finite numbers") from exc


def _as_named_tuple(value: object) -> object:
    if isinstance(value, dict):
        module, name = value.get("module_name"), value.get("class_name")
        if module not in _EVENT_MODULES or not isinstance(name, str):
            raise ValueError(f"not a dp-accounting or dptensor event: {module!r}.{name!r}")
        cls = getattr(sys.modules.get(module) or __import__(module, fromlist=[name]), name, None)
        if not (isinstance(cls, type) and issubclass(cls, dp_accounting.DpEvent)):
            raise ValueError(f"{module}.{name} is not a DpEvent class")
        fields = sorted(value)
        wrapper = collections.namedtuple(f"_{name}NamedTuple", fields)  # noqa: PYI024 - built at run time
        return wrapper(**{key: _as_named_tuple(value[key]) for key in fields})
    if isinstance(value, list):
        return [_as_named_tuple(item) for item in value]
    return value


def decode_event(text: str) -> dp_accounting.DpEvent:
    """The :class:`dp_accounting.DpEvent` that :func:`encode_event` wrote.

    Only event classes of ``dp_accounting.dp_event`` and :mod:`dptensor.privacy.accounting` are
    accepted, so a crafted file cannot make dptensor import or call anything else.

    Raises
    ------
    ValueError
        The text is not such an event.
    """
    try:
        plain = json.loads(text)
        if not isinstance(plain, dict):
            raise ValueError("not a JSON object")
        event = dp_accounting.DpEvent.from_named_tuple(_as_named_tuple(plain))
    except (ValueError, TypeError, AttributeError, ImportError) as exc:
        raise ValueError(f"not a stored dp-accounting event ({exc}): {text[:200]!r}") from exc
    if not isinstance(event, dp_accounting.DpEvent):  # pragma: no cover - from_named_tuple's contract
        raise ValueError(f"not a stored dp-accounting event: {text[:200]!r}")
    return event


_EVENT_CACHE: dict[str, dp_accounting.DpEvent] = {}


def _decode_cached(text: str) -> dp_accounting.DpEvent:
    event = _EVENT_CACHE.get(text)
    if event is None:
        if len(_EVENT_CACHE) > 4096:
            _EVENT_CACHE.clear()
        event = _EVENT_CACHE[text] = decode_event(text)
    return event
