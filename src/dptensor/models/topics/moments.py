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

Scaled form (no overflow for any finite counts)
------------------------------------------------
Every per-document term above is a count vector times a function of ``l``; with the word
distribution ``p = c / l`` and ``e = 1 / l`` (:func:`scaled_proportions`, which divides each row by
its largest count before summing it) they are rewritten so that no intermediate grows with the
counts:

* ``(c c^T - diag c) / (l(l-1)) = (p p^T - e diag p) / (1 - e)``, i.e.
  ``c_i c_j / (l(l-1)) = p_i p_j l/(l-1) = p_i p_j / (1 - e)`` and ``c_i / (l(l-1)) = p_i e / (1 - e)``;
* ``c_i c_j c_k / (l(l-1)(l-2)) = p_i p_j p_k / ((1 - e)(1 - 2e))``, and the diagonal corrections
  ``c_i c_j / (l(l-1)(l-2)) = p_i p_j e / ((1 - e)(1 - 2e))`` and
  ``c_i / (l(l-1)(l-2)) = p_i e^2 / ((1 - e)(1 - 2e))``.

In general a sum ``sum_n f(l_n) (C P)_n^{(x)r}`` with ``r`` count factors and ``f`` one of
:data:`LENGTH_FUNCTIONS` is ``sum_n [l_n^r f(l_n)] (D P)_n^{(x)r}`` with ``D`` the rows ``p_n``, and
``l^r f(l)`` is a bounded function of ``e in (0, 1/3]`` (:func:`_scaled_length_basis`): the estimators
are the same functions of the counts, only the order of the operations changes (results agree to
rounding). A document with one word counted ``1.8e308`` or two counts of ``1e308`` gives ``p`` on
the simplex and ``e = 0`` (or a subnormal), its term the limit ``l -> inf`` of valid terms, so
every norm bound a sensitivity argument takes over documents of three or more tokens holds for it
too. Products of ``e`` may underflow to zero (by design); the per-document sums run under a local
``np.errstate(under="ignore")``, so they behave alike under any NumPy error state.

Short documents
---------------
The third-order estimator needs ``l >= 3``. Documents with fewer than three tokens are
**dropped from all three moments** (:func:`prepare_counts` reports how many), so that every
U-statistic ranges over one set of documents; under LDA document length is independent of
``theta``, so conditioning on ``l >= 3`` leaves every moment unbiased.

Cost
----
``M2_hat`` is applied to a ``d x m`` block in ``O(nnz m + d m)`` (:class:`LDASecondMoment`),
and the whitened third moment ``T = M3_hat(W, W, W)``
(:func:`~dptensor.models.topics._third_moment.whitened_third_moment`, beside the batch sums of
:class:`~dptensor.models.topics._third_moment.LDAMomentAccumulator`) is formed in
``O(nnz k + N k^3/2 + d k^3/2)`` flops, all of it BLAS matrix products on chunks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from dptensor._errstate import underflow_ignored
from dptensor._validation import check_alpha0, check_finite_array  # check_alpha0: privacy's too, so there
from dptensor.parallel import LocalRowBlocks, RowBlocks, as_row_blocks, effective_n_jobs, is_distributed

#: The shortest document that enters the moments (the third-order estimator needs 3 tokens).
MIN_DOCUMENT_LENGTH = 3

#: How many offending rows a non-private input error lists.
_ROWS_SHOWN = 10


def short_document_error(name: str, rows: np.ndarray, *, private: bool, why: str) -> ValueError:
    """The error for documents shorter than :data:`MIN_DOCUMENT_LENGTH` tokens.

    On a private path the message names no count and no row (docs/protection.md: messages name
    only public facts); off it, the number of such documents and the first rows are given, to
    help find them. ``rows`` are the offending rows' indices (global where known); ``why``
    completes the sentence with what the model needs and what to do.
    """
    if private:
        return ValueError(f"{name} has documents with fewer than {MIN_DOCUMENT_LENGTH} tokens; {why}")
    shown = ", ".join(str(int(r)) for r in rows[:_ROWS_SHOWN]) + (", ..." if rows.size > _ROWS_SHOWN else "")
    return ValueError(f"{name} has {rows.size} document(s) with fewer than {MIN_DOCUMENT_LENGTH} tokens "
                      f"(rows {shown}); {why}")

