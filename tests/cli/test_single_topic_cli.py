"""``dptensor single-topic fit``: input forms, the recorded guarantee, errors, no side channels."""

from __future__ import annotations

import json

import numpy as np
import scipy.sparse as sp

from dptensor.cli import main, observe_command
from dptensor.datasets import make_single_topic_corpus
from dptensor.privacy.audit import observable_differences


def _write_inputs(tmp_path):
    corpus = make_single_topic_corpus(5000, 8, 3, random_state=0)
    words = [f"w{c}" for c in "abcdefgh"]  # letters only: the text commands' default token pattern
    np.save(tmp_path / "tokens.npy", corpus.tokens)
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    lines = (" ".join(words[t] for t in row) for row in corpus.tokens)
    (tmp_path / "docs.txt").write_text("\n".join(lines) + "\n")
    sp.save_npz(tmp_path / "counts.npz", corpus.counts.tocsr())
    return corpus


def test_private_fit_writes_model_and_guarantee(tmp_path, capsys):
    _write_inputs(tmp_path)
    out = tmp_path / "model.json"
    argv = ["single-topic", "fit", str(tmp_path / "tokens.npy"), "-k", "3", "--n-words", "8",
            "--mechanism", "agn", "--epsilon", "2", "--delta", "1e-6", "--seed", "0", "--quiet",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "(2, 1e-06)-DP under the 'document' relation" in printed and "topic   3" in printed
    model = json.loads(out.read_text())
    assert model["guarantee"]["holds"] and model["guarantee"]["epsilon"] == 2.0
    assert model["params"]["moments"] == "first3" and np.shape(model["components"]) == (3, 8)
    assert model["n_documents"] == 5000 and model["n_words"] == 8


def test_text_with_vocabulary_and_count_files(tmp_path, capsys):
    _write_inputs(tmp_path)
    text = ["single-topic", "fit", str(tmp_path / "docs.txt"), "-k", "3", "--quiet"]
    vocab = str(tmp_path / "vocab.txt")
    assert main(text + ["--vocab", vocab, "--mechanism", "avn", "--epsilon", "5", "--delta", "1e-6",
                        "--top", "3"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "moments first3" in printed and "w" in printed.splitlines()[-1]
    assert main(text + ["--mechanism", "agn", "--epsilon", "1", "--delta", "1e-6"]) == 2
    assert "needs a public vocabulary (--vocab FILE)" in capsys.readouterr().err
    assert main(["single-topic", "fit", str(tmp_path / "counts.npz"), "-k", "3", "--quiet"]) == 0
    assert "moments all" in capsys.readouterr().out
    counts = str(tmp_path / "counts.npz")
    assert main(["single-topic", "fit", counts, "-k", "3", "--moments", "first3"]) == 2
    assert "does not record word order" in capsys.readouterr().err


def test_short_documents_and_budget_errors(tmp_path, capsys):
    tokens = [[0, 1, 2], [1, 1, 1], [2, 0]]
    words = ["alpha", "beta", "gamma"]  # CountVectorizer's tokens have two characters or more
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    (tmp_path / "docs.txt").write_text("\n".join(" ".join(words[t] for t in d) for d in tokens) + "\n")
    vocab = str(tmp_path / "vocab.txt")
    argv = ["single-topic", "fit", str(tmp_path / "docs.txt"), "-k", "2", "--vocab", vocab]
    assert main(argv + ["--mechanism", "agn", "--epsilon", "1", "--delta", "1e-6"]) == 2
    err = capsys.readouterr().err
    assert "has documents with fewer than 3 tokens;" in err and "rows" not in err  # private: no row named
    assert main(argv) == 2  # not private: the rows are named
    assert "1 document(s) with fewer than 3 tokens (rows 2)" in capsys.readouterr().err
    assert main(argv + ["--epsilon", "1", "--delta", "1e-6"]) == 2
    assert "--epsilon, --delta: privacy options need --mechanism" in capsys.readouterr().err


def test_neighbouring_corpora_look_the_same_from_the_command_line(tmp_path, monkeypatch):
    """Exit code, printed lines (numbers masked) and the files' structure do not depend on the data."""
    corpus = make_single_topic_corpus(3000, 8, 3, random_state=1)
    neighbour = corpus.tokens.copy()
    neighbour[0] = [7, 7, 7]
    argv = ["single-topic", "fit", "tokens.npy", "-k", "3", "--n-words", "8", "--mechanism", "dp_tpm",
            "--epsilon", "1", "--delta", "1e-6", "--out", "model.json"]  # fmt: skip
    observations = []
    for name, tokens in (("a", corpus.tokens), ("b", neighbour)):
        folder = tmp_path / name
        folder.mkdir()
        np.save(folder / "tokens.npy", tokens)
        monkeypatch.chdir(folder)  # same relative paths, so the echoed arguments agree too
        observations.append(observe_command(argv, folder))
    assert observations[0].result == 0
    assert len(observations[0].printed.splitlines()) >= 6  # sizes, guarantee, three topics, file
    assert observable_differences(*observations) == []
    assert observations[0].attributes == observations[1].attributes


def test_fits_are_charged_to_a_budget_ledger(tmp_path, capsys):
    _write_inputs(tmp_path)
    ledger = str(tmp_path / "budget.ledger")
    # exactly composed at delta = 1e-5: the AVN fit alone costs 0.92, both fits 1.24
    assert main(["budget", "create", ledger, "--epsilon", "1.1", "--delta", "1e-5"]) == 0
    base = ["single-topic", "fit", str(tmp_path / "tokens.npy"), "-k", "3", "--n-words", "8", "--quiet",
            "--ledger", ledger, "--delta", "1e-6", "--epsilon", "1"]  # fmt: skip
    assert main(base + ["--mechanism", "avn"]) == 0  # Gaussian + pure release, composed by the ledger
    capsys.readouterr()
    out = tmp_path / "second.json"
    assert main(base + ["--mechanism", "agn", "--out", str(out)]) == 2  # would exceed epsilon = 1.1
    assert "budget" in capsys.readouterr().err.lower() and not out.exists()
    assert main(["single-topic", "fit", str(tmp_path / "tokens.npy"), "-k", "3", "--n-words", "8",
                 "--ledger", ledger]) == 2  # nothing private to charge
    assert "nothing to charge" in capsys.readouterr().err
