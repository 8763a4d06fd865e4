"""Short documents made valid for the private spectral fit, one document at a time.

Over a vocabulary chosen under DP (:class:`~dptensor.models.topics.vectorizer.PrivateCountVectorizer`)
a document may keep fewer than the three tokens a worst-case spectral release needs;
:func:`pad_short_documents` maps each such document on its own, so that a neighbouring corpus stays a
neighbouring corpus.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dptensor.models.topics.moments import MIN_DOCUMENT_LENGTH

__all__ = ["pad_short_documents"]


def pad_short_documents(counts: sp.csr_matrix) -> sp.csr_matrix:
    """Documents with fewer than 3 tokens made valid for the private spectral fit, one by one.

    Over a vocabulary chosen under DP a document may keep fewer than
    :data:`~dptensor.models.topics.moments.MIN_DOCUMENT_LENGTH` tokens, which the private spectral fit
    refuses -- an error that would depend on one document. Instead each such document is mapped
    on its own: its counts are multiplied by ``ceil(3 / length)`` (1 token -> 3, 2 -> 4), and an
    empty one becomes one token of each of the first three columns. The map looks at one document
    only (the released vocabulary is public), so a neighbouring corpus stays a neighbouring corpus
    and the guarantee holds; it biases the moments slightly towards the padded documents.
    """
    counts = sp.csr_matrix(counts, dtype=np.int64)
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    factor = np.where((lengths > 0) & (lengths < MIN_DOCUMENT_LENGTH),
                      -(-MIN_DOCUMENT_LENGTH // np.maximum(lengths, 1)), 1)
    padded = sp.diags(factor.astype(np.int64), dtype=np.int64) @ counts
    empty = np.flatnonzero(lengths == 0)
    if empty.size:
        n_cols = counts.shape[1]
        cols = np.arange(MIN_DOCUMENT_LENGTH) % n_cols
        rows = np.repeat(empty, MIN_DOCUMENT_LENGTH)
        filler = sp.csr_matrix((np.ones(rows.size, dtype=np.int64), (rows, np.tile(cols, empty.size))),
                               shape=counts.shape)
        padded = padded + filler
    return sp.csr_matrix(padded, dtype=np.int64)
