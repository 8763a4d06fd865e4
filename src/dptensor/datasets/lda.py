"""Synthetic Latent Dirichlet Allocation corpora with known topics and Dirichlet prior."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dptensor._validation import RandomStateLike, check_positive_int, check_random_state


@dataclass(frozen=True)
class LDACorpus:
    """A corpus drawn from an LDA model, with the model that generated it.

    Attributes
    ----------
    counts : scipy.sparse.csr_matrix of shape (n_documents, n_words)
        Word counts (int64), one row per document.
    topics : ndarray of shape (n_topics, n_words)
        True topic-word distributions ``mu_i`` (rows on the simplex).
    alpha : ndarray of shape (n_topics,)
        True Dirichlet parameters; ``alpha.sum()`` is ``alpha_0``.
    doc_topic : ndarray of shape (n_documents, n_topics)
        The topic proportions ``theta_n`` each document was drawn with.
    """

    counts: sp.csr_matrix
    topics: np.ndarray
    alpha: np.ndarray
    doc_topic: np.ndarray

    @property
    def alpha0(self) -> float:
        """``alpha_0 = sum_i alpha_i``."""
        return float(self.alpha.sum())


def make_lda_corpus(
    n_documents: int,
    n_words: int,
    n_topics: int,
    *,
    alpha: float | np.ndarray = 0.1,
    doc_length: int = 100,
    topic_concentration: float = 0.05,
    topics: np.ndarray | None = None,
    lengths: np.ndarray | None = None,
    random_state: RandomStateLike = None,
) -> LDACorpus:
    """Draw a corpus from Latent Dirichlet Allocation (Blei, Ng & Jordan 2003).

    Each document ``n`` draws ``theta_n ~ Dirichlet(alpha)`` and a length
    ``l_n = 3 + Poisson(doc_length - 3)``; its ``l_n`` tokens are split among topics by
    ``Multinomial(l_n, theta_n)`` and each topic's tokens are drawn from ``mu_i``. Sampling is
    vectorised: all tokens of topic ``i`` across the corpus are drawn with one call, so the
    cost is ``O(total tokens * log d)`` with no ``n_documents x n_words`` dense array.

    Parameters
    ----------
    n_documents, n_words, n_topics : int
    alpha : float or ndarray of shape (n_topics,), default 0.1
        Dirichlet parameters of the topic proportions (a scalar means a symmetric prior
        ``alpha_i = alpha``, so ``alpha_0 = n_topics * alpha``).
    doc_length : int, default 100
        Mean document length (at least 3).
    topic_concentration : float, default 0.05
        Each true topic is drawn from a symmetric ``Dirichlet(topic_concentration)`` over the
        vocabulary unless ``topics`` is given (smaller means sparser, better separated topics).
    topics : ndarray of shape (n_topics, n_words), optional
        Use these topic-word distributions instead of drawing them.
    lengths : array_like of int, optional
        An empirical length distribution (e.g. a real corpus' document lengths): each document's
        length is drawn from these values uniformly with replacement instead of
        ``3 + Poisson(doc_length - 3)`` (then ``doc_length`` is not used).
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    LDACorpus
    """
    n_documents = check_positive_int(n_documents, "n_documents")
    n_words = check_positive_int(n_words, "n_words")
    n_topics = check_positive_int(n_topics, "n_topics")
    doc_length = check_positive_int(doc_length, "doc_length", minimum=3)
    rng = check_random_state(random_state)
    alpha_vec = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (n_topics,)).copy()
    if not np.all(np.isfinite(alpha_vec)) or np.any(alpha_vec <= 0):
        raise ValueError(f"alpha must be positive and finite, got {alpha!r}")
    if topics is None:
        if not np.isfinite(topic_concentration) or topic_concentration <= 0:
            raise ValueError(f"topic_concentration must be > 0, got {topic_concentration!r}")
        topics = rng.dirichlet(np.full(n_words, topic_concentration), size=n_topics)
    else:
        topics = np.asarray(topics, dtype=np.float64)
        if topics.shape != (n_topics, n_words):
            raise ValueError(f"topics must have shape ({n_topics}, {n_words}), got {topics.shape}")
        if np.any(topics < 0) or not np.allclose(topics.sum(axis=1), 1.0):
            raise ValueError("topics must have non-negative rows that sum to 1")

    if lengths is not None:
        pool = np.asarray(lengths)
        if pool.ndim != 1 or pool.size == 0 or not np.issubdtype(pool.dtype, np.integer) or pool.min() < 0:
            raise ValueError("lengths must be a non-empty 1-D array of non-negative integers")
    theta = rng.dirichlet(alpha_vec, size=n_documents)
    if lengths is None:
        lengths = 3 + rng.poisson(doc_length - 3, size=n_documents)
    else:
        lengths = pool[rng.integers(0, pool.size, size=n_documents)].astype(np.int64)
    # Tokens per (document, topic); the Dirichlet draw can round to a sum just above 1.
    per_topic = rng.multinomial(lengths, theta / theta.sum(axis=1, keepdims=True))
    doc_ids, word_ids = [], []
    docs = np.arange(n_documents)
    for i in range(n_topics):
        count = per_topic[:, i]
        total = int(count.sum())
        if total == 0:
            continue
        cdf = np.cumsum(topics[i])
        cdf /= cdf[-1]
        words = np.searchsorted(cdf, rng.random(total), side="right")
        doc_ids.append(np.repeat(docs, count))
        word_ids.append(np.minimum(words, n_words - 1))
    rows = np.concatenate(doc_ids)
    cols = np.concatenate(word_ids)
    counts = sp.csr_matrix(
        (np.ones(rows.size, dtype=np.int64), (rows, cols)), shape=(n_documents, n_words), dtype=np.int64
    )
    counts.sum_duplicates()
    return LDACorpus(counts=counts, topics=topics, alpha=alpha_vec, doc_topic=theta)
