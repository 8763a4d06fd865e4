"""A vocabulary chosen under differential privacy: Gaussian partition selection of the frequent words.

A private topic model treats its vocabulary (the columns of the count matrix) as public. A user
without a public vocabulary can choose one from the private documents **under DP** with this
module, and pay for it from the same budget:

1. *Bounded contribution.* Each document contributes the set of its distinct tokens, at most
   ``m = max_words_per_document`` of them (a public bound): a document with more keeps its ``m``
   most frequent tokens, ties broken by the token itself -- a choice that looks at no other
   document. Each kept token gets the weight ``1 / sqrt(n)`` (``n <= m`` tokens kept), so one
   document's weight vector has l2 norm 1 whatever its length, counts or vocabulary.
2. *Gaussian noise on the weights of the words that occur* (``N(0, sigma^2)`` per word), and a
   threshold ``tau``: only words whose noisy weight exceeds ``tau`` may be released.
3. *Post-processing*: the ``n_words`` released words of largest noisy weight.

This is the Gaussian version of differentially private partition selection / set union (Korolova,
Kenthapadi, Mishra & Ntoulas 2009; Wilson, Zhang, Lam, Desfontaines, Simmons-Marengo & Gipson 2020,
Section 3; Gopi, Gulhane, Kulkarni, Shen, Shokouhi & Yekhanin 2020, *Differentially private set
union*, weighted Gaussian policy with ``l2``-normalised weights).

Privacy (``neighbouring = "document"``: one document replaced by any other). Let ``D`` and ``D'``
differ in document ``x`` replaced by ``y``. Split the words into those with positive weight in
both corpora (``C``), those only in ``x`` (``A``) and those only in ``y`` (``B``). On ``C`` the
weight vectors differ by ``w_x - w_y`` restricted to ``C``; both are non-negative with norm
``<= 1``, so ``||w_x - w_y||_2^2 <= ||w_x||^2 + ||w_y||^2 <= 2``: the noisy weights on ``C`` are the
Gaussian mechanism with l2 sensitivity ``sqrt(2)`` (analytic calibration, Balle & Wang 2018). A word
of ``A`` has weight ``<= 1`` and there are at most ``m`` of them, so the chance that any passes the
threshold is ``<= m Phi_bar((tau - 1) / sigma) = delta_t``; likewise for ``B``. The pair of
"exclusive" outputs is then ``(epsilon_t, delta_t)``-DP with ``epsilon_t = -log(1 - delta_t)``
(``P[nothing from A]`` is at least ``1 - delta_t`` on one side and 1 on the other). The parts are
independent, so the whole release composes a Gaussian event of noise multiplier
``sigma / sqrt(2)`` with an :class:`~dptensor.privacy.accounting.EpsilonDeltaDpEvent`
``(epsilon_t, delta_t)``; the calibration puts ``delta_t = threshold_delta_share * delta`` and
the Gaussian at ``(epsilon - epsilon_t, delta - delta_t)``, which by basic composition gives
``(epsilon, delta)``-DP. ``tests/privacy/test_private_vocabulary.py`` checks both sensitivities by brute
force on tiny corpora and audits the release empirically.

``mechanism="policy-gaussian"`` replaces step 1's fixed weights by the **policy Gaussian** of
Gopi et al. (2020, the l2-contractive policy): documents are processed one by one in a secret
uniformly random order and each pushes only its words still below a cutoff ``Gamma`` towards it,
by a step of l2 norm at most 1 (:func:`policy_word_weights`, whose docstring carries the proof for
the replace-one relation). Words that are already frequent stop taking weight, so a document's
budget goes to its other words. It is opt-in: the step is proportional to each word's gap to
``Gamma``, so a document gives more to its rare words (gap ``Gamma``) than to the words just below
the threshold, and on a long-tailed corpus (WordNet glosses, ``benchmarks/private_vocabulary.py``)
it releases *fewer* words than the fixed weights at every cutoff tried.

What is public: ``n_words``, ``m``, the tokeniser, ``epsilon``, ``delta``, the mechanism. Nothing
else about the documents is released: not the number of distinct words, not the weights of words below the
threshold, not how many words passed it beyond the ``n_words`` kept.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import dp_accounting
import numpy as np
from scipy import stats

from dptensor._validation import check_epsilon_delta, check_positive_int, check_real
from dptensor.privacy.accounting import EpsilonDeltaDpEvent
from dptensor.privacy.calibration import gaussian_epsilon, gaussian_sigma_analytic
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.noise import NoiseLike, NoiseSource
from dptensor.privacy.release import Ledger, begin_release

__all__ = [
    "VOCABULARY_ASSUMPTION",
    "PrivateVocabulary",
    "VocabularyCalibration",
    "calibrate_vocabulary",
    "document_word_weights",
    "policy_word_weights",
    "predicted_vocabulary_size",
    "private_vocabulary",
    "select_vocabulary",
    "vocabulary_guarantee",
    "vocabulary_threshold",
    "vocabulary_weights",
    "word_weights",
]

#: The default public bound on the distinct words one document contributes.
DEFAULT_MAX_WORDS_PER_DOCUMENT = 64
#: The default share of ``delta`` spent on the threshold (the rest goes to the Gaussian noise).
DEFAULT_THRESHOLD_DELTA_SHARE = 0.5
#: The partition-selection mechanisms: fixed ``1/sqrt(n)`` weights, or Gopi et al.'s l2 policy.
MECHANISMS = ("weighted-gaussian", "policy-gaussian")
#: The default mechanism of :class:`~dptensor.models.PrivateCountVectorizer` and :func:`private_vocabulary`.
DEFAULT_MECHANISM = "weighted-gaussian"
#: The policy's cutoff is ``Gamma = tau + DEFAULT_CUTOFF_SIGMAS * sigma`` (public: from epsilon, delta, m).
DEFAULT_CUTOFF_SIGMAS = 2.0

#: Word-frequency model of :func:`predicted_vocabulary_size` (Zipf--Mandelbrot, fitted on real text):
#: the rank-``r`` word's weight is ``N sqrt(n) C / (r + B)^S`` for ``N`` documents of ``n`` distinct
#: words. Fitted by least squares on the log weights of ranks 30--3000 of three corpora (90 000 WordNet
#: glosses, 61 793 Debian package descriptions, 90 000 Debian change-log items; letters-only tokens,
#: English stop words, ``m = 64``): ``benchmarks/vocabulary_plan.py``.
ZIPF_CONSTANT = 0.185
ZIPF_EXPONENT = 1.02
ZIPF_OFFSET = 55.0
#: The distinct words of a typical document :func:`predicted_vocabulary_size` assumes when none is
#: given (a public guess; the planner's default typical length, short texts).
DEFAULT_DISTINCT_WORDS = 10.0

NEIGHBOURING = "document"
PROTECTED = "one document (all its words and counts), replaced by any other document"
PUBLIC = (
    "the number of words asked for (n_words), the per-document bound m on distinct words, the "
    "tokeniser (CountVectorizer's analyzer and stop words), epsilon and delta"
)
#: What a private topic model assumes of its columns; quoted in their guarantees' ``public``.
VOCABULARY_ASSUMPTION = (
    "the vocabulary (columns) must be public or chosen under DP and charged separately "
    "(dptensor.models.PrivateCountVectorizer): a vocabulary built from the private documents, e.g. "
    "by a CountVectorizer fitted on them, is not covered by this guarantee"
)


@dataclass(frozen=True)
class VocabularyCalibration:
    """Noise and threshold of the private vocabulary for a budget (see the module docstring).

    Attributes
    ----------
    epsilon, delta : float
        The vocabulary's budget.
    max_words_per_document : int
        ``m``.
    sigma : float
        Standard deviation of the Gaussian noise on each word's weight.
    threshold : float
        ``tau``: only words with noisy weight above it may be released.
    threshold_delta, threshold_epsilon : float
        ``delta_t`` and ``epsilon_t = -log(1 - delta_t)`` of the threshold part.
    sensitivity : float
        l2 sensitivity of the weights on the common words, ``sqrt(2)`` (both mechanisms).
    mechanism : {"weighted-gaussian", "policy-gaussian"}
        How the weights are built (:func:`vocabulary_weights`).
    cutoff : float or None
        The policy's ``Gamma`` (``None`` for the weighted mechanism).
    """

    epsilon: float
    delta: float
    max_words_per_document: int
    sigma: float
    threshold: float
    threshold_delta: float
    threshold_epsilon: float
    sensitivity: float = math.sqrt(2.0)
    mechanism: str = "weighted-gaussian"
    cutoff: float | None = None

    @property
    def noise_multiplier(self) -> float:
        return self.sigma / self.sensitivity

    def to_dp_event(self) -> dp_accounting.DpEvent:
        """The Gaussian release on the common words composed with the threshold's ``(eps_t, delta_t)``."""
        return dp_accounting.ComposedDpEvent([
            dp_accounting.GaussianDpEvent(self.noise_multiplier),
            EpsilonDeltaDpEvent(self.threshold_epsilon, self.threshold_delta),
        ])


