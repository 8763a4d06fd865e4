"""Synthetic corpora from the single-topic model, with the topics and weights that generated them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from dptensor._validation import (
    RandomStateLike,
    check_finite_array,
    check_positive_int,
    check_random_state,
    check_real,
)


@dataclass(frozen=True)
class SingleTopicCorpus:
    """A corpus drawn from the single-topic model, with the model.

    Attributes
    ----------
    tokens : ndarray of int64, shape (n_documents, document_length)
        Word ids of each document in order (``tokens[n, 0]`` is its first word).
    topics : ndarray of shape (n_topics, n_words)
        True word distributions ``a_k`` as rows (on the probability simplex).
    weights : ndarray of shape (n_topics,)
        True topic probabilities ``w_k``.
    labels : ndarray of int, shape (n_documents,)
        The topic of each document.
    """

    tokens: np.ndarray
    topics: np.ndarray
    weights: np.ndarray
    labels: np.ndarray

    @property
    def n_documents(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def n_words(self) -> int:
        return int(self.topics.shape[1])

    @cached_property
    def counts(self) -> sp.csr_matrix:
        """Word counts (int64), one row per document (word order dropped)."""
        n, length = self.tokens.shape
        rows = np.repeat(np.arange(n), length)
        matrix = sp.csr_matrix(
            (np.ones(n * length, dtype=np.int64), (rows, self.tokens.ravel())), shape=(n, self.n_words)
        )
        matrix.sum_duplicates()
        return matrix

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Population ``M2 = sum_k w_k a_k a_k^T`` and ``M3 = sum_k w_k a_k^{(x)3}`` (dense; small ``d``)."""
        a, w = self.topics, self.weights
        return np.einsum("k,ka,kb->ab", w, a, a), np.einsum("k,ka,kb,kc->abc", w, a, a, a)


def make_single_topic_corpus(
    n_documents: int,
    n_words: int,
    n_topics: int,
    *,
    document_length: int = 3,
    topic_concentration: float = 1.0,
    weights: np.ndarray | None = None,
    weight_concentration: float | None = None,
    topics: np.ndarray | None = None,
    random_state: RandomStateLike = None,
) -> SingleTopicCorpus:
    """Draw a corpus from the single-topic model (Imtiaz & Sarwate 2018; Anandkumar et al. 2014, 3.1).

    Each document draws its topic ``h ~ Categorical(w)`` and then ``document_length`` words
    i.i.d. from ``a_h``. The slides give no generator for their data sets; by default the topics
    are ``a_k ~ Dirichlet(topic_concentration * 1_d)`` (``1.0``: uniform on the simplex) and the
    weights uniform, ``w_k = 1/K``.

    Parameters
    ----------
    n_documents, n_words, n_topics : int
        ``N``, ``d`` and ``K``.
    document_length : int, default 3
        Words per document ``L >= 3`` (the slides' estimator reads the first three).
    topic_concentration : float, default 1.0
        Dirichlet parameter of each topic over the vocabulary (smaller: sparser topics).
    weights : ndarray of shape (n_topics,), optional
        Topic probabilities (non-negative, summing to 1).
    weight_concentration : float, optional
        Draw ``w ~ Dirichlet(weight_concentration * 1_K)`` instead of uniform weights.
    topics : ndarray of shape (n_topics, n_words), optional
        Use these word distributions instead of drawing them.
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    SingleTopicCorpus

    Examples
    --------
    >>> corpus = make_single_topic_corpus(1000, 10, 5, random_state=0)
    >>> corpus.tokens.shape, corpus.topics.shape, int(corpus.counts.sum())
    ((1000, 3), (5, 10), 3000)
    """
    n_documents = check_positive_int(n_documents, "n_documents")
    n_words = check_positive_int(n_words, "n_words")
    n_topics = check_positive_int(n_topics, "n_topics")
    document_length = check_positive_int(document_length, "document_length", minimum=3)
    rng = check_random_state(random_state)
    if topics is None:
        concentration = check_real(topic_concentration, "topic_concentration")
        topics = rng.dirichlet(np.full(n_words, concentration), size=n_topics)
    else:
        topics = _check_distributions(topics, (n_topics, n_words), "topics")
    if weights is not None and weight_concentration is not None:
        raise ValueError("give weights or weight_concentration, not both")
    if weights is not None:
        weights = _check_distributions(weights, (n_topics,), "weights")
    elif weight_concentration is not None:
        weights = rng.dirichlet(np.full(n_topics, check_real(weight_concentration, "weight_concentration")))
    else:
        weights = np.full(n_topics, 1.0 / n_topics)

    labels = rng.choice(n_topics, size=n_documents, p=weights / weights.sum())
    tokens = np.empty((n_documents, document_length), dtype=np.int64)
    for k in range(n_topics):
        members = np.flatnonzero(labels == k)
        if members.size == 0:
            continue
        cdf = np.cumsum(topics[k])
        cdf /= cdf[-1]
        draws = np.searchsorted(cdf, rng.random((members.size, document_length)), side="right")
        tokens[members] = np.minimum(draws, n_words - 1)
    return SingleTopicCorpus(tokens=tokens, topics=topics, weights=weights, labels=labels)


def _check_distributions(values: object, shape: tuple[int, ...], name: str) -> np.ndarray:
    array = check_finite_array(values, name, ndim=len(shape))
    if array.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {array.shape}")
    if np.any(array < 0) or not np.allclose(array.sum(axis=-1), 1.0):
        raise ValueError(f"{name} must be non-negative and sum to 1 (along the last axis)")
    return array
