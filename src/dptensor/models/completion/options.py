"""The tuning of a :class:`~dptensor.models.completion.TensorCompletion` fit: :class:`CompletionOptions`.

``TensorCompletion``'s constructor takes what a user of the model chooses (the rank, the model, the
privacy mode, its relation and budget, the solver, the offsets, the declared value range, the seed,
the noise, the ledger); the knobs of its solvers and mechanisms live here, passed as ``options=``
and reached by scikit-learn as nested parameters::

    model = TensorCompletion(3, options=CompletionOptions(reg=0.1, max_iter=20))
    model.set_params(options__reg=0.5)                    # GridSearchCV's {"options__reg": [...]}

The command line and the reproduction of seeded fits name every setting flatly:
:func:`dptensor.models._options.build_estimator` routes them (``build_estimator(TensorCompletion,
rank=3, reg=0.1)``) and :func:`dptensor.models._options.flat_params` gives them back, as
:func:`~dptensor.models.completion.plan_completion` takes them.
"""

from __future__ import annotations

from dptensor.models._options import Options
from dptensor.models.completion._plan import PARAMETER_CONSTRAINTS

__all__ = ["OPTION_NAMES", "CompletionOptions"]

#: The names of :class:`CompletionOptions`' parameters (the rest of ``PARAMETER_CONSTRAINTS`` are
#: the estimator's own).
OPTION_NAMES = (
    "context_modes", "learning_rate", "reg", "reg_core", "reg_bias", "n_epochs", "max_iter", "tol",
    "early_stopping", "validation_fraction", "n_iter_no_change", "batch_size", "clip", "clamp",
    "budget_split", "output_epochs", "max_ratings", "start", "init_scale",
)


