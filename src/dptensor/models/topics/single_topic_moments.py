"""Moments of the single-topic model from documents, symmetrised, dense or whitened.

Model (Imtiaz & Sarwate 2018, slides "Single topic model"; Anandkumar et al., JMLR 2014, Section
3.1). Each document has one hidden topic ``h``, ``P[h = k] = w_k``; given ``h = k`` its words are
drawn i.i.d. from ``a_k``, a probability vector over ``d`` words. With ``t_1, t_2, t_3`` one-hot
encodings of three distinct words of a document,

    M2 = E[t_1 (x) t_2] = sum_k w_k a_k (x) a_k,     M3 = E[t_1 (x) t_2 (x) t_3] = sum_k w_k a_k^{(x)3}.

Estimators (``moments=``)
-------------------------
``"first3"`` (the slides' estimator, default)
    ``M2_hat = (1/N) sum_n Sym(t_{1,n} (x) t_{2,n})`` and
    ``M3_hat = (1/N) sum_n Sym(t_{1,n} (x) t_{2,n} (x) t_{3,n})`` from the **first** two and three
    words of each document. The slides write the unsymmetrised products; we symmetrise (mean over
    the index permutations). The expectation is the same, and the privacy mechanisms need it: they
    add symmetric noise, which leaves the antisymmetric part of an unsymmetrised moment (e.g.
    ``M_ab - M_ba``) without any noise.
``"all"``
    The U-statistics over all ordered pairs and triples of distinct positions,
    ``M2_n = (c c^T - diag c) / (l(l-1))`` and
    ``M3_n = [c^{(x)3} - sym3(diag(c) (x) c) + 2 sum_v c_v e_v^{(x)3}] / (l(l-1)(l-2))`` for a
    document of counts ``c`` and length ``l`` (the ``alpha_0 -> 0`` limit of the LDA estimators of
    :mod:`dptensor.models.topics.moments`, where the cross terms vanish), averaged over documents.
    Also unbiased and symmetric; it uses every word, so its variance is lower.

Sensitivity (replace one document, ``N`` public)
------------------------------------------------
Every per-document term is a symmetric probability matrix or tensor (non-negative, entries
summing to 1). Its vector of unique entries ``u`` (entries ``i <= j (<= l)``) therefore has
``||u||_2 <= ||u||_1 <= 1``, and for two such non-negative vectors
``||u - u'||^2 = ||u||^2 + ||u'||^2 - 2 u.u' <= 2``. So both moments move by at most ``sqrt(2)/N`` in
the l2 norm of their unique entries, and likewise in Frobenius norm
(``||T||_F^2 = sum_o |o| u_o^2 <= max_o u_o sum_o |o| u_o <= 1``). The bound is attained by
``(a, a, a) -> (b, b, b)``. ``tests/models/topics/test_single_topic_moments.py`` confirms it by brute force
over every document on small vocabularies, for both estimators and both norms.

Input forms (:func:`check_documents`)
-------------------------------------
* a **count matrix** (scipy.sparse, or a dense array with ``input="counts"``), documents x words:
  word order is not recorded, so only ``moments="all"`` can use it;
* **token sequences**: a list of 1-D integer arrays (one per document, word ids in order), or an
  ``(N, L)`` integer array of word ids with ``input="tokens"``. ``n_words`` (the vocabulary size
  ``d``) must be given: it is public, and reading it off the data (the largest id) would leak.

Every document must have at least three tokens; shorter ones are an input error (the model's
domain), never dropped silently, since dropping would change ``N``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from dptensor._errstate import underflow_ignored
from dptensor._validation import check_finite_array, check_positive_int
from dptensor.models.topics.moments import (
    MIN_DOCUMENT_LENGTH,
    check_count_matrix,
    scaled_proportions,
    short_document_error,
)
from dptensor.tensor.operators import symmetrize

MOMENTS: tuple[str, ...] = ("first3", "all")
INPUT_FORMS: tuple[str, ...] = ("auto", "counts", "tokens")

#: Elements of the ``rows x k^2`` Khatri-Rao chunks of the whitened first-words moment.
_CHUNK_ELEMENTS = 2_000_000


@dataclass(frozen=True)
class SingleTopicDocuments:
    """Validated documents of the single-topic model.

    Attributes
    ----------
    n_documents : int
        ``N`` (public).
    n_words : int
        Vocabulary size ``d`` (public).
    first_words : ndarray of int, shape (N, 3), or None
        Word ids of the first three tokens of each document (token input only).
    counts : scipy.sparse.csr_matrix of shape (N, d), or None
        Word counts (float64) of each document (needed by ``moments="all"``).
    """

    n_documents: int
    n_words: int
    first_words: np.ndarray | None
    counts: sp.csr_matrix | None


_SHORT_DOCUMENTS = (
    f"the single-topic model reads {MIN_DOCUMENT_LENGTH} words of every document. Remove or merge them "
    "before fitting: they are outside the model's domain, and dropping them silently would change the "
    "number of documents N, which the privacy analysis treats as public"
)


def check_documents(
    X: object,
    *,
    n_words: int | None = None,
    input: str = "auto",
    moments: str = "first3",
    name: str = "X",
    private: bool = False,
) -> SingleTopicDocuments:
    """Validate documents for the single-topic model (see the module docstring for the input forms).

    Parameters
    ----------
    X : scipy.sparse matrix, array_like or list of 1-D integer arrays
    n_words : int, optional
        Vocabulary size ``d``: required for token input; for a count matrix it must equal the
        number of columns when given.
    input : {"auto", "counts", "tokens"}
        ``"auto"``: a scipy.sparse matrix is counts, a list or tuple is token sequences; a dense
        2-D array is ambiguous (word ids or counts) and must be named.
    moments : {"first3", "all"}
        ``"first3"`` needs token sequences.
    name : str
        Argument name for error messages.
    private : bool, default False
        A private fit's input: error messages name no count and no row of the documents.

    Returns
    -------
    SingleTopicDocuments

    Raises
    ------
    ValueError
        A document with fewer than three tokens (naming how many and which rows, unless
        ``private``), word ids
        outside ``[0, n_words)``, negative or non-integer counts, an empty corpus, a count matrix
        with ``moments="first3"``, a missing ``n_words`` for tokens.
    TypeError
        Input that is neither counts nor token sequences, or a dense array with ``input="auto"``.
    """
    if input not in INPUT_FORMS:
        raise ValueError(f"input must be one of {INPUT_FORMS}, got {input!r}")
    if moments not in MOMENTS:
        raise ValueError(f"moments must be one of {MOMENTS}, got {moments!r}")
    if input == "auto":
        if sp.issparse(X):
            input = "counts"
        elif isinstance(X, list | tuple):
            input = "tokens"
        else:
            raise TypeError(
                f"{name} is a {type(X).__name__}: a dense 2-D array may hold word counts (documents x "
                "words) or word ids (documents x positions); pass input='counts' or input='tokens'"
            )
    if input == "counts":
        return _check_counts(X, n_words, moments, name, private)
    return _check_tokens(X, n_words, moments, name, private)


def _check_counts(
    X: object, n_words: int | None, moments: str, name: str, private: bool
) -> SingleTopicDocuments:
    if moments == "first3":
        raise ValueError(
            f"{name} is a count matrix, which does not record word order, but moments='first3' reads the "
            "first three words of each document: pass token sequences (input='tokens'), or use "
            "moments='all' (every word, through U-statistics)"
        )
    counts = check_count_matrix(X, name)
    n, d = counts.shape
    if n_words is not None and check_positive_int(n_words, "n_words") != d:
        raise ValueError(f"n_words={n_words} but {name} has {d} columns (words)")
    # Shortness from counts capped at 3: the same test as ``length < 3`` without summing huge counts.
    capped = counts.minimum(MIN_DOCUMENT_LENGTH)
    short = np.flatnonzero(np.asarray(capped.sum(axis=1)).ravel() < MIN_DOCUMENT_LENGTH)
    if short.size:
        raise short_document_error(name, short, private=private, why=_SHORT_DOCUMENTS)
    return SingleTopicDocuments(n_documents=n, n_words=d, first_words=None, counts=counts)


def _check_tokens(
    X: object, n_words: int | None, moments: str, name: str, private: bool
) -> SingleTopicDocuments:
    if n_words is None:
        raise ValueError(
            "n_words (the vocabulary size) is required with token input: it is public, and reading it "
            "off the data (the largest word id) would reveal that word's presence"
        )
    d = check_positive_int(n_words, "n_words")
    if sp.issparse(X):
        raise TypeError(f"{name} is a sparse matrix, which holds counts, not token sequences")
    if isinstance(X, list | tuple):
        docs = [np.asarray(doc) for doc in X]
        if not docs:
            raise ValueError(f"{name} is an empty corpus (no documents)")
        if any(doc.ndim != 1 for doc in docs):
            raise ValueError(f"each document of {name} must be a 1-D sequence of word ids")
        lengths = np.array([doc.size for doc in docs], dtype=np.int64)
        ids = np.concatenate(docs) if lengths.sum() else np.zeros(0, dtype=np.int64)
    else:
        array = np.asarray(X)
        if array.ndim != 2:
            raise ValueError(
                f"{name} must be a 2-D (documents x positions) array of word ids, got shape {array.shape}"
            )
        if array.shape[0] == 0:
            raise ValueError(f"{name} is an empty corpus (no documents)")
        lengths = np.full(array.shape[0], array.shape[1], dtype=np.int64)
        ids = array.ravel()
    if ids.size and not (np.issubdtype(ids.dtype, np.integer) or ids.dtype == bool):
        raise TypeError(f"{name} must hold integer word ids, got dtype {ids.dtype}")
    short = np.flatnonzero(lengths < MIN_DOCUMENT_LENGTH)
    if short.size:
        raise short_document_error(name, short, private=private, why=_SHORT_DOCUMENTS)
    ids = ids.astype(np.int64, copy=False)
    if ids.min() < 0 or ids.max() >= d:
        raise ValueError(f"{name} holds word ids outside [0, n_words) = [0, {d})")
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    first_words = ids[starts[:, None] + np.arange(MIN_DOCUMENT_LENGTH)]
    counts = None
    if moments == "all":
        rows = np.repeat(np.arange(lengths.size), lengths)
        counts = sp.csr_matrix(
            (np.ones(ids.size), (rows, ids)), shape=(lengths.size, d), dtype=np.float64
        )
        counts.sum_duplicates()
    return SingleTopicDocuments(
        n_documents=int(lengths.size), n_words=d, first_words=first_words, counts=counts
    )


@dataclass(frozen=True)
class ScaledDocuments:
    """Documents in the scaled form of the ``moments="all"`` estimators: no finite count overflows.

    A document of counts ``c`` and length ``l`` is stored as ``p = c / l`` (a probability vector)
    and ``1 / l``; the U-statistics of the module docstring are rewritten in these terms,

        M2_n = (p p^T - diag(p) / l) * l / (l - 1),
        M3_n = [p^{(x)3} - sym3(diag(p) (x) p) / l + 2 sum_v p_v e_v^{(x)3} / l^2] * l^2 / ((l-1)(l-2)),

    which equal the unscaled forms exactly in real arithmetic and stay finite for every finite
    count (up to ``1.8e308``, where ``c c^T`` and ``l(l-1)(l-2)`` overflow). Each row is first
    divided by its largest count, so even a length that overflows float64 gives ``p`` and
    ``1 / l`` (then ``0``, the limit) without an overflow. Products of small frequencies and of
    ``1 / l`` may underflow to zero by design: the per-document arithmetic runs under a local
    ``np.errstate(under="ignore")`` (the same under any NumPy error state).

    Attributes
    ----------
    proportions : scipy.sparse.csr_matrix of shape (N, d)
        ``p_n = c_n / l_n``.
    inverse_lengths : ndarray of shape (N,)
        ``1 / l_n`` (``<= 1/3``).
    """

    proportions: sp.csr_matrix
    inverse_lengths: np.ndarray

    @classmethod
    def from_counts(cls, counts: sp.csr_matrix) -> ScaledDocuments:
        """Scale validated counts (every row with at least three tokens)."""
        return cls(*scaled_proportions(counts))

    @underflow_ignored  # per-document products: zero is their value
    def weights(self, power: int) -> np.ndarray:
        """``(1/N) l^{power} / ((l-1) ... (l-power+1))`` per document, for ``power`` 2 or 3."""
        inv = self.inverse_lengths
        factor = 1.0 - inv if power == 2 else (1.0 - inv) * (1.0 - 2.0 * inv)
        return 1.0 / (self.proportions.shape[0] * factor)


class DocumentSecondMoment:
    """``M2_hat = (1/N) sum_n (c_n c_n^T - diag c_n) / (l_n(l_n-1))`` (``moments="all"``) as an operator.

    In the scaled form of :class:`ScaledDocuments`: ``M2_hat V = P^T (a * (P V)) - (P^T (a / l)) * V``
    with ``a_n = l_n / (N (l_n - 1))``: two sparse passes, no ``d x d`` array, no overflow.
    """

    @underflow_ignored  # per-document products: zero is their value
    def __init__(self, counts: sp.csr_matrix) -> None:
        scaled = ScaledDocuments.from_counts(counts)
        self.proportions = scaled.proportions
        self._weights = scaled.weights(2)
        self._diag = np.asarray(self.proportions.T @ (self._weights * scaled.inverse_lengths)).ravel()

    @property
    def shape(self) -> tuple[int, int]:
        return (self.proportions.shape[1], self.proportions.shape[1])

    @underflow_ignored  # per-document products: zero is their value
    def matmat(self, vectors: np.ndarray) -> np.ndarray:
        V = np.asarray(vectors, dtype=np.float64)
        P = self.proportions
        return np.asarray(P.T @ (self._weights[:, None] * np.asarray(P @ V))) - (self._diag[:, None] * V)


def _sym3_pairs(pair: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``sym3`` of ``X_abc = sum_v z_va w_vb w_vc``: ``X_abc + X_bca + X_cab`` (``Z = pair``, ``d x k``)."""
    tensor = np.einsum("va,vb,vc->abc", pair, W, W, optimize=True)
    return tensor + tensor.transpose(1, 2, 0) + tensor.transpose(2, 0, 1)


