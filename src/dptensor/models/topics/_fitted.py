"""What every fitted topic model offers, whatever fitted it: checks, output names and top words.

Shared by the spectral estimators (through
:class:`~dptensor.models.topics.inference.TopicModelInference`) and by
:class:`~dptensor.models.DPVariationalLDA`. Everything here reads only the fitted
``components_`` (``k x d``) and ``n_features_in_`` -- post-processing of a private release -- and
the arguments passed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin

from dptensor._validation import NotFittedError, check_positive_int
from dptensor.models.topics.moments import check_count_matrix
from dptensor.parallel import split_rows

#: Stored entries x topics per chunk of documents in inference (work arrays of about 16 MB).
INFERENCE_CHUNK_CELLS = 2_000_000


def document_chunks(matrix: sp.csr_matrix, n_components: int) -> list[tuple[int, int]]:
    """Row ranges of ``matrix`` holding about ``INFERENCE_CHUNK_CELLS / n_components`` entries each.

    Inference works on one chunk of documents at a time, so its ``(entries, k)`` arrays stay
    bounded whatever the corpus size (the per-document results do not depend on the chunking).
    """
    per_chunk = max(INFERENCE_CHUNK_CELLS // max(int(n_components), 1), 1)
    return split_rows(matrix.shape[0], -(-matrix.nnz // per_chunk), matrix.indptr)


def mixture_log_likelihood(counts: sp.csr_matrix, theta: np.ndarray, topic_word: np.ndarray) -> float:
    """``sum_n sum_v c_nv log((theta_n^T phi)_v)``: the counts' log-likelihood under topic mixtures.

    Parameters
    ----------
    counts : scipy.sparse.csr_matrix of shape (n_documents, n_words)
    theta : ndarray of shape (n_documents, n_components)
        Each document's topic proportions.
    topic_word : ndarray of shape (n_components, n_words)
        Word distributions ``phi`` (rows on the simplex, positive wherever ``counts`` is).

    Only the stored entries are visited, one chunk of documents at a time
    (:func:`document_chunks`), so memory stays bounded whatever the corpus size.
    """
    total = 0.0
    topics_t = np.ascontiguousarray(topic_word.T)
    for start, stop in document_chunks(counts, topic_word.shape[0]):
        block = counts[start:stop]
        rows = np.repeat(np.arange(stop - start), np.diff(block.indptr))
        pred = np.einsum("ij,ij->i", theta[start:stop][rows], topics_t[block.indices])
        total += float(block.data @ np.log(pred))
    return total


class FittedTopicsMixin(ClassNamePrefixFeaturesOutMixin, TransformerMixin):
    """Fitted-state and input checks, output names and :meth:`top_words` of a topic model.

    scikit-learn integration: :class:`~sklearn.base.TransformerMixin` gives ``fit_transform``
    and ``set_output``; :class:`~sklearn.base.ClassNamePrefixFeaturesOutMixin` names the output
    columns ``<classname>0 .. <classname>{k-1}`` (``get_feature_names_out``).
    """

    @property
    def _n_features_out(self) -> int:
        return self.components_.shape[0]

    def _check_fitted(self) -> None:
        if not hasattr(self, "components_"):
            raise NotFittedError(f"this {type(self).__name__} instance is not fitted yet; call fit(X) first")

    def _check_transform_input(self, X: object) -> sp.csr_matrix:
        """``X`` as a count matrix with the fitted vocabulary's width (documents may be empty)."""
        self._check_fitted()
        matrix = check_count_matrix(X, allow_no_tokens=True)
        if matrix.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {matrix.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input (words, columns, of the fitted vocabulary)"
            )
        return matrix

    def top_words(
        self, vocabulary: Sequence[str] | None = None, n: int = 10, *, positive_only: bool = True
    ) -> list[list[str]]:
        """The ``n`` most probable words of each topic (word indices as strings without a vocabulary).

        Only words of positive weight are listed: a degenerate topic (a few words, or none, with
        positive probability) gets a shorter list, possibly empty, not words it never draws.
        ``positive_only=False`` lists ``min(n, n_features_in_)`` words whatever their weight (the
        command line's private fits: the shape of what they print depends on parameters only).
        """
        self._check_fitted()
        n = check_positive_int(n, "n")
        if vocabulary is not None and len(vocabulary) != self.n_features_in_:
            raise ValueError(
                f"vocabulary has {len(vocabulary)} words but the model has {self.n_features_in_}"
            )
        n = min(n, self.n_features_in_)
        top = np.argsort(-self.components_, axis=1, kind="stable")[:, :n]
        kept = [row[topic[row] > 0] if positive_only else row for topic, row in zip(self.components_, top,
                                                                                    strict=True)]
        if vocabulary is None:
            return [[str(i) for i in row] for row in kept]
        return [[str(vocabulary[i]) for i in row] for row in kept]


def topic_words_text(words: Sequence[str]) -> str:
    """A topic's top words as printed: space-separated, or a note for a topic with no positive word."""
    return " ".join(words) if words else "(no word of positive probability)"


__all__ = ["INFERENCE_CHUNK_CELLS", "FittedTopicsMixin", "document_chunks", "mixture_log_likelihood",
           "topic_words_text"]
