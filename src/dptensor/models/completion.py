"""Differentially private CP and Tucker tensor completion by SGD over the observed entries.

Wei, Li, Mao & Wang, *Applying Differential Privacy to Tensor Completion* (the paper below).
The models are objective (6) (CP)

    min_{A,B,C}  ||P_Omega(X - [[A, B, C]])||_F^2 + lambda (||A||_F^2 + ||B||_F^2 + ||C||_F^2)

and objective (7) (Tucker)

    min_{A,B,C,G}  ||P_Omega(X - [[G; A, B, C]])||_F^2 + lambda_o (||A||^2 + ||B||^2 + ||C||^2)
                   + lambda_g ||G||^2,

fitted by SGD over the observed entries only (nothing dense of the tensor's size is formed). SGD
visits each observed entry ``x_ijk`` once per epoch and moves the rows ``a_i, b_j, c_k`` (and
``G``) along the gradient of that entry's term ``(x_ijk - x_hat_ijk)^2 + lambda (||a_i||^2 / n_i +
||b_j||^2 / n_j + ||c_k||^2 / n_k) [+ lambda_g ||G||^2 / |Omega|]`` with step ``learning_rate``
-- the paper's per-entry SGD (``n_i`` is the number of observed entries in row ``i``, so the
terms sum to objective (6)/(7) exactly). It is executed in mini-batches: the entries of a batch
are evaluated at the same parameters and their updates summed into the rows with one scatter
(``np.bincount``), so a batch of size 1 is exactly the sequential algorithm and larger batches
are its vectorised (Jacobi-style) form. To keep that form stable for large batches, the step of a
row (and of the core) is capped at ``1 / h`` where ``h`` is the trace of its Gauss-Newton
curvature over the batch (``2 sum ||d x_hat / d row||^2``); the cap depends only on the
parameters and the public Omega, and rarely binds at the paper's step size.

Privacy modes
-------------
``privacy=None``
    Non-private baseline.
``"input"`` -- Algorithm 1
    Laplace noise of scale ``Delta / epsilon`` with ``Delta = max - min`` on every observed value,
    optional clamping of the noisy values back to ``[min, max]`` (post-processing), then the
    non-private fit. ``epsilon``-DP **holds** when the value range is declared
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
    DP-SGD (Abadi et al. 2016) over *all* parameters: each entry's gradient of its squared error
    with respect to ``(a_i, b_j, c_k[, G])`` is clipped to l2 norm ``clip``; every batch adds
    ``N(0, (z * 2 clip)^2)`` to every coordinate of ``A, B, C[, G]``; the regulariser's gradient
    depends only on the parameters (already private) and the public ``Omega``. Each epoch is a
    partition of the entries into batches drawn independently of the values, so an entry affects
    exactly one Gaussian release per epoch (sensitivity ``2 clip`` for a changed value) and the
    privacy loss is exactly that of ``n_epochs`` composed Gaussian mechanisms: ``z`` from
    :func:`dptensor.privacy.composed_noise_multiplier` (``"exact"``: Gaussian DP composition with
    the analytic Gaussian mechanism). ``(epsilon, delta)``-DP.
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

The paper's modes whose claims fail (``"gradient"``, ``"output"``, and ``"input"`` without a
declared range) run only after ``dptensor.privacy.enable_features("unproven")``; their guarantee
reports ``holds=False`` and ``epsilon = inf`` (the paper's number is ``nominal_epsilon``).

Side channels
-------------
Nothing a private fit lets a caller observe depends on the private values except through the
noise: values are clipped into the declared range before every stage that reads them; DP-SGD
clips each residual so that no value, however large, can overflow; private modes never compute
a training error on the private values (``history_`` stays empty), and the only divergence check
looks at the released, noisy parameters. The public randomness (initialisation, shuffles) comes
from ``random_state``; the noise from ``noise`` (fresh OS entropy by default).

Protected entity and public information
---------------------------------------
Every mode protects **the value of one observed entry** (one rating): neighbouring datasets have
the same observation pattern and differ in one observed value (for ``"input"`` and
``"output_clipped"`` within the declared ``value_range``). The **shape and the set Omega of
observed indices are public**: all of the paper's algorithms iterate over Omega, update exactly
the rows that occur in it, and Algorithm 1 perturbs only the observed values, so which user rated
which item on which day is *not* protected (in MovieLens that is itself sensitive; protecting it
needs the add/remove-an-entry relation, e.g. DP-SGD with Poisson sampling, which is not
implemented). Hyper-parameters, ``value_range`` and ``clip`` must be chosen without looking at
the data.
"""