#: Rows of the chunks in which ``N x k(k+1)/2`` products are formed (bounds peak memory).
_CHUNK_ELEMENTS = 500_000


@dataclass(frozen=True)
class DocumentCounts:
    """A validated document-term count matrix restricted to documents with ``>= 3`` tokens.

    Also one row block of a corpus cut into blocks (:class:`DocumentBlocks`).

    Attributes
    ----------
    counts : scipy.sparse.csr_matrix of shape (N, d)
        Non-negative integer counts (stored as float64) of the kept documents.
    lengths : ndarray of shape (N,)
        Document lengths ``l_n >= 3`` (:func:`document_lengths`: ``inf`` beyond float64's range;
        the moments use the scaled ``proportions`` and ``inverse_lengths`` instead).
    kept : ndarray of int, shape (N,)
        Row indices of the kept documents in the input matrix (the block).
    n_input_documents : int
        Rows of the input matrix (kept plus dropped).
    """

    counts: sp.csr_matrix
    lengths: np.ndarray
    kept: np.ndarray
    n_input_documents: int

    @functools.cached_property
    def _scaled(self) -> tuple[sp.csr_matrix, np.ndarray]:
        return scaled_proportions(self.counts)

    @property
    def proportions(self) -> sp.csr_matrix:
        """The word distributions ``p_n = c_n / l_n`` (:func:`scaled_proportions`), made once."""
        return self._scaled[0]

    @property
    def inverse_lengths(self) -> np.ndarray:
        """``e_n = 1 / l_n`` (:func:`scaled_proportions`; ``0`` where ``l_n`` exceeds float64's range)."""
        return self._scaled[1]

    @functools.cached_property
    def proportions32(self) -> sp.csr_matrix:
        """``proportions`` in float32, made once (the single-precision ``M2_hat V`` passes reuse it)."""
        with np.errstate(under="ignore"):  # frequencies below float32's range round to zero
            return self.proportions.astype(np.float32)

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

    @property
    def shape(self) -> tuple[int, int]:
        """``(N, d)``: rows are the kept documents (the row-block protocol of :mod:`dptensor.parallel`)."""
        return (self.n_documents, self.n_words)

    def take_rows(self, rows: np.ndarray) -> DocumentCounts:
        """The kept documents at positions ``rows`` (for reductions over a subset of documents)."""
        rows = np.asarray(rows, dtype=np.int64)
        return DocumentCounts(self.counts[rows], self.lengths[rows], self.kept[rows], int(rows.size))


@dataclass(frozen=True)
class DocumentBlocks:
    """A corpus as row blocks of :class:`DocumentCounts` on a backend (:mod:`dptensor.parallel`).

    Built by :func:`prepare_documents` for ``n_jobs > 1`` or Dask input; every moment in this
    module accepts it wherever it accepts a :class:`DocumentCounts`.

    Attributes
    ----------
    blocks : dptensor.parallel.RowBlocks
        Blocks whose payloads are :class:`DocumentCounts` (on the workers for Dask).
    n_input_documents : int
        Rows of the input (kept plus dropped).
    """

    blocks: RowBlocks
    n_input_documents: int

    @property
    def n_documents(self) -> int:
        """Number ``N`` of documents that enter the moments."""
        return self.blocks.n_rows

    @property
    def n_words(self) -> int:
        """Vocabulary size ``d``."""
        return self.blocks.n_cols

    @property
    def n_dropped(self) -> int:
        """Documents left out because they have fewer than three tokens."""
        return self.n_input_documents - self.n_documents


Documents = DocumentCounts | DocumentBlocks


