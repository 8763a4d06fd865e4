"""Top-N recommendations from implicit feedback: popularity, EASE, implicit ALS, and private versions.

A family of its own (docs/architecture.md): a user x item matrix whose non-zero entries are
interactions goes in; each user's ``n`` best items not already in their row come out
(:class:`~dptensor.models.recommend.ranking.Recommendations`). :class:`Recommender` is the
non-private estimator; :class:`PrivateRecommender` releases the item side under user-level DP (one
user's whole row replaced by any other) and lists each user's items from their own row and the
release (joint DP). See docs/recommend.md.
"""

from dptensor.models.recommend.estimator import METHODS, ItemSide, Recommender, fit_recommender
from dptensor.models.recommend.options import RecommenderOptions
from dptensor.models.recommend.persistence import load_recommender, read_recommender_file, save_recommender
from dptensor.models.recommend.plan import RecommenderPlan, plan_recommender
from dptensor.models.recommend.private_estimator import PrivateRecommender
from dptensor.models.recommend.ranking import Recommendations

__all__ = [
    "METHODS",
    "ItemSide",
    "PrivateRecommender",
    "Recommendations",
    "Recommender",
    "RecommenderOptions",
    "RecommenderPlan",
    "fit_recommender",
    "load_recommender",
    "plan_recommender",
    "read_recommender_file",
    "save_recommender",
]
