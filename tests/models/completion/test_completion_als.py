"""ALS for tensor completion: exact recovery, agreement with SGD and with dense algebra, offsets, defaults."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sklearn.base import clone

from dptensor.datasets.entries import make_low_rank_completion, train_test_split_entries
from dptensor.models import TensorCompletion
from dptensor.models._options import flat_params
from dptensor.models.completion import CompletionOptions, plan_completion
from dptensor.models.completion._als import (
    AlsSettings,
    CompletionParameters,
    EntryStatistics,
    _core_normal_equations_direct,
    anchor_rows,
    core_normal_equations,
    fit_als,
    initial_parameters,
    mode_ridge,
    objective,
    rebalance,
    ridge_solve,
)
from dptensor.models.completion._biscale import fit_biscaling
from dptensor.models.completion._dense import DenseStatistics
from dptensor.models.completion._sgd import sgd_epochs
from dptensor.models.completion.estimator import rmse


def _exact(model: str, missing: float = 0.5, seed: int = 0, shape=(15, 14, 13), rank: int = 3):
    prob = make_low_rank_completion(
        shape, rank, model=model, snr=1e12, missing_ratio=missing, min_max=False, random_state=seed
    )
    train, test = train_test_split_entries(prob.observed, 0.2, random_state=seed + 1)
    return prob, train, test


@pytest.mark.parametrize("model", ["cp", "tucker"])
@pytest.mark.parametrize("offsets", ["none", "biases"])
def test_als_reaches_the_noiseless_optimum(model, offsets):
    """Exactly low-rank data, no penalty: the optimum is zero error, on held-out cells too."""
    prob, train, test = _exact(model)
    fit = TensorCompletion(3, model=model, offsets=offsets, random_state=0,
        options=CompletionOptions(reg=0.0, reg_bias=0.0, context_modes=(), max_iter=300,
                                  tol=1e-14)).fit(train.indices, train.values, train.shape)
    assert fit.solver_ == "als"
    assert fit.history_[-1] < 1e-6  # training RMSE of a unit-RMS tensor
    assert rmse(prob.truth_at(test.indices), fit.predict(test.indices)) < 1e-5
    assert np.max(np.abs(fit.to_dense() - prob.truth_tensor)) < 1e-4


def test_als_objective_never_increases():
    prob, train, _ = _exact("tucker", missing=0.6)
    noisy = train.values + 0.3 * np.random.default_rng(0).standard_normal(len(train))
    params = initial_parameters(
        "tucker",
        train.shape,
        (3, 3, 3),
        "biases",
        (2,),
        0.8,
        np.random.default_rng(1),
        mean=float(noisy.mean()),
    )
    result = fit_als(
        params, train.indices, noisy, train.shape, AlsSettings(0.5, 0.5, 0.5, (2,), 40, 0.0), fit_mean=True
    )
    obj = np.array(result.objective)
    assert np.all(np.diff(obj) <= 1e-10 * obj[:-1])
    assert obj[-1] < 0.5 * obj[0]


@pytest.mark.parametrize("model", ["cp", "tucker"])
def test_dense_and_entry_statistics_agree(model):
    """The dense-mask normal equations are the per-entry ones (Gram, right-hand sides, core, residuals)."""
    rng = np.random.default_rng(3)
    shape = (6, 5, 4)
    indices = np.argwhere(rng.random(shape) < 0.6)
    values = rng.standard_normal(len(indices))
    params = initial_parameters(
        model, shape, (2, 3, 2) if model == "tucker" else (3, 3, 3), "biases", (2,), 0.7, rng, mean=0.3
    )
    params.biases = [rng.standard_normal(s) for s in shape]
    dense, entries = DenseStatistics(indices, values, shape), EntryStatistics(indices, values, shape)
    for mode in range(3):
        for got, want in zip(dense.mode_system(params, mode), entries.mode_system(params, mode), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(
        np.sort(dense.residuals(params)), np.sort(entries.residuals(params)), atol=1e-12
    )
    if model == "tucker":
        for got, want in zip(dense.core_system(params), entries.core_system(params), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
        v = rng.standard_normal(params.core.shape)
        np.testing.assert_allclose(dense.core_apply(params, v), entries.core_apply(params, v), atol=1e-10)
        np.testing.assert_allclose(dense.core_rhs(params), entries.core_rhs(params), atol=1e-10)


def test_als_and_sgd_agree_on_the_convex_subproblem():
    """A and B fixed: C's ridge problem is convex; one ALS step and SGD on C alone reach the same C."""
    rng = np.random.default_rng(4)
    shape = (8, 7, 5)
    indices = np.argwhere(rng.random(shape) < 0.7)
    values = rng.standard_normal(len(indices))
    reg = 0.3
    model = TensorCompletion(2, solver="sgd", random_state=0,
        options=CompletionOptions(reg=reg, n_epochs=1, batch_size=1, learning_rate=0.01))
    plan = plan_completion(flat_params(model), shape, len(values))
    factors = [0.8 + 0.3 * rng.standard_normal((s, 2)) for s in shape]
    # ALS: the exact minimiser of sum (x - <a_i * b_j, c_k>)^2 + reg ||C||^2 over C
    params = CompletionParameters("cp", [f.copy() for f in factors], None)
    gram, rhs = EntryStatistics(indices, values, shape).mode_system(params, 2)
    ridge, prior = mode_ridge(params, 2, AlsSettings(reg, 0.0, 0.0, (), 1, 0.0), anchor_rows(params))
    exact = ridge_solve(gram, rhs, ridge, prior)
    # the paper's SGD on C alone: per-entry steps first, then its full-batch (Jacobi) form to converge
    sgd = [f.copy() for f in factors]
    plan = replace(plan, learning_rate=0.01, n_epochs=20)
    sgd_epochs(plan, indices, values, sgd, None, np.random.default_rng(1), mode=None, frozen=(0, 1))
    plan = replace(plan, batch_size=len(values), n_epochs=400, learning_rate=0.05)
    sgd_epochs(plan, indices, values, sgd, None, np.random.default_rng(2), mode=None, frozen=(0, 1))
    np.testing.assert_array_equal(sgd[0], factors[0])  # frozen
    np.testing.assert_allclose(sgd[2], exact, atol=1e-8)


