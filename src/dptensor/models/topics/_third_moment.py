"""LDA's whitened third moment from word counts, and the running sums of a corpus read in batches.

The third-order estimator of :mod:`dptensor.models.topics.moments` (Lemma 21, eq. (7) of DeCarolis et
al., *An end-to-end differentially private spectral algorithm for LDA*, in the exactly unbiased
U-statistic form of that module's docstring), contracted with a ``d x k`` whitening ``W`` in every
mode without forming ``M3_hat`` (Section 4, step (3); edges ``e3``/``e4`` of Figure 1):
:func:`whitened_third_moment`, its first term alone (:func:`whitened_document_average`, the
single-topic model's ``M3_hat``), and :class:`LDAMomentAccumulator`, whose per-document sums give
``M2_hat B`` and ``M3_hat(B, B, B)`` after any sequence of batches (``SpectralLDA.partial_fit``).
Every sum over documents is one :func:`~dptensor.models.topics.moments.document_statistics` pass; the
helpers that unpack its packed cubes (``sum_r a_r (x) b_r (x) b_r`` over pairs ``b <= c``) and form
the vocabulary terms serve the clipped moments too (:mod:`dptensor.models.topics.clipped_moments`).
"""

from __future__ import annotations

import numpy as np

from dptensor._validation import check_alpha0, check_finite_array
from dptensor.models.topics.moments import (
    _L1,
    _L2,
    _L2L,
    _L3,
    _LCUBE,
    _LSQ,
    Documents,
    StatisticsRequest,
    _packed_cubes,
    _weights,
    document_blocks,
    document_statistics,
)

__all__ = ["LDAMomentAccumulator", "whitened_document_average", "whitened_third_moment"]

