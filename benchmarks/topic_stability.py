"""Seed-to-seed stability of spectral LDA's topics on a real corpus (issue 26 item 3).

Fits ``SpectralLDA`` with several seeds on the same counts and reports the mean and worst
Hungarian-matched L1 distance between the topics of every pair of seeds (``0`` = identical,
``2`` = disjoint supports), with the fitted ``topic_stability_`` where the model reports it.

Corpora (never committed; read on this machine):

* ``debian`` (default): the long English descriptions of the Debian packages in APT's lists
  (``/var/lib/apt/lists/*Translation-en*``, about 64 000), or, without them, the one-line
  ``Description:`` fields that ``apt-cache dumpavail`` prints;
* ``wordnet``: the glosses of ``/usr/share/wordnet/data.{noun,verb,adj,adv}`` (the text after ``|``);
* any plain-text file, one document per line.

Run (about a minute per fit on a shared 2-core machine)::

    python benchmarks/topic_stability.py debian --topics 20 --seeds 0 1 2 \
        --out benchmarks/results/topic_stability_debian.json
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import dptensor
from dptensor.datasets.corpus import load_corpus
from dptensor.metrics import matched_topic_l1
from dptensor.models import SpectralLDA

#: Topics whose ``topic_stability_`` is at least this count as stable in the summary.
STABLE_SHARE = 0.75


def debian_descriptions() -> list[str]:
    """Long package descriptions from APT's Translation-en lists, else ``apt-cache dumpavail``'s."""
    documents: list[str] = []
    for path in sorted(glob.glob("/var/lib/apt/lists/*_i18n_Translation-en*")):
        text = subprocess.run(
            ["/usr/lib/apt/apt-helper", "cat-file", path], capture_output=True, text=True, check=True
        ).stdout
        for record in text.split("\n\n"):
            lines = record.splitlines()
            for i, line in enumerate(lines):
                if line.startswith("Description-en:"):
                    body = [line.split(":", 1)[1]] + [x.strip() for x in lines[i + 1 :] if x.strip() != "."]
                    documents.append(" ".join(body))
    if documents:
        return documents
    text = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, check=True).stdout
    return [line.split(":", 1)[1] for line in text.splitlines() if line.startswith("Description:")]


def wordnet_glosses() -> list[str]:
    documents = []
    for part in ("noun", "verb", "adj", "adv"):
        for line in Path(f"/usr/share/wordnet/data.{part}").read_text(errors="replace").splitlines():
            if not line.startswith(" ") and "|" in line:
                documents.append(line.split("|", 1)[1])
    return documents


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", help="debian, wordnet, or a text file with one document per line")
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--alpha0", type=float, default=1.0)
    parser.add_argument("--max-features", type=int, default=20000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--decomposition", choices=["simultaneous", "robust"], default="simultaneous")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)

    if args.corpus in ("debian", "wordnet"):
        documents = debian_descriptions() if args.corpus == "debian" else wordnet_glosses()
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.writelines(" ".join(doc.split()) + "\n" for doc in documents if doc.strip())
            path = f.name
    else:
        path = args.corpus
    corpus = load_corpus(path, stop_words="english", max_features=args.max_features)
    counts = corpus.counts.astype(float)
    print(f"{args.corpus}: {counts.shape[0]} documents, {counts.shape[1]} words", flush=True)

    fits = []
    for seed in args.seeds:
        start = time.perf_counter()
        model = SpectralLDA(
            args.topics, args.alpha0, decomposition=args.decomposition, random_state=seed
        ).fit(counts)
        seconds = time.perf_counter() - start
        stability = getattr(model, "topic_stability_", None)
        fits.append((seed, model, seconds))
        line = f"seed {seed}: {seconds:.1f} s"
        if stability is not None:
            line += f", stable topics (share >= {STABLE_SHARE}) {int(np.sum(stability >= STABLE_SHARE))}"
            line += f" of {args.topics}"
        print(line, flush=True)

    pairs = []
    for (s1, m1, _), (s2, m2, _) in itertools.combinations(fits, 2):
        distances = matched_topic_l1(m1.components_, m2.components_)  # rows of m1 in order
        pair = {"seeds": [s1, s2], "mean_l1": float(distances.mean()), "max_l1": float(distances.max())}
        line = f"seeds {s1} vs {s2}: mean matched L1 {distances.mean():.4f}, worst {distances.max():.4f}"
        stability = getattr(m1, "topic_stability_", None)
        if stability is not None:  # how far the topics seed s1 calls stable (share >= 0.75) moved
            stable = stability >= STABLE_SHARE
            pair["n_stable"] = int(stable.sum())
            pair["mean_l1_stable"] = float(distances[stable].mean()) if stable.any() else None
            pair["mean_l1_unstable"] = float(distances[~stable].mean()) if (~stable).any() else None
            line += f"; {int(stable.sum())} stable topics of seed {s1}: mean L1 {pair['mean_l1_stable']}"
            line += f", the others {pair['mean_l1_unstable']}"
        pairs.append(pair)
        print(line, flush=True)
    result = {
        "corpus": args.corpus,
        "n_documents": int(counts.shape[0]),
        "n_words": int(counts.shape[1]),
        "topics": args.topics,
        "alpha0": args.alpha0,
        "decomposition": args.decomposition,
        "pairs": pairs,
        "mean_l1": float(np.mean([p["mean_l1"] for p in pairs])) if pairs else None,
        "seconds_per_fit": [round(s, 2) for _, _, s in fits],
        "topic_stability": {
            str(seed): (
                None if getattr(m, "topic_stability_", None) is None else m.topic_stability_.round(4).tolist()
            )
            for seed, m, _ in fits
        },
        "dptensor": dptensor.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