def calibrate_vocabulary(
    epsilon: float,
    delta: float,
    max_words_per_document: int = DEFAULT_MAX_WORDS_PER_DOCUMENT,
    *,
    threshold_delta_share: float = DEFAULT_THRESHOLD_DELTA_SHARE,
    mechanism: str = DEFAULT_MECHANISM,
    cutoff_sigmas: float = DEFAULT_CUTOFF_SIGMAS,
) -> VocabularyCalibration:
    """The noise ``sigma``, threshold ``tau`` and cutoff ``Gamma`` of an ``(epsilon, delta)``-DP vocabulary.

    ``delta_t = threshold_delta_share * delta``; ``epsilon_t = -log(1 - delta_t)``;
    ``sigma`` is the analytic Gaussian noise (Balle & Wang 2018, Theorem 8) for
    ``(epsilon - epsilon_t, delta - delta_t)`` at l2 sensitivity ``sqrt(2)`` (both mechanisms:
    module docstring and :func:`policy_word_weights`). The threshold:

    * ``"weighted-gaussian"``: ``tau = 1 + sigma Phi_bar^{-1}(delta_t / m)``, so that ``m``
      exclusive words of weight ``<= 1`` pass it with total probability ``<= delta_t`` (union bound);
    * ``"policy-gaussian"``: the ``t <= m`` words exclusive to one document all weigh ``<= 1/sqrt(t)``
      (:func:`policy_word_weights`), so
      ``tau = max_{1 <= t <= m} (1/sqrt(t) + sigma Phi_bar^{-1}(delta_t / t))``
      (the form of Gopi et al.'s 2020 Gaussian thresholds, with ``delta_t`` in place of their
      ``delta``) makes ``t Phi_bar((tau - 1/sqrt(t)) / sigma) <= delta_t`` for every ``t``; and the
      cutoff is ``Gamma = tau + cutoff_sigmas * sigma`` (their rule ``Gamma = rho + alpha sigma``).

    Everything here is a function of ``epsilon``, ``delta`` and ``m`` only (public).

    Parameters
    ----------
    epsilon : float
        ``> 0``.
    delta : float
        In ``(0, 1)``.
    max_words_per_document : int, default 64
        ``m``, the public bound on the distinct words one document contributes.
    threshold_delta_share : float, default 0.5
        The share of ``delta`` spent on the threshold, in ``(0, 1)``.
    mechanism : {"weighted-gaussian", "policy-gaussian"}, default "weighted-gaussian"
        The weights the noise is added to (:func:`vocabulary_weights`).
    cutoff_sigmas : float, default 2.0
        ``alpha >= 0`` of the policy's cutoff ``Gamma = tau + alpha sigma`` (ignored by the weighted
        mechanism): how far above the threshold a word's weight is pushed before it stops taking more.

    Returns
    -------
    VocabularyCalibration
    """
    check_epsilon_delta(epsilon, delta)
    m = check_positive_int(max_words_per_document, "max_words_per_document")
    share = check_real(threshold_delta_share, "threshold_delta_share")
    if not share < 1:
        raise ValueError(f"threshold_delta_share must lie strictly between 0 and 1, got {share!r}")
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    alpha = check_real(cutoff_sigmas, "cutoff_sigmas", strict=False)
    delta_t = share * float(delta)
    epsilon_t = -math.log1p(-delta_t)
    if not epsilon_t < epsilon:
        raise ValueError(f"epsilon={epsilon!r} is too small for the threshold's share of delta")
    sensitivity = math.sqrt(2.0)
    sigma = gaussian_sigma_analytic(float(epsilon) - epsilon_t, float(delta) - delta_t, sensitivity)
    threshold = vocabulary_threshold(sigma, delta_t, m, mechanism)
    cutoff = None if mechanism == "weighted-gaussian" else threshold + alpha * sigma
    return VocabularyCalibration(
        epsilon=float(epsilon), delta=float(delta), max_words_per_document=m, sigma=sigma,
        threshold=threshold, threshold_delta=delta_t, threshold_epsilon=epsilon_t,
        sensitivity=sensitivity, mechanism=mechanism, cutoff=cutoff,
    )  # fmt: skip


