"""BudgetLedger: opening rules, what a charge records, exact composition, refusals before any data is read."""

from __future__ import annotations

import copy
import datetime
import json
import math
import os
import pickle
import random
import shlex
import socket
import sys
from numbers import Integral
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from _helpers import event_guarantee, gaussian_guarantee
from dp_accounting import pld
from sklearn.base import BaseEstimator, clone
from sklearn.utils._param_validation import Interval

from dptensor import input_perturbation, private_power_method
from dptensor._files import json_text
from dptensor.models import TensorCompletion
from dptensor.models._base import PrivateEstimatorMixin
from dptensor.models.completion import CompletionOptions
from dptensor.privacy import (
    BudgetExceededError,
    BudgetLedger,
    EpsilonDeltaDpEvent,
    LedgerError,
    PrivacyGuarantee,
    gaussian_epsilon,
    insecure_test_noise,
    make_accountant,
    reduce_event,
)
from dptensor.privacy.audit import observable_differences, observe
from dptensor.privacy.ledger import composed_epsilon, decode_event, encode_event, migrate_to_server
from dptensor.tensor import LowRankTensor
from dptensor.tensor.operators import SymmetricTensor

DELTA = 1e-5


class Untouchable(SymmetricTensor):
    """A tensor whose entries must not be read: any contraction fails the test."""

    def __init__(self, dim: int) -> None:
        self._dim = dim

    @property
    def dim(self) -> int:
        return self._dim

    def _contract_pair(self, vectors):  # noqa: ANN001, ANN202
        raise AssertionError("the private data was read")

    def _contract_triple(self, vectors):  # noqa: ANN001, ANN202
        raise AssertionError("the private data was read")

    def to_dense(self):  # noqa: ANN202
        raise AssertionError("the private data was read")


# ----------------------------------------------------------------------------- opening
def test_create_open_and_fixed_parameters(ledger_at):
    where = ledger_at("clinic")
    on_file = isinstance(where, Path)
    missing = "no budget ledger.*dptensor budget create" if on_file else (
        "no budget ledger for the data set 'clinic'.*budget create")  # fmt: skip
    with pytest.raises(LedgerError, match=missing):
        BudgetLedger(where)
    if on_file:
        assert not where.exists()
    ledger = BudgetLedger(where, epsilon=2.0, delta=DELTA, dataset="clinic")
    if on_file:  # created atomically: no temporary left
        assert where.exists() and not [p for p in where.parent.iterdir() if p.suffix == ".tmp"]
    assert (ledger.epsilon, ledger.delta, ledger.dataset, ledger.relations) == (2.0, DELTA, "clinic", [])
    assert ledger.spent() == 0.0 and ledger.remaining() == 2.0 and ledger.charges() == []
    assert "clinic" in repr(ledger) and str(ledger.path) == str(where)
    # reopening: without the budget, or with the same one, is fine
    assert BudgetLedger(where).epsilon == 2.0
    assert BudgetLedger(where, epsilon=2.0, delta=DELTA, dataset="clinic").dataset == "clinic"
    assert BudgetLedger(where, epsilon=2.0, delta=DELTA).created == ledger.created
    # ... a different budget, data set or discretisation is not
    with pytest.raises(ValueError, match="budget epsilon=2.*fixed when it is created"):
        BudgetLedger(where, epsilon=3.0, delta=DELTA)
    other_name = "data set 'clinic', not 'census'" if on_file else (
        "names the data set 'clinic', dataset= names 'census'")  # fmt: skip
    with pytest.raises(ValueError, match=other_name):
        BudgetLedger(where, dataset="census")
    with pytest.raises(ValueError, match="value_discretization_interval"):
        BudgetLedger(where, value_discretization_interval=1e-3)
    # another ledger (file, or data set on the same server) is another budget
    other = BudgetLedger(ledger_at("census"), epsilon=1.0, delta=DELTA)
    other.charge(gaussian_guarantee(20.0))
    assert ledger.charges() == [] and len(other.charges()) == 1


