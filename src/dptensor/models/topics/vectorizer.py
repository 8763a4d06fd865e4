"""``PrivateCountVectorizer``: word counts whose vocabulary is chosen under DP, for private pipelines.

A private topic model (:class:`~dptensor.models.PrivateSpectralLDA`,
:class:`~dptensor.models.DPVariationalLDA`) protects one document *given its columns*: the
vocabulary is public. ``make_pipeline(CountVectorizer(), PrivateSpectralLDA(...))`` breaks that
silently -- the ``CountVectorizer`` builds its vocabulary from the private documents (every word
that occurs, once, in any of them) and the model cannot see where its columns came from. Two
correct pipelines::

    make_pipeline(CountVectorizer(vocabulary=public_words), PrivateSpectralLDA(...))   # public
    make_pipeline(PrivateCountVectorizer(2000, epsilon=0.2, delta=1e-7), PrivateSpectralLDA(...))

The second chooses the ``n_words`` most frequent words under ``(epsilon, delta)``-DP
(:mod:`dptensor.privacy.vocabulary`, Gaussian partition selection) and keeps its own
``guarantee_``; the total is ``compose(vectorizer.guarantee_, model.guarantee_, delta=...)``
(both under the ``"document"`` relation), and a shared ``ledger`` is charged for both.
Tokenising is scikit-learn's (:class:`~sklearn.feature_extraction.text.CountVectorizer`'s
analyzer); only the choice of words is private.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from dptensor._callers import outside_frame
from dptensor.models._base import PrivateEstimatorMixin
from dptensor.privacy.errors import ReleaseUtilityWarning
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.vocabulary import (
    DEFAULT_MAX_WORDS_PER_DOCUMENT,
    DEFAULT_MECHANISM,
    DEFAULT_THRESHOLD_DELTA_SHARE,
    MECHANISMS,
    VocabularyCalibration,
    calibrate_vocabulary,
    select_vocabulary,
    vocabulary_guarantee,
    vocabulary_weights,
)

__all__ = ["TOPIC_TOKEN_PATTERN", "EmptyVocabularyError", "PrivateCountVectorizer"]

#: The words of topic models, in Python and on the command line alike: two or more letters (no
#: digits, no ``_``: numbers, dates and ids are not words of a topic), a contraction kept whole
#: (``don't``, ``we'll``, ``i've``: never the stubs ``don``, ``ll``, ``ve``) and a possessive ``'s``
#: dropped (``john's`` counts as ``john``). Straight and curly apostrophes both join.
TOPIC_TOKEN_PATTERN = (
    r"(?u)(?<!\w)(?=[^\W\d_]['’]?[^\W\d_])[^\W\d_]+(?:['’](?!s(?![^\W\d_]))[^\W\d_]+)*(?!\w)"
)


class EmptyVocabularyError(ValueError):
    """No word passed the noisy threshold: the released vocabulary is empty (its budget was spent).

    Decided on the release alone (how many words passed is part of it), so raising it is
    post-processing.
    """


class PrivateCountVectorizer(PrivateEstimatorMixin, TransformerMixin, BaseEstimator):
    """Token counts over a vocabulary of frequent words chosen under differential privacy.

    ``fit`` releases at most ``n_words`` words by Gaussian partition selection
    (:func:`dptensor.privacy.vocabulary.private_vocabulary`: each document contributes at most
    ``max_words_per_document`` distinct words with l2-normalised weights; Gaussian noise on the
    weights, a threshold for ``delta``, the top ``n_words``); ``transform`` counts those words
    with scikit-learn's ``CountVectorizer``. The release is ``(epsilon, delta)``-DP under the
    ``"document"`` relation (one document replaced by any other); it is charged to ``ledger``
    before any document is read.

    Parameters
    ----------
    n_words : int
        The most words to keep (fewer when fewer pass the threshold: then ``fit`` warns,
        :class:`~dptensor.privacy.ReleaseUtilityWarning`).
    epsilon : float
        The vocabulary's privacy budget (required).
    delta : float
        Its ``delta`` (required).
    max_words_per_document : int, default 64
        Public bound ``m`` on the distinct words one document contributes; a longer document
        keeps its ``m`` most frequent words (ties by the word). Each of the ``n <= m`` kept words
        weighs ``1/sqrt(n)``, so the noise does not grow with ``m``; only the threshold does,
        slowly (through ``Phi_bar^{-1}(delta_t / m)``).
    threshold_delta_share : float, default 0.5
        Share of ``delta`` spent on the threshold that hides words of one document.
    mechanism : {"weighted-gaussian", "policy-gaussian"}, default "weighted-gaussian"
        ``"weighted-gaussian"``: fixed weights ``1/sqrt(n)``. ``"policy-gaussian"``: the l2 policy of
        Gopi et al. (2020, *Differentially private set union*; proof for this relation in
        :func:`dptensor.privacy.vocabulary.policy_word_weights`): documents, in a secret random
        order, push only their words still below a cutoff; same guarantee, same noise. Opt-in: on
        long-tailed text it releases fewer words (docs/lda.md, ``benchmarks/private_vocabulary.py``).
    lowercase, strip_accents, stop_words, token_pattern, ngram_range, analyzer
        Passed to :class:`sklearn.feature_extraction.text.CountVectorizer` (public choices;
        ``stop_words="english"`` is scikit-learn's public list). ``token_pattern`` defaults to
        :data:`TOPIC_TOKEN_PATTERN`, the command line's words.
    noise : None, "numpy", "opendp", InsecureTestNoise or NoiseSource
        Secret randomness of the release.
    ledger : object with ``charge``, optional
        Charged before the documents are read.

    Attributes
    ----------
    vocabulary_ : dict
        Word to column index (alphabetical order), as ``CountVectorizer``'s.
    noisy_weights_ : ndarray of shape (n_kept,)
        The released noisy weights of the kept words (column order).
    guarantee_ : PrivacyGuarantee
        The vocabulary's guarantee; compose it with the model's
        (:func:`dptensor.privacy.compose`).

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> docs = ["tensor power method", "power iteration of a tensor"] * 2000
    >>> vectorizer = PrivateCountVectorizer(5, epsilon=0.5, delta=1e-7)
    >>> counts = vectorizer.fit_transform(docs)
    >>> list(vectorizer.get_feature_names_out())
    ['iteration', 'method', 'of', 'power', 'tensor']
    """

    _parameter_constraints: dict = {
        "n_words": [Interval(Integral, 1, None, closed="left")],
        "max_words_per_document": [Interval(Integral, 1, None, closed="left")],
        "threshold_delta_share": [Interval(Real, 0, 1, closed="neither")],
        "mechanism": [StrOptions(set(MECHANISMS))],
        "lowercase": ["boolean"],
        "strip_accents": [StrOptions({"ascii", "unicode"}), None, callable],
        "stop_words": [StrOptions({"english"}), list, None],
        "token_pattern": [str, None],
        "ngram_range": [tuple],
        "analyzer": [StrOptions({"word", "char", "char_wb"}), callable],
        **PrivateEstimatorMixin._privacy_parameter_constraints,
    }

    def __init__(
        self,
        n_words: int,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        max_words_per_document: int = DEFAULT_MAX_WORDS_PER_DOCUMENT,
        threshold_delta_share: float = DEFAULT_THRESHOLD_DELTA_SHARE,
        mechanism: str = DEFAULT_MECHANISM,
        lowercase: bool = True,
        strip_accents: str | None = None,
        stop_words: str | list[str] | None = None,
        token_pattern: str | None = TOPIC_TOKEN_PATTERN,
        ngram_range: tuple[int, int] = (1, 1),
        analyzer: str = "word",
        noise=None,  # noqa: ANN001 - NoiseLike | NoiseSource
        ledger=None,  # noqa: ANN001 - Ledger
    ) -> None:
        self.n_words = n_words
        self.epsilon = epsilon
        self.delta = delta
        self.max_words_per_document = max_words_per_document
        self.threshold_delta_share = threshold_delta_share
        self.mechanism = mechanism
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.stop_words = stop_words
        self.token_pattern = token_pattern
        self.ngram_range = ngram_range
        self.analyzer = analyzer
        self.noise = noise
        self.ledger = ledger

    def _vectorizer(self, vocabulary: list[str] | None = None) -> CountVectorizer:
        """scikit-learn's vectoriser with this estimator's (public) tokenising options."""
        return CountVectorizer(
            lowercase=self.lowercase, strip_accents=self.strip_accents, stop_words=self.stop_words,
            token_pattern=self.token_pattern, ngram_range=self.ngram_range, analyzer=self.analyzer,
            vocabulary=vocabulary,
        )  # fmt: skip

    def _calibration(self) -> VocabularyCalibration:
        if self.epsilon is None or self.delta is None:
            raise ValueError(
                "PrivateCountVectorizer needs epsilon and delta: it chooses its words from the private "
                "documents; for a public vocabulary use CountVectorizer(vocabulary=...)"
            )
        return calibrate_vocabulary(
            self.epsilon, self.delta, self.max_words_per_document,
            threshold_delta_share=self.threshold_delta_share, mechanism=self.mechanism,
        )  # fmt: skip

    def planned_guarantee(self) -> PrivacyGuarantee:
        """The guarantee :meth:`fit` charges, from the parameters only (before any document is read).

        A pipeline can ask a ledger, before its first release, whether it can pay for the
        vocabulary and the steps after it (``dptensor lda fit --private-vocab --ledger``).
        """
        self._validate_params()
        return vocabulary_guarantee(self._calibration(), self.n_words)

    def __sklearn_tags__(self):  # noqa: ANN204 - sklearn.utils.Tags
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False  # raw documents (strings), as CountVectorizer declares
        tags.input_tags.string = True
        return tags

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, raw_documents: Iterable[str], y: object = None) -> PrivateCountVectorizer:
        """Release the vocabulary under DP (charged first), from an iterable of strings.

        Raises
        ------
        ValueError
            Before anything is read or charged: ``epsilon``/``delta`` missing, or a single string
            instead of an iterable of documents. After the release: no word passed the threshold
            (a statement about the noisy release only).
        TypeError
            Before the charge, for a sequence (list, tuple, array) holding anything but strings or
            bytes; a one-pass iterable is checked as it is read, after the charge.

        Warns
        -----
        ReleaseUtilityWarning
            Fewer than ``n_words`` words passed the threshold: how many, and what would keep more.
            The count is part of the release, so the warning reveals nothing beyond it.
        """
        if isinstance(raw_documents, str | bytes):
            raise ValueError("raw_documents must be an iterable of documents (strings), not one string")
        calibration = self._calibration()
        analyzer = self._vectorizer().build_analyzer()  # checks the tokenising options, reads nothing
        n_public = len(raw_documents) if hasattr(raw_documents, "__len__") else None
        if n_public is not None and not all(isinstance(doc, str | bytes) for doc in raw_documents):
            # a list is checked before the charge (a stream can only be read once, after it); which
            # document is not a string is not said (a private fact)
            raise TypeError("raw_documents must hold documents as strings (or bytes); nothing was charged")
        source = self._begin_release(
            vocabulary_guarantee(calibration, self.n_words), "PrivateCountVectorizer vocabulary",
            n_public=n_public,
        )  # fmt: skip
        weights = vocabulary_weights((analyzer(doc) for doc in raw_documents), calibration, source)
        words, noisy = select_vocabulary(weights, self.n_words, calibration, source)
        if not words:
            raise EmptyVocabularyError(
                "PrivateCountVectorizer: no word's noisy weight passed the threshold, so the released "
                "vocabulary is empty (the budget was spent); a larger epsilon, more documents or a "
                "smaller max_words_per_document helps"
            )
        if len(words) < self.n_words:
            warnings.warn(
                f"PrivateCountVectorizer: only {len(words)} of the {self.n_words} words asked for passed "
                "the noisy threshold; more documents, a larger epsilon or a smaller max_words_per_document "
                "would keep more",
                ReleaseUtilityWarning, stacklevel=outside_frame()[1],  # the user's line
            )  # fmt: skip
        self.vocabulary_ = {word: i for i, word in enumerate(words)}
        self.noisy_weights_ = noisy
        return self

    def transform(self, raw_documents: Iterable[str]) -> sp.csr_matrix:
        """Count the released words in each document (scikit-learn's ``CountVectorizer``)."""
        check_is_fitted(self, "vocabulary_")
        return self._vectorizer(list(self.vocabulary_)).transform(raw_documents).tocsr()

    def fit_transform(self, raw_documents: Iterable[str], y: object = None) -> sp.csr_matrix:
        """:meth:`fit` then :meth:`transform` (the documents are read twice: pass a list)."""
        raw_documents = list(raw_documents) if not isinstance(raw_documents, str | bytes) else raw_documents
        return self.fit(raw_documents).transform(raw_documents)

    def get_feature_names_out(self, input_features: object = None) -> np.ndarray:
        """The released words, in column order."""
        check_is_fitted(self, "vocabulary_")
        return np.asarray(list(self.vocabulary_), dtype=object)
