"""Top-N recommendations from implicit feedback: popularity, EASE, implicit ALS, and private versions.

A family of its own (docs/architecture.md): a user x item matrix whose non-zero entries are
interactions goes in; each user's ``n`` best items not already in their row come out
(:class:`~dptensor.models.recommend.ranking.Recommendations`). :class:`Recommender` is the
non-private estimator; :class:`PrivateRecommender` releases the item side under user-level DP (one
user's whole row replaced by any other) and lists each user's items from their own row and the
release (joint DP). See docs/recommend.md.
"""

