"""Corpus readers (plain text, UCI bag-of-words, Matrix Market, .npz) and the LDA generator."""

import gzip

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from dptensor.datasets.corpus import (
    Corpus,
    load_corpus,
    load_npz_counts,
    load_text_corpus,
    load_uci_bow,
    load_vocabulary,
    most_frequent_words,
    write_uci_bow,
)
from dptensor.datasets.lda import make_lda_corpus

DOCS = [
    "The cat sat on the mat",
    "the dog ate the cat food",
    "",
    "A dog and a cat and a mat",
]


def test_text_file_one_document_per_line(tmp_path):
    pytest.importorskip("sklearn")  # plain text is vectorised by scikit-learn
    path = tmp_path / "docs.txt"
    path.write_text("\n".join(DOCS) + "\n")
    corpus = load_text_corpus(path)
    assert corpus.n_documents == 4  # every line is a document, the blank one too (an empty row)
    assert corpus.counts[2].sum() == 0
    vocab = corpus.vocabulary
    assert corpus.counts[0, vocab.index("the")] == 2
    assert corpus.counts.dtype == np.int64
    stop = load_text_corpus(path, stop_words="english")
    assert "the" not in stop.vocabulary and "cat" in stop.vocabulary
    top = load_text_corpus(path, max_features=2)
    assert top.n_words == 2 and set(top.vocabulary) == {"cat", "the"}
    rare = load_text_corpus(path, min_df=2)
    assert "food" not in rare.vocabulary and "dog" in rare.vocabulary
    fixed = load_text_corpus(path, fixed_vocabulary=["mat", "cat", "zebra"])
    np.testing.assert_array_equal(fixed.counts.toarray(), [[1, 1, 0], [0, 1, 0], [0, 0, 0], [1, 1, 0]])


def test_text_folder(tmp_path):
    pytest.importorskip("sklearn")  # plain text is vectorised by scikit-learn
    for i, doc in enumerate(DOCS):
        (tmp_path / f"doc{i}.txt").write_text(doc)
    (tmp_path / "notes.md").write_text("ignored")
    corpus = load_corpus(tmp_path)
    assert corpus.n_documents == 4
    assert corpus.counts[2].sum() == 0


def test_uci_roundtrip_streamed_and_gzip(tmp_path):
    corpus = make_lda_corpus(300, 40, 3, random_state=0)
    vocab = [f"word{i}" for i in range(40)]
    docword = tmp_path / "docword.toy.txt"
    write_uci_bow(corpus.counts, docword, vocab)
    assert load_vocabulary(tmp_path / "vocab.toy.txt") == vocab
    loaded = load_uci_bow(docword, chunk_bytes=64)  # tiny chunks: lines split across reads
    assert (loaded.counts != corpus.counts).nnz == 0
    assert loaded.vocabulary == vocab
    gz = tmp_path / "docword.toy.txt.gz"
    with gzip.open(gz, "wb") as f:
        f.write(docword.read_bytes())
    assert (load_corpus(gz).counts != corpus.counts).nnz == 0
    trimmed = load_corpus(docword, max_features=5)
    assert trimmed.n_words == 5 and len(trimmed.vocabulary) == 5


def test_uci_bad_files(tmp_path):
    bad = tmp_path / "docword.bad.txt"
    bad.write_text("2\n3\n2\n1 1 2\n3 1 1\n")
    with pytest.raises(ValueError, match="outside"):
        load_uci_bow(bad)
    bad.write_text("2\n3\n2\n1 1 -2\n2 1 1\n")
    with pytest.raises(ValueError, match="negative"):
        load_uci_bow(bad)
    bad.write_text("2\n3\n2\n1 1 1.5\n2 1 1\n")
    with pytest.raises(ValueError, match="non-integer"):
        load_uci_bow(bad)
    bad.write_text("two\n3\n")
    with pytest.raises(ValueError, match="header"):
        load_uci_bow(bad)
    bad.write_text("2\n3\n2\n1 1\n")
    with pytest.raises(ValueError, match="triples"):
        load_uci_bow(bad)
    with pytest.raises(FileNotFoundError):
        load_uci_bow(tmp_path / "docword.missing.txt")