def vocabulary_threshold(
    sigma: float, threshold_delta: float, max_words_per_document: int, mechanism: str = DEFAULT_MECHANISM
) -> float:
    """The threshold ``tau`` of :func:`calibrate_vocabulary` for a given noise ``sigma`` and ``delta_t``.

    ``"weighted-gaussian"``: ``tau = 1 + sigma Phi_bar^{-1}(delta_t / m)``; ``"policy-gaussian"``:
    ``tau = max_{1 <= t <= m} (1/sqrt(t) + sigma Phi_bar^{-1}(delta_t / t))`` (see
    :func:`calibrate_vocabulary`). For callers that calibrate ``sigma`` themselves, e.g. by composing
    the selection's Gaussian exactly with other releases (:mod:`dptensor.models.recommend.release_plan`).
    """
    sigma = check_real(sigma, "sigma")
    m = check_positive_int(max_words_per_document, "max_words_per_document")
    delta_t = check_real(threshold_delta, "threshold_delta")
    if not delta_t < 1:
        raise ValueError(f"threshold_delta must lie strictly between 0 and 1, got {threshold_delta!r}")
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    if mechanism == "weighted-gaussian":
        return 1.0 + sigma * float(stats.norm.isf(delta_t / m))
    t = np.arange(1, m + 1, dtype=np.float64)
    return float(np.max(1.0 / np.sqrt(t) + sigma * stats.norm.isf(delta_t / t)))


