"""PrivateTopicModel (models/topics/text_model.py) and its budget (text_budget.py): texts to topics."""

from __future__ import annotations

import numpy as np
import pytest

from dptensor import DPVariationalLDA, PrivateSpectralLDA, PrivateTopicModel
from dptensor.models.topics.vectorizer import PrivateCountVectorizer
from dptensor.privacy import BudgetLedger, compose
from dptensor.privacy.noise import insecure_test_noise

THEMES = ["goal match team player score league coach season",
          "pasta cheese sauce bread oven recipe kitchen dinner",
          "tensor matrix vector power method algebra eigen rank"]


def _texts(n: int = 3000, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(THEMES[rng.integers(3)].split(), 12)) for _ in range(n)]


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_the_budget_is_spent_to_a_thousandth_and_never_exceeded(epsilon):
    """The linear split composes to far less (about 0.70 of epsilon); the calibrated one to epsilon."""
    vectorizer = PrivateCountVectorizer(30, epsilon=epsilon / 2, delta=5e-7)
    model = PrivateSpectralLDA(3, epsilon=epsilon / 2, delta=5e-7)
    linear = compose(vectorizer.planned_guarantee(), model.planned_guarantee(3000, 30), delta=1e-6)
    assert linear.epsilon < 0.8 * epsilon
    budget = PrivateTopicModel(3, epsilon=epsilon, delta=1e-6, n_words=30, vocabulary_share=0.5).plan(3000)
    assert epsilon - 1e-3 <= budget.total.epsilon <= epsilon
    assert budget.scale > 1 and budget.vocabulary_share == 0.5
    assert budget.vocabulary_epsilon == pytest.approx(budget.scale * 0.5 * epsilon)
    assert budget.vocabulary_delta + budget.model_delta == pytest.approx(1e-6)


def test_fit_transform_top_words_save_and_load(tmp_path):
    texts = _texts()
    model = PrivateTopicModel(3, epsilon=2.0, delta=1e-6, n_words=30, random_state=0,
                              noise="numpy").fit(texts)
    assert 2.0 - 1e-3 <= model.guarantee_.epsilon <= 2.0
    assert model.guarantee_.epsilon == pytest.approx(
        compose(model.vocabulary_guarantee_, model.model_guarantee_, delta=1e-6).epsilon)
    themes = [{w for w in t.split()} for t in THEMES]
    found = [max(len(set(words) & theme) for theme in themes) for words in model.top_words(5)]
    assert min(found) >= 4  # each topic is one theme
    theta = model.transform(texts[:4])
    assert theta.shape == (4, 3) and np.allclose(theta.sum(axis=1), 1)
    model.save(tmp_path / "m.json")
    loaded = PrivateTopicModel.load(tmp_path / "m.json")
    assert loaded.vocabulary_ == model.vocabulary_
    np.testing.assert_allclose(loaded.transform(texts[:4]), theta)
    assert loaded.guarantee_["epsilon"] == model.guarantee_.epsilon


def test_a_ledger_is_asked_for_both_releases_before_the_first_charge(tmp_path):
    ledger = BudgetLedger(tmp_path / "b.ledger", epsilon=1.5, delta=1e-5)
    model = PrivateTopicModel(3, epsilon=2.0, delta=1e-6, n_words=30, ledger=ledger,
                              noise=insecure_test_noise(0))
    with pytest.raises(Exception, match="budget exceeded"):
        model.fit(_texts(500))
    assert ledger.charges() == [] and ledger.spent() == 0  # the vocabulary was not charged either


def test_dp_vi_public_vocabulary_and_bad_input():
    texts = _texts(1500)
    vi = PrivateTopicModel(3, epsilon=1.0, delta=1e-6, n_words=30, model=DPVariationalLDA(3),
                           noise=insecure_test_noise(2), random_state=0).fit(texts)
    assert vi.budget_.vocabulary_share == 0.2 and not vi.budget_.share_chosen
    assert 1.0 - 1e-3 <= vi.budget_.total.epsilon <= 1.0
    words = sorted({w for t in THEMES for w in t.split()})
    public = PrivateTopicModel(3, epsilon=1.0, delta=1e-6, vocabulary=words, noise=insecure_test_noise(2),
                               random_state=0).fit(texts)
    assert public.vocabulary_ == words and public.vocabulary_guarantee_ is None and public.budget_ is None
    with pytest.raises(ValueError, match="not one string"):
        public.fit("one text")
    with pytest.raises(ValueError, match="needs epsilon and delta"):
        PrivateTopicModel(3).fit(texts)
    with pytest.raises(ValueError, match="at least one document"):
        PrivateTopicModel(3, epsilon=1.0, delta=1e-6).fit([])
