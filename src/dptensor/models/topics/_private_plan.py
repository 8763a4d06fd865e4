"""The plan of a :class:`~dptensor.models.PrivateSpectralLDA` fit: data, apart from the estimator.

One pure function, :func:`plan_private_spectral_lda`, maps the estimator's parameters and the
public sizes ``(N, d)`` to everything decided before a document is read: the resolved options
(clipping bounds, whitening words, how ``M2`` is released, how the topics are recovered), the
releases with their shares of the budget and noise multipliers, the composed
:class:`dp_accounting.DpEvent` and the guarantee (DeCarolis et al., paper 004, Configurations
1--4, with the corrections of ``docs/lda.md``, *Privacy*; module docstring of
:mod:`dptensor.models.topics.private_spectral`). :meth:`PrivateSpectralLDA.fit
<dptensor.models.PrivateSpectralLDA.fit>`, its ``planned_guarantee`` and the planner behind
``dptensor lda plan`` (:mod:`dptensor.models.topics.plan`) all call it, so they share one
arithmetic. The noise multipliers of the releases and the guarantee they compose to are
:func:`~dptensor.models.topics._plan_noise.noise_and_guarantee`.

The ``"auto"`` rules for ``whitening_words`` and ``topic_recovery`` rest on the planner's predicted
signal-to-noise of the ``M2`` release (:func:`predicted_snr`, from public quantities only:
``docs/lda.md``, *Planning a private fit*), which reads the noise multiplier of a reference plan
(the clipped tensor releases on every word); the prediction's levels and the shrinkage weight that
inference derives from it live here too, below both the estimator and the planner.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real
from types import MappingProxyType
from typing import Any

import dp_accounting

from dptensor.models.topics._plan_noise import noise_and_guarantee
from dptensor.models.topics.sensitivity import m2_sensitivity, m3_sensitivity
from dptensor.privacy.calibration import gaussian_epsilon, gaussian_sigma_analytic
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.quantile import HISTOGRAM_SENSITIVITY, log_bin_edges

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
#: Their shares when private refinement follows (``refine_share`` > 0). The passes rescale each
#: word's counts to the released unigram distribution and weigh rare words by it, so it is worth
#: more than to the moments alone. Measured at epsilon = 1 (V = 2000, k = 10, fresh noise each fit;
#: docs/notes/lda-research-log.md, *The unigram distribution the refinement rescales to*): ``m1``
#: 0.2 / 0.4 / 0.6 gave held-out perplexity 1184 / 1159 / 1175 on WordNet glosses (six fits each) and
#: 739 / 735 / 737 on Debian descriptions (nine, nine and three fits). For the moments alone, 0.4
#: changed Debian by +1 (790 against 790) and cost WordNet 9 (1260 against 1250; four fits each).
NMF_REFINED_BUDGET_SPLIT: dict[str, float] = {"m1": 0.4, "m2": 0.6}
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

#: Below this predicted signal-to-noise a private fit is no better than noise (and warns).
NOISE_LEVEL = 0.7
#: Above this it is close to the non-private fit.
GOOD_LEVEL = 2.5
#: The typical document length assumed when none is given (a public guess; short texts).
DEFAULT_TYPICAL_LENGTH = 10.0
#: ``whitening_words="auto"`` whitens on at least this many words (or all, if fewer)...
WHITENING_WORDS_MIN = 300
#: ...and on the largest of ``d`` and :data:`WHITENING_WORDS_STEPS` whose predicted signal-to-noise is
#: at least this. Calibrated on measured fits (docs/lda.md, *Whitening words and projected clipping*
#: and *Word frequencies with their own weight*): WordNet glosses at epsilon = 4 predict 4.5 on 1000
#: words, where 500 words gave NPMI 0.133 and 1000 gave 0.091, and 15 on 500 words, where 300 gave
#: a lower NPMI; at epsilon = 1 and 2 they predict 4.2 and 8 on 500 words, where 300 words gave a
#: lower perplexity and a higher NPMI (Debian descriptions: equal); a corpus of 10^6 documents like
#: Debian's predicts about 20 on 2000 words at epsilon = 1, where whitening on every word keeps the
#: topics' tails.
WHITENING_WORDS_LEVEL = 10.0
WHITENING_WORDS_STEPS = (500, 1000, 2000, 5000)

#: The parameters the plan reads, with :class:`~dptensor.models.PrivateSpectralLDA`'s defaults (a
#: mapping given to :func:`plan_private_spectral_lda` may leave any of them out; ``n_components``,
#: ``alpha0``, ``epsilon`` and ``delta`` have no default there).
PLAN_PARAMETER_DEFAULTS: dict[str, Any] = {
    "config": 1,
    "sensitivity": "derived",
    "calibration": "analytic",
    "shared_m2": True,
    "budget_split": None,
    "private_whitening": "auto",
    "topic_recovery": "auto",
    "n_power_steps": 4,
    "n_oversamples": 10,
    "clip": "auto",
    "word_clip": "auto",
    "third_clip": "auto",
    "whitening_words": "auto",
    "public_corpus": None,
    "refine": "cvb0",
    "refine_passes": "auto",
    "refine_share": "auto",
    "refine_clip": 1.0,
}

#: Private refinement (``refine="cvb0"``, :mod:`dptensor.models.topics.private_refinement`) of the
#: clipped releases. ``refine_share="auto"``: the share of the Gaussian-DP budget ``mu^2`` its passes
#: take. ``refine_passes="auto"``: :data:`REFINE_PASSES` passes where the predicted noise-to-signal
#: ratio of one release on the whole share, ``r = sqrt(2 d k) / (mu_r N)`` (noise norm
#: ``z sqrt(2) L sqrt(d k)`` of a ``d x k`` release at ``mu_r = sqrt(share) mu``, over a signal of
#: about ``N L``; ``L`` cancels), is at most :data:`REFINE_MAX_NOISE`, and none above it (the whole
#: budget then goes to the moments). The topics come from the weighted average of the releases,
#: whose noise does not grow with the number of passes (:class:`~dptensor.models.topics.
#: private_refinement.ReleaseAverage`): the passes are a matter of time only. Public inputs only.
#: Measured on real text (V = 2000, k = 10, held-out perplexity; docs/lda.md, *Private refinement*;
#: three to six noise draws each): against the moments alone, 16 passes on 0.6 of the budget gained
#: 2--17% at ``r`` 0.001--0.0154 (WordNet glosses at epsilon = 1 and 4, change logs at 1 and 4, Debian
#: descriptions at 4, Debian's 2e4-document sample at 4). With the word weights
#: (:func:`~dptensor.models.topics.private_refinement.release_word_weights`), on Debian and its
#: samples: 6% at 0.0196 (epsilon = 1), 2.3% at 0.0257 (1.2e4 documents, epsilon = 4) and 1.2% at
#: 0.0311 (3.5e4 documents, epsilon = 1); they lost 1.6% at 0.0385 (8e3 documents, epsilon = 4), 3.8%
#: at 0.0545 and 12% at 0.136 (unweighted, the break-even had been between 0.0257 and 0.0311). Shares
#: 0.6 / 0.7 / 0.8 of the budget (unweighted): Debian at epsilon = 4, 653 / 654 / 649; change logs at
#: epsilon = 1, 670 / -- / 684 and at epsilon = 4, 604 / -- / 620; WordNet at epsilon = 4, 981 / -- / 993.
REFINE_SHARE = 0.6
REFINE_MAX_NOISE = 0.034
REFINE_PASSES = 16


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


@dataclass(frozen=True)
class SpectralLDAPlan:
    """Everything a :class:`~dptensor.models.PrivateSpectralLDA` fit decides before reading a document.

    Made by :func:`plan_private_spectral_lda` from the parameters and the public sizes only.

    Attributes
    ----------
    n_documents, n_words : int
        The public sizes ``(N, d)``.
    clipping : tuple or None
        ``(C, C1, C3)`` of the clipped releases (``C3`` is ``None`` without a third clip and with
        ``third_clip="auto"``, chosen in the fit by the ``q3`` release), or ``None`` for the
        worst-case (unclipped) releases.
    public_whitening : bool
        Whether a public corpus gives the whitening (clipped mode; no ``M2`` release).
    whitening_words : int
        How many words the ``m2`` and ``e3`` releases cover (``d`` unless clipped without a public corpus).
    private_whitening : str
        How ``M2`` is released on those words: ``"analyze-gauss"`` or ``"noisy-power"``.
    m2_releases : int
        Releases of ``M2`` per copy: ``n_power_steps`` for the noisy power method, else 1.
    topic_recovery : str
        ``"tensor"`` or ``"nmf"``.
    refine_passes : int
        Private refinement passes (releases ``rf``) after the moments; 0 for none.
    shares : mapping
        The normalised budget split, per release (``budget_split_``).
    noise_multipliers : mapping
        The noise multiplier of each release (per step for the noisy power method); Procedure 1's
        lower bounds (``sigma_k``, ``gamma_s``) have none.
    edge_epsilons, edge_deltas : mapping
        Per-edge ``(epsilon_i, delta_i)`` of the paper's per-edge accounting (empty otherwise).
    holds : bool
        Whether the guarantee is proved.
    reasons : tuple of str
        Why it does not hold (empty when it does).
    guarantee : PrivacyGuarantee
        What the fit charges and reports as ``guarantee_``.
    """

    n_documents: int
    n_words: int
    clipping: tuple[float, float, float | None] | None
    public_whitening: bool
    whitening_words: int
    private_whitening: str
    m2_releases: int
    topic_recovery: str
    refine_passes: int
    shares: Mapping[str, float]
    noise_multipliers: Mapping[str, float]
    edge_epsilons: Mapping[str, float]
    edge_deltas: Mapping[str, float]
    holds: bool
    reasons: tuple[str, ...]
    guarantee: PrivacyGuarantee

    @property
    def dp_event(self) -> dp_accounting.DpEvent | None:
        """The composed event of the releases (``None`` for the paper's basic composition)."""
        return self.guarantee.dp_event


def _options(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters the plan reads, defaults filled in; the public corpus only as present or not."""
    options = {**PLAN_PARAMETER_DEFAULTS, **{key: parameters[key] for key in parameters
                                             if key in PLAN_PARAMETER_DEFAULTS}}  # fmt: skip
    for key in ("n_components", "alpha0", "epsilon", "delta"):
        options[key] = parameters[key]
    options["public_whitening"] = options.pop("public_corpus") is not None
    return options


def whitening_method(private_whitening: str, n_words: int) -> str:
    """``private_whitening`` resolved for an ``M2`` release on ``n_words`` words.

    ``"auto"``: Analyze Gauss up to :data:`ANALYZE_GAUSS_MAX_WORDS` words, the noisy power method above.
    """
    if private_whitening != "auto":
        return private_whitening
    return "analyze-gauss" if n_words <= ANALYZE_GAUSS_MAX_WORDS else "noisy-power"


def resolve_clipping(parameters: Mapping[str, Any], n_words: int) -> tuple[float, float, float | None] | None:
    """``(C, C1, C3)`` of the clipped releases, or ``None`` for the worst-case ones (public parameters).

    ``C3`` is ``None`` both without a third clip and with ``third_clip="auto"`` (chosen in the fit).

    Parameters
    ----------
    parameters : mapping
        :class:`~dptensor.models.PrivateSpectralLDA`'s parameters (``get_params()``); missing ones
        take their defaults (:data:`PLAN_PARAMETER_DEFAULTS`).
    n_words : int
        The vocabulary size ``d`` (``clip="auto"`` is ``1/d``).

    Returns
    -------
    tuple or None
    """
    p = {**PLAN_PARAMETER_DEFAULTS, **parameters}
    supported = (
        p["config"] == 1 and p["sensitivity"] == "derived" and p["calibration"] == "analytic"
        and p["shared_m2"]
    )  # fmt: skip
    if p["clip"] is None or (p["clip"] == "auto" and not supported):
        if p["public_corpus"] is not None:
            raise ValueError("public_corpus applies to the clipped config=1 (clip='auto' or a number)")
        return None
    if not supported:
        raise ValueError(
            f"clip={p['clip']!r} applies to config=1 with sensitivity='derived', calibration='analytic' "
            "and shared_m2=True; pass clip=None for the other modes"
        )
    clip = 1.0 / n_words if p["clip"] == "auto" else float(p["clip"])
    word_clip = WORD_CLIP_RATIO * clip if p["word_clip"] == "auto" else float(p["word_clip"])
    # "auto": chosen during the fit (the q3 release); None here
    third_clip = None if p["third_clip"] in (None, "auto") else float(p["third_clip"])
    return clip, word_clip, third_clip


def _whitened_words(options: dict, n_documents: int, n_words: int, clipped: bool) -> int:
    """How many words the ``m2`` and ``e3`` releases cover (public parameters and sizes only)."""
    if options["public_whitening"] or not clipped:
        return n_words
    return release_words(
        n_documents, n_words, int(options["n_components"]), float(options["alpha0"]),
        float(options["epsilon"]), float(options["delta"]), options["whitening_words"],
    )  # fmt: skip


def _topic_recovery(options: dict, n_documents: int, n_words: int, clipped: bool, whitened: int) -> str:
    """``topic_recovery`` resolved: ``"tensor"`` or ``"nmf"`` (parameters and public sizes only)."""
    nmf_applies = clipped and not options["public_whitening"]
    if options["topic_recovery"] == "nmf":
        if not nmf_applies:
            raise ValueError(
                "topic_recovery='nmf' applies to the clipped config=1 without public_corpus (it "
                "factorises the private release of the word co-occurrences, M2)"
            )
        if whitening_method(options["private_whitening"], whitened) != "analyze-gauss":
            raise ValueError(
                "topic_recovery='nmf' factorises the Analyze Gauss release of the word co-occurrences "
                "(M2) on the whitening words "
                f"(a dense matrix): it needs private_whitening 'auto' or 'analyze-gauss' and at most "
                f"{ANALYZE_GAUSS_MAX_WORDS} whitening words, got {options['private_whitening']!r} and "
                f"{whitened}"
            )
        return "nmf"
    if options["topic_recovery"] == "tensor" or not nmf_applies:
        return "tensor"
    # a parameter of the tensor step set by the user keeps that step ("auto" is calibrated on the
    # fewest whitening words)
    configures_tensor_step = (
        options["budget_split"] is not None or options["third_clip"] != "auto"
        or options["whitening_words"] != "auto"
    )  # fmt: skip
    if configures_tensor_step or whitening_method(options["private_whitening"], whitened) != "analyze-gauss":
        return "tensor"
    prefers = prefers_nonnegative_topics(
        n_documents, n_words, int(options["n_components"]), float(options["alpha0"]),
        float(options["epsilon"]), float(options["delta"]),
    )  # fmt: skip
    return "nmf" if prefers else "tensor"


def _quantile_can_choose(epsilon: float, delta: float, n_documents: int, share: float) -> bool:
    """Whether the q3 histogram can pick any edge: its tail allowance ``THIRD_CLIP_TAIL * N`` exceeds
    two noise standard deviations of one bin (public: ``N``, ``epsilon``, ``delta``, the share)."""
    mu = 1.0 / gaussian_sigma_analytic(epsilon, delta)
    noise = HISTOGRAM_SENSITIVITY / (math.sqrt(share) * mu)
    return THIRD_CLIP_TAIL * n_documents > 2.0 * noise


def refinement_noise_ratio(
    n_documents: int, n_words: int, n_components: int, epsilon: float, delta: float, share: float
) -> float:
    """``r = sqrt(2 d k) / (sqrt(share) mu N)``: predicted noise over signal of one release on ``share``.

    See :data:`REFINE_SHARE`; public inputs only.
    """
    mu = 1.0 / gaussian_sigma_analytic(float(epsilon), float(delta))
    return math.sqrt(2.0 * n_words * n_components) / (math.sqrt(share) * mu * n_documents)


def resolve_refinement(
    options: Mapping[str, Any], n_documents: int, n_words: int, clipped: bool
) -> tuple[int, float]:
    """``(passes, share)`` of private refinement (0 passes: none). Public parameters and sizes only."""
    if options["refine"] is None or not clipped:
        return 0, 0.0
    share = REFINE_SHARE if options["refine_share"] == "auto" else float(options["refine_share"])
    if options["refine_passes"] != "auto":
        return int(options["refine_passes"]), share
    ratio = refinement_noise_ratio(
        n_documents, n_words, int(options["n_components"]), float(options["epsilon"]),
        float(options["delta"]), share,
    )  # fmt: skip
    if ratio > REFINE_MAX_NOISE:
        return 0, 0.0
    return REFINE_PASSES, share


def moments_epsilon(epsilon: float, delta: float, share: float) -> float:
    """The ``epsilon`` (at ``delta``) of the moment releases alone, refinement taking ``share`` of mu^2."""
    if share <= 0:
        return float(epsilon)
    mu = 1.0 / gaussian_sigma_analytic(float(epsilon), float(delta))
    return gaussian_epsilon(1.0 / (math.sqrt(1.0 - share) * mu), float(delta))


def _shares(
    options: dict, n_documents: int, n_words: int, clipped: bool, nmf: bool, refine_share: float = 0.0,
) -> dict[str, float]:
    """The normalised budget split per release, the ``q3`` histogram's share carved from ``e3``'s."""
    public = clipped and options["public_whitening"]
    config = options["config"]
    edges = CONFIG_EDGES[config]
    if clipped:
        edges = PUBLIC_WHITENING_EDGES if public else NMF_EDGES if nmf else CLIPPED_EDGES
    quantile = clipped and options["third_clip"] == "auto" and "e3" in edges
    if options["budget_split"] is None:
        if clipped:
            nmf_default = NMF_REFINED_BUDGET_SPLIT if refine_share > 0 else NMF_BUDGET_SPLIT
            default = nmf_default if nmf else CLIPPED_BUDGET_SPLIT
            raw = dict(PUBLIC_WHITENING_BUDGET_SPLIT if public else default)
        elif config == 1 and options["calibration"] == "analytic":
            raw = default_budget_split(
                1, options["n_components"], n_words, options["alpha0"],
                whitening=whitening_method(options["private_whitening"], n_words),
                n_power_steps=options["n_power_steps"], shared_m2=options["shared_m2"],
            )  # fmt: skip
        else:
            raw = {edge: 1.0 for edge in edges}
    else:
        raw = dict(options["budget_split"])
        if quantile and "q3" in raw:  # the q3 release's own share (as budget_split_ reports it)
            edges = (*edges, "q3")
        unknown = sorted(set(raw) - set(edges))
        missing = sorted(set(edges) - set(raw))
        if unknown or missing:
            mode = "clipped config=1" if clipped else f"config={config}"
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
    if refine_share > 0:  # the refinement passes' share; the moments share the rest
        shares = {edge: (1.0 - refine_share) * value for edge, value in shares.items()}
        shares["rf"] = refine_share
    eps, delta = float(options["epsilon"]), float(options["delta"])
    if quantile and not _quantile_can_choose(eps, delta, n_documents, shares["q3"]):
        shares["e3"] += shares.pop("q3")  # no edge could qualify: no q3 release, no third clip
    return shares


def plan_private_spectral_lda(
    parameters: Mapping[str, Any], n_documents: int, n_words: int, *, check_sizes: bool = True
) -> SpectralLDAPlan:
    """The plan of a :class:`~dptensor.models.PrivateSpectralLDA` fit on a corpus of ``(N, d)``.

    A pure function of the parameters and the public sizes (no data, no estimator): the resolved
    options, the releases with their shares and noise multipliers, the composed ``DpEvent`` and
    the guarantee. The fit, ``planned_guarantee`` and the planner (``dptensor lda plan``) all call it.

    Configuration 1 (``config=1``, clipped or not): every release is Gaussian, composed exactly
    (Gaussian DP: the total ``(epsilon, delta)`` fixes one ``mu`` and the shares divide ``mu^2``;
    a release repeated ``T`` times, as the noisy power method's, gets ``mu_edge / sqrt(T)`` each),
    or with ``calibration="classic"`` the paper's ``sqrt(2 ln(1.25/delta_i))/epsilon_i`` per edge
    (Dwork & Roth, Theorem A.1, valid only below ``epsilon_i = 1``). Configurations 2--4: the
    paper's per-edge ``(epsilon_i, delta_i)`` with basic composition, as printed (their guarantee
    does not hold; :mod:`dptensor.models.topics._paper_variants`).

    Parameters
    ----------
    parameters : mapping
        The estimator's parameters (``PrivateSpectralLDA.get_params()``; validated). ``n_components``,
        ``alpha0``, ``epsilon`` and ``delta`` are required; the others default as in the estimator
        (:data:`PLAN_PARAMETER_DEFAULTS`) and parameters the plan does not read are ignored. Of
        ``public_corpus`` only whether it is given is read.
    n_documents, n_words : int
        The public sizes ``(N, d)``.
    check_sizes : bool, default True
        Refuse sizes the fit refuses (``N < 3``, ``k > d``, fewer whitening words than ``k``) first,
        as ``fit`` does; the planner's reference plans (:func:`predicted_snr`) skip this.

    Returns
    -------
    SpectralLDAPlan

    Raises
    ------
    ValueError
        For sizes or options the fit refuses (before any data is read).
    """
    options = _options(parameters)
    n_documents, n_words = int(n_documents), int(n_words)
    k = int(options["n_components"])
    if check_sizes:
        if n_documents < 3:
            raise ValueError(f"X has {n_documents} document(s); the moment estimators need at least 3")
        if k > n_words:
            raise ValueError(f"n_components={k} exceeds the vocabulary size {n_words}; k must be at most d")
    clipping = resolve_clipping(parameters, n_words)
    clipped = clipping is not None
    passes, refine_share = resolve_refinement(options, n_documents, n_words, clipped)
    # the "auto" rules of the moments see the moments' own budget (what refinement leaves them)
    moment_epsilon = moments_epsilon(options["epsilon"], options["delta"], refine_share)
    moment_options = {**options, "epsilon": moment_epsilon}
    whitened = _whitened_words(moment_options, n_documents, n_words, clipped)
    if check_sizes and whitened < k:
        raise ValueError(
            f"whitening_words={options['whitening_words']} is below n_components={k}: the whitening needs "
            "at least k words"
        )
    recovery = _topic_recovery(moment_options, n_documents, n_words, clipped, whitened)
    method = whitening_method(options["private_whitening"], whitened)
    steps = int(options["n_power_steps"]) if method == "noisy-power" else 1
    shares = _shares(options, n_documents, n_words, clipped, clipped and recovery == "nmf", refine_share)
    noise = noise_and_guarantee(options, shares, steps, clipping, whitened, passes)
    multipliers, epsilons, deltas, holds, reasons, guarantee = noise
    return SpectralLDAPlan(
        n_documents=n_documents, n_words=n_words, clipping=clipping,
        public_whitening=clipped and options["public_whitening"], whitening_words=whitened,
        private_whitening=method, m2_releases=steps, topic_recovery=recovery, refine_passes=passes,
        shares=MappingProxyType(shares), noise_multipliers=MappingProxyType(multipliers),
        edge_epsilons=MappingProxyType(epsilons), edge_deltas=MappingProxyType(deltas), holds=holds,
        reasons=tuple(reasons), guarantee=guarantee,
    )  # fmt: skip


# -- the planner's prediction, behind the "auto" rules (docs/lda.md, *Planning a private fit*) ------
def signal_guess(n_words: int, n_components: int, alpha0: float) -> float:
    """The data-free guess ``sigma_k(M2) ~ d^{-1/2} / (k (alpha_0 + 1))`` (module ``plan``)."""
    return n_words**-0.5 / (n_components * (alpha0 + 1.0))


def noise_norm(entry_scale: float, n_words: int, whitening: str, width: int) -> float:
    """Operator norm of the ``m2`` release's noise of entry scale ``entry_scale`` (module ``plan``).

    ``sqrt(2d) s`` for Analyze Gauss (a ``d x d`` symmetric Gaussian), ``sqrt(2p) s`` per step for
    the noisy power method (a ``d x p`` block, ``p = width``).
    """
    return math.sqrt(2.0 * (width if whitening == "noisy-power" else n_words)) * entry_scale


def shrinkage_weight(snr: float) -> float:
    """Weight ``lambda = 1 / (1 + (snr / GOOD_LEVEL)^2)`` of the unigram distribution in the shrunk topics.

    The Wiener (James--Stein) weight ``1 / (1 + r^2)`` of a noisy estimate whose signal-to-noise
    ratio is ``r``: the share of noise in its energy. The predicted ``snr`` is on the planner's
    scale, whose level :data:`GOOD_LEVEL` ("close to the non-private fit") is taken as ``r = 1``:
    there the topics and the unigram model get equal weight. Calibrated on the same measured
    fits as the levels (docs/lda.md, *Shrinkage*): the held-out perplexity of Debian and WordNet
    fits at ``epsilon`` 1 and 4 is within a few percent of the best weight of a grid, where the
    uncalibrated ``1 / (1 + snr^2)`` shrank too little. ``snr -> 0``: the unigram model;
    ``snr -> inf``: the topics unchanged. :class:`~dptensor.models.PrivateSpectralLDA` applies it
    to the predicted signal-to-noise of its ``M2`` release (post-processing).
    """
    r = max(float(snr), 0.0) / GOOD_LEVEL
    return 1.0 / (1.0 + r * r)


def predicted_snr(
    n: int, d: int, k: int, alpha0: float, epsilon: float, delta: float, length: float, whitening: str,
    refinement: tuple[int, float] = (0, 0.0),
) -> tuple[float, float, float, dict]:
    """``(snr, signal, noise, noise multipliers)`` of the clipped ``M2`` release on ``d`` words.

    The noise multiplier is that of the reference plan (:func:`plan_private_spectral_lda` with
    ``whitening_words=None``, ``topic_recovery="tensor"`` and ``refinement = (passes, share)`` of
    private refinement, resolved by the caller on the whole vocabulary: none by default); documents
    of ``length`` tokens give ``S0 ~ N C L`` (:mod:`~dptensor.models.topics.plan`). Public inputs only.
    """
    passes, share = refinement
    parameters = {
        "n_components": k, "alpha0": alpha0, "epsilon": epsilon, "delta": delta,
        "private_whitening": whitening, "whitening_words": None, "topic_recovery": "tensor",
        "refine": "cvb0" if passes else None, "refine_passes": passes or "auto",
        "refine_share": share or "auto",
    }  # fmt: skip
    plan = plan_private_spectral_lda(parameters, n, d, check_sizes=False)
    z = plan.noise_multipliers["m2"]
    scale = z * math.sqrt(2.0) / (n * length)
    width = min(d, k + int(PLAN_PARAMETER_DEFAULTS["n_oversamples"]))
    noise = noise_norm(scale, d, plan.private_whitening, width)
    signal = signal_guess(d, k, alpha0)
    return signal / noise, signal, noise, dict(plan.noise_multipliers)


def auto_whitening_words(
    n_documents: int, n_words: int, n_components: int, alpha0: float, epsilon: float, delta: float
) -> int:
    """How many words ``PrivateSpectralLDA(whitening_words="auto")`` whitens on (public inputs only).

    The largest of ``d`` and the :data:`WHITENING_WORDS_STEPS` below it whose predicted
    signal-to-noise (Analyze Gauss, :data:`DEFAULT_TYPICAL_LENGTH`) reaches
    :data:`WHITENING_WORDS_LEVEL`, and at least ``min(d, max(WHITENING_WORDS_MIN, k))``. A smaller
    ``M2`` release has a smaller noise norm (``sqrt(2 d) s``) while its top eigenvalues, carried
    by the frequent words, shrink more slowly; it pays when the noise dominates.
    """
    smallest = fewest_whitening_words(n_words, n_components)
    for size in sorted({int(n_words), *(v for v in WHITENING_WORDS_STEPS if v < n_words)}, reverse=True):
        if size <= smallest:
            break
        snr = predicted_snr(int(n_documents), size, int(n_components), float(alpha0), float(epsilon),
                            float(delta), DEFAULT_TYPICAL_LENGTH, "analyze-gauss")[0]  # fmt: skip
        if snr >= WHITENING_WORDS_LEVEL:
            return size
    return smallest


def fewest_whitening_words(n_words: int, n_components: int) -> int:
    """``min(d, max(WHITENING_WORDS_MIN, k))``: where :func:`auto_whitening_words` stops."""
    return min(int(n_words), max(WHITENING_WORDS_MIN, int(n_components)))


def prefers_nonnegative_topics(
    n_documents: int, n_words: int, n_components: int, alpha0: float, epsilon: float, delta: float
) -> bool:
    """Whether ``PrivateSpectralLDA(topic_recovery="auto")`` takes the topics from a factor of ``M2``.

    True when even the fewest whitening words (``min(d, max(WHITENING_WORDS_MIN, k))``, where
    :func:`auto_whitening_words` stops) predict a signal-to-noise below
    :data:`WHITENING_WORDS_LEVEL`: the ``M2`` release then hides about half of its top directions
    and the tensor step recovers mostly noise in them, while a non-negative factor of the release
    still finds them (:mod:`dptensor.models.topics.nonnegative_topics`). Calibrated on measured fits
    (docs/lda.md, *Topics from the co-occurrences' non-negative factor*, ten fits each): WordNet glosses
    predict 7.1 at epsilon = 1, where the factor's NPMI was 0.095 against the tensor step's 0.018, and
    Debian descriptions 8.0, where it was 0.075 against 0.066 (perplexity 383 against 378, both below
    the unigram model's 396); at epsilon = 2 (13.4 and 15.1) and above the tensor step is kept (on
    WordNet at epsilon = 4 the factor's perplexity was 893 against 878). Public inputs only.
    """
    smallest = fewest_whitening_words(n_words, n_components)
    if auto_whitening_words(n_documents, n_words, n_components, alpha0, epsilon, delta) != smallest:
        return False
    snr = predicted_snr(int(n_documents), smallest, int(n_components), float(alpha0), float(epsilon),
                        float(delta), DEFAULT_TYPICAL_LENGTH, "analyze-gauss")[0]  # fmt: skip
    return snr < WHITENING_WORDS_LEVEL


def release_words(
    n_documents: int, n_words: int, n_components: int, alpha0: float, epsilon: float, delta: float,
    whitening_words: int | str | None = "auto",
) -> int:
    """The words the ``M2`` release of a clipped fit covers (``PrivateSpectralLDA(whitening_words=...)``).

    ``"auto"``: :func:`auto_whitening_words`; ``None``: every word; a count: at most ``n_words``.
    Public inputs only.
    """
    if whitening_words is None:
        return int(n_words)
    if whitening_words == "auto":
        return auto_whitening_words(n_documents, n_words, n_components, alpha0, epsilon, delta)
    return min(int(whitening_words), int(n_words))
