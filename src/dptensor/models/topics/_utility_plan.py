"""A privacy--utility planner for :class:`~dptensor.models.PrivateSpectralLDA` from public quantities only.

Before any budget is spent: does a clipped private fit at this ``(N, d, k, alpha_0, epsilon, delta)``
have a chance, and what would make it work? The bottleneck is the ``M2`` release (``docs/lda.md``):
the whitening is only as good as the gap between ``sigma_k(M2)`` and the operator norm of the noise.

Prediction (first order, public guesses made explicit):

* **noise**: the clipped ``m2`` release adds a ``"frobenius"`` symmetric Gaussian of entry scale
  ``s = z_2 sqrt2 C / S0`` to ``M2``; with every document scaled to norm ``C`` and ``||P_n||_F``
  about ``1/L`` for a document of ``L`` tokens (short texts of distinct words), ``S0 ~ N C L``, so
  ``s ~ z_2 sqrt2 / (N L)``, whose spectral norm is about ``sqrt(2d) s`` (the semicircle's edge);
  ``z_2`` is the noise multiplier the estimator would use (the same plan function,
  :func:`~dptensor.models.topics._private_plan.plan_private_spectral_lda`, per step for the noisy
  power method, which pays a further ``sqrt(p/d)`` smaller norm but ``sqrt(T)`` more noise);
* **signal**: ``sigma_k(M2) ~ m^2 / (k (alpha_0 + 1))`` for ``k`` equally likely topics of squared
  norm ``m^2``; the data-free guess ``m^2 = d^{-1/2}`` (between a uniform topic, ``1/d``, and a
  point mass, 1) is the one :func:`~dptensor.models.topics._private_plan.default_budget_split` uses.

``snr = sigma_k / noise``. The verdict levels are calibrated on measured fits (``docs/lda.md``,
*Planning a private fit*): WordNet glosses (``N = 47827``, median length 5) predict 0.59 at
``epsilon = 1`` and gave negative NPMI; Debian descriptions (``N = 44795``, median length 7) predict
0.78 at ``epsilon = 1`` -- NPMI at the non-private level, held-out perplexity above the unigram
model's -- and 2.75 at ``epsilon = 4`` -- NPMI above the non-private fit's, perplexity below the
unigram model's. Hence: below 0.7 "no better than noise", 0.7--2.5 "noisy topics", above 2.5
"close to the non-private fit". Two corpora are few: the levels are a first calibration, the
formula's scalings (``N``, ``L``, ``epsilon`` through ``z_2``, ``1/d``, ``1/k``) are the content.
Every input is public; so is the output (it never reads documents).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dptensor._validation import check_positive_int, check_real
from dptensor.models.topics._private_plan import (
    DEFAULT_TYPICAL_LENGTH,
    GOOD_LEVEL,
    NOISE_LEVEL,
    WHITENING_WORDS_LEVEL,
    moments_epsilon,
    predicted_snr,
    prefers_nonnegative_topics,
    release_words,
    resolve_refinement,
)
from dptensor.privacy.vocabulary import DEFAULT_MAX_WORDS_PER_DOCUMENT, predicted_vocabulary_size

#: The options of a fit without private refinement (``refine=None``).
NO_REFINEMENT: Mapping[str, Any] = {"refine": None, "refine_passes": "auto", "refine_share": "auto"}
#: The shares of ``epsilon`` and ``delta`` :func:`choose_vocabulary_share` considers for a private
#: vocabulary (``dptensor lda fit --private-vocab V`` without ``--vocab-share``): 0.1, 0.15, ..., 0.5.
VOCABULARY_SHARES = tuple(round(0.1 + 0.05 * i, 2) for i in range(9))
#: The vocabulary's share where the planner does not apply (DP-VI, worst-case releases, a public corpus).
DEFAULT_VOCABULARY_SHARE = 0.2
#: How :func:`choose_vocabulary_share` chooses, in words (``lda fit`` and ``lda plan`` print it).
VOCABULARY_SHARE_RULE = (
    f"the largest share from {VOCABULARY_SHARES[0]:g} to {VOCABULARY_SHARES[-1]:g} that keeps the model's "
    f"verdict at the smallest share's, and no more than the predicted vocabulary needs to reach V"
)


@dataclass(frozen=True)
class PrivateLDAPlan:
    """A prediction of :func:`plan_private_lda`: one verdict, for the fit as configured.

    Attributes
    ----------
    snr : float
        Predicted ``sigma_k(M2) / ||noise of the M2 release||`` of the release the fit makes: on its
        :attr:`whitening_words` most frequent words, at the model's share of the budget (on all of
        it where :attr:`refinement_chosen`).
    verdict : str
        ``"no better than noise"``, ``"noisy topics"`` or ``"close to the non-private fit"``.
    signal, noise : float
        The two sides of ``snr``.
    noise_multipliers : dict
        Of each release, from the estimator's own plan.
    suggestions : dict
        For ``snr`` to reach :data:`GOOD_LEVEL`: the ``n_documents``, ``epsilon`` (the total, ``inf``
        when no budget up to ``10^4`` suffices), ``n_words`` and ``n_components`` that would (each alone).
    whitening_words : int or None
        The words the ``M2`` release covers (``PrivateSpectralLDA(whitening_words=...)`` resolved,
        :func:`auto_whitening_words` for ``"auto"``); ``None`` when the plan was made with
        ``suggest=False``.
    topic_recovery : str or None
        What ``PrivateSpectralLDA(topic_recovery="auto")`` recovers the topics with, ``"tensor"`` or
        ``"nmf"`` (:func:`prefers_nonnegative_topics`).
    sizes : dict
        The public inputs the prediction was made from (``n_documents``, ``n_words``, ``n_components``,
        ``alpha0``, ``epsilon``, ``delta``, ``vocabulary_share``; with a private vocabulary also
        ``max_words_per_document`` and ``distinct_words``), for :meth:`sentence`.
    vocabulary_words : float or None
        With ``vocabulary_share``: the private vocabulary's predicted (expected) size,
        :func:`~dptensor.privacy.vocabulary.predicted_vocabulary_size`; the verdict is for a model
        over that many words (at least ``k``), not over the ``n_words`` asked.
    refine_passes : int
        The private refinement passes the fit makes after the moments (0: none), on their share of
        the budget.
    refinement_chosen : bool
        Whether the passes follow the ``"auto"`` rule (``refine_passes`` and ``refine_share``), which
        refines only where the passes measured better than the moments on the whole budget
        (:data:`~dptensor.models.topics._private_plan.REFINE_MAX_NOISE`): the verdict (``snr``,
        ``signal``, ``noise``) is then that of the ``M2`` release on the whole budget, while
        ``noise_multipliers``, ``whitening_words`` and ``topic_recovery`` stay those of the fit. With
        passes or a share set by hand, it is that of the release on what the passes leave (which
        may be worse than the moments alone).
    """

    snr: float
    verdict: str
    signal: float
    noise: float
    noise_multipliers: dict
    suggestions: dict
    whitening_words: int | None = None
    topic_recovery: str | None = None
    sizes: dict = field(default_factory=dict)
    vocabulary_words: float | None = None
    refine_passes: int = 0
    refinement_chosen: bool = False

    @property
    def hopeless(self) -> bool:
        """Whether the prediction is below :data:`NOISE_LEVEL` ("no better than noise")."""
        return self.snr < NOISE_LEVEL

    @property
    def vocabulary_short(self) -> bool:
        """Whether the predicted private vocabulary has fewer words than ``k`` (said, not stopped on:
        the word-frequency model is a guess, made for corpora of thousands of distinct words)."""
        return self.vocabulary_words is not None and self.vocabulary_words < self.sizes["n_components"]

    def sentence(self) -> str:
        """The verdict in one line: ``lda plan`` prints it first, ``lda fit`` prints (or stops on) it.

        Built from the public inputs and the prediction only, so printing it (or stopping on it)
        reveals nothing about the documents.
        """
        z = self.sizes
        share = z.get("vocabulary_share")
        if share is None:
            inputs = (f"N={z['n_documents']}, V={z['n_words']}, k={z['n_components']}, "
                      f"alpha0={z['alpha0']:g}, epsilon={z['epsilon']:g}, delta={z['delta']:g}")  # fmt: skip
        else:
            inputs = (f"N={z['n_documents']}, V={self.vocabulary_words:.0f} predicted of the {z['n_words']} "
                      f"asked (--private-vocab; Zipf model, m={z['max_words_per_document']}, "
                      f"{z['distinct_words']:g} distinct words per document), k={z['n_components']}, "
                      f"alpha0={z['alpha0']:g}; the model gets {1 - share:g} of epsilon={z['epsilon']:g} "
                      f"and delta={z['delta']:g}, the vocabulary the rest"
                      + (", a share chosen by the planner" if z.get("vocabulary_share_chosen") else ""))
        where = ""
        if self.whitening_words is not None and self.whitening_words < model_words(self):
            where = f" on the {self.whitening_words} most frequent words"
        level = f" (below {NOISE_LEVEL:g})" if self.hopeless else ""
        line = (f"predicted signal-to-noise of the word co-occurrence release (M2){where}: {self.snr:.2f}, "
                f"{self.verdict}{level} [{inputs}]")  # fmt: skip
        if self.vocabulary_short:
            line += (f"; the private vocabulary is predicted to keep fewer words than the "
                     f"k={z['n_components']} topics (a fit whose vocabulary does stops after charging it): "
                     "more documents, a larger epsilon or --vocab-share would keep more")
        s = self.suggestions
        if self.snr < GOOD_LEVEL and s:
            line += (f"; for {GOOD_LEVEL:g} each alone would do: N >= {s['n_documents']}, "
                     f"epsilon >= {s['epsilon']:.3g}, V <= {s['n_words']} or k <= {s['n_components']}")
        return line

    def describe(self) -> str:
        """Several lines for people (the ``dptensor lda plan`` output): :meth:`sentence`, then details."""
        lines = [
            self.sentence(),
            f"  signal: the k-th largest eigenvalue of M2 (sigma_k) ~ {self.signal:.3g}; noise: the operator "
            f"norm of its noise ~ {self.noise:.3g}",
        ]
        if self.refine_passes:
            predicted = ("predicted as the M2 release on the whole budget: the passes are made only where "
                         "they measured better than that" if self.refinement_chosen
                         else "the M2 release is predicted at the rest")  # fmt: skip
            lines.append(
                f"  then {self.refine_passes} private refinement passes (CVB0, each releasing the expected "
                f"topic-word counts) on their share of the budget; {predicted}"
            )
        if self.topic_recovery == "nmf":
            lines.append(
                f"  below {WHITENING_WORDS_LEVEL:g} on the fewest words: the default fit takes the topics "
                "from a non-negative factor of the M2 release (topic_recovery='nmf'), no third-moment release"
            )
        return "\n".join(lines)


def _level(plan: PrivateLDAPlan) -> int:
    """The verdict as a rank: 0 no better than noise, 1 noisy topics, 2 close to the non-private fit."""
    return 0 if plan.snr < NOISE_LEVEL else 1 if plan.snr < GOOD_LEVEL else 2


def choose_vocabulary_share(plan_at: Callable[[float], PrivateLDAPlan | None]) -> float | None:
    """The planner's split of ``epsilon`` and ``delta`` between a private vocabulary and the model.

    ``plan_at(share)`` is the plan (:func:`plan_private_lda` with ``vocabulary_share=share``) of
    the pipeline whose vocabulary spends ``share`` of the budget; ``None`` where the planner does
    not apply. A larger share keeps more words (:attr:`PrivateLDAPlan.vocabulary_words`) and leaves
    the model less budget over more words, so its predicted signal-to-noise falls. The rule
    (:data:`VOCABULARY_SHARE_RULE`), over :data:`VOCABULARY_SHARES` in increasing order:

    1. the verdict at the smallest share is the best the model can get; the shares that keep it
       (the increasing run from the smallest share until the verdict first drops) are allowed;
    2. of those, the smallest whose predicted vocabulary reaches the ``n_words`` asked, as more
       budget would buy no more words; if none does, the largest allowed.

    So the vocabulary gets every part of the budget that does not change what the planner tells
    the user about the topics. Everything is public (the plans are), so the choice reveals nothing
    about the documents.

    Returns
    -------
    float or None
        The share, or ``None`` when ``plan_at`` does (the caller's default then applies,
        :data:`DEFAULT_VOCABULARY_SHARE`).
    """
    chosen = None
    level = None
    for share in VOCABULARY_SHARES:
        plan = plan_at(share)
        if plan is None:
            return None
        if level is None:
            level = _level(plan)
        elif _level(plan) < level:
            break
        chosen = share
        if plan.vocabulary_words is not None and plan.vocabulary_words >= plan.sizes["n_words"] - 0.5:
            break
    return chosen


def model_words(plan: PrivateLDAPlan) -> int:
    """The vocabulary size the plan's verdict is for: the predicted private vocabulary, or ``n_words``."""
    if plan.vocabulary_words is None:
        return int(plan.sizes["n_words"])
    return max(int(plan.sizes["n_components"]), round(plan.vocabulary_words))