def document_blocks(docs: Documents) -> RowBlocks:
    """The blocks of ``docs`` (one in-process block for a :class:`DocumentCounts`: no copy)."""
    if isinstance(docs, DocumentBlocks):
        return docs.blocks
    if isinstance(docs, DocumentCounts):
        return LocalRowBlocks([docs], docs.n_words)
    raise TypeError(f"docs must be DocumentCounts or DocumentBlocks, got {type(docs).__name__}")


def row_reduce(matrix: sp.csr_matrix, values: np.ndarray, ufunc: np.ufunc) -> np.ndarray:
    """``ufunc.reduce`` of ``values`` (one per stored entry of ``matrix``) over each row; 0 for empty rows."""
    out = np.zeros(matrix.shape[0])
    starts = matrix.indptr[:-1]
    nonempty = np.diff(matrix.indptr) > 0
    if values.size:
        out[nonempty] = ufunc.reduceat(values, starts[nonempty])
    return out


@underflow_ignored  # c / max c and 1 / l may be subnormal or zero: their values
def scaled_proportions(counts: sp.csr_matrix) -> tuple[sp.csr_matrix, np.ndarray]:
    """Each document's word distribution ``p = c / l`` and ``1 / l``, for any finite counts.

    Each row is divided by its largest count before it is summed, so no finite count overflows:
    even a length ``l`` beyond float64's range gives ``p`` and ``1 / l`` (then ``0``, its limit).
    Underflow (a ratio below float64's smallest normal number) rounds to zero or a subnormal
    silently, under any NumPy error state.
    An empty row gives ``p = 0`` and ``1 / l = 0``. The overflow-free form shared by the
    single-topic model's ``moments="all"`` estimators and the clipped LDA moments.

    Parameters
    ----------
    counts : scipy.sparse.csr_matrix of shape (N, d)
        Non-negative, finite counts.

    Returns
    -------
    proportions : scipy.sparse.csr_matrix of shape (N, d)
        ``p_n`` on the stored entries of ``counts``.
    inverse_lengths : ndarray of shape (N,)
        ``1 / l_n``.
    """
    counts = sp.csr_matrix(counts, dtype=np.float64)
    rows = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))
    peak = row_reduce(counts, counts.data, np.maximum)
    safe_peak = np.where(peak > 0, peak, 1.0)
    scaled = counts.data / safe_peak[rows]  # in (0, 1]
    total = row_reduce(counts, scaled, np.add)  # in [1, d] for non-empty rows
    safe_total = np.where(total > 0, total, 1.0)
    proportions = sp.csr_matrix(
        (scaled / safe_total[rows], counts.indices.copy(), counts.indptr.copy()), shape=counts.shape
    )
    return proportions, np.where(peak > 0, (1.0 / safe_peak) / safe_total, 0.0)


def check_count_matrix(X: object, name: str = "X", *, allow_no_tokens: bool = False) -> sp.csr_matrix:
    """Validate a document-term count matrix and return it as CSR float64.

    Raises ``TypeError`` for non-numeric input and ``ValueError`` for a wrong shape, an empty
    corpus (no rows or columns, or -- unless ``allow_no_tokens`` -- no tokens at all),
    NaN/infinite, negative or non-integer counts.
    """
    # complex counts: a cast to float64 would drop the imaginary part (lists of complex numbers fail the
    # cast below); read from the dtype only, so that array-likes are not converted here
    if getattr(getattr(X, "dtype", None), "kind", None) == "c":
        raise TypeError(f"{name} must hold real word counts, got complex values")
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
        raise ValueError(f"{name} contains negative counts; word counts must be >= 0")
    if np.any(data != np.round(data)):
        raise ValueError(f"{name} contains non-integer counts; word counts must be whole numbers")
    matrix.eliminate_zeros()
    if matrix.nnz == 0 and not allow_no_tokens:
        raise ValueError(f"{name} is an empty corpus: every count is zero")
    return matrix


