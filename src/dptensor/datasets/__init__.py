"""Synthetic data with known ground truth and readers (docs/design.md, layer 5)."""

from dptensor.datasets.corpus import (
    Corpus,
    load_corpus,
    load_matrix_market,
    load_npz_counts,
    load_text_corpus,
    load_uci_bow,
    load_vocabulary,
    write_uci_bow,
)
from dptensor.datasets.entries import (
    LowRankCompletion,
    TensorEntries,
    check_entries,
    entries_from_dense,
    entry_columns,
    holdout_per_user,
    make_low_rank_completion,
    ratings_day_origin,
    read_entries,
    read_movielens,
    read_ratings,
    read_recbole_inter,
    train_test_split_entries,
    write_entries,
)
from dptensor.datasets.interactions import Interactions, read_interactions, write_interactions
from dptensor.datasets.interactions_model import (
    ImplicitFeedbackModel,
    make_implicit_feedback,
    planted_interactions,
)
from dptensor.datasets.lda import LDACorpus, make_lda_corpus
from dptensor.datasets.moment_stream import OrthogonalMomentStream, make_orthogonal_moment_stream
from dptensor.datasets.orthogonal import NOISE_MODELS, OrthogonalTensor, make_orthogonal_tensor
from dptensor.datasets.ratings_model import RatingsModel, sample_items_by_popularity
from dptensor.datasets.single_topic import SingleTopicCorpus, make_single_topic_corpus

__all__ = [
    "Corpus",
    "LDACorpus",
    "load_corpus",
    "load_matrix_market",
    "load_npz_counts",
    "load_text_corpus",
    "load_uci_bow",
    "load_vocabulary",
    "make_lda_corpus",
    "write_uci_bow",
    "LowRankCompletion",
    "NOISE_MODELS",
    "OrthogonalMomentStream",
    "OrthogonalTensor",
    "SingleTopicCorpus",
    "TensorEntries",
    "check_entries",
    "entries_from_dense",
    "holdout_per_user",
    "make_orthogonal_moment_stream",
    "make_low_rank_completion",
    "make_orthogonal_tensor",
    "make_single_topic_corpus",
    "RatingsModel",
    "ratings_day_origin",
    "entry_columns",
    "ImplicitFeedbackModel",
    "Interactions",
    "make_implicit_feedback",
    "planted_interactions",
    "read_interactions",
    "write_interactions",
    "read_entries",
    "read_movielens",
    "read_ratings",
    "read_recbole_inter",
    "sample_items_by_popularity",
    "train_test_split_entries",
    "write_entries",
]
