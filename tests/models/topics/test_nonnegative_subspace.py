"""The whitening subspace from a symmetric non-negative factorisation of the M2 release."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from _helpers import topic_l1_error
from sklearn.utils._param_validation import InvalidParameterError

from dptensor.datasets.lda import make_lda_corpus
from dptensor.models import PrivateSpectralLDA
from dptensor.models.topics.nonnegative_subspace import nonnegative_subspace, symmetric_nmf
from dptensor.models.topics.private_whitening import NONNEGATIVE_BELOW_ALIGNMENT, analyze_gauss_eigenpairs
from dptensor.privacy import insecure_test_noise

pytestmark = pytest.mark.filterwarnings("ignore:insecure_test_noise")


def _planted(m, k, seed, support=25):
    """Non-negative ``H0`` (``k`` sparse columns) and an orthonormal basis of its span."""
    rng = np.random.default_rng([seed, 1])
    H0 = np.zeros((m, k))
    for t in range(k):
        H0[rng.choice(m, support, replace=False), t] = rng.random(support) + 0.5
    return H0, np.linalg.qr(H0)[0]


def _captured(basis, U):
    return float(np.sum((basis.T @ U) ** 2)) / basis.shape[1]


def test_symmetric_nmf_factorises_an_exact_product():
    H0, basis = _planted(60, 3, seed=0, support=15)
    A = H0 @ H0.T
    H = symmetric_nmf(A, 3, max_iter=5000, tol=1e-12)
    assert np.all(H >= 0)
    assert np.linalg.norm(A - H @ H.T) < 1e-3 * np.linalg.norm(A)
    assert _captured(basis, np.linalg.qr(H)[0]) > 0.999
    np.testing.assert_array_equal(H, symmetric_nmf(A, 3, max_iter=5000, tol=1e-12))  # deterministic


def test_symmetric_nmf_checks_its_input():
    assert np.all(symmetric_nmf(np.zeros((4, 4)), 2) == 0)
    for bad in (-np.eye(3), np.ones((3, 4)), np.full((3, 3), np.nan)):
        with pytest.raises(ValueError):
            symmetric_nmf(bad, 1)
    with pytest.raises(ValueError, match="rank"):
        symmetric_nmf(np.eye(3), 4)


def test_nonnegative_subspace_is_orthonormal_even_when_the_factor_is_rank_deficient():
    A = np.zeros((10, 10))
    A[0, 0] = A[1, 1] = 1.0  # rank 2: the third direction comes from the release's eigenvectors
    U = nonnegative_subspace(A, 3, noise_scale=1e-3)
    np.testing.assert_allclose(U.T @ U, np.eye(3), atol=1e-10)
    assert _captured(np.eye(10)[:, :2], U) > 0.999  # both true directions are in it


def test_nonnegative_subspace_factorises_the_release_thresholded_at_one_noise_deviation():
    rng = np.random.default_rng(0)
    H0, _ = _planted(40, 2, seed=1, support=10)
    released = H0 @ H0.T + rng.normal(scale=0.3, size=(40, 40))
    released = (released + released.T) / 2
    s = 0.5
    U = nonnegative_subspace(released, 2, noise_scale=s)
    H = symmetric_nmf(np.maximum(released - s / math.sqrt(2.0), 0.0), 2)
    np.testing.assert_allclose(U @ U.T, np.linalg.qr(H)[0] @ np.linalg.qr(H)[0].T, atol=1e-10)


@pytest.mark.parametrize("strength", [0.5, 0.8])
def test_the_factorisation_finds_more_of_a_non_negative_signal_than_the_eigenvectors(strength):
    """Sparse non-negative directions whose k-th eigenvalue is ``strength`` times the noise's edge."""
    m, k, s = 300, 5, 1.0
    H0, basis = _planted(m, k, seed=7)
    M = H0 @ H0.T
    M *= strength * math.sqrt(2 * m) * s / np.linalg.eigvalsh(M)[-k]
    found = {mode: [] for mode in ("eigen", "nonnegative")}
    for seed in range(4):
        for mode in found:
            r = analyze_gauss_eigenpairs(M, k, noise_scale=s, source=insecure_test_noise(seed),
                                         subspace=mode)  # fmt: skip
            assert r.subspace == mode
            np.testing.assert_allclose(r.whitening.eigenvectors.T @ r.whitening.eigenvectors, np.eye(k),
                                       atol=1e-10)  # fmt: skip
            found[mode].append(_captured(basis, r.whitening.eigenvectors))
    assert np.mean(found["nonnegative"]) > np.mean(found["eigen"]) + 0.05


