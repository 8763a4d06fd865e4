"""Tuning of DP variational LDA, apart from what a user chooses: :class:`DPVIOptions`.

:class:`~dptensor.models.topics.dp_vi.DPVariationalLDA` takes what a user of the model chooses in
its constructor (the number of topics, the priors, the budget, the seed, the ledger); the knobs of
the method -- the minibatches, the clipping norm, the length bound, the step sizes, the E-step's
stopping rule and the start -- live here, reached by scikit-learn as nested parameters::

    model = DPVariationalLDA(5, epsilon=1.0, delta=1e-6, options=DPVIOptions(clip=3.0))
    model.set_params(options__n_passes=20)          # GridSearchCV's {"options__clip": [1, 2, 4]}

The command line and model files name the settings flatly; :func:`dptensor.models._options.
build_estimator` puts each where it lives (``build_estimator(DPVariationalLDA, clip=3.0)``).
"""

from __future__ import annotations

from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, StrOptions

from dptensor.models._options import Options
from dptensor.models.topics._dp_vi_start import DEFAULT_START_SHARE

__all__ = ["DPVIOptions"]


class DPVIOptions(Options):
    """The method's settings of :class:`~dptensor.models.topics.dp_vi.DPVariationalLDA`.

    Every default is that of the estimator before its options moved here (issue 52). The private
    fit's defaults depend on the accountant: the exact one of ``DPVariationalLDA``, or the paper's
    of the research wing's ``PaperDPVariationalLDA(accountant="paper")``.

    Parameters
    ----------
    batch_size : int, optional
        ``S``: the expected (exact accountant, Poisson sampling) or exact (the paper's accountant,
        non-private) minibatch size. Default: every document (``S = N``, full batch) for a private
        fit with the exact accountant, ``DEFAULT_BATCH_SIZE = 128`` otherwise (as scikit-learn).
        Above ``N`` it means the full batch.
    n_passes : int, default 10
        Passes over the corpus: ``T = n_passes * ceil(N / S)`` steps.
    clip : float, optional
        ``C``, the Frobenius norm each document's statistics are clipped to. Default (private):
        ``DEFAULT_CLIP = 2``, chosen for real text (a document of ``n`` distinct words assigned
        to one topic has norm ``sqrt(n)``); ``0.1 * max_doc_length`` (the authors' rule) with the
        paper's accountant. It is a public parameter: never derived from the data.
    max_doc_length : int, optional
        A declared, public maximum document length ``L``. Documents with more tokens are scaled
        down to ``L`` tokens (counts times ``L / length``, a per-document map, computed so that
        no finite count overflows: :func:`~dptensor.models.topics._dp_vi_steps.
        bound_document_lengths`), so the declaration holds. Private fits always enforce a bound:
        ``L = 500`` (``DEFAULT_MAX_DOC_LENGTH``) unless given; it is declared in the guarantee's
        details. Non-private fits truncate only when it is given.
    learning_offset, learning_decay : float, default 10 and 0.7
        ``tau_0`` and ``kappa`` of ``rho_t = (tau_0 + t)^-kappa``, ``t = 1, 2, ...``
        (scikit-learn's defaults; the earlier 1024 made the non-private fit about 20% worse in
        held-out perplexity on a real corpus).
    max_doc_update_iter : int, default 100
    mean_change_tol : float, default 1e-3
        E-step stopping rule (per document).
    init : {"random", "moments"}, default "random"
        The starting ``lambda``: ``Gamma(100, 1/100)`` noise (Hoffman et al.), or ``"moments"``:
        the spectral moment estimate (:class:`~dptensor.models.topics.private_spectral.
        PrivateSpectralLDA` with ``refine=None`` on ``init_share`` of the budget's ``mu^2`` when
        private, :class:`~dptensor.models.topics.spectral.SpectralLDA` otherwise), as
        ``eta + N phi`` (:mod:`dptensor.models.topics._dp_vi_start`; one guarantee, composed
        exactly). Private: full batch and the exact accountant only. On Debian package
        descriptions (``V = 2000``, ``K = 10``, ``epsilon = 1``) it kept the perplexity (768.7
        against 770.2) and raised NPMI from 0.076 to 0.190; on WordNet glosses (median 4 tokens)
        perplexity rose from 1285 to 1305: not the default.
    init_share : float, default 0.3
        ``init="moments"``, private: the moments' share of ``mu^2``, in ``(0, 1)``.
    """

    _parameter_constraints: dict = {
        "batch_size": [None, Interval(Integral, 1, None, closed="left")],
        "n_passes": [Interval(Integral, 1, None, closed="left")],
        "clip": [None, Interval(Real, 0, None, closed="neither")],
        "max_doc_length": [None, Interval(Integral, 1, None, closed="left")],
        "learning_offset": [Interval(Real, 0, None, closed="left")],
        "learning_decay": [Interval(Real, 0, 1, closed="both")],
        "max_doc_update_iter": [Interval(Integral, 1, None, closed="left")],
        "mean_change_tol": [Interval(Real, 0, None, closed="left")],
        "init": [StrOptions({"random", "moments"})],
        "init_share": [Interval(Real, 0, 1, closed="neither")],
    }

    def __init__(
        self,
        *,
        batch_size: int | None = None,
        n_passes: int = 10,
        clip: float | None = None,
        max_doc_length: int | None = None,
        learning_offset: float = 10.0,
        learning_decay: float = 0.7,
        max_doc_update_iter: int = 100,
        mean_change_tol: float = 1e-3,
        init: str = "random",
        init_share: float = DEFAULT_START_SHARE,
    ) -> None:
        self.batch_size = batch_size
        self.n_passes = n_passes
        self.clip = clip
        self.max_doc_length = max_doc_length
        self.learning_offset = learning_offset
        self.learning_decay = learning_decay
        self.max_doc_update_iter = max_doc_update_iter
        self.mean_change_tol = mean_change_tol
        self.init = init
        self.init_share = init_share
