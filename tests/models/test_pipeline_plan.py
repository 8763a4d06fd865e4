"""A pipeline of private steps is planned before its first charge (issue 53, finding 8).

``make_pipeline(PrivateCountVectorizer(...), PrivateSpectralLDA(...))`` charged the vocabulary, then
the model refused (its configuration, or the ledger), and the vocabulary's budget was lost.
:class:`~dptensor.models.PrivatePipeline` runs every step's checks and asks the ledger for all of
them first, and a plain ``Pipeline`` does the same when its first private step is about to be
charged: a run it cannot pay in full charges nothing.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.pipeline import make_pipeline

from dptensor.models import (
    DPVariationalLDA,
    PrivateCountVectorizer,
    PrivatePipeline,
    PrivateSpectralLDA,
    check_private_pipeline,
    make_private_pipeline,
    pipeline_guarantee,
)
from dptensor.models.pipeline_plan import check_pipeline_budget, model_guarantees
from dptensor.models.topics.dp_vi_options import DPVIOptions
from dptensor.privacy import BudgetExceededError, BudgetLedger, compose

pytestmark = pytest.mark.filterwarnings("ignore::dptensor.privacy.ReleaseUtilityWarning")  # 8 of 20 words


@pytest.fixture(scope="module")
def documents() -> list[str]:
    rng = np.random.default_rng(0)
    topics = [["tensor", "power", "moment", "whiten"], ["privacy", "noise", "budget", "ledger"]]
    return [" ".join(rng.choice(topics[i % 2], size=8)) for i in range(800)]


def _steps(ledger, n_words=20, k=2, model_epsilon=2.0, model_ledger=None):
    return (PrivateCountVectorizer(n_words, epsilon=2.0, delta=0.5e-6, ledger=ledger),
            PrivateSpectralLDA(k, 1.0, epsilon=model_epsilon, delta=0.5e-6, random_state=0, refine=None,
                               ledger=ledger if model_ledger is None else model_ledger))


def test_a_model_that_refuses_its_vocabulary_size_charges_nothing(tmp_path, documents):
    ledger = BudgetLedger(tmp_path / "l.sqlite", epsilon=10.0, delta=1e-5)
    with pytest.raises(ValueError, match="n_components=10 exceeds the vocabulary size 3"):
        make_private_pipeline(*_steps(ledger, n_words=3, k=10)).fit(documents)
    assert ledger.charges() == []
    # a plain Pipeline is planned too, when its first private step is about to be charged (it
    # charged the vocabulary before the model refused)
    with pytest.raises(ValueError, match="exceeds the vocabulary size"):
        make_pipeline(*_steps(ledger, n_words=3, k=10)).fit(documents)
    assert ledger.charges() == []
    # ... but not with memory= (it fits clones of its steps, which the call stack does not show)
    with pytest.raises(ValueError, match="exceeds the vocabulary size"):
        make_pipeline(*_steps(ledger, n_words=3, k=10), memory=str(tmp_path / "cache")).fit(documents)
    assert len(ledger.charges()) == 1


def test_a_ledger_that_cannot_pay_for_every_step_charges_nothing(tmp_path, documents):
    """epsilon 2.5 at delta 1e-6 pays for the vocabulary (1.90) but not for it and the model composed."""
    ledger = BudgetLedger(tmp_path / "l.sqlite", epsilon=2.5, delta=1e-6)
    vectorizer, model = _steps(ledger)
    assert ledger.would_spend(vectorizer.planned_guarantee()) <= 2.5
    pipe = make_private_pipeline(vectorizer, model)
    steps = "privatecountvectorizer, privatespectrallda of this run"
    with pytest.raises(BudgetExceededError, match=steps) as e:
        pipe.fit(documents)
    assert ledger.charges() == [] and e.value.total > 2.5 and "Nothing was charged" in str(e.value)
    with pytest.raises(BudgetExceededError):
        pipe.fit_transform(documents)
    with pytest.raises(BudgetExceededError):  # a plain Pipeline, planned at its first charge
        make_pipeline(*_steps(ledger)).fit(documents)
    assert ledger.charges() == [] and not hasattr(pipe[0], "vocabulary_")


def test_a_ledger_that_can_pay_is_charged_for_each_step_as_planned(tmp_path, documents):
    ledger = BudgetLedger(tmp_path / "l.sqlite", epsilon=10.0, delta=1e-4)
    vectorizer, model = _steps(ledger)
    pipe = make_private_pipeline(vectorizer, model)
    assert isinstance(pipe, PrivatePipeline) and [n for n, _ in pipe.steps] == [
        "privatecountvectorizer", "privatespectrallda"]
    pipe.fit(documents)
    charges = ledger.charges()
    assert len(charges) == 2
    assert charges[0].epsilon == pytest.approx(vectorizer.planned_guarantee().epsilon)
    planned = model_guarantees(model, len(documents), 20)
    assert model.guarantee_.epsilon in {g.epsilon for g in planned}
    assert pipeline_guarantee(pipe, delta=1e-6).holds
    assert pipe.transform(documents[:3]).shape == (3, 2)


def test_each_ledger_is_asked_for_its_own_steps(tmp_path, documents):
    """The vocabulary on one ledger, the model on another that cannot pay: nothing is charged to either."""
    vocabulary_ledger = BudgetLedger(tmp_path / "v.sqlite", epsilon=5.0, delta=1e-5)
    model_ledger = BudgetLedger(tmp_path / "m.sqlite", epsilon=1.0, delta=1e-5)
    pipe = make_private_pipeline(*_steps(vocabulary_ledger, model_ledger=model_ledger))
    with pytest.raises(BudgetExceededError, match="the steps privatespectrallda of this run"):
        pipe.fit(documents)
    assert vocabulary_ledger.charges() == [] and model_ledger.charges() == []
    # with a model the second ledger can pay, each ledger gets its own step's charge
    pipe.set_params(privatespectrallda__epsilon=0.9)
    pipe.fit(documents)
    assert len(vocabulary_ledger.charges()) == len(model_ledger.charges()) == 1


def test_public_steps_carry_the_width_and_vi_plans_from_n_alone(tmp_path, documents):
    ledger = BudgetLedger(tmp_path / "l.sqlite", epsilon=10.0, delta=1e-5)
    fixed = make_private_pipeline(CountVectorizer(vocabulary=["tensor", "power"]),
                                  PrivateSpectralLDA(3, epsilon=1.0, delta=1e-6, ledger=ledger))
    with pytest.raises(ValueError, match="n_components=3 exceeds the vocabulary size 2"):
        fixed.fit(documents)
    assert ledger.charges() == []
    small = BudgetLedger(tmp_path / "small.sqlite", epsilon=3.6, delta=1e-5)  # each alone fits, both: 3.70
    vi = DPVariationalLDA(2, epsilon=3.5, delta=1e-6, options=DPVIOptions(n_passes=1), ledger=small)
    both = make_private_pipeline(PrivateCountVectorizer(20, epsilon=2.0, delta=1e-6, ledger=small), vi)
    with pytest.raises(BudgetExceededError):
        both.fit(documents)
    assert small.charges() == []
    check_private_pipeline(both.set_params(dpvariationallda__epsilon=1.0), len(documents))  # can pay


def test_a_one_pass_iterable_is_refused_before_any_charge(tmp_path, documents):
    ledger = BudgetLedger(tmp_path / "l.sqlite", epsilon=10.0, delta=1e-5)
    with pytest.raises(TypeError, match="sequence"):
        make_private_pipeline(*_steps(ledger)).fit(iter(documents))
    assert ledger.charges() == []


def test_check_pipeline_budget_tries_every_outcome(tmp_path):
    """One step's charge at each size the vocabulary may leave: the largest composed decides."""
    ledger = BudgetLedger(tmp_path / "l.sqlite", epsilon=2.0, delta=1e-6)
    first = PrivateCountVectorizer(20, epsilon=1.0, delta=1e-7).planned_guarantee()
    small = PrivateSpectralLDA(2, epsilon=0.5, delta=1e-7).planned_guarantee(800, 20)
    large = PrivateSpectralLDA(2, epsilon=2.5, delta=1e-7).planned_guarantee(800, 20)
    check_pipeline_budget(ledger, [[first], [small]])
    assert ledger.would_spend(compose(first, large, delta=1e-6)) > 2.0
    with pytest.raises(BudgetExceededError, match="the vocabulary and the model of this run"):
        check_pipeline_budget(ledger, [[first], [small, large]])
    assert ledger.charges() == []
