"""Text files as people have them (issue 37): ``--token-pattern`` and ``--encoding``."""

import json
import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.cli import build_parser, main
from dptensor.cli._lda_transform import transform_token_pattern
from dptensor.datasets.corpus import (
    SKLEARN_TOKEN_PATTERN,
    decoding_error,
    load_corpus,
    load_text_corpus,
    load_vocabulary,
    read_text_documents,
)
from dptensor.models.topics.vectorizer import TOPIC_TOKEN_PATTERN, PrivateCountVectorizer

pytest.importorskip("sklearn")  # plain text is vectorised by scikit-learn

#: Two topics of letter words, with numbers, dates and ids mixed in.
SPORTS = ["goal", "match", "team", "score", "league", "coach"]
FOOD = ["bread", "cheese", "apple", "soup", "salad", "wine"]
NOISE = ["2019", "2021-03-04", "covid19", "id_42", "3rd"]


def _topic_lines(n=300, seed=0, words_per_doc=12):
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        topic = SPORTS if rng.random() < 0.5 else FOOD
        words = [str(rng.choice(topic)) for _ in range(words_per_doc)] + [str(rng.choice(NOISE))]
        lines.append(" ".join(words))
    return lines


def test_letter_pattern_keeps_words_of_letters_only():
    text = "The 2019-01-02 w0 don't café foo_bar abc123 naïve Übung x"
    assert re.findall(TOPIC_TOKEN_PATTERN, text) == ["The", "don't", "café", "naïve", "Übung"]
    assert "w0" in re.findall(SKLEARN_TOKEN_PATTERN, text)


def test_topic_pattern_keeps_contractions_whole_and_drops_a_possessive():
    """No contraction stub (``don``, ``ll``, ``ve``, ``t``) is ever a word (issue 52)."""
    text = "we'll I've can’t John's 'quoted' it's rock'n'roll ’twas mp3's x'y"
    words = re.findall(TOPIC_TOKEN_PATTERN, text)
    assert words == ["we'll", "I've", "can’t", "John", "quoted", "it", "rock'n'roll", "twas", "x'y"]
    assert not {"ll", "ve", "don", "s", "t"} & set(words)


