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
   :mod:`dptensor.decomposition.private_whitening`.
2. The noise on ``M3_hat`` is pushed through the (public, already released) whitening exactly:
   the release is ``M3_hat(U, U, U) + s Sym(H)`` with ``H`` i.i.d. ``k x k x k``, then
   ``T_hat = (.)(Sigma^{-1/2}, Sigma^{-1/2}, Sigma^{-1/2})`` -- the same law as adding ``d^3``
   Frobenius-isotropic noise to ``M3_hat`` and whitening
   (:func:`~dptensor.privacy.mechanisms.whitened_symmetric_gaussian_tensor`), without a ``d^3``
   array. Its sensitivity is that of the projected tensor, which shrinks with the coherence of
   ``U`` (:func:`~dptensor.privacy.lda_sensitivity.m3_sensitivity`).
3. Sensitivities that hold: ``sqrt2 (1 + 2a) / N`` and ``sqrt2 (1 + 6|b| + 3c) / N`` (brute-force tested),
   not the paper's ``1/N`` (``sensitivity="paper"`` reproduces it, unproven). The estimators are
   computed in the scaled form of :mod:`dptensor.tensor.lda_moments` (word frequencies and powers
   of ``1/l``), so a document of any finite counts gives finite terms, the limits of valid ones,
   within these bounds.
4. All releases are Gaussian and are composed exactly (Gaussian DP; one
   :class:`dp_accounting.ComposedDpEvent`), with analytic calibration: the total ``(epsilon, delta)``
   fixes one Gaussian-DP parameter ``mu``, and ``budget_split`` divides ``mu^2`` between the edges.
5. The default split comes from the utility analysis (public quantities only;
   :func:`default_budget_split`).

Clipped releases (``clip``, the default for Configuration 1)
-----------------------------------------------------------
The sensitivities above are those of the worst document (three tokens of one word); a real
document's term is far smaller. With ``clip`` set, every document gets a weight ``w_n in [0, 1]``
that bounds its terms in the second- and third-order releases (``||w P_n||_F <= C``, hence
``||w G_n||_F <= C``) and a weight ``v_n >= w_n`` that bounds its word frequencies
(``||v p_n||_2 <= C1``; :mod:`dptensor.tensor.clipped_lda_moments`, computed in a scaled form that
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
:mod:`dptensor.decomposition.nonnegative_topics`).

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
2. noise on ``T_hat`` built with the **clean** whitening (e6) and on ``M2_hat`` for ``(W^T)^+`` (e8);
3. noise on the clean eigenpairs ``(v_i, lambda_i)`` (e7) and on ``M2_hat`` (e8);
4. noise on the clean topics ``mu_i, alpha_i`` (e9);

each with Procedure 1's private lower bounds of ``sigma_k(M2_hat)`` (and of the eigengap
``gamma_s``). They run only after :func:`dptensor.privacy.enable_features` ``("unproven")`` and
report ``holds=False``, ``epsilon=inf`` and the paper's composite epsilon as
``nominal_epsilon``: the clean whitening basis can rotate between neighbouring corpora (so the
local sensitivities of Theorems 5--7 are not sensitivities), ``gamma_s`` has no bounded global
sensitivity, and the printed noise sets hidden constants to 1 (reference notes B.9).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import TYPE_CHECKING

import dp_accounting
import numpy as np
import scipy.sparse.linalg as spla
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import Interval, Options, StrOptions

from dptensor._errstate import underflow_ignored
from dptensor._validation import check_random_state
from dptensor.decomposition.nonnegative_topics import CORE_SHARE, nonnegative_topic_factor, topics_from_factor
from dptensor.decomposition.power_method import PowerMethodResult
from dptensor.decomposition.private_whitening import (
    PRIVATE_WHITENINGS,
    WHITENING_SUBSPACES,
    PrivateEigenpairs,
    analyze_gauss_eigenpairs,
    analyze_gauss_release,
    noisy_power_eigenpairs,
)
from dptensor.decomposition.whitening import Whitening
from dptensor.models._base import PrivateEstimatorMixin
from dptensor.models.topics.spectral import (
    SPECTRAL_PARAMETER_CONSTRAINTS,
    TopicModelInference,
    _Step,
    decompose_whitened_tensor,
    project_rows_to_simplex,
    top_eigenpairs,
    unwhiten_topics,
)
from dptensor.parallel import (
    RowBlocks,
    as_row_blocks,
    effective_n_jobs,
    is_distributed,
    public_shape,
)
from dptensor.privacy import require_unproven
from dptensor.privacy.calibration import classic_gaussian_formula, gaussian_epsilon, gaussian_sigma_analytic
from dptensor.privacy.denoising import nonnegative_posterior_means
from dptensor.privacy.errors import UtilityWarning
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.lda_sensitivity import (
    PAPER_MOMENT_SENSITIVITY,
    clipped_sensitivities,
    coherence,
    lda_moment_constants,
    m2_sensitivity,
    m3_sensitivity,
    whitened_tensor_local_sensitivity,
)
from dptensor.privacy.lower_bound import private_lower_bound
from dptensor.privacy.mechanisms import add_symmetric_gaussian
from dptensor.privacy.noise import NoiseSource
from dptensor.privacy.quantile import HISTOGRAM_SENSITIVITY, log_bin_edges, private_upper_quantile
from dptensor.privacy.vocabulary import VOCABULARY_ASSUMPTION
from dptensor.tensor.clipped_lda_moments import (
    ClippedMoments,
    ClippedSecondMoment,
    clipped_whitened_third_moment,
)
from dptensor.tensor.lda_moments import (
    MIN_DOCUMENT_LENGTH,
    DocumentBlocks,
    DocumentCounts,
    Documents,
    LDASecondMoment,
    check_count_matrix,
    document_lengths,
    short_document_error,
    whitened_third_moment,
)

if TYPE_CHECKING:
    from dptensor.models.topics.plan import PrivateLDAPlan

#: Edges (and Procedure 1 releases) that get a share of the budget, per configuration.
CONFIG_EDGES: dict[int, tuple[str, ...]] = {
    1: ("e3", "e4", "e8"),
    2: ("sigma_k", "e6", "e8"),
    3: ("sigma_k", "gamma_s", "e7", "e8"),
    4: ("sigma_k", "gamma_s", "e9"),
}

#: Releases of the clipped Configuration 1 (module docstring, *Clipped releases*).
CLIPPED_EDGES: tuple[str, ...] = ("m1", "m2", "e3")

#: Default shares of the Gaussian-DP budget ``mu^2`` of the clipped releases (measured on real text,
#: ``docs/lda.md``; public constants, not fitted to the private data).
CLIPPED_BUDGET_SPLIT: dict[str, float] = {"m1": 0.25, "m2": 0.58, "e3": 0.17}

#: The clipped releases with ``topic_recovery="nmf"``: the topics come from ``M2`` alone, no third moment.
NMF_EDGES: tuple[str, ...] = ("m1", "m2")
#: Their default shares. The unigram release keeps most of the tensor split's weight (the held-out
#: perplexity rests on it); measured on WordNet glosses at epsilon = 1 (ten fits each), ``m1`` shares
#: 0.1, 0.15, 0.2 and 0.25 gave perplexity 1031, 1017, 1002 and 998 (unigram model 1026.5) and NPMI
#: 0.09, 0.09, 0.09 and 0.06--0.07 (docs/lda.md, *Topics from the co-occurrences' non-negative factor*).
NMF_BUDGET_SPLIT: dict[str, float] = {"m1": 0.2, "m2": 0.8}
#: How the topics are recovered from the releases (``topic_recovery``).
TOPIC_RECOVERIES: tuple[str, ...] = ("tensor", "nmf")

#: The clipped releases when a public corpus gives the whitening (``public_corpus``): no M2 release.
PUBLIC_WHITENING_EDGES: tuple[str, ...] = ("m1", "e3")
PUBLIC_WHITENING_BUDGET_SPLIT: dict[str, float] = {"m1": 0.2, "e3": 0.8}

#: Every clipping bound lies here: normal floating-point numbers whose products and quotients with
#: the per-document norms (in ``[1/d, 1]``) neither overflow nor lose precision (a subnormal bound
#: rounds ``r = C1 / (2 w_max)`` up enough to break the ``m1`` sensitivity).
CLIP_RANGE = (1e-200, 1e200)

