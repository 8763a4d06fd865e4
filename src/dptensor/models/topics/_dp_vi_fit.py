"""DP variational LDA as a function: the public settings of a fit and its steps (online VB).

:func:`dp_variational_lda` takes the ``T`` steps of (private) online variational Bayes for LDA
(Hoffman, Blei & Bach 2010, Algorithm 2, with the clipped, noised statistics of Park, Foulds,
Chaudhuri & Welling 2016) from a starting ``lambda``, given the public :class:`VISettings` of the
fit and, when private, the secret noise source of a release already charged. The estimator,
:class:`~dptensor.models.topics.dp_vi.DPVariationalLDA` (whose module docstring has the algorithm
and the privacy proof), resolves the settings, plans and charges the release, calls it and sets
its fitted attributes from the :class:`VIFit` it returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dptensor._progress import progress_bar
from dptensor.models.topics._dp_vi_steps import (
    bound_document_lengths,
    dirichlet_expectation,
    e_step,
    fixed_size_sample,
    poisson_sample,
)
from dptensor.models.topics.moments import check_count_matrix
from dptensor.privacy import NoiseSource

__all__ = ["VIFit", "VISettings", "bounded_counts", "dp_variational_lda", "initial_topics"]


@dataclass(frozen=True)
class VISettings:
    """The public settings of one fit: the parameters with their defaults resolved for ``N`` documents.

    A function of the parameters, the accountant and the public ``N`` only
    (:meth:`~dptensor.models.topics.dp_vi.DPVariationalLDA.settings`); ``noise_std`` is the
    calibrated ``sigma`` of each release (0 when not private).
    """

    n_components: int
    doc_topic_prior: float
    topic_word_prior: float
    n_documents: int
    n_passes: int
    batch_size: int
    clip: float | None
    max_doc_length: int | None
    learning_offset: float
    learning_decay: float
    max_doc_update_iter: int
    mean_change_tol: float
    accountant: str
    noise_std: float = 0.0

    @property
    def n_steps(self) -> int:
        """``T = n_passes * ceil(N / S)``."""
        return self.n_passes * math.ceil(self.n_documents / self.batch_size)


@dataclass(frozen=True)
class VIFit:
    """What :func:`dp_variational_lda` returns: the topics' variational parameters after the steps."""

    #: ``lambda`` (``K x V``).
    components: np.ndarray
    #: ``exp(E[log beta])`` of ``components``.
    exp_dirichlet_component: np.ndarray
    #: The public standard deviation of the noise each entry of ``lambda`` carries (0 when not private).
    lambda_noise_std: float
    #: The step count after the last step (the next step's ``t``).
    n_batch_iter: int


def initial_topics(n_components: int, n_words: int, rng: np.random.Generator) -> np.ndarray:
    """``lambda ~ Gamma(100, 1/100)`` entrywise (Hoffman et al.; public randomness)."""
    return rng.gamma(100.0, 0.01, (int(n_components), n_words))


def bounded_counts(X: object, max_doc_length: int | None) -> sp.csr_matrix:
    """The counts, checked and scaled to the declared maximum length (no noise: before or after the charge
    alike)."""
    matrix = check_count_matrix(X, allow_no_tokens=True)
    return matrix if max_doc_length is None else bound_document_lengths(matrix, max_doc_length)


def dp_variational_lda(
    matrix: sp.csr_matrix,
    lam: np.ndarray,
    settings: VISettings,
    rng: np.random.Generator,
    *,
    source: NoiseSource | None = None,
    n_batch_iter: int = 1,
    verbose: bool = False,
) -> VIFit:
    """The ``T`` steps of (private) online variational Bayes from ``lambda = lam`` (the module's steps 1-5).

    Parameters
    ----------
    matrix : scipy.sparse.csr_matrix of shape (N, V)
        The counts, checked and bounded to ``settings.max_doc_length`` (:func:`bounded_counts`).
    lam : ndarray of shape (K, V)
        The starting ``lambda``.
    settings : VISettings
        The public settings (``noise_std`` is each release's ``sigma``).
    rng : numpy.random.Generator
        Public randomness: the shuffles and E-step starts of a non-private fit.
    source : NoiseSource, optional
        The secret noise source of a private fit (its release charged already): the minibatches,
        E-step starts and noise are drawn from it. ``None``: not private.
    n_batch_iter : int, default 1
        The first step's ``t`` (a continuing ``partial_fit``: the model's step count).
    verbose : bool, default False
        A progress bar over the steps.

    Returns
    -------
    VIFit
    """
    n_docs, S, k, n_steps = settings.n_documents, settings.batch_size, settings.n_components, settings.n_steps
    alpha, eta = settings.doc_topic_prior, settings.topic_word_prior
    clip, sigma = settings.clip, settings.noise_std
    paper = settings.accountant == "paper"
    noise_var = 0.0  # variance of the noise carried in each entry of lambda (public)
    exp_elog_beta = np.exp(dirichlet_expectation(lam))
    order = np.arange(0)
    per_pass = math.ceil(n_docs / S)
    # refreshed every ``miniters`` steps, never on a timer, and without times or rates: what
    # is printed must not depend on how long the (data-dependent) E-steps took
    steps = progress_bar(
        range(n_steps), desc="DP-VI steps" if source else "VI steps", enabled=verbose,
        mininterval=0.0, maxinterval=math.inf, miniters=max(1, n_steps // 50),
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}",
    )  # fmt: skip
    for step in steps:
        if source is None:  # non-private: shuffled passes, batches of S (the last may be smaller)
            if step % per_pass == 0:
                order = rng.permutation(n_docs)
            j = step % per_pass
            batch = np.sort(order[j * S : (j + 1) * S])
            init = rng.gamma(100.0, 0.01, (batch.size, k))
        else:
            batch = (
                fixed_size_sample(source, n_docs, S)
                if paper
                else poisson_sample(source, n_docs, min(1.0, S / n_docs))
            )
            init = source.gamma(100.0, 0.01, (batch.size, k))
        _, sstats = e_step(
            matrix[batch], exp_elog_beta, alpha, init, settings.max_doc_update_iter, settings.mean_change_tol,
            clip, True,
        )  # fmt: skip
        if source is None:
            scaled = sstats * (n_docs / max(batch.size, 1))
        else:
            released = source.add_gaussian(sstats / S, sigma)
            if paper:  # the authors' post-processing: zero each release
                np.maximum(released, 0.0, out=released)
            scaled = n_docs * released
        rho = (settings.learning_offset + n_batch_iter) ** (-settings.learning_decay)
        lam = (1.0 - rho) * lam + rho * (eta + scaled)
        if source is not None and not paper:
            # post-processing after the average: the noise of many releases averages out
            # before the floor, where zeroing each release would add a bias of about
            # 0.4 N sigma to every entry whose statistic is zero
            np.maximum(lam, eta, out=lam)
            noise_var = (1.0 - rho) ** 2 * noise_var + (rho * n_docs * sigma) ** 2
        exp_elog_beta = np.exp(dirichlet_expectation(lam))
        n_batch_iter += 1
    return VIFit(lam, exp_elog_beta, math.sqrt(noise_var), n_batch_iter)
