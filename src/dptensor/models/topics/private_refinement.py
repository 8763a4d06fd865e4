"""Private refinement: CVB0 passes whose expected topic-word counts are released with Gaussian noise.

The likelihood refinement of :mod:`dptensor.models.topics.refinement` reads the documents only
through one statistic per pass, the expected topic-word counts ``W = sum_n D_n`` with
``D_nwj = g_w c_nw gamma_nwj`` (``gamma_nw`` the CVB0 responsibilities of word ``w`` in document
``n`` under the topics of the previous pass, ``g_w`` a public word weight, *Word weights* below).
:class:`~dptensor.models.PrivateSpectralLDA` continues from its private moment estimate with ``T``
such passes (issue 35, item 2), each releasing ``W`` by the Gaussian mechanism:

* **Bounded contribution.** Each document's term is scaled to Frobenius norm at most ``L``
  (``refine_clip``): ``D_n <- D_n min(1, L / ||D_n||_F)``. ``D_n`` depends on document ``n`` and on
  public quantities only (the topics and prior of the previous pass, themselves released, and the
  word weights below, from the released unigram distribution), so
  replacing one document changes ``W`` by ``D_n - D_n'``, two non-negative matrices of norm at most
  ``L``: ``||D_n - D_n'||_F^2 = ||D_n||^2 + ||D_n'||^2 - 2 <D_n, D_n'> <= 2 L^2`` (the inner product of
  non-negative matrices is non-negative). **Sensitivity** ``sqrt(2) L`` under *replace one
  document* (any document: an empty one adds nothing; one whose counts overflow float64 adds
  nothing either, a function of that document alone). Brute-force checked in
  ``tests/models/topics/test_private_refinement_sensitivity.py``.
* **Noise.** ``W + N(0, (z sqrt(2) L)^2)`` entrywise, ``z`` the pass's noise multiplier from the plan
  (:func:`~dptensor.models.topics._private_plan.plan_private_spectral_lda`): the ``T`` passes are
  ``T`` Gaussian releases, composed exactly with the moment releases in one Gaussian-DP budget
  (their share ``refine_share`` of ``mu^2``, ``mu_pass = sqrt(share / T) mu``).
* **Word weights.** Row ``w`` of each term is multiplied by ``g_w = (u_max / u_w)^(1/2)`` (``u`` the
  released unigram distribution, :func:`release_word_weights`) before the clipping, and the release
  is divided by ``g_w`` again: the sensitivity is unchanged, and the noise on row ``w`` of the counts
  falls to ``sigma / g_w``, where rare words, whose rows drown in the noise, need it. Why ``1/2``: a
  word's count under topic ``j`` is about ``u_w`` times the topic's total, so the noise costs the
  topics about ``sum_w sigma^2 / (g_w^2 u_w)`` (the chi-squared divergence of the estimated
  distributions), while the weights spend the clipping bound in proportion to ``sum_w g_w^2 u_w``
  (a document's squared norm); the cost at a fixed spend is smallest for ``g_w^2 u_w`` constant.
  Measured (V = 2000, k = 10, the same start and noise for each pair): one pass from the private
  moments of Debian descriptions at epsilon = 1 lost 25 in held-out perplexity to the noise
  unweighted and 17 with ``a = 1/2`` (``a = 1/4``: 19; ``-1/4``, down-weighting rare words: 34; the
  noise on the 1 500 rarest words alone cost 22, on the 100 most frequent 1); 16 averaged passes
  gave 759 / 741 (``a = 0`` / ``1/2``; ``3/4``: 751), and on the other corpora 1237 / 1186 (WordNet
  glosses, epsilon = 1), 665 / 653 (change logs, epsilon = 1) and 646 / 639 (Debian, epsilon = 4).
* **Averaging** (post-processing): the topics of pass ``t`` come from the weighted average of the
  releases so far, release ``s`` weighing ``s^2`` (:class:`ReleaseAverage`), not from release ``t``
  alone. Noisy passes that each restart from their own release settle where one pass's noise puts
  them: from noise-free converged topics (held-out perplexity 610, Debian descriptions, V = 2000,
  k = 10) six such passes at epsilon = 1 drifted to 674, 700, 713, 719, 722 and 725. The average's
  noise is ``sigma sqrt(sum s^4) / sum s^2``, about ``3 sigma / sqrt(5 T)`` after ``T`` passes; as
  each pass's ``sigma`` grows like ``sqrt(T)`` at a fixed share of the budget, the final noise is
  about ``3 / sqrt(5)`` (1.28 at ``T = 6``, 1.32 at 16) times that of one release on the whole share,
  whatever ``T``: more passes cost time, not accuracy, and the weights let the late releases, made
  under better topics, dominate (equal weights would give exactly one release's noise, but keep the
  early releases, made under the start's topics, at full weight).
* **Post-processing** of the average (no document is read): each word's row of the noisy counts,
  floored at 0, gets ``s_w`` pseudo-counts (``s_w`` the average's noise on the row) spread as the
  previous pass's posterior over topics (``phi_wj alpha_j``, normalised over ``j``: a word whose
  counts drown in the noise keeps its previous split), is rescaled to the released unigram frequency
  of the word (``unigram_``, from the ``m1`` release), and the topics are the columns, normalised.

Nothing data-dependent is observable apart from the releases: the number of passes is fixed by the
plan (no data-dependent stopping rule), no log-likelihood is recorded (``refinement_.log_likelihood``
is empty) and the progress lines name the pass only.

Measured on three real corpora (V = 2000, k = 10, 10% held out, one noise draw each;
docs/benchmarks.md, *Topic quality against tomotopy*): 16 weighted, averaged passes on 0.6 of the
budget take the held-out perplexity of the moment estimate on the whole budget at epsilon = 4 from
741 to 644 (Debian descriptions), 1119 to 988 (WordNet glosses) and 681 to 622 (change logs); at
epsilon = 1 from 796 to 737, 1254 to 1154 and 754 to 655 (docs/notes/lda-research-log.md, *Averaging
the passes' releases* and *Weighting rare words in the release*).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from dptensor.models.topics.refinement import Refinement, checked_word_weights, clipped_expected_counts
from dptensor.parallel import RowBlocks
from dptensor.privacy.noise import NoiseSource

#: Sensitivity of one pass's release per unit of ``refine_clip`` (replace one document; module docstring).
REFINEMENT_SENSITIVITY_FACTOR = math.sqrt(2.0)
#: In-place CVB0 sweeps over each document's tokens per private pass: more than the non-private
#: refinement's 2, since a pass is paid for and the sweeps are free. Three noise draws each, the
#: held-out perplexity with 2 / 8 sweeps: Debian descriptions at epsilon = 4, 676 / 660; WordNet glosses
#: 1029 / 1016 (epsilon = 4) and 1229 / 1222 (epsilon = 1); change logs at epsilon = 1, 699 / 693
#: (16 sweeps: 659 on Debian).
PRIVATE_SWEEPS = 8
#: ``p`` of :class:`ReleaseAverage`: release ``t`` of a fit weighs ``t^p`` in the average that the
#: topics come from (module docstring, *Averaging*).
RELEASE_WEIGHT_POWER = 2.0
#: ``a`` of :func:`release_word_weights`: word ``w``'s rows of the terms weigh ``(u_max / u_w)^a``
#: (module docstring, *Word weights*).
WORD_WEIGHT_POWER = 0.5
#: The smallest ``u_w / u_max`` a weight is computed from: no weight exceeds ``1e6^a`` (1000).
WORD_WEIGHT_MIN_RATIO = 1e-6


def refinement_sensitivity(clip: float) -> float:
    """``sqrt(2) L``: the replace-one sensitivity of a pass's clipped expected topic-word counts."""
    return REFINEMENT_SENSITIVITY_FACTOR * float(clip)


