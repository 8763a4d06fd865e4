"""Spectral-LDA moments from per-document terms of bounded norm, in a scaled form that never overflows.

Per-document terms
------------------
For a document with counts ``c`` (length ``l = sum_v c_v``) write ``p = c / l`` (its word
distribution) and ``e = 1/l``. The per-document unbiased estimators of
:mod:`dptensor.models.topics.moments` (Lemma 21 of DeCarolis et al., paper 004) are, in these terms,

* ``E[x1] <- p``;
* ``E[x1 (x) x2] <- P = (p p^T - e diag(p)) / (1 - e)``  (``= (c c^T - diag c)/(l(l-1))``);
* ``E[x1 (x) x2 (x) x3] <- G = (p^{(x)3} - e sym3(diag(p) (x) p) + 2 e^2 sum_v p_v e_v^{(x)3})
  / ((1 - e)(1 - 2e))``  (``= G_n / (l(l-1)(l-2))``).

``p`` is computed as ``c~ / sum c~`` with ``c~ = c / max_v c_v`` and ``e = (1/max c) / sum c~``,
so every quantity is a ratio of numbers in ``[1/d, d]`` or a subnormal-safe reciprocal: **no
finite count overflows** (products of small frequencies and of ``e`` may underflow to zero, by
design: every per-document function runs under a local ``np.errstate(under="ignore")``, so it
behaves alike under any NumPy error state) (a document with one word counted ``1.8e308``, or two counts of
``1e308``, gives ``p`` on the simplex and ``e = 0``). ``P`` and ``G`` are non-negative arrays
summing to one (``p_v >= e`` wherever ``p_v > 0``), and ``||G||_F <= ||P||_F <= ||p||_2 <= 1``
(``G_{abc} = P_{ab} q(c | a, b)`` for a conditional distribution ``q``, so
``sum_c G_{abc}^2 <= P_{ab}^2``; likewise ``P_{ab} = p_a q(b | a)``).

Bounded contributions (one weight per document and order)
---------------------------------------------------------
Each document gets a weight ``w_n`` applied to its second- and third-order terms and a weight
``v_n >= w_n`` applied to its first-order term,

``v_n = min(w_max, C1 / ||p_n||_2)``,  ``w_n = min(v_n, C / ||P_n||_F)``  (both 0 for documents of
fewer than 3 tokens), with the public ``w_max = min(1, C1 sqrt(d))`` (``||p||_2 >= 1/sqrt(d)`` on the
simplex, so the cap binds only where ``C1 sqrt(d) > 1`` or against rounding),

so that ``||w P||_F <= C``, ``||w G||_F <= C`` (also after projection on any orthonormal basis)
and ``||v p||_2 <= C1``. The weighted sums ``S0 = sum w``, ``S2 = sum w P``, ``S3 = sum w G`` and
``T0 = sum v``, ``S1 = sum v p`` then give the moments of the re-weighted corpus, ``E1 = S1/T0``,
``E2 = S2/S0`` etc. Each order gets its own weight because one weight for all wastes the
first-order bound: on short texts ``C / ||P||_F`` binds and ``||w p||_2`` is about ``0.6 C1``
(WordNet glosses), so a common weight would release word frequencies with 1.7 times the relative
noise. ``v_n`` is about ``C1 sqrt(l)`` and ``w_n`` about ``C l`` for a document of ``l`` distinct
words. With them

``M2 = E2 - a E1 E1^T``,  ``M3(W,W,W) = E3(W,W,W) - b sym3(E2(W,W) (x) W^T E1) + c (W^T E1)^{(x)3}``

(eq. (1), with ``a = alpha_0/(alpha_0+1)``, ``b = alpha_0/(alpha_0+2)``,
``c = 2 alpha_0^2/((alpha_0+1)(alpha_0+2))``). A weighting that did not depend on the documents'
topic proportions would leave every moment unbiased under LDA; these weights are functions of the
counts (a document concentrated on a peaked topic repeats words, so it has larger ``||p||`` and
``||P||`` and a smaller weight), which biases the weighted moments, and mixing the two orders'
weightings adds to it slightly: in a noiseless synthetic test (``d = 60``, ``k = 3``, ``N = 2 * 10^5``)
the relative error of ``M2`` was 0.24 with ``E1`` weighted by ``v`` against 0.22 with one weight,
while ``E1``'s own error fell from 0.086 to 0.047. On real text the noise this removes is far
larger (docs/lda.md, *Word frequencies with their own weight*). The plug-in products carry an
``O(1/N)`` bias, far below the noise of a private release. Sensitivities:
:func:`dptensor.models.topics.sensitivity.clipped_sensitivities`.

Projected clipping of the third moment (``third_clip``)
------------------------------------------------------
The third-order release is ``S3(U, U, U)`` for a released orthonormal ``d x k`` basis ``U``. A
document's projected term ``w G(U, U, U)`` is far smaller than its bound ``C``: on WordNet glosses
and Debian descriptions (``d = 2000`` or its 500 most frequent words, ``k = 10``) the median is
below ``C/100`` and the 99th percentile ``0.13 C`` to ``0.43 C``. With ``third_clip = C3`` each
document gets a second factor ``c_n = min(1, C3 / ||w_n G_n(U, U, U)||_F)`` in ``S3`` only, so
that ``||c w G(U, U, U)||_F <= C3`` and the release's sensitivity is ``min(sqrt2 C, 2 C3)``
(:func:`~dptensor.models.topics.sensitivity.clipped_sensitivities`). The few documents clipped
(those most aligned with the topic subspace, about 1% at ``C3 = C/10``) weigh less in ``E3``
than in ``E1``, ``E2``: a bias, measured to be far below the noise it removes (docs/lda.md).
The per-document norm is :func:`projected_third_norms`.

Every sum here is one pass of :meth:`~dptensor.parallel.RowBlocks.map_sum` over the blocks of a
:class:`~dptensor.models.topics.moments.Documents`, whose payloads need only ``counts``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dptensor._errstate import underflow_ignored
from dptensor.models.topics._third_moment import _unpack, _vocabulary_cubes
from dptensor.models.topics.moments import (
    MIN_DOCUMENT_LENGTH,
    Documents,
    _packed_cubes,
    document_blocks,
    row_reduce,
    scaled_proportions,
)
from dptensor.models.topics.sensitivity import TOTALS_SCALE
from dptensor.privacy.quantile import bin_counts

#: ``e = 1/l`` above this (documents of fewer than three tokens) gets weight 0 (with a margin for rounding).
_SHORT = 1.0 / (MIN_DOCUMENT_LENGTH - 0.5)


@dataclass(frozen=True)
class ClippedTerms:
    """The scaled per-document quantities of one block (module docstring).

    Attributes
    ----------
    distributions : scipy.sparse.csr_matrix of shape (n, d)
        ``p_n = c_n / l_n`` (rows on the simplex; empty rows stay zero).
    inverse_lengths : ndarray of shape (n,)
        ``e_n = 1/l_n`` (0 for an empty document or an infinite ratio).
    weights : ndarray of shape (n,)
        ``w_n`` in ``[0, w_max]`` (second- and third-order terms).
    frequency_weights : ndarray of shape (n,)
        ``v_n`` in ``[w_n, w_max]`` (first-order term).
    pair_norms, word_norms : ndarray of shape (n,)
        ``||P_n||_F`` and ``||p_n||_2`` (0 for empty documents).
    """

    distributions: sp.csr_matrix
    inverse_lengths: np.ndarray
    weights: np.ndarray
    frequency_weights: np.ndarray
    pair_norms: np.ndarray
    word_norms: np.ndarray


@underflow_ignored
def clipped_terms(counts: sp.csr_matrix, clip: float, word_clip: float) -> ClippedTerms:
    """Scaled per-document terms and weights for a block of counts (non-negative, finite, CSR).

    ``clip`` is ``C`` (bound on ``||w P||_F`` and ``||w G||_F``), ``word_clip`` is ``C1`` (bound
    on ``||v p||_2``). No operation overflows for any finite non-negative counts.
    """
    distributions, e = scaled_proportions(counts)
    p = distributions.data
    sq = row_reduce(distributions, p * p, np.add)  # ||p||^2
    cube = row_reduce(distributions, p * p * p, np.add)
    short = (e <= 0) | (e > _SHORT)
    e_ok = np.where(short, 0.0, e)
    # ||P||_F^2 (1-e)^2 = ||p||^4 - 2 e sum p^3 + e^2 ||p||^2 (>= 0: p_v >= e on the support).
    pair_sq = np.maximum(sq * sq - 2.0 * e_ok * cube + e_ok * e_ok * sq, 0.0)
    pair_norms = np.where(short, 0.0, np.sqrt(pair_sq) / (1.0 - e_ok))
    word_norms = np.sqrt(sq)
    cap = max_weight(word_clip, distributions.shape[1])
    with np.errstate(divide="ignore", over="ignore"):
        frequency_weights = np.minimum(cap, word_clip / np.where(short, 1.0, word_norms))
        weights = np.minimum(frequency_weights, clip / pair_norms)
    frequency_weights = np.where(short, 0.0, frequency_weights)
    weights = np.where(short, 0.0, weights)
    return ClippedTerms(
        distributions, e_ok, weights, frequency_weights, pair_norms, np.where(short, 0.0, word_norms)
    )


def max_weight(word_clip: float, n_words: int) -> float:
    """The public cap ``w_max = min(1, C1 sqrt(d))`` of every weight (module docstring)."""
    return min(1.0, word_clip * math.sqrt(n_words))


def _terms(block: object, clip: float, word_clip: float) -> ClippedTerms:
    return clipped_terms(block.counts, clip, word_clip)


@underflow_ignored
def _first_order(block: object, clip: float, word_clip: float) -> dict[str, np.ndarray]:
    t = _terms(block, clip, word_clip)
    totals = np.array([t.weights.sum(), t.frequency_weights.sum()])
    return {"totals": totals, "s1": np.asarray(t.distributions.T @ t.frequency_weights).ravel()}


def _pair_weights(t: ClippedTerms) -> tuple[np.ndarray, np.ndarray]:
    """``S2 = sum w P = D^T diag(u) D - diag(D^T v)`` with ``u = w/(1-e)``, ``v = w e/(1-e)``."""
    u = t.weights / (1.0 - t.inverse_lengths)
    return u, u * t.inverse_lengths


def _pair_terms(
    block: object, clip: float, word_clip: float, support: np.ndarray | None
) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """``(D, u, v)`` of :func:`_pair_weights`, ``D`` the distributions restricted to ``support`` (if any)."""
    t = _terms(block, clip, word_clip)
    u, v = _pair_weights(t)
    D = t.distributions if support is None else t.distributions.tocsc()[:, support].tocsr()
    return D, u, v


@underflow_ignored
def _pair_product(
    block: object, X: np.ndarray, clip: float, word_clip: float, support: np.ndarray | None = None
) -> np.ndarray:
    D, u, v = _pair_terms(block, clip, word_clip, support)
    return np.asarray(D.T @ (u[:, None] * np.asarray(D @ X))) - np.asarray(D.T @ v)[:, None] * X


@underflow_ignored
def _pair_dense(
    block: object, clip: float, word_clip: float, support: np.ndarray | None = None
) -> np.ndarray:
    D, u, v = _pair_terms(block, clip, word_clip, support)
    dense = np.asarray((D.T @ sp.diags(u) @ D).todense())
    dense[np.diag_indices_from(dense)] -= np.asarray(D.T @ v).ravel()
    return dense


#: Documents of at most this many distinct words get the exact projected norm (pair sums, ``O(l^2 k)``);
#: longer ones an upper bound by the triangle inequality (``O(l k)``), which can only clip more.
EXACT_PROJECTED_WORDS = 64
#: Pairs of words evaluated at once by :func:`projected_third_norms` (bounds its memory).
_PAIR_CHUNK = 200_000
#: Relative slack (of the squared triangle bound) that covers the rounding of the exact expansion:
#: measured below 3e-15 of that square on bases whose rows span eight orders of magnitude or nearly cancel.
_ROUNDING_SLACK = 1e-10


@underflow_ignored
def projected_third_norms(t: ClippedTerms, basis: np.ndarray, Y: np.ndarray | None = None) -> np.ndarray:
    """``||G_n(U, U, U)||_F`` of each document (unweighted), ``U`` a ``d x k`` basis.

    With ``y = U^T p``, ``D2 = U^T diag(p) U``, ``u_a`` the rows of ``U`` and ``K_ab = u_a . u_b``,
    ``G(U, U, U) = A (T1 - e T2 + 2 e^2 T3)`` where ``A = 1/((1 - e)(1 - 2e))``, ``T1 = y^{(x)3}``,
    ``T2 = sym3(D2 (x) y)`` (three terms) and ``T3 = sum_a p_a u_a^{(x)3}``, so its squared norm is

    ``A^2 (|y|^6 - 6 e |y|^2 y^T D2 y + 4 e^2 sum_a p_a g_a^3 + e^2 (3 |y|^2 ||D2||^2 + 6 |D2 y|^2)
    - 12 e^3 sum_a p_a g_a u_a^T D2 u_a + 4 e^4 sum_ab p_a p_b K_ab^3)``

    with ``g_a = u_a . y``; every sum over pairs of the document's words is ``sum_ab p_a p_b f(K_ab)``.
    Exact (up to a rounding slack that only raises it, relative ``1e-5`` of the bound below) for
    documents of at most :data:`EXACT_PROJECTED_WORDS` distinct words; for longer ones
    ``A (|y|^3 + 3 e |y| sum_a p_a |u_a|^2 + 2 e^2 sum_a p_a |u_a|^3)``, an upper bound (a clip
    that uses it keeps its bound). Never below the true norm, so a clip that divides by it keeps
    its bound. Brute-force tested against the dense tensors, including bases whose rows nearly
    cancel.
    """
    U = np.asarray(basis, dtype=np.float64)
    D = t.distributions.tocsr()
    e = t.inverse_lengths
    n = D.shape[0]
    if Y is None:
        Y = np.asarray(D @ U)
    sizes = np.diff(D.indptr)
    rows = np.repeat(np.arange(n), sizes)
    p = D.data
    Ua = U[D.indices]
    g = np.einsum("ij,ij->i", Ua, Y[rows])
    h = np.einsum("ij,ij->i", Ua, Ua)
    s = np.einsum("ij,ij->i", Y, Y)
    A = 1.0 / ((1.0 - e) * (1.0 - 2.0 * e))
    # Long documents: the triangle inequality (||T2|| <= 3 ||D2||_F |y|, ||D2||_F <= sum p |u|^2).
    bound = A * (
        s**1.5 + 3.0 * e * np.sqrt(s) * np.bincount(rows, p * h, minlength=n)
        + 2.0 * e * e * np.bincount(rows, p * h**1.5, minlength=n)
    )  # fmt: skip
    exact = (sizes <= EXACT_PROJECTED_WORDS) & (sizes > 0)
    d2f, d2y, t33 = np.zeros(n), np.zeros(n), np.zeros(n)
    udu = np.zeros(p.size)  # u_a^T D2 u_a per stored word
    docs = np.flatnonzero(exact)
    pairs = np.cumsum(sizes[docs] ** 2)
    start = 0
    while start < docs.size:  # chunks of documents holding about _PAIR_CHUNK pairs, local sums
        before = pairs[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(pairs, before + _PAIR_CHUNK, side="right")))
        chunk = docs[start:stop]
        start = stop
        length = sizes[chunk]
        first = D.indptr[chunk]
        low, high = int(first[0]), int(D.indptr[chunk[-1] + 1])
        left = np.repeat(np.repeat(first, length) + _ranges(length), np.repeat(length, length))
        right = np.repeat(first, length * length) + _ranges(np.repeat(length, length))
        K = np.einsum("ij,ij->i", Ua[left], Ua[right])
        pp = p[left] * p[right]
        owner = np.repeat(np.arange(chunk.size), length * length)
        d2f[chunk] = np.bincount(owner, pp * K * K, minlength=chunk.size)
        d2y[chunk] = np.bincount(owner, pp * g[left] * g[right] * K, minlength=chunk.size)
        t33[chunk] = np.bincount(owner, pp * K**3, minlength=chunk.size)
        udu[low:high] = np.bincount(left - low, p[right] * K * K, minlength=high - low)
    ydy = np.bincount(rows, p * g * g, minlength=n)
    t13 = np.bincount(rows, p * g**3, minlength=n)
    t23 = 3.0 * np.bincount(rows, p * g * udu, minlength=n)
    square = (
        s**3 - 6.0 * e * s * ydy + 4.0 * e**2 * t13 + e**2 * (3.0 * s * d2f + 6.0 * d2y)
        - 4.0 * e**3 * t23 + 4.0 * e**4 * t33
    )  # fmt: skip
    # The expansion cancels: its rounding error is a tiny multiple of the squared triangle bound
    # (every inner product is at most a product of the terms' norms). _ROUNDING_SLACK of that square
    # added under the root keeps the result above the true norm (a clip never under-clips).
    slack = _ROUNDING_SLACK * (bound / A) ** 2
    return np.where(exact, np.minimum(A * np.sqrt(np.maximum(square, 0.0) + slack), bound), bound)


def _ranges(lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(l) for l in lengths])`` without a Python loop."""
    total = int(lengths.sum())
    return np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)