def test_matrix_market_and_npz(tmp_path):
    counts = make_lda_corpus(50, 20, 2, random_state=1).counts
    scipy.io.mmwrite(str(tmp_path / "c.mtx"), counts)
    sp.save_npz(tmp_path / "c.npz", counts)
    (tmp_path / "v.txt").write_text("\n".join(f"w{i}" for i in range(20)) + "\n")
    mtx = load_corpus(tmp_path / "c.mtx", vocabulary=tmp_path / "v.txt")
    npz = load_corpus(tmp_path / "c.npz")
    assert (mtx.counts != counts).nnz == 0 and mtx.vocabulary[3] == "w3"
    assert (npz.counts != counts).nnz == 0 and npz.vocabulary is None
    (tmp_path / "short.txt").write_text("a\nb\n")
    with pytest.raises(ValueError, match="vocabulary has 2 words"):
        load_corpus(tmp_path / "c.mtx", vocabulary=tmp_path / "short.txt")
    sp.save_npz(tmp_path / "neg.npz", sp.csr_matrix(-np.ones((2, 2))))
    with pytest.raises(ValueError, match="negative"):
        load_corpus(tmp_path / "neg.npz")


def test_vocabulary_length_mismatch(tmp_path):
    counts = sp.csr_matrix(np.ones((3, 4), dtype=np.int64))
    sp.save_npz(tmp_path / "c.npz", counts)
    (tmp_path / "v.txt").write_text("a\nb\n")
    with pytest.raises(ValueError, match="vocabulary has 2 words"):
        load_npz_counts(tmp_path / "c.npz", vocabulary=tmp_path / "v.txt")


def test_empty_text_corpus(tmp_path):
    pytest.importorskip("sklearn")  # plain text is vectorised by scikit-learn
    path = tmp_path / "empty.txt"
    path.write_text("")
    with pytest.raises(ValueError, match="empty corpus"):
        load_text_corpus(path)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")  # two documents, both empty: no word to build a vocabulary from
    with pytest.raises(ValueError, match="every line is blank"):
        load_text_corpus(blank)
    assert load_text_corpus(blank, fixed_vocabulary=["cat"]).counts.shape == (2, 1)
    only_stop = tmp_path / "stop.txt"
    only_stop.write_text("the and of\n")
    with pytest.raises(ValueError, match="empty vocabulary"):
        load_text_corpus(only_stop, stop_words="english")


def test_most_frequent_words_keeps_alignment():
    corpus = Corpus(sp.csr_matrix(np.array([[5, 0, 1], [5, 2, 0]])), ["a", "b", "c"], "mem")
    top = most_frequent_words(corpus, 2)
    assert top.vocabulary == ["a", "b"]
    np.testing.assert_array_equal(top.counts.toarray(), [[5, 0], [5, 2]])


def test_make_lda_corpus_properties():
    c = make_lda_corpus(2000, 30, 3, alpha=[0.2, 0.3, 0.5], doc_length=40, random_state=0)
    assert c.counts.shape == (2000, 30) and c.topics.shape == (3, 30)
    np.testing.assert_allclose(c.topics.sum(axis=1), 1.0)
    assert c.alpha0 == pytest.approx(1.0)
    lengths = np.asarray(c.counts.sum(axis=1)).ravel()
    assert lengths.min() >= 3 and abs(lengths.mean() - 40) < 1
    np.testing.assert_allclose(c.doc_topic.mean(axis=0), [0.2, 0.3, 0.5], atol=0.03)
    # Word frequencies follow the mixture: E[c / l] = sum_i alpha_i/alpha_0 mu_i.
    freq = np.asarray(c.counts.sum(axis=0)).ravel() / lengths.sum()
    np.testing.assert_allclose(freq, np.array([0.2, 0.3, 0.5]) @ c.topics, atol=0.02)
    again = make_lda_corpus(2000, 30, 3, alpha=[0.2, 0.3, 0.5], doc_length=40, random_state=0)
    assert (again.counts != c.counts).nnz == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": [0.1, -0.1]}, "alpha"),
        ({"doc_length": 2}, "doc_length"),
        ({"topic_concentration": 0.0}, "topic_concentration"),
        ({"topics": np.ones((2, 5))}, "sum to 1"),
        ({"topics": np.ones((3, 5)) / 5}, "shape"),
    ],
)
def test_make_lda_corpus_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_lda_corpus(10, 5, 2, **kwargs)