def test_offsets_alone_recover_additive_biases():
    rng = np.random.default_rng(5)
    shape = (30, 25, 6)
    truth = [rng.normal(0, 0.5, s) for s in shape]
    indices = np.argwhere(rng.random(shape) < 0.5)
    values = (
        3.0 + sum(t[indices[:, m]] for m, t in enumerate(truth)) + 0.05 * rng.standard_normal(len(indices))
    )
    fit = TensorCompletion(None, options=CompletionOptions(reg=0.0, reg_bias=1e-6, tol=1e-12,
                                                           max_iter=500)).fit(indices, values, shape)
    assert fit.factors_ is None and fit.offsets_ == "biases"
    # biases are identified up to constants shifted into the mean: compare centred
    for got, want in zip(fit.biases_, truth, strict=True):
        np.testing.assert_allclose(got - got.mean(), want - want.mean(), atol=0.03)
    cells = np.argwhere(np.ones(shape, bool))
    full = 3.0 + sum(t[cells[:, m]] for m, t in enumerate(truth))
    assert rmse(full, fit.predict(cells)) < 0.03
    mean_only = TensorCompletion(None, offsets="mean").fit(indices, values, shape)
    assert mean_only.biases_ is None and mean_only.mean_ == pytest.approx(values.mean())
    # the paper's SGD learns the same offsets when asked to
    sgd = TensorCompletion(1, solver="sgd", offsets="biases", random_state=0,
                           options=CompletionOptions(learning_rate=0.05, n_epochs=60)).fit(indices, values,
                                                                                           shape)
    plain = TensorCompletion(1, solver="sgd", random_state=0,
        options=CompletionOptions(learning_rate=0.05, n_epochs=60)).fit(
        indices, values, shape)
    assert rmse(full, sgd.predict(cells)) < 0.1 < rmse(full, plain.predict(cells))


def test_biscaling_standardises_rows_and_columns_of_each_slice():
    rng = np.random.default_rng(6)
    shape = (12, 10, 3)
    indices = np.argwhere(rng.random(shape) < 0.8)
    values = rng.normal(3, 1, len(indices)) * (1 + indices[:, 0] / 6) + indices[:, 1]
    scaling = fit_biscaling(indices, values, shape)
    z = scaling.transform(indices, values)
    np.testing.assert_allclose(scaling.inverse(indices, z), values, atol=1e-12)
    for k in range(3):
        sel = indices[:, 2] == k
        for axis in (0, 1):
            keys = indices[sel, axis]
            counts = np.bincount(keys)
            ok = counts >= 2
            means = np.bincount(keys, z[sel])[ok] / counts[ok]
            sds = np.sqrt(np.bincount(keys, z[sel] ** 2)[ok] / counts[ok] - means**2)
            assert np.max(np.abs(means)) < 0.02 and np.all(np.abs(sds - 1) < 0.05)
    fit = TensorCompletion(2, offsets="biscale", solver="sgd",
                           options=CompletionOptions(n_epochs=5)).fit(indices, values, shape)
    assert fit.biscaling_ is not None and np.all(np.isfinite(fit.predict(indices)))


