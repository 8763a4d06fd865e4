"""The privacy-utility planner of PrivateSpectralLDA: scalings, suggestions, CLI, and the fit's warning."""

import re
import warnings

import numpy as np
import pytest

from dptensor.cli import main
from dptensor.models import PrivateSpectralLDA
from dptensor.models.topics._private_plan import REFINE_PASSES, REFINE_SHARE, moments_epsilon
from dptensor.models.topics.plan import (
    GOOD_LEVEL,
    NOISE_LEVEL,
    model_words,
    plan_private_lda,
    plan_private_spectral_lda,
)
from dptensor.privacy import UtilityWarning, compose
from dptensor.privacy.audit import observable_differences, observe


def test_prediction_scales_as_the_formula_says():
    def snr(n=40000, k=10, epsilon=1.0, length=7):  # on every word: the formula of one release (one budget)
        return plan_private_lda(n, 2000, k, 1.0, epsilon, 1e-6, typical_length=length,
                                whitening_words=None, refine=None).snr

    base = plan_private_lda(40000, 2000, 10, 1.0, 1.0, 1e-6, typical_length=7, whitening_words=None,
                            refine=None)
    assert snr(n=80000) == pytest.approx(2 * base.snr) and snr(length=14) == pytest.approx(2 * base.snr)
    assert snr(k=5) == pytest.approx(2 * base.snr) and snr(epsilon=4.0) > 3 * base.snr
    assert base.snr == pytest.approx(base.signal / base.noise)
    # passes chosen by refine_passes="auto" are made only where they measured better than the moments on
    # the whole budget: the verdict is that release's; passes set by hand leave the M2 release its share
    whole = plan_private_lda(10**6, 2000, 10, 1.0, 1.0, 1e-6, typical_length=7, whitening_words=None,
                             refine=None)  # fmt: skip
    chosen = plan_private_lda(10**6, 2000, 10, 1.0, 1.0, 1e-6, typical_length=7, whitening_words=None)
    assert chosen.refine_passes == REFINE_PASSES and chosen.refinement_chosen
    assert "passes are made only where" in chosen.describe()
    assert chosen.snr == pytest.approx(whole.snr, rel=1e-9)
    by_hand = plan_private_lda(10**6, 2000, 10, 1.0, 1.0, 1e-6, typical_length=7, whitening_words=None,
                               refine_passes=4)  # fmt: skip
    assert by_hand.refine_passes == 4 and not by_hand.refinement_chosen
    assert "predicted at the rest" in by_hand.describe()
    moments = plan_private_lda(10**6, 2000, 10, 1.0, moments_epsilon(1.0, 1e-6, REFINE_SHARE), 1e-6,
                               typical_length=7, whitening_words=None, refine=None)  # fmt: skip
    assert by_hand.snr == pytest.approx(moments.snr, rel=1e-9) and by_hand.snr < chosen.snr
    # a share set by hand is not the measured rule either: the moments are predicted at what it leaves
    shared = plan_private_lda(10**6, 2000, 10, 1.0, 1.0, 1e-6, typical_length=7, whitening_words=None,
                              refine_share=0.99)  # fmt: skip
    assert shared.refine_passes == REFINE_PASSES and not shared.refinement_chosen
    assert shared.snr < 0.2 * chosen.snr


