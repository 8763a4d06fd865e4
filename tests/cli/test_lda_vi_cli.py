"""``dptensor lda fit --method vi``: non-private and private fits, model files, transform, no leaks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dptensor.cli import main, observe_command
from dptensor.datasets.corpus import write_uci_bow
from dptensor.datasets.lda import make_lda_corpus
from dptensor.privacy.audit import observable_differences

VOCAB = [f"w{i}" for i in range(40)]


@pytest.fixture(scope="module")
def counts():
    corpus = make_lda_corpus(600, 40, 3, alpha=0.3, doc_length=40, topic_concentration=0.1, random_state=0)
    return corpus.counts


def _docword(tmp_path, counts, name="docword.toy.txt"):
    path = tmp_path / name
    write_uci_bow(counts, path, VOCAB)
    return path


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_fit_and_transform_non_private(tmp_path, capsys, counts, suffix):
    docword = _docword(tmp_path, counts)
    model = tmp_path / f"model{suffix}"
    assert main(["lda", "fit", str(docword), "--method", "vi", "--topics", "3", "--passes", "2",
                 "--batch-size", "100", "--seed", "0", "--quiet", "--out", str(model)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "topic   3" in out and "privacy: none" in out
    theta = tmp_path / "theta.npy"
    assert main(["lda", "transform", str(model), str(docword), "--out", str(theta)]) == 0
    proportions = np.load(theta)
    assert proportions.shape == (600, 3)
    np.testing.assert_allclose(proportions.sum(axis=1), 1.0)


def test_private_fit_on_text_with_public_vocabulary(tmp_path, capsys, counts):
    dense = counts[:400].toarray()
    lines = [" ".join(word for word, n in zip(VOCAB, row, strict=True) for _ in range(n)) for row in dense]
    text = tmp_path / "docs.txt"
    text.write_text("\n".join(line or "w0" for line in lines) + "\n")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    model = tmp_path / "model.json"
    argv = ["lda", "fit", str(text), "--method", "vi", "--topics", "2", "--epsilon", "1", "--delta", "1e-6",
            "--batch-size", "100", "--passes", "3", "--quiet", "--out", str(model),
            "--token-pattern", r"(?u)\b\w\w+\b"]  # the words w0 ... have digits
    # the vocabulary of a private fit must be public
    assert main(argv) == 2
    assert "--vocab" in capsys.readouterr().err
    assert main(argv + ["--vocab", str(vocab)]) == 0
    out = capsys.readouterr().out
    assert "(1, 1e-06)-DP under the 'document' relation" in out
    payload = json.loads(model.read_text())
    assert payload["model"] == "DPVariationalLDA" and payload["guarantee"]["holds"] is True
    assert payload["guarantee"]["epsilon"] == 1.0 and np.array(payload["components"]).shape == (2, 40)
    theta = tmp_path / "theta.csv"
    assert main(["lda", "transform", str(model), str(text), "--out", str(theta)]) == 0
    assert np.loadtxt(theta, delimiter=",", skiprows=1)[:, 1:].shape == (400, 2)


def test_private_refusals(tmp_path, capsys, counts):
    docword = _docword(tmp_path, counts)
    base = ["lda", "fit", str(docword), "--method", "vi", "--topics", "3", "--quiet"]
    assert main(base + ["--epsilon", "1"]) == 2
    assert "delta is required" in capsys.readouterr().err
    assert main(base + ["--epsilon", "1", "--delta", "1e-6", "--max-features", "10"]) == 2
    assert "public vocabulary" in capsys.readouterr().err
    assert main(base + ["--epsilon", "1", "--delta", "1e-6", "--accountant", "paper"]) == 2
    assert "allow-unproven" in capsys.readouterr().err
    # the spectral method is private with --epsilon too (PrivateSpectralLDA), and needs delta as well
    assert main(["lda", "fit", str(docword), "--topics", "3", "--epsilon", "1", "--quiet"]) == 2
    assert "delta" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [[], ["--accountant", "paper", "--allow-unproven"]])
def test_neighbouring_corpora_look_alike(tmp_path, monkeypatch, counts, extra):
    """Replace one document (by a very long one): exit code, printed lines and files agree."""
    other = counts.tolil(copy=True)
    other[5, :] = 0
    other[5, 0], other[5, 1] = 900, 300
    observations = []
    for name, matrix in (("a", counts), ("b", other.tocsr())):
        workdir = tmp_path / name
        workdir.mkdir()
        _docword(workdir, matrix)
        monkeypatch.chdir(workdir)
        argv = ["lda", "fit", "docword.toy.txt", "--method", "vi", "--topics", "3", "--epsilon", "1",
                "--delta", "1e-6", "--batch-size", "100", "--passes", "2", "--seed", "0",
                "--out", "model.json", *extra]  # fmt: skip
        observations.append(observe_command(argv, workdir))
    first, second = observations
    assert first.result == 0, first.printed
    assert observable_differences(first, second) == []


def test_private_defaults_and_huge_epsilon(tmp_path, capsys, counts):
    """Private defaults reach the CLI (full batch, C = 2, alpha 0.5); --epsilon 1e6 exits 2, one line."""
    docword = _docword(tmp_path, counts)
    base = ["lda", "fit", str(docword), "--method", "vi", "--topics", "3", "--delta", "1e-6", "--passes", "2",
            "--quiet", "--out", str(tmp_path / "m.json")]  # fmt: skip
    assert main(base + ["--epsilon", "1"]) == 0
    assert "doc_topic_prior = 0.5" in capsys.readouterr().out
    details = json.loads((tmp_path / "m.json").read_text())["guarantee"]["details"]
    assert (details["batch_size"], details["clip"], details["max_doc_length"]) == (600, 2.0, 500)
    assert main(base + ["--epsilon", "1", "--alpha0", "0.3"]) == 0
    assert "doc_topic_prior = 0.1" in capsys.readouterr().out  # an explicit --alpha0 is kept
    assert main(base + ["--epsilon", "1e6"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--epsilon" in err[0] and "1000" in err[0] and "reading" not in err[0]


def test_private_fit_from_the_moments(tmp_path, capsys, counts):
    """``--vi-init moments``: one composed guarantee in the model file; a minibatch is refused."""
    docword = _docword(tmp_path, counts)
    model = tmp_path / "model.json"
    argv = ["lda", "fit", str(docword), "--method", "vi", "--topics", "3", "--epsilon", "1",
            "--delta", "1e-6", "--passes", "2", "--vi-init", "moments", "--quiet", "--out", str(model)]
    assert main(argv) == 0
    saved = json.loads(model.read_text())
    text = json.dumps(saved)
    assert "moments, then full-batch VI" in text and '"start_share": 0.3' in text
    assert main([*argv, "--batch-size", "100"]) == 2
    assert "full-batch" in capsys.readouterr().err