def _verdict(snr: float) -> str:
    if snr < NOISE_LEVEL:
        return "no better than noise"
    return "noisy topics" if snr < GOOD_LEVEL else "close to the non-private fit"


def refinement_chosen(refine: Mapping[str, Any], refinement: tuple[int, float]) -> bool:
    """Whether ``refinement`` (``(passes, share)``) has passes that the measured rule chose.

    Both ``refine_passes`` and ``refine_share`` must be ``"auto"``: the rule was measured at its own
    share, and a larger share set by hand leaves the moments less than it was measured with.
    """
    return (refinement[0] > 0 and refine.get("refine_passes", "auto") == "auto"
            and refine.get("refine_share", "auto") == "auto")  # fmt: skip


def _fit_snr(
    n: int, d: int, k: int, alpha0: float, epsilon: float, delta: float, length: float, whitening: str,
    whitening_words: int | str | None, refine: Mapping[str, Any] = NO_REFINEMENT,
) -> tuple[float, float, float, dict, int, tuple[int, float]]:
    """:func:`predicted_snr` of the release the fit makes: on its :func:`release_words`, at the moments'
    share of the budget (what private refinement leaves them) or, for passes chosen by the
    ``"auto"`` rule, on the whole budget (:attr:`PrivateLDAPlan.refinement_chosen`); their
    number; and the refinement's ``(passes, share)``."""
    options = {**refine, "n_components": k, "epsilon": epsilon, "delta": delta}
    refinement = resolve_refinement(options, n, d, True)
    moment_epsilon = moments_epsilon(epsilon, delta, refinement[1])
    words = release_words(n, d, k, alpha0, moment_epsilon, delta, whitening_words)
    snr, signal, noise, multipliers = predicted_snr(n, words, k, alpha0, epsilon, delta, length, whitening,
                                                    refinement)  # fmt: skip
    if refinement_chosen(refine, refinement):  # the verdict: the moments on the whole budget
        snr, signal, noise, _ = predicted_snr(n, words, k, alpha0, epsilon, delta, length, whitening)
    return snr, signal, noise, multipliers, words, refinement


