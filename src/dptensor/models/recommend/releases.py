"""The private releases of the top-N models, at user level: item counts, item Gram, item selection.

Relation (``neighbouring = "user"``). Two binary user x item matrices are neighbours when one user's
whole row is replaced by any other row -- empty, a single item, every item. The number of users is
public; so is the item universe (the columns), unless the items are chosen by
:func:`private_item_selection`, charged within the same guarantee. Joint DP in the billboard sense:
the released item side is DP, and each user's list is computed from their own row and the release,
for them alone (:mod:`dptensor.models.recommend.ranking`).

Each release is a sum over users of a term of one user's row, computed as map over user blocks,
then sum (:class:`dptensor.parallel.RowBlocks`: in-process, on threads, on Dask), with Gaussian
noise added once, to the sum, from the secret :class:`~dptensor.privacy.NoiseSource`. Every user
``u`` with the binary row ``x_u`` of ``n_u`` items contributes a non-negative vector ``xhat_u`` of
l2 norm at most 1, by one of two weightings:

``"unit"``
    ``xhat_u = x_u / sqrt(n_u)`` (``0`` for an empty row): norm exactly 1, every user the same
    weight whatever the length of their row.
``"capped"``
    ``xhat_u = c_m(x_u) / sqrt(m)``, where ``c_m`` keeps ``min(n_u, m)`` of the user's items chosen
    uniformly at random with the secret source (``m = max_items_per_user``, public): norm
    ``sqrt(min(n_u, m) / m) <= 1``. Users with at most ``m`` items keep their rows whole and weigh
    in proportion to them (as in the non-private Gram ``X^T X``, up to the factor ``1/m``); the
    rows of heavier users are cut to ``m`` items.

Sensitivities (``a = xhat_u``, ``b = xhat'_u`` for the replaced row; the other users' terms cancel).
Both weightings only need ``a, b >= 0`` entrywise and ``||a||, ||b|| <= 1``.

* Counts ``sum_u xhat_u``: ``||a - b||_2^2 = ||a||^2 + ||b||^2 - 2 a.b <= 2`` since ``a.b >= 0``;
  so the l2 sensitivity is ``sqrt(2)``, attained by two single items ``e_i``, ``e_j`` (``i != j``;
  for ``"capped"``: two disjoint rows of ``>= m`` items, e.g. ``m = 1``).
* Gram ``sum_u xhat_u xhat_u^T``: ``||aa^T - bb^T||_F^2 = ||a||^4 + ||b||^4 - 2 (a.b)^2 <= 2``
  (expand ``<aa^T - bb^T, aa^T - bb^T>_F`` with ``<aa^T, bb^T>_F = (a.b)^2 >= 0``); so the
  Frobenius sensitivity is ``sqrt(2)``, attained by rows of disjoint supports (two single items).
* Selection: the weights of :func:`private_item_selection` are the ``"unit"`` counts of rows cut
  to ``m`` items, the weights of :mod:`dptensor.privacy.vocabulary` (users are its documents,
  items its words), whose proof covers the replace-one relation: sensitivity ``sqrt(2)`` on the
  items both matrices have, and the threshold for the items only one of them has.

Noise on the Gram (the ``"frobenius"`` convention of :mod:`dptensor.privacy.mechanisms`):
``G_ii + N(0, sigma^2)`` on the diagonal, ``G_ij + N(0, sigma^2 / 2)`` for ``i < j``, mirrored to
``G_ji``. It is the Gaussian mechanism with std ``sigma`` on the vector
``v(G) = (G_ii, sqrt(2) G_ij)_{i<j}``, an isometry from symmetric matrices under the Frobenius
norm, so its l2 sensitivity is the Frobenius one, ``sqrt(2)``, and its noise multiplier
``sigma / sqrt(2)``. In terms of the unique entries released: diagonal std ``sigma``, off-diagonal
std ``sigma / sqrt(2)``. The ``"unique"`` convention (the same std on every unique entry) would
have the l2 sensitivity of the unique entries, also ``sqrt(2)`` (attained by ``e_i`` against
``e_j``, whose change is ``+-1`` on two diagonal entries), so at the same multiplier it puts
``sqrt(2)`` times more noise off the diagonal -- where EASE reads the item similarities -- for
the same diagonal. Neither part can do with less: the diagonal's change alone reaches
``sqrt(2)`` (single items), and the off-diagonal's alone approaches 1, i.e. ``sqrt(2)`` in units of
``sigma / sqrt(2)`` (two long disjoint rows), so this noise shape is the smallest of its kind.

What these functions do not do: choose ``sigma`` or charge a budget. Plan the releases with
:func:`~dptensor.models.recommend.release_plan.recommender_guarantee`, begin the release
(:func:`~dptensor.privacy.begin_release`, which charges the ledger) and only then call them with
the plan's sigmas and the source begin_release returned; :func:`private_item_statistics` does all
of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dptensor._validation import check_positive_int, check_real
from dptensor.models.recommend._input import check_interactions
from dptensor.models.recommend.release_plan import (
    RELEASES,
    WEIGHTINGS,
    ReleasePlan,
    check_weighting,
    recommender_guarantee,
)
from dptensor.models.recommend.statistics import rows_gram, weighted_rows
from dptensor.parallel import RowBlocks, as_row_blocks, is_distributed, public_shape
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.noise import NoiseLike, NoiseSource
from dptensor.privacy.release import Ledger, begin_release
from dptensor.privacy.vocabulary import (
    DEFAULT_THRESHOLD_DELTA_SHARE,
    VocabularyCalibration,
    select_vocabulary,
)

__all__ = [
    "RELEASES",
    "WEIGHTINGS",
    "PrivateItemStatistics",
    "add_symmetric_frobenius_noise",
    "cap_rows",
    "private_item_counts",
    "private_item_gram",
    "private_item_selection",
    "private_item_statistics",
    "release_rows",
    "select_columns",
    "user_blocks",
]

#: Noise is drawn for at most this many entries of the Gram at a time.
NOISE_CELLS_PER_CHUNK = 1 << 22
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


# ----------------------------------------------------------------------------- one user's term
def _binary(block: object) -> sp.csr_array:
    """A block's rows as a canonical binary CSR array (duplicates summed, zeros dropped)."""
    rows = sp.csr_array(block, dtype=np.float64, copy=True)
    rows.sum_duplicates()
    rows.data = (rows.data != 0).astype(np.float64)
    rows.eliminate_zeros()
    return rows


