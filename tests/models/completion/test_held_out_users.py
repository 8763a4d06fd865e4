"""Held-out users folded in through the released item side (issue 38, item 5).

``dptensor.models.completion.fold_in_users`` and ``dptensor.evaluation.held_out_user_rmse``: checked
against a brute-force per-user least-squares solve, against DP-ALS's own local user rows under the
user relation, and with the training users' rows deleted from the model.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from dptensor.evaluation import held_out_user_rmse
from dptensor.models import TensorCompletion
from dptensor.models._options import build_estimator
from dptensor.models.completion import CompletionOptions, fold_in_users, predict_folded
from dptensor.privacy import insecure_test_noise

SHAPE = (24, 15, 4)


def _ratings(n_users: int, seed: int, density: float = 0.35) -> tuple[np.ndarray, np.ndarray]:
    """1..5 ratings with user and item effects on a (n_users, 15, 4) grid."""
    rng = np.random.default_rng(seed)
    idx = np.argwhere(rng.random((n_users, SHAPE[1], SHAPE[2])) < density)
    user_effect = rng.normal(0, 0.6, n_users)
    item_effect = np.linspace(-1, 1, SHAPE[1])
    x = 3.2 + user_effect[idx[:, 0]] + item_effect[idx[:, 1]] + rng.normal(0, 0.7, len(idx))
    return idx, np.clip(np.round(x), 1, 5)


@pytest.fixture(scope="module")
def training():
    return _ratings(SHAPE[0], 0)


@pytest.fixture(scope="module")
def new_users():
    """Ratings of 6 users who are not in the training data, split into observed and held-out."""
    idx, x = _ratings(6, 1, density=0.5)
    idx[:, 0] += 100  # their own labels: nothing to do with the training users' indices
    rng = np.random.default_rng(2)
    held = rng.random(len(x)) < 0.3
    return (idx[~held], x[~held]), (idx[held], x[held])


def brute_force_rows(model, indices, values):
    """Per user, the ridge solution by an augmented least-squares solve, entry by entry."""
    rows = {}
    for user in np.unique(indices[:, 0]):
        design, target = [], []
        for (_, j, k), x in zip(indices[indices[:, 0] == user], values[indices[:, 0] == user], strict=True):
            if model.prediction_range_ is not None:
                x = min(max(x, model.prediction_range_[0]), model.prediction_range_[1])
            w = []
            if model.factors_ is not None:
                b, c = model.factors_[1][j], model.factors_[2][k]
                if model.model == "cp":
                    w.extend(b * c)
                else:
                    w.extend(np.einsum("pqt,q,t->p", model.core_, b, c))
            y = x - model.mean_
            if model.biases_ is not None:
                w.append(1.0)
                y -= model.biases_[1][j] + model.biases_[2][k]
            design.append(w)
            target.append(y)
        d = len(design[0])
        n_bias = int(model.biases_ is not None)
        ridge = [model.reg_] * (d - n_bias) + [model.reg_bias_] * n_bias
        a = np.vstack([np.array(design), np.diag(np.sqrt(ridge))])
        rhs = np.concatenate([target, np.zeros(d)])
        rows[int(user)] = np.linalg.lstsq(a, rhs, rcond=None)[0]
    return rows


def brute_force_prediction(model, rows, user, j, k):
    theta = rows.get(int(user))
    x = model.mean_
    if model.biases_ is not None:
        x += model.biases_[1][j] + model.biases_[2][k] + (theta[-1] if theta is not None else 0.0)
    if model.factors_ is not None and theta is not None:
        b, c = model.factors_[1][j], model.factors_[2][k]
        w = b * c if model.model == "cp" else np.einsum("pqt,q,t->p", model.core_, b, c)
        x += float(w @ theta[: len(w)])
    if model.prediction_range_ is not None:
        x = min(max(x, model.prediction_range_[0]), model.prediction_range_[1])
    return x


@pytest.mark.parametrize(
    "params",
    [
        dict(rank=2, reg=0.7, reg_bias=2.0, max_iter=8),
        dict(rank=2, model="tucker", reg=0.5, max_iter=6, value_range=(1, 5)),
        dict(rank=None, reg_bias=3.0, max_iter=5),
        dict(rank=2, offsets="none", reg=1.0, max_iter=5),
    ],
    ids=["cp-biases", "tucker-range", "biases-only", "cp-no-offsets"],
)
def test_fold_in_matches_brute_force_least_squares(training, new_users, params):
    model = build_estimator(TensorCompletion, random_state=0, **params).fit(*training, SHAPE)
    (obs_idx, obs_x), (test_idx, test_x) = new_users
    folded = fold_in_users(model, obs_idx, obs_x)
    reference = brute_force_rows(model, obs_idx, obs_x)
    assert list(folded.users) == sorted(reference)
    for position, user in enumerate(folded.users):
        theta = np.array(
            ([] if folded.factors is None else list(folded.factors[position]))
            + ([] if folded.biases is None else [folded.biases[position]])
        )
        np.testing.assert_allclose(theta, reference[int(user)], rtol=1e-9, atol=1e-10)
    expected = [brute_force_prediction(model, reference, *e) for e in test_idx]
    np.testing.assert_allclose(predict_folded(model, folded, test_idx), expected, rtol=1e-10, atol=1e-12)
    rmse = held_out_user_rmse(model, (obs_idx, obs_x), (test_idx, test_x))
    assert rmse == pytest.approx(float(np.sqrt(np.mean((test_x - np.array(expected)) ** 2))), rel=1e-12)


def test_user_without_observed_ratings_gets_the_prior_row(training, new_users):
    model = TensorCompletion(2, random_state=0, options=CompletionOptions(reg=1.0,
                                                                          max_iter=5)).fit(*training, SHAPE)
    (obs_idx, obs_x), _ = new_users
    folded = fold_in_users(model, obs_idx, obs_x)
    stranger = np.array([[7, 3, 1], [7, 0, 2]])
    expected = model.mean_ + model.biases_[1][[3, 0]] + model.biases_[2][[1, 2]]
    np.testing.assert_allclose(predict_folded(model, folded, stranger), expected)


@pytest.mark.filterwarnings("ignore:insecure_test_noise")
def test_dp_als_user_rows_are_the_fold_in_of_their_own_ratings(training):
    """Under user-level DP-ALS each training user's row is computed locally from the release: exactly
    the fold-in of that user's ratings (so a held-out user is treated as a training user who
    contributed nothing to the release)."""
    idx, x = training
    model = TensorCompletion(2, privacy="als", neighbouring="user", epsilon=2.0, value_range=(1, 5),
                             random_state=0, noise=insecure_test_noise(3)).fit(idx, x, SHAPE)
    folded = fold_in_users(model, idx, x)
    rated = np.unique(idx[:, 0])
    np.testing.assert_array_equal(folded.users, rated)
    np.testing.assert_allclose(folded.factors, model.factors_[0][rated], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(folded.biases, model.biases_[0][rated], rtol=1e-9, atol=1e-12)


@pytest.mark.filterwarnings("ignore:insecure_test_noise")
def test_training_users_rows_are_never_read(training, new_users):
    """The evaluation works, unchanged, on a model whose private user rows were deleted or poisoned."""
    idx, x = training
    model = TensorCompletion(2, privacy="als", neighbouring="user", epsilon=2.0, value_range=(1, 5),
                             random_state=0, noise=insecure_test_noise(4)).fit(idx, x, SHAPE)
    observed, held_out = new_users
    rmse = held_out_user_rmse(model, observed, held_out)
    assert np.isfinite(rmse)
    deleted = copy.copy(model)  # the same fitted model, its own lists of factors and biases
    deleted.factors_ = [None, *model.factors_[1:]]
    deleted.biases_ = [None, *model.biases_[1:]]
    assert held_out_user_rmse(deleted, observed, held_out) == rmse
    poisoned = copy.copy(model)
    poisoned.factors_ = [np.full_like(model.factors_[0], np.nan), *model.factors_[1:]]
    poisoned.biases_ = [np.full_like(model.biases_[0], np.nan), *model.biases_[1:]]
    assert held_out_user_rmse(poisoned, observed, held_out) == rmse


def test_accepts_tensor_entries_and_refuses_what_cannot_be_folded_in(training, new_users):
    from dptensor.datasets import TensorEntries

    (obs_idx, obs_x), (test_idx, test_x) = new_users
    model = TensorCompletion(2, random_state=0, options=CompletionOptions(reg=1.0,
                                                                          max_iter=4)).fit(*training, SHAPE)
    shape = (200, SHAPE[1], SHAPE[2])
    as_entries = held_out_user_rmse(model, TensorEntries(obs_idx, obs_x, shape),
                                    TensorEntries(test_idx, test_x, shape))
    assert as_entries == held_out_user_rmse(model, (obs_idx, obs_x), (test_idx, test_x))
    with pytest.raises(ValueError, match="below the model's shape"):
        fold_in_users(model, [[0, SHAPE[1], 0]], [3.0])
    context = TensorCompletion(2, random_state=0,
        options=CompletionOptions(reg=1.0, max_iter=3, context_modes=(0,)))
    context.fit(*training, SHAPE)
    with pytest.raises(ValueError, match="context mode"):
        fold_in_users(context, obs_idx, obs_x)
    biscaled = TensorCompletion(2, offsets="biscale", random_state=0,
        options=CompletionOptions(reg=1.0, max_iter=2))
    biscaled.fit(*training, SHAPE)
    with pytest.raises(ValueError, match="biscale"):
        fold_in_users(biscaled, obs_idx, obs_x)
    with pytest.raises(ValueError, match="not fitted"):
        fold_in_users(TensorCompletion(2), obs_idx, obs_x)
