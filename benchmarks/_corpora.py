"""Real text corpora that a Debian machine or an installed package already holds (never downloaded here).

Loaders for the benchmarks (not part of the library; nothing here is committed or fetched at run
time). Each returns a list of documents (strings); :func:`vectorize` turns them into counts over
a given vocabulary and :func:`public_vocabulary` takes a vocabulary from *other* text.

* ``debian`` -- Debian package descriptions: one document per distinct description (the
  ``Description``/``Description-en`` field with its continuation lines, paragraph marks ``" ."``
  dropped, deduplicated by text). The long English descriptions live in apt's
  ``Translation-en`` indexes under ``/var/lib/apt/lists`` (a default Debian install has them;
  Docker images often set ``Acquire::Languages "none"``: run
  ``apt-get update -o Acquire::Languages=en`` once). Records of ``apt-cache dumpavail`` that carry a
  long description are read too. About 61 000 documents on Debian 12 (``main``).
* ``wordnet`` -- WordNet 3.0 glosses from Debian's ``wordnet-base``
  (``/usr/share/wordnet/data.{noun,verb,adj,adv}``, the text after ``|`` of each synset line):
  about 117 000 documents.
* ``reuters`` -- the 395 Reuters news articles that the ``lda`` package ships (already counts:
  :func:`load_reuters_counts`).
* ``lee`` -- gensim's ``lee_background.cor`` test corpus (300 news articles, one per line).
* ``changelogs`` -- the changes recorded in the change logs installed on this machine
  (``/usr/share/doc/*/changelog*.gz`` and ``NEWS*.gz``): one document per listed item with its
  continuation lines, deduplicated (:func:`debian_changelogs`; about 3 * 10^5 documents on a
  Debian 12 machine with 800 documented packages -- the count depends on what is installed).

Public vocabularies come from text *other* than the corpus (:func:`vocabulary_for`): for Debian
descriptions, the most frequent words of the WordNet glosses; for WordNet glosses, the most
frequent single-word lemmas of SemCor (the sense-tagged Brown corpus), whose tag counts WordNet
ships in ``cntlist.rev`` (the Debian vocabulary is too technical for the glosses: half of them
would keep at most one token); for the changelogs, the most frequent words of the Debian package
descriptions; English stop words removed in all.
"""

from __future__ import annotations

import glob
import gzip
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

WORDNET_DIR = Path("/usr/share/wordnet")
APT_LISTS = Path("/var/lib/apt/lists")
DOC_DIR = Path("/usr/share/doc")
#: Words of two or more letters (no digits: version numbers and sizes are not topics).
TOKEN_PATTERN = r"(?u)\b[a-zA-Z][a-zA-Z]+\b"


class CorpusUnavailable(RuntimeError):
    """A corpus' source is not on this machine; the message says how to get it."""


def _stanza_descriptions(text: str) -> list[str]:
    """Description fields (first line + continuation lines) of Debian control stanzas."""
    out = []
    for stanza in text.split("\n\n"):
        lines = stanza.split("\n")
        for i, line in enumerate(lines):
            if line.startswith(("Description:", "Description-en:")):
                body = [line.split(":", 1)[1].strip()]
                for cont in lines[i + 1 :]:
                    if not cont.startswith((" ", "\t")):
                        break
                    cont = cont.strip()
                    if cont != ".":
                        body.append(cont)
                out.append(" ".join(body))
                break
    return out


