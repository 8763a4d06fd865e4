"""Differentially private spectral LDA (DeCarolis et al., paper 004): Configurations 1--4.

The non-private pipeline (:mod:`dptensor.models.topics.spectral`) is a graph of edges e0--e9
(Figure 1 of the paper); a *configuration* is a cut of that graph whose edges get noise, so that
everything after the cut is post-processing. Relation: **replace one document**; the number of
documents ``N``, the vocabulary (the columns of ``X``), ``alpha_0`` and ``k`` are public, and
every document has at least three tokens (documents with fewer are an input error, never
dropped: dropping would change ``N``).

Configuration 1 (the default; its guarantee holds)
--------------------------------------------------
Noise on ``M2_hat`` (edges e4 and e8) and on ``M3_hat`` (e3), with the corrections of
``docs/lda.md`` (*Privacy*):

1. **One** noisy ``M2_hat`` gives both ``W = U Sigma^{-1/2}`` and ``(W^T)^+ = U Sigma^{1/2}`` (the
   paper draws two independent copies, whose bases do not match; ``shared_m2=False`` keeps
   that). ``M2_hat`` is released by Analyze Gauss (a dense ``d x d`` symmetric noise, small ``d``)
   or by the noisy power method on the implicit operator (no ``d x d`` array; ``d = 10^5``):
   :mod:`dptensor.models.topics.private_whitening`.
2. The noise on ``M3_hat`` is pushed through the (public, already released) whitening exactly:
   the release is ``M3_hat(U, U, U) + s Sym(H)`` with ``H`` i.i.d. ``k x k x k``, then
   ``T_hat = (.)(Sigma^{-1/2}, Sigma^{-1/2}, Sigma^{-1/2})`` -- the same law as adding ``d^3``
   Frobenius-isotropic noise to ``M3_hat`` and whitening
   (:func:`~dptensor.privacy.mechanisms.whitened_symmetric_gaussian_tensor`), without a ``d^3``
   array. Its sensitivity is that of the projected tensor, which shrinks with the coherence of
   ``U`` (:func:`~dptensor.models.topics.sensitivity.m3_sensitivity`).
3. Sensitivities that hold: ``sqrt2 (1 + 2a) / N`` and ``sqrt2 (1 + 6|b| + 3c) / N`` (brute-force tested),
   not the paper's ``1/N`` (``sensitivity="paper"`` reproduces it, unproven). The estimators are
   computed in the scaled form of :mod:`dptensor.models.topics.moments` (word frequencies and powers
   of ``1/l``), so a document of any finite counts gives finite terms, the limits of valid ones,
   within these bounds.
4. All releases are Gaussian and are composed exactly (Gaussian DP; one
   :class:`dp_accounting.ComposedDpEvent`), with analytic calibration: the total ``(epsilon, delta)``
   fixes one Gaussian-DP parameter ``mu``, and ``budget_split`` divides ``mu^2`` between the edges.
5. The default split comes from the utility analysis (public quantities only;
   :func:`~dptensor.models.topics._private_plan.default_budget_split`).

Clipped releases (``clip``, the default for Configuration 1)
-----------------------------------------------------------
The sensitivities above are those of the worst document (three tokens of one word); a real
document's term is far smaller. With ``clip`` set, every document gets a weight ``w_n in [0, 1]``
that bounds its terms in the second- and third-order releases (``||w P_n||_F <= C``, hence
``||w G_n||_F <= C``) and a weight ``v_n >= w_n`` that bounds its word frequencies
(``||v p_n||_2 <= C1``; :mod:`dptensor.models.topics.clipped_moments`, computed in a scaled form that
no finite count overflows), and Configuration 1 releases

1. ``m1``: the vector ``(r S0, r T0, S1)`` -- the total weights of both orders (scaled by a public
   ``r``) and the weighted word frequencies -- Gaussian with sensitivity ``sqrt(2.5) C1``;
2. ``m2``: ``S2`` (Analyze Gauss) or ``S2 X_t`` (noisy power) with sensitivity ``sqrt2 C``, from which
   ``M2 = S2/S0 - a E1 E1^T`` (post-processing with the released ``S0``, ``E1 = S1/T0``);
3. ``e3``: ``S3(U, U, U)`` in the released eigenbasis ``U``, sensitivity ``sqrt2 C``, whitened with
   the released ``S0``, ``E1`` and eigenvalues. With ``third_clip`` each document's projected term
   is also clipped at ``C3`` (sensitivity ``min(sqrt2 C, 2 C3)``), and ``third_clip="auto"`` (the
   default) chooses ``C3`` by a fourth release, ``q3``: a noisy histogram of the projected norms on
   public bins (sensitivity ``sqrt2``; :mod:`dptensor.privacy.quantile`), taken once ``U`` is public.

With ``whitening_words`` (default ``"auto"``) releases 2 and 3 cover only the principal
sub-moments on the words most frequent in the released ``E1`` (post-processing of release 1; the
sensitivities do not change); the other words' topic entries are the released unigram
distribution's.

With ``topic_recovery="nmf"`` (chosen by ``"auto"``, the default, from public sizes where the
planner predicts little signal) only releases 1 and 2 are made, ``m2`` by Analyze Gauss, and the
topics are a non-negative factor of the released ``M2`` (post-processing;
:mod:`dptensor.models.topics.nonnegative_topics`).

Relation: **replace one document by any other document**, including an empty one or one with
any finite counts (documents of fewer than three tokens get weight 0: no input error, no
dropped row); ``N``, the vocabulary, ``alpha_0``, ``k``, ``C`` and ``C1`` are public. The
sensitivities do not involve ``N``: the normalisation by ``S0`` is released. Composition as
in point 4 above, over all the releases.

Inference matches the topics to the released unigram distribution ``unigram_`` (the
empirical-Bayes posterior means given ``E1``; ``match_unigram``) and shrinks them toward it by a
weight ``shrinkage_`` chosen from public parameters and released quantities (``shrinkage``;
docs/lda.md, *Shrinkage toward the private unigram model* and *Matching the unigram
distribution*): post-processing, so the guarantee is that of the releases above.

Configurations 2--4 (as printed; their guarantee does not hold)
---------------------------------------------------------------
The paper's other cuts (noise on the clean whitened tensor, eigenpairs or topics, with Procedure 1's
private lower bounds) run only after :func:`dptensor.privacy.enable_features` ``("unproven")`` and
report ``holds=False``: :mod:`dptensor.models.topics._paper_variants`.

Where the code lives
--------------------
The plan -- everything decided from the parameters and ``(N, d)`` before a document is read -- is
:func:`~dptensor.models.topics._private_plan.plan_private_spectral_lda` (also behind
``dptensor lda plan``), its guarantee's words :mod:`dptensor.models.topics._private_guarantee`, the
release steps shared by the configurations :mod:`dptensor.models.topics._releases`, Configuration 1's
releases (clipped or not) :mod:`dptensor.models.topics._configuration1`. ``fit`` reads: plan, charge
(``_begin_release``), compute and release, post-process.
"""