def test_a_ledger_file_without_a_data_set_name(tmp_path):
    """(A file only: a ledger on a server is always one data set's, named in its URL.)"""
    unnamed = tmp_path / "unnamed.ledger"
    BudgetLedger(unnamed, epsilon=1.0, delta=DELTA)
    with pytest.raises(ValueError, match="no data set name, not 'clinic'"):
        BudgetLedger(unnamed, dataset="clinic")


BAD_PARAMETERS = [
    ({"epsilon": 1.0}, "both epsilon and delta"),
    ({"delta": 1e-5}, "both epsilon and delta"),
    ({"epsilon": 0.0, "delta": 1e-5}, "epsilon must be"),
    ({"epsilon": math.inf, "delta": 1e-5}, "epsilon must be"),
    ({"epsilon": 1.0, "delta": 1.0}, "delta must lie"),
    ({"epsilon": 1.0, "delta": 1e-5, "neighbouring": []}, "neighbouring must be"),
    ({"epsilon": 1.0, "delta": 1e-5, "value_discretization_interval": 0.0}, "value_discretization"),
    ({"epsilon": 1.0, "delta": 1e-5, "timeout": -1}, "timeout"),
]


def test_bad_parameters_are_refused_before_a_ledger_is_made(ledger_at):
    where = ledger_at("b.ledger")
    for kwargs, match in BAD_PARAMETERS:  # (one server database for them all: a loop, not parameters)
        with pytest.raises(ValueError, match=match):
            BudgetLedger(where, **kwargs)
        if isinstance(where, Path):
            assert not where.exists()
    with pytest.raises(LedgerError, match="no budget ledger"):
        BudgetLedger(where)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_concurrent_creation_gives_one_ledger(ledger_at):
    """Several processes creating the same ledger at once: one ledger (on a server: in a new database,
    without the schema yet), every one of them opens it."""
    import multiprocessing as mp

    where = ledger_at("d")
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(4), ctx.Queue()

    def create() -> None:
        barrier.wait()
        try:
            ledger = BudgetLedger(where, epsilon=1.0, delta=DELTA, dataset="d")
            queue.put(ledger.created)
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            queue.put(repr(exc))

    procs = [ctx.Process(target=create) for _ in range(4)]
    for p in procs:
        p.start()
    created = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(60)
    # the same ledger (same creation time) for everyone
    assert len(set(created)) == 1 and created[0].startswith("20"), created
    if isinstance(where, Path):
        assert sorted(p.name for p in where.parent.iterdir() if not p.name.startswith("d-")) == ["d"]


# ----------------------------------------------------------------------------- charges
def test_charge_records_the_release_and_its_caller(ledger_at):
    ledger = BudgetLedger(ledger_at("d"), epsilon=5.0, delta=DELTA, dataset="d")
    g = gaussian_guarantee(20.0, delta=1e-6)
    charge = ledger.charge(g, description="first release")
    (stored,) = ledger.charges()
    assert stored == charge
    assert (stored.id, stored.description, stored.neighbouring, stored.mechanism, stored.n_releases) == (
        1,
        "first release",
        "entry",
        "gaussian",
        1,
    )
    assert (stored.epsilon, stored.delta) == (g.epsilon, 1e-6)
    assert stored.event == g.to_dp_event() == dp_accounting.GaussianDpEvent(20.0)
    assert (
        stored.guarantee == json.loads(json_text(g.to_dict()))
        and stored.guarantee["noise_multiplier"] == 20.0
    )
    assert stored.host == socket.gethostname() and stored.pid == os.getpid() and stored.user
    assert "test_charge_records_the_release_and_its_caller" in stored.caller
    assert stored.argv == shlex.join(sys.argv)
    when = datetime.datetime.fromisoformat(stored.time)
    assert when.utcoffset() == datetime.timedelta(0)
    assert abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) < 60
    # the stored total is the composition at the ledger's delta, not the release's own epsilon
    assert stored.spent_after == pytest.approx(gaussian_epsilon(20.0, DELTA), abs=2e-4)
    assert ledger.relations == ["entry"]
    row = stored.to_row()
    assert decode_event(row["event"]) == stored.event and json.loads(row["guarantee"])["delta"] == 1e-6
    assert ledger.summary()["charges"] == [row]  # (from the stored texts)


