"""make_lda_corpus with an empirical length distribution (a real corpus' document lengths)."""

from __future__ import annotations

import numpy as np
import pytest

from dptensor.datasets.lda import make_lda_corpus


def test_lengths_are_drawn_from_the_given_distribution():
    pool = np.array([0, 2, 2, 7, 30])
    corpus = make_lda_corpus(20_000, 40, 3, alpha=0.2, lengths=pool, random_state=0)
    lengths = np.asarray(corpus.counts.sum(axis=1)).ravel()
    assert set(np.unique(lengths)) <= set(pool)
    for value, share in ((0, 0.2), (2, 0.4), (7, 0.2), (30, 0.2)):
        assert abs(np.mean(lengths == value) - share) < 0.015  # > 5 standard errors
    again = make_lda_corpus(20_000, 40, 3, alpha=0.2, lengths=pool, random_state=0)
    assert (again.counts != corpus.counts).nnz == 0


@pytest.mark.parametrize(
    "bad", [np.array([], dtype=int), np.array([1.5, 2.0]), np.array([-1, 3]), np.ones((2, 2), int)]
)
def test_bad_lengths_are_refused(bad):
    with pytest.raises(ValueError, match="lengths must be"):
        make_lda_corpus(10, 5, 2, lengths=bad, random_state=0)
