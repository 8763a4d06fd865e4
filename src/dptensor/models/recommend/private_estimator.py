"""``PrivateRecommender``: top-N lists whose item side is released under user-level DP (joint DP).

The relation is ``"user"``: one user's whole row of interactions replaced by any other row (empty,
one item, every item); the number of users is public, and so is the item list unless
``catalogue="select"`` chooses it under DP. What is released is the item side only -- noisy item
counts (private popularity, recounted over the candidates they choose:
:mod:`~dptensor.models.recommend.private_popularity`) and, for EASE, a noisy item Gram
(:mod:`~dptensor.models.recommend.releases`), for implicit ALS the noisy item-side sums of each
sweep (:mod:`~dptensor.models.recommend.private_ials`) -- composed exactly into one guarantee
(:mod:`~dptensor.models.recommend.release_plan`) and charged to the ledger before the data is read.
A user's list is then computed from that user's own row and the release, so it must be given to
that user alone (joint DP in the billboard sense; Kearns, Pai, Roth & Ullman 2014; Hsu et al. 2014).

A private EASE solves Steck's closed form on the noisy Gram with a ridge that adds the noise's
spectral-norm scale to the non-private rule (a noisy Gram is indefinite; the ridge both makes the
system positive definite and shrinks the noise directions), all post-processing of the release.
Where the users are too few for the Gram's signal to rise above its noise, popularity wins:
``method="auto"`` asks the planner (:func:`~dptensor.models.recommend.plan.plan_recommender`),
from public sizes only, which of the two to release.

A private implicit ALS (``method="ials"``; DPALS with the adaptive weights of AdaDPALS, Chien et al.
2021, Krichene et al. 2023) releases, in each of ``options.private_ials_iterations`` sweeps, the
noised sums ``G = sum_u w_u x_u x_u^T`` (the unobserved items' term), ``A_i`` and ``b_i`` of the item
half-step, ``w_u = 1/sqrt(n_u)`` and ``x_u`` each user's clipped factors solved from their own row;
the item factors solved from the last release are kept, and each user's list is folded in from
their row and those factors. The counts get ``options.counts_share`` of the budget (they rank items
for users with an empty row), the sweeps the rest.
"""

from __future__ import annotations

import math
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

from dptensor.models._base import PrivateEstimatorMixin, RealNotBool, forget_fitted_attributes
from dptensor.models.recommend._input import check_interactions
from dptensor.models.recommend.ease import ease_from_gram, ease_ridge
from dptensor.models.recommend.estimator import ItemSide, TopNMixin
from dptensor.models.recommend.options import RecommenderOptions
from dptensor.models.recommend.plan import plan_recommender
from dptensor.models.recommend.private_ials import (
    SweepRelease,
    ials_sweeps,
    initial_item_factors,
    private_ials_sweeps,
)
from dptensor.models.recommend.private_popularity import candidate_items, popularity_ranking, private_recounts
from dptensor.models.recommend.release_plan import ReleasePlan, recommender_guarantee
from dptensor.models.recommend.releases import (
    private_item_counts,
    private_item_gram,
    private_item_selection,
    select_columns,
    user_blocks,
)
from dptensor.parallel import is_distributed, public_shape
from dptensor.privacy import NOISE_BACKENDS, InsecureTestNoise, NoiseSource
from dptensor.privacy.errors import ReleaseUtilityWarning
from dptensor.privacy.guarantee import PrivacyGuarantee

__all__ = ["DEFAULT_PRIVATE_FACTORS", "KEPT_GRAMS", "PRIVATE_METHODS", "PrivateRecommender",
           "private_ease_ridge"]

#: The most numbers of released ``A_i`` stacks a private implicit ALS keeps in ``sweeps_`` (64 MB).
KEPT_GRAMS = 2**23

#: The methods of :class:`PrivateRecommender` (``"auto"`` plans between popularity and EASE only).
PRIVATE_METHODS = ("auto", "popularity", "ease", "ials")
#: The private implicit ALS's factors when ``n_factors`` is not given (measured: docs/recommend.md).
DEFAULT_PRIVATE_FACTORS = 16
#: ``max_items_per_user`` of the item selection when none is given.
DEFAULT_SELECTION_BOUND = 64
#: Ridge growth when the noisy system is not positive definite (post-processing, rare).
_RIDGE_GROWTH = 2.0


