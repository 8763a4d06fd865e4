"""Estimators users fit (docs/design.md, layer 4), with scikit-learn conventions.

One folder per model family (docs/architecture.md): :mod:`dptensor.models.topics` (spectral LDA and
its private configurations, DP variational LDA, the single-topic model, the planner, the private
vectoriser and ``PrivateTopicModel``, texts to private topics), :mod:`dptensor.models.recommend`
(top-N lists from implicit feedback: popularity, EASE, implicit ALS and their private releases) and
:mod:`dptensor.models.completion` (CP and Tucker completion, ALS, DP-ALS, the offsets). ``_base``
(the private-estimator mixin), ``audit_canaries``, ``pipeline_guarantee`` and ``pipeline_plan``
serve every family.
"""

from dptensor.models import audit_canaries  # noqa: F401 - registers the canaries of every private estimator
from dptensor.models.completion import TensorCompletion
from dptensor.models.pipeline_guarantee import pipeline_guarantee
from dptensor.models.pipeline_plan import PrivatePipeline, check_private_pipeline, make_private_pipeline
from dptensor.models.recommend import PrivateRecommender, Recommender
from dptensor.models.topics.dp_vi import DPVariationalLDA
from dptensor.models.topics.private_spectral import PrivateSpectralLDA
from dptensor.models.topics.single_topic import SingleTopicModel
from dptensor.models.topics.spectral import SpectralLDA
from dptensor.models.topics.text_model import PrivateTopicModel
from dptensor.models.topics.vectorizer import PrivateCountVectorizer

__all__ = [
    "DPVariationalLDA",
    "PrivateCountVectorizer",
    "PrivatePipeline",
    "PrivateRecommender",
    "PrivateSpectralLDA",
    "PrivateTopicModel",
    "Recommender",
    "SingleTopicModel",
    "SpectralLDA",
    "TensorCompletion",
    "check_private_pipeline",
    "make_private_pipeline",
    "pipeline_guarantee",
]
