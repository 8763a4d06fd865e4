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
"""

from __future__ import annotations

import math
import warnings
from numbers import Integral, Real
from typing import Any

import dp_accounting
import numpy as np
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions

from dptensor._validation import (
    NotFittedError,
    RandomStateLike,
    check_entries,
    check_epsilon_delta,
    check_indices,
    check_positive_int,
    check_random_state,
    check_real,
)
from dptensor.models._base import PrivateEstimatorMixin
from dptensor.models.completion._als import (
    AlsSettings,
    CompletionParameters,
    fit_als,
    fit_als_path,
    initial_parameters,
)
from dptensor.models.completion._biscale import BiScaling, fit_biscaling
from dptensor.models.completion._dp_als import RELATIONS, DpAlsSettings, dp_als, plan_releases
from dptensor.models.completion._kernels import (
    clip_residuals,
    core_gradient,
    directions,
    row_steps,
    scatter_add,
)
from dptensor.privacy import (
    EpsilonDeltaDpEvent,
    HeldOutUtilityWarning,
    NoiseSource,
    PrivacyGuarantee,
    begin_release,
    composed_gaussian_epsilon,
    composed_gaussian_holds,
    composed_noise_multiplier,
    exponential_norm_noise,
    laplace_scale,
    require_unproven,
)
from dptensor.privacy.noise import NoiseLike, check_noise
from dptensor.privacy.release import Ledger
from dptensor.privacy.warnings import check_privacy_parameters

MODELS = ("cp", "tucker")
PRIVACY_MODES = (None, "input", "gradient", "output", "gradient_dpsgd", "output_clipped", "als")
SOLVERS = ("auto", "als", "sgd")
OFFSETS = ("auto", "none", "mean", "biases", "biscale")
#: Modes that run the paper's SGD (the solver cannot be ALS).
SGD_MODES = ("gradient", "output", "gradient_dpsgd", "output_clipped")
#: DP-SGD takes this fraction of each row's curvature-capped step (the penalty's curvature
#: included), so that the noise of successive steps is averaged rather than replaced.
DP_DAMPING = 0.5
#: DP-SGD's default ``reg`` in units of its per-coordinate noise std (``z 2 clip``): the factors'
#: noise then stays small where the data cannot outweigh it.
DP_REG = 3.0

NEIGHBOURING = "entry-value"
PROTECTED = (
    "the value of one observed entry (one rating); which entries are observed (Omega) and the shape "
    "are fixed"
)
PUBLIC = (
    "tensor shape, the set of observed indices (Omega: who rated what, when), n, hyper-parameters "
    "(rank, learning_rate, reg, n_epochs, batch_size, clip, value_range), and the public randomness "
    "(random_state: initialisation and shuffles)"
)
USER_PROTECTED = (
    "all ratings of one user (one row of mode 0): how many, which items and days, and their values; "
    "each user's contribution to a release is bounded (max_ratings)"
)
USER_PUBLIC = (
    "the tensor shape (numbers of users, items and days), hyper-parameters (rank, reg, max_iter, "
    "max_ratings, value_range, budget_split) and the public randomness (random_state). Joint DP: "
    "the released model (global mean, item and day factors and biases, core) is (epsilon, delta)-DP; "
    "user i's row of factors_[0] and biases_[0], and predictions for user i, are computed from user "
    "i's own ratings and that model only -- give them to user i alone, and release no aggregate of "
    "them (an error, a count or a check over users)"
)


#: Why each of the paper's unproven modes fails (shown in the opt-in error and the guarantee).
UNPROVEN_REASONS = {
    "gradient": (
        "A, B (and G) are trained with un-noised gradients and released, so they are a "
        "deterministic function of every value (no finite epsilon); each entry's noisy gradient is "
        "released n_epochs times and the paper charges epsilon once; the proof compares neighbours "
        "at a common minimiser C*, which SGD does not reach"
    ),
    "output": (
        "Lemma 3 needs a convex, L-Lipschitz, beta-smooth loss with eta <= 2/beta; objective (6)/(7) "
        "is multilinear (non-convex) with unbounded gradients and nothing enforces L; A, B (and G) "
        "are released without noise"
    ),
    "input": (
        "without a declared value_range, Delta = max - min is computed from the private values and "
        "released (value_range_, the guarantee's sensitivity and laplace_scale); declare value_range "
        "for the guarantee to hold"
    ),
}


def _init_scale(spread: float, ranks: tuple[int, int, int] | None) -> float:
    """ALS's default start: factor entries of size ``(spread / sqrt(rank))^(1/3)``, so that the
    starting model's values have about the data's spread (too small a start lets the penalty pull
    every factor to the zero point, which ALS cannot leave)."""
    return ((spread or 1.0) / math.sqrt(max(ranks) if ranks else 1)) ** (1.0 / 3.0)


def _data_range(values: np.ndarray) -> tuple[float, float]:
    """``(min, max)`` of the values (the paper's unproven input perturbation without a range)."""
    low, high = float(values.min()), float(values.max())
    return (low, high) if high > low else (low, low + 1.0)


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
    context_modes : "auto" or tuple of ints, default "auto"
        Modes whose rows are shrunk towards the all-ones row; ``"auto"``: ``(2,)`` with ALS
        (the third mode is a context such as a day), ``()`` with SGD (the paper's objective).
    learning_rate : float, optional
        Per-entry SGD step ``eta``; default 0.005 (Section 5.1), 0.5 for ``"gradient_dpsgd"``
        (full-batch steps capped at ``1 / h`` per row).
    reg : float or "auto", optional
        ``lambda`` of (6) / ``lambda_o`` of (7). Default: 0.01 for SGD (the paper), ``"auto"``
        for non-private ALS (chosen on a validation split, see the module docstring), and
        ``10 ((hi - lo) / 4)^(4/3)`` for ``"als"``.
    reg_core : float, optional
        ``lambda_g`` of (7); default ``reg / 10`` for SGD (the paper's ratio), ``reg`` for ALS.
    reg_bias : float, optional
        Penalty of the biases; default ``reg``. For ``"als"`` the biases' prior variance is
        ``((hi - lo) / 4)^2 / reg_bias``; default 5 under ``"entry-value"`` (the pattern
        features explain part of each bias), 10 under ``"user"``.
    n_epochs : int, optional
        SGD passes over the observed entries (``tau``); default 100 (the paper's maximum
        iterations), 20 for ``"gradient_dpsgd"``.
    max_iter : int, optional
        ALS sweeps: at most 100 without privacy (stopped by ``tol`` or early stopping); exactly
        this many for ``"als"`` (default 2).
    tol : float, default 1e-4
        ALS stops when the objective (or, with a validation split, the validation RMSE) improves
        by less than this fraction.
    early_stopping : bool, default False
        Non-private ALS with a fixed ``reg``: stop on a validation split (``validation_fraction``
        of the entries, drawn from ``random_state``) and keep the best sweep.
    validation_fraction : float, default 0.1
    n_iter_no_change : int, default 3
        Sweeps without improvement before early stopping.
    batch_size : int, optional
        SGD entries evaluated together (1 = the sequential algorithm); default 256, all entries
        (one step per epoch) for ``"gradient_dpsgd"``.
    clip : float, default 1.0
        ``m`` of Algorithm 2 (clip of ``c_k``'s gradient, ``Delta = 2m``); ``L`` of Algorithm 3
        and of ``"output_clipped"``; the per-entry gradient clip of ``"gradient_dpsgd"``; for
        ``"als"`` under ``"user"``, the bound ``B`` on each entry's design norm.
    value_range : (float, float), optional
        Declared ``[min, max]`` of the values; values are clipped into it and predictions are
        clamped to it. Required for ``"output_clipped"`` and ``"als"``.
    clamp : bool, default True
        Clamp input-perturbed values back to the range (Section 4.2, post-processing).
    budget_split : float in (0, 1), optional
        ``"output_clipped"``: share of ``epsilon`` for the output-perturbation stage (default 0.5).
        ``"als"`` under ``"entry-value"``: share of ``epsilon`` for the offsets' Laplace release
        when factors follow (default 0.9); under ``"user"``: share of the Gaussian budget
        ``mu^2`` for the mean (default 0.5).
    output_epochs : int, default 10
        ``"output_clipped"``: passes ``tau`` of the convex refit of ``C``.
    max_ratings : int, default 100
        ``"als"`` under ``"user"``: a user's contribution to each release is bounded as if they had
        at most this many ratings (larger contributions are scaled down, silently).
    init_scale : float, optional
        SGD: factors start as ``init_scale * |N(0, 1)|`` (default 0.5, data-independent), the core
        as ``init_scale * N(0, 1)``. ALS: ``init_scale * N(0, 1)`` with a default from the
        values' spread (without privacy) or the declared range (``"als"``).
    random_state : None, int or Generator
        Public randomness: initialisation, shuffles, the validation split.
    noise : None, "numpy", "opendp" or insecure_test_noise(seed)
        Secret randomness for the privacy noise (:func:`~dptensor.privacy.resolve_noise`):
        fresh OS entropy by default, never derived from ``random_state``.
    ledger : BudgetLedger, optional
        Charged with the guarantee before the private values are read.
    verbose : bool, default False
        A progress bar over the sweeps / epochs (on standard error).

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
    reg_path_ : list of dict
        ``reg="auto"``: validation RMSE of each ``lambda`` tried.
    noise_stds_ : list of float
        ``"als"``: the noise standard deviation of each release.
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
    """

    _parameter_constraints: dict = {
        # rank, model and privacy keep dptensor's own messages (checked in _check_params)
        "rank": "no_validation",
        "model": "no_validation",
        "privacy": "no_validation",
        "neighbouring": [None, StrOptions(set(RELATIONS))],
        "solver": [StrOptions(set(SOLVERS))],
        "offsets": [StrOptions(set(OFFSETS))],
        "context_modes": [StrOptions({"auto"}), tuple, list],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), None],
        "reg": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"}), None],
        "reg_core": [Interval(Real, 0, None, closed="left"), None],
        "reg_bias": [Interval(Real, 0, None, closed="left"), None],
        "n_epochs": [Interval(Integral, 1, None, closed="left"), None],
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "tol": [Interval(Real, 0, None, closed="left")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "clip": [Interval(Real, 0, None, closed="neither"), None],
        "value_range": [None, tuple, list, np.ndarray],
        "clamp": ["boolean"],
        "budget_split": [Interval(Real, 0, 1, closed="neither"), None],
        "output_epochs": [Interval(Integral, 1, None, closed="left")],
        "max_ratings": [Interval(Integral, 1, None, closed="left")],
        "init_scale": [Interval(Real, 0, None, closed="neither"), None],
        "random_state": "no_validation",  # Generators too (check_random_state)
        "verbose": ["boolean"],
        **PrivateEstimatorMixin._privacy_parameter_constraints,
    }

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
        context_modes: str | tuple = "auto",
        learning_rate: float | None = None,
        reg: float | str | None = None,
        reg_core: float | None = None,
        reg_bias: float | None = None,
        n_epochs: int | None = None,
        max_iter: int | None = None,
        tol: float = 1e-4,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 3,
        batch_size: int | None = None,
        clip: float | None = None,
        value_range: tuple[float, float] | None = None,
        clamp: bool = True,
        budget_split: float | None = None,
        output_epochs: int = 10,
        max_ratings: int = 100,
        init_scale: float | None = None,
        random_state: RandomStateLike = None,
        noise: NoiseLike = None,
        ledger: Ledger | None = None,
        verbose: bool = False,
    ) -> None:
        self.rank = rank
        self.model = model
        self.privacy = privacy
        self.neighbouring = neighbouring
        self.epsilon = epsilon
        self.delta = delta
        self.solver = solver
        self.offsets = offsets
        self.context_modes = context_modes
        self.learning_rate = learning_rate
        self.reg = reg
        self.reg_core = reg_core
        self.reg_bias = reg_bias
        self.n_epochs = n_epochs
        self.max_iter = max_iter
        self.tol = tol
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.batch_size = batch_size
        self.clip = clip
        self.value_range = value_range
        self.clamp = clamp
        self.budget_split = budget_split
        self.output_epochs = output_epochs
        self.max_ratings = max_ratings
        self.init_scale = init_scale
        self.random_state = random_state
        self.noise = noise
        self.ledger = ledger
        self.verbose = verbose

    # ------------------------------------------------------------------ checks
    def _check_params(self, shape: tuple[int, int, int], n: int) -> dict[str, Any]:
        """Every check of the parameters and every default; depends on them, the shape and ``n``.

        ``n`` is read only where it is public (no privacy, or ``"entry-value"``).
        """
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if self.privacy not in PRIVACY_MODES:
            raise ValueError(f"privacy must be one of {PRIVACY_MODES}, got {self.privacy!r}")
        ranks = self._check_rank(shape)
        p: dict[str, Any] = {"ranks": ranks}
        if self.privacy is not None:
            if self.epsilon is None:
                raise ValueError(f"epsilon is required for privacy={self.privacy!r}")
            check_epsilon_delta(self.epsilon)
            p["epsilon"] = float(self.epsilon)
        else:
            self._refuse_stray_privacy_parameters(
                ("epsilon", "delta", "neighbouring", "ledger"), switch="privacy", example="... (e.g. 'als')"
            )
        solver = self._resolve_solver()
        p["solver"] = solver
        p["offsets"] = self._resolve_offsets(solver)
        if ranks is None and p["offsets"] == "none":
            raise ValueError("rank=None (no factors) needs offsets ('mean', 'biases' or 'biscale')")
        p["context_modes"] = self._resolve_context_modes(solver)
        dpsgd = self.privacy == "gradient_dpsgd"
        p["eta"] = (0.5 if dpsgd else 0.005) if self.learning_rate is None else check_real(
            self.learning_rate, "learning_rate")
        p["n_epochs"] = (10 if dpsgd else 100) if self.n_epochs is None else check_positive_int(
            self.n_epochs, "n_epochs")
        p["batch_size"] = (n if dpsgd else 256) if self.batch_size is None else check_positive_int(
            self.batch_size, "batch_size")
        p["init_scale"] = (0.1 if dpsgd else None) if self.init_scale is None else check_real(
            self.init_scale, "init_scale")
        p["output_epochs"] = check_positive_int(self.output_epochs, "output_epochs")
        p["max_ratings"] = check_positive_int(self.max_ratings, "max_ratings")
        if self.budget_split is None:
            # DP-ALS under "entry-value": the offsets pay off most (the factors' releases are noisier)
            entry_als = self.privacy == "als" and self.neighbouring != "user"
            split = 0.9 if entry_als else 0.5
        else:
            split = check_real(self.budget_split, "budget_split")
        if split >= 1:
            raise ValueError(f"budget_split must lie strictly between 0 and 1, got {split}")
        p["budget_split"] = split
        p["value_range"] = self._check_value_range()
        if self.clip is None:
            width = None if p["value_range"] is None else p["value_range"][1] - p["value_range"][0]
            p["clip"] = width / 2.0 if dpsgd and width is not None else 1.0
        else:
            p["clip"] = check_real(self.clip, "clip")
        if p["value_range"] is None and self.privacy in ("output_clipped", "als"):
            raise ValueError(
                f"value_range is required for privacy={self.privacy!r} (its sensitivity is the declared "
                "range's width)"
            )
        if self.delta is not None:
            check_epsilon_delta(1.0, self.delta)
        check_noise(self.noise)
        self._check_relation(p, n, n_users=shape[0])
        self._resolve_regularisation(p)
        unproven = self.privacy if self.privacy in ("gradient", "output") else (
            "input" if self.privacy == "input" and p["value_range"] is None else None
        )
        if unproven is not None:
            what = {"gradient": "privacy='gradient' (Wei et al., Algorithm 2)",
                    "output": "privacy='output' (Wei et al., Algorithm 3)",
                    "input": "privacy='input' without value_range (Wei et al., Algorithm 1 as printed)"}
            require_unproven(what[unproven], UNPROVEN_REASONS[unproven])
        return p

    def _check_rank(self, shape: tuple[int, int, int]) -> tuple[int, int, int] | None:
        if self.rank is None:
            return None
        if isinstance(self.rank, tuple | list):
            if self.model == "cp":
                raise ValueError(f"rank must be an int for model='cp', got {self.rank!r}")
            if len(self.rank) != 3:
                raise ValueError(f"rank must be an int or three ints, got {self.rank!r}")
            ranks = tuple(check_positive_int(r, f"rank[{m}]") for m, r in enumerate(self.rank))
        else:
            ranks = (check_positive_int(self.rank, "rank"),) * 3
        if self.model == "tucker":
            for m in range(3):
                if ranks[m] > shape[m]:
                    raise ValueError(f"rank[{m}]={ranks[m]} exceeds the tensor dimension {shape[m]}")
        return ranks

    def _resolve_solver(self) -> str:
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        if self.solver == "auto":
            return "als" if self.privacy in (None, "als") else "sgd"
        if self.solver == "als" and self.privacy in SGD_MODES:
            raise ValueError(f"privacy={self.privacy!r} is an SGD algorithm; use solver='sgd' (or 'auto')")
        if self.solver == "sgd" and self.privacy == "als":
            raise ValueError("privacy='als' is DP-ALS; use solver='als' (or 'auto')")
        return self.solver

    def _resolve_offsets(self, solver: str) -> str:
        if self.offsets not in OFFSETS:
            raise ValueError(f"offsets must be one of {OFFSETS}, got {self.offsets!r}")
        if self.offsets == "auto":
            if self.privacy in ("als", "gradient_dpsgd") or (self.privacy is None and solver == "als"):
                return "biases"
            return "none"
        if self.offsets == "biscale" and self.privacy in ("gradient_dpsgd", "als"):
            raise ValueError(
                f"offsets='biscale' is computed from the values without noise and would void "
                f"privacy={self.privacy!r}; use offsets='biases' (learned privately) or 'mean'"
            )
        return self.offsets

    def _resolve_context_modes(self, solver: str) -> tuple[int, ...]:
        if isinstance(self.context_modes, str):
            if self.context_modes != "auto":
                raise ValueError(
                    f"context_modes must be 'auto' or a tuple of modes, got {self.context_modes!r}")
            return (2,) if solver == "als" else ()
        modes = tuple(self.context_modes)
        if any(isinstance(m, bool) or not isinstance(m, Integral) or not 0 <= m <= 2 for m in modes):
            raise ValueError(f"context_modes must hold modes 0, 1 or 2, got {self.context_modes!r}")
        return tuple(sorted(set(int(m) for m in modes)))

    def _check_value_range(self) -> tuple[float, float] | None:
        if self.value_range is None:
            return None
        try:
            low, high = (float(v) for v in self.value_range)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"value_range must be a pair of numbers, got {self.value_range!r}") from exc
        if not (math.isfinite(low) and math.isfinite(high) and high > low):
            raise ValueError(f"value_range must be finite with max > min, got {self.value_range!r}")
        return (low, high)

    def _resolve_regularisation(self, p: dict) -> None:
        """``reg``, ``reg_core``, ``reg_bias`` defaults of each solver (see the class docstring)."""
        als = p["solver"] == "als"
        if self.reg == "auto" and (not als or self.privacy is not None):
            raise ValueError(
                "reg='auto' chooses reg on a validation split: only for non-private ALS (a choice "
                "made on private values would leak them)"
            )
        if self.early_stopping and als and self.privacy not in (None, "als"):  # before anything is charged
            raise ValueError("early_stopping reads a validation split: only for non-private fits")
        sigma = None
        if self.privacy == "gradient_dpsgd":
            # the noise std of every DP-SGD step is known from the parameters: its defaults scale with it
            z = composed_noise_multiplier(p["epsilon"], p["delta"], p["n_epochs"], "exact")
            sigma = z * 2.0 * p["clip"]
        if self.reg is None:
            if sigma is not None:
                reg = DP_REG * sigma
            elif not als:
                reg = 0.01
            elif self.privacy is not None:  # "als", or ALS on input-perturbed values: a fixed prior
                low, high = p["value_range"] if p["value_range"] is not None else (0.0, 4.0)
                reg = 10.0 * ((high - low) / 4.0) ** (4.0 / 3.0)
            else:
                reg = "auto"
        else:
            reg = self.reg if self.reg == "auto" else check_real(self.reg, "reg", strict=False)
        p["reg"] = reg
        p["reg_auto"] = reg == "auto"
        base = 1.0 if reg == "auto" else reg
        if self.reg_core is not None:
            p["reg_core"] = check_real(self.reg_core, "reg_core", strict=False)
        else:
            p["reg_core"] = base if als else base / 10
        if self.reg_bias is not None:
            p["reg_bias"] = check_real(self.reg_bias, "reg_bias", strict=False)
        elif sigma is not None:
            width = None if p["value_range"] is None else p["value_range"][1] - p["value_range"][0]
            p["reg_bias"] = sigma if width is None else max(sigma, sigma**2 / (12.0 * width**2))
        else:
            # DP-ALS: the biases' prior variance is residual_var / reg_bias; "entry-value"'s
            # offsets have a pattern-informed prior (its features explain part of every bias)
            entry = self.neighbouring == "entry-value"
            p["reg_bias"] = (5.0 if entry else 10.0) if self.privacy == "als" else base
        default_iter = 2 if self.privacy == "als" else (20 if self.privacy is not None else 100)
        p["max_iter"] = (default_iter if self.max_iter is None
                         else check_positive_int(self.max_iter, "max_iter"))

    def _check_relation(self, p: dict, n: int, *, n_users: int) -> None:
        """``neighbouring`` is required with privacy; ``"user"`` only for DP-ALS; delta's default."""
        if self.privacy is None:
            p["relation"] = None
            return
        if self.neighbouring is None:
            raise ValueError(
                f"neighbouring is required with privacy={self.privacy!r}: 'entry-value' (the value of one "
                "observed rating; which entries are observed is public) or 'user' (all ratings of one "
                "row of mode 0; privacy='als' only)"
            )
        if self.neighbouring not in RELATIONS:
            raise ValueError(f"neighbouring must be one of {RELATIONS}, got {self.neighbouring!r}")
        if self.neighbouring == "user" and self.privacy != "als":
            raise ValueError(
                f"privacy={self.privacy!r} protects one entry's value only (neighbouring='entry-value'); "
                "for neighbouring='user' use privacy='als'"
            )
        p["relation"] = self.neighbouring
        if self.delta is not None:
            p["delta"] = float(self.delta)
        else:
            # the public count of each relation: observed entries ("entry-value"), users ("user")
            entry = self.neighbouring == "entry-value"
            p["delta"] = min(1e-5, 0.1 / n) if entry else min(1e-6, 0.1 / n_users)

    # ------------------------------------------------------------------ guarantees
    def _plan_guarantee(self, p: dict, values: np.ndarray) -> PrivacyGuarantee | None:
        """The guarantee of the chosen mode, from the parameters alone.

        ``values`` is read only by the paper's ``"input"`` mode without a declared range, whose
        range comes from the data (that is why it is unproven, and the guarantee says so).
        """
        mode = self.privacy
        if mode is None:
            return None
        eps = p["epsilon"]
        common = {"neighbouring": NEIGHBOURING, "protected": PROTECTED, "public": PUBLIC}
        if mode == "als":
            return self._plan_dp_als(p)
        if mode in ("input", "output_clipped"):
            eps_in = eps if mode == "input" else (1 - p["budget_split"]) * eps
            low, high = p["value_range"] if p["value_range"] is not None else _data_range(values)
            sens = high - low
            stage1 = {"algorithm": "Wei et al. Algorithm 1", "sensitivity": sens,
                      "laplace_scale": laplace_scale(eps_in, sens), "value_range": (low, high),
                      "range_declared": p["value_range"] is not None, "clamped": bool(self.clamp)}
            if mode == "input":
                declared = p["value_range"] is not None
                return PrivacyGuarantee(
                    epsilon=eps, delta=0.0, accountant="pure (Laplace, Lemma 1)", n_releases=1,
                    mechanism="laplace", noise_multiplier=1 / eps, epsilon_exact=eps, details=stage1,
                    holds=declared, claim="proved" if declared else "paper",
                    reason="" if declared else UNPROVEN_REASONS["input"],
                    dp_event=dp_accounting.LaplaceDpEvent(1 / eps), **common,
                )
            eps_out = p["budget_split"] * eps
            sens_out = 2.0 * p["output_epochs"] * p["clip"] * p["eta"]
            return PrivacyGuarantee(
                epsilon=eps, delta=0.0, accountant="pure, sequential composition", n_releases=2,
                mechanism="laplace + exponential-norm", noise_multiplier=1 / eps_out, epsilon_exact=eps,
                details={"stage1": "Algorithm 1 on all factors", "epsilon_input": eps_in,
                         "laplace_scale": stage1["laplace_scale"],
                         "stage2": "convex clipped refit of C (Lemma 3 holds) + Algorithm 3 noise",
                         "epsilon_output": eps_out, "sensitivity": sens_out, "tau": p["output_epochs"],
                         "lipschitz": p["clip"], "learning_rate": p["eta"], "value_range": (low, high)},
                dp_event=dp_accounting.ComposedDpEvent(
                    [dp_accounting.LaplaceDpEvent(1 / eps_in), EpsilonDeltaDpEvent(eps_out)]
                ),
                **common,
            )
        if mode == "gradient":
            return PrivacyGuarantee(
                epsilon=eps, delta=0.0, accountant="paper (Theorem 2)",
                n_releases=p["n_epochs"] * values.shape[0], mechanism="exponential-norm",
                noise_multiplier=1 / eps, epsilon_exact=math.inf,
                details={"algorithm": "Wei et al. Algorithm 2", "sensitivity": 2 * p["clip"],
                         "clip": p["clip"], "noised": "gradients of C only"},
                holds=False, claim="paper", reason=UNPROVEN_REASONS["gradient"], **common,
            )
        if mode == "output":
            sens = 2 * p["n_epochs"] * p["clip"] * p["eta"]
            return PrivacyGuarantee(
                epsilon=eps, delta=0.0, accountant="paper (Theorem 3)", n_releases=1,
                mechanism="exponential-norm", noise_multiplier=1 / eps, epsilon_exact=math.inf,
                details={"algorithm": "Wei et al. Algorithm 3", "sensitivity": sens, "tau": p["n_epochs"],
                         "lipschitz": p["clip"], "learning_rate": p["eta"], "noised": "rows of C only"},
                holds=False, claim="paper", reason=UNPROVEN_REASONS["output"], **common,
            )
        # gradient_dpsgd
        delta = p["delta"]
        z = composed_noise_multiplier(eps, delta, p["n_epochs"], "exact")
        if not composed_gaussian_holds(z, p["n_epochs"], eps, delta):  # pragma: no cover - guard
            raise RuntimeError(f"calibration failed for epsilon={eps}, delta={delta}")
        sens = 2.0 * p["clip"]
        return PrivacyGuarantee(
            epsilon=eps, delta=delta, accountant="exact", n_releases=p["n_epochs"], mechanism="gaussian",
            noise_multiplier=z,
            epsilon_exact=min(eps, composed_gaussian_epsilon(z, p["n_epochs"], delta)),
            details={"algorithm": "DP-SGD, per-entry clipping, all parameters noised",
                     "offsets": p["offsets"],
                     "clip": p["clip"], "sensitivity": sens, "noise_std": z * sens,
                     "batch_size": min(p["batch_size"], values.shape[0]), "n_epochs": p["n_epochs"],
                     "learning_rate": p["eta"],
                     "releases_per_entry_per_epoch": 1},
            dp_event=dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), p["n_epochs"]),
            **common,
        )

    def _dp_als_plan(self, p: dict):
        return plan_releases(
            p["relation"], has_factors=p["ranks"] is not None, offsets=p["offsets"],
            tucker=self.model == "tucker", n_iter=p["max_iter"], epsilon=p["epsilon"], delta=p["delta"],
            budget_split=p["budget_split"],
        )

    def _plan_dp_als(self, p: dict) -> PrivacyGuarantee:
        """DP-ALS: a Laplace release of the offsets ("entry-value") and Gaussian sweeps (parameters only).

        The Gaussian releases compose exactly (``mu``-GDP); under ``"entry-value"`` they get
        ``(epsilon - epsilon_o, delta)`` and the offsets' Laplace release ``epsilon_o`` (basic
        composition; ``epsilon_exact`` adds the two exact parts).
        """
        plan = self._dp_als_plan(p)
        eps, delta = p["epsilon"], p["delta"]
        user = p["relation"] == "user"
        gaussian_eps = eps - plan.offsets_epsilon
        events = []
        exact = plan.offsets_epsilon
        if plan.offsets_epsilon:
            events.append(dp_accounting.LaplaceDpEvent(1.0 / plan.offsets_epsilon))
        if plan.mu:
            effective = 1.0 / plan.mu  # one Gaussian with this multiplier has the sweeps' privacy curve
            if not composed_gaussian_holds(effective, 1, gaussian_eps, delta):  # pragma: no cover - guard
                raise RuntimeError(f"calibration failed for epsilon={gaussian_eps}, delta={delta}")
            exact += min(gaussian_eps, composed_gaussian_epsilon(effective, 1, delta))
            events += [dp_accounting.GaussianDpEvent(z) for z in plan.multipliers[len(events):]]
        details = {
            "algorithm": "DP-ALS from noisy per-row sufficient statistics", "releases": list(plan.steps),
            "noise_multipliers": list(plan.multipliers), "gdp_mu": plan.mu, "value_range": p["value_range"],
            "offsets": p["offsets"], "max_iter": p["max_iter"], "budget_split": p["budget_split"],
        }
        if plan.offsets_epsilon:
            details.update({"offsets_release": "pattern-weighted Laplace row sums (l1 sensitivity 1)",
                            "offsets_epsilon": plan.offsets_epsilon})
        if user:
            details.update({"joint_dp": True, "max_ratings": p["max_ratings"], "design_bound": p["clip"],
                            "user_rows": "computed from each user's own ratings and the released model"})
        pure = not plan.mu
        mechanism = "laplace" if pure else ("laplace + gaussian" if plan.offsets_epsilon else "gaussian")
        return PrivacyGuarantee(
            epsilon=eps, delta=0.0 if pure else delta, neighbouring=p["relation"],
            accountant="pure (Laplace)" if pure else (
                "basic composition: pure (Laplace) + exact (Gaussian DP)" if plan.offsets_epsilon
                else "exact (Gaussian DP)"),
            n_releases=len(plan.steps), mechanism=mechanism,
            noise_multiplier=1.0 / plan.mu if plan.mu else 1.0 / plan.offsets_epsilon,
            epsilon_exact=min(eps, exact), details=details,
            protected=USER_PROTECTED if user else PROTECTED, public=USER_PUBLIC if user else PUBLIC,
            dp_event=events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events),
        )

    # ------------------------------------------------------------------ fitting
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, indices: object, values: object, shape: object) -> TensorCompletion:
        """Fit the model to observed entries.

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
        # Under the user relation a data set with no ratings is a neighbour (of one user's ratings): it fits.
        user_relation = self.privacy == "als" and self.neighbouring == "user"
        indices, values, shape = check_entries(indices, values, shape, allow_empty=user_relation)
        n = values.shape[0]
        p = self._check_params(shape, n)
        if p["ranks"] is None and p["solver"] == "sgd":
            raise ValueError("rank=None (offsets only) needs solver='als'")
        rng = check_random_state(self.random_state)
        if p["value_range"] is not None:
            # every stage reads the values only inside the declared range
            values = np.clip(values, *p["value_range"])
        guarantee = self._plan_guarantee(p, values)
        source: NoiseSource | None = None
        if guarantee is not None:
            # public sizes only: n observed entries under "entry-value", the users (shape[0]) under "user"
            user = p["relation"] == "user"
            check_privacy_parameters(  # the delta given (the defaults are 1/10 of 1/n or less)
                self.epsilon, self.delta, n_public=shape[0] if user else n,
                unit="users" if user else "observed entries", who="TensorCompletion",
            )
            # charged before anything is fitted: a refused charge leaves the model unfitted
            guarantee, source = begin_release(
                guarantee, self.noise, ledger=self.ledger,
                description=f"TensorCompletion {self.model} rank {self.rank}, privacy={self.privacy!r}, "
                            f"neighbouring={p['relation']!r}",
            )
        self.shape_ = shape
        self.n_observed_ = None if p["relation"] == "user" else n
        self.solver_, self.offsets_, self.context_modes_ = p["solver"], p["offsets"], p["context_modes"]
        self.prediction_range_ = p["value_range"]
        self.history_: list[float] = []
        self.reg_path_: list[dict] = []
        self.noise_stds_: list[float] = []
        self.biscaling_: BiScaling | None = None
        self.reg_ = p["reg"]
        if self.privacy == "als":
            params = self._fit_dp_als(indices, values, shape, p, rng, source)
        elif p["solver"] == "als":
            train = self._input_perturbation(values, guarantee, source) if self.privacy == "input" else values
            params = self._fit_als(indices, train, shape, p, rng)
        else:
            params = self._fit_sgd(indices, values, shape, p, rng, guarantee, source)
        self.factors_ = params.factors
        self.core_ = params.core
        self.mean_ = float(params.mean)
        self.biases_ = params.biases
        self.guarantee_ = guarantee
        return self

    def _offsets_start(self, offsets: str, values: np.ndarray, shape: tuple) -> CompletionParameters:
        """Offsets before training: the values' mean (non-private or perturbed values) and zero biases."""
        mean = float(np.mean(values)) if offsets in ("mean", "biases") else 0.0
        biases = [np.zeros(s) for s in shape] if offsets == "biases" else None
        return CompletionParameters(self.model, None, None, mean, biases)

    def _biscale(self, p: dict, indices: np.ndarray, values: np.ndarray, shape: tuple) -> np.ndarray:
        """Fit the paper's bi-scaling to ``values`` (the values the solver sees) and standardise them."""
        if p["offsets"] != "biscale":
            return values
        self.biscaling_ = fit_biscaling(indices, values, shape)
        return self.biscaling_.transform(indices, values)

    def _fit_als(
        self, indices: np.ndarray, values: np.ndarray, shape: tuple, p: dict, rng: np.random.Generator
    ) -> CompletionParameters:
        """Non-private ALS (or ALS on input-perturbed values): ``reg="auto"`` path or a fixed ``reg``."""
        values = self._biscale(p, indices, values, shape)
        inner = "none" if p["offsets"] == "biscale" else p["offsets"]
        ranks = p["ranks"]
        scale = p["init_scale"] if p["init_scale"] is not None else _init_scale(float(np.std(values)), ranks)
        start = initial_parameters(self.model, shape, ranks, inner, p["context_modes"], scale, rng,
                                   mean=float(np.mean(values)) if inner in ("mean", "biases") else 0.0)
        # on perturbed values ("input") the number of sweeps is fixed, like every private fit's
        tol = float(self.tol) if self.privacy is None else -math.inf
        settings = AlsSettings(1.0 if p["reg_auto"] else p["reg"], p["reg_bias"], p["reg_core"],
                               p["context_modes"], p["max_iter"], tol, int(self.n_iter_no_change),
                               None if p["offsets"] == "biscale" else p["value_range"])
        fit_mean = inner in ("mean", "biases")
        n = values.shape[0]
        with self._progress("ALS sweeps") as progress:
            if p["reg_auto"] or self.early_stopping:
                # the validation split is public randomness (random_state)
                held = np.zeros(n, dtype=bool)
                held[rng.permutation(n)[:max(1, int(round(self.validation_fraction * n)))]] = True
            if p["reg_auto"]:
                path = fit_als_path(start, indices, values, shape, settings, fit_mean=fit_mean,
                                    validation_mask=held, tie_bias=self.reg_bias is None,
                                    tie_core=self.reg_core is None, progress=progress)
                result, self.reg_, self.reg_path_ = path.result, path.reg, path.path
            elif self.early_stopping:
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
        p: dict,
        rng: np.random.Generator,
        source: NoiseSource,
    ) -> CompletionParameters:
        """DP-ALS: the releases of the plan, from a data-independent start."""
        low, high = p["value_range"]
        ranks = p["ranks"]
        scale = p["init_scale"] if p["init_scale"] is not None else _init_scale((high - low) / 4.0, ranks)
        params = initial_parameters(self.model, shape, ranks, p["offsets"], p["context_modes"], scale, rng)
        settings = DpAlsSettings(p["relation"], (low, high), p["reg"], p["reg_bias"], p["reg_core"],
                                 p["context_modes"], p["offsets"], p["max_ratings"], p["clip"])
        with self._progress("DP-ALS releases") as progress:
            self.noise_stds_ = dp_als(params, indices, values, shape, self._dp_als_plan(p), settings, source,
                                      progress)
        self.n_iter_ = p["max_iter"]
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
        shape: tuple,
        p: dict,
        rng: np.random.Generator,
        guarantee: PrivacyGuarantee | None,
        source: NoiseSource | None,
    ) -> CompletionParameters:
        """The paper's SGD and its perturbations (and DP-SGD), with offsets when asked for."""
        ranks = p["ranks"]
        init_scale = 0.5 if p["init_scale"] is None else p["init_scale"]
        factors = [init_scale * np.abs(rng.standard_normal((shape[m], ranks[m]))) for m in range(3)]
        core = init_scale * rng.standard_normal(ranks) if self.model == "tucker" else None
        if self.model == "tucker":
            # keep the initial predictions O(init_scale^3): the core acts like a diagonal at start
            core = core / np.sqrt(float(np.prod(ranks)))
            core[np.diag_indices(min(ranks), 3)] += 1.0
        self.n_iter_ = p["n_epochs"]
        with self._progress("SGD epochs") as progress:
            inner = "none" if p["offsets"] == "biscale" else p["offsets"]
            mode = self.privacy
            offs = None
            if mode in ("input", "output_clipped"):
                perturbed = self._input_perturbation(values, guarantee, source)
                train_values = self._biscale(p, indices, perturbed, shape)
                if inner != "none":
                    offs = self._offsets_start(inner, train_values, shape)  # post-processing of noisy values
                self._sgd(indices, train_values, factors, core, p, rng, mode=None, offsets=offs,
                          progress=progress)
                if mode == "output_clipped":
                    # stage 2 reads the true values, shifted/scaled by the (public) stage-1 offsets
                    target = values if self.biscaling_ is None else self.biscaling_.transform(indices, values)
                    if offs is not None:
                        target = target - offs.predict(indices)
                    self._output_clipped(indices, target, factors, core, p, rng, source)
            elif mode == "gradient_dpsgd":
                if inner != "none":
                    # data-independent start: the declared range's centre, zero biases
                    centre = 0.0 if p["value_range"] is None else 0.5 * sum(p["value_range"])
                    offs = self._offsets_start(inner, np.zeros(1), shape)
                    offs.mean = centre if inner in ("mean", "biases") else 0.0
                self.noise_std_ = guarantee.details["noise_std"]
                self._sgd(indices, values, factors, core, p, rng, mode="gradient_dpsgd", source=source,
                          sigma=self.noise_std_, offsets=offs, progress=progress)
            else:  # None, "gradient", "output": the offsets are computed from the values (no claim holds)
                train_values = self._biscale(p, indices, values, shape)
                if inner != "none":
                    offs = self._offsets_start(inner, train_values, shape)
                self._sgd(indices, train_values, factors, core, p, rng,
                          mode=mode if mode == "gradient" else None,
                          source=source, offsets=offs, progress=progress)
                if mode == "output":
                    self._output_paper(factors, p, source)
        mean = 0.0 if offs is None else offs.mean
        return CompletionParameters(self.model, factors, core, mean, None if offs is None else offs.biases)

    def _input_perturbation(
        self, values: np.ndarray, guarantee: PrivacyGuarantee, source: NoiseSource
    ) -> np.ndarray:
        """Algorithm 1: ``x' = x + Lap(Delta / epsilon)`` on every observed entry."""
        details = guarantee.details
        low, high = details["value_range"]
        scale = details["laplace_scale"]
        noisy = source.add_laplace(np.clip(values, low, high), scale)
        if self.clamp:
            noisy = np.clip(noisy, low, high)
        self.input_noise_scale_ = scale
        self.perturbed_values_ = noisy
        self.value_range_ = (low, high)
        return noisy

    def _output_paper(self, factors: list, p: dict, source: NoiseSource) -> None:
        """Algorithm 3: exponential-norm noise with ``Delta = 2 tau L eta`` on every row of ``C``."""
        sens = 2 * p["n_epochs"] * p["clip"] * p["eta"]
        c = factors[2]
        c += exponential_norm_noise(c.shape[1], sens, p["epsilon"], size=c.shape[0], noise=source)
        self.output_sensitivity_ = sens

    def _output_clipped(
        self,
        indices: np.ndarray,
        values: np.ndarray,
        factors: list,
        core: np.ndarray | None,
        p: dict,
        rng: np.random.Generator,
        source: NoiseSource,
    ) -> None:
        """Convex refit of ``C`` with A, B, G fixed, clipped per-row permutation SGD, then noise.

        ``values`` are already clipped into the declared range.
        """
        eps_out = p["budget_split"] * p["epsilon"]
        lam, eta, lip, tau = p["reg"], p["eta"], p["clip"], p["output_epochs"]
        a, b, c = factors
        k = indices[:, 2]
        _, _, _, w = directions(self.model, core, a[indices[:, 0]], b[indices[:, 1]], c[k])
        lam_e = lam / np.bincount(k, minlength=c.shape[0])[k]
        beta = 2.0 * np.einsum("nr,nr->n", w, w) + 2.0 * lam_e
        steps = np.minimum(eta, 2.0 / beta)
        for _ in range(tau):
            # a random order within each row (public randomness); round r takes each row's r-th entry
            order = rng.permutation(values.shape[0])
            order = order[np.argsort(k[order], kind="stable")]
            ks = k[order]
            starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
            counts = np.diff(np.r_[starts, ks.shape[0]])
            position = np.arange(ks.shape[0]) - np.repeat(starts, counts)
            by_round = np.argsort(position, kind="stable")
            bounds = np.searchsorted(position[by_round], np.arange(counts.max() + 1))
            for r in range(counts.max()):
                sel = order[by_round[bounds[r]:bounds[r + 1]]]
                rows = k[sel]
                crow = c[rows]
                resid = values[sel] - np.einsum("nr,nr->n", w[sel], crow)
                # the entry's gradient -2 r w clipped to norm L: |r| <= L / (2 ||w||)
                limited = clip_residuals(resid, np.linalg.norm(w[sel], axis=1), lip / 2.0)
                grad = -2.0 * limited[:, None] * w[sel]
                grad += 2.0 * lam_e[sel, None] * crow
                c[rows] = crow - steps[sel, None] * grad
        sens = 2.0 * tau * lip * eta
        c += exponential_norm_noise(c.shape[1], sens, eps_out, size=c.shape[0], noise=source)
        self.output_sensitivity_ = sens

    # Overflow inside an epoch is not an error yet: non-private fits check the training error
    # after each epoch, private fits the released parameters.
    @np.errstate(over="ignore", invalid="ignore")
    def _sgd(
        self,
        indices: np.ndarray,
        values: np.ndarray,
        factors: list,
        core: np.ndarray | None,
        p: dict,
        rng: np.random.Generator,
        *,
        mode: str | None,
        source: NoiseSource | None = None,
        sigma: float = 0.0,
        offsets: CompletionParameters | None = None,
        progress: Any = None,
        frozen: tuple[int, ...] = (),
    ) -> None:
        """Mini-batch form of the paper's per-entry SGD on (6)/(7); updates in place.

        ``rng`` is the public randomness (shuffles); ``source`` the secret noise. With
        ``mode="gradient_dpsgd"`` each batch's gradient sum over all parameters -- every
        per-entry squared-error gradient clipped to ``clip`` -- gets ``N(0, sigma^2)`` on every
        coordinate before the step. ``offsets`` (a mean and optional biases, updated in place)
        are learned with the factors: their gradients join each entry's (clipped) gradient, with
        the bias penalty ``reg_bias`` spread over the rows' entries like ``lambda``.
        ``frozen`` lists modes whose factor (and the core, if ``"core"`` is listed) stay fixed, so
        that SGD solves the convex sub-problem of the others (used to test it against ALS).
        """
        # Objective (6)/(7) charges lambda ||A||_F^2 once; spread over the entries of each row it
        # is lambda / n_i per visit of row i (n_i from the public Omega), so one epoch of SGD
        # steps follows the gradient of (6)/(7) itself.
        inv_counts = [1.0 / np.bincount(indices[:, axis], minlength=f.shape[0])[indices[:, axis]]
                      for axis, f in enumerate(factors)]
        n = values.shape[0]
        eta, lam, lam_g, m = p["eta"], p["reg"], p["reg_core"], p["clip"]
        batch = min(p["batch_size"], n)
        a_mat, b_mat, c_mat = factors
        tucker = self.model == "tucker"
        dpsgd = mode == "gradient_dpsgd"
        biases = None if offsets is None else offsets.biases
        # offset coordinates in each entry's gradient: the mean, and one bias per mode
        n_offset = 0 if offsets is None else 1 + (3 if biases is not None else 0)
        # A training error on the raw values is only computed where the values are not private.
        track_error = self.privacy is None or self.privacy == "input"
        for _ in range(p["n_epochs"]):
            order = rng.permutation(n)
            sq_err = 0.0
            for start in range(0, n, batch):
                sel = order[start:start + batch]
                i, j, k = indices[sel, 0], indices[sel, 1], indices[sel, 2]
                a, b, c = a_mat[i], b_mat[j], c_mat[k]
                pred, wa, wb, wc = directions(self.model, core, a, b, c)
                if offsets is not None:
                    pred = pred + offsets.mean
                    if biases is not None:
                        pred = pred + biases[0][i] + biases[1][j] + biases[2][k]
                resid = values[sel] - pred
                if track_error:
                    sq_err += float(resid @ resid)
                if dpsgd:
                    # per-entry clipping of the squared-error gradient over all parameters:
                    # ||2 r w|| <= m  <=>  |r| <= m / (2 ||w||), with w the gradient of x_hat
                    norm2 = (wa * wa).sum(1) + (wb * wb).sum(1) + (wc * wc).sum(1)
                    if tucker:
                        norm2 = norm2 + (a * a).sum(1) * (b * b).sum(1) * (c * c).sum(1)
                    resid = clip_residuals(resid, np.sqrt(norm2 + n_offset), m / 2.0)
                ga = -2.0 * resid[:, None] * wa + (2.0 * lam * inv_counts[0][sel])[:, None] * a
                gb = -2.0 * resid[:, None] * wb + (2.0 * lam * inv_counts[1][sel])[:, None] * b
                gc = -2.0 * resid[:, None] * wc + (2.0 * lam * inv_counts[2][sel])[:, None] * c
                if mode == "gradient":
                    # Algorithm 2, steps 6-8: clip c_k's gradient to m, add exponential-norm noise
                    norm = np.linalg.norm(gc, axis=1)
                    gc *= np.minimum(1.0, m / np.maximum(norm, 1e-300))[:, None]
                    gc += exponential_norm_noise(gc.shape[1], 2.0 * m, p["epsilon"], size=gc.shape[0],
                                                 noise=source)
                if tucker:
                    g_core = -2.0 * core_gradient(resid, a, b, c) + (2.0 * lam_g * sel.shape[0] / n) * core
                # step of each row: eta, capped at 1/h where h is the trace of the row's Gauss-Newton
                # curvature over this batch (keeps the Jacobi form stable for large batches); it
                # depends on the parameters and the public Omega only
                if dpsgd:
                    blocks = ((i, wa, a_mat), (j, wb, b_mat), (k, wc, c_mat))
                    steps = [row_steps(eta, rows, w, mat.shape[0], 2.0 * lam * inv_counts[axis][sel],
                                       DP_DAMPING) for axis, (rows, w, mat) in enumerate(blocks)]
                else:
                    steps = [row_steps(eta, rows, w, mat.shape[0])
                             for rows, w, mat in ((i, wa, a_mat), (j, wb, b_mat), (k, wc, c_mat))]
                updates = ((i, ga, a_mat, steps[0]), (j, gb, b_mat, steps[1]), (k, gc, c_mat, steps[2]))
                for axis, (rows, g, mat, step) in enumerate(updates):
                    if axis in frozen:
                        continue
                    if dpsgd:
                        # the batch's gradient sum, noised on every coordinate, then the step
                        total = np.zeros_like(mat)
                        scatter_add(total, rows, g)
                        mat -= step[:, None] * source.add_gaussian(total, sigma)
                    else:
                        scatter_add(mat, rows, -step[rows, None] * g)
                if tucker and "core" not in frozen:
                    if dpsgd:
                        g_core = source.add_gaussian(g_core, sigma)
                    h_core = 2.0 * float(np.sum((a * a).sum(1) * (b * b).sum(1) * (c * c).sum(1)))
                    if dpsgd:
                        h_core = (h_core + 2.0 * lam_g * sel.shape[0] / n) / DP_DAMPING
                    core -= eta / max(1.0, eta * h_core) * g_core
                if offsets is not None:
                    self._offset_step(offsets, resid, (i, j, k), sel, inv_counts, p, dpsgd, source, sigma)
            if progress is not None:
                progress(1)
            if track_error:
                self.history_.append(math.sqrt(sq_err / n))
                if not math.isfinite(self.history_[-1]):
                    raise FloatingPointError(
                        "SGD diverged (training error is not finite); lower learning_rate or batch_size"
                    )
            elif not all(np.all(np.isfinite(f)) for f in factors) or (
                tucker and not np.all(np.isfinite(core))
            ) or (offsets is not None and not math.isfinite(offsets.mean)):
                # a check of the released (noised) parameters only: post-processing
                raise FloatingPointError(
                    "SGD diverged (the noised parameters are not finite); lower learning_rate"
                )

    def _offset_step(
        self,
        offsets: CompletionParameters,
        resid: np.ndarray,
        rows: tuple,
        sel: np.ndarray,
        inv_counts: list,
        p: dict,
        dpsgd: bool,
        source: NoiseSource | None,
        sigma: float,
    ) -> None:
        """One SGD step of the mean and the biases from the batch's (clipped) residuals.

        Steps are ``eta`` capped at a share of ``1 / h`` with ``h = 2 x`` (entries of the batch in
        the row), the same Gauss-Newton cap as the factors'; under DP-SGD every coordinate's
        gradient sum is noised before the step.
        """
        eta, lam_b = p["eta"], p["reg_bias"]
        # the mean and the biases share each entry's residual: without privacy each takes at most
        # its share of the capped step (all of them taking the whole step would overshoot); DP-SGD
        # takes DP_DAMPING of it (its clipped residuals bound every step)
        damping = DP_DAMPING if dpsgd else 1.0 / (1 + (3 if offsets.biases is not None else 0))
        g_mean = -2.0 * float(np.sum(resid))
        if dpsgd:
            g_mean = float(source.add_gaussian(np.array([g_mean]), sigma)[0])
        offsets.mean -= eta / max(1.0, eta * 2.0 * resid.shape[0] / damping) * g_mean
        if offsets.biases is None:
            return
        for axis, (bias, r) in enumerate(zip(offsets.biases, rows, strict=True)):
            ridge = 2.0 * lam_b * inv_counts[axis][sel]
            grad = -2.0 * resid + ridge * bias[r]
            total = np.bincount(r, weights=grad, minlength=bias.shape[0])
            if dpsgd:
                total = source.add_gaussian(total, sigma)
            curvature = 2.0 + (ridge if dpsgd else np.zeros_like(ridge))
            h = np.bincount(r, weights=curvature, minlength=bias.shape[0])
            bias -= eta / np.maximum(1.0, eta * h / damping) * total

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
        params = CompletionParameters(self.model, self.factors_, self.core_, self.mean_, self.biases_)
        out = params.predict(indices)
        if self.biscaling_ is not None:
            out = self.biscaling_.inverse(indices, out)
        if self.prediction_range_ is not None:
            out = np.clip(out, *self.prediction_range_)
        return out

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
