"""Moments of Latent Dirichlet Allocation estimated from word counts, never as ``d^3`` arrays.

Model and population moments
----------------------------
A document ``n`` of length ``l_n`` draws topic proportions ``theta_n ~ Dirichlet(alpha)``
(``alpha_0 = sum_i alpha_i``) and then ``l_n`` tokens ``x_t = e_v`` i.i.d. from ``mu theta_n``,
``mu = [mu_1 | ... | mu_k]`` (``d x k``, columns on the simplex). Lemma 3 of DeCarolis et al.
(*An end-to-end differentially private spectral algorithm for LDA*, eq. (1)), after Anandkumar
et al. (*A spectral algorithm for LDA*, Theorem 3.5), with ``x_1, x_2, x_3`` three distinct
tokens of one document:

* ``M1 = E[x1] = sum_i (alpha_i / alpha_0) mu_i``;
* ``M2 = E[x1 (x) x2] - alpha_0/(alpha_0+1) M1 (x) M1 = sum_i alpha_i/(alpha_0(alpha_0+1)) mu_i^{(x)2}``;
* ``M3 = E[x1 (x) x2 (x) x3] - alpha_0/(alpha_0+2) (E[x1 (x) x2 (x) M1] + 2 perms)
  + 2 alpha_0^2/((alpha_0+1)(alpha_0+2)) M1^{(x)3}
  = sum_i 2 alpha_i/(alpha_0(alpha_0+1)(alpha_0+2)) mu_i^{(x)3}``.

(The paper's main-text display writes ``1/(alpha_0+2)`` for the cross term; its Appendix E,
the Lemma 21 constant ``b = -alpha_0/(alpha_0+2)`` and the Dirichlet moments (13)-(15) all give
``alpha_0/(alpha_0+2)``, which is what the expansion of ``E[theta^{(x)3}]`` requires.)

Per-document unbiased estimators
--------------------------------
With counts ``c`` (``sum_v c_v = l``), choosing three distinct token positions uniformly,

* ``E[x1] <- c / l``,
* ``E[x1 (x) x2] <- (c c^T - diag(c)) / (l(l-1))``,
* ``E[x1 (x) x2 (x) x3] <- (c^{(x)3} - sum_v c_v (e_v e_v c + e_v c e_v + c e_v e_v)
  + 2 sum_v c_v e_v^{(x)3}) / (l(l-1)(l-2))``,

each exactly unbiased given ``theta`` (falling factorial moments of the multinomial). The
products of moments (``M1 (x) M1`` and so on) are estimated, as in Lemma 21, by U-statistics
over *distinct* documents, ``sum_{n != m} a_n (x) a_m / (N(N-1))`` and
``sum_{n,m,p distinct} a_n (x) a_m (x) a_p / (N(N-1)(N-2))``; since documents are independent
this makes ``M2_hat`` and ``M3_hat`` exactly unbiased. (Lemma 21 as printed divides the full
products ``(sum M~2) (x) (sum M~1)`` and ``(sum M~1)^{(x)3}`` and so carries an ``O(1/N)`` bias;
we subtract the repeated-document terms, which costs nothing extra.)

Short documents
---------------
The third-order estimator needs ``l >= 3``. Documents with fewer than three tokens are
**dropped from all three moments** (:func:`prepare_counts` reports how many), so that every
U-statistic ranges over one set of documents; under LDA document length is independent of
``theta``, so conditioning on ``l >= 3`` leaves every moment unbiased.

Cost
----
``M2_hat`` is applied to a ``d x m`` block in ``O(nnz m + d m)`` (:class:`LDASecondMoment`),
and the whitened third moment ``T = M3_hat(W, W, W)`` (:func:`whitened_third_moment`) is
formed in ``O(nnz k + N k^3/2 + d k^3/2)`` flops, all of it BLAS matrix products on chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from dptensor._validation import check_finite_array, check_real

#: The shortest document that enters the moments (the third-order estimator needs 3 tokens).
MIN_DOCUMENT_LENGTH = 3

#: Rows of the chunks in which ``N x k(k+1)/2`` products are formed (bounds peak memory).
_CHUNK_ELEMENTS = 500_000


@dataclass(frozen=True)
class DocumentCounts:
    """A validated document-term count matrix restricted to documents with ``>= 3`` tokens.

    Attributes
    ----------
    counts : scipy.sparse.csr_matrix of shape (N, d)
        Non-negative integer counts (stored as float64) of the kept documents.
    lengths : ndarray of shape (N,)
        Document lengths ``l_n >= 3``.
    kept : ndarray of int, shape (N,)
        Row indices of the kept documents in the input matrix.
    n_input_documents : int
        Rows of the input matrix (kept plus dropped).
    """

    counts: sp.csr_matrix
    lengths: np.ndarray
    kept: np.ndarray
    n_input_documents: int

    @property
    def n_documents(self) -> int:
        """Number ``N`` of documents that enter the moments."""
        return int(self.counts.shape[0])

    @property
    def n_words(self) -> int:
        """Vocabulary size ``d``."""
        return int(self.counts.shape[1])

    @property
    def n_dropped(self) -> int:
        """Documents left out because they have fewer than three tokens."""
        return self.n_input_documents - self.n_documents


def check_count_matrix(X: object, name: str = "X", *, allow_no_tokens: bool = False) -> sp.csr_matrix:
    """Validate a document-term count matrix and return it as CSR float64.

    Raises ``TypeError`` for non-numeric input and ``ValueError`` for a wrong shape, an empty
    corpus (no rows or columns, or -- unless ``allow_no_tokens`` -- no tokens at all),
    NaN/infinite, negative or non-integer counts.
    """
    if sp.issparse(X):
        matrix = sp.csr_matrix(X, dtype=np.float64, copy=True)
    else:
        try:
            array = np.asarray(X, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{name} must be a numeric matrix of word counts, got {type(X).__name__}"
            ) from exc
        if array.ndim != 2:
            raise ValueError(
                f"{name} must be a 2-D (documents x words) count matrix, got shape {array.shape}"
            )
        matrix = sp.csr_matrix(array)
    if matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise ValueError(f"{name} is an empty corpus (shape {matrix.shape})")
    matrix.sum_duplicates()
    data = matrix.data
    if not np.all(np.isfinite(data)):
        raise ValueError(f"{name} contains NaN or infinite counts")
    if np.any(data < 0):
        raise ValueError(f"{name} contains negative counts (min {data.min():g}); word counts must be >= 0")
    if np.any(data != np.round(data)):
        raise ValueError(f"{name} contains non-integer counts; word counts must be whole numbers")
    matrix.eliminate_zeros()
    if matrix.nnz == 0 and not allow_no_tokens:
        raise ValueError(f"{name} is an empty corpus: every count is zero")
    return matrix


def prepare_counts(X: object, name: str = "X", *, min_documents: int = 3) -> DocumentCounts:
    """Validate counts and keep the documents with at least three tokens.

    Parameters
    ----------
    X : array_like or scipy.sparse matrix of shape (n_documents, n_words)
        Word counts, one row per document.
    name : str
        Argument name for error messages.
    min_documents : int, default 3
        The U-statistics over distinct documents need ``N >= 3`` kept documents.

    Returns
    -------
    DocumentCounts
    """
    matrix = check_count_matrix(X, name)
    lengths = np.asarray(matrix.sum(axis=1)).ravel()
    kept = np.flatnonzero(lengths >= MIN_DOCUMENT_LENGTH)
    if kept.size < min_documents:
        raise ValueError(
            f"{name} has {kept.size} document(s) with at least {MIN_DOCUMENT_LENGTH} tokens; the moment "
            f"estimators need at least {min_documents}"
        )
    counts = matrix if kept.size == matrix.shape[0] else matrix[kept]
    return DocumentCounts(counts=counts, lengths=lengths[kept], kept=kept, n_input_documents=matrix.shape[0])


def check_alpha0(alpha0: object) -> float:
    """Check the Dirichlet concentration ``alpha_0 = sum_i alpha_i`` is a finite number ``> 0``."""
    return check_real(alpha0, "alpha0")


def first_moment(docs: DocumentCounts) -> np.ndarray:
    """``M1_hat = (1/N) sum_n c_n / l_n`` (Lemma 21, eq. (5)): the mean word distribution."""
    return np.asarray(docs.counts.T @ (1.0 / docs.lengths)).ravel() / docs.n_documents


class LDASecondMoment:
    """The ``d x d`` estimator ``M2_hat`` (Lemma 21, eq. (6), exactly unbiased), as an operator.

    ``M2_hat = (1/N) sum_n (c_n c_n^T - diag(c_n)) / (l_n(l_n-1))
    - a/(N(N-1)) (S1 S1^T - sum_n a_n a_n^T)``, with ``a_n = c_n/l_n``, ``S1 = sum_n a_n`` and
    ``a = alpha_0/(alpha_0+1)``. Applied to a ``d x m`` block ``V`` with four sparse products:

    ``M2_hat V = (1/N) [C^T (w2 * (C V)) - (C^T w2) * V] - a/(N(N-1)) [S1 (S1^T V) - A^T (A V)]``

    where ``w2_n = 1/(l_n(l_n-1))`` and ``A = diag(1/l) C``; the two ``C^T`` products merge into
    one, ``C^T ((w2/N + a/(N(N-1)) / l^2) * (C V))``, so each application is two sparse passes:
    ``O(nnz m)`` work, no ``d x d`` array.

    Parameters
    ----------
    docs : DocumentCounts
    alpha0 : float
    """

    def __init__(self, docs: DocumentCounts, alpha0: float) -> None:
        self.docs = docs
        self.alpha0 = check_alpha0(alpha0)
        lengths = docs.lengths
        self._w2 = 1.0 / (lengths * (lengths - 1.0))
        self._inv_len = 1.0 / lengths
        self._diag = np.asarray(docs.counts.T @ self._w2).ravel()
        self._s1 = np.asarray(docs.counts.T @ self._inv_len).ravel()
        n = docs.n_documents
        self._cross_scale = self.coefficient / (n * (n - 1.0))
        self._row_weight = self._w2 / n + self._cross_scale * self._inv_len**2
        self._diag_weight = self._diag / n
        self._counts32: sp.csr_matrix | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.docs.n_words, self.docs.n_words)

    @property
    def coefficient(self) -> float:
        """``a = alpha_0 / (alpha_0 + 1)``."""
        return self.alpha0 / (self.alpha0 + 1.0)

    def matmat(self, vectors: np.ndarray, *, single_precision: bool = False) -> np.ndarray:
        """``M2_hat @ V`` for a ``d x m`` block ``V`` (or a ``d`` vector).

        ``single_precision=True`` runs the two sparse passes in float32 (about 1.6 times faster;
        relative error about 1e-7), which is enough for the range-finding steps of a randomised
        eigensolver; the result is returned in float64 either way.
        """
        V = np.asarray(vectors, dtype=np.float64)
        single = V.ndim == 1
        if single:
            V = V[:, None]
        if single_precision:
            if self._counts32 is None:
                self._counts32 = self.docs.counts.astype(np.float32)
            C = self._counts32
            CV = np.asarray(C @ V.astype(np.float32))
            weighted = (self._row_weight[:, None] * CV).astype(np.float32)
            out = np.asarray(C.T @ weighted, dtype=np.float64)
        else:
            C = self.docs.counts
            CV = np.asarray(C @ V)
            # The two C^T products share one sparse pass: weights w2/N + a/(N(N-1)) / l^2.
            out = np.asarray(C.T @ (self._row_weight[:, None] * CV))
        out -= self._diag_weight[:, None] * V
        out -= np.outer(self._cross_scale * self._s1, self._s1 @ V)
        return out[:, 0] if single else out

    def as_linear_operator(self) -> spla.LinearOperator:
        """The operator as a :class:`scipy.sparse.linalg.LinearOperator` (for ``eigsh``)."""
        d = self.docs.n_words
        return spla.LinearOperator((d, d), matvec=self.matmat, matmat=self.matmat, dtype=np.float64)

    def to_dense(self) -> np.ndarray:
        """The ``d x d`` matrix (small ``d`` only).

        ``C^T diag(w) C`` by whichever is cheaper: a sparse Gram product (``sum_n nnz_n^2`` sparse
        operations) or dense GEMMs on row chunks (``N d^2`` BLAS flops, about 50 times faster each).
        """
        C = self.docs.counts
        n, d = C.shape
        per_row = np.diff(C.indptr).astype(np.float64)
        if 50.0 * float(per_row @ per_row) < float(n) * d * d:
            dense = np.asarray((C.T @ sp.diags(self._row_weight) @ C).todense())
        else:
            dense = np.zeros((d, d))
            step = max(1, 4_000_000 // d)
            for start in range(0, n, step):
                block = C[start : start + step].toarray()
                dense += block.T @ (self._row_weight[start : start + step, None] * block)
        dense[np.diag_indices_from(dense)] -= self._diag_weight
        dense -= np.outer(self._cross_scale * self._s1, self._s1)
        return dense


@dataclass(frozen=True)
class DocumentTermWeights:
    """Per-document weights of the three aggregate terms of the whitened third moment."""

    cube: np.ndarray  # for sum_n w u_n^{(x)3}
    pair: np.ndarray  # for sym3(sum_n w P_n (x) u_n), P_n = W^T diag(c_n) W
    diag: np.ndarray  # for sum_n w sum_v c_nv w_v^{(x)3}


def _third_moment_weights(lengths: np.ndarray, alpha0: float) -> tuple[DocumentTermWeights, float, float]:
    n = float(lengths.shape[0])
    n2, n3 = n * (n - 1.0), n * (n - 1.0) * (n - 2.0)
    b = alpha0 / (alpha0 + 2.0)
    c = 2.0 * alpha0**2 / ((alpha0 + 1.0) * (alpha0 + 2.0))
    l1 = lengths
    l2 = l1 * (l1 - 1.0)
    l3 = l2 * (l1 - 2.0)
    weights = DocumentTermWeights(
        cube=1.0 / (n * l3) + 3.0 * b / (n2 * l2 * l1) + 2.0 * c / (n3 * l1**3),
        pair=1.0 / (n * l3) + b / (n2 * l2 * l1),
        diag=2.0 / (n * l3),
    )
    return weights, b / n2, c / n3


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


def _packed_cubes(left: np.ndarray, right: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``sum_r left_r (x) (right_r (x) right_r)`` packed over pairs ``b <= c`` (chunked GEMM).

    ``left`` is ``n x p``, ``right`` is ``n x k``; returns ``p x k(k+1)/2``.
    """
    n = right.shape[0]
    step = max(1, _CHUNK_ELEMENTS // max(rows.size, 1))
    out = np.zeros((left.shape[1], rows.size))
    for start in range(0, n, step):
        block = right[start : start + step]
        out += left[start : start + step].T @ (block[:, rows] * block[:, cols])
    return out


def whitened_document_sum(
    counts: sp.csr_matrix, whitening: np.ndarray, projected: np.ndarray, weights: DocumentTermWeights
) -> np.ndarray:
    """``sum_n w^A_n u_n^{(x)3} - sym3(sum_n w^B_n P_n (x) u_n) + sum_v s_v w_v^{(x)3}``, ``k x k x k``.

    The per-document part of :func:`whitened_third_moment` (see its derivation), with
    ``U = C W`` given as ``projected``, ``P_n = W^T diag(c_n) W`` and ``s = C^T w^D``. With
    ``w^A = w^B = 1/(N l3)`` and ``w^D = 2/(N l3)`` it is ``(1/N) sum_n G_n(W, W, W) / l3_n``, the
    whitened average of the per-document unbiased estimators of ``E[x1 (x) x2 (x) x3]``.
    """
    W = whitening
    k = W.shape[1]
    rows, cols = np.triu_indices(k)
    # Per-document cube term: sum_n w^A_n u_n^{(x)3}.
    cube = _unpack(_packed_cubes(weights.cube[:, None] * projected, projected, rows, cols), k, rows, cols)
    # Vocabulary terms: sum_v w_v (x) w_v (x) z_v (to be symmetrised) and sum_v s_v w_v^{(x)3}.
    Z = np.asarray(counts.T @ (weights.pair[:, None] * projected))  # d x k
    s = np.asarray(counts.T @ weights.diag).ravel()
    vocab = _packed_cubes(np.hstack([Z, s[:, None] * W]), W, rows, cols)
    pair_term = _unpack(vocab[:k], k, rows, cols)  # [a, b, c] = sum_v z_va w_vb w_vc
    diag_term = _unpack(vocab[k:], k, rows, cols)
    tensor = cube + diag_term
    # sym3 of X[a,b,c] = sum_v z_va w_vb w_vc (symmetric in b, c): X_abc + X_bac + X_cab.
    tensor -= pair_term + pair_term.transpose(1, 0, 2) + pair_term.transpose(1, 2, 0)
    return tensor


def whitened_third_moment(docs: DocumentCounts, alpha0: float, whitening: np.ndarray) -> np.ndarray:
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

    Parameters
    ----------
    docs : DocumentCounts
        From :func:`prepare_counts`.
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
    C = docs.counts
    lengths = docs.lengths
    weights, cross_scale, triple_scale = _third_moment_weights(lengths, alpha0)
    U = np.asarray(C @ W)  # N x k, u_n = W^T c_n
    tensor = whitened_document_sum(C, W, U, weights)

    inv_l2 = 1.0 / (lengths * (lengths - 1.0))
    s1 = U.T @ (1.0 / lengths)
    pair_sum = (U.T * inv_l2) @ U - (W.T * np.asarray(C.T @ inv_l2).ravel()) @ W
    Q = (U.T * lengths**-2.0) @ U
    tensor -= cross_scale * _sym3(pair_sum, s1)
    tensor += triple_scale * (np.einsum("a,b,c->abc", s1, s1, s1) - _sym3(Q, s1))
    return tensor


class LDAMomentAccumulator:
    """Running sums giving ``M2_hat B`` and ``M3_hat(B, B, B)`` for a fixed ``d x r`` basis ``B``.

    For corpora read in batches (``SpectralLDA.partial_fit``): every statistic of
    :func:`whitened_third_moment` and :class:`LDASecondMoment` is a sum over documents of a term
    that depends only on that document, with the corpus size ``N`` entering only through the
    scalars ``1/N``, ``1/(N(N-1))`` and ``1/(N(N-1)(N-2))``. Keeping the sums apart and applying
    the scalars at the end gives, after any sequence of :meth:`update` calls, exactly the
    estimators computed on the concatenated corpus (Lemma 21 in the unbiased U-statistic form),
    projected on ``B``. Memory ``O(d r + r^3)``; each update costs ``O(nnz r + n r^3 + d r^3)``.

    Parameters
    ----------
    basis : ndarray of shape (d, r)
    alpha0 : float
    """

    def __init__(self, basis: np.ndarray, alpha0: float) -> None:
        self.basis = check_finite_array(basis, "basis", ndim=2)
        self.alpha0 = check_alpha0(alpha0)
        d, r = self.basis.shape
        self._rows, self._cols = np.triu_indices(r)
        npairs = self._rows.size
        self.n_documents = 0
        self._cube = np.zeros((3 * r, npairs))  # sum u^(x)3 with weights 1/l3, 1/(l2 l), 1/l^3
        self._vocab = np.zeros((3 * r, npairs))  # sum_v w_v w_v z_v for 1/l3, 1/(l2 l); sum_v s_v w_v^3
        self._pairs = np.zeros((r, r))  # B = U^T diag(1/l2) U - W^T diag(C^T 1/l2) W
        self._q = np.zeros((r, r))  # Q = U^T diag(1/l^2) U
        self._s1 = np.zeros(r)  # sum_n u_n / l_n
        self._m2_pair = np.zeros((d, r))  # C^T diag(w2) C B - diag(C^T w2) B
        self._m2_cross = np.zeros((d, r))  # C^T diag(1/l^2) C B
        self._m1 = np.zeros(d)  # S1 = sum_n c_n / l_n

    def update(self, docs: DocumentCounts) -> LDAMomentAccumulator:
        """Add a batch of documents (from :func:`prepare_counts`); returns ``self``."""
        if docs.n_words != self.basis.shape[0]:
            raise ValueError(f"the batch has {docs.n_words} words but the basis has {self.basis.shape[0]}")
        if docs.n_documents == 0:
            return self
        W, C, lengths = self.basis, docs.counts, docs.lengths
        r = W.shape[1]
        l2 = lengths * (lengths - 1.0)
        l3 = l2 * (lengths - 2.0)
        weights = np.column_stack([1.0 / l3, 1.0 / (l2 * lengths), lengths**-3.0])
        U = np.asarray(C @ W)
        self._cube += _packed_cubes(
            (weights[:, :, None] * U[:, None, :]).reshape(-1, 3 * r), U, self._rows, self._cols
        )
        Z = np.asarray(C.T @ (weights[:, :2, None] * U[:, None, :]).reshape(-1, 2 * r))
        s = np.asarray(C.T @ weights[:, 0]).ravel()
        self._vocab += _packed_cubes(np.hstack([Z, s[:, None] * W]), W, self._rows, self._cols)
        self._pairs += (U.T / l2) @ U - (W.T * np.asarray(C.T @ (1.0 / l2)).ravel()) @ W
        self._q += (U.T * lengths**-2.0) @ U
        self._s1 += U.T @ (1.0 / lengths)
        w2 = 1.0 / l2
        self._m2_pair += np.asarray(C.T @ (w2[:, None] * U)) - np.asarray(C.T @ w2).ravel()[:, None] * W
        self._m2_cross += np.asarray(C.T @ (lengths[:, None] ** -2.0 * U))
        self._m1 += np.asarray(C.T @ (1.0 / lengths)).ravel()
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
        a = self.alpha0 / (self.alpha0 + 1.0)
        cross = np.outer(self._m1, self._m1 @ self.basis) - self._m2_cross
        return self._m2_pair / n - a / (n * (n - 1.0)) * cross

    def third_moment(self) -> np.ndarray:
        """``M3_hat(B, B, B)`` (``r x r x r``) over all documents added so far."""
        n = self._check_enough()
        r = self.basis.shape[1]
        n2, n3 = n * (n - 1.0), n * (n - 1.0) * (n - 2.0)
        b = self.alpha0 / (self.alpha0 + 2.0)
        c = 2.0 * self.alpha0**2 / ((self.alpha0 + 1.0) * (self.alpha0 + 2.0))
        rows, cols = self._rows, self._cols
        cube = self._cube[:r] / n + 3.0 * b / n2 * self._cube[r : 2 * r] + 2.0 * c / n3 * self._cube[2 * r :]
        pair = self._vocab[:r] / n + b / n2 * self._vocab[r : 2 * r]
        tensor = _unpack(cube, r, rows, cols) + 2.0 / n * _unpack(self._vocab[2 * r :], r, rows, cols)
        pair_term = _unpack(pair, r, rows, cols)
        tensor -= pair_term + pair_term.transpose(1, 0, 2) + pair_term.transpose(1, 2, 0)
        s1 = self._s1
        tensor -= b / n2 * _sym3(self._pairs, s1)
        tensor += c / n3 * (np.einsum("a,b,c->abc", s1, s1, s1) - _sym3(self._q, s1))
        return tensor


def dense_lda_moments(docs: DocumentCounts, alpha0: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reference ``(M1_hat, M2_hat, M3_hat)`` as dense arrays (small vocabularies only).

    A direct transcription of the estimators in the module docstring (Lemma 21 with
    U-statistics over distinct documents), vectorised over documents with ``einsum``. Used to
    check the implicit and whitened computations and for mechanisms that perturb ``M3_hat``
    itself. Memory ``O(d^3 + N d)``.
    """
    alpha0 = check_alpha0(alpha0)
    C = docs.counts.toarray()
    n, d = C.shape
    lengths = docs.lengths
    l2 = lengths * (lengths - 1.0)
    l3 = l2 * (lengths - 2.0)
    A = C / lengths[:, None]
    s1 = A.sum(axis=0)
    m1 = s1 / n

    pairs = np.einsum("n,ni,nj->ij", 1.0 / l2, C, C) - np.diag(C.T @ (1.0 / l2))  # sum_n B_n
    a = alpha0 / (alpha0 + 1.0)
    m2 = pairs / n - a / (n * (n - 1.0)) * (np.outer(s1, s1) - A.T @ A)

    eye = np.eye(d)
    diag_c = np.einsum("n,nv,vi,vj,vk->ijk", 1.0 / l3, C, eye, eye, eye)
    cube = np.einsum("n,ni,nj,nk->ijk", 1.0 / l3, C, C, C)
    dc = np.einsum("n,ni,ij,nk->ijk", 1.0 / l3, C, eye, C)  # sum_n (diag(c_n) (x) c_n) / l3
    triples = cube - (dc + dc.transpose(0, 2, 1) + dc.transpose(2, 0, 1)) + 2.0 * diag_c  # sum_n G_n
    # sum_{n != m} B_n (x) a_m = (sum_n B_n) (x) S1 - sum_n B_n (x) a_n
    b_self = np.einsum("n,ni,nj,nk->ijk", 1.0 / (l2 * lengths), C, C, C) - np.einsum(
        "n,ni,ij,nk->ijk", 1.0 / (l2 * lengths), C, eye, C
    )
    cross_pairs = np.einsum("ij,k->ijk", pairs, s1) - b_self
    cross = cross_pairs + cross_pairs.transpose(0, 2, 1) + cross_pairs.transpose(2, 0, 1)
    aa = A.T @ A
    aas = np.einsum("ij,k->ijk", aa, s1)
    distinct = (
        np.einsum("i,j,k->ijk", s1, s1, s1)
        - (aas + aas.transpose(0, 2, 1) + aas.transpose(2, 0, 1))
        + 2.0 * np.einsum("ni,nj,nk->ijk", A, A, A)
    )
    b = alpha0 / (alpha0 + 2.0)
    c = 2.0 * alpha0**2 / ((alpha0 + 1.0) * (alpha0 + 2.0))
    m3 = triples / n - b / (n * (n - 1.0)) * cross + c / (n * (n - 1.0) * (n - 2.0)) * distinct
    return m1, m2, m3


def population_lda_moments(
    topics: np.ndarray, alpha: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact ``(M1, M2, M3)`` of an LDA model (DeCarolis et al., Lemma 3, eq. (1)).

    Parameters
    ----------
    topics : ndarray of shape (k, d)
        Topic-word distributions ``mu_i`` as rows.
    alpha : ndarray of shape (k,)
        Dirichlet parameters ``alpha_i > 0``.

    Returns
    -------
    m1 : ndarray (d,), ``sum_i alpha_i/alpha_0 mu_i``
    m2 : ndarray (d, d), ``sum_i alpha_i/(alpha_0(alpha_0+1)) mu_i mu_i^T``
    m3 : ndarray (d, d, d), ``sum_i 2 alpha_i/(alpha_0(alpha_0+1)(alpha_0+2)) mu_i^{(x)3}``
    """
    topics = check_finite_array(topics, "topics", ndim=2)
    alpha = check_finite_array(alpha, "alpha", ndim=1)
    if alpha.shape[0] != topics.shape[0]:
        raise ValueError(f"alpha has {alpha.shape[0]} entries but topics has {topics.shape[0]} rows")
    if np.any(alpha <= 0):
        raise ValueError("alpha must be positive")
    a0 = alpha.sum()
    m1 = (alpha / a0) @ topics
    m2 = np.einsum("i,ia,ib->ab", alpha / (a0 * (a0 + 1.0)), topics, topics)
    m3 = np.einsum("i,ia,ib,ic->abc", 2.0 * alpha / (a0 * (a0 + 1.0) * (a0 + 2.0)), topics, topics, topics)
    return m1, m2, m3
