"""The plan of a :class:`~dptensor.models.completion.TensorCompletion` fit, fixed before the data.

:func:`plan_completion` maps the estimator's parameters and the public sizes -- the shape, and the
number of observed entries where it is public (without privacy and under
``neighbouring="entry-value"``; under ``"user"`` it is private and never read) -- to a frozen
:class:`CompletionPlan`: every option resolved (solver, offsets, context modes, the regularisation
and each mode's defaults), the releases with their shares of the budget and noise multipliers, the
composed ``DpEvent`` and the :class:`~dptensor.privacy.PrivacyGuarantee`. It reads no data and
holds no estimator. ``TensorCompletion.fit`` calls it once and then goes plan -> charge -> compute
-> release -> post-process, so a fit's noise and guarantee are the ones this function states for
its parameters, before anything is read.

One mode needs a number from the data: the paper's input perturbation without a declared
``value_range`` (Algorithm 1 as printed, unproven, :mod:`dptensor.models.completion._paper`) takes
its sensitivity from the values' range and releases it; the caller passes that range as
``data_range``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from numbers import Integral, Real
from types import SimpleNamespace
from typing import Any

import dp_accounting
import numpy as np
from sklearn import get_config
from sklearn.utils._param_validation import Interval, StrOptions, validate_parameter_constraints

from dptensor._validation import check_epsilon_delta, check_positive_int, check_real, check_shape
from dptensor.models._base import PrivateEstimatorMixin, refuse_stray_privacy_parameters
from dptensor.models.completion import _paper
from dptensor.models.completion._dp_als_plan import (
    DEFAULT_MAX_RATINGS,
    RELATIONS,
    SPECTRAL_MAX_ITEMS,
    DpAlsPlan,
    auto_max_ratings,
    plan_releases,
    spectral_start_pays,
)
from dptensor.privacy import (
    EpsilonDeltaDpEvent,
    PrivacyGuarantee,
    composed_gaussian_epsilon,
    composed_gaussian_holds,
    composed_noise_multiplier,
    laplace_scale,
)
from dptensor.privacy.noise import check_noise

__all__ = ["CompletionPlan", "Release", "plan_completion"]

MODELS = ("cp", "tucker")
PRIVACY_MODES = (None, "input", "gradient", "output", "gradient_dpsgd", "output_clipped", "als")
SOLVERS = ("auto", "als", "sgd")
OFFSETS = ("auto", "none", "mean", "biases", "biscale")
#: Modes that run the paper's SGD (the solver cannot be ALS).
SGD_MODES = ("gradient", "output", "gradient_dpsgd", "output_clipped")
#: DP-SGD's default ``reg`` in units of its per-coordinate noise std (``z 2 clip``): the factors'
#: noise then stays small where the data cannot outweigh it.
DP_REG = 3.0
#: DP-ALS under ``"user"``: the global mean's default share of the Gaussian budget ``mu^2`` (the
#: ``budget_split``). One number summed over every rating needs little of it; the item releases
#: get the rest (issue 38: at 10^4 users and epsilon = 1 a share of 0.5 left the item biases
#: noisier than the non-private biases' error, 0.1 halves that gap).
USER_MEAN_SHARE = 0.1

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

#: The estimator's parameters and their declarative constraints (``TensorCompletion``'s
#: ``_parameter_constraints``; checked again by :func:`plan_completion` when called on its own).
PARAMETER_CONSTRAINTS: dict = {
    # rank, model and privacy keep dptensor's own messages (checked in plan_completion)
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
    "max_ratings": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
    "start": [StrOptions({"auto", "spectral", "random"})],
    "init_scale": [Interval(Real, 0, None, closed="neither"), None],
    "random_state": "no_validation",  # Generators too (check_random_state)
    "verbose": ["boolean"],
    **PrivateEstimatorMixin._privacy_parameter_constraints,
}


@dataclass(frozen=True)
class Release:
    """One noisy release of a private fit, fixed before the data are read.

    Attributes
    ----------
    name : str
        What is released: ``"values"`` (Algorithm 1: Laplace noise on every observed value),
        ``"gradients of C"`` (Algorithm 2: one noisy step per entry), ``"rows of C"`` (Algorithm 3
        and ``"output_clipped"``), ``"gradient sums"`` (DP-SGD: every batch's gradient sum), or a
        DP-ALS step of :class:`~dptensor.models.completion._dp_als_plan.DpAlsPlan` (``"offsets"``,
        ``"mean"``, ``"0"``, ``"1"``, ``"2"``, ``"core"``).
    mechanism : str
        ``"laplace"``, ``"exponential-norm"`` or ``"gaussian"``.
    noise_multiplier : float
        Noise scale over sensitivity: ``1 / epsilon`` for the pure mechanisms, ``z`` for a Gaussian.
    epsilon : float or None
        The release's pure budget (``None`` for a Gaussian, accounted through its multiplier).
    sensitivity : float or None
        In the released quantity's units (``None`` for DP-ALS's Gaussian sweeps, whose
        sensitivities follow from the released parameters at each step; the offsets' Laplace
        release is weighted to l1 sensitivity 1).
    noise_scale : float or None
        The noise's scale where it is a number of the plan: the Laplace scale, the Gaussian
        standard deviation (DP-SGD), the exponential-norm ``Delta / epsilon``.
    count : int
        How many times the release is made (per-entry steps, epochs).
    """

    name: str
    mechanism: str
    noise_multiplier: float
    epsilon: float | None
    sensitivity: float | None
    noise_scale: float | None
    count: int = 1


@dataclass(frozen=True)
class CompletionPlan:
    """Every choice of a ``TensorCompletion`` fit, resolved from parameters and public sizes.

    Returned by :func:`plan_completion`; a fit reads nothing else (the estimator's parameters are
    not read again once it is made).

    Attributes
    ----------
    model : {"cp", "tucker"}
    privacy : str or None
    relation : {"entry-value", "user"} or None
        The neighbouring relation (``None`` without privacy).
    ranks : (int, int, int) or None
        ``None``: no factors, offsets alone.
    solver : {"als", "sgd"}
    offsets : {"none", "mean", "biases", "biscale"}
    context_modes : tuple of int
    epsilon, delta : float or None
        The budget (``delta`` with its default; ``None`` without privacy).
    value_range : (float, float) or None
        The declared range.
    budget_split, clip : float
    learning_rate : float
        SGD's ``eta``.
    n_epochs : int
    batch_size : int
    init_scale : float or None
    output_epochs, max_ratings : int
        ``max_ratings`` resolved: with ``"auto"`` under ``"user"`` (DP-ALS), the rule
        :func:`~dptensor.models.completion._dp_als_plan.auto_max_ratings` once the schedule is known;
        elsewhere ``DEFAULT_MAX_RATINGS`` (unused).
    max_ratings_auto : bool
        Whether ``max_ratings`` was ``"auto"``.
    start : str
        The item factors' start as given (``"auto"``, ``"spectral"``, ``"random"``); DP-ALS's
        schedule (``dp_als``) says whether a spectral start is made.
    clamp : bool
    reg : float or "auto"
    reg_core, reg_bias : float
    tie_reg_core, tie_reg_bias : bool
        ``reg="auto"``: the core's and biases' penalties follow ``reg`` (they were not given).
    max_iter : int
    tol : float
        ALS's tolerance (``-inf`` on private fits: a fixed number of sweeps).
    early_stopping : bool
    validation_fraction : float
    n_iter_no_change : int
    input_range : (float, float) or None
        Algorithm 1's range (``"input"``, ``"output_clipped"``): the declared one, or the data's
        (unproven).
    releases : tuple of Release
        The noisy releases in order (empty without privacy).
    dp_als : DpAlsPlan or None
        DP-ALS's release schedule (``privacy="als"``).
    guarantee : PrivacyGuarantee or None
        The guarantee before the noise source is known (``begin_release`` voids it for insecure
        test noise).
    """

    model: str
    privacy: str | None
    relation: str | None
    ranks: tuple[int, int, int] | None
    solver: str
    offsets: str
    context_modes: tuple[int, ...]
    epsilon: float | None
    delta: float | None
    value_range: tuple[float, float] | None
    budget_split: float
    clip: float
    learning_rate: float
    n_epochs: int
    batch_size: int
    init_scale: float | None
    output_epochs: int
    max_ratings: int
    max_ratings_auto: bool
    start: str
    clamp: bool
    reg: float | str
    reg_core: float
    reg_bias: float
    tie_reg_core: bool
    tie_reg_bias: bool
    max_iter: int
    tol: float
    early_stopping: bool
    validation_fraction: float
    n_iter_no_change: int
    input_range: tuple[float, float] | None
    releases: tuple[Release, ...]
    dp_als: DpAlsPlan | None
    guarantee: PrivacyGuarantee | None

    @property
    def reg_auto(self) -> bool:
        """Whether ``reg`` is chosen on a validation split (non-private ALS)."""
        return self.reg == "auto"

    @property
    def inner_offsets(self) -> str:
        """The offsets the solver fits: ``"none"`` under bi-scaling (which standardises first)."""
        return "none" if self.offsets == "biscale" else self.offsets

    @property
    def dp_event(self) -> dp_accounting.DpEvent | None:
        """The composed ``DpEvent`` of the releases (``None`` where it has none)."""
        return None if self.guarantee is None else self.guarantee.dp_event

    @property
    def noise_multipliers(self) -> tuple[float, ...]:
        """The noise multiplier of each release, in order."""
        return tuple(r.noise_multiplier for r in self.releases)

    def release(self, name: str) -> Release:
        """The release called ``name``.

        Parameters
        ----------
        name : str
            :attr:`Release.name`.

        Returns
        -------
        Release

        Raises
        ------
        KeyError
            When the plan has no such release.
        """
        for r in self.releases:
            if r.name == name:
                return r
        raise KeyError(f"this plan (privacy={self.privacy!r}) has no release {name!r}")


def plan_completion(
    params: Mapping[str, Any],
    shape: tuple[int, int, int],
    n_observed: int | None = None,
    *,
    data_range: tuple[float, float] | None = None,
) -> CompletionPlan:
    """Resolve a ``TensorCompletion`` fit from its parameters and the public sizes (no data).

    Every check of the parameters and every default happens here, in the order a fit makes them,
    with the same messages; then the releases and the guarantee.

    Parameters
    ----------
    params : mapping of str to object
        The estimator's parameters, all of them, its options spread flatly:
        ``dptensor.models._options.flat_params(TensorCompletion(...))``.
    shape : sequence of three ints
        The tensor's shape (public).
    n_observed : int, optional
        The number of observed entries, where it is public: without privacy and under
        ``neighbouring="entry-value"``. Leave it out under ``"user"``, where it is private (the
        plan never needs it there). Required for the defaults that depend on it (``delta`` and
        DP-SGD's ``batch_size`` under ``"entry-value"``) and for ``privacy="gradient"``.
    data_range : (float, float), optional
        Only for the paper's unproven ``privacy="input"`` without ``value_range``: the values'
        ``(min, max)`` (:func:`dptensor.models.completion._paper.data_range`), which that mode
        releases.

    Returns
    -------
    CompletionPlan

    Raises
    ------
    TypeError, ValueError
        A parameter out of its range or a combination no mode allows (the messages of ``fit``).
    UnprovenPrivacyError
        For the paper's unproven modes without ``enable_features("unproven")``.
    """
    missing = [name for name in PARAMETER_CONSTRAINTS if name not in params]
    unknown = [name for name in params if name not in PARAMETER_CONSTRAINTS]
    if missing or unknown:
        raise TypeError(
            "params must hold every TensorCompletion parameter, its options flat "
            "(dptensor.models._options.flat_params(TensorCompletion(...))); "
            + (f"missing {missing}" if missing else "")
            + ("; " if missing and unknown else "")
            + (f"unknown {unknown}" if unknown else "")
        )
    if not get_config()["skip_parameter_validation"]:  # a fit has checked them already
        validate_parameter_constraints(PARAMETER_CONSTRAINTS, dict(params), caller_name="TensorCompletion")
    shape = check_shape(shape)
    if n_observed is not None:
        n_observed = check_positive_int(n_observed, "n_observed", minimum=0)
    a = SimpleNamespace(**params)
    if a.model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {a.model!r}")
    if a.privacy not in PRIVACY_MODES:
        raise ValueError(f"privacy must be one of {PRIVACY_MODES}, got {a.privacy!r}")
    ranks = _check_rank(a, shape)
    epsilon = None
    if a.privacy is not None:
        if a.epsilon is None:
            raise ValueError(f"epsilon is required for privacy={a.privacy!r}")
        check_epsilon_delta(a.epsilon)
        epsilon = float(a.epsilon)
    else:
        refuse_stray_privacy_parameters(
            params, ("epsilon", "delta", "neighbouring", "ledger"), switch="privacy",
            who="TensorCompletion", example="... (e.g. 'als')",
        )
    solver = _resolve_solver(a)
    offsets = _resolve_offsets(a, solver)
    if ranks is None and offsets == "none":
        raise ValueError("rank=None (no factors) needs offsets ('mean', 'biases' or 'biscale')")
    context_modes = _resolve_context_modes(a, solver)
    dpsgd = a.privacy == "gradient_dpsgd"
    eta = (0.5 if dpsgd else 0.005) if a.learning_rate is None else check_real(
        a.learning_rate, "learning_rate")
    n_epochs = (10 if dpsgd else 100) if a.n_epochs is None else check_positive_int(
        a.n_epochs, "n_epochs")
    batch_size = (n_observed if dpsgd else 256) if a.batch_size is None else check_positive_int(
        a.batch_size, "batch_size")
    init_scale = (0.1 if dpsgd else None) if a.init_scale is None else check_real(
        a.init_scale, "init_scale")
    output_epochs = check_positive_int(a.output_epochs, "output_epochs")
    max_ratings_auto = isinstance(a.max_ratings, str) and a.max_ratings == "auto"
    max_ratings = (DEFAULT_MAX_RATINGS if max_ratings_auto
                   else check_positive_int(a.max_ratings, "max_ratings"))
    start = a.start  # one of PARAMETER_CONSTRAINTS' options (validated above)
    if start == "spectral" and not (a.privacy == "als" and a.neighbouring == "user" and ranks is not None):
        raise ValueError("start='spectral' is a release of user-level DP-ALS: it needs privacy='als', "
                         "neighbouring='user' and a rank")
    if a.budget_split is None:
        # DP-ALS under "entry-value": the offsets pay off most (the factors' releases are noisier)
        entry_als = a.privacy == "als" and a.neighbouring != "user"
        split = 0.9 if entry_als else (USER_MEAN_SHARE if a.privacy == "als" else 0.5)
    else:
        split = check_real(a.budget_split, "budget_split")
    if split >= 1:
        raise ValueError(f"budget_split must lie strictly between 0 and 1, got {split}")
    value_range = check_value_range(a.value_range)
    if a.clip is None:
        width = None if value_range is None else value_range[1] - value_range[0]
        clip = width / 2.0 if dpsgd and width is not None else 1.0
    else:
        clip = check_real(a.clip, "clip")
    if value_range is None and a.privacy in ("output_clipped", "als"):
        raise ValueError(
            f"value_range is required for privacy={a.privacy!r} (its sensitivity is the declared "
            "range's width)"
        )
    if a.delta is not None:
        check_epsilon_delta(1.0, a.delta)
    check_noise(a.noise)
    relation, delta = _check_relation(a, n_observed, n_users=shape[0])
    reg, reg_core, reg_bias, max_iter, z = _resolve_regularisation(
        a, solver, value_range, (epsilon, delta, n_epochs, clip))
    _paper.require_opt_in(a.privacy, value_range)
    if ranks is None and solver == "sgd":
        raise ValueError("rank=None (offsets only) needs solver='als'")
    if a.privacy in ("gradient", "gradient_dpsgd"):
        _require_count(n_observed, f"privacy={a.privacy!r}")
    input_range = None
    if a.privacy in ("input", "output_clipped"):
        if value_range is None and data_range is None:
            raise ValueError(
                "data_range is required for privacy='input' without value_range: Algorithm 1 as "
                "printed takes Delta = max - min from the values (and releases it)"
            )
        input_range = value_range if value_range is not None else data_range
    plan = CompletionPlan(
        model=a.model, privacy=a.privacy, relation=relation, ranks=ranks, solver=solver,
        offsets=offsets, context_modes=context_modes, epsilon=epsilon, delta=delta,
        value_range=value_range, budget_split=split, clip=clip, learning_rate=eta, n_epochs=n_epochs,
        batch_size=batch_size, init_scale=init_scale, output_epochs=output_epochs,
        max_ratings=max_ratings, max_ratings_auto=max_ratings_auto, start=start, clamp=bool(a.clamp),
        reg=reg, reg_core=reg_core, reg_bias=reg_bias,
        tie_reg_core=a.reg_core is None, tie_reg_bias=a.reg_bias is None, max_iter=max_iter,
        tol=float(a.tol) if a.privacy is None else -math.inf, early_stopping=a.early_stopping,
        validation_fraction=a.validation_fraction, n_iter_no_change=int(a.n_iter_no_change),
        input_range=input_range, releases=(), dp_als=None, guarantee=None,
    )
    if a.privacy is None:
        return plan
    return _with_releases(plan, n_observed, z, shape)


# ------------------------------------------------------------------ checks and defaults
def _check_rank(a: SimpleNamespace, shape: tuple[int, int, int]) -> tuple[int, int, int] | None:
    if a.rank is None:
        return None
    if isinstance(a.rank, tuple | list):
        if a.model == "cp":
            raise ValueError(f"rank must be an int for model='cp', got {a.rank!r}")
        if len(a.rank) != 3:
            raise ValueError(f"rank must be an int or three ints, got {a.rank!r}")
        ranks = tuple(check_positive_int(r, f"rank[{m}]") for m, r in enumerate(a.rank))
    else:
        ranks = (check_positive_int(a.rank, "rank"),) * 3
    if a.model == "tucker":
        for m in range(3):
            if ranks[m] > shape[m]:
                raise ValueError(f"rank[{m}]={ranks[m]} exceeds the tensor dimension {shape[m]}")
    return ranks


def _resolve_solver(a: SimpleNamespace) -> str:
    if a.solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {a.solver!r}")
    if a.solver == "auto":
        return "als" if a.privacy in (None, "als") else "sgd"
    if a.solver == "als" and a.privacy in SGD_MODES:
        raise ValueError(f"privacy={a.privacy!r} is an SGD algorithm; use solver='sgd' (or 'auto')")
    if a.solver == "sgd" and a.privacy == "als":
        raise ValueError("privacy='als' is DP-ALS; use solver='als' (or 'auto')")
    return a.solver


def _resolve_offsets(a: SimpleNamespace, solver: str) -> str:
    if a.offsets not in OFFSETS:
        raise ValueError(f"offsets must be one of {OFFSETS}, got {a.offsets!r}")
    if a.offsets == "auto":
        if a.privacy in ("als", "gradient_dpsgd") or (a.privacy is None and solver == "als"):
            return "biases"
        return "none"
    if a.offsets == "biscale" and a.privacy in ("gradient_dpsgd", "als"):
        raise ValueError(
            f"offsets='biscale' is computed from the values without noise and would void "
            f"privacy={a.privacy!r}; use offsets='biases' (learned privately) or 'mean'"
        )
    return a.offsets


def _resolve_context_modes(a: SimpleNamespace, solver: str) -> tuple[int, ...]:
    if isinstance(a.context_modes, str):
        if a.context_modes != "auto":
            raise ValueError(
                f"context_modes must be 'auto' or a tuple of modes, got {a.context_modes!r}")
        return (2,) if solver == "als" else ()
    modes = tuple(a.context_modes)
    if any(isinstance(m, bool) or not isinstance(m, Integral) or not 0 <= m <= 2 for m in modes):
        raise ValueError(f"context_modes must hold modes 0, 1 or 2, got {a.context_modes!r}")
    return tuple(sorted(set(int(m) for m in modes)))


def check_value_range(value_range: object) -> tuple[float, float] | None:
    """``value_range`` as ``(low, high)``, two finite numbers with ``high > low``; ``None`` stays ``None``."""
    if value_range is None:
        return None
    try:
        low, high = (float(v) for v in value_range)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"value_range must be a pair of numbers, got {value_range!r}") from exc
    if not (math.isfinite(low) and math.isfinite(high) and high > low):
        raise ValueError(f"value_range must be finite with max > min, got {value_range!r}")
    return (low, high)


def _resolve_regularisation(
    a: SimpleNamespace, solver: str, value_range: tuple[float, float] | None,
    dpsgd: tuple[float | None, float | None, int, float],
) -> tuple[float | str, float, float, int, float | None]:
    """``reg``, ``reg_core``, ``reg_bias``, ``max_iter`` of each solver (the class docstring), and ``z``.

    ``dpsgd`` is ``(epsilon, delta, n_epochs, clip)``, resolved: under DP-SGD they give its noise
    multiplier ``z`` (returned; ``None`` for the other modes), whose noise std sets the defaults.
    """
    als = solver == "als"
    if a.reg == "auto" and (not als or a.privacy is not None):
        raise ValueError(
            "reg='auto' chooses reg on a validation split: only for non-private ALS (a choice "
            "made on private values would leak them)"
        )
    if a.early_stopping and als and a.privacy not in (None, "als"):  # before anything is charged
        raise ValueError("early_stopping reads a validation split: only for non-private fits")
    z = sigma = None
    if a.privacy == "gradient_dpsgd":
        # the noise std of every DP-SGD step is known from the parameters: its defaults scale with it
        epsilon, delta, n_epochs, clip = dpsgd
        z = composed_noise_multiplier(epsilon, delta, n_epochs, "exact")
        sigma = z * 2.0 * clip
    if a.reg is None:
        if sigma is not None:
            reg = DP_REG * sigma
        elif not als:
            reg = 0.01
        elif a.privacy is not None:  # "als", or ALS on input-perturbed values: a fixed prior
            low, high = value_range if value_range is not None else (0.0, 4.0)
            reg = 10.0 * ((high - low) / 4.0) ** (4.0 / 3.0)
        else:
            reg = "auto"
    else:
        reg = a.reg if a.reg == "auto" else check_real(a.reg, "reg", strict=False)
    base = 1.0 if reg == "auto" else reg
    if a.reg_core is not None:
        reg_core = check_real(a.reg_core, "reg_core", strict=False)
    else:
        reg_core = base if als else base / 10
    if a.reg_bias is not None:
        reg_bias = check_real(a.reg_bias, "reg_bias", strict=False)
    elif sigma is not None:
        width = None if value_range is None else value_range[1] - value_range[0]
        reg_bias = sigma if width is None else max(sigma, sigma**2 / (12.0 * width**2))
    else:
        # DP-ALS: the biases' prior variance is residual_var / reg_bias (both relations: a bias of
        # standard deviation about (hi - lo) / 9, as MovieLens' item biases; under "user" 10 shrank
        # them too far once the item releases got most of the budget, issue 38)
        reg_bias = 5.0 if a.privacy == "als" else base
    # DP-ALS: one sweep under "user" (MovieLens-100K-shaped users, epsilon 1 and 4: as good as two
    # or four from 10^3 to 10^6 users, up to 0.007 better below 10^5; issue 38), two under "entry-value"
    default_iter = (1 if a.neighbouring == "user" else 2) if a.privacy == "als" else (
        20 if a.privacy is not None else 100)
    max_iter = default_iter if a.max_iter is None else check_positive_int(a.max_iter, "max_iter")
    return reg, reg_core, reg_bias, max_iter, z


def _check_relation(
    a: SimpleNamespace, n: int | None, *, n_users: int
) -> tuple[str | None, float | None]:
    """``neighbouring`` is required with privacy; ``"user"`` only for DP-ALS; delta's default."""
    if a.privacy is None:
        return None, None
    if a.neighbouring is None:
        raise ValueError(
            f"neighbouring is required with privacy={a.privacy!r}: 'entry-value' (the value of one "
            "observed rating; which entries are observed is public) or 'user' (all ratings of one "
            "row of mode 0; privacy='als' only)"
        )
    if a.neighbouring not in RELATIONS:
        raise ValueError(f"neighbouring must be one of {RELATIONS}, got {a.neighbouring!r}")
    if a.neighbouring == "user" and a.privacy != "als":
        raise ValueError(
            f"privacy={a.privacy!r} protects one entry's value only (neighbouring='entry-value'); "
            "for neighbouring='user' use privacy='als'"
        )
    if a.delta is not None:
        return a.neighbouring, float(a.delta)
    # the public count of each relation: observed entries ("entry-value"), users ("user")
    if a.neighbouring == "entry-value":
        return a.neighbouring, min(1e-5, 0.1 / _require_count(n, "the default delta"))
    return a.neighbouring, min(1e-6, 0.1 / n_users)


def _require_count(n: int | None, what: str) -> int:
    if n is None:
        raise ValueError(
            f"n_observed is required for {what} (the number of observed entries, public under "
            "neighbouring='entry-value')"
        )
    return n


# ------------------------------------------------------------------ releases and guarantees
def _with_releases(
    plan: CompletionPlan, n: int | None, z: float | None, shape: tuple[int, int, int]
) -> CompletionPlan:
    """``plan`` with its releases, DP-ALS schedule and guarantee (parameters and public sizes only)."""
    mode, eps = plan.privacy, plan.epsilon
    common = {"neighbouring": NEIGHBOURING, "protected": PROTECTED, "public": PUBLIC}
    if mode == "als":
        if plan.start == "spectral" and not plan.ranks[1] <= shape[1] <= SPECTRAL_MAX_ITEMS:
            raise ValueError(
                f"start='spectral' needs rank <= items <= {SPECTRAL_MAX_ITEMS} (it forms an items x items "
                f"matrix): rank {plan.ranks[1]}, {shape[1]} items; use start='random'")
        schedule = partial(
            plan_releases, plan.relation, has_factors=plan.ranks is not None, offsets=plan.offsets,
            tucker=plan.model == "tucker", n_iter=plan.max_iter, epsilon=eps, delta=plan.delta,
            budget_split=plan.budget_split, one_row_modes=tuple(m for m in (1, 2) if shape[m] == 1),
        )
        spectral = plan.relation == "user" and plan.ranks is not None and plan.start != "random"
        dp_als = schedule(spectral=spectral)
        if spectral and plan.start == "auto":  # the rule reads the spectrum's multiplier in this schedule
            z_s = dp_als.multipliers[dp_als.steps.index("spectrum")]
            if not spectral_start_pays(shape[0], shape[1], plan.ranks[1], z_s):
                dp_als = schedule(spectral=False)
        swept = [mode for mode in ("1", "2") if mode in dp_als.steps]  # a one-row mode is not released
        if plan.relation == "user" and plan.max_ratings_auto and swept:  # the rule reads its multiplier
            z_items = dp_als.multipliers[dp_als.steps.index(swept[0])]
            plan = replace(plan, max_ratings=auto_max_ratings(shape[0], shape[int(swept[0])], z_items))
        releases = tuple(
            Release(step, "laplace", z_t, dp_als.offsets_epsilon, 1.0, z_t) if step == "offsets"
            else Release(step, "gaussian", z_t, None, None, None)
            for step, z_t in zip(dp_als.steps, dp_als.multipliers, strict=True)
        )
        return replace(plan, releases=releases, dp_als=dp_als, guarantee=_dp_als_guarantee(plan, dp_als))
    if mode in ("input", "output_clipped"):
        eps_in = eps if mode == "input" else (1 - plan.budget_split) * eps
        low, high = plan.input_range
        sens = high - low
        scale = laplace_scale(eps_in, sens)
        values = Release("values", "laplace", 1 / eps_in, eps_in, sens, scale)
        stage1 = {"algorithm": "Wei et al. Algorithm 1", "sensitivity": sens,
                  "laplace_scale": scale, "value_range": (low, high),
                  "range_declared": plan.value_range is not None, "clamped": plan.clamp}
        if mode == "input":
            declared = plan.value_range is not None
            guarantee = PrivacyGuarantee(
                epsilon=eps, delta=0.0, accountant="pure (Laplace, Lemma 1)", n_releases=1,
                mechanism="laplace", noise_multiplier=1 / eps, epsilon_exact=eps, details=stage1,
                holds=declared, claim="proved" if declared else "paper",
                reason="" if declared else _paper.UNPROVEN_REASONS["input"],
                dp_event=dp_accounting.LaplaceDpEvent(1 / eps), **common,
            )
            return replace(plan, releases=(values,), guarantee=guarantee)
        eps_out = plan.budget_split * eps
        sens_out = 2.0 * plan.output_epochs * plan.clip * plan.learning_rate
        rows = Release("rows of C", "exponential-norm", 1 / eps_out, eps_out, sens_out, sens_out / eps_out)
        guarantee = PrivacyGuarantee(
            epsilon=eps, delta=0.0, accountant="pure, sequential composition", n_releases=2,
            mechanism="laplace + exponential-norm", noise_multiplier=1 / eps_out, epsilon_exact=eps,
            details={"stage1": "Algorithm 1 on all factors", "epsilon_input": eps_in,
                     "laplace_scale": scale,
                     "stage2": "convex clipped refit of C (Lemma 3 holds) + Algorithm 3 noise",
                     "epsilon_output": eps_out, "sensitivity": sens_out, "tau": plan.output_epochs,
                     "lipschitz": plan.clip, "learning_rate": plan.learning_rate,
                     "value_range": (low, high)},
            dp_event=dp_accounting.ComposedDpEvent(
                [dp_accounting.LaplaceDpEvent(1 / eps_in), EpsilonDeltaDpEvent(eps_out)]
            ),
            **common,
        )
        return replace(plan, releases=(values, rows), guarantee=guarantee)
    if mode == "gradient":
        n_releases = plan.n_epochs * n
        steps = Release("gradients of C", "exponential-norm", 1 / eps, eps, 2.0 * plan.clip,
                        2.0 * plan.clip / eps, count=n_releases)
        guarantee = _paper.gradient_guarantee(eps, n_releases, plan.clip, common)
        return replace(plan, releases=(steps,), guarantee=guarantee)
    if mode == "output":
        sens = 2 * plan.n_epochs * plan.clip * plan.learning_rate
        rows = Release("rows of C", "exponential-norm", 1 / eps, eps, sens, sens / eps)
        guarantee = _paper.output_guarantee(eps, sens, plan.n_epochs, plan.clip, plan.learning_rate,
                                            common)
        return replace(plan, releases=(rows,), guarantee=guarantee)
    # gradient_dpsgd: z was computed with the defaults (its noise std sets reg and reg_bias)
    delta = plan.delta
    if not composed_gaussian_holds(z, plan.n_epochs, eps, delta):  # pragma: no cover - guard
        raise RuntimeError(f"calibration failed for epsilon={eps}, delta={delta}")
    sens = 2.0 * plan.clip
    sums = Release("gradient sums", "gaussian", z, None, sens, z * sens, count=plan.n_epochs)
    guarantee = PrivacyGuarantee(
        epsilon=eps, delta=delta, accountant="exact", n_releases=plan.n_epochs, mechanism="gaussian",
        noise_multiplier=z,
        epsilon_exact=min(eps, composed_gaussian_epsilon(z, plan.n_epochs, delta)),
        details={"algorithm": "DP-SGD, per-entry clipping, all parameters noised",
                 "offsets": plan.offsets,
                 "clip": plan.clip, "sensitivity": sens, "noise_std": z * sens,
                 "batch_size": min(plan.batch_size, n), "n_epochs": plan.n_epochs,
                 "learning_rate": plan.learning_rate,
                 "releases_per_entry_per_epoch": 1},
        dp_event=dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), plan.n_epochs),
        **common,
    )
    return replace(plan, releases=(sums,), guarantee=guarantee)


