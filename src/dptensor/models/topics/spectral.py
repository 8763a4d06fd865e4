"""Spectral LDA: topic models by the method of moments, at vocabulary scale.

The pipeline of DeCarolis et al. (*An end-to-end differentially private spectral algorithm for
LDA*, Section 4 and Figure 1), after Anandkumar et al. (*A spectral algorithm for LDA*; *Tensor
decompositions for learning latent variable models*, JMLR 2014, Section 4.3), written as small
functions whose intermediate results are explicit, so that a private version can perturb any
edge of Figure 1:

* e0 -- counts to ``M2_hat``, an operator never formed as ``d x d``:
  :class:`~dptensor.models.topics.moments.LDASecondMoment`;
* e2, e5 -- ``M2_hat`` to the whitening ``W = U S^{-1/2}`` and un-whitening ``(W^T)^+ = U S^{1/2}``:
  :func:`~dptensor.models.topics._lda_whitening.lda_whitening`;
* e1, e3, e4 -- counts and ``W`` to ``T_hat = M3_hat(W, W, W)`` (``k x k x k``):
  :func:`~dptensor.models.topics._third_moment.whitened_third_moment`;
* e6 -- ``T_hat`` to eigenpairs ``(lambda_i, v_i)``: :func:`decompose_whitened_tensor`;
* e7, e8 -- eigenpairs to topics ``mu_i`` and ``alpha_i``: :func:`unwhiten_topics`.

Un-whitening (derivation). With ``M2 = sum_i p_i mu_i mu_i^T``, ``p_i = alpha_i/(alpha_0(alpha_0+1))``
and ``W^T M2 W = I``, the vectors ``v_i = sqrt(p_i) W^T mu_i`` are orthonormal and
``T = M3(W,W,W) = sum_i q_i (W^T mu_i)^{(x)3} = sum_i q_i p_i^{-3/2} v_i^{(x)3}``,
``q_i = 2 alpha_i/(alpha_0(alpha_0+1)(alpha_0+2))``. Hence the eigenvalues are
``lambda_i = q_i p_i^{-3/2} = (2/(alpha_0+2)) sqrt(alpha_0(alpha_0+1)/alpha_i)``, so

* ``alpha_i = 4 alpha_0 (alpha_0+1) / ((alpha_0+2)^2 lambda_i^2)``, and
* ``mu_i = p_i^{-1/2} (W^T)^+ v_i = ((alpha_0+2)/2) lambda_i U S^{1/2} v_i``

(``U S^{1/2} W^T`` projects onto the span of the topics). With sampling noise the un-whitened
vectors are not exactly on the simplex; each is replaced by its Euclidean projection onto the
probability simplex (Duchi et al. 2008), which zeroes small noisy entries and renormalises.
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions

from dptensor._validation import (
    RandomStateLike,
    check_positive_int,
    check_random_state,
)
from dptensor.decomposition.power_method import PowerMethodResult, power_method
from dptensor.decomposition.simultaneous_power import simultaneous_power_method
from dptensor.decomposition.whitening import Whitening, orientation_signs, unwhiten
from dptensor.metrics import matched_topic_l1
from dptensor.models.topics._lda_whitening import lda_whitening, top_eigenpairs
from dptensor.models.topics._third_moment import LDAMomentAccumulator, whitened_third_moment
from dptensor.models.topics.inference import TopicModelInference
from dptensor.models.topics.moments import (
    Documents,
    LDASecondMoment,
    check_alpha0,
    document_blocks,
    prepare_documents,
)
from dptensor.models.topics.refinement import (
    DEFAULT_MAX_PASSES,
    DEFAULT_REFINE_TOL,
    DEFAULT_TOPIC_WORD_PRIOR,
    refine_topics,
)
from dptensor.parallel import effective_n_jobs
from dptensor.tensor.operators import DenseTensor


def decompose_whitened_tensor(
    tensor: np.ndarray,
    n_components: int,
    *,
    method: str = "simultaneous",
    n_restarts: int | None = None,
    max_iter: int | None = None,
    tol: float = 1e-10,
    random_state: RandomStateLike = None,
) -> PowerMethodResult:
    """Eigenpairs of the whitened ``k x k x k`` tensor (Section 4, step (4); edge e6).

    ``method="simultaneous"`` (the paper's choice) runs
    :func:`~dptensor.decomposition.simultaneous_power.simultaneous_power_method` (Wang & Lu
    2017); ``method="robust"`` runs the deflation-based robust power method
    :func:`dptensor.power_method` (Anandkumar et al. 2014, Algorithm 1).
    """
    op = DenseTensor(tensor, check_symmetry=False)
    if method == "simultaneous":
        return simultaneous_power_method(
            op,
            n_components,
            n_restarts=5 if n_restarts is None else n_restarts,
            n_iter=200 if max_iter is None else max_iter,
            tol=tol,
            random_state=random_state,
        )
    if method == "robust":
        return power_method(
            op, n_components, n_restarts=n_restarts, n_iter=max_iter, tol=tol, random_state=random_state
        )
    raise ValueError(f"decomposition must be 'simultaneous' or 'robust', got {method!r}")


def project_rows_to_simplex(matrix: np.ndarray) -> np.ndarray:
    """Euclidean projection of each row onto the probability simplex (Duchi et al. 2008, Fig. 1).

    ``argmin_{p >= 0, sum p = 1} ||p - x||`` is ``max(x - tau, 0)`` with ``tau`` chosen by one
    sort per row, ``O(d log d)``.
    """
    x = np.atleast_2d(np.asarray(matrix, dtype=np.float64))
    d = x.shape[1]
    desc = -np.sort(-x, axis=1)
    cumulative = np.cumsum(desc, axis=1) - 1.0
    ranks = np.arange(1, d + 1)
    support = desc - cumulative / ranks > 0
    last = d - 1 - np.argmax(support[:, ::-1], axis=1)
    tau = cumulative[np.arange(x.shape[0]), last] / (last + 1.0)
    return np.maximum(x - tau[:, None], 0.0)


def unwhiten_topics(
    decomposition: PowerMethodResult, whitening: Whitening, alpha0: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Topics ``mu_i`` and Dirichlet parameters ``alpha_i`` from whitened eigenpairs (edges e7, e8).

    ``alpha_i = 4 alpha_0 (alpha_0+1) / ((alpha_0+2)^2 lambda_i^2)`` and
    ``mu_i = ((alpha_0+2)/2) lambda_i U S^{1/2} v_i`` (derivation in the module docstring),
    then projected onto the simplex. Topics are returned in order of decreasing ``alpha_i``.

    Returns
    -------
    topics : ndarray of shape (k, d)
        Rows on the probability simplex.
    alpha : ndarray of shape (k,)
    raw_topics : ndarray of shape (k, d)
        The un-whitened vectors before the projection (rows sum to about 1).
    """
    alpha0 = check_alpha0(alpha0)
    if np.any(decomposition.weights <= 0):
        raise ValueError("the whitened tensor has a non-positive eigenvalue; cannot recover alpha")
    # The generic un-whitening gives w_i = lambda_i^-2 and lambda_i B v_i; the LDA moments carry
    # the constants 4 alpha_0 (alpha_0 + 1) / (alpha_0 + 2)^2 and (alpha_0 + 2) / 2.
    weights, components = unwhiten(whitening, decomposition.weights, decomposition.factors)
    alpha = 4.0 * alpha0 * (alpha0 + 1.0) / (alpha0 + 2.0) ** 2 * weights
    raw = (alpha0 + 2.0) / 2.0 * components.T
    # An eigenvector is determined up to sign only when lambda is; make each topic sum positive.
    raw *= np.where(raw.sum(axis=1) < 0, -1.0, 1.0)[:, None]
    order = np.argsort(-alpha, kind="stable")
    return project_rows_to_simplex(raw[order]), alpha[order], raw[order]


#: A topic counts as found again by another decomposition when their matched L1 distance is at most this.
STABLE_TOPIC_L1 = 0.1
#: Fits warn when a topic is found again by fewer than this share of the stability runs.
UNSTABLE_TOPIC_SHARE = 0.5


@dataclass(frozen=True)
class StableDecomposition:
    """The best of several decompositions of one whitened tensor, and how often each topic recurs.

    Attributes
    ----------
    result : PowerMethodResult
        The decomposition with the smallest residual ``||T - sum_i lambda_i v_i^{(x)3}||_F``.
    topics, alpha : ndarray
        Its un-whitened topics (``k x d``, rows on the simplex) and ``alpha_i``
        (:func:`unwhiten_topics`).
    stability : ndarray of shape (k,)
        The share of the other decompositions that found each topic again (within
        :data:`STABLE_TOPIC_L1`); empty when there were none.
    distances : ndarray of shape (n_runs, k)
        Each topic's matched L1 distance to the topics of each other decomposition.
    """

    result: PowerMethodResult
    topics: np.ndarray
    alpha: np.ndarray
    stability: np.ndarray
    distances: np.ndarray


def stable_decomposition(
    tensor: np.ndarray,
    whitening: Whitening,
    alpha0: float,
    n_components: int,
    n_runs: int,
    *,
    method: str = "simultaneous",
    n_restarts: int | None = None,
    max_iter: int | None = None,
    tol: float = 1e-10,
    random_state: RandomStateLike = None,
) -> StableDecomposition:
    """Decompose the whitened tensor ``1 + n_runs`` times; keep the best fit; score each topic.

    The whitened tensor of a finite corpus is not exactly orthogonally decomposable, and the
    power methods (Section 4 step (4)) converge to different decompositions of nearly the same
    fit from different random starts; a topic that changes with the start is not determined by
    the data. Each run is :func:`decompose_whitened_tensor` from new random starts (the first
    draws exactly what a single decomposition would, so ``n_runs=0`` is that decomposition). The
    run with the smallest residual ``||T - sum_i lambda_i v_i^{(x)3}||_F`` is kept (more starts
    make the kept fit depend less on the seed), and its topics are matched one to one to those of
    every other run (:func:`~dptensor.metrics.matched_topic_l1`): a topic counts as found again
    when its match is within :data:`STABLE_TOPIC_L1` in L1 distance.
    """
    rng = check_random_state(random_state)
    n_runs = check_positive_int(n_runs, "n_runs", minimum=0)
    runs = []
    for _ in range(1 + n_runs):
        result = decompose_whitened_tensor(
            tensor, n_components, method=method, n_restarts=n_restarts, max_iter=max_iter, tol=tol,
            random_state=rng,
        )  # fmt: skip
        topics, alpha, _ = unwhiten_topics(result, whitening, alpha0)
        runs.append((float(np.linalg.norm(tensor - result.to_dense())), result, topics, alpha))
    best = min(range(len(runs)), key=lambda i: runs[i][0])
    _, result, topics, alpha = runs[best]
    others = [run[2] for i, run in enumerate(runs) if i != best]
    distances = np.array([matched_topic_l1(topics, other) for other in others]).reshape(n_runs, len(alpha))
    stability = np.mean(distances <= STABLE_TOPIC_L1, axis=0) if n_runs else np.empty(0)
    return StableDecomposition(result, topics, alpha, stability, distances)


#: Constraints of the parameters SpectralLDA and PrivateSpectralLDA share (decomposition, transform).
SPECTRAL_PARAMETER_CONSTRAINTS: dict = {
    "decomposition": [StrOptions({"simultaneous", "robust"})],
    "n_restarts": [Interval(Integral, 1, None, closed="left"), None],
    "max_iter": [Interval(Integral, 1, None, closed="left"), None],
    "tol": [Interval(Real, 0, None, closed="left")],
    "transform_max_iter": [Interval(Integral, 1, None, closed="left")],
    "transform_tol": [Interval(Real, 0, None, closed="left")],
    "smoothing": [Interval(Real, 0, 1, closed="neither")],
    "verbose": ["verbose"],
    "n_jobs": [Integral, None],
}


class SpectralLDA(TopicModelInference, BaseEstimator):
    """Latent Dirichlet Allocation fitted by the method of moments (spectral LDA).

    Implements the end-to-end spectral algorithm of DeCarolis et al. (Section 4, Figure 1)
    without noise: unbiased moments (Lemma 21, in the exactly unbiased U-statistic form),
    whitening with the top-``k`` eigenpairs of ``M2_hat`` computed through products only,
    the whitened tensor ``M3_hat(W,W,W)`` formed directly from the counts in ``k`` dimensions,
    simultaneous power iteration (Wang & Lu 2017), and un-whitening. No ``d x d`` or
    ``d x d x d`` array is formed, so 10^5-word vocabularies are routine. :meth:`partial_fit`
    accumulates the moments over batches of documents.

    A scikit-learn estimator and transformer (:mod:`dptensor.models._base`): parameters are
    validated at ``fit`` from ``_parameter_constraints``; ``clone``, pipelines (e.g. after
    ``CountVectorizer``), ``GridSearchCV`` over ``alpha0`` and ``cross_val_score`` (with
    :meth:`score`, greater is better) work.

    Parameters
    ----------
    n_components : int, default 10
        Number of topics ``k`` (at most the vocabulary size).
    alpha0 : float, default 1.0
        Dirichlet concentration ``alpha_0 = sum_i alpha_i`` (> 0), which the method of moments
        takes as known (as in the paper); ``alpha_i`` are then estimated.
    decomposition : {"simultaneous", "robust"}, default "simultaneous"
        Simultaneous power iteration (the paper's choice) or the robust tensor power method.
    whitening : {"auto", "dense", "randomized", "eigsh"}, default "auto"
        Eigensolver for ``M2_hat`` (see :func:`~dptensor.models.topics._lda_whitening.top_eigenpairs`).
    n_oversamples, n_power_iter : int, default 10 and 2
        Randomised eigensolver settings (at least ``n_power_iter + 2`` passes over the counts,
        each with ``n_components + n_oversamples`` columns).
    whitening_tol : float or None, default 1e-3
        Randomised eigensolver: after ``n_power_iter`` products, iterate until every top-``k``
        Ritz pair has a relative residual ``<= whitening_tol`` (see
        :func:`~dptensor.models.topics._lda_whitening.top_eigenpairs`), so that the whitening, and
        hence the topics, does not depend on the random start (on 6.7e4 Debian package
        descriptions at ``k = 20`` the fixed two products left subspaces at cosines down to 0.76
        between seeds; ``1e-3`` gives 0.999998, in 13-16 products).
        ``None``: exactly ``n_power_iter`` products (faster, seed-dependent).
    n_restarts : int, optional
        Restarts of the tensor decomposition (default 5 for simultaneous, ``max(10, 2k ln k)``
        for robust).
    stability_runs : int, default 4
        Decompose the whitened tensor this many more times from other random starts, keep the
        decomposition with the smallest residual, and report in ``topic_stability_`` how often
        the other runs found each of its topics again (:func:`stable_decomposition`); a
        ``UserWarning`` names the topics found by fewer than half of them. ``0``: one
        decomposition, no score. Costs ``stability_runs`` tensor decompositions (``k x k x k``,
        no pass over the documents).
    max_iter : int, optional
        Maximum power steps (default 200 for simultaneous).
    tol : float, default 1e-10
        Convergence tolerance of the tensor decomposition.
    transform_max_iter : int, default 100
        EM steps of :meth:`transform`.
    transform_tol : float, default 1e-4
        :meth:`transform` stops when no proportion changes by more than this.
    smoothing : float, default 1e-6
        :meth:`transform` and :meth:`score` use ``(1 - smoothing) mu_i + smoothing / d`` so that
        words a projected topic gives probability zero keep a finite likelihood; must lie in
        ``(0, 1)``.
    match_unigram : bool, default True
        Inference matches the smoothed topics and their weights ``alpha_ / sum(alpha_)`` to the
        corpus' mean word distribution ``unigram_`` (``M1_hat``), so that a document without
        evidence is predicted exactly as by the unigram model, and uses ``alpha0`` as the prior's
        total (LDA's first moment; :mod:`dptensor.models.topics.moment_matching`; docs/lda.md,
        *Matching the unigram distribution*). ``components_``, ``alpha_`` and ``top_words`` are
        unchanged. With ``refine``, the matched topics and prior are where refinement starts, and
        inference then uses the refined topics and that prior.
    refine : {"cvb0", None}, default "cvb0"
        After the moments, refine the topics by batch CVB0 passes over the documents, started
        from the moment topics (:mod:`dptensor.models.topics.refinement`; docs/lda.md,
        *Refinement*): the held-out likelihood of a collapsed Gibbs sampler in a few passes.
        ``None``: the pure moment estimate (one pass for the moments, nothing more).
    refine_max_passes : int, default 30
        Passes of refinement at most.
    refine_tol : float, default 1e-3
        Refinement stops when the leave-one-out log-likelihood per token improves by less than
        this (relative).
    topic_word_prior : float, default 0.01
        Dirichlet parameter ``beta`` of the topics in refinement.
    verbose : bool, default False
        Print each step and its duration to standard error.
    n_jobs : int, optional
        Threads for the passes over the documents of an in-memory ``X`` (``None``: one; ``-1``:
        every core); the documents are cut into row blocks whose sums run in a thread pool
        (:mod:`dptensor.parallel`). A Dask ``X`` runs on the active Dask scheduler instead.
    random_state : None, int or numpy.random.Generator

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_words)
        Topic-word distributions (rows on the simplex), by decreasing ``alpha_``: the refined
        topics, or the moment topics ``mu_i`` with ``refine=None``.
    moment_components_ : ndarray of shape (n_components, n_words)
        The moment topics ``mu_i`` (equal to ``components_`` with ``refine=None``).
    refinement_ : Refinement or None
        The refinement's record (passes, log-likelihood per pass, priors); ``None`` with
        ``refine=None`` or after :meth:`partial_fit` (which fits the moments only).
    alpha_ : ndarray of shape (n_components,)
        Estimated Dirichlet parameters ``alpha_i``.
    unigram_ : ndarray of shape (n_words,)
        ``M1_hat``, the mean of the documents' word distributions (Lemma 21, eq. (5)).
    n_features_in_ : int
        Vocabulary size ``d``.
    n_documents_ : int
        Documents that entered the moments (those with at least three tokens).
    n_dropped_documents_ : int
        Documents left out for having fewer than three tokens.
    whitening_ : Whitening
        ``W``, ``(W^T)^+`` and the top eigenpairs of ``M2_hat``.
    whitened_tensor_ : ndarray of shape (k, k, k)
        ``M3_hat(W, W, W)``.
    decomposition_ : PowerMethodResult
        Eigenpairs of the whitened tensor.
    topic_stability_ : ndarray of shape (n_components,) or None
        For each topic (row of ``components_``), the share of ``stability_runs`` other random
        starts of the decomposition that found it again within an L1 distance of
        :data:`STABLE_TOPIC_L1`; a topic below 1 depends on the seed, not only on the data.
        ``None`` when ``stability_runs=0``.
    stability_distances_ : ndarray of shape (stability_runs, n_components) or None
        The matched L1 distance of each topic to the other runs' topics.
    timings_ : dict
        Seconds spent in each step of the last fit.

    Examples
    --------
    >>> from dptensor.datasets.lda import make_lda_corpus
    >>> corpus = make_lda_corpus(5000, 50, 3, alpha=0.3, random_state=0)
    >>> model = SpectralLDA(3, alpha0=0.9, random_state=0).fit(corpus.counts)
    >>> model.components_.shape
    (3, 50)
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "alpha0": [Interval(Real, 0, None, closed="neither")],
        "whitening": [StrOptions({"auto", "dense", "randomized", "eigsh"})],
        "n_oversamples": [Interval(Integral, 0, None, closed="left")],
        "n_power_iter": [Interval(Integral, 0, None, closed="left")],
        "whitening_tol": [Interval(Real, 0, None, closed="neither"), None],
        "stability_runs": [Interval(Integral, 0, None, closed="left")],
        "match_unigram": ["boolean"],
        "refine": [StrOptions({"cvb0"}), None],
        "refine_max_passes": [Interval(Integral, 1, None, closed="left")],
        "refine_tol": [Interval(Real, 0, None, closed="left")],
        "topic_word_prior": [Interval(Real, 0, None, closed="neither")],
        **SPECTRAL_PARAMETER_CONSTRAINTS,
        "random_state": [None, Interval(Integral, 0, None, closed="left"), np.random.Generator,
                         np.random.RandomState],
    }

    def __init__(
        self,
        n_components: int = 10,
        alpha0: float = 1.0,
        *,
        decomposition: str = "simultaneous",
        whitening: str = "auto",
        n_oversamples: int = 10,
        n_power_iter: int = 2,
        whitening_tol: float | None = 1e-3,
        n_restarts: int | None = None,
        stability_runs: int = 4,
        max_iter: int | None = None,
        tol: float = 1e-10,
        transform_max_iter: int = 100,
        transform_tol: float = 1e-4,
        smoothing: float = 1e-6,
        match_unigram: bool = True,
        refine: str | None = "cvb0",
        refine_max_passes: int = DEFAULT_MAX_PASSES,
        refine_tol: float = DEFAULT_REFINE_TOL,
        topic_word_prior: float = DEFAULT_TOPIC_WORD_PRIOR,
        verbose: bool = False,
        n_jobs: int | None = None,
        random_state: RandomStateLike = None,
    ) -> None:
        self.n_components = n_components
        self.alpha0 = alpha0
        self.decomposition = decomposition
        self.whitening = whitening
        self.n_oversamples = n_oversamples
        self.n_power_iter = n_power_iter
        self.whitening_tol = whitening_tol
        self.stability_runs = stability_runs
        self.n_restarts = n_restarts
        self.max_iter = max_iter
        self.tol = tol
        self.transform_max_iter = transform_max_iter
        self.transform_tol = transform_tol
        self.smoothing = smoothing
        self.match_unigram = match_unigram
        self.refine = refine
        self.refine_max_passes = refine_max_passes
        self.refine_tol = refine_tol
        self.topic_word_prior = topic_word_prior
        self.verbose = verbose
        self.n_jobs = n_jobs
        self.random_state = random_state

    # -- fitting ---------------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: object, y: object = None) -> SpectralLDA:
        """Fit topics and Dirichlet parameters to a document-term count matrix.

        Parameters
        ----------
        X : array_like, scipy.sparse matrix, dask.array.Array or RowBlocks, shape (n_documents, n_words)
            Non-negative integer word counts. Documents with fewer than three tokens are left
            out of the moments (see :mod:`dptensor.models.topics.moments`). A ``dask.array`` (row
            chunks of SciPy sparse or dense counts) or :class:`~dptensor.parallel.RowBlocks` (e.g.
            :func:`~dptensor.parallel.from_files`) is fitted on the active Dask scheduler: the
            documents are validated and kept on the workers, every pass is a sum computed there,
            and the result equals the in-memory fit up to rounding.
        y : ignored

        Returns
        -------
        self
        """
        k, alpha0 = self._check_options()
        rng = check_random_state(self.random_state)
        timings: dict[str, float] = {}
        with _Step("validate counts", timings, self.verbose):
            docs = prepare_documents(X, n_jobs=self.n_jobs)
        if k > docs.n_words:
            raise ValueError(
                f"n_components={k} exceeds the vocabulary size {docs.n_words}; k must be at most d"
            )
        self.__dict__.pop("_accumulator", None)
        self._fit_documents(docs, k, alpha0, rng, timings)
        self._refine(docs, timings)
        return self

    def _refine(self, docs: Documents, timings: dict) -> None:
        """Refinement after the moments (``refine``): CVB0 passes started from the moment topics."""
        self.moment_components_ = self.components_
        self.refinement_ = None
        if self.refine is None:
            return
        start, prior = self._inference_parameters()  # the matched topics and prior, matched once

        def report(pass_number: int, log_likelihood: float) -> None:
            if self.verbose:
                print(f"[spectral-lda]   pass {pass_number}: leave-one-out log-likelihood per token "
                      f"{log_likelihood:.4f}", file=sys.stderr)  # fmt: skip

        with _Step(f"refinement (CVB0, at most {self.refine_max_passes} passes)", timings, self.verbose):
            self.refinement_ = refine_topics(
                document_blocks(docs), start, prior, topic_word_prior=self.topic_word_prior,
                max_passes=self.refine_max_passes, tol=self.refine_tol, on_pass=report,
            )  # fmt: skip
        self.components_ = self.refinement_.topics

    def _check_options(self) -> tuple[int, float]:
        """Check every option before any pass over the data; return ``(k, alpha0)``."""
        k = check_positive_int(self.n_components, "n_components")
        alpha0 = check_alpha0(self.alpha0)
        if self.decomposition not in ("simultaneous", "robust"):
            raise ValueError(f"decomposition must be 'simultaneous' or 'robust', got {self.decomposition!r}")
        if self.whitening not in ("auto", "dense", "randomized", "eigsh"):
            raise ValueError(
                f"whitening must be 'auto', 'dense', 'randomized' or 'eigsh', got {self.whitening!r}"
            )
        self._check_smoothing()
        effective_n_jobs(self.n_jobs)
        return k, alpha0

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X: object, y: object = None) -> SpectralLDA:
        """Add a batch of documents to the accumulated moments and refit (corpora read in batches).

        The first batch fixes an ``r``-dimensional basis ``B`` of the top eigenvectors of its
        own ``M2_hat`` (``r = min(d, 2k + n_oversamples)``), which must be large enough to
        contain the topic subspace; every batch (the first included) then adds its documents'
        terms to running sums (:class:`~dptensor.models.topics._third_moment.LDAMomentAccumulator`) from
        which ``M2_hat B`` and ``M3_hat(B, B, B)`` of *all documents so far* follow exactly
        (the U-statistic scalars depend on the total ``N`` only). Each call then whitens inside
        ``B`` (the top-``k`` eigenpairs of ``B^T M2_hat B``, so ``W = B U_r S^{-1/2}``), decomposes
        ``T = M3_hat(W, W, W)`` and un-whitens with ``mu_i = ((alpha_0+2)/2) lambda_i M2_hat W v_i``
        (the identity ``M2 W v_i = sqrt(p_i) mu_i``), so topics are not confined to ``B``.
        Memory ``O(d r + r^3)`` whatever the number of batches. The result differs from
        :meth:`fit` on the concatenated corpus only through the basis chosen from the first
        batch. ``alpha0`` may be changed between calls (the sums do not depend on it).
        """
        k, alpha0 = self._check_options()
        rng = check_random_state(self.random_state)
        timings: dict[str, float] = {}
        first = not hasattr(self, "_accumulator")
        with _Step("validate counts", timings, self.verbose):
            docs = prepare_documents(X, min_documents=3 if first else 0, n_jobs=self.n_jobs)
        if first:
            if k > docs.n_words:
                raise ValueError(
                    f"n_components={k} exceeds the vocabulary size {docs.n_words}; k must be at most d"
                )
            width = min(docs.n_words, k + check_positive_int(self.n_oversamples, "n_oversamples", minimum=0))
            with _Step(f"basis: top-{width} eigenvectors of the first batch's M2", timings, self.verbose):
                _, basis = top_eigenpairs(
                    LDASecondMoment(docs, alpha0),
                    width,
                    method=self.whitening,
                    n_oversamples=self.n_oversamples,
                    n_power_iter=self.n_power_iter,
                    tol=self.whitening_tol,
                    random_state=rng,
                )
            self._accumulator = LDAMomentAccumulator(basis, alpha0)
            self.n_dropped_documents_ = 0
        elif docs.n_words != self._accumulator.basis.shape[0]:
            raise ValueError(
                f"X has {docs.n_words} words (columns) but earlier batches had "
                f"{self._accumulator.basis.shape[0]}"
            )
        acc = self._accumulator
        acc.alpha0 = alpha0
        with _Step(f"accumulate moments ({docs.n_documents} documents)", timings, self.verbose):
            acc.update(docs)
        self.n_dropped_documents_ += docs.n_dropped
        with _Step("whitening in the basis", timings, self.verbose):
            m2_basis = acc.second_moment_basis()
            small = acc.basis.T @ m2_basis
            values, vectors = np.linalg.eigh((small + small.T) / 2.0)
            order = np.argsort(values)[::-1][:k]
            values, vectors = values[order], vectors[:, order]
            # one sign per whitened direction (whitening module docstring): orient W's columns
            vectors = vectors * orientation_signs(acc.basis @ vectors)
            if values[-1] <= 0:
                raise ValueError(
                    f"M2_hat has only {int(np.sum(values > 0))} positive eigenvalue(s) among its top {k} "
                    "in the basis; use fewer topics or a larger first batch"
                )
            reduced = vectors / np.sqrt(values)  # r x k
            # (W^T)^+ is replaced by M2_hat W, which equals U S^{1/2} when W = U S^{-1/2}.
            whitening = Whitening(
                matrix=acc.basis @ reduced,
                inverse=m2_basis @ reduced,
                eigenvalues=values,
                eigenvectors=acc.basis @ vectors,
            )
        with _Step("whitened third moment", timings, self.verbose):
            tensor = np.einsum(
                "abc,ai,bj,ck->ijk", acc.third_moment(), reduced, reduced, reduced, optimize=True
            )
        self._decompose_and_unwhiten(tensor, whitening, k, alpha0, rng, timings)
        self.unigram_ = acc.first_moment()
        self.n_features_in_ = docs.n_words
        self.n_documents_ = acc.n_documents
        self.moment_components_ = self.components_
        self.refinement_ = None  # refinement needs passes over every document: fit only
        return self

    def _fit_documents(
        self, docs: Documents, k: int, alpha0: float, rng: np.random.Generator, timings: dict
    ) -> None:
        with _Step(f"whitening: top-{k} eigenpairs of M2 (d={docs.n_words})", timings, self.verbose):
            second_moment = LDASecondMoment(docs, alpha0)
            whitening = lda_whitening(
                second_moment,
                k,
                method=self.whitening,
                n_oversamples=self.n_oversamples,
                n_power_iter=self.n_power_iter,
                tol=self.whitening_tol,
                random_state=rng,
            )
        with _Step(f"whitened third moment ({docs.n_documents} documents)", timings, self.verbose):
            tensor = whitened_third_moment(docs, alpha0, whitening.matrix)
        self._decompose_and_unwhiten(tensor, whitening, k, alpha0, rng, timings)
        self.unigram_ = second_moment.first_moment
        self.n_features_in_ = docs.n_words
        self.n_documents_ = docs.n_documents
        self.n_dropped_documents_ = docs.n_dropped

    def _decompose_and_unwhiten(
        self,
        tensor: np.ndarray,
        whitening: Whitening,
        k: int,
        alpha0: float,
        rng: np.random.Generator,
        timings: dict,
    ) -> None:
        """Steps (4)-(5) shared by ``fit`` and ``partial_fit``: decompose, un-whiten, store."""
        runs = f" x {1 + self.stability_runs}" if self.stability_runs else ""
        with _Step(f"tensor decomposition ({self.decomposition}{runs})", timings, self.verbose):
            fit = stable_decomposition(
                tensor, whitening, alpha0, k, self.stability_runs, method=self.decomposition,
                n_restarts=self.n_restarts, max_iter=self.max_iter, tol=self.tol, random_state=rng,
            )  # fmt: skip
        result, topics, alpha = fit.result, fit.topics, fit.alpha
        self.topic_stability_ = self.stability_distances_ = None
        if self.stability_runs:
            self.topic_stability_, self.stability_distances_ = fit.stability, fit.distances
            _warn_unstable(self.topic_stability_, self.stability_runs)
        self.components_ = topics
        self.alpha_ = alpha
        self.whitening_ = whitening
        self.whitened_tensor_ = tensor
        self.decomposition_ = result
        self.timings_ = timings


def _warn_unstable(stability: np.ndarray, n_runs: int) -> None:
    """Warn of topics found again by fewer than half the runs, numbered from 1 as the CLI prints them."""
    unstable = np.flatnonzero(stability < UNSTABLE_TOPIC_SHARE)
    if unstable.size:
        numbers = ", ".join(str(i + 1) for i in unstable)
        warnings.warn(
            f"{unstable.size} of {stability.size} topics (topic {numbers}, numbered from 1: components_ rows "
            f"{unstable.tolist()}) were found "
            f"again by fewer than half of {n_runs} other decompositions of the same moments "
            f"(topic_stability_): the data do not determine them, and another random_state gives other "
            "topics there; fewer topics (n_components) or more documents may make them stable",
            UserWarning,
            stacklevel=4,
        )


class _Step:
    """Time a named step; print it to standard error when ``verbose``.

    ``report_time=False`` (private models) prints the step without its duration: the seconds still
    go to ``timings``, but nothing printed depends on the data's size or content.
    """

    def __init__(self, name: str, timings: dict, verbose: bool, *, report_time: bool = True) -> None:
        self.name, self.timings, self.verbose, self.report_time = name, timings, verbose, report_time

    def __enter__(self) -> _Step:
        self.start = time.perf_counter()
        if self.verbose:
            print(f"[spectral-lda] {self.name} ...", file=sys.stderr, flush=True)
        return self

    def __exit__(self, *exc: object) -> None:
        elapsed = time.perf_counter() - self.start
        self.timings[self.name.split(" (")[0].split(":")[0]] = elapsed
        if self.verbose and exc[0] is None:
            done = f"{elapsed:.2f} s" if self.report_time else "done"
            print(f"[spectral-lda] {self.name}: {done}", file=sys.stderr, flush=True)