def predicted_vocabulary_size(
    n_documents: int,
    n_words: int,
    epsilon: float,
    delta: float,
    max_words_per_document: int = DEFAULT_MAX_WORDS_PER_DOCUMENT,
    distinct_words: float = DEFAULT_DISTINCT_WORDS,
) -> float:
    """The expected number of words a weighted-Gaussian private vocabulary releases (public inputs only).

    Model (a planning guess, not a bound): every document has ``n = min(distinct_words, m)``
    distinct words, so it gives each the weight ``1/sqrt(n)``; the document frequencies follow a
    Zipf--Mandelbrot law, so the rank-``r`` word is in ``N n C / (r + B)^S`` documents and its
    weight is

        ``w_r = N sqrt(n) C / (r + B)^S``,

    with ``C``, ``S`` and ``B`` (:data:`ZIPF_CONSTANT`, :data:`ZIPF_EXPONENT`,
    :data:`ZIPF_OFFSET`: an exponent of about 1, Zipf's law, flattened on the first ~50 ranks)
    fitted once on real text (the constants' comment). The word passes the threshold with
    probability ``Phi((w_r - tau) / sigma)`` (``sigma``, ``tau``: :func:`calibrate_vocabulary`), so
    the expected number of passing words is the sum of these over the ranks, and the release keeps
    at most ``n_words`` of them: ``min(n_words, sum_r Phi((w_r - tau) / sigma))``.

    Measured against releases (``benchmarks/vocabulary_plan.py``, docs/lda.md): within 25 % on
    Debian descriptions and change logs and on WordNet glosses at ``epsilon >= 0.5``; WordNet's
    most frequent words are rarer than the law's (a flatter head), so at small budgets, where only
    the first ~100 words pass, it over-predicts (by about 60 % at ``epsilon = 0.2``). Corpora whose
    frequent words are spread over more documents release more words.

    Parameters
    ----------
    n_documents : int
        ``N``, public.
    n_words : int
        ``V``, the most words the release keeps.
    epsilon, delta : float
        The vocabulary's budget.
    max_words_per_document : int, default 64
        ``m``.
    distinct_words : float, default 10
        A public guess of the distinct (non-stop) words of a typical document; never measured on the
        private documents for free.

    Returns
    -------
    float
        The expected size, in ``[0, n_words]``.
    """
    n = check_positive_int(n_documents, "n_documents")
    cap = check_positive_int(n_words, "n_words")
    calibration = calibrate_vocabulary(epsilon, delta, max_words_per_document)
    per_document = check_real(distinct_words, "distinct_words")
    per_document = max(min(per_document, float(calibration.max_words_per_document)), 1.0)
    sigma, tau = calibration.sigma, calibration.threshold
    scale = n * math.sqrt(per_document) * ZIPF_CONSTANT
    # ranks whose weight is above tau - 8 sigma (or tau / 1000) carry all but a negligible expectation
    floor = max(tau - 8.0 * sigma, tau / 1000.0)
    last = min(int((scale / floor) ** (1.0 / ZIPF_EXPONENT) - ZIPF_OFFSET) + 1, 10**7)
    if last < 1:
        return 0.0
    ranks = np.arange(1, last + 1, dtype=np.float64)
    weights = scale / (ranks + ZIPF_OFFSET) ** ZIPF_EXPONENT
    expected = float(np.sum(stats.norm.cdf((weights - tau) / sigma)))
    return min(float(cap), expected)


