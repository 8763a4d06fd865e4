"""Brute-force checks of every sensitivity bound the private spectral LDA uses.

Replace-one-document: for tiny corpora we enumerate *every* 3-token replacement document (the
extreme points: a longer document's per-document estimators are averages of those of its
3-token sub-documents) over several bases, including the adversarial one where all other
documents are a third word, and check the largest change of ``M2_hat``, ``M3_hat``, their
projections on an incoherent public basis and every eigenvalue against the bounds.
"""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.models.topics._third_moment import whitened_third_moment
from dptensor.models.topics.moments import (
    LDASecondMoment,
    dense_lda_moments,
    prepare_counts,
)
from dptensor.models.topics.sensitivity import (
    PAPER_MOMENT_SENSITIVITY,
    coherence,
    lda_moment_constants,
    m2_sensitivity,
    m3_norm_bound,
    m3_sensitivity,
)


def _moments(docs, d, alpha0):
    counts = np.zeros((len(docs), d))
    for row, doc in enumerate(docs):
        for word in doc:
            counts[row, word] += 1
    _, m2, m3 = dense_lda_moments(prepare_counts(sp.csr_matrix(counts)), alpha0)
    return m2, m3


def _all_changes(d, bases, alpha0):
    """Every replacement of the last document by every 3-token document, for each base."""
    docs3 = list(itertools.combinations_with_replacement(range(d), 3))
    for base in bases:
        n = len(base) + 1
        moments = [_moments([*base, doc], d, alpha0) for doc in docs3]
        m2 = np.stack([m[0] for m in moments])
        m3 = np.stack([m[1] for m in moments])
        yield n, m2, m3


BASES_4 = [
    [(3, 3, 3)] * 3,  # every other document is a third word: the adversarial base for the a-term
    [(3, 3, 3)] * 6,
    [(0, 1, 2), (3, 3, 3), (2, 2, 3)],
    [(0, 0, 0), (1, 1, 1), (3, 3, 3)],
]


@pytest.mark.parametrize("alpha0", [0.1, 1.0, 1000.0])
def test_global_frobenius_sensitivities_hold(alpha0):
    worst2 = worst3 = worst_eig = 0.0
    for n, m2, m3 in _all_changes(4, BASES_4, alpha0):
        flat2, flat3 = m2.reshape(len(m2), -1), m3.reshape(len(m3), -1)
        d2 = np.sqrt(((flat2[:, None] - flat2[None]) ** 2).sum(-1))
        d3 = np.sqrt(((flat3[:, None] - flat3[None]) ** 2).sum(-1))
        eig = np.linalg.eigvalsh(m2)
        worst2 = max(worst2, n * d2.max() / (n * m2_sensitivity(alpha0, n)))
        worst3 = max(worst3, n * d3.max() / (n * m3_sensitivity(alpha0, n)))
        worst_eig = max(worst_eig, np.abs(eig[:, None] - eig[None]).max() / m2_sensitivity(alpha0, n))
    assert worst2 <= 1.0 + 1e-9
    assert worst3 <= 1.0 + 1e-9
    assert worst_eig <= 1.0 + 1e-9  # Weyl: every eigenvalue moves by at most ||dM2||_F


def test_paper_sensitivity_is_exceeded_and_derived_bounds_are_as_stated():
    """Theorem 4's 2/N (and Section 6.1's 1/N) are below changes that brute force finds."""
    a, b, c = lda_moment_constants(1000.0)
    n = 4
    largest2 = largest3 = 0.0
    for n, m2, m3 in _all_changes(4, BASES_4[:1], 1000.0):
        flat2, flat3 = m2.reshape(len(m2), -1), m3.reshape(len(m3), -1)
        largest2 = max(largest2, n * np.sqrt(((flat2[:, None] - flat2[None]) ** 2).sum(-1)).max())
        largest3 = max(largest3, n * np.sqrt(((flat3[:, None] - flat3[None]) ** 2).sum(-1)).max())
    assert largest2 > 2.4 > 2 * PAPER_MOMENT_SENSITIVITY  # sqrt(6) ~ 2.449: (i,i,i) -> (j,j,j) over (k,k,k)
    assert largest3 > 3.5
    np.testing.assert_allclose(m2_sensitivity(1000.0, n) * n, np.sqrt(2) * (1 + 2 * a))
    np.testing.assert_allclose(m3_sensitivity(1000.0, n) * n, np.sqrt(2) * (1 + 6 * abs(b) + 3 * c))
    assert m3_norm_bound(1000.0) == pytest.approx(1 + 3 * abs(b) + c)


def _hadamard_basis(d, k):
    h = np.array([[1.0]])
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h[:, 1 : k + 1] / np.sqrt(d)


