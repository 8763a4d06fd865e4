"""``Recommender``: top-N lists from implicit feedback (popularity, EASE, implicit ALS).

A thin scikit-learn estimator over the functions that do the work: it checks its parameters and
the input, calls :func:`fit_recommender` (which returns the fitted item side) and sets its fitted
attributes in one place. The lists come from :func:`~dptensor.models.recommend.ranking.top_n`.

Methods (``method=``):

* ``"popularity"`` -- every user gets the items most users chose (the model that learns nothing
  about the user; the baseline every other model must beat);
* ``"ease"`` -- Steck's item-item model (:mod:`~dptensor.models.recommend.ease`), dense up to
  ``options.dense_items`` items and in its low-rank form above;
* ``"ials"`` -- implicit ALS (Hu, Koren & Volinsky 2008; :mod:`~dptensor.models.recommend.ials`);
* ``"auto"`` (default) -- EASE: on MovieLens-100K it has the best NDCG@10 of the three and fits
  fastest (docs/recommend.md has the table).
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

from dptensor._validation import NotFittedError, check_random_state
from dptensor.models._base import forget_fitted_attributes
from dptensor.models.recommend import ials
from dptensor.models.recommend._input import check_interactions
from dptensor.models.recommend.ease import LowRankEase, ease_from_gram, ease_ridge, fit_low_rank_ease
from dptensor.models.recommend.ials_blocks import implicit_als_blocks
from dptensor.models.recommend.options import RecommenderOptions
from dptensor.models.recommend.ranking import Recommendations, check_top_n, check_users, top_n
from dptensor.models.recommend.statistics import item_counts, item_gram
from dptensor.parallel import as_row_blocks, is_dask_collection

__all__ = ["METHODS", "ItemSide", "Recommender", "TopNMixin", "fit_recommender", "item_side_scores"]

#: The methods of :class:`Recommender` (``"auto"`` resolves to one of the others).
METHODS = ("auto", "popularity", "ease", "ials")
#: Implicit ALS factors when ``n_factors`` is not given.
DEFAULT_FACTORS = 64


@dataclass(frozen=True)
class ItemSide:
    """What a fitted top-N model keeps of the training users: the item side, nothing per user.

    Attributes
    ----------
    method : str
        ``"popularity"``, ``"ease"`` or ``"ials"``.
    popularity : ndarray, shape (n_items,)
        Item counts (noisy for a private model); ranks items for ``"popularity"`` and breaks ties
        of the other methods' empty rows.
    weights : ndarray (n_items, n_items), LowRankEase or None
        EASE's ``B``.
    factors : ndarray (n_items, k) or None
        Implicit ALS's item factors.
    regularization, alpha, regularization_exponent : float
        Implicit ALS's settings, for folding users in.
    columns : ndarray of int64 or None
        The columns of the users' rows this item side covers (``None``: all of them, in order); a
        private model with a selected catalogue covers the selected items only.
    n_columns : int or None
        The columns of the users' rows (``None``: the items of the item side).
    """

    method: str
    popularity: np.ndarray
    weights: np.ndarray | LowRankEase | None = None
    factors: np.ndarray | None = None
    regularization: float = 0.0
    alpha: float = 0.0
    regularization_exponent: float = 0.0
    columns: np.ndarray | None = None
    n_columns: int | None = None

    @property
    def n_items(self) -> int:
        """Items the item side scores."""
        return int(self.popularity.shape[0])

    @property
    def width(self) -> int:
        """Columns of the users' rows."""
        return self.n_items if self.n_columns is None else int(self.n_columns)


def _covered_scores(side: ItemSide, rows: sp.csr_array) -> np.ndarray:
    """Scores of the item side's items for rows restricted to them; an empty row gets popularity."""
    if side.method == "popularity":
        return np.broadcast_to(side.popularity, (rows.shape[0], side.n_items)).copy()
    if side.method == "ease":
        weights = side.weights
        scores = weights.scores(rows) if isinstance(weights, LowRankEase) else np.asarray(rows @ weights)
    else:
        users = ials.solve_user_factors(
            rows, side.factors, regularization=side.regularization, alpha=side.alpha,
            regularization_exponent=side.regularization_exponent,
        )
        scores = users @ side.factors.T
    empty = np.diff(rows.indptr) == 0
    scores[empty] = side.popularity
    return scores


