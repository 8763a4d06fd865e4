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
perturbation). Nothing here forms a ``d^3`` array.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import scipy.sparse as sp

from dptensor._validation import check_positive_int, check_real


class NeighbouringRelation(ABC):
    """What two neighbouring inputs are, and the sensitivities of the power-method queries."""

    #: Short name recorded in a :class:`~dptensor.privacy.PrivacyGuarantee`.
    name: str = ""

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
    def scale(self) -> float:
        """``2 B^3 / n``: sensitivity of both queries at a unit vector and of the whole tensor."""
        return 2.0 * self.record_bound**3 / self.n_records

    def pair_sensitivity(self, vectors: np.ndarray) -> np.ndarray:
        return self.scale * np.linalg.norm(vectors, axis=0) ** 2

    def triple_sensitivity(self, vectors: np.ndarray) -> np.ndarray:
        return self.scale * np.linalg.norm(vectors, axis=0) ** 3

    def details(self) -> dict[str, Any]:
        return {"record_bound": self.record_bound, "n_records": self.n_records}


def check_record_bound(record_bound: object) -> float:
    """``record_bound`` as a float after checking it is finite and ``> 0``."""
    if record_bound is None:
        raise ValueError(
            "record_bound is required for neighbouring='record': declare a bound B on every "
            "record's l2 norm (records above it are clipped)"
        )
    return check_real(record_bound, "record_bound")


def record_norms(data: np.ndarray | sp.spmatrix) -> np.ndarray:
    """l2 norm of each row of a dense or sparse data matrix."""
    if sp.issparse(data):
        return np.sqrt(np.asarray(data.multiply(data).sum(axis=1)).ravel())
    return np.linalg.norm(data, axis=1)


def clip_records(
    data: np.ndarray | sp.spmatrix, record_bound: float, *, clip: bool = True, warn: bool = True
) -> tuple[np.ndarray | sp.csr_matrix, int]:
    """Scale every row with ``||x||_2 > record_bound`` down to norm ``record_bound``.

    Parameters
    ----------
    data : ndarray or sparse matrix of shape (n, d)
    record_bound : float
    clip : bool, default True
        With ``False``, a record above the bound raises ``ValueError`` instead.
    warn : bool, default True
        Emit a ``UserWarning`` that clipping happened (it changes the tensor being decomposed).

    Returns
    -------
    clipped : same kind as ``data`` (sparse becomes CSR)
    n_clipped : int
        For the caller's own checks only: the count depends on the data and is not covered by
        any privacy guarantee, so neither the warning, the error nor any private result
        reports it (nor the largest norm).
    """
    bound = check_record_bound(record_bound)
    norms = record_norms(data)
    # A relative slack of 1e-12 keeps records normalised to exactly B from being "clipped".
    over = norms > bound * (1 + 1e-12)
    n_clipped = int(np.count_nonzero(over))
    if n_clipped == 0:
        return data, 0
    if not clip:
        raise ValueError(
            f"some records have l2 norm above record_bound={bound:g}; the record-level guarantee "
            "needs the bound to hold. Pass clip_records=True to clip them, or declare a larger "
            "bound (how many, and by how much, is not reported: it is not covered by the guarantee)"
        )
    factors = np.where(over, bound / np.where(over, norms, 1.0), 1.0)
    if warn:
        warnings.warn(
            f"records with l2 norm above record_bound={bound:g} were clipped to it; the decomposed "
            "moment is that of the clipped data (the number clipped is not reported: it is not "
            "covered by the privacy guarantee)",
            UserWarning,
            stacklevel=4,
        )
    if sp.issparse(data):
        return sp.csr_matrix(sp.diags(factors) @ data), n_clipped
    return data * factors[:, None], n_clipped


def entry_neighbour_difference(dim: int, i: int, j: int, k: int) -> np.ndarray:
    """``symmetrize(e_i (x) e_j (x) e_k)`` of Definition 4.2 (sum of the six permutations), dense."""
    dim = check_positive_int(dim, "dim")
    out = np.zeros((dim, dim, dim))
    for a, b, c in ((i, j, k), (i, k, j), (j, i, k), (j, k, i), (k, i, j), (k, j, i)):
        out[a, b, c] += 1.0
    return out
