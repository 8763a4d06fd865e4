"""SingleTopicModel: recovery, the guarantee and its calibration, misuse, side channels, audits."""

from __future__ import annotations

import itertools
import math
import warnings

import dp_accounting
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.utils._param_validation import InvalidParameterError

from dptensor import SingleTopicModel
from dptensor.datasets import make_single_topic_corpus
from dptensor.metrics import e_comp
from dptensor.models.topics.single_topic_moments import check_documents, third_moment
from dptensor.privacy import (
    EpsilonDeltaDpEvent,
    PrivacyWarning,
    WhitenedDocumentNeighbouring,
    compose,
    event_epsilon,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_pure_epsilon,
    gaussian_sigma_analytic,
    insecure_test_noise,
)
from dptensor.privacy.audit import epsilon_lower_bound, observable_differences, observe

MECHANISMS = ("agn", "avn", "dp_tpm")


@pytest.fixture(scope="module")
def corpus():
    return make_single_topic_corpus(100_000, 10, 5, random_state=0)


def _model(mechanism=None, epsilon=None, delta=None, **kwargs) -> SingleTopicModel:
    params = {"n_words": 10, "input": "tokens", "random_state": 0}
    params.update(kwargs)
    return SingleTopicModel(kwargs.pop("n_components", 5) if "n_components" in kwargs else 5,
                            mechanism=mechanism, epsilon=epsilon, delta=delta,
                            **{k: v for k, v in params.items() if k != "n_components"})  # fmt: skip


def test_recovers_topics_and_weights_without_privacy(corpus):
    model = _model().fit(corpus.tokens)
    assert model.components_.shape == (5, 10) and model.weights_.shape == (5,)
    assert e_comp(corpus.topics.T, model.components_.T, matching="hungarian") < 0.05  # observed 0.02
    np.testing.assert_allclose(np.sort(model.weights_), np.sort(corpus.weights), atol=0.05)
    assert not hasattr(model, "guarantee_")
    projected = _model(simplex=True).fit(corpus.tokens).components_
    assert np.all(projected >= 0) and np.allclose(projected.sum(axis=1), 1.0)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_private_fit_approaches_non_private_at_large_budget(corpus, mechanism):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        model = _model(mechanism, 1e4, 1e-5, noise=insecure_test_noise(0)).fit(corpus.tokens)
    clean = _model().fit(corpus.tokens)
    assert e_comp(corpus.topics.T, model.components_.T) < 1.5 * e_comp(corpus.topics.T, clean.components_.T)
    assert not model.guarantee_.holds and math.isinf(model.guarantee_.epsilon)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_guarantee_states_and_composes(corpus, mechanism):
    eps, delta, n = 1.0, 1e-6, corpus.n_documents
    g = _model(mechanism, eps, delta).fit(corpus.tokens).guarantee_
    assert g.holds and g.claim == "proved" and g.epsilon == eps and g.delta == delta
    assert g.neighbouring == "document" and "one document replaced" in g.protected
    assert "number of documents N" in g.public and "vocabulary size d" in g.public
    assert g.epsilon_exact <= eps
    d = g.details
    sens = math.sqrt(2) / n
    assert d["sensitivity"] == pytest.approx(sens) and d["n_documents"] == n
    # Stage 1: Analyze-Gauss on M2 at (epsilon_1, delta_1), exactly.
    assert d["epsilon_m2"] == pytest.approx(eps / 2)
    expected_delta_m2 = delta if mechanism == "avn" else delta / 2  # AVN's M3 stage is pure
    assert d["delta_m2"] == pytest.approx(expected_delta_m2)
    assert d["sigma_m2"] == pytest.approx(gaussian_sigma_analytic(eps / 2, expected_delta_m2, sens))
    assert gaussian_delta(d["sigma_m2"], d["epsilon_m2"], sens) <= d["delta_m2"]
    events = g.dp_event.events
    assert isinstance(events[0], dp_accounting.GaussianDpEvent)
    assert events[0].noise_multiplier == pytest.approx(d["sigma_m2"] / sens)
    if mechanism == "agn":
        assert gaussian_delta(d["sigma_m3"], d["epsilon_m3"], sens) <= d["delta_m3"]
        assert events[1].noise_multiplier == pytest.approx(d["sigma_m3"] / sens)
    elif mechanism == "avn":
        assert d["beta_m3"] == pytest.approx((eps / 2) / sens)  # beta = N epsilon_2 / sqrt(2)
        assert events[1] == EpsilonDeltaDpEvent(eps / 2, 0.0)
    else:
        assert events[1].count == d["tpm_releases"] == 5 * d["tpm_restarts"] * (d["tpm_iter"] + 1)
    # dp-accounting composes the stated releases to at most the stated epsilon ...
    alone = compose(g, delta=delta)
    assert alone.epsilon <= eps * 1.001 and alone.epsilon == pytest.approx(g.epsilon_exact, rel=0.02)
    # ... and two fits to less than the sum of their epsilons.
    assert compose(g, g, delta=2 * delta).epsilon < 2 * eps