#: ``word_clip="auto"`` is this multiple of ``clip`` (``||p||_2 / ||P||_F`` is about ``sqrt(l - 1)``
#: for a document of ``l`` distinct words: 2--3 for short texts).
WORD_CLIP_RATIO = 3.0

#: Procedure 1's lower bounds are floored here, and the resulting noise scales capped at _MAX_SCALE,
#: so that a failed bound gives a useless but finite release instead of an error or overflow.
_FLOOR = 1e-12
_MAX_SCALE = 1e6

#: Vocabularies up to this size use Analyze Gauss under ``private_whitening="auto"`` (a ``d x d`` array:
#: 200 MB at 5000 words, about 15 s). On real text it beats the noisy power method at ``d = 2000``
#: and at ``d = 5000``: WordNet glosses, 5000 words, epsilon = 4: held-out perplexity 1911 against
#: 2446 (unigram model 1960), the noisy power method needing epsilon ~ 100 to match (docs/lda.md).
ANALYZE_GAUSS_MAX_WORDS = 5000

#: ``third_clip="auto"`` lets this share of the documents exceed ``C3`` (docs/lda.md, *Whitening words
#: and projected clipping*: on WordNet glosses and Debian descriptions a bound near ``C/10`` clips
#: about 1% of documents and lowers the ``e3`` sensitivity from ``sqrt2 C`` to about ``0.2 C``).
THIRD_CLIP_TAIL = 0.03
#: ...and spends this share of the ``e3`` budget (``mu^2``) on the histogram that chooses it.
THIRD_CLIP_QUANTILE_SHARE = 0.1
#: The histogram's public bins: projected norms relative to ``C`` (at most 1), 4 bins per decade.
THIRD_CLIP_EDGES = log_bin_edges(1e-4, 1.0, 4)

NEIGHBOURING = "document"
PROTECTED = "one document (all its words and counts), replaced by any other document of at least 3 tokens"
PUBLIC = (
    "the number of documents N, the vocabulary (columns), alpha_0 and the number of topics k; "
    + VOCABULARY_ASSUMPTION
)
CLIPPED_PROTECTED = (
    "one document (all its words and counts), replaced by any other document (any finite counts, "
    "including none)"
)
CLIPPED_PUBLIC = (
    "the number of documents N, the vocabulary (columns), alpha_0, the number of topics k, the "
    "clipping bounds C, C1 (and the third clip C3 when given; otherwise a private quantile, q3, "
    "chooses it) and the number of "
    "whitening words; " + VOCABULARY_ASSUMPTION
)

#: Why the paper's Configurations 2-4 do not give the stated guarantee (reference notes B.9).
UNPROVEN_REASONS = {
    2: (
        "Configuration 2 whitens with the clean W from M2_hat, whose eigenvectors can rotate or flip "
        "between neighbouring corpora, so T_hat has no bounded (local) sensitivity; Theorem 5's bound "
        "compares against an aligned whitening, and the printed noise sets its constants to 1"
    ),
    3: (
        "Configuration 3 releases eigenpairs of the clean whitened tensor: besides Configuration 2's "
        "unbounded whitening, the eigengap gamma_s has no bounded global sensitivity (Lemma 9's 2/N "
        "bounds a change of the whitened tensor that is itself unbounded), so its Laplace release is "
        "not DP"
    ),
    4: (
        "Configuration 4 releases the clean topics with noise calibrated to Theorem 7's local "
        "sensitivity, which rests on the unbounded whitening and gamma_s of Configurations 2-3 and, "
        "as printed, on the un-noised sigma_1(M2_hat); with sensitivity='derived' its noise scale (in "
        "noise_scales_) still uses the clean top eigenvalue of the whitened tensor"
    ),
}
PAPER_SENSITIVITY_REASON = (
    "sensitivity='paper' calibrates to the paper's 1/N (Section 6.1; Theorem 4 claims 2/N), below the "
    "true Frobenius sensitivities sqrt2(1+2a)/N of M2_hat and sqrt2(1+6|b|+3c)/N of M3_hat (brute force "
    "finds changes up to 2.45/N and 3.7/N at alpha_0=1000)"
)
CLASSIC_REASON = (
    "calibration='classic' uses the Gaussian mechanism of Dwork & Roth (Theorem A.1) at a per-release "
    "epsilon >= 1, where that theorem does not apply"
)

#: Steps of a private fit print their names, never their durations (see ``timings_``).
_private_step = functools.partial(_Step, report_time=False)


def default_budget_split(
    config: int,
    n_components: int,
    n_words: int,
    alpha0: float,
    *,
    whitening: str = "analyze-gauss",
    n_power_steps: int = 1,
    shared_m2: bool = True,
) -> dict[str, float]:
    """A data-free split of the budget between the edges of a configuration.

    Configuration 1 (shares of the Gaussian-DP budget ``mu^2``). First-order perturbation of the
    pipeline (derivation in ``docs/lda.md``, *Budget split*) with ``p = 1/(k(alpha_0+1))`` and
    symmetric topics of norm ``m``: noise of standard deviation ``s2`` on ``M2_hat`` turns the
    whitening subspace by about ``sqrt(d/2) s2 / sigma_k``, a topic error of
    ``e2 ~ sqrt(d/2) s2 k (alpha_0+1) / m``; push-forward noise of scale ``s3`` on ``M3_hat`` moves
    each whitened eigenvector by ``sqrt((k-1)/3) s3 sigma_k^{-3/2} / lambda``, a topic error of
    ``e3 ~ s3 sqrt((k-1)/3) k (alpha_0+1)(alpha_0+2) / (2 m^2)``. With ``s_i = Delta_i / mu_i``,
    minimising ``e2^2 + e3^2`` subject to ``mu_2^2 + mu_3^2 = mu^2`` gives ``mu_i^2 ~ c_i``, so
    the share of ``M3_hat`` is ``R / (1 + R)`` with

    ``R = e3 / e2 = (Delta_3 / Delta_2) (alpha_0 + 2) sqrt(k - 1) / (sqrt(6 d) m)``,

    divided by ``sqrt(2T)`` for the noisy power method (``T`` releases, per-step noise
    ``sqrt(T)`` times larger, on a ``d x p`` block). ``m = d^{-1/4}`` is a data-free guess of the
    topic norm, between a uniform topic (``d^{-1/2}``) and a point mass (1). ``R`` grows like
    ``alpha_0``: for mixed topics (large ``alpha_0``) almost everything goes to ``M3_hat``.

    Configurations 2--4: equal shares of ``epsilon`` and ``delta`` (the paper grid-searched the
    split on the private data, which its accounting does not charge).
    """
    edges = CONFIG_EDGES[config]
    if config != 1:
        return {edge: 1.0 / len(edges) for edge in edges}
    k, d = n_components, n_words
    ratio_sens = m3_sensitivity(alpha0, 3) / m2_sensitivity(alpha0, 3)
    norm = d**-0.25
    ratio = ratio_sens * (alpha0 + 2.0) * math.sqrt(max(k - 1, 1)) / (math.sqrt(6.0 * d) * norm)
    if whitening == "noisy-power":
        ratio /= math.sqrt(2.0 * n_power_steps)
    share3 = ratio / (1.0 + ratio)
    return {"e3": share3, "e4": (1.0 - share3) / 2.0, "e8": (1.0 - share3) / 2.0}


@dataclass
class _Plan:
    """Noise multipliers per release and the guarantee, from parameters and public sizes only."""

    shares: dict[str, float]
    multipliers: dict[str, float] = field(default_factory=dict)  # per release (per step for NPM)
    epsilons: dict[str, float] = field(default_factory=dict)
    deltas: dict[str, float] = field(default_factory=dict)
    holds: bool = True
    reasons: list[str] = field(default_factory=list)
    guarantee: PrivacyGuarantee | None = None