def debian_descriptions(*, min_words: int = 1) -> list[str]:
    """Distinct Debian package descriptions with their long text (see the module documentation).

    Raises :class:`CorpusUnavailable` when this machine has no long descriptions.
    """
    texts: list[str] = []
    for path in sorted(glob.glob(str(APT_LISTS / "*_i18n_Translation-en*"))):
        raw = subprocess.run(
            ["/usr/lib/apt/apt-helper", "cat-file", path], check=True, capture_output=True
        ).stdout.decode("utf-8", errors="replace")
        texts.extend(_stanza_descriptions(raw))
    try:
        dump = subprocess.run(["apt-cache", "dumpavail"], check=True, capture_output=True).stdout
        texts.extend(t for t in _stanza_descriptions(dump.decode("utf-8", errors="replace")) if len(t) > 120)
    except (OSError, subprocess.CalledProcessError):
        pass
    long_texts = [t for t in dict.fromkeys(texts) if len(t.split()) >= min_words]
    if sum(len(t) > 120 for t in long_texts) < 1000:
        raise CorpusUnavailable(
            "Debian's long package descriptions are not on this machine (apt's Translation-en "
            "indexes are missing); run: apt-get update -o Acquire::Languages=en"
        )
    return long_texts


def wordnet_glosses(directory: str | Path = WORDNET_DIR) -> list[str]:
    """WordNet glosses, one document per synset (see the module documentation)."""
    directory = Path(directory)
    files = [directory / f"data.{pos}" for pos in ("noun", "verb", "adj", "adv")]
    if not all(f.exists() for f in files):
        raise CorpusUnavailable(
            f"WordNet's data files are not in {directory}; run: apt-get install wordnet-base"
        )
    glosses = []
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("  "):  # the licence header
                    continue
                _, sep, gloss = line.partition("|")
                if sep:
                    glosses.append(gloss.strip())
    return glosses


def lee_background() -> list[str]:
    """gensim's ``lee_background.cor`` (300 documents)."""
    try:
        import gensim
    except ImportError as exc:
        raise CorpusUnavailable("gensim is not installed: pip install 'dptensor[bench]'") from exc
    path = Path(gensim.__file__).parent / "test" / "test_data" / "lee_background.cor"
    return [
        line.strip()
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        if line.strip()
    ]


def load_reuters_counts() -> tuple[sp.csr_matrix, list[str]]:
    """The ``lda`` package's 395 Reuters articles as counts and their vocabulary (4258 words)."""
    try:
        import lda.datasets
    except ImportError as exc:
        raise CorpusUnavailable("the lda package is not installed: pip install lda") from exc
    return sp.csr_matrix(lda.datasets.load_reuters(), dtype=np.float64), list(
        lda.datasets.load_reuters_vocab()
    )


_ITEM = re.compile(r"^(\s*)[*+-]\s+\S")


def debian_changelogs(directory: str | Path = DOC_DIR) -> list[str]:
    """One document per change listed in the changelogs and NEWS files on this machine, deduplicated.

    Reads ``<directory>/*/changelog*.gz`` and ``NEWS*.gz`` (Debian's ``changelog.Debian.gz`` and
    upstream change logs). A change is an item line (``*``, ``+`` or ``-`` after any indentation)
    with the lines below it that are indented further (wrapped text and sub-items); it ends at a
    blank line, a line indented no deeper, or the next item. Packages built from one source share
    a changelog, so identical changes are kept once. How many there are depends on what is
    installed: about 3 * 10^5 on a Debian 12 machine with 800 documented packages.
    """
    paths = sorted(glob.glob(str(Path(directory) / "*" / "changelog*.gz")))
    paths += sorted(glob.glob(str(Path(directory) / "*" / "NEWS*.gz")))
    if not paths:
        raise CorpusUnavailable(f"no changelog*.gz under {directory}: this machine ships no change logs")
    seen: dict[str, None] = {}
    for path in paths:
        try:
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except (OSError, EOFError):
            continue
        current: list[str] = []
        indent = 0
        for line in [*lines, ""]:
            item = _ITEM.match(line)
            if item or not line.strip() or len(line) - len(line.lstrip()) <= indent:
                if current:
                    seen.setdefault(" ".join(current), None)
                current = [line.strip().lstrip("*+- ")] if item else []
                indent = len(item.group(1)) if item else 0
            elif current:
                current.append(line.strip())
    return list(seen)


