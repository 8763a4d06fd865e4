"""The privacy-utility planner of PrivateSpectralLDA: scalings, suggestions, CLI, and the fit's warning."""

import warnings

import numpy as np
import pytest

from dptensor.cli import main
from dptensor.models import PrivateSpectralLDA
from dptensor.models.topics.plan import GOOD_LEVEL, NOISE_LEVEL, plan_private_lda
from dptensor.privacy import UtilityWarning
from dptensor.privacy.audit import observable_differences, observe


def test_prediction_scales_as_the_formula_says():
    def snr(n=40000, k=10, epsilon=1.0, length=7):
        return plan_private_lda(n, 2000, k, 1.0, epsilon, 1e-6, typical_length=length).snr

    base = plan_private_lda(40000, 2000, 10, 1.0, 1.0, 1e-6, typical_length=7)
    assert snr(n=80000) == pytest.approx(2 * base.snr) and snr(length=14) == pytest.approx(2 * base.snr)
    assert snr(k=5) == pytest.approx(2 * base.snr) and snr(epsilon=4.0) > 3 * base.snr
    assert base.snr == pytest.approx(base.signal / base.noise)


def test_suggestions_reach_the_good_level():
    plan = plan_private_lda(44795, 2000, 10, 1.0, 1.0, 1e-6, typical_length=7)
    assert plan.verdict == "noisy topics" and NOISE_LEVEL <= plan.snr < GOOD_LEVEL
    s = plan.suggestions
    for kwargs in ({"n_documents": s["n_documents"]}, {"n_words": s["n_words"]},
                   {"n_components": s["n_components"]}):  # fmt: skip
        args = {"n_documents": 44795, "n_words": 2000, "n_components": 10, **kwargs}
        again = plan_private_lda(args["n_documents"], args["n_words"], args["n_components"], 1.0, 1.0, 1e-6,
                                 typical_length=7)  # fmt: skip
        assert again.snr >= GOOD_LEVEL * 0.999, kwargs
    again = plan_private_lda(44795, 2000, 10, 1.0, s["epsilon"], 1e-6, typical_length=7)
    assert again.snr >= GOOD_LEVEL * 0.999
    assert "N >=" in plan.describe()
    tiny = plan_private_lda(100, 2000, 10, 1.0, 0.1, 1e-6)
    assert tiny.verdict == "no better than noise"


@pytest.mark.parametrize("kwargs, message", [
    ({"n_documents": 2}, "n_documents"), ({"n_components": 30, "n_words": 20}, "n_components"),
    ({"delta": 1.5}, "delta"), ({"typical_length": 2}, "typical_length"), ({"epsilon": -1}, "epsilon"),
])  # fmt: skip
def test_bad_planner_input(kwargs, message):
    args = {"n_documents": 1000, "n_words": 50, "n_components": 3, "alpha0": 1.0, "epsilon": 1.0,
            "delta": 1e-6, **kwargs}  # fmt: skip
    typical = args.pop("typical_length", None)
    with pytest.raises(ValueError, match=message):
        plan_private_lda(*args.values(), typical_length=typical)


def test_plan_command(capsys):
    assert main(["lda", "plan", "-n", "44795", "-V", "2000", "-k", "10", "--epsilon", "1", "--delta", "1e-6",
                 "--typical-length", "7"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "signal-to-noise" in out and "noisy topics" in out
    assert main(["lda", "plan", "-n", "100", "-V", "20", "-k", "3", "--epsilon", "1", "--delta", "3"]) == 2
    assert "--delta" in capsys.readouterr().err


def test_fit_warns_from_public_inputs_only():
    rng = np.random.default_rng(0)
    X = rng.poisson(0.5, (200, 40)).astype(float)
    Y = X.copy()
    Y[0] = 0
    Y[0, 3] = 1e300

    def fit(x):
        return PrivateSpectralLDA(3, 1.0, epsilon=0.5, delta=1e-6, random_state=0).fit(x)

    a, b = observe(fit, X), observe(fit, Y)
    assert [w for w in a.warnings if w[0] == "UtilityWarning"]
    assert observable_differences(a, b) == []
    big = plan_private_lda(10**7, 40, 3, 1.0, 8.0, 1e-6)
    assert big.snr > NOISE_LEVEL
    with warnings.catch_warnings():
        warnings.simplefilter("error", UtilityWarning)
        # the warning is decided before the documents are read: a plan that works does not warn
        model = PrivateSpectralLDA(3, 1.0, epsilon=8.0, delta=1e-6, random_state=0)
        model._warn_if_hopeless(10**7, 40)


def test_auto_whitening_words_from_public_sizes_only():
    from dptensor.models.topics.plan import (
        WHITENING_WORDS_LEVEL,
        WHITENING_WORDS_MIN,
        _snr,
        auto_whitening_words,
    )

    def words(n, d=2000, epsilon=1.0):
        return auto_whitening_words(n, d, 10, 1.0, epsilon, 1e-6)

    # small corpora whiten on the 300 most frequent words; the count grows with N and epsilon, never above d
    assert words(50000) == WHITENING_WORDS_MIN == 300 and words(50000, d=200) == 200
    assert words(50000, epsilon=4.0) == 500  # the first step above the minimum
    sizes = [words(n) for n in (10**4, 10**5, 3 * 10**5, 10**6, 10**7)]
    assert sizes == sorted(sizes) and sizes[0] == 300 and sizes[-1] == 2000
    assert words(10**6) == 2000 and words(10**7, d=100000) >= 5000 and words(10**4, d=100000) == 300
    assert words(50000, epsilon=1.0) <= words(50000, epsilon=8.0)
    # a size above the minimum is chosen only where the planner predicts the level on it
    for n in (2 * 10**5, 5 * 10**5):
        size = words(n)
        if size > WHITENING_WORDS_MIN:
            assert _snr(n, size, 10, 1.0, 1.0, 1e-6, 10.0, "analyze-gauss")[0] >= WHITENING_WORDS_LEVEL
    model = PrivateSpectralLDA(10, epsilon=1.0, delta=1e-6)
    assert model._whitened_words(50000, 2000) == 300
    assert model.set_params(whitening_words=None)._whitened_words(50000, 2000) == 2000
    assert model.set_params(whitening_words=800)._whitened_words(50000, 2000) == 800
    assert model.set_params(whitening_words=8000)._whitened_words(50000, 2000) == 2000
    assert model.set_params(whitening_words="auto", clip=None)._whitened_words(50000, 2000) == 2000


def test_plan_reports_the_whitening_words_of_the_default_fit():
    plan = plan_private_lda(50000, 2000, 10, 1.0, 1.0, 1e-6, typical_length=7)
    assert plan.whitening_words == 300
    assert plan.whitening_snr == pytest.approx(2000 / 300 * plan.snr, rel=1e-9)
    assert "the default fit releases M2 on the 300 most frequent words" in plan.describe()
    big = plan_private_lda(10**6, 2000, 10, 1.0, 1.0, 1e-6)
    assert big.whitening_words == 2000 and big.whitening_snr == pytest.approx(big.snr)
    assert plan_private_lda(50000, 2000, 10, 1.0, 1.0, 1e-6, suggest=False).whitening_words is None
