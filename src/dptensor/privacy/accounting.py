"""Exact composition of several private releases: ``compose(*guarantees, delta=...)``.

Every :class:`~dptensor.privacy.PrivacyGuarantee` exposes its releases as a
:class:`dp_accounting.DpEvent` (:meth:`~dptensor.privacy.PrivacyGuarantee.to_dp_event`), so
that the releases of several dptensor calls on the same data -- a decomposition today, a topic
model tomorrow -- are accounted together by dp-accounting's privacy-loss-distribution (PLD)
accountant (Meiser & Mohammadi 2018; Koskela et al. 2020; Doroshenko et al. 2022) or its Rényi
accountant, instead of by adding their epsilons.

Units. An event's noise multiplier is the noise scale divided by the release's sensitivity, the
largest change between two neighbours under the guarantee's relation. dp-accounting's
``ADD_OR_REMOVE_ONE`` accountant reads Gaussian and Laplace events exactly so (a shift of one
unit), whatever the underlying relation, so one accountant composes them all -- provided every
guarantee protects the same unit (the same ``neighbouring`` relation on the same data), which
:func:`compose` checks. Pure (or approximate) DP releases without a dp-accounting event of
their own, such as the exponential-norm mechanism, are :class:`EpsilonDeltaDpEvent`: their PLD
is the worst case for an ``(epsilon, delta)``-DP mechanism (dp-accounting's
``from_privacy_parameters``), which every such mechanism is dominated by (Kairouz, Oh &
Viswanath 2015).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Literal

import attr
import dp_accounting
from dp_accounting import pld, rdp

from dptensor._validation import check_epsilon_delta, check_real
from dptensor.privacy.guarantee import PrivacyGuarantee

ComposeAccountant = Literal["pld", "rdp"]


@attr.s(frozen=True, slots=True, auto_attribs=True)
class EpsilonDeltaDpEvent(dp_accounting.DpEvent):
    """A release known only to be ``(epsilon, delta)``-DP (``delta = 0``: pure DP).

    Used for mechanisms dp-accounting has no event for (the l2 exponential-norm mechanism, data-
    dependent calibrations charged as a whole). Its PLD is the pessimistic
    ``(epsilon, delta)`` one, so composing it is valid for any such mechanism.
    """

    epsilon: float
    delta: float = 0.0


class _PLDAccountant(pld.PLDAccountant):
    """dp-accounting's PLD accountant, taught :class:`EpsilonDeltaDpEvent`."""

    def _maybe_compose(self, event, count, do_compose):  # noqa: ANN001, ANN202 - dp-accounting's hook
        if isinstance(event, EpsilonDeltaDpEvent):
            if do_compose:
                params = pld.common.DifferentialPrivacyParameters(event.epsilon, event.delta)
                block = pld.privacy_loss_distribution.from_privacy_parameters(
                    params, value_discretization_interval=self._value_discretization_interval
                )
                self._pld = self._pld.compose(block.self_compose(count) if count > 1 else block)
            return None
        return super()._maybe_compose(event, count, do_compose)


def make_accountant(
    accountant: ComposeAccountant = "pld", *, value_discretization_interval: float = 1e-4
) -> dp_accounting.PrivacyAccountant:
    """An empty dp-accounting accountant in dptensor's units (``ADD_OR_REMOVE_ONE``).

    ``"pld"``: privacy-loss distributions (tight; also composes :class:`EpsilonDeltaDpEvent`).
    ``"rdp"``: Rényi DP (Mironov 2017), cheaper for very many subsampled steps, looser.
    """
    relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    if accountant == "pld":
        return _PLDAccountant(relation, value_discretization_interval=value_discretization_interval)
    if accountant == "rdp":
        return rdp.RdpAccountant(neighboring_relation=relation)
    raise ValueError(f"accountant must be 'pld' or 'rdp', got {accountant!r}")


