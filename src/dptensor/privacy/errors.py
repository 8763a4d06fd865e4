"""Warnings and errors of dptensor's privacy layer."""

from __future__ import annotations


class PrivacyWarning(UserWarning):
    """Something about a private call weakens or voids its guarantee.

    Issued, for example, for reproducible test noise (:func:`~dptensor.privacy.insecure_test_noise`).
    Every such warning depends only on the call's parameters and public quantities, never on the
    private data, so that the warning itself leaks nothing.
    """


class UnprovenPrivacyError(ValueError):
    """A paper's mode whose privacy proof fails was requested without opting in.

    The message states why the claim does not hold and how to opt in
    (:func:`~dptensor.privacy.enable_features`).
    """
