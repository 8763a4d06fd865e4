"""Tuning of the top-N models, apart from what a user chooses: one option object, shared.

:class:`~dptensor.models.recommend.Recommender` and
:class:`~dptensor.models.recommend.PrivateRecommender` take what a user chooses in their
constructors (the method, the number of factors, the budget); the solver settings live in a
:class:`RecommenderOptions`, which scikit-learn reaches as nested parameters
(``Recommender(options=RecommenderOptions()).set_params(options__ridge_scale=2.0)``,
``GridSearchCV(..., {"options__ridge_scale": [1, 4, 16]})``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from numbers import Integral, Real

__all__ = ["RecommenderOptions", "check_share"]


def check_share(value: object, name: str) -> float:
    """A share of a budget's ``mu^2``: a number strictly between 0 and 1 (``name`` in the error)."""
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 < value < 1:
        raise ValueError(f"{name} must lie strictly between 0 and 1, got {value!r}")
    return float(value)


@dataclass
class RecommenderOptions:
    """Solver settings of the top-N models (every field has a measured default).

    Parameters
    ----------
    ridge : float, optional
        EASE's ``lambda`` (Steck 2019, eq. 1); ``None``: ``ridge_scale`` times the Gram's mean
        diagonal (:func:`~dptensor.models.recommend.ease.ease_ridge`).
    ridge_scale : float, default 8.0
        The rule's constant.
    dense_items : int, default 20000
        The largest catalogue whose ``I x I`` EASE matrix is formed; above it, the low-rank form.
    low_rank : int, default 256
        Eigenpairs of the low-rank EASE.
    regularization : float, default 20.0
        Implicit ALS's ``lambda`` (:mod:`~dptensor.models.recommend.ials`; the paper's ridge, not
        scaled by the counts). With ``alpha``, the best of a grid on MovieLens-100K
        (``benchmarks/ials_grid.py``: NDCG@10 0.368 at 64 factors, against 0.255 at 0.1 and 10).
    alpha : float, default 1.0
        Implicit ALS's confidence ``c = 1 + alpha x``.
    iterations : int, default 15
        Implicit ALS sweeps.
    private_ridge_scale : float, default 2.0
        A private EASE's extra ridge, in units of the noise's spectral norm ``sqrt(2) sigma sqrt(I)``
        (1 leaves the noisy system barely positive definite and EASE amplifies the noise; 2 is the
        flat optimum over 1.5 .. 3 on semi-synthetic users from 10^4 to 10^5, docs/recommend.md).
    counts_share : float, default 0.05
        The share of a private EASE's ``mu^2`` spent on the item counts that rank items for users
        with an empty row; the rest goes to the Gram (every share spent on the counts raises the
        Gram's noise by ``1 / sqrt(1 - share)``); a private implicit ALS gives its sweeps the rest.
    recount_share : float, default 0.75
        Private popularity's share of ``mu^2`` spent on the recount of the candidates
        (:mod:`~dptensor.models.recommend.private_popularity`); the first counts, which choose
        them, get the rest. 0.7 to 0.8 is the flat optimum on MovieLens-100K (docs/recommend.md).
    recount_items : int, default 200
        The candidates private popularity recounts (the items of the largest noisy counts).
    private_ials_iterations : int, default 2
        Sweeps of the private implicit ALS (each releases its noisy sums: more sweeps, more noise in
        each).
    private_ials_regularization : float, default 20.0
        The private implicit ALS's ``lambda`` (it also damps the noise of the released sums).
    private_ials_alpha : float, default 1.0
        The private implicit ALS's confidence ``c = 1 + alpha x`` (the sums' sensitivities grow with it).
    private_ials_clip : float, default 0.1
        The public radius ``C`` that each user's solved factor is clipped to before it enters the
        released sums (:mod:`~dptensor.models.recommend.private_ials`; the sums' sensitivities are
        ``sqrt(2) C^2``, ``sqrt(2) alpha C^2`` and ``2 (1 + alpha) C``).
    """

    ridge: float | None = None
    ridge_scale: float = 8.0
    dense_items: int = 20000
    low_rank: int = 256
    regularization: float = 20.0
    alpha: float = 1.0
    iterations: int = 15
    private_ridge_scale: float = 2.0
    counts_share: float = 0.05
    recount_share: float = 0.75
    recount_items: int = 200
    private_ials_iterations: int = 2
    private_ials_regularization: float = 20.0
    private_ials_alpha: float = 1.0
    private_ials_clip: float = 0.1

    @property
    def _names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self))

    def get_params(self, deep: bool = True) -> dict:
        """The options as a dict (scikit-learn's nested-parameter protocol)."""
        return {name: getattr(self, name) for name in self._names}

    def set_params(self, **params: object) -> RecommenderOptions:
        """Set options by name (``options__ridge_scale=2`` through an estimator)."""
        for name, value in params.items():
            if name not in self._names:
                raise ValueError(f"RecommenderOptions has no option {name!r}; options: "
                                 f"{', '.join(self._names)}")
            setattr(self, name, value)
        return self

    def checked(self) -> RecommenderOptions:
        """The options after checking every value (called at fit, before any data is read)."""
        def positive(name: str, integer: bool = False) -> None:
            value = getattr(self, name)
            kind = Integral if integer else Real
            if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
                raise ValueError(f"options.{name} must be a positive {'integer' if integer else 'number'}, "
                                 f"got {value!r}")

        if self.ridge is not None:
            positive("ridge")
        for name in ("ridge_scale", "regularization", "alpha", "private_ridge_scale",
                     "private_ials_regularization", "private_ials_alpha", "private_ials_clip"):
            positive(name)
        for name in ("dense_items", "low_rank", "iterations", "private_ials_iterations", "recount_items"):
            positive(name, integer=True)
        for name in ("counts_share", "recount_share"):
            check_share(getattr(self, name), f"options.{name}")
        return self
