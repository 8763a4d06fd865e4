"""Differentially private variational inference for LDA (Park, Foulds, Chaudhuri & Welling 2016).

The baseline private topic model of DeCarolis et al. (paper 004, Section 7, "DP VI"): online
variational Bayes for Latent Dirichlet Allocation (Hoffman, Blei & Bach 2010, Algorithm 2)
whose per-minibatch expected sufficient statistics are clipped and released through the
Gaussian mechanism (Park et al., *Private topic modeling*, arXiv:1609.04120; the algorithm as
their public code ``PPVI_LDA/onlineldavb.py`` runs it is written out in
``shared/specs/private-topic-models.md``, section B.8).

Algorithm (one step ``t = 1..T``; ``K`` topics, ``V`` words, ``N`` documents)
-----------------------------------------------------------------------------
1. Draw a minibatch ``B_t``: each document independently with probability ``q = S / N``
   (Poisson sampling, the exact accountant) or exactly ``S`` documents uniformly without
   replacement (the authors' code, ``accountant="paper"``: the research wing's
   ``dptensor.research.PaperDPVariationalLDA``). The draw comes from the *secret*
   noise source: amplification by subsampling needs the sample hidden.
2. E-step for every ``d`` in ``B_t``, vectorised over the minibatch: with
   ``E log beta_kw = psi(lambda_kw) - psi(sum_w lambda_kw)`` and ``gamma_d ~ Gamma(100, 1/100)``
   initially, iterate
   ``gamma_d <- alpha + exp(E log theta_d) * ((n_d / phinorm_d) exp(E log beta)^T)`` until the
   mean absolute change is below ``mean_change_tol`` (at most ``max_doc_update_iter`` times),
   where ``phinorm_dw = sum_k exp(E log theta_dk + E log beta_kw)``.
3. Expected sufficient statistics of each document,
   ``s_d[k, w] = n_dw exp(E log theta_dk + E log beta_kw) / phinorm_dw`` (``K x V``, entries
   ``>= 0``, summing to the document length), **clipped** to Frobenius norm ``C``:
   ``s_d <- s_d min(1, C / ||s_d||_F)``.
4. Release ``s_bar = (1/S) sum_{d in B_t} s_d + N(0, sigma^2 I)`` (``accountant="paper"``:
   zero its negative entries, as the authors do).
5. ``lambda <- (1 - rho_t) lambda + rho_t (eta + N s_bar)`` with ``rho_t = (tau_0 + t)^-kappa``,
   then (exact accountant) ``lambda <- max(lambda, eta)`` entrywise. Both are post-processing;
   flooring after the average lets the noise of successive releases cancel first, where
   zeroing each release adds about ``0.4 N sigma`` to every entry with no signal.
6. After the last step (exact accountant): ``lambda <- max(lambda - s_lambda, eta)`` with
   ``s_lambda`` the public standard deviation of the noise left in each entry
   (:func:`~dptensor.models.topics._dp_vi_steps.shrink_noise`; post-processing).

Before step 2 every document is scaled to at most the public length ``L``
(:func:`~dptensor.models.topics._dp_vi_steps.bound_document_lengths`, always on a private path),
in a form in which no finite count overflows, so a neighbour with counts near float64's maximum
behaves as any other long document.

Neighbouring relation and sensitivity
-------------------------------------
**Replace one document** (its whole count vector, by any other); ``N``, the vocabulary and
every parameter are public. ``lambda`` before step ``t`` is a function of earlier releases only,
so each release is a Gaussian mechanism on a public function of the data (adaptive
composition).

*Proposition (sensitivity of the minibatch mean).* For a fixed minibatch, replacing document
``x`` by ``x'`` changes ``s_bar``'s mean by ``(s_x - s_x') / S`` and
``||s_x - s_x'||_F <= sqrt(2) C``, so the sensitivity is ``sqrt(2) C / S`` (not ``2 C / S``).
*Proof.* ``||a - b||^2 = ||a||^2 + ||b||^2 - 2 <a, b>``; both clipped statistics have norm at
most ``C`` and non-negative entries, so ``<a, b> >= 0`` and ``||a - b||^2 <= 2 C^2``. Equality
holds for two documents with no word in common, each clipped (``<a, b> = 0``). []
(:func:`~dptensor.models.topics._dp_vi_accounting.replace_one_sensitivity`; checked by brute force
in ``tests/models/topics/test_dp_vi_lda.py``.)

Accounting: the exact accountant (full batch: Gaussian DP; Poisson subsampling: dp-accounting's
PLD under replace-one with the dominating pair of Lebeda et al. 2024) and the authors' unproven
``accountant="paper"`` are derived in :mod:`~dptensor.models.topics._dp_vi_accounting`.

The estimator is a thin class over :func:`~dptensor.models.topics._dp_vi_fit.dp_variational_lda`
(the steps): it checks its parameters and the input, plans the release from public quantities
(:class:`~dptensor.models.topics._dp_vi_fit.VISettings`), charges it, calls the function and sets
its fitted attributes in one place. The method's knobs
(minibatches, clipping, length bound, step sizes, start) are its options,
:class:`~dptensor.models.topics.dp_vi_options.DPVIOptions`.

What the estimator never exposes: the minibatches, their sizes, the training documents' topic
proportions, the number of clipped documents, or any bound computed on the training data.
"""