def plan_private_lda(
    n_documents: int,
    n_words: int,
    n_components: int,
    alpha0: float,
    epsilon: float,
    delta: float,
    *,
    typical_length: float | None = None,
    private_whitening: str = "auto",
    whitening_words: int | str | None = "auto",
    vocabulary_share: float | str | None = None,
    max_words_per_document: int = DEFAULT_MAX_WORDS_PER_DOCUMENT,
    distinct_words: float | None = None,
    suggest: bool = True,
    refine: str | None = "cvb0",
    refine_passes: int | str = "auto",
    refine_share: float | str = "auto",
) -> PrivateLDAPlan:
    """Predict the signal-to-noise of a clipped :class:`PrivateSpectralLDA` fit (module docstring).

    The prediction is for the ``M2`` release the fit makes: on its ``whitening_words`` words and,
    with a private vocabulary, at the model's share of the budget. It is the one verdict both
    ``dptensor lda plan`` and ``dptensor lda fit`` print (:meth:`PrivateLDAPlan.sentence`).

    Parameters
    ----------
    n_documents, n_words, n_components : int
        ``N``, ``d`` (the vocabulary; with ``vocabulary_share`` the most words it may have) and ``k``.
    alpha0, epsilon, delta : float
        With ``vocabulary_share``, ``epsilon`` and ``delta`` are the totals of the pipeline.
    typical_length : float, optional
        A public typical document length in vocabulary tokens (default
        :data:`DEFAULT_TYPICAL_LENGTH`); never measure it on the private documents for free.
    private_whitening : str, default "auto"
    whitening_words : int, "auto" or None, default "auto"
        As for :class:`PrivateSpectralLDA` (``None``: every word).
    vocabulary_share : float or "auto", optional
        The share of ``epsilon`` and ``delta`` a private vocabulary spends first
        (``dptensor lda fit --private-vocab V --vocab-share``); the model gets the rest. The
        vocabulary's size is then predicted (:func:`~dptensor.privacy.vocabulary.predicted_vocabulary_size`,
        a Zipf--Mandelbrot model of word frequencies) and the verdict is for a model over the
        predicted words (at least ``k``), ``n_words`` being the most the vocabulary may keep.
        ``"auto"``: the share :func:`choose_vocabulary_share` picks (what ``lda fit --private-vocab``
        does without ``--vocab-share``); ``sizes["vocabulary_share"]`` then holds it.
    max_words_per_document : int, default 64
        With ``vocabulary_share``: ``m``, the vocabulary's bound on one document's distinct words.
    distinct_words : float, optional
        With ``vocabulary_share``: a public guess of a typical document's distinct (non-stop)
        words (default ``typical_length``).
    suggest : bool, default True
        Compute :attr:`PrivateLDAPlan.suggestions` (a bisection over epsilon) and the words of the
        release; ``False`` leaves them empty.
    refine, refine_passes, refine_share
        As for :class:`PrivateSpectralLDA`: the private refinement passes after the moments take
        their share of the budget; the ``M2`` release is predicted at what is left, or on the whole
        budget where the ``"auto"`` rule chose the passes (:attr:`PrivateLDAPlan.refinement_chosen`).

    Returns
    -------
    PrivateLDAPlan
    """
    n = check_positive_int(n_documents, "n_documents", minimum=3)
    d = check_positive_int(n_words, "n_words")
    k = check_positive_int(n_components, "n_components")
    if k > d:
        raise ValueError(f"n_components={k} exceeds n_words={d}")
    alpha0 = check_real(alpha0, "alpha0")
    epsilon = check_real(epsilon, "epsilon")
    delta = check_real(delta, "delta")
    if not delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    length = DEFAULT_TYPICAL_LENGTH
    if typical_length is not None:
        length = check_real(typical_length, "typical_length")
    if length < 3:
        raise ValueError(f"typical_length must be at least 3 tokens, got {length!r}")
    rest = 1.0
    chosen = isinstance(vocabulary_share, str)
    if chosen:
        if vocabulary_share != "auto":
            raise ValueError(f"vocabulary_share must be in (0, 1) or 'auto', got {vocabulary_share!r}")
        vocabulary_share = choose_vocabulary_share(lambda share: plan_private_lda(
            n, d, k, alpha0, epsilon, delta, typical_length=typical_length,
            private_whitening=private_whitening, whitening_words=whitening_words, vocabulary_share=share,
            max_words_per_document=max_words_per_document, distinct_words=distinct_words, refine=refine,
            refine_passes=refine_passes, refine_share=refine_share, suggest=False))
    if vocabulary_share is not None:
        share = check_real(vocabulary_share, "vocabulary_share")
        if not share < 1:
            raise ValueError(f"vocabulary_share must lie in (0, 1), got {vocabulary_share!r}")
        rest = 1.0 - share
    sizes = {"n_documents": n, "n_words": d, "n_components": k, "alpha0": alpha0, "epsilon": epsilon,
             "delta": delta, "vocabulary_share": vocabulary_share}  # fmt: skip
    model_epsilon, model_delta = epsilon * rest, delta * rest  # as dptensor lda fit's model budget
    vocabulary_words = None
    if vocabulary_share is not None:
        per_document = length if distinct_words is None else check_real(distinct_words, "distinct_words")
        vocabulary_words = predicted_vocabulary_size(
            n, d, epsilon * (1.0 - rest), delta * (1.0 - rest), max_words_per_document, per_document
        )
        sizes.update(max_words_per_document=int(max_words_per_document), distinct_words=per_document,
                     vocabulary_share_chosen=chosen)
        d = max(k, min(d, round(vocabulary_words)))  # the model's vocabulary: the predicted one
    refinement = {"refine": refine, "refine_passes": refine_passes, "refine_share": refine_share}
    snr, signal, noise, multipliers, words, (passes, refined_share) = _fit_snr(
        n, d, k, alpha0, model_epsilon, model_delta, length, private_whitening, whitening_words, refinement
    )
    if not suggest:
        return PrivateLDAPlan(snr, _verdict(snr), signal, noise, multipliers, {}, sizes=sizes,
                              vocabulary_words=vocabulary_words, refine_passes=passes,
                              refinement_chosen=refinement_chosen(refinement, (passes, refined_share)))
    needed = GOOD_LEVEL / snr

    def snr_at(n_: int, d_: int, k_: int) -> float:
        return _fit_snr(n_, d_, k_, alpha0, model_epsilon, model_delta, length, private_whitening,
                        whitening_words, refinement)[0]  # fmt: skip

    # first-order scalings (snr ~ N, ~ 1/d on the release's words, ~ 1/k), repeated where a step
    # changes the refinement passes (and so, with passes set by hand, the M2 release's share)
    n_needed = math.ceil(n * needed)
    d_needed = max(int(words / needed), 1)
    k_needed = max(int(k / needed), 1)
    for _ in range(20):
        reached = snr_at(n_needed, d, k)
        if reached >= GOOD_LEVEL:
            break
        n_needed = math.ceil(n_needed * GOOD_LEVEL / reached * (1 + 1e-9))
    for _ in range(20):
        reached = snr_at(n, max(d_needed, k), k)
        if reached >= GOOD_LEVEL or d_needed <= 1:
            break
        d_needed = max(int(d_needed * reached / GOOD_LEVEL), 1)
    for _ in range(20):
        reached = snr_at(n, d, min(k_needed, d))
        if reached >= GOOD_LEVEL or k_needed <= 1:
            break
        k_needed = max(int(k_needed * reached / GOOD_LEVEL), 1)
    eps_needed = _epsilon_needed(n, d, k, alpha0, model_delta, length, private_whitening, whitening_words,
                                 refinement)  # fmt: skip
    moment_epsilon = moments_epsilon(model_epsilon, model_delta, refined_share)
    return PrivateLDAPlan(
        snr=snr, verdict=_verdict(snr), signal=signal, noise=noise, noise_multipliers=multipliers,
        suggestions={"n_documents": n_needed, "epsilon": eps_needed / rest, "n_words": d_needed,
                     "n_components": k_needed},
        whitening_words=words,
        topic_recovery="nmf" if prefers_nonnegative_topics(n, d, k, alpha0, moment_epsilon, model_delta)
        else "tensor",
        sizes=sizes, vocabulary_words=vocabulary_words, refine_passes=passes,
        refinement_chosen=refinement_chosen(refinement, (passes, refined_share)),
    )  # fmt: skip


def _epsilon_needed(
    n: int, d: int, k: int, alpha0: float, delta: float, length: float, whitening: str,
    whitening_words: int | str | None, refine: Mapping[str, Any] = NO_REFINEMENT,
) -> float:  # fmt: skip
    """The smallest model epsilon (bisection on a log scale) whose prediction reaches :data:`GOOD_LEVEL`."""

    def reaches(epsilon: float) -> bool:
        snr = _fit_snr(n, d, k, alpha0, epsilon, delta, length, whitening, whitening_words, refine)[0]
        return snr >= GOOD_LEVEL

    low, high = 1e-3, 1e4
    if not reaches(high):
        return math.inf
    if reaches(low):
        return low
    for _ in range(40):
        mid = math.sqrt(low * high)
        if reaches(mid):
            high = mid
        else:
            low = mid
    return high