def test_reg_auto_uses_a_public_validation_split_and_prefers_less_penalty_on_clean_data():
    prob = make_low_rank_completion(
        (16, 15, 14), 2, snr=100.0, missing_ratio=0.5, min_max=False, random_state=2
    )
    o = prob.observed
    one = TensorCompletion(2, random_state=3).fit(o.indices, o.values, o.shape)
    two = TensorCompletion(2, random_state=3).fit(o.indices, o.values, o.shape)
    assert one.reg_path_ == two.reg_path_ and one.reg_ == two.reg_  # same public split, same choice
    scores = [step["validation_rmse"] for step in one.reg_path_]
    _only_stronger_penalties_score_better(one)
    scale = float(np.std(o.values)) ** (4 / 3)
    assert one.reg_ <= 0.3 * scale and min(scores) < 0.2  # clean data: little penalty, good fit
    assert len(scores) >= 3
    early = TensorCompletion(2, random_state=3, options=CompletionOptions(reg=0.1, early_stopping=True)).fit(
        o.indices, o.values, o.shape
    )
    assert early.validation_rmse_ and early.n_iter_ <= 100


def test_estimator_conventions_score_and_clamped_predictions():
    rng = np.random.default_rng(7)
    shape = (10, 9, 3)
    indices = np.argwhere(rng.random(shape) < 0.6)
    values = np.clip(np.round(3 + rng.normal(0, 1.5, len(indices))), 1, 5)
    model = TensorCompletion(2, value_range=(1, 5), random_state=0)
    fitted = model.fit(indices, values, shape)
    assert clone(model).get_params() == model.get_params()
    assert fitted.score(indices, values) == pytest.approx(-rmse(values, fitted.predict(indices)))
    # huge factors: unclamped predictions would leave the range
    fitted.factors_ = [10 * f for f in fitted.factors_]
    cells = np.argwhere(np.ones(shape, bool))
    pred = fitted.predict(cells)
    assert pred.min() >= 1 and pred.max() <= 5 and np.ptp(pred) > 0
    assert TensorCompletion(2).fit(indices, values, shape).prediction_range_ is None


def test_parameter_errors():
    idx, vals, shape = np.array([[0, 0, 0], [1, 1, 1]]), np.array([1.0, 2.0]), (2, 2, 2)
    with pytest.raises(ValueError, match="epsilon given without privacy"):
        TensorCompletion(2, epsilon=1.0).fit(idx, vals, shape)
    with pytest.raises(ValueError, match="neighbouring is required"):
        TensorCompletion(1, privacy="als", epsilon=1.0, value_range=(0, 3)).fit(idx, vals, shape)
    with pytest.raises(ValueError, match="for neighbouring='user' use privacy='als'"):
        TensorCompletion(1, privacy="gradient_dpsgd", neighbouring="user", epsilon=1.0).fit(idx, vals, shape)
    with pytest.raises(ValueError, match="value_range is required"):
        TensorCompletion(1, privacy="als", neighbouring="user", epsilon=1.0).fit(idx, vals, shape)
    with pytest.raises(ValueError, match="void"):
        TensorCompletion(
            1, privacy="als", neighbouring="entry-value", epsilon=1.0, value_range=(0, 3), offsets="biscale"
        ).fit(idx, vals, shape)
    with pytest.raises(ValueError, match="reg='auto'"):
        TensorCompletion(1, privacy="als", neighbouring="entry-value", epsilon=1.0, value_range=(0, 3),
            options=CompletionOptions(reg="auto")).fit(idx, vals, shape)
    with pytest.raises(ValueError, match="SGD algorithm"):
        TensorCompletion(
            1, solver="als", privacy="gradient_dpsgd", neighbouring="entry-value", epsilon=1.0
        ).fit(idx, vals, shape)
    with pytest.raises(ValueError, match="needs offsets"):
        TensorCompletion(None, offsets="none").fit(idx, vals, shape)
    with pytest.raises(ValueError, match="neighbouring"):
        TensorCompletion(1, privacy="als", neighbouring="record", epsilon=1.0, value_range=(0, 3)).fit(
            idx, vals, shape
        )