def document_lengths(matrix: sp.csr_matrix) -> np.ndarray:
    """Each row's sum ``l_n`` of a validated count matrix; ``inf`` where it exceeds float64's range.

    Only compared with :data:`MIN_DOCUMENT_LENGTH` (and read by dense references): the moments
    use :func:`scaled_proportions`, so a length that overflows changes nothing they compute, and
    the overflow is not reported (no warning or error under any NumPy error state).
    """
    with np.errstate(over="ignore"):
        return np.asarray(matrix.sum(axis=1)).ravel()


def _keep_long(matrix: sp.csr_matrix) -> DocumentCounts:
    lengths = document_lengths(matrix)
    kept = np.flatnonzero(lengths >= MIN_DOCUMENT_LENGTH)
    counts = matrix if kept.size == matrix.shape[0] else matrix[kept]
    return DocumentCounts(counts=counts, lengths=lengths[kept], kept=kept, n_input_documents=matrix.shape[0])


def _check_enough_documents(n_kept: int, name: str, min_documents: int) -> None:
    if n_kept < min_documents:
        raise ValueError(
            f"{name} has {n_kept} document(s) with at least {MIN_DOCUMENT_LENGTH} tokens; the moment "
            f"estimators need at least {min_documents}"
        )


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
    docs = _keep_long(check_count_matrix(X, name))
    _check_enough_documents(docs.n_documents, name, min_documents)
    return docs


def _prepare_block(block: object, name: str) -> DocumentCounts:
    return _keep_long(check_count_matrix(block, name, allow_no_tokens=True))


def _input_documents(block: DocumentCounts) -> int:
    return block.n_input_documents


def prepare_documents(
    X: object, name: str = "X", *, min_documents: int = 3, n_jobs: int | None = None
) -> Documents:
    """:func:`prepare_counts` on any input of :func:`dptensor.parallel.as_row_blocks`.

    In-memory input with one thread gives a :class:`DocumentCounts` (exactly
    :func:`prepare_counts`); ``n_jobs > 1``, a Dask array or :class:`~dptensor.parallel.RowBlocks`
    give :class:`DocumentBlocks`, validated block by block where the blocks are (on the workers
    for Dask, where they are then kept).
    """
    if not isinstance(X, RowBlocks) and not is_distributed(X) and effective_n_jobs(n_jobs) == 1:
        return prepare_counts(X, name, min_documents=min_documents)
    source = as_row_blocks(X, n_jobs=n_jobs)
    blocks = source.map(_prepare_block, name, label="prepare-counts")
    # The input's rows are metadata of arrays; blocks read from files or a bag are counted.
    n_input = source.n_rows if source.rows_known else blocks.map_sum(_input_documents, label="count-input")
    docs = DocumentBlocks(blocks, int(n_input))
    _check_enough_documents(docs.n_documents, name, min_documents)
    return docs


# -- per-block sums: every moment below is a sum over documents of these ----------------------------
#: The functions of the document length ``l`` that weight per-document terms, in this order
#: (``l2 = l(l-1)``, ``l3 = l(l-1)(l-2)``); weights are linear combinations of them.
LENGTH_FUNCTIONS = ("1/l3", "1/(l2 l)", "1/l^3", "1/l2", "1/l^2", "1/l")
_L3, _L2L, _LCUBE, _L2, _LSQ, _L1 = range(6)
#: The order of each length function in ``e = 1/l`` (``1/l3 = e^3 / ((1-e)(1-2e))`` and so on).
_DEGREES = np.array([3, 3, 3, 2, 2, 1])