def _sym3(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``X (x) v + 2 perms`` for a symmetric ``X``: ``T_abc = X_ab v_c + X_ac v_b + X_bc v_a``."""
    outer = matrix[:, :, None] * vector[None, None, :]
    return outer + outer.transpose(0, 2, 1) + outer.transpose(2, 0, 1)


def _unpack(packed: np.ndarray, k: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``k x k(k+1)/2`` array ``X[a, (b<=c)]`` to the ``k x k x k`` array symmetric in ``b, c``."""
    out = np.empty((k, k, k))
    out[:, rows, cols] = packed
    out[:, cols, rows] = packed
    return out


def _vocabulary_cubes(pair: np.ndarray, diag: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``sum_v w_v (x) w_v (x) z_v`` symmetrised, subtracted from ``sum_v s_v w_v^{(x)3}`` (``k^3``).

    ``pair`` is ``Z`` (``d x k``), ``diag`` is ``s`` (``d``); the vocabulary terms of
    :func:`whitened_third_moment`, formed once after the sums over documents, ``O(d k^3)``.
    """
    k = W.shape[1]
    rows, cols = np.triu_indices(k)
    vocab = _packed_cubes(np.hstack([pair, diag[:, None] * W]), W, rows, cols)
    pair_term = _unpack(vocab[:k], k, rows, cols)  # [a, b, c] = sum_v z_va w_vb w_vc
    tensor = _unpack(vocab[k:], k, rows, cols)
    # sym3 of X[a,b,c] = sum_v z_va w_vb w_vc (symmetric in b, c): X_abc + X_bac + X_cab.
    tensor -= pair_term + pair_term.transpose(1, 0, 2) + pair_term.transpose(1, 2, 0)
    return tensor


def whitened_document_average(docs: Documents, whitening: np.ndarray) -> np.ndarray:
    """``(1/N) sum_n G_n(W, W, W) / l3_n``, ``k x k x k``: the first term of :func:`whitened_third_moment`.

    The whitened average of the per-document unbiased estimators of ``E[x1 (x) x2 (x) x3]`` (with
    ``l3 = l(l-1)(l-2)``; see :func:`whitened_third_moment`'s derivation, weights
    ``w^A = w^B = 1/(N l3)``, ``w^D = 2/(N l3)``): the single-topic model's ``M3_hat`` from every
    word of each document, in one :func:`document_statistics` pass.
    """
    W = check_finite_array(whitening, "whitening", ndim=2)
    if W.shape[0] != docs.n_words:
        raise ValueError(f"whitening must have {docs.n_words} rows (the vocabulary size), got {W.shape}")
    k, n = W.shape[1], float(docs.n_documents)
    request = StatisticsRequest(
        cube=_weights({_L3: 1.0 / n}), pair=_weights({_L3: 1.0 / n}), vocab=_weights({_L3: 2.0 / n})
    )
    stats = document_blocks(docs).map_sum(document_statistics, W, request, label="whitened-m3")
    rows, cols = np.triu_indices(k)
    return _unpack(stats["cube"], k, rows, cols) + _vocabulary_cubes(stats["pair"], stats["vocab"][:, 0], W)


def _u_statistic_constants(n: float, alpha0: float) -> tuple[float, float, float, float]:
    """``(N(N-1), N(N-1)(N-2), b, c)`` with ``b = a0/(a0+2)`` and ``c = 2 a0^2/((a0+1)(a0+2))``."""
    b = alpha0 / (alpha0 + 2.0)
    c = 2.0 * alpha0**2 / ((alpha0 + 1.0) * (alpha0 + 2.0))
    return n * (n - 1.0), n * (n - 1.0) * (n - 2.0), b, c


def _cross_terms(
    pairs: np.ndarray, q: np.ndarray, s1: np.ndarray, n: float, alpha0: float
) -> np.ndarray:
    """``- (b/N(N-1)) sym3(B (x) s1) + (c/N(N-1)(N-2)) (s1^{(x)3} - sym3(Q (x) s1))``."""
    n2, n3, b, c = _u_statistic_constants(n, alpha0)
    return -b / n2 * _sym3(pairs, s1) + c / n3 * (np.einsum("a,b,c->abc", s1, s1, s1) - _sym3(q, s1))


def whitened_third_moment(docs: Documents, alpha0: float, whitening: np.ndarray) -> np.ndarray:
    """The ``k x k x k`` whitened tensor ``T_hat = M3_hat(W, W, W)`` from counts, without ``M3_hat``.

    Implements Lemma 21, eq. (7) of DeCarolis et al. (with the exactly unbiased U-statistic
    form described in the module docstring), contracted with the ``d x k`` whitening matrix
    ``W`` in every mode (Section 4, step (3); edges ``e3``/``e4`` of Figure 1).

    Derivation. Write ``u_n = W^T c_n``, ``y_n = u_n / l_n``, ``s1 = sum_n y_n``,
    ``w_v = W^T e_v`` (row ``v`` of ``W``), ``P_n = sum_v c_nv w_v w_v^T`` and
    ``sym3(X (x) v) = X (x) v + 2 perms``. Whitening each piece:

    * ``sum_n G_n(W,W,W) = sum_n [u_n^{(x)3} - sym3(P_n (x) u_n) + 2 sum_v c_nv w_v^{(x)3}] / l3_n``;
    * ``sum_{n != m} B_n(W,W) (x) y_m = B (x) s1 - sum_n B_n(W,W) (x) y_n`` with
      ``B_n(W,W) = (u_n u_n^T - P_n)/l2_n`` and ``B = U^T diag(1/l2) U - W^T diag(C^T 1/l2) W``;
    * ``sum_{distinct} y_n (x) y_m (x) y_p = s1^{(x)3} - sym3(Q (x) s1) + 2 sum_n y_n^{(x)3}``,
      ``Q = sum_n y_n y_n^T``.

    Collecting terms, ``T_hat`` is three aggregates with per-document weights plus ``k^3`` terms:

    ``T_hat = sum_n w^A_n u_n^{(x)3} - sym3(sum_n w^B_n P_n (x) u_n) + sum_v s_v w_v^{(x)3}
    - (b/N(N-1)) sym3(B (x) s1) + (c/N(N-1)(N-2)) (s1^{(x)3} - sym3(Q (x) s1))``

    with ``w^A = 1/(N l3) + 3b/(N(N-1) l2 l) + 2c/(N(N-1)(N-2) l^3)``,
    ``w^B = 1/(N l3) + b/(N(N-1) l2 l)``, ``s = C^T (2/(N l3))``, ``b = alpha_0/(alpha_0+2)``,
    ``c = 2 alpha_0^2/((alpha_0+1)(alpha_0+2))``, ``l2 = l(l-1)``, ``l3 = l(l-1)(l-2)``.
    The key identity ``sum_n w_n P_n (x) u_n = sum_v w_v (x) w_v (x) z_v`` with
    ``Z = C^T diag(w) U`` (``d x k``) turns the per-document ``k x k`` matrices into one sparse
    product. Cost: ``U = C W`` and ``Z`` in ``O(nnz k)``; the cube sums as chunked GEMMs against
    the packed Khatri-Rao products ``(u_b u_c)_{b<=c}``, ``O((N + d) k^3 / 2)``.

    Every sum over documents is one pass of :func:`document_statistics` over the blocks of
    ``docs`` (in process, in threads or on Dask workers); the ``O(d k^3)`` vocabulary terms and
    the ``k^3`` corrections are formed once from the summed statistics.

    Parameters
    ----------
    docs : DocumentCounts or DocumentBlocks
        From :func:`prepare_counts` or :func:`prepare_documents`.
    alpha0 : float
        Dirichlet concentration ``alpha_0 > 0``.
    whitening : ndarray of shape (d, k)

    Returns
    -------
    ndarray of shape (k, k, k)
        Symmetric.
    """
    alpha0 = check_alpha0(alpha0)
    W = check_finite_array(whitening, "whitening", ndim=2)
    if W.shape[0] != docs.n_words:
        raise ValueError(f"whitening must have {docs.n_words} rows (the vocabulary size), got {W.shape}")
    k = W.shape[1]
    n = float(docs.n_documents)
    n2, n3, b, c = _u_statistic_constants(n, alpha0)
    request = StatisticsRequest(
        cube=_weights({_L3: 1.0 / n, _L2L: 3.0 * b / n2, _LCUBE: 2.0 * c / n3}),
        pair=_weights({_L3: 1.0 / n, _L2L: b / n2}),
        vocab=_weights({_L3: 2.0 / n}, {_L2: 1.0}),
        gram=_weights({_L2: 1.0}, {_LSQ: 1.0}),
        sums=_weights({_L1: 1.0}),
    )
    stats = document_blocks(docs).map_sum(document_statistics, W, request, label="whitened-m3")
    rows, cols = np.triu_indices(k)
    tensor = _unpack(stats["cube"], k, rows, cols) + _vocabulary_cubes(stats["pair"], stats["vocab"][:, 0], W)
    pairs = stats["gram"][0] - (W.T * stats["vocab"][:, 1]) @ W
    tensor += _cross_terms(pairs, stats["gram"][1], stats["sums"][0], n, alpha0)
    return tensor


class LDAMomentAccumulator:
    """Running sums giving ``M2_hat B`` and ``M3_hat(B, B, B)`` for a fixed ``d x r`` basis ``B``.

    For corpora read in batches (``SpectralLDA.partial_fit``): every statistic of
    :func:`whitened_third_moment` and :class:`LDASecondMoment` is a sum over documents of a term
    that depends only on that document, with the corpus size ``N`` entering only through the
    scalars ``1/N``, ``1/(N(N-1))`` and ``1/(N(N-1)(N-2))``. Keeping the sums apart (one per
    length function, :func:`document_statistics`) and applying the scalars at the end gives,
    after any sequence of :meth:`update` calls, exactly the estimators computed on the
    concatenated corpus (Lemma 21 in the unbiased U-statistic form), projected on ``B``. Memory
    ``O(d r + r^3)``; each update costs ``O(nnz r + n r^3)``, each :meth:`third_moment` ``O(d r^3)``.

    Parameters
    ----------
    basis : ndarray of shape (d, r)
    alpha0 : float
    """

    #: The sums kept: cubes for 1/l3, 1/(l2 l), 1/l^3; Z for 1/l3, 1/(l2 l), 1/l2, 1/l^2;
    #: C^T f for 1/l3, 1/l2, 1/l; Gram matrices for 1/l2, 1/l^2; U^T (1/l).
    _REQUEST = StatisticsRequest(
        cube=_weights({_L3: 1.0}, {_L2L: 1.0}, {_LCUBE: 1.0}),
        pair=_weights({_L3: 1.0}, {_L2L: 1.0}, {_L2: 1.0}, {_LSQ: 1.0}),
        vocab=_weights({_L3: 1.0}, {_L2: 1.0}, {_L1: 1.0}),
        gram=_weights({_L2: 1.0}, {_LSQ: 1.0}),
        sums=_weights({_L1: 1.0}),
    )

    def __init__(self, basis: np.ndarray, alpha0: float) -> None:
        self.basis = check_finite_array(basis, "basis", ndim=2)
        self.alpha0 = check_alpha0(alpha0)
        self.n_documents = 0
        self._sums: dict[str, np.ndarray] | None = None

    def update(self, docs: Documents) -> LDAMomentAccumulator:
        """Add a batch (from :func:`prepare_counts` or :func:`prepare_documents`); returns ``self``."""
        if docs.n_words != self.basis.shape[0]:
            raise ValueError(f"the batch has {docs.n_words} words but the basis has {self.basis.shape[0]}")
        if docs.n_documents == 0:
            return self
        blocks = document_blocks(docs)
        sums = blocks.map_sum(document_statistics, self.basis, self._REQUEST, label="lda-batch")
        self._sums = sums if self._sums is None else {key: self._sums[key] + sums[key] for key in sums}
        self.n_documents += docs.n_documents
        return self

    def _check_enough(self) -> float:
        if self.n_documents < 3:
            raise ValueError(
                f"the moments need at least 3 documents with 3 or more tokens, got {self.n_documents}"
            )
        return float(self.n_documents)

    def second_moment_basis(self) -> np.ndarray:
        """``M2_hat B`` (``d x r``) over all documents added so far."""
        n = self._check_enough()
        B, sums = self.basis, self._sums
        r = B.shape[1]
        a = self.alpha0 / (self.alpha0 + 1.0)
        pair = sums["pair"][:, 2 * r : 3 * r] - sums["vocab"][:, 1:2] * B  # C^T diag(w2) C B - diag(C^T w2) B
        m1 = sums["vocab"][:, 2]
        cross = np.outer(m1, m1 @ B) - sums["pair"][:, 3 * r :]
        return pair / n - a / (n * (n - 1.0)) * cross

    def first_moment(self) -> np.ndarray:
        """``M1_hat`` (``d``, Lemma 21, eq. (5)) over all documents added so far."""
        return self._sums["vocab"][:, 2] / self._check_enough()

    def third_moment(self) -> np.ndarray:
        """``M3_hat(B, B, B)`` (``r x r x r``) over all documents added so far."""
        n = self._check_enough()
        B, sums = self.basis, self._sums
        r = B.shape[1]
        n2, n3, b, c = _u_statistic_constants(n, self.alpha0)
        rows, cols = np.triu_indices(r)
        cube = sums["cube"]
        cube = cube[:r] / n + 3.0 * b / n2 * cube[r : 2 * r] + 2.0 * c / n3 * cube[2 * r :]
        z = sums["pair"][:, :r] / n + b / n2 * sums["pair"][:, r : 2 * r]
        tensor = _unpack(cube, r, rows, cols) + _vocabulary_cubes(z, 2.0 / n * sums["vocab"][:, 0], B)
        pairs = sums["gram"][0] - (B.T * sums["vocab"][:, 1]) @ B
        tensor += _cross_terms(pairs, sums["gram"][1], sums["sums"][0], n, self.alpha0)
        return tensor