@pytest.mark.parametrize(
    ("shape", "ranks", "n"),
    [((30, 7, 50), (3, 4, 2), 2000), ((5, 40, 60), (2, 3, 4), 3000), ((50, 50, 4), (4, 4, 4), 5000)],
)
@pytest.mark.parametrize("weighted", [False, True])
def test_core_normal_equations_grouped_equal_the_direct_products(shape, ranks, n, weighted):
    """The Kronecker-grouped Gram (grouping by each of the three modes in turn) is the direct one."""
    rng = np.random.default_rng(sum(shape))
    factors = [rng.standard_normal((d, r)) for d, r in zip(shape, ranks, strict=True)]
    indices = np.stack([rng.integers(0, d, n) for d in shape], axis=1)
    target = rng.standard_normal(n)
    weights = rng.random(n) if weighted else None
    gram, rhs = core_normal_equations(factors, indices, target, weights)
    direct_gram, direct_rhs = _core_normal_equations_direct(factors, indices, target, weights)
    np.testing.assert_allclose(gram, direct_gram, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(rhs, direct_rhs, rtol=1e-12, atol=1e-10)


def test_offsets_at_matches_a_loop_over_entries_with_and_without_a_skipped_mode():
    from dptensor.models.completion._kernels import offsets_at

    rng = np.random.default_rng(0)
    shape = (4, 5, 3)
    indices = np.argwhere(rng.random(shape) < 0.6)
    biases = [rng.standard_normal(n) for n in shape]
    for skip in (None, 0, 1, 2):
        expected = [0.7 + sum(biases[m][e[m]] for m in range(3) if m != skip) for e in indices]
        np.testing.assert_allclose(offsets_at(0.7, biases, indices, skip_mode=skip), expected)
    np.testing.assert_array_equal(offsets_at(0.7, None, indices), np.full(len(indices), 0.7))


@pytest.mark.parametrize(("seed", "snr"), [(0, 1.0), (1, 1.0), (2, 0.5), (3, 2.0)])
def test_reg_auto_chooses_as_well_as_the_best_penalty_of_the_grid(seed, snr):
    """Noisy low-rank data: the walk's penalty predicts the truth about as well as the best of the grid.

    Every penalty of :data:`REG_PATH` is fitted on all entries and scored against the noiseless
    tensor (which the search never sees); penalties of 30 or more shrink every factor to zero.
    """
    from dptensor.models.completion._als import REG_PATH

    prob = make_low_rank_completion(
        (80, 60, 10), 3, snr=snr, missing_ratio=0.7, min_max=False, random_state=seed
    )
    o = prob.observed
    cells = np.argwhere(np.ones(o.shape, dtype=bool))
    truth = prob.truth_at(cells)
    scale = float(np.std(o.values)) ** (4 / 3)
    fits = [TensorCompletion(3, random_state=0, options=CompletionOptions(reg=r * scale)) for r in REG_PATH]
    errors = [rmse(truth, fit.fit(o.indices, o.values, o.shape).predict(cells)) for fit in fits]
    auto = TensorCompletion(3, random_state=0).fit(o.indices, o.values, o.shape)
    assert rmse(truth, auto.predict(cells)) <= 1.02 * min(errors)
    assert auto.reg_ <= 10 * scale * (1 + 1e-9)
    def positions(converged: bool) -> list[int]:
        return [int(np.argmin(np.abs(np.array(REG_PATH) * scale - step["reg"])))
                for step in auto.reg_path_ if step["converged"] == converged]

    # the walk: consecutive grid values; the chosen penalty converged, with both neighbours
    # converged too (or a grid end)
    tried, settled = positions(False), positions(True)
    assert tried == list(range(tried[0], tried[-1] + 1))
    chosen = int(np.argmin(np.abs(np.array(REG_PATH) * scale - auto.reg_)))
    assert chosen in settled
    assert (chosen - 1 in settled or chosen == 0) and (chosen + 1 in settled or chosen == len(REG_PATH) - 1)
    _only_stronger_penalties_score_better(auto)


def _only_stronger_penalties_score_better(fit: TensorCompletion) -> None:
    """``reg_`` is a converged penalty, and any converged one that scores better is stronger (a
    stronger penalty replaces a weaker one only when significantly better)."""
    final = [step for step in fit.reg_path_ if step["converged"]]
    own = next(step["validation_rmse"] for step in final if step["reg"] == fit.reg_)
    assert all(step["reg"] > fit.reg_ for step in final if step["validation_rmse"] < own)


def test_reg_path_scores_a_warm_started_penalty_where_it_stops_not_at_its_first_sweep(monkeypatch):
    """A warm start's first sweep is still its neighbour's solution: the walk ranks its last sweep."""
    import contextlib

    import dptensor.models.completion._als as als

    scale = 2.0
    own = {5: 0.93, 6: 0.99}  # each penalty's own (converged) validation RMSE; the rest 1.0

    def fake_fit(start, stats, settings, *, fit_mean, validation, progress, early_stop=True):
        on_grid = np.isclose(np.asarray(als.REG_PATH) * scale, settings.reg)
        position = int(np.argmax(on_grid)) if on_grid.any() else -1  # -1: between grid values
        warm = settings.n_iter_no_change == als.PATH_NO_CHANGE
        scores = [own.get(position, 1.0)]
        if warm and position == 6:  # its first sweep is near penalty 5's fit, and scores better than all
            scores = [0.90, own[6]]
        return als.AlsResult(params=Scored(scores[-1], validation[1]), n_iter=len(scores),
                             validation_rmse=scores)

    class Scored:  # a fit whose validation error is its last score
        def __init__(self, score: float, truth: np.ndarray) -> None:
            self.prediction = truth + score

        def copy(self) -> Scored:
            return self

        def predict(self, indices: np.ndarray) -> np.ndarray:
            return self.prediction

    chosen = {}

    def fake_final(start, indices, values, shape, step, *, fit_mean, progress=None):
        chosen["reg"] = step.reg
        return als.AlsResult(params=start, n_iter=1)

    monkeypatch.setattr(als, "_fit_als", fake_fit)
    monkeypatch.setattr(als, "fit_als", fake_final)
    monkeypatch.setattr(als, "entry_statistics", lambda *a, **k: None)
    monkeypatch.setattr(als, "_blas_threads", lambda stats: contextlib.nullcontext())
    values = np.array([0.0, 2.0 * scale ** 0.75])  # std(values) ** (4/3) == scale
    settings = als.AlsSettings(reg=1.0, reg_bias=1.0, reg_core=1.0, context_modes=(), max_iter=5, tol=1e-4,
                               n_iter_no_change=3)
    class Start:  # the walk only copies its start and hands it on
        def copy(self) -> Start:
            return self

    result = als.fit_als_path(Start(), np.zeros((2, 3), dtype=np.int64), values, (1, 1, 1), settings,
                              fit_mean=True, validation_mask=np.array([False, True]), tie_bias=True,
                              tie_core=True)
    assert result.reg == pytest.approx(als.REG_PATH[5] * scale) == chosen["reg"]
    assert {round(p["reg"] / scale, 6) for p in result.path} >= {als.REG_PATH[5], als.REG_PATH[6]}


@pytest.mark.parametrize("model", ["cp", "tucker"])
def test_rebalance_keeps_predictions_and_minimises_the_penalty(model):
    """Rescaling columns (and Tucker's core slices) changes no prediction; the balanced scales are
    the penalty's minimum: no random rescaling with the same predictions has a smaller penalty."""
    rng = np.random.default_rng(0)
    shape, ranks = (7, 6, 5), (3, 3, 3) if model == "tucker" else (3, 3, 3)
    params = initial_parameters(model, shape, ranks, "biases", (2,), 1.0, rng)
    # unbalanced: users' columns large, items' small (context mode 2 is anchored: left alone)
    params.factors[0] *= np.array([5.0, 0.2, 3.0])
    params.factors[1] *= np.array([0.1, 4.0, 1.0])
    settings = AlsSettings(0.7, 0.7, 0.4, (2,), 10, 1e-4)
    anchors = anchor_rows(params)
    cells = np.argwhere(np.ones(shape, dtype=bool))
    before = params.predict(cells)
    context = params.factors[2].copy()
    zero = np.zeros(len(cells))

    def penalty(p):
        return objective(p, zero, settings, anchors)

    balanced = params.copy()
    rebalance(balanced, settings, anchors)
    np.testing.assert_allclose(balanced.predict(cells), before, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(balanced.factors[2], context)
    assert penalty(balanced) < 0.8 * penalty(params)
    if model == "cp":
        np.testing.assert_allclose(np.linalg.norm(balanced.factors[0], axis=0),
                                   np.linalg.norm(balanced.factors[1], axis=0))
    for _ in range(50):  # any other rescaling with the same predictions costs more
        other = balanced.copy()
        c = np.exp(0.5 * rng.standard_normal(3))
        other.factors[0] = other.factors[0] * c
        if model == "cp":
            other.factors[1] = other.factors[1] / c
        else:
            other.core = other.core / c.reshape(-1, 1, 1)
        np.testing.assert_allclose(other.predict(cells), before, rtol=1e-9, atol=1e-12)
        assert penalty(other) >= penalty(balanced) * (1 - 1e-12)
    if model == "tucker":  # a free core (no core penalty) has no balanced point: left alone
        free = params.copy()
        rebalance(free, replace(settings, reg_core=0.0), anchors)
        np.testing.assert_array_equal(free.factors[0], params.factors[0])


@pytest.mark.parametrize(("converged_six", "expected"), [(0.91, 6), (0.959, 5)])
def test_reg_path_ranks_penalties_by_their_converged_fits(monkeypatch, converged_six, expected):
    """Early-stopped, a weak penalty looks best (it over-fits later): the walk converges its choice,
    then the neighbours upwards while a stronger penalty is significantly better on the paired
    validation errors (0.91 against 0.96 is; 0.959 is not, given the errors' spread), and the refit
    starts from the chosen penalty's converged fit."""
    import contextlib

    import dptensor.models.completion._als as als

    scale, n = 2.0, 2000
    early = {4: 0.95, 5: 0.90, 6: 0.92, 7: 0.97}  # early-stopped: 5 looks best
    converged = {5: 0.96, 6: converged_six, 7: 0.97}
    calls = []

    class Fit:  # a fit's validation errors have RMSE about its score, with a spread of their own
        def __init__(self, tag: tuple, score: float, truth: np.ndarray) -> None:
            jitter = 1.0 + 0.05 * np.random.default_rng(len(calls)).standard_normal(truth.size)
            signs = np.where(np.arange(truth.size) % 2, 1.0, -1.0)
            self.tag, self.prediction = tag, truth + score * jitter * signs

        def copy(self) -> Fit:
            return self

        def predict(self, indices: np.ndarray) -> np.ndarray:
            return self.prediction

    def fake_fit(start, stats, settings, *, fit_mean, validation, progress, early_stop=True):
        position = int(np.argmax(np.isclose(np.asarray(als.REG_PATH) * scale, settings.reg)))
        calls.append((position, early_stop))
        score = early.get(position, 1.0) if early_stop else converged.get(position, 1.0)
        return als.AlsResult(params=Fit((position, early_stop), score, validation[1]), n_iter=2,
                             validation_rmse=[score])

    chosen = {}

    def fake_final(start, indices, values, shape, step, *, fit_mean, progress=None):
        chosen.update(reg=step.reg, start=start)
        return als.AlsResult(params=start, n_iter=1)

    monkeypatch.setattr(als, "_fit_als", fake_fit)
    monkeypatch.setattr(als, "fit_als", fake_final)
    monkeypatch.setattr(als, "entry_statistics", lambda *a, **k: None)
    monkeypatch.setattr(als, "_blas_threads", lambda stats: contextlib.nullcontext())

    class Start:
        def copy(self) -> Start:
            return self

    values = scale ** 0.75 * np.where(np.arange(2 * n) % 2, 1.0, -1.0)  # std(values) ** (4/3) == scale
    settings = als.AlsSettings(reg=1.0, reg_bias=1.0, reg_core=1.0, context_modes=(), max_iter=5, tol=1e-4,
                               n_iter_no_change=3)
    result = als.fit_als_path(Start(), np.zeros((2 * n, 3), dtype=np.int64), values, (1, 1, 1), settings,
                              fit_mean=True, validation_mask=np.arange(2 * n) < n, tie_bias=True,
                              tie_core=True)
    settled = [position for position, stopped in calls if not stopped]
    assert settled == ([5, 6, 7] if expected == 6 else [5, 6, 4])  # upwards while preferred, else down
    assert result.reg == pytest.approx(als.REG_PATH[expected] * scale) == chosen["reg"]
    assert chosen["start"].tag == (expected, False)  # the converged fit, not the early-stopped one
