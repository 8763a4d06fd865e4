"""PrivateSpectralLDA: guarantee, noise laws, Procedure 1, audits, side channels, bad input."""

import math
import warnings

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp
from _helpers import topic_l1_error as _l1_error

from dptensor.datasets.lda import make_lda_corpus
from dptensor.models import PrivateSpectralLDA
from dptensor.models.topics._private_plan import CONFIG_EDGES, default_budget_split
from dptensor.models.topics._releases import check_private_counts, release_projected_m3
from dptensor.models.topics.sensitivity import m3_sensitivity
from dptensor.privacy import (
    PrivacyWarning,
    UnprovenPrivacyError,
    compose,
    enable_features,
    event_epsilon,
    insecure_test_noise,
    resolve_noise,
)
from dptensor.privacy.audit import epsilon_lower_bound, observable_differences, observe
from dptensor.privacy.lower_bound import private_lower_bound
from dptensor.privacy.mechanisms import symmetric_gaussian_tensor, whitened_symmetric_gaussian_tensor


@pytest.fixture(scope="module")
def corpus():
    return make_lda_corpus(20000, 40, 3, alpha=0.1, doc_length=50, topic_concentration=0.1, random_state=0)


@pytest.mark.parametrize("clip, releases",
                         [("auto", {"m1", "m2", "q3", "e3", "rf"}), (None, {"e4+e8", "e3"})])  # fmt: skip
def test_config1_recovers_topics_and_guarantee_holds(corpus, clip, releases):
    model = PrivateSpectralLDA(3, corpus.alpha0, epsilon=3.0, delta=1e-6, clip=clip, random_state=0)
    assert model.fit(corpus.counts) is model
    g = model.guarantee_
    assert g.holds and g.epsilon == 3.0 and g.delta == 1e-6 and g.neighbouring == "document"
    assert g.epsilon_exact <= 3.0 and "N" in g.public
    assert _l1_error(corpus.topics, model.components_) < 0.15
    np.testing.assert_allclose(model.components_.sum(axis=1), 1.0)
    assert set(model.noise_scales_) == releases
    assert sum(model.budget_split_.values()) == pytest.approx(1.0)
    # one composed dp_event; dp-accounting's PLD accountant agrees with the exact GDP total
    assert isinstance(g.dp_event, dp_accounting.ComposedDpEvent)
    assert event_epsilon(g.dp_event, 1e-6) == pytest.approx(3.0, rel=0.02)
    total = compose(g, g, delta=2e-6)
    assert total.holds and 3.0 < total.epsilon < 6.0


@pytest.mark.slow  # a statistical check of six default fits (16 passes each): run once by CI
def test_more_budget_less_error(corpus):
    errors = [
        np.mean([
            _l1_error(corpus.topics, PrivateSpectralLDA(3, corpus.alpha0, epsilon=eps, delta=1e-6,
                                                        random_state=s).fit(corpus.counts).components_)
            for s in range(3)
        ])  # fmt: skip
        for eps in (0.3, 10.0)
    ]
    assert errors[1] < errors[0]


def test_noisy_power_whitening_at_larger_vocabulary():
    c = make_lda_corpus(30000, 600, 4, alpha=0.1, doc_length=80, topic_concentration=0.02, random_state=1)
    npm = PrivateSpectralLDA(4, c.alpha0, epsilon=10.0, delta=1e-6, private_whitening="noisy-power",
                             clip=None, random_state=0).fit(c.counts)  # fmt: skip
    ag = PrivateSpectralLDA(4, c.alpha0, epsilon=10.0, delta=1e-6, private_whitening="analyze-gauss",
                            clip=None, random_state=0).fit(c.counts)  # fmt: skip
    assert npm.guarantee_.n_releases == 4 + 1 and ag.guarantee_.n_releases == 2
    assert len(npm.noise_scales_["e4+e8"]) == 4
    assert _l1_error(c.topics, npm.components_) < 0.4  # chance level is about 1.9
    assert _l1_error(c.topics, ag.components_) < 0.2


