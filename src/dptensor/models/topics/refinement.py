"""Likelihood refinement of moment-estimated topics: batch CVB0 started from the spectral topics.

The method of moments gives topics in one pass over the counts, but their held-out likelihood
trails a collapsed Gibbs sampler's. A few passes of a likelihood method started from those topics
close the gap quickly, while the same method started at random needs many more (issue 35). The
method here is CVB0, the zeroth-order collapsed variational update of Asuncion, Welling, Smyth and
Teh (2009, *On smoothing and inference for topic models*, eq. (5)), which matches collapsed Gibbs
sampling once the Dirichlet parameters are set well:

``gamma_nwj  ∝  (N_nj - gamma_nwj + alpha_j) * phi_wj``,  with ``N_nj = sum_w c_nw gamma_nwj``.

The document side is the exact CVB0 update (a token's own responsibility is left out of its
document's topic counts, which is what keeps short documents from over-fitting); the word side
uses the topics ``phi`` of the previous pass (batch CVB0, so that a pass is a sum over row blocks):

``phi_wj  =  (sum_n c_nw gamma_nwj + beta) / (sum_v sum_n c_nv gamma_nvj + d beta)``.

Each pass starts every document afresh from ``gamma ∝ alpha_j phi_wj`` and runs ``sweeps`` in-place
sweeps over its tokens, so nothing per document is kept between passes: memory is the ``d x k``
topics plus one block's counts, whatever the corpus size, and a pass is "map over row blocks, then
sum" (:mod:`dptensor.parallel`: in process, on threads, or on a Dask cluster).

Stopping rule: the mean leave-one-out log-likelihood per token, ``log(sum_j (N_nj - gamma_nwj +
alpha_j) phi_wj / (L_n - 1 + alpha_0))``, is computed in the last sweep of each pass at no extra
cost (each token scored by the rest of its document; the topics have seen it, so this is a
convergence score, not a held-out estimate); refinement stops when it improves by less than
``tol`` (relative) or after ``max_passes``.

The kernels are compiled with Numba (``nogil``: blocks run in parallel on threads).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from dptensor.parallel import RowBlocks

#: Topic-word Dirichlet parameter ``beta`` of refinement (tomotopy's default ``eta``; the same value
#: on every corpus measured, docs/benchmarks.md, *Topic quality against tomotopy*).
DEFAULT_TOPIC_WORD_PRIOR = 0.01
#: Passes over the documents at most, and the relative improvement of the leave-one-out
#: log-likelihood per token below which refinement stops.
DEFAULT_MAX_PASSES = 30
DEFAULT_REFINE_TOL = 1e-3
#: In-place sweeps over each document's tokens per pass.
DEFAULT_SWEEPS = 2
#: ``word_weights`` of the kernel when words are not weighted (every weight 1).
_NO_WEIGHTS = np.empty(0)


@numba.njit(nogil=True, cache=True)
def _cvb0_documents(  # noqa: ANN202
    indptr, indices, data, topics_t, alpha, sweeps, tol, word_counts, theta, clip, word_weights  # noqa: ANN001
):
    """CVB0 over the documents of one CSR block (see the module docstring).

    ``word_counts`` (``d x k``, added to) receives ``sum_n c_nw gamma_nwj`` unless it has no rows;
    with ``clip > 0`` each document's term ``D_nwj = g_w c_nw gamma_nwj`` (``g = word_weights``, or
    1 where it has no entries) is first scaled to Frobenius norm at most ``clip``, and a document whose
    term is not finite (weighted counts beyond float64's range) adds nothing
    (:mod:`dptensor.models.topics.private_refinement`);
    ``theta`` (``n x k``) receives ``(N_nj + alpha_j) / (L_n + alpha_0)`` unless it has no rows.
    A document stops sweeping once no topic count moves by more than ``tol`` times its length
    (``tol < 0``: every document runs all ``sweeps``).
    Returns the leave-one-out log-likelihood of the block's tokens in the last sweep (each token
    scored by the rest of its document before its own update) and the number of tokens scored.
    """
    n_docs = indptr.shape[0] - 1
    k = topics_t.shape[1]
    alpha0 = 0.0
    for j in range(k):
        alpha0 += alpha[j]
    longest = 0
    for n in range(n_docs):
        longest = max(longest, indptr[n + 1] - indptr[n])
    gamma = np.empty((longest, k))
    doc_topic = np.empty(k)
    g = np.empty(k)
    log_lik = 0.0
    scored = 0.0
    for n in range(n_docs):
        start, stop = indptr[n], indptr[n + 1]
        length = 0.0
        for j in range(k):
            doc_topic[j] = 0.0
        for p in range(start, stop):
            w, c = indices[p], data[p]
            total = 0.0
            for j in range(k):
                g[j] = alpha[j] * topics_t[w, j]
                total += g[j]
            if not total > 0.0:  # every topic's weight underflowed: no topic is preferred
                for j in range(k):
                    g[j] = 1.0
                total = float(k)
            for j in range(k):
                gamma[p - start, j] = g[j] / total
                doc_topic[j] += c * gamma[p - start, j]
            length += c
        for sweep in range(sweeps):
            moved = 0.0
            last = sweep == sweeps - 1
            for p in range(start, stop):
                w, c = indices[p], data[p]
                total = 0.0
                for j in range(k):
                    g[j] = max(doc_topic[j] - gamma[p - start, j], 0.0) + alpha[j]
                    g[j] *= topics_t[w, j]
                    total += g[j]
                if not total > 0.0:  # every topic's weight underflowed (or is not a number)
                    for j in range(k):
                        g[j] = 1.0
                    total = float(k)
                if last and length > 1.0:  # the token scored by the rest of its document
                    log_lik += c * math.log(total / (length - 1.0 + alpha0))
                    scored += c
                if tol < 0.0:  # a fixed number of sweeps: no need to track the movement
                    for j in range(k):
                        new = g[j] / total
                        doc_topic[j] += c * (new - gamma[p - start, j])
                        gamma[p - start, j] = new
                else:
                    for j in range(k):
                        new = g[j] / total
                        change = c * (new - gamma[p - start, j])
                        doc_topic[j] += change
                        moved = max(moved, abs(change))
                        gamma[p - start, j] = new
            if moved <= tol * length:
                break
        if word_counts.shape[0]:
            scale = 1.0
            weighted = word_weights.shape[0] > 0
            if clip > 0.0:  # ||D_n||_F <= clip, computed relative to the largest entry (no overflow)
                largest = 0.0
                finite = True
                for p in range(start, stop):
                    weight = word_weights[indices[p]] if weighted else 1.0
                    for j in range(k):
                        entry = weight * data[p] * gamma[p - start, j]
                        if not entry <= 1.7e308:  # inf or nan (counts beyond float64's range)
                            finite = False
                        elif entry > largest:
                            largest = entry
                if not finite:
                    scale = 0.0  # a non-finite term: the document adds nothing
                elif largest > 0.0:
                    squares = 0.0
                    for p in range(start, stop):
                        weight = word_weights[indices[p]] if weighted else 1.0
                        for j in range(k):
                            squares += (weight * data[p] * gamma[p - start, j] / largest) ** 2
                    norm = largest * math.sqrt(squares)
                    # a margin for the rounding of the norm: a sum of m squares errs by at most m ulps
                    margin = max(1e-9, 4.0 * (stop - start) * k * 1.1102230246251565e-16)
                    if norm > clip * (1.0 - margin):
                        scale = clip * (1.0 - margin) / norm
            if scale > 0.0:
                for p in range(start, stop):
                    w, c = indices[p], data[p]
                    weight = word_weights[w] if weighted else 1.0
                    for j in range(k):
                        word_counts[w, j] += scale * (weight * c * gamma[p - start, j])
        if theta.shape[0]:
            for j in range(k):
                theta[n, j] = (doc_topic[j] + alpha[j]) / (length + alpha0)
    return log_lik, scored


def _block_counts(block: object) -> sp.csr_matrix:
    counts = getattr(block, "counts", block)  # a DocumentCounts block or a CSR matrix
    return sp.csr_matrix(counts)


def _refinement_pass(
    block: object, topics_t: np.ndarray, alpha: np.ndarray, sweeps: int
) -> tuple[np.ndarray, float, float]:
    """One block's term of a pass: expected topic-word counts, leave-one-out log-likelihood, tokens."""
    counts = _block_counts(block)
    word_counts = np.zeros_like(topics_t)
    log_lik, scored = _cvb0_documents(
        counts.indptr, counts.indices, counts.data, topics_t, alpha, sweeps, -1.0, word_counts,
        np.empty((0, topics_t.shape[1])), 0.0, _NO_WEIGHTS,
    )  # fmt: skip
    return word_counts, log_lik, scored


