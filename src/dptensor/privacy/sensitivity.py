"""Neighbouring relations and the l2 sensitivities of the power method's queries.

Algorithm 3 of Wang & Anandkumar (2016) releases two kinds of query of the (deflated) tensor,
for public unit vectors ``u`` (computed from earlier releases):

* ``f1(T; u) = T(I, u, u)`` -- a ``d``-vector (each power step);
* ``f2(T; u) = T(u, u, u)`` -- a number (each eigenvalue estimate).

Deflation subtracts a public tensor ``D`` from both neighbours, so it does not change the
difference ``T - T'``: the sensitivities below hold for every deflation step.

Entry relation (Definition 4.2)
-------------------------------
``T' - T = +-E`` with ``E = symmetrize(e_i (x) e_j (x) e_k)``, the *sum* of the six index
permutations. For distinct ``i, j, k``, ``E(I, u, u) = 2 (u_j u_k e_i + u_i u_k e_j + u_i u_j e_k)``;
for ``i = j != k`` it is ``4 u_i u_k e_i + 2 u_i^2 e_k``; for ``i = j = k`` it is ``6 u_i^2 e_i``.
The proof of Theorem 4.1 bounds ``||E(I,u,u)||_2`` by the l1 norm
``2(|u_i u_j| + |u_i u_k| + |u_j u_k|) <= 6 ||u||_inf^2``. We checked the bound in l2: the l2 norms
of the three cases are at most ``2 sqrt(3) ||u||_inf^2``, ``sqrt(20) ||u||_inf^2`` and
``6 ||u||_inf^2``, so **the paper's ``6 ||u||_inf^2`` is a correct l2 bound and it is attained**
(at the diagonal entry ``i = j = k = argmax |u_i|``). Likewise ``E(u,u,u) = 6 u_i u_j u_k``
in every case, so ``Delta_2 f2 = 6 ||u||_inf^3``, also attained.

Record relation (dptensor's extension)
--------------------------------------
``T = (1/n) sum_{r=1}^n x_r^{(x)3}`` (a :class:`~dptensor.tensor.SampleMoment`) over ``n`` records
with the declared bound ``||x_r||_2 <= B``; neighbours replace one record ``x`` by ``x'`` (``n`` is
public and unchanged). Then ``T' - T = (x'^{(x)3} - x^{(x)3}) / n`` and

* ``(T' - T)(I, u, u) = (<x', u>^2 x' - <x, u>^2 x) / n``, whose l2 norm is at most
  ``(||x'||^3 + ||x||^3) ||u||^2 / n <= 2 B^3 ||u||_2^2 / n`` (Cauchy--Schwarz on each term);
* ``(T' - T)(u, u, u) = (<x', u>^3 - <x, u>^3) / n``, at most ``2 B^3 ||u||_2^3 / n``.

Both are attained by ``x' = B u/||u||``, ``x = -B u/||u||``; for unit ``u`` both equal
``2 B^3 / n``. The whole tensor moves by at most ``||T' - T||_F <= 2 B^3 / n`` (used by input
perturbation). Nothing here forms a ``d^3`` array. The bound must hold for every input, so
records above ``B`` are clipped to it -- silently, since any signal that clipping happened
would tell a record above the bound from one below it (:func:`clip_records`).

Whitened-document relation (the single-topic model's DP-TPM baseline)
--------------------------------------------------------------------
``T = (1/N) sum_n X_n`` with each ``X_n`` a convex combination of ``Sym(y_a (x) y_b (x) y_c)``
over rows ``y`` of a public whitening matrix, ``||y|| <= rho``; neighbours replace one document.
The record formulas hold with ``B = rho`` and ``n = N`` (:class:`WhitenedDocumentNeighbouring`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import scipy.sparse as sp

from dptensor._validation import check_positive_int, check_real


class NeighbouringRelation(ABC):
    """What two neighbouring inputs are, and the sensitivities of the power-method queries."""

    #: Short name recorded in a :class:`~dptensor.privacy.PrivacyGuarantee`.
    name: str = ""

    @property
    def protected(self) -> str:
        """What one neighbouring change may be."""
        return ""

    @property
    def public(self) -> str:
        """What the mechanism treats as public."""
        return ""

    @abstractmethod
    def pair_sensitivity(self, vectors: np.ndarray) -> np.ndarray:
        """l2 sensitivity of ``T(I, u, u)`` for each column ``u`` of ``vectors`` (d x m)."""

    @abstractmethod
    def triple_sensitivity(self, vectors: np.ndarray) -> np.ndarray:
        """Sensitivity of ``T(u, u, u)`` for each column ``u`` of ``vectors`` (d x m)."""

    def details(self) -> dict[str, Any]:
        """Parameters of the relation for the guarantee record."""
        return {}


class EntryNeighbouring(NeighbouringRelation):
    """Definition 4.2 of Wang & Anandkumar (2016): ``T' - T = +-symmetrize(e_i (x) e_j (x) e_k)``.

    Sensitivities ``6 ||u||_inf^2`` (power step) and ``6 ||u||_inf^3`` (eigenvalue); both are
    exact in l2 (see the module docstring).
    """

    name = "entry"
    protected = (
        "one entry of the symmetric tensor changed by up to 1, with its permuted copies (Definition 4.2)"
    )
    public = "the dimension d and the algorithm's parameters"

    def pair_sensitivity(self, vectors: np.ndarray) -> np.ndarray:
        return 6.0 * np.max(np.abs(vectors), axis=0) ** 2

    def triple_sensitivity(self, vectors: np.ndarray) -> np.ndarray:
        return 6.0 * np.max(np.abs(vectors), axis=0) ** 3

    #: Sensitivity of the whole tensor under the ``"entry"`` noise convention of
    #: :func:`~dptensor.privacy.symmetric_gaussian_tensor` (Mahalanobis length of every change).
    tensor_sensitivity_entry_convention = 1.0
    #: Frobenius norm of the worst change, ``||6 e_i^{(x)3}||_F``.
    tensor_sensitivity_frobenius = 6.0


class RecordNeighbouring(NeighbouringRelation):
    """Replace one of ``n`` records of a sample moment; records satisfy ``||x||_2 <= bound``.

    Sensitivities ``2 B^3 ||u||_2^2 / n`` and ``2 B^3 ||u||_2^3 / n`` (module docstring). The
    number of records ``n`` is public.

    Parameters
    ----------
    record_bound : float
        ``B``, a bound on every record's l2 norm declared *before* seeing the data (a bound
        computed from the data would itself leak).
    n_records : int
        ``n``.
    """

    name = "record"

    def __init__(self, record_bound: float, n_records: int) -> None:
        self.record_bound = check_record_bound(record_bound)
        self.n_records = check_positive_int(n_records, "n_records")

    @property
    def protected(self) -> str:
        return (f"one record replaced by any record of l2 norm <= B={self.record_bound:g} "
                "(records above B are clipped to it, silently)")

    public = "the number of records n, the dimension d, the bound B and the algorithm's parameters"

    @property
    def scale(self) -> float:
        """``2 B^3 / n``: sensitivity of both queries at a unit vector and of the whole tensor."""
        return 2.0 * self.record_bound**3 / self.n_records

    def pair_sensitivity(self, vectors: np.ndarray) -> np.ndarray:
        return self.scale * np.linalg.norm(vectors, axis=0) ** 2

    def triple_sensitivity(self, vectors: np.ndarray) -> np.ndarray:
        return self.scale * np.linalg.norm(vectors, axis=0) ** 3

    def details(self) -> dict[str, Any]:
        return {"record_bound": self.record_bound, "n_records": self.n_records}


class WhitenedDocumentNeighbouring(RecordNeighbouring):
    """Replace one of ``N`` documents of a whitened moment ``T = (1/N) sum_n X_n``, ``N`` public.

    Each document's term ``X_n`` is a convex combination of ``Sym(y_a (x) y_b (x) y_c)`` with every
    ``y`` a row of a public ``d x k`` whitening matrix ``W``, so ``||y|| <= rho``, the largest row
    norm of ``W``. This covers the single-topic moments whitened by ``W``: the faithful one
    (``X_n = Sym(y_{t1} (x) y_{t2} (x) y_{t3})`` for the first three words) and the U-statistic one
    (the average of that over ordered triples of distinct positions). Since
    ``||Sym(y_a y_b y_c)(I, u, u)|| <= (1/3) sum |<y, u>|^2 ||y|| <= rho^3 ||u||^2`` and
    ``|Sym(y_a y_b y_c)(u, u, u)| <= rho^3 ||u||^3``, and both are preserved by convex combinations,
    replacing one document moves the two queries by at most ``2 rho^3 ||u||^2 / N`` and
    ``2 rho^3 ||u||^3 / N``: the formulas of :class:`RecordNeighbouring` with ``B = rho`` and
    ``n = N``. ``W`` must itself be public (e.g. computed from a private release of ``M2``).

    Parameters
    ----------
    row_norm_bound : float
        ``rho >= max_v ||W[v]||``, taken over *every* word of the vocabulary.
    n_documents : int
        ``N``.
    """

    name = "document"

    def __init__(self, row_norm_bound: float, n_documents: int) -> None:
        super().__init__(row_norm_bound, n_documents)

    protected = "one document replaced by any other document over the same vocabulary"
    public = (
        "the number of documents N, the vocabulary size d, the whitening matrix W (a private release "
        "itself) and the algorithm's parameters"
    )

    def details(self) -> dict[str, Any]:
        return {"row_norm_bound": self.record_bound, "n_documents": self.n_records}


def check_record_bound(record_bound: object) -> float:
    """``record_bound`` as a float after checking it is finite and ``> 0``."""
    if record_bound is None:
        raise ValueError(
            "record_bound is required for neighbouring='record': declare a bound B on every "
            "record's l2 norm (records above it are clipped)"
        )
    return check_real(record_bound, "record_bound")


def _scaled_norms(data: np.ndarray | sp.spmatrix) -> tuple[np.ndarray, np.ndarray]:
    """Per row, its largest absolute entry ``s`` and ``||x / s||`` (``s = 1`` for a zero row)."""
    if sp.issparse(data):
        csr = sp.csr_matrix(data, dtype=np.float64)
        scale = np.zeros(csr.shape[0])
        nonempty = np.diff(csr.indptr) > 0
        if csr.nnz:
            scale[nonempty] = np.maximum.reduceat(np.abs(csr.data), csr.indptr[:-1][nonempty])
        scale = np.where(scale > 0, scale, 1.0)
        scaled = _divide_rows(csr, scale)
        return scale, np.sqrt(np.asarray(scaled.multiply(scaled).sum(axis=1)).ravel())
    data = np.asarray(data, dtype=np.float64)
    scale = np.max(np.abs(data), axis=1) if data.shape[1] else np.zeros(data.shape[0])
    scale = np.where(scale > 0, scale, 1.0)
    return scale, np.linalg.norm(data / scale[:, None], axis=1)


def _divide_rows(data: np.ndarray | sp.csr_matrix, divisors: np.ndarray) -> np.ndarray | sp.csr_matrix:
    """Each row divided by its divisor (a division, not a multiplication by a subnormal inverse)."""
    if sp.issparse(data):
        out = sp.csr_matrix(data, dtype=np.float64, copy=True)
        out.data /= np.repeat(divisors, np.diff(out.indptr))
        return out
    return np.asarray(data, dtype=np.float64) / divisors[:, None]


def record_norms(data: np.ndarray | sp.spmatrix) -> np.ndarray:
    """l2 norm of each row of a dense or sparse data matrix, without intermediate overflow.

    Each row is divided by its largest absolute entry before squaring, so rows with entries up
    to the largest float (``1e308``) get their true norm (``inf`` only if the norm itself
    exceeds the float range).
    """
    scale, relative = _scaled_norms(data)
    with np.errstate(over="ignore"):
        return scale * relative


def clip_records(data: np.ndarray | sp.spmatrix, record_bound: float) -> np.ndarray | sp.csr_matrix:
    """Scale every row with ``||x||_2 > record_bound`` down to norm ``record_bound``, silently.

    Clipping is what makes the record relation's sensitivity hold for any input, so private
    functions always clip. They say nothing about it: no warning, count, error or attribute
    reveals whether a record was clipped, because that would tell a record above the bound from
    one below it with certainty (a side channel with ``epsilon = inf``). To inspect your data
    for records above the bound, call :func:`record_bound_violations` yourself, on data you are
    allowed to look at.

    Parameters
    ----------
    data : ndarray or sparse matrix of shape (n, d)
    record_bound : float

    Returns
    -------
    same kind as ``data`` (sparse becomes CSR)
    """
    bound = check_record_bound(record_bound)
    scale, relative = _scaled_norms(data)
    # B / s overflows to inf for a record of subnormal entries (then it is not over: correct, silently)
    with np.errstate(under="ignore", over="ignore"):
        over = relative > (bound / scale)
    # x -> (x / s) * (B' / ||x / s||): no overflow even for 1e308 entries, and B' = B (1 - 8 ulp)
    # keeps rounding from pushing a clipped norm above B.
    target = bound * (1.0 - 8 * np.finfo(np.float64).eps)
    divisors = np.where(over, scale, 1.0)
    factors = np.where(over, target / np.where(over, relative, 1.0), 1.0)
    scaled = _divide_rows(data, divisors)
    if sp.issparse(scaled):
        return sp.csr_matrix(sp.diags(factors) @ scaled)
    return scaled * factors[:, None]


def record_bound_violations(data: np.ndarray | sp.spmatrix, record_bound: float) -> np.ndarray:
    """Indices of the records whose l2 norm exceeds ``record_bound`` -- **not private**.

    This inspects the private data directly and its answer is covered by no guarantee: use it
    only on data you are allowed to see (a public sample, a schema check before a private run),
    never to decide what to release. Private functions never call it; they clip silently
    (:func:`clip_records`).
    """
    bound = check_record_bound(record_bound)
    return np.flatnonzero(record_norms(data) > bound)


def entry_neighbour_difference(dim: int, i: int, j: int, k: int) -> np.ndarray:
    """``symmetrize(e_i (x) e_j (x) e_k)`` of Definition 4.2 (sum of the six permutations), dense."""
    dim = check_positive_int(dim, "dim")
    out = np.zeros((dim, dim, dim))
    for a, b, c in ((i, j, k), (i, k, j), (j, i, k), (j, k, i), (k, i, j), (k, j, i)):
        out[a, b, c] += 1.0
    return out