class CompletionOptions(Options):
    """Solver and mechanism settings of :class:`~dptensor.models.completion.TensorCompletion`.

    Every option has a default that the fit resolves from the privacy mode, the solver and the
    public sizes (:func:`~dptensor.models.completion.plan_completion`; ``None`` and ``"auto"``
    mean "that default"). The options are checked when the estimator fits, before any budget is
    charged or any value read. The modes are those of ``TensorCompletion``'s ``privacy``; "ALS" and
    "SGD" are the resolved ``solver``.

    Parameters
    ----------
    context_modes : "auto" or tuple of ints, default "auto"
        Modes whose rows are shrunk towards the all-ones row; ``"auto"``: ``(2,)`` with ALS
        (the third mode is a context such as a day), ``()`` with SGD (the paper's objective).
    learning_rate : float, optional
        SGD's per-entry step ``eta``; default 0.005 (Section 5.1), 0.5 for ``"gradient_dpsgd"``
        (full-batch steps capped at ``1 / h`` per row). Unused by ALS.
    reg : float or "auto", optional
        ``lambda`` of (6) / ``lambda_o`` of (7). Default: 0.01 for SGD (the paper), ``"auto"``
        for non-private ALS (chosen on a validation split, see ``TensorCompletion``), and
        ``10 ((hi - lo) / 4)^(4/3)`` for ``"als"``.
    reg_core : float, optional
        ``lambda_g`` of (7) (Tucker only); default ``reg / 10`` for SGD (the paper's ratio), ``reg``
        for ALS.
    reg_bias : float, optional
        Penalty of the biases; default ``reg``. For ``"als"`` the biases' prior variance is
        ``((hi - lo) / 4)^2 / reg_bias``; default 5 there (both relations).
    n_epochs : int, optional
        SGD passes over the observed entries (``tau``); default 100 (the paper's maximum
        iterations), 20 for ``"gradient_dpsgd"``.
    max_iter : int, optional
        ALS sweeps: at most 100 without privacy (stopped by ``tol`` or early stopping); exactly
        this many for ``"als"`` (default 2; 1 under ``neighbouring="user"``).
    tol : float, default 1e-4
        Non-private ALS stops when the objective (or, with a validation split, the validation RMSE)
        improves by less than this fraction.
    early_stopping : bool, default False
        Non-private ALS with a fixed ``reg``: stop on a validation split (``validation_fraction``
        of the entries, drawn from ``random_state``) and keep the best sweep.
    validation_fraction : float in (0, 1), default 0.1
        The share of the entries held out by ``reg="auto"`` and ``early_stopping``.
    n_iter_no_change : int, default 3
        Sweeps without improvement before early stopping.
    batch_size : int, optional
        SGD entries evaluated together (1 = the sequential algorithm); default 256, all entries
        (one step per epoch) for ``"gradient_dpsgd"``.
    clip : float, optional
        A clipping bound whose meaning **depends on the mode**:

        * ``"gradient"`` (Algorithm 2): ``m``, the clip of each entry's gradient of ``c_k``
          (sensitivity ``Delta = 2m``);
        * ``"output"`` (Algorithm 3) and ``"output_clipped"``: the Lipschitz constant ``L``
          (each entry's gradient clipped to norm ``L``; ``Delta = 2 tau L eta``);
        * ``"gradient_dpsgd"``: the l2 clip of each entry's whole gradient (sensitivity
          ``2 clip``); default ``(hi - lo) / 2`` with a declared ``value_range``;
        * ``"als"`` under ``neighbouring="user"``: the bound ``B`` on each entry's design norm
          (unused under ``"entry-value"``, whose Gram matrices are public);
        * unused without privacy and by ``"input"``.

        Default 1.0 wherever no other default is named.
    clamp : bool, default True
        ``"input"`` and ``"output_clipped"``: clamp the input-perturbed values back to the range
        (Section 4.2, post-processing).
    budget_split : float in (0, 1), optional
        A share of the budget whose meaning **depends on the mode**:

        * ``"output_clipped"``: the share of ``epsilon`` spent on the output-perturbation stage
          (the input perturbation gets the rest); default 0.5;
        * ``"als"`` under ``"entry-value"``: the share of ``epsilon`` for the offsets' Laplace
          release when factors follow (the Gaussian sweeps get the rest); default 0.9;
        * ``"als"`` under ``"user"``: the share of the Gaussian budget ``mu^2`` for the global
          mean; default 0.1 (a mode with a single row is not released, so a user x item matrix
          given as ``(n, m, 1)`` spends the rest on the items alone);
        * unused by the other modes.
    output_epochs : int, default 10
        ``"output_clipped"``: passes ``tau`` of the convex refit of ``C``.
    max_ratings : int or "auto", default "auto"
        ``"als"`` under ``"user"``: a user's contribution to each release is bounded as if they had
        at most this many ratings (larger contributions are scaled down, silently). ``"auto"``: 10,
        growing once the users are many enough for the noise on each item's statistics to be small
        (public sizes and parameters only: ``10 (u / 350)^1.25`` up to 300, ``u = n_users / (z
        sqrt(n_items))``, ``z`` the item release's noise multiplier; with 1 682 items at epsilon 1 and
        delta 1e-6, 10 up to about 7e4 users, 249 at 1e6, 300 from about 1.2e6); the bound used is
        the fitted ``max_ratings_``.
    start : {"auto", "spectral", "random"}, default "auto"
        ``"als"`` under ``"user"``: where the item factors start. ``"spectral"``: from the leading
        eigenvectors of a noisy release of the covariance of users' rating vectors (it takes 30% of
        the budget the sweeps would get; at most 4096 items); ``"random"``: data-independent.
        ``"auto"``: spectral where the users are many enough for its eigenvectors to stand above
        the noise (public sizes only: ``n_users >= 100 z sqrt(n_items)``, ``z`` its noise
        multiplier; about 3.3e4 users of 1 682 items at epsilon 1, 9.4e3 at epsilon 4).
    init_scale : float, optional
        SGD: factors start as ``init_scale * |N(0, 1)|`` (default 0.5, data-independent), the core
        as ``init_scale * N(0, 1)``. ALS: ``init_scale * N(0, 1)`` with a default from the
        values' spread (without privacy) or the declared range (``"als"``).

    Examples
    --------
    >>> from dptensor.models.completion import CompletionOptions, TensorCompletion
    >>> model = TensorCompletion(2, options=CompletionOptions(reg=0.1, max_iter=5))
    >>> model.get_params()["options__reg"]
    0.1
    """

    _parameter_constraints: dict = {name: PARAMETER_CONSTRAINTS[name] for name in OPTION_NAMES}

    def __init__(
        self,
        *,
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
        clamp: bool = True,
        budget_split: float | None = None,
        output_epochs: int = 10,
        max_ratings: int | str = "auto",
        start: str = "auto",
        init_scale: float | None = None,
    ) -> None:
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
        self.clamp = clamp
        self.budget_split = budget_split
        self.output_epochs = output_epochs
        self.max_ratings = max_ratings
        self.start = start
        self.init_scale = init_scale
