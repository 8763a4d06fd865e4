"""DP-VI on real text: held-out perplexity against the unigram model, NPMI against the non-private fit.

Two corpora any Debian machine has (read at run time, never downloaded, never committed):

* ``debian``: the ``Description:`` field of every package in ``apt-cache dumpavail`` (one line
  each, exact duplicates dropped);
* ``wordnet``: WordNet's glosses (``/usr/share/wordnet/data.{noun,verb,adj,adv}``, the text after
  ``|``; Debian's ``wordnet-base``).

**Public vocabulary from separate text**: a random ``--public-fraction`` of each corpus's texts
(public seed) is set apart as the public text and removed from the corpus; the vocabulary is its
``--words`` most frequent words (letters only, at least two, scikit-learn's English stop words
removed), so no vocabulary choice looks at the private documents. (The other corpus would be
separate text too, but shares too few words: a median of one in-vocabulary token per document.)
The remaining documents are split at random (public seed) into ``1 - --test-fraction`` training
and ``--test-fraction`` held-out documents.

Scores (the same for every model, from :mod:`dptensor.evaluation`):

* **document-completion perplexity** on the held-out documents with at least two tokens
  (``split_documents``, ``completion_perplexity``: topic proportions inferred from a random half
  of each document's tokens, the other half scored), against the **unigram model** (no topics;
  ``unigram_perplexity``, the training corpus's word frequencies, add-one smoothed): every
  private model must beat it;
* **NPMI** of each topic's top 10 words (``topic_npmi``, boolean document co-occurrence over the
  whole corpus, gensim's smoothing), averaged over topics.

Models: scikit-learn's ``LatentDirichletAllocation(learning_method="online")`` (its defaults:
``learning_offset=10``, batch 128, 10 passes, priors ``1/k``), the non-private ``DPVariationalLDA``
with its defaults (the same online VB) and with the full batch and ``alpha = 0.5`` (the private
defaults without noise), and the private ``DPVariationalLDA`` with its defaults (full batch,
``C = 2``, ``L = 500``, ``alpha = 0.5``) at each ``--epsilons`` (``delta = --delta``),
``--repeats`` fits each (fresh secret noise). Also reported: scikit-learn's variational-bound
perplexity of the held-out documents (``bound_perplexity``, the same evaluator for every
``lambda``).

Usage::

    python benchmarks/dp_vi_real_text.py --corpora debian,wordnet --out /tmp/dp_vi_real
    python benchmarks/dp_vi_real_text.py --corpora wordnet --max-documents 20000 --epsilons 1
    python benchmarks/dp_vi_real_text.py --models full,private --repeats 2   # no scikit-learn

Timings are wall-clock on whatever machine runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer  # noqa: E402

from dptensor import DPVariationalLDA, evaluation  # noqa: E402
from dptensor.models._options import build_estimator  # noqa: E402
from dptensor.models.topics.dp_vi import DEFAULT_PRIVATE_DOC_TOPIC_PRIOR  # noqa: E402

TOKEN_PATTERN = r"(?u)\b[a-zA-Z][a-zA-Z]+\b"
WORDNET = Path("/usr/share/wordnet")


# ---------------------------------------------------------------------------------------------
# corpora
# ---------------------------------------------------------------------------------------------
def debian_descriptions() -> list[str]:
    """The ``Description:`` line of every package ``apt-cache dumpavail`` lists (duplicates dropped)."""
    text = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, check=True).stdout
    lines = re.findall(r"^Description: (.*)$", text, flags=re.MULTILINE)
    return list(dict.fromkeys(lines))


def wordnet_glosses() -> list[str]:
    """The gloss (text after ``|``) of every synset in WordNet's four data files."""
    out: list[str] = []
    for part in ("noun", "verb", "adj", "adv"):
        with open(WORDNET / f"data.{part}", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("  ") or "|" not in line:
                    continue
                out.append(line.split("|", 1)[1].strip())
    return out


LOADERS = {"debian": debian_descriptions, "wordnet": wordnet_glosses}


def public_vocabulary(texts: list[str], n_words: int) -> list[str]:
    """The ``n_words`` most frequent non-stop words of ``texts`` (the separate, public text)."""
    vec = CountVectorizer(token_pattern=TOKEN_PATTERN, stop_words=sorted(ENGLISH_STOP_WORDS),
                          max_features=n_words, lowercase=True)  # fmt: skip
    vec.fit(texts)
    return sorted(vec.vocabulary_)


def load(name: str, n_words: int, public_fraction: float, max_documents: int | None, seed: int) -> dict:
    """The corpus's counts over a vocabulary from its public slice (set apart and removed)."""
    texts = LOADERS[name]()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(texts))
    n_public = int(round(public_fraction * len(texts)))
    vocab = public_vocabulary([texts[i] for i in order[:n_public]], n_words)
    private = np.sort(order[n_public:])
    if max_documents is not None and private.size > max_documents:
        private = np.sort(rng.choice(private, max_documents, replace=False))
    texts = [texts[i] for i in private]
    counts = CountVectorizer(token_pattern=TOKEN_PATTERN, vocabulary=vocab, lowercase=True).transform(texts)
    return {"name": name, "counts": sp.csr_matrix(counts, dtype=np.float64), "vocab": vocab}


