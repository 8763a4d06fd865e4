"""Copies of private estimators: noise sources are never duplicated, fitted models pickle.

A shared :class:`~dptensor.privacy.NoiseSource` passed as ``noise=`` is copied by scikit-learn's
``clone`` (grid search, cross-validation) and by ``copy.deepcopy``; a copy of its generator would
draw the very noise the original draws, and two releases made with the same noise on neighbouring
data differ by exactly the data's change. Fitted private estimators must survive ``pickle`` and
``joblib.dump`` (their guarantee included), as the non-private ones do.
"""

from __future__ import annotations

import copy
import pickle
import warnings

import joblib
import numpy as np
import pytest
from sklearn.base import clone

from dptensor import DPVariationalLDA, PrivateCountVectorizer, PrivateSpectralLDA, TensorCompletion
from dptensor.datasets.lda import make_lda_corpus
from dptensor.models._options import build_estimator
from dptensor.models.completion import CompletionOptions
from dptensor.models.topics.dp_vi_options import DPVIOptions
from dptensor.privacy import PrivacyWarning, insecure_test_noise, resolve_noise
from dptensor.privacy.noise import scaled_test_noise


def _ratings(seed: int = 0):
    rng = np.random.default_rng(seed)
    idx = np.argwhere(rng.random((40, 20, 2)) < 0.3)
    return idx, np.clip(np.round(3.5 + rng.normal(0, 1, len(idx))), 1, 5), (40, 20, 2)


@pytest.mark.parametrize("source", [resolve_noise("numpy"), scaled_test_noise(1.0, seed=3)])
def test_copies_of_a_source_are_the_source(source):
    assert copy.copy(source) is source and copy.deepcopy(source) is source
    assert copy.deepcopy({"noise": source})["noise"] is source


def test_clones_sharing_a_source_draw_fresh_noise_on_neighbouring_data():
    """Two clones of one estimator, on data differing in one rating: the releases differ everywhere,
    not only at that rating (with a copied generator they would differ there alone, by its change)."""
    idx, values, shape = _ratings()
    changed = values.copy()
    changed[0] = 5.0 if values[0] != 5.0 else 1.0
    base = TensorCompletion(2, privacy="input", neighbouring="entry-value", epsilon=0.5, value_range=(1, 5),
                            noise=resolve_noise("numpy"), random_state=0,
                            options=CompletionOptions(clamp=False))
    first = clone(base).fit(idx, values, shape).perturbed_values_
    second = clone(base).fit(idx, changed, shape).perturbed_values_
    assert np.count_nonzero(first - second != 0) == len(values)
    # the same through copy.deepcopy, and on the same data
    third = copy.deepcopy(base).fit(idx, values, shape).perturbed_values_
    assert np.count_nonzero(first - third != 0) == len(values)


def test_a_pickled_secure_source_draws_from_fresh_entropy():
    source = resolve_noise("numpy")
    one, two = pickle.loads(pickle.dumps(source)), pickle.loads(pickle.dumps(source))
    assert one.secure and one.backend == "numpy"
    draws = [s.standard_normal(64) for s in (source, one, two)]
    assert not np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[1], draws[2])
    # an insecure test source keeps its (public) stream: reproducibility is its purpose
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        test_source = resolve_noise(insecure_test_noise(7))
    copied = pickle.loads(pickle.dumps(test_source))
    np.testing.assert_array_equal(copied.standard_normal(8), test_source.standard_normal(8))


@pytest.fixture(scope="module")
def counts():
    return make_lda_corpus(1500, 30, 3, alpha=0.1, doc_length=30, random_state=0).counts


def _fitted(name, counts):
    budget = {"epsilon": 1.0, "delta": 1e-6}
    if name == "PrivateSpectralLDA":
        return PrivateSpectralLDA(3, 0.3, **budget, refine_passes=2, random_state=0).fit(counts)
    if name == "DPVariationalLDA":
        return DPVariationalLDA(3, options=DPVIOptions(n_passes=1), **budget, random_state=0).fit(counts)
    if name == "PrivateCountVectorizer":
        return PrivateCountVectorizer(3, **budget).fit(["tensor power method", "power of a tensor"] * 800)
    idx, values, shape = _ratings()
    return build_estimator(TensorCompletion, rank=2, privacy="als", neighbouring="user", **budget,
                            value_range=(1, 5), random_state=0).fit(idx, values, shape)