@underflow_ignored
def _third_order(
    block: object, U: np.ndarray, clip: float, word_clip: float, third_clip: float | None = None
) -> dict[str, np.ndarray]:
    t = _terms(block, clip, word_clip)
    e = t.inverse_lengths
    alpha = t.weights / ((1.0 - e) * (1.0 - 2.0 * e))
    D = t.distributions
    Y = np.asarray(D @ U)
    if third_clip is not None:  # a second factor bounds the projected term: ||c w G(U, U, U)||_F <= C3
        norms = t.weights * projected_third_norms(t, U, Y)
        factor = np.ones_like(norms)
        over = norms > third_clip  # divides only there: no overflow or division warning for any input
        factor[over] = third_clip / norms[over]
        alpha = alpha * factor
    k = U.shape[1]
    rows, cols = np.triu_indices(k)
    return {
        "cube": _packed_cubes(alpha[:, None] * Y, Y, rows, cols),
        "pair": np.asarray(D.T @ ((alpha * e)[:, None] * Y)),
        "vocab": np.asarray(D.T @ (2.0 * alpha * e * e)).ravel(),
    }


@underflow_ignored
def _projected_histogram(
    block: object, U: np.ndarray, clip: float, word_clip: float, edges: np.ndarray
) -> dict[str, np.ndarray]:
    t = _terms(block, clip, word_clip)
    relative = t.weights * projected_third_norms(t, U) / clip
    return {"counts": bin_counts(relative, edges)}