def test_spent_is_exact_composition_not_a_sum(ledger_at):
    ledger = BudgetLedger(ledger_at("b.ledger"), epsilon=10.0, delta=DELTA)
    sigmas = [8.0, 12.0, 12.0, 30.0, 5.0]
    for s in sigmas:
        ledger.charge(gaussian_guarantee(s))
    # Gaussian releases compose into one Gaussian (GDP): the exact total, in closed form
    exact = gaussian_epsilon(1 / math.sqrt(sum(s**-2 for s in sigmas)), DELTA)
    assert exact <= ledger.spent() <= exact + 2e-3  # PLD is pessimistic, and tight
    assert ledger.spent() < 0.6 * sum(gaussian_epsilon(s, DELTA) for s in sigmas)
    assert [c.spent_after for c in ledger.charges()][-1] == pytest.approx(ledger.spent())
    assert ledger.remaining() == pytest.approx(10.0 - ledger.spent())


def test_ledger_total_matches_dp_accounting_directly(ledger_at):
    """The ledger's total equals dp-accounting's own PLD accountant fed the same events one by one."""
    events = [
        dp_accounting.GaussianDpEvent(6.0),
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(40.0), 25),
        dp_accounting.LaplaceDpEvent(4.0),
        dp_accounting.ComposedDpEvent(
            [dp_accounting.LaplaceDpEvent(4.0), dp_accounting.GaussianDpEvent(9.0)]
        ),
        dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(10.0), 3),
    ]
    ledger = BudgetLedger(ledger_at("b.ledger"), epsilon=50.0, delta=DELTA)
    for e in events:
        ledger.charge(event_guarantee(e))
    direct = pld.PLDAccountant(
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4
    )
    for e in events:
        direct.compose(e)
    reference = direct.get_epsilon(DELTA)
    assert ledger.spent() == pytest.approx(reference, rel=2e-3)
    # and the pure (epsilon, delta) events dptensor adds, against its accountant fed one by one
    mixed = [EpsilonDeltaDpEvent(0.3), dp_accounting.GaussianDpEvent(10.0), EpsilonDeltaDpEvent(0.3, 1e-7)]
    ledger2 = BudgetLedger(ledger_at("c.ledger"), epsilon=50.0, delta=DELTA)
    acc = make_accountant()
    for e in mixed:
        ledger2.charge(event_guarantee(e))
        acc.compose(e)
    assert ledger2.spent() == pytest.approx(acc.get_epsilon(DELTA), rel=2e-3)


def test_reduce_event_is_the_same_composition_in_any_order():
    rng = random.Random(0)
    atoms = [
        dp_accounting.GaussianDpEvent(7.0),
        dp_accounting.GaussianDpEvent(20.0),
        dp_accounting.LaplaceDpEvent(3.0),
        EpsilonDeltaDpEvent(0.2),
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(50.0), 10),
        dp_accounting.NoOpDpEvent(),
    ]
    reduced = reduce_event(dp_accounting.ComposedDpEvent(atoms))
    for _ in range(5):
        shuffled = atoms[:]
        rng.shuffle(shuffled)
        assert repr(reduce_event(dp_accounting.ComposedDpEvent(shuffled))) == repr(reduced)
    # one Gaussian with the GDP-combined multiplier, and the other atoms
    gauss, *rest = reduced.events
    assert gauss.noise_multiplier == pytest.approx((7.0**-2 + 20.0**-2 + 10 / 50.0**2) ** -0.5)
    assert {repr(e) for e in rest} == {
        repr(dp_accounting.LaplaceDpEvent(3.0)),
        repr(EpsilonDeltaDpEvent(0.2)),
    }
    sequential = make_accountant()
    for e in atoms:
        sequential.compose(e)
    fast = make_accountant()
    fast.compose(reduced)
    assert fast.get_epsilon(DELTA) == pytest.approx(sequential.get_epsilon(DELTA), rel=2e-3)
    assert isinstance(
        reduce_event(dp_accounting.ComposedDpEvent([atoms[0], dp_accounting.NonPrivateDpEvent()])),
        dp_accounting.NonPrivateDpEvent,
    )
    assert isinstance(reduce_event(dp_accounting.GaussianDpEvent(0.0)), dp_accounting.NonPrivateDpEvent)
    assert isinstance(reduce_event(dp_accounting.NoOpDpEvent()), dp_accounting.NoOpDpEvent)
    assert composed_epsilon([], DELTA, 1e-4) == 0.0