from __future__ import annotations

import sys
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import Interval, Options, StrOptions

from dptensor._errstate import underflow_ignored
from dptensor._validation import check_random_state
from dptensor.models._base import PrivateEstimatorMixin
from dptensor.models.topics._configuration1 import PrivateSpectralReleases
from dptensor.models.topics._paper_variants import paper_configuration_topics
from dptensor.models.topics._private_plan import (
    CLIP_RANGE,
    TOPIC_RECOVERIES,
    SpectralLDAPlan,
    noise_norm,
    plan_private_spectral_lda,
    resolve_clipping,
    shrinkage_weight,
    signal_guess,
)
from dptensor.models.topics._releases import (
    check_clipped_counts,
    check_private_counts,
    private_step,
    whitening_from_public_corpus,
)
from dptensor.models.topics._utility_plan import PrivateLDAPlan, plan_private_lda
from dptensor.models.topics.clipped_moments import ClippedMoments
from dptensor.models.topics.inference import TopicModelInference
from dptensor.models.topics.moments import Documents, document_blocks
from dptensor.models.topics.private_refinement import refine_topics_privately, refinement_sensitivity
from dptensor.models.topics.private_whitening import PRIVATE_WHITENINGS, WHITENING_SUBSPACES
from dptensor.models.topics.spectral import SPECTRAL_PARAMETER_CONSTRAINTS
from dptensor.parallel import effective_n_jobs, public_shape
from dptensor.privacy import require_unproven
from dptensor.privacy.errors import UtilityWarning
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.noise import NoiseSource

#: With ``match_unigram`` the ``"auto"`` shrinkage weight is this share of :func:`shrinkage_weight`'s:
#: matched topics already predict the unigram distribution where they carry no information. On
#: Debian descriptions and WordNet glosses (V = 2000, k = 10, epsilon 1, 2 and 4, two seeds each)
#: half the weight gave the lowest held-out perplexity of {0, 1/2, 1} in 10 of 12 fits and was
#: within 0.1% of the lowest in the other two (docs/lda.md, *Matching the unigram distribution*).
MATCHED_SHRINKAGE_FACTOR = 0.5


