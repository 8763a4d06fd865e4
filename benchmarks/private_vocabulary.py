"""Benchmark: how close is a vocabulary chosen under DP to the true most frequent words, on real text?

Corpus: the ``Description:`` fields of ``apt-cache dumpavail`` (one-line package synopses, about
60 000 on a Debian machine; read at run time, never committed), optionally the long descriptions
of the machine's ``Translation-en`` apt list (``--corpus long``) or WordNet's glosses (``--corpus
wordnet``, ``benchmarks/_corpora.py``; ``--n-documents`` takes a fixed random subset). Tokenised by
scikit-learn's ``CountVectorizer`` analyzer with its public English stop-word list (``--letters``:
the letters-only token pattern of docs/lda.md).

``--mechanisms`` compares the weighted Gaussian (fixed ``1/sqrt(n)`` weights) with Gopi et al.'s
policy Gaussian (``--cutoff-sigmas``: its cutoff ``Gamma = tau + alpha sigma``).

For each ``epsilon`` (``delta`` fixed, ``< 1/N``), vocabulary size ``V`` and per-document bound
``m``, :func:`dptensor.privacy.vocabulary.private_vocabulary` is run ``--repeats`` times with fresh
noise, and compared with the non-private ``CountVectorizer(max_features=V)`` vocabulary (the top
``V`` words by total count, what a user would otherwise build from the private documents):

* ``size``: words released (at most ``V``; fewer when fewer pass the threshold);
* ``overlap``: ``|private ∩ true top-V| / V``;
* ``precision``: ``|private ∩ true top-V| / |private|`` (the share of released words among the true top V);
* ``coverage``: the share of the corpus's tokens that fall in the private vocabulary, divided by the
  share that falls in the true top-``V`` (1 = as good as the non-private choice).

With ``--fit K``, also a non-private ``SpectralLDA`` with ``K`` topics on the counts over each
vocabulary (true top-V and one private draw at each epsilon): the topics' NPMI on the corpus
(:func:`dptensor.metrics.topic_coherence`), to see what the vocabulary costs a topic model.

Usage::

    python benchmarks/private_vocabulary.py --out benchmarks/results/private_vocabulary.json
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer

from dptensor.privacy.vocabulary import DEFAULT_CUTOFF_SIGMAS, MECHANISMS, private_vocabulary

LETTERS = r"(?u)\b[^\W\d_][^\W\d_]+\b"


def dumpavail_descriptions() -> list[str]:
    """The ``Description:`` fields of ``apt-cache dumpavail`` (one-line synopses)."""
    text = subprocess.run(["apt-cache", "dumpavail"], check=True, capture_output=True, text=True).stdout
    prefix = "Description:"
    return [line[len(prefix):].strip() for line in text.splitlines() if line.startswith(prefix)]


def long_descriptions() -> list[str]:
    """Long descriptions from the machine's apt ``Translation-en`` lists (paragraphs joined)."""
    lists = sorted(Path("/var/lib/apt/lists").glob("*_i18n_Translation-en*"))
    if not lists:
        raise SystemExit("no Translation-en apt list on this machine (run apt-get update)")
    documents: list[str] = []
    for path in lists:
        text = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", str(path)], check=True,
                              capture_output=True, text=True).stdout
        current: list[str] = []
        for line in text.splitlines():
            if line.startswith("Description-en:"):
                if current:
                    documents.append(" ".join(current))
                current = [line[len("Description-en:"):].strip()]
            elif line.startswith(" ") and current:
                current.append(line.strip().removeprefix("."))
        if current:
            documents.append(" ".join(current))
    return documents


