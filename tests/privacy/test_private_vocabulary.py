"""A vocabulary chosen under DP (issue 23 item 2) and a vectoriser for private pipelines (issue 27 finding 8).

* the per-document contribution and both sensitivities, by brute force over tiny corpora;
* the calibration (threshold and Gaussian) against its formulas and dp-accounting;
* empirical audits that pass for the mechanism and catch an under-noised and an under-thresholded
  variant;
* neighbouring corpora -- extreme documents included -- look alike to a caller of
  ``PrivateCountVectorizer`` and of ``dptensor lda fit --private-vocab``;
* pipelines, the ledger, and the guarantee of the models naming the vocabulary as an assumption.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats
from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer, TfidfVectorizer
from sklearn.pipeline import Pipeline, make_pipeline

from dptensor.cli import main, observe_command
from dptensor.models import DPVariationalLDA, PrivateCountVectorizer, PrivateSpectralLDA, pipeline_guarantee
from dptensor.models.topics.dp_vi_options import DPVIOptions
from dptensor.models.topics.short_documents import pad_short_documents
from dptensor.privacy import BudgetLedger, compose, event_epsilon, insecure_test_noise, resolve_noise
from dptensor.privacy.audit import epsilon_lower_bound, observable_differences, observe
from dptensor.privacy.errors import PrivacyWarning, ReleaseUtilityWarning
from dptensor.privacy.vocabulary import (
    VOCABULARY_ASSUMPTION,
    ZIPF_CONSTANT,
    ZIPF_EXPONENT,
    ZIPF_OFFSET,
    _policy_steps,
    calibrate_vocabulary,
    document_word_weights,
    policy_word_weights,
    predicted_vocabulary_size,
    private_vocabulary,
    select_vocabulary,
    vocabulary_guarantee,
    word_weights,
)

pytestmark = pytest.mark.filterwarnings("ignore:insecure_test_noise:dptensor.privacy.PrivacyWarning")


# ------------------------------------------------------------------ contribution and sensitivity


def test_a_document_keeps_its_most_frequent_words_with_unit_norm():
    weights = document_word_weights("b a c a b a d".split(), 2)
    assert weights == {"a": 1 / math.sqrt(2), "b": 1 / math.sqrt(2)}
    # ties are broken by the word, never by anything outside the document
    assert set(document_word_weights(["z", "y", "x"], 2)) == {"x", "y"}
    assert document_word_weights([], 5) == {}
    for tokens in (["a"], ["a", "b", "b"], list("abcdefgh")):
        norm = math.sqrt(sum(w * w for w in document_word_weights(tokens, 3).values()))
        assert norm == pytest.approx(1.0)


def _documents(words: str, max_length: int) -> list[tuple[str, ...]]:
    return [d for n in range(max_length + 1) for d in itertools.combinations_with_replacement(words, n)]


@pytest.mark.parametrize("m", [1, 2, 3])
def test_brute_force_sensitivities_on_tiny_corpora(m):
    """Every corpus of 2 documents over 3 words (up to 3 tokens each), every replacement of one document.

    On the words that occur in both corpora the weights move by at most sqrt(2) in l2 (the Gaussian
    part's sensitivity); a word that occurs in one corpus only has weight <= 1, and there are at most
    m of them per side (the threshold part's union bound).
    """
    documents = _documents("abc", 3)
    worst_common, worst_exclusive, worst_count = 0.0, 0.0, 0
    for other in documents:
        for x, y in itertools.product(documents, repeat=2):
            w = word_weights([other, x], m)
            w2 = word_weights([other, y], m)
            common = set(w) & set(w2)
            diff = math.sqrt(sum((w[k] - w2[k]) ** 2 for k in common))
            worst_common = max(worst_common, diff)
            for a, b in ((w, w2), (w2, w)):
                exclusive = set(a) - set(b)
                worst_count = max(worst_count, len(exclusive))
                worst_exclusive = max([worst_exclusive, *(a[k] for k in exclusive)])
    assert worst_common <= math.sqrt(2) + 1e-12
    # attained: x = {a}, y = {b} beside a document {a, b} moves (a, b) by (1, -1)/sqrt(1)
    assert worst_common == pytest.approx(math.sqrt(2) if m > 1 else 1.0)
    assert worst_exclusive <= 1.0 and worst_count <= m


@pytest.mark.parametrize("m", [1, 2, 3])
@pytest.mark.parametrize("cutoff", [0.6, pytest.param(1.5, marks=pytest.mark.slow)])  # 1.5: 2 s a case
def test_brute_force_policy_sensitivity_on_tiny_corpora(m, cutoff):
    """The policy Gaussian (Gopi et al. 2020): every corpus of 3 documents over 3 words (up to 2 tokens
    each), every slot replaced by every document, in every processing order (the same for both).

    The final weight vectors differ by at most sqrt(2) in l2 (all words, not only the common ones), and
    the t words of one corpus only are at most m and each weighs at most 1/sqrt(t). The small cutoffs
    make words saturate, so the steps that redistribute a document's budget are exercised.
    """
    documents = [list(document_word_weights(d, m)) for d in _documents("abc", 2)]
    worst, redistributed = 0.0, False
    for corpus in itertools.product(documents, repeat=3):
        for slot, other, order in itertools.product(range(3), documents, itertools.permutations(range(3))):
            neighbour = list(corpus)
            neighbour[slot] = other
            w = _policy_steps([corpus[i] for i in order], cutoff)
            w2 = _policy_steps([neighbour[i] for i in order], cutoff)
            words = set(w) | set(w2)
            diff = math.sqrt(sum((w.get(k, 0.0) - w2.get(k, 0.0)) ** 2 for k in words))
            worst = max(worst, diff)
            for a, b in ((w, w2), (w2, w)):
                exclusive = set(a) - set(b)
                assert len(exclusive) <= m
                assert all(a[k] <= 1 / math.sqrt(len(exclusive)) + 1e-12 for k in exclusive)
            redistributed |= any(v > cutoff - 1e-9 for v in w.values()) and len(w) > 1
    assert worst <= math.sqrt(2) + 1e-12
    assert redistributed
    if m > 1:
        assert worst > 1.0 + 1e-9  # more than the add/remove sensitivity: replace-one needs sqrt(2)


def test_policy_steps_are_one_lipschitz_from_any_two_states():
    """Step (P) is a proximal map: from any two weight vectors, one document's step never moves them apart."""
    rng = np.random.default_rng(0)
    words = ["a", "b", "c", "d"]
    for _ in range(3000):
        cutoff = float(rng.uniform(0.5, 3.0))
        kept = list(rng.choice(words, size=int(rng.integers(1, 5)), replace=False))
        y1 = {w: float(v) for w, v in zip(words, rng.uniform(0, 3.5, 4) * (rng.random(4) < 0.8), strict=True)}
        y2 = {w: v + float(rng.normal(0, rng.choice([0.01, 0.5]))) for w, v in y1.items()}
        z1, z2 = (_policy_steps([kept], cutoff, start=y) for y in (y1, y2))
        before = math.sqrt(sum((y1[w] - y2[w]) ** 2 for w in words))
        after = math.sqrt(sum((z1[w] - z2[w]) ** 2 for w in words))
        assert after <= before + 1e-12


def test_policy_weights_use_a_secret_random_order():
    docs = [["a", "b"]] * 40 + [["b", "c"]] * 40 + [["c"]] * 5
    first = policy_word_weights(docs, 4, 3.0, resolve_noise(insecure_test_noise(0)))
    assert set(first) == {"a", "b", "c"} and max(first.values()) <= 3.0 + 1e-12
    # the result does not depend on the input order beyond the (secret, uniform) processing order
    again = policy_word_weights(docs[::-1], 4, 3.0, resolve_noise(insecure_test_noise(0)))
    assert set(again) == set(first)
    assert policy_word_weights([], 4, 3.0, resolve_noise(insecure_test_noise(0))) == {}
    with pytest.raises(ValueError, match="cutoff"):
        policy_word_weights(docs, 4, 0.0, resolve_noise(insecure_test_noise(0)))


# ------------------------------------------------------------------ calibration and guarantee


def test_calibration_meets_its_formulas_and_the_guarantee_composes():
    c = calibrate_vocabulary(1.0, 1e-6, 64)
    assert c.threshold_delta == pytest.approx(5e-7)
    # m exclusive words of weight <= 1 pass the threshold with total probability delta_t
    assert 64 * stats.norm.sf((c.threshold - 1.0) / c.sigma) == pytest.approx(c.threshold_delta, rel=1e-6)
    g = vocabulary_guarantee(c, 100)
    assert g.holds and g.neighbouring == "document" and g.epsilon == 1.0 and g.delta == 1e-6
    assert g.epsilon_exact <= 1.0
    # dp-accounting's PLD of the composed event agrees (up to its pessimistic discretisation)
    assert event_epsilon(g.to_dp_event(), 1e-6) <= 1.0 + 5e-3
    # a larger budget or a smaller m lowers the noise / threshold
    assert calibrate_vocabulary(2.0, 1e-6, 64).sigma < c.sigma
    assert calibrate_vocabulary(1.0, 1e-6, 8).threshold < c.threshold
    bads = ({"epsilon": 0.0}, {"delta": 1.0}, {"max_words_per_document": 0}, {"threshold_delta_share": 1})
    for bad in bads:
        with pytest.raises((ValueError, TypeError), match=next(iter(bad))):
            calibrate_vocabulary(**{"epsilon": 1.0, "delta": 1e-6, **bad})


def test_private_vocabulary_finds_the_frequent_words_and_charges_first(tmp_path):
    docs = [["tensor", "power", "method"]] * 3000 + [["secret", "word"]] + [[]] * 5
    ledger = BudgetLedger(tmp_path / "budget.sqlite", epsilon=1.0, delta=1e-5)
    vocab = private_vocabulary(docs, 2, epsilon=1.0, delta=1e-6, ledger=ledger)
    assert len(vocab.words) == 2 and set(vocab.words) <= {"tensor", "power", "method"}
    assert vocab.words == sorted(vocab.words) and vocab.noisy_weights.shape == (2,)
    assert len(ledger.charges()) == 1
    with pytest.raises(Exception, match="budget|exceed"):  # the budget is spent: refused, nothing read
        private_vocabulary(iter(()), 2, epsilon=1.0, delta=1e-6, ledger=ledger)


# ------------------------------------------------------------------ empirical audits


def _audit_samples(weights, calibration, word, runs, seed):
    source = resolve_noise(insecure_test_noise(seed))
    out = np.empty(runs)
    for i in range(runs):
        words, noisy = select_vocabulary(weights, 5, calibration, source)
        out[i] = noisy[words.index(word)] if word in words else -np.inf
    return out


@pytest.mark.parametrize("variant", ["correct", "under-noised"])
def test_audit_of_the_gaussian_part(variant):
    """Neighbours: one document {a} replaced by an empty one; the statistic is a's released weight."""
    c = calibrate_vocabulary(1.0, 1e-3, 4)
    if variant == "under-noised":
        c = dataclasses.replace(c, sigma=c.sigma / 8)
    base = {"a": c.threshold + 10 * c.sigma, "b": c.threshold + 10 * c.sigma}
    with_a = {**base, "a": base["a"] + 1.0}
    low = _audit_samples(base, c, "a", 6000, 1)
    high = _audit_samples(with_a, c, "a", 6000, 2)
    bound = epsilon_lower_bound(low, high, c.delta)
    if variant == "correct":
        assert bound <= 1.0
    else:
        assert bound > 1.0


@pytest.mark.parametrize("variant", ["correct", "low-threshold"])
def test_audit_of_the_threshold(variant):
    """Neighbours: a document holding the only 'z' replaced by one without it; the statistic: z released."""
    c = calibrate_vocabulary(1.0, 1e-3, 4)
    if variant == "low-threshold":
        c = dataclasses.replace(c, threshold=1.0 + c.sigma)
    base = {"a": c.threshold + 10 * c.sigma}
    with_z = {**base, "z": 1.0}
    without = np.isfinite(_audit_samples(base, c, "z", 3000, 3)).astype(float)
    released = np.isfinite(_audit_samples(with_z, c, "z", 3000, 4)).astype(float)
    bound = epsilon_lower_bound(without, released, c.delta)
    if variant == "correct":
        assert released.mean() <= 0.01 and bound <= 1.0
    else:
        assert bound > 1.0


@pytest.mark.parametrize("variant", ["correct", "under-noised"])
def test_audit_of_the_policy_gaussian(variant):
    """Neighbours under the policy: a document {a} replaced by an empty one, weights built by the policy
    (one secret order, the same slot); the statistic is a's released weight."""
    c = calibrate_vocabulary(1.0, 1e-3, 4, mechanism="policy-gaussian")
    if variant == "under-noised":
        c = dataclasses.replace(c, sigma=c.sigma / 8)
    common = [["a"]] * int(c.threshold + c.sigma) + [["b"]] * 200  # a below the cutoff, b saturated
    weights = [policy_word_weights(common + [extra], 4, c.cutoff, resolve_noise(insecure_test_noise(9)))
               for extra in (["a"], [])]
    assert weights[0]["a"] - weights[1]["a"] == pytest.approx(1.0)
    assert weights[0]["b"] == pytest.approx(c.cutoff)
    high = _audit_samples(weights[0], c, "a", 6000, 1)
    low = _audit_samples(weights[1], c, "a", 6000, 2)
    bound = epsilon_lower_bound(low, high, c.delta)
    if variant == "correct":
        assert bound <= 1.0
    else:
        assert bound > 1.0


@pytest.mark.parametrize("variant", ["correct", "low-threshold"])
def test_audit_of_the_policy_threshold(variant):
    """A document holding the only 'z' (its only word: weight 1, the largest one exclusive word can have)."""
    c = calibrate_vocabulary(1.0, 1e-3, 4, mechanism="policy-gaussian")
    if variant == "low-threshold":
        c = dataclasses.replace(c, threshold=1.0 + c.sigma)
    common = [["a"]] * int(c.cutoff + 5)
    with_z = policy_word_weights(common + [["z"]], 4, c.cutoff, resolve_noise(insecure_test_noise(5)))
    assert with_z["z"] == pytest.approx(1.0)
    without = np.isfinite(_audit_samples({"a": with_z["a"]}, c, "z", 3000, 3)).astype(float)
    released = np.isfinite(_audit_samples(with_z, c, "z", 3000, 4)).astype(float)
    bound = epsilon_lower_bound(without, released, c.delta)
    if variant == "correct":
        assert released.mean() <= 0.01 and bound <= 1.0
    else:
        assert bound > 1.0


def test_policy_calibration_meets_its_formula():
    c = calibrate_vocabulary(1.0, 1e-6, 64, mechanism="policy-gaussian", cutoff_sigmas=3.0)
    weighted = calibrate_vocabulary(1.0, 1e-6, 64)
    assert c.sigma == weighted.sigma and c.to_dp_event() == weighted.to_dp_event()  # same noise
    t = np.arange(1, 65)
    # t exclusive words of weight 1/sqrt(t) pass with total probability <= delta_t, equality at the worst t
    passing = t * stats.norm.sf((c.threshold - 1 / np.sqrt(t)) / c.sigma)
    assert passing.max() == pytest.approx(c.threshold_delta, rel=1e-6)
    assert c.threshold <= weighted.threshold and c.cutoff == pytest.approx(c.threshold + 3 * c.sigma)
    g = vocabulary_guarantee(c, 10)
    assert g.holds and g.mechanism == "policy gaussian partition selection"
    assert g.details["policy_cutoff"] == c.cutoff and event_epsilon(g.to_dp_event(), 1e-6) <= 1.0 + 5e-3
    for bad in ({"mechanism": "nope"}, {"cutoff_sigmas": -1.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            calibrate_vocabulary(1.0, 1e-6, 64, **bad)


# ------------------------------------------------------------------ what a caller observes

COMMON = ["alpha beta gamma", "beta gamma delta", "gamma delta alpha", "delta alpha beta"]


def _corpus(extra: str) -> list[str]:
    return COMMON * 300 + [extra]


EXTREME_DOCUMENTS = [
    " ".join(f"w{i}" for i in range(1_000_000)),  # 10^6 distinct words
    "alpha " * 200_000 + "zeta",  # huge counts
    "",  # an empty document
    "alpha",  # a single token
]


@pytest.mark.parametrize("extreme", EXTREME_DOCUMENTS, ids=["distinct-1e6", "huge-counts", "empty", "single"])
def test_neighbouring_corpora_look_alike_to_a_vectorizer_caller(extreme):
    observations = []
    for corpus in (_corpus("alpha beta"), _corpus(extreme)):
        vectorizer = PrivateCountVectorizer(10, epsilon=1.0, delta=1e-6, noise=insecure_test_noise(0))
        observations.append(observe(vectorizer.fit, corpus))
    first, second = observations
    assert first.exception is None, first.exception
    assert observable_differences(first, second) == []
    assert sorted(first.result.vocabulary_) == ["alpha", "beta", "delta", "gamma"]


@pytest.mark.parametrize("extreme", EXTREME_DOCUMENTS, ids=["distinct-1e6", "huge-counts", "empty", "single"])
def test_neighbouring_corpora_look_alike_to_a_policy_vectorizer_caller(extreme):
    observations = []
    for corpus in (_corpus("alpha beta"), _corpus(extreme)):
        vectorizer = PrivateCountVectorizer(10, epsilon=1.0, delta=1e-6, mechanism="policy-gaussian",
                                            noise=insecure_test_noise(0))
        observations.append(observe(vectorizer.fit, corpus))
    first, second = observations
    assert first.exception is None, first.exception
    assert observable_differences(first, second) == []
    assert sorted(first.result.vocabulary_) == ["alpha", "beta", "delta", "gamma"]
    assert first.result.guarantee_.mechanism == "policy gaussian partition selection"


def test_vectorizer_refuses_before_reading_or_charging(tmp_path):
    ledger = BudgetLedger(tmp_path / "b.sqlite", epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="epsilon and delta"):
        PrivateCountVectorizer(5, ledger=ledger).fit(["a b c"])
    with pytest.raises(ValueError, match="not one string"):
        PrivateCountVectorizer(5, epsilon=1.0, delta=1e-6, ledger=ledger).fit("a b c")
    with pytest.raises(ValueError, match="n_words"):
        PrivateCountVectorizer(0, epsilon=1.0, delta=1e-6, ledger=ledger).fit(["a b c"])
    assert ledger.charges() == []
    # a release in which nothing passes is an error about the noisy release only (the budget is spent)
    with pytest.raises(ValueError, match="no word"):
        PrivateCountVectorizer(5, epsilon=1.0, delta=1e-6, ledger=ledger).fit(["a b c"] * 3)
    assert len(ledger.charges()) == 1


def test_vectorizer_warns_when_fewer_words_pass_than_asked():
    """Issue 37: a vocabulary that kept fewer words than asked says so (how many is part of the release)."""
    corpus = _corpus("alpha beta")  # four frequent words
    with pytest.warns(ReleaseUtilityWarning, match=r"only 4 of the 10 words asked for passed") as caught:
        PrivateCountVectorizer(10, epsilon=1.0, delta=1e-6, noise=insecure_test_noise(0)).fit(corpus)
    (shortfall,) = [w for w in caught if w.category is ReleaseUtilityWarning]
    assert "max_words_per_document" in str(shortfall.message)
    assert shortfall.filename == __file__  # points at the caller's line, not inside scikit-learn
    pipe = make_pipeline(PrivateCountVectorizer(10, epsilon=1.0, delta=1e-6, noise=insecure_test_noise(0)),
                         PrivateSpectralLDA(2, epsilon=1.0, delta=1e-6, noise=insecure_test_noise(1)))
    with pytest.warns(ReleaseUtilityWarning, match="only 4 of the 10") as caught:
        pipe.fit(corpus)  # through Pipeline, joblib's cache and fit_transform: still this line
    assert [w.filename for w in caught if w.category is ReleaseUtilityWarning] == [__file__]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReleaseUtilityWarning)  # all the words asked for pass: no warning
        PrivateCountVectorizer(4, epsilon=1.0, delta=1e-6, noise=insecure_test_noise(0)).fit(corpus)


@pytest.mark.parametrize("extreme", EXTREME_DOCUMENTS, ids=["distinct-1e6", "huge-counts", "empty", "single"])
def test_the_shortfall_warning_is_the_same_for_extreme_neighbours(extreme):
    """The audit leaves ReleaseUtilityWarning out (it follows the release); here, with the same noise,
    the release and so the warning are the same for a corpus and its extreme neighbour."""
    messages = []
    for corpus in (_corpus("alpha beta"), _corpus(extreme)):
        with pytest.warns(ReleaseUtilityWarning) as caught:
            PrivateCountVectorizer(10, epsilon=1.0, delta=1e-6, noise=insecure_test_noise(0)).fit(corpus)
        messages.append([str(w.message) for w in caught if w.category is ReleaseUtilityWarning])
    assert messages[0] == messages[1] and len(messages[0]) == 1 and "only 4 of the 10" in messages[0][0]


def test_vectorizer_is_a_scikit_learn_estimator():
    from sklearn.base import clone

    vectorizer = PrivateCountVectorizer(7, epsilon=1.0, delta=1e-7, stop_words="english", ngram_range=(1, 2))
    twin = clone(vectorizer)
    assert twin.get_params() == vectorizer.get_params() and not hasattr(twin, "vocabulary_")
    counts = vectorizer.fit_transform(iter(_corpus("alpha beta")))  # an iterator is read once, then counted
    assert counts.shape == (1201, len(vectorizer.vocabulary_)) and sp.issparse(counts)
    assert set(vectorizer.get_feature_names_out()) <= {"alpha", "beta", "gamma", "delta", "alpha beta",
                                                       "beta gamma", "gamma delta", "delta alpha"}


def test_delta_above_one_over_n_warns():
    with pytest.warns(PrivacyWarning, match="delta"):
        PrivateCountVectorizer(5, epsilon=1.0, delta=0.01).fit(_corpus("a b"))


# ------------------------------------------------------------------ pipelines and models


def _topic_documents(n: int = 1500) -> list[str]:
    rng = np.random.default_rng(0)
    topics = [["tensor", "power", "moment", "whiten"], ["privacy", "noise", "budget", "ledger"]]
    return [" ".join(rng.choice(topics[i % 2], size=8)) for i in range(n)]


def test_private_pipeline_composes_and_charges_both(tmp_path):
    docs = _topic_documents()
    ledger = BudgetLedger(tmp_path / "b.sqlite", epsilon=4.0, delta=1e-5)
    pipe = make_pipeline(
        PrivateCountVectorizer(20, epsilon=0.5, delta=1e-7, ledger=ledger),
        PrivateSpectralLDA(2, 1.0, epsilon=2.0, delta=1e-6, ledger=ledger, random_state=0),
    )
    pipe.fit(docs)
    vectorizer, model = pipe[0], pipe[-1]
    assert set(vectorizer.get_feature_names_out()) <= {w for d in docs for w in d.split()}
    assert model.components_.shape == (2, len(vectorizer.vocabulary_))
    assert len(ledger.charges()) == 2
    total = compose(vectorizer.guarantee_, model.guarantee_, delta=1.1e-6)
    assert total.holds and total.epsilon <= 2.5 + 1e-3
    assert pipe.transform(docs[:3]).shape == (3, 2)


def test_pipeline_guarantee_sees_a_vocabulary_built_from_the_private_documents():
    """Issue 27 finding 8: the model's guarantee_ cannot tell; the pipeline's guarantee can."""
    docs = _topic_documents(600)
    words = ["tensor", "power", "moment", "whiten", "privacy", "noise", "budget", "ledger"]

    def model():
        return PrivateSpectralLDA(2, epsilon=1.0, delta=1e-6, random_state=0)

    wrong = make_pipeline(CountVectorizer(), model()).fit(docs)
    assert wrong[-1].guarantee_.holds  # the estimator alone cannot see where its columns came from
    verdict = pipeline_guarantee(wrong, delta=1e-6)
    assert not verdict.holds and "countvectorizer" in verdict.reason and verdict.epsilon == math.inf
    assert pipeline_guarantee(wrong, delta=1e-6, public_steps=["countvectorizer"]).holds  # vouched for
    # a TfidfVectorizer learns idf_ from the documents even with a fixed vocabulary
    tfidf = Pipeline([("tfidf", TfidfVectorizer(vocabulary=words).fit(docs)), ("model", wrong[-1])])
    assert not pipeline_guarantee(tfidf, delta=1e-6).holds
    hashing = HashingVectorizer(n_features=64, alternate_sign=False, norm=None)
    for vectorizer in (CountVectorizer(vocabulary=words), hashing):
        right = make_pipeline(vectorizer, model()).fit(docs)
        assert pipeline_guarantee(right, delta=1e-6).holds
    private = make_pipeline(PrivateCountVectorizer(20, epsilon=1.0, delta=1e-7), model()).fit(docs)
    total = pipeline_guarantee(private, delta=1.1e-6)
    parts = [step.guarantee_.n_releases for step in private]
    assert total.holds and total.n_releases == sum(parts)
    # a step after the private model learns from its per-document output (theta of private documents)
    from sklearn.cluster import KMeans
    from sklearn.preprocessing import FunctionTransformer

    after = make_pipeline(CountVectorizer(vocabulary=words), model(), KMeans(2, n_init=1, random_state=0))
    assert "kmeans" in pipeline_guarantee(after.fit(docs), delta=1e-6).reason
    harmless = make_pipeline(CountVectorizer(vocabulary=words), model(), FunctionTransformer(np.log1p))
    assert pipeline_guarantee(harmless.fit(docs), delta=1e-6).holds
    with pytest.raises(ValueError, match="nothing is private"):
        pipeline_guarantee(make_pipeline(CountVectorizer()).fit(docs), delta=1e-6)
    with pytest.raises(ValueError, match="public_steps"):
        pipeline_guarantee(private, delta=1e-6, public_steps=["nope"])
    with pytest.raises(TypeError, match="Pipeline"):
        pipeline_guarantee(private[-1], delta=1e-6)


@pytest.mark.parametrize("model", [
    PrivateSpectralLDA(2, epsilon=1.0, delta=1e-6),
    DPVariationalLDA(2, epsilon=1.0, delta=1e-6, options=DPVIOptions(n_passes=1)),
])
def test_topic_models_name_the_vocabulary_as_a_public_assumption(model):
    counts = sp.csr_matrix(np.random.default_rng(0).integers(1, 4, size=(200, 6)))
    model.fit(counts)
    assert VOCABULARY_ASSUMPTION in model.guarantee_.public
    assert "PrivateCountVectorizer" in model.guarantee_.public


# ------------------------------------------------------------------ command line


def test_pad_short_documents_is_per_document():
    counts = sp.csr_matrix(np.array([[1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0], [2, 1, 0, 5]]))
    padded = pad_short_documents(counts).toarray()
    np.testing.assert_array_equal(padded, [[3, 0, 0, 0], [0, 2, 2, 0], [1, 1, 1, 0], [2, 1, 0, 5]])
    # each row depends on that row alone
    for i in range(4):
        np.testing.assert_array_equal(pad_short_documents(counts[i]).toarray()[0], padded[i])


def _write_corpus(path, extra):
    path.write_text("\n".join(_topic_documents(800) + [extra]) + "\n", encoding="utf-8")


@pytest.mark.parametrize("method", ["spectral", "vi"])
def test_cli_private_vocabulary_neighbours_look_alike(tmp_path, monkeypatch, method):
    observations = []
    extreme = "zzz " * 100_000 + " ".join(f"u{i}" for i in range(5000))  # huge counts, many distinct words
    for name, extra in (("a", "tensor power"), ("b", extreme)):
        work = tmp_path / name
        work.mkdir()
        _write_corpus(work / "notes.txt", extra)
        monkeypatch.chdir(work)
        argv = ["lda", "fit", "notes.txt", "--method", method, "--topics", "2", "--epsilon", "4",
                "--delta", "1e-5", "--private-vocab", "50", "--vocab-share", "0.5", "--seed", "0",
                "--quiet", "--out", "model.json"]  # fmt: skip
        if method == "vi":
            argv += ["--passes", "1", "--batch-size", "100"]
        observations.append(observe_command(argv, work))
    first, second = observations
    assert first.result == 0, first.printed
    assert first.attributes == second.attributes  # exit code, files and their structure
    strip = [[line for line in o.printed.splitlines() if not line.startswith("topic")] for o in observations]
    assert strip[0] == strip[1]
    assert first.warnings == second.warnings and first.exception == second.exception
    saved = json.loads((tmp_path / "a" / "model.json").read_text())
    assert set(saved["vocabulary"]) == {"tensor", "power", "moment", "whiten", "privacy", "noise", "budget",
                                        "ledger"}
    total = saved["total_guarantee"]
    # the run spends the epsilon asked for: the linear 50/50 split scaled until the exact total is 4
    assert total["holds"] and total["delta"] == 1e-5 and 4.0 - 1e-3 <= total["epsilon"] <= 4.0
    assert saved["vocabulary_guarantee"]["epsilon"] > 2.0
    assert "vocabulary guarantee" in first.printed and "total" in first.printed
    # the model file carries the released vocabulary, so transform reads new text over it
    monkeypatch.chdir(tmp_path / "a")
    assert main(["lda", "transform", "model.json", "notes.txt", "--out", "theta.npy", "--quiet"]) == 0
    assert np.load(tmp_path / "a" / "theta.npy").shape == (801, 2)


@pytest.mark.parametrize("argv, message", [
    (["--epsilon", "1", "--delta", "1e-6"], "--private-vocab"),  # plain text without --vocab offers it
    (["--private-vocab", "10"], "--epsilon"),
    (["--epsilon", "1", "--delta", "1e-6", "--vocab-share", "0.3"], "--private-vocab"),
    (["--epsilon", "1", "--private-vocab", "10"], "--delta"),
    (["--epsilon", "1", "--delta", "1e-6", "--private-vocab", "10", "--vocab", "v.txt"], "--vocab"),
    (["--epsilon", "1", "--delta", "1e-6", "--private-vocab", "10", "--min-df", "2"], "--min-df"),
])
def test_cli_private_vocabulary_errors(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("a b c\n" * 10)
    (tmp_path / "v.txt").write_text("a\nb\n")
    assert main(["lda", "fit", "notes.txt", "--topics", "2", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_cli_private_vocabulary_refused_for_count_matrix_parts(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "parts").mkdir()
    sp.save_npz(tmp_path / "parts" / "part0.npz", sp.csr_matrix(np.ones((20, 4), dtype=np.int64)))
    argv = ["lda", "fit", "parts", "--topics", "2", "--epsilon", "1", "--delta", "1e-6",
            "--private-vocab", "3"]
    assert main(argv) == 2
    assert "--private-vocab" in capsys.readouterr().err


def test_cli_says_when_fewer_words_pass_than_asked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _write_corpus(tmp_path / "notes.txt", "tensor power")
    argv = ["lda", "fit", "notes.txt", "--topics", "2", "--epsilon", "4", "--delta", "1e-5",
            "--private-vocab", "50", "--vocab-share", "0.5", "--seed", "0", "--out", "model.json"]
    assert main(argv) == 0
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert "private vocabulary: 8 words" in text
    assert "only 8 of the 50 words asked for passed the noisy threshold" in text and "--epsilon" in text
    (line,) = [line for line in text.splitlines() if "words asked for passed" in line]  # said once
    assert "max_words_per_document" not in line and "--max-doc-words" in line  # in the command's words
    # a warning, not a progress line: --quiet does not hide it
    assert main([*argv, "--quiet"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    shortfall = [line for line in err if "words asked for passed" in line]
    assert len(shortfall) == 1 and shortfall[0].startswith("dptensor lda fit: warning: only 8 of the 50")
    assert shortfall[0].endswith("(ReleaseUtilityWarning)") and "--vocab-share" in shortfall[0]


def test_cli_private_vocabulary_worst_case_calibration_pads_short_documents(tmp_path, monkeypatch):
    """--calibration classic falls back to the worst-case releases (>= 3 tokens per document): a document
    that the released vocabulary leaves short is padded, so its neighbour is not an error naming its row."""
    observations = []
    for name, extra in (("a", "tensor power moment"), ("b", "zzzq")):
        work = tmp_path / name
        work.mkdir()
        _write_corpus(work / "notes.txt", extra)
        monkeypatch.chdir(work)
        argv = ["lda", "fit", "notes.txt", "--topics", "2", "--epsilon", "1", "--delta", "1e-5",
                "--private-vocab", "50", "--vocab-share", "0.5", "--calibration", "classic", "--seed", "0",
                "--quiet", "--out", "model.json"]  # fmt: skip
        observations.append(observe_command(argv, work))
    first, second = observations
    assert first.result == 0 and second.result == 0, second.printed
    assert first.attributes == second.attributes
    assert "padded" not in first.printed  # --quiet; the padding is a public consequence of the options


@pytest.mark.parametrize("extra", [
    ["--budget-split", "e3=1"],  # the clipped releases are m1, m2, e3
    ["--method", "vi", "--accountant", "paper"],  # unproven, without --allow-unproven
])
def test_cli_private_vocabulary_is_not_charged_for_a_refused_model(tmp_path, monkeypatch, capsys, extra):
    monkeypatch.chdir(tmp_path)
    _write_corpus(tmp_path / "notes.txt", "tensor power")
    argv = ["lda", "fit", "notes.txt", "--topics", "2", "--epsilon", "1", "--delta", "1e-6",
            "--private-vocab", "20", "--ledger", "budget.sqlite", "--quiet", *extra]
    assert main(["budget", "create", "budget.sqlite", "--epsilon", "10", "--delta", "1e-4"]) == 0
    assert main(argv) == 2
    assert BudgetLedger("budget.sqlite").charges() == []
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_cli_private_vocabulary_refuses_a_public_corpus(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _write_corpus(tmp_path / "notes.txt", "tensor power")
    argv = ["lda", "fit", "notes.txt", "--topics", "2", "--epsilon", "1", "--delta", "1e-6",
            "--private-vocab", "20", "--public-corpus", "notes.txt"]
    assert main(argv) == 2
    assert "--public-corpus" in capsys.readouterr().err


@pytest.mark.parametrize("method", [[], ["--method", "vi", "--passes", "1"]])
def test_cli_private_vocabulary_is_not_charged_when_the_ledger_cannot_pay_for_the_model(
    tmp_path, monkeypatch, capsys, method
):
    """The ledger is asked for the whole run (vocabulary and model composed) before the first charge."""
    monkeypatch.chdir(tmp_path)
    _write_corpus(tmp_path / "notes.txt", "tensor power")
    argv = ["lda", "fit", "notes.txt", "--topics", "2", "--epsilon", "4", "--delta", "1e-6",
            "--private-vocab", "20", "--vocab-share", "0.5", "--ledger", "budget.sqlite", "--quiet", *method]
    # epsilon 2.5 at delta 1e-6 pays for the vocabulary (1.90) but not for it and the model composed (2.83)
    assert main(["budget", "create", "budget.sqlite", "--epsilon", "2.5", "--delta", "1e-6"]) == 0
    vocabulary = PrivateCountVectorizer(20, epsilon=2.0, delta=0.5e-6).planned_guarantee()
    assert BudgetLedger("budget.sqlite").would_spend(vocabulary) <= 2.5  # the old order charged it
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the vocabulary and the model of this run together" in err and "Nothing was charged" in err
    assert len(err.strip().splitlines()) == 1
    assert BudgetLedger("budget.sqlite").charges() == []  # the ledger is as it was
    # a ledger that can pay for both charges both: the vocabulary, then the model
    assert main(["budget", "create", "enough.sqlite", "--epsilon", "10", "--delta", "1e-4"]) == 0
    argv[argv.index("budget.sqlite")] = "enough.sqlite"
    assert main(argv) == 0
    assert len(BudgetLedger("enough.sqlite").charges()) == 2


def test_planned_guarantees_are_what_the_fits_charge(tmp_path):
    """``planned_guarantee`` (used to check a pipeline's budget) equals the fitted ``guarantee_``."""
    texts = [f"tensor power method topic{i % 7} model privacy noise budget" for i in range(300)]
    vectorizer = PrivateCountVectorizer(20, epsilon=4.0, delta=1e-6)
    planned = vectorizer.planned_guarantee()
    assert vectorizer.fit(texts).guarantee_ == planned
    counts = vectorizer.transform(texts)
    for model in (PrivateSpectralLDA(2, 1.0, epsilon=1.0, delta=1e-6, random_state=0),
                  DPVariationalLDA(2, epsilon=1.0, delta=1e-6, random_state=0,
                                   options=DPVIOptions(n_passes=1))):
        spectral = isinstance(model, PrivateSpectralLDA)
        planned = model.planned_guarantee(*(counts.shape if spectral else counts.shape[:1]))
        assert model.fit(counts).guarantee_ == planned


def _zipf_documents(n_documents: int, distinct: int, seed: int = 0) -> list[list[str]]:
    """Documents of ``distinct`` words drawn from the Zipf--Mandelbrot law of the vocabulary planner.

    28 000 words make the law's normalising constant ``1 / sum_r (r + B)^-S`` equal to ``C``.
    """
    ranks = np.arange(1, 28_001, dtype=np.float64)
    p = (ranks + ZIPF_OFFSET) ** -ZIPF_EXPONENT
    p /= p.sum()
    assert 1.0 / ((ranks + ZIPF_OFFSET) ** -ZIPF_EXPONENT).sum() == pytest.approx(ZIPF_CONSTANT, rel=0.05)
    draws = np.random.default_rng(seed).choice(ranks.size, size=(n_documents, distinct), p=p)
    return [[f"w{r}" for r in row] for row in draws]


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_predicted_vocabulary_size_matches_a_release_on_a_zipf_corpus(epsilon):
    documents = _zipf_documents(20_000, 10)
    distinct = float(np.mean([len(set(d)) for d in documents]))
    predicted = predicted_vocabulary_size(len(documents), 2000, epsilon, 1e-6, 64, distinct)
    released = np.mean([len(private_vocabulary(documents, 2000, epsilon=epsilon, delta=1e-6,
                                               noise=insecure_test_noise(seed)).words) for seed in range(2)])
    assert released > 20
    assert predicted == pytest.approx(released, rel=0.25)


def test_predicted_vocabulary_size_is_capped_and_monotone():
    sizes = [predicted_vocabulary_size(50_000, 800, e, 1e-6, 64, 10) for e in (0.2, 0.5, 1.0, 4.0, 100.0)]
    assert all(a < b for a, b in itertools.pairwise(sizes[:4])) and sizes[-1] == 800
    assert predicted_vocabulary_size(10**5, 10**4, 1, 1e-6) > predicted_vocabulary_size(10**4, 10**4, 1, 1e-6)
    assert predicted_vocabulary_size(10, 100, 1, 1e-6) == pytest.approx(0.0, abs=1e-3)
    # longer documents (up to m) spread a document's unit norm over more words: sqrt(n) N C / (r + B)^S
    assert predicted_vocabulary_size(10**5, 10**4, 1, 1e-6, 64, 30) > predicted_vocabulary_size(
        10**5, 10**4, 1, 1e-6, 64, 10)
    assert predicted_vocabulary_size(10**5, 10**4, 1, 1e-6, 8, 30) == predicted_vocabulary_size(
        10**5, 10**4, 1, 1e-6, 8, 8)


def test_cli_prints_the_predicted_vocabulary_and_reports_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _write_corpus(tmp_path / "notes.txt", "tensor power")
    argv = ["lda", "fit", "notes.txt", "--topics", "2", "--epsilon", "4", "--delta", "1e-5",
            "--private-vocab", "50", "--vocab-share", "0.5", "--seed", "0", "--report", "r.html"]
    assert main(argv) == 0
    text = "".join(capsys.readouterr())
    predicted = predicted_vocabulary_size(801, 50, 2.0, 5e-6)
    assert "of the 50 asked (--private-vocab" in text  # the pre-fit verdict
    assert f"private vocabulary: 8 words (released under DP; the planner predicted {predicted:.0f})" in text
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Private vocabulary" in page and "words asked" in page and "words released" in page
    assert "words predicted by the planner" in page and "Vocabulary guarantee" in page
    assert main(["lda", "plan", "-n", "801", "-V", "50", "-k", "2", "--epsilon", "4", "--delta", "1e-5",
                 "--vocab-share", "0.5"]) == 0
    out = capsys.readouterr().out
    assert f"V={predicted:.0f} predicted of the 50 asked" in out and "m=64, 10 distinct words" in out


def test_cli_says_what_was_charged_when_the_vocabulary_keeps_fewer_words_than_topics(
    tmp_path, monkeypatch, capsys
):
    """A released vocabulary of fewer words than --topics stops the fit after the vocabulary's charge
    alone, in one line naming the flags and what was charged (not a Python error about n_components)."""
    monkeypatch.chdir(tmp_path)
    _write_corpus(tmp_path / "notes.txt", "tensor power")
    assert main(["budget", "create", "budget.sqlite", "--epsilon", "10", "--delta", "1e-4"]) == 0
    argv = ["lda", "fit", "notes.txt", "--topics", "5", "--epsilon", "0.05", "--delta", "1e-6",
            "--private-vocab", "200", "--ledger", "budget.sqlite", "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "fewer than the 5 topics (--topics)" in err and "the model's was not" in err
    assert "n_components" not in err and "max_words_per_document" not in err
    assert len(err.strip().splitlines()) == 1
    [charge] = BudgetLedger("budget.sqlite").charges()  # the vocabulary's release only
    assert "vocabulary" in charge.description and charge.epsilon < 0.05
    assert f"epsilon {charge.epsilon:g}" in err


@pytest.mark.parametrize("method", [[], ["--method", "vi", "--passes", "1"]])
def test_cli_a_released_vocabulary_below_k_stops_the_spectral_fit_but_not_dp_vi(
    tmp_path, monkeypatch, capsys, method
):
    """Two words in every document and one of its own: the vocabulary keeps exactly the two. The
    spectral fit (k = 3) cannot use them and says so after the vocabulary's charge; DP-VI fits them."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("".join(f"alpha beta own{i}\n" for i in range(3000)))
    assert main(["budget", "create", "budget.sqlite", "--epsilon", "10", "--delta", "1e-4"]) == 0
    argv = ["lda", "fit", "notes.txt", "--topics", "3", "--epsilon", "2", "--delta", "1e-6",
            "--private-vocab", "50", "--ledger", "budget.sqlite", "--quiet", *method]
    code = main(argv)
    err = capsys.readouterr().err
    charges = BudgetLedger("budget.sqlite").charges()
    if method:
        assert code == 0 and len(charges) == 2  # the vocabulary, then the model
        return
    assert code == 2 and "kept 2 words, fewer than the 3 topics (--topics)" in err
    assert [line for line in err.splitlines() if ": error: " in line] == [err.strip().splitlines()[-1]]
    [charge] = charges
    assert "vocabulary" in charge.description


def test_cli_the_below_k_stop_looks_alike_on_neighbouring_corpora(tmp_path, monkeypatch):
    """The stop after a too-small vocabulary: one document replaced by an extreme one (huge counts,
    5000 distinct words) or by an empty line gives the same exit code, lines, warnings and files."""
    observations = []
    extreme = "zzz " * 100_000 + " ".join(f"u{i}" for i in range(5000))
    for name, last in (("a", "alpha beta own2999"), ("b", extreme), ("c", "")):
        work = tmp_path / name
        work.mkdir()
        lines = [f"alpha beta own{i}" for i in range(2999)] + [last]
        (work / "notes.txt").write_text("\n".join(lines) + "\n")
        monkeypatch.chdir(work)
        argv = ["lda", "fit", "notes.txt", "--topics", "3", "--epsilon", "2", "--delta", "1e-6",
                "--private-vocab", "50", "--quiet", "--out", "model.json"]
        observations.append(observe_command(argv, work))
    first = observations[0]
    assert first.result == 2 and "kept # words, fewer than the # topics" in first.printed  # numbers masked
    for other in observations[1:]:
        assert other.attributes == first.attributes  # exit code; no file written
        assert other.printed == first.printed
        assert other.warnings == first.warnings and other.exception == first.exception
