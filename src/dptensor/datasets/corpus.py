"""Reading text corpora into document-term count matrices.

Formats (:func:`load_corpus` picks one from the path):

* plain text -- one document per line of a ``.txt`` file, or a folder of ``.txt`` files (one
  document per file, in sorted name order), vectorised with scikit-learn's ``CountVectorizer``
  (``stop_words``, ``min_df``, ``max_df``, ``max_features``, ``lowercase``, ``token_pattern``);
  read in ``encoding`` (UTF-8 by default; a byte that is not valid there is an error naming the
  file, the line and the byte, and suggesting ``--encoding cp1252``);
* UCI bag-of-words -- ``docword.*.txt`` (optionally ``.gz``): three header lines ``D``, ``W``,
  ``NNZ`` then ``docID wordID count`` triples (1-based), read in chunks so the text is never held
  in memory at once; the vocabulary from ``vocab.*.txt`` (one word per line) next to it;
* Matrix Market ``.mtx`` (documents as rows) and SciPy sparse ``.npz``
  (:func:`scipy.sparse.save_npz`), with an optional vocabulary file.
"""

from __future__ import annotations

import codecs
import gzip
import io
import numbers
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

from dptensor._files import refuse_binary_text
from dptensor.models.topics.moments import check_count_matrix


@dataclass(frozen=True)
class Corpus:
    """A document-term count matrix and its vocabulary.

    Attributes
    ----------
    counts : scipy.sparse.csr_matrix of shape (n_documents, n_words)
        Non-negative integer counts (int64; float64 holding whole numbers when a count is ``>= 2^63``).
    vocabulary : list of str or None
        ``vocabulary[j]`` is the word of column ``j`` (None when the source has none).
    source : str
        Where the corpus came from.
    token_pattern : str or None
        The regular expression that split plain text into words (None for count matrices): a
        fitted model records it, so that new documents are tokenised the same way.
    """

    counts: sp.csr_matrix
    vocabulary: list[str] | None
    source: str
    token_pattern: str | None = None

    @property
    def n_documents(self) -> int:
        return int(self.counts.shape[0])

    @property
    def n_words(self) -> int:
        return int(self.counts.shape[1])


#: scikit-learn's ``CountVectorizer`` token pattern: words of two or more letters, digits or ``_``.
SKLEARN_TOKEN_PATTERN = r"(?u)\b\w\w+\b"
#: The default encoding of text files (``--encoding``).
DEFAULT_ENCODING = "utf-8"


def _open_text(path: Path, encoding: str = DEFAULT_ENCODING) -> io.TextIOBase:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding=encoding)
    return open(path, encoding=encoding)  # noqa: SIM115


def _read_bytes(path: Path) -> bytes:
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            return f.read()
    return path.read_bytes()


def _encoding_advice(encoding: str) -> str:
    if codecs.lookup(encoding).name == "utf-8":
        return "pass --encoding cp1252 (or latin-1) if the file is a Windows/Latin export"
    return "pass the file's encoding with --encoding (latin-1 reads any byte)"


def decoding_error(path: str | Path, encoding: str, *, private: bool = False) -> ValueError:
    """The error for a file that is not valid ``encoding`` text, with the advice to fix it.

    The message names the file, the first line that does not decode (numbered from 1, as
    :func:`read_text_documents` numbers its documents), the offending byte and its column
    (characters from 1), and which ``--encoding`` to try. With ``private=True`` -- the file holds
    private documents -- it names only the file, the encoding and the advice: the line and the
    byte depend on the documents (docs/protection.md).

    Parameters
    ----------
    path : str or Path
        The file that failed to decode (``.gz`` is read decompressed).
    encoding : str
        The encoding it was read in.
    private : bool, default False
        Whether the file holds private documents.

    Returns
    -------
    ValueError
        To be raised by the caller.
    """
    path = Path(path)
    advice = _encoding_advice(encoding)
    if private:
        return ValueError(f"{path}: not valid {encoding} (which document, line and byte are not shown: "
                          f"the documents are private); {advice}")
    raw = _read_bytes(path)
    try:
        raw.decode(encoding)
    except UnicodeDecodeError as exc:
        before = raw[: exc.start].decode(encoding, errors="replace")
        line = before.count("\n") + before.count("\r") - before.count("\r\n") + 1
        column = len(before) - max(before.rfind("\n"), before.rfind("\r"))
        return ValueError(f"{path}, line {line}: not valid {encoding} (byte 0x{raw[exc.start]:02x} at column "
                          f"{column}); {advice}")
    return ValueError(f"{path}: not valid {encoding}; {advice}")  # pragma: no cover - decoded the 2nd time


