"""The paper's Configurations 2--4 of private spectral LDA, as printed (DeCarolis et al., paper 004).

Unproven: they run only after :func:`dptensor.privacy.enable_features` ``("unproven")``, to
reproduce the paper, and their guarantee reports ``holds=False``, ``epsilon=inf`` and the paper's
composite epsilon as ``nominal_epsilon``
(:data:`~dptensor.models.topics._private_guarantee.UNPROVEN_REASONS`).

2. noise on ``T_hat`` built with the **clean** whitening (e6) and on ``M2_hat`` for ``(W^T)^+`` (e8);
3. noise on the clean eigenpairs ``(v_i, lambda_i)`` (e7) and on ``M2_hat`` (e8);
4. noise on the clean topics ``mu_i, alpha_i`` (e9);

each with Procedure 1's private lower bounds of ``sigma_k(M2_hat)`` (and of the eigengap
``gamma_s``). Why the guarantee does not hold: the clean whitening basis can rotate between
neighbouring corpora (so the local sensitivities of Theorems 5--7 are not sensitivities),
``gamma_s`` has no bounded global sensitivity, and the printed noise sets hidden constants to 1
(reference notes B.9). The budget split and the per-edge ``(epsilon_i, delta_i)`` come from the
plan (:func:`~dptensor.models.topics._private_plan.plan_private_spectral_lda`); this module holds
the releases that follow it.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from dptensor.decomposition.power_method import PowerMethodResult
from dptensor.decomposition.whitening import Whitening
from dptensor.models.topics._lda_whitening import top_eigenpairs
from dptensor.models.topics._private_plan import SpectralLDAPlan
from dptensor.models.topics._releases import positive_weights, private_step, with_inverse
from dptensor.models.topics._third_moment import whitened_third_moment
from dptensor.models.topics.moments import Documents, LDASecondMoment
from dptensor.models.topics.private_whitening import PrivateEigenpairs
from dptensor.models.topics.sensitivity import (
    PAPER_MOMENT_SENSITIVITY,
    lda_moment_constants,
    m2_sensitivity,
    whitened_tensor_local_sensitivity,
)
from dptensor.models.topics.spectral import project_rows_to_simplex, unwhiten_topics
from dptensor.privacy.lower_bound import private_lower_bound
from dptensor.privacy.mechanisms import add_symmetric_gaussian
from dptensor.privacy.noise import NoiseSource

#: Procedure 1's lower bounds are floored here, and the resulting noise scales capped at _MAX_SCALE,
#: so that a failed bound gives a useless but finite release instead of an error or overflow.
_FLOOR = 1e-12
_MAX_SCALE = 1e6


class PaperConfigurationHost(Protocol):
    """What the releases of Configurations 2--4 read from the estimator being fitted."""

    n_components: int
    alpha0: float
    config: int
    sensitivity: str
    verbose: bool
    noise_scales_: dict

    def _release_m2(
        self, docs: Documents, multiplier: float, method: str, source: NoiseSource, rng: np.random.Generator,
        label: str, timings: dict,
    ) -> PrivateEigenpairs: ...  # fmt: skip

    def _decompose(
        self, tensor: np.ndarray, rng: np.random.Generator, timings: dict
    ) -> PowerMethodResult: ...

    def _decompose_unwhiten(
        self, tensor: np.ndarray, whitening: Whitening, rng: np.random.Generator, timings: dict,
        support: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]: ...  # fmt: skip


def paper_configuration_topics(
    model: PaperConfigurationHost, docs: Documents, plan: SpectralLDAPlan, source: NoiseSource,
    rng: np.random.Generator, timings: dict,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Topics and weights of Configuration 2, 3 or 4 as printed (module docstring; unproven).

    Parameters
    ----------
    model : PrivateSpectralLDA
        The estimator being fitted: its parameters, its ``M2`` release and tensor decomposition
        steps, and ``noise_scales_``, which this records.
    docs : Documents
        The validated counts (every document of at least three tokens).
    plan : SpectralLDAPlan
        The fit's plan: per-edge ``(epsilon_i, delta_i)`` and noise multipliers.
    source : NoiseSource
        The secret noise.
    rng : numpy.random.Generator
        Public randomness (starts of the power methods).
    timings : dict
        Seconds per step, filled in.

    Returns
    -------
    topics : ndarray of shape (k, d)
    alpha : ndarray of shape (k,)
    """
    k, d, n = int(model.n_components), docs.n_words, docs.n_documents
    paper = model.sensitivity == "paper"
    operator = LDASecondMoment(docs, model.alpha0)
    with private_step("clean whitening (not private)", timings, model.verbose):
        # as printed (unproven modes): no data-dependent switch to Lanczos on the clean M2
        values, vectors = top_eigenpairs(operator, min(k + 1, d), random_state=rng,
                                         lanczos_fallback=False)  # fmt: skip
        clean = Whitening.from_eigenpairs(np.maximum(values[:k], 1e-300), vectors[:, :k])
    # Procedure 1, line 3-4: a private lower bound of sigma_k(M2_hat).
    bound = private_lower_bound(
        float(values[k - 1]), m2_sensitivity(model.alpha0, n), plan.edge_epsilons["sigma_k"],
        plan.edge_deltas["sigma_k"], source, paper_scale=PAPER_MOMENT_SENSITIVITY / n if paper else None,
    )  # fmt: skip
    sigma_lower = max(bound.lower, _FLOOR)
    model.noise_scales_["sigma_k"] = bound.scale
    with private_step(
        "clean word triples (whitened third moment M3; not private)", timings, model.verbose
    ):
        tensor = whitened_third_moment(docs, model.alpha0, clean.matrix)
    if model.config == 2:
        local = whitened_tensor_local_sensitivity(model.alpha0, n, k, sigma_lower, paper=paper)
        scale = min(plan.noise_multipliers["e6"] * local, _MAX_SCALE)
        model.noise_scales_["e6"] = scale
        noisy = add_symmetric_gaussian(tensor, scale, convention="frobenius", noise=source)
        inverse = model._release_m2(
            docs, plan.noise_multipliers["e8"], plan.private_whitening, source, rng, "e8", timings
        )
        whitening = with_inverse(clean, inverse.whitening)
        return model._decompose_unwhiten(noisy, whitening, rng, timings)
    result = positive_weights(model._decompose(tensor, rng, timings))
    lam = result.weights
    gaps = -np.diff(np.append(lam, 0.0))
    gamma = float(np.min(gaps)) / 4.0
    gamma_bound = private_lower_bound(
        gamma, 2.0 / n, plan.edge_epsilons["gamma_s"], plan.edge_deltas["gamma_s"], source,
        paper_scale=PAPER_MOMENT_SENSITIVITY / n if paper else None,
    )  # fmt: skip
    gamma_lower = max(gamma_bound.lower, _FLOOR)
    model.noise_scales_["gamma_s"] = gamma_bound.scale
    local_t = whitened_tensor_local_sensitivity(model.alpha0, n, k, sigma_lower, paper=paper)
    if model.config == 3:
        if paper:
            local = k**2 / (n * gamma_lower * sigma_lower**1.5)
        else:  # Theorem 6 per component, times sqrt(2k) for the k components released together
            local = 2.0 * math.sqrt(2.0) * k * local_t / gamma_lower
        scale = min(plan.noise_multipliers["e7"] * local, _MAX_SCALE)
        model.noise_scales_["e7"] = scale
        factors = source.add_gaussian(result.factors, scale)
        weights = source.add_gaussian(lam, scale)
        noisy = positive_weights(PowerMethodResult(
            weights=weights, factors=factors, n_iter=result.n_iter, converged=result.converged,
            extraction_order=result.extraction_order,
        ))  # fmt: skip
        inverse = model._release_m2(
            docs, plan.noise_multipliers["e8"], plan.private_whitening, source, rng, "e8", timings
        )
        whitening = with_inverse(clean, inverse.whitening)
        with private_step("un-whitening", timings, model.verbose):
            topics, alpha, _ = unwhiten_topics(noisy, whitening, model.alpha0)
        return topics, alpha
    # Configuration 4: noise on the clean topics and alpha (Theorem 7).
    _, clean_alpha, raw = unwhiten_topics(result, clean, model.alpha0)  # paired, by decreasing alpha
    a, _, _ = lda_moment_constants(model.alpha0)
    if paper:  # as printed: the un-noised sigma_1(M2_hat) enters the noise scale
        local = k**2 * math.sqrt(max(float(values[0]), 0.0)) / (n * gamma_lower * sigma_lower**1.5)
    else:  # H.5 with a public bound sigma_1 <= 1 + a, times sqrt(2k) for the joint release
        kappa = (model.alpha0 + 2.0) / (2.0 * math.sqrt(model.alpha0 * (model.alpha0 + 1.0)))
        s1, d2 = 1.0 + a, m2_sensitivity(model.alpha0, n)
        top = float(np.max(lam))
        per = kappa * (
            top * math.sqrt(s1) * 2.0 * math.sqrt(k) * local_t / gamma_lower
            + top * math.sqrt(s1) / sigma_lower * d2
            + math.sqrt(s1 + d2) * 2.0 * math.sqrt(k) * local_t / gamma_lower
        )
        local = math.sqrt(2.0 * k) * per
    scale = min(plan.noise_multipliers["e9"] * local, _MAX_SCALE)
    model.noise_scales_["e9"] = scale
    noisy_topics = source.add_gaussian(raw, scale)
    noisy_alpha = np.maximum(source.add_gaussian(clean_alpha, scale), 1e-12)
    noisy_topics *= np.where(noisy_topics.sum(axis=1) < 0, -1.0, 1.0)[:, None]
    order = np.argsort(-noisy_alpha, kind="stable")
    return project_rows_to_simplex(noisy_topics[order]), noisy_alpha[order]