def private_ease_ridge(noisy_diagonal: np.ndarray, sigma: float, n_items: int,
                       options: RecommenderOptions) -> float:
    """The ridge of a private EASE: the non-private rule on the noisy diagonal plus the noise edge.

    ``lambda = ridge_scale * mean(diag G~) + private_ridge_scale * sqrt(2) sigma sqrt(I)``: the second
    term is the spectral norm of the symmetric Gaussian noise (off-diagonal std ``sigma / sqrt(2)``,
    a Wigner matrix of norm about ``2 (sigma / sqrt(2)) sqrt(I)``). Both are functions of the release
    and public sizes (post-processing).
    """
    base = options.ridge if options.ridge is not None else ease_ridge(noisy_diagonal, options.ridge_scale)
    return float(base + options.private_ridge_scale * math.sqrt(2.0) * sigma * math.sqrt(n_items))


class PrivateRecommender(PrivateEstimatorMixin, TopNMixin, BaseEstimator):
    """Top-N recommendations whose item side is ``(epsilon, delta)``-DP under the user relation.

    Parameters
    ----------
    epsilon : float, default 1.0
        The total budget of the fit (the releases' exact composition spends it).
    delta : float, default 1e-6
    method : {"auto", "popularity", "ease", "ials"}, default "auto"
        ``"auto"``: the planner's choice from the public sizes (popularity below the crossover
        number of users, EASE above); with ``catalogue="select"`` there is no public number of
        items to plan from, so the method must be named. ``"ials"``: the private implicit ALS
        (module docstring); never chosen by ``"auto"``.
    max_items_per_user : int, optional
        The public bound on one user's contribution to the item selection (default 64 there).
    catalogue : {"public", "select"}, default "public"
        ``"public"``: the columns of ``X`` are a public item list; ``"select"``: the items that may
        appear are chosen under DP (Gaussian partition selection, in the same guarantee).
    n_factors : int, optional
        The private implicit ALS's factors (default :data:`DEFAULT_PRIVATE_FACTORS`); only
        ``method="ials"`` uses it.
    options : RecommenderOptions, optional
        Solver settings, including the private ridge and the counts' share of the budget.
    random_state : None, int or Generator
        Public randomness: the private implicit ALS's initial item factors (the releases' noise is
        secret).
    n_jobs : int, optional
        Threads for the passes over users.
    noise : None, "numpy", "opendp", InsecureTestNoise or NoiseSource
        The noise's secret randomness.
    ledger : object with ``charge``, optional
        Charged with the guarantee before the data is read.
    verbose : bool, default False

    Attributes
    ----------
    guarantee_ : PrivacyGuarantee
        Neighbouring ``"user"``, every release composed exactly.
    plan_ : RecommenderPlan or None
        The planner's verdict when ``method="auto"``.
    method_ : str
    item_side_ : ItemSide
        The release (noisy counts; EASE's weights from the noisy Gram; implicit ALS's item factors
        from the last sweep's noisy sums).
    popularity_ : ndarray
        The noisy item counts (the first round of private popularity).
    candidates_ : ndarray of int64
        ``method="popularity"``: the columns recounted, the ``options.recount_items`` largest noisy
        counts (:mod:`~dptensor.models.recommend.private_popularity`); empty for the other methods.
    recounts_ : ndarray
        Their noisy recounts (each user's row cut to the candidates, weighted anew to norm 1); a
        popularity list ranks the candidates by them, then the rest by ``popularity_``
        (``item_side_.popularity`` holds that ranking).
    items_ : ndarray of int64
        The columns the model may recommend (all, or those selected under DP).
    sweeps_ : list of SweepRelease
        ``method="ials"``: per sweep, the item factors the users solved against and the released
        statistics (:class:`~dptensor.models.recommend.private_ials.SweepRelease`; what an audit
        scores). The ``A_i`` stacks are kept only where ``n_items k^2 iterations`` is at most
        ``KEPT_GRAMS`` numbers (public sizes), ``None`` above. Empty for the other methods; not
        saved in model files.
    n_users_, n_items_, n_features_in_ : int

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from dptensor.models.recommend import PrivateRecommender
    >>> X = sp.random(2000, 30, density=0.1, format="csr", random_state=0)
    >>> model = PrivateRecommender(epsilon=1.0, delta=1e-6).fit(X)
    >>> model.guarantee_.neighbouring, model.recommend(5).items.shape
    ('user', (2000, 5))
    """

    _parameter_constraints: dict = {
        "epsilon": [RealNotBool(Real, 0, None, closed="neither")],
        "delta": [RealNotBool(Real, 0, 1, closed="neither")],
        "method": [StrOptions(set(PRIVATE_METHODS))],
        "max_items_per_user": [Interval(Integral, 1, None, closed="left"), None],
        "catalogue": [StrOptions({"public", "select"})],
        "n_factors": [Interval(Integral, 1, None, closed="left"), None],
        "options": [None, HasMethods(["get_params", "checked"])],
        "random_state": ["random_state"],
        "n_jobs": [Integral, None],
        "noise": [None, StrOptions(set(NOISE_BACKENDS)), InsecureTestNoise, NoiseSource],
        "ledger": [None, HasMethods(["charge"])],
        "verbose": ["verbose"],
    }

    def __init__(self, epsilon: float = 1.0, delta: float = 1e-6, method: str = "auto",
                 max_items_per_user: int | None = None, catalogue: str = "public",
                 n_factors: int | None = None, options: RecommenderOptions | None = None,
                 random_state: object = None,
                 n_jobs: int | None = None, noise: object = None, ledger: object = None,
                 verbose: bool = False) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.method = method
        self.max_items_per_user = max_items_per_user
        self.catalogue = catalogue
        self.n_factors = n_factors
        self.options = options
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.noise = noise
        self.ledger = ledger
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: object, y: object = None) -> PrivateRecommender:
        """Release the item side of ``X`` under user-level DP and keep the rows for ``recommend``.

        The guarantee is computed from the public sizes (users, items, the bound) and charged
        before any interaction is read; the input is checked first (a refused input charges
        nothing and its error names no value).

        Parameters
        ----------
        X : scipy sparse matrix or array_like, shape (n_users, n_items)
            Non-zero = an interaction; the number of users is public, and so is the item list
            under ``catalogue="public"``.
        y : ignored

        Returns
        -------
        self
        """
        forget_fitted_attributes(self)
        options = (self.options or RecommenderOptions()).checked()
        # Dask input stays where it is: its public shape here, binarised block by block in the releases
        train = None if is_distributed(X) else check_interactions(X)
        n_users, n_items = public_shape(X, layout="users x items") if train is None else train.shape
        plan = None
        method = self.method
        selecting = self.catalogue == "select"
        self._check_auto()
        if method == "auto":
            plan = plan_recommender(n_users, n_items, epsilon=self.epsilon, delta=self.delta,
                                    max_items_per_user=self.max_items_per_user,
                                    counts_share=options.counts_share, recount_share=options.recount_share)
            method = plan.method
        if method == "ease" and not selecting:
            _check_dense(n_items, options)
        releases_plan = self._release_plan(method, options, n_users, n_items)
        source = self._begin_release(releases_plan.guarantee, f"PrivateRecommender fit ({method})",
                                     n_public=n_users, unit="users")
        # -- the data is read from here on ------------------------------------------------------
        data = train if train is not None else user_blocks(X)
        columns = np.arange(n_items, dtype=np.int64)
        if selecting:
            columns = private_item_selection(data, source=source, calibration=releases_plan.selection,
                                             n_jobs=self.n_jobs)
        if method == "ease" and selecting:  # the released selection's size: post-processing
            _check_dense(columns.size, options, spent=True)
        kept = select_columns(data, columns) if selecting else data
        if columns.size:
            counts = private_item_counts(kept, sigma=releases_plan.sigma("counts"), source=source,
                                         n_jobs=self.n_jobs)
        else:  # nothing passed the selection's threshold: nothing to release, every list empty
            counts = np.zeros(0)
            warnings.warn(
                "PrivateRecommender: no item passed the private selection's threshold, so every list is "
                "empty; more users, a larger epsilon or a public item list (catalogue='public') keep items",
                ReleaseUtilityWarning, stacklevel=3,
            )
        ranking, candidates, recounts = counts, np.zeros(0, dtype=np.int64), np.zeros(0)
        if method == "popularity" and columns.size:
            candidates = candidate_items(counts, options.recount_items)
            sigmas = {"sigma_counts": releases_plan.sigma("counts"),
                      "sigma_recount": releases_plan.sigma("recount")}
            recounts = private_recounts(kept, candidates, sigma=sigmas["sigma_recount"], source=source,
                                        n_jobs=self.n_jobs)
            ranking = popularity_ranking(counts, candidates, recounts, **sigmas)
        side = ItemSide("popularity", ranking, columns=columns, n_columns=n_items)
        history: list[SweepRelease] = []
        if method == "ease" and columns.size:
            weights = self._ease(kept, releases_plan.sigma("gram"), source, options)
            side = ItemSide("ease", counts, weights=weights, columns=columns, n_columns=n_items)
        if method == "ials" and columns.size:
            settings = releases_plan.sweeps.settings
            start = initial_item_factors(columns.size, settings["n_factors"], self.random_state)
            # the A_i stacks of every sweep kept only where public sizes say they are small
            keep = columns.size * settings["n_factors"] ** 2 * releases_plan.sweeps.iterations <= KEPT_GRAMS
            items = private_ials_sweeps(kept, start, plan=releases_plan, source=source, n_jobs=self.n_jobs,
                                        history=history, keep_grams=keep)
            side = ItemSide("ials", counts, factors=items, regularization=settings["regularization"],
                            alpha=settings["alpha"], columns=columns, n_columns=n_items)
        self._train = train
        self.plan_ = plan
        self.method_ = side.method
        self.item_side_ = side
        self.popularity_ = counts
        self.items_ = columns
        self.candidates_ = columns[candidates]
        self.recounts_ = recounts
        self.sweeps_ = history
        self.n_items_ = n_items
        self.n_features_in_ = n_items
        self.n_users_ = n_users
        return self

    def _check_auto(self) -> None:
        if self.method == "auto" and self.catalogue == "select":
            raise ValueError(
                "method='auto' plans from the public number of items, which catalogue='select' does not "
                "have: pass method='popularity', 'ease' or 'ials' "
                "(dptensor.models.recommend.plan_recommender "
                "with the number of items you expect to be selected tells which)"
            )

    def _release_plan(self, method: str, options: RecommenderOptions, n_users: int | None = None,
                      n_items: int | None = None) -> ReleasePlan:  # fmt: skip
        """The releases of a fit by ``method`` and their calibration, from public inputs only."""
        selecting = self.catalogue == "select"
        model = {"popularity": ("recount",), "ease": ("gram",), "ials": ("ials",)}[method]
        releases = (("selection",) if selecting else ()) + ("counts",) + model
        counts_share = 1.0 - options.recount_share if method == "popularity" else options.counts_share
        shares = {"counts": counts_share, model[0]: 1.0 - counts_share}
        if selecting:  # the selection as much of mu^2 as the rest
            shares = {"selection": 1.0, **shares}
        sweeps = None
        if method == "ials":
            sweeps = ials_sweeps(options.private_ials_iterations, alpha=options.private_ials_alpha,
                                 n_factors=self.n_factors or DEFAULT_PRIVATE_FACTORS,
                                 regularization=options.private_ials_regularization,
                                 clip=options.private_ials_clip)
        bound = self.max_items_per_user or (DEFAULT_SELECTION_BOUND if selecting else None)
        # under "select" the columns are not a public catalogue (a reader maps the ids it found), so
        # their number is not recorded: only the selection's outcome is released
        return recommender_guarantee(
            releases, self.epsilon, self.delta, shares=shares, max_items_per_user=bound,
            n_users=n_users, n_items=None if selecting else n_items, sweeps=sweeps,
        )

    def planned_guarantees(self) -> list[PrivacyGuarantee]:
        """The guarantees a fit may charge, from the parameters alone (no data, no sizes, no charge).

        One for a named ``method``; for ``"auto"``, popularity's and EASE's (the planner chooses
        from the number of users, known only once the input is read). A command asks its ledger
        about them before it parses its input (:func:`dptensor.cli._privacy.refuse_before_parsing`).
        The sizes a fit records in ``details`` are left out; the charges are the same.
        """
        self._validate_params()
        self._check_auto()
        options = (self.options or RecommenderOptions()).checked()
        methods = ("popularity", "ease") if self.method == "auto" else (self.method,)
        return [self._release_plan(method, options).guarantee for method in methods]

    def _ease(self, kept: object, sigma: float, source: NoiseSource,
              options: RecommenderOptions) -> np.ndarray:
        """EASE's weights from the noisy Gram (post-processing of the release)."""
        gram = private_item_gram(kept, sigma=sigma, source=source, n_jobs=self.n_jobs)
        ridge = private_ease_ridge(np.diag(gram), sigma, gram.shape[0], options)
        while True:
            try:
                return ease_from_gram(gram, ridge)
            except ValueError:
                ridge *= _RIDGE_GROWTH

    def __sklearn_tags__(self):  # noqa: ANN204 - sklearn.utils.Tags
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        tags.non_deterministic = True
        return tags


def _check_dense(n_items: int, options: RecommenderOptions, spent: bool = False) -> None:
    """Refuse a private EASE whose dense noisy Gram would exceed ``options.dense_items``.

    Under ``catalogue="select"`` it runs on the selection's outcome (a release), never on the
    input's columns, whose number a reader takes from the private data.
    """
    if n_items > options.dense_items:
        when = (" (the budget was spent on the item selection, which chose them)" if spent else "")
        raise ValueError(
            f"a private EASE forms a dense {n_items} x {n_items} noisy Gram, above options.dense_items="
            f"{options.dense_items}{when}: raise it, or use method='popularity'"
        )