def vocabulary_guarantee(calibration: VocabularyCalibration, n_words: int) -> PrivacyGuarantee:
    """The guarantee of a private vocabulary of ``n_words`` words, from public quantities only."""
    n_words = check_positive_int(n_words, "n_words")
    c = calibration
    exact = gaussian_epsilon(c.sigma, c.delta - c.threshold_delta, c.sensitivity) + c.threshold_epsilon
    return PrivacyGuarantee(
        epsilon=c.epsilon,
        delta=c.delta,
        neighbouring=NEIGHBOURING,
        accountant="analytic Gaussian + threshold (basic composition)",
        n_releases=1,
        mechanism=("gaussian partition selection" if c.mechanism == "weighted-gaussian"
                   else "policy gaussian partition selection"),
        noise_multiplier=c.noise_multiplier,
        epsilon_exact=min(c.epsilon, exact),
        details={
            "release": "vocabulary",
            "n_words": n_words,
            "max_words_per_document": c.max_words_per_document,
            "sigma": c.sigma,
            "threshold": c.threshold,
            "threshold_delta": c.threshold_delta,
            **({} if c.cutoff is None else {"policy_cutoff": c.cutoff}),
        },
        protected=PROTECTED,
        public=PUBLIC,
        dp_event=c.to_dp_event(),
    )