@pytest.mark.parametrize("name", ["PrivateSpectralLDA", "DPVariationalLDA", "PrivateCountVectorizer",
                                  "TensorCompletion"])
def test_fitted_private_estimators_pickle_with_their_guarantee(name, counts, tmp_path):
    model = _fitted(name, counts)
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model),
                     joblib.load(joblib.dump(model, tmp_path / "model.joblib")[0])):
        assert restored.guarantee_ == model.guarantee_ and restored.guarantee_.holds
        assert restored.guarantee_.describe() == model.guarantee_.describe()
        with pytest.raises(TypeError):
            restored.guarantee_.details["epsilon"] = 0.0  # still read-only
        if name == "TensorCompletion":
            idx = _ratings()[0][:5]
            np.testing.assert_array_equal(restored.predict(idx), model.predict(idx))
        elif name == "PrivateCountVectorizer":
            assert restored.vocabulary_ == model.vocabulary_
        else:
            np.testing.assert_array_equal(restored.components_, model.components_)


def test_a_guarantee_that_does_not_hold_pickles_as_it_was():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        idx, values, shape = _ratings()
        model = TensorCompletion(2, privacy="als", neighbouring="user", epsilon=1.0, value_range=(1, 5),
                                 noise=insecure_test_noise(1), random_state=0).fit(idx, values, shape)
    restored = pickle.loads(pickle.dumps(model.guarantee_))
    assert not restored.holds and restored == model.guarantee_
    assert restored.nominal_epsilon == model.guarantee_.nominal_epsilon == 1.0


class _CountingLedger:
    def __init__(self):
        self.charges = []

    def charge(self, guarantee, *, description=""):
        self.charges.append(guarantee)


def test_a_vectorizer_refuses_non_strings_before_the_charge():
    ledger = _CountingLedger()
    vectorizer = PrivateCountVectorizer(5, epsilon=1.0, delta=1e-6, ledger=ledger)
    with pytest.raises(TypeError, match="strings"):
        vectorizer.fit(["a tensor", None, "the power method"])
    assert ledger.charges == []
    vectorizer.fit(["a tensor", b"the power method"] * 500)  # bytes are documents too
    assert len(ledger.charges) == 1


def test_a_refit_keeps_nothing_of_the_earlier_fit(tmp_path):
    """A private refit of a non-private model does not keep its un-noised validation RMSE (nor any
    attribute only the earlier fit computed)."""
    idx, values, shape = _ratings()
    model = TensorCompletion(2, random_state=0, verbose=False).fit(idx, values, shape)
    assert hasattr(model, "validation_rmse_")
    model.set_params(privacy="input", neighbouring="entry-value", epsilon=1.0, value_range=(1, 5))
    model.fit(idx, values, shape)
    assert hasattr(model, "perturbed_values_") and not hasattr(model, "validation_rmse_")
    model.set_params(privacy="als", neighbouring="user")
    model.fit(idx, values, shape)
    assert not hasattr(model, "perturbed_values_") and not hasattr(model, "input_noise_scale_")
    # a refit refused by the ledger leaves the model unfitted, not holding the earlier fit
    from dptensor.privacy import BudgetExceededError, BudgetLedger

    small = BudgetLedger(tmp_path / "small.ledger", epsilon=0.5, delta=1e-5, dataset="ratings")
    with pytest.raises(BudgetExceededError):
        model.set_params(ledger=small).fit(idx, values, shape)
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):  # scikit-learn's class catches dptensor's
        model.predict(idx[:2])


@pytest.mark.parametrize("bad", [{"lowercase": "yes"}, {"ngram_range": [1, 2]}, {"n_words": 0}])
def test_a_vectorizer_refuses_invalid_parameters_before_the_charge(bad):
    from sklearn.utils._param_validation import InvalidParameterError

    ledger = _CountingLedger()
    vectorizer = PrivateCountVectorizer(5, epsilon=1.0, delta=1e-6, ledger=ledger).set_params(**bad)
    with pytest.raises(InvalidParameterError):
        vectorizer.fit(["a tensor", "the power method"] * 500)
    assert ledger.charges == []
    assert vectorizer.__sklearn_tags__().input_tags.string  # the tags do not validate parameters