LOADERS = {
    "debian": debian_descriptions,
    "wordnet": wordnet_glosses,
    "lee": lee_background,
    "changelogs": debian_changelogs,
}
#: For each corpus, the separate public text its vocabulary comes from.
VOCABULARY_SOURCE = {
    "debian": "wordnet glosses",
    "wordnet": "SemCor lemma counts",
    "lee": "wordnet glosses",
    "changelogs": "Debian package descriptions",
}


def load(name: str) -> list[str]:
    """The documents of corpus ``name`` (a key of :data:`LOADERS`)."""
    if name not in LOADERS:
        raise ValueError(f"unknown corpus {name!r}; choose from {sorted(LOADERS)}")
    return LOADERS[name]()


def public_vocabulary(texts: Sequence[str], size: int) -> list[str]:
    """The ``size`` most frequent words of ``texts`` (English stop words removed), alphabetically."""
    from sklearn.feature_extraction.text import CountVectorizer

    vectorizer = CountVectorizer(stop_words="english", token_pattern=TOKEN_PATTERN, max_features=size)
    vectorizer.fit(texts)
    return sorted(vectorizer.vocabulary_)


def semcor_vocabulary(size: int, directory: str | Path = WORDNET_DIR) -> list[str]:
    """The ``size`` most frequent single-word lemmas of SemCor (WordNet's ``cntlist.rev``), alphabetically.

    Each line of ``cntlist.rev`` is ``sense_key sense_number tag_count``; a lemma's frequency is
    the sum of its senses' tag counts. Multi-word lemmas, non-alphabetic ones, single letters and
    English stop words are left out.
    """
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    path = Path(directory) / "cntlist.rev"
    if not path.exists():
        raise CorpusUnavailable(f"{path} is missing; run: apt-get install wordnet-base")
    counts: dict[str, int] = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            key, _, tags = line.split()
            lemma = key.split("%", 1)[0]
            if len(lemma) < 2 or not lemma.isalpha() or lemma in ENGLISH_STOP_WORDS:
                continue
            counts[lemma] = counts.get(lemma, 0) + int(tags)
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    if len(ranked) < size:
        raise ValueError(f"SemCor has only {len(ranked)} lemmas, fewer than the {size} asked")
    return sorted(ranked[:size])


def vocabulary_for(corpus: str, size: int) -> list[str]:
    """The public vocabulary of ``size`` words for ``corpus``, from separate text (module documentation)."""
    if corpus == "wordnet":
        return semcor_vocabulary(size)
    if corpus == "changelogs":
        return public_vocabulary(debian_descriptions(), size)
    return public_vocabulary(wordnet_glosses(), size)


def vectorize(texts: Sequence[str], vocabulary: Sequence[str]) -> sp.csr_matrix:
    """Word counts of ``texts`` over a fixed ``vocabulary`` (lower-cased, :data:`TOKEN_PATTERN`)."""
    from sklearn.feature_extraction.text import CountVectorizer

    vectorizer = CountVectorizer(vocabulary=list(vocabulary), token_pattern=TOKEN_PATTERN)
    return sp.csr_matrix(vectorizer.transform(texts), dtype=np.float64)


def token_lengths(texts: Sequence[str]) -> np.ndarray:
    """Number of :data:`TOKEN_PATTERN` words of each text (before any vocabulary)."""
    pattern = re.compile(TOKEN_PATTERN)
    return np.array([len(pattern.findall(t)) for t in texts], dtype=np.int64)


__all__ = [
    "CorpusUnavailable",
    "LOADERS",
    "VOCABULARY_SOURCE",
    "debian_changelogs",
    "debian_descriptions",
    "lee_background",
    "load",
    "load_reuters_counts",
    "public_vocabulary",
    "semcor_vocabulary",
    "token_lengths",
    "vectorize",
    "vocabulary_for",
    "wordnet_glosses",
]