def document_word_weights(tokens: Iterable[str], max_words_per_document: int) -> dict[str, float]:
    """One document's bounded contribution: its ``<= m`` kept distinct tokens, each of weight ``1/sqrt(n)``.

    A document with more than ``m`` distinct tokens keeps its ``m`` most frequent, ties broken by
    the token (smallest first), so the choice depends on this document alone. An empty document
    contributes nothing. The weight vector has l2 norm 1 (0 when empty).
    """
    m = check_positive_int(max_words_per_document, "max_words_per_document")
    counts = Counter(tokens)
    if len(counts) > m:
        kept = [word for _, word in heapq.nsmallest(m, ((-n, w) for w, n in counts.items()))]
    else:
        kept = list(counts)
    if not kept:
        return {}
    weight = 1.0 / math.sqrt(len(kept))
    return dict.fromkeys(kept, weight)


def word_weights(documents: Iterable[Iterable[str]], max_words_per_document: int) -> dict[str, float]:
    """The summed bounded contributions of all documents (:func:`document_word_weights`): private."""
    totals: dict[str, float] = {}
    for tokens in documents:
        for word, weight in document_word_weights(tokens, max_words_per_document).items():
            totals[word] = totals.get(word, 0.0) + weight
    return totals


def policy_word_weights(
    documents: Iterable[Iterable[str]], max_words_per_document: int, cutoff: float, source: NoiseSource
) -> dict[str, float]:
    """Word weights built by the l2 policy of Gopi et al. (2020, *Policy Gaussian*): private.

    Each document keeps the same ``<= m`` words as :func:`document_word_weights` (``W``). The
    documents are then processed in a **secret uniformly random order** (drawn from ``source``)
    and each one updates the running weights ``Y`` (all zero at the start) by the step

        ``g_u = max(Gamma - Y_u, 0)`` for ``u`` in ``W`` (0 elsewhere),
        ``Y <- Y + g * min(1, 1 / ||g||_2)``                                             (P)

    -- it pushes only its words still below the cutoff ``Gamma`` towards it, by l2 distance at most
    1. A word stops taking weight once it reaches ``Gamma``, so later documents spend their step on
    their other words. Returns the words of positive weight (every word some document kept).

    Privacy (``neighbouring = "document"``). Let ``D`` and ``D'`` differ in one document, ``x``
    replaced by ``y``, and couple the two secret orders so that ``y`` takes ``x``'s slot and the
    other documents keep their order (the order is a uniform permutation of the slots, independent of
    the documents, so this coupling is a bijection of equally likely orders and the outputs are
    mixtures over the same orders; as the order is uniform, the input order does not matter either).
    Then:

    1. *Each step is 1-Lipschitz in l2.* Step (P) for a set ``W`` is the proximal map of the convex
       function ``h_W(Y) = ||(Gamma - Y_W)_+||_2`` (a norm, monotone on the non-negative orthant, of
       convex non-negative coordinates): with ``g = (Gamma - Y_W)_+`` and ``Z`` the result of (P),
       ``Y - Z = -g min(1, 1/||g||)`` lies in the subdifferential ``dh_W(Z)`` (if ``||g|| > 1``,
       ``(Gamma - Z_W)_+ = g (1 - 1/||g||)`` and the gradient is ``-g / ||g||``; if ``||g|| <= 1``,
       ``h_W(Z) = 0`` and ``h_W(Z') >= <g, Gamma 1_W - Z'_W> = <-g, Z' - Z>`` for every ``Z'`` by
       Cauchy-Schwarz). Proximal maps of convex functions are firmly non-expansive (Moreau 1965;
       Bauschke & Combettes 2017, Proposition 12.28), hence 1-Lipschitz -- Gopi et al.'s
       *l2-contractive* policy.
    2. *The replaced slot moves the weights by at most sqrt(2).* Before it both runs hold the same
       ``Y``. There ``x`` adds ``z_x`` and ``y`` adds ``z_y``, both non-negative with norm ``<= 1``,
       so ``||z_x - z_y||^2 = ||z_x||^2 + ||z_y||^2 - 2 <z_x, z_y> <= 2``.
    3. *The later slots keep it so*: both runs apply the same 1-Lipschitz steps (1), so the final
       weight vectors satisfy ``||Y(D) - Y(D')||_2 <= sqrt(2)`` -- the sensitivity of the weighted
       mechanism, so the Gaussian part of the module docstring's proof is unchanged.
    4. *A word of one corpus only* (``t`` words in ``x`` that no other document of ``D`` has and
       ``y`` lacks) is weighted by ``x``'s step alone, from ``Y_u = 0``: all ``t`` have the gap
       ``Gamma``, so each weighs ``Gamma min(1, 1/||g||) <= 1/sqrt(t)`` as ``||g|| >= Gamma sqrt(t)``;
       and ``t <= m``. :func:`calibrate_vocabulary`'s ``tau`` makes ``t Phi_bar((tau - 1/sqrt(t)) /
       sigma) <= delta_t`` for every ``t <= m``: the threshold part of the module docstring's proof,
       with this bound in place of ``m Phi_bar((tau - 1) / sigma)``.

    A fixed order (the input order, or documents sorted by length) would give only the
    add-then-remove bound ``2`` when the order is not the same slot-for-slot in both corpora; the
    secret random order is what makes 2 hold with ``sqrt(2)`` for any input order.
    ``tests/privacy/test_private_vocabulary.py`` checks 2-4 by brute force on tiny corpora, in every order.

    Parameters
    ----------
    documents : iterable of iterables of str
        Each document's tokens.
    max_words_per_document : int
        ``m``.
    cutoff : float
        ``Gamma > 0`` (public: :func:`calibrate_vocabulary`).
    source : NoiseSource
        Secret randomness for the order (call only after the release has begun).

    Returns
    -------
    dict
        Word to weight, for every word some document kept.
    """
    m = check_positive_int(max_words_per_document, "max_words_per_document")
    gamma = check_real(cutoff, "cutoff")
    kept = [list(document_word_weights(tokens, m)) for tokens in documents]
    order = np.argsort(source.random(len(kept)), kind="stable") if kept else []
    return _policy_steps([kept[i] for i in order], gamma)