def test_auto_factorises_only_when_the_eigenvectors_are_poor():
    m, k, s = 200, 3, 1.0
    H0, _ = _planted(m, k, seed=3)
    M = H0 @ H0.T
    for strength, expected in ((0.4, "nonnegative"), (20.0, "eigen")):
        scaled = M * strength * math.sqrt(2 * m) * s / np.linalg.eigvalsh(M)[-k]
        auto = analyze_gauss_eigenpairs(scaled, k, noise_scale=s, source=insecure_test_noise(1),
                                        subspace="auto")  # fmt: skip
        assert (np.mean(auto.alignment) < NONNEGATIVE_BELOW_ALIGNMENT) == (expected == "nonnegative")
        fixed = analyze_gauss_eigenpairs(scaled, k, noise_scale=s, source=insecure_test_noise(1),
                                         subspace=expected)  # fmt: skip
        assert auto.subspace == expected
        np.testing.assert_array_equal(auto.whitening.eigenvectors, fixed.whitening.eigenvectors)
        np.testing.assert_array_equal(auto.alignment, fixed.alignment)  # of the eigenvectors, either way
    with pytest.raises(ValueError, match="subspace"):
        analyze_gauss_eigenpairs(M, k, noise_scale=s, source=insecure_test_noise(1), subspace="pca")


@pytest.mark.slow  # two private fits of 20000 documents, a statistical check of the topics (3.4 s)
def test_estimator_option_keeps_the_guarantee_and_finds_the_topics():
    c = make_lda_corpus(20000, 40, 3, alpha=0.1, doc_length=40, topic_concentration=0.2, random_state=3)
    fits = {
        mode: PrivateSpectralLDA(3, 0.3, epsilon=2.0, delta=1e-6, whitening_subspace=mode, random_state=0)
        .fit(c.counts)
        for mode in ("eigen", "nonnegative")
    }  # fmt: skip
    assert repr(fits["eigen"].guarantee_) == repr(fits["nonnegative"].guarantee_)  # post-processing only
    for model in fits.values():
        assert topic_l1_error(c.topics, model.components_) < 0.3  # chance is about 1.7
    with pytest.raises(InvalidParameterError):
        PrivateSpectralLDA(3, epsilon=1.0, delta=1e-6, whitening_subspace="pca").fit(c.counts)


def test_command_option(tmp_path, capsys):
    from dptensor.cli import main

    c = make_lda_corpus(3000, 30, 2, alpha=0.1, doc_length=30, topic_concentration=0.1, random_state=2)
    sp.save_npz(tmp_path / "c.npz", c.counts)
    base = ["lda", "fit", str(tmp_path / "c.npz"), "--topics", "2", "--quiet"]
    assert main([*base, "--epsilon", "2", "--delta", "1e-6", "--whitening-subspace", "nonnegative",
                 "--out", str(tmp_path / "m.json")]) == 0  # fmt: skip
    assert '"whitening_subspace": "nonnegative"' in (tmp_path / "m.json").read_text()
    capsys.readouterr()
    assert main([*base, "--whitening-subspace", "eigen"]) == 2  # a privacy option needs --epsilon
    assert "--whitening-subspace" in capsys.readouterr().err


def test_completion_takes_the_release_s_next_eigenvector_when_the_factor_is_short():
    # after the threshold only the (0, 0) entry is positive: a factor of rank one; the second
    # direction must be the release's next eigenvector q = (e1 - e2)/sqrt2, not a coordinate axis
    q = np.zeros(6)
    q[1], q[2] = 1 / math.sqrt(2), -1 / math.sqrt(2)
    released = 5.0 * np.outer(np.eye(6)[0], np.eye(6)[0]) + 3.0 * np.outer(q, q)
    U = nonnegative_subspace(released, 2, noise_scale=3.0)
    span = np.stack([np.eye(6)[0], q], axis=1)
    assert np.linalg.norm(span.T @ U) ** 2 == pytest.approx(2.0, abs=1e-10)


def test_every_subspace_is_post_processing_of_the_release(monkeypatch):
    """Two different un-noised moments with the same released matrix give the same output."""
    import dptensor.models.topics.private_whitening as pw

    rng = np.random.default_rng(5)
    H0, _ = _planted(50, 3, seed=2, support=10)
    released = H0 @ H0.T + rng.normal(scale=0.5, size=(50, 50))
    released = (released + released.T) / 2
    monkeypatch.setattr(pw, "add_symmetric_gaussian", lambda values, *a, **k: released.copy())
    for mode in ("eigen", "nonnegative", "auto"):
        first, second = (
            pw.analyze_gauss_eigenpairs(clean, 3, noise_scale=0.5, source=insecure_test_noise(0),
                                        subspace=mode)
            for clean in (np.zeros((50, 50)), H0 @ H0.T)
        )  # fmt: skip
        np.testing.assert_array_equal(first.whitening.eigenvectors, second.whitening.eigenvectors)
        np.testing.assert_array_equal(first.whitening.eigenvalues, second.whitening.eigenvalues)
        np.testing.assert_array_equal(first.alignment, second.alignment)
        assert first.subspace == second.subspace


@pytest.mark.parametrize(("mean", "expected"), [(0.85, "nonnegative"), (0.95, "eigen")])
def test_auto_rule_follows_the_mean_alignment(monkeypatch, mean, expected):
    import dptensor.models.topics.private_whitening as pw

    assert NONNEGATIVE_BELOW_ALIGNMENT == 0.9
    monkeypatch.setattr(pw, "spike_alignment", lambda values, edge, size: np.full(values.size, mean))
    H0, _ = _planted(40, 2, seed=4, support=10)
    result = pw.analyze_gauss_eigenpairs(H0 @ H0.T, 2, noise_scale=0.1, source=insecure_test_noise(0),
                                         subspace="auto")  # fmt: skip
    assert result.subspace == expected