def item_side_scores(side: ItemSide, rows: sp.csr_array) -> np.ndarray:
    """Scores of every column for each of the binary user ``rows``, from the item side only.

    A row with no interaction among the covered items is scored by popularity; columns the item
    side does not cover (items not selected under DP) score NaN and are never listed.
    """
    if side.columns is None:
        return _covered_scores(side, rows)
    scores = np.full((rows.shape[0], side.width), np.nan)
    scores[:, side.columns] = _covered_scores(side, sp.csr_array(rows[:, side.columns]))
    return scores


def fit_recommender(
    X: object, method: str = "auto", *, n_factors: int | None = None,
    options: RecommenderOptions | None = None, random_state: object = None, n_jobs: int | None = None,
    verbose: bool = False,
) -> ItemSide:
    """Fit a non-private top-N model on binary user rows; returns its :class:`ItemSide`.

    Parameters
    ----------
    X : scipy sparse matrix, array_like or dask.array
        Users x items; a non-zero entry is an interaction. A ``dask.array`` (SciPy sparse row
        chunks) is read where its chunks are: popularity and the dense EASE sum their statistics
        over the chunks, implicit ALS runs exact half-steps, one pass over the chunks per sweep
        (:mod:`~dptensor.models.recommend.ials_blocks`); the low-rank EASE needs in-memory input.
    method : {"auto", "popularity", "ease", "ials"}
    n_factors : int, optional
        Implicit ALS factors (default 64).
    options : RecommenderOptions, optional
    random_state : None, int or Generator
    n_jobs : int, optional
        Threads for the passes over users (``-1``: every core).
    verbose : bool
        Progress of the ALS sweeps.

    Returns
    -------
    ItemSide
    """
    options = (options or RecommenderOptions()).checked()
    blocks = as_row_blocks(X, n_jobs=n_jobs)
    n_items = blocks.n_cols
    method = "ease" if method == "auto" else method
    popularity = item_counts(blocks)
    if method == "popularity":
        return ItemSide("popularity", popularity)
    if method == "ease":
        if n_items > options.dense_items:
            local = check_interactions(X) if not is_dask_collection(X) else _gather(blocks)
            weights = fit_low_rank_ease(local, options.low_rank, options.ridge,
                                        ridge_scale=options.ridge_scale,
                                        random_state=check_random_state(random_state))
            return ItemSide("ease", popularity, weights=weights)
        gram = item_gram(blocks)
        ridge = options.ridge if options.ridge is not None else ease_ridge(np.diag(gram), options.ridge_scale)
        return ItemSide("ease", popularity, weights=ease_from_gram(gram, ridge))
    # On Dask the users stay in their blocks: exact half-steps, one pass per sweep (ials_blocks).
    fit_ials = implicit_als_blocks if is_dask_collection(X) else ials.implicit_als
    fitted = fit_ials(
        X, n_factors or DEFAULT_FACTORS, regularization=options.regularization, alpha=options.alpha,
        iterations=options.iterations, random_state=random_state, n_jobs=n_jobs, verbose=verbose,
    )
    return ItemSide("ials", popularity, factors=fitted.item_factors, regularization=fitted.regularization,
                    alpha=fitted.alpha)


def _gather(blocks: object) -> sp.csr_array:
    """Every block's rows in this process (the methods that need the whole matrix here)."""
    raise ValueError("the low-rank EASE (more items than options.dense_items) needs the interaction matrix "
                     "in memory: pass a SciPy sparse matrix, or raise options.dense_items for a dense EASE "
                     "on a Dask collection (its I x I Gram is summed over the blocks)")


