"""Differentially private robust tensor power method (Wang & Anandkumar 2016, Algorithm 3).

Algorithm 3 is Algorithm 1 with Gaussian noise added to every released quantity: each power
step ``T(I, u, u)`` (step 7) and each eigenvalue estimate ``T(u, u, u)`` (step 10), for every
restart of every component -- ``K = k L (R + 1)`` releases. Restart selection, normalisation and
deflation only use released values (post-processing). The loop itself is
:func:`~dptensor.decomposition.power_method.deflation_power_method` with noise hooks; this
module only chooses the noise.

Two neighbouring relations (:mod:`dptensor.privacy.sensitivity`):

``"entry"``
    Definition 4.2 of the paper (one entry of the symmetric tensor changes by one, up to
    symmetrisation); noise ``nu ||u||_inf^2`` per power step, ``nu ||u||_inf^3`` per eigenvalue.
``"record"``
    The tensor is the sample third moment ``(1/n) sum_r x_r^{(x)3}`` of ``n`` records with a
    declared bound ``||x_r||_2 <= B``, and neighbours replace one record; noise
    ``z 2 B^3 / n`` per release (unit vectors). Records above ``B`` are clipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

import dp_accounting
import numpy as np
import scipy.sparse as sp

from dptensor._validation import (
    RandomStateLike,
    check_epsilon_delta,
    check_positive_int,
    check_random_state,
    check_rank,
)
from dptensor.decomposition.power_method import (
    PowerMethodResult,
    default_n_restarts,
    deflation_power_method,
)
from dptensor.parallel import is_distributed
from dptensor.privacy.calibration import (
    check_accountant,
    composed_gaussian_epsilon,
    composed_gaussian_holds,
    composed_noise_multiplier,
)
from dptensor.privacy.guarantee import PrivacyGuarantee
from dptensor.privacy.noise import NoiseLike, NoiseSource
from dptensor.privacy.release import Ledger, begin_release
from dptensor.privacy.sensitivity import (
    EntryNeighbouring,
    NeighbouringRelation,
    RecordNeighbouring,
    check_record_bound,
    clip_records,
)
from dptensor.privacy.warnings import check_privacy_parameters
from dptensor.tensor.operators import SampleMoment, SymmetricTensor, as_tensor

Neighbouring = Literal["entry", "record"]
NEIGHBOURING: tuple[str, ...] = ("entry", "record")


@dataclass(frozen=True)
class PrivatePowerMethodResult(PowerMethodResult):
    """A :class:`~dptensor.decomposition.PowerMethodResult` released under differential privacy.

    Attributes
    ----------
    guarantee : PrivacyGuarantee
        The ``(epsilon, delta)`` statement, neighbouring relation, accountant and number of
        releases behind ``weights`` and ``factors``.
    """

    guarantee: PrivacyGuarantee

    @classmethod
    def _from(cls, result: PowerMethodResult, guarantee: PrivacyGuarantee) -> PrivatePowerMethodResult:
        values = {f.name: getattr(result, f.name) for f in fields(PowerMethodResult)}
        return cls(**values, guarantee=guarantee)


def default_private_n_iter(dim: int) -> int:
    """``R = ceil(log2 d) + 10``, a concrete ``R = Theta(log(lambda_max d))`` (Theorem 4.2).

    There is no early stopping under privacy (every step is charged), so ``R`` is both the cap
    and the count; keep it small -- the noise per step grows like ``sqrt(R)``.
    """
    return math.ceil(math.log2(max(dim, 2))) + 10


def prepare_private_input(
    tensor: np.ndarray | sp.spmatrix | SymmetricTensor,
    neighbouring: str | NeighbouringRelation | None,
    record_bound: float | None,
) -> tuple[SymmetricTensor, NeighbouringRelation]:
    """Validate the input against the neighbouring relation; clip records for ``"record"``.

    ``neighbouring=None`` takes the one relation the input admits: ``"record"`` for the records
    themselves (a data matrix or a :class:`~dptensor.tensor.SampleMoment`), ``"entry"`` for a
    tensor. Records above the bound are clipped silently (see
    :func:`~dptensor.privacy.clip_records`). A :class:`~dptensor.privacy.NeighbouringRelation`
    instance is used as given, with the tensor as it is. Everything here depends on the parameters, the
    input's type and its public shape only.

    Returns the operator to decompose and the relation.
    """
    if isinstance(neighbouring, NeighbouringRelation):
        if record_bound is not None:
            raise ValueError(
                "record_bound only applies to neighbouring='record'; an explicit NeighbouringRelation "
                "carries its own parameters"
            )
        return as_tensor(tensor), neighbouring
    is_records = isinstance(tensor, SampleMoment) or sp.issparse(tensor) or is_distributed(tensor) or (
        isinstance(tensor, np.ndarray | list) and np.ndim(tensor) == 2
    )
    if neighbouring is None:
        neighbouring = "record" if is_records else "entry"
    if neighbouring not in NEIGHBOURING:
        raise ValueError(f"neighbouring must be one of {NEIGHBOURING}, got {neighbouring!r}")
    if neighbouring == "entry":
        if record_bound is not None:
            raise ValueError(
                "record_bound only applies to neighbouring='record'; the entry relation "
                "(Definition 4.2) protects single tensor entries and needs no bound"
            )
        if is_records:
            raise ValueError(
                "this is a data matrix or the sample moment of one, but neighbouring='entry' "
                "protects single tensor entries, not records; pass neighbouring='record' with "
                "record_bound=B to protect each record"
            )
        return as_tensor(tensor), EntryNeighbouring()
    bound = check_record_bound(record_bound)
    if isinstance(tensor, SampleMoment):
        n = tensor.n_samples
        if tensor.weights is not None and not np.allclose(tensor.weights, 1.0 / n, rtol=1e-12, atol=0.0):
            raise ValueError(
                "neighbouring='record' needs the plain sample moment (1/n) sum_r x_r^(x)3; this "
                "SampleMoment has custom weights, whose sensitivity is not 2 B^3 / n"
            )
        records = tensor
    elif is_records:
        records = SampleMoment(tensor)
    else:
        raise TypeError(
            "neighbouring='record' needs the records: pass SampleMoment(X) or the n x d data "
            f"matrix X itself, got {type(tensor).__name__}"
        )
    if records.data is not None:
        moment = SampleMoment(clip_records(records.data, bound))
    else:  # records on a Dask cluster: clipped there, block by block (noise is added on the client)
        moment = SampleMoment(records.blocks.map(clip_records, bound, label="clip-records"))
    return moment, RecordNeighbouring(bound, moment.n_samples)


def make_guarantee(
    *,
    epsilon: float,
    delta: float,
    relation: NeighbouringRelation,
    accountant: str,
    n_releases: int,
    noise_multiplier: float,
    extra: dict[str, object],
) -> PrivacyGuarantee:
    """The guarantee of ``K`` composed Gaussian releases, after checking it exactly.

    ``(epsilon, delta)`` is verified with the closed-form Gaussian-DP criterion
    (:func:`~dptensor.privacy.calibration.composed_gaussian_holds`), with no tolerance.
    """
    if not composed_gaussian_holds(noise_multiplier, n_releases, epsilon, delta):
        exact = composed_gaussian_epsilon(noise_multiplier, n_releases, delta)
        raise ValueError(
            f"the {accountant!r} calibration gives noise multiplier {noise_multiplier:.4g}, which is "
            f"only ({exact:.4g}, {delta:g})-DP over {n_releases} releases, not ({epsilon:g}, "
            f"{delta:g}); use accountant='exact'"
        )
    exact = min(composed_gaussian_epsilon(noise_multiplier, n_releases, delta), float(epsilon))
    details: dict[str, object] = dict(relation.details())
    details.update(extra)
    return PrivacyGuarantee(
        epsilon=float(epsilon),
        delta=float(delta),
        neighbouring=relation.name,
        accountant=accountant,
        n_releases=n_releases,
        mechanism="gaussian",
        noise_multiplier=float(noise_multiplier),
        epsilon_exact=float(exact),
        details=details,
        protected=relation.protected,
        public=relation.public,
        dp_event=dp_accounting.SelfComposedDpEvent(
            dp_accounting.GaussianDpEvent(noise_multiplier), n_releases
        ),
    )


def private_power_method(
    tensor: np.ndarray | sp.spmatrix | SymmetricTensor,
    rank: int,
    *,
    epsilon: float,
    delta: float,
    n_restarts: int | None = None,
    n_iter: int | None = None,
    accountant: Literal["exact", "advanced"] = "exact",
    neighbouring: Neighbouring | NeighbouringRelation | None = None,
    record_bound: float | None = None,
    random_state: RandomStateLike = None,
    noise: NoiseLike | NoiseSource = None,
    ledger: Ledger | None = None,
) -> PrivatePowerMethodResult:
    """Differentially private robust tensor power method (Wang & Anandkumar 2016, Algorithm 3).

    For each of the ``k = rank`` components: draw ``L`` unit vectors; run exactly ``R`` power
    steps, releasing ``T(I, u, u) + z Delta_1(u) g`` (``g ~ N(0, I_d)``) and normalising;
    release ``T(u, u, u) + z Delta_2(u) g'`` for every restart; keep the restart with the
    largest *noisy* value; deflate by the released pair. ``z`` is the per-release noise
    multiplier for ``K = k L (R + 1)`` composed releases and ``Delta_1, Delta_2`` are the
    sensitivities of the two queries under the neighbouring relation. There is no early stop:
    every one of the ``K`` releases is charged whether or not it changes the answer.

    Parameters
    ----------
    tensor : ndarray (d, d, d), SymmetricTensor, SampleMoment or data matrix (n, d)
        For ``neighbouring="entry"``, a symmetric tensor (dense or any operator). For
        ``neighbouring="record"``, the records: :class:`~dptensor.tensor.SampleMoment` of an
        ``n x d`` matrix (uniform weights) or the matrix itself, dense or sparse; the tensor
        decomposed is their (clipped) third moment ``(1/n) sum_r x_r^{(x)3}``, never formed.
    rank : int
        ``k``.
    epsilon, delta : float
        Total privacy budget: ``epsilon > 0``, ``0 < delta < 1``.
    n_restarts : int, optional
        ``L``; default ``max(10, ceil(2 k ln k))``.
    n_iter : int, optional
        ``R``; default :func:`default_private_n_iter` (``ceil(log2 d) + 10``).
    accountant : {"exact", "advanced"}, default "exact"
        ``"advanced"`` reproduces step 2 of Algorithm 3 exactly:
        ``nu = 6 sqrt(2 ln(1.25/delta')) / epsilon'``, ``epsilon' = epsilon /
        sqrt(K (4 + ln(2/delta)))``, ``delta' = delta / (2K)`` (the paper's ``nu`` is ``6 z``).
        ``"exact"`` calibrates ``z`` so that the ``K`` Gaussian releases compose to exactly
        ``(epsilon, delta)`` (Gaussian DP; see :mod:`dptensor.privacy.calibration`) -- several
        times less noise for the same guarantee.
    neighbouring : {"entry", "record"}, optional
        ``"entry"``: Definition 4.2, sensitivities ``6 ||u||_inf^2`` and ``6 ||u||_inf^3``
        (exact in l2, see :mod:`dptensor.privacy.sensitivity`). ``"record"``: one record
        replaced, sensitivities ``2 B^3 ||u||_2^2 / n`` and ``2 B^3 ||u||_2^3 / n``; **the
        number of records n is public.** By default, the one relation the input admits:
        ``"record"`` for a data matrix or sample moment, ``"entry"`` for a tensor. A
        :class:`~dptensor.privacy.NeighbouringRelation` instance (e.g.
        :class:`~dptensor.privacy.WhitenedDocumentNeighbouring`) supplies its own sensitivities;
        the caller vouches that ``tensor`` is of the form that relation describes.
    record_bound : float, optional
        ``B``, required for ``"record"`` and refused for ``"entry"``. Declare it from domain
        knowledge, not from the data. Records above it are clipped to norm ``B``, silently:
        any signal that clipping happened would reveal a record above the bound. To look for
        such records in data you may inspect, use :func:`~dptensor.privacy.record_bound_violations`.
    random_state : None, int or numpy.random.Generator
        Public randomness: the restarts. Equal seeds give equal restarts.
    noise : None, "numpy", "opendp" or insecure_test_noise(seed)
        Secret randomness for the noise (:func:`~dptensor.privacy.resolve_noise`): fresh OS
        entropy by default, never derived from ``random_state``.
    ledger : BudgetLedger, optional
        Charged with the guarantee before any data is read.

    Returns
    -------
    PrivatePowerMethodResult
        ``weights`` (descending, non-negative), ``factors`` and ``guarantee``
        (:class:`~dptensor.privacy.PrivacyGuarantee`).

    Raises
    ------
    ValueError
        Bad budget, relation/input mismatch, or (``"advanced"`` only) parameters where the
        paper's constants would not deliver ``(epsilon, delta)``. Every check depends on the
        parameters and the input's shape only.

    Notes
    -----
    The proof of Theorem 4.1 combines the classic Gaussian mechanism with advanced composition;
    with the paper's ``epsilon'`` that theorem (Dwork & Roth, Theorem 3.20) actually yields a
    total above ``epsilon`` when ``ln(2/delta) > 4``. The guarantee still holds because Gaussian
    releases compose exactly (Gaussian DP); ``guarantee.epsilon_exact`` records the true
    ``epsilon`` of the noise added, and the function refuses to run if it exceeds ``epsilon``.

    Examples
    --------
    >>> import numpy as np
    >>> from dptensor.tensor import LowRankTensor
    >>> V = np.linalg.qr(np.random.default_rng(0).standard_normal((50, 2)))[0]
    >>> T = LowRankTensor(np.array([3000.0, 2000.0]), V)
    >>> res = private_power_method(T, 2, epsilon=1.0, delta=1e-6, random_state=0)
    >>> res.guarantee.neighbouring, res.guarantee.n_releases
    ('entry', 340)
    """
    check_epsilon_delta(epsilon, delta)
    accountant = check_accountant(accountant, who="private_power_method")
    op, relation = prepare_private_input(tensor, neighbouring, record_bound)
    rank = check_rank(rank, op.dim)
    n_restarts = default_n_restarts(rank) if n_restarts is None else n_restarts
    n_restarts = check_positive_int(n_restarts, "n_restarts")
    n_iter = default_private_n_iter(op.dim) if n_iter is None else n_iter
    n_iter = check_positive_int(n_iter, "n_iter")
    rng = check_random_state(random_state)

    # Algorithm 3, step 2: K = kL(R+1) releases; charge them all before releasing anything.
    n_releases = rank * n_restarts * (n_iter + 1)
    z = composed_noise_multiplier(epsilon, delta, n_releases, accountant)
    # the number of records is public under the record relation only (the entry relation has none)
    check_privacy_parameters(
        epsilon, delta, n_public=getattr(relation, "n_records", None), unit="records",
        who="private_power_method",
    )
    guarantee, source = begin_release(
        make_guarantee(
            epsilon=epsilon,
            delta=delta,
            relation=relation,
            accountant=accountant,
            n_releases=n_releases,
            noise_multiplier=z,
            extra={"algorithm": "private_power_method", "rank": rank, "n_restarts": n_restarts,
                   "n_iter": n_iter},
        ),
        noise,
        ledger=ledger,
        description=f"private_power_method rank {rank} (Wang & Anandkumar 2016, Algorithm 3)",
    )

    def step_hook(images: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        # Step 7: release T(I,u,u) + nu ||u||_inf^2 z_t (entry) -- sigma = z * Delta(u).
        return source.add_gaussian(images, (z * relation.pair_sensitivity(vectors))[None, :])

    def value_hook(values: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        # Step 10: release T(u,u,u) + nu ||u||_inf^3 z_tau for every restart.
        return source.add_gaussian(values, z * relation.triple_sensitivity(vectors))

    result = deflation_power_method(
        op,
        rank,
        n_restarts=n_restarts,
        n_iter=n_iter,
        tol=0.0,
        rng=rng,
        step_hook=step_hook,
        value_hook=value_hook,
    )
    return PrivatePowerMethodResult._from(result, guarantee)