@pytest.mark.parametrize("alpha0", [0.1, 1000.0])
def test_projected_sensitivities_hold_for_an_incoherent_basis(alpha0):
    d, k = 8, 2
    U = _hadamard_basis(d, k)
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-12)
    mu = coherence(U)
    assert mu == pytest.approx(0.5)
    bases = [[(7, 7, 7)] * 3, [(0, 1, 2), (5, 6, 7), (3, 3, 4)], [(0, 0, 0), (5, 5, 5), (3, 3, 3)]]
    worst2 = worst3 = 0.0
    for n, m2, m3 in _all_changes(d, bases, alpha0):
        p2 = np.einsum("nab,bi->nai", m2, U).reshape(len(m2), -1)
        p3 = np.einsum("nabc,ai,bj,ck->nijk", m3, U, U, U).reshape(len(m3), -1)
        d2 = np.sqrt(((p2[:, None] - p2[None]) ** 2).sum(-1)).max()
        d3 = np.sqrt(((p3[:, None] - p3[None]) ** 2).sum(-1)).max()
        worst2 = max(worst2, d2 / m2_sensitivity(alpha0, n, coherence=mu))
        worst3 = max(worst3, d3 / m3_sensitivity(alpha0, n, coherence=mu))
    assert worst2 <= 1.0 + 1e-9 and worst3 <= 1.0 + 1e-9
    # the coherence bound is smaller than the global one, so it matters
    assert m3_sensitivity(alpha0, 4, coherence=mu) < 0.6 * m3_sensitivity(alpha0, 4)


#: Valid documents (three tokens or more) whose counts overflowed the unscaled estimators (issue 36).
EXTREME_DOCUMENTS = [
    [0, 1e110, 0, 0], [0, 1e160, 0, 0], [0, np.finfo(float).max, 0, 0], [0, 1e308, 1e308, 0],
    [np.finfo(float).max] * 4, [2**63 - 1, 0, 0, 1], [1e15, 1e15, 1e15, 0],
]  # fmt: skip


@pytest.mark.parametrize("alpha0", [0.1, 1000.0])
def test_worst_case_sensitivities_hold_through_the_scaled_estimators_with_extreme_documents(alpha0):
    """The worst-case releases' own estimators (the ``M2_hat`` operator and the projected
    ``M3_hat``, in the scaled form) on every 3-token replacement and on float64-extreme ones: no
    overflow, and every change within ``m2_sensitivity`` / ``m3_sensitivity`` (an extreme
    document's term is the limit of valid terms, so the bounds over valid documents cover it)."""
    d = 4
    candidates = [np.bincount(doc, minlength=d).astype(float)
                  for doc in itertools.combinations_with_replacement(range(d), 3)]  # fmt: skip
    candidates += [np.array(doc, dtype=float) for doc in EXTREME_DOCUMENTS]
    worst2 = worst3 = 0.0
    for base in BASES_4:
        rows = np.array([np.bincount(doc, minlength=d) for doc in base], dtype=float)
        n = len(base) + 1
        m2, m3 = [], []
        with np.errstate(over="raise", divide="raise", invalid="raise"):
            for doc in candidates:
                docs = prepare_counts(sp.csr_matrix(np.vstack([rows, doc])))
                m2.append(LDASecondMoment(docs, alpha0).to_dense().ravel())
                m3.append(whitened_third_moment(docs, alpha0, np.eye(d)).ravel())
        m2, m3 = np.array(m2), np.array(m3)
        assert np.all(np.isfinite(m2)) and np.all(np.isfinite(m3))
        change2, change3 = (np.sqrt(((m[:, None] - m[None]) ** 2).sum(-1)).max() for m in (m2, m3))
        worst2 = max(worst2, change2 / m2_sensitivity(alpha0, n))
        worst3 = max(worst3, change3 / m3_sensitivity(alpha0, n))
        # one word counted 1e110 or 1.8e308: the limit of three, ten, ... tokens of that word
        limit = prepare_counts(sp.csr_matrix(np.vstack([rows, [0, 1e15, 0, 0]])))
        np.testing.assert_allclose(m2[-5], LDASecondMoment(limit, alpha0).to_dense().ravel(), atol=1e-12)
    assert worst2 <= 1.0 + 1e-9 and worst3 <= 1.0 + 1e-9


def test_sensitivity_arguments_are_checked():
    with pytest.raises(ValueError, match="coherence"):
        m2_sensitivity(1.0, 10, coherence=1.5)
    with pytest.raises(ValueError, match="n_documents"):
        m3_sensitivity(1.0, 2)
    with pytest.raises(ValueError, match="alpha0"):
        m2_sensitivity(0.0, 10)
