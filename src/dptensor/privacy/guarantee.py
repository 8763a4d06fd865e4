"""The privacy guarantee a private result carries (DESIGN.md, *Conventions*)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class PrivacyGuarantee:
    """An ``(epsilon, delta)``-differential-privacy statement about one released result.

    Attributes
    ----------
    epsilon, delta : float
        The guarantee: the release is ``(epsilon, delta)``-DP with respect to
        ``neighbouring``. This is the budget the caller asked for; it is only stated after
        ``epsilon_exact <= epsilon`` has been checked.
    neighbouring : str
        The neighbouring relation: ``"entry"`` (Wang & Anandkumar 2016, Definition 4.2) or
        ``"record"`` (one record of a sample moment replaced, records of norm ``<= bound``).
    accountant : str
        How the per-release noise was calibrated: ``"exact"`` (Gaussian DP composition with
        the analytic Gaussian mechanism) or ``"advanced"`` (the paper's constants).
    n_releases : int
        Number of noisy releases composed (``K = kL(R+1)`` for Algorithm 3, 1 for input
        perturbation).
    mechanism : str
        The mechanism of each release, e.g. ``"gaussian"``.
    noise_multiplier : float
        Per-release noise standard deviation divided by the release's l2 sensitivity.
    epsilon_exact : float
        The smallest ``epsilon`` at the same ``delta`` for the noise actually added, by exact
        Gaussian composition. Equal to ``epsilon`` (to solver tolerance) for the ``"exact"``
        accountant and much smaller for ``"advanced"``.
    details : mapping
        Relation parameters (e.g. ``record_bound``, ``n_records``) and the
        algorithm's shape (``rank``, ``n_restarts``, ``n_iter``).
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "details", MappingProxyType(dict(self.details)))

    def describe(self) -> str:
        """One line for logs and reports."""
        extra = ", ".join(f"{key}={value}" for key, value in self.details.items())
        return (
            f"({self.epsilon:g}, {self.delta:g})-DP under the {self.neighbouring!r} relation; "
            f"{self.n_releases} {self.mechanism} release(s), noise multiplier "
            f"{self.noise_multiplier:.4g}, accountant {self.accountant!r} "
            f"(exact epsilon {self.epsilon_exact:.4g})" + (f"; {extra}" if extra else "")
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dictionary."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "neighbouring": self.neighbouring,
            "accountant": self.accountant,
            "n_releases": self.n_releases,
            "mechanism": self.mechanism,
            "noise_multiplier": self.noise_multiplier,
            "epsilon_exact": self.epsilon_exact,
            "details": dict(self.details),
        }