def test_suggestions_reach_the_good_level():
    plan = plan_private_lda(44795, 2000, 10, 1.0, 1.0, 1e-6, typical_length=7, whitening_words=None)
    assert plan.verdict == "noisy topics" and NOISE_LEVEL <= plan.snr < GOOD_LEVEL
    s = plan.suggestions
    for kwargs in ({"n_documents": s["n_documents"]}, {"n_words": s["n_words"]},
                   {"n_components": s["n_components"]}):  # fmt: skip
        args = {"n_documents": 44795, "n_words": 2000, "n_components": 10, **kwargs}
        again = plan_private_lda(args["n_documents"], args["n_words"], args["n_components"], 1.0, 1.0, 1e-6,
                                 typical_length=7, whitening_words=None)  # fmt: skip
        assert again.snr >= GOOD_LEVEL * 0.999, kwargs
    again = plan_private_lda(44795, 2000, 10, 1.0, s["epsilon"], 1e-6, typical_length=7, whitening_words=None)
    assert again.snr >= GOOD_LEVEL * 0.999
    assert "N >=" in plan.describe()
    # the default fit (whitening_words="auto"): suggestions for its own release reach the level too
    fit = plan_private_lda(5000, 2000, 10, 1.0, 1.0, 1e-6)
    assert fit.verdict == "noisy topics" and fit.whitening_words == 300
    s = fit.suggestions
    for kwargs in ({"n_documents": s["n_documents"]}, {"n_words": s["n_words"]},
                   {"n_components": s["n_components"]}, {"epsilon": s["epsilon"]}):  # fmt: skip
        args = {"n_documents": 5000, "n_words": 2000, "n_components": 10, "epsilon": 1.0, **kwargs}
        again = plan_private_lda(args["n_documents"], args["n_words"], args["n_components"], 1.0,
                                 args["epsilon"], 1e-6)  # fmt: skip
        assert again.snr >= GOOD_LEVEL * 0.999, kwargs
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
    assert "signal-to-noise" in out and "close to the non-private fit" in out
    assert main(["lda", "plan", "-n", "5000", "-V", "2000", "-k", "10", "--epsilon", "1",
                 "--delta", "1e-6"]) == 0  # fmt: skip
    first = capsys.readouterr().out.splitlines()[0]
    assert "signal-to-noise" in first and "noisy topics" in first
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
    def release(estimator):  # the plan's words, from the parameters and (N, d) only
        return plan_private_spectral_lda(estimator.get_params(), 50000, 2000).whitening_words

    assert release(model) == 300
    assert release(model.set_params(whitening_words=None)) == 2000
    assert release(model.set_params(whitening_words=800)) == 800
    assert release(model.set_params(whitening_words=8000)) == 2000
    assert release(model.set_params(whitening_words="auto", clip=None)) == 2000


def test_plan_reports_the_whitening_words_of_the_default_fit():
    plan = plan_private_lda(50000, 2000, 10, 1.0, 1.0, 1e-6, typical_length=7)
    every_word = plan_private_lda(50000, 2000, 10, 1.0, 1.0, 1e-6, typical_length=7, whitening_words=None)
    assert plan.whitening_words == 300
    assert plan.snr == pytest.approx(2000 / 300 * every_word.snr, rel=1e-9)
    assert "release (M2) on the 300 most frequent words" in plan.describe()
    big = plan_private_lda(10**6, 2000, 10, 1.0, 1.0, 1e-6)
    assert big.whitening_words == 2000 and big.snr == pytest.approx(
        plan_private_lda(10**6, 2000, 10, 1.0, 1.0, 1e-6, whitening_words=None).snr)
    assert plan_private_lda(50000, 2000, 10, 1.0, 1.0, 1e-6, suggest=False).whitening_words is None


def _counts_file(tmp_path, n_documents, n_words=30):
    import scipy.sparse as sp

    from dptensor.datasets import make_lda_corpus

    corpus = make_lda_corpus(n_documents, n_words, 3, alpha=0.1, doc_length=40, random_state=0)
    path = tmp_path / "corpus.npz"
    sp.save_npz(path, corpus.counts)
    return path


