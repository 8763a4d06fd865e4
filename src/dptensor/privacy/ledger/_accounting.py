"""The budget spent: the exact composition of a ledger's events, within a fixed memory bound."""

from __future__ import annotations

import math
from collections.abc import Sequence

import dp_accounting

from dptensor.privacy.accounting import EpsilonDeltaDpEvent, EventCounts, event_epsilon, reduce_event
from dptensor.privacy.calibration import gaussian_epsilon

_EPSILON_CACHE: dict[tuple[str, float, float], float] = {}


#: Most grid points a composition's privacy-loss distribution may have (a few hundred MB at most).
MAX_PLD_POINTS = 1_000_000
# dp-accounting truncates a Gaussian's privacy loss where the log of the tail mass is -50
_GAUSSIAN_TAIL = math.sqrt(2 * 50.0)


def _loss_width(event: dp_accounting.DpEvent) -> float:
    """An upper bound on the width of the privacy-loss range dp-accounting's PLD of ``event`` spans.

    The number of grid points of the PLD is this width over the discretisation interval. A
    Gaussian release of noise multiplier ``z`` (sensitivity 1) has the privacy loss
    ``(2x - 1) / (2 z^2)`` for ``x`` within ``t z`` of 0 or 1, a width of ``2t/z + 1/z^2``; a
    Laplace release of scale ``b`` one of ``2/b``; an ``(epsilon, delta)`` release ``2 epsilon``;
    sampling only shrinks the loss. A ``k``-fold self-composition spans at most ``k`` widths, and
    dp-accounting truncates its tails (mass 1e-15), so by Hoeffding's inequality about
    ``9 sqrt(k)`` of them. ``0.0`` for an event this does not know (it is composed as before).
    """
    if isinstance(event, dp_accounting.GaussianDpEvent):
        z = float(event.noise_multiplier)
        return 2 * _GAUSSIAN_TAIL / z + 1 / z**2 if z > 0 else math.inf
    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return 2 / float(event.noise_multiplier) if event.noise_multiplier > 0 else math.inf
    if isinstance(event, EpsilonDeltaDpEvent):
        return 2 * float(event.epsilon)
    sampled = (dp_accounting.PoissonSampledDpEvent, dp_accounting.SampledWithoutReplacementDpEvent)
    if isinstance(event, sampled):
        return _loss_width(event.event)
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        k = int(event.count)
        return _loss_width(event.event) * min(k, 9 * math.sqrt(k))
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return math.fsum(_loss_width(part) for part in event.events)
    return 0.0


def pld_discretization(event: dp_accounting.DpEvent, value_discretization_interval: float) -> float:
    """The discretisation at which ``event``'s PLD has at most :data:`MAX_PLD_POINTS` grid points.

    ``value_discretization_interval`` itself unless the event's privacy loss spans more than
    ``MAX_PLD_POINTS`` intervals (releases whose epsilon is in the thousands, whose PLD at
    ``1e-4`` would need hundreds of GB); then the interval that gives ``MAX_PLD_POINTS`` points.
    dp-accounting's pessimistic PLD is an upper bound on the privacy loss at any discretisation
    (Meiser & Mohammadi 2018, Theorem 5; Koskela et al. 2020), so a coarser grid only adds a
    little to a total that is huge anyway, and memory stays bounded.
    """
    width = _loss_width(event)
    if not math.isfinite(width):
        return math.inf
    return max(float(value_discretization_interval), width / MAX_PLD_POINTS)


def composed_epsilon(
    events: Sequence[dp_accounting.DpEvent], delta: float, value_discretization_interval: float
) -> float:
    """Epsilon at ``delta`` of all ``events`` composed exactly; ``0.0`` for none.

    The events are first regrouped by :func:`~dptensor.privacy.accounting.reduce_event`, so the
    result is a function of the multiset of events alone (their order does not matter) and is
    memoised. When they reduce to one Gaussian release (a ledger of Gaussian mechanisms only:
    the power method, DP-SGD, input perturbation), its epsilon is the exact analytic one
    (Balle & Wang 2018, :func:`~dptensor.privacy.gaussian_epsilon`, rounded up); otherwise it
    is dp-accounting's PLD accountant (pessimistic, so an upper bound) with the given
    discretisation -- coarsened by :func:`pld_discretization` where the PLD would have more than
    :data:`MAX_PLD_POINTS` points, so that memory stays bounded whatever the epsilons. ``inf``
    when the total is too large to account (dp-accounting overflows: epsilons near 1e9 and
    above) or the pure delta parts exceed ``delta``.
    """
    if not events:
        return 0.0
    return reduced_epsilon(reduce_event(dp_accounting.ComposedDpEvent(list(events))), delta,
                           value_discretization_interval)  # fmt: skip


def reduced_epsilon(
    reduced: dp_accounting.DpEvent, delta: float, value_discretization_interval: float
) -> float:
    """:func:`composed_epsilon` of events already regrouped by :func:`reduce_event` (memoised)."""
    if isinstance(reduced, dp_accounting.NoOpDpEvent):
        return 0.0
    if isinstance(reduced, dp_accounting.NonPrivateDpEvent):
        return math.inf
    key = (repr(reduced), float(delta), float(value_discretization_interval))
    epsilon = _EPSILON_CACHE.get(key)
    if epsilon is None:
        if len(_EPSILON_CACHE) > 1024:
            _EPSILON_CACHE.clear()
        if isinstance(reduced, dp_accounting.GaussianDpEvent):
            epsilon = gaussian_epsilon(reduced.noise_multiplier, delta)
        else:
            interval = pld_discretization(reduced, value_discretization_interval)
            try:
                epsilon = (
                    event_epsilon(reduced, delta, "pld", value_discretization_interval=interval)
                    if math.isfinite(interval)
                    else math.inf
                )
            except (OverflowError, FloatingPointError):
                epsilon = math.inf  # too large for floating point: no finite budget pays for it
        _EPSILON_CACHE[key] = epsilon
    return epsilon


class RecordCounts:
    """The :class:`~dptensor.privacy.accounting.EventCounts` of a ledger's checked charges, grown as
    charges are added: composing ``n`` charges and a new one flattens only the charges not counted
    yet, and gives exactly :func:`composed_epsilon` of them all (the same multiset, the same float).

    The charges are the records a ledger has checked (dicts with ``"event"``), oldest first; the
    counts are those of the first :attr:`n` of them, and are recounted from scratch if the records
    given are not a continuation of those counted (another object at position ``n``).
    """

    __slots__ = ("counts", "last", "n")

    def __init__(self) -> None:
        self.counts, self.n, self.last = EventCounts(), 0, None

    def of(self, records: Sequence[dict]) -> EventCounts:
        """The counts of all ``records`` (those of the first :attr:`n` reused when they are the same)."""
        if self.n > len(records) or (self.n and records[self.n - 1] is not self.last):
            self.counts, self.n, self.last = EventCounts(), 0, None
        for record in records[self.n:]:
            self.counts.add(record["event"])
        if records:
            self.n, self.last = len(records), records[-1]
        return self.counts

    def epsilon(self, records: Sequence[dict], delta: float, value_discretization_interval: float,
                extra: dp_accounting.DpEvent | None = None) -> float:  # fmt: skip
        """Composed epsilon of every record's event (and ``extra``), as :func:`composed_epsilon`."""
        counts = self.of(records)
        if extra is not None:
            counts = counts.copy()
            counts.add(extra)
        elif not records:
            return 0.0
        return reduced_epsilon(counts.reduced(), delta, value_discretization_interval)