def _stored(where: Path | str) -> object:
    """Everything a ledger stores: the file's bytes, or every column of a server ledger's tables."""
    if isinstance(where, Path):
        return where.read_bytes()
    import psycopg

    with psycopg.connect(where.split("?")[0]) as conn:
        return [conn.execute(f"SELECT * FROM dptensor.{table} ORDER BY 1, 2").fetchall()
                for table in ("ledgers", "charges", "budget_changes")]  # fmt: skip


def test_refusal_names_the_numbers_and_changes_nothing(ledger_at):
    where = ledger_at("clinic")
    ledger = BudgetLedger(where, epsilon=1.0, delta=DELTA, dataset="clinic")
    ledger.charge(gaussian_guarantee(6.0))
    before = _stored(where), ledger.charges()
    big = gaussian_guarantee(4.0)
    assert ledger.would_spend(big) > 1.0
    with pytest.raises(BudgetExceededError) as info:
        ledger.charge(big, description="too much")
    exc = info.value
    assert isinstance(exc, ValueError)
    assert exc.spent == pytest.approx(ledger.spent()) and exc.left == pytest.approx(1.0 - exc.spent)
    assert exc.requested == big.epsilon and exc.total == pytest.approx(ledger.would_spend(big))
    assert exc.budget_epsilon == 1.0 and exc.budget_delta == DELTA and exc.path == str(ledger.path)
    text = str(exc)
    assert "\n" not in text and "'clinic'" in text and "nothing was computed" in text
    assert f"{exc.spent:.6g}" in text and f"{exc.total:.6g}" in text
    assert ledger.charges() == before[1] and _stored(where) == before[0]
    # a release that fits still can be charged after a refusal
    small = gaussian_guarantee(60.0)
    assert ledger.would_spend(small) <= 1.0
    ledger.charge(small)
    assert len(ledger.charges()) == 2


def test_a_guarantee_that_does_not_hold_is_refused(ledger_at):
    ledger = BudgetLedger(ledger_at("b.ledger"), epsilon=100.0, delta=DELTA)
    voided = event_guarantee(None, holds=False, claim="paper", reason="the proof has a gap")
    with pytest.raises(BudgetExceededError, match="not private.*the proof has a gap.*no budget can pay"):
        ledger.charge(voided)
    assert ledger.would_spend(voided) == math.inf
    # reproducible test noise voids a guarantee: charging it is refused, before any data is read
    with pytest.warns(Warning), pytest.raises(BudgetExceededError, match="not private"):
        private_power_method(
            Untouchable(6), 1, epsilon=1.0, delta=1e-6, noise=insecure_test_noise(0), ledger=ledger
        )
    with pytest.raises(TypeError, match="PrivacyGuarantee"):
        ledger.charge("epsilon=1")
    assert ledger.charges() == []


