"""The ``dptensor decompose`` command (non-online modes)."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.cli import main
from dptensor.datasets import make_orthogonal_tensor


def test_example_runs_and_reports_recovery(tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main(["decompose", "--example", "--seed", "0", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "recovery vs truth" in text
    payload = json.loads(out.read_text())
    assert len(payload["weights"]) == 3
    assert np.array(payload["factors"]).shape == (50, 3)
    assert min(payload["recovery"]["inner"]) > 0.99


def test_dense_tensor_file(tmp_path, capsys):
    tensor, weights, _, _ = make_orthogonal_tensor(10, 2, random_state=0)
    np.save(tmp_path / "t.npy", tensor)
    assert main(["decompose", str(tmp_path / "t.npy"), "--rank", "2", "--out", str(tmp_path / "r.json")]) == 0
    result = json.loads((tmp_path / "r.json").read_text())
    np.testing.assert_allclose(result["weights"], weights, rtol=1e-8)


@pytest.mark.parametrize("sparse", [False, True])
def test_moment_of_data_matrix(tmp_path, sparse):
    X = np.zeros((30, 6))
    X[:20, 0], X[20:, 1] = 1.0, 2.0  # moment = (20/30) e1^3 + (80/30) e2^3
    path = tmp_path / ("X.npz" if sparse else "X.npy")
    sp.save_npz(path, sp.csr_matrix(X)) if sparse else np.save(path, X)
    out = tmp_path / "r.json"
    assert main(["decompose", "--moment-of", str(path), "--rank", "2", "--out", str(out)]) == 0
    np.testing.assert_allclose(json.loads(out.read_text())["weights"], [80 / 30, 20 / 30], rtol=1e-10)


def test_errors_are_reported_with_exit_status_2(tmp_path, capsys):
    assert main(["decompose", str(tmp_path / "missing.npy"), "--rank", "2"]) == 2
    assert "no such file" in capsys.readouterr().err
    np.save(tmp_path / "t.npy", np.ones((3, 3, 3)))
    assert main(["decompose", str(tmp_path / "t.npy")]) == 2
    assert "--rank is required" in capsys.readouterr().err
    assert main(["decompose", str(tmp_path / "t.npy"), "--rank", "9"]) == 2
    assert "at most the tensor dimension" in capsys.readouterr().err
