"""Sensitivities of the spectral-LDA moments under the replace-one-document relation.

DeCarolis et al. (*An end-to-end differentially private spectral algorithm for LDA*, paper 004)
protect one **document**: two corpora are neighbours when one document is replaced by another,
the number of documents ``N``, the vocabulary (the columns) and ``alpha_0`` being public. Every
document has at least three tokens (the third-order estimator needs them; see
:mod:`dptensor.models.topics.moments`).

Global Frobenius sensitivities (derivation)
-------------------------------------------
Write ``a = alpha_0/(alpha_0+1)``, ``b = -alpha_0/(alpha_0+2)``, ``c = 2 alpha_0^2/((alpha_0+1)(alpha_0+2))``
(Lemma 21) and, for the replaced document, ``a_n = c_n/l_n`` (a probability vector),
``P_n = (c c^T - diag c)/(l(l-1))`` and ``T_n`` (the third-order per-document estimator), both
non-negative arrays summing to one. Non-negative arrays with unit sum satisfy
``||X - X'||_F^2 <= ||X||_F^2 + ||X'||_F^2 <= 2``. Replacing document ``N``:

* ``N dM2 = (P - P') - a (delta s^T + s delta^T)`` with ``delta = a_N - a_N'`` and ``s`` the mean of
  the other documents' ``a_m`` (a probability vector), so ``N ||dM2||_F <= sqrt2 + 2 sqrt2 a``;
* ``N dM3 = (T - T') + b [sym3((P - P') (x) s) + sym3(q (x) delta)] + c [3 placements of delta (x) r]``
  with ``q`` the mean of the other ``P_m`` and ``r`` the mean of ``a_m (x) a_p`` over distinct other
  pairs, so ``N ||dM3||_F <= sqrt2 (1 + 6|b| + 3c)``.

These are :func:`m2_sensitivity` and :func:`m3_sensitivity` with ``coherence=1``; they confirm the
bounds of the reference notes (``docs/lda.md``, *Privacy*). The paper's Theorem 4 claims
``2/N`` (and Section 6.1 calibrates Configuration 1 to ``1/N``); brute force finds changes up
to ``2.45/N`` (M2) at ``alpha_0 = 1000``, so the paper's values are not sensitivities
(:data:`PAPER_MOMENT_SENSITIVITY`, ``tests/models/topics/test_private_lda_sensitivity.py``).

Sensitivities in a public basis (coherence)
-------------------------------------------
A release of ``M2 X`` or ``M3(U, U, U)`` for a *public* ``d x p`` matrix with orthonormal
columns -- the previous iterate of the noisy power method, or the eigenvectors of an earlier
noisy ``M2`` -- changes less when the basis is incoherent. With ``mu = max_v ||X^T e_v||_2``
(the largest row norm, at most 1), every one-hot vector maps to a vector of norm at most ``mu``;
averages of them keep that bound, differences at most double it, and the projection never
increases a Frobenius norm. Term by term:

* ``N ||dM2 X||_F <= m(sqrt2, 2mu) + a [sqrt2 m(1, mu) + m(sqrt2, 2mu)]``;
* ``N ||dM3(U,U,U)||_F <= m(sqrt2, 2mu^3) + 3|b| [m(sqrt2, 2mu^2) m(1, mu) + m(1, mu^2) m(sqrt2, 2mu)]
  + 3c m(sqrt2, 2mu) m(1, mu^2)``,

``m`` being the minimum. At ``mu = 1`` they are the global bounds above. The noise of such a
release may be calibrated to this bound because the basis is public (a function of earlier
releases): each release is then a Gaussian mechanism given the past, and Gaussian releases
compose adaptively (Dong, Roth & Su 2022).

Eigenvalues. Weyl's inequality gives ``|sigma_i(M2) - sigma_i(M2')| <= ||dM2||_2 <= ||dM2||_F``,
so :func:`m2_sensitivity` bounds the change of every eigenvalue (Lemma 9's ``2/N`` again
understates it).
"""

from __future__ import annotations

import math

import numpy as np

from dptensor._validation import check_alpha0, check_positive_int, check_real

#: Theorem 4's claimed l1 sensitivity of ``M2_hat`` and ``M3_hat`` is ``2/N``; Section 6.1 adds
#: noise for a sensitivity of ``1/N``. Both understate the true sensitivity (module docstring).
PAPER_MOMENT_SENSITIVITY = 1.0

SQRT2 = math.sqrt(2.0)