def _check_public_inputs(topics_t: np.ndarray, alpha: np.ndarray, clip: float) -> None:
    """The sensitivity needs non-negative terms: finite non-negative topics and prior, a positive bound.

    All three are public (released or parameters), so refusing them reveals nothing.
    """
    for name, value in (("topics", topics_t), ("doc_topic_prior", alpha)):
        if not (np.all(np.isfinite(value)) and np.all(value >= 0)):
            raise ValueError(f"private refinement needs finite, non-negative {name}")
    if not (math.isfinite(clip) and clip > 0):
        raise ValueError(f"refine_clip must be a positive number, got {clip!r}")


def release_word_weights(unigram: np.ndarray, power: float = WORD_WEIGHT_POWER) -> np.ndarray:
    """``g_w = (u_max / max(u_w, r u_max))^a``: each word's weight in the released terms.

    ``u`` is the released unigram distribution, so the weights are public (post-processing);
    ``r`` = :data:`WORD_WEIGHT_MIN_RATIO` bounds them. Module docstring, *Word weights*.

    Parameters
    ----------
    unigram : ndarray of shape (d,)
        The released unigram distribution (finite, at least one entry positive).
    power : float, default WORD_WEIGHT_POWER
        ``a``: 0 weighs every word 1; ``1/2`` minimises the noise's chi-squared cost.

    Returns
    -------
    ndarray of shape (d,)
        ``g``, between 1 (the most frequent word) and ``r^(-a)``.
    """
    unigram = np.asarray(unigram, dtype=np.float64)
    largest = float(np.max(unigram)) if unigram.size else 0.0
    if not (np.all(np.isfinite(unigram)) and largest > 0):
        raise ValueError("word weights need a finite unigram distribution with a positive entry")
    ratio = np.maximum(unigram / largest, WORD_WEIGHT_MIN_RATIO)
    return ratio ** (-float(power))