def split(counts: sp.csr_matrix, test_fraction: float, seed: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    order = np.random.default_rng(seed + 1).permutation(counts.shape[0])
    n_test = int(round(test_fraction * counts.shape[0]))
    return counts[np.sort(order[n_test:])], counts[np.sort(order[:n_test])]


# ---------------------------------------------------------------------------------------------
# scores (dptensor.evaluation)
# ---------------------------------------------------------------------------------------------
def scores(model, data: dict) -> dict:
    """Completion perplexity, NPMI, and scikit-learn's variational-bound perplexity of the held-out set."""
    k = model.components_.shape[0]
    bound = DPVariationalLDA.from_components(model.components_, doc_topic_prior=1 / k, topic_word_prior=1 / k)
    return {
        "perplexity": evaluation.completion_perplexity(model, data["split"]),
        "npmi": float(np.mean(evaluation.topic_npmi(model, data["all"]))),
        "bound_perplexity": bound.perplexity(data["test"]),
    }


# ---------------------------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------------------------
def fit(
    label: str, train: sp.csr_matrix, k: int, epsilon: float | None, delta: float, seed: int, params: dict
):  # noqa: ANN201 - a fitted estimator
    """scikit-learn's online LDA, or DPVariationalLDA with its defaults (plus ``params`` when private)."""
    if label.startswith("sklearn"):
        from sklearn.decomposition import LatentDirichletAllocation

        return LatentDirichletAllocation(k, learning_method="online", random_state=seed).fit(train)
    if epsilon is None:  # params name the options flatly (build_estimator)
        return build_estimator(DPVariationalLDA, n_components=k, random_state=seed, **params).fit(train)
    return build_estimator(DPVariationalLDA, n_components=k, epsilon=epsilon, delta=delta, random_state=seed,
                           **params).fit(train)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpora", default="debian,wordnet")
    parser.add_argument("--words", type=int, default=2000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--test-fraction", type=float, default=0.1)
    parser.add_argument("--public-fraction", type=float, default=0.2)
    parser.add_argument("--max-documents", type=int, default=None)
    parser.add_argument("--epsilons", default="1,4")
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--private", default="{}", help="extra DPVariationalLDA parameters (JSON)")
    parser.add_argument("--models", default="sklearn,online,full,private",
                        help="rows to fit: sklearn, online (non-private defaults), full (non-private "
                        "full batch, alpha 0.5), private")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="folder for results.json")
    args = parser.parse_args(argv)
    names = args.corpora.split(",")
    extra = json.loads(args.private)
    rows = []
    for name in names:
        corpus = load(name, args.words, args.public_fraction, args.max_documents, args.seed)
        train, test = split(corpus["counts"], args.test_fraction, args.seed)
        split_ = evaluation.split_documents(test, random_state=args.seed + 2)
        data = {"split": split_, "all": corpus["counts"], "test": test}
        lengths = np.asarray(train.sum(axis=1)).ravel()
        print(f"[{name}] {train.shape[0]} training, {test.shape[0]} held-out documents, "
              f"V={train.shape[1]}, median length {np.median(lengths):g}, "
              f"empty {np.mean(lengths == 0):.1%}", flush=True)  # fmt: skip
        rows.append({"corpus": name, "model": "unigram", "epsilon": None, "npmi": None, "seconds": 0.0,
                     "perplexity": evaluation.unigram_perplexity(train, split_)})  # fmt: skip
        print(rows[-1], flush=True)
        models = args.models.split(",")
        fits = []
        if "sklearn" in models:
            fits.append(("sklearn online", None, {}))
        if "online" in models:
            fits.append(("DPVariationalLDA", None, {}))
        if "full" in models:  # the private defaults' schedule and prior, without noise
            full = {"batch_size": train.shape[0], "doc_topic_prior": DEFAULT_PRIVATE_DOC_TOPIC_PRIOR}
            fits.append(("DPVariationalLDA full batch", None, full))
        if "private" in models:
            fits += [("DPVariationalLDA", float(e), extra) for e in args.epsilons.split(",") if e]
        for label, eps, params in fits:
            for rep in range(args.repeats if eps is not None else 1):
                start = time.perf_counter()
                model = fit(label, train, args.k, eps, args.delta, rep, params)
                row = {"corpus": name, "model": label, "epsilon": eps, **scores(model, data),
                       "seconds": time.perf_counter() - start}  # fmt: skip
                if eps is not None:
                    g = model.guarantee_
                    row.update(clip=g.details["clip"], noise_std=g.details["noise_std"],
                               batch_size=g.details["batch_size"], steps=g.n_releases)  # fmt: skip
                rows.append(row)
                print(row, flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
