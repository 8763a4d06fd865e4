"""``PrivateTopicModel``: raw texts in, private topics out, under one budget.

A private topic model protects a document *given its columns*, so its vocabulary must be public or
chosen under DP and charged too. :class:`PrivateTopicModel` does the whole job in one object: it
tokenises with :data:`~dptensor.models.topics.vectorizer.TOPIC_TOKEN_PATTERN` (the command line's
pattern too), releases a vocabulary of at most ``n_words`` words
(:class:`~dptensor.models.topics.vectorizer.PrivateCountVectorizer`), pads the documents the
model's worst-case releases would refuse (:func:`~dptensor.models.topics.short_documents.
pad_short_documents`), and fits the model (:class:`PrivateSpectralLDA` by default, or any private
topic estimator passed as ``model``) over the released words. ``epsilon`` and ``delta`` are the
run's total: the two releases' shares are calibrated so that their exact composition spends the
``epsilon`` asked for (:func:`~dptensor.models.topics.text_budget.plan_text_budget`), and a ledger is
asked for both before the first charge (nothing is charged when it cannot pay for the second).

Example::

    from dptensor import PrivateTopicModel
    model = PrivateTopicModel(10, epsilon=1.0, delta=1e-6, n_words=2000).fit(texts)
    model.top_words(8); model.guarantee_.describe(); model.transform(new_texts)
    model.save("topics.json"); PrivateTopicModel.load("topics.json")
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context, clone
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from dptensor.models._base import PrivateEstimatorMixin
from dptensor.models.pipeline_plan import check_pipeline_budget
from dptensor.models.topics.dp_vi import DPVariationalLDA
from dptensor.models.topics.persistence import read_model_file, save_model
from dptensor.models.topics.private_spectral import PrivateSpectralLDA
from dptensor.models.topics.short_documents import pad_short_documents
from dptensor.models.topics.text_budget import TextBudget, plan_text_budget, spectral_plan_at
from dptensor.models.topics.vectorizer import (
    TOPIC_TOKEN_PATTERN,
    EmptyVocabularyError,
    PrivateCountVectorizer,
)
from dptensor.privacy.accounting import compose
from dptensor.privacy.errors import ReleaseUtilityWarning
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.vocabulary import DEFAULT_MAX_WORDS_PER_DOCUMENT

__all__ = ["PrivateTopicModel"]


@dataclass(frozen=True)
class _Words:
    """What a model file records of the words (:class:`~dptensor.models.topics.persistence.FittedCorpus`)."""

    vocabulary: list[str]
    source: str
    token_pattern: str


class PrivateTopicModel(TransformerMixin, BaseEstimator):
    """Topics of raw texts under one differential-privacy budget: the vocabulary and the model together.

    Parameters
    ----------
    n_topics : int
        The number of topics ``k``.
    epsilon, delta : float
        The run's total budget under the ``"document"`` relation (one document replaced by any
        other): the vocabulary's release and the model's compose to ``epsilon`` (within ``10^-3``,
        never above) at ``delta``.
    n_words : int, default 2000
        The most words of the private vocabulary (fewer when fewer pass its noisy threshold).
    vocabulary : sequence of str, optional
        A public vocabulary instead of a private one: nothing is released for it and the model
        gets the whole budget.
    vocabulary_share : float in (0, 1) or "auto", default "auto"
        The vocabulary's share of the linear split before the calibration; ``"auto"``: the planner's
        choice (:func:`~dptensor.models.topics.plan.choose_vocabulary_share`; 0.2 where the planner
        does not apply).
    max_words_per_document : int, default 64
        The vocabulary release's public bound on one document's distinct words.
    stop_words : "english", list of str or None, default None
        Words never counted (a public list).
    token_pattern : str, default TOPIC_TOKEN_PATTERN
        What a word is (a public regular expression; the command line's ``--token-pattern``).
    model : PrivateSpectralLDA or DPVariationalLDA, optional
        The model's settings (cloned; its ``n_components``, budget, ``random_state``, ``noise`` and
        ``ledger`` are this object's). Default ``PrivateSpectralLDA(n_topics)``.
    random_state : int, RandomState or None
        Public randomness of the model.
    noise : None, "numpy", "opendp", InsecureTestNoise or NoiseSource
        Secret randomness of both releases.
    ledger : BudgetLedger, optional
        Charged for the vocabulary, then the model; asked for both before the first charge.
    verbose : bool, default False
        Print what is decided from public inputs and the releases (the shares, the vocabulary's
        size, the padding) to standard error.

    Attributes
    ----------
    budget_ : TextBudget
        The split (shares, calibration scale, the planned guarantees).
    vocabulary_ : list of str
        The words of the model's columns.
    model_ : PrivateSpectralLDA or DPVariationalLDA
        The fitted model.
    components_ : ndarray of shape (n_topics, n_words)
        The model's topics over ``vocabulary_``.
    vocabulary_guarantee_, model_guarantee_, guarantee_ : PrivacyGuarantee
        The vocabulary's (None with a public vocabulary), the model's, and their exact composition
        at ``delta``, the run's guarantee.
    padded_ : bool
        Whether short documents were padded (the model's worst-case releases need three tokens).

    Examples
    --------
    >>> texts = ["tensor power method", "power iteration of a tensor"] * 2000
    >>> from dptensor.models.topics.dp_vi_options import DPVIOptions
    >>> vi = DPVariationalLDA(2, options=DPVIOptions(n_passes=1))
    >>> m = PrivateTopicModel(2, epsilon=2.0, delta=1e-6, n_words=5, model=vi)
    >>> m = m.fit(texts)
    >>> round(m.guarantee_.epsilon, 3) <= 2.0
    True
    """

    _parameter_constraints: dict = {
        "n_topics": [Interval(Integral, 1, None, closed="left")],
        "n_words": [Interval(Integral, 1, None, closed="left")],
        "vocabulary": [list, tuple, np.ndarray, None],
        "vocabulary_share": [Interval(Real, 0, 1, closed="neither"), StrOptions({"auto"})],
        "max_words_per_document": [Interval(Integral, 1, None, closed="left")],
        "stop_words": [StrOptions({"english"}), list, None],
        "token_pattern": [str],
        "model": [PrivateSpectralLDA, DPVariationalLDA, None],
        "verbose": ["boolean"],
        **PrivateEstimatorMixin._privacy_parameter_constraints,
    }

    def __init__(
        self,
        n_topics: int,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        n_words: int = 2000,
        vocabulary: Sequence[str] | None = None,
        vocabulary_share: float | str = "auto",
        max_words_per_document: int = DEFAULT_MAX_WORDS_PER_DOCUMENT,
        stop_words: str | list[str] | None = None,
        token_pattern: str = TOPIC_TOKEN_PATTERN,
        model: PrivateSpectralLDA | DPVariationalLDA | None = None,
        random_state=None,  # noqa: ANN001 - RandomStateLike
        noise=None,  # noqa: ANN001 - NoiseLike | NoiseSource
        ledger=None,  # noqa: ANN001 - Ledger
        verbose: bool = False,
    ) -> None:
        self.n_topics = n_topics
        self.epsilon = epsilon
        self.delta = delta
        self.n_words = n_words
        self.vocabulary = vocabulary
        self.vocabulary_share = vocabulary_share
        self.max_words_per_document = max_words_per_document
        self.stop_words = stop_words
        self.token_pattern = token_pattern
        self.model = model
        self.random_state = random_state
        self.noise = noise
        self.ledger = ledger
        self.verbose = verbose

    # -- what is decided before any document is read -------------------------------------------------
    def _say(self, message: str) -> None:
        if self.verbose:
            import sys

            print(f"PrivateTopicModel: {message}", file=sys.stderr, flush=True)

    def _budget_given(self) -> tuple[float, float]:
        if self.epsilon is None or self.delta is None:
            raise ValueError("PrivateTopicModel needs epsilon and delta (the run's total budget)")
        return float(self.epsilon), float(self.delta)

    def _model_template(self) -> PrivateSpectralLDA | DPVariationalLDA:
        template = PrivateSpectralLDA(self.n_topics) if self.model is None else clone(self.model)
        return template.set_params(n_components=self.n_topics, random_state=self.random_state,
                                   noise=self.noise, ledger=self.ledger)

    def _vectorizer(self, epsilon: float | None = None, delta: float | None = None) -> PrivateCountVectorizer:
        return PrivateCountVectorizer(
            self.n_words, epsilon=epsilon, delta=delta, max_words_per_document=self.max_words_per_document,
            stop_words=self.stop_words, token_pattern=self.token_pattern, noise=self.noise,
            ledger=self.ledger,
        )  # fmt: skip

    def plan(self, n_documents: int) -> TextBudget | None:
        """The split of the budget for ``n_documents`` documents, from public inputs only.

        Runs the model's own checks of its configuration first (what ``fit`` would refuse is refused
        here, before any charge). ``None`` with a public ``vocabulary`` (the model gets it all).
        """
        self._validate_params()
        epsilon, delta = self._budget_given()
        template = self._model_template()
        if self.vocabulary is not None:
            return None
        vectorizer = self._vectorizer(epsilon, delta)
        plan_at = spectral_plan_at(template, n_documents, int(self.n_words), epsilon, delta,
                                   int(self.max_words_per_document))
        return plan_text_budget(vectorizer, template, n_documents, epsilon=epsilon, delta=delta,
                                vocabulary_share=self.vocabulary_share, plan_at=plan_at)

    # -- the fit -------------------------------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, raw_documents: Iterable[str], y: object = None) -> PrivateTopicModel:
        """Release the vocabulary (unless public), then fit the model over it; both charged first.

        Raises
        ------
        ValueError
            Before anything is charged: a missing budget, a single string, no document, or what the
            model would refuse. After the vocabulary's charge: fewer released words than the model
            needs (``k`` for the spectral fit, one for DP-VI), said with what was charged.
        BudgetExceededError
            The ledger cannot pay for both releases together (nothing charged).
        """
        if isinstance(raw_documents, str | bytes):
            raise ValueError("raw_documents must be an iterable of documents (strings), not one string")
        documents = list(raw_documents)
        if not documents:
            raise ValueError("PrivateTopicModel needs at least one document")
        n_documents = len(documents)  # public under the "document" relation
        budget = self.plan(n_documents)
        template = self._model_template()
        if budget is None:
            model = template.set_params(epsilon=self.epsilon, delta=self.delta)
            words = [str(w) for w in self.vocabulary]
            pad = self._check_model(model, n_documents, len(words))
            counts = self._counter(words).transform(documents)
            vocabulary_guarantee = None
        else:
            self._say(f"vocabulary share {budget.vocabulary_share:g} of the linear split"
                      f"{' (chosen by the planner)' if budget.share_chosen else ''}, both epsilon shares "
                      f"scaled by {budget.scale:.4f}: vocabulary epsilon {budget.vocabulary_epsilon:.4g}, "
                      f"model epsilon {budget.model_epsilon:.4g}, composed {budget.total.epsilon:.4g}")
            model = template.set_params(epsilon=budget.model_epsilon, delta=budget.model_delta)
            pad = self._check_model(model, n_documents, int(self.n_words))
            if self.ledger is not None:
                check_pipeline_budget(self.ledger, budget.planned)
            counts, words, vocabulary_guarantee = self._private_vocabulary(documents, budget, model)
        if pad:  # the clipped fit gives short documents weight 0; the worst-case one refuses them
            self._say("documents with fewer than 3 tokens over the vocabulary are padded one by one")
            counts = pad_short_documents(counts)
        model.fit(sp.csr_matrix(counts, dtype=np.int64))
        self.budget_ = budget
        self.vocabulary_ = words
        self.model_ = model
        self.padded_ = bool(pad)
        self.vocabulary_guarantee_ = vocabulary_guarantee
        self.model_guarantee_ = model.guarantee_
        self.guarantee_ = (model.guarantee_ if vocabulary_guarantee is None
                           else compose(vocabulary_guarantee, model.guarantee_, delta=float(self.delta)))
        return self

    @staticmethod
    def _check_model(model: PrivateSpectralLDA | DPVariationalLDA, n_documents: int, n_words: int) -> bool:
        """The model's refusals (public sizes) before any charge; whether short documents need padding."""
        if isinstance(model, PrivateSpectralLDA):
            return not model.check_configuration(n_documents, n_words)
        model.check_configuration(n_documents)
        return False

    def _private_vocabulary(
        self, documents: list[str], budget: TextBudget, model: PrivateSpectralLDA | DPVariationalLDA
    ) -> tuple[sp.csr_matrix, list[str], PrivacyGuarantee]:
        """The vocabulary's release (charged) and the counts over it; refuses a vocabulary too small."""
        vectorizer = self._vectorizer(budget.vocabulary_epsilon, budget.vocabulary_delta)
        with warnings.catch_warnings():  # the shortfall is said below, in this object's words
            warnings.simplefilter("ignore", ReleaseUtilityWarning)
            try:
                counts = vectorizer.fit_transform(documents)
            except EmptyVocabularyError:
                counts = None
        words = [] if counts is None else [str(w) for w in vectorizer.get_feature_names_out()]
        self._say(f"private vocabulary: {len(words)} words (released under DP)")
        needed = int(self.n_topics) if isinstance(model, PrivateSpectralLDA) else 1
        if len(words) < needed:
            short = (f"fewer than the {self.n_topics} topics: no model can be fitted over it" if needed > 1
                     else "no model can be fitted over it")
            raise ValueError(
                f"the private vocabulary kept {len(words)} words, {short}. The vocabulary's release was "
                f"charged (epsilon {vectorizer.epsilon:g}, delta {vectorizer.delta:g}), the model's was "
                "not; more documents, a larger epsilon or vocabulary_share, or a smaller "
                "max_words_per_document would keep more"
            )
        if len(words) < self.n_words:  # the count is part of the release
            warnings.warn(
                f"PrivateTopicModel: only {len(words)} of the {self.n_words} words asked for passed the "
                "noisy threshold; more documents, a larger epsilon or vocabulary_share, or a smaller "
                "max_words_per_document would keep more", ReleaseUtilityWarning, stacklevel=3,
            )  # fmt: skip
        return counts, words, vectorizer.guarantee_

    # -- using the fitted model ----------------------------------------------------------------------------
    def _counter(self, words: Sequence[str]) -> CountVectorizer:
        """scikit-learn's counts over ``words`` with this model's (public) tokeniser."""
        return CountVectorizer(vocabulary=list(words), token_pattern=self.token_pattern,
                               stop_words=self.stop_words)

    @property
    def components_(self) -> np.ndarray:
        check_is_fitted(self, "model_")
        return self.model_.components_

    def transform(self, raw_documents: Iterable[str]) -> np.ndarray:
        """Each document's topic proportions (the model's inference over the counts of its words)."""
        check_is_fitted(self, "model_")
        if isinstance(raw_documents, str | bytes):
            raise ValueError("raw_documents must be an iterable of documents (strings), not one string")
        return self.model_.transform(sp.csr_matrix(self._counter(self.vocabulary_).transform(raw_documents),
                                                   dtype=np.int64))

    def top_words(self, n: int = 10) -> list[list[str]]:
        """The ``n`` most probable words of each topic."""
        check_is_fitted(self, "model_")
        return self.model_.top_words(self.vocabulary_, n)

    def get_feature_names_out(self, input_features: object = None) -> np.ndarray:
        """``topic0 ... topic{k-1}``: the columns of :meth:`transform`."""
        return np.asarray([f"topic{i}" for i in range(int(self.n_topics))], dtype=object)

    # -- files -----------------------------------------------------------------------------------------------
    def save(self, path: str | Path, *, source: str = "PrivateTopicModel") -> None:
        """Write the fitted model (JSON or ``.npz``, :func:`~dptensor.models.topics.persistence.save_model`).

        The file is an ordinary topic-model file (``dptensor lda transform`` reads it) that also
        records the vocabulary's and the run's guarantees and this object's settings; ``source``
        names where the texts came from.
        """
        check_is_fitted(self, "model_")
        guarantees = {"total_guarantee": self.guarantee_}
        if self.vocabulary_guarantee_ is not None:
            guarantees["vocabulary_guarantee"] = self.vocabulary_guarantee_
        settings = {"n_topics": int(self.n_topics), "epsilon": self.epsilon, "delta": self.delta,
                    "n_words": int(self.n_words), "stop_words": self.stop_words,
                    "token_pattern": self.token_pattern,
                    "max_words_per_document": int(self.max_words_per_document), "padded": self.padded_}
        save_model(path, self.model_, _Words(list(self.vocabulary_), source, self.token_pattern),
                   guarantees, extra={"text_model": settings})

    @classmethod
    def load(cls, path: str | Path) -> PrivateTopicModel:
        """Read a file written by :meth:`save`, ready for :meth:`transform` and :meth:`top_words`.

        The guarantees (``guarantee_``, ``model_guarantee_``, ``vocabulary_guarantee_``) are the
        file's records of them (:meth:`PrivacyGuarantee.to_dict`: dictionaries), and ``budget_`` is
        None.
        """
        model, vocabulary, meta = read_model_file(path)
        settings = meta.get("text_model")
        if settings is None:  # a private model file of another writer (dptensor lda fit --out)
            if meta.get("guarantee") is None or not vocabulary:
                raise ValueError(f"{path}: not a private topic model with its vocabulary (no guarantee or "
                                 "no words); dptensor.models.topics.persistence.load_model reads any "
                                 "model file")
            settings = {"n_topics": int(model.n_components), "n_words": len(vocabulary),
                        "token_pattern": meta.get("token_pattern") or TOPIC_TOKEN_PATTERN}
        settings = dict(settings)
        padded = settings.pop("padded", False)
        loaded = cls(**settings)
        loaded.model_ = model
        loaded.vocabulary_ = list(vocabulary or [])
        loaded.padded_ = bool(padded)
        loaded.budget_ = None
        # a file holds the guarantees as records (PrivacyGuarantee.to_dict), not as live objects
        loaded.model_guarantee_ = meta.get("guarantee")
        loaded.vocabulary_guarantee_ = meta.get("vocabulary_guarantee")
        loaded.guarantee_ = meta.get("total_guarantee")
        return loaded
