"""Warnings and errors of dptensor's privacy layer."""

from __future__ import annotations

from dptensor._errors import PicklableFieldsError


class PrivacyWarning(UserWarning):
    """Something about a private call weakens or voids its guarantee.

    Issued, for example, for reproducible test noise (:func:`~dptensor.privacy.insecure_test_noise`).
    Every such warning depends only on the call's parameters and public quantities, never on the
    private data, so that the warning itself leaks nothing.
    """


class UtilityWarning(UserWarning):
    """A private result whose guarantee holds but which is no more useful than a baseline.

    Issued only from quantities the caller may look at, never from the protected data: either
    from public inputs alone (a private spectral LDA fit whose planned noise swamps the signal,
    decided before the documents are read), or -- :class:`HeldOutUtilityWarning` -- from the
    released result and held-out data.
    """


class ReleaseUtilityWarning(UtilityWarning):
    """A released result that the release itself shows to be less useful than asked.

    Computed from the release only (with :class:`HeldOutUtilityWarning`, from the release and
    held-out data), it is post-processing: whether it appears varies with the noise, like a
    released number (:func:`dptensor.privacy.audit.observe` leaves it out for that reason). For
    example a private vocabulary that kept fewer words than asked
    (:class:`~dptensor.PrivateCountVectorizer`: how many words passed is part of the release).
    """


class HeldOutUtilityWarning(ReleaseUtilityWarning):
    """A released result measured on held-out data to be no better than a baseline.

    For example a private completion whose held-out RMSE is above that of predicting one constant
    for every entry. Computed from the release and the held-out data only, it is post-processing:
    whether it appears varies with the noise, like a released number
    (:func:`dptensor.privacy.audit.observe` leaves it out for that reason).
    """


class UnprovenPrivacyError(ValueError):
    """A paper's mode whose privacy proof fails was requested without opting in.

    The message states why the claim does not hold and how to opt in
    (:func:`~dptensor.privacy.enable_features`).
    """


class BudgetExceededError(PicklableFieldsError, ValueError):
    """A :class:`~dptensor.privacy.BudgetLedger` refused a charge: the release was not made.

    Raised before any private data is read, so nothing was computed. The decision depends on
    the ledger's budget, its earlier charges and the new release's guarantee only -- never on
    the data. It pickles with its fields, so a refusal in a joblib worker (``GridSearchCV(...,
    n_jobs=2)``) reaches the caller as this error.

    Attributes
    ----------
    path : str
        The ledger file.
    budget_epsilon, budget_delta : float
        The ledger's budget.
    spent : float
        Composed epsilon (at ``budget_delta``) of the charges already recorded.
    left : float
        ``budget_epsilon - spent``.
    requested : float
        The epsilon of the refused release on its own (``inf`` if it is not private).
    total : float
        The composed epsilon the ledger would reach with the release (``inf`` if it is not private).
    """

    def __init__(
        self, message: str, *, path: str, budget_epsilon: float, budget_delta: float, spent: float,
        requested: float, total: float,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.budget_epsilon = budget_epsilon
        self.budget_delta = budget_delta
        self.spent = spent
        self.left = budget_epsilon - spent
        self.requested = requested
        self.total = total


class LedgerError(OSError):
    """A budget ledger file cannot be used: missing, not a ledger, from a newer dptensor,
    damaged, read-only, out of disk space or locked for too long.

    When it is raised by a charge, the charge was not recorded and nothing was computed.
    """