def _mix(values: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser (Steele, Lea & Flood 2014) on uint64, wrapping."""
    x = values + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def cap_rows(rows: sp.csr_array, max_items: int, seeds: np.ndarray) -> sp.csr_array:
    """Each row cut to ``max_items`` of its items, chosen uniformly at random from its secret seed.

    Row ``u`` keeps the ``m`` items of smallest key ``mix(seed_u + mix(item))`` (SplitMix64's
    finaliser): a uniformly random ``m``-subset, independent across users, for seeds drawn from
    the noise source. The privacy of the releases does not rest on this choice (any rule that
    looks at the user's own row and at randomness independent of the data keeps every bound of the
    module docstring); only their accuracy does.

    Parameters
    ----------
    rows : scipy.sparse.csr_array
        Canonical binary rows (sorted indices).
    max_items : int
        ``m``.
    seeds : ndarray of uint64, shape (n_rows,)

    Returns
    -------
    scipy.sparse.csr_array
        Rows with at most ``m`` stored entries each, indices sorted.
    """
    lengths = np.diff(rows.indptr)
    if not np.any(lengths > max_items):
        return rows
    row_of = np.repeat(np.arange(rows.shape[0]), lengths)
    keys = _mix(np.asarray(seeds, dtype=np.uint64)[row_of] + _mix(rows.indices.astype(np.uint64)))
    order = np.lexsort((keys, row_of))
    rank = np.arange(order.size) - rows.indptr[row_of]  # row_of[order] == row_of: rows stay grouped
    keep = np.sort(order[rank < max_items])
    indptr = np.concatenate([[0], np.cumsum(np.minimum(lengths, max_items))])
    return sp.csr_array((rows.data[keep], rows.indices[keep], indptr), shape=rows.shape)


def release_rows(
    block: object, weighting: str, max_items: int | None, seeds: np.ndarray | None = None
) -> sp.csr_array:
    """The users' terms ``xhat_u`` of a block (module docstring), each of l2 norm ``<= 1``.

    ``"unit"`` with ``max_items`` cuts the rows first (the item selection's weights); ``"capped"``
    cuts them and divides by ``sqrt(max_items)``.
    """
    rows = _binary(block)
    if max_items is not None:
        rows = cap_rows(rows, max_items, seeds)
    if weighting == "capped":
        rows.data *= 1.0 / math.sqrt(max_items)
        return rows
    return weighted_rows(rows, "unit")


def _counts_block(block: object, weighting: str, max_items: int | None, seeds: np.ndarray | None = None
                  ) -> np.ndarray:  # fmt: skip
    """``sum_u xhat_u`` over one block's users."""
    return np.asarray(release_rows(block, weighting, max_items, seeds).sum(axis=0), dtype=np.float64).ravel()


def _gram_block(block: object, weighting: str, max_items: int | None, seeds: np.ndarray | None = None
                ) -> np.ndarray:  # fmt: skip
    """``sum_u xhat_u xhat_u^T`` over one block's users (dense ``I x I``)."""
    rows = release_rows(block, weighting, max_items, seeds)
    return rows_gram(rows)


def _take_items(block: object, items: np.ndarray) -> sp.csr_array:
    """A block's rows restricted to the columns ``items`` (in that order)."""
    return sp.csr_array(block)[:, items]


def select_columns(X: object, columns: np.ndarray) -> object:
    """The users' rows restricted to ``columns``: a checked matrix sliced, blocks mapped where they are."""
    if isinstance(X, RowBlocks):
        return X.map(_take_items, columns, label="selected-items")
    return X[:, columns]


# ----------------------------------------------------------------------------- the sums
def user_blocks(X: object, n_jobs: int | None = None) -> RowBlocks:
    """The user rows as blocks: Dask input and :class:`RowBlocks` as they are, the rest checked."""
    if isinstance(X, RowBlocks) or is_distributed(X):
        return as_row_blocks(X)
    return as_row_blocks(check_interactions(X), n_jobs=n_jobs)


def _check_source(source: object) -> NoiseSource:
    if not isinstance(source, NoiseSource):
        raise TypeError(
            "source must be the NoiseSource returned by dptensor.privacy.begin_release (charge first), "
            f"got {type(source).__name__}"
        )
    return source


def _user_sum(
    blocks: RowBlocks, block_function: object, weighting: str, max_items: int | None, source: NoiseSource,
    label: str,
) -> np.ndarray:  # fmt: skip
    """``sum_u`` of a block function's terms; one secret seed per user where rows are cut."""
    row_args = ()
    if max_items is not None:
        seeds = (source.random(blocks.n_rows) * 2.0**53).astype(np.uint64)
        row_args = (seeds,)
    return blocks.map_sum(block_function, weighting, max_items, row_args=row_args, label=label)


def _cap_of(weighting: str, max_items_per_user: int | None) -> int | None:
    """The cap the weighting applies: ``m`` for ``"capped"``, none for ``"unit"``."""
    m = check_weighting(weighting, max_items_per_user)
    return m if weighting == "capped" else None


def private_item_counts(
    X: object,
    *,
    sigma: float,
    source: NoiseSource,
    weighting: str = "unit",
    max_items_per_user: int | None = None,
    n_jobs: int | None = None,
) -> np.ndarray:
    """Item counts ``sum_u xhat_u + N(0, sigma^2 I)``: private popularity (Gaussian mechanism).

    Replace-one-user l2 sensitivity ``sqrt(2)`` for both weightings (module docstring:
    ``||a - b||^2 = ||a||^2 + ||b||^2 - 2 a.b <= 2`` for non-negative ``a, b`` of norm ``<= 1``), so
    the noise multiplier is ``sigma / sqrt(2)``. With ``"unit"`` rows a cap would not lower the
    sensitivity, so ``"unit"`` counts every item of every row; ``"capped"`` counts ``m`` random
    items of the longer rows with the weight ``1/sqrt(m)`` (counts proportional to the plain
    counts for users with at most ``m`` items).

    Parameters
    ----------
    X : scipy.sparse matrix, array_like, dask.array or RowBlocks
        Users x items; a stored non-zero is an interaction.
    sigma : float
        Noise standard deviation per item (``plan.sigma("counts")``).
    source : NoiseSource
        From :func:`~dptensor.privacy.begin_release`, called before this function.
    weighting : {"unit", "capped"}, default "unit"
    max_items_per_user : int, optional
        ``m``, required by ``"capped"`` (ignored by ``"unit"``).
    n_jobs : int, optional
        Threads for in-memory input.

    Returns
    -------
    ndarray, shape (n_items,)
    """
    sigma = check_real(sigma, "sigma")
    source = _check_source(source)
    m = _cap_of(weighting, max_items_per_user)
    counts = _user_sum(user_blocks(X, n_jobs), _counts_block, weighting, m, source, "private-item-counts")
    return source.add_gaussian(counts, sigma)


def add_symmetric_frobenius_noise(matrix: np.ndarray, sigma: float, source: NoiseSource) -> np.ndarray:
    """``matrix`` plus symmetric Gaussian noise: std ``sigma`` on the diagonal, ``sigma / sqrt(2)`` off it.

    The law of :func:`dptensor.privacy.add_symmetric_gaussian` with ``convention="frobenius"``,
    drawn on the upper triangle a block of rows at a time (:data:`NOISE_CELLS_PER_CHUNK` entries)
    and mirrored, so a ``2 * 10^4``-item Gram needs no index array of ``I^2`` entries. The noise is
    added to the released values by :meth:`NoiseSource.add_gaussian` (OpenDP's measurement under
    ``noise="opendp"``). Returns a new array.
    """
    out = np.array(matrix, dtype=np.float64, copy=True)
    size = out.shape[0]
    if out.ndim != 2 or out.shape[1] != size:
        raise ValueError(f"matrix must be square, got shape {out.shape}")
    step = max(1, NOISE_CELLS_PER_CHUNK // max(size, 1))
    for start in range(0, size, step):
        stop = min(size, start + step)
        local_rows, local_cols = np.triu_indices(stop - start, k=0, m=size - start)
        rows, cols = local_rows + start, local_cols + start
        scale = np.where(rows == cols, sigma, sigma / math.sqrt(2.0))
        released = source.add_gaussian(out[rows, cols], scale)
        out[rows, cols] = released
        out[cols, rows] = released
    return out


def private_item_gram(
    X: object,
    *,
    sigma: float,
    source: NoiseSource,
    weighting: str = "unit",
    max_items_per_user: int | None = None,
    n_jobs: int | None = None,
) -> np.ndarray:
    """The item Gram ``sum_u xhat_u xhat_u^T`` plus symmetric Gaussian noise, for a private EASE.

    Replace-one-user Frobenius sensitivity ``sqrt(2)``: for the replaced user's terms ``a`` and
    ``b`` (non-negative, norm ``<= 1``, both weightings),
    ``||aa^T - bb^T||_F^2 = ||a||^4 + ||b||^4 - 2 (a.b)^2 <= 1 + 1 - 0 = 2``, with equality for
    disjoint rows of full norm (two single items). The noise has std ``sigma`` on the diagonal and
    ``sigma / sqrt(2)`` on each off-diagonal pair (mirrored): the Gaussian mechanism of multiplier
    ``sigma / sqrt(2)`` on the isometric vector ``(G_ii, sqrt(2) G_ij)``; the module docstring
    compares it with noise of one std on every unique entry.

    Parameters
    ----------
    X : scipy.sparse matrix, array_like, dask.array or RowBlocks
    sigma : float
        The diagonal's noise std (``plan.sigma("gram")``).
    source : NoiseSource
        From :func:`~dptensor.privacy.begin_release`, called before this function.
    weighting : {"unit", "capped"}, default "unit"
        ``"unit"``: ``x_u / sqrt(n_u)``, every user one unit of Frobenius mass spread over their
        ``n_u^2`` pairs; ``"capped"``: ``c_m(x_u) / sqrt(m)``, users with at most ``m`` items keep
        the pair weights of the plain Gram (``1/m`` each) and heavier users are cut to ``m`` items.
    max_items_per_user : int, optional
        ``m``, required by ``"capped"``.
    n_jobs : int, optional

    Returns
    -------
    ndarray, shape (n_items, n_items), symmetric
    """
    sigma = check_real(sigma, "sigma")
    source = _check_source(source)
    m = _cap_of(weighting, max_items_per_user)
    gram = _user_sum(user_blocks(X, n_jobs), _gram_block, weighting, m, source, "private-item-gram")
    return add_symmetric_frobenius_noise(gram, sigma, source)


def private_item_selection(
    X: object,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    max_items_per_user: int | None = None,
    source: NoiseSource,
    calibration: VocabularyCalibration | None = None,
    max_items: int | None = None,
    threshold_delta_share: float = DEFAULT_THRESHOLD_DELTA_SHARE,
    n_jobs: int | None = None,
) -> np.ndarray:
    """The items that may appear, chosen under DP: Gaussian partition selection over users.

    :mod:`dptensor.privacy.vocabulary`'s mechanism with users as documents and items as words:
    each user keeps at most ``m`` of their items (chosen uniformly at random, :func:`cap_rows`),
    each of weight ``1/sqrt(n)`` for the ``n <= m`` kept; the items of positive total weight get
    ``N(0, sigma^2)`` noise (:func:`~dptensor.privacy.vocabulary.select_vocabulary`) and those above
    the threshold ``tau`` are released, at most ``max_items`` of the largest noisy weight. Its proof
    (sensitivity ``sqrt(2)`` on the common items; an item of one matrix only passes with
    probability ``<= delta_t`` in all) is the vocabulary's, for the replace-one-user relation.

    Parameters
    ----------
    X : scipy.sparse matrix, array_like, dask.array or RowBlocks
    epsilon, delta, max_items_per_user : optional
        The selection's own budget and bound ``m`` when no ``calibration`` is given: it is then
        ``recommender_guarantee(("selection",), epsilon, delta, max_items_per_user=m).selection``,
        whose guarantee the caller must have charged.
    source : NoiseSource
        From :func:`~dptensor.privacy.begin_release`, called before this function.
    calibration : VocabularyCalibration, optional
        ``plan.selection`` of a :func:`~dptensor.models.recommend.release_plan.recommender_guarantee`.
    max_items : int, optional
        The most items released (default: the number of columns).
    threshold_delta_share : float, default 0.5
        Without ``calibration``: the share of ``delta`` spent on the threshold.
    n_jobs : int, optional

    Returns
    -------
    ndarray of int64
        The selected column indices, sorted (possibly none).
    """
    source = _check_source(source)
    if calibration is None:
        if epsilon is None or delta is None or max_items_per_user is None:
            raise ValueError("private_item_selection needs calibration or epsilon, delta, max_items_per_user")
        calibration = recommender_guarantee(
            ("selection",), epsilon, delta, max_items_per_user=max_items_per_user,
            threshold_delta_share=threshold_delta_share,
        ).selection  # fmt: skip
    elif not isinstance(calibration, VocabularyCalibration):
        raise TypeError(f"calibration must be a VocabularyCalibration, got {type(calibration).__name__}")
    blocks = user_blocks(X, n_jobs)
    n_items = blocks.n_cols
    keep = n_items if max_items is None else check_positive_int(max_items, "max_items")
    m = calibration.max_words_per_document
    weights = _user_sum(blocks, _counts_block, "unit", m, source, "private-item-selection")
    occurring = np.flatnonzero(weights > 0)
    chosen, _ = select_vocabulary(dict(zip(occurring.tolist(), weights[occurring].tolist(), strict=True)),
                                  keep, calibration, source)
    return np.asarray(sorted(chosen), dtype=np.int64)


# ----------------------------------------------------------------------------- all of it
@dataclass(frozen=True)
class PrivateItemStatistics:
    """What :func:`private_item_statistics` released, with its guarantee.

    Attributes
    ----------
    items : ndarray of int64
        The columns the counts and the Gram are over (the selected items, or every column).
    counts : ndarray of shape (len(items),) or None
    gram : ndarray of shape (len(items), len(items)) or None
    guarantee : PrivacyGuarantee
        As charged (voided for insecure test noise).
    plan : ReleasePlan
    """

    items: np.ndarray
    counts: np.ndarray | None
    gram: np.ndarray | None
    guarantee: PrivacyGuarantee
    plan: ReleasePlan


def private_item_statistics(
    X: object,
    *,
    epsilon: float,
    delta: float,
    releases: Sequence[str] = ("counts", "gram"),
    shares: Mapping[str, float] | None = None,
    weighting: str = "unit",
    max_items_per_user: int | None = None,
    max_items: int | None = None,
    threshold_delta_share: float = DEFAULT_THRESHOLD_DELTA_SHARE,
    noise: NoiseLike | NoiseSource = None,
    ledger: Ledger | None = None,
    n_jobs: int | None = None,
) -> PrivateItemStatistics:
    """Plan, charge, then release the item statistics of a private top-N model, in that order.

    The plan (:func:`~dptensor.models.recommend.release_plan.recommender_guarantee`) reads the
    public sizes only; :func:`~dptensor.privacy.begin_release` charges the ledger (a refusal leaves
    nothing computed); then the data is read: with ``"selection"`` the items are chosen first and
    the counts and the Gram are over them, otherwise over every column.

    Parameters
    ----------
    X : scipy.sparse matrix, array_like, dask.array or RowBlocks
    epsilon, delta : float
        The total budget under the ``"user"`` relation.
    releases : sequence of str, default ("counts", "gram")
        Among ``"selection"``, ``"counts"``, ``"gram"``.
    shares, weighting, max_items_per_user, threshold_delta_share
        See :func:`~dptensor.models.recommend.release_plan.recommender_guarantee`.
    max_items : int, optional
        The most items the selection releases.
    noise : None, "numpy", "opendp", InsecureTestNoise or NoiseSource
    ledger : object with ``charge``, optional
    n_jobs : int, optional

    Returns
    -------
    PrivateItemStatistics
    """
    n_users, n_items = public_shape(X, layout="users x items")
    names = tuple(releases) if not isinstance(releases, str) else (releases,)
    plan = recommender_guarantee(
        names, epsilon, delta, shares=shares, weighting=weighting, max_items_per_user=max_items_per_user,
        threshold_delta_share=threshold_delta_share, n_users=n_users or None, n_items=n_items or None,
        max_selected_items=max_items,
    )  # fmt: skip
    description = "private top-N item statistics: " + ", ".join(plan.releases)
    guarantee, source = begin_release(plan.guarantee, noise, ledger=ledger, description=description)
    blocks = user_blocks(X, n_jobs)
    items = np.arange(blocks.n_cols, dtype=np.int64)
    if "selection" in plan.releases:
        items = private_item_selection(blocks, source=source, calibration=plan.selection, max_items=max_items)
        blocks = blocks.map(_take_items, items, label="selected-items")
    counts = gram = None
    if items.size == 0:  # nothing selected: the other releases are empty (a function of the release)
        empty = np.zeros(0)
        counts = empty if "counts" in plan.releases else None
        gram = empty.reshape(0, 0) if "gram" in plan.releases else None
        return PrivateItemStatistics(items, counts, gram, guarantee, plan)
    options = {"weighting": plan.weighting, "max_items_per_user": plan.max_items_per_user}
    if "counts" in plan.releases:
        counts = private_item_counts(blocks, sigma=plan.sigma("counts"), source=source, **options)
    if "gram" in plan.releases:
        gram = private_item_gram(blocks, sigma=plan.sigma("gram"), source=source, **options)
    return PrivateItemStatistics(items, counts, gram, guarantee, plan)

