"""Which neighbouring relations imply which: a release under one protects the other's unit.

A release is ``(epsilon, delta)``-DP under a relation ``R`` when its output distributions on any
two ``R``-neighbouring data sets are close. If every pair of ``R'``-neighbours is also a pair of
``R``-neighbours (``R'`` is contained in ``R``), the release is ``(epsilon, delta)``-DP under
``R'`` too, and it composes with ``R'`` releases into an ``R'`` guarantee. We then say ``R``
**implies** ``R'``. A :class:`~dptensor.privacy.BudgetLedger` for ``R'`` accepts such releases.

The table (docs/protection.md, *Public quantities, per relation*):

* **user** implies **entry-value**. Under ``user`` two completion data sets of the same public
  shape are neighbours when they differ in the ratings of one user (one row of mode 0): how many,
  which items and days, and their values. Under ``entry-value`` they are neighbours when they have
  the same shape and the same observed index set and differ in one observed value (within the
  declared range). Changing one observed value ``(i, j, k)`` changes only user ``i``'s ratings, so
  every entry-value pair is a user pair. (A user-level release clips values into its declared
  range, so it covers a value change of any size.) The converse is false: a user change may
  add, remove or move ratings, which changes the index set entry-value treats as public.
* **user** does not imply **entry**: ``entry`` (Wang & Anandkumar, Definition 4.2) changes one
  entry of a *symmetric* tensor together with its permuted copies, which lie in up to three rows
  of mode 0 (up to three "users"); nor does it apply to the same kind of data.
* Adding or removing one rating is a user change too, but dptensor has no relation of that name:
  no release states it and no ledger can be fixed to it, so it is not in the table.
* ``record`` (one row of a data matrix replaced) and ``document`` (one document replaced) imply
  nothing else here and are implied by nothing else: they protect other kinds of data.

Every relation implies itself.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["IMPLIES", "implies", "implies_any"]

#: ``stronger -> weaker relations``: a release under ``stronger`` is a release under each of them.
IMPLIES: dict[str, frozenset[str]] = {
    "user": frozenset({"entry-value"}),
}


def implies(stronger: str, weaker: str) -> bool:
    """Whether a release under ``stronger`` is, with the same ``(epsilon, delta)``, one under ``weaker``.

    Parameters
    ----------
    stronger, weaker : str
        Relation names (``"user"``, ``"entry-value"``, ``"entry"``, ``"record"``, ...).

    Returns
    -------
    bool
        True when the two are the same relation or :data:`IMPLIES` lists ``weaker`` under
        ``stronger`` (every ``weaker``-neighbouring pair is a ``stronger``-neighbouring pair).

    Examples
    --------
    >>> implies("user", "entry-value"), implies("entry-value", "user")
    (True, False)
    """
    return stronger == weaker or weaker in IMPLIES.get(stronger, frozenset())


def implies_any(relation: str, relations: Iterable[str]) -> bool:
    """Whether a release under ``relation`` protects the unit of a ledger that accepts ``relations``.

    A ledger listing several relations states that one change of the protected unit is a
    neighbouring change under each; a release under a relation implying any one of them
    therefore protects that unit.
    """
    return any(implies(relation, weaker) for weaker in relations)