def test_load_text_corpus_token_pattern(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_text("w0 w1 goal 2019\nw1 goal goal\n")
    default = load_text_corpus(path)  # the Python API keeps scikit-learn's default
    assert default.vocabulary == ["2019", "goal", "w0", "w1"]
    assert default.token_pattern == SKLEARN_TOKEN_PATTERN
    letters = load_text_corpus(path, token_pattern=TOPIC_TOKEN_PATTERN)
    assert letters.vocabulary == ["goal"] and letters.token_pattern == TOPIC_TOKEN_PATTERN
    np.testing.assert_array_equal(letters.counts.toarray(), [[1], [2]])
    assert load_corpus(path, token_pattern=TOPIC_TOKEN_PATTERN).vocabulary == ["goal"]


def test_fixed_vocabulary_the_pattern_cannot_produce(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_text("w0 w1 goal\n")
    with pytest.raises(ValueError, match=r"2 of the 2 vocabulary words \('w0', 'w1'\) are never tokens"):
        load_text_corpus(path, fixed_vocabulary=["w0", "w1"], token_pattern=TOPIC_TOKEN_PATTERN)
    with pytest.warns(UserWarning, match=r"1 of the 2 vocabulary words \('w0'\) are never tokens"):
        corpus = load_text_corpus(path, fixed_vocabulary=["goal", "w0"], token_pattern=TOPIC_TOKEN_PATTERN)
    np.testing.assert_array_equal(corpus.counts.toarray(), [[1, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_text_corpus(path, fixed_vocabulary=["goal", "w0"])  # scikit-learn's pattern produces both


def test_private_count_vectorizer_token_pattern():
    docs = ["tensor 2019 power w0", "power tensor 2020 w0"] * 2000
    words = PrivateCountVectorizer(20, epsilon=1, delta=1e-7, token_pattern=TOPIC_TOKEN_PATTERN,
                                   noise="numpy").fit(docs).get_feature_names_out()
    assert list(words) == ["power", "tensor"]


def test_lda_fit_defaults_to_letter_words_and_records_the_pattern(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs.txt").write_text("\n".join(_topic_lines()) + "\n")
    assert main(["lda", "fit", "docs.txt", "-k", "2", "--seed", "0", "--quiet", "--out", "model.json"]) == 0
    model = json.loads((tmp_path / "model.json").read_text())
    assert sorted(model["vocabulary"]) == sorted(SPORTS + FOOD)  # no numbers, dates or ids
    assert model["token_pattern"] == TOPIC_TOKEN_PATTERN
    out = capsys.readouterr().out
    assert "topic   2" in out and not any(word in out.split() for word in NOISE)  # no number is a top word
    # lda transform splits new text the same way; a different --token-pattern is refused
    assert main(["lda", "transform", "model.json", "docs.txt", "--out", "theta.npy"]) == 0
    assert np.load(tmp_path / "theta.npy").shape == (300, 2)
    capsys.readouterr()
    assert main(["lda", "transform", "model.json", "docs.txt", "--token-pattern", SKLEARN_TOKEN_PATTERN]) == 2
    assert "the model was fitted with the token pattern" in capsys.readouterr().err


def test_lda_transform_uses_the_recorded_pattern_with_digit_words(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    numbered = {w: f"w{i}" for i, w in enumerate(SPORTS + FOOD)}
    lines = [" ".join(numbered.get(w, w) for w in line.split()) for line in _topic_lines()]
    (tmp_path / "docs.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "vocab.txt").write_text("\n".join(numbered.values()) + "\n")
    # the letters-only default can produce none of the words: an error, not a fit on empty documents
    assert main(["lda", "fit", "docs.txt", "--vocab", "vocab.txt", "-k", "2", "--quiet"]) == 2
    assert "--token-pattern" in capsys.readouterr().err
    assert main(["lda", "fit", "docs.txt", "--vocab", "vocab.txt", "-k", "2", "--seed", "0", "--quiet",
                 "--token-pattern", SKLEARN_TOKEN_PATTERN, "--out", "model.npz"]) == 0
    # no --token-pattern: the model file's (the letters-only default would count no word: an error)
    assert main(["lda", "transform", "model.npz", "docs.txt", "--out", "theta.npy"]) == 0
    theta = np.load(tmp_path / "theta.npy")
    assert theta.shape == (300, 2) and not np.allclose(theta, theta[0])


def test_transform_token_pattern_of_old_and_count_matrix_files():
    assert transform_token_pattern({}, None) == SKLEARN_TOKEN_PATTERN  # written before it was recorded
    # a count matrix: scikit-learn's pattern splits out every word its vocabulary may hold (w0, zzz_x)
    assert transform_token_pattern({"token_pattern": None}, None) == SKLEARN_TOKEN_PATTERN
    assert transform_token_pattern({"token_pattern": None}, r"\w+") == r"\w+"
    assert transform_token_pattern({"token_pattern": "a+"}, "a+") == "a+"
    with pytest.raises(ValueError, match="fitted with the token pattern"):
        transform_token_pattern({}, TOPIC_TOKEN_PATTERN)


def test_token_pattern_help_and_refusals(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    parser = build_parser()
    for argv in (["lda", "fit"], ["lda", "transform"], ["single-topic", "fit"], ["audit", "lda"]):
        sub = parser
        for name in argv:
            subparsers = next(a for a in sub._actions if isinstance(a.choices, dict) and name in a.choices)
            sub = subparsers.choices[name]
        help_text = " ".join(sub.format_help().split())
        assert "--token-pattern" in help_text and "--encoding" in help_text, argv
        if argv == ["lda", "fit"]:
            assert "two or more letters, no digits or underscores" in help_text
    sp.save_npz(tmp_path / "c.npz", sp.csr_matrix(np.ones((5, 4), dtype=np.int64)))
    assert main(["lda", "fit", "c.npz", "-k", "2", "--token-pattern", r"\w+"]) == 2
    assert "--token-pattern" in capsys.readouterr().err
    assert main(["single-topic", "fit", "c.npz", "-k", "2", "--token-pattern", r"\w+"]) == 2
    assert "--token-pattern" in capsys.readouterr().err
    assert main(["lda", "fit", "c.npz", "-k", "2", "--token-pattern", "("]) == 2
    assert "not a valid regular expression" in capsys.readouterr().err
    assert main(["lda", "fit", "c.npz", "-k", "2", "--encoding", "klingon"]) == 2
    assert "unknown encoding 'klingon'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- encodings

#: A Windows (cp1252) export: curly quotes 0x93/0x94 on the third line.
CP1252_LINES = ["goal match team score", "bread cheese soup wine", "he said \u201cgoal\u201d twice",
                "apple salad"]


def _cp1252_corpus(path, n=60):
    lines = [CP1252_LINES[i % len(CP1252_LINES)] for i in range(n)]
    path.write_bytes(("\n".join(lines) + "\n").encode("cp1252"))
    return path


def test_decoding_error_names_file_line_byte_and_advice(tmp_path):
    path = _cp1252_corpus(tmp_path / "export.txt")
    with pytest.raises(ValueError) as info:
        read_text_documents(path)
    message = str(info.value)
    assert message == (f"{path}, line 3: not valid utf-8 (byte 0x93 at column 9); pass --encoding cp1252 "
                       "(or latin-1) if the file is a Windows/Latin export")
    assert read_text_documents(path, encoding="cp1252")[2] == "he said \u201cgoal\u201d twice"
    with pytest.raises(ValueError) as info:
        read_text_documents(path, private=True)
    assert str(info.value) == (f"{path}: not valid utf-8 (which document, line and byte are not shown: the "
                               "documents are private); pass --encoding cp1252 (or latin-1) if the file is "
                               "a Windows/Latin export")
    crlf = tmp_path / "crlf.txt"  # \r\n counts as one line end; the column counts characters
    crlf.write_bytes("caf\u00e9 ok\r\nfine\r\n\u00e9t\u00e9 ".encode("utf-8") + b"\x93")
    expected = f"{crlf}, line 3: not valid utf-8 (byte 0x93 at column 5)"
    assert str(decoding_error(crlf, "utf-8")).startswith(expected)
    assert "latin-1 reads any byte" in str(decoding_error(crlf, "ascii"))


def test_decoding_errors_of_a_folder_and_a_vocabulary(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("goal match\n")
    (folder / "b.txt").write_bytes(b"caf\xe9 goal\n")
    with pytest.raises(ValueError, match=r"b\.txt, line 1: not valid utf-8 \(byte 0xe9 at column 4\)"):
        read_text_documents(folder)
    with pytest.raises(ValueError) as info:  # private: which file failed is not named
        read_text_documents(folder, private=True)
    message = str(info.value)
    assert message.startswith(f"{folder}: not valid utf-8 (which document") and "b.txt" not in message
    assert read_text_documents(folder, encoding="latin-1")[1] == "caf\u00e9 goal\n"
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes(b"goal\ncaf\xe9\n")
    with pytest.raises(ValueError, match=r"vocab\.txt, line 2: not valid utf-8 \(byte 0xe9 at column 4\)"):
        load_vocabulary(vocab)
    assert load_vocabulary(vocab, encoding="cp1252") == ["goal", "caf\u00e9"]


def test_cli_encoding_public_and_private_paths(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _cp1252_corpus(tmp_path / "export.txt")
    (tmp_path / "vocab.txt").write_text("goal\nmatch\nteam\nscore\nbread\ncheese\nsoup\nwine\napple\nsalad\n")
    public = ["lda", "fit", "export.txt", "-k", "2", "--seed", "0", "--quiet"]
    assert main(public) == 2
    err = capsys.readouterr().err
    assert "export.txt, line 3: not valid utf-8 (byte 0x93 at column 9); pass --encoding cp1252" in err
    assert main([*public, "--encoding", "cp1252"]) == 0
    capsys.readouterr()
    private_runs = [
        ["lda", "fit", "export.txt", "-k", "2", "--vocab", "vocab.txt", "--epsilon", "1", "--delta", "1e-6"],
        ["lda", "fit", "export.txt", "-k", "2", "--method", "vi", "--vocab", "vocab.txt", "--epsilon", "1",
         "--delta", "1e-6"],
        ["lda", "fit", "export.txt", "-k", "2", "--private-vocab", "10", "--epsilon", "1", "--delta", "1e-6"],
        ["single-topic", "fit", "export.txt", "-k", "2", "--vocab", "vocab.txt", "--mechanism", "agn",
         "--epsilon", "1", "--delta", "1e-6"],
        ["audit", "lda", "export.txt", "-k", "2", "--vocab", "vocab.txt", "--epsilon", "1",
         "--delta", "1e-6"],
    ]
    for argv in private_runs:
        assert main([*argv, "--quiet"]) == 2, argv
        err = capsys.readouterr().err
        assert "export.txt: not valid utf-8 (which document, line and byte are not shown" in err, argv
        assert "line 3" not in err and "0x93" not in err and "column" not in err, argv
        assert "pass --encoding cp1252 (or latin-1)" in err
    assert main([*private_runs[0], "--encoding", "cp1252", "--quiet", "--out", "model.json"]) == 0
    capsys.readouterr()
    assert main(["lda", "transform", "model.json", "export.txt"]) == 2  # lda transform is not private
    assert "export.txt, line 3: not valid utf-8 (byte 0x93" in capsys.readouterr().err
    assert main(["lda", "transform", "model.json", "export.txt", "--encoding", "cp1252",
                 "--out", "t.npy"]) == 0
    assert np.load(tmp_path / "t.npy").shape == (60, 2)


def test_a_docword_name_that_is_not_uci_is_plain_text_in_every_command(tmp_path, capsys):
    """``docword.notes`` is plain text for every reader: a private fit still needs a public vocabulary.

    (The CLIs took any ``docword.*`` name for counts while the reader took it for text, so a private
    fit learned its vocabulary from the documents without noise.)
    """
    path = tmp_path / "docword.notes"
    path.write_text("apple banana cherry\nbanana cherry apple\ncherry cherry banana\n" * 100)
    assert main(["lda", "fit", str(path), "--topics", "2", "--epsilon", "2", "--delta", "1e-6",
                 "--force"]) == 2
    assert "public vocabulary" in capsys.readouterr().err
    assert main(["single-topic", "fit", str(path), "-k", "2", "--mechanism", "agn", "--epsilon", "1",
                 "--delta", "1e-6"]) == 2
    assert "needs a public vocabulary (--vocab FILE)" in capsys.readouterr().err


def test_a_broken_pipe_that_is_not_standard_output_is_an_error(monkeypatch, capsys):
    """Only a closed standard output ends a command quietly; another broken pipe is reported."""
    from dptensor.cli import decompose

    def broken(args):  # noqa: ANN001, ANN202 - a command whose --out FIFO lost its reader
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(decompose, "run", broken)
    assert main(["decompose", "--example", "--quiet"]) == 2
    assert "Broken pipe" in capsys.readouterr().err