from __future__ import annotations

import math
from typing import Any

import dp_accounting
import numpy as np

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
from dptensor.privacy import (
    EpsilonDeltaDpEvent,
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

MODELS = ("cp", "tucker")
PRIVACY_MODES = (None, "input", "gradient", "output", "gradient_dpsgd", "output_clipped")

NEIGHBOURING = "entry-value"
PROTECTED = "the value of one observed entry (one rating); Omega and the shape are fixed"
PUBLIC = (
    "tensor shape, the set Omega of observed indices (who rated what, when), n, hyper-parameters "
    "(rank, learning_rate, reg, n_epochs, batch_size, clip, value_range), and the public randomness "
    "(random_state: initialisation and shuffles)"
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


# ---------------------------------------------------------------------------------------------
# Vectorised building blocks
# ---------------------------------------------------------------------------------------------


def _scatter_add(matrix: np.ndarray, rows: np.ndarray, updates: np.ndarray) -> None:
    """``matrix[rows] += updates`` with repeated rows summed (one ``bincount``)."""
    n_rows, width = matrix.shape
    flat = (rows[:, None] * width + np.arange(width)).ravel()
    matrix += np.bincount(flat, weights=updates.ravel(), minlength=n_rows * width).reshape(n_rows, width)


def _directions(
    model: str, core: np.ndarray | None, a: np.ndarray, b: np.ndarray, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Predictions and the partial derivatives of ``x_hat`` with respect to ``a_i, b_j, c_k``.

    CP: ``x_hat = sum_r a_r b_r c_r``, ``d x_hat / d a_i = b_j * c_k`` and so on. Tucker:
    ``x_hat = G(a_i, b_j, c_k)``, ``d x_hat / d a_i = G(I, b_j, c_k)``, ... (two matrix products
    of the batch against the unfolded core). ``d x_hat / d G = a_i (x) b_j (x) c_k``.
    """
    if model == "cp":
        wa, wb, wc = b * c, a * c, a * b
        return np.einsum("nr,nr->n", a, wa), wa, wb, wc
    p, q, t = core.shape
    # G(I, I, c_k): (n, p, q)
    gc = (c @ core.reshape(p * q, t).T).reshape(-1, p, q)
    wa = np.einsum("npq,nq->np", gc, b)
    wb = np.einsum("npq,np->nq", gc, a)
    # G(a_i, I, I): (n, q, t)
    ga = (a @ core.reshape(p, q * t)).reshape(-1, q, t)
    wc = np.einsum("nqt,nq->nt", ga, b)
    return np.einsum("np,np->n", a, wa), wa, wb, wc


def _row_steps(eta: float, rows: np.ndarray, w: np.ndarray, n_rows: int) -> np.ndarray:
    """``min(eta, 1 / h_r)`` per row, ``h_r = 2 sum ||d x_hat / d row||^2`` over the batch's entries in ``r``.

    ``h_r`` is the trace (an upper bound of the largest eigenvalue) of the Gauss-Newton curvature of
    the batch's squared errors in row ``r``; a step of at most ``1 / h_r`` cannot overshoot. With
    ``batch_size=1`` and the paper's step size the cap practically never binds. It depends only on
    the current parameters and the public ``Omega``, so it costs no privacy.
    """
    h = np.bincount(rows, weights=2.0 * np.einsum("nr,nr->n", w, w), minlength=n_rows)
    return eta / np.maximum(1.0, eta * h)


def _core_gradient(weights: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``sum_n weights_n a_n (x) b_n (x) c_n`` as a ``p x q x t`` array."""
    p, q, t = a.shape[1], b.shape[1], c.shape[1]
    ab = (a[:, :, None] * b[:, None, :]).reshape(-1, p * q)
    return ((ab * weights[:, None]).T @ c).reshape(p, q, t)


def _clip_residuals(resid: np.ndarray, direction_norm: np.ndarray, bound: float) -> np.ndarray:
    """Residuals ``r`` limited so that ``|r| * ||w|| <= bound``, for any finite or infinite ``r``.

    The clipped gradient ``-2 r w`` is computed from the limited residual, never as ``r * w``
    rescaled afterwards, so even ``r = 1e308`` cannot overflow into ``inf`` or ``nan``. A zero
    direction contributes no gradient whatever ``r`` is (its residual becomes 0).
    """
    with np.errstate(divide="ignore"):
        limit = np.where(direction_norm > 0, bound / direction_norm, 0.0)
    return np.clip(np.nan_to_num(resid, nan=0.0), -limit, limit)


def _data_range(values: np.ndarray) -> tuple[float, float]:
    """``(min, max)`` of the values (the paper's unproven input perturbation without a range)."""
    low, high = float(values.min()), float(values.max())
    return (low, high) if high > low else (low, low + 1.0)


# ---------------------------------------------------------------------------------------------
# The estimator
# ---------------------------------------------------------------------------------------------


class TensorCompletion:
    """CP or Tucker completion of a three-way tensor from its observed entries, optionally DP.

    Implements Wei, Li, Mao & Wang, *Applying Differential Privacy to Tensor Completion*:
    objectives (6) (CP) and (7) (Tucker) by SGD over the observed entries, with input (Algorithm
    1), gradient (Algorithm 2) and output (Algorithm 3) perturbation, and two variants whose
    guarantees hold (``"gradient_dpsgd"``, ``"output_clipped"``). See the module docstring for
    each mode's mechanism, its guarantee and what it protects.

    Parameters
    ----------
    rank : int or tuple of three ints
        CP rank ``d``; for Tucker the core size (an int ``d`` means ``d x d x d`` as in the paper).
    model : {"cp", "tucker"}, default "cp"
    privacy : {None, "input", "gradient", "output", "gradient_dpsgd", "output_clipped"}
    epsilon : float, optional
        Privacy budget, required (``> 0``) when ``privacy`` is set.
    delta : float, optional
        For ``"gradient_dpsgd"`` only; default ``min(1e-5, 1 / n)``.
    learning_rate : float, default 0.005
        Per-entry SGD step ``eta`` (Section 5.1).
    reg : float, default 0.01
        ``lambda`` of (6) / ``lambda_o`` of (7).
    reg_core : float, optional
        ``lambda_g`` of (7); default ``reg / 10`` (the paper's 0.001 / 0.0001 ratio).
    n_epochs : int, default 100
        Passes over the observed entries (``tau``; the paper's maximum iterations).
    batch_size : int, default 256
        Entries evaluated together (1 = the sequential algorithm).
    clip : float, default 1.0
        ``m`` of Algorithm 2 (clip of ``c_k``'s gradient, ``Delta = 2m``); ``L`` of Algorithm 3
        and of ``"output_clipped"``; the per-entry gradient clip of ``"gradient_dpsgd"``.
    value_range : (float, float), optional
        Declared ``[min, max]`` of the values (input perturbation's ``Delta = max - min``);
        values are clipped into it. Required for ``"output_clipped"``.
    clamp : bool, default True
        Clamp input-perturbed values back to the range (Section 4.2, post-processing).
    budget_split : float in (0, 1), default 0.5
        ``"output_clipped"``: share of ``epsilon`` for the output-perturbation stage.
    output_epochs : int, default 10
        ``"output_clipped"``: passes ``tau`` of the convex refit of ``C``.
    init_scale : float, default 0.5
        Factors start as ``init_scale * |N(0, 1)|`` (data-independent), the core as
        ``init_scale * N(0, 1)``.
    random_state : None, int or Generator
        Public randomness: initialisation and shuffles.
    noise : None, "numpy", "opendp" or insecure_test_noise(seed)
        Secret randomness for the privacy noise (:func:`~dptensor.privacy.resolve_noise`):
        fresh OS entropy by default, never derived from ``random_state``.
    ledger : BudgetLedger, optional
        Charged with the guarantee before the private values are read.

    Attributes
    ----------
    factors_ : list of three ndarrays ``(n_m, rank_m)``
    core_ : ndarray or None
        Tucker core ``G`` (``None`` for CP).
    guarantee_ : PrivacyGuarantee or None
        The privacy statement (``None`` when ``privacy`` is ``None``).
    shape_ : tuple of three ints
    n_observed_ : int
    perturbed_values_, input_noise_scale_, value_range_ : ndarray, float, (float, float)
        ``"input"`` / ``"output_clipped"``: the Laplace-perturbed training values (private: they
        are the mechanism's output), the Laplace scale ``Delta / epsilon`` and the range used.
    output_sensitivity_ : float
        ``"output"`` / ``"output_clipped"``: ``Delta = 2 tau L eta``.
    noise_std_ : float
        ``"gradient_dpsgd"``: per-coordinate Gaussian standard deviation ``z * 2 clip``.
    history_ : list of float
        Training RMSE (on the values the SGD saw) after each epoch, for non-private fits and under
        ``"input"`` (where SGD sees only perturbed values). Empty for the other private modes:
        there it would be computed from the private values without noise, which no guarantee
        covers.
    """

    def __init__(
        self,
        rank: int | tuple[int, int, int],
        *,
        model: str = "cp",
        privacy: str | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        learning_rate: float = 0.005,
        reg: float = 0.01,
        reg_core: float | None = None,
        n_epochs: int = 100,
        batch_size: int = 256,
        clip: float = 1.0,
        value_range: tuple[float, float] | None = None,
        clamp: bool = True,
        budget_split: float = 0.5,
        output_epochs: int = 10,
        init_scale: float = 0.5,
        random_state: RandomStateLike = None,
        noise: NoiseLike = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.rank = rank
        self.model = model
        self.privacy = privacy
        self.epsilon = epsilon
        self.delta = delta
        self.learning_rate = learning_rate
        self.reg = reg
        self.reg_core = reg_core
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.clip = clip
        self.value_range = value_range
        self.clamp = clamp
        self.budget_split = budget_split
        self.output_epochs = output_epochs
        self.init_scale = init_scale
        self.random_state = random_state
        self.noise = noise
        self.ledger = ledger

    # ------------------------------------------------------------------ checks
    def _check_params(self, shape: tuple[int, int, int], n: int) -> dict[str, Any]:
        """Every check of the parameters; depends on them, the shape and the public ``n`` only."""
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if self.privacy not in PRIVACY_MODES:
            raise ValueError(f"privacy must be one of {PRIVACY_MODES}, got {self.privacy!r}")
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
        p: dict[str, Any] = {"ranks": ranks}
        if self.privacy is not None:
            if self.epsilon is None:
                raise ValueError(f"epsilon is required for privacy={self.privacy!r}")
            check_epsilon_delta(self.epsilon)
            p["epsilon"] = float(self.epsilon)
        elif self.epsilon is not None:
            check_epsilon_delta(self.epsilon)
        if self.privacy is None and self.ledger is not None:
            raise ValueError("ledger given without privacy: a non-private fit has nothing to charge; pass "
                             "privacy=... or drop the ledger")
        p["eta"] = check_real(self.learning_rate, "learning_rate")
        p["reg"] = check_real(self.reg, "reg", strict=False)
        p["reg_core"] = p["reg"] / 10 if self.reg_core is None else check_real(
            self.reg_core, "reg_core", strict=False
        )
        p["n_epochs"] = check_positive_int(self.n_epochs, "n_epochs")
        p["batch_size"] = check_positive_int(self.batch_size, "batch_size")
        p["clip"] = check_real(self.clip, "clip")
        p["init_scale"] = check_real(self.init_scale, "init_scale")
        p["output_epochs"] = check_positive_int(self.output_epochs, "output_epochs")
        split = check_real(self.budget_split, "budget_split")
        if split >= 1:
            raise ValueError(f"budget_split must lie strictly between 0 and 1, got {split}")
        p["budget_split"] = split
        if self.value_range is not None:
            try:
                low, high = (float(v) for v in self.value_range)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"value_range must be a pair of numbers, got {self.value_range!r}") from exc
            if not (math.isfinite(low) and math.isfinite(high) and high > low):
                raise ValueError(f"value_range must be finite with max > min, got {self.value_range!r}")
            p["value_range"] = (low, high)
        elif self.privacy == "output_clipped":
            raise ValueError(
                "value_range is required for privacy='output_clipped' (its input-perturbation stage "
                "needs a declared range)"
            )
        else:
            p["value_range"] = None
        if self.delta is not None:
            check_epsilon_delta(1.0, self.delta)
        p["delta"] = float(self.delta) if self.delta is not None else min(1e-5, 1.0 / n)
        check_noise(self.noise)
        unproven = self.privacy if self.privacy in ("gradient", "output") else (
            "input" if self.privacy == "input" and p["value_range"] is None else None
        )
        if unproven is not None:
            what = {"gradient": "privacy='gradient' (Wei et al., Algorithm 2)",
                    "output": "privacy='output' (Wei et al., Algorithm 3)",
                    "input": "privacy='input' without value_range (Wei et al., Algorithm 1 as printed)"}
            require_unproven(what[unproven], UNPROVEN_REASONS[unproven])
        return p

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
                     "clip": p["clip"], "sensitivity": sens, "noise_std": z * sens,
                     "batch_size": min(p["batch_size"], values.shape[0]), "n_epochs": p["n_epochs"],
                     "releases_per_entry_per_epoch": 1},
            dp_event=dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), p["n_epochs"]),
            **common,
        )

    # ------------------------------------------------------------------ fitting
    def fit(self, indices: object, values: object, shape: object) -> TensorCompletion:
        """Fit the model to observed entries.

        Parameters
        ----------
        indices : array-like of int, shape (n, 3)
            Zero-based coordinates of the observed entries (public, see the module docstring).
        values : array-like of float, shape (n,)
        shape : sequence of three ints

        Returns
        -------
        self
        """
        indices, values, shape = check_entries(indices, values, shape)
        n = values.shape[0]
        p = self._check_params(shape, n)
        rng = check_random_state(self.random_state)
        if p["value_range"] is not None:
            # every stage reads the values only inside the declared range
            values = np.clip(values, *p["value_range"])
        guarantee = self._plan_guarantee(p, values)
        source: NoiseSource | None = None
        if guarantee is not None:
            # charged before anything is fitted: a refused charge leaves the model unfitted
            guarantee, source = begin_release(
                guarantee, self.noise, ledger=self.ledger,
                description=f"TensorCompletion {self.model} rank {self.rank}, privacy={self.privacy!r}",
            )
        self.shape_ = shape
        self.n_observed_ = n
        self.history_: list[float] = []
        ranks = p["ranks"]
        factors = [p["init_scale"] * np.abs(rng.standard_normal((shape[m], ranks[m]))) for m in range(3)]
        core = p["init_scale"] * rng.standard_normal(ranks) if self.model == "tucker" else None
        if self.model == "tucker":
            # keep the initial predictions O(init_scale^3): the core acts like a diagonal at start
            core = core / np.sqrt(float(np.prod(ranks)))
            core[np.diag_indices(min(ranks), 3)] += 1.0

        mode = self.privacy
        if mode in ("input", "output_clipped"):
            train_values = self._input_perturbation(values, guarantee, source)
            self._sgd(indices, train_values, factors, core, p, rng, mode=None)
            if mode == "output_clipped":
                self._output_clipped(indices, values, factors, core, p, rng, source)
        elif mode in (None, "output"):
            self._sgd(indices, values, factors, core, p, rng, mode=None)
            if mode == "output":
                self._output_paper(factors, p, source)
        elif mode == "gradient":
            self._sgd(indices, values, factors, core, p, rng, mode="gradient", source=source)
        else:  # gradient_dpsgd
            self.noise_std_ = guarantee.details["noise_std"]
            self._sgd(indices, values, factors, core, p, rng, mode="gradient_dpsgd", source=source,
                      sigma=self.noise_std_)
        self.factors_ = factors
        self.core_ = core
        self.guarantee_ = guarantee
        return self

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
        _, _, _, w = _directions(self.model, core, a[indices[:, 0]], b[indices[:, 1]], c[k])
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
                limited = _clip_residuals(resid, np.linalg.norm(w[sel], axis=1), lip / 2.0)
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
    ) -> None:
        """Mini-batch form of the paper's per-entry SGD on (6)/(7); updates in place.

        ``rng`` is the public randomness (shuffles); ``source`` the secret noise. With
        ``mode="gradient_dpsgd"`` each batch's gradient sum over all parameters -- every
        per-entry squared-error gradient clipped to ``clip`` -- gets ``N(0, sigma^2)`` on every
        coordinate before the step.
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
        # A training error on the raw values is only computed where the values are not private.
        track_error = self.privacy is None or self.privacy == "input"
        for _ in range(p["n_epochs"]):
            order = rng.permutation(n)
            sq_err = 0.0
            for start in range(0, n, batch):
                sel = order[start:start + batch]
                i, j, k = indices[sel, 0], indices[sel, 1], indices[sel, 2]
                a, b, c = a_mat[i], b_mat[j], c_mat[k]
                pred, wa, wb, wc = _directions(self.model, core, a, b, c)
                resid = values[sel] - pred
                if track_error:
                    sq_err += float(resid @ resid)
                if dpsgd:
                    # per-entry clipping of the squared-error gradient over all parameters:
                    # ||2 r w|| <= m  <=>  |r| <= m / (2 ||w||), with w the gradient of x_hat
                    norm2 = (wa * wa).sum(1) + (wb * wb).sum(1) + (wc * wc).sum(1)
                    if tucker:
                        norm2 = norm2 + (a * a).sum(1) * (b * b).sum(1) * (c * c).sum(1)
                    resid = _clip_residuals(resid, np.sqrt(norm2), m / 2.0)
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
                    g_core = -2.0 * _core_gradient(resid, a, b, c) + (2.0 * lam_g * sel.shape[0] / n) * core
                # step of each row: eta, capped at 1/h where h is the trace of the row's Gauss-Newton
                # curvature over this batch (keeps the Jacobi form stable for large batches); it
                # depends on the parameters and the public Omega only
                steps = [_row_steps(eta, rows, w, mat.shape[0])
                         for rows, w, mat in ((i, wa, a_mat), (j, wb, b_mat), (k, wc, c_mat))]
                for rows, g, mat, step in ((i, ga, a_mat, steps[0]), (j, gb, b_mat, steps[1]),
                                           (k, gc, c_mat, steps[2])):
                    if dpsgd:
                        # the batch's gradient sum, noised on every coordinate, then the step
                        total = np.zeros_like(mat)
                        _scatter_add(total, rows, g)
                        mat -= step[:, None] * source.add_gaussian(total, sigma)
                    else:
                        _scatter_add(mat, rows, -step[rows, None] * g)
                if tucker:
                    if dpsgd:
                        g_core = source.add_gaussian(g_core, sigma)
                    h_core = 2.0 * float(np.sum((a * a).sum(1) * (b * b).sum(1) * (c * c).sum(1)))
                    core -= eta / max(1.0, eta * h_core) * g_core
            if track_error:
                self.history_.append(math.sqrt(sq_err / n))
                if not math.isfinite(self.history_[-1]):
                    raise FloatingPointError(
                        "SGD diverged (training error is not finite); lower learning_rate or batch_size"
                    )
            elif not all(np.all(np.isfinite(f)) for f in factors) or (
                tucker and not np.all(np.isfinite(core))
            ):
                # a check of the released (noised) parameters only: post-processing
                raise FloatingPointError(
                    "SGD diverged (the noised parameters are not finite); lower learning_rate"
                )

    # ------------------------------------------------------------------ prediction
    def _check_fitted(self) -> None:
        if not hasattr(self, "factors_"):
            raise NotFittedError("this TensorCompletion is not fitted yet; call fit first")

    def predict(self, indices: object) -> np.ndarray:
        """Completed values at ``indices`` (``(n, 3)`` zero-based, inside the fitted shape)."""
        self._check_fitted()
        indices = check_indices(indices, self.shape_)
        a, b, c = (f[indices[:, m]] for m, f in enumerate(self.factors_))
        return _directions(self.model, self.core_, a, b, c)[0]

    def score(self, indices: object, values: object) -> float:
        """RMSE of the predictions at ``indices`` against ``values`` (Section 5)."""
        self._check_fitted()
        indices, values, _ = check_entries(indices, values, self.shape_)
        return rmse(values, self.predict(indices))

    def to_dense(self) -> np.ndarray:
        """The whole completed tensor (only for small shapes)."""
        self._check_fitted()
        a, b, c = self.factors_
        if self.core_ is None:
            return np.einsum("ir,jr,kr->ijk", a, b, c)
        return np.einsum("pqt,ip,jq,kt->ijk", self.core_, a, b, c, optimize=True)


def rmse(truth: object, estimate: object) -> float:
    """Root mean square error ``sqrt(sum (x - x_hat)^2 / |Omega|)`` (Wei et al., Section 5)."""
    truth = np.asarray(truth, dtype=np.float64)
    estimate = np.asarray(estimate, dtype=np.float64)
    if truth.shape != estimate.shape:
        raise ValueError(f"truth and estimate differ in shape: {truth.shape} vs {estimate.shape}")
    if truth.size == 0:
        raise ValueError("truth is empty")
    return float(np.sqrt(np.mean((truth - estimate) ** 2)))