def _dp_als_guarantee(plan: CompletionPlan, releases: DpAlsPlan) -> PrivacyGuarantee:
    """DP-ALS: a Laplace release of the offsets ("entry-value") and Gaussian sweeps (parameters only).

    The Gaussian releases compose exactly (``mu``-GDP); under ``"entry-value"`` they get
    ``(epsilon - epsilon_o, delta)`` and the offsets' Laplace release ``epsilon_o`` (basic
    composition; ``epsilon_exact`` adds the two exact parts).
    """
    eps, delta = plan.epsilon, plan.delta
    user = plan.relation == "user"
    gaussian_eps = eps - releases.offsets_epsilon
    events = []
    exact = releases.offsets_epsilon
    if releases.offsets_epsilon:
        events.append(dp_accounting.LaplaceDpEvent(1.0 / releases.offsets_epsilon))
    if releases.mu:
        effective = 1.0 / releases.mu  # one Gaussian with this multiplier has the sweeps' privacy curve
        if not composed_gaussian_holds(effective, 1, gaussian_eps, delta):  # pragma: no cover - guard
            raise RuntimeError(f"calibration failed for epsilon={gaussian_eps}, delta={delta}")
        exact += min(gaussian_eps, composed_gaussian_epsilon(effective, 1, delta))
        events += [dp_accounting.GaussianDpEvent(z) for z in releases.multipliers[len(events):]]
    details = {
        "algorithm": "DP-ALS from noisy per-row sufficient statistics", "releases": list(releases.steps),
        "noise_multipliers": list(releases.multipliers), "gdp_mu": releases.mu,
        "value_range": plan.value_range, "offsets": plan.offsets, "max_iter": plan.max_iter,
        "budget_split": plan.budget_split,
    }
    if releases.offsets_epsilon:
        details.update({"offsets_release": "pattern-weighted Laplace row sums (l1 sensitivity 1)",
                        "offsets_epsilon": releases.offsets_epsilon})
    if user:
        details.update({"joint_dp": True, "max_ratings": plan.max_ratings, "design_bound": plan.clip,
                        "user_rows": "computed from each user's own ratings and the released model"})
    pure = not releases.mu
    mechanism = "laplace" if pure else ("laplace + gaussian" if releases.offsets_epsilon else "gaussian")
    return PrivacyGuarantee(
        epsilon=eps, delta=0.0 if pure else delta, neighbouring=plan.relation,
        accountant="pure (Laplace)" if pure else (
            "basic composition: pure (Laplace) + exact (Gaussian DP)" if releases.offsets_epsilon
            else "exact (Gaussian DP)"),
        n_releases=len(releases.steps), mechanism=mechanism,
        noise_multiplier=1.0 / releases.mu if releases.mu else 1.0 / releases.offsets_epsilon,
        epsilon_exact=min(eps, exact), details=details,
        protected=USER_PROTECTED if user else PROTECTED, public=USER_PUBLIC if user else PUBLIC,
        dp_event=events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events),
    )
