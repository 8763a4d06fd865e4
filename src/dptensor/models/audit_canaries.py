"""Canaries for auditing dptensor's private estimators end to end (registered on import).

:func:`dptensor.privacy.audit.audit_estimator` lives in the privacy layer, which may not import
the models; this module tells it, for each private estimator, what a canary is under the
estimator's neighbouring relation and which released numbers score it
(:class:`~dptensor.privacy.audit.CanaryAdapter`). Each canary is as distinguishable as the
relation allows, and reads only the fitted estimator's released attributes (``components_``,
``word_frequencies_``, ``whitening_``, ``biases_``, ``predict``), never its internals:

* **documents** (``"document"`` relation: :class:`PrivateSpectralLDA`, :class:`DPVariationalLDA`,
  :class:`SingleTopicModel`; replace one document): a document spread evenly over its own words
  of the corpus, as long as the longest document of the corpus (so no length bound it must
  respect is crossed; for :class:`DPVariationalLDA`, as long as its declared ``max_doc_length``,
  so that its statistics reach the clipping norm); left out, a document of other words, as long,
  takes its place (the number of documents stays the same; the two documents share no word, the
  most distinguishable replace-one pair). :class:`DPVariationalLDA` canaries are one rare word
  each, scored by the canary word's total weight in the released topics (``components_`` summed
  over topics) minus its neighbour word's; extra features for the distinguishing attack: every
  word's total and largest weight. :class:`PrivateSpectralLDA`'s clipped releases weight a
  document's word frequencies by ``v = min(w_max, C1 / ||p||)`` and its pairs by
  ``min(v, C / ||P||)``; its canaries spread over the fewest words that move both releases by
  their whole bound (:func:`clipped_words_per_document`: one word at the default ``C1 = 3 C``),
  scored by their words' weight in the released word frequencies (``word_frequencies_``, the
  ``m1`` release behind ``unigram_``) minus the neighbour's, and by every other release of the fit
  (:func:`release_scores`: ``m2``, ``e3`` and, where the private CVB0 refinement ran, ``rf``, the
  average of its passes' releases). :class:`DPVariationalLDA` with ``init="moments"`` is scored on
  its topics and on each release of its moment start (``moment_model_``). :class:`SingleTopicModel`
  reads the most **frequent** words, whose directions lie in the top-``K`` eigenspace that its
  whitening keeps (a rare word's is projected away), scored by the released rank-``K`` second
  moment ``U diag(s) U^T`` (``whitening_``: the top eigenpairs of the noisy ``M2``) at the canary
  word's diagonal entry minus its neighbour's.
* **ratings** (``"entry-value"``: :class:`TensorCompletion`, change one observed value): an
  observed entry set to the top of the declared ``value_range``, left out set to its bottom.
  Score: the predicted rating at the entry; extras: predictions at the entries sharing its
  user or item.
* **users** (``"user"``: change every rating of one user, their number and cells included): a
  user who rates ``max_ratings`` distinct items (one day each: each rating in its own row of the
  item mode, so that the user's contribution reaches the clipping bound ``C`` of every per-row
  release) at the top of ``value_range``, left out the same cells at its bottom; canaries rate
  disjoint items. Score: the mean released item bias (``biases_[1]``, part of the jointly private
  model) at the canary's items; without biases, the mean prediction at those cells for a *probe
  user* whose ratings are removed (a user's own row is computed from their own ratings, so only
  the released model is read). Extras: the per-item values. Where the plan makes a **spectral
  start** (the users' covariance of their residuals less their own mean, a release that a user
  rating all items alike does not move), half of a canary's items stay at the bottom when it is
  in, and a second score reads the released start ``S`` (``spectral_start_``): ``||S^T a||^2`` at
  the canary's residual direction ``a`` (its neighbour's residuals are all zero).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dptensor.models._options import flat_params
from dptensor.models.completion._plan import plan_completion
from dptensor.models.completion.estimator import TensorCompletion
from dptensor.models.recommend import audit  # noqa: F401 - registers PrivateRecommender's canaries
from dptensor.models.topics.dp_vi import DEFAULT_MAX_DOC_LENGTH, DPVariationalLDA
from dptensor.models.topics.dp_vi_options import DPVIOptions
from dptensor.models.topics.private_refinement import release_word_weights
from dptensor.models.topics.private_spectral import PrivateSpectralLDA
from dptensor.models.topics.sensitivity import lda_moment_constants
from dptensor.models.topics.single_topic import SingleTopicModel
from dptensor.privacy.end_to_end_audit import register_canaries

__all__ = ["CompletionCanaries", "DocumentCanaries", "clipped_words_per_document", "release_scores"]

#: ``DocumentCanaries(score=...)``: one release's score, or one per release of the fit.
SCORES: tuple[str, ...] = ("topic-weight", "second-moment", "unigram", "spectral-releases",
                           "single-topic-releases", "dp-vi-releases")


def _topic_word_features(
    components: np.ndarray, words: np.ndarray, others: np.ndarray
) -> list[np.ndarray]:
    """Per canary: its words' total released weight minus its neighbour's, then every word's total and top."""
    comp = np.asarray(components, dtype=float)
    total, top = comp.sum(axis=0), comp.max(axis=0)
    return [np.concatenate(([total[w].sum() - total[o].sum()], total, top))
            for w, o in zip(words, others, strict=True)]