@underflow_ignored
def _norms(block: object, clip: float, word_clip: float) -> np.ndarray:
    t = _terms(block, clip, word_clip)
    return np.column_stack([t.pair_norms, t.word_norms, t.weights])


@dataclass(frozen=True)
class ClippedMoments:
    """The weighted sums of one corpus at clipping bounds ``(clip, word_clip)``: operators for releases.

    Parameters
    ----------
    docs : DocumentCounts or DocumentBlocks
        Any documents (empty and short ones get weight 0).
    clip : float
        ``C``, the bound on each document's ``||w P||_F`` and ``||w G||_F``.
    word_clip : float
        ``C1``, the bound on each document's ``||v p||_2``.
    third_clip : float or None
        ``C3``: with it, :meth:`third_order` gives each document a second factor
        ``c_n = min(1, C3 / ||w_n G_n(U, U, U)||_F)`` (module docstring, *Projected clipping*).
    """

    docs: Documents
    clip: float
    word_clip: float
    third_clip: float | None = None

    @property
    def n_words(self) -> int:
        return int(self.docs.n_words)

    def first_order(self) -> tuple[float, float, np.ndarray]:
        """``(S0, T0, S1) = (sum_n w_n, sum_n v_n, sum_n v_n p_n)``."""
        out = document_blocks(self.docs).map_sum(_first_order, self.clip, self.word_clip, label="clipped-m1")
        return float(out["totals"][0]), float(out["totals"][1]), out["s1"]

    @property
    def totals_factor(self) -> float:
        """``r = TOTALS_SCALE C1 / w_max``: the ``m1`` release's factor on ``S0`` and ``T0``."""
        return TOTALS_SCALE * self.word_clip / max_weight(self.word_clip, self.n_words)

    def first_order_release(self) -> np.ndarray:
        """The vector the ``m1`` release adds noise to: ``(r S0, r T0, S1)`` (sensitivity
        :func:`~dptensor.models.topics.sensitivity.clipped_sensitivities`' ``"m1"``)."""
        total, frequency_total, sums = self.first_order()
        r = self.totals_factor
        return np.concatenate([[r * total, r * frequency_total], sums])

    def pair_product(self, X: np.ndarray, support: np.ndarray | None = None) -> np.ndarray:
        """``S2 X = sum_n w_n P_n X`` for a ``d x m`` block ``X``, or ``S2[S, S] X`` for the word
        indices ``S = support`` and an ``|S| x m`` block."""
        X = np.asarray(X, dtype=np.float64)
        return document_blocks(self.docs).map_sum(
            _pair_product, X, self.clip, self.word_clip, support, label="clipped-m2-product"
        )

    def pair_dense(self, support: np.ndarray | None = None) -> np.ndarray:
        """``S2 = sum_n w_n P_n`` as a dense ``d x d`` array (small vocabularies), or its principal
        submatrix on the word indices ``support``."""
        return document_blocks(self.docs).map_sum(
            _pair_dense, self.clip, self.word_clip, support, label="clipped-m2"
        )

    def third_order(self, basis: np.ndarray) -> np.ndarray:
        """``S3(U, U, U) = sum_n c_n w_n G_n(U, U, U)`` (``m x m x m``) for a ``d x m`` basis ``U``
        (``c_n = 1`` without ``third_clip``)."""
        U = np.asarray(basis, dtype=np.float64)
        stats = document_blocks(self.docs).map_sum(
            _third_order, U, self.clip, self.word_clip, self.third_clip, label="clipped-m3"
        )
        m = U.shape[1]
        rows, cols = np.triu_indices(m)
        return _unpack(stats["cube"], m, rows, cols) + _vocabulary_cubes(stats["pair"], stats["vocab"], U)

    def projected_histogram(self, basis: np.ndarray, edges: np.ndarray) -> np.ndarray:
        """Counts of ``||w_n G_n(U, U, U)||_F / C`` in the bins of ``edges``
        (:func:`~dptensor.privacy.quantile.bin_counts`): the input of a private choice of ``third_clip``."""
        U = np.asarray(basis, dtype=np.float64)
        out = document_blocks(self.docs).map_sum(
            _projected_histogram, U, self.clip, self.word_clip, np.asarray(edges, dtype=np.float64),
            label="clipped-m3-histogram",
        )  # fmt: skip
        return out["counts"]

    def norms(self) -> np.ndarray:
        """``n x 3`` array of ``(||P_n||_F, ||p_n||_2, w_n)`` of in-memory documents (measurements on
        public data only: the norms themselves are not private)."""
        return _norms(self.docs, self.clip, self.word_clip)


