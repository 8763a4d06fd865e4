"""Benchmark: does ``lda plan`` predict the size of the vocabulary ``lda fit --private-vocab`` releases?

For each corpus (``benchmarks/_corpora.py``: WordNet glosses, Debian descriptions, Debian change
logs; at most ``--n-documents`` of them, a fixed random subset; read at run time, never committed),
tokenised like ``lda fit`` (letters-only token pattern, English stop words), and each vocabulary
budget ``epsilon`` (``delta`` fixed): the released size of
:func:`dptensor.privacy.vocabulary.private_vocabulary` (``--repeats`` fresh noise draws, mean) against
:func:`dptensor.privacy.vocabulary.predicted_vocabulary_size` from public inputs: ``N``, ``V``,
``epsilon``, ``delta``, ``m`` and a typical document's distinct words (here the corpus's mean, as a
well-informed user's public guess would be; printed so that it can be checked).

Usage::

    python benchmarks/vocabulary_plan.py --out benchmarks/results/vocabulary_plan.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer

sys.path.insert(0, str(Path(__file__).parent))
import _corpora  # noqa: E402

from dptensor.privacy import insecure_test_noise  # noqa: E402
from dptensor.privacy.vocabulary import predicted_vocabulary_size, private_vocabulary  # noqa: E402

LETTERS = r"(?u)\b[^\W\d_][^\W\d_]+\b"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", default=["wordnet", "debian", "changelogs"])
    parser.add_argument("--n-documents", type=int, default=90_000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.2, 0.5, 1.0])
    parser.add_argument("--delta", type=float, default=5e-7)
    parser.add_argument("--words", type=int, default=2000)
    parser.add_argument("--max-doc-words", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    analyzer = CountVectorizer(token_pattern=LETTERS, stop_words="english").build_analyzer()
    rows = []
    for name in args.corpora:
        texts = _corpora.load(name)
        rng = np.random.default_rng(0)
        if len(texts) > args.n_documents:
            texts = [texts[i] for i in sorted(rng.choice(len(texts), args.n_documents, replace=False))]
        documents = [analyzer(t) for t in texts]
        distinct = float(np.mean([min(len(set(d)), args.max_doc_words) for d in documents]))
        for epsilon in args.epsilons:
            predicted = predicted_vocabulary_size(len(documents), args.words, epsilon, args.delta,
                                                  args.max_doc_words, distinct)
            sizes = []
            for seed in range(args.repeats):
                release = private_vocabulary(documents, args.words, epsilon=epsilon, delta=args.delta,
                                             max_words_per_document=args.max_doc_words,
                                             noise=insecure_test_noise(seed))  # reproducible draws
                sizes.append(len(release.words))
            measured = float(np.mean(sizes))
            row = {"corpus": name, "n_documents": len(documents), "distinct_words": round(distinct, 2),
                   "epsilon": epsilon, "delta": args.delta, "words_asked": args.words,
                   "predicted": round(predicted, 1), "measured": measured, "measured_each": sizes,
                   "ratio": round(predicted / measured, 3) if measured else None}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"created": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