def _policy_steps(
    ordered: list[list[str]], cutoff: float, start: dict[str, float] | None = None
) -> dict[str, float]:
    """Step (P) of :func:`policy_word_weights` for each kept word set, in the given order, from ``start``."""
    totals: dict[str, float] = dict(start or {})
    for words in ordered:
        gaps = [cutoff - totals.get(w, 0.0) for w in words]
        norm = math.sqrt(sum(g * g for g in gaps if g > 0.0))
        if norm == 0.0:
            continue
        scale = min(1.0, 1.0 / norm)
        for word, gap in zip(words, gaps, strict=True):
            if gap > 0.0:
                totals[word] = totals.get(word, 0.0) + gap * scale
    return totals


def vocabulary_weights(
    documents: Iterable[Iterable[str]], calibration: VocabularyCalibration, source: NoiseSource
) -> dict[str, float]:
    """The private weights of the mechanism: :func:`word_weights` or :func:`policy_word_weights`."""
    m = calibration.max_words_per_document
    if calibration.mechanism == "policy-gaussian":
        return policy_word_weights(documents, m, calibration.cutoff, source)
    return word_weights(documents, m)


def select_vocabulary(
    weights: dict[str, float], n_words: int, calibration: VocabularyCalibration, source: NoiseSource
) -> tuple[list[str], np.ndarray]:
    """The release: noise on every occurring word's weight, the threshold, the top ``n_words``.

    Call only after the release has begun (:func:`~dptensor.privacy.begin_release`). Returns the
    released words in alphabetical order and their noisy weights (the released values).
    """
    n_words = check_positive_int(n_words, "n_words")
    words = list(weights)
    noisy = source.add_gaussian(np.fromiter(weights.values(), dtype=np.float64, count=len(words)),
                                calibration.sigma)
    passed = np.flatnonzero(noisy > calibration.threshold)
    # the n_words largest noisy weights; exact ties (probability zero) broken by the word
    best = sorted(passed.tolist(), key=lambda i: (-noisy[i], words[i]))[:n_words]
    best.sort(key=lambda i: words[i])
    return [words[i] for i in best], noisy[best]


