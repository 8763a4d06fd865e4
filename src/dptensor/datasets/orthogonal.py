"""Noisy orthogonally decomposable tensors (Wang & Anandkumar 2016, Appendix A)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dptensor._validation import (
    RandomStateLike,
    check_finite_array,
    check_positive_int,
    check_random_state,
    check_rank,
)
from dptensor.tensor.norms import operator_norm
from dptensor.tensor.operators import symmetrize

NOISE_MODELS = ("gaussian", "adversarial", "weakly_correlated")


class OrthogonalTensor(NamedTuple):
    """A synthetic tensor ``T = sum_i lambda_i v_i^{(x)3} + E`` and its ground truth.

    Unpacks as ``tensor, weights, factors = make_orthogonal_tensor(...)``.
    """

    tensor: np.ndarray
    weights: np.ndarray
    factors: np.ndarray
    noise_tensor: np.ndarray | None = None


def make_orthogonal_tensor(
    dim: int,
    rank: int,
    *,
    weights: np.ndarray | None = None,
    noise: float = 0.0,
    noise_model: str = "gaussian",
    components: str = "random",
    random_state: RandomStateLike = None,
) -> OrthogonalTensor:
    """Generate ``T = sum_i lambda_i v_i^{(x)3} + E`` with orthonormal ``v_i`` and ``||E||_op = noise``.

    The three noise models are those of Wang & Anandkumar (2016), Appendix A, generalised from
    their rank 3 to any rank ``k``:

    ``"gaussian"``
        ``E_ijk ~ N(0, 1)`` i.i.d., then symmetrised (averaged over the six index
        permutations) and rescaled so that its operator norm, estimated by SS-HOPM
        (:func:`dptensor.tensor.operator_norm`, a lower bound), equals ``noise``.
        Theorem 2.2 tolerates ``||E||_op = O(lambda_min / sqrt(d))``.
    ``"adversarial"``
        ``E = sum_i sym(v_2 (x) e_i (x) e_i)``, i.e. ``E_abc = v2_a delta_bc + v2_b delta_ac
        + v2_c delta_ab`` (``v_2`` is the second component, or the first when ``k = 1``).
        ``E(u,u,u) = 3 (v_2^T u) ||u||^2`` so ``||E||_op = 3`` exactly; it is rescaled by
        ``noise / 3``. The power method tolerates only ``O(lambda_min / d)`` of it.
    ``"weakly_correlated"``
        ``E = sum_{i>k} v_i^{(x)3}`` over an orthonormal basis ``{v_{k+1}, ..., v_d}`` of the
        orthogonal complement of the components; ``||E||_op = 1`` exactly, rescaled by
        ``noise``. Tolerated up to ``O(lambda_min / sqrt(k))``. Requires ``rank < dim``.

    Parameters
    ----------
    dim : int
        Dimension ``d``.
    rank : int
        Number of components ``k <= d``.
    weights : array_like of shape (k,), optional
        ``lambda_i > 0``; default evenly spaced from 1 down to 0.5 (the paper's
        ``1, 0.75, 0.5`` for ``k = 3``).
    noise : float, default 0
        Operator norm ``||E||_op = sigma`` of the added noise.
    noise_model : {"gaussian", "adversarial", "weakly_correlated"}
    components : {"random", "canonical"}
        ``"random"`` draws a Haar-random orthonormal frame (incoherent components);
        ``"canonical"`` uses ``e_1, ..., e_k`` as in the paper's experiment.
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    OrthogonalTensor
        ``(tensor, weights, factors, noise_tensor)``: the dense ``d x d x d`` tensor, the
        weights ``(k,)``, the unit components as columns ``(d, k)``, and ``E`` (``None``
        when ``noise == 0``).
    """
    dim = check_positive_int(dim, "dim")
    rank = check_rank(rank, dim)
    rng = check_random_state(random_state)
    if noise_model not in NOISE_MODELS:
        raise ValueError(f"noise_model must be one of {NOISE_MODELS}, got {noise_model!r}")
    if not np.isfinite(noise) or noise < 0:
        raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
    if weights is None:
        weights = np.linspace(1.0, 0.5, rank) if rank > 1 else np.ones(1)
    weights = check_finite_array(weights, "weights", ndim=1)
    if weights.shape[0] != rank or np.any(weights <= 0):
        raise ValueError(f"weights must be {rank} positive numbers, got {weights}")
    basis = _orthonormal_basis(dim, components, rng)
    factors = basis[:, :rank]
    tensor = np.einsum("r,ir,jr,kr->ijk", weights, factors, factors, factors)
    if noise == 0:
        return OrthogonalTensor(tensor, weights, factors, None)
    if noise_model == "gaussian":
        raw = symmetrize(rng.standard_normal((dim, dim, dim)))
        scale = noise / operator_norm(raw, random_state=rng).norm
    elif noise_model == "adversarial":
        v2 = factors[:, min(1, rank - 1)]
        eye = np.eye(dim)
        raw = (
            np.einsum("a,bc->abc", v2, eye)
            + np.einsum("b,ac->abc", v2, eye)
            + np.einsum("c,ab->abc", v2, eye)
        )
        scale = noise / 3.0
    else:
        if rank == dim:
            raise ValueError("the weakly correlated noise model needs rank < dim")
        rest = basis[:, rank:]
        raw = np.einsum("ir,jr,kr->ijk", rest, rest, rest)
        scale = noise
    noise_tensor = scale * raw
    return OrthogonalTensor(tensor + noise_tensor, weights, factors, noise_tensor)


def _orthonormal_basis(dim: int, components: str, rng: np.random.Generator) -> np.ndarray:
    if components == "canonical":
        return np.eye(dim)
    if components != "random":
        raise ValueError(f"components must be 'random' or 'canonical', got {components!r}")
    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    return q * np.sign(np.diag(r))  # sign fix makes Q Haar-distributed