def _scaled_length_basis(inverse_lengths: np.ndarray, power: int) -> np.ndarray:
    """``N x 6`` values of ``l^power f(l)`` for the :data:`LENGTH_FUNCTIONS` ``f``, from ``e = 1/l``.

    The weights of a sum with ``power`` count factors per document, applied to word distributions
    instead of counts (module docstring, *Scaled form*). With ``f(l) = e^m h(e)``, ``m`` the
    function's degree and ``h`` one of ``1/((1-e)(1-2e))``, ``1/(1-e)``, ``1``,

    ``l^power f(l) = e^(m - power) h(e)``,

    bounded for ``e in [0, 1/3]`` when ``m >= power`` (every estimator's case). The columns with
    ``m < power`` grow with ``l``; they are zero here and :func:`_check_degrees` refuses
    coefficients on them. ``e = 0`` (a length beyond float64's range) gives the limit ``l -> inf``.
    """
    e = np.asarray(inverse_lengths, dtype=np.float64)
    one = 1.0 - e
    h = np.column_stack([1.0 / (one * (1.0 - 2.0 * e)), 1.0 / one, np.ones_like(e), 1.0 / one,
                         np.ones_like(e), np.ones_like(e)])  # fmt: skip
    exponents = _DEGREES - power
    return np.where(exponents >= 0, h * e[:, None] ** np.maximum(exponents, 0), 0.0)


def _check_degrees(coefficients: np.ndarray, power: int, name: str) -> None:
    """Refuse weights that grow with the length (``l^power f(l)`` unbounded: not a scaled sum)."""
    if np.any(coefficients[:, _DEGREES < power] != 0):
        raise ValueError(f"StatisticsRequest.{name}: a length function of degree below {power} in 1/l")


def _weights(*terms: dict[int, float]) -> np.ndarray:
    """Coefficient rows over :data:`LENGTH_FUNCTIONS`: ``_weights({_L2: 1/n, _LSQ: c})``."""
    out = np.zeros((len(terms), len(LENGTH_FUNCTIONS)))
    for row, term in enumerate(terms):
        for column, value in term.items():
            out[row, column] = value
    return out


@dataclass(frozen=True)
class StatisticsRequest:
    """Which weighted document sums :func:`document_statistics` returns.

    Each field is a ``q x 6`` matrix of coefficients over :data:`LENGTH_FUNCTIONS` (one weight
    ``w_n = sum_j coef_j f_j(l_n)`` per row) or ``None``. With ``U = C P`` (``P`` the ``d x m``
    projection) the sums are:

    * ``cube``: ``sum_n w_n u_n (x) u_n (x) u_n`` packed over ``b <= c`` -- ``(q m) x m(m+1)/2``;
    * ``pair``: ``C^T (w (.) U)`` -- ``d x (q m)`` (``M2_hat V``; the ``Z`` of the whitened ``M3_hat``);
    * ``vocab``: ``C^T w`` -- ``d x q``;
    * ``gram``: ``U^T diag(w) U`` -- ``q x m x m``;
    * ``sums``: ``U^T w`` -- ``q x m``.

    They are computed in the scaled form (module docstring): ``U = l (.) Y`` with ``Y = D P`` the
    word distributions projected, so a sum with ``r`` count factors is taken over ``Y`` (or ``D``)
    with the weights ``l^r f_j(l)`` of :func:`_scaled_length_basis`. A coefficient on a length
    function of degree below ``r`` in ``1/l`` (a weight growing with ``l``) is refused. Every
    estimator of this module asks only for bounded weights.

    ``single_precision`` runs the ``pair`` products in float32 (range finding only).
    """

    cube: np.ndarray | None = None
    pair: np.ndarray | None = None
    vocab: np.ndarray | None = None
    gram: np.ndarray | None = None
    sums: np.ndarray | None = None
    single_precision: bool = False