@pytest.mark.parametrize(
    ("multiplier", "pure", "delta"), [(3.0, 0.5, 1e-6), (1.0, 0.1, 1e-3), (0.5, 2.0, 1e-6)]
)
def test_gaussian_plus_pure_composition_matches_pld(multiplier, pure, delta):
    """AVN's exact epsilon: the closed form agrees with dp-accounting's PLD accountant."""
    closed = gaussian_pure_epsilon(multiplier, pure, delta)
    parts = [dp_accounting.GaussianDpEvent(multiplier), EpsilonDeltaDpEvent(pure, 0.0)]
    event = dp_accounting.ComposedDpEvent(parts)
    pld = event_epsilon(event, delta)  # pessimistic discretisation: an upper bound within about 1e-3
    assert closed <= pld + 1e-9 and closed == pytest.approx(pld, abs=2e-3)
    assert closed < gaussian_epsilon(multiplier, delta) + pure  # tighter than adding the two
    assert gaussian_pure_epsilon(multiplier, 0.0, delta) == pytest.approx(gaussian_epsilon(multiplier, delta))
    assert gaussian_pure_epsilon(1e-3, 5000.0, 1e-5) > 5000.0  # no overflow at very large epsilon


def test_classic_calibration_reproduces_the_slides_and_is_refused_above_one():
    n, eps, delta = 1000, 0.8, 1e-5
    docs = make_single_topic_corpus(n, 10, 5, random_state=1).tokens
    for mechanism in ("agn", "avn"):
        g = _model(mechanism, eps, delta, calibration="classic").fit(docs).guarantee_
        e1 = eps / 2
        d1 = delta if mechanism == "avn" else delta / 2  # slide: tau_1 uses delta_1 + delta_2 for AVN
        slides = math.sqrt(2) / (n * e1) * math.sqrt(2 * math.log(1.25 / d1))
        assert g.details["sigma_m2"] == pytest.approx(slides)
        if mechanism == "agn":
            assert g.details["sigma_m3"] == pytest.approx(
                math.sqrt(2) / (n * e1) * math.sqrt(2 * math.log(1.25 / (delta / 2)))
            )
    with pytest.raises(ValueError, match="epsilon < 1.*release of the word-pair moment M2 gets epsilon=1"):
        _model("agn", 2.0, delta, calibration="classic").fit(docs)
    with pytest.raises(ValueError, match="release of the word-triple moment M3 gets epsilon=1.2"):
        _model("agn", 2.0, delta, calibration="classic", budget_split=0.4).fit(docs)


def test_misuse_is_refused_before_any_budget_is_spent():
    docs = make_single_topic_corpus(100, 10, 5, random_state=2).tokens

    class Ledger:
        charges = []

        def charge(self, guarantee, *, description=""):
            self.charges.append(description)

    with pytest.raises(ValueError, match="mechanism=None would fit without privacy"):
        _model(None, 1.0, 1e-6).fit(docs)
    with pytest.raises(ValueError, match="needs a budget"):
        _model("agn").fit(docs)
    with pytest.raises(ValueError, match="delta is required"):
        _model("agn", 1.0).fit(docs)
    with pytest.raises(ValueError, match="delta given without epsilon"):
        _model(None, None, 1e-6).fit(docs)
    with pytest.raises(ValueError, match="at most the tensor dimension 10"):
        _model("agn", 1.0, 1e-6, n_components=11).fit(docs)
    with pytest.raises(InvalidParameterError):
        _model("agn", 1.0, 1e-6, budget_split=1.0).fit(docs)
    with pytest.raises(InvalidParameterError):
        _model("laplace", 1.0, 1e-6).fit(docs)
    ledger = Ledger()
    short = [np.array([0, 1, 2])] * 5 + [np.array([3, 4])]
    with pytest.raises(ValueError, match=r"^X has documents with fewer than 3 tokens; ") as raised:
        _model("agn", 1.0, 1e-6, input="auto", ledger=ledger).fit(short)
    assert "rows" not in str(raised.value) and "5" not in str(raised.value)  # a private fit: no row, no count
    assert ledger.charges == []  # domain validation comes before the charge
    _model("agn", 1.0, 1e-6, ledger=ledger).fit(docs)
    assert len(ledger.charges) == 1 and "agn" in ledger.charges[0]


