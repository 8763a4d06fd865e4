"""Every exception and warning of dptensor survives ``pickle`` and ``copy`` with its fields.

A joblib worker sends a fit's exception back pickled; an exception whose ``__init__`` takes
required keyword-only fields (the ledger's refusal) could not be rebuilt, so ``GridSearchCV(...,
n_jobs=2)`` over a private estimator reported ``BrokenProcessPool`` after the budget was spent
(issue 53) instead of the refusal.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pickle
import pkgutil

import pytest
from sklearn.model_selection import GridSearchCV

import dptensor
from dptensor import PrivateSpectralLDA
from dptensor.datasets.lda import make_lda_corpus
from dptensor.privacy import BudgetExceededError, BudgetLedger

_SAMPLE = {"str": "some/field", "float": 0.375, "int": 7}


def _dptensor_exception_classes() -> list[type[BaseException]]:
    """Every exception or warning class defined in a dptensor module (all modules imported)."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(dptensor.__path__, "dptensor."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (inspect.isclass(value) and issubclass(value, BaseException)
                    and value.__module__.startswith("dptensor")):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[name] for name in sorted(found)]


def _instance(cls: type[BaseException]) -> BaseException:
    """An instance with a message and every keyword-only field set to a sample of its type."""
    if "__init__" not in vars(cls) and all("__init__" not in vars(base) for base in cls.__mro__[1:]
                                          if base.__module__.startswith("dptensor")):
        return cls("a message", "a second argument")
    fields = {}
    for parameter in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if parameter.kind is parameter.KEYWORD_ONLY:
            fields[parameter.name] = _SAMPLE[str(parameter.annotation)]
    return cls("a message", **fields)


CLASSES = _dptensor_exception_classes()


def test_the_walk_finds_the_errors_with_fields():
    names = {cls.__name__ for cls in CLASSES}
    assert {"BudgetExceededError", "StreamTooShortError", "LedgerError", "PrivacyWarning",
            "EmptyVocabularyError"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_every_exception_and_warning_round_trips(cls):
    error = _instance(cls)
    for copied in (pickle.loads(pickle.dumps(error)), copy.deepcopy(error), copy.copy(error)):
        assert type(copied) is cls
        assert copied.args == error.args and str(copied) == str(error)
        assert vars(copied) == vars(error)


def test_a_budget_refusal_keeps_its_fields_through_pickle():
    error = BudgetExceededError("refused", path="/tmp/x.ledger", budget_epsilon=1.5, budget_delta=1e-5,
                                spent=1.25, requested=1.0, total=1.75)
    copied = pickle.loads(pickle.dumps(error))
    assert (copied.path, copied.budget_epsilon, copied.budget_delta, copied.spent, copied.left,
            copied.requested, copied.total) == ("/tmp/x.ledger", 1.5, 1e-5, 1.25, 0.25, 1.0, 1.75)
    assert str(copied) == "refused"


def test_grid_search_in_worker_processes_reports_the_refusal(tmp_path):
    """Two joblib worker processes: the ledger pays for two fits (composed exactly, epsilon 1.28 of
    1.5), the third is refused, and the caller sees the refusal itself (it was ``BrokenProcessPool``:
    the error could not be unpickled)."""
    counts = make_lda_corpus(300, 30, 3, alpha=0.1, doc_length=30, random_state=0).counts
    ledger = BudgetLedger(tmp_path / "docs.ledger", epsilon=1.5, delta=1e-5, dataset="docs")
    model = PrivateSpectralLDA(3, 0.3, epsilon=1.0, delta=1e-6, ledger=ledger, random_state=0)
    search = GridSearchCV(model, {"alpha0": [0.3, 1.0]}, cv=2, n_jobs=2, error_score="raise")
    with pytest.raises(BudgetExceededError, match="privacy budget exceeded") as refused:
        search.fit(counts)
    assert refused.value.budget_epsilon == 1.5 and refused.value.requested == pytest.approx(1.0)
    assert len(ledger.charges()) == 2