def test_plan_and_fit_print_one_verdict_in_the_same_words(tmp_path, capsys):
    """One sentence (PrivateLDAPlan.sentence) from public sizes: lda plan prints it first, lda fit too."""
    path = _counts_file(tmp_path, 3000)
    sizes = ["-k", "3", "--epsilon", "2", "--delta", "1e-6"]
    assert main(["lda", "plan", "-n", "3000", "-V", "30", *sizes]) == 0
    planned = capsys.readouterr().out.splitlines()[0]
    assert main(["lda", "fit", str(path), *sizes, "--seed", "0"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert planned in err and "no better than noise" not in planned
    model = PrivateSpectralLDA(3, epsilon=2.0, delta=1e-6)
    assert model.utility_plan(3000, 30).sentence() == planned
    # a public typical length: the same guess gives the same verdict in both commands
    assert main(["lda", "plan", "-n", "3000", "-V", "30", *sizes, "--typical-length", "4"]) == 0
    short = capsys.readouterr().out.splitlines()[0]
    assert short != planned
    assert main(["lda", "fit", str(path), *sizes, "--seed", "0", "--typical-length", "4"]) == 0
    assert short in capsys.readouterr().err.splitlines()
    assert main(["lda", "fit", str(path), "-k", "3", "--typical-length", "4"]) == 2  # needs --epsilon
    assert "--typical-length" in capsys.readouterr().err
    assert main(["lda", "fit", str(path), *sizes, "--typical-length", "2"]) == 2
    assert "--typical-length must be at least 3 tokens" in capsys.readouterr().err


def test_fit_predicted_to_be_noise_stops_before_charging(tmp_path, capsys):
    from dptensor.privacy import BudgetLedger

    path = _counts_file(tmp_path, 200)
    ledger = tmp_path / "docs.ledger"
    BudgetLedger(ledger, epsilon=5.0, delta=1e-5, dataset="docs")
    fit = ["lda", "fit", str(path), "-k", "3", "--epsilon", "0.5", "--delta", "1e-6", "--ledger", str(ledger),
           "--out", str(tmp_path / "m.json"), "--seed", "0"]  # fmt: skip
    assert main(["lda", "plan", "-n", "200", "-V", "30", "-k", "3", "--epsilon", "0.5",
                 "--delta", "1e-6"]) == 0  # fmt: skip
    planned = capsys.readouterr().out.splitlines()[0]
    assert "no better than noise (below 0.7)" in planned and "each alone would do: N >=" in planned
    assert main(fit) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    stop = "Stopped before anything was charged; --force fits anyway"
    assert err[-1] == f"dptensor lda fit: error: {planned}. {stop}"
    assert captured.out == "" and BudgetLedger(ledger).charges() == [] and not (tmp_path / "m.json").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UtilityWarning)  # the verdict is printed once, not warned again
        assert main([*fit, "--force"]) == 0
    assert f"{planned}; fitting anyway (--force)" in capsys.readouterr().err
    assert len(BudgetLedger(ledger).charges()) == 1
    assert main(["lda", "fit", str(path), "-k", "3", "--force"]) == 2  # a privacy option: needs --epsilon
    assert "--force" in capsys.readouterr().err
    with pytest.warns(UtilityWarning, match="no better than noise"):  # the Python API keeps warning
        PrivateSpectralLDA(3, epsilon=0.5, delta=1e-6, random_state=0).fit(
            np.random.default_rng(0).poisson(2.0, (200, 30)))


def test_private_vocabulary_verdict_covers_the_pipeline(tmp_path, capsys):
    """With --private-vocab V: V is at most the requested V, the model gets (1 - share) of the budget."""
    text = tmp_path / "docs.txt"
    text.write_text("".join(f"w{i % 7} w{(i * 3) % 11} w{i % 5} apple\n" for i in range(60)))
    # epsilon 0.1 (was 1 while the verdict was over the V asked; it is now over the predicted V <= 20)
    fit = ["lda", "fit", str(text), "-k", "2", "--epsilon", "0.1", "--delta", "1e-6", "--private-vocab", "20",
           "--vocab-share", "0.5", "--seed", "0"]  # fmt: skip
    assert main(fit) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "private vocabulary:" not in err  # stopped before the vocabulary was released (and charged)
    assert "of the 20 asked (--private-vocab" in err
    assert "the model gets 0.5 of epsilon=0.1 and delta=1e-06" in err
    assert main(["lda", "plan", "-n", "60", "-V", "20", "-k", "2", "--epsilon", "0.1", "--delta", "1e-6",
                 "--vocab-share", "0.5"]) == 0  # fmt: skip
    planned = capsys.readouterr().out.splitlines()[0]
    assert err.startswith(f"dptensor lda fit: error: {planned}. ")
    pipeline = plan_private_lda(60, 20, 2, 1.0, 1.0, 1e-6, vocabulary_share=0.5)
    words = model_words(pipeline)  # the model's verdict is over the predicted vocabulary (at least k)
    half = plan_private_lda(60, words, 2, 1.0, 0.5, 5e-7, whitening_words="auto")
    assert pipeline.snr == pytest.approx(half.snr)


def test_printed_guarantee_is_readable_and_names_the_ledgers_epsilon(tmp_path, capsys):
    """No nan multiplier, no 'release(s)', four significant digits; the ledger's epsilon beside the run's."""
    from dptensor.privacy import BudgetLedger

    path = _counts_file(tmp_path, 3000)
    ledger = tmp_path / "docs.ledger"
    BudgetLedger(ledger, epsilon=10.0, delta=1e-4, dataset="docs")
    assert main(["lda", "fit", str(path), "-k", "3", "--epsilon", "2", "--delta", "1e-6", "--seed", "0",
                 "--quiet", "--ledger", str(ledger)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    guarantee = next(line for line in out.splitlines() if line.startswith("guarantee:"))
    assert "gaussian releases, noise multiplier" in guarantee and "release(s)" not in guarantee
    assert not re.search(r"\d{6,}", guarantee)  # no 0.15300000000000002: four significant digits
    counted = BudgetLedger(ledger).spent()
    assert f"total epsilon 2 at delta 1e-06 (the ledger, at its delta 0.0001, counts {counted:.4g})" in out
    composed = compose(PrivateSpectralLDA(3, epsilon=1.0, delta=1e-6).planned_guarantee(3000, 30),
                       PrivateSpectralLDA(3, epsilon=0.5, delta=1e-6).planned_guarantee(3000, 30), delta=1e-5)
    text = composed.describe()
    assert "nan" not in text and "releases composed (gaussian)" in text and "noise multiplier" not in text


def _fake_plan(snr: float, vocabulary_words: float, n_words: int = 100):
    from dptensor.models.topics.plan import PrivateLDAPlan

    return PrivateLDAPlan(snr, "", 1.0, 1.0, {}, {}, sizes={"n_words": n_words},
                          vocabulary_words=vocabulary_words)


def test_choose_vocabulary_share_keeps_the_verdict_and_stops_when_the_vocabulary_is_full():
    """The largest share keeping the smallest share's verdict, or the first whose vocabulary reaches V."""
    from dptensor.models.topics.plan import VOCABULARY_SHARES, choose_vocabulary_share

    assert VOCABULARY_SHARES[0] == 0.1 and VOCABULARY_SHARES[-1] == 0.5
    # the verdict never changes, the vocabulary never fills: the largest share
    assert choose_vocabulary_share(lambda s: _fake_plan(10.0 - s, 200 * s)) == 0.5
    # the vocabulary reaches the 100 words asked at 0.3: more budget buys no words
    assert choose_vocabulary_share(lambda s: _fake_plan(10.0 - s, 1000 * s - 200)) == 0.3
    # "close to the non-private fit" (>= 2.5) until 0.3, "noisy topics" from 0.35: 0.3
    assert choose_vocabulary_share(lambda s: _fake_plan(2.6 if s <= 0.3 else 2.0, 10)) == 0.3
    # already "no better than noise" at 0.1: nothing to keep, the vocabulary gets the most
    assert choose_vocabulary_share(lambda s: _fake_plan(0.1, 10)) == 0.5
    # the planner does not apply: None (the caller's default)
    assert choose_vocabulary_share(lambda s: None) is None


def test_plan_private_lda_auto_vocabulary_share_is_the_chosen_share():
    """vocabulary_share="auto" gives the plan at choose_vocabulary_share's share, and says so."""
    auto = plan_private_lda(90_000, 2000, 10, 1.0, 1.0, 1e-6, vocabulary_share="auto")
    share = auto.sizes["vocabulary_share"]
    fixed = plan_private_lda(90_000, 2000, 10, 1.0, 1.0, 1e-6, vocabulary_share=share)
    assert share in (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5)
    assert auto.snr == pytest.approx(fixed.snr)
    assert auto.vocabulary_words == pytest.approx(fixed.vocabulary_words)
    assert "a share chosen by the planner" in auto.sentence()
    assert "chosen by the planner" not in fixed.sentence()
    assert auto.verdict == plan_private_lda(90_000, 2000, 10, 1.0, 1.0, 1e-6, vocabulary_share=0.1).verdict
    with pytest.raises(ValueError, match="'auto'"):
        plan_private_lda(90_000, 2000, 10, 1.0, 1.0, 1e-6, vocabulary_share="half")


def test_cli_fit_chooses_the_vocabulary_share_unless_given(tmp_path, capsys):
    """lda fit --private-vocab without --vocab-share: the planner's share, printed, paid as printed."""
    text = tmp_path / "docs.txt"
    animals = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay", "kiwi"]
    text.write_text("".join(f"{animals[i % 7]} {animals[(i * 3) % 11]} {animals[i % 5]} apple\n"
                            for i in range(800)))
    base = ["lda", "fit", str(text), "-k", "2", "--epsilon", "2", "--delta", "1e-6", "--private-vocab", "20",
            "--seed", "0", "--force"]  # fmt: skip
    assert main(base) == 0
    captured = capsys.readouterr()
    line = next(x for x in captured.err.splitlines() if x.startswith("vocabulary share:"))
    share = float(line.split()[2])
    assert "chosen by the planner" in line
    planned = plan_private_lda(800, 20, 2, 1.0, 2.0, 1e-6, vocabulary_share="auto")
    assert share == planned.sizes["vocabulary_share"]
    vocabulary = next(x for x in captured.out.splitlines() if x.startswith("vocabulary guarantee:"))
    # paid as printed: the share of the linear split, both shares then scaled to spend all of epsilon
    from dptensor import PrivateSpectralLDA, PrivateTopicModel

    budget = PrivateTopicModel(2, epsilon=2.0, delta=1e-6, n_words=20,
                               model=PrivateSpectralLDA(2, random_state=0)).plan(800)
    assert budget.vocabulary_share == share and budget.scale > 1
    assert vocabulary.startswith(f"vocabulary guarantee: ({budget.vocabulary_epsilon:g}, ")
    assert 2.0 - 1e-3 <= budget.total.epsilon <= 2.0
    # given: no planner line, the share as given; DP-VI: the default share, said
    assert main([*base, "--vocab-share", "0.3", "--quiet"]) == 0
    assert "vocabulary share:" not in capsys.readouterr().err
    assert main(["lda", "fit", str(text), "-k", "2", "--method", "vi", "--epsilon", "2", "--delta", "1e-6",
                 "--private-vocab", "20", "--passes", "1", "--seed", "0"]) == 0  # fmt: skip
    assert "vocabulary share: 0.2 of --epsilon and --delta (the planner does not model this fit" in (
        capsys.readouterr().err)
    assert main(["lda", "plan", "-n", "800", "-V", "20", "-k", "2", "--epsilon", "2", "--delta", "1e-6",
                 "--vocab-share", "auto"]) == 0  # fmt: skip
    assert f"the model gets {1 - share:g} of epsilon=2" in capsys.readouterr().out
