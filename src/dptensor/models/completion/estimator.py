"""CP and Tucker tensor completion over the observed entries: ALS, the paper's SGD, and DP.

Wei, Li, Mao & Wang, *Applying Differential Privacy to Tensor Completion* (the paper below).
The models are objective (6) (CP)

    min_{A,B,C}  ||P_Omega(X - [[A, B, C]])||_F^2 + lambda (||A||_F^2 + ||B||_F^2 + ||C||_F^2)

and objective (7) (Tucker)

    min_{A,B,C,G}  ||P_Omega(X - [[G; A, B, C]])||_F^2 + lambda_o (||A||^2 + ||B||^2 + ||C||^2)
                   + lambda_g ||G||^2,

optionally with **offsets** -- a global mean ``mu`` and per-mode biases, ``x_hat_ijk = mu + beta1_i +
beta2_j + beta3_k + [[...]]_ijk``, penalised by ``reg_bias`` -- or the paper's per-day **bi-scaling**
(Section 5.2; :mod:`dptensor.models.completion._biscale`), and with *context modes* whose factor
rows are shrunk towards the all-ones row instead of zero (a day then modulates a user-item
interaction; see :mod:`dptensor.models.completion._als`). Nothing of the tensor's size is formed.

Solvers
-------
``solver="als"`` (the default without privacy and for ``privacy="als"``)
    Alternating least squares: with all factors but one fixed, each row of that factor (with its
    bias) is a ridge regression on the row's observed entries; the normal equations of all rows
    are formed at once and solved by one batched ``numpy.linalg.solve``
    (:mod:`dptensor.models.completion._als`). ``reg="auto"`` picks ``lambda`` along a decreasing
    path on a validation split drawn from ``random_state`` (public randomness), with early
    stopping, and refits on every entry; ``early_stopping=True`` keeps a fixed ``reg`` and stops
    on the validation split.
``solver="sgd"`` (the paper's algorithms)
    SGD visits each observed entry ``x_ijk`` once per epoch and moves the rows ``a_i, b_j, c_k``
    (and ``G``) along the gradient of that entry's term ``(x_ijk - x_hat_ijk)^2 + lambda
    (||a_i||^2 / n_i + ||b_j||^2 / n_j + ||c_k||^2 / n_k) [+ lambda_g ||G||^2 / |Omega|]`` with step
    ``learning_rate`` -- the paper's per-entry SGD (``n_i`` is the number of observed entries in
    row ``i``, so the terms sum to objective (6)/(7) exactly). It is executed in mini-batches: the
    entries of a batch are evaluated at the same parameters and their updates summed into the rows
    with one scatter (``np.bincount``), so a batch of size 1 is exactly the sequential algorithm and
    larger batches are its vectorised (Jacobi-style) form. To keep that form stable for large
    batches, the step of a row (and of the core) is capped at ``1 / h`` where ``h`` is the trace of
    its Gauss-Newton curvature over the batch (``2 sum ||d x_hat / d row||^2``); the cap depends only
    on the parameters and the public Omega, and rarely binds at the paper's step size.

Privacy modes
-------------
Every private fit names its neighbouring relation (``neighbouring=``, no default): ``"entry-value"``
(the value of one observed entry changes within the declared range; the shape and the set Omega of
observed indices are public) for every mode, or ``"user"`` (all ratings of one row of mode 0 --
their number, items, days and values -- may change; only the shape is public) for ``"als"``.

``privacy=None``
    Non-private.
``"input"`` -- Algorithm 1
    Laplace noise of scale ``Delta / epsilon`` with ``Delta = max - min`` on every observed value,
    optional clamping of the noisy values back to ``[min, max]`` (post-processing), then the
    non-private fit (SGD as in the paper, or ALS with ``solver="als"``; offsets, if asked for, are
    fitted to the perturbed values). ``epsilon``-DP **holds** when the value range is declared
    (``value_range``; values are clipped into it). Without it the range is taken from the data,
    as in the paper: the exact minimum and maximum are then released (in ``value_range_``, the
    guarantee's ``sensitivity`` and ``laplace_scale``), so that mode is one of the paper's
    unproven ones (opt-in, ``holds=False``).
``"gradient"`` -- Algorithm 2, *the paper's claim, which does not hold*
    Each entry's gradient of ``c_k`` is clipped to norm ``m = clip`` and gets exponential-norm
    noise ``p(n) ~ exp(-epsilon ||n|| / Delta)`` with ``Delta = 2m`` (Section 5.1 sets
    ``Delta^(G) = 2m``); ``A, B, G`` get exact gradients. The paper charges ``epsilon`` once for
    all ``n_epochs * |Omega|`` noisy steps (Theorem 2). Why the claim fails: (i) ``A``, ``B``
    (and ``G``) are updated with un-noised gradients of the data and released -- they are a
    deterministic function of every rating, so the output is not ``epsilon``-DP for any finite
    ``epsilon``; (ii) each entry's noisy gradient is released ``n_epochs`` times and every later
    step depends on it through the shared parameters, so even ``C`` alone would need
    ``n_epochs * epsilon`` by basic composition; (iii) the proof (eqs. 8-10) compares both
    neighbours at a common minimiser ``C*``, which SGD does not reach, and bounds the product over
    rows by one row's term.
``"output"`` -- Algorithm 3, *the paper's claim, which does not hold*
    Non-private SGD, then exponential-norm noise on each row of ``C`` with
    ``Delta = 2 tau L eta`` (``tau = n_epochs``, ``L = clip``, ``eta = learning_rate``). Lemma 3
    (Wu et al. 2017) needs a convex, ``L``-Lipschitz, ``beta``-smooth loss and ``eta <= 2/beta``;
    objectives (6)/(7) are multilinear (non-convex) with unbounded gradients, nothing enforces
    ``L``, and ``A, B, G`` are released without noise.
``"gradient_dpsgd"`` -- dptensor's gradient perturbation whose guarantee holds
    DP-SGD (Abadi et al. 2016) over *all* parameters (offsets included): each entry's gradient of
    its squared error with respect to ``(a_i, b_j, c_k[, G][, mu, beta_i, beta_j, beta_k])`` is
    clipped to l2 norm ``clip``; every batch adds ``N(0, (z * 2 clip)^2)`` to every coordinate;
    the regulariser's gradient depends only on the parameters (already private) and the public
    ``Omega``. Each epoch is a partition of the entries into batches drawn independently of the
    values, so an entry affects exactly one Gaussian release per epoch (sensitivity ``2 clip``
    for a changed value) and the privacy loss is exactly that of ``n_epochs`` composed Gaussian
    mechanisms: ``z`` from :func:`dptensor.privacy.composed_noise_multiplier` (``"exact"``:
    Gaussian DP composition with the analytic Gaussian mechanism). ``(epsilon, delta)``-DP.
``"output_clipped"`` -- dptensor's output perturbation whose assumptions are enforced
    Output perturbation needs a convex problem, which (6)/(7) is not jointly. So: (1) fit all
    factors on input-perturbed values (Algorithm 1, ``(1 - budget_split) epsilon``, declared value
    range); these are then public. (2) With ``A, B, G`` fixed, each row ``c_k`` solves a convex
    problem; refit ``C`` on the true values by per-row permutation SGD (one entry per row per
    step) on the Huberised loss -- each entry's gradient clipped to norm ``L = clip``, which is
    the gradient of a convex, ``L``-Lipschitz, ``beta_e``-smooth loss, ``beta_e = 2 ||w_e||^2 +
    2 lambda`` -- with step ``min(eta, 2 / beta_e)``. Lemma 3 then holds: a changed value moves
    only its row ``c_k``, by at most ``2 tau L eta``. (3) Add exponential-norm noise with
    ``Delta = 2 tau L eta`` to every row (``budget_split * epsilon``). Pure ``epsilon``-DP by
    sequential composition.
``"als"`` -- DP-ALS from noisy per-row sufficient statistics (both relations)
    Every ALS sweep's per-row statistics are released with Gaussian noise and the rows solved
    from them (:mod:`dptensor.models.completion._dp_als`, which states the sensitivities): under
    ``"entry-value"`` only right-hand sides are noised (Gram matrices are public), and the
    offsets come from one Laplace release of row sums whose per-entry weights and prior are
    built from the public pattern Omega (:mod:`dptensor.models.completion._pattern_offsets`):
    ``(epsilon, delta)``-DP by basic composition of the pure Laplace release with the exactly
    composed Gaussian ones (pure ``epsilon``-DP without factors). Under ``"user"`` Gram matrices
    and right-hand sides of the item-side modes are noised with each user's contribution
    bounded, and each user's own row is computed from their ratings and the released model
    (joint DP); ``(epsilon, delta)``-DP by exact Gaussian-DP composition.

The paper's modes whose claims fail (``"gradient"``, ``"output"``, and ``"input"`` without a
declared range) run only after ``dptensor.privacy.enable_features("unproven")``; their guarantee
reports ``holds=False`` and ``epsilon = inf`` (the paper's number is ``nominal_epsilon``).
Bi-scaling statistics are computed without noise, so ``offsets="biscale"`` is allowed on a
private fit only where it is post-processing (``"input"``, ``"output_clipped"``: it is fitted to
the perturbed values) or where the guarantee does not hold anyway (``"gradient"``, ``"output"``).

Side channels
-------------
Nothing a private fit lets a caller observe depends on the private values except through the
noise: values are clipped into the declared range before every stage that reads them; DP-SGD
clips each residual so that no value, however large, can overflow; private modes never compute
a training error on the private values (``history_`` stays empty), never early-stop or choose
``reg`` on them (their number of iterations is fixed), and the only divergence check looks at the
released, noisy parameters. Under ``"user"`` even the number of observed entries is private:
``n_observed_`` is ``None``. The public randomness (initialisation, shuffles, validation split)
comes from ``random_state``; the noise from ``noise`` (fresh OS entropy by default).

Where the code lives
--------------------
``fit`` reads a plan, charges it, computes, releases and post-processes. The plan -- every option,
release, noise multiplier and the guarantee, from the parameters and public sizes only -- is
:func:`~dptensor.models.completion.plan_completion` (:mod:`~dptensor.models.completion._plan`).
The SGD family is :mod:`~dptensor.models.completion._sgd`, the paper's unproven modes
:mod:`~dptensor.models.completion._paper`, ALS :mod:`~dptensor.models.completion._als` and DP-ALS
:mod:`~dptensor.models.completion._dp_als`.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.base import BaseEstimator, _fit_context

from dptensor._validation import (
    NotFittedError,
    RandomStateLike,
    check_entries,
    check_indices,
    check_random_state,
)
from dptensor.models._base import PrivateEstimatorMixin, forget_fitted_attributes
from dptensor.models._options import resolve_options
from dptensor.models.completion import _paper
from dptensor.models.completion._als import (
    AlsSettings,
    CompletionParameters,
    fit_als,
    fit_als_path,
    initial_parameters,
)
from dptensor.models.completion._biscale import BiScaling, fit_biscaling
from dptensor.models.completion._dp_als import DpAlsSettings, dp_als
from dptensor.models.completion._plan import (
    OFFSETS,
    PARAMETER_CONSTRAINTS,
    PRIVACY_MODES,
    SOLVERS,
    CompletionPlan,
    plan_completion,
)
from dptensor.models.completion._sgd import fit_sgd, perturb_values
from dptensor.models.completion.options import OPTION_NAMES, CompletionOptions
from dptensor.models.completion.recommend import (
    Recommendations,
    check_day,
    check_top_n,
    check_users,
    top_items,
)
from dptensor.privacy import HeldOutUtilityWarning, NoiseSource, begin_release
from dptensor.privacy.noise import NoiseLike
from dptensor.privacy.release import Ledger
from dptensor.privacy.warnings import check_privacy_parameters

__all__ = ["OFFSETS", "PRIVACY_MODES", "SOLVERS", "TensorCompletion", "compare_with_mean", "rmse"]


def _init_scale(spread: float, ranks: tuple[int, int, int] | None) -> float:
    """ALS's default start: factor entries of size ``(spread / sqrt(rank))^(1/3)``, so that the
    starting model's values have about the data's spread (too small a start lets the penalty pull
    every factor to the zero point, which ALS cannot leave)."""
    return ((spread or 1.0) / math.sqrt(max(ranks) if ranks else 1)) ** (1.0 / 3.0)


# ---------------------------------------------------------------------------------------------
# The estimator
# ---------------------------------------------------------------------------------------------


class TensorCompletion(PrivateEstimatorMixin, BaseEstimator):
    """CP or Tucker completion of a three-way tensor from its observed entries, optionally DP.

    Implements Wei, Li, Mao & Wang, *Applying Differential Privacy to Tensor Completion*:
    objectives (6) (CP) and (7) (Tucker) over the observed entries, with offsets (global mean and
    per-mode biases, or the paper's bi-scaling), fitted by ALS (default) or by the paper's SGD,
    with input (Algorithm 1), gradient (Algorithm 2) and output (Algorithm 3) perturbation, and
    three modes whose guarantees hold (``"gradient_dpsgd"``, ``"output_clipped"``, ``"als"``).
    See the module docstring for each mode's mechanism, its guarantee and what it protects.

    The estimator follows scikit-learn's conventions (``get_params``, ``set_params``, ``clone``)
    with ``fit(indices, values, shape)``; :meth:`score` is the *negative* RMSE (greater is
    better, as scikit-learn's model selection expects).

    Parameters
    ----------
    rank : int, tuple of three ints, or None
        CP rank ``d``; for Tucker the core size (an int ``d`` means ``d x d x d`` as in the paper).
        ``None``: no factors, the offsets alone (e.g. the bias baseline).
    model : {"cp", "tucker"}, default "cp"
    privacy : {None, "input", "gradient", "output", "gradient_dpsgd", "output_clipped", "als"}
    neighbouring : {"entry-value", "user"}, optional
        The neighbouring relation of a private fit -- required when ``privacy`` is set (there is
        no default: the two protect different things). ``"user"`` only with ``privacy="als"``.
    epsilon : float, optional
        Privacy budget, required (``> 0``) when ``privacy`` is set; an error without it.
    delta : float, optional
        For ``"gradient_dpsgd"`` and ``"als"``; default ``min(1e-5, 1 / (10 n))`` under
        ``"entry-value"`` (``n`` observed entries, public there) and ``min(1e-6, 1 / (10 u))``
        under ``"user"`` (``u = shape[0]`` users, public there): well below ``1 / n``.
    solver : {"auto", "als", "sgd"}, default "auto"
        ``"auto"``: ALS without privacy and for ``"als"``, SGD for the paper's modes.
    offsets : {"auto", "none", "mean", "biases", "biscale"}, default "auto"
        ``"auto"``: ``"biases"`` with ALS, ``"gradient_dpsgd"`` and ``"als"``; ``"none"`` for the
        paper's SGD modes (exactly as the paper).
    value_range : (float, float), optional
        Declared ``[min, max]`` of the values; values are clipped into it and predictions are
        clamped to it. Required for ``"output_clipped"`` and ``"als"``.
    random_state : None, int or Generator
        Public randomness: initialisation, shuffles, the validation split.
    noise : None, "numpy", "opendp" or insecure_test_noise(seed)
        Secret randomness for the privacy noise (:func:`~dptensor.privacy.resolve_noise`):
        fresh OS entropy by default, never derived from ``random_state``.
    ledger : BudgetLedger, optional
        Charged with the guarantee before the private values are read.
    verbose : bool, default False
        A progress bar over the sweeps / epochs (on standard error).
    options : CompletionOptions, optional
        The solvers' and mechanisms' tuning (the regularisation, iterations, step, batch size, clipping
        bound, budget split, ...; :class:`~dptensor.models.completion.CompletionOptions`, which says what
        each option means in each mode); ``None``: its defaults, resolved per mode at fit. scikit-learn
        reaches them as ``options__reg`` etc. (``set_params``, ``GridSearchCV``).

    Attributes
    ----------
    factors_ : list of three ndarrays ``(n_m, rank_m)``, or None
    core_ : ndarray or None
        Tucker core ``G`` (``None`` for CP).
    mean_ : float
        Global offset ``mu`` (0 without offsets).
    biases_ : list of three ndarrays, or None
    biscaling_ : BiScaling or None
    guarantee_ : PrivacyGuarantee or None
        The privacy statement (``None`` when ``privacy`` is ``None``).
    solver_, offsets_, context_modes_ : the resolved choices
    shape_ : tuple of three ints
    n_observed_ : int or None
        ``None`` under ``neighbouring="user"`` (the count is private there).
    n_iter_ : int
        ALS sweeps / SGD epochs run.
    reg_ : float
        The ``lambda`` used (the chosen one with ``reg="auto"``).
    reg_bias_ : float
        The biases' penalty used (with ``reg="auto"`` and no ``reg_bias`` given: the chosen
        ``reg``). :func:`~dptensor.models.completion.fold_in_users` reads it with ``reg_``.
    max_ratings_ : int or None
        The contribution bound used by ``"als"`` under ``"user"`` (``max_ratings`` resolved); ``None``
        elsewhere.
    reg_path_ : list of dict
        ``reg="auto"``: validation RMSE of each ``lambda`` tried.
    noise_stds_ : list of float
        ``"als"``: the noise standard deviation of each release.
    spectral_start_ : ndarray ``(n_items, rank)`` or None
        ``"als"`` under ``"user"`` with a spectral start: the item factors' start, the noisy
        covariance release's top eigenvectors scaled by their eigenvalues (post-processing of that
        release; what the end-to-end audit scores it by). ``None`` otherwise.
    perturbed_values_, input_noise_scale_, value_range_ : ndarray, float, (float, float)
        ``"input"`` / ``"output_clipped"``: the Laplace-perturbed training values (private: they
        are the mechanism's output), the Laplace scale ``Delta / epsilon`` and the range used.
    output_sensitivity_ : float
        ``"output"`` / ``"output_clipped"``: ``Delta = 2 tau L eta``.
    noise_std_ : float
        ``"gradient_dpsgd"``: per-coordinate Gaussian standard deviation ``z * 2 clip``.
    history_ : list of float
        Training RMSE after each epoch / sweep (on the values the solver saw), for non-private
        fits and under ``"input"`` (where the solver sees only perturbed values). Empty for the
        other private modes: there it would be computed from the private values without noise,
        which no guarantee covers.

    Examples
    --------
    >>> from dptensor.datasets import make_low_rank_completion
    >>> from dptensor.models import TensorCompletion
    >>> seen = make_low_rank_completion((40, 30, 1), 2, random_state=0).observed
    >>> ratings = 1 + 4 * seen.values.clip(0, 1)                # pretend they are 1..5 ratings
    >>> model = TensorCompletion(2, privacy="als", neighbouring="user", epsilon=1.0,
    ...                          value_range=(1, 5), random_state=0, verbose=False)
    >>> model = model.fit(seen.indices, ratings, seen.shape)
    >>> model.guarantee_.neighbouring, model.guarantee_.holds
    ('user', True)
    >>> model.predict([[0, 3, 0]]).shape                         # user 0's rating of item 3 (theirs alone)
    (1,)
    """

    _parameter_constraints: dict = {
        **{name: rule for name, rule in PARAMETER_CONSTRAINTS.items() if name not in OPTION_NAMES},
        "options": [None, CompletionOptions],
    }
    _options_class = CompletionOptions

    def __init__(
        self,
        rank: int | tuple[int, int, int] | None,
        *,
        model: str = "cp",
        privacy: str | None = None,
        neighbouring: str | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        solver: str = "auto",
        offsets: str = "auto",
        value_range: tuple[float, float] | None = None,
        random_state: RandomStateLike = None,
        noise: NoiseLike = None,
        ledger: Ledger | None = None,
        verbose: bool = False,
        options: CompletionOptions | None = None,
    ) -> None:
        self.rank = rank
        self.model = model
        self.privacy = privacy
        self.neighbouring = neighbouring
        self.epsilon = epsilon
        self.delta = delta
        self.solver = solver
        self.offsets = offsets
        self.value_range = value_range
        self.random_state = random_state
        self.noise = noise
        self.ledger = ledger
        self.verbose = verbose
        self.options = options

    def __setstate__(self, state: dict) -> None:
        """Unpickle; a model pickled before its tuning moved into ``options`` (its knobs flat) gets
        them as its :class:`CompletionOptions`, so that an old file loads and refits alike."""
        flat = {name: state.pop(name) for name in OPTION_NAMES if name in state}
        if flat and state.get("options") is None:
            state["options"] = CompletionOptions(**flat)
        state.setdefault("options", None)
        super().__setstate__(state)

    # ------------------------------------------------------------------ fitting
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, indices: object, values: object, shape: object) -> TensorCompletion:
        """Fit the model to observed entries.

        The fit reads its plan (:func:`~dptensor.models.completion.plan_completion`: every option,
        release and the guarantee, from the parameters and the public sizes), charges it, then
        computes, releases and post-processes.

        Parameters
        ----------
        indices : array-like of int, shape (n, 3)
            Zero-based coordinates of the observed entries (public under ``"entry-value"``, see
            the module docstring).
        values : array-like of float, shape (n,)
        shape : sequence of three ints

        Returns
        -------
        self
        """
        # the options checked (and their defaults taken) before anything is read or charged
        options = resolve_options(self.options, CompletionOptions, "TensorCompletion")
        params = {**self.get_params(deep=False), **options.get_params(deep=False)}
        del params["options"]
        # Under the user relation a data set with no ratings is a neighbour (of one user's ratings): it fits.
        user_relation = self.privacy == "als" and self.neighbouring == "user"
        indices, values, shape = check_entries(indices, values, shape, allow_empty=user_relation)
        n = values.shape[0]
        # plan: the number of entries is public except under the user relation; only the paper's
        # unproven input perturbation without a declared range reads (and releases) the data's range
        paper = self.privacy == "input" and self.value_range is None
        paper_range = _paper.data_range(values) if paper else None
        plan = plan_completion(params, shape, None if user_relation else n,
                               data_range=paper_range)
        rng = check_random_state(self.random_state)
        forget_fitted_attributes(self)  # nothing of an earlier fit stays (e.g. a non-private one's RMSE)
        if plan.value_range is not None:
            # every stage reads the values only inside the declared range
            values = np.clip(values, *plan.value_range)
        # charge: before anything is fitted, so that a refused charge leaves the model unfitted
        guarantee, source = plan.guarantee, None
        if guarantee is not None:
            # public sizes only: n observed entries under "entry-value", the users (shape[0]) under "user"
            user = plan.relation == "user"
            check_privacy_parameters(  # the delta given (the defaults are 1/10 of 1/n or less)
                self.epsilon, self.delta, n_public=shape[0] if user else n,
                unit="users" if user else "observed entries", who="TensorCompletion",
            )
            guarantee, source = begin_release(
                guarantee, self.noise, ledger=self.ledger,
                description=f"TensorCompletion {self.model} rank {self.rank}, privacy={self.privacy!r}, "
                            f"neighbouring={plan.relation!r}",
            )
        self.shape_ = shape
        self.n_observed_ = None if plan.relation == "user" else n
        self.max_ratings_ = int(plan.max_ratings) if user_relation else None
        self.solver_, self.offsets_, self.context_modes_ = plan.solver, plan.offsets, plan.context_modes
        self.prediction_range_ = plan.value_range
        self.history_: list[float] = []
        self.reg_path_: list[dict] = []
        self.noise_stds_: list[float] = []
        self.biscaling_: BiScaling | None = None
        self.spectral_start_: np.ndarray | None = None
        self.reg_ = plan.reg
        # compute and release (DP-ALS's releases are its sweeps; Algorithm 1's come first)
        if plan.privacy == "als":
            params = self._fit_dp_als(indices, values, shape, plan, rng, source)
        else:
            perturbed = plan.privacy in ("input", "output_clipped")
            train = self._input_perturbation(plan, values, source) if perturbed else values
            if plan.solver == "als":
                params = self._fit_als(indices, train, shape, plan, rng)
            else:
                params = self._fit_sgd(indices, values, train, shape, plan, rng, source)
        # the biases' penalty in effect (reg="auto" ties it to the chosen reg unless it was given)
        self.reg_bias_ = float(self.reg_) if plan.reg_auto and plan.tie_reg_bias else float(plan.reg_bias)
        self.factors_ = params.factors
        self.core_ = params.core
        self.mean_ = float(params.mean)
        self.biases_ = params.biases
        self.guarantee_ = guarantee
        return self

    def _biscale(
        self, plan: CompletionPlan, indices: np.ndarray, values: np.ndarray, shape: tuple
    ) -> np.ndarray:
        """Fit the paper's bi-scaling to ``values`` (the values the solver sees) and standardise them."""
        if plan.offsets != "biscale":
            return values
        self.biscaling_ = fit_biscaling(indices, values, shape)
        return self.biscaling_.transform(indices, values)

    def _fit_als(
        self, indices: np.ndarray, values: np.ndarray, shape: tuple, plan: CompletionPlan,
        rng: np.random.Generator,
    ) -> CompletionParameters:
        """Non-private ALS (or ALS on input-perturbed values): ``reg="auto"`` path or a fixed ``reg``."""
        values = self._biscale(plan, indices, values, shape)
        inner = plan.inner_offsets
        ranks = plan.ranks
        scale = plan.init_scale if plan.init_scale is not None else _init_scale(float(np.std(values)), ranks)
        start = initial_parameters(plan.model, shape, ranks, inner, plan.context_modes, scale, rng,
                                   mean=float(np.mean(values)) if inner in ("mean", "biases") else 0.0)
        # on perturbed values ("input") the number of sweeps is fixed, like every private fit's (tol)
        settings = AlsSettings(1.0 if plan.reg_auto else plan.reg, plan.reg_bias, plan.reg_core,
                               plan.context_modes, plan.max_iter, plan.tol, plan.n_iter_no_change,
                               None if plan.offsets == "biscale" else plan.value_range)
        fit_mean = inner in ("mean", "biases")
        n = values.shape[0]
        with self._progress("ALS sweeps") as progress:
            if plan.reg_auto or plan.early_stopping:
                # the validation split is public randomness (random_state)
                held = np.zeros(n, dtype=bool)
                held[rng.permutation(n)[:max(1, int(round(plan.validation_fraction * n)))]] = True
            if plan.reg_auto:
                path = fit_als_path(start, indices, values, shape, settings, fit_mean=fit_mean,
                                    validation_mask=held, tie_bias=plan.tie_reg_bias,
                                    tie_core=plan.tie_reg_core, progress=progress)
                result, self.reg_, self.reg_path_ = path.result, path.reg, path.path
            elif plan.early_stopping:
                result = fit_als(start, indices[~held], values[~held], shape, settings, fit_mean=fit_mean,
                                 validation=(indices[held], values[held]), progress=progress)
            else:
                result = fit_als(start, indices, values, shape, settings, fit_mean=fit_mean,
                                 progress=progress)
        self.n_iter_ = result.n_iter
        self.history_ = list(result.train_rmse)
        self.validation_rmse_ = list(result.validation_rmse)
        return result.params

    def _fit_dp_als(
        self,
        indices: np.ndarray,
        values: np.ndarray,
        shape: tuple,
        plan: CompletionPlan,
        rng: np.random.Generator,
        source: NoiseSource,
    ) -> CompletionParameters:
        """DP-ALS: the releases of the plan, from a data-independent start."""
        low, high = plan.value_range
        ranks = plan.ranks
        scale = plan.init_scale if plan.init_scale is not None else _init_scale((high - low) / 4.0, ranks)
        params = initial_parameters(plan.model, shape, ranks, plan.offsets, plan.context_modes, scale, rng)
        settings = DpAlsSettings(plan.relation, (low, high), plan.reg, plan.reg_bias, plan.reg_core,
                                 plan.context_modes, plan.offsets, plan.max_ratings, plan.clip)
        with self._progress("DP-ALS releases") as progress:
            self.noise_stds_ = dp_als(params, indices, values, shape, plan.dp_als, settings, source, progress)
        if "spectrum" in plan.dp_als.steps:  # the anchor the item rows shrink to: the spectral start
            self.spectral_start_ = params.anchors[1].copy()
        self.n_iter_ = plan.max_iter
        arrays = ([] if params.factors is None else params.factors) + (params.biases or [])
        if params.core is not None:
            arrays.append(params.core)
        if not all(np.all(np.isfinite(a)) for a in arrays):  # released parameters only: post-processing
            raise FloatingPointError("DP-ALS produced non-finite parameters; raise reg")
        return params

    def _fit_sgd(
        self,
        indices: np.ndarray,
        values: np.ndarray,
        train: np.ndarray,
        shape: tuple,
        plan: CompletionPlan,
        rng: np.random.Generator,
        source: NoiseSource | None,
    ) -> CompletionParameters:
        """The paper's SGD and its perturbations (and DP-SGD): :func:`~._sgd.fit_sgd` on ``train``.

        ``values`` are the (clipped) true values, ``train`` what SGD fits (the values, or their
        input perturbation), bi-scaled here when the plan says so.
        """
        self.n_iter_ = plan.n_epochs
        if plan.privacy == "gradient_dpsgd":
            self.noise_std_ = plan.release("gradient sums").noise_scale
        train = self._biscale(plan, indices, train, shape)
        with self._progress("SGD epochs") as progress:
            params = fit_sgd(plan, indices, values, train, shape, rng, source, biscaling=self.biscaling_,
                             history=self.history_, progress=progress)
        if plan.privacy in ("output", "output_clipped"):
            self.output_sensitivity_ = plan.release("rows of C").sensitivity
        return params

    def _input_perturbation(
        self, plan: CompletionPlan, values: np.ndarray, source: NoiseSource
    ) -> np.ndarray:
        """Algorithm 1 (:func:`~._sgd.perturb_values`), recording its output and parameters."""
        noisy = perturb_values(plan, values, source)
        self.input_noise_scale_ = plan.release("values").noise_scale
        self.perturbed_values_ = noisy
        self.value_range_ = plan.input_range
        return noisy

    # ------------------------------------------------------------------ helpers
    def _progress(self, desc: str):
        """A context manager yielding ``tick(k)`` (a tqdm bar when ``verbose``, else a no-op)."""
        import contextlib

        if not self.verbose:
            return contextlib.nullcontext(None)
        from dptensor._progress import progress_bar

        @contextlib.contextmanager
        def bar():
            with progress_bar(desc=desc, unit="step") as handle:
                yield handle.update

        return bar()

    # ------------------------------------------------------------------ prediction
    def _check_fitted(self) -> None:
        if not hasattr(self, "factors_"):
            raise NotFittedError("this TensorCompletion is not fitted yet; call fit first")

    def predict(self, indices: object) -> np.ndarray:
        """Completed values at ``indices`` (``(n, 3)`` zero-based, inside the fitted shape).

        Offsets and bi-scaling are applied, and the predictions are clamped into the declared
        ``value_range`` when there is one.
        """
        self._check_fitted()
        indices = check_indices(indices, self.shape_, allow_empty=True)
        if indices.shape[0] == 0:
            return np.zeros(0)
        return self._clamped(self._completed(indices))

    def _completed(self, indices: np.ndarray) -> np.ndarray:
        """The completed values at checked ``indices``, before clamping into the value range."""
        params = CompletionParameters(self.model, self.factors_, self.core_, self.mean_, self.biases_)
        out = params.predict(indices)
        if self.biscaling_ is not None:
            out = self.biscaling_.inverse(indices, out)
        return out

    def _clamped(self, values: np.ndarray) -> np.ndarray:
        return values if self.prediction_range_ is None else np.clip(values, *self.prediction_range_)

    def recommend(
        self, n: int | None = None, *, users: object = None, exclude: object = None, day: int | None = None
    ) -> Recommendations:
        """Each user's ``n`` highest-predicted items among those they have not rated.

        Items are ranked by the completed value at ``(user, item, day)`` before clamping (clamping
        would tie the items predicted above the range's top) and reported clamped, as
        :meth:`predict` gives them (:mod:`dptensor.models.completion.recommend`).

        Parameters
        ----------
        n : int, optional
            Items per user, between 1 and the number of items; default 10 (every item of a smaller
            catalogue).
        users : array-like of int, optional
            Distinct training users (rows of mode 0); default every user of the fitted shape.
        exclude : array-like of int, shape (m, 3), optional
            Entries whose ``(user, item)`` pair is never recommended, any day: usually the training
            indices, so that no one is recommended what they have rated.
        day : int, optional
            The third mode's index to rank at; default the last (the most recent day; ``0`` for a
            matrix).

        Returns
        -------
        Recommendations
            ``items`` and ``predictions`` of shape ``(len(users), n)``; ``-1`` and ``NaN`` in the
            slots left over when a user has fewer than ``n`` unrated items.

        Notes
        -----
        Under ``neighbouring="user"`` (joint DP) user ``u``'s list comes from ``u``'s own row of the
        model and own rated items: give it to ``u`` alone, as ``u``'s predictions.

        These lists rank by predicted *rating*, not by what a user is likely to choose: on
        MovieLens-100K (20% of each user's ratings held out, relevant = rating >= 4) their NDCG@10
        is 0.82x the most popular items' at rank 10, 0.20x under user-level DP at epsilon 1. For
        top-N lists use :class:`dptensor.Recommender` / :class:`dptensor.PrivateRecommender`
        (2.08x and 0.87x popularity there; docs/recommend.md).

        Examples
        --------
        >>> from dptensor.datasets import make_low_rank_completion
        >>> from dptensor.models.completion import TensorCompletion
        >>> seen = make_low_rank_completion((30, 20, 1), 2, random_state=0).observed
        >>> model = TensorCompletion(2, random_state=0, verbose=False)
        >>> top = model.fit(seen.indices, seen.values, seen.shape).recommend(3, exclude=seen.indices)
        >>> top.items.shape
        (30, 3)
        """
        self._check_fitted()
        n_users, n_items, n_days = self.shape_
        n = check_top_n(n, n_items)
        day = check_day(day, n_days)
        users = np.arange(n_users, dtype=np.int64) if users is None else check_users(users, n_users)
        excluded = None
        if exclude is not None:
            excluded = check_indices(exclude, self.shape_, "exclude", allow_empty=True)[:, :2]
        return top_items(self._completed, users, n_items, n, excluded=excluded, day=day,
                         value_range=self.prediction_range_)

    def score(self, indices: object, values: object) -> float:
        """Negative RMSE of the predictions at ``indices`` (greater is better, as in scikit-learn)."""
        self._check_fitted()
        indices, values, _ = check_entries(indices, values, self.shape_)
        return -rmse(values, self.predict(indices))

    def to_dense(self) -> np.ndarray:
        """The whole completed tensor (only for small shapes), as :meth:`predict` gives it."""
        self._check_fitted()
        cells = np.indices(self.shape_).reshape(3, -1).T
        return self.predict(cells).reshape(self.shape_)


def rmse(truth: object, estimate: object) -> float:
    """Root mean square error ``sqrt(sum (x - x_hat)^2 / |Omega|)`` (Wei et al., Section 5)."""
    truth = np.asarray(truth, dtype=np.float64)
    estimate = np.asarray(estimate, dtype=np.float64)
    if truth.shape != estimate.shape:
        raise ValueError(f"truth and estimate differ in shape: {truth.shape} vs {estimate.shape}")
    if truth.size == 0:
        raise ValueError("truth is empty")
    return float(np.sqrt(np.mean((truth - estimate) ** 2)))


def compare_with_mean(truth: object, estimate: object, *, advice: str = "") -> tuple[float, float]:
    """Held-out RMSE of ``estimate`` and of the best constant; warn when the estimate is worse.

    The baseline predicts every held-out value by the held-out values' own mean, so its RMSE (their
    standard deviation) is at most that of the training mean (the "mean predictor" of Wei et al.,
    Section 5) -- a completion above it is certainly worse than predicting the mean. A private fit
    at a small ``epsilon`` can be (input and output perturbation, DP-SGD without a declared value
    range). The check reads only the held-out values and the released predictions, never the
    training data, so it is as public as the held-out RMSE itself.

    Returns
    -------
    rmse, baseline_rmse : float

    Warns
    -----
    HeldOutUtilityWarning
        When ``rmse > baseline_rmse``, ending with ``advice`` (what to change).
    """
    truth = np.asarray(truth, dtype=np.float64)
    error = rmse(truth, estimate)
    baseline = rmse(truth, np.full_like(truth, truth.mean()))
    if error > baseline:
        warnings.warn(
            f"held-out RMSE {error:.4g} is worse than predicting one constant for every entry (the "
            f"held-out mean: RMSE {baseline:.4g}); the predictions are useless as they stand"
            + (f"; {advice}" if advice else ""),
            HeldOutUtilityWarning, stacklevel=2,
        )
    return error, baseline
