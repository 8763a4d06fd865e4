"""Spectral LDA against scikit-learn and gensim variational LDA on synthetic corpora.

Each cell ``(N documents, V words, k topics)`` draws one LDA corpus with known topics
(``dptensor.datasets.lda.make_lda_corpus``: ``alpha_i = 1/k`` so ``alpha_0 = 1``, topics from a
symmetric ``Dirichlet(0.05)`` over the vocabulary, mean document length 100), writes it to a
``.npz`` file, and fits each method in its own subprocess so that peak memory (``VmHWM`` of
that process, corpus loading included) is measured per method. Reported: fit wall time, peak
resident memory, and the mean L1 distance between true and estimated topics after Hungarian
matching (``scipy.optimize.linear_sum_assignment`` on the k x k L1 cost matrix).

Peers get the true priors (``doc_topic_prior``/``alpha = 1/k``, ``topic_word_prior``/``eta =
0.05``) and their usual settings: scikit-learn ``LatentDirichletAllocation(
learning_method="online", batch_size=--sk-batch, max_iter=--sk-passes)``; gensim ``LdaModel(
passes=--gensim-passes, chunksize=2000, iterations=50, eval_every=None)``. All methods run with
``--threads`` BLAS threads (default 1, the machine's 2 cores being shared).

Usage::

    python benchmarks/bench_lda.py --cells 20000,5000,20 100000,20000,20 \\
        --methods spectral,sklearn,gensim --out benchmarks/results/lda.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment

TOPIC_CONCENTRATION = 0.05
DOC_LENGTH = 100


def topic_l1_error(true_topics: np.ndarray, est_topics: np.ndarray) -> float:
    """Mean L1 distance between matched topics (Hungarian matching on the L1 cost)."""
    est = np.asarray(est_topics, dtype=np.float64)
    est = est / est.sum(axis=1, keepdims=True)
    cost = np.stack([np.abs(est - row).sum(axis=1) for row in true_topics])
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MB.

    ``VmHWM`` from ``/proc/self/status`` belongs to this process's address space and restarts at
    ``exec``; ``ru_maxrss`` can carry the parent's high-water mark across ``fork``/``exec`` on
    Linux, so it is only the fallback.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_cell(n_docs: int, n_words: int, k: int, seed: int, workdir: Path) -> Path:
    from dptensor.datasets.lda import make_lda_corpus

    path = workdir / f"lda_{n_docs}_{n_words}_{k}_{seed}.npz"
    if path.exists():
        return path
    corpus = make_lda_corpus(
        n_docs,
        n_words,
        k,
        alpha=1.0 / k,
        doc_length=DOC_LENGTH,
        topic_concentration=TOPIC_CONCENTRATION,
        random_state=seed,
    )
    np.savez(
        path,
        data=corpus.counts.data.astype(np.int32),
        indices=corpus.counts.indices,
        indptr=corpus.counts.indptr,
        shape=np.array(corpus.counts.shape),
        topics=corpus.topics,
        alpha=corpus.alpha,
    )
    return path


def load_cell(path: Path) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    with np.load(path) as f:
        counts = sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(f["shape"]))
        return counts, f["topics"], f["alpha"]


def worker(method: str, path: Path, args: argparse.Namespace) -> dict:
    counts, topics, alpha = load_cell(path)
    k = topics.shape[0]
    info: dict = {}
    start = time.perf_counter()
    if method == "spectral":
        from dptensor.models.topics.spectral import SpectralLDA

        model = SpectralLDA(k, float(alpha.sum()), random_state=args.seed).fit(counts)
        est = model.components_
        info = {"timings": model.timings_, "dropped_docs": model.n_dropped_documents_}
    elif method == "sklearn":
        from sklearn.decomposition import LatentDirichletAllocation

        model = LatentDirichletAllocation(
            n_components=k,
            doc_topic_prior=float(alpha[0]),
            topic_word_prior=TOPIC_CONCENTRATION,
            learning_method="online",
            batch_size=args.sk_batch,
            max_iter=args.sk_passes,
            total_samples=counts.shape[0],
            n_jobs=1,
            random_state=args.seed,
        ).fit(counts)
        est = model.components_
        info = {"passes": args.sk_passes, "batch_size": args.sk_batch}
    elif method == "gensim":
        from gensim.matutils import Sparse2Corpus
        from gensim.models import LdaModel

        corpus = Sparse2Corpus(counts.tocsc().T.tocsc(), documents_columns=True)
        model = LdaModel(
            corpus=corpus,
            num_topics=k,
            id2word={i: str(i) for i in range(counts.shape[1])},
            alpha=np.asarray(alpha, dtype=np.float64),
            eta=TOPIC_CONCENTRATION,
            passes=args.gensim_passes,
            chunksize=2000,
            iterations=50,
            eval_every=None,
            random_state=args.seed,
        )
        est = model.get_topics()
        info = {"passes": args.gensim_passes, "chunksize": 2000, "iterations": 50}
    else:
        raise ValueError(method)
    seconds = time.perf_counter() - start
    return {
        "method": method,
        "seconds": seconds,
        "peak_rss_mb": peak_rss_mb(),
        "l1_error": topic_l1_error(topics, est),
        **info,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cells", nargs="+", default=["20000,5000,20"], help="N,V,k triples")
    parser.add_argument("--methods", default="spectral,sklearn,gensim")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sk-passes", type=int, default=5)
    parser.add_argument("--sk-batch", type=int, default=1024)
    parser.add_argument("--gensim-passes", type=int, default=5)
    parser.add_argument("--workdir", default="/tmp/dptensor_bench_lda")
    parser.add_argument("--out", default="benchmarks/results/lda.json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        print(json.dumps(worker(args.worker, Path(args.corpus), args)))
        return

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else []
    for cell in args.cells:
        n_docs, n_words, k = (int(x) for x in cell.split(","))
        t0 = time.perf_counter()
        path = make_cell(n_docs, n_words, k, args.seed, workdir)
        ready = time.perf_counter() - t0
        print(f"cell N={n_docs} V={n_words} k={k}: corpus ready ({ready:.1f} s)", flush=True)
        for method in args.methods.split(","):
            cmd = [
                sys.executable, __file__, "--worker", method, "--corpus", str(path), "--seed", str(args.seed),
                "--sk-passes", str(args.sk_passes), "--sk-batch", str(args.sk_batch),
                "--gensim-passes", str(args.gensim_passes),
            ]  # fmt: skip
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stderr[-2000:], file=sys.stderr)
                continue
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            row.update({"N": n_docs, "V": n_words, "k": k, "threads": args.threads})
            results = [
                r for r in results if (r["N"], r["V"], r["k"], r["method"]) != (n_docs, n_words, k, method)
            ] + [row]
            print(
                f"  {method:8s} {row['seconds']:9.1f} s  peak {row['peak_rss_mb']:8.0f} MB  "
                f"L1 {row['l1_error']:.4f}",
                flush=True,
            )
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)


def print_table(results: list[dict]) -> None:
    print(
        "\n| N | V | k | method | fit time (s) | peak RSS (MB) | mean L1 topic error "
        "| speed-up vs faster peer |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(results, key=lambda r: (r["N"], r["V"], r["k"], r["method"])):
        peers = [
            p["seconds"]
            for p in results
            if (p["N"], p["V"], p["k"]) == (r["N"], r["V"], r["k"]) and p["method"] != "spectral"
        ]
        ratio = f"{min(peers) / r['seconds']:.0f}x" if r["method"] == "spectral" and peers else ""
        print(
            f"| {r['N']} | {r['V']} | {r['k']} | {r['method']} | {r['seconds']:.1f} | "
            f"{r['peak_rss_mb']:.0f} | {r['l1_error']:.4f} | {ratio} |"
        )


if __name__ == "__main__":
    main()
