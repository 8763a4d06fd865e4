"""The privacy guarantee a private result carries (docs/design.md, *Conventions*)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import dp_accounting


@dataclass(frozen=True)
class PrivacyGuarantee:
    """An ``(epsilon, delta)``-differential-privacy statement about one released result.

    A guarantee either **holds** -- dptensor can prove it for the stated neighbouring relation
    -- or it does not (a paper's claim reproduced as written, or noise from
    :func:`~dptensor.privacy.insecure_test_noise`). A guarantee that does not hold reports
    ``epsilon = inf`` (and ``epsilon_exact = inf``), so that a caller who reads only ``epsilon``
    is not misled; the paper's number is kept as ``nominal_epsilon`` and the reason as
    ``reason``.

    Attributes
    ----------
    epsilon, delta : float
        The release is ``(epsilon, delta)``-DP with respect to ``neighbouring``.
        ``epsilon = inf`` when the guarantee does not hold.
    neighbouring : str
        Name of the neighbouring relation, e.g. ``"entry"`` (Wang & Anandkumar 2016,
        Definition 4.2), ``"record"`` (replace one record of norm ``<= B``), ``"entry-value"``
        (change one observed value of a partially observed tensor).
    accountant : str
        How the noise was calibrated and the releases composed, e.g. ``"exact"`` (Gaussian
        differential privacy with the analytic Gaussian mechanism) or ``"advanced"``.
    n_releases : int
        Number of noisy releases composed.
    mechanism : str
        The mechanism of the releases, e.g. ``"gaussian"``.
    noise_multiplier : float
        Per-release noise scale divided by the release's sensitivity.
    epsilon_exact : float
        The smallest ``epsilon`` at the same ``delta`` for the noise actually added (exact
        composition); ``<= epsilon``. ``inf`` when the guarantee does not hold.
    details : mapping
        Parameters of the relation and the algorithm. Never a quantity computed from the private
        data without noise.
    holds : bool
        Whether the stated guarantee is proved.
    claim : str
        ``"proved"`` (dptensor's argument) or ``"paper"`` (a publication's claim as written).
    reason : str
        Why the guarantee does not hold (empty when it holds).
    nominal_epsilon : float or None
        The ``epsilon`` the paper (or the caller) asked for when the guarantee does not hold.
    protected, public : str
        What one neighbouring change may be, and what the mechanism treats as public.
    dp_event : dp_accounting.DpEvent or None
        The releases as a dp-accounting event (see :meth:`to_dp_event`).
    """

    epsilon: float
    delta: float
    neighbouring: str
    accountant: str
    n_releases: int
    mechanism: str
    noise_multiplier: float
    epsilon_exact: float
    details: Mapping[str, Any] = field(default_factory=dict)
    holds: bool = True
    claim: str = "proved"
    reason: str = ""
    nominal_epsilon: float | None = None
    protected: str = ""
    public: str = ""
    dp_event: dp_accounting.DpEvent | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "details", MappingProxyType(dict(self.details)))
        if not self.neighbouring:
            raise ValueError("a PrivacyGuarantee must name its neighbouring relation")
        if self.holds:
            if self.dp_event is None:
                raise ValueError("a guarantee that holds must carry its releases as a dp_event")
            if not math.isfinite(self.epsilon):
                raise ValueError("a guarantee that holds must have a finite epsilon")
        else:
            if not self.reason:
                raise ValueError("a guarantee that does not hold must say why (reason)")
            if self.nominal_epsilon is None and math.isfinite(self.epsilon):
                object.__setattr__(self, "nominal_epsilon", float(self.epsilon))
            object.__setattr__(self, "epsilon", math.inf)
            object.__setattr__(self, "epsilon_exact", math.inf)

    def __reduce__(self) -> tuple:
        # ``details`` is a read-only view, which pickle cannot store: store a dict and rebuild
        # through the constructor (pickle, joblib.dump, copy.deepcopy of a fitted estimator)
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["details"] = dict(self.details)
        return (_rebuild_guarantee, (type(self), fields))

    def to_dp_event(self) -> dp_accounting.DpEvent:
        """The releases as a :class:`dp_accounting.DpEvent`, for exact composition.

        Units: each Gaussian or Laplace event's noise multiplier is the noise scale divided by
        the release's sensitivity -- the largest change between two neighbours under
        :attr:`neighbouring` -- which is how dp-accounting's ``ADD_OR_REMOVE_ONE`` (and
        ``REPLACE_SPECIAL``) accountants read them; pure ``epsilon``-DP releases without a
        dp-accounting event are :class:`~dptensor.privacy.accounting.EpsilonDeltaDpEvent`. A
        guarantee that does not hold is a :class:`dp_accounting.NonPrivateDpEvent` (infinite
        loss). Compose several with :func:`dptensor.privacy.compose`.
        """
        if not self.holds:
            return dp_accounting.NonPrivateDpEvent()
        assert self.dp_event is not None
        return self.dp_event

    def describe(self) -> str:
        """One line for logs and reports; names the neighbouring relation.

        Numbers in the details print with at most four significant digits (the stored values, in
        :meth:`to_dict`, keep their precision); a noise multiplier that is not a number (several
        mechanisms composed) is left out.
        """
        extra = ", ".join(f"{key}={readable(value)}" for key, value in self.details.items())
        if not self.holds:
            nominal = "" if self.nominal_epsilon is None else f" of epsilon={self.nominal_epsilon:g}"
            return (
                f"NOT PRIVATE: the {self.claim} claim{nominal} (delta={self.delta:g}) under the "
                f"{self.neighbouring!r} relation does not hold: {self.reason}"
            )
        multiplier = self.noise_multiplier
        noise = "" if math.isnan(multiplier) else f", noise multiplier {multiplier:.4g}"
        return (
            f"({self.epsilon:g}, {self.delta:g})-DP under the {self.neighbouring!r} relation"
            + (f" (protects {self.protected})" if self.protected else "")
            + f"; {releases_phrase(self.n_releases, self.mechanism)}{noise}, accountant {self.accountant!r} "
            f"(exact epsilon {self.epsilon_exact:.4g})" + (f"; {extra}" if extra else "")
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dictionary (the dp event as its ``repr``)."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "holds": self.holds,
            "neighbouring": self.neighbouring,
            "protected": self.protected,
            "public": self.public,
            "claim": self.claim,
            "reason": self.reason,
            "nominal_epsilon": self.nominal_epsilon,
            "accountant": self.accountant,
            "n_releases": self.n_releases,
            "mechanism": self.mechanism,
            "noise_multiplier": self.noise_multiplier,
            "epsilon_exact": self.epsilon_exact,
            "details": dict(self.details),
            "dp_event": repr(self.to_dp_event()),
        }


def _rebuild_guarantee(cls: type, fields: dict[str, Any]) -> PrivacyGuarantee:
    """The guarantee :meth:`PrivacyGuarantee.__reduce__` stored (its constructor's checks run again)."""
    return cls(**fields)


def releases_phrase(n_releases: int, mechanism: str) -> str:
    """``"2 gaussian releases"``, or ``"5 releases composed (gaussian, gaussian partition selection)"``."""
    n = int(n_releases)
    prefix = "composition of "
    if str(mechanism).startswith(prefix):
        return f"{n} release{'' if n == 1 else 's'} composed ({str(mechanism)[len(prefix):]})"
    return f"{n} {mechanism} release{'' if n == 1 else 's'}"


def readable(value: Any) -> str:
    """A detail's value for people: floats to four significant digits, inside containers too."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key!r}: {readable(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(readable(item) for item in value) + "]"
    return str(value)