def reduce_event(event: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
    """The same composition, regrouped so that the PLD accountant composes it in a few steps.

    Every :class:`dp_accounting.ComposedDpEvent` and :class:`dp_accounting.SelfComposedDpEvent`
    is flattened into a multiset of atomic events and :class:`dp_accounting.NoOpDpEvent` parts
    are dropped. All :class:`dp_accounting.GaussianDpEvent` atoms are merged into one: Gaussian
    releases with noise multipliers ``z_i`` compose exactly into one Gaussian release with
    multiplier ``(sum_i z_i^-2)^(-1/2)`` (Gaussian differential privacy, Dong, Roth & Su 2022,
    Corollary 3.3; their privacy-loss distributions are normal and convolve to a normal). Each
    other distinct atom becomes one ``SelfComposedDpEvent(atom, count)``. The result describes
    the same mechanism, so its privacy loss is the same; it depends only on the multiset of
    atoms (not on their order), which makes the composed epsilon of many charges reproducible
    to the last bit and cheap: a budget ledger with a thousand Gaussian charges composes one
    Gaussian.

    Parameters
    ----------
    event : dp_accounting.DpEvent

    Returns
    -------
    dp_accounting.DpEvent
        A :class:`dp_accounting.NonPrivateDpEvent` if any part is non-private (or a Gaussian
        with no noise); :class:`dp_accounting.NoOpDpEvent` if nothing is released; otherwise
        one atom, one self-composed atom, or their :class:`dp_accounting.ComposedDpEvent`.

    Examples
    --------
    >>> import dp_accounting as dpa
    >>> reduce_event(dpa.ComposedDpEvent([dpa.GaussianDpEvent(3.0),
    ...                                   dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(3.0), 3)]))
    GaussianDpEvent(noise_multiplier=1.5)
    """
    counts = EventCounts()
    counts.add(event)
    return counts.reduced()


class EventCounts:
    """The multiset of atomic events that :func:`reduce_event` regroups, kept so that it can grow.

    ``counts.add(event)`` flattens one more event into it; ``counts.reduced()`` is then exactly
    ``reduce_event(ComposedDpEvent(all events added))``, to the last bit (the counts are integers
    and the Gaussian multipliers are merged from them in sorted order), so a ledger composes
    its ``n + 1``-th charge without flattening the first ``n`` again.
    """

    __slots__ = ("atom_counts", "atoms", "gaussian_counts", "non_private")

    def __init__(self) -> None:
        self.gaussian_counts: Counter[float] = Counter()
        self.atom_counts: Counter[str] = Counter()
        self.atoms: dict[str, dp_accounting.DpEvent] = {}
        self.non_private = False

    def copy(self) -> EventCounts:
        """An independent copy (adding to it leaves this one as it is)."""
        other = EventCounts()
        other.gaussian_counts, other.atom_counts = Counter(self.gaussian_counts), Counter(self.atom_counts)
        other.atoms, other.non_private = dict(self.atoms), self.non_private
        return other

    def add(self, event: dp_accounting.DpEvent) -> None:
        """Flatten ``event`` into the multiset (see :func:`reduce_event`)."""
        gaussian_counts, atom_counts, atoms = self.gaussian_counts, self.atom_counts, self.atoms
        stack: list[tuple[dp_accounting.DpEvent, int]] = [(event, 1)]
        while stack:
            part, count = stack.pop()
            if not isinstance(part, dp_accounting.DpEvent):
                raise TypeError(f"expected a dp_accounting.DpEvent, got {type(part).__name__}")
            if isinstance(part, dp_accounting.ComposedDpEvent):
                stack.extend((inner, count) for inner in part.events)
            elif isinstance(part, dp_accounting.SelfComposedDpEvent):
                if part.count > 0:
                    stack.append((part.event, count * int(part.count)))
            elif isinstance(part, dp_accounting.NonPrivateDpEvent):
                self.non_private = True
            elif isinstance(part, dp_accounting.NoOpDpEvent):
                continue
            elif isinstance(part, dp_accounting.GaussianDpEvent):
                if not part.noise_multiplier > 0:
                    self.non_private = True
                else:
                    gaussian_counts[float(part.noise_multiplier)] += count
            else:
                key = f"{type(part).__module__}.{part!r}"
                atoms.setdefault(key, part)
                atom_counts[key] += count

    def reduced(self) -> dp_accounting.DpEvent:
        """The regrouped composition of every event added (:func:`reduce_event`'s result)."""
        if self.non_private:
            return dp_accounting.NonPrivateDpEvent()
        parts: list[dp_accounting.DpEvent] = []
        if self.gaussian_counts:
            # summed in sorted order with fsum: the same multiset always gives the same float
            mu2 = math.fsum(n / z**2 for z, n in sorted(self.gaussian_counts.items()))
            parts.append(dp_accounting.GaussianDpEvent(1.0 / math.sqrt(mu2)))
        for key in sorted(self.atoms):
            n = self.atom_counts[key]
            parts.append(self.atoms[key] if n == 1 else dp_accounting.SelfComposedDpEvent(self.atoms[key], n))
        if not parts:
            return dp_accounting.NoOpDpEvent()
        return parts[0] if len(parts) == 1 else dp_accounting.ComposedDpEvent(parts)


def event_epsilon(
    event: dp_accounting.DpEvent,
    delta: float,
    accountant: ComposeAccountant = "pld",
    *,
    value_discretization_interval: float = 1e-4,
) -> float:
    """The ``epsilon`` at ``delta`` of a (composed) event; ``inf`` for a non-private event."""
    check_epsilon_delta(1.0, delta)
    acc = make_accountant(accountant, value_discretization_interval=value_discretization_interval)
    if not acc.supports(event):
        raise ValueError(f"the {accountant!r} accountant cannot compose {event!r}; use accountant='pld'")
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def compose(
    *guarantees: PrivacyGuarantee,
    delta: float,
    accountant: ComposeAccountant = "pld",
    value_discretization_interval: float = 1e-4,
    neighbouring: str | None = None,
) -> PrivacyGuarantee:
    """The exact total guarantee of several releases on the same data.

    Parameters
    ----------
    *guarantees : PrivacyGuarantee
        The guarantees of the releases (each from a private dptensor call).
    delta : float
        The total ``delta`` at which to state the composed ``epsilon``; it must be at least the
        sum of the pure ``delta`` parts of :class:`EpsilonDeltaDpEvent` releases.
    accountant : {"pld", "rdp"}, default "pld"
        dp-accounting's PLD accountant (pessimistic discretisation, so the reported epsilon is
        an upper bound) or its RDP accountant.
    value_discretization_interval : float, default 1e-4
        PLD discretisation; smaller is tighter and slower.
    neighbouring : str, optional
        The relation under which the total is stated. By default every guarantee must name the
        same relation; pass a name to compose releases under different relations when you know
        that one neighbouring change under it is a neighbouring change under each of theirs.

    Returns
    -------
    PrivacyGuarantee
        ``epsilon`` = ``epsilon_exact`` = the composed epsilon at ``delta``; ``holds`` only if
        every part holds; ``dp_event`` the :class:`dp_accounting.ComposedDpEvent` of the parts.

    Examples
    --------
    >>> import numpy as np
    >>> from dptensor import private_power_method
    >>> from dptensor.privacy import compose
    >>> from dptensor.tensor import LowRankTensor
    >>> T = LowRankTensor(np.array([3000.0]), np.eye(20)[:, :1])
    >>> runs = [private_power_method(T, 1, epsilon=0.5, delta=1e-6, n_restarts=2, n_iter=3)
    ...         for _ in range(4)]
    >>> total = compose(*(r.guarantee for r in runs), delta=4e-6)
    >>> bool(total.epsilon < 4 * 0.5)   # tighter than adding the epsilons
    True
    """
    if not guarantees:
        raise ValueError("compose needs at least one guarantee")
    for g in guarantees:
        if not isinstance(g, PrivacyGuarantee):
            raise TypeError(f"compose takes PrivacyGuarantee objects, got {type(g).__name__}")
    check_epsilon_delta(1.0, delta)
    check_real(value_discretization_interval, "value_discretization_interval")
    relations = sorted({g.neighbouring for g in guarantees})
    if neighbouring is None:
        if len(relations) > 1:
            raise ValueError(
                f"the guarantees protect different units ({', '.join(relations)}); their sum is only "
                "meaningful under a relation that each of them covers: pass neighbouring=... to state it"
            )
        neighbouring = relations[0]
    holds = all(g.holds for g in guarantees)
    event = dp_accounting.ComposedDpEvent([g.to_dp_event() for g in guarantees])
    epsilon = (
        event_epsilon(event, delta, accountant, value_discretization_interval=value_discretization_interval)
        if holds
        else math.inf
    )
    if holds and not math.isfinite(epsilon):
        raise ValueError(
            f"the composed releases are not ({delta:g})-DP for any finite epsilon: delta={delta:g} is "
            "below the sum of their pure delta parts"
        )
    reasons = [g.reason for g in guarantees if not g.holds]
    # what the parts protect and take as public, where they all say the same (one relation's text)
    protected = {g.protected for g in guarantees}
    public = {g.public for g in guarantees}
    return PrivacyGuarantee(
        epsilon=epsilon,
        delta=float(delta),
        neighbouring=neighbouring,
        accountant=f"composition ({accountant}, dp-accounting)",
        n_releases=sum(g.n_releases for g in guarantees),
        mechanism="composition of " + ", ".join(sorted({g.mechanism for g in guarantees})),
        noise_multiplier=math.nan,
        epsilon_exact=epsilon,
        details={
            "parts": len(guarantees),
            "epsilons": [g.epsilon for g in guarantees],
            "deltas": [g.delta for g in guarantees],
            "relations": relations,
        },
        holds=holds,
        claim="proved" if holds else "composition",
        reason="; ".join(reasons),
        protected=protected.pop() if len(protected) == 1 else "",
        public=public.pop() if len(public) == 1 else "",
        dp_event=event,
    )
