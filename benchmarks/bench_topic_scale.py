"""A million documents from disk: the refined SpectralLDA against tomotopy on the same file (issue 35).

The corpus is the change-log items installed on this machine (``_corpora.debian_changelogs``),
counted over their own ``--vocab-size`` most frequent words (English stop words removed) and
resampled with replacement to ``--documents`` documents (default 10^6), written once as a SciPy
``.npz`` count file plus a vocabulary file under ``--workdir``. Then, each in its own process so
that its peak memory (``ru_maxrss`` of the child) is its own:

* ``dptensor lda fit corpus.npz --vocab vocab.txt --topics K --jobs J --out model.npz`` (the
  command a user runs: reads the file, fits the moments, refines, writes the model);
* tomotopy ``LDAModel(k=K, alpha=1/K, eta=0.01)``, ``train(--tomotopy-iterations, workers=J)``
  on the same documents (read from the same ``.npz``; the time is ``train`` alone).

Reported: wall time, peak resident memory, and for dptensor the refinement passes and the time of
each step. Results: ``<out>/topic_scale.json`` and ``.md``.

Usage::

    python benchmarks/bench_topic_scale.py --documents 1000000 --workdir /tmp/scale
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _corpora  # noqa: E402  (next to this script)

from dptensor._files import write_json  # noqa: E402

#: Runs a command's code and prints its own peak resident memory (VmHWM, reset by exec, unlike
#: ru_maxrss, which keeps the memory of the process it was forked from) as the last line of stderr.
PEAK_REPORT = r"""
import atexit, sys
def _report():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            print("peak_kib", line.split()[1], file=sys.stderr)
atexit.register(_report)
"""

DPTENSOR_CHILD = PEAK_REPORT + r"""
import runpy
sys.argv = ["dptensor", *sys.argv[1:]]
runpy.run_module("dptensor", run_name="__main__")
"""

TOMOTOPY_CHILD = PEAK_REPORT + r"""
import json, time
import numpy as np, scipy.sparse as sp, tomotopy as tp
path, vocab_path, k, iterations, workers, seed = sys.argv[1:7]
k, iterations, workers, seed = int(k), int(iterations), int(workers), int(seed)
counts = sp.load_npz(path).tocsr()
vocabulary = open(vocab_path, encoding="utf-8").read().split("\n")[: counts.shape[1]]
model = tp.LDAModel(k=k, alpha=1.0 / k, eta=0.01, seed=seed)
for n in range(counts.shape[0]):
    lo, hi = counts.indptr[n], counts.indptr[n + 1]
    words = np.repeat(counts.indices[lo:hi], counts.data[lo:hi].astype(np.int64))
    if words.size:
        model.add_doc([vocabulary[w] for w in words])
start = time.perf_counter()
model.train(iterations, workers=workers)
print(json.dumps({"train_seconds": time.perf_counter() - start, "documents": len(model.docs)}))
"""


def build_corpus(args: argparse.Namespace) -> tuple[Path, Path, dict]:
    """Write the resampled count file and its vocabulary (once; reused when present)."""
    from sklearn.feature_extraction.text import CountVectorizer

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path, vocab_path = workdir / f"changelogs_{args.documents}.npz", workdir / "vocab.txt"
    info_path = workdir / f"changelogs_{args.documents}.json"
    if path.exists() and vocab_path.exists() and info_path.exists():
        return path, vocab_path, json.loads(info_path.read_text())
    texts = _corpora.debian_changelogs()
    vectorizer = CountVectorizer(stop_words="english", token_pattern=_corpora.TOKEN_PATTERN,
                                 max_features=args.vocab_size)  # fmt: skip
    counts = sp.csr_matrix(vectorizer.fit_transform(texts), dtype=np.float64)
    counts = counts[np.asarray(counts.sum(axis=1)).ravel() >= 1]
    rows = np.random.default_rng(args.seed).integers(0, counts.shape[0], size=args.documents)
    sample = counts[rows]
    sp.save_npz(path, sample)
    vocab_path.write_text("\n".join(vectorizer.get_feature_names_out()) + "\n", encoding="utf-8")
    info = {"source_documents": int(counts.shape[0]), "documents": int(sample.shape[0]),
            "words": int(sample.shape[1]), "tokens": float(sample.sum()), "stored_entries": int(sample.nnz),
            "file_mb": path.stat().st_size / 2**20}  # fmt: skip
    info_path.write_text(json.dumps(info))
    return path, vocab_path, info


def run_child(argv: list[str]) -> tuple[str, float, float]:
    """Run a child process; returns its standard output, wall time and own peak resident memory (MiB)."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:5]} failed:\n{done.stderr[-3000:]}")
    peak = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("peak_kib ")]
    return done.stdout, seconds, float(peak[-1]) / 1024


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=1_000_000)
    parser.add_argument("--vocab-size", type=int, default=5000)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--tomotopy-iterations", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default="/tmp/dptensor-scale")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    parser.add_argument("--skip-tomotopy", action="store_true")
    args = parser.parse_args(argv)
    path, vocab_path, info = build_corpus(args)
    print(f"corpus: {info}", file=sys.stderr)
    model_path = Path(args.workdir) / "model.npz"
    fit = [sys.executable, "-c", DPTENSOR_CHILD, "lda", "fit", str(path), "--vocab", str(vocab_path),
           "--topics", str(args.topics), "--jobs", str(args.jobs), "--seed", str(args.seed),
           "--out", str(model_path)]  # fmt: skip
    _, seconds, peak = run_child(fit)
    with np.load(model_path, allow_pickle=False) as saved:
        meta = json.loads(str(saved["meta"]))
    rows = [{"tool": "dptensor lda fit (SpectralLDA, refined)", "seconds": seconds, "peak_mib": peak,
             "timings": meta.get("timings"), "refinement": meta.get("refinement")}]  # fmt: skip
    print(f"dptensor: {seconds:.1f} s, peak {peak:.0f} MiB", file=sys.stderr)
    if not args.skip_tomotopy:
        child = [sys.executable, "-c", TOMOTOPY_CHILD, str(path), str(vocab_path), str(args.topics),
                 str(args.tomotopy_iterations), str(args.jobs), str(args.seed)]  # fmt: skip
        stdout, seconds, peak = run_child(child)
        result = json.loads(stdout.strip().splitlines()[-1])
        rows.append({"tool": f"tomotopy ({args.tomotopy_iterations} iterations)", "seconds": seconds,
                     "train_seconds": result["train_seconds"], "peak_mib": peak})  # fmt: skip
        print(f"tomotopy: train {result['train_seconds']:.1f} s (process {seconds:.1f} s), "
              f"peak {peak:.0f} MiB", file=sys.stderr)  # fmt: skip
    summary = {"corpus": info, "settings": vars(args), "rows": rows}
    out = Path(args.out)
    write_json(out / "topic_scale.json", summary)
    lines = [f"# {info['documents']:,} documents from disk ({info['file_mb']:.0f} MB .npz, "
             f"{info['tokens']:,.0f} tokens, V = {info['words']}, k = {args.topics}, "
             f"{args.jobs} threads)", "",
             "| tool | seconds | peak MiB |", "|---|---:|---:|"]  # fmt: skip
    for row in rows:
        train = f" (train {row['train_seconds']:.1f})" if "train_seconds" in row else ""
        secs = f"{row['seconds']:.1f}{train}"
        lines.append(f"| {row['tool']} | {secs} | {row['peak_mib']:.0f} |")
    (out / "topic_scale.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return summary


if __name__ == "__main__":
    main()
