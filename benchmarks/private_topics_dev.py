"""Private spectral LDA on real text (issue 23, clipping): Debian package descriptions and WordNet glosses.

Corpora (read from this machine, never downloaded, never committed):

* ``debian``: ``apt-cache dumpavail``, one document per package: its ``Description:`` line and its
  ``Tag:`` values (``role::program`` -> ``role program``);
* ``wordnet``: ``/usr/share/wordnet/data.{noun,verb,adj,adv}``, one document per synset (its gloss,
  the text after ``|``).

10% of the documents are held out; they are the public side: the vocabulary (2000 words) is
their most frequent non-stop-words (the other corpus's vocabulary covers too little: Debian's is
mostly package tags), and they score the fits. The training documents with at least 4 vocabulary
tokens are the private corpus. Scores
(:mod:`dptensor.evaluation`): held-out document-completion perplexity, NPMI of each topic's top 10
words on the held-out documents, the unigram model as the baseline.

Run: ``python benchmarks/private_topics_dev.py --corpus debian --epsilon 1 4 --repeats 2``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer

TOKEN = re.compile(r"[a-z][a-z0-9+\-]*[a-z0-9+]|[a-z]")


def debian_documents() -> list[str]:
    dump = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, check=True).stdout
    docs: dict[str, list[str]] = {}
    package = None
    field = None
    for line in dump.splitlines():
        if line.startswith("Package: "):
            package, field = line[9:].strip(), None
            if package in docs:
                package = None
        elif package and line.startswith("Description: "):
            docs.setdefault(package, []).append(line[13:])
            field = None
        elif package and line.startswith("Tag: "):
            docs.setdefault(package, []).append(line[5:].replace("::", " ").replace("-", " "))
            field = "tag"
        elif package and field == "tag" and line.startswith(" "):
            docs[package].append(line.replace("::", " ").replace("-", " "))
        else:
            field = None
    return [" ".join(parts) for parts in docs.values()]


def wordnet_documents() -> list[str]:
    out = []
    for part in ("noun", "verb", "adj", "adv"):
        for line in Path(f"/usr/share/wordnet/data.{part}").read_text(errors="replace").splitlines():
            if line.startswith("  ") or "|" not in line:
                continue
            out.append(line.split("|", 1)[1])
    return out


CORPORA = {"debian": debian_documents, "wordnet": wordnet_documents}


def vocabulary(texts: list[str], size: int) -> list[str]:
    counts: Counter = Counter()
    for text in texts:
        counts.update(w for w in TOKEN.findall(text.lower()) if w not in ENGLISH_STOP_WORDS and len(w) > 1)
    return [w for w, _ in counts.most_common(size)]


def load(name: str, n_words: int, seed: int = 0, cache: Path = Path("/tmp/private_topics_dev")):
    """``(train, test, vocab)`` count matrices of corpus ``name`` with the other corpus's vocabulary."""
    cache.mkdir(exist_ok=True)
    path = cache / f"{name}-{n_words}-{seed}.npz"
    if path.exists():
        data = np.load(path, allow_pickle=True)
        return sp.csr_matrix(data["train"][()]), sp.csr_matrix(data["test"][()]), list(data["vocab"])
    texts = CORPORA[name]()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(texts))
    n_test = len(texts) // 10
    held_out = [texts[i] for i in order[:n_test]]
    vocab = vocabulary(held_out, n_words)
    vec = CountVectorizer(vocabulary=vocab, token_pattern=TOKEN.pattern, lowercase=True)
    test = vec.transform(held_out).tocsr().astype(np.float64)
    train = vec.transform([texts[i] for i in order[n_test:]]).tocsr().astype(np.float64)
    test = test[np.asarray(test.sum(axis=1)).ravel() >= 4]
    train = train[np.asarray(train.sum(axis=1)).ravel() >= 4]
    np.savez(path, train=np.array(train, dtype=object), test=np.array(test, dtype=object),
             vocab=np.array(vocab, dtype=object))  # fmt: skip
    return train, test, vocab


def evaluate(model, split, test) -> dict:
    from dptensor.evaluation import completion_perplexity, topic_npmi

    return {
        "perplexity": completion_perplexity(model, split),
        "npmi": float(np.mean(topic_npmi(model, test))),
    }


def main(argv: list[str] | None = None) -> None:
    from dptensor.models import PrivateSpectralLDA, SpectralLDA

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="debian")
    parser.add_argument("--words", type=int, default=2000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--alpha0", type=float, default=1.0)
    parser.add_argument("--epsilon", type=float, nargs="*", default=[1.0, 4.0])
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--clip", type=str, nargs="*", default=["auto"])
    parser.add_argument("--whitening", default="auto")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--public-fraction", type=float, default=0.0,
                        help="this share of the training documents becomes a public corpus for the whitening "
                        "(removed from the private ones)")
    parser.add_argument("--norms", action="store_true", help="print the per-document norm quantiles and exit")
    args = parser.parse_args(argv)
    train, test, vocab = load(args.corpus, args.words)
    from dptensor.evaluation import split_documents, unigram_perplexity

    split = split_documents(test, random_state=0)
    public = None
    if args.public_fraction > 0:
        n_public = int(args.public_fraction * train.shape[0])
        public, train = train[:n_public], train[n_public:]
    lengths = np.asarray(train.sum(axis=1)).ravel()
    print(f"{args.corpus}: {train.shape[0]} training documents, {test.shape[0]} held out, "
          f"V={train.shape[1]}, "
          f"median length {np.median(lengths):g}")  # fmt: skip
    if args.norms:
        from dptensor.models.topics.clipped_moments import clipped_terms

        t = clipped_terms(train, 1.0, 1.0)
        for name, values in (("||P||_F", t.pair_norms), ("||p||_2", t.word_norms)):
            print(name, "quantiles 10/50/90:", np.round(np.quantile(values, [0.1, 0.5, 0.9]), 4))
        return
    print(f"unigram: perplexity {unigram_perplexity(train, split):.1f}")
    start = time.perf_counter()
    clean = SpectralLDA(args.k, alpha0=args.alpha0, random_state=0).fit(train)
    print(f"non-private spectral: {evaluate(clean, split, test)} ({time.perf_counter() - start:.1f} s)")
    for clip in args.clip:
        clip_value = None if clip == "none" else (clip if clip == "auto" else float(clip))
        for eps in args.epsilon:
            for r in range(args.repeats):
                start = time.perf_counter()
                model = PrivateSpectralLDA(
                    args.k, alpha0=args.alpha0, epsilon=eps, delta=args.delta, clip=clip_value,
                    public_corpus=public,
                    private_whitening=args.whitening, random_state=r,
                ).fit(train)  # fmt: skip
                result = evaluate(model, split, test)
                print(f"private clip={clip} eps={eps} run {r}: perplexity {result['perplexity']:.1f} "
                      f"npmi {result['npmi']:.3f} ({time.perf_counter() - start:.1f} s)",
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