def release_expected_counts(
    blocks: RowBlocks, topics_t: np.ndarray, alpha: np.ndarray, *, clip: float, noise_multiplier: float,
    source: NoiseSource, sweeps: int = PRIVATE_SWEEPS, word_weights: np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    """One pass's release: ``sum_n D_n`` (each clipped to norm ``clip``) plus ``N(0, (z sqrt2 clip)^2)``.

    The Gaussian mechanism at sensitivity :func:`refinement_sensitivity` (module docstring). With
    ``word_weights`` ``g``, the terms are ``D_nwj = g_w c_nw gamma_nwj``; the release is returned
    unweighted (row ``w`` divided by ``g_w``), so that row's noise standard deviation is
    ``z sqrt2 clip / g_w``.
    """
    _check_public_inputs(topics_t, alpha, clip)
    weights = None if word_weights is None else checked_word_weights(word_weights, topics_t.shape[0])
    counts = blocks.map_sum(
        clipped_expected_counts, topics_t, alpha, int(sweeps), float(clip), weights,
        label="private-refinement",
    )  # fmt: skip
    released = source.add_gaussian(counts, float(noise_multiplier) * refinement_sensitivity(clip))
    return released if weights is None else released / weights[:, None]


class ReleaseAverage:
    """The running weighted average of the passes' releases that each pass's topics come from.

    Release ``t`` (counted from 1) gets weight ``t^p`` (``p`` = :data:`RELEASE_WEIGHT_POWER`), so the
    average after ``t`` releases of noise ``sigma`` each has noise ``sigma sqrt(sum w^2) / sum w``
    (independent draws). Post-processing of the releases (module docstring, *Averaging*).

    Parameters
    ----------
    noise_std : float
        ``sigma``, the noise standard deviation of every release (with word weights, of every
        release before its rows are divided by the weights: row ``w`` of the average then has
        the returned noise over ``g_w``).
    power : float, default RELEASE_WEIGHT_POWER
        ``p``; 0 weighs the releases equally, and a large ``p`` approaches using the last one alone.
    """

    def __init__(self, noise_std: float, power: float = RELEASE_WEIGHT_POWER) -> None:
        self.noise_std = float(noise_std)
        self.power = float(power)
        self._weighted: np.ndarray | None = None
        self._weights = 0.0
        self._squared_weights = 0.0
        self._count = 0

    def add(self, released: np.ndarray) -> tuple[np.ndarray, float]:
        """Add the next release; return the average so far and its noise standard deviation."""
        released = np.asarray(released, dtype=np.float64)
        if self._weighted is not None and released.shape != self._weighted.shape:
            raise ValueError(f"release of shape {released.shape} after releases of {self._weighted.shape}")
        self._count += 1
        weight = float(self._count) ** self.power
        if self._weighted is None:
            self._weighted = weight * released  # a new array: the caller's release is never changed
        else:
            self._weighted += weight * released
        self._weights += weight
        self._squared_weights += weight * weight
        noise = self.noise_std * math.sqrt(self._squared_weights) / self._weights
        return self._weighted / self._weights, noise


def denoised_topics(
    released: np.ndarray, noise_std: float | np.ndarray, previous_t: np.ndarray, alpha: np.ndarray,
    unigram: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Topics (``d x k``, columns on the simplex) from one pass's released counts (post-processing).

    Each word's row ``max(W~_w, 0) + s_w pi_w`` (``pi_w`` the previous posterior over topics of the
    word, ``s_w`` the noise standard deviation of the row: one number for every row, or one per
    row) is rescaled to the word's released frequency, then each column is normalised (module
    docstring).
    """
    posterior = previous_t * alpha[None, :]
    totals = posterior.sum(axis=1, keepdims=True)
    posterior = np.where(totals > 0, posterior / np.where(totals > 0, totals, 1.0), 1.0 / alpha.size)
    row_std = np.maximum(np.asarray(noise_std, dtype=np.float64), 1e-12)
    row_std = np.broadcast_to(row_std, (released.shape[0],))
    rows = np.maximum(released, 0.0) + row_std[:, None] * posterior
    rows *= (np.maximum(unigram, 0.0) / rows.sum(axis=1))[:, None]
    rows += 1e-300  # every word stays possible under every topic (a column of zeros is impossible)
    return rows / rows.sum(axis=0, keepdims=True)


def refine_topics_privately(
    blocks: RowBlocks,
    topics: np.ndarray,
    doc_topic_prior: np.ndarray,
    unigram: np.ndarray,
    *,
    passes: int,
    clip: float,
    noise_multiplier: float,
    source: NoiseSource,
    sweeps: int = PRIVATE_SWEEPS,
    on_pass: Callable[[int], None] | None = None,
) -> Refinement:
    """``passes`` private CVB0 passes from ``topics`` (module docstring).

    Parameters
    ----------
    blocks : RowBlocks
        The documents.
    topics : ndarray of shape (k, d)
        Where refinement starts: released (or post-processed) topics, rows on the simplex.
    doc_topic_prior : ndarray of shape (k,)
        ``alpha``, released (held fixed).
    unigram : ndarray of shape (d,)
        The released unigram distribution (each word's total in the denoised counts).
    passes : int
        How many releases (fixed in advance by the plan).
    clip : float
        ``L``, each document's bound.
    noise_multiplier : float
        ``z`` of each release: the noise standard deviation is ``z sqrt(2) L``.
    source : NoiseSource
        Where the noise comes from (the fit's, after the charge).
    sweeps : int, default 8
    on_pass : callable, optional
        Called with the pass number after each release (no data-dependent value).

    Returns
    -------
    Refinement
        With an empty ``log_likelihood`` (none is computed on the private path),
        ``converged=False`` and ``released_counts`` the weighted average of the releases (``d x k``,
        word weights divided out), which the end-to-end audit scores.
    """
    alpha = np.ascontiguousarray(doc_topic_prior, dtype=np.float64)
    unigram = np.asarray(unigram, dtype=np.float64)
    topics_t = np.ascontiguousarray(np.asarray(topics, dtype=np.float64).T)
    noise_std = float(noise_multiplier) * refinement_sensitivity(clip)
    word_weights = release_word_weights(unigram)
    average = ReleaseAverage(noise_std)
    counts = np.zeros_like(topics_t)
    for pass_number in range(1, int(passes) + 1):
        released = release_expected_counts(
            blocks, topics_t, alpha, clip=clip, noise_multiplier=noise_multiplier, source=source,
            sweeps=sweeps, word_weights=word_weights,
        )
        counts, counts_std = average.add(released)
        topics_t = np.ascontiguousarray(
            denoised_topics(counts, counts_std / word_weights, topics_t, alpha, unigram)
        )
        if on_pass is not None:
            on_pass(pass_number)
    return Refinement(
        topics=np.ascontiguousarray(topics_t.T),
        doc_topic_prior=alpha,
        topic_word_prior=0.0,  # no Dirichlet smoothing: the noise's pseudo-counts take its place
        log_likelihood=np.empty(0),
        n_passes=int(passes),
        converged=False,
        released_counts=counts,
    )