def test_push_forward_noise_has_the_law_of_whitened_d3_noise():
    """Covariance of E(W,W,W), E the d^3 'frobenius' noise, against the k^3 sampler."""
    d, k, scale, draws = 4, 2, 1.3, 6000
    rng = np.random.default_rng(0)
    U = np.linalg.qr(rng.standard_normal((d, k)))[0]
    sigma = np.array([2.0, 0.5])
    W = U / np.sqrt(sigma)
    big = symmetric_gaussian_tensor(d, scale, convention="frobenius", size=draws,
                                    noise=insecure_test_noise(1))  # fmt: skip
    pushed = np.einsum("nabc,ai,bj,ck->nijk", big, W, W, W).reshape(draws, -1)
    source = resolve_noise(insecure_test_noise(2))
    small = np.stack([whitened_symmetric_gaussian_tensor(sigma, scale, noise=source) for _ in range(draws)])
    small = small.reshape(draws, -1)
    cov_big, cov_small = np.cov(pushed.T), np.cov(small.T)
    # entries (0,0,0) variance scale^2/sigma_0^3; exact reference for the diagonal
    inv = 1.0 / np.sqrt(sigma)
    orbit = np.array([1, 3, 3, 3, 3, 3, 3, 1])[[0, 1, 2, 3, 4, 5, 6, 7]]
    exact = scale**2 * np.einsum("i,j,l->ijl", inv, inv, inv).ravel() ** 2 / orbit
    np.testing.assert_allclose(np.diag(cov_small), exact, rtol=0.08)
    np.testing.assert_allclose(np.diag(cov_big), exact, rtol=0.08)
    np.testing.assert_allclose(cov_big, cov_small, atol=0.08 * exact.max())


def test_procedure1_failure_rate_is_delta():
    source = resolve_noise(insecure_test_noise(3))
    runs, delta = 20000, 0.05
    fails = sum(private_lower_bound(1.0, 0.1, 1.0, delta, source).lower > 1.0 for _ in range(runs))
    assert abs(fails / runs - delta) < 4 * math.sqrt(delta * (1 - delta) / runs)
    # the printed procedure: Laplace scale 1/(N eps) but offset 2/(N eps) ln(1/(2 delta)) -> 2 delta^2
    printed = sum(
        private_lower_bound(1.0, 0.1, 1.0, delta, source, paper_scale=0.1).lower > 1.0 for _ in range(runs)
    )
    assert abs(printed / runs - 2 * delta**2) < 4 * math.sqrt(2 * delta**2 / runs) + 1e-4


# --- empirical audit of the e3 release on a worst-case neighbouring pair ------------------------
AUDIT_EPSILON, AUDIT_DELTA, AUDIT_RUNS = 1.0, 1e-5, 2500


def _audit_pair():
    base = [[3, 0], [3, 0], [0, 3]]
    first = sp.csr_matrix(np.array([*base, [3, 0]], dtype=float))
    second = sp.csr_matrix(np.array([*base, [0, 3]], dtype=float))
    return check_private_counts(first), check_private_counts(second)


def _audit_samples(epsilon_noise, seed):
    from dptensor.privacy.calibration import gaussian_sigma_analytic

    docs = _audit_pair()
    U = np.array([[1.0], [0.0]])  # a public basis (coherence 1)
    scale = gaussian_sigma_analytic(epsilon_noise, AUDIT_DELTA) * m3_sensitivity(0.1, 4)
    source = resolve_noise(insecure_test_noise(seed))
    out = []
    for d in docs:
        out.append(np.array([release_projected_m3(d, 0.1, U, scale, source)[0, 0, 0]
                             for _ in range(2 * AUDIT_RUNS)]))  # fmt: skip
    return out


