"""Synthetic data with known ground truth and readers (DESIGN.md, layer 5)."""

from dptensor.datasets.entries import (
    LowRankCompletion,
    TensorEntries,
    check_entries,
    entries_from_dense,
    make_low_rank_completion,
    read_entries,
    read_movielens,
    train_test_split_entries,
    write_entries,
)
from dptensor.datasets.moment_stream import OrthogonalMomentStream, make_orthogonal_moment_stream
from dptensor.datasets.orthogonal import NOISE_MODELS, OrthogonalTensor, make_orthogonal_tensor

__all__ = [
    "LowRankCompletion",
    "NOISE_MODELS",
    "OrthogonalMomentStream",
    "OrthogonalTensor",
    "TensorEntries",
    "check_entries",
    "entries_from_dense",
    "make_orthogonal_moment_stream",
    "make_low_rank_completion",
    "make_orthogonal_tensor",
    "read_entries",
    "read_movielens",
    "train_test_split_entries",
    "write_entries",
]