class ClippedSecondMoment:
    """``M2 = (S2 + E)/S0 - a E1 E1^T`` as the operator a private whitening needs (``shape``,
    ``matmat``, ``to_dense``), with ``S0`` and ``E1`` already released (public).

    The noise ``E`` is added by the whitening mechanism to ``S2 / S0`` (scale divided by ``S0``),
    which has the same law as adding it to ``S2``: the affine map is post-processing. With
    ``support`` (public word indices) the operator is ``M2``'s principal submatrix on them: each
    document's term restricted to the support has no larger norm, so the sensitivity is unchanged.
    """

    def __init__(
        self, moments: ClippedMoments, total_weight: float, mean: np.ndarray, alpha0: float,
        support: np.ndarray | None = None,
    ) -> None:  # fmt: skip
        self.moments = moments
        self.total_weight = float(total_weight)
        self.support = None if support is None else np.asarray(support, dtype=np.intp)
        mean = np.asarray(mean, dtype=np.float64)
        self.mean = mean if self.support is None else mean[self.support]
        self.coefficient = alpha0 / (alpha0 + 1.0)

    @property
    def shape(self) -> tuple[int, int]:
        size = self.moments.n_words if self.support is None else self.support.size
        return (size, size)

    def matmat(self, vectors: np.ndarray) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float64)
        out = self.moments.pair_product(vectors, self.support)
        return out / self.total_weight - self.coefficient * np.multiply.outer(self.mean, self.mean @ vectors)

    def to_dense(self) -> np.ndarray:
        dense = self.moments.pair_dense(self.support) / self.total_weight
        dense -= self.coefficient * np.outer(self.mean, self.mean)
        return dense