def mean_npmi(top: np.ndarray, counts) -> float:  # noqa: ANN001 - a sparse count matrix
    """Mean NPMI over topics and word pairs, from document co-occurrence (Bouma 2009; -1 if never together).

    Local to this benchmark until the library's own evaluation (issue 23 item 6) lands.
    """
    present = (counts > 0).astype(np.float64).tocsc()
    n = present.shape[0]
    scores = []
    for words in top:
        sub = present[:, words]
        joint = (sub.T @ sub).toarray() / n
        single = np.diag(joint)
        for i in range(len(words)):
            for j in range(i + 1, len(words)):
                p_ij = joint[i, j]
                scores.append(-1.0 if p_ij == 0 else np.log(p_ij / (single[i] * single[j])) / -np.log(p_ij))
    return float(np.mean(scores))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("dumpavail", "long", "wordnet"), default="dumpavail")
    parser.add_argument("--n-documents", type=int, default=0, help="a random subset of this many (0: all)")
    parser.add_argument("--letters", action="store_true", help="letters-only token pattern")
    parser.add_argument("--mechanisms", nargs="+", choices=MECHANISMS, default=["weighted-gaussian"])
    parser.add_argument("--cutoff-sigmas", type=float, nargs="+", default=[DEFAULT_CUTOFF_SIGMAS])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 0.5, 1.0])
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000])
    parser.add_argument("--max-words", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fit", type=int, default=0, metavar="K", help="also fit K topics (0: no)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    start = time.perf_counter()
    if args.corpus == "wordnet":
        from _corpora import wordnet_glosses

        documents = wordnet_glosses()
    else:
        documents = dumpavail_descriptions() if args.corpus == "dumpavail" else long_descriptions()
    if args.n_documents:
        keep = np.random.default_rng(0).choice(len(documents), args.n_documents, replace=False)
        documents = [documents[i] for i in np.sort(keep)]
    pattern = LETTERS if args.letters else r"(?u)\b\w\w+\b"
    analyzer = CountVectorizer(stop_words="english", token_pattern=pattern).build_analyzer()
    tokens = [analyzer(d) for d in documents]
    lengths = np.array([len(t) for t in tokens])
    full = CountVectorizer(analyzer=lambda t: t)
    counts = full.fit_transform(tokens).tocsc()
    words = full.get_feature_names_out()
    totals = np.asarray(counts.sum(axis=0)).ravel()
    order = np.argsort(-totals, kind="stable")
    n_tokens = totals.sum()
    print(f"{len(documents)} documents ({args.corpus}), {len(words)} distinct words, median length "
          f"{np.median(lengths):g} tokens; read in {time.perf_counter() - start:.1f} s", flush=True)
    index = {w: i for i, w in enumerate(words)}

    def token_share(vocabulary: list[str]) -> float:
        return float(totals[[index[w] for w in vocabulary if w in index]].sum() / n_tokens)

    variants = [("weighted-gaussian", None)] if "weighted-gaussian" in args.mechanisms else []
    if "policy-gaussian" in args.mechanisms:
        variants += [("policy-gaussian", alpha) for alpha in args.cutoff_sigmas]
    rows = []
    for size in args.sizes:
        true = {str(w) for w in words[order[:size]]}
        true_share = token_share(sorted(true))
        for m in args.max_words:
            for epsilon in args.epsilons:
                for mechanism, alpha in variants:
                    sizes, overlaps, precisions, coverages, seconds = [], [], [], [], []
                    for _ in range(args.repeats):
                        t0 = time.perf_counter()
                        vocab = private_vocabulary(tokens, size, epsilon=epsilon, delta=args.delta,
                                                   max_words_per_document=m, mechanism=mechanism,
                                                   **({} if alpha is None else {"cutoff_sigmas": alpha}))
                        seconds.append(time.perf_counter() - t0)
                        sizes.append(len(vocab.words))
                        overlaps.append(len(true & set(vocab.words)) / size)
                        precisions.append(len(true & set(vocab.words)) / max(1, len(vocab.words)))
                        coverages.append(token_share(vocab.words) / true_share)
                    row = {
                        "V": size, "m": m, "epsilon": epsilon, "delta": args.delta, "mechanism": mechanism,
                        "cutoff_sigmas": alpha, "sizes": sizes, "size": float(np.mean(sizes)),
                        "overlap": float(np.mean(overlaps)), "overlap_sd": float(np.std(overlaps)),
                        "precision": float(np.mean(precisions)), "coverage": float(np.mean(coverages)),
                        "threshold": vocab.calibration.threshold, "sigma": vocab.calibration.sigma,
                        "cutoff": vocab.calibration.cutoff, "seconds": float(np.mean(seconds)),
                    }  # fmt: skip
                    rows.append(row)
                    label = mechanism if alpha is None else f"{mechanism}(alpha={alpha:g})"
                    print(f"V={size:5d} m={m:3d} eps={epsilon:4g} {label:30s}: released {row['size']:7.1f}  "
                          f"precision {row['precision']:.3f}  overlap {row['overlap']:.3f} (sd "
                          f"{row['overlap_sd']:.3f})  token coverage {row['coverage']:.3f}  "
                          f"tau={row['threshold']:.1f} sigma={row['sigma']:.2f}  {row['seconds']:.1f} s",
                          flush=True)

    fits = []
    if args.fit:
        from dptensor.models import SpectralLDA

        size, m = args.sizes[0], args.max_words[-1]
        choices = {"true top-V": sorted(str(w) for w in words[order[:size]])}
        for epsilon in args.epsilons:
            choices[f"private eps={epsilon:g}"] = private_vocabulary(
                tokens, size, epsilon=epsilon, delta=args.delta, max_words_per_document=m).words
        for name, vocabulary in choices.items():
            columns = [index[w] for w in vocabulary]
            x = counts[:, columns].tocsr()
            model = SpectralLDA(args.fit, 1.0, random_state=0).fit(x)
            top = np.argsort(-model.components_, axis=1)[:, :10]
            npmi = mean_npmi(top, x)
            fits.append({"vocabulary": name, "V": len(vocabulary), "k": args.fit, "npmi": npmi})
            print(f"SpectralLDA k={args.fit} on {name} ({len(vocabulary)} words): NPMI {npmi:.3f}",
                  flush=True)

    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "corpus": args.corpus, "n_documents": len(documents), "n_distinct_words": int(len(words)),
            "token_pattern": pattern, "repeats": args.repeats,
            "median_length": float(np.median(lengths)), "rows": rows, "fits": fits,
            "python": sys.version.split()[0], "machine": platform.machine(),
            "note": "2 shared CPU cores, contended: timings are indicative only",
        }, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
