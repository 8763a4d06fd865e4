"""``lda fit --ledger``: a ledger that cannot pay refuses before the corpus is parsed (issue 53, finding 3).

The corpus's last line holds a byte that is not UTF-8 (or a count matrix's last row a negative
count): parsing the input finds it only at the end. The ledger is asked first, from the public
sizes (the number of lines, the vocabulary's size, a count matrix's header), so an exhausted ledger
refuses before that byte is seen; a ledger that can pay sees the bad input refused before any
charge, as before (an invalid file costs no budget).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.cli import main
from dptensor.datasets.corpus import public_corpus_shape
from dptensor.models._options import flat_params
from dptensor.privacy import BudgetLedger

WORDS = ["tensor", "power", "moment", "whiten", "privacy", "noise", "budget", "ledger"]


def _corpus(tmp_path, bad_last_line: bool = True) -> None:
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS[4 * (i % 2):4 * (i % 2) + 4], size=8)) for i in range(600)]
    body = "".join(line + "\n" for line in lines).encode("utf-8")
    (tmp_path / "notes.txt").write_bytes(body + (b"tensor \xff\xfe power\n" if bad_last_line else b""))
    (tmp_path / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")


def _ledgers(tmp_path) -> tuple[str, str]:
    """A ledger that cannot pay for an epsilon = 1 fit, and one that can."""
    paths = str(tmp_path / "empty.sqlite"), str(tmp_path / "full.sqlite")
    for path, epsilon, delta in zip(paths, ("0.5", "50"), ("1e-6", "1e-4"), strict=True):
        assert main(["budget", "create", path, "--epsilon", epsilon, "--delta", delta]) == 0
    return paths


FITS = {
    "spectral": ["--vocab", "vocab.txt"],
    "vi": ["--vocab", "vocab.txt", "--method", "vi", "--passes", "1"],
    "private-vocab": ["--private-vocab", "8", "--vocab-share", "0.5"],
    "vi-private-vocab": ["--private-vocab", "8", "--vocab-share", "0.5", "--method", "vi", "--passes", "1"],
}


@pytest.mark.parametrize("fit", sorted(FITS))
def test_an_exhausted_ledger_refuses_before_the_bad_last_line(tmp_path, monkeypatch, capsys, fit):
    monkeypatch.chdir(tmp_path)
    _corpus(tmp_path)
    empty, full = _ledgers(tmp_path)
    capsys.readouterr()
    argv = ["lda", "fit", "notes.txt", "--topics", "2", "--epsilon", "1", "--delta", "1e-7", "--quiet",
            *FITS[fit]]
    assert main([*argv, "--ledger", empty]) == 2
    err = capsys.readouterr().err
    assert "privacy budget exceeded" in err and "Nothing was charged" in err and "decode" not in err
    assert BudgetLedger(empty).charges() == []
    # a ledger that can pay: the bad byte is found, before any charge
    assert main([*argv, "--ledger", full]) == 2
    err = capsys.readouterr().err
    assert "privacy budget exceeded" not in err and "utf-8" in err.lower()
    assert BudgetLedger(full).charges() == []


def test_a_count_matrix_is_planned_from_its_header(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    counts = np.random.default_rng(1).poisson(1.0, (600, 8))
    counts[-1, 0] = -1  # out of the domain, in the last row
    sp.save_npz(tmp_path / "counts.npz", sp.csr_matrix(counts))
    assert public_corpus_shape(tmp_path / "counts.npz") == (600, 8)
    empty, full = _ledgers(tmp_path)
    capsys.readouterr()
    argv = ["lda", "fit", "counts.npz", "--topics", "2", "--epsilon", "1", "--delta", "1e-7", "--quiet"]
    assert main([*argv, "--ledger", empty]) == 2
    assert "privacy budget exceeded" in capsys.readouterr().err
    assert main([*argv, "--ledger", full]) == 2
    err = capsys.readouterr().err
    assert "privacy budget exceeded" not in err and "negative" in err
    assert BudgetLedger(empty).charges() == [] and BudgetLedger(full).charges() == []


def test_the_public_sizes_are_the_parsed_ones(tmp_path):
    """Counted without decoding: the same N as the parse (line ends of every kind), or None."""
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"a b\r\nc\rd e\n\nlast without newline")
    assert public_corpus_shape(path) == (5, None)
    path.write_bytes(b"a\n\xff\n")
    assert public_corpus_shape(path, vocabulary=None) == (2, None)
    (tmp_path / "v.txt").write_text("a\nb\nc\n", encoding="utf-8")
    assert public_corpus_shape(path, vocabulary=tmp_path / "v.txt") == (2, 3)
    assert public_corpus_shape(tmp_path / "missing.txt") is None
    from dptensor.datasets.corpus import read_text_documents

    path.write_bytes(b"a b\r\nc\rd e\n\nlast without newline")
    assert len(read_text_documents(path)) == public_corpus_shape(path)[0]


def test_a_ledger_that_can_pay_is_charged_what_it_was_asked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _corpus(tmp_path, bad_last_line=False)
    _, full = _ledgers(tmp_path)
    argv = ["lda", "fit", "notes.txt", "--topics", "2", "--epsilon", "1", "--delta", "1e-7", "--quiet",
            "--ledger", full, *FITS["private-vocab"]]
    assert main(argv) == 0
    assert len(BudgetLedger(full).charges()) == 2


def test_the_help_says_when_the_ledger_is_asked(capsys):
    assert main(["lda", "fit", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "asked for the whole run from the input's public sizes before the input is parsed" in help_text
    assert main(["single-topic", "fit", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "asked for the whole run from the input's public sizes before the input is parsed" in help_text
    assert main(["complete", "fit", "--help"]) == 0  # reads and checks its input first, and says so
    help_text = " ".join(capsys.readouterr().out.split())
    assert "before anything is computed from the data (the input is read and checked first" in help_text


@pytest.mark.parametrize("form", ["text", "ids"])
def test_single_topic_fit_asks_the_ledger_before_parsing(tmp_path, monkeypatch, capsys, form):
    monkeypatch.chdir(tmp_path)
    if form == "text":
        _corpus(tmp_path)
        corpus = ["notes.txt", "--vocab", "vocab.txt"]
    else:  # word ids whose last row holds an id outside the vocabulary
        ids = np.random.default_rng(0).integers(0, 8, (600, 5))
        ids[-1, 0] = 99
        np.save(tmp_path / "tokens.npy", ids)
        assert public_corpus_shape(tmp_path / "tokens.npy") == (600, None)
        corpus = ["tokens.npy", "--n-words", "8"]
    empty, full = _ledgers(tmp_path)
    capsys.readouterr()
    argv = ["single-topic", "fit", *corpus, "-k", "2", "--mechanism", "agn", "--epsilon", "1",
            "--delta", "1e-7", "--quiet"]
    assert main([*argv, "--ledger", empty]) == 2
    err = capsys.readouterr().err
    assert "privacy budget exceeded" in err and "the model of this run would bring" in err
    assert main([*argv, "--ledger", full]) == 2  # the bad input, before any charge
    assert "privacy budget exceeded" not in capsys.readouterr().err
    assert BudgetLedger(empty).charges() == [] and BudgetLedger(full).charges() == []


def test_complete_under_the_user_relation_asks_before_opening_a_file(tmp_path, monkeypatch, capsys):
    """The public sizes come from --shape: the ledger refuses before the ratings file is opened (it
    does not even exist here); one that can pay is charged what it was asked for."""
    monkeypatch.chdir(tmp_path)
    empty, full = _ledgers(tmp_path)
    capsys.readouterr()
    argv = ["complete", "missing.csv", "--shape", "30", "12", "2", "--rank", "2", "--privacy", "als",
            "--neighbouring", "user", "--epsilon", "1", "--delta", "1e-7", "--value-range", "1", "5",
            "--max-iter", "1", "--quiet"]
    assert main([*argv, "--ledger", empty]) == 2
    err = capsys.readouterr().err
    assert "privacy budget exceeded" in err and "the model of this run would bring" in err
    assert main([*argv, "--ledger", full]) == 2  # the missing file, before any charge
    assert "privacy budget exceeded" not in capsys.readouterr().err
    assert BudgetLedger(empty).charges() == [] and BudgetLedger(full).charges() == []
    rng = np.random.default_rng(0)
    rows = [f"{u},{i},{d},{v}" for u, i, d, v in zip(rng.integers(0, 30, 200), rng.integers(0, 12, 200),
                                                     rng.integers(0, 2, 200), rng.integers(1, 6, 200),
                                                     strict=True)]
    (tmp_path / "ratings.csv").write_text("\n".join(rows) + "\n")
    argv[1] = "ratings.csv"
    assert main([*argv, "--ledger", full]) == 0
    (charge,) = BudgetLedger(full).charges()
    from dptensor import TensorCompletion
    from dptensor.models.completion import CompletionOptions, plan_completion

    model = TensorCompletion(2, privacy="als", neighbouring="user", epsilon=1.0, delta=1e-7,
                             value_range=(1, 5), options=CompletionOptions(max_iter=1))
    planned = plan_completion(flat_params(model), (30, 12, 2), None).guarantee
    assert (charge.epsilon, charge.n_releases) == (planned.epsilon, planned.n_releases)