def _uniform_document(words: np.ndarray, length: int, n_words: int) -> sp.csr_matrix:
    """A document of ``length`` tokens spread evenly over ``words`` (a multiple of their number)."""
    each = length // len(words)
    return sp.csr_matrix((np.full(len(words), each), (np.zeros(len(words), dtype=np.int64), words)),
                         shape=(1, n_words))


def clipped_words_per_document(clipping: tuple[float, float] | None, n_words: int, length: int) -> int:
    """How many distinct words a canary document spreads over, to reach both clipping bounds.

    :mod:`dptensor.models.topics.clipped_moments` weights a document's word frequencies by
    ``v = min(w_max, C1 / ||p||_2)`` and its pairs by ``w = min(v, C / ||P||_F)``: a one-word
    document (``||P|| = ||p|| = 1``) gets ``v = C1`` and ``w = min(C1, C)``, so it moves both
    releases by their whole bound when ``C <= C1 <= 1`` (the default ``C1 = 3 C``). Otherwise
    spreading the document evenly over ``s`` words lowers ``||P|| ~ 1/s`` faster than
    ``||p|| = 1/sqrt(s)``. Chosen here to maximise ``(v ||p|| / C1)^2 + (w ||P|| / C)^2`` (the
    share of each release's bound the canary moves) with the exact weights (public ``C``, ``C1``
    and length), at most ``n_words // 2`` (a canary and its neighbour share no word); 1 without
    clipping (``clipping=None``: the worst-case sensitivities, which a one-word document attains).
    """
    if clipping is None:
        return 1
    from dptensor.models.topics.clipped_moments import clipped_terms

    clip, word_clip = clipping[:2]
    best, best_share = 1, -1.0
    for size in range(1, max(1, n_words // 2) + 1):
        doc = _uniform_document(np.arange(size), size * -(-length // size), size)
        terms = clipped_terms(doc, clip, word_clip)
        share = (float(terms.frequency_weights[0] * terms.word_norms[0]) / word_clip) ** 2 + (
            float(terms.weights[0] * terms.pair_norms[0]) / clip) ** 2
        if share > best_share + 1e-12:
            best, best_share = size, share
    return best


@dataclass
class _DocumentPlan:
    base: Any
    words: np.ndarray  # (n_canaries, words per document)
    others: np.ndarray
    canaries: list
    fillers: list
    tokens: bool

    @property
    def n_canaries(self) -> int:
        return len(self.words)


class DocumentCanaries:
    """Document canaries, each spread evenly over its own words (see the module docstring).

    Parameters
    ----------
    words : {"rare", "frequent"}
        Which words the canaries and their neighbours are made of: the corpus's rarest (a topic
        model's released topics), or its most frequent (the top eigenspace a spectral whitening
        keeps).
    min_length : int
        Canary documents are at least this long (otherwise as long as the longest document).
    score : {"topic-weight", "second-moment", "unigram", "spectral-releases", "single-topic-releases", \
            "dp-vi-releases"}
        ``"topic-weight"``: the canary's words' released weight in ``components_`` minus its
        neighbour's. ``"second-moment"``: the released rank-``K`` second moment
        ``U diag(s) U^T`` (the estimator's ``whitening_``) at the canary words' diagonal entries
        minus its neighbour's (:class:`SingleTopicModel`). ``"unigram"``: the canary's words'
        weight in the released ``word_frequencies_`` minus its neighbour's (:class:`PrivateSpectralLDA`'s
        clipped releases; ``"topic-weight"`` when the fit released none). ``"spectral-releases"``
        (:class:`PrivateSpectralLDA`'s default) and ``"single-topic-releases"``
        (:class:`SingleTopicModel`'s): one score per release of the fit (:func:`release_scores`),
        each bounded separately by the audit. ``"dp-vi-releases"`` (:class:`DPVariationalLDA` with
        ``init="moments"``): ``"topic-weight"`` for the VI releases (``"topics"``) and one score per
        release of the moment start (``"start m1"``, ...: :func:`release_scores` of
        ``moment_model_``).
    words_per_document : int or "clip"
        Distinct words per canary document; ``"clip"``: enough to reach both clipping bounds of
        a clipped :class:`PrivateSpectralLDA` (:func:`clipped_words_per_document`), one otherwise.
    """

    relation = "document"

    def __init__(
        self, words: str = "rare", min_length: int = 0, score: str = "topic-weight",
        words_per_document: int | str = 1,
    ) -> None:  # fmt: skip
        if words not in ("rare", "frequent"):
            raise ValueError(f"words must be 'rare' or 'frequent', got {words!r}")
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        if words_per_document != "clip" and not (
            isinstance(words_per_document, int | np.integer) and not isinstance(words_per_document, bool)
            and words_per_document >= 1
        ):
            raise ValueError(
                f"words_per_document must be an integer >= 1 or 'clip', got {words_per_document!r}"
            )
        self.words = words
        self.min_length = int(min_length)
        self.score = score
        self.words_per_document = words_per_document
        which = "rarest" if words == "rare" else "most frequent"
        spread = ("one of the corpus's " + which + " words" if words_per_document == 1 else
                  "the corpus's " + which + " words, spread evenly over enough of them to reach every "
                  "clipping bound")
        read = {
            "topic-weight": "the canary words' released topic weight minus its neighbour's",
            "second-moment": ("the released rank-K second moment (whitening_) at the canary word's diagonal "
                              "entry minus its neighbour's"),
            "unigram": ("the canary words' weight in the released word frequencies (word_frequencies_, the "
                        "m1 release behind unigram_) minus its neighbour's"),
            "spectral-releases": (
                "one per release, its inner product with the canary's term minus its neighbour's: m1, the "
                "released word frequencies (word_frequencies_); m2, the released M2 plus a E1 E1^T (S2/S0) "
                "on the canary's words (second_moment_ with topic_recovery='nmf', else its rank-k "
                "eigenpairs in whitening_); e3 (tensor recovery), the released projected third moment "
                "(projected_third_moment_) at the canary's projection; rf (where the private CVB0 "
                "refinement ran), the average of its passes' releases (refinement_.released_counts) at the "
                "canary's words, summed over topics and weighted by the public word weights"),
            "single-topic-releases": (
                "one per release, its inner product with the canary's term minus its neighbour's: M2, the "
                "released rank-K second moment U diag(s) U^T (whitening_) on the canary's words; M3, the "
                "released whitened third moment (whitened_tensor_, or the decomposition_ of DP-TPM) "
                "un-whitened onto the canary's words"),
            "dp-vi-releases": (
                "one per release: topics, the canary words' released topic weight (components_) minus "
                "its neighbour's; start m1, start m2 (and start e3), the moment start's releases "
                "(moment_model_), each its inner product with the canary's term minus its neighbour's"),
        }[score]
        self.description = (f"canary documents made of {spread}, as long as the longest document, replaced "
                            f"when left out by a document of other such words; score: {read}")

    def plan(self, estimator: Any, X: Any, n_canaries: int, rng: np.random.Generator) -> _DocumentPlan:
        """Pick the words of each canary and of its neighbour (the document left in its place).

        Two documents without a word in common are the most distinguishable replace-one pair:
        their statistics are orthogonal and both reach any norm bound.
        """
        tokens = isinstance(X, list | tuple)
        if tokens:
            docs = [np.asarray(doc, dtype=np.int64) for doc in X]
            if not docs:
                raise ValueError("X must hold at least one document")
            n_words = getattr(estimator, "n_words", None) or int(max(int(d.max()) for d in docs) + 1)
            freq = np.bincount(np.concatenate(docs), minlength=n_words)
            length = max(self.min_length, max(len(d) for d in docs))
        else:
            X = sp.csr_matrix(X)
            if X.shape[0] == 0:
                raise ValueError("X must hold at least one document")
            freq = np.asarray(X.sum(axis=0)).ravel()
            length = max(self.min_length, int(np.asarray(X.sum(axis=1)).max()))
        if self.words_per_document == "clip":
            clipping = getattr(estimator, "_clipping", lambda n: None)(freq.size)  # public parameters only
            size = clipped_words_per_document(clipping, freq.size, length)
        else:
            size = min(int(self.words_per_document), max(1, freq.size // 2))
        length = size * -(-length // size)  # a multiple of the number of words, at least as long
        m = max(1, min(int(n_canaries), freq.size // (2 * size)))
        order = np.lexsort((rng.random(freq.size), freq if self.words == "rare" else -freq))
        chosen = rng.permutation(order[:2 * m * size]).reshape(2 * m, size)
        words, others = chosen[:m], chosen[m:]
        if tokens:
            def document(group: np.ndarray) -> Any:
                return np.repeat(group, length // size).astype(np.int64)

            base: Any = docs
        else:
            def document(group: np.ndarray) -> Any:
                return _uniform_document(group, length, X.shape[1])

            base = X
        return _DocumentPlan(base, words, others, [document(g) for g in words], [document(g) for g in others],
                             tokens)

    def fit_args(self, plan: _DocumentPlan, included: np.ndarray) -> tuple:
        """The corpus followed by each canary or its neighbour."""
        extra = [c if inc else f for c, f, inc in zip(plan.canaries, plan.fillers, included, strict=True)]
        if plan.tokens:
            return (list(plan.base) + extra,)
        return (sp.vstack([plan.base, *extra], format="csr"),)

    def features(self, estimator: Any, plan: _DocumentPlan) -> list[np.ndarray] | dict[str, list[np.ndarray]]:
        """The score (``score``), then every word's released weight (``components_``).

        ``score="spectral-releases"``, ``"single-topic-releases"`` or ``"dp-vi-releases"``: one such
        list per release of the fit (:func:`release_scores`).
        """
        features = _topic_word_features(estimator.components_, plan.words, plan.others)
        if self.score.endswith("-releases"):
            scored = estimator
            out: dict[str, list[np.ndarray]] = {}
            if self.score == "dp-vi-releases":  # the VI releases' topics, then the moment start's releases
                out["topics"] = features
                scored = estimator.moment_model_
            for name, score in release_scores(scored).items():
                out[name if scored is estimator else f"start {name}"] = [
                    np.concatenate(([score(w) - score(o)], row))
                    for w, o, row in zip(plan.words, plan.others, features, strict=True)
                ]
            return out
        if self.score == "second-moment":
            whitening = estimator.whitening_
            U, s = whitening.eigenvectors, whitening.eigenvalues
            released = np.einsum("wk,k,wk->w", U, s, U)  # diag(U diag(s) U^T): the released rank-K M2
        elif self.score == "unigram" and getattr(estimator, "word_frequencies_", None) is not None:
            # the m1 release itself: unigram_ is its empirical-Bayes post-processing, which pulls
            # the canary words toward the other words' frequencies and loses power
            released = np.asarray(estimator.word_frequencies_, dtype=float)
        else:
            return features
        return [np.concatenate(([released[w].sum() - released[o].sum()], row)) for w, o, row in
                zip(plan.words, plan.others, features, strict=True)]


def _projected_cube(tensor: np.ndarray, basis: np.ndarray) -> Callable[[np.ndarray], float]:
    """``words -> tensor(u, u, u)``, ``u = basis[words].sum(0)``: a third moment in a basis, read at words."""
    tensor, basis = np.asarray(tensor, dtype=float), np.asarray(basis, dtype=float)

    def read(words: np.ndarray) -> float:
        u = basis[words].sum(axis=0)
        return float(np.einsum("abc,a,b,c->", tensor, u, u, u))

    return read


def release_scores(estimator: Any) -> dict[str, Callable[[np.ndarray], float]]:
    """Per release of a fitted spectral topic model, ``words -> score`` from its released attributes only.

    A canary document made of ``words`` adds ``c (x) c`` and ``c (x) c (x) c`` (``c`` the indicator of
    its words, up to its clipped weight) to the pair and triple sums, and ``c`` to the word sums;
    each score is the release's inner product with that term -- for Gaussian noise the
    likelihood-ratio statistic of the release alone (the matched filter) -- read where the release
    keeps it. The audit subtracts the neighbour's (its own words).

    :class:`PrivateSpectralLDA` (clipped Configuration 1, module docstring of
    :mod:`dptensor.models.topics.private_spectral`):

    * ``m1``: ``c . E1``, the released word frequencies (``word_frequencies_``);
    * ``m2``: ``c^T (M2 + a E1 E1^T) c``, i.e. ``c^T S2 c / S0`` read in the released ``M2`` on the
      whitening words (``second_moment_``, ``topic_recovery="nmf"``; words off them are not in the
      release, ``nan`` when none is) or in its rank-``k`` eigenpairs ``U diag(s) U^T`` (``whitening_``,
      the tensor recovery); ``a = alpha_0 / (alpha_0 + 1)`` and the released ``E1`` add back the
      correction, whose ``m1`` noise would swamp the canary;
    * ``e3``: ``S3(U, U, U)(U^T c, U^T c, U^T c)``, the released projected third moment
      (``projected_third_moment_``) at the canary's projection;
    * ``rf`` (where the private CVB0 refinement ran): the weighted average of the passes' releases
      of the expected topic-word counts (``refinement_.released_counts``, :mod:`.private_refinement`)
      at the canary's words, summed over the topics and weighted by the public word weights ``g_w``
      (:func:`~dptensor.models.topics.private_refinement.release_word_weights` of ``unigram_``):
      a document's clipped term puts its words' rows ``g_w c_w gamma_w`` (norm at most ``L``) into
      every pass's release, whose noise is the same on every weighted row, so this is the
      release's inner product with the canary's term, up to its split over the topics (unknown to
      the attacker, whose sum over topics is between ``L`` and ``sqrt(k) L``). The topics
      themselves hide it: each word's row is rescaled to the released unigram frequency.

    :class:`SingleTopicModel` (Imtiaz & Sarwate 2018):

    * ``M2``: ``c^T U diag(s) U^T c``, the released rank-``K`` second moment (``whitening_``);
    * ``M3``: ``T(B^T c, B^T c, B^T c)`` with ``T = (M3 + E3)(W, W, W)`` (``whitened_tensor_``; for
      ``"dp_tpm"``, which keeps none, ``sum_i lambda_i v_i^{(x)3}`` of the released
      ``decomposition_``) and ``B = U |S|^{1/2}`` (``whitening_.inverse``): the released ``M3``
      projected onto the whitening's span, ``(P M3 P P)(c, c, c)``.
    """
    if isinstance(estimator, SingleTopicModel):
        whitening = estimator.whitening_
        U, s = whitening.eigenvectors, whitening.eigenvalues
        tensor = getattr(estimator, "whitened_tensor_", None)
        if tensor is None:  # dp_tpm: the released noisy power steps' eigenpairs
            result = estimator.decomposition_
            tensor = np.einsum("i,ai,bi,ci->abc", result.weights, result.factors, result.factors,
                               result.factors)
        return {"M2": lambda words: float(s @ U[words].sum(axis=0) ** 2),
                "M3": _projected_cube(tensor, whitening.inverse)}
    scores: dict[str, Callable[[np.ndarray], float]] = {}
    frequencies = getattr(estimator, "word_frequencies_", None)
    if frequencies is None:  # unclipped: no m1 release; the topics carry the moments
        scores["topics"] = lambda words: float(np.asarray(estimator.components_)[:, words].sum())
        correction = np.zeros(estimator.components_.shape[1])
    else:
        frequencies = np.asarray(frequencies, dtype=float)
        scores["m1"] = lambda words: float(frequencies[words].sum())
        correction = frequencies
    a = lda_moment_constants(float(estimator.alpha0))[0]
    released = getattr(estimator, "second_moment_", None)
    if released is not None:
        position = np.full(correction.size, -1)
        position[estimator.second_moment_words_] = np.arange(len(estimator.second_moment_words_))

        def m2(words: np.ndarray) -> float:
            kept = words[position[words] >= 0]
            if kept.size == 0:
                return math.nan
            rows = position[kept]
            return float(released[np.ix_(rows, rows)].sum() + a * correction[kept].sum() ** 2)

        scores["m2"] = m2
    whitening = getattr(estimator, "whitening_", None)
    if whitening is not None:
        U, s = whitening.eigenvectors, whitening.eigenvalues
        if released is None:
            scores["m2"] = lambda words: float(
                s @ U[words].sum(axis=0) ** 2 + a * correction[words].sum() ** 2
            )
        scores["e3"] = _projected_cube(estimator.projected_third_moment_, U)
    refinement = getattr(estimator, "refinement_", None)
    counts = None if refinement is None else getattr(refinement, "released_counts", None)
    if counts is not None:  # the private CVB0 passes: their releases' weighted average
        weights = release_word_weights(np.asarray(estimator.unigram_, dtype=float))
        weighted = np.asarray(counts, dtype=float).sum(axis=1) * weights
        scores["rf"] = lambda words: float(weighted[words].sum())
    return scores


@dataclass
class _CompletionPlan:
    indices: np.ndarray
    values: np.ndarray
    shape: tuple
    canary_rows: list  # observed entries each canary sets (top when in, bottom when out)
    probes: list  # entries whose predictions score each canary
    low: float
    high: float
    patterns: list | None = None  # spectral start: each canary's residual direction on its items

    @property
    def n_canaries(self) -> int:
        return len(self.canary_rows)


class CompletionCanaries:
    """Extreme-rating canaries for tensor completion (entry-value or user relation)."""

    def __init__(self, relation: str) -> None:
        if relation not in ("entry-value", "user"):
            raise ValueError(f"no completion canaries for the {relation!r} relation")
        self.relation = relation
        if relation == "entry-value":
            self.description = ("canary ratings: observed entries at the top of value_range (its bottom when "
                                "left out); score: the predicted rating at the entry")
        else:
            self.description = ("canary users: a user rating max_ratings items of their own, one day each, "
                                "at the top of value_range (its bottom when left out; with a spectral start, "
                                "half of them stay at the bottom when in); score: the released item biases "
                                "at the items that move (without biases, the predicted rating there of a "
                                "user without ratings: the released model alone); with a spectral start also "
                                "||S^T a||^2 of the released start S (spectral_start_) at the canary's "
                                "residual direction a")

    def plan(self, estimator: Any, X: Any, n_canaries: int, rng: np.random.Generator) -> _CompletionPlan:
        """Pick canaries in distinct users; the pattern of observed entries is kept."""
        if not (isinstance(X, tuple | list) and len(X) == 3):
            raise TypeError("X must be (indices, values, shape) for TensorCompletion")
        indices = np.asarray(X[0], dtype=np.int64)
        values = np.asarray(X[1], dtype=float)
        shape = tuple(int(s) for s in X[2])
        if estimator.value_range is None:
            raise ValueError("auditing TensorCompletion needs a declared value_range (the canaries' "
                             "extremes)")
        low, high = (float(v) for v in estimator.value_range)
        extra = 1 if self.relation == "user" else 0  # the probe user
        users = rng.permutation(np.unique(indices[:, 0]))[: int(n_canaries) + extra]
        rows, probes, patterns = [], [], None
        if self.relation == "user":
            # one user's ratings are removed: the predictions for that "probe" user come from the
            # released model alone (a user's own row is computed from their own ratings). Each canary
            # user rates max_ratings distinct items, one day each (each rating in its own row of the
            # item mode: the contribution reaches the clipping bound of every per-row release), and
            # canaries rate disjoint items
            probe_user, users = users[0], users[1:]
            if users.size == 0:
                raise ValueError("the user relation's audit needs at least two users")
            planned = plan_completion(flat_params(estimator), shape)  # "auto" resolved; public sizes
            per_user = max(1, min(int(planned.max_ratings), shape[1]))
            users = users[: max(1, shape[1] // per_user)]
            # a spectral start releases the users' covariance of their residuals less their own mean:
            # a canary rating all its items alike is zero there, so half of them stay at the bottom
            spectral = planned.dp_als is not None and "spectrum" in planned.dp_als.steps
            changed = max(1, per_user // 2) if spectral else per_user
            patterns = [] if spectral else None
            items = rng.permutation(shape[1])
            keep = ~np.isin(indices[:, 0], np.append(users, probe_user))
            blocks, start = [indices[keep]], int(keep.sum())
            for c, u in enumerate(users):
                mine = items[c * per_user:(c + 1) * per_user]
                cells = np.column_stack([mine, rng.integers(0, shape[2], mine.size)])
                blocks.append(np.column_stack([np.full(len(cells), u), cells]))
                rows.append(np.arange(start, start + changed))
                probes.append(np.column_stack([np.full(changed, probe_user), cells[:changed]]))
                if patterns is not None:
                    pattern = np.zeros(shape[1])
                    pattern[mine] = np.where(np.arange(mine.size) < changed, 1.0, -1.0)
                    pattern[mine] -= pattern[mine].mean()
                    patterns.append(pattern)
                start += len(cells)
            indices = np.vstack(blocks)
            values = np.concatenate([values[keep], np.full(start - int(keep.sum()), low)])
        for u in users if self.relation == "entry-value" else ():
            mine = np.flatnonzero(indices[:, 0] == u)
            entry = int(rng.choice(mine))
            i, j = indices[entry, 0], indices[entry, 1]
            near = np.flatnonzero((indices[:, 0] == i) | (indices[:, 1] == j))
            rows.append(np.array([entry]))
            probes.append(np.vstack([indices[entry], indices[near[near != entry]]]))
        return _CompletionPlan(indices, values, shape, rows, probes, low, high, patterns)

    def fit_args(self, plan: _CompletionPlan, included: np.ndarray) -> tuple:
        """The observed entries with each canary's ratings at the top (in) or bottom (out) of the range."""
        values = plan.values.copy()
        for rows, inc in zip(plan.canary_rows, included, strict=True):
            values[rows] = plan.high if inc else plan.low
        return plan.indices, values, plan.shape

    def features(
        self, estimator: Any, plan: _CompletionPlan
    ) -> list[np.ndarray] | dict[str, list[np.ndarray]]:
        """Per canary, first its score (module docstring), then the released values it averages.

        With a spectral start (``spectral_start_``), two releases: ``"items"`` (this score) and
        ``"spectrum"``, ``||S^T a||^2`` for the released start ``S`` and the canary's residual
        direction ``a`` (its neighbour's residuals are all zero): the start's inner product with the
        canary's term ``a a^T`` of the covariance, as far as its rank keeps it.
        """
        items = self._item_features(estimator, plan)
        start = getattr(estimator, "spectral_start_", None)
        if start is None:
            return items
        start = np.asarray(start, dtype=float)
        if plan.patterns is None:  # one rating per user: its residual less its mean is zero
            spectrum = [np.array([math.nan]) for _ in items]
        else:
            spectrum = [np.array([float(np.sum((start.T @ a) ** 2))]) for a in plan.patterns]
        return {"items": items, "spectrum": spectrum}

    def _item_features(self, estimator: Any, plan: _CompletionPlan) -> list[np.ndarray]:
        out = []
        biases = getattr(estimator, "biases_", None)
        for probe in plan.probes:
            if self.relation == "user" and biases is not None and biases[1] is not None:
                values = np.asarray(biases[1], dtype=float)[probe[:, 1]]  # the released item biases
                out.append(np.concatenate(([values.mean()], values)))
                continue
            pred = np.asarray(estimator.predict(probe), dtype=float)
            score = pred[0] if self.relation == "entry-value" else pred.mean()
            out.append(np.concatenate(([score], pred)))
        return out


def _completion_canaries(estimator: TensorCompletion) -> CompletionCanaries:
    return CompletionCanaries(estimator.neighbouring or "entry-value")


def _dp_vi_canaries(estimator: DPVariationalLDA) -> DocumentCanaries:
    # a document may be as long as the declared maximum (the public default when none is declared):
    # long enough for its statistics to reach the clipping norm. Started from the moments, the moment
    # releases are scored too (one word: both clipping bounds of the clipped moments reached)
    options = estimator.options or DPVIOptions()
    score = "dp-vi-releases" if options.init == "moments" else "topic-weight"
    return DocumentCanaries(min_length=options.max_doc_length or DEFAULT_MAX_DOC_LENGTH, score=score)


# clipped releases: canaries spread over enough words to reach both clipping bounds, every release scored
register_canaries(
    PrivateSpectralLDA,
    lambda estimator: DocumentCanaries(score="spectral-releases", words_per_document="clip"),
)
# the whitening keeps the top-K eigenspace of M2: frequent words lie in it; M2 and M3 scored there
register_canaries(
    SingleTopicModel, lambda estimator: DocumentCanaries(words="frequent", score="single-topic-releases")
)
register_canaries(DPVariationalLDA, _dp_vi_canaries)
register_canaries(TensorCompletion, _completion_canaries)
