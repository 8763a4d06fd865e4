"""Configuration 1's releases of private spectral LDA, methods of the estimator (DeCarolis et al., paper 004).

:class:`PrivateSpectralReleases` is a mixin of
:class:`~dptensor.models.topics.private_spectral.PrivateSpectralLDA`: the steps of its ``fit`` that read
the documents, add the noise and post-process the releases -- the unclipped Configuration 1 (one or two
noisy ``M2_hat`` for the whitening, edges e4 and e8 of the paper's Figure 1, and the push-forward
noise on the whitened ``M3_hat``, e3), the clipped releases ``m1``, ``m2``, ``q3`` and ``e3``
(module docstring of :mod:`~dptensor.models.topics.private_spectral`, *Clipped releases*), the
non-negative factor of ``topic_recovery="nmf"``, and the tensor decomposition and un-whitening that
follow. The paper's Configurations 2--4 (:mod:`dptensor.models.topics._paper_variants`) call
``_release_m2``, ``_decompose`` and ``_decompose_unwhiten`` back. The methods read the estimator's
parameters and record the public quantities of each release on it (``noise_scales_``,
``whitening_alignment_``, ``whitening_``, ``projected_third_moment_``, ``third_clip_``,
``second_moment_``, ``unigram_``, ``word_frequencies_``); the sensitivities are those of
:mod:`dptensor.models.topics.sensitivity` (docs/lda.md, *Privacy*).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dptensor.decomposition.power_method import PowerMethodResult
from dptensor.decomposition.whitening import Whitening
from dptensor.models.topics._private_plan import THIRD_CLIP_EDGES, THIRD_CLIP_TAIL, SpectralLDAPlan
from dptensor.models.topics._releases import (
    positive_weights,
    private_step,
    release_projected_m3,
    released_unigram,
    with_inverse,
)
from dptensor.models.topics.clipped_moments import (
    ClippedMoments,
    ClippedSecondMoment,
    clipped_whitened_third_moment,
)
from dptensor.models.topics.moments import Documents, LDASecondMoment
from dptensor.models.topics.nonnegative_topics import CORE_SHARE, nonnegative_topic_factor, topics_from_factor
from dptensor.models.topics.private_whitening import (
    PrivateEigenpairs,
    analyze_gauss_eigenpairs,
    analyze_gauss_release,
    noisy_power_eigenpairs,
)
from dptensor.models.topics.sensitivity import (
    PAPER_MOMENT_SENSITIVITY,
    clipped_sensitivities,
    coherence,
    m2_sensitivity,
    m3_sensitivity,
)
from dptensor.models.topics.spectral import (
    decompose_whitened_tensor,
    project_rows_to_simplex,
    unwhiten_topics,
)
from dptensor.privacy.mechanisms import add_symmetric_gaussian
from dptensor.privacy.noise import NoiseSource
from dptensor.privacy.quantile import private_upper_quantile

__all__ = ["PrivateSpectralReleases"]


class PrivateSpectralReleases:
    """The release steps of :class:`~dptensor.models.topics.private_spectral.PrivateSpectralLDA` (a mixin).

    Its methods use the estimator's parameters (``alpha0``, ``n_components``, ``sensitivity``,
    ``shared_m2``, ``projected_sensitivity``, ``whitening_subspace``, the power method's and the
    decomposition's settings, ``verbose``) and the fitted attributes ``fit`` set before them.
    """

    def _m2_sensitivity_fn(self, n: int):
        if self.sensitivity == "paper":
            return lambda mu: PAPER_MOMENT_SENSITIVITY / n
        if self.projected_sensitivity:
            return lambda mu: m2_sensitivity(self.alpha0, n, coherence=mu)
        return lambda mu: m2_sensitivity(self.alpha0, n)

    def _release_m2(
        self, docs: Documents, multiplier: float, method: str, source: NoiseSource, rng: np.random.Generator,
        label: str, timings: dict,
    ) -> PrivateEigenpairs:  # fmt: skip
        """One private release of ``M2_hat``'s top eigenpairs (Analyze Gauss or noisy power, ``method``)."""
        operator = LDASecondMoment(docs, self.alpha0)
        sensitivity = self._m2_sensitivity_fn(docs.n_documents)
        return self._release_eigenpairs(
            operator, label, multiplier, method, sensitivity, source, rng, timings
        )

    def _release_eigenpairs(
        self, operator: object, label: str, multiplier: float, method: str, sensitivity,
        source: NoiseSource, rng: np.random.Generator, timings: dict,
    ) -> PrivateEigenpairs:  # fmt: skip
        """The top eigenpairs of a second-moment ``operator`` released under ``label``.

        Analyze Gauss (noise ``multiplier * sensitivity(1)``, subspace ``whitening_subspace``) or the
        noisy power method (``sensitivity(coherence)`` per step): ``method``, the plan's
        ``private_whitening`` for the operator's size. Records ``noise_scales_[label]`` and, unless
        it is the inverse's own release ``"e8"``, ``whitening_alignment_``.
        """
        k, size = int(self.n_components), operator.shape[0]
        with private_step(
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
        self, docs: Documents, plan: SpectralLDAPlan, source: NoiseSource, rng: np.random.Generator,
        timings: dict,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        n, method = docs.n_documents, plan.private_whitening
        if self.shared_m2:
            multiplier = plan.noise_multipliers["m2"]
            first = self._release_m2(docs, multiplier, method, source, rng, "e4+e8", timings)
            second = first
        else:
            first = self._release_m2(docs, plan.noise_multipliers["e4"], method, source, rng, "e4", timings)
            second = self._release_m2(docs, plan.noise_multipliers["e8"], method, source, rng, "e8", timings)
        U, sigma = first.whitening.eigenvectors, first.whitening.eigenvalues
        with private_step(
            "e3: private word triples (whitened third moment M3; push-forward noise)", timings, self.verbose
        ):
            if self.sensitivity == "paper":
                delta3 = PAPER_MOMENT_SENSITIVITY / n
            else:
                mu = coherence(U) if self.projected_sensitivity else 1.0
                delta3 = m3_sensitivity(self.alpha0, n, coherence=mu)
            scale = plan.noise_multipliers["e3"] * delta3
            projected = release_projected_m3(docs, self.alpha0, U, scale, source)
            inv = 1.0 / np.sqrt(sigma)
            tensor = projected * inv[:, None, None] * inv[None, :, None] * inv[None, None, :]
        self.noise_scales_["e3"] = scale
        whitening = with_inverse(first.whitening, second.whitening)
        self.whitening_, self.projected_third_moment_ = whitening, projected
        return self._decompose_unwhiten(tensor, whitening, rng, timings)

    def _fit_clipped(
        self, moments: ClippedMoments, plan: SpectralLDAPlan, source: NoiseSource, rng: np.random.Generator,
        timings: dict, public_whitening: Whitening | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The clipped Configuration 1 (module docstring, *Clipped releases*)."""
        d = moments.n_words
        sens = clipped_sensitivities(moments.clip, moments.word_clip, moments.third_clip)
        with private_step("m1: private total weight and word frequencies", timings, self.verbose):
            scale1 = plan.noise_multipliers["m1"] * sens["m1"]
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
            scale = plan.noise_multipliers["m2"] * m2_scale
            return self._nonnegative_topics(operator, support, scale, source, timings)
        result = self._release_eigenpairs(
            operator, "m2", plan.noise_multipliers["m2"], plan.private_whitening, lambda mu: m2_scale, source,
            rng, timings,
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
        (:mod:`dptensor.models.topics.nonnegative_topics`).
        """
        k = int(self.n_components)
        size = operator.shape[0]
        if support is None:
            support = np.arange(size)
        with private_step(
            "m2: private word co-occurrences (second moment M2) of the whitening words (Analyze Gauss)",
            timings, self.verbose,
        ):
            released = analyze_gauss_release(operator, noise_scale=noise_scale, source=source)
        self.noise_scales_["m2"] = noise_scale
        self.second_moment_, self.second_moment_words_ = released, support
        with private_step(
            "topics: non-negative factor of the released word co-occurrences (M2)", timings, self.verbose
        ):
            # the core: the most frequent whitening words by the released unigram distribution
            order = np.argsort(-self.unigram_[support], kind="stable")
            core = order[: max(k, int(round(CORE_SHARE * size)))]
            factor = nonnegative_topic_factor(released, k, noise_scale, core)
            topics, alpha = topics_from_factor(factor, support, self.unigram_, float(self.alpha0))
        return topics, alpha

    def _clipped_third(
        self, moments: ClippedMoments, whitening: Whitening, total: float, mean: np.ndarray,
        plan: SpectralLDAPlan,
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
        if "q3" in plan.noise_multipliers:
            with private_step(
                "q3: private bound on each document's projected word-triple term (the third clip)",
                timings, self.verbose,
            ):
                counts = moments.projected_histogram(U, THIRD_CLIP_EDGES)
                quantile = private_upper_quantile(
                    counts, THIRD_CLIP_EDGES, n_records=moments.docs.n_documents,
                    tail_fraction=THIRD_CLIP_TAIL, noise_multiplier=plan.noise_multipliers["q3"],
                    source=source, fallback=1.0,
                )  # fmt: skip
            self.noise_scales_["q3"] = quantile.noise_scale
            moments = dataclasses.replace(moments, third_clip=quantile.value * moments.clip)
        self.third_clip_ = moments.third_clip
        sens = clipped_sensitivities(moments.clip, moments.word_clip, moments.third_clip)
        with private_step(
            "e3: private word triples (whitened third moment M3; projected sums)", timings, self.verbose
        ):
            scale3 = plan.noise_multipliers["e3"] * sens["e3"]
            third = moments.third_order(U)
            third = add_symmetric_gaussian(third, scale3, convention="frobenius", noise=source)
            tensor = clipped_whitened_third_moment(third, total, mean, U, sigma, self.alpha0)
        self.noise_scales_["e3"] = scale3
        self.whitening_, self.projected_third_moment_ = whitening, third
        return self._decompose_unwhiten(tensor, whitening, rng, timings, support)

    def _decompose(self, tensor: np.ndarray, rng: np.random.Generator, timings: dict) -> PowerMethodResult:
        with private_step(f"tensor decomposition ({self.decomposition})", timings, self.verbose):
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
        result = positive_weights(self._decompose(tensor, rng, timings))
        with private_step("un-whitening", timings, self.verbose):
            topics, alpha, raw = unwhiten_topics(result, whitening, self.alpha0)
            if support is not None:
                outside = np.ones(raw.shape[1], dtype=bool)
                outside[support] = False
                raw[:, outside] = self.unigram_[outside]  # the same in every topic
                topics = project_rows_to_simplex(raw)
        return topics, alpha