def test_one_relation_per_ledger_unless_declared(ledger_at):
    ledger = BudgetLedger(ledger_at("a.ledger"), epsilon=10.0, delta=DELTA)
    ledger.charge(gaussian_guarantee(10.0, neighbouring="record"))
    assert ledger.relations == ["record"]
    with pytest.raises(ValueError, match="accepts releases under 'record'.*protects the 'entry' relation"):
        ledger.charge(gaussian_guarantee(10.0, neighbouring="entry"))
    assert len(ledger.charges()) == 1
    with pytest.raises(ValueError, match="accepts releases under 'record', not 'entry'"):
        BudgetLedger(ledger_at("a.ledger"), neighbouring="entry")
    # fixed up front, or several relations declared by the creator
    fixed = BudgetLedger(ledger_at("b.ledger"), epsilon=10.0, delta=DELTA, neighbouring="entry-value")
    with pytest.raises(ValueError, match="accepts releases under 'entry-value'"):
        fixed.charge(gaussian_guarantee(10.0, neighbouring="record"))
    both = BudgetLedger(
        ledger_at("c.ledger"), epsilon=10.0, delta=DELTA, neighbouring=["record", "entry-value"]
    )
    both.charge(gaussian_guarantee(10.0, neighbouring="record"))
    both.charge(gaussian_guarantee(10.0, neighbouring="entry-value"))
    assert both.relations == ["entry-value", "record"] and len(both.charges()) == 2
    # a ledger whose relation is not fixed yet can be fixed when it is opened
    BudgetLedger(ledger_at("d.ledger"), epsilon=10.0, delta=DELTA)
    assert BudgetLedger(ledger_at("d.ledger"), neighbouring="entry").relations == ["entry"]


def test_event_codec_round_trips_and_refuses_foreign_classes():
    events = [
        dp_accounting.GaussianDpEvent(1.5),
        dp_accounting.LaplaceDpEvent(2.0),
        EpsilonDeltaDpEvent(0.5, 1e-7),
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(np.float64(3.0)), 7),
        dp_accounting.ComposedDpEvent(
            [
                dp_accounting.LaplaceDpEvent(1.0),
                dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)),
            ]
        ),
    ]
    for event in events:
        text = encode_event(event)
        assert decode_event(text) == event and encode_event(decode_event(text)) == text
    evil = json.dumps({"module_name": "os", "class_name": "system", "command": "echo pwned"})
    with pytest.raises(ValueError, match="not a dp-accounting or dptensor event"):
        decode_event(evil)
    with pytest.raises(ValueError, match="not a DpEvent class"):
        decode_event(json.dumps({"module_name": "dp_accounting.dp_event", "class_name": "DpEventBuilder"}))
    for bad in (
        "not json",
        "[1, 2]",
        '{"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent"}',
    ):
        with pytest.raises(ValueError, match="not a stored dp-accounting event"):
            decode_event(bad)
    with pytest.raises(ValueError, match="finite"):
        encode_event(dp_accounting.GaussianDpEvent(math.inf))