class TopNMixin:
    """``recommend``, ``recommend_for`` and ``score_rows`` of a fitted model with ``item_side_``.

    The training rows are kept (``_train``, the caller's own data, never saved with the model) so
    that ``recommend`` can leave out each training user's items and score them from their row.
    """

    def _check_fitted(self) -> None:
        if not hasattr(self, "item_side_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet: call fit(X) first")

    def score_rows(self, X_rows: object) -> np.ndarray:
        """Scores of every item for each row of ``X_rows`` (users' interactions), from the item side.

        Parameters
        ----------
        X_rows : scipy sparse matrix or array_like, shape (n_rows, n_items)

        Returns
        -------
        ndarray, shape (n_rows, n_items)
        """
        self._check_fitted()
        rows = check_interactions(X_rows, name="X_rows", n_items=self.item_side_.width)
        return item_side_scores(self.item_side_, rows)

    def recommend(self, n: int | None = 10, users: object = None) -> Recommendations:
        """Each training user's ``n`` best items among those not in their training row.

        Parameters
        ----------
        n : int, default 10
            Items per user (``None``: ``min(10, n_items)``).
        users : array_like of int, optional
            Training users (rows of the fitted ``X``); default: every one.

        Returns
        -------
        Recommendations
            Under a private model, user ``u``'s list is computed from ``u``'s own row and the release
            (joint DP): give it to ``u`` alone.
        """
        self._check_fitted()
        train = getattr(self, "_train", None)
        if train is None:
            raise ValueError(
                "this model keeps no training rows (it was loaded from a file or fitted on a Dask "
                "collection): use recommend_for(X_rows) with the users' own rows"
            )
        n = check_top_n(n, self.item_side_.width)
        chosen = check_users(users, train.shape[0])
        return top_n(lambda rows: item_side_scores(self.item_side_, rows), train, n, chosen,
                     self.item_side_.columns)

    def recommend_for(self, X_new: object, n: int | None = 10) -> Recommendations:
        """The ``n`` best items of new users, from their own rows and the fitted item side only.

        Parameters
        ----------
        X_new : scipy sparse matrix or array_like, shape (n_new_users, n_items)
            Each new user's interactions (left out of their list).
        n : int, default 10

        Returns
        -------
        Recommendations
            ``users`` are the rows of ``X_new``.
        """
        self._check_fitted()
        rows = check_interactions(X_new, name="X_new", n_items=self.item_side_.width)
        n = check_top_n(n, self.item_side_.width)
        return top_n(lambda block: item_side_scores(self.item_side_, block), rows, n,
                     eligible=self.item_side_.columns)


class Recommender(TopNMixin, BaseEstimator):
    """Top-N recommendations from implicit feedback (non-private).

    Parameters
    ----------
    method : {"auto", "popularity", "ease", "ials"}, default "auto"
        See the module docstring; ``"auto"`` is EASE.
    n_factors : int, optional
        Implicit ALS factors (default 64).
    options : RecommenderOptions, optional
        Solver settings (ridge rule, ALS regularisation, ...).
    random_state : None, int or Generator
    n_jobs : int, optional
        Threads for the passes over users.
    verbose : bool, default False

    Attributes
    ----------
    method_ : str
        The method fitted.
    item_side_ : ItemSide
        The fitted item side (all a saved model holds).
    popularity_ : ndarray, shape (n_items,)
        Training users per item.
    n_users_, n_items_ : int
    n_features_in_ : int
        ``n_items_`` (scikit-learn's name for the columns seen at fit).

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from dptensor.models.recommend import Recommender
    >>> X = sp.random(200, 30, density=0.2, format="csr", random_state=0)
    >>> model = Recommender().fit(X)
    >>> model.recommend(5).items.shape
    (200, 5)
    """

    _parameter_constraints: dict = {
        "method": [StrOptions(set(METHODS))],
        "n_factors": [Interval(Integral, 1, None, closed="left"), None],
        "options": [None, HasMethods(["get_params", "checked"])],
        "random_state": ["random_state"],
        "n_jobs": [Integral, None],
        "verbose": ["verbose"],
    }

    def __init__(self, method: str = "auto", n_factors: int | None = None,
                 options: RecommenderOptions | None = None, random_state: object = None,
                 n_jobs: int | None = None, verbose: bool = False) -> None:
        self.method = method
        self.n_factors = n_factors
        self.options = options
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: object, y: object = None) -> Recommender:
        """Fit on a user x item matrix whose non-zero entries are interactions.

        Parameters
        ----------
        X : scipy sparse matrix or array_like, shape (n_users, n_items)
        y : ignored

        Returns
        -------
        self
        """
        forget_fitted_attributes(self)
        (self.options or RecommenderOptions()).checked()
        train = None if is_dask_collection(X) else check_interactions(X)
        side = fit_recommender(train if train is not None else X, self.method, n_factors=self.n_factors,
                               options=self.options, random_state=self.random_state, n_jobs=self.n_jobs,
                               verbose=self.verbose)
        self._train = train
        self.item_side_ = side
        self.method_ = side.method
        self.popularity_ = side.popularity
        self.n_items_ = side.n_items
        self.n_features_in_ = side.n_items
        self.n_users_ = int(train.shape[0]) if train is not None else int(as_row_blocks(X).n_rows)
        return self

    def __sklearn_tags__(self):  # noqa: ANN204 - sklearn.utils.Tags
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        tags.requires_fit = True
        return tags
