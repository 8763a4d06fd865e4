"""How much of each whitening direction survives the M2 release's noise (spiked Wigner estimate)."""

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.datasets.lda import make_lda_corpus
from dptensor.models import PrivateSpectralLDA
from dptensor.models.topics.private_whitening import analyze_gauss_eigenpairs, spike_alignment
from dptensor.privacy import insecure_test_noise


def _spiked(m, theta, seed, noise_scale=1.0):
    """A rank-one ``theta tau sqrt(m) u u^T`` through Analyze Gauss: released pairs and the true ``u``."""
    rng = np.random.default_rng([seed, 1])  # independent of the noise's seed
    u = rng.standard_normal(m)
    u /= np.linalg.norm(u)
    tau_sqrt_m = noise_scale / math.sqrt(2.0) * math.sqrt(m)  # off-diagonal std s / sqrt2
    result = analyze_gauss_eigenpairs(
        theta * tau_sqrt_m * np.outer(u, u), 1, noise_scale=noise_scale,
        source=insecure_test_noise(seed),
    )  # fmt: skip
    return result, u


@pytest.mark.parametrize("theta", [1.6, 2.5, 4.0])
def test_alignment_matches_the_measured_cosine_of_a_planted_spike(theta):
    estimated, measured = [], []
    for seed in range(6):
        result, u = _spiked(500, theta, seed)
        estimated.append(result.alignment[0])
        measured.append(float(result.whitening.eigenvectors[:, 0] @ u) ** 2)
    truth = 1.0 - 1.0 / theta**2  # the limit both should approach
    assert abs(np.mean(estimated) - truth) < 0.06
    assert abs(np.mean(measured) - truth) < 0.06
    assert abs(np.mean(estimated) - np.mean(measured)) < 0.06


def test_a_spike_below_the_threshold_is_reported_as_unresolved():
    estimated, measured = [], []
    for seed in range(6):
        result, u = _spiked(500, 0.5, seed)
        estimated.append(result.alignment[0])
        measured.append(float(result.whitening.eigenvectors[:, 0] @ u) ** 2)
    # the released eigenvalue sits at the edge (Tracy-Widom fluctuations of order m^(-2/3) above it)
    assert np.mean(measured) < 0.05
    assert max(estimated) < 0.4 and np.median(estimated) < 0.25


def test_spike_alignment_inverts_the_eigenvalue_shift():
    edge = 2.0
    theta = np.array([1.0, 1.5, 3.0, 10.0])
    released = edge / 2 * (theta + 1 / theta)  # where a spike theta tau sqrt(m) shows
    size = 10**12  # a Tracy-Widom margin of 1e-8 of the edge
    got = spike_alignment(released * (1 + 1e-12), edge, size)
    np.testing.assert_allclose(got, np.where(theta > 1.0001, 1 - 1 / theta**2, 0.0), atol=1e-5)
    assert spike_alignment(np.array([-1.0, 0.0, edge]), edge, size).tolist() == [0.0, 0.0, 0.0]
    assert np.all(np.diff(spike_alignment(np.linspace(0, 10, 50), edge, size)) >= 0)
    # at m = 27 the margin is 1/9 of the edge: a released eigenvalue there counts only above it
    assert spike_alignment(np.array([1.1 * edge, 1.12 * edge]), edge, 27).tolist()[0] == 0.0
    assert spike_alignment(np.array([1.12 * edge]), edge, 27)[0] > 0.3


def test_pure_noise_is_rarely_taken_for_a_direction():
    """Without the Tracy-Widom margin about 12% of pure-noise releases of a 30 x 30 matrix show one."""
    shown = [
        analyze_gauss_eigenpairs(np.zeros((30, 30)), 2, noise_scale=1.0, source=insecure_test_noise(seed))
        .alignment[0] > 0
        for seed in range(100)
    ]  # fmt: skip
    assert sum(shown) <= 5


def test_private_fit_reports_the_alignment_of_its_whitening(monkeypatch):
    c = make_lda_corpus(20000, 40, 3, alpha=0.1, doc_length=40, topic_concentration=0.2, random_state=3)
    base = {"delta": 1e-6, "random_state": 0}
    strong = PrivateSpectralLDA(3, 0.3, epsilon=50.0, **base).fit(c.counts)
    weak = PrivateSpectralLDA(3, 0.3, epsilon=0.002, topic_recovery="tensor", **base).fit(c.counts)
    assert PrivateSpectralLDA(3, 0.3, epsilon=0.002, **base).fit(c.counts).whitening_alignment_ is None  # nmf
    assert strong.whitening_alignment_.shape == (3,)
    assert np.all(strong.whitening_alignment_ > 0.9)
    assert np.all((weak.whitening_alignment_ >= 0) & (weak.whitening_alignment_ < 1))
    assert weak.whitening_alignment_.sum() < strong.whitening_alignment_.sum() - 1.0
    # the unclipped Configuration 1 reports its Analyze Gauss release too
    unclipped = PrivateSpectralLDA(3, 0.3, epsilon=50.0, clip=None, **base).fit(c.counts)
    assert unclipped.whitening_alignment_.shape == (3,)
    # two M2 releases (shared_m2=False): the whitening's, e4, is reported, not the inverse's (e8)
    import dptensor.models.topics._configuration1 as ps

    seen = []
    real = ps.analyze_gauss_eigenpairs

    def recording(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(ps, "analyze_gauss_eigenpairs", recording)
    two = PrivateSpectralLDA(3, 0.3, epsilon=5.0, clip=None, shared_m2=False, **base).fit(c.counts)
    monkeypatch.undo()
    assert len(seen) == 2 and two.whitening_alignment_ is seen[0].alignment
    # no Analyze Gauss release of M2: nothing to report
    power = PrivateSpectralLDA(3, 0.3, epsilon=50.0, private_whitening="noisy-power", **base).fit(c.counts)
    public = PrivateSpectralLDA(3, 0.3, epsilon=50.0, public_corpus=c.counts[:2000], **base).fit(c.counts)
    assert power.whitening_alignment_ is None and public.whitening_alignment_ is None


def test_command_prints_and_saves_the_alignment(tmp_path, capsys):
    from dptensor.cli import main

    c = make_lda_corpus(3000, 30, 2, alpha=0.1, doc_length=30, topic_concentration=0.1, random_state=2)
    sp.save_npz(tmp_path / "c.npz", c.counts)
    argv = ["lda", "fit", str(tmp_path / "c.npz"), "--topics", "2", "--quiet", "--epsilon", "2",
            "--delta", "1e-6", "--out", str(tmp_path / "m.json")]  # fmt: skip
    assert main(argv) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("whitening:"))
    saved = json.loads((tmp_path / "m.json").read_text())["whitening_alignment"]
    assert len(saved) == 2 and all(0.0 <= a < 1.0 for a in saved)
    assert line.startswith(f"whitening: {sum(a > 0 for a in saved)} of 2 directions (eigenvectors) of the "
                           "released word co-occurrences (second moment M2) above the release's noise")
    assert " ".join(f"{a:.2f}" for a in saved) in line and "below 0.90 on average" in line
    from dptensor.cli.lda import load_model

    model, _ = load_model(tmp_path / "m.json")
    np.testing.assert_array_equal(model.whitening_alignment_, saved)