@dataclass(frozen=True)
class PrivateVocabulary:
    """A vocabulary released under DP (:func:`private_vocabulary`).

    Attributes
    ----------
    words : list of str
        At most ``n_words`` words, alphabetical.
    noisy_weights : ndarray
        Their noisy weights (part of the release).
    guarantee : PrivacyGuarantee
    calibration : VocabularyCalibration
    """

    words: list[str]
    noisy_weights: np.ndarray
    guarantee: PrivacyGuarantee
    calibration: VocabularyCalibration


def private_vocabulary(
    documents: Iterable[Iterable[str]],
    n_words: int,
    *,
    epsilon: float,
    delta: float,
    max_words_per_document: int = DEFAULT_MAX_WORDS_PER_DOCUMENT,
    threshold_delta_share: float = DEFAULT_THRESHOLD_DELTA_SHARE,
    mechanism: str = DEFAULT_MECHANISM,
    cutoff_sigmas: float = DEFAULT_CUTOFF_SIGMAS,
    noise: NoiseLike | NoiseSource = None,
    ledger: Ledger | None = None,
) -> PrivateVocabulary:
    """Choose up to ``n_words`` frequent words of tokenised documents under ``(epsilon, delta)``-DP.

    Gaussian partition selection (module docstring), with fixed weights or Gopi et al.'s policy
    (:func:`policy_word_weights`); the guarantee is computed and the ledger charged before any
    document is read.

    Parameters
    ----------
    documents : iterable of iterables of str
        Each document's tokens (e.g. ``CountVectorizer().build_analyzer()(text)``).
    n_words : int
        The most words to release.
    epsilon, delta : float
        The vocabulary's budget under the ``"document"`` relation.
    max_words_per_document : int, default 64
        Public bound ``m`` on the distinct words one document contributes.
    threshold_delta_share : float, default 0.5
        Share of ``delta`` spent on the threshold.
    mechanism : {"weighted-gaussian", "policy-gaussian"}, default "weighted-gaussian"
        The policy (:func:`policy_word_weights`) or fixed ``1/sqrt(n)`` weights (:func:`word_weights`).
    cutoff_sigmas : float, default 2.0
        The policy's cutoff ``Gamma = tau + cutoff_sigmas * sigma`` (:func:`calibrate_vocabulary`).
    noise : None, "numpy", "opendp", InsecureTestNoise or NoiseSource
        Secret randomness.
    ledger : object with ``charge``, optional
        Charged before the documents are read.

    Returns
    -------
    PrivateVocabulary

    Examples
    --------
    >>> docs = [["tensor", "power", "method"]] * 3000 + [["secret", "word"]]
    >>> vocab = private_vocabulary(docs, 10, epsilon=1.0, delta=1e-6)
    >>> vocab.words
    ['method', 'power', 'tensor']
    """
    n_words = check_positive_int(n_words, "n_words")
    calibration = calibrate_vocabulary(
        epsilon, delta, max_words_per_document, threshold_delta_share=threshold_delta_share,
        mechanism=mechanism, cutoff_sigmas=cutoff_sigmas,
    )
    guarantee, source = begin_release(
        vocabulary_guarantee(calibration, n_words), noise, ledger=ledger, description="private vocabulary"
    )
    words, noisy = select_vocabulary(vocabulary_weights(documents, calibration, source), n_words,
                                     calibration, source)
    return PrivateVocabulary(words, noisy, guarantee, calibration)