#: Counts at or above this do not fit in int64; such a matrix stays float64 (whole numbers).
_INT64_LIMIT = float(2**63)


def _as_count_csr(matrix: object, name: str) -> sp.csr_matrix:
    counts = check_count_matrix(matrix, name)
    # A valid count may be any finite whole number (up to 1.8e308): casting one >= 2^63 to int64 would
    # wrap (and warn), so a matrix holding one keeps float64; a private fit must read it as it is.
    if counts.nnz and float(counts.data.max()) >= _INT64_LIMIT:
        return counts
    return counts.astype(np.int64)


def load_vocabulary(path: str | Path, *, encoding: str = DEFAULT_ENCODING) -> list[str]:
    """One word per line (the UCI ``vocab.*.txt`` layout); blank trailing lines are ignored.

    A vocabulary is public, so a byte that is not valid ``encoding`` is reported with its line.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such vocabulary file: {path}")
    try:
        with _open_text(path, encoding) as f:
            words = [line.rstrip("\n\r") for line in f]
    except UnicodeDecodeError:
        raise decoding_error(path, encoding) from None
    while words and not words[-1].strip():
        words.pop()
    return words


def _check_vocabulary(vocabulary: list[str] | None, n_words: int, source: str) -> list[str] | None:
    if vocabulary is not None and len(vocabulary) != n_words:
        raise ValueError(f"vocabulary has {len(vocabulary)} words but {source} has {n_words} columns")
    return vocabulary


def read_text_documents(
    path: str | Path, *, encoding: str = DEFAULT_ENCODING, private: bool = False
) -> list[str]:
    """The documents of a plain-text corpus: every line of a file, or the ``.txt`` files of a folder.

    Every line is a document, blank or not: dropping blank lines would make the number of
    documents ``N`` -- public in every guarantee, printed, and used by the planner -- depend on
    whether one document is empty, and would shift the rows of ``lda transform`` away from the
    file's lines. A file that ends with a newline has no extra empty document after it (the
    lines are those of :meth:`io.TextIOBase.__iter__`: ``\n``, ``\r`` and ``\r\n`` end a line).
    So write every document followed by a newline (``"".join(d + "\n" for d in docs)``), not
    ``"\n".join(docs)``: joined, an empty *last* document leaves no line at all.

    Files are read in ``encoding``; one that is not valid there is an error
    (:func:`decoding_error`) naming the file, the line and the byte -- or, with ``private=True``
    (private documents), only the file, the encoding and the advice.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".txt" and p.is_file())
        if not files:
            raise ValueError(f"folder {path} holds no .txt files")
        documents = []
        for file in files:
            try:
                documents.append(file.read_text(encoding=encoding))
            except UnicodeDecodeError:  # which file failed depends on the documents: private names the folder
                raise decoding_error(path if private else file, encoding, private=private) from None
    elif path.exists():
        refuse_binary_text(path)
        try:
            with _open_text(path, encoding) as f:
                documents = [line.rstrip("\r\n") for line in f]
        except UnicodeDecodeError:
            raise decoding_error(path, encoding, private=private) from None
    else:
        raise FileNotFoundError(f"no such corpus: {path}")
    if not documents:
        raise ValueError(f"{path} is an empty corpus (no lines)")
    return documents


