"""The start of every private release: noise source, honest guarantee, charge -- in that order.

A private function computes its guarantee from its parameters and public quantities only, then
calls :func:`begin_release` **before** it reads the private data:

1. the ``noise`` argument is resolved to a :class:`~dptensor.privacy.NoiseSource` (fresh OS
   entropy unless the caller passed :func:`~dptensor.privacy.insecure_test_noise`, in which case
   the guarantee is voided: ``holds=False``, ``epsilon = inf``);
2. the ledger, if any, is charged with the guarantee (it refuses, with nothing computed, when
   the budget would be exceeded; a crash after the charge keeps it).

Only then is the data touched and the noise drawn.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.noise import INSECURE_NOISE_REASON, NoiseLike, NoiseSource, resolve_noise


@runtime_checkable
class Ledger(Protocol):
    """What a private function needs of a privacy-budget ledger."""

    def charge(self, guarantee: PrivacyGuarantee, *, description: str = "") -> object:
        """Record the release before it is made; raise if the budget would be exceeded."""


def void_for_insecure_noise(guarantee: PrivacyGuarantee, source: NoiseSource) -> PrivacyGuarantee:
    """The guarantee, marked as not holding when the noise is reproducible from a public seed."""
    if source.secure or not guarantee.holds:
        return guarantee
    return dataclasses.replace(
        guarantee, holds=False, claim="test-noise",
        reason=getattr(source, "insecure_reason", INSECURE_NOISE_REASON),
        nominal_epsilon=guarantee.epsilon,
    )


def begin_release(
    guarantee: PrivacyGuarantee,
    noise: NoiseLike | NoiseSource,
    *,
    ledger: Ledger | None = None,
    description: str = "",
) -> tuple[PrivacyGuarantee, NoiseSource]:
    """Resolve the noise, finalise the guarantee and charge the ledger, before any data is read.

    Parameters
    ----------
    guarantee : PrivacyGuarantee
        Computed from parameters and public quantities only.
    noise : None, "numpy", "opendp", InsecureTestNoise or NoiseSource
        See :func:`~dptensor.privacy.resolve_noise`.
    ledger : object with ``charge(guarantee, description=...)``, optional
        E.g. :class:`dptensor.privacy.BudgetLedger`.
    description : str
        What is released, for the ledger's records.

    Returns
    -------
    guarantee : PrivacyGuarantee
        The final guarantee (voided for insecure test noise).
    noise : NoiseSource
        Where the release's noise must come from.
    """
    source = resolve_noise(noise)
    guarantee = void_for_insecure_noise(guarantee, source)
    if ledger is not None:
        if not isinstance(ledger, Ledger):
            raise TypeError(f"ledger must have a charge(guarantee, description=...) method, got {ledger!r}")
        ledger.charge(guarantee, description=description)
    return guarantee, source
