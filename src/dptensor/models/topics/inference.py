"""Inference with fitted topics: ``transform``, ``score`` and ``perplexity`` of the topic models.

:class:`TopicModelInference` is shared by :class:`~dptensor.models.topics.spectral.SpectralLDA` and
:class:`~dptensor.models.topics.private_spectral.PrivateSpectralLDA`. A model refined after its
moments (:mod:`dptensor.models.topics.refinement`) folds documents in by CVB0 with its refined
topics; a moment model by the EM update of :meth:`TopicModelInference.transform`.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.sparse as sp

from dptensor._validation import check_positive_int
from dptensor.models._base import declare_count_input
from dptensor.models.topics._fitted import FittedTopicsMixin, document_chunks, mixture_log_likelihood
from dptensor.models.topics.moment_matching import match_first_moment
from dptensor.models.topics.refinement import fold_in


class TopicModelInference(FittedTopicsMixin):
    """Inference with fitted topics, shared by :class:`SpectralLDA` and the private estimator.

    Needs ``components_`` (``k x d``, rows on the simplex), ``alpha_``, ``n_features_in_`` and the
    parameters ``n_components``, ``smoothing``, ``transform_max_iter`` and ``transform_tol``.
    Everything here reads only the fitted topics (post-processing of a private release) and the
    documents passed to it: :meth:`transform`'s output, its warning and :meth:`score` are computed
    from *those* documents without noise, so they are not covered by a private model's guarantee
    (pass only data you may see; the private fit itself never calls them).

    The fitted-state checks, output names and :meth:`top_words` come from
    :class:`~dptensor.models.topics._fitted.FittedTopicsMixin`.
    """

    def __sklearn_tags__(self):  # noqa: ANN204 - sklearn.utils.Tags
        tags = super().__sklearn_tags__()
        declare_count_input(tags)
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags

    def _check_smoothing(self) -> float:
        # Projection onto the simplex zeroes words; smoothing > 0 keeps every word possible so
        # that transform and score never divide by a zero probability.
        s = float(self.smoothing)
        if not 0 < s < 1:
            raise ValueError(f"smoothing must lie in (0, 1), got {s!r}")
        return s

    def _inference_parameters(self) -> tuple[np.ndarray, np.ndarray]:
        """``(topics, prior)`` that inference uses (one matching serves both).

        Without matching: ``(1 - s) mu + s / d`` (``s`` the smoothing) and ``alpha_``. With
        ``match_unigram`` and a ``unigram_``: the smoothed topics and ``alpha_ / sum(alpha_)``
        matched to the smoothed ``unigram_`` (a word absent from the fitted documents stays
        possible), the prior ``alpha0`` times the matched weights. Either way a private model's
        topics are then shrunk toward the unigram distribution by ``shrinkage_`` (0 otherwise).
        """
        s = self._check_smoothing()
        refinement = getattr(self, "refinement_", None)
        if refinement is not None:  # the refined model: its topics and prior, as refinement fitted them
            return self.components_, refinement.doc_topic_prior
        d = self.n_features_in_
        alpha = np.asarray(self.alpha_, dtype=np.float64)
        lam = float(getattr(self, "shrinkage_", 0.0))
        unigram = getattr(self, "unigram_", None)
        if getattr(self, "match_unigram", False) and unigram is not None:
            smoothed = (1.0 - s) * self.components_ + s / d
            target = (1.0 - s) * unigram + s / d
            topics, weights = match_first_moment(smoothed, alpha / alpha.sum(), target)
            if lam > 0:
                topics = (1.0 - lam) * topics + lam * target[None, :]
            return topics, float(self.alpha0) * weights
        topics = self.components_
        if lam > 0 and unigram is not None:
            topics = (1.0 - lam) * topics + lam * unigram[None, :]
        return (1.0 - s) * topics + s / d, alpha

    def topic_word_distribution(self) -> np.ndarray:
        """Topics as inference uses them (rows on the simplex).

        ``(1 - smoothing) mu_i + smoothing / d``; with ``match_unigram`` these smoothed topics
        matched to ``unigram_`` (:func:`~dptensor.models.topics.moment_matching.match_first_moment`),
        and for a private model shrunk toward ``unigram_`` by ``shrinkage_``.
        """
        self._check_fitted()
        return self._inference_parameters()[0]

    def document_topic_prior(self) -> np.ndarray:
        """The Dirichlet prior of a document's topic proportions that :meth:`transform` uses.

        ``alpha_``; with ``match_unigram``, ``alpha0`` times the matched weights (so that
        ``document_topic_prior() @ topic_word_distribution() / alpha0`` is ``unigram_``).
        """
        self._check_fitted()
        return self._inference_parameters()[1]

    def transform(self, X: object) -> np.ndarray:
        """Document-topic proportions ``theta_n`` given the learned topics.

        A model refined after its moments (``refinement_``) folds each document in by CVB0 with
        its refined topics and the prior it was refined with
        (:func:`~dptensor.models.topics.refinement.fold_in`: at most ``transform_max_iter``
        sweeps, stopping when no topic count moves by more than ``transform_tol`` times the
        document's length). Otherwise, the moment model's method: with the topics ``mu``
        (:meth:`topic_word_distribution`) and the prior ``alpha``
        (:meth:`document_topic_prior`: ``alpha_``, or with ``match_unigram`` the weights matched
        to ``unigram_``) fixed, iterate the EM-style
        update of the topic posterior of each document (vectorised over documents),

        ``theta_n <- normalise(alpha + theta_n * (mu (c_n / (mu^T theta_n))))``,

        i.e. expected topic counts of the document's tokens plus the Dirichlet pseudo-counts
        (the posterior-mean update of collapsed/variational LDA with ``digamma`` replaced by
        the plain mean), starting from ``theta_n = alpha / alpha_0``. Costs ``O(nnz k)`` per step;
        documents are processed in chunks so memory stays ``O(chunk nnz * k)``.

        A document with no word of the fitted vocabulary (an all-zero row, e.g. a text whose
        words ``CountVectorizer`` did not keep) carries no evidence: it gets the prior mean
        ``alpha / sum(alpha)`` (:meth:`document_topic_prior`), and a ``UserWarning`` says how
        many documents did. For a
        private model this is post-processing of the release applied to the documents *you*
        pass: the output and the warning depend on them without noise (the fit never calls
        :meth:`transform`).

        Parameters
        ----------
        X : array_like or scipy.sparse matrix of shape (n_documents, n_words)

        Returns
        -------
        ndarray of shape (n_documents, n_components)
            Rows on the simplex.
        """
        matrix = self._check_transform_input(X)
        empty = int(np.count_nonzero(np.diff(matrix.indptr) == 0))
        if empty:
            warnings.warn(
                f"{empty} of {matrix.shape[0]} document(s) have no word of the fitted vocabulary; "
                "they get the prior topic proportions (document_topic_prior(), normalised)",
                UserWarning,
                stacklevel=2,
            )
        return self._infer(matrix, *self._inference_parameters())

    def _infer(self, matrix: sp.csr_matrix, topics: np.ndarray, prior: np.ndarray) -> np.ndarray:
        max_iter = check_positive_int(self.transform_max_iter, "transform_max_iter")
        tol = float(self.transform_tol)
        if getattr(self, "refinement_", None) is not None:  # the inference refinement fitted with
            return fold_in(matrix, topics, prior, max_sweeps=max_iter, tol=tol)
        n = matrix.shape[0]
        theta = np.tile(prior / prior.sum(), (n, 1))
        topics_t = np.ascontiguousarray(topics.T)  # d x k
        for start, stop in document_chunks(matrix, self.n_components):
            block = matrix[start:stop]
            th = theta[start:stop]
            rows = np.repeat(np.arange(stop - start), np.diff(block.indptr))
            cols = block.indices
            phi_nnz = topics_t[cols]  # nnz x k
            for _ in range(max_iter):
                pred = np.einsum("ij,ij->i", th[rows], phi_nnz)
                ratio = sp.csr_matrix((block.data / pred, cols, block.indptr), shape=block.shape)
                new = prior + th * np.asarray(ratio @ topics_t)
                new /= new.sum(axis=1, keepdims=True)
                delta = float(np.max(np.abs(new - th))) if new.size else 0.0
                th = new
                if delta <= tol:
                    break
            theta[start:stop] = th
        return theta

    def score(self, X: object, y: object = None) -> float:
        """Plug-in log-likelihood ``sum_n sum_v c_nv log((theta_n^T mu)_v)`` of held-out documents.

        ``theta_n`` comes from :meth:`transform` on the same documents, so this is the
        likelihood of the words under the fitted topics with each document's best-fitting
        proportions (higher is better). It is not the marginal likelihood nor scikit-learn's
        variational bound: compare it between models evaluated by the same method.
        """
        matrix = self._check_transform_input(X)
        topics, prior = self._inference_parameters()
        return mixture_log_likelihood(matrix, self._infer(matrix, topics, prior), topics)

    def perplexity(self, X: object) -> float:
        """``exp(-score(X) / total tokens)``: per-word perplexity (lower is better)."""
        matrix = self._check_transform_input(X)
        tokens = float(matrix.sum())
        if tokens == 0:
            raise ValueError("X has no tokens; perplexity is undefined")
        return math.exp(-self.score(matrix) / tokens)