class PrivateSpectralLDA(PrivateEstimatorMixin, TopicModelInference, PrivateSpectralReleases, BaseEstimator):
    """Differentially private spectral LDA (DeCarolis et al., paper 004), document-level.

    A separate estimator rather than options of :class:`~dptensor.models.SpectralLDA`: a private
    fit has a different input domain (documents with fewer than three tokens are rejected, not
    dropped), no ``partial_fit`` (every call would be a new release), a dozen options that mean
    nothing without a budget, and it must not keep the noiseless intermediates
    (``whitened_tensor_`` etc.) that ``SpectralLDA`` exposes. Inference (``transform``, ``score``,
    ``perplexity``, ``top_words``) is shared and reads only the released topics.

    Parameters
    ----------
    n_components : int, default 10
        Number of topics ``k`` (at most the vocabulary size).
    alpha0 : float, default 1.0
        Dirichlet concentration ``alpha_0``, public (it must not be chosen by looking at the data).
    epsilon, delta : float
        The total budget, required: ``epsilon > 0``, ``0 < delta < 1``.
    config : {1, 2, 3, 4}, default 1
        The paper's configuration (module docstring). Only 1 has a guarantee that holds; 2--4 need
        ``enable_features("unproven")``.
    sensitivity : {"derived", "paper"}, default "derived"
        ``"paper"``: the printed noise levels (``1/N`` for the moments, the printed local
        sensitivities and Procedure 1's printed Laplace scale) -- unproven for every configuration.
    calibration : {"analytic", "classic"}, default "analytic"
        ``"analytic"``: exact Gaussian-DP composition (Configuration 1) or the analytic Gaussian
        per edge; ``"classic"``: the paper's ``tau = sqrt(2 ln(1.25/delta_i))/epsilon_i`` per edge with
        basic composition (valid only while every per-release epsilon is below 1).
    shared_m2 : bool, default True
        Configuration 1: one noisy ``M2_hat`` for ``W`` and ``(W^T)^+``; ``False`` draws two, as printed.
    budget_split : dict, optional
        Relative weights of the edges of the configuration
        (:data:`~dptensor.models.topics._private_plan.CONFIG_EDGES`); normalised. Under
        ``calibration="analytic"`` Configuration 1 splits the Gaussian-DP budget ``mu^2``, otherwise
        ``epsilon`` and ``delta``. Default:
        :func:`~dptensor.models.topics._private_plan.default_budget_split` (data-free).
    private_whitening : {"auto", "analyze-gauss", "noisy-power"}, default "auto"
        How ``M2_hat`` is released (:mod:`dptensor.models.topics.private_whitening`); ``"auto"`` is
        Analyze Gauss up to :data:`~dptensor.models.topics._private_plan.ANALYZE_GAUSS_MAX_WORDS`
        words, the noisy power method above.
    whitening_subspace : {"auto", "eigen", "nonnegative"}, default "auto"
        How the Analyze Gauss release of ``M2`` becomes the whitening subspace (post-processing;
        the guarantee is unchanged). ``"eigen"``: its top eigenvectors. ``"nonnegative"``: the span
        of a symmetric non-negative factorisation of the release thresholded at one noise standard
        deviation (LDA's ``M2`` is ``H H^T`` with ``H >= 0``;
        :mod:`dptensor.models.topics.nonnegative_subspace`), then the release's eigenpairs in it.
        ``"auto"``: ``"nonnegative"`` when the top eigenvectors' mean ``whitening_alignment_`` is
        below :data:`~dptensor.models.topics.private_whitening.NONNEGATIVE_BELOW_ALIGNMENT` (noise
        that hides directions), else ``"eigen"`` (docs/lda.md, *A non-negative whitening
        subspace*). Ignored by the noisy power method.
    topic_recovery : {"auto", "tensor", "nmf"}, default "auto"
        How the topics come from the releases. ``"tensor"``: spectral LDA's (whitening, the private
        whitened third moment ``e3``, its decomposition). ``"nmf"`` (clipped mode without
        ``public_corpus``, with the Analyze Gauss release of ``M2``): a symmetric non-negative
        factor of the released ``M2`` on the whitening words is the topics
        (:mod:`dptensor.models.topics.nonnegative_topics`); there is no third-moment release, so the
        budget goes to ``m1`` and ``m2`` (:data:`~dptensor.models.topics._private_plan.NMF_BUDGET_SPLIT`;
        with refinement, :data:`~dptensor.models.topics._private_plan.NMF_REFINED_BUDGET_SPLIT`).
        ``"auto"``:
        ``"nmf"`` in clipped mode without ``public_corpus`` when the planner predicts a
        signal-to-noise below :data:`~dptensor.models.topics.plan.WHITENING_WORDS_LEVEL` on the
        fewest whitening words (:func:`~dptensor.models.topics.plan.prefers_nonnegative_topics`;
        public inputs only) and none of ``budget_split``, ``third_clip`` and ``whitening_words`` is
        set (they configure the tensor step's releases), else ``"tensor"``. The choice is
        ``topic_recovery_`` (docs/lda.md, *Topics from the
        co-occurrences' non-negative factor*).
    clip : "auto", float or None, default "auto"
        Per-document bound ``C`` on each document's term in ``M2_hat`` and ``M3_hat`` (module
        docstring, *Clipped releases*). ``"auto"``: ``1/d`` for Configuration 1 with
        ``sensitivity="derived"``, ``calibration="analytic"`` and ``shared_m2=True`` -- every
        document of ordinary text is then scaled to norm ``C``, so the estimate weights each
        document by ``1/||P_n||_F`` (about its length) and the value of ``C`` cancels -- and
        ``None`` otherwise. ``None``: the worst-case sensitivities (``sqrt2 (1 + 2a)/N``; documents
        of fewer than 3 tokens are an error).
    word_clip : "auto" or float, default "auto"
        Bound ``C1`` on each document's term in ``M1_hat`` (``"auto"``: ``3 C``).
    third_clip : "auto", float or None, default "auto"
        Clipped mode: bound ``C3`` on each document's term in the projected third-order release
        ``S3(U, U, U)``, whose sensitivity becomes ``min(sqrt2 C, 2 C3)``
        (:mod:`dptensor.models.topics.clipped_moments`, *Projected clipping*). ``"auto"``: chosen
        under DP once ``U`` is released, as the upper
        :data:`~dptensor.models.topics._private_plan.THIRD_CLIP_TAIL` quantile of the documents'
        projected norms, from a noisy histogram on public bins (the ``"q3"`` release,
        :data:`~dptensor.models.topics._private_plan.THIRD_CLIP_QUANTILE_SHARE` of the ``e3``
        budget; :mod:`dptensor.privacy.quantile`);
        the value used is ``third_clip_``. A number: that public ``C3``. ``None``: no second clip.
    whitening_words : "auto", int or None, default "auto"
        Clipped mode without ``public_corpus``: release ``M2`` and the third moment on the
        ``whitening_words`` words most frequent in the released unigram distribution only (their
        principal sub-moments; post-processing of the ``m1`` release, sensitivities unchanged).
        The other words get topic-independent probabilities (``unigram_``). ``"auto"``: from public
        quantities, :func:`~dptensor.models.topics.plan.auto_whitening_words` -- at least
        300 words, more while the planner predicts a signal-to-noise of at least
        :data:`~dptensor.models.topics.plan.WHITENING_WORDS_LEVEL` on them. ``None``: every word.
    shrinkage : "auto" or float in [0, 1], default "auto"
        Weight ``lambda`` of the released unigram distribution ``unigram_`` in the topics that
        inference uses (``transform``, ``score``, ``perplexity``, :meth:`topic_word_distribution`):
        ``(1 - lambda) mu'_i + lambda unigram_`` with ``mu'`` the (matched, ``match_unigram``)
        topics (docs/lda.md, *Shrinkage toward the private unigram model*). Post-processing of the
        releases: the guarantee is unchanged. ``"auto"``: ``1 / (1 + (snr / 2.5)^2)``, halved with
        ``match_unigram``, with ``snr`` the predicted signal-to-noise of the ``M2`` release
        (:func:`~dptensor.models.topics.plan.shrinkage_weight`; ``0`` with ``public_corpus``,
        whose whitening has no noise). ``lambda = 1`` is the unigram model. Clipped mode only (the
        unclipped configurations release no ``M1``): there ``"auto"`` means 0 and a positive
        value is an error. ``components_`` and ``top_words`` are not shrunk.
    match_unigram : bool, default True
        Clipped mode: before the shrinkage, inference matches the topics and their weights
        ``alpha_ / sum(alpha_)`` to ``unigram_`` so that the mixture reproduces it exactly (LDA's
        first moment, :func:`~dptensor.models.topics.moment_matching.match_first_moment`), and
        uses the public ``alpha0`` as the prior's total; ``"auto"`` shrinkage is then halved
        (docs/lda.md, *Matching the unigram distribution*). Post-processing: the guarantee
        is unchanged; ``components_``, ``alpha_`` and ``top_words`` are not changed.
    public_corpus : array_like or scipy.sparse matrix of shape (n_public, d), optional
        Word counts of **public** documents of similar text over the same vocabulary (clipped mode
        only). The whitening (``M2``'s top eigenpairs) is computed from them without noise, so only
        ``m1`` and the whitened ``e3`` are released from ``X`` (budget split ``m1``/``e3``); the
        guarantee's ``public`` names the public corpus.
    refine : {"cvb0", None}, default "cvb0"
        Clipped mode: after the moments, continue from the private topics (those inference would
        use: matched and shrunk) with private CVB0 passes, each releasing the documents' expected
        topic-word counts (rare words weighted up by public weights from the released unigram
        distribution), every document's term clipped to Frobenius norm ``refine_clip``, with
        Gaussian noise (:mod:`dptensor.models.topics.private_refinement`; docs/lda.md, *Private
        refinement*). The passes are composed exactly with the moment releases in the one
        guarantee. Inference then folds documents in by CVB0 with the refined topics. ``None``, or
        a configuration without clipping: the moment estimate only.
    refine_passes : "auto" or int >= 1, default "auto"
        How many passes (releases). ``"auto"``: from public sizes (``N``, ``d``, ``k``, ``epsilon``,
        ``delta``), :func:`~dptensor.models.topics._private_plan.resolve_refinement`: 16, and
        none where the passes' release would be mostly noise (the whole budget then goes to the
        moments). The topics come from the weighted average of the passes' releases, so more
        passes cost time, not accuracy.
    refine_share : "auto" or float in (0, 1), default "auto"
        Share of the Gaussian-DP budget ``mu^2`` that the passes take (``"auto"``: 0.6); the moment
        releases share the rest by ``budget_split``.
    refine_clip : float, default 1.0
        ``L``: each document's bound in a pass (sensitivity ``sqrt(2) L``; the topics do not depend
        on its scale when every document is clipped, so a bound below most documents' norms is
        chosen).
    n_power_steps : int, default 4
        Releases ``T`` of the noisy power method.
    n_oversamples : int, default 10
        Extra columns of the noisy power method (``p = k + n_oversamples``, at most ``d``).
    projected_sensitivity : bool, default True
        Calibrate the ``M3_hat`` release and the power steps to the sensitivity in their public
        basis (smaller for incoherent bases); ``False`` uses the global bounds.
    decomposition, n_restarts, max_iter, tol
        Tensor decomposition of the (noisy) whitened tensor, as in ``SpectralLDA``.
    transform_max_iter, transform_tol, smoothing
        Inference, as in ``SpectralLDA``.
    verbose : bool, default False
        Print each step (names and durations only) to standard error.
    n_jobs : int, optional
        Threads for the passes over the documents of an in-memory ``X`` (``None``: one; ``-1``:
        every core). A Dask ``X`` runs on the active Dask scheduler instead. Either way the
        passes only add up sums over documents; the noise is drawn here, on the client, once per
        release, after the sum (:mod:`dptensor.parallel`).
    random_state : None, int or numpy.random.Generator
        Public randomness only (starts of the power methods); never the noise.
    noise : None, "numpy", "opendp" or insecure_test_noise(seed)
        Secret noise source (:func:`dptensor.privacy.resolve_noise`).
    ledger : object with ``charge``, optional
        Charged with the guarantee before the documents are read.

    Attributes
    ----------
    components_ : ndarray of shape (k, d)
        Private topic-word distributions (rows on the simplex), by decreasing ``alpha_``.
    alpha_ : ndarray of shape (k,)
    guarantee_ : PrivacyGuarantee
    unigram_ : ndarray of shape (d,) or None
        The private unigram distribution: each word's empirical-Bayes posterior mean given the
        released ``E1 = S1 / T0``, normalised
        (:func:`~dptensor.models.topics._releases.released_unigram`; clipped mode, ``None``
        otherwise).
    word_frequencies_ : ndarray of shape (d,) or None
        The released ``E1 = S1 / T0`` itself, noise included (entries may be negative; clipped
        mode, ``None`` otherwise).
    moment_components_ : ndarray of shape (k, d)
        The moment estimate (equal to ``components_`` without refinement).
    refinement_ : Refinement or None
        The private refinement's record (passes, prior, and ``released_counts``, the weighted
        average of the passes' releases that the topics are post-processed from; no likelihood is
        computed on the private path), ``None`` without refinement.
    shrinkage_ : float
        The ``lambda`` used by inference (``shrinkage``).
    budget_split_ : dict
        The normalised shares used.
    noise_scales_ : dict
        Standard deviation of the noise of each release (public: parameters and earlier releases).
    topic_recovery_ : str
        ``"tensor"`` or ``"nmf"``, the ``topic_recovery`` used (parameters and public sizes only).
    whitening_alignment_ : ndarray of shape (k,) or None
        How much of each whitening direction survived the noise of the ``M2`` release: the estimated
        squared cosine between each of the release's top eigenvectors and the matching eigenvector
        of the un-noised ``M2``, zero for an eigenvalue that did not rise above the noise's spectral edge
        (:func:`~dptensor.models.topics.private_whitening.spike_alignment`; post-processing of the
        release). A direction near zero is invisible to the eigenvectors at this ``epsilon`` and
        ``N``; topics that depend on it are mostly noise unless the non-negative subspace recovers
        part of it (``docs/lda.md``, *How many topics the release can resolve*).
        ``whitening_subspace="auto"`` decides from the mean whether the eigenvectors are used.
        Analyze Gauss whitening of Configuration 1 only (``None`` with the noisy power method, a
        ``public_corpus``, ``topic_recovery="nmf"`` or Configurations 2--4, whose whitening is not
        released); the first ``M2`` release (``e4``) when there are two.
    whitening_ : Whitening or None
        The whitening of the ``e3`` release: the top eigenpairs of the released ``M2`` (on the
        whole vocabulary, rows off the whitening words zero), or of the public corpus's
        (``public_corpus``). Post-processing of the ``m2`` release; ``None`` with
        ``topic_recovery="nmf"`` and in Configurations 2--4 (whose whitening is not released).
    projected_third_moment_ : ndarray of shape (k, k, k) or None
        The ``e3`` release itself, noise included: ``S3(U, U, U)`` (clipped) or ``M3_hat(U, U, U)``,
        with ``U = whitening_.eigenvectors``; ``None`` where ``whitening_`` is.
    second_moment_ : ndarray of shape (m, m) or None
        ``topic_recovery="nmf"``: the ``m2`` release itself, noise included (Analyze Gauss's
        ``M2 = S2/S0 - a E1 E1^T`` on the ``m`` whitening words), whose non-negative factor gives the
        topics; ``None`` otherwise.
    second_moment_words_ : ndarray of shape (m,) or None
        The whitening words, the rows of ``second_moment_`` (post-processing of ``m1``).
    n_features_in_, n_documents_ : int
    timings_ : dict
        Seconds per step (wall-clock time is outside the guarantee, as for any implementation).

    Examples
    --------
    >>> from dptensor.datasets.lda import make_lda_corpus
    >>> corpus = make_lda_corpus(20000, 40, 3, alpha=0.1, doc_length=50, topic_concentration=0.1,
    ...                          random_state=0)
    >>> model = PrivateSpectralLDA(3, alpha0=0.3, epsilon=1.0, delta=1e-6, random_state=0)
    >>> model.fit(corpus.counts).components_.shape
    (3, 40)
    >>> model.guarantee_.holds, model.guarantee_.neighbouring
    (True, 'document')
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "alpha0": [Interval(Real, 0, None, closed="neither")],
        **PrivateEstimatorMixin._privacy_parameter_constraints,
        "config": [Options(Integral, {1, 2, 3, 4})],
        "sensitivity": [StrOptions({"derived", "paper"})],
        "calibration": [StrOptions({"analytic", "classic"})],
        "shared_m2": ["boolean"],
        "budget_split": [dict, None],
        "private_whitening": [StrOptions({"auto", *PRIVATE_WHITENINGS})],
        "whitening_subspace": [StrOptions(set(WHITENING_SUBSPACES))],
        "topic_recovery": [StrOptions({"auto", *TOPIC_RECOVERIES})],
        "n_power_steps": [Interval(Integral, 1, None, closed="left")],
        "n_oversamples": [Interval(Integral, 0, None, closed="left")],
        "projected_sensitivity": ["boolean"],
        "clip": [StrOptions({"auto"}), Interval(Real, *CLIP_RANGE, closed="both"), None],
        "word_clip": [StrOptions({"auto"}), Interval(Real, *CLIP_RANGE, closed="both")],
        "third_clip": [StrOptions({"auto"}), Interval(Real, *CLIP_RANGE, closed="both"), None],
        "whitening_words": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left"), None],
        "shrinkage": [StrOptions({"auto"}), Interval(Real, 0, 1, closed="both")],
        "match_unigram": ["boolean"],
        "public_corpus": ["array-like", "sparse matrix", None],
        "refine": [StrOptions({"cvb0"}), None],
        "refine_passes": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "refine_share": [StrOptions({"auto"}), Interval(Real, 0, 1, closed="neither")],
        "refine_clip": [Interval(Real, *CLIP_RANGE, closed="both")],
        **SPECTRAL_PARAMETER_CONSTRAINTS,
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_components: int = 10,
        alpha0: float = 1.0,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        config: int = 1,
        sensitivity: str = "derived",
        calibration: str = "analytic",
        shared_m2: bool = True,
        budget_split: dict | None = None,
        private_whitening: str = "auto",
        whitening_subspace: str = "auto",
        topic_recovery: str = "auto",
        n_power_steps: int = 4,
        n_oversamples: int = 10,
        projected_sensitivity: bool = True,
        clip: float | str | None = "auto",
        word_clip: float | str = "auto",
        third_clip: float | str | None = "auto",
        whitening_words: int | str | None = "auto",
        shrinkage: float | str = "auto",
        match_unigram: bool = True,
        public_corpus: object = None,
        refine: str | None = "cvb0",
        refine_passes: int | str = "auto",
        refine_share: float | str = "auto",
        refine_clip: float = 1.0,
        decomposition: str = "simultaneous",
        n_restarts: int | None = None,
        max_iter: int | None = None,
        tol: float = 1e-10,
        transform_max_iter: int = 100,
        transform_tol: float = 1e-4,
        smoothing: float = 1e-6,
        verbose: bool = False,
        n_jobs: int | None = None,
        random_state: object = None,
        noise: object = None,
        ledger: object = None,
    ) -> None:
        self.n_components = n_components
        self.alpha0 = alpha0
        self.epsilon = epsilon
        self.delta = delta
        self.config = config
        self.sensitivity = sensitivity
        self.calibration = calibration
        self.shared_m2 = shared_m2
        self.budget_split = budget_split
        self.private_whitening = private_whitening
        self.whitening_subspace = whitening_subspace
        self.topic_recovery = topic_recovery
        self.n_power_steps = n_power_steps
        self.n_oversamples = n_oversamples
        self.projected_sensitivity = projected_sensitivity
        self.clip = clip
        self.word_clip = word_clip
        self.third_clip = third_clip
        self.whitening_words = whitening_words
        self.shrinkage = shrinkage
        self.match_unigram = match_unigram
        self.public_corpus = public_corpus
        self.refine = refine
        self.refine_passes = refine_passes
        self.refine_share = refine_share
        self.refine_clip = refine_clip
        self.decomposition = decomposition
        self.n_restarts = n_restarts
        self.max_iter = max_iter
        self.tol = tol
        self.transform_max_iter = transform_max_iter
        self.transform_tol = transform_tol
        self.smoothing = smoothing
        self.verbose = verbose
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.noise = noise
        self.ledger = ledger

    def _check_privacy_parameters(self, *, requires_delta: bool = True) -> None:
        if self.epsilon is None:
            raise ValueError(
                "PrivateSpectralLDA needs a budget: pass epsilon=... and delta=... (for a non-private "
                "fit use SpectralLDA)"
            )
        super()._check_privacy_parameters(requires_delta=requires_delta)

    def check_configuration(self, n_documents: int, n_words: int) -> bool:
        """Refuse, before any data is read or any budget spent, what ``fit`` would refuse.

        Checks the parameters and the plan from the public sizes only (the same checks ``fit``
        runs first), so that a pipeline step before this one -- a vocabulary chosen under DP --
        is not charged for a fit that cannot run.

        Parameters
        ----------
        n_documents, n_words : int
            The public sizes ``(N, d)`` of the corpus the fit will see (``d`` at most).

        Returns
        -------
        bool
            Whether the releases are clipped (documents of any length are valid) rather than the
            worst-case ones (every document needs at least three tokens).
        """
        return self._validated_plan(n_documents, n_words).clipping is not None

    def planned_guarantee(self, n_documents: int, n_words: int) -> PrivacyGuarantee:
        """The guarantee a fit on a corpus of these public sizes charges, before any data is read.

        Computed from the parameters and ``(N, d)`` only, after the checks of
        :meth:`check_configuration`: a pipeline can ask a ledger, before its first release, whether
        it can pay for this fit too (``dptensor lda fit --private-vocab --ledger``).

        Parameters
        ----------
        n_documents, n_words : int
            The public sizes ``(N, d)`` of the corpus the fit will see.

        Returns
        -------
        PrivacyGuarantee
            What :meth:`fit` would report as ``guarantee_`` (and charge) on such a corpus.
        """
        return self._validated_plan(n_documents, n_words).guarantee

    def _validated_plan(self, n_documents: int, n_words: int) -> SpectralLDAPlan:
        """:meth:`_checked_plan` after validating the parameters (outside ``fit``)."""
        self._validate_params()
        self._check_privacy_parameters()
        return self._checked_plan(int(n_documents), int(n_words))

    def _checked_plan(self, n_documents: int, n_words: int) -> SpectralLDAPlan:
        """The plan of a fit on ``(N, d)`` (:func:`plan_private_spectral_lda`: it refuses sizes and
        options the fit refuses), then the opt-in of unproven modes and the shrinkage's mode."""
        plan = plan_private_spectral_lda(self.get_params(deep=False), n_documents, n_words)
        if not plan.holds:
            require_unproven(
                f"PrivateSpectralLDA(config={self.config}, sensitivity={self.sensitivity!r}, "
                f"calibration={self.calibration!r})",
                plan.guarantee.reason,
            )
        if plan.clipping is None and self.shrinkage != "auto" and float(self.shrinkage) > 0:
            raise ValueError(
                f"shrinkage={self.shrinkage!r} needs the clipped mode (clip set): the unclipped "
                "configurations release no unigram distribution to shrink toward"
            )
        return plan

    # -- fitting -----------------------------------------------------------------------------
    @underflow_ignored  # the same under any NumPy error state (dptensor._errstate)
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: object, y: object = None) -> PrivateSpectralLDA:
        """Fit private topics to a document-term count matrix.

        Order of work: check the parameters; compute the plan and the guarantee from the
        parameters and the public sizes ``(N, d)``
        (:func:`~dptensor.models.topics.plan.plan_private_spectral_lda`, the one plan
        ``planned_guarantee`` and ``dptensor lda plan`` use too); refuse unproven modes
        without the opt-in; validate the input domain (every document has at least three tokens);
        start the release (noise source, guarantee, ledger charge); only then compute moments and
        add noise, and post-process the releases.

        Parameters
        ----------
        X : array_like, scipy.sparse matrix, dask.array.Array or RowBlocks, shape (n_documents, n_words)
            Word counts; every document must have at least three tokens. Dask input is validated
            and summed on the workers; only sums come back, and the noise is added here.
        y : ignored

        Returns
        -------
        self
        """
        self._check_privacy_parameters()
        effective_n_jobs(self.n_jobs)
        n_documents, n_words = public_shape(X, layout="documents x words")
        plan = self._checked_plan(n_documents, n_words)  # 1. the plan: parameters and (N, d) only
        clipping = plan.clipping
        if clipping is None:
            docs = check_private_counts(X, n_jobs=self.n_jobs)
        else:
            if self.public_corpus is None:
                self._warn_if_hopeless(n_documents, n_words)
            docs = check_clipped_counts(X, n_jobs=self.n_jobs)
        rng = check_random_state(self.random_state)
        timings: dict[str, float] = {}
        public_whitening = None
        if plan.public_whitening:  # public data: before the charge
            public_whitening = whitening_from_public_corpus(
                self.public_corpus, clipping, n_words, int(self.n_components), self.alpha0, rng, timings,
                self.verbose,
            )  # fmt: skip
        source = self._begin_release(  # 2. the charge, before any release
            plan.guarantee, f"PrivateSpectralLDA config {self.config} fit", n_public=n_documents
        )
        self.noise_scales_ = {}
        self.budget_split_ = dict(plan.shares)
        self.unigram_ = None
        self.word_frequencies_ = None
        self.whitening_words_ = plan.whitening_words
        self.topic_recovery_ = plan.topic_recovery
        self.third_clip_ = None
        self.whitening_alignment_ = None
        self.whitening_ = self.projected_third_moment_ = None
        self.second_moment_ = self.second_moment_words_ = None
        if clipping is not None:  # 3. compute and release; 4. post-process
            topics, alpha = self._fit_clipped(
                ClippedMoments(docs, *clipping), plan, source, rng, timings, public_whitening
            )
        elif self.config == 1:
            topics, alpha = self._fit_config1(docs, plan, source, rng, timings)
        else:
            topics, alpha = paper_configuration_topics(self, docs, plan, source, rng, timings)
        self.components_ = self.moment_components_ = topics
        self.alpha_ = alpha
        self.shrinkage_ = self._shrinkage_weight(plan)
        self.n_features_in_ = n_words
        self.n_documents_ = n_documents
        self.refinement_ = None
        if plan.refine_passes:  # 5. private refinement from the (post-processed) moment topics
            self._refine_privately(docs, plan, source, timings)
        self.timings_ = timings
        return self

    def _refine_privately(
        self, docs: Documents, plan: SpectralLDAPlan, source: NoiseSource, timings: dict
    ) -> None:
        """``refine``: private CVB0 passes from the topics inference uses (:mod:`.private_refinement`)."""
        start, prior = self._inference_parameters()
        passes = plan.refine_passes

        def report(pass_number: int) -> None:
            if self.verbose:
                print(f"[spectral-lda]   refinement pass {pass_number} of {passes}", file=sys.stderr)

        with private_step(f"rf: private refinement ({passes} CVB0 passes)", timings, self.verbose):
            self.refinement_ = refine_topics_privately(
                document_blocks(docs), start, prior, self.unigram_, passes=passes,
                clip=float(self.refine_clip), noise_multiplier=plan.noise_multipliers["rf"], source=source,
                on_pass=report,
            )  # fmt: skip
        self.noise_scales_["rf"] = plan.noise_multipliers["rf"] * refinement_sensitivity(self.refine_clip)
        self.components_ = self.refinement_.topics

    def _shrinkage_weight(self, plan: SpectralLDAPlan) -> float:
        """``shrinkage_`` from public parameters and released noise scales only (post-processing)."""
        if self.unigram_ is None:
            return 0.0
        if self.shrinkage != "auto":
            return float(self.shrinkage)
        if "m2" not in self.noise_scales_:  # public whitening: no noise on M2
            return 0.0
        scale = float(np.max(self.noise_scales_["m2"]))  # released S0 enters it: public
        # m2's noise over S0 is scale * S0; a 2-sigma lower bound of S0 keeps a noisy S0 from
        # overstating the signal-to-noise when the m1 noise is comparable to S0 (tiny epsilon). Its
        # floor is the one the released total has (one one-word document's weight, C1), so the
        # factor is never below 1 (a floor of 1 in weight units shrank the noise of small corpora).
        total, total_sd, floor = self._released_total
        scale *= total / max(total - 2.0 * total_sd, floor)
        size = self.whitening_words_  # the M2 release's dimension
        method = plan.private_whitening  # of the M2 release on those words
        width = min(size, int(self.n_components) + int(self.n_oversamples))
        snr = signal_guess(size, int(self.n_components), float(self.alpha0)) / noise_norm(
            scale, size, method, width
        )
        factor = MATCHED_SHRINKAGE_FACTOR if self.match_unigram else 1.0
        return factor * shrinkage_weight(snr)

    def utility_plan(
        self, n_documents: int, n_words: int, *, vocabulary_share: float | None = None,
        max_words_per_document: int | None = None, typical_length: float | None = None, suggest: bool = True,
    ) -> PrivateLDAPlan | None:
        """The planner's prediction for a fit of these public sizes (:mod:`~dptensor.models.topics.plan`).

        Made from the parameters and ``(N, d)`` only, before any data is read; what the fit warns
        about (``UtilityWarning``) and ``dptensor lda fit`` prints, or stops on.

        Parameters
        ----------
        n_documents, n_words : int
            The public sizes ``(N, d)`` of the corpus the fit will see (``d`` at most).
        vocabulary_share : float, optional
            This model's ``epsilon`` and ``delta`` are ``1 - vocabulary_share`` of a pipeline's, whose
            vocabulary was chosen under DP from the rest: the plan then states the totals and predicts
            the vocabulary's size (the verdict is for a model over the predicted words).
        max_words_per_document : int, optional
            With ``vocabulary_share``: the vocabulary's ``m`` (default 64).
        typical_length : float, optional
            A public guess of a typical document's length in vocabulary tokens (the planner's default,
            10, where not given; ``dptensor lda fit --typical-length``).
        suggest : bool, default True
            As for :func:`~dptensor.models.topics.plan.plan_private_lda`.

        Returns
        -------
        PrivateLDAPlan or None
            ``None`` where the planner does not apply: the worst-case (unclipped) releases, or a
            whitening from ``public_corpus``.
        """
        clipping = resolve_clipping(self.get_params(deep=False), int(n_words))
        if clipping is None or self.public_corpus is not None:
            return None
        rest = 1.0 if vocabulary_share is None else 1.0 - float(vocabulary_share)
        return plan_private_lda(
            n_documents, n_words, int(self.n_components), float(self.alpha0), float(self.epsilon) / rest,
            float(self.delta) / rest, private_whitening=self.private_whitening,
            whitening_words=self.whitening_words, vocabulary_share=vocabulary_share, suggest=suggest,
            typical_length=typical_length,
            refine=self.refine, refine_passes=self.refine_passes, refine_share=self.refine_share,
            **({} if max_words_per_document is None else {"max_words_per_document": max_words_per_document}),
        )  # fmt: skip

    def _warn_if_hopeless(self, n_documents: int, n_words: int) -> None:
        """``UtilityWarning`` when the planner predicts noise (public inputs: ``N, d, k, alpha_0, eps``)."""
        quick = self.utility_plan(n_documents, n_words, suggest=False)
        if quick is not None and quick.hopeless:
            prediction = self.utility_plan(n_documents, n_words)
            warnings.warn(
                f"PrivateSpectralLDA: {prediction.sentence()} (dptensor lda plan; docs/lda.md)",
                UtilityWarning, stacklevel=3,
            )
