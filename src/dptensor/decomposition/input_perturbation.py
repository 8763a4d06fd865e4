"""Input perturbation: add a symmetric Gaussian tensor once, then decompose (non-privately).

The baseline Wang & Anandkumar (2016, Section 4, *Comparison with input perturbation*) argue
against: the noise tensor ``E`` needs ``||E||_op = O(1/sqrt(d))`` for the power method to work,
which forces ``epsilon`` to grow linearly with ``d``. Everything after the single release is
post-processing, so the robust power method runs with its usual early stopping.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import scipy.sparse as sp

from dptensor._validation import RandomStateLike, check_epsilon_delta, check_random_state, check_rank
from dptensor.decomposition.power_method import power_method
from dptensor.decomposition.private_power_method import (
    PrivatePowerMethodResult,
    make_guarantee,
    prepare_private_input,
)
from dptensor.privacy.calibration import check_accountant, gaussian_sigma_analytic, gaussian_sigma_classic
from dptensor.privacy.mechanisms import add_symmetric_gaussian
from dptensor.privacy.noise import NoiseLike, NoiseSource
from dptensor.privacy.release import Ledger, begin_release
from dptensor.privacy.sensitivity import RecordNeighbouring
from dptensor.privacy.warnings import check_privacy_parameters
from dptensor.tensor.operators import DenseTensor, SampleMoment, SymmetricTensor

INPUT_ACCOUNTANTS: tuple[str, ...] = ("exact", "classic")


def input_perturbation(
    tensor: np.ndarray | sp.spmatrix | SymmetricTensor,
    rank: int,
    *,
    epsilon: float,
    delta: float,
    accountant: Literal["exact", "classic"] = "exact",
    neighbouring: Literal["entry", "record"] | None = None,
    record_bound: float | None = None,
    n_restarts: int | None = None,
    n_iter: int | None = None,
    tol: float = 1e-8,
    random_state: RandomStateLike = None,
    noise: NoiseLike | NoiseSource = None,
    ledger: Ledger | None = None,
) -> PrivatePowerMethodResult:
    """Release ``T + E`` with a symmetric Gaussian tensor ``E``, then run the robust power method.

    Noise, by relation (conventions of :func:`~dptensor.privacy.symmetric_gaussian_tensor`):

    ``"entry"`` (Definition 4.2)
        A neighbouring change ``+-symmetrize(e_i (x) e_j (x) e_k)`` moves the one orbit of
        entries ``{(i,j,k) permuted}`` by ``6/|O|`` each (1 for distinct indices, 2 for two
        equal, 6 on the diagonal); its Frobenius norm is ``6/sqrt(|O|)``, at most 6. We add
        independent noise per orbit with std ``z * 6/|O|`` (convention ``"entry"``), in whose
        metric every neighbouring change has length exactly 1: sensitivity 1, noise multiplier
        ``z``. (Isotropic noise calibrated to the worst Frobenius change, 6, would put
        ``sqrt(6)`` times more noise on every off-diagonal entry.)
    ``"record"``
        ``T' - T = (x'^{(x)3} - x^{(x)3}) / n`` has Frobenius norm at most ``2 B^3 / n``; the noise
        is isotropic on symmetric tensors (convention ``"frobenius"``) with
        ``scale = z 2 B^3 / n``. Records above ``B`` are clipped, silently; ``n`` is public.

    ``z`` is the analytic Gaussian multiplier ``sigma(epsilon, delta)`` (``accountant="exact"``,
    Balle & Wang 2018) or the classic ``sqrt(2 ln(1.25/delta)) / epsilon`` (``"classic"``,
    ``epsilon < 1`` only). One release, so no composition.

    This forms the dense ``d x d x d`` tensor (input perturbation cannot avoid it).

    Parameters
    ----------
    tensor, rank, epsilon, delta, neighbouring, record_bound, noise, ledger
        As for :func:`~dptensor.decomposition.private_power_method.private_power_method`.
    accountant : {"exact", "classic"}, default "exact"
        ``"exact"``: the analytic Gaussian mechanism; ``"classic"``: Dwork & Roth's formula
        (``epsilon < 1``). One release, so there is no composition and no ``"advanced"``
        (that name is :func:`private_power_method`'s per-release classic calibration with
        advanced composition); :data:`dptensor.privacy.calibration.ACCOUNTANT_MEANINGS` lists
        every name.
    n_restarts, n_iter, tol
        Passed to :func:`~dptensor.decomposition.power_method.power_method`.
    random_state : None, int or numpy.random.Generator
        Public randomness: the restarts of the power method run on the released tensor.

    Returns
    -------
    PrivatePowerMethodResult
        With ``guarantee.n_releases == 1``.
    """
    check_epsilon_delta(epsilon, delta)
    check_accountant(accountant, INPUT_ACCOUNTANTS, who="input_perturbation")
    op, relation = prepare_private_input(tensor, neighbouring, record_bound)
    rank = check_rank(rank, op.dim)
    rng = check_random_state(random_state)
    if accountant == "exact":
        z = gaussian_sigma_analytic(epsilon, delta)
    else:
        z = gaussian_sigma_classic(epsilon, delta)
    # the number of records is public under the record relation only (the entry relation has none)
    check_privacy_parameters(
        epsilon, delta, n_public=getattr(relation, "n_records", None), unit="records",
        who="input_perturbation",
    )
    guarantee, source = begin_release(
        make_guarantee(
            epsilon=epsilon,
            delta=delta,
            relation=relation,
            accountant=accountant,
            n_releases=1,
            noise_multiplier=z,
            extra={"algorithm": "input_perturbation", "rank": rank},
        ),
        noise,
        ledger=ledger,
        description=f"input_perturbation rank {rank}",
    )
    if isinstance(relation, RecordNeighbouring):
        assert isinstance(op, SampleMoment)
        released = add_symmetric_gaussian(
            op.to_dense(), z * relation.scale, convention="frobenius", noise=source
        )
    else:
        dense = op.array if isinstance(op, DenseTensor) else op.to_dense()
        released = add_symmetric_gaussian(dense, z, convention="entry", noise=source)
    noisy = DenseTensor(released, check_symmetry=False)
    result = power_method(noisy, rank, n_restarts=n_restarts, n_iter=n_iter, tol=tol, random_state=rng)
    return PrivatePowerMethodResult._from(result, guarantee)