def test_secret_noise_is_fresh_and_test_noise_repeats():
    docs = make_single_topic_corpus(2000, 10, 3, random_state=3).tokens
    first = _model("agn", 1.0, 1e-6, n_components=3).fit(docs).components_
    second = _model("agn", 1.0, 1e-6, n_components=3).fit(docs).components_
    assert not np.allclose(first, second)  # same random_state, different noise
    with pytest.warns(PrivacyWarning):
        a = _model("avn", 1.0, 1e-6, n_components=3, noise=insecure_test_noise(4)).fit(docs)
    with pytest.warns(PrivacyWarning):
        b = _model("avn", 1.0, 1e-6, n_components=3, noise=insecure_test_noise(4)).fit(docs)
    np.testing.assert_array_equal(a.components_, b.components_)
    assert not a.guarantee_.holds and a.guarantee_.nominal_epsilon == 1.0


def test_sklearn_protocol_and_input_forms(corpus):
    model = _model("agn", 1.0, 1e-6, budget_split=0.3)
    cloned = clone(model)
    assert cloned.get_params() == model.get_params()
    tokens = corpus.tokens[:5000]
    counts = make_single_topic_corpus(5000, 10, 5, document_length=6, random_state=5).counts
    fitted = _model(moments="all", input="auto", n_words=None).fit(counts)
    assert fitted.n_features_in_ == 10 and fitted.n_documents_ == 5000
    clean_list = _model(input="auto").fit(list(tokens)).components_
    np.testing.assert_allclose(_model().fit(tokens).components_, clean_list)


def test_dense_and_scalable_paths_agree(corpus):
    """Without noise both paths compute the same moments; with noise, both run every mechanism."""
    tokens = corpus.tokens[:20000]
    dense = _model(noise_sampler="dense").fit(tokens)
    scalable = _model(noise_sampler="scalable").fit(tokens)
    np.testing.assert_allclose(dense.whitening_.eigenvalues, scalable.whitening_.eigenvalues, rtol=1e-8)
    np.testing.assert_allclose(np.abs(dense.whitened_tensor_).sum(), np.abs(scalable.whitened_tensor_).sum(),
                               rtol=1e-8)  # fmt: skip
    assert e_comp(dense.components_.T, scalable.components_.T) < 1e-6
    for mechanism in MECHANISMS:
        model = _model(mechanism, 5.0, 1e-6, noise_sampler="scalable").fit(tokens)
        assert model.components_.shape == (5, 10) and model.guarantee_.holds
    assert not hasattr(model, "whitened_tensor_")  # DP-TPM releases only noisy power steps