def load_text_corpus(
    path: str | Path,
    *,
    stop_words: str | Sequence[str] | None = None,
    min_df: float | int = 1,
    max_df: float | int = 1.0,
    max_features: int | None = None,
    lowercase: bool = True,
    fixed_vocabulary: Sequence[str] | None = None,
    token_pattern: str = SKLEARN_TOKEN_PATTERN,
    encoding: str = DEFAULT_ENCODING,
    private: bool = False,
) -> Corpus:
    """Plain text: one document per line of a file, or one document per ``.txt`` file of a folder.

    Tokenised and counted with :class:`sklearn.feature_extraction.text.CountVectorizer` using
    the options given (``stop_words="english"`` for its built-in list; ``token_pattern`` is the
    regular expression of a word, by default scikit-learn's -- the topic models default to
    :data:`~dptensor.models.topics.vectorizer.TOPIC_TOKEN_PATTERN`). With ``fixed_vocabulary`` the
    columns are exactly
    those words (to transform new documents with a fitted model); a word of it that
    ``token_pattern`` can never produce is never counted: a warning names such words, and a
    vocabulary of only such words is an error (:func:`check_vocabulary_tokens`). The file is read
    in ``encoding``; ``private=True`` keeps the line and byte of a decoding error out of its
    message (:func:`read_text_documents`). Requires scikit-learn.
    """
    try:
        from sklearn.feature_extraction.text import CountVectorizer
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("reading plain-text corpora needs scikit-learn (pip install scikit-learn)") from exc
    path = Path(path)
    documents = read_text_documents(path, encoding=encoding, private=private)
    if fixed_vocabulary is not None:
        vectorizer = CountVectorizer(vocabulary=list(fixed_vocabulary), lowercase=lowercase,
                                     token_pattern=token_pattern)
        check_vocabulary_tokens(vectorizer.vocabulary, vectorizer)
    else:
        _check_document_frequencies(path, min_df, max_df, len(documents))
        vectorizer = CountVectorizer(
            stop_words=stop_words, min_df=min_df, max_df=max_df, max_features=max_features,
            lowercase=lowercase, token_pattern=token_pattern,
        )  # fmt: skip
    try:
        counts = vectorizer.fit_transform(documents)
    except ValueError as exc:  # e.g. "empty vocabulary; perhaps the documents only contain stop words"
        if not any(document.strip() for document in documents):
            raise ValueError(f"{path}: every line is blank, so there is no word to build a vocabulary from "
                             "(each line is a document, blank or not)") from exc
        raise ValueError(f"{path}: {exc}") from exc
    return Corpus(
        counts=sp.csr_matrix(counts, dtype=np.int64),
        vocabulary=[str(w) for w in vectorizer.get_feature_names_out()],
        source=str(path),
        token_pattern=token_pattern,
    )


def check_vocabulary_tokens(vocabulary: Sequence[str], vectorizer: object) -> None:
    """Refuse a vocabulary none of whose words ``vectorizer`` can produce; warn when some cannot be.

    A word can be counted only if the vectorizer's analyzer turns the word itself into that one
    token (e.g. ``"w0"`` is never a token of the letters-only
    :data:`~dptensor.models.topics.vectorizer.TOPIC_TOKEN_PATTERN`, nor
    ``"Paris"`` of a lowercasing one). Both inputs are public, so the message may name the words.

    Parameters
    ----------
    vocabulary : sequence of str
        The fixed vocabulary.
    vectorizer : sklearn.feature_extraction.text.CountVectorizer
        Its tokenising options (``build_analyzer``).

    Raises
    ------
    ValueError
        When no word of ``vocabulary`` can be produced.
    """
    analyzer = vectorizer.build_analyzer()
    lost = [word for word in vocabulary if analyzer(word) != [word]]
    if not lost:
        return
    pattern = getattr(vectorizer, "token_pattern", None)
    examples = ", ".join(repr(w) for w in lost[:5]) + (", ..." if len(lost) > 5 else "")
    detail = (f"{len(lost)} of the {len(vocabulary)} vocabulary words ({examples}) are never tokens of the "
              f"documents under the token pattern {pattern!r}")
    if len(lost) == len(vocabulary):
        raise ValueError(f"{detail}, so nothing would be counted; pass a token pattern that produces them "
                         "(--token-pattern, e.g. scikit-learn's '(?u)\\b\\w\\w+\\b' for words with digits)")
    warnings.warn(f"{detail}: they are never counted (--token-pattern chooses what a word is)", UserWarning,
                  stacklevel=3)