from __future__ import annotations

import dataclasses
import math
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from scipy.special import gammaln, logsumexp
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import Interval

from dptensor._errstate import underflow_ignored
from dptensor._validation import check_random_state
from dptensor.models._base import PrivateEstimatorMixin, declare_count_input
from dptensor.models._options import build_estimator, resolve_options
from dptensor.models.topics._dp_vi_accounting import PAPER_REASON, vi_pass_guarantee
from dptensor.models.topics._dp_vi_fit import (
    VISettings,
    bounded_counts,
    dp_variational_lda,
    initial_topics,
)
from dptensor.models.topics._dp_vi_start import START_SCALE, composed_start_guarantee, split_epsilons
from dptensor.models.topics._dp_vi_steps import bound_document_lengths, dirichlet_expectation, e_step
from dptensor.models.topics._fitted import FittedTopicsMixin, document_chunks
from dptensor.models.topics._releases import check_clipped_counts
from dptensor.models.topics.dp_vi_options import DPVIOptions
from dptensor.privacy import (
    NoiseSource,
    PrivacyGuarantee,
    compose,
    require_unproven,
)

# The accounting (epsilon of the releases, calibration) is its own module, _dp_vi_accounting, the
# per-document steps are _dp_vi_steps, the steps of a fit as a function _dp_vi_fit and the options
# dp_vi_options; their names are imported from there.
__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_PRIVATE_DOC_TOPIC_PRIOR",
    "DEFAULT_CLIP",
    "DEFAULT_MAX_DOC_LENGTH",
    "MAX_EPSILON",
    "DPVariationalLDA",
]

#: The authors' ``maxLen``: the default declared maximum document length.
DEFAULT_MAX_DOC_LENGTH = 500
#: Default clipping norm ``C`` of a private fit (exact accountant), chosen for real text
#: from public measurements, not from the data being fitted: on short real documents the
#: Frobenius norm of one document's statistics is about ``sqrt(length)`` (Debian package
#: descriptions: median 2.0, 95th percentile 2.7), far below the authors' worst-case ``0.1 L = 50``.
DEFAULT_CLIP = 2.0
#: Minibatch size of a non-private (or ``accountant="paper"``) fit when ``batch_size`` is None
#: (scikit-learn's default). A private fit's default is the full batch, ``S = N``: ``T =
#: n_passes`` releases whose noise on ``N s_bar`` has standard deviation ``sqrt(2) z C`` with ``z``
#: growing as ``sqrt(T)``, where small minibatches put ``N / S`` times that on each early step
#: (on Debian's package descriptions at epsilon = 1: NPMI -0.68 at S = 128, -0.07 at full batch).
DEFAULT_BATCH_SIZE = 128
#: Default document-topic prior ``alpha`` of a private fit (exact accountant): flatter than the
#: non-private ``1/K``, so that a document's proportions do not commit to one noisy topic on the
#: strength of a few words. On two real corpora of short documents (Debian package descriptions,
#: WordNet glosses; ``K = 10``, ``epsilon = 1``) it lowered the held-out completion perplexity by
#: 6-7% and raised the topics' NPMI, against ``alpha = 1/K``.
DEFAULT_PRIVATE_DOC_TOPIC_PRIOR = 0.5
#: The authors' ``clippingProportion``: ``C = 0.1 * max_doc_length`` (``accountant="paper"``).
CLIP_PROPORTION = 0.1
#: The largest budget a private fit accepts. Above it the noise is negligible (the fit is, for any
#: purpose, not private) and dp-accounting's PLD arithmetic overflows (``epsilon = 1e6`` raised
#: ``OverflowError``); ``epsilon=None`` is the non-private fit.
MAX_EPSILON = 1000.0