@underflow_ignored  # per-document products: zero is their value
def whitened_all_words_moment(counts: sp.csr_matrix, W: np.ndarray) -> np.ndarray:
    """``M3_hat(W, W, W)`` of ``moments="all"`` (``k x k x k``), in the scaled form (no overflow).

    With ``U = P W``, ``b_n = a_n / l_n``, ``g_n = 2 a_n / l_n^2`` and ``a_n`` the ``power=3`` weights:
    ``sum_n a_n u_n^{(x)3} - sym3(sum_v w_v (x) w_v (x) z_v) + sum_v s_v w_v^{(x)3}`` where
    ``Z = P^T (b * U)`` and ``s = P^T g``; ``O(nnz k + (N + d) k^3)``.
    """
    scaled = ScaledDocuments.from_counts(counts)
    P, inv = scaled.proportions, scaled.inverse_lengths
    a = scaled.weights(3)
    U = np.asarray(P @ W)
    k = W.shape[1]
    tensor = np.zeros((k, k, k))
    step = max(1, _CHUNK_ELEMENTS // (k * k))
    for start in range(0, U.shape[0], step):
        block = U[start : start + step]
        weighted = a[start : start + step, None] * block
        tensor += np.einsum("na,nb,nc->abc", weighted, block, block, optimize=True)
    pair = np.asarray(P.T @ ((a * inv)[:, None] * U))
    diag = np.asarray(P.T @ (2.0 * a * inv * inv)).ravel()
    tensor -= _sym3_pairs(pair, W)
    tensor += np.einsum("v,va,vb,vc->abc", diag, W, W, W, optimize=True)
    return tensor


def second_moment(docs: SingleTopicDocuments, moments: str = "first3") -> spla.LinearOperator:
    """``M2_hat`` (symmetric, ``d x d``) as a :class:`~scipy.sparse.linalg.LinearOperator`.

    ``"first3"``: the sparse matrix ``(1/2N) sum_n (e_{t1} e_{t2}^T + e_{t2} e_{t1}^T)``;
    ``"all"``: :class:`DocumentSecondMoment`. Use ``operator @ np.eye(d)`` for the dense matrix.
    """
    d = docs.n_words
    if moments == "first3":
        matrix = _first_words_second_moment(_first_words(docs), d)
        return spla.aslinearoperator(matrix)
    if moments == "all":
        operator = DocumentSecondMoment(_counts(docs))
        return spla.LinearOperator((d, d), matvec=operator.matmat, matmat=operator.matmat, dtype=np.float64)
    raise ValueError(f"moments must be one of {MOMENTS}, got {moments!r}")


def _first_words(docs: SingleTopicDocuments) -> np.ndarray:
    if docs.first_words is None:
        raise ValueError("moments='first3' needs token sequences (the first three words of each document)")
    return docs.first_words


def _counts(docs: SingleTopicDocuments) -> sp.csr_matrix:
    if docs.counts is None:
        raise ValueError("moments='all' needs the documents' counts; validate them with moments='all'")
    return docs.counts


def _first_words_second_moment(first_words: np.ndarray, d: int) -> sp.csr_matrix:
    n = first_words.shape[0]
    t1, t2 = first_words[:, 0], first_words[:, 1]
    rows = np.concatenate([t1, t2])
    cols = np.concatenate([t2, t1])
    matrix = sp.csr_matrix((np.full(2 * n, 0.5 / n), (rows, cols)), shape=(d, d))
    matrix.sum_duplicates()
    return matrix


def dense_second_moment(docs: SingleTopicDocuments, moments: str = "first3") -> np.ndarray:
    """``M2_hat`` as a dense symmetric ``d x d`` array (small ``d``)."""
    if moments == "first3":
        first, d = _first_words(docs), docs.n_words
        raw = np.bincount(first[:, 0] * d + first[:, 1], minlength=d * d).reshape(d, d) / first.shape[0]
        return (raw + raw.T) / 2.0
    dense = second_moment(docs, moments) @ np.eye(docs.n_words)
    return (dense + dense.T) / 2.0


def third_moment(
    docs: SingleTopicDocuments, moments: str = "first3", whitening: np.ndarray | None = None
) -> np.ndarray:
    """``M3_hat`` (symmetric), dense ``d x d x d`` or whitened ``M3_hat(W, W, W)`` (``k x k x k``).

    Parameters
    ----------
    docs : SingleTopicDocuments
    moments : {"first3", "all"}
    whitening : ndarray of shape (d, k), optional
        Without it the dense ``d x d x d`` moment is returned (small ``d`` only).

    Notes
    -----
    ``"first3"`` whitened: ``Sym((1/N) sum_n y_{1,n} (x) y_{2,n} (x) y_{3,n})`` with ``y = W^T e_t`` the
    rows of ``W`` at the first three words, formed as ``Y1^T (Y2 * Y3)`` (row-wise Khatri-Rao products
    in chunks), ``O(N k^3)``; dense: one ``bincount`` over the ``d^3`` cells. ``"all"``:
    :func:`whitened_all_words_moment` (scaled, so that no finite count overflows),
    ``O(nnz k + (N + d) k^3)``; dense with ``W = I``.
    """
    if moments == "first3":
        first = _first_words(docs)
        n = first.shape[0]
        if whitening is None:
            d = docs.n_words
            cells = np.ravel_multi_index((first[:, 0], first[:, 1], first[:, 2]), (d, d, d))
            raw = np.bincount(cells, minlength=d**3).reshape(d, d, d) / n
            return symmetrize(raw)
        W = _check_whitening(whitening, docs.n_words)
        k = W.shape[1]
        raw = np.zeros((k, k * k))
        step = max(1, _CHUNK_ELEMENTS // (k * k))
        for start in range(0, n, step):
            block = first[start : start + step]
            y2, y3 = W[block[:, 1]], W[block[:, 2]]
            raw += W[block[:, 0]].T @ (y2[:, :, None] * y3[:, None, :]).reshape(block.shape[0], k * k)
        return symmetrize(raw.reshape(k, k, k) / n)
    if moments == "all":
        W = np.eye(docs.n_words) if whitening is None else _check_whitening(whitening, docs.n_words)
        return whitened_all_words_moment(_counts(docs), W)
    raise ValueError(f"moments must be one of {MOMENTS}, got {moments!r}")


def _check_whitening(whitening: np.ndarray, d: int) -> np.ndarray:
    W = check_finite_array(whitening, "whitening", ndim=2)
    if W.shape[0] != d:
        raise ValueError(f"whitening must have {d} rows (the vocabulary size), got shape {W.shape}")
    return W
