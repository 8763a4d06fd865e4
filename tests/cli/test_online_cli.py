"""``dptensor decompose --online``: Algorithm 2 on a data file from the command line."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.cli import main
from dptensor.datasets.moment_stream import make_orthogonal_moment_stream
from dptensor.decomposition.online import OnlineTensorPower
from dptensor.metrics import match_components
from dptensor.streams import open_stream

ARGS = ["--rank", "2", "--batch-size", "1500", "--iters", "4", "--restarts", "6", "--seed", "0"]


@pytest.fixture
def data(tmp_path):
    stream = make_orthogonal_moment_stream(15, 2, weights=[1.0, 0.6], noise=0.05, random_state=0)
    X = stream.sample(12_000)
    np.save(tmp_path / "x.npy", X)
    sp.save_npz(tmp_path / "x.npz", sp.csr_matrix(X))
    np.savetxt(tmp_path / "x.csv", X, delimiter=",")
    return stream, X


def _run(tmp_path, source, *extra):
    out = tmp_path / "out.json"
    argv = ["decompose", "--online", str(tmp_path / source), *ARGS, "--out", str(out), *extra]
    assert main(argv) == 0
    return json.loads(out.read_text())


def test_online_recovers_and_writes_json(tmp_path, data, capsys, monkeypatch):
    monkeypatch.setattr("dptensor._progress.bars_shown", lambda stream=None: True)  # as on a terminal
    stream, _ = data
    payload = _run(tmp_path, "x.npy", "--chunk-size", "1000")
    assert payload["n_samples_seen"] == 2 * 4 * 1500
    assert payload["n_restarts"] == 6 and payload["n_iter"] == 4
    match = match_components(stream.factors, np.array(payload["factors"]))
    assert match.min_inner > 0.98
    text = capsys.readouterr()
    assert "read 12000 points" in text.out
    assert "pt" in text.err  # the tqdm progress bar


def test_file_formats_agree(tmp_path, data):
    results = [
        np.array(_run(tmp_path, name, "--no-progress", "--chunk-size", "500")["factors"])
        for name in ("x.npy", "x.npz", "x.csv")
    ]
    np.testing.assert_allclose(results[1], results[0], atol=1e-10)
    np.testing.assert_allclose(results[2], results[0], atol=1e-10)


def test_checkpoint_resume_matches_an_uninterrupted_run(tmp_path, data):
    full = _run(tmp_path, "x.npz", "--no-progress", "--chunk-size", "700")
    # An interrupted run: the first 10 chunks of 700 rows, then the state saved.
    model = OnlineTensorPower(2, batch_size=1500, n_restarts=6, n_iter=4, random_state=0)
    for batch in list(open_stream(tmp_path / "x.npz", 700))[:10]:
        model.partial_fit(batch)
    checkpoint = tmp_path / "state.npz"
    model.save_checkpoint(checkpoint)
    resumed = _run(tmp_path, "x.npz", "--no-progress", "--chunk-size", "700", "--checkpoint", str(checkpoint))
    assert resumed["resumed_from_checkpoint"] is True
    assert resumed["weights"] == full["weights"] and resumed["factors"] == full["factors"]
    assert OnlineTensorPower.load_checkpoint(checkpoint).is_complete


def test_checkpoint_written_during_the_run(tmp_path, data):
    checkpoint = tmp_path / "run.npz"
    _run(tmp_path, "x.npy", "--no-progress", "--checkpoint", str(checkpoint))
    assert OnlineTensorPower.load_checkpoint(checkpoint).n_samples_seen_ == 12_000


def test_online_errors(tmp_path, data, capsys):
    base = ["decompose", "--online", str(tmp_path / "x.npy")]
    assert main([*base, "--rank", "2"]) == 2
    assert "--batch-size is required" in capsys.readouterr().err
    short = [*base, "--rank", "2", "--batch-size", "30000", "--iters", "2", "--no-progress"]
    assert main(short) == 2
    err = capsys.readouterr().err
    assert "120000 points but the data set has 12000" in err
    assert "--cycle" in err and "cycle=True" not in err
    assert main([*short, "--cycle"]) == 0
    capsys.readouterr()
    ckpt = tmp_path / "c.npz"
    OnlineTensorPower(2, batch_size=100, random_state=0).save_checkpoint(ckpt)
    assert main([*base, "--rank", "2", "--batch-size", "1500", "--checkpoint", str(ckpt)]) == 2
    assert "--batch-size 1500 differs from the checkpoint" in capsys.readouterr().err
    assert main(["decompose", "--online", "a.npy", "--moment-of", "b.npy", "--rank", "2"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