def lda_moment_constants(alpha0: float) -> tuple[float, float, float]:
    """``(a, b, c) = (alpha_0/(alpha_0+1), -alpha_0/(alpha_0+2), 2 alpha_0^2/((alpha_0+1)(alpha_0+2)))``.

    The coefficients of the empirical moments of Lemma 21 (DeCarolis et al.).
    """
    alpha0 = check_alpha0(alpha0)
    return (
        alpha0 / (alpha0 + 1.0),
        -alpha0 / (alpha0 + 2.0),
        2.0 * alpha0**2 / ((alpha0 + 1.0) * (alpha0 + 2.0)),
    )


def _check(alpha0: float, n_documents: int, coherence: float) -> tuple[float, float, float, int, float]:
    a, b, c = lda_moment_constants(alpha0)
    n = check_positive_int(n_documents, "n_documents", minimum=3)
    mu = check_real(coherence, "coherence", strict=False)
    if mu > 1.0 + 1e-12:
        raise ValueError(f"coherence is a largest row norm of an orthonormal basis, at most 1; got {mu}")
    return a, b, c, n, min(mu, 1.0)


def m2_sensitivity(alpha0: float, n_documents: int, *, coherence: float = 1.0) -> float:
    """Largest ``||M2_hat(D) X - M2_hat(D') X||_F`` over neighbouring corpora (replace one document).

    ``coherence=1`` (the default) bounds ``||M2_hat(D) - M2_hat(D')||_F`` itself:
    ``sqrt2 (1 + 2a) / N``. With the largest row norm ``mu`` of a public orthonormal ``X`` it
    bounds the change of ``M2_hat X`` (module docstring). It also bounds the change of every
    eigenvalue of ``M2_hat`` (Weyl).
    """
    a, _, _, n, mu = _check(alpha0, n_documents, coherence)
    diff, mean = min(SQRT2, 2.0 * mu), min(1.0, mu)
    return (diff + a * (SQRT2 * mean + diff)) / n


def m3_sensitivity(alpha0: float, n_documents: int, *, coherence: float = 1.0) -> float:
    """Largest ``||M3_hat(D)(U,U,U) - M3_hat(D')(U,U,U)||_F`` over neighbouring corpora.

    ``coherence=1`` bounds ``||M3_hat(D) - M3_hat(D')||_F``: ``sqrt2 (1 + 6|b| + 3c) / N``. With the
    largest row norm ``mu`` of a public orthonormal ``U`` it bounds the change of the projected
    tensor ``M3_hat(U, U, U)`` (module docstring).
    """
    _, b, c, n, mu = _check(alpha0, n_documents, coherence)
    d1, d2, d3 = min(SQRT2, 2.0 * mu), min(SQRT2, 2.0 * mu**2), min(SQRT2, 2.0 * mu**3)
    m1, m2 = min(1.0, mu), min(1.0, mu**2)
    return (d3 + 3.0 * abs(b) * (d2 * m1 + m2 * d1) + 3.0 * c * d1 * m2) / n


def m3_norm_bound(alpha0: float) -> float:
    """A public bound on ``||M3_hat||_F``: ``1 + 3|b| + c``.

    Each of the three U-statistics of ``M3_hat`` averages non-negative arrays with unit sum
    (Frobenius norm at most 1); ``sym3`` has three placements. (The paper's eq. (62) bounds the
    estimator it prints, which keeps repeated-document terms.)
    """
    _, b, c = lda_moment_constants(alpha0)
    return 1.0 + 3.0 * abs(b) + c


def coherence(basis: np.ndarray) -> float:
    """``max_v ||X^T e_v||_2``: the largest row norm of a basis with orthonormal columns."""
    basis = np.asarray(basis, dtype=np.float64)
    return float(min(1.0, np.sqrt(np.max(np.einsum("ij,ij->i", basis, basis)))))