def document_statistics(
    docs: DocumentCounts, projection: np.ndarray | None, request: StatisticsRequest
) -> dict[str, np.ndarray]:
    """The weighted sums of :class:`StatisticsRequest` over the documents of one block.

    The block function of every pass in this module (run by :meth:`~dptensor.parallel.RowBlocks.map_sum`
    in process, in threads or on Dask workers): ``M1_hat``, ``M2_hat V``, the whitened ``M3_hat``
    (Lemma 21, eqs. (5)-(7), in the unbiased U-statistic form) and the running sums of
    :class:`~dptensor.models.topics._third_moment.LDAMomentAccumulator` are all built from these sums,
    which add over blocks exactly.
    Computed from the cached word distributions and ``1/l`` of the block (no product of counts: no
    finite count overflows), under a local ``np.errstate(under="ignore")``.
    Cost: ``O(nnz m)`` per ``pair`` row and for ``U``; ``O(N m^3 / 2)`` per ``cube`` row.
    """
    D, e = docs.proportions, docs.inverse_lengths
    out: dict[str, np.ndarray] = {}
    Y = None  # rows p_n^T P (the counts' C P divided by l_n)
    if any(x is not None for x in (request.cube, request.gram, request.sums)) or (
        request.pair is not None and not request.single_precision
    ):
        Y = np.asarray(D @ projection)
    with np.errstate(under="ignore"):  # products of e and of small frequencies: zero is their value
        if request.cube is not None:
            _check_degrees(request.cube, 3, "cube")
            m = Y.shape[1]
            rows, cols = np.triu_indices(m)
            w = _scaled_length_basis(e, 3) @ request.cube.T
            left = (w[:, :, None] * Y[:, None, :]).reshape(Y.shape[0], -1)
            out["cube"] = _packed_cubes(left, Y, rows, cols)
        if request.pair is not None:
            _check_degrees(request.pair, 2, "pair")
            w = _scaled_length_basis(e, 2) @ request.pair.T
            if request.single_precision:
                D32 = docs.proportions32
                DV = np.asarray(D32 @ np.asarray(projection, dtype=np.float32))
                weighted = (w[:, :, None] * DV[:, None, :]).reshape(DV.shape[0], -1).astype(np.float32)
                out["pair"] = np.asarray(D32.T @ weighted, dtype=np.float64)
            else:
                out["pair"] = np.asarray(D.T @ (w[:, :, None] * Y[:, None, :]).reshape(Y.shape[0], -1))
        if request.vocab is not None:
            _check_degrees(request.vocab, 1, "vocab")
            out["vocab"] = np.asarray(D.T @ (_scaled_length_basis(e, 1) @ request.vocab.T))
        if request.gram is not None:
            _check_degrees(request.gram, 2, "gram")
            w = _scaled_length_basis(e, 2) @ request.gram.T
            out["gram"] = np.stack([(Y.T * w[:, j]) @ Y for j in range(w.shape[1])])
        if request.sums is not None:
            _check_degrees(request.sums, 1, "sums")
            out["sums"] = (_scaled_length_basis(e, 1) @ request.sums.T).T @ Y
    return out


