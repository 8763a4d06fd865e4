"""``dptensor lda fit --epsilon``: the guarantee is printed and recorded; nothing else leaks."""

import json
import re

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.cli import main, observe_command
from dptensor.datasets.lda import make_lda_corpus
from dptensor.privacy.audit import observable_differences


@pytest.fixture(scope="module")
def counts():
    corpus = make_lda_corpus(3000, 30, 3, alpha=0.1, doc_length=40, topic_concentration=0.1, random_state=0)
    return corpus.counts


def test_private_fit_prints_and_records_the_guarantee(tmp_path, counts, capsys):
    path = tmp_path / "corpus.npz"
    sp.save_npz(path, counts)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(f"w{i}" for i in range(30)) + "\n")
    model = tmp_path / "model.json"
    assert main(["lda", "fit", str(path), "--vocab", str(vocab), "--topics", "3", "--alpha0", "0.3",
                 "--epsilon", "1", "--delta", "1e-6", "--quiet", "--out", str(model)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "guarantee: (1, 1e-06)-DP under the 'document' relation" in out
    assert "topic   3" in out
    payload = json.loads(model.read_text())
    assert payload["model"] == "PrivateSpectralLDA" and payload["guarantee"]["holds"] is True
    assert "timings" not in payload and "n_dropped_documents" not in payload
    theta = tmp_path / "theta.npy"
    assert main(["lda", "transform", str(model), str(path), "--out", str(theta)]) == 0
    assert np.load(theta).shape == (3000, 3)


def test_private_fit_refusals(tmp_path, counts, capsys):
    text = tmp_path / "docs.txt"
    text.write_text("apple banana cherry\nbanana cherry apple apple\ncherry cherry banana\n")
    assert main(["lda", "fit", str(text), "--topics", "1", "--epsilon", "1", "--delta", "1e-6"]) == 2
    assert "public vocabulary" in capsys.readouterr().err
    path = tmp_path / "corpus.npz"
    sp.save_npz(path, counts)
    assert main(["lda", "fit", str(path), "--topics", "3", "--epsilon", "1", "--delta", "1e-6",
                 "--config", "2", "--quiet"]) == 2  # fmt: skip
    assert "--allow-unproven" in capsys.readouterr().err
    assert main(["lda", "fit", str(path), "--topics", "3", "--epsilon", "1", "--delta", "1e-6",
                 "--config", "2", "--allow-unproven", "--quiet"]) == 0  # fmt: skip
    assert "NOT PRIVATE" in capsys.readouterr().out
    assert main(["lda", "fit", str(path), "--topics", "3", "--epsilon", "1", "--delta", "1e-6",
                 "--budget-split", "e3=1,e4=1", "--quiet"]) == 2  # fmt: skip
    assert "missing" in capsys.readouterr().err
    short = sp.csr_matrix(np.vstack([counts[:10].toarray(), np.eye(30)[:1] * 2]))
    sp.save_npz(tmp_path / "short.npz", short)
    assert main(["lda", "fit", str(tmp_path / "short.npz"), "--topics", "3", "--epsilon", "1",
                 "--delta", "1e-6", "--no-clip", "--quiet"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "has documents with fewer than 3 tokens" in err and "10" not in err  # a private path: no row
    # clipped (the default): a short document gets weight 0, no error (--force: 11 documents are too few)
    assert main(["lda", "fit", str(tmp_path / "short.npz"), "--topics", "3", "--epsilon", "1",
                 "--delta", "1e-6", "--quiet", "--force"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["lda", "fit", str(path), "--topics", "3", "--clip", "0.1", "--quiet"]) == 2
    assert "--clip" in capsys.readouterr().err
    assert main(["lda", "fit", str(path), "--topics", "3", "--epsilon", "1", "--delta", "1e-6",
                 "--clip", "0.1", "--no-clip", "--quiet"]) == 2  # fmt: skip
    assert "--clip" in capsys.readouterr().err


@pytest.mark.parametrize("config", ["1", "3"])
def test_neighbouring_corpora_observe_the_same_command_output(tmp_path, counts, config, monkeypatch):
    first = counts.tolil(copy=True)
    second = first.copy()
    second[0, :] = 0
    second[0, 7] = 25
    observations = []
    for name, matrix in (("a", first), ("b", second)):
        work = tmp_path / name
        work.mkdir()
        sp.save_npz(work / "corpus.npz", matrix.tocsr())
        monkeypatch.chdir(work)  # identical relative paths in both runs
        observations.append(observe_command(
            ["lda", "fit", "corpus.npz", "--topics", "3", "--alpha0", "0.3", "--epsilon", "1", "--delta",
             "1e-6", "--config", config, "--allow-unproven", "--seed", "0", "--out", "model.json"],
            work,
        ))  # fmt: skip
    assert observations[0].attributes[0] == ("exit_code", 0)
    assert observable_differences(*observations) == []


def test_private_fit_prints_no_durations(tmp_path, counts, capsys):
    """Wall-clock seconds depend on the documents: a private fit prints step names, never durations."""
    path = tmp_path / "corpus.npz"
    sp.save_npz(path, counts)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(f"w{i}" for i in range(30)) + "\n")
    assert main(["lda", "fit", str(path), "--vocab", str(vocab), "--topics", "3", "--alpha0", "0.3",
                 "--epsilon", "1", "--delta", "1e-6"]) == 0  # fmt: skip
    printed = capsys.readouterr()
    assert "[spectral-lda]" in printed.err  # progress is on (no --quiet) ...
    assert not re.search(r"\d s\b|fitted in", printed.out + printed.err)  # ... without any timing



@pytest.mark.parametrize("row", ["max float", "two 1e308", "empty"])
def test_extreme_neighbour_observes_the_same_command_output(tmp_path, counts, row, monkeypatch):
    """Clipped (default) fit through the CLI: an extreme document changes nothing observable but the release.

    Issue 27 finding 1 (the neighbour used to warn, raise, or exit 2 with no file)."""
    first = counts.tolil(copy=True)
    second = first.copy().astype(np.float64)
    second[0, :] = 0
    if row == "max float":
        second[0, 3] = np.finfo(float).max
    elif row == "two 1e308":
        second[0, 3] = second[0, 4] = 1e308
    observations = []
    for name, matrix in (("a", first), ("b", second)):
        work = tmp_path / name
        work.mkdir()
        sp.save_npz(work / "corpus.npz", sp.csr_matrix(matrix, dtype=np.float64))
        monkeypatch.chdir(work)
        observations.append(observe_command(
            ["lda", "fit", "corpus.npz", "--topics", "3", "--alpha0", "0.3", "--epsilon", "1", "--delta",
             "1e-6", "--seed", "0", "--out", "model.json"],
            work,
        ))  # fmt: skip
    assert observations[0].attributes[0] == ("exit_code", 0)
    assert observable_differences(*observations) == []


#: A plain-text corpus with a blank line (row 2), a whitespace-only line (row 4) and a line of
#: unknown words (row 5): every line is a document (issue 36), so that N does not depend on whether
#: a document is empty and the rows of ``lda transform`` are the file's lines.
BLANK_LINES = "wa wb wc wd\nwb wc wc\n\nwd wd wa wb\n   \nrare unknown words\nwa wa wb\n"


@pytest.mark.parametrize("fit_options", [
    [],  # non-private spectral
    ["--epsilon", "1", "--delta", "1e-6", "--force"],  # private spectral (clipped; 7 documents)
    ["--method", "vi", "--epsilon", "1", "--delta", "1e-6", "--passes", "1"],  # DP-VI
])
def test_every_line_of_a_text_corpus_is_a_document(tmp_path, monkeypatch, capsys, fit_options):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs.txt").write_text(BLANK_LINES)
    (tmp_path / "vocab.txt").write_text("wa\nwb\nwc\nwd\n")
    lines = BLANK_LINES.count("\n")
    assert main(["lda", "fit", "docs.txt", "--vocab", "vocab.txt", "-k", "2", "--seed", "0",
                 "--out", "model.json", *fit_options]) == 0
    assert f"{lines} documents" in capsys.readouterr().err
    if fit_options:  # private: N is public and counts every line (the non-private fit leaves short ones out)
        assert json.loads((tmp_path / "model.json").read_text())["n_documents"] == lines
    assert main(["lda", "transform", "model.json", "docs.txt", "--vocab", "vocab.txt",
                 "--out", "theta.csv"]) == 0
    rows = (tmp_path / "theta.csv").read_text().splitlines()[1:]
    assert [int(row.split(",")[0]) for row in rows] == list(range(lines))  # row i is line i + 1


def test_single_topic_fit_reads_a_blank_line_as_a_document(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs.txt").write_text("wa wb wc wd\nwb wc wc\n\nwd wd wa wb\n")
    (tmp_path / "vocab.txt").write_text("wa\nwb\nwc\nwd\n")
    assert main(["single-topic", "fit", "docs.txt", "--vocab", "vocab.txt", "-k", "2"]) == 2
    assert "1 document(s) with fewer than 3 tokens (rows 2)" in capsys.readouterr().err  # the blank line


@pytest.mark.parametrize("privacy", [[], ["--epsilon", "0.3", "--delta", "1e-6"]])
def test_printed_topic_priors_are_the_prior_transform_uses(tmp_path, counts, capsys, privacy):
    """The printed alpha of each topic is document_topic_prior(), which sums to alpha_0.

    A private fit's raw moment estimate ``alpha_`` is a noisy release that can be far from it (a user
    saw alpha=79039.68 printed under "alpha_0 = 1").
    """
    path = tmp_path / "corpus.npz"
    sp.save_npz(path, counts)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(f"w{i}" for i in range(30)) + "\n")
    assert main(["lda", "fit", str(path), "--vocab", str(vocab), "--topics", "3", "--alpha0", "0.3",
                 "--quiet", "--seed", "0", *privacy]) == 0  # fmt: skip
    printed = [float(a) for a in re.findall(r"alpha=([0-9.]+)", capsys.readouterr().out)]
    assert len(printed) == 3 and sum(printed) == pytest.approx(0.3, abs=2e-4)