class PrivateSpectralLDA(PrivateEstimatorMixin, TopicModelInference, BaseEstimator):
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
        Relative weights of the edges of the configuration (:data:`CONFIG_EDGES`); normalised.
        Under ``calibration="analytic"`` Configuration 1 splits the Gaussian-DP budget ``mu^2``,
        otherwise ``epsilon`` and ``delta``. Default: :func:`default_budget_split` (data-free).
    private_whitening : {"auto", "analyze-gauss", "noisy-power"}, default "auto"
        How ``M2_hat`` is released (:mod:`dptensor.decomposition.private_whitening`); ``"auto"`` is
        Analyze Gauss up to :data:`ANALYZE_GAUSS_MAX_WORDS` words, the noisy power method above.
    whitening_subspace : {"auto", "eigen", "nonnegative"}, default "auto"
        How the Analyze Gauss release of ``M2`` becomes the whitening subspace (post-processing;
        the guarantee is unchanged). ``"eigen"``: its top eigenvectors. ``"nonnegative"``: the span
        of a symmetric non-negative factorisation of the release thresholded at one noise standard
        deviation (LDA's ``M2`` is ``H H^T`` with ``H >= 0``;
        :mod:`dptensor.decomposition.nonnegative_subspace`), then the release's eigenpairs in it.
        ``"auto"``: ``"nonnegative"`` when the top eigenvectors' mean ``whitening_alignment_`` is
        below :data:`~dptensor.decomposition.private_whitening.NONNEGATIVE_BELOW_ALIGNMENT` (noise
        that hides directions), else ``"eigen"`` (docs/lda.md, *A non-negative whitening
        subspace*). Ignored by the noisy power method.
    topic_recovery : {"auto", "tensor", "nmf"}, default "auto"
        How the topics come from the releases. ``"tensor"``: spectral LDA's (whitening, the private
        whitened third moment ``e3``, its decomposition). ``"nmf"`` (clipped mode without
        ``public_corpus``, with the Analyze Gauss release of ``M2``): a symmetric non-negative
        factor of the released ``M2`` on the whitening words is the topics
        (:mod:`dptensor.decomposition.nonnegative_topics`); there is no third-moment release, so the
        budget goes to ``m1`` and ``m2`` (:data:`NMF_BUDGET_SPLIT`). ``"auto"``:
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
        (:mod:`dptensor.tensor.clipped_lda_moments`, *Projected clipping*). ``"auto"``: chosen
        under DP once ``U`` is released, as the upper :data:`THIRD_CLIP_TAIL` quantile of the
        documents' projected norms, from a noisy histogram on public bins (the ``"q3"`` release,
        :data:`THIRD_CLIP_QUANTILE_SHARE` of the ``e3`` budget; :mod:`dptensor.privacy.quantile`);
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
        released ``E1 = S1 / T0``, normalised (:func:`released_unigram`; clipped mode, ``None``
        otherwise).
    word_frequencies_ : ndarray of shape (d,) or None
        The released ``E1 = S1 / T0`` itself, noise included (entries may be negative; clipped
        mode, ``None`` otherwise).
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
        (:func:`~dptensor.decomposition.private_whitening.spike_alignment`; post-processing of the
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

    # -- the plan: everything decided before the documents are read ---------------------------
    def _whitening_method(self, n_words: int) -> str:
        if self.private_whitening != "auto":
            return self.private_whitening
        return "analyze-gauss" if n_words <= ANALYZE_GAUSS_MAX_WORDS else "noisy-power"

    def _clipping(self, n_words: int) -> tuple[float, float, float | None] | None:
        """``(C, C1, C3)`` of the clipped releases, or ``None`` for the worst-case ones (public parameters).

        ``C3`` is ``None`` both without a third clip and with ``third_clip="auto"`` (chosen in the fit)."""
        supported = (
            self.config == 1 and self.sensitivity == "derived" and self.calibration == "analytic"
            and self.shared_m2
        )  # fmt: skip
        if self.clip is None or (self.clip == "auto" and not supported):
            if self.public_corpus is not None:
                raise ValueError("public_corpus applies to the clipped config=1 (clip='auto' or a number)")
            return None
        if not supported:
            raise ValueError(
                f"clip={self.clip!r} applies to config=1 with sensitivity='derived', calibration='analytic' "
                "and shared_m2=True; pass clip=None for the other modes"
            )
        clip = 1.0 / n_words if self.clip == "auto" else float(self.clip)
        word_clip = WORD_CLIP_RATIO * clip if self.word_clip == "auto" else float(self.word_clip)
        # "auto": chosen during the fit (the q3 release); None here
        third_clip = None if self.third_clip in (None, "auto") else float(self.third_clip)
        return clip, word_clip, third_clip

    def _whitened_words(self, n_documents: int, n_words: int) -> int:
        """How many words the ``m2`` and ``e3`` releases cover (public parameters and sizes only)."""
        if self.public_corpus is not None or self._clipping(n_words) is None:
            return n_words
        from dptensor.models.topics.plan import release_words

        return release_words(
            n_documents, n_words, int(self.n_components), float(self.alpha0), float(self.epsilon),
            float(self.delta), self.whitening_words,
        )  # fmt: skip

    def _topic_recovery(self, n_documents: int, n_words: int) -> str:
        """``topic_recovery`` resolved: ``"tensor"`` or ``"nmf"`` (parameters and public sizes only)."""
        nmf_applies = self._clipping(n_words) is not None and self.public_corpus is None
        if self.topic_recovery == "nmf":
            if not nmf_applies:
                raise ValueError(
                    "topic_recovery='nmf' applies to the clipped config=1 without public_corpus (it "
                    "factorises the private release of the word co-occurrences, M2)"
                )
            size = self._whitened_words(n_documents, n_words)
            if self._whitening_method(size) != "analyze-gauss":
                raise ValueError(
                    "topic_recovery='nmf' factorises the Analyze Gauss release of the word co-occurrences "
                    "(M2) on the whitening words "
                    f"(a dense matrix): it needs private_whitening 'auto' or 'analyze-gauss' and at most "
                    f"{ANALYZE_GAUSS_MAX_WORDS} whitening words, got {self.private_whitening!r} and {size}"
                )
            return "nmf"
        if self.topic_recovery == "tensor" or not nmf_applies:
            return "tensor"
        if self._configures_tensor_step() or self._whitening_method(
            self._whitened_words(n_documents, n_words)
        ) != "analyze-gauss":
            return "tensor"
        from dptensor.models.topics.plan import prefers_nonnegative_topics

        prefers = prefers_nonnegative_topics(
            n_documents, n_words, int(self.n_components), float(self.alpha0), float(self.epsilon),
            float(self.delta),
        )  # fmt: skip
        return "nmf" if prefers else "tensor"

    def _configures_tensor_step(self) -> bool:
        """Whether a parameter the user set belongs to the tensor step: then ``"auto"`` keeps that step.

        A ``budget_split``, a ``third_clip`` other than ``"auto"`` or a ``whitening_words`` other than
        ``"auto"`` (the rule is calibrated on the fewest whitening words).
        """
        return self.budget_split is not None or self.third_clip != "auto" or self.whitening_words != "auto"

    def _shares(self, n_words: int, n_documents: int) -> dict[str, float]:
        clipped = self._clipping(n_words) is not None
        public = clipped and self.public_corpus is not None
        nmf = clipped and self._topic_recovery(n_documents, n_words) == "nmf"
        edges = CONFIG_EDGES[self.config]
        if clipped:
            edges = PUBLIC_WHITENING_EDGES if public else NMF_EDGES if nmf else CLIPPED_EDGES
        quantile = clipped and self.third_clip == "auto" and "e3" in edges
        if self.budget_split is None:
            if clipped:
                default = NMF_BUDGET_SPLIT if nmf else CLIPPED_BUDGET_SPLIT
                raw = dict(PUBLIC_WHITENING_BUDGET_SPLIT if public else default)
            elif self.config == 1 and self.calibration == "analytic":
                raw = default_budget_split(
                    1, self.n_components, n_words, self.alpha0,
                    whitening=self._whitening_method(n_words), n_power_steps=self.n_power_steps,
                    shared_m2=self.shared_m2,
                )  # fmt: skip
            else:
                raw = {edge: 1.0 for edge in edges}
        else:
            raw = dict(self.budget_split)
            if quantile and "q3" in raw:  # the q3 release's own share (as budget_split_ reports it)
                edges = (*edges, "q3")
            unknown = sorted(set(raw) - set(edges))
            missing = sorted(set(edges) - set(raw))
            if unknown or missing:
                mode = "clipped config=1" if clipped else f"config={self.config}"
                mode += " with public_corpus" if public else " with topic_recovery='nmf'" if nmf else ""
                raise ValueError(
                    f"budget_split for {mode} must have exactly the keys {list(edges)}"
                    + (f"; unknown {unknown}" if unknown else "")
                    + (f"; missing {missing}" if missing else "")
                )
            for key, value in raw.items():
                if isinstance(value, bool) or not isinstance(value, Real) or not (
                    math.isfinite(value) and value > 0
                ):
                    raise ValueError(f"budget_split[{key!r}] must be a finite number > 0, got {value!r}")
        total = float(sum(raw.values()))
        shares = {edge: float(raw[edge]) / total for edge in edges}
        if quantile and "q3" not in shares:  # the histogram that chooses C3 takes part of e3's share
            e3 = shares.pop("e3")
            shares["q3"] = THIRD_CLIP_QUANTILE_SHARE * e3
            shares["e3"] = (1.0 - THIRD_CLIP_QUANTILE_SHARE) * e3
        if quantile and not self._quantile_can_choose(n_documents, shares["q3"]):
            shares["e3"] += shares.pop("q3")  # no edge could qualify: no q3 release, no third clip
        return shares

    def _quantile_can_choose(self, n_documents: int, share: float) -> bool:
        """Whether the q3 histogram can pick any edge: its tail allowance ``THIRD_CLIP_TAIL * N`` exceeds
        two noise standard deviations of one bin (public: ``N``, ``epsilon``, ``delta``, the share)."""
        mu = 1.0 / gaussian_sigma_analytic(float(self.epsilon), float(self.delta))
        noise = HISTOGRAM_SENSITIVITY / (math.sqrt(share) * mu)
        return THIRD_CLIP_TAIL * n_documents > 2.0 * noise

    def _m2_releases(self, n_words: int) -> int:
        return self.n_power_steps if self._whitening_method(n_words) == "noisy-power" else 1

    def _plan(self, n_documents: int, n_words: int) -> _Plan:
        """Noise multipliers and the guarantee, from parameters and ``(N, d)`` only."""
        eps, delta = float(self.epsilon), float(self.delta)
        plan = _Plan(self._shares(n_words, n_documents))
        whitened_words = self._whitened_words(n_documents, n_words)
        steps = self._m2_releases(whitened_words)
        paper = self.sensitivity == "paper"
        clipping = self._clipping(n_words)
        if clipping is not None:
            return self._plan_clipped(plan, steps, clipping, whitened_words)
        if self.config == 1:
            m2_edges = ["m2"] if self.shared_m2 else ["e4", "e8"]
            weight = {"e3": plan.shares["e3"], "e4": plan.shares["e4"], "e8": plan.shares["e8"]}
            if self.shared_m2:
                weight["m2"] = weight.pop("e4") + weight.pop("e8")
            counts = {edge: (steps if edge != "e3" else 1) for edge in weight}
            if self.calibration == "analytic":
                mu = 1.0 / gaussian_sigma_analytic(eps, delta)
                for edge, w in weight.items():
                    # mu^2 shared by weight; a release repeated n times gets mu_edge / sqrt(n) each.
                    plan.multipliers[edge] = math.sqrt(counts[edge]) / (math.sqrt(w) * mu)
            else:
                for edge, w in weight.items():
                    e_step, d_step = w * eps / counts[edge], w * delta / counts[edge]
                    plan.multipliers[edge] = classic_gaussian_formula(e_step, d_step)
                    plan.epsilons[edge], plan.deltas[edge] = w * eps, w * delta
                    if e_step >= 1:
                        plan.holds = False
                        if CLASSIC_REASON not in plan.reasons:
                            plan.reasons.append(CLASSIC_REASON)
            if paper:
                plan.holds = False
                plan.reasons.append(PAPER_SENSITIVITY_REASON)
            effective = _composed_multiplier(plan, counts, eps, delta, round_up=plan.holds)
            events = [
                dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), counts[e])
                for e in ["e3", *m2_edges]
                for z in [plan.multipliers[e]]
            ]
            exact = min(gaussian_epsilon(effective, delta), eps)
            n_releases = sum(counts.values())
            accountant = (
                "exact (Gaussian DP composition, analytic calibration)" if self.calibration == "analytic"
                else "classic Gaussian per edge (Proposition 18), composed exactly"
            )
            plan.guarantee = self._guarantee(
                plan, accountant=accountant, n_releases=n_releases, noise_multiplier=effective,
                epsilon_exact=exact, dp_event=dp_accounting.ComposedDpEvent(events),
                nominal=eps,
            )  # fmt: skip
            return plan
        # Configurations 2-4: per-edge (epsilon_i, delta_i), basic composition, as printed.
        plan.holds = False
        plan.reasons.append(UNPROVEN_REASONS[self.config])
        for edge, w in plan.shares.items():
            plan.epsilons[edge], plan.deltas[edge] = w * eps, w * delta
            if edge in ("sigma_k", "gamma_s"):
                continue
            n = steps if edge == "e8" else 1
            if self.calibration == "classic":
                plan.multipliers[edge] = classic_gaussian_formula(w * eps / n, w * delta / n)
            else:
                plan.multipliers[edge] = math.sqrt(n) * gaussian_sigma_analytic(w * eps, w * delta)
        plan.guarantee = self._guarantee(
            plan, accountant="basic composition (paper)", n_releases=len(plan.shares),
            noise_multiplier=math.nan, epsilon_exact=math.inf, dp_event=None, nominal=eps,
        )  # fmt: skip
        return plan

    def _plan_clipped(
        self, plan: _Plan, steps: int, clipping: tuple[float, float, float | None], whitened_words: int
    ) -> _Plan:
        """The clipped Configuration 1: ``mu^2`` shared by weight; ``m2`` repeated ``T`` times for NPM."""
        eps, delta = float(self.epsilon), float(self.delta)
        edges = tuple(plan.shares)
        counts = {"m1": 1, "m2": steps, "q3": 1, "e3": 1}
        mu = 1.0 / gaussian_sigma_analytic(eps, delta)
        for edge in edges:
            plan.multipliers[edge] = math.sqrt(counts[edge]) / (math.sqrt(plan.shares[edge]) * mu)
        effective = _composed_multiplier(plan, {e: counts[e] for e in edges}, eps, delta)
        events = [
            dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(plan.multipliers[e]), counts[e])
            for e in edges
        ]
        clip, word_clip, third_clip = clipping
        plan.guarantee = self._guarantee(
            plan, accountant="exact (Gaussian DP composition, analytic calibration)",
            n_releases=sum(counts[e] for e in edges), noise_multiplier=effective,
            epsilon_exact=min(gaussian_epsilon(effective, delta), eps),
            dp_event=dp_accounting.ComposedDpEvent(events), nominal=eps,
            clipping={
                "clip": clip, "word_clip": word_clip,
                "third_clip": (
                    "private quantile (q3)" if "q3" in edges else third_clip if "e3" in edges else None
                ),
                "whitening_words": whitened_words,
                # with q3, e3's is min(sqrt2 C, 2 C3) for the released C3 (third_clip_); sqrt2 C at most
                "sensitivities": {
                    key: value for key, value in clipped_sensitivities(clip, word_clip, third_clip).items()
                    if key in edges
                } | ({"q3": HISTOGRAM_SENSITIVITY} if "q3" in edges else {}),
                "topic_recovery": "nmf" if "e3" not in edges and "m2" in edges else "tensor",
            },
        )  # fmt: skip
        return plan

    def _guarantee(
        self, plan: _Plan, *, accountant: str, n_releases: int, noise_multiplier: float,
        epsilon_exact: float, dp_event: dp_accounting.DpEvent | None, nominal: float,
        clipping: dict | None = None,
    ) -> PrivacyGuarantee:  # fmt: skip
        details = {
            "model": "PrivateSpectralLDA",
            "config": int(self.config),
            "sensitivity": self.sensitivity,
            "calibration": self.calibration,
            "shared_m2": bool(self.shared_m2),
            "budget_split": dict(plan.shares),
            "noise_multipliers": dict(plan.multipliers),
        }
        if clipping is not None:
            details.update(clipping)
        if plan.epsilons:
            details["edge_epsilons"] = dict(plan.epsilons)
            details["edge_deltas"] = dict(plan.deltas)
        return PrivacyGuarantee(
            epsilon=float(self.epsilon),
            delta=float(self.delta),
            neighbouring=NEIGHBOURING,
            accountant=accountant,
            n_releases=int(n_releases),
            mechanism="gaussian" if self.config == 1 else "gaussian and laplace",
            noise_multiplier=float(noise_multiplier),
            epsilon_exact=float(epsilon_exact),
            details=details,
            holds=plan.holds,
            claim="proved" if plan.holds else "paper",
            reason="; ".join(plan.reasons),
            nominal_epsilon=None if plan.holds else nominal,
            protected=PROTECTED if clipping is None else CLIPPED_PROTECTED,
            public=PUBLIC if clipping is None else CLIPPED_PUBLIC + (
                "" if self.public_corpus is None else "; the public corpus that gives the whitening"
            ),
            dp_event=dp_event,
        )

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
        self.planned_guarantee(n_documents, n_words)
        return self._clipping(int(n_words)) is not None

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
        self._validate_params()
        self._check_privacy_parameters()
        guarantee = self._checked_plan(int(n_documents), int(n_words)).guarantee
        assert guarantee is not None
        return guarantee

    def _checked_plan(self, n_documents: int, n_words: int) -> _Plan:
        """The plan of a fit on ``(N, d)``, after every check that needs only the parameters and sizes."""
        k = int(self.n_components)
        if n_documents < 3:
            raise ValueError(f"X has {n_documents} document(s); the moment estimators need at least 3")
        if k > n_words:
            raise ValueError(f"n_components={k} exceeds the vocabulary size {n_words}; k must be at most d")
        if self._whitened_words(n_documents, n_words) < k:
            raise ValueError(
                f"whitening_words={self.whitening_words} is below n_components={k}: the whitening needs at "
                "least k words"
            )
        self._topic_recovery(n_documents, n_words)  # refuses "nmf" where it does not apply
        plan = self._plan(n_documents, n_words)
        assert plan.guarantee is not None
        if not plan.holds:
            require_unproven(
                f"PrivateSpectralLDA(config={self.config}, sensitivity={self.sensitivity!r}, "
                f"calibration={self.calibration!r})",
                plan.guarantee.reason,
            )
        if self._clipping(n_words) is None and self.shrinkage != "auto" and float(self.shrinkage) > 0:
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
        parameters and the public sizes ``(N, d)``; refuse unproven modes without the opt-in;
        validate the input domain (every document has at least three tokens); start the release
        (noise source, guarantee, ledger charge); only then compute moments and add noise.

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
        plan = self._checked_plan(n_documents, n_words)
        clipping = self._clipping(n_words)
        if clipping is None:
            docs = check_private_counts(X, n_jobs=self.n_jobs)
        else:
            if self.public_corpus is None:
                self._warn_if_hopeless(n_documents, n_words)
            docs = check_clipped_counts(X, n_jobs=self.n_jobs)
        rng = check_random_state(self.random_state)
        timings: dict[str, float] = {}
        public_whitening = None
        if clipping is not None and self.public_corpus is not None:  # public data: before the charge
            public_whitening = self._public_whitening(clipping, n_words, rng, timings)
        source = self._begin_release(
            plan.guarantee, f"PrivateSpectralLDA config {self.config} fit", n_public=n_documents
        )
        self.noise_scales_ = {}
        self.budget_split_ = dict(plan.shares)
        self.unigram_ = None
        self.word_frequencies_ = None
        self.whitening_words_ = self._whitened_words(n_documents, n_words)
        self.topic_recovery_ = self._topic_recovery(n_documents, n_words)
        self.third_clip_ = None
        self.whitening_alignment_ = None
        self.whitening_ = self.projected_third_moment_ = None
        self.second_moment_ = self.second_moment_words_ = None
        if clipping is not None:
            topics, alpha = self._fit_clipped(
                ClippedMoments(docs, *clipping), plan, source, rng, timings, public_whitening
            )
        elif self.config == 1:
            topics, alpha = self._fit_config1(docs, plan, source, rng, timings)
        else:
            topics, alpha = self._fit_paper_config(docs, plan, source, rng, timings)
        self.components_ = topics
        self.alpha_ = alpha
        self.shrinkage_ = self._shrinkage_weight(n_words)
        self.n_features_in_ = n_words
        self.n_documents_ = n_documents
        self.timings_ = timings
        return self

    def _shrinkage_weight(self, n_words: int) -> float:
        """``shrinkage_`` from public parameters and released noise scales only (post-processing)."""
        from dptensor.models.topics.plan import noise_norm, shrinkage_weight, signal_guess

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
        method = self._whitening_method(size)
        width = min(size, int(self.n_components) + int(self.n_oversamples))
        snr = signal_guess(size, int(self.n_components), float(self.alpha0)) / noise_norm(
            scale, size, method, width
        )
        factor = MATCHED_SHRINKAGE_FACTOR if self.match_unigram else 1.0
        return factor * shrinkage_weight(snr)

    def utility_plan(
        self, n_documents: int, n_words: int, *, vocabulary_share: float | None = None,
        max_words_per_document: int | None = None, suggest: bool = True,
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
        suggest : bool, default True
            As for :func:`~dptensor.models.topics.plan.plan_private_lda`.

        Returns
        -------
        PrivateLDAPlan or None
            ``None`` where the planner does not apply: the worst-case (unclipped) releases, or a
            whitening from ``public_corpus``.
        """
        from dptensor.models.topics.plan import plan_private_lda

        if self._clipping(int(n_words)) is None or self.public_corpus is not None:
            return None
        rest = 1.0 if vocabulary_share is None else 1.0 - float(vocabulary_share)
        return plan_private_lda(
            n_documents, n_words, int(self.n_components), float(self.alpha0), float(self.epsilon) / rest,
            float(self.delta) / rest, private_whitening=self.private_whitening,
            whitening_words=self.whitening_words, vocabulary_share=vocabulary_share, suggest=suggest,
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

    def _m2_sensitivity_fn(self, n: int):
        if self.sensitivity == "paper":
            return lambda mu: PAPER_MOMENT_SENSITIVITY / n
        if self.projected_sensitivity:
            return lambda mu: m2_sensitivity(self.alpha0, n, coherence=mu)
        return lambda mu: m2_sensitivity(self.alpha0, n)

    def _release_m2(
        self, docs: Documents, multiplier: float, source: NoiseSource, rng: np.random.Generator,
        label: str, timings: dict,
    ) -> PrivateEigenpairs:  # fmt: skip
        """One private release of ``M2_hat``'s top eigenpairs (Analyze Gauss or noisy power)."""
        operator = LDASecondMoment(docs, self.alpha0)
        sensitivity = self._m2_sensitivity_fn(docs.n_documents)
        return self._release_eigenpairs(operator, label, multiplier, sensitivity, source, rng, timings)

    def _release_eigenpairs(
        self, operator: object, label: str, multiplier: float, sensitivity, source: NoiseSource,
        rng: np.random.Generator, timings: dict,
    ) -> PrivateEigenpairs:  # fmt: skip
        """The top eigenpairs of a second-moment ``operator`` released under ``label``.

        Analyze Gauss (noise ``multiplier * sensitivity(1)``, subspace ``whitening_subspace``) or the
        noisy power method (``sensitivity(coherence)`` per step), by :meth:`_whitening_method` of the
        operator's size. Records ``noise_scales_[label]`` and, unless it is the inverse's own
        release ``"e8"``, ``whitening_alignment_``.
        """
        k, size = int(self.n_components), operator.shape[0]
        method = self._whitening_method(size)
        with _private_step(
            f"{label}: private word co-occurrences (second moment M2; {method})", timings, self.verbose
        ):
            if method == "analyze-gauss":
                result = analyze_gauss_eigenpairs(
                    operator, k, noise_scale=multiplier * sensitivity(1.0), source=source,
                    subspace=self.whitening_subspace,
                )
            else:
                result = noisy_power_eigenpairs(
                    operator, k, n_steps=int(self.n_power_steps),
                    width=min(size, k + int(self.n_oversamples)), noise_multiplier=multiplier,
                    sensitivity=sensitivity, source=source, rng=rng,
                )  # fmt: skip
        self.noise_scales_[label] = result.noise_scales[0] if len(result.noise_scales) == 1 else list(
            result.noise_scales
        )
        if label != "e8":  # the release the whitening comes from
            self.whitening_alignment_ = result.alignment
        return result

    def _fit_config1(
        self, docs: Documents, plan: _Plan, source: NoiseSource, rng: np.random.Generator,
        timings: dict,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        n = docs.n_documents
        if self.shared_m2:
            first = self._release_m2(docs, plan.multipliers["m2"], source, rng, "e4+e8", timings)
            second = first
        else:
            first = self._release_m2(docs, plan.multipliers["e4"], source, rng, "e4", timings)
            second = self._release_m2(docs, plan.multipliers["e8"], source, rng, "e8", timings)
        U, sigma = first.whitening.eigenvectors, first.whitening.eigenvalues
        with _private_step(
            "e3: private word triples (whitened third moment M3; push-forward noise)", timings, self.verbose
        ):
            if self.sensitivity == "paper":
                delta3 = PAPER_MOMENT_SENSITIVITY / n
            else:
                mu = coherence(U) if self.projected_sensitivity else 1.0
                delta3 = m3_sensitivity(self.alpha0, n, coherence=mu)
            scale = plan.multipliers["e3"] * delta3
            projected = release_projected_m3(docs, self.alpha0, U, scale, source)
            inv = 1.0 / np.sqrt(sigma)
            tensor = projected * inv[:, None, None] * inv[None, :, None] * inv[None, None, :]
        self.noise_scales_["e3"] = scale
        whitening = _with_inverse(first.whitening, second.whitening)
        self.whitening_, self.projected_third_moment_ = whitening, projected
        return self._decompose_unwhiten(tensor, whitening, rng, timings)

    def _fit_clipped(
        self, moments: ClippedMoments, plan: _Plan, source: NoiseSource, rng: np.random.Generator,
        timings: dict, public_whitening: Whitening | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The clipped Configuration 1 (module docstring, *Clipped releases*)."""
        d = moments.n_words
        sens = clipped_sensitivities(moments.clip, moments.word_clip, moments.third_clip)
        with _private_step("m1: private total weight and word frequencies", timings, self.verbose):
            scale1 = plan.multipliers["m1"] * sens["m1"]
            released = source.add_gaussian(moments.first_order_release(), scale1)
            # Post-processing: a public floor (one one-word document's weight v = C1) keeps the
            # normalisations positive whatever the noise.
            factor, floor = moments.totals_factor, moments.word_clip
            total = max(float(released[0]) / factor, floor)  # S0, normalising S2 and S3
            frequency_total = max(float(released[1]) / factor, floor)  # T0, normalising S1
            mean = released[2:] / frequency_total
        self.noise_scales_["m1"] = scale1
        self.word_frequencies_ = mean
        self.unigram_ = released_unigram(mean, scale1 / frequency_total)
        self._released_total = (total, scale1 / factor, floor)  # S0, its noise sd, its floor (shrinkage_)
        if public_whitening is not None:
            return self._clipped_third(moments, public_whitening, total, mean, plan, source, rng, timings)
        support = None
        if self.whitening_words_ < d:  # post-processing of the m1 release: its most frequent words
            order = np.argsort(-self.unigram_, kind="stable")
            support = np.sort(order[: self.whitening_words_])
        operator = ClippedSecondMoment(moments, total, mean, self.alpha0, support=support)
        m2_scale = sens["m2"] / total  # noise on S2 of scale z Delta is noise on S2/S0 of scale z Delta/S0
        if self.topic_recovery_ == "nmf":
            scale = plan.multipliers["m2"] * m2_scale
            return self._nonnegative_topics(operator, support, scale, source, timings)
        result = self._release_eigenpairs(
            operator, "m2", plan.multipliers["m2"], lambda mu: m2_scale, source, rng, timings
        )
        whitening = result.whitening
        if support is not None:  # the basis on the whole vocabulary: zero rows off the support
            vectors = np.zeros((d, whitening.eigenvectors.shape[1]))
            vectors[support] = whitening.eigenvectors
            whitening = Whitening.from_eigenpairs(whitening.eigenvalues, vectors)
        return self._clipped_third(moments, whitening, total, mean, plan, source, rng, timings, support)

    def _nonnegative_topics(
        self, operator: ClippedSecondMoment, support: np.ndarray | None, noise_scale: float,
        source: NoiseSource, timings: dict,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """``topic_recovery="nmf"``: the ``m2`` release on the whitening words and its non-negative factor.

        The release is the Analyze Gauss one (:func:`analyze_gauss_release`, the same mechanism,
        sensitivity and noise scale as the tensor recovery's); everything after it is post-processing
        of it and of ``m1``
        (:mod:`dptensor.decomposition.nonnegative_topics`).
        """
        k = int(self.n_components)
        size = operator.shape[0]
        if support is None:
            support = np.arange(size)
        with _private_step(
            "m2: private word co-occurrences (second moment M2) of the whitening words (Analyze Gauss)",
            timings, self.verbose,
        ):
            released = analyze_gauss_release(operator, noise_scale=noise_scale, source=source)
        self.noise_scales_["m2"] = noise_scale
        self.second_moment_, self.second_moment_words_ = released, support
        with _private_step(
            "topics: non-negative factor of the released word co-occurrences (M2)", timings, self.verbose
        ):
            # the core: the most frequent whitening words by the released unigram distribution
            order = np.argsort(-self.unigram_[support], kind="stable")
            core = order[: max(k, int(round(CORE_SHARE * size)))]
            factor = nonnegative_topic_factor(released, k, noise_scale, core)
            topics, alpha = topics_from_factor(factor, support, self.unigram_, float(self.alpha0))
        return topics, alpha

    def _public_whitening(
        self, clipping: tuple[float, float, float | None], d: int, rng: np.random.Generator, timings: dict
    ) -> Whitening:
        """``M2``'s top eigenpairs from the public corpus, weighted as the private one (no noise)."""
        k = int(self.n_components)
        with _private_step("whitening from the public corpus (no noise)", timings, self.verbose):
            public = ClippedMoments(check_clipped_counts(self.public_corpus, "public_corpus"), *clipping)
            if public.n_words != d:
                raise ValueError(f"public_corpus has {public.n_words} words, X has {d}: one vocabulary")
            total, frequency_total, sums = public.first_order()
            if total <= 0:
                raise ValueError("public_corpus has no document of at least 3 tokens")
            operator = ClippedSecondMoment(public, total, sums / frequency_total, self.alpha0)
            if d <= 5000:
                values, vectors = top_eigenpairs(operator.to_dense(), k, random_state=rng)
            else:
                linear = spla.LinearOperator((d, d), matvec=operator.matmat, matmat=operator.matmat)
                values, vectors = top_eigenpairs(linear, k, method="randomized", random_state=rng)
            floor = max(float(values[0]), 1e-300) * 1e-12
        return Whitening.from_eigenpairs(np.maximum(values, floor), vectors)

    def _clipped_third(
        self, moments: ClippedMoments, whitening: Whitening, total: float, mean: np.ndarray, plan: _Plan,
        source: NoiseSource, rng: np.random.Generator, timings: dict, support: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The e3 release in the (released or public) eigenbasis, then decomposition and un-whitening.

        With ``support`` (the whitening words) the topics' entries off the support are the released
        unigram distribution's, the same in every topic: the releases say nothing about how those
        words divide between topics. The projection onto the simplex then shifts each row by a
        constant, which can zero the rarest of those words in a topic whose mass on the support is
        large. Scaling each topic's entries there by its remaining mass instead (so that rows sum to
        about one) was measured worse: WordNet, epsilon = 4, perplexity 937 +- 57 and NPMI 0.102
        against 899 +- 11 and 0.116 (six fits each), Debian, epsilon = 1, 386 against 381.
        """
        U, sigma = whitening.eigenvectors, whitening.eigenvalues
        if "q3" in plan.multipliers:
            with _private_step(
                "q3: private bound on each document's projected word-triple term (the third clip)",
                timings, self.verbose,
            ):
                counts = moments.projected_histogram(U, THIRD_CLIP_EDGES)
                quantile = private_upper_quantile(
                    counts, THIRD_CLIP_EDGES, n_records=moments.docs.n_documents,
                    tail_fraction=THIRD_CLIP_TAIL, noise_multiplier=plan.multipliers["q3"], source=source,
                    fallback=1.0,
                )  # fmt: skip
            self.noise_scales_["q3"] = quantile.noise_scale
            moments = dataclasses.replace(moments, third_clip=quantile.value * moments.clip)
        self.third_clip_ = moments.third_clip
        sens = clipped_sensitivities(moments.clip, moments.word_clip, moments.third_clip)
        with _private_step(
            "e3: private word triples (whitened third moment M3; projected sums)", timings, self.verbose
        ):
            scale3 = plan.multipliers["e3"] * sens["e3"]
            third = moments.third_order(U)
            third = add_symmetric_gaussian(third, scale3, convention="frobenius", noise=source)
            tensor = clipped_whitened_third_moment(third, total, mean, U, sigma, self.alpha0)
        self.noise_scales_["e3"] = scale3
        self.whitening_, self.projected_third_moment_ = whitening, third
        return self._decompose_unwhiten(tensor, whitening, rng, timings, support)

    def _decompose(self, tensor: np.ndarray, rng: np.random.Generator, timings: dict) -> PowerMethodResult:
        with _private_step(f"tensor decomposition ({self.decomposition})", timings, self.verbose):
            result = decompose_whitened_tensor(
                tensor, int(self.n_components), method=self.decomposition, n_restarts=self.n_restarts,
                max_iter=self.max_iter, tol=self.tol, random_state=rng,
            )  # fmt: skip
        return result

    def _decompose_unwhiten(
        self, tensor: np.ndarray, whitening: Whitening, rng: np.random.Generator, timings: dict,
        support: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Topics and weights; with ``support``, entries off it from ``unigram_`` (:meth:`_clipped_third`)."""
        result = _positive_weights(self._decompose(tensor, rng, timings))
        with _private_step("un-whitening", timings, self.verbose):
            topics, alpha, raw = unwhiten_topics(result, whitening, self.alpha0)
            if support is not None:
                outside = np.ones(raw.shape[1], dtype=bool)
                outside[support] = False
                raw[:, outside] = self.unigram_[outside]  # the same in every topic
                topics = project_rows_to_simplex(raw)
        return topics, alpha

    # -- Configurations 2-4, as printed (unproven) -----------------------------------------------
    def _fit_paper_config(
        self, docs: Documents, plan: _Plan, source: NoiseSource, rng: np.random.Generator,
        timings: dict,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        k, d, n = int(self.n_components), docs.n_words, docs.n_documents
        paper = self.sensitivity == "paper"
        operator = LDASecondMoment(docs, self.alpha0)
        with _private_step("clean whitening (not private)", timings, self.verbose):
            # as printed (unproven modes): no data-dependent switch to Lanczos on the clean M2
            values, vectors = top_eigenpairs(operator, min(k + 1, d), random_state=rng,
                                             lanczos_fallback=False)  # fmt: skip
            clean = Whitening.from_eigenpairs(np.maximum(values[:k], 1e-300), vectors[:, :k])
        # Procedure 1, line 3-4: a private lower bound of sigma_k(M2_hat).
        bound = private_lower_bound(
            float(values[k - 1]), m2_sensitivity(self.alpha0, n), plan.epsilons["sigma_k"],
            plan.deltas["sigma_k"], source, paper_scale=PAPER_MOMENT_SENSITIVITY / n if paper else None,
        )  # fmt: skip
        sigma_lower = max(bound.lower, _FLOOR)
        self.noise_scales_["sigma_k"] = bound.scale
        with _private_step(
            "clean word triples (whitened third moment M3; not private)", timings, self.verbose
        ):
            tensor = whitened_third_moment(docs, self.alpha0, clean.matrix)
        if self.config == 2:
            local = whitened_tensor_local_sensitivity(self.alpha0, n, k, sigma_lower, paper=paper)
            scale = min(plan.multipliers["e6"] * local, _MAX_SCALE)
            self.noise_scales_["e6"] = scale
            noisy = add_symmetric_gaussian(tensor, scale, convention="frobenius", noise=source)
            inverse = self._release_m2(docs, plan.multipliers["e8"], source, rng, "e8", timings)
            whitening = _with_inverse(clean, inverse.whitening)
            return self._decompose_unwhiten(noisy, whitening, rng, timings)
        result = _positive_weights(self._decompose(tensor, rng, timings))
        lam = result.weights
        gaps = -np.diff(np.append(lam, 0.0))
        gamma = float(np.min(gaps)) / 4.0
        gamma_bound = private_lower_bound(
            gamma, 2.0 / n, plan.epsilons["gamma_s"], plan.deltas["gamma_s"], source,
            paper_scale=PAPER_MOMENT_SENSITIVITY / n if paper else None,
        )  # fmt: skip
        gamma_lower = max(gamma_bound.lower, _FLOOR)
        self.noise_scales_["gamma_s"] = gamma_bound.scale
        local_t = whitened_tensor_local_sensitivity(self.alpha0, n, k, sigma_lower, paper=paper)
        if self.config == 3:
            if paper:
                local = k**2 / (n * gamma_lower * sigma_lower**1.5)
            else:  # Theorem 6 per component, times sqrt(2k) for the k components released together
                local = 2.0 * math.sqrt(2.0) * k * local_t / gamma_lower
            scale = min(plan.multipliers["e7"] * local, _MAX_SCALE)
            self.noise_scales_["e7"] = scale
            factors = source.add_gaussian(result.factors, scale)
            weights = source.add_gaussian(lam, scale)
            noisy = _positive_weights(PowerMethodResult(
                weights=weights, factors=factors, n_iter=result.n_iter, converged=result.converged,
                extraction_order=result.extraction_order,
            ))  # fmt: skip
            inverse = self._release_m2(docs, plan.multipliers["e8"], source, rng, "e8", timings)
            whitening = _with_inverse(clean, inverse.whitening)
            with _private_step("un-whitening", timings, self.verbose):
                topics, alpha, _ = unwhiten_topics(noisy, whitening, self.alpha0)
            return topics, alpha
        # Configuration 4: noise on the clean topics and alpha (Theorem 7).
        _, clean_alpha, raw = unwhiten_topics(result, clean, self.alpha0)  # paired, by decreasing alpha
        a, _, _ = lda_moment_constants(self.alpha0)
        if paper:  # as printed: the un-noised sigma_1(M2_hat) enters the noise scale
            local = k**2 * math.sqrt(max(float(values[0]), 0.0)) / (n * gamma_lower * sigma_lower**1.5)
        else:  # H.5 with a public bound sigma_1 <= 1 + a, times sqrt(2k) for the joint release
            kappa = (self.alpha0 + 2.0) / (2.0 * math.sqrt(self.alpha0 * (self.alpha0 + 1.0)))
            s1, d2 = 1.0 + a, m2_sensitivity(self.alpha0, n)
            top = float(np.max(lam))
            per = kappa * (
                top * math.sqrt(s1) * 2.0 * math.sqrt(k) * local_t / gamma_lower
                + top * math.sqrt(s1) / sigma_lower * d2
                + math.sqrt(s1 + d2) * 2.0 * math.sqrt(k) * local_t / gamma_lower
            )
            local = math.sqrt(2.0 * k) * per
        scale = min(plan.multipliers["e9"] * local, _MAX_SCALE)
        self.noise_scales_["e9"] = scale
        noisy_topics = source.add_gaussian(raw, scale)
        noisy_alpha = np.maximum(source.add_gaussian(clean_alpha, scale), 1e-12)
        noisy_topics *= np.where(noisy_topics.sum(axis=1) < 0, -1.0, 1.0)[:, None]
        order = np.argsort(-noisy_alpha, kind="stable")
        return project_rows_to_simplex(noisy_topics[order]), noisy_alpha[order]


#: Floor, in noise standard deviations, of every word of the released unigram distribution. The
#: empirical-Bayes prior is fitted to the release; where the noise swamps every frequency (tiny
#: epsilon, few words) it can put almost all its mass on zero, and the floor keeps the estimate
#: near uniform there. On the real corpora 0.3 costs under 0.1% of held-out perplexity against none.
UNIGRAM_FLOOR = 0.3


#: With ``match_unigram`` the ``"auto"`` shrinkage weight is this share of :func:`shrinkage_weight`'s:
#: matched topics already predict the unigram distribution where they carry no information. On
#: Debian descriptions and WordNet glosses (V = 2000, k = 10, epsilon 1, 2 and 4, two seeds each)
#: half the weight gave the lowest held-out perplexity of {0, 1/2, 1} in 10 of 12 fits and was
#: within 0.1% of the lowest in the other two (docs/lda.md, *Matching the unigram distribution*).
MATCHED_SHRINKAGE_FACTOR = 0.5


def released_unigram(mean: np.ndarray, noise_std: float) -> np.ndarray:
    """The private unigram distribution from the released ``E1 = S1 / T0`` (post-processing).

    Each word's empirical-Bayes posterior mean given ``E1`` and the public standard deviation
    ``s`` of the noise on each entry (the ``m1`` noise scale over the released ``T0``), with a
    prior on non-negative frequencies fitted to the release itself
    (:func:`~dptensor.privacy.denoising.nonnegative_posterior_means`), floored at
    ``UNIGRAM_FLOOR * s`` and normalised. A word whose frequency is below the noise is
    indistinguishable from an absent one; the posterior mean keeps it possible, at the frequency
    such words have on average. On Debian descriptions, with the noise of ``epsilon = 1``, the
    held-out perplexity of the released distribution is 414 against 428 for the former
    ``max(E1, 0) + s / 2`` and 566 for the projection onto the simplex (396 without noise;
    docs/lda.md, *Matching the unigram distribution*).
    """
    mean = np.asarray(mean, dtype=np.float64)
    s = max(float(noise_std), 0.0)
    out = np.maximum(nonnegative_posterior_means(mean, s), UNIGRAM_FLOOR * s)
    total = float(out.sum())
    if not total > 0:  # every entry non-positive and no noise: fall back to uniform
        return np.full(mean.shape, 1.0 / mean.size)
    return out / total


def _composed_multiplier(
    plan: _Plan, counts: dict[str, int], epsilon: float, delta: float, *, round_up: bool = True
) -> float:
    """The Gaussian-DP composition of ``counts[e]`` releases at ``plan.multipliers[e]``, as one multiplier.

    With ``round_up``, every multiplier is raised by a relative ``1e-12`` until the total meets
    ``epsilon`` (floating-point rounding of the split), in place.
    """
    effective = 1.0 / math.sqrt(sum(counts[e] / plan.multipliers[e] ** 2 for e in counts))
    if round_up and gaussian_epsilon(effective, delta) > epsilon:
        factor = 1.0
        while gaussian_epsilon(effective * factor, delta) > epsilon:
            factor *= 1.0 + 1e-12
        plan.multipliers = {e: z * factor for e, z in plan.multipliers.items()}
        effective *= factor
    return effective


def release_projected_m3(
    docs: Documents, alpha0: float, basis: np.ndarray, scale: float, source: NoiseSource
) -> np.ndarray:
    """``M3_hat(U, U, U) + scale * Sym(H)``: the ``e3`` release of Configuration 1 in a public basis.

    ``U`` (``d x k``, orthonormal columns) must be public -- here, the eigenvectors of the released
    ``M2_hat``. ``Sym(H)`` is the ``"frobenius"`` symmetric Gaussian in ``k^3``, so with
    ``scale = z Delta`` and ``Delta`` a bound on ``||dM3_hat(U, U, U)||_F``
    (:func:`~dptensor.privacy.lda_sensitivity.m3_sensitivity`) this is the Gaussian mechanism with
    noise multiplier ``z``; it has the law of ``d^3`` Frobenius noise on ``M3_hat`` projected on
    ``U`` (:func:`~dptensor.privacy.mechanisms.whitened_symmetric_gaussian_tensor`).
    """
    projected = whitened_third_moment(docs, alpha0, basis)
    return add_symmetric_gaussian(projected, scale, convention="frobenius", noise=source)


def _with_inverse(whitening: Whitening, other: Whitening) -> Whitening:
    """``whitening``'s ``W`` with ``other``'s un-whitening ``(W^T)^+`` (two releases of ``M2_hat``)."""
    return Whitening(whitening.matrix, other.inverse, whitening.eigenvalues, whitening.eigenvectors)


def _positive_weights(result: PowerMethodResult) -> PowerMethodResult:
    """Post-processing: ``(lambda, v) -> (|lambda|, sign(lambda) v)``, zero raised to a tiny floor."""
    weights = np.nan_to_num(np.asarray(result.weights, dtype=np.float64), posinf=1e12, neginf=-1e12)
    factors = np.nan_to_num(result.factors) * np.where(weights < 0, -1.0, 1.0)[None, :]
    weights = np.clip(np.abs(weights), 1e-12, 1e12)
    return PowerMethodResult(
        weights=weights, factors=factors, n_iter=result.n_iter, converged=result.converged,
        extraction_order=result.extraction_order,
    )


def _private_block(block: object, name: str) -> DocumentCounts:
    """One block of :func:`check_private_counts`; the error names no count and no row (private data)."""
    matrix = check_count_matrix(block, name)
    lengths = document_lengths(matrix)  # inf beyond float64's range, without a warning
    short = np.flatnonzero(lengths < MIN_DOCUMENT_LENGTH)
    if short.size:
        raise short_document_error(name, short, private=True, why=(
            f"a private fit needs at least {MIN_DOCUMENT_LENGTH} tokens in every document (they are not "
            "dropped: N is public in the guarantee). Remove or merge them first"))
    return DocumentCounts(
        counts=matrix, lengths=lengths, kept=np.arange(matrix.shape[0]), n_input_documents=matrix.shape[0]
    )


def _clipped_block(block: object, name: str) -> DocumentCounts:
    """One block of :func:`check_clipped_counts`: any valid counts, no row dropped, nothing summed."""
    matrix = check_count_matrix(block, name, allow_no_tokens=True)
    n = matrix.shape[0]
    return DocumentCounts(counts=matrix, lengths=np.zeros(n), kept=np.arange(n), n_input_documents=n)


def check_clipped_counts(X: object, name: str = "X", *, n_jobs: int | None = None) -> Documents:
    """Validate counts for a clipped private fit: every row is a document, short or empty ones too.

    The clipped releases give documents of fewer than three tokens weight 0, so no document is an
    input error and ``N`` stays the number of rows. No length is summed here (a sum of huge
    counts could overflow): :mod:`dptensor.tensor.clipped_lda_moments` scales each row first.
    """
    if isinstance(X, RowBlocks) or is_distributed(X) or effective_n_jobs(n_jobs) > 1:
        blocks = as_row_blocks(X, n_jobs=n_jobs)
        blocks = blocks.map(_clipped_block, name, label="clipped-counts")
        return DocumentBlocks(blocks, blocks.n_rows)
    return _clipped_block(X, name)


def check_private_counts(X: object, name: str = "X", *, n_jobs: int | None = None) -> Documents:
    """Validate counts for a private fit: every document must have at least three tokens.

    Documents with fewer tokens are an input error, not dropped: the guarantee treats ``N`` as
    public, and dropping would change it between neighbouring corpora. The error names the rows
    (for blocks, those of the first block found to have one). Threads (``n_jobs``) or Dask input
    give :class:`~dptensor.tensor.lda_moments.DocumentBlocks`, checked where the blocks are.
    """
    if isinstance(X, RowBlocks) or is_distributed(X) or effective_n_jobs(n_jobs) > 1:
        blocks = as_row_blocks(X, n_jobs=n_jobs)
        blocks = blocks.map(_private_block, name, label="private-counts")
        return DocumentBlocks(blocks, blocks.n_rows)
    return _private_block(X, name)