def checked_word_weights(word_weights: np.ndarray, n_words: int) -> np.ndarray:
    """``word_weights`` as float64, refused unless it holds ``n_words`` finite positive numbers."""
    weights = np.ascontiguousarray(word_weights, dtype=np.float64)
    if weights.shape != (n_words,) or not np.all(np.isfinite(weights) & (weights > 0)):
        raise ValueError(f"word_weights must be {n_words} finite positive numbers")
    return weights


def clipped_expected_counts(
    block: object, topics_t: np.ndarray, alpha: np.ndarray, sweeps: int, clip: float,
    word_weights: np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    """One row block's term of a private pass: ``sum_n D_n``, each ``D_n`` clipped to norm ``clip``.

    Parameters
    ----------
    block : scipy.sparse matrix or DocumentCounts
        Documents (rows) by words.
    topics_t : ndarray of shape (d, k)
        The topics of the previous pass, one column per topic.
    alpha : ndarray of shape (k,)
        The documents' Dirichlet parameters.
    sweeps : int
        CVB0 sweeps over each document's tokens.
    clip : float
        ``L > 0``: the bound on each document's ``||D_n||_F``.
    word_weights : ndarray of shape (d,), optional
        ``g``, finite and positive: ``D_nwj = g_w c_nw gamma_nwj`` (row ``w`` of the sum is ``g_w``
        times the unweighted one, before the clipping's scale). Default: 1 for every word.

    Returns
    -------
    ndarray of shape (d, k)
    """
    weights = _NO_WEIGHTS if word_weights is None else checked_word_weights(word_weights, topics_t.shape[0])
    counts = _block_counts(block).copy()
    counts.sum_duplicates()  # a word's count in one entry: the norm of the term is over words
    word_counts = np.zeros_like(topics_t)
    _cvb0_documents(
        counts.indptr, counts.indices, counts.data, topics_t, np.ascontiguousarray(alpha, dtype=np.float64),
        int(sweeps), -1.0, word_counts, np.empty((0, topics_t.shape[1])), float(clip), weights,
    )  # fmt: skip
    return word_counts


@dataclass(frozen=True)
class Refinement:
    """What :func:`refine_topics` returns.

    Attributes
    ----------
    topics : ndarray of shape (k, d)
        Refined topic-word distributions (rows on the simplex, every entry positive).
    doc_topic_prior : ndarray of shape (k,)
        The Dirichlet parameters ``alpha`` used (held fixed).
    topic_word_prior : float
        ``beta`` (0 for private refinement, whose noise pseudo-counts take its place).
    log_likelihood : ndarray of shape (n_passes,)
        Mean leave-one-out log-likelihood per token at each pass (under the topics it started from);
        empty for private refinement (:mod:`dptensor.models.topics.private_refinement`), which
        computes none.
    n_passes : int
    converged : bool
        Whether the stopping rule ended refinement before ``max_passes``.
    released_counts : ndarray of shape (d, k) or None
        Private refinement: the weighted average of the passes' releases of the expected
        topic-word counts (word weights divided out) that the topics are post-processed from
        (:class:`~dptensor.models.topics.private_refinement.ReleaseAverage`; a function of the
        releases only, so covered by the fit's guarantee); ``None`` otherwise.
    """

    topics: np.ndarray
    doc_topic_prior: np.ndarray
    topic_word_prior: float
    log_likelihood: np.ndarray
    n_passes: int
    converged: bool
    released_counts: np.ndarray | None = None


def refine_topics(
    blocks: RowBlocks,
    topics: np.ndarray,
    doc_topic_prior: np.ndarray,
    *,
    topic_word_prior: float = DEFAULT_TOPIC_WORD_PRIOR,
    max_passes: int = DEFAULT_MAX_PASSES,
    tol: float = DEFAULT_REFINE_TOL,
    sweeps: int = DEFAULT_SWEEPS,
    on_pass: Callable[[int, float], None] | None = None,
) -> Refinement:
    """Refine topics by batch CVB0 passes over row blocks of counts (module docstring).

    Parameters
    ----------
    blocks : RowBlocks
        The documents (payloads: CSR count matrices or
        :class:`~dptensor.models.topics.moments.DocumentCounts`), e.g.
        :func:`~dptensor.models.topics.moments.document_blocks`.
    topics : ndarray of shape (k, d)
        Starting topics (rows on the simplex; every word should have positive probability under
        some topic, e.g. smoothed moment topics).
    doc_topic_prior : ndarray of shape (k,)
        Dirichlet parameters ``alpha_j > 0`` of the documents' topic proportions.
    topic_word_prior : float, default 0.01
        ``beta > 0``.
    max_passes : int, default 30
    tol : float, default 1e-3
        Stop when the leave-one-out log-likelihood per token improves by less than ``tol`` times
        its magnitude.
    sweeps : int, default 2
        In-place sweeps over each document's tokens per pass.
    on_pass : callable, optional
        Called after each pass with the pass number (from 1) and its log-likelihood per token.

    Returns
    -------
    Refinement
    """
    topics = np.asarray(topics, dtype=np.float64)
    alpha = np.ascontiguousarray(doc_topic_prior, dtype=np.float64)
    beta = float(topic_word_prior)
    if not beta > 0 or not math.isfinite(beta):
        raise ValueError(f"topic_word_prior must be a positive number, got {topic_word_prior!r}")
    if alpha.shape != (topics.shape[0],) or not np.all(alpha > 0):
        raise ValueError("doc_topic_prior must hold one positive number per topic")
    if not np.all(np.isfinite(topics)) or np.any(topics < 0) or np.any(topics.sum(axis=0) <= 0):
        raise ValueError("topics must be finite and non-negative, with every word possible under some topic")
    topics_t = np.ascontiguousarray(topics.T)
    history: list[float] = []
    converged = False
    for pass_number in range(1, int(max_passes) + 1):
        word_counts, log_lik, scored = blocks.map_sum(
            _refinement_pass, topics_t, alpha, int(sweeps), label="refine-topics"
        )
        if not np.all(np.isfinite(word_counts)):
            raise ValueError("refinement's expected word counts overflowed (counts beyond float64's range); "
                             "fit with refine=None")  # fmt: skip
        history.append(log_lik / scored if scored else 0.0)
        topics_t = word_counts + beta
        topics_t /= topics_t.sum(axis=0, keepdims=True)
        if on_pass is not None:
            on_pass(pass_number, history[-1])
        if len(history) > 1 and history[-1] - history[-2] <= tol * abs(history[-2]):
            converged = True
            break
    return Refinement(
        topics=np.ascontiguousarray(topics_t.T),
        doc_topic_prior=alpha,
        topic_word_prior=beta,
        log_likelihood=np.asarray(history),
        n_passes=len(history),
        converged=converged,
    )


def fold_in(
    counts: sp.csr_matrix, topics: np.ndarray, doc_topic_prior: np.ndarray, *, max_sweeps: int, tol: float
) -> np.ndarray:
    """Topic proportions of documents under fixed topics by CVB0 (the inference refinement uses).

    ``theta_nj = (N_nj + alpha_j) / (L_n + alpha_0)`` after at most ``max_sweeps`` sweeps, each
    document stopping once no topic count moves by more than ``tol`` times its length. A document
    without tokens gets ``alpha / alpha_0``.
    """
    counts = sp.csr_matrix(counts, dtype=np.float64)
    alpha = np.ascontiguousarray(doc_topic_prior, dtype=np.float64)
    theta = np.empty((counts.shape[0], alpha.size))
    _cvb0_documents(
        counts.indptr, counts.indices, counts.data, np.ascontiguousarray(np.asarray(topics, float).T),
        alpha, int(max_sweeps), float(tol), np.empty((0, alpha.size)), theta, 0.0, _NO_WEIGHTS,
    )  # fmt: skip
    return theta