def _check_document_frequencies(
    path: Path, min_df: float | int, max_df: float | int, n_documents: int
) -> None:
    """Refuse ``min_df``/``max_df`` that keep no word, in the options' words (not CountVectorizer's)."""
    def count(value: float | int) -> float:  # CountVectorizer's rule: an integer counts documents
        return value if isinstance(value, numbers.Integral) else value * n_documents

    if count(min_df) > count(max_df):
        raise ValueError(
            f"{path}: min_df={min_df} keeps only words in at least {count(min_df):g} documents, but max_df="
            f"{max_df} keeps only words in at most {count(max_df):g} of the {n_documents} documents, so no "
            "word is left; lower min_df (--min-df; a fraction such as 0.001 is a share of the documents) "
            "or raise max_df (--max-df)"
        )


def load_uci_bow(
    docword: str | Path, vocabulary: str | Path | None = None, *, chunk_bytes: int = 1 << 24,
    encoding: str = DEFAULT_ENCODING, private: bool = False,
) -> Corpus:
    """UCI bag-of-words (``docword.*.txt[.gz]``), streamed in chunks of about ``chunk_bytes``.

    When ``vocabulary`` is None, a ``vocab.<name>.txt`` next to ``docword.<name>.txt[.gz]`` is
    used if present. Document and word ids are 1-based; repeated (doc, word) pairs are summed.
    Both files are read in ``encoding``; ``private=True`` keeps the line and byte of a decoding
    error in the docword file out of its message (:func:`decoding_error`).
    """
    docword = Path(docword)
    if not docword.exists():
        raise FileNotFoundError(f"no such file: {docword}")
    try:
        rows, cols, vals, n_docs, n_words = _read_triples(docword, chunk_bytes, encoding)
    except UnicodeDecodeError:
        raise decoding_error(docword, encoding, private=private) from None
    r = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    v = np.concatenate(vals) if vals else np.zeros(0, dtype=np.int64)
    if r.size and (r.min() < 1 or r.max() > n_docs or c.min() < 1 or c.max() > n_words):
        raise ValueError(f"{docword}: document or word id outside 1..D={n_docs} / 1..W={n_words}")
    counts = sp.csr_matrix((v, (r - 1, c - 1)), shape=(n_docs, n_words))
    counts = _as_count_csr(counts, str(docword))
    if vocabulary is None:
        name = re.sub(r"^docword\.", "vocab.", docword.name.removesuffix(".gz"))
        guess = docword.with_name(name)
        vocab = load_vocabulary(guess, encoding=encoding) if name != docword.name and guess.exists() else None
    else:
        vocab = load_vocabulary(vocabulary, encoding=encoding)
    return Corpus(counts, _check_vocabulary(vocab, n_words, str(docword)), str(docword))


def _read_triples(docword: Path, chunk_bytes: int, encoding: str) -> tuple[list, list, list, int, int]:
    """The header's ``D`` and ``W`` and the ``docID wordID count`` triples of a UCI docword file."""
    rows, cols, vals = [], [], []
    with _open_text(docword, encoding) as f:
        try:
            n_docs, n_words, _nnz = (int(f.readline()) for _ in range(3))
        except ValueError as exc:
            raise ValueError(
                f"{docword}: expected three header lines D, W, NNZ (UCI bag-of-words format)"
            ) from exc
        leftover = ""
        while True:
            block = f.read(chunk_bytes)
            if not block:
                break
            text = leftover + block
            cut = text.rfind("\n") + 1
            text, leftover = text[:cut], text[cut:]
            _append_triples(text, rows, cols, vals, docword)
        _append_triples(leftover, rows, cols, vals, docword)
    return rows, cols, vals, n_docs, n_words


