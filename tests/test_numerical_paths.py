"""Results that must not depend on the floating-point path (summation order, BLAS kernel, threads).

Issue 26: with ``n_jobs=2`` a dense-whitened SpectralLDA differed from the in-process fit by 3.5e-4
on another processor. Two causes, each tested here: the eigensolver may return an eigenvector of
``M2`` with either sign depending on rounding (the whitened tensor then has slices negated and the
power iteration, started from the same random vectors, converges to another fixed point), and the
simultaneous power iteration stopped on ``1 - |cos| <= tol``, i.e. while still turning by
``sqrt(2 tol)`` per step.
"""

import numpy as np
import pytest

from dptensor.datasets import make_orthogonal_tensor
from dptensor.datasets.lda import make_lda_corpus
from dptensor.decomposition.simultaneous_power import simultaneous_power_method
from dptensor.decomposition.whitening import Whitening, orient_columns, orientation_signs
from dptensor.models import SpectralLDA


@pytest.fixture(scope="module")
def corpus():
    return make_lda_corpus(3000, 60, 3, alpha=0.2, doc_length=30, random_state=0)


def _noisy_tensor(noise: float, seed: int = 0) -> np.ndarray:
    """An orthogonally decomposable 6 x 6 x 6 tensor plus symmetric noise (not decomposable)."""
    tensor, *_ = make_orthogonal_tensor(6, 4, random_state=seed)
    rng = np.random.default_rng(seed + 1)
    e = rng.standard_normal((6, 6, 6))
    e = sum(e.transpose(p) for p in ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))) / 6
    return tensor + noise * e


def test_orient_columns_fixes_one_sign_per_column():
    rng = np.random.default_rng(0)
    vectors = np.linalg.qr(rng.standard_normal((8, 4)))[0]
    oriented = orient_columns(vectors)
    for j in range(4):
        assert oriented[np.argmax(np.abs(oriented[:, j])), j] > 0
        np.testing.assert_array_equal(np.abs(oriented[:, j]), np.abs(vectors[:, j]))
    flips = np.array([1.0, -1.0, -1.0, 1.0])
    np.testing.assert_array_equal(orient_columns(vectors * flips), oriented)
    np.testing.assert_array_equal(orientation_signs(np.zeros((3, 2))), [1.0, 1.0])
    # every Whitening built from eigenpairs is oriented, whichever signs the solver returned
    values = np.array([3.0, 2.0, 1.0, 0.5])
    a, b = Whitening.from_eigenpairs(values, vectors), Whitening.from_eigenpairs(values, vectors * flips)
    np.testing.assert_array_equal(a.matrix, b.matrix)
    np.testing.assert_array_equal(a.inverse, b.inverse)


def test_spectral_lda_does_not_depend_on_the_eigensolvers_signs(corpus, monkeypatch):
    """The mechanism of the issue: an eigensolver returning one eigenvector negated."""
    a = SpectralLDA(3, corpus.alpha0, whitening="dense", random_state=0).fit(corpus.counts)
    eigh = np.linalg.eigh

    def negated_eigh(matrix):
        values, vectors = eigh(matrix)
        return values, vectors * np.where(np.arange(vectors.shape[1]) % 2 == 0, -1.0, 1.0)

    monkeypatch.setattr(np.linalg, "eigh", negated_eigh)
    b = SpectralLDA(3, corpus.alpha0, whitening="dense", random_state=0).fit(corpus.counts)
    np.testing.assert_array_equal(b.whitening_.matrix, a.whitening_.matrix)
    np.testing.assert_array_equal(b.components_, a.components_)
    np.testing.assert_array_equal(b.alpha_, a.alpha_)


def test_simultaneous_power_method_stops_at_its_fixed_point():
    """Stopping at ``tol`` leaves the factors within about ``tol`` of where more steps lead."""
    tensor = _noisy_tensor(0.05)
    tol = 1e-10
    stopped = simultaneous_power_method(tensor, 4, tol=tol, random_state=3)
    assert stopped.converged.all()
    longer = simultaneous_power_method(tensor, 4, tol=0, n_iter=int(stopped.n_iter[0]) + 20, random_state=3)
    # same start, same path, 20 more steps: the factors move by at most a few tol (the 1 - |cos|
    # test stopped 1.5e-8 away here)
    assert np.abs(longer.factors - stopped.factors).max() <= 10 * tol
    atol = 10 * tol * np.linalg.norm(tensor)
    np.testing.assert_allclose(longer.weights, stopped.weights, rtol=0, atol=atol)


def test_simultaneous_power_method_is_stable_under_rounding_of_its_input():
    tensor = _noisy_tensor(0.05)
    rng = np.random.default_rng(9)
    rounded = tensor * (1.0 + 1e-15 * rng.standard_normal(tensor.shape))  # another summation order
    a = simultaneous_power_method(tensor, 4, random_state=1)
    b = simultaneous_power_method(rounded, 4, random_state=1)
    assert np.abs(a.factors - b.factors).max() <= 10 * 1e-10
    np.testing.assert_allclose(b.weights, a.weights, rtol=1e-9)