def _weighted_gram(docs: DocumentCounts, coefficients: np.ndarray) -> np.ndarray:
    """``C^T diag(w) C`` (``d x d``) for one block, by the cheaper of a sparse or a dense product.

    A sparse Gram product costs ``sum_n nnz_n^2`` sparse operations, dense GEMMs on row chunks
    ``N d^2`` BLAS flops (about 50 times faster each).
    """
    D = docs.proportions  # C^T diag(w) C = D^T diag(l^2 w) D (module docstring, *Scaled form*)
    _check_degrees(coefficients[None, :], 2, "gram")
    n, d = D.shape
    per_row = np.diff(D.indptr).astype(np.float64)
    with np.errstate(under="ignore"):
        w = _scaled_length_basis(docs.inverse_lengths, 2) @ coefficients
        if 50.0 * float(per_row @ per_row) < float(n) * d * d:
            return np.asarray((D.T @ sp.diags(w) @ D).todense())
        dense = np.zeros((d, d))
        step = max(1, 4_000_000 // d)
        for start in range(0, n, step):
            block = D[start : start + step].toarray()
            dense += block.T @ (w[start : start + step, None] * block)
    return dense


def first_moment(docs: Documents) -> np.ndarray:
    """``M1_hat = (1/N) sum_n c_n / l_n`` (Lemma 21, eq. (5)): the mean word distribution."""
    request = StatisticsRequest(vocab=_weights({_L1: 1.0}))
    return document_blocks(docs).map_sum(document_statistics, None, request, label="m1")["vocab"][:, 0] / (
        docs.n_documents
    )


class LDASecondMoment:
    """The ``d x d`` estimator ``M2_hat`` (Lemma 21, eq. (6), exactly unbiased), as an operator.

    ``M2_hat = (1/N) sum_n (c_n c_n^T - diag(c_n)) / (l_n(l_n-1))
    - a/(N(N-1)) (S1 S1^T - sum_n a_n a_n^T)``, with ``a_n = c_n/l_n``, ``S1 = sum_n a_n`` and
    ``a = alpha_0/(alpha_0+1)``. Applied to a ``d x m`` block ``V`` with four sparse products:

    ``M2_hat V = (1/N) [C^T (w2 * (C V)) - (C^T w2) * V] - a/(N(N-1)) [S1 (S1^T V) - A^T (A V)]``

    where ``w2_n = 1/(l_n(l_n-1))`` and ``A = diag(1/l) C``; the two ``C^T`` products merge into
    one, ``C^T ((w2/N + a/(N(N-1)) / l^2) * (C V))``, so each application is two sparse passes:
    ``O(nnz m)`` work, no ``d x d`` array. The passes are sums over documents
    (:func:`document_statistics`), run on the blocks of ``docs`` (in process, threads or Dask).

    Parameters
    ----------
    docs : DocumentCounts or DocumentBlocks
    alpha0 : float
    """

    def __init__(self, docs: Documents, alpha0: float) -> None:
        self.docs = docs
        self.alpha0 = check_alpha0(alpha0)
        self._blocks = document_blocks(docs)
        request = StatisticsRequest(vocab=_weights({_L2: 1.0}, {_L1: 1.0}))
        vocab = self._blocks.map_sum(document_statistics, None, request, label="m2-diagonal")["vocab"]
        self._diag, self._s1 = vocab[:, 0].copy(), vocab[:, 1].copy()
        n = docs.n_documents
        self._cross_scale = self.coefficient / (n * (n - 1.0))
        # Per-document weight of the merged C^T pass: w2/N + a/(N(N-1)) / l^2.
        self._row_weights = _weights({_L2: 1.0 / n, _LSQ: self._cross_scale})
        self._diag_weight = self._diag / n

    @property
    def first_moment(self) -> np.ndarray:
        """``M1_hat = S1 / N`` (Lemma 21, eq. (5)), from the sums this operator has already read."""
        return self._s1 / self.docs.n_documents

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
        request = StatisticsRequest(pair=self._row_weights, single_precision=single_precision)
        # In single precision the block is sent (to threads or workers) as float32 once, not per block.
        shared = V.astype(np.float32) if single_precision else V
        out = self._blocks.map_sum(document_statistics, shared, request, label="m2-product")["pair"]
        out -= self._diag_weight[:, None] * V
        out -= np.outer(self._cross_scale * self._s1, self._s1 @ V)
        return out[:, 0] if single else out

    def as_linear_operator(self) -> spla.LinearOperator:
        """The operator as a :class:`scipy.sparse.linalg.LinearOperator` (for ``eigsh``)."""
        d = self.docs.n_words
        return spla.LinearOperator((d, d), matvec=self.matmat, matmat=self.matmat, dtype=np.float64)

    def to_dense(self) -> np.ndarray:
        """The ``d x d`` matrix (small ``d`` only): ``C^T diag(w) C`` summed over blocks, then corrected."""
        dense = self._blocks.map_sum(_weighted_gram, self._row_weights[0], label="m2-dense")
        dense[np.diag_indices_from(dense)] -= self._diag_weight
        dense -= np.outer(self._cross_scale * self._s1, self._s1)
        return dense


@underflow_ignored  # products of three small entries: zero is their value
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