def _append_triples(text: str, rows: list, cols: list, vals: list, source: Path) -> None:
    tokens = text.split()
    if not tokens:
        return
    try:  # integer parsing is the fast path (valid UCI files hold integers only)
        numbers = np.array(tokens, dtype=np.int64)
    except (ValueError, OverflowError):
        # A count beyond int64 (or written as 1e300) is a valid whole number: read it as float64
        # (it wrapped negative, or was called non-integer, before); anything else is an error.
        try:
            numbers = np.array(tokens, dtype=np.float64)
        except ValueError as exc:
            raise ValueError(f"{source}: expected numeric 'docID wordID count' triples") from exc
        if not np.all(np.isfinite(numbers) & (numbers == np.round(numbers))):
            raise ValueError(
                f"{source}: contains non-integer values; ids and word counts must be whole numbers"
            ) from None
    if numbers.size % 3:
        raise ValueError(f"{source}: expected 'docID wordID count' triples")
    triples = numbers.reshape(-1, 3)
    if triples.dtype != np.int64 and np.any(np.abs(triples[:, :2]) >= _INT64_LIMIT):
        raise ValueError(f"{source}: a document or word id outside the int64 range")
    rows.append(triples[:, 0].astype(np.int64))
    cols.append(triples[:, 1].astype(np.int64))
    vals.append(triples[:, 2])


def write_uci_bow(counts: object, docword: str | Path, vocabulary: Sequence[str] | None = None) -> None:
    """Write a count matrix as UCI ``docword`` (and ``vocab`` next to it when given)."""
    matrix = _as_count_csr(counts, "counts").tocoo()
    docword = Path(docword)
    order = np.lexsort((matrix.col, matrix.row))
    body = np.column_stack([matrix.row[order] + 1, matrix.col[order] + 1, matrix.data[order]])
    with open(docword, "w", encoding="utf-8") as f:
        f.write(f"{matrix.shape[0]}\n{matrix.shape[1]}\n{matrix.nnz}\n")
        np.savetxt(f, body, fmt="%d")
    if vocabulary is not None:
        name = re.sub(r"^docword\.", "vocab.", docword.name)
        if name == docword.name:
            name = "vocab." + docword.name
        docword.with_name(name).write_text("\n".join(vocabulary) + "\n", encoding="utf-8")


def load_matrix_market(
    path: str | Path, vocabulary: str | Path | None = None, *, encoding: str = DEFAULT_ENCODING
) -> Corpus:
    """A Matrix Market ``.mtx`` count matrix with documents as rows (the vocabulary file in ``encoding``)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    counts = _as_count_csr(sp.csr_matrix(scipy.io.mmread(str(path))), str(path))
    vocab = load_vocabulary(vocabulary, encoding=encoding) if vocabulary is not None else None
    return Corpus(counts, _check_vocabulary(vocab, counts.shape[1], str(path)), str(path))


def load_npz_counts(
    path: str | Path, vocabulary: str | Path | None = None, *, encoding: str = DEFAULT_ENCODING
) -> Corpus:
    """A SciPy sparse ``.npz`` count matrix (:func:`scipy.sparse.save_npz`), documents as rows.

    The vocabulary file is read in ``encoding``.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        matrix = sp.load_npz(path)
    except (ValueError, KeyError) as exc:
        raise ValueError(f"{path} is not a scipy.sparse .npz matrix") from exc
    counts = _as_count_csr(matrix, str(path))
    vocab = load_vocabulary(vocabulary, encoding=encoding) if vocabulary is not None else None
    return Corpus(counts, _check_vocabulary(vocab, counts.shape[1], str(path)), str(path))


def is_count_file(path: str | Path) -> bool:
    """Whether :func:`load_corpus` reads ``path`` as counts (else as plain text, to tokenise).

    ``docword.*.txt[.gz]`` (UCI bag-of-words), ``.mtx`` and ``.npz``; a folder and every other file
    is plain text. The one decision every command makes from a corpus's name: a private command
    that took a file for counts and then read it as text would learn its vocabulary from the
    private documents without noise.
    """
    path = Path(path)
    if path.is_dir():
        return False
    name = path.name
    return (name.startswith("docword.") and name.removesuffix(".gz").endswith(".txt")) or path.suffix in (
        ".mtx", ".npz")


