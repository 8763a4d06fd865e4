"""The single-topic model by orthogonal tensor decomposition, with the AGN and AVN mechanisms.

Imtiaz & Sarwate, *Improved algorithms for differentially-private orthogonal tensor
decomposition* (slides, 2018), on the method of moments of Anandkumar et al. (JMLR 2014,
Sections 3.1 and 4.3). Pipeline (slide "Differentially-private OTD"; the recovery step is not on
the slides and is derived in ``docs/single_topic.md``):

1. ``M2_hat`` (symmetrised; :mod:`dptensor.models.topics.single_topic_moments`) plus, in a private fit,
   a symmetric ``E`` with i.i.d. ``N(0, tau_1^2)`` unique entries (Analyze-Gauss);
2. ``W = U |S|^{-1/2}`` from the top-``K`` eigenpairs (by algebraic value) of ``M2_hat + E``;
3. ``T = (M3_hat + E3)(W, W, W)`` with ``E3`` the unique-entry noise of the mechanism:

   * ``"agn"``: i.i.d. ``N(0, tau_2^2)`` on the ``D_sym = d(d+1)(d+2)/6`` unique entries;
   * ``"avn"``: ``b`` with density ``~ exp(-beta ||b||_2)``, ``beta = N epsilon_2 / sqrt(2)``;
   * ``"dp_tpm"`` (the slides' baseline, Wang & Anandkumar 2016, Algorithm 3): no noise on ``T``;
     instead :func:`~dptensor.private_power_method` decomposes the clean whitened tensor, noising
     every power step with the document-level sensitivities of
     :class:`~dptensor.privacy.WhitenedDocumentNeighbouring` (``2 rho^3 / N`` for the largest row
     norm ``rho`` of the public ``W``);

4. eigenpairs ``(lambda_k, v_k)`` of ``T`` by the robust tensor power method;
5. ``w_k = lambda_k^{-2}`` and ``a_k = lambda_k U |S|^{1/2} v_k``.

Privacy (replace one document, ``N``, ``d`` and ``K`` public): both moments have l2 sensitivity
``Delta = sqrt(2)/N`` on their unique entries (brute-force checked), the releases are
``M2_hat + E`` and ``M3_hat + E3`` (or the power method's releases), and everything else is
post-processing. See :func:`single_topic_release` for the calibration and the guarantee.

At vocabulary scale nothing of size ``d^2`` or ``d^3`` is formed (``noise_sampler="scalable"``):
``E`` is regenerated block by block from a secret key
(:class:`~dptensor.privacy.SymmetricGaussianOperator`) inside a randomised eigensolver, and
``E3(W, W, W)`` is drawn from its exact ``K``-dimensional law
(:class:`~dptensor.privacy.WhitenedNoiseLaw`). Both have exactly the law of the dense noise, so
the guarantee is the same.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from numbers import Integral, Real

import dp_accounting
import numpy as np
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions

from dptensor._errstate import underflow_ignored
from dptensor._validation import check_epsilon_delta, check_random_state, check_rank
from dptensor.decomposition.power_method import PowerMethodResult, default_n_restarts, power_method
from dptensor.decomposition.private_power_method import default_private_n_iter, private_power_method
from dptensor.decomposition.whitening import Whitening, unwhiten
from dptensor.models._base import PrivateEstimatorMixin, declare_count_input
from dptensor.models.topics._lda_whitening import top_eigenpairs
from dptensor.models.topics.single_topic_moments import (
    INPUT_FORMS,
    MOMENTS,
    SingleTopicDocuments,
    check_documents,
    dense_second_moment,
    second_moment,
    third_moment,
)
from dptensor.models.topics.spectral import project_rows_to_simplex
from dptensor.privacy.accounting import EpsilonDeltaDpEvent
from dptensor.privacy.blocked_noise import SymmetricGaussianOperator
from dptensor.privacy.calibration import (
    composed_gaussian_holds,
    composed_noise_multiplier,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_pure_epsilon,
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
)
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.mechanisms import add_symmetric_gaussian, exponential_norm_noise, symmetric_from_unique
from dptensor.privacy.noise import NoiseSource
from dptensor.privacy.sensitivity import WhitenedDocumentNeighbouring
from dptensor.privacy.vocabulary import VOCABULARY_ASSUMPTION
from dptensor.privacy.whitened_noise import WhitenedNoiseLaw
from dptensor.tensor.operators import symmetrize

__all__ = ["SingleTopicModel", "SingleTopicRelease", "single_topic_release"]

MECHANISMS: tuple[str, ...] = ("agn", "avn", "dp_tpm")
CALIBRATIONS: tuple[str, ...] = ("analytic", "classic")
NOISE_SAMPLERS: tuple[str, ...] = ("auto", "dense", "scalable")
#: Vocabularies up to this size use the dense samplers (``d x d x d`` noise) under ``"auto"``.
DENSE_SAMPLER_MAX_WORDS = 100
#: Randomised eigensolver of the scalable path: extra columns and power iterations
#: (``N_POWER_ITER + 2`` products with ``K + N_OVERSAMPLES`` columns).
N_OVERSAMPLES = 10
N_POWER_ITER = 4

NEIGHBOURING = "document"
PROTECTED = "one document replaced by any other document of at least 3 tokens over the same vocabulary"
PUBLIC = (
    "the number of documents N, the vocabulary size d, the number of topics K and the algorithm's "
    "parameters; " + VOCABULARY_ASSUMPTION
)


@dataclass(frozen=True)
class SingleTopicRelease:
    """The noise of one private single-topic fit, computed from parameters and public sizes only.

    Attributes
    ----------
    mechanism : {"agn", "avn", "dp_tpm"}
    sensitivity : float
        ``Delta = sqrt(2) / N``, the l2 sensitivity of the unique entries of both moments.
    epsilon_m2, delta_m2, sigma_m2 : float
        Budget and Gaussian noise std of the ``M2`` release.
    epsilon_m3, delta_m3 : float
        Budget of the second stage (``M3`` release, or the private power method).
    sigma_m3 : float or None
        AGN: Gaussian noise std on the unique entries of ``M3``.
    beta_m3 : float or None
        AVN: ``beta = epsilon_m3 / Delta`` of the density ``~ exp(-beta ||b||)``.
    tpm_restarts, tpm_iter, tpm_releases : int or None
        DP-TPM: ``L``, ``R`` and ``K L (R + 1)`` Gaussian releases.
    tpm_multiplier : float or None
        DP-TPM: the noise multiplier ``z`` of each release.
    tpm_accountant : str or None
        ``"exact"`` (with ``calibration="analytic"``) or ``"advanced"`` (the paper's constants).
    calibration : {"analytic", "classic"}
    """

    mechanism: str
    sensitivity: float
    epsilon_m2: float
    delta_m2: float
    sigma_m2: float
    epsilon_m3: float
    delta_m3: float
    sigma_m3: float | None
    beta_m3: float | None
    tpm_restarts: int | None
    tpm_iter: int | None
    tpm_releases: int | None
    tpm_multiplier: float | None
    tpm_accountant: str | None
    calibration: str


def _gaussian_sigma(epsilon: float, delta: float, sensitivity: float, calibration: str, what: str) -> float:
    if calibration == "analytic":
        return gaussian_sigma_analytic(epsilon, delta, sensitivity)
    if epsilon >= 1:
        raise ValueError(
            "calibration='classic' (the classic Gaussian mechanism, Dwork & Roth Theorem A.1) is only "
            f"proven for a release's epsilon < 1, but the release of {what} gets epsilon={epsilon:g}; use "
            "calibration='analytic' (valid for every epsilon), or a smaller budget"
        )
    return gaussian_sigma_classic(epsilon, delta, sensitivity)


def single_topic_release(
    mechanism: str,
    epsilon: float,
    delta: float,
    n_documents: int,
    n_components: int,
    *,
    budget_split: float = 0.5,
    calibration: str = "analytic",
    n_restarts: int | None = None,
    n_iter: int | None = None,
) -> tuple[SingleTopicRelease, PrivacyGuarantee]:
    """Calibrate a private single-topic fit and state its guarantee (before any data is read).

    Budget (slide "Differentially-private OTD"; the split is not given there): the ``M2`` release
    gets ``epsilon_1 = budget_split * epsilon``, the second stage ``epsilon_2 = epsilon - epsilon_1``.
    AGN and DP-TPM split ``delta`` the same way; AVN's second stage is pure, so ``M2`` gets all of
    ``delta`` (the slides' ``tau_1`` with ``delta_1 + delta_2``). Noise, with ``Delta = sqrt(2)/N``:

    * ``tau_1`` (``M2``) and AGN's ``tau_2`` (``M3``): the analytic Gaussian mechanism (Balle &
      Wang 2018) for ``(epsilon_i, delta_i)``, or with ``calibration="classic"`` the slides'
      ``Delta sqrt(2 ln(1.25/delta_i)) / epsilon_i``, which is proven only for ``epsilon_i < 1``
      (refused otherwise);
    * AVN: ``beta = epsilon_2 / Delta`` (pure ``epsilon_2``-DP: ``f(b) / f(b + v) <= e^{beta ||v||}``);
    * DP-TPM: ``z`` for ``K L (R + 1)`` Gaussian releases at ``(epsilon_2, delta_2)``, composed exactly
      (``"analytic"``) or with Wang & Anandkumar's constants (``"classic"``).

    Guarantee: ``(epsilon, delta)``-DP under replace-one-document by basic composition of the two
    stages (each is checked to be ``(epsilon_i, delta_i)``-DP); ``epsilon_exact`` is the tighter
    exact composition of the actual noise at ``delta`` (Gaussian DP when every release is
    Gaussian; for AVN the closed form of :func:`~dptensor.privacy.gaussian_pure_epsilon`). The
    ``dp_event`` lists the releases in unit-sensitivity units (``GaussianDpEvent(tau / Delta)``;
    AVN's ``M3`` release as ``EpsilonDeltaDpEvent(epsilon_2, 0)``), so
    :func:`dptensor.privacy.compose` composes fits.

    Returns
    -------
    release : SingleTopicRelease
    guarantee : PrivacyGuarantee
    """
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    check_epsilon_delta(epsilon, delta)  # finite, positive, and never a bool
    if calibration not in CALIBRATIONS:
        raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    if not 0 < budget_split < 1:
        raise ValueError(f"budget_split must lie strictly between 0 and 1, got {budget_split!r}")
    sensitivity = math.sqrt(2.0) / n_documents
    eps1 = float(epsilon) * budget_split
    eps2 = float(epsilon) - eps1
    if mechanism == "avn":
        delta1, delta2 = float(delta), 0.0
    else:
        delta1 = float(delta) * budget_split
        delta2 = float(delta) - delta1
    sigma1 = _gaussian_sigma(eps1, delta1, sensitivity, calibration, "the word-pair moment M2")
    events = [dp_accounting.GaussianDpEvent(sigma1 / sensitivity)]
    sigma2 = beta = None
    restarts = iters = releases = None
    multiplier = accountant = None
    if mechanism == "agn":
        sigma2 = _gaussian_sigma(eps2, delta2, sensitivity, calibration, "the word-triple moment M3")
        events.append(dp_accounting.GaussianDpEvent(sigma2 / sensitivity))
    elif mechanism == "avn":
        beta = eps2 / sensitivity
        events.append(EpsilonDeltaDpEvent(eps2, 0.0))
    else:
        restarts = default_n_restarts(n_components) if n_restarts is None else int(n_restarts)
        iters = default_private_n_iter(n_components) if n_iter is None else int(n_iter)
        releases = n_components * restarts * (iters + 1)
        accountant = "exact" if calibration == "analytic" else "advanced"
        multiplier = composed_noise_multiplier(eps2, delta2, releases, accountant)
        if not composed_gaussian_holds(multiplier, releases, eps2, delta2):
            raise ValueError(
                f"calibration='classic' gives the private power method a noise multiplier {multiplier:.4g} "
                f"that is not ({eps2:g}, {delta2:g})-DP over {releases} releases (Wang & Anandkumar's "
                "constants fail for these parameters); use calibration='analytic'"
            )
        events.append(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(multiplier), releases))
    # Each Gaussian stage is (epsilon_i, delta_i)-DP exactly (Balle & Wang 2018, Theorem 8).
    for sigma, eps_i, delta_i in ((sigma1, eps1, delta1), (sigma2, eps2, delta2)):
        if sigma is not None and gaussian_delta(sigma, eps_i, sensitivity) > delta_i:
            raise AssertionError("Gaussian calibration below its budget")  # pragma: no cover
    release = SingleTopicRelease(
        mechanism=mechanism, sensitivity=sensitivity, epsilon_m2=eps1, delta_m2=delta1, sigma_m2=sigma1,
        epsilon_m3=eps2, delta_m3=delta2, sigma_m3=sigma2, beta_m3=beta, tpm_restarts=restarts,
        tpm_iter=iters, tpm_releases=releases, tpm_multiplier=multiplier, tpm_accountant=accountant,
        calibration=calibration,
    )  # fmt: skip
    event = dp_accounting.ComposedDpEvent(events)
    exact = min(float(epsilon), _exact_epsilon(release, float(delta)))
    names = {"agn": "AGN (Gaussian on M2 and M3)", "avn": "AVN (Gaussian on M2, l2 exponential-norm on M3)",
             "dp_tpm": "DP-TPM (Gaussian on M2, private power method on the whitened tensor)"}
    guarantee = PrivacyGuarantee(
        epsilon=float(epsilon),
        delta=float(delta),
        neighbouring=NEIGHBOURING,
        accountant=f"basic composition of the two stages (calibration {calibration!r}); epsilon_exact by "
        + ("exact Gaussian + pure composition" if mechanism == "avn" else "Gaussian DP"),
        n_releases=2 if releases is None else 1 + releases,
        mechanism=names[mechanism],
        noise_multiplier=sigma1 / sensitivity,
        epsilon_exact=exact,
        details={"n_documents": int(n_documents), "n_components": int(n_components),
                 "budget_split": float(budget_split),
                 **{key: value for key, value in asdict(release).items() if value is not None}},
        protected=PROTECTED,
        public=PUBLIC,
        dp_event=event,
    )  # fmt: skip
    return release, guarantee


def _exact_epsilon(release: SingleTopicRelease, delta: float) -> float:
    """The exact epsilon at ``delta`` of the noise actually added (GDP; Gaussian + pure for AVN)."""
    unit = release.sensitivity
    if release.mechanism == "avn":
        return gaussian_pure_epsilon(release.sigma_m2 / unit, release.epsilon_m3, delta)
    mu_squared = (unit / release.sigma_m2) ** 2
    if release.mechanism == "agn":
        mu_squared += (unit / release.sigma_m3) ** 2
    else:
        mu_squared += release.tpm_releases / release.tpm_multiplier**2
    # n composed Gaussians with multipliers z_i are mu-GDP with mu^2 = sum 1/z_i^2 (Dong, Roth & Su 2022)
    return gaussian_epsilon(1.0 / math.sqrt(mu_squared), delta)


class SingleTopicModel(PrivateEstimatorMixin, BaseEstimator):
    """Single-topic model (one topic per document) by whitening and orthogonal tensor decomposition.

    Non-private (``mechanism=None``) or differentially private under the replace-one-document
    relation with the AGN or AVN mechanism of Imtiaz & Sarwate (2018), or with their DP-TPM
    baseline (the private tensor power method of Wang & Anandkumar 2016 on the privately whitened
    tensor). See the module docstring for the pipeline and ``docs/single_topic.md`` for the
    derivations and experiments.

    Parameters
    ----------
    n_components : int
        Number of topics ``K`` (at most the vocabulary size).
    mechanism : {None, "agn", "avn", "dp_tpm"}, default None
        ``None`` fits without privacy (then ``epsilon`` must be ``None``); the others need
        ``epsilon`` and ``delta``.
    epsilon, delta : float, optional
        Total budget of the fit; ``0 < delta < 1``. AVN needs ``delta`` for its ``M2`` release.
    budget_split : float, default 0.5
        Fraction of ``epsilon`` (and, for AGN and DP-TPM, of ``delta``) spent on ``M2``; the slides
        leave the split open.
    calibration : {"analytic", "classic"}, default "analytic"
        Gaussian calibration: analytic (Balle & Wang 2018), or the slides' classic formula, which
        is valid only when each Gaussian release's epsilon is below 1 (refused otherwise). For
        DP-TPM ``"classic"`` also uses Wang & Anandkumar's composition constants.
    moments : {"first3", "all"}, default "first3"
        ``"first3"``: the slides' estimator from the first two / three words of each document
        (needs token sequences); ``"all"``: U-statistics over every word (same sensitivity,
        lower variance; works on count matrices).
    input : {"auto", "counts", "tokens"}, default "auto"
        How to read ``X`` in :meth:`fit` (see there).
    n_words : int, optional
        Vocabulary size ``d`` for token input (public; required there). For a count matrix it is
        the number of columns.
    noise_sampler : {"auto", "dense", "scalable"}, default "auto"
        ``"dense"``: the slides' algorithm literally (``d x d`` noise matrix, ``d x d x d`` noise
        tensor); ``"scalable"``: the same noise laws without any ``d^2`` or ``d^3`` array (module
        docstring); ``"auto"``: dense up to ``d = 100`` words.
    simplex : bool, default False
        Project each recovered topic onto the probability simplex (Duchi et al. 2008). The slides
        report the raw recovered vectors.
    n_restarts, n_iter : int, optional
        Restarts ``L`` and power steps ``R`` of the tensor power method (the private one for
        ``"dp_tpm"``; defaults as in :func:`~dptensor.power_method` and
        :func:`~dptensor.private_power_method`).
    random_state : None, int or numpy.random.Generator
        Public randomness only (restarts, eigensolver start); never the privacy noise.
    noise : None, "numpy", "opendp", InsecureTestNoise or NoiseSource
        Secret randomness of the noise (fresh OS entropy by default).
    ledger : object with ``charge(guarantee, description=...)``, optional
        Charged before the documents are read.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_words)
        Recovered topics ``a_k`` (rows), by decreasing ``weights_``.
    weights_ : ndarray of shape (n_components,)
        Recovered topic probabilities ``w_k = lambda_k^{-2}`` (not renormalised).
    guarantee_ : PrivacyGuarantee
        Private fits only.
    whitening_ : Whitening
        ``W``, ``(W^T)^+`` and the top eigenpairs of the (noisy) ``M2``.
    whitened_tensor_ : ndarray of shape (K, K, K)
        The released ``(M3 + E3)(W, W, W)`` (not kept for ``"dp_tpm"``, which releases only noisy
        power steps).
    decomposition_ : PowerMethodResult
        Eigenpairs of the whitened tensor.
    n_features_in_ : int
        ``d``.
    n_documents_ : int
        ``N``.

    Examples
    --------
    >>> from dptensor.datasets import make_single_topic_corpus
    >>> from dptensor.metrics import e_comp
    >>> corpus = make_single_topic_corpus(100_000, 10, 5, random_state=0)
    >>> model = SingleTopicModel(5, mechanism="agn", epsilon=1.0, delta=1e-6, n_words=10,
    ...                          random_state=0).fit(list(corpus.tokens))
    >>> model.guarantee_.epsilon, model.guarantee_.neighbouring
    (1.0, 'document')
    >>> bool(e_comp(corpus.topics.T, model.components_.T) < 0.2)
    True
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "mechanism": [None, StrOptions(set(MECHANISMS))],
        "budget_split": [Interval(Real, 0, 1, closed="neither")],
        "calibration": [StrOptions(set(CALIBRATIONS))],
        "moments": [StrOptions(set(MOMENTS))],
        "input": [StrOptions(set(INPUT_FORMS))],
        "n_words": [None, Interval(Integral, 1, None, closed="left")],
        "noise_sampler": [StrOptions(set(NOISE_SAMPLERS))],
        "simplex": ["boolean"],
        "n_restarts": [None, Interval(Integral, 1, None, closed="left")],
        "n_iter": [None, Interval(Integral, 1, None, closed="left")],
        "random_state": [None, Interval(Integral, 0, None, closed="left"), np.random.Generator,
                         np.random.RandomState],
        **PrivateEstimatorMixin._privacy_parameter_constraints,
    }

    def __init__(
        self,
        n_components: int,
        *,
        mechanism: str | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        budget_split: float = 0.5,
        calibration: str = "analytic",
        moments: str = "first3",
        input: str = "auto",
        n_words: int | None = None,
        noise_sampler: str = "auto",
        simplex: bool = False,
        n_restarts: int | None = None,
        n_iter: int | None = None,
        random_state: int | np.random.Generator | None = None,
        noise: object = None,
        ledger: object = None,
    ) -> None:
        self.n_components = n_components
        self.mechanism = mechanism
        self.epsilon = epsilon
        self.delta = delta
        self.budget_split = budget_split
        self.calibration = calibration
        self.moments = moments
        self.input = input
        self.n_words = n_words
        self.noise_sampler = noise_sampler
        self.simplex = simplex
        self.n_restarts = n_restarts
        self.n_iter = n_iter
        self.random_state = random_state
        self.noise = noise
        self.ledger = ledger

    def planned_guarantee(self, n_documents: int, n_words: int | None = None) -> PrivacyGuarantee:
        """The guarantee a private fit of ``N`` documents charges, before any document is read.

        From the parameters and the public ``N`` only (:func:`single_topic_release`, which ``fit``
        calls): a command can ask a ledger before it parses the corpus, and a search can plan its fits.

        Parameters
        ----------
        n_documents : int
            The public number of documents ``N``.
        n_words : int, optional
            The public vocabulary size (checked against ``n_components`` when given).

        Returns
        -------
        PrivacyGuarantee
            What :meth:`fit` would report as ``guarantee_`` (and charge).
        """
        self._validate_params()
        self._check_mechanism()
        if self.mechanism is None:
            raise ValueError("planned_guarantee needs a private fit (a mechanism and a budget)")
        k = int(self.n_components) if n_words is None else check_rank(self.n_components, int(n_words),
                                                                      "n_components")
        return single_topic_release(
            self.mechanism, self.epsilon, self.delta, int(n_documents), k, budget_split=self.budget_split,
            calibration=self.calibration, n_restarts=self.n_restarts, n_iter=self.n_iter,
        )[1]

    def _check_mechanism(self) -> None:
        """A budget without a mechanism, or a mechanism without a budget, is an error."""
        if self.mechanism is None and self.epsilon is not None:
            raise ValueError(
                "epsilon is given but mechanism=None would fit without privacy: choose mechanism='agn', "
                "'avn' or 'dp_tpm' for a private fit, or drop epsilon"
            )
        if self.mechanism is not None and self.epsilon is None:
            raise ValueError(
                f"mechanism={self.mechanism!r} needs a budget: pass epsilon=... and delta=..."
            )
        self._check_privacy_parameters()

    def __sklearn_tags__(self):  # noqa: ANN204 - sklearn.utils.Tags
        return declare_count_input(super().__sklearn_tags__())

    @underflow_ignored  # the same under any NumPy error state (dptensor._errstate)
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: object, y: object = None) -> SingleTopicModel:
        """Fit topics and weights to documents.

        Parameters
        ----------
        X : token sequences or a count matrix
            * a list (or tuple) of 1-D integer arrays: the word ids of each document **in order**
              (``moments="first3"`` reads the first three); ``n_words`` is required;
            * an ``(N, L)`` integer array of word ids, one row per document in order, with
              ``input="tokens"`` and ``n_words``;
            * a count matrix, documents x words: scipy.sparse (read as counts), or a dense array
              with ``input="counts"``. Counts carry no word order, so they need ``moments="all"``.

            Every document must have at least three tokens: a shorter one is an input error
            (checked before any budget is spent) that names how many and which rows when the fit
            is not private, and neither on a private fit. It is never dropped, which would change
            ``N``.
        y : ignored

        Returns
        -------
        self
        """
        self._check_mechanism()
        docs = check_documents(X, n_words=self.n_words, input=self.input, moments=self.moments,
                               private=self.mechanism is not None)
        k = check_rank(self.n_components, docs.n_words, "n_components")
        rng = check_random_state(self.random_state)
        for name in ("guarantee_", "whitened_tensor_"):
            self.__dict__.pop(name, None)
        release = source = None
        if self.mechanism is not None:
            # From parameters and public sizes (N, d, K) only; charged before the moments are read.
            release, guarantee = single_topic_release(
                self.mechanism, self.epsilon, self.delta, docs.n_documents, k,
                budget_split=self.budget_split, calibration=self.calibration,
                n_restarts=self.n_restarts, n_iter=self.n_iter,
            )  # fmt: skip
            source = self._begin_release(
                guarantee, f"SingleTopicModel fit ({self.mechanism}, K={k}; Imtiaz & Sarwate 2018)",
                n_public=docs.n_documents,
            )
        dense = self.noise_sampler == "dense" or (
            self.noise_sampler == "auto" and docs.n_words <= DENSE_SAMPLER_MAX_WORDS
        )
        whitening = self._whitening(docs, k, release, source, dense, rng)
        decomposition = self._decompose(docs, k, whitening, release, source, dense, rng)
        weights, components = unwhiten(whitening, decomposition.weights, decomposition.factors)
        order = np.argsort(-weights, kind="stable")
        components = components[:, order].T
        self.components_ = project_rows_to_simplex(components) if self.simplex else components
        self.weights_ = weights[order]
        self.whitening_ = whitening
        self.decomposition_ = decomposition
        self.n_features_in_ = docs.n_words
        self.n_documents_ = docs.n_documents
        return self

    def _whitening(
        self,
        docs: SingleTopicDocuments,
        k: int,
        release: SingleTopicRelease | None,
        source: NoiseSource | None,
        dense: bool,
        rng: np.random.Generator,
    ) -> Whitening:
        """``W`` from the top-``K`` eigenpairs of ``M2_hat`` (+ Analyze-Gauss noise in a private fit)."""
        d = docs.n_words
        if dense:
            matrix = dense_second_moment(docs, self.moments)
            if release is not None:
                matrix = add_symmetric_gaussian(matrix, release.sigma_m2, convention="unique", noise=source)
            values, vectors = top_eigenpairs(matrix, k, method="dense")
        else:
            operator = second_moment(docs, self.moments)
            if release is not None:
                noise_matrix = SymmetricGaussianOperator(d, release.sigma_m2, noise=source)
                operator = operator + noise_matrix.as_linear_operator()
            values, vectors = top_eigenpairs(
                operator, k, method="randomized", n_oversamples=N_OVERSAMPLES, n_power_iter=N_POWER_ITER,
                random_state=rng, lanczos_fallback=False,
            )  # fmt: skip
        # A noisy M2 can have non-positive eigenvalues among its top K: whiten with |sigma| (post-processing;
        # no Lanczos fallback, whose single products would regenerate the implicit noise each time).
        return Whitening.from_eigenpairs(values, vectors, require_positive=False)

    def _decompose(
        self,
        docs: SingleTopicDocuments,
        k: int,
        whitening: Whitening,
        release: SingleTopicRelease | None,
        source: NoiseSource | None,
        dense: bool,
        rng: np.random.Generator,
    ) -> PowerMethodResult:
        """The (noisy) whitened tensor and its eigenpairs."""
        W = whitening.matrix
        d = docs.n_words
        if release is not None and release.mechanism == "dp_tpm":
            # rho = the largest row norm of the public W, over every word of the vocabulary
            rho = float(np.max(np.linalg.norm(W, axis=1)))
            relation = WhitenedDocumentNeighbouring(rho, docs.n_documents)
            result = private_power_method(
                third_moment(docs, self.moments, W), k, epsilon=release.epsilon_m3, delta=release.delta_m3,
                n_restarts=release.tpm_restarts, n_iter=release.tpm_iter, accountant=release.tpm_accountant,
                neighbouring=relation, random_state=rng, noise=source,
            )  # fmt: skip
            return PowerMethodResult(
                result.weights, result.factors, result.n_iter, result.converged, result.extraction_order
            )
        if dense:
            moment = third_moment(docs, self.moments)
            if release is not None and release.mechanism == "agn":
                moment = add_symmetric_gaussian(moment, release.sigma_m3, convention="unique", noise=source)
            elif release is not None:
                unique = exponential_norm_noise(
                    d * (d + 1) * (d + 2) // 6, release.sensitivity, release.epsilon_m3, noise=source
                )
                moment = moment + symmetric_from_unique(unique, d, 3)
            # (M3 + E3)(W, W, W): contract one mode at a time
            tensor = np.tensordot(np.tensordot(np.tensordot(moment, W, (0, 0)), W, (0, 0)), W, (0, 0))
        else:
            tensor = third_moment(docs, self.moments, W)
            if release is not None:
                law = WhitenedNoiseLaw.from_whitening(W)
                if release.mechanism == "agn":
                    tensor = tensor + law.gaussian(release.sigma_m3, noise=source)
                else:
                    tensor = tensor + law.exponential_norm(
                        release.sensitivity, release.epsilon_m3, noise=source
                    )
        tensor = symmetrize(tensor)
        self.whitened_tensor_ = tensor
        return power_method(tensor, k, n_restarts=self.n_restarts, n_iter=self.n_iter, random_state=rng)