@pytest.mark.slow  # long; privacy/test_end_to_end_audit.py audits the e3 release by default
def test_audit_m3_release_and_catch_an_under_noised_variant():
    low, high = _audit_samples(AUDIT_EPSILON, 4)
    if high.mean() < low.mean():
        low, high = high, low
    honest = epsilon_lower_bound(low, high, AUDIT_DELTA)
    low_u, high_u = _audit_samples(20 * AUDIT_EPSILON, 5)
    if high_u.mean() < low_u.mean():
        low_u, high_u = high_u, low_u
    under = epsilon_lower_bound(low_u, high_u, AUDIT_DELTA)
    assert honest <= AUDIT_EPSILON
    assert under > 1.5 * AUDIT_EPSILON


@pytest.mark.slow
def test_audit_whole_estimator_tiny_corpus():
    """The full fit (k = 1, d = 2): the released topic's first entry on neighbouring corpora."""
    first = np.array([[3, 0], [3, 0], [0, 3], [3, 0]], dtype=float)
    second = np.array([[3, 0], [3, 0], [0, 3], [0, 3]], dtype=float)

    def samples(epsilon, seed):
        rng = np.random.default_rng(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            return [np.array([
                PrivateSpectralLDA(1, 0.1, epsilon=epsilon, delta=AUDIT_DELTA, noise=insecure_test_noise(
                    int(rng.integers(2**31))), random_state=0).fit(x).components_[0, 0]
                for _ in range(2 * 1500)]) for x in (first, second)]  # fmt: skip

    low, high = samples(AUDIT_EPSILON, 0)
    assert epsilon_lower_bound(high, low, AUDIT_DELTA) <= AUDIT_EPSILON
    assert epsilon_lower_bound(low, high, AUDIT_DELTA) <= AUDIT_EPSILON


# --- side channels ---------------------------------------------------------------------------
def _neighbours(corpus, n=3000):
    first = corpus.counts[:n].tolil(copy=True)
    second = first.copy()
    second[0, :] = 0
    second[0, 5] = 40  # a very different document of the same kind (>= 3 tokens)
    return first.tocsr(), second.tocsr()


@pytest.mark.parametrize("config", [1, 2, 3, 4])
def test_neighbouring_corpora_are_indistinguishable_except_through_the_release(corpus, config):
    first, second = _neighbours(corpus)

    def fit(x):
        with enable_features("unproven"):
            return PrivateSpectralLDA(3, corpus.alpha0, epsilon=1.0, delta=1e-6, config=config,
                                      verbose=True, random_state=0).fit(x)  # fmt: skip

    a, b = observe(fit, first), observe(fit, second)
    assert a.exception is None and b.exception is None
    assert observable_differences(a, b) == []
    assert not hasattr(a.result, "whitened_tensor_") and not hasattr(a.result, "n_dropped_documents_")


def test_secure_noise_same_seed_different_output(corpus):
    # two refinement passes (not the default 16) keep every kind of release in the fit, at an eighth of
    # the passes' time
    kwargs = dict(epsilon=1.0, delta=1e-6, random_state=0, refine_passes=2)
    a = PrivateSpectralLDA(3, corpus.alpha0, **kwargs).fit(corpus.counts)
    b = PrivateSpectralLDA(3, corpus.alpha0, **kwargs).fit(corpus.counts)
    assert a.refinement_.n_passes == 2 and not np.array_equal(a.components_, b.components_)
    with pytest.warns(PrivacyWarning):
        c = PrivateSpectralLDA(3, corpus.alpha0, noise=insecure_test_noise(7), **kwargs).fit(corpus.counts)
    with pytest.warns(PrivacyWarning):
        d = PrivateSpectralLDA(3, corpus.alpha0, noise=insecure_test_noise(7), **kwargs).fit(corpus.counts)
    np.testing.assert_array_equal(c.components_, d.components_)
    assert not c.guarantee_.holds and c.guarantee_.epsilon == math.inf


def test_ledger_is_charged_once_before_the_release(corpus):
    charges = []

    class Ledger:
        def charge(self, guarantee, *, description=""):
            charges.append((guarantee, description))

    model = PrivateSpectralLDA(3, corpus.alpha0, epsilon=1.0, delta=1e-6, ledger=Ledger(), random_state=0)
    model.fit(corpus.counts[:2000])
    assert len(charges) == 1 and charges[0][0] is model.guarantee_
    with pytest.raises(ValueError, match="fewer than 3 tokens"):  # invalid input: nothing charged
        bad = np.ones((5, 4)) * [1, 1, 0, 0]
        PrivateSpectralLDA(3, 1.0, epsilon=1.0, delta=1e-6, clip=None, ledger=Ledger()).fit(bad)
    with pytest.raises(ValueError, match="negative counts"):  # clipped (default): invalid, nothing charged
        PrivateSpectralLDA(3, 1.0, epsilon=1.0, delta=1e-6, ledger=Ledger()).fit(-np.ones((5, 4)))
    for complex_counts in (np.full((5, 4), 3.0) + 1j, sp.csr_matrix(np.full((5, 4), 3.0) + 1j)):
        with pytest.raises(TypeError, match="real word counts"):  # not silently cast to their real part
            PrivateSpectralLDA(3, 1.0, epsilon=1.0, delta=1e-6, ledger=Ledger()).fit(complex_counts)
    assert len(charges) == 1


@pytest.mark.parametrize("config", [2, 3, 4])
def test_paper_configurations_need_the_opt_in_and_do_not_hold(corpus, config):
    model = PrivateSpectralLDA(3, corpus.alpha0, epsilon=1.0, delta=1e-6, config=config, random_state=0)
    with pytest.raises(UnprovenPrivacyError, match="rotate|gamma_s|Theorem 7"):
        model.fit(corpus.counts[:2000])
    with enable_features("unproven"):
        model.fit(corpus.counts[:2000])
    g = model.guarantee_
    assert not g.holds and g.epsilon == math.inf and g.nominal_epsilon == 1.0 and g.claim == "paper"
    assert set(model.budget_split_) == set(CONFIG_EDGES[config])
    assert "sigma_k" in model.noise_scales_


def test_paper_sensitivity_and_classic_calibration_are_labelled(corpus):
    with pytest.raises(UnprovenPrivacyError, match="1/N"):
        PrivateSpectralLDA(3, 1.0, epsilon=1.0, delta=1e-6, sensitivity="paper").fit(
            corpus.counts[:500]
        )
    with enable_features("unproven"):
        paper = PrivateSpectralLDA(3, corpus.alpha0, epsilon=1.0, delta=1e-6, sensitivity="paper",
                                   shared_m2=False, calibration="classic")
        paper.fit(corpus.counts[:2000])
    assert not paper.guarantee_.holds and set(paper.noise_scales_) == {"e4", "e8", "e3"}
    # classic with every per-edge epsilon < 1 is a valid (looser) calibration: it holds
    classic = PrivateSpectralLDA(3, corpus.alpha0, epsilon=0.9, delta=1e-6, calibration="classic",
                                 random_state=0).fit(corpus.counts[:2000])  # fmt: skip
    assert classic.guarantee_.holds and classic.guarantee_.epsilon_exact < 0.9
    with pytest.raises(UnprovenPrivacyError, match="Theorem A.1"):
        PrivateSpectralLDA(3, 1.0, epsilon=6.0, delta=1e-6, calibration="classic").fit(corpus.counts[:500])


def test_default_budget_split_is_data_free_and_follows_the_utility_bound():
    low = default_budget_split(1, 3, 100, 0.1)
    high = default_budget_split(1, 3, 100, 1000.0)
    assert sum(low.values()) == pytest.approx(1.0) and sum(high.values()) == pytest.approx(1.0)
    assert high["e3"] > 0.9 > low["e3"]  # mixed topics: the whitened tensor needs most of the budget
    npm = default_budget_split(1, 3, 100, 1.0, whitening="noisy-power", n_power_steps=4)
    assert npm["e3"] < default_budget_split(1, 3, 100, 1.0)["e3"]
    assert default_budget_split(3, 3, 100, 1.0) == {e: 0.25 for e in CONFIG_EDGES[3]}


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ({"epsilon": None}, ValueError, "needs a budget"),
        ({"epsilon": 0.0}, ValueError, "epsilon"),
        ({"epsilon": -1.0}, ValueError, "epsilon"),
        ({"delta": None}, ValueError, "delta is required"),
        ({"delta": 0.0}, ValueError, "delta"),
        ({"delta": 1.0}, ValueError, "delta"),
        ({"n_components": 41}, ValueError, "exceeds the vocabulary size"),
        ({"config": 5}, ValueError, "config"),
        ({"budget_split": {"e3": 1.0}}, ValueError, "missing"),
        ({"budget_split": {"e3": 1.0, "e4": 0.0, "e8": 1.0}}, ValueError, "budget_split"),
        ({"sensitivity": "loose"}, ValueError, "sensitivity"),
        ({"noise": 3}, ValueError, "noise"),
    ],
)
def test_bad_parameters(corpus, params, error, message):
    kwargs = {"n_components": 3, "alpha0": 0.3, "epsilon": 1.0, "delta": 1e-6, **params}
    with pytest.raises(error, match=message):
        PrivateSpectralLDA(**kwargs).fit(corpus.counts[:500])