def load_corpus(
    path: str | Path,
    *,
    vocabulary: str | Path | None = None,
    stop_words: str | Sequence[str] | None = None,
    min_df: float | int = 1,
    max_df: float | int = 1.0,
    max_features: int | None = None,
    lowercase: bool = True,
    token_pattern: str = SKLEARN_TOKEN_PATTERN,
    encoding: str = DEFAULT_ENCODING,
    private: bool = False,
) -> Corpus:
    """Read a corpus in any supported format, chosen from the path.

    ``docword.*.txt[.gz]`` is UCI bag-of-words; ``.mtx`` Matrix Market; ``.npz`` SciPy sparse;
    a folder or any other text file is plain text (one document per file / per line). The
    vectoriser options (``token_pattern`` among them) apply to plain text only; ``max_features``
    also trims other formats to their most frequent words (keeping the vocabulary aligned).
    Text files (plain text, docword, vocabulary) are read in ``encoding``; ``private=True``
    keeps what a decoding error of the documents says to public facts (:func:`decoding_error`).
    """
    path = Path(path)
    if not is_count_file(path):
        return load_text_corpus(
            path, stop_words=stop_words, min_df=min_df, max_df=max_df, max_features=max_features,
            lowercase=lowercase, token_pattern=token_pattern, encoding=encoding, private=private,
        )  # fmt: skip
    if path.suffix == ".mtx":
        corpus = load_matrix_market(path, vocabulary, encoding=encoding)
    elif path.suffix == ".npz":
        corpus = load_npz_counts(path, vocabulary, encoding=encoding)
    else:
        corpus = load_uci_bow(path, vocabulary, encoding=encoding, private=private)
    if max_features is not None and max_features < corpus.n_words:
        return most_frequent_words(corpus, max_features)
    return corpus


def most_frequent_words(corpus: Corpus, max_features: int) -> Corpus:
    """Keep the ``max_features`` words with the largest total counts (ties by column order)."""
    totals = np.asarray(corpus.counts.sum(axis=0)).ravel()
    keep = np.sort(np.argsort(-totals, kind="stable")[:max_features])
    vocab = [corpus.vocabulary[j] for j in keep] if corpus.vocabulary is not None else None
    return Corpus(corpus.counts[:, keep].tocsr(), vocab, corpus.source, corpus.token_pattern)


def public_corpus_shape(
    path: str | Path, *, vocabulary: str | Path | None = None, encoding: str = DEFAULT_ENCODING
) -> tuple[int, int | None] | None:
    """``(N, V)`` of a corpus from its public facts, without parsing a document.

    ``N`` is the number of documents (lines of a plain-text file, counted with undecodable bytes
    escaped, so that no byte of a document is interpreted; ``.txt`` files of a folder; the header of
    a count matrix or of a ``.npy`` array of word ids) and ``V`` the number of words (a count
    matrix's columns, the lines of the public ``vocabulary`` file; ``None`` for plain text or word
    ids without one). A private command asks its ledger with them before it parses the corpus, so
    that a ledger that cannot pay refuses first.

    Returns
    -------
    tuple of (int, int or None), or None
        ``None`` when the sizes cannot be told without parsing (a missing or damaged file, an
        encoding whose line ends are not ASCII bytes): the parse then reports the problem.
    """
    path = Path(path)
    try:
        words = len(load_vocabulary(vocabulary, encoding=encoding)) if vocabulary is not None else None
        if path.is_dir():
            return sum(1 for p in path.iterdir() if p.suffix == ".txt" and p.is_file()), words
        if path.suffix == ".npy":  # word ids, one row per document: the header's shape
            return int(np.load(path, mmap_mode="r", allow_pickle=False).shape[0]), words
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                rows, columns = (int(size) for size in archive["shape"])
            return rows, columns
        if path.suffix == ".mtx":
            rows, columns = scipy.io.mminfo(str(path))[:2]
            return int(rows), int(columns)
        if is_count_file(path):  # UCI docword: the header's D and W
            with _open_text(path, encoding) as f:
                rows, columns = int(f.readline()), int(f.readline())
            return rows, columns
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding=encoding, errors="surrogateescape") as f:
            return sum(1 for _ in f), words
    except (OSError, EOFError, ValueError, KeyError, LookupError):  # UnicodeError is a ValueError
        return None