def whitened_tensor_local_sensitivity(
    alpha0: float,
    n_documents: int,
    n_components: int,
    sigma_k: float,
    *,
    paper: bool = False,
) -> float:
    """The local sensitivity of ``T_hat = M3_hat(W, W, W)`` that Configuration 2 calibrates to.

    ``paper=True``: the printed ``k^{1.5} / (N sigma_k^{1.5})`` (Theorem 5 with its hidden
    constants set to 1, Section 6.2). ``paper=False``: the first-order telescoping the proof of
    Theorem 5 should use (its eq. (61) expands the difference as ``M(dW, dW, dW)``),
    ``Delta3 ||W'||^3 + 3 ||M3_hat||_F ||dW||_F max(||W||, ||W'||)^2`` with Lemma 28's
    ``||dW||_F <= sqrt(2k) Delta2 / (sigma_k sqrt(sigma_k / 2))`` and ``||W'|| <= (sigma_k - Delta2)^{-1/2}``.

    Neither is a sensitivity: Lemma 28 compares the whitening of ``D'`` with an *aligned* copy,
    while the algorithm's eigenvectors can rotate within near-degenerate eigenvalues and flip
    signs, which moves ``T_hat`` by ``Theta(||T_hat||)`` whatever ``N`` is (reference notes B.9 #1).
    Both are used only by the unproven Configuration 2.
    """
    k = check_positive_int(n_components, "n_components")
    n = check_positive_int(n_documents, "n_documents", minimum=3)
    sigma_k = check_real(sigma_k, "sigma_k")
    if paper:
        return k**1.5 / (n * sigma_k**1.5)
    d2, d3 = m2_sensitivity(alpha0, n), m3_sensitivity(alpha0, n)
    shrunk = max(sigma_k - d2, sigma_k / 2.0)
    dw = math.sqrt(2.0 * k) * d2 / (sigma_k * math.sqrt(sigma_k / 2.0))
    return d3 / shrunk**1.5 + 3.0 * m3_norm_bound(alpha0) * dw / shrunk


#: The ``m1`` release's two totals are scaled so that one document moves each by at most this share
#: of ``C1`` (:func:`clipped_sensitivities`). The totals only normalise: at a half their noise is a
#: few percent of ``S0`` on 5 * 10^4 short documents at epsilon = 1 (a noise of 17% there measurably
#: changed nothing), while the word frequencies get ``sqrt(2.5) C1`` instead of ``sqrt3 C1``.
TOTALS_SCALE = 0.5
#: Relative margin on the clipped sensitivities for floating-point rounding of the per-document terms.
CLIPPED_ROUNDING_MARGIN = 1e-12


def clipped_sensitivities(clip: float, word_clip: float, third_clip: float | None = None) -> dict[str, float]:
    """L2 sensitivities of the three releases of a clipped spectral-LDA fit (replace one document).

    Each document enters through weights ``w <= v`` with ``||w P||_F <= clip`` and ``||v p||_2 <= word_clip``
    (:mod:`dptensor.models.topics.clipped_moments`; ``||w G||_F <= ||w P||_F``); a document may be
    replaced by any other, including an empty one (weight 0). All per-document terms are
    non-negative, so ``||x - x'||^2 <= ||x||^2 + ||x'||^2``:

    * ``"m1"``: the vector ``(r S0, r T0, S1)`` with ``r = TOTALS_SCALE word_clip / w_max`` (per
      document ``(r w, r v, v p)`` with ``0 <= w <= v <= w_max`` and ``||v p||_2 <= word_clip``):
      ``r^2 (w - w')^2 + r^2 (v - v')^2 + ||v p - v' p'||^2 <= 2 (TOTALS_SCALE word_clip)^2 +
      2 word_clip^2``, so ``sqrt(2 + 2 TOTALS_SCALE^2) word_clip``;
    * ``"m2"``: ``S2`` and ``S2 X`` for any public ``X`` with orthonormal columns: ``sqrt2 clip``;
    * ``"e3"``: ``S3(U, U, U)`` for any public orthonormal ``U``: ``sqrt2 clip`` (a projection on
      orthonormal columns does not increase a Frobenius norm). With ``third_clip = C3`` each document's
      projected term also has norm at most ``C3`` (:mod:`dptensor.models.topics.clipped_moments`,
      *Projected clipping*), whatever its sign pattern, so the change is also at most ``2 C3``
      (triangle inequality): ``min(sqrt2 clip, 2 C3)``.

    Unlike :func:`m2_sensitivity` these do not shrink with ``N``: the normalisation by the released
    ``S0`` is post-processing. Each bound is raised by a relative :data:`CLIPPED_ROUNDING_MARGIN`:
    the computed per-document terms can exceed their bounds by a few units in the last place
    (measured: ``||v p||^2`` up to ``C1^2 (1 + 2.2e-16)``, ``r w_max`` one unit above ``C1/2``).
    """
    clip = check_real(clip, "clip")
    word_clip = check_real(word_clip, "word_clip")
    third = SQRT2 * clip
    if third_clip is not None:
        third = min(third, 2.0 * check_real(third_clip, "third_clip"))
    margin = 1.0 + CLIPPED_ROUNDING_MARGIN
    return {
        "m1": math.sqrt(2.0 + 2.0 * TOTALS_SCALE**2) * word_clip * margin,
        "m2": SQRT2 * clip * margin,
        "e3": third * margin,
    }
