"""Benchmark: can *any* Zipf--Mandelbrot constants make ``lda plan``'s vocabulary size right within 25 %?

:func:`dptensor.privacy.vocabulary.predicted_vocabulary_size` sees public inputs only: ``N``, ``V``,
``epsilon``, ``delta``, ``m`` and a guess of a typical document's distinct words ``n``; its word
weights are ``N sqrt(n) C / (r + B)^S``. This script asks whether some ``(C, S, B)`` predicts the
size within 25 % on every corpus and budget:

1. for each corpus (``benchmarks/_corpora.py``; ``synopses``: the one-line ``Description:``
   fields of ``apt-cache dumpavail``, held out) the **expected** released size at each
   ``epsilon``, ``min(V, sum_w Phi((W_w - tau) / sigma))`` from the corpus's true weights ``W``
   (the mean of ``private_vocabulary``'s size over noise draws, computed exactly);
2. the constants that minimise the largest relative error ``|predicted / expected - 1|`` over the
   ``--fit`` corpora (Nelder--Mead from several starts);
3. the errors of those constants, and of the library's, on every corpus (``--fit`` ones in sample,
   the others held out).

Usage::

    python benchmarks/vocabulary_plan_refit.py --out benchmarks/results/vocabulary_plan_refit.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import optimize, stats
from sklearn.feature_extraction.text import CountVectorizer

sys.path.insert(0, str(Path(__file__).parent))
import _corpora  # noqa: E402
from private_vocabulary import dumpavail_descriptions  # noqa: E402

from dptensor.privacy import vocabulary  # noqa: E402
from dptensor.privacy.vocabulary import calibrate_vocabulary, word_weights  # noqa: E402

LETTERS = r"(?u)\b[^\W\d_][^\W\d_]+\b"
RANKS = np.arange(1, 50_001, dtype=np.float64)  # weights below tau - 8 sigma beyond these at these N


def predicted(n_documents: int, distinct: float, calibration, n_words: int, constants) -> float:  # noqa: ANN001
    """:func:`predicted_vocabulary_size`'s expectation for constants ``(C, S, B)``."""
    c, s, b = constants
    weights = n_documents * math.sqrt(distinct) * c / (RANKS + b) ** s
    passing = stats.norm.sf((calibration.threshold - weights) / calibration.sigma)
    return min(float(n_words), float(passing.sum()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", default=["wordnet", "debian", "changelogs", "synopses"])
    parser.add_argument("--fit", nargs="+", default=["wordnet", "debian", "changelogs"])
    parser.add_argument("--n-documents", type=int, default=90_000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.2, 0.5, 1.0])
    parser.add_argument("--delta", type=float, default=5e-7)
    parser.add_argument("--words", type=int, default=2000)
    parser.add_argument("--max-doc-words", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    analyzer = CountVectorizer(token_pattern=LETTERS, stop_words="english").build_analyzer()
    calibrations = {e: calibrate_vocabulary(e, args.delta, args.max_doc_words) for e in args.epsilons}
    corpora = {}
    for name in args.corpora:
        texts = dumpavail_descriptions() if name == "synopses" else _corpora.load(name)
        if len(texts) > args.n_documents:
            rng = np.random.default_rng(0)
            texts = [texts[i] for i in sorted(rng.choice(len(texts), args.n_documents, replace=False))]
        documents = [analyzer(t) for t in texts]
        weights = np.fromiter(word_weights(documents, args.max_doc_words).values(), dtype=np.float64)
        distinct = float(np.mean([min(len(set(d)), args.max_doc_words) for d in documents]))
        expected = [min(float(args.words), float(stats.norm.sf((c.threshold - weights) / c.sigma).sum()))
                    for c in calibrations.values()]
        corpora[name] = (len(documents), distinct, expected)
        print(f"{name}: N={len(documents)}, mean distinct words {distinct:.2f}, expected sizes "
              f"{[round(x, 1) for x in expected]}", flush=True)

    def errors(constants, names) -> np.ndarray:  # noqa: ANN001
        return np.array([predicted(n, distinct, calibrations[e], args.words, constants) / size - 1.0
                         for name in names for (n, distinct, sizes) in [corpora[name]]
                         for e, size in zip(args.epsilons, sizes, strict=True)])

    def worst(q: np.ndarray) -> float:
        return float(np.abs(errors((math.exp(q[0]), q[1], q[2]), args.fit)).max())

    best = None
    for s0 in (0.9, 1.0, 1.1, 1.2):
        for b0 in (20.0, 55.0, 100.0, 200.0):
            c0 = vocabulary.ZIPF_CONSTANT * (b0 / vocabulary.ZIPF_OFFSET) ** (s0 - vocabulary.ZIPF_EXPONENT)
            start = [math.log(c0), s0, b0]
            result = optimize.minimize(worst, start, method="Nelder-Mead",
                                       options={"maxiter": 300, "xatol": 1e-3, "fatol": 1e-4})
            if best is None or result.fun < best.fun:
                best = result
    refit = (math.exp(best.x[0]), float(best.x[1]), float(best.x[2]))
    library = (vocabulary.ZIPF_CONSTANT, vocabulary.ZIPF_EXPONENT, vocabulary.ZIPF_OFFSET)
    rows = []
    for label, constants in (("library", library), ("minimax refit", refit)):
        for name in args.corpora:
            n, distinct, sizes = corpora[name]
            for e, size in zip(args.epsilons, sizes, strict=True):
                guess = predicted(n, distinct, calibrations[e], args.words, constants)
                row = {"constants": label, "C": round(constants[0], 4), "S": round(constants[1], 4),
                       "B": round(constants[2], 2), "corpus": name, "held_out": name not in args.fit,
                       "n_documents": n, "distinct_words": round(distinct, 2), "epsilon": e,
                       "expected_release": round(size, 1), "predicted": round(guess, 1),
                       "error": round(guess / size - 1.0, 3)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"minimax refit on {args.fit}: largest in-sample error {best.fun:.3f}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"created": time.strftime("%Y-%m-%d"), "fit_corpora": args.fit,
                                        "largest_in_sample_error": round(best.fun, 4), "rows": rows},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