def clipped_whitened_third_moment(
    third: np.ndarray, total_weight: float, mean: np.ndarray, basis: np.ndarray, eigenvalues: np.ndarray,
    alpha0: float,
) -> np.ndarray:  # fmt: skip
    """``M3(W, W, W)`` from a (released) ``S3(U, U, U)``, ``S0``, ``E1`` and the whitening ``(U, Sigma)``.

    ``W = U Sigma^{-1/2}``; ``E2(W, W)`` is taken as ``I + a (W^T E1)(W^T E1)^T`` (the whitening
    makes ``W^T M2 W = I``), so only released quantities enter (module docstring, eq. (1)).
    """
    inv = 1.0 / np.sqrt(np.asarray(eigenvalues, dtype=np.float64))
    k = inv.size
    a = alpha0 / (alpha0 + 1.0)
    b = alpha0 / (alpha0 + 2.0)
    c = 2.0 * alpha0**2 / ((alpha0 + 1.0) * (alpha0 + 2.0))
    e3 = np.asarray(third) / total_weight * inv[:, None, None] * inv[None, :, None] * inv[None, None, :]
    m = inv * (np.asarray(basis).T @ mean)
    e2 = np.eye(k) + a * np.outer(m, m)
    outer = e2[:, :, None] * m[None, None, :]
    cross = outer + outer.transpose(0, 2, 1) + outer.transpose(2, 0, 1)
    return e3 - b * cross + c * np.einsum("a,b,c->abc", m, m, m)