# ---------------------------------------------------------------------------------------------
# the estimator
# ---------------------------------------------------------------------------------------------
class DPVariationalLDA(PrivateEstimatorMixin, FittedTopicsMixin, BaseEstimator):
    """Online variational Bayes LDA with differentially private sufficient statistics.

    Park, Foulds, Chaudhuri & Welling (2016), *Private topic modeling* (arXiv:1609.04120), on
    top of Hoffman, Blei & Bach (2010), *Online learning for Latent Dirichlet Allocation*. See
    the module docstring for the algorithm, the neighbouring relation (replace one document),
    the sensitivity proof and the accountant. ``epsilon=None`` fits the non-private online VB
    of Hoffman et al. (scikit-learn's ``LatentDirichletAllocation(learning_method="online")``
    with the same options), without clipping unless ``options.clip`` is given.

    A private fit always uses the exact accountant (Poisson sampling and dp-accounting's PLD
    accountant under replace-one: a proved guarantee). The authors' fixed-size minibatches and
    moments accountant (unproven) are the research wing's
    ``dptensor.research.PaperDPVariationalLDA(accountant="paper")``.

    Parameters
    ----------
    n_components : int
        Number of topics ``K``.
    doc_topic_prior, topic_word_prior : float, optional
        ``alpha`` and ``eta``; default ``1 / K`` (as the authors and scikit-learn), except
        ``alpha = 0.5`` (:data:`DEFAULT_PRIVATE_DOC_TOPIC_PRIOR`) for a private fit with the
        exact accountant.
    epsilon, delta : float, optional
        Total budget over all ``T`` steps; ``epsilon=None`` is non-private. ``epsilon`` at most
        :data:`MAX_EPSILON` ``= 1000``.
    random_state : None, int or numpy.random.Generator
        Public randomness: the initial ``lambda`` and, when not private, the E-step
        initialisation and the shuffles. The minibatches and noise of a private fit come from
        the secret noise source.
    noise : None, "numpy", "opendp" or insecure_test_noise(seed)
    ledger : object with ``charge(guarantee, description=...)``, optional
    verbose : bool, default False
        A progress bar over the steps.
    options : DPVIOptions, optional
        The method's settings (:class:`~dptensor.models.topics.dp_vi_options.DPVIOptions`:
        ``batch_size``, ``n_passes``, ``clip``, ``max_doc_length``, ``learning_offset``,
        ``learning_decay``, ``max_doc_update_iter``, ``mean_change_tol``, ``init``,
        ``init_share``); ``None``: its defaults. Nested parameters: ``options__clip``.

    Attributes
    ----------
    components_ : ndarray of shape (K, V)
        Variational Dirichlet parameters ``lambda`` of the topics (as scikit-learn's).
    exp_dirichlet_component_ : ndarray of shape (K, V)
        ``exp(E[log beta])``.
    doc_topic_prior_, topic_word_prior_ : float
    clip_ : float or None
        The clipping norm used.
    noise_std_ : float
        Standard deviation of the noise added to each released mean (0 when not private).
    lambda_noise_std_ : float
        Standard deviation of the noise each entry of ``lambda`` carries after the online
        average (public; 0 when not private). A private fit (exact accountant) returns
        ``max(lambda - lambda_noise_std_, eta)`` (:func:`~dptensor.models.topics._dp_vi_steps.shrink_noise`,
        post-processing).
    moment_model_ : PrivateSpectralLDA, SpectralLDA or None
        ``init="moments"``: the fitted moment estimator the start came from (``refine=None``;
        private, its attributes are its releases ``m1``, ``m2`` and, with the tensor recovery,
        ``e3``, covered by ``guarantee_``), which :func:`~dptensor.privacy.audit.audit_estimator`
        scores; ``None`` with a random start.
    n_batch_iter_ : int
        Steps taken so far (public: fixed by ``N``, ``S`` and ``n_passes``).
    n_iter_ : int
        Passes made by the last ``fit``.
    n_documents_ : int
    n_features_in_ : int
    guarantee_ : PrivacyGuarantee or None
        Of the model: the last ``fit`` (or first ``partial_fit``) composed exactly with every private
        ``partial_fit`` since (dp-accounting's PLD, at the sum of their deltas; each call is also
        charged to ``ledger`` on its own). ``None`` when not private.
    random_state_ : numpy.random.Generator
        The public generator (continued by ``partial_fit``).

    Examples
    --------
    >>> from dptensor import DPVariationalLDA
    >>> from dptensor.datasets.lda import make_lda_corpus
    >>> from dptensor.models.topics.dp_vi_options import DPVIOptions
    >>> corpus = make_lda_corpus(2000, 30, 3, alpha=0.3, doc_length=40, random_state=0)
    >>> model = DPVariationalLDA(3, epsilon=2.0, delta=1e-6, random_state=0,
    ...                          options=DPVIOptions(batch_size=200, n_passes=3)).fit(corpus.counts)
    >>> model.components_.shape
    (3, 30)
    >>> print(model.guarantee_.neighbouring, model.guarantee_.holds)
    document True
    """

    _options_class = DPVIOptions
    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "doc_topic_prior": [None, Interval(Real, 0, None, closed="neither")],
        "topic_word_prior": [None, Interval(Real, 0, None, closed="neither")],
        "random_state": [None, Interval(Integral, 0, None, closed="left"), np.random.Generator,
                         np.random.RandomState],
        "verbose": ["boolean"],
        "options": [None, DPVIOptions],
        **PrivateEstimatorMixin._privacy_parameter_constraints,
    }

    def __init__(
        self,
        n_components: int = 10,
        *,
        doc_topic_prior: float | None = None,
        topic_word_prior: float | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        random_state: int | np.random.Generator | None = None,
        noise: object = None,
        ledger: object = None,
        verbose: bool = False,
        options: DPVIOptions | None = None,
    ) -> None:
        self.n_components = n_components
        self.doc_topic_prior = doc_topic_prior
        self.topic_word_prior = topic_word_prior
        self.epsilon = epsilon
        self.delta = delta
        self.random_state = random_state
        self.noise = noise
        self.ledger = ledger
        self.verbose = verbose
        self.options = options

    # ------------------------------------------------------------------ planning (public only)
    def _accountant(self) -> str:
        """The accountant of a private fit: ``"exact"`` (the research wing's subclass offers the paper's)."""
        return "exact"

    def _options(self) -> DPVIOptions:
        """``options``, checked (its defaults for ``None``)."""
        return resolve_options(self.options, DPVIOptions, type(self).__name__)

    def _check_privacy_parameters(self, *, requires_delta: bool = True) -> None:
        """The mixin's checks, and a budget the accountant can calibrate (at most :data:`MAX_EPSILON`)."""
        super()._check_privacy_parameters(requires_delta=requires_delta)
        if self._is_private and float(self.epsilon) > MAX_EPSILON:
            raise ValueError(
                f"epsilon={self.epsilon!r} is above {MAX_EPSILON:g}, the largest budget DPVariationalLDA "
                "calibrates (the noise would be negligible); use epsilon=None for a non-private fit"
            )

    def _doc_topic_prior(self) -> float:
        """``alpha``: ``doc_topic_prior``; by default 0.5 (private, exact accountant), else ``1/K``."""
        if self.doc_topic_prior is not None:
            return float(self.doc_topic_prior)
        if self._is_private and self._accountant() != "paper":
            return DEFAULT_PRIVATE_DOC_TOPIC_PRIOR
        return 1.0 / int(self.n_components)

    def _max_doc_length(self, options: DPVIOptions) -> int | None:
        """The enforced length bound: ``max_doc_length``, or :data:`DEFAULT_MAX_DOC_LENGTH` when private."""
        if options.max_doc_length is not None:
            return int(options.max_doc_length)
        return DEFAULT_MAX_DOC_LENGTH if self._is_private else None

    def settings(
        self, n_documents: int, n_passes: int | None = None, options: DPVIOptions | None = None
    ) -> VISettings:
        """The public settings of a fit of ``N`` documents: the parameters with their defaults resolved.

        ``S`` is ``batch_size`` (at most ``N``: above it, the full batch, whose mean is divided by ``N``);
        by default ``N`` for a private fit (exact accountant), else 128. ``C`` is ``clip``; by default
        :data:`DEFAULT_CLIP` (private), ``0.1 L`` (``accountant="paper"``), none (not private).

        Parameters
        ----------
        n_documents : int
            The public number of documents ``N``.
        n_passes : int, optional
            Passes of this call (default ``options.n_passes``; ``partial_fit`` makes one).
        options : DPVIOptions, optional
            Default: the estimator's ``options``, checked.

        Returns
        -------
        VISettings
            With ``noise_std`` 0 (the calibration is the plan's, :meth:`planned_guarantee`).
        """
        options = self._options() if options is None else options
        n, k = int(n_documents), int(self.n_components)
        private, paper = self._is_private, self._accountant() == "paper"
        if options.batch_size is not None:
            batch_size = min(int(options.batch_size), n)
        else:
            batch_size = n if private and not paper else min(DEFAULT_BATCH_SIZE, n)
        length = self._max_doc_length(options)
        if options.clip is not None:
            clip: float | None = float(options.clip)
        elif not private:
            clip = None
        else:
            clip = CLIP_PROPORTION * float(length) if paper else DEFAULT_CLIP
        return VISettings(
            n_components=k, doc_topic_prior=self._doc_topic_prior(),
            topic_word_prior=1.0 / k if self.topic_word_prior is None else float(self.topic_word_prior),
            n_documents=n, n_passes=int(options.n_passes if n_passes is None else n_passes),
            batch_size=batch_size, clip=clip, max_doc_length=length,
            learning_offset=float(options.learning_offset), learning_decay=float(options.learning_decay),
            max_doc_update_iter=int(options.max_doc_update_iter),
            mean_change_tol=float(options.mean_change_tol), accountant=self._accountant(),
        )  # fmt: skip

    def check_configuration(self, n_documents: int, n_words: int | None = None) -> None:
        """Refuse, before any data is read or any budget spent, what a private ``fit`` would refuse.

        Checks the parameters, the opt-in of an unproven accountant and the calibration of the
        plan from the public number of documents only (the checks ``fit`` runs before its charge),
        so that a pipeline step before this one -- a vocabulary chosen under DP -- is not charged for
        a fit that cannot run.

        Parameters
        ----------
        n_documents : int
            The public number of documents ``N`` the fit will see.
        n_words : int, optional
            The public vocabulary size (``init="moments"``: its plan is checked too when given).
        """
        self._validate_params()
        options = self._options()
        self._check_privacy_parameters()
        if self._is_private:
            self._checked_guarantee(options, n_documents, n_words)

    def planned_guarantee(self, n_documents: int, n_words: int | None = None) -> PrivacyGuarantee:
        """The guarantee a private fit of ``N`` documents charges, before any data is read.

        From the parameters and the public ``N`` only (the checks of :meth:`check_configuration`
        included): a pipeline can ask a ledger, before its first release, whether it can pay for
        this fit too (``dptensor lda fit --method vi --private-vocab --ledger``).

        Parameters
        ----------
        n_documents : int
            The public number of documents ``N`` the fit will see.
        n_words : int, optional
            The public vocabulary size; needed with ``init="moments"`` (the moments' plan).

        Returns
        -------
        PrivacyGuarantee
            What :meth:`fit` would report as ``guarantee_`` (and charge).
        """
        if not self._is_private:
            raise ValueError("planned_guarantee needs a private fit (epsilon and delta set)")
        self._validate_params()
        options = self._options()
        self._check_privacy_parameters()
        if options.init == "moments" and n_words is None:
            raise ValueError("init='moments': planned_guarantee needs n_words (the moments' plan)")
        return self._checked_guarantee(options, n_documents, n_words)

    def _checked_guarantee(
        self, options: DPVIOptions, n_documents: int, n_words: int | None
    ) -> PrivacyGuarantee:
        """The opt-in of an unproven accountant, then the plan of ``n_passes`` passes over ``N`` documents."""
        self._require_opt_in()
        return self._plan_guarantee(options, self.settings(n_documents, options=options), n_words)[0]

    def _require_opt_in(self) -> None:
        if self._accountant() == "paper":
            require_unproven(
                "accountant='paper' (Park et al.'s fixed-size minibatches and moments accountant)",
                PAPER_REASON,
            )

    def _plan_guarantee(
        self, options: DPVIOptions, settings: VISettings, n_words: int | None = None, *, start: bool = True
    ) -> tuple[PrivacyGuarantee, float]:
        """The guarantee and the noise standard deviation, from parameters and ``(N, V)`` only.

        ``init="moments"``: the VI releases on their share, composed with the moments' plan
        (:func:`~dptensor.models.topics._dp_vi_start.composed_start_guarantee`; without ``n_words``
        only the VI part is planned, as a check). ``start=False`` (a ``partial_fit`` continuing a
        model: no moments are released): the VI releases on the whole budget.
        """
        if options.init != "moments" or not start:
            return self._plan_passes(settings, float(self.epsilon))
        if settings.accountant != "exact" or settings.batch_size < settings.n_documents:
            raise ValueError(
                "init='moments' needs the full-batch exact accountant (accountant='exact', "
                "batch_size=None): its releases compose with the moments' in Gaussian DP"
            )
        share = float(options.init_share)
        eps_moments, eps_passes = split_epsilons(float(self.epsilon), float(self.delta), share)
        passes, sigma = self._plan_passes(settings, eps_passes)
        if n_words is None:
            return passes, sigma
        moments = self._moment_estimator(eps_moments, 0).planned_guarantee(settings.n_documents, int(n_words))
        guarantee = composed_start_guarantee(moments, passes, float(self.epsilon), float(self.delta), share)
        return guarantee, sigma

    def _moment_estimator(self, epsilon: float | None, seed: int):  # noqa: ANN202 - two estimator types
        """The start's moment estimator: private on ``epsilon`` (no ledger: the fit charges the whole)."""
        from dptensor.models.topics.private_spectral import PrivateSpectralLDA
        from dptensor.models.topics.spectral import SpectralLDA

        k = int(self.n_components)
        if not self._is_private:
            return SpectralLDA(k, refine=None, random_state=seed)
        return PrivateSpectralLDA(k, epsilon=epsilon, delta=float(self.delta), refine=None, random_state=seed,
                                  noise=self.noise)  # fmt: skip

    def _plan_passes(self, settings: VISettings, epsilon: float) -> tuple[PrivacyGuarantee, float]:
        """The VI releases' guarantee at ``epsilon`` and their noise standard deviation."""
        assert settings.clip is not None
        return vi_pass_guarantee(settings.n_documents, settings.n_steps, epsilon, float(self.delta),
                                 batch_size=settings.batch_size, clip=settings.clip,
                                 max_doc_length=settings.max_doc_length, accountant=settings.accountant)

    # ------------------------------------------------------------------ fitting
    @staticmethod
    def _public_shape(X: object) -> tuple[int, int]:
        shape = getattr(X, "shape", None)
        if shape is None:
            X = np.asarray(X)
            shape = X.shape
        if len(shape) != 2:
            raise ValueError(f"X must be a 2-D (documents x words) count matrix, got shape {tuple(shape)}")
        n, v = int(shape[0]), int(shape[1])
        if n == 0 or v == 0:
            raise ValueError(f"X is an empty corpus (shape {(n, v)})")
        return n, v

    def __sklearn_tags__(self):  # noqa: ANN204 - sklearn.utils.Tags
        return declare_count_input(super().__sklearn_tags__())

    @underflow_ignored  # the same under any NumPy error state (dptensor._errstate)
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: object, y: object = None) -> DPVariationalLDA:
        """Learn the topics from a documents x words count matrix (``options.n_passes`` passes).

        Parameters
        ----------
        X : array_like or scipy.sparse matrix of shape (n_documents, n_words)
            Non-negative integer word counts. ``N`` and the vocabulary size are public.
        y : ignored

        Returns
        -------
        self
        """
        options = self._options()
        self._check_privacy_parameters()
        n_docs, n_words = self._public_shape(X)
        rng = check_random_state(self.random_state)
        start = None if options.init == "moments" else initial_topics(self.n_components, n_words, rng)
        self._release(X, options, self.settings(n_docs, options=options), "fit", start, 1, rng, n_words)
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X: object, y: object = None) -> DPVariationalLDA:
        """One pass (``ceil(N / S)`` steps) over ``X``, continuing the current topics and step count.

        ``X`` is treated as the corpus of this call (its ``N`` scales the statistics). A private
        call is its own release, charged to the ledger on its own; ``guarantee_`` then states the
        whole model's, the exact composition of every call (:func:`dptensor.privacy.compose`; an
        upper bound when the calls' documents are disjoint). A private call cannot continue a
        model fitted without privacy. Under ``init="moments"`` only the first call releases the
        moments (on ``init_share`` of its budget); a continuing call spends its whole ``epsilon`` on
        its VI releases.
        """
        options = self._options()
        self._check_privacy_parameters()
        n_docs, n_words = self._public_shape(X)
        settings = self.settings(n_docs, 1, options)
        if not hasattr(self, "components_"):
            rng = check_random_state(self.random_state)
            start = None if options.init == "moments" else initial_topics(self.n_components, n_words, rng)
            self._release(X, options, settings, "partial_fit", start, 1, rng, n_words)
            return self
        if n_words != self.n_features_in_:
            raise ValueError(
                f"X has {n_words} words (columns) but the model was fitted on {self.n_features_in_}"
            )
        self._release(X, options, settings, "partial_fit", self.components_, self.n_batch_iter_,
                      self.random_state_, continuing=True)  # fmt: skip
        return self

    def _moment_start(
        self, X: object, options: DPVIOptions, settings: VISettings, rng: np.random.Generator
    ) -> tuple:
        """``(eta + START_SCALE N phi, the fitted moment estimator)`` (private on its share of the budget)."""
        eps = None
        if self._is_private:
            eps = split_epsilons(float(self.epsilon), float(self.delta), float(options.init_share))[0]
        moments = self._moment_estimator(eps, int(rng.integers(2**31 - 1))).fit(X)
        phi = np.asarray(moments.topic_word_distribution(), dtype=np.float64)
        lam = settings.topic_word_prior + START_SCALE * settings.n_documents * phi
        moments.timings_ = {}  # kept as moment_model_: its releases, not its wall times (DP-VI keeps none)
        return lam, moments

    def _release(
        self,
        X: object,
        options: DPVIOptions,
        settings: VISettings,
        what: str,
        lam: np.ndarray | None,
        n_batch_iter: int,
        rng: np.random.Generator,
        n_words: int | None = None,
        *,
        continuing: bool = False,
    ) -> None:
        """Plan the release, check ``X``, charge, call :func:`dp_variational_lda`; set the attributes last.

        The input checks (counts non-negative integers; for ``lam=None`` the moments' checks) run
        before the charge, so that an invalid corpus costs no budget. ``lam=None``: start from the
        moment estimate (``init="moments"``), released after the charge and before the VI steps.
        ``continuing``: a ``partial_fit`` of a fitted model, whose guarantee composes with the
        model's so far. The fitted attributes change only when every step has run (an error during
        the steps leaves a previous fit as it was; a private call's ``guarantee_`` and ledger charge
        stay, since the release had begun).
        """
        n_docs = settings.n_documents
        source: NoiseSource | None = None
        earlier = getattr(self, "guarantee_", None) if continuing else None
        matrix: sp.csr_matrix | None = None
        if self._is_private:
            self._require_opt_in()
            if continuing and earlier is None:
                raise ValueError(
                    "a private partial_fit cannot continue a model fitted without privacy: its topics "
                    "already read documents without noise; start a private model with fit or partial_fit"
                )
            guarantee, sigma = self._plan_guarantee(options, settings, n_words, start=lam is None)
            settings = dataclasses.replace(settings, noise_std=sigma)
            if lam is None:
                check_clipped_counts(X)  # the moments' input checks, before any charge
            else:
                matrix = bounded_counts(X, settings.max_doc_length)  # the input checks, before any charge
            start = "the moment releases, then " if lam is None else ""
            source = self._begin_release(
                guarantee,
                f"DPVariationalLDA.{what}: {start}{settings.n_steps} noisy sufficient-statistics releases",
                n_public=n_docs,
            )
            if earlier is not None:  # the model is the output of every call: their exact composition
                call = self.guarantee_  # as the charge recorded it (voided for insecure test noise)
                self.guarantee_ = compose(earlier, call, delta=earlier.delta + call.delta)
        moment_model = None
        if lam is None:
            lam, moment_model = self._moment_start(X, options, settings, rng)
        if matrix is None:  # not checked above (a non-private fit, or the moment start's own checks)
            matrix = bounded_counts(X, settings.max_doc_length)
        fitted = dp_variational_lda(matrix, lam, settings, rng, source=source, n_batch_iter=n_batch_iter,
                                    verbose=self.verbose)  # fmt: skip
        if source is None:
            self.guarantee_ = None
        self.components_, self.exp_dirichlet_component_ = fitted.components, fitted.exp_dirichlet_component
        self.doc_topic_prior_, self.topic_word_prior_ = settings.doc_topic_prior, settings.topic_word_prior
        self.n_batch_iter_, self.n_iter_ = fitted.n_batch_iter, settings.n_passes
        self.n_features_in_, self.n_documents_ = int(fitted.components.shape[1]), n_docs
        self.clip_, self.noise_std_, self.random_state_ = settings.clip, settings.noise_std, rng
        if not continuing:  # a continuing call releases no moments: the first call's start stays
            self.moment_model_ = moment_model
        self.lambda_noise_std_ = fitted.lambda_noise_std

    @classmethod
    def from_components(cls, components: object, **params: object) -> DPVariationalLDA:
        """A fitted model from saved variational parameters ``lambda`` (``K x V``) and parameters.

        For inference only (``transform``, ``score``, ``perplexity``, ``top_words``); the
        guarantee of the fit that produced ``lambda`` is not restored. ``params`` are named flatly
        (``max_doc_length=80`` as well as ``options=...``:
        :func:`~dptensor.models._options.build_estimator`), as a model file records them.
        """
        lam = np.asarray(components, dtype=np.float64)
        if lam.ndim != 2 or not np.all(np.isfinite(lam)) or np.any(lam <= 0):
            raise ValueError("components must be a 2-D array of positive, finite variational parameters")
        model = build_estimator(cls, **{"n_components": lam.shape[0], **params})
        if int(model.n_components) != lam.shape[0]:
            raise ValueError(f"components has {lam.shape[0]} rows but n_components={model.n_components}")
        k = lam.shape[0]
        model.components_ = lam
        model.exp_dirichlet_component_ = np.exp(dirichlet_expectation(lam))
        model.doc_topic_prior_ = model._doc_topic_prior()
        model.topic_word_prior_ = 1.0 / k if model.topic_word_prior is None else float(model.topic_word_prior)
        model.n_features_in_ = lam.shape[1]
        return model

    # ------------------------------------------------------------------ inference
    def _unnormalized_doc_topic(self, matrix: sp.csr_matrix) -> np.ndarray:
        """``gamma`` for every document (E-step from ``gamma = 1``, as scikit-learn's transform)."""
        k = int(self.n_components)
        options = self._options()
        gamma = np.ones((matrix.shape[0], k))
        for start, stop in document_chunks(matrix, k):
            gamma[start:stop], _ = e_step(
                matrix[start:stop], self.exp_dirichlet_component_, self.doc_topic_prior_,
                gamma[start:stop], int(options.max_doc_update_iter), float(options.mean_change_tol), None,
                False,
            )  # fmt: skip
        return gamma

    def transform(self, X: object) -> np.ndarray:
        """Document-topic proportions: the variational ``gamma`` of each document, normalised.

        The output is about the documents passed (it is not a private release of them). When a
        maximum document length is in force (``options.max_doc_length``, or the default of a
        private fit), longer documents are read as the fit read them, scaled down to that length
        (so no finite count overflows).

        Returns
        -------
        ndarray of shape (n_documents, n_components), rows on the simplex
        """
        matrix = self._check_transform_input(X)
        length = self._max_doc_length(self._options())
        if length is not None:
            matrix = bound_document_lengths(matrix, length)
        gamma = self._unnormalized_doc_topic(matrix)
        return gamma / gamma.sum(axis=1, keepdims=True)

    def _approx_bound(self, matrix: sp.csr_matrix, gamma: np.ndarray) -> float:
        """The evidence lower bound of Hoffman et al. (2010), eq. (3), as scikit-learn computes it."""
        elog_theta = dirichlet_expectation(gamma)
        lam = self.components_
        elog_beta = dirichlet_expectation(lam)
        alpha, eta = self.doc_topic_prior_, self.topic_word_prior_
        k, v = lam.shape
        score = 0.0
        elog_beta_t = np.ascontiguousarray(elog_beta.T)
        for start, stop in document_chunks(matrix, k):
            block = matrix[start:stop]
            rows = np.repeat(np.arange(stop - start), np.diff(block.indptr))
            temp = elog_theta[start:stop][rows] + elog_beta_t[block.indices]
            score += float(block.data @ logsumexp(temp, axis=1))
        # E[log p(theta | alpha) - log q(theta | gamma)]
        score += float(np.sum((alpha - gamma) * elog_theta) + np.sum(gammaln(gamma) - gammaln(alpha)))
        score += float(np.sum(gammaln(alpha * k) - gammaln(gamma.sum(axis=1))))
        # E[log p(beta | eta) - log q(beta | lambda)]
        score += float(np.sum((eta - lam) * elog_beta) + np.sum(gammaln(lam) - gammaln(eta)))
        score += float(np.sum(gammaln(eta * v) - gammaln(lam.sum(axis=1))))
        return score

    def score(self, X: object, y: object = None) -> float:
        """Approximate log-likelihood (variational bound) of ``X``; greater is better (as scikit-learn)."""
        matrix = self._check_transform_input(X)
        return self._approx_bound(matrix, self._unnormalized_doc_topic(matrix))

    def perplexity(self, X: object) -> float:
        """``exp(-score(X) / tokens of X)``, per-word perplexity (lower is better; as scikit-learn)."""
        matrix = self._check_transform_input(X)
        tokens = float(matrix.sum())
        if tokens == 0:
            raise ValueError("X has no tokens; perplexity is undefined")
        return math.exp(-self._approx_bound(matrix, self._unnormalized_doc_topic(matrix)) / tokens)

    def topic_word_distribution(self) -> np.ndarray:
        """The topics' mean word distributions: rows of ``components_`` normalised to sum to one."""
        self._check_fitted()
        return self.components_ / self.components_.sum(axis=1, keepdims=True)
