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
``(epsilon, delta)``-DP. ``tests/test_private_vocabulary.py`` checks both sensitivities by brute
force on tiny corpora and audits the release empirically.

What is public: ``n_words``, ``m``, the tokeniser, ``epsilon``, ``delta``. Nothing else about the
documents is released: not the number of distinct words, not the weights of words below the
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
    "private_vocabulary",
    "select_vocabulary",
    "vocabulary_guarantee",
    "word_weights",
]

#: The default public bound on the distinct words one document contributes.
DEFAULT_MAX_WORDS_PER_DOCUMENT = 64
#: The default share of ``delta`` spent on the threshold (the rest goes to the Gaussian noise).
DEFAULT_THRESHOLD_DELTA_SHARE = 0.5

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
        l2 sensitivity of the weights on the common words, ``sqrt(2)``.
    """

    epsilon: float
    delta: float
    max_words_per_document: int
    sigma: float
    threshold: float
    threshold_delta: float
    threshold_epsilon: float
    sensitivity: float = math.sqrt(2.0)

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
) -> VocabularyCalibration:
    """The noise ``sigma`` and threshold ``tau`` that make the vocabulary ``(epsilon, delta)``-DP.

    ``delta_t = threshold_delta_share * delta``; ``epsilon_t = -log(1 - delta_t)``;
    ``sigma`` is the analytic Gaussian noise (Balle & Wang 2018, Theorem 8) for
    ``(epsilon - epsilon_t, delta - delta_t)`` at l2 sensitivity ``sqrt(2)``; and
    ``tau = 1 + sigma Phi_bar^{-1}(delta_t / m)``, so that ``m`` exclusive words of weight ``<= 1``
    pass it with total probability ``<= delta_t`` (union bound).

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

    Returns
    -------
    VocabularyCalibration
    """
    check_epsilon_delta(epsilon, delta)
    m = check_positive_int(max_words_per_document, "max_words_per_document")
    share = check_real(threshold_delta_share, "threshold_delta_share")
    if not share < 1:
        raise ValueError(f"threshold_delta_share must lie strictly between 0 and 1, got {share!r}")
    delta_t = share * float(delta)
    epsilon_t = -math.log1p(-delta_t)
    if not epsilon_t < epsilon:
        raise ValueError(f"epsilon={epsilon!r} is too small for the threshold's share of delta")
    sensitivity = math.sqrt(2.0)
    sigma = gaussian_sigma_analytic(float(epsilon) - epsilon_t, float(delta) - delta_t, sensitivity)
    threshold = 1.0 + sigma * float(stats.norm.isf(delta_t / m))
    return VocabularyCalibration(
        epsilon=float(epsilon), delta=float(delta), max_words_per_document=m, sigma=sigma,
        threshold=threshold, threshold_delta=delta_t, threshold_epsilon=epsilon_t,
        sensitivity=sensitivity,
    )  # fmt: skip


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
        mechanism="gaussian partition selection",
        noise_multiplier=c.noise_multiplier,
        epsilon_exact=min(c.epsilon, exact),
        details={
            "release": "vocabulary",
            "n_words": n_words,
            "max_words_per_document": c.max_words_per_document,
            "sigma": c.sigma,
            "threshold": c.threshold,
            "threshold_delta": c.threshold_delta,
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
    noise: NoiseLike | NoiseSource = None,
    ledger: Ledger | None = None,
) -> PrivateVocabulary:
    """Choose up to ``n_words`` frequent words of tokenised documents under ``(epsilon, delta)``-DP.

    Gaussian partition selection (module docstring); the guarantee is computed and the ledger
    charged before any document is read.

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
        epsilon, delta, max_words_per_document, threshold_delta_share=threshold_delta_share
    )
    guarantee, source = begin_release(
        vocabulary_guarantee(calibration, n_words), noise, ledger=ledger, description="private vocabulary"
    )
    words, noisy = select_vocabulary(
        word_weights(documents, calibration.max_words_per_document), n_words, calibration, source
    )
    return PrivateVocabulary(words, noisy, guarantee, calibration)