def _neighbours(seed: int, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    base = make_single_topic_corpus(300, 6, 2, random_state=seed, **kwargs).tokens
    other = base.copy()
    other[0] = [5, 5, 5] + [5] * (base.shape[1] - 3)
    return base, other


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("sampler", ["dense", "scalable"])
def test_neighbouring_pair_observes_the_same(mechanism, sampler):
    """Everything a caller sees besides the released numbers is identical between neighbours."""
    for moments, kwargs in (("first3", {}), ("all", {"document_length": 5})):
        x, x_prime = _neighbours(7, **kwargs)

        def fit(tokens, moments=moments):
            return SingleTopicModel(2, mechanism=mechanism, epsilon=1.0, delta=1e-6, n_words=6,
                                    input="tokens", moments=moments, noise_sampler=sampler,
                                    random_state=0).fit(tokens)  # fmt: skip

        first, second = observe(fit, x), observe(fit, x_prime)
        assert first.exception is None, first.exception
        assert observable_differences(first, second) == []


def test_whitened_document_relation_by_brute_force():
    """DP-TPM's sensitivities 2 rho^3 ||u||^2 / N and 2 rho^3 ||u||^3 / N bound every document swap."""
    d, k = 4, 2
    rng = np.random.default_rng(0)
    attaining = np.array([[1.5, 0.0], [-1.5, 0.0], [0.3, 0.8], [0.1, -0.4]])  # rows +-rho e_1
    for W in (rng.standard_normal((d, k)), attaining):
        rho = float(np.max(np.linalg.norm(W, axis=1)))
        relation = WhitenedDocumentNeighbouring(rho, 1)
        u = np.column_stack([np.eye(k), rng.standard_normal((k, 30))])
        for moments, lengths in (("first3", (3,)), ("all", (3, 4))):
            documents = [seq for n in lengths for seq in itertools.product(range(d), repeat=n)]
            singles = [check_documents([np.array(s)], n_words=d, moments=moments) for s in documents]
            terms = np.array([third_moment(one, moments, W) for one in singles])
            pair = np.einsum("nabc,bm,cm->nam", terms, u, u)
            triple = np.einsum("nam,am->nm", pair, u)
            ratio_pair = np.max([np.linalg.norm(pair[i] - pair, axis=1) / relation.pair_sensitivity(u)
                                 for i in range(len(documents))])  # fmt: skip
            ratio_triple = np.max([np.abs(triple[i] - triple) / relation.triple_sensitivity(u)
                                   for i in range(len(documents))])  # fmt: skip
            assert ratio_pair <= 1 + 1e-12 and ratio_triple <= 1 + 1e-12
            if W is attaining:
                assert ratio_pair == pytest.approx(1.0) and ratio_triple == pytest.approx(1.0)
    assert relation.name == "document" and relation.details() == {"row_norm_bound": rho, "n_documents": 1}


# --- empirical privacy audit on a tiny corpus (D = 3) ----------------------------------------
EPSILON, DELTA = 2.0, 1e-5
UNDER_NOISED_EPSILON = 40.0  # calibrated for 20x the budget it claims
BASE = np.array([[0, 0, 0]] * 4 + [[2, 2, 2]] * 4 + [[0, 1, 2]] * 2)


def _released_moments(model: SingleTopicModel) -> tuple[np.ndarray, np.ndarray]:
    """With K = D the release (M2 + E, M3 + E3) is recoverable exactly from the fitted attributes."""
    wh = model.whitening_
    m2 = (wh.eigenvectors * wh.eigenvalues) @ wh.eigenvectors.T
    inverse = np.linalg.inv(wh.matrix)
    t = model.whitened_tensor_
    m3 = np.tensordot(np.tensordot(np.tensordot(t, inverse, (0, 0)), inverse, (0, 0)), inverse, (0, 0))
    return m2, m3


def _audit_samples(mechanism: str, epsilon: float, runs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The statistic on X (doc 0 = (0,0,0)) and X' (doc 0 = (1,1,1)): the change of the unique entries."""
    neighbour = BASE.copy()
    neighbour[0] = [1, 1, 1]
    rng = np.random.default_rng(seed)
    out = []
    for tokens in (BASE, neighbour):
        values = []
        for _ in range(runs):
            model = SingleTopicModel(3, mechanism=mechanism, epsilon=epsilon, delta=DELTA, n_words=3,
                                     input="tokens", noise_sampler="dense", n_restarts=1, n_iter=1,
                                     random_state=rng).fit(tokens)  # fmt: skip
            m2, m3 = _released_moments(model)
            d = model.guarantee_.details
            weight3 = 1.0 / d["sigma_m3"] ** 2 if mechanism == "agn" else d["beta_m3"] / d["sensitivity"]
            values.append((m2[1, 1] - m2[0, 0]) / d["sigma_m2"] ** 2 + weight3 * (m3[1, 1, 1] - m3[0, 0, 0]))
        out.append(np.array(values))
    return out[0], out[1]


@pytest.mark.slow  # long; privacy/test_end_to_end_audit.py audits AGN's M2 and M3 releases by default
def test_audit_agn_on_a_tiny_corpus():
    # 2000 runs: at 800 the under-noised bound sat at 3.7 +- 0.25 (Clopper--Pearson's ceiling at
    # 400 test runs) and once fell to 2.86 < 3 in CI; at 2000 it is 4.6 +- 0.35 (10 repetitions).
    honest = epsilon_lower_bound(*_audit_samples("agn", EPSILON, 2000, 0), DELTA)
    under = epsilon_lower_bound(*_audit_samples("agn", UNDER_NOISED_EPSILON, 2000, 1), DELTA)
    assert honest <= EPSILON
    assert under > 1.5 * EPSILON  # the same test catches the under-noised variant


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["agn", "avn"])
def test_audit_on_a_tiny_corpus_many_runs(mechanism):
    honest = epsilon_lower_bound(*_audit_samples(mechanism, EPSILON, 5000, 2), DELTA)
    under = epsilon_lower_bound(*_audit_samples(mechanism, UNDER_NOISED_EPSILON, 5000, 3), DELTA)
    assert honest <= EPSILON
    assert under > 1.5 * EPSILON