def test_deleted_or_replaced_file_is_an_error_not_a_new_budget(tmp_path):
    path = tmp_path / "b.ledger"
    ledger = BudgetLedger(path, epsilon=5.0, delta=DELTA)
    ledger.charge(gaussian_guarantee(30.0))
    path.unlink()  # while this process still has it open
    with pytest.raises(LedgerError, match="deleted after it was opened"):
        ledger.charge(gaussian_guarantee(30.0))
    # the main file alone holds every charge (rollback journal): deleting it leaves no log behind,
    # but a journal a killed charge left must never be rolled back into a new ledger
    Path(f"{path}-journal").write_bytes(b"\0" * 512)
    with pytest.raises(LedgerError, match="a ledger was deleted while a process still had it open"):
        BudgetLedger(path, epsilon=5.0, delta=DELTA)
    ledger.close()
    for suffix in ("-journal", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    other = tmp_path / "other.ledger"
    with BudgetLedger(other, epsilon=1.0, delta=DELTA):
        pass
    os.replace(other, path)  # a different ledger under the old name
    with pytest.raises(LedgerError, match="replaced by another file after it was opened"):
        ledger.spent()
    assert BudgetLedger(path).epsilon == 1.0


def test_ledger_pickles_and_clones_to_the_same_file(ledger_at):
    ledger = BudgetLedger(ledger_at("b.ledger"), epsilon=5.0, delta=DELTA)
    for other in (pickle.loads(pickle.dumps(ledger)), copy.deepcopy(ledger)):
        other.charge(gaussian_guarantee(30.0))
    assert len(ledger.charges()) == 2


# ----------------------------------------------------------------------------- entry points
def _full_ledger(ledger_at, name: str = "full.ledger") -> BudgetLedger:  # noqa: ANN001
    ledger = BudgetLedger(ledger_at(name), epsilon=0.5, delta=DELTA)
    ledger.charge(gaussian_guarantee(9.0, neighbouring="entry"))
    return ledger


def test_power_method_and_input_perturbation_refused_before_reading_data(ledger_at):
    ledger = _full_ledger(ledger_at)
    for fit in (private_power_method, input_perturbation):
        with pytest.raises(BudgetExceededError):
            fit(Untouchable(6), 1, epsilon=0.5, delta=1e-6, ledger=ledger)
    # the sentinel really fails when read: without the ledger the same calls reach the data
    for fit in (private_power_method, input_perturbation):
        with pytest.raises(AssertionError, match="private data was read"):
            fit(Untouchable(6), 1, epsilon=0.5, delta=1e-6)
    assert len(ledger.charges()) == 1
    # and a charge that fits is recorded once per call, before the result exists
    roomy = BudgetLedger(ledger_at("roomy.ledger"), epsilon=3.0, delta=DELTA)
    T = LowRankTensor(np.array([500.0]), np.eye(6)[:, :1])
    res = private_power_method(T, 1, epsilon=0.5, delta=1e-6, n_restarts=2, n_iter=2, ledger=roomy)
    inp = input_perturbation(T, 1, epsilon=0.5, delta=1e-6, ledger=roomy)
    charges = roomy.charges()
    assert [c.event for c in charges] == [res.guarantee.to_dp_event(), inp.guarantee.to_dp_event()]
    assert "private_power_method" in charges[0].description and "input_perturbation" in charges[1].description


def test_completion_refused_leaves_the_model_unfitted(ledger_at):
    ledger = BudgetLedger(ledger_at("b.ledger"), epsilon=0.5, delta=DELTA)
    ledger.charge(gaussian_guarantee(9.0, neighbouring="entry-value"))
    rng = np.random.default_rng(0)
    indices = np.stack([rng.integers(0, 5, 60) for _ in range(3)], axis=1)
    values = rng.standard_normal(60)
    model = TensorCompletion(2, privacy="gradient_dpsgd", neighbouring="entry-value", epsilon=0.5, delta=1e-6,
                             ledger=ledger, options=CompletionOptions(n_epochs=3))
    params = dict(vars(model))
    with pytest.raises(BudgetExceededError):
        model.fit(indices, values, (5, 5, 5))
    assert vars(model) == params  # no fitted attribute at all
    assert len(ledger.charges()) == 1
    with pytest.raises(ValueError, match="ledger given without privacy"):
        TensorCompletion(2, ledger=ledger).fit(indices, values, (5, 5, 5))
    roomy = BudgetLedger(ledger_at("roomy.ledger"), epsilon=5.0, delta=DELTA)
    model = TensorCompletion(2, privacy="gradient_dpsgd", neighbouring="entry-value", epsilon=0.5, delta=1e-6,
                             ledger=roomy, options=CompletionOptions(n_epochs=3))
    model.fit(indices, values, (5, 5, 5))
    assert roomy.charges()[0].event == model.guarantee_.to_dp_event()


class _Untouchable:
    """Data whose every access fails."""

    def __getattr__(self, name):  # noqa: ANN001, ANN204
        raise AssertionError("the private data was read")


class _MeanEstimator(PrivateEstimatorMixin, BaseEstimator):
    """The PrivateEstimatorMixin pattern: a Gaussian mean of values in [0, 1]."""

    _parameter_constraints = {
        "n_values": [Interval(Integral, 1, None, closed="left")],
        **PrivateEstimatorMixin._privacy_parameter_constraints,
    }

    def __init__(self, n_values=10, *, epsilon=None, delta=None, noise=None, ledger=None):  # noqa: ANN001
        self.n_values, self.epsilon, self.delta, self.noise, self.ledger = (
            n_values,
            epsilon,
            delta,
            noise,
            ledger,
        )

    def fit(self, X, y=None):  # noqa: ANN001, ANN201
        self._validate_params()
        self._check_privacy_parameters()
        sigma = 1.0 / self.n_values * 1e3
        guarantee = PrivacyGuarantee(
            epsilon=gaussian_epsilon(1e3, self.delta),
            delta=self.delta,
            neighbouring="record",
            accountant="exact",
            n_releases=1,
            mechanism="gaussian",
            noise_multiplier=1e3,
            epsilon_exact=gaussian_epsilon(1e3, self.delta),
            dp_event=dp_accounting.GaussianDpEvent(1e3),
        )
        source = self._begin_release(guarantee, "mean")
        self.mean_ = source.add_gaussian(np.asarray(X.values).mean(), sigma)
        return self


def test_private_estimator_mixin_charges_before_reading(ledger_at):
    ledger = BudgetLedger(ledger_at("b.ledger"), epsilon=0.05, delta=DELTA)
    est = _MeanEstimator(10, epsilon=1.0, delta=DELTA, ledger=ledger)
    ledger.charge(event_guarantee(EpsilonDeltaDpEvent(0.049), epsilon=0.049, neighbouring="record"))
    with pytest.raises(BudgetExceededError):
        est.fit(_Untouchable())
    assert not hasattr(est, "guarantee_") and not hasattr(est, "mean_")
    # clone keeps the ledger (the same file): the budget is shared, not copied
    assert clone(est).ledger.path == ledger.path
    with pytest.raises(ValueError, match="ledger given without epsilon"):
        _MeanEstimator(10, ledger=ledger).fit(_Untouchable())


def _the_same_new_ledger(where: Path | str, template: Path) -> None:
    """Make ``where`` the same new, empty ledger again (the same id and creation time): the bytes of
    the file ``template``; on a server, the ``dptensor`` schema dropped (by the test cluster's superuser)
    and a copy of ``template`` migrated into it (:func:`migrate_to_server` keeps the file's id)."""
    if isinstance(where, Path):
        where.write_bytes(template.read_bytes())
        return
    import psycopg

    with psycopg.connect(where.split("?")[0], autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS dptensor CASCADE")
    moved = template.with_name("moved.ledger")
    moved.write_bytes(template.read_bytes())
    migrate_to_server(moved, where).close()


def test_charges_and_refusals_do_not_depend_on_the_data(ledger_at, tmp_path, monkeypatch):
    """Neighbouring inputs (one observed value changed): identical charges, identical refusals."""
    rng = np.random.default_rng(1)
    indices = np.stack([rng.integers(0, 4, 40) for _ in range(3)], axis=1)
    values = rng.uniform(-1, 1, 40)
    neighbour = values.copy()
    neighbour[7] = 1e6
    where = ledger_at("b.ledger")  # the same place for both runs: the messages name it
    template = tmp_path / "template" / "b.ledger"
    with BudgetLedger(template, epsilon=0.85, delta=DELTA):  # room for two runs: 0.76 composed, three: 0.95
        pass
    rows = []
    for data in (values, neighbour):
        # each run as on a machine that has not seen the ledger (else the restored copy is refused)
        monkeypatch.setenv("DPTENSOR_STATE_DIR", str(tmp_path / f"state-{len(rows)}"))
        _the_same_new_ledger(where, template)  # both runs start from the same ledger (same id and time)
        ledger = BudgetLedger(where)
        obs = []
        for _ in range(3):  # the third one exceeds the budget
            model = TensorCompletion(2, privacy="gradient_dpsgd", neighbouring="entry-value", epsilon=0.6,
                delta=1e-6, ledger=ledger, options=CompletionOptions(n_epochs=2))
            obs.append(observe(model.fit, indices, data, (4, 4, 4)))
        assert obs[-1].exception is not None and obs[-1].exception[0] == "BudgetExceededError"
        rows.append(([{k: v for k, v in c.to_row().items() if k != "time"} for c in ledger.charges()], obs))
        ledger.close()
    assert len(rows[0][0]) == 2 and rows[0][0] == rows[1][0]
    for first, second in zip(rows[0][1], rows[1][1], strict=True):
        assert observable_differences(first, second) == []