def test_short_documents_are_an_error_naming_no_count_and_no_row(corpus):
    counts = corpus.counts[:100].tolil(copy=True)
    counts[7, :] = 0
    counts[7, 0] = 2
    counts[42, :] = 0
    with pytest.raises(ValueError, match=r"^X has documents with fewer than 3 tokens; a private") as raised:
        PrivateSpectralLDA(3, 0.3, epsilon=1.0, delta=1e-6, clip=None).fit(counts.tocsr())
    assert not any(str(n) in str(raised.value) for n in (2, 7, 42))  # no count, no row
    with pytest.raises(ValueError, match="at least 3"):
        PrivateSpectralLDA(1, 0.3, epsilon=1.0, delta=1e-6).fit(np.full((2, 4), 2.0))
    # clipped (the default): short documents get weight 0, N stays the number of rows
    model = PrivateSpectralLDA(3, 0.3, epsilon=1.0, delta=1e-6, random_state=0).fit(counts.tocsr())
    assert model.n_documents_ == 100


def test_estimator_conventions():
    checks = pytest.importorskip("sklearn.utils.estimator_checks")
    from sklearn.base import clone

    model = PrivateSpectralLDA(3, 0.5, epsilon=1.0, delta=1e-6, config=1)
    assert clone(model).get_params() == model.get_params()
    for check in ("check_no_attributes_set_in_init", "check_get_params_invariance", "check_set_params",
                  "check_parameters_default_constructible"):  # fmt: skip
        getattr(checks, check)("PrivateSpectralLDA", PrivateSpectralLDA(3, 1.0, epsilon=1.0, delta=1e-6))


def test_config4_pairs_each_topic_with_its_own_alpha(monkeypatch):
    """With the noise switched off, Configuration 4 releases the clean model: topics and alpha paired."""
    from dptensor.models import SpectralLDA
    from dptensor.privacy.noise import NoiseSource

    monkeypatch.setattr(NoiseSource, "add_gaussian", lambda self, x, scale: np.array(x, dtype=float))
    corpus = make_lda_corpus(20000, 40, 3, alpha=np.array([0.5, 0.2, 0.05]), doc_length=50,
                             topic_concentration=0.1, random_state=0)  # fmt: skip
    clean = SpectralLDA(3, corpus.alpha0, random_state=0, refine=None).fit(corpus.counts)  # the moments
    with enable_features("unproven"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = PrivateSpectralLDA(3, corpus.alpha0, epsilon=1.0, delta=1e-6, config=4,
                                   random_state=0).fit(corpus.counts)  # fmt: skip
    np.testing.assert_allclose(model.alpha_, clean.alpha_, rtol=1e-10)
    np.testing.assert_allclose(model.components_, clean.components_, atol=1e-10)
