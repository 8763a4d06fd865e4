"""DP variational LDA: speed and held-out perplexity against scikit-learn and gensim, and privacy-utility.

One synthetic LDA corpus with known topics (``make_lda_corpus``: ``alpha_i = 1/k``, topics from a
symmetric ``Dirichlet(--topic-concentration)``, mean document length ``--doc-length``), split into
``--train`` training and ``--test`` held-out documents. In one run:

1. **Non-private, equal passes.** ``DPVariationalLDA(epsilon=None)``, scikit-learn's
   ``LatentDirichletAllocation(learning_method="online")`` and gensim's ``LdaModel`` (online,
   ``update_every=1``), all with priors ``1/k``, minibatch ``--batch-size`` (gensim's
   ``chunksize``), ``--passes`` passes, learning rate ``(tau_0 + t)^-0.7`` with ``tau_0 =
   --learning-offset`` (gensim's ``offset``/``decay``), at most 100 E-step iterations per document
   with tolerance 1e-3 (gensim's ``iterations``/``gamma_threshold``). Every model's ``lambda`` is
   scored by the *same* evaluator, scikit-learn's variational bound
   (``DPVariationalLDA.from_components(lambda).perplexity(test)``), so the perplexities compare
   like with like; also the mean L1 error of the matched topics against the true ones. Each tool
   runs once per ``--seeds`` seed (its random initialisation): online VB has local optima, so one
   seed can mislead by 15% or more.
2. **Private.** ``DPVariationalLDA`` at each ``--epsilons`` (``delta = --delta``), with minibatch
   ``--private-batch-size`` (the noise on the mean falls as ``1/S``) and the declared maximum
   document length ``--max-doc-length`` (so ``C = 0.1 L``; longer documents are truncated), the default
   exact accountant (Poisson sampling, PLD under replace-one) and, for reference, the authors'
   ``accountant="paper"`` (unproven: fixed-size minibatches and the moments accountant) with its
   noise's valid epsilon. ``--repeats`` fits per setting (fresh secret noise each time, public
   seed ``0, 1, ...``).

Timings are wall-clock on a shared machine; compare the ratios within one run. BLAS runs with
``--threads`` threads (default 1).

Usage::

    python benchmarks/bench_dp_vi.py --out benchmarks/results/dp_vi
    python benchmarks/bench_dp_vi.py --quick          # a small corpus, a minute
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def _set_threads(argv: list[str]) -> None:
    threads = "1"
    if "--threads" in argv:
        threads = argv[argv.index("--threads") + 1]
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, threads)


_set_threads(sys.argv)

import numpy as np  # noqa: E402  (after the thread settings)
from scipy.optimize import linear_sum_assignment  # noqa: E402

from dptensor import DPVariationalLDA  # noqa: E402
from dptensor._files import write_csv, write_json  # noqa: E402
from dptensor.datasets.lda import make_lda_corpus  # noqa: E402
from dptensor.models._options import build_estimator  # noqa: E402
from dptensor.privacy import enable_features  # noqa: E402
from dptensor.research import PaperDPVariationalLDA  # noqa: E402


def topic_l1_error(true_topics: np.ndarray, lam: np.ndarray) -> float:
    """Mean L1 distance between true topics and the matched rows of ``lambda`` (normalised)."""
    est = lam / lam.sum(axis=1, keepdims=True)
    cost = np.abs(true_topics[:, None, :] - est[None, :, :]).sum(axis=2)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


def evaluate(lam: np.ndarray, test, topics: np.ndarray) -> dict:
    scorer = DPVariationalLDA.from_components(lam)
    return {"perplexity": scorer.perplexity(test), "topic_l1": topic_l1_error(topics, lam)}


def fit_dptensor(train, args, seed: int, **private) -> tuple[np.ndarray, float, DPVariationalLDA]:
    batch_size = args.private_batch_size if private else args.batch_size
    # the paper's accountant is the research wing's; every setting named flatly (build_estimator)
    paper = private.get("accountant") == "paper"
    if not paper:
        private.pop("accountant", None)
    model = build_estimator(
        PaperDPVariationalLDA if paper else DPVariationalLDA, n_components=args.k, random_state=seed,
        batch_size=batch_size, n_passes=args.passes, learning_offset=args.learning_offset, **private,
    )  # fmt: skip
    start = time.perf_counter()
    model.fit(train)
    return model.components_, time.perf_counter() - start, model


def fit_sklearn(train, args, seed: int) -> tuple[np.ndarray, float]:
    from sklearn.decomposition import LatentDirichletAllocation

    model = LatentDirichletAllocation(
        args.k, doc_topic_prior=1 / args.k, topic_word_prior=1 / args.k, learning_method="online",
        learning_offset=args.learning_offset, learning_decay=0.7, batch_size=args.batch_size,
        max_iter=args.passes, total_samples=train.shape[0], max_doc_update_iter=100, mean_change_tol=1e-3,
        n_jobs=1, random_state=seed,
    )  # fmt: skip
    start = time.perf_counter()
    model.fit(train)
    return model.components_, time.perf_counter() - start


def fit_gensim(train, args, seed: int) -> tuple[np.ndarray, float]:
    from gensim.matutils import Sparse2Corpus
    from gensim.models import LdaModel

    corpus = Sparse2Corpus(train.T.tocsc(), documents_columns=True)
    start = time.perf_counter()
    model = LdaModel(
        corpus=corpus, num_topics=args.k, id2word={i: str(i) for i in range(train.shape[1])},
        alpha="symmetric", eta=1 / args.k, passes=args.passes, chunksize=args.batch_size, update_every=1,
        decay=0.7, offset=args.learning_offset, iterations=100, gamma_threshold=1e-3, eval_every=None,
        random_state=seed,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    return model.state.get_lambda(), seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--train", type=int, default=20000)
    parser.add_argument("--test", type=int, default=2000)
    parser.add_argument("--words", type=int, default=1000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--doc-length", type=int, default=100)
    parser.add_argument("--topic-concentration", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--learning-offset", type=float, default=64.0)
    parser.add_argument("--epsilons", default="0.5,1,2,4,8,16")
    parser.add_argument("--private-batch-size", type=int, default=2000)
    parser.add_argument("--max-doc-length", type=int, default=150)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--peers", default="sklearn,gensim")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic corpus")
    parser.add_argument("--seeds", default="0,1,2,3,4,5", help="initialisation seeds of the non-private fits")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a small corpus (about a minute)")
    parser.add_argument("--out", default="benchmarks/results/dp_vi", help="prefix of the .json/.csv outputs")
    args = parser.parse_args(argv)
    if args.quick:
        args.train, args.test, args.words, args.k = 3000, 500, 300, 5
        args.epsilons, args.repeats, args.seeds, args.private_batch_size = "1,4,16", 1, "0,1", 500

    corpus = make_lda_corpus(
        args.train + args.test, args.words, args.k, alpha=1 / args.k, doc_length=args.doc_length,
        topic_concentration=args.topic_concentration, random_state=args.seed,
    )  # fmt: skip
    train, test = corpus.counts[: args.train], corpus.counts[args.train :]
    print(
        f"corpus: {args.train} training / {args.test} held-out documents, V={args.words}, k={args.k}, "
        f"{args.passes} passes, batch {args.batch_size}, tau_0={args.learning_offset:g}", flush=True,
    )  # fmt: skip

    rows: list[dict] = []
    fitters = {"dptensor": lambda tr, a, sd: fit_dptensor(tr, a, sd)[:2], "sklearn": fit_sklearn,
               "gensim": fit_gensim}  # fmt: skip
    for method in ["dptensor", *[p for p in args.peers.split(",") if p]]:
        for seed in (int(x) for x in args.seeds.split(",")):
            lam, seconds = fitters[method](train, args, seed)
            row = {"part": "non-private", "method": method, "epsilon": None, "repeat": seed,
                   "seconds": seconds, **evaluate(lam, test, corpus.topics)}  # fmt: skip
            rows.append(row)
            print(f"  {method:9s} seed {seed}: {seconds:7.2f} s  perplexity {row['perplexity']:8.2f}  "
                  f"topic L1 {row['topic_l1']:.4f}", flush=True)  # fmt: skip

    for epsilon in (float(e) for e in args.epsilons.split(",")):
        for accountant in ("exact", "paper"):
            for rep in range(args.repeats):
                with enable_features("unproven"):
                    lam, seconds, model = fit_dptensor(
                        train, args, rep, epsilon=epsilon, delta=args.delta, accountant=accountant,
                        max_doc_length=args.max_doc_length, clip=0.1 * args.max_doc_length,
                        doc_topic_prior=1 / args.k,
                    )  # C = 0.1 L and alpha = 1/k, as both accountants used when this table was made
                g = model.guarantee_
                row = {
                    "part": "private", "method": f"dptensor ({accountant})", "epsilon": epsilon,
                    "repeat": rep, "seconds": seconds, "noise_std": g.details["noise_std"],
                    "noise_multiplier": g.noise_multiplier, "holds": g.holds, "clip": g.details["clip"],
                    "batch_size": args.private_batch_size,
                    "epsilon_valid": g.epsilon_exact if g.holds else g.details["epsilon_valid"],
                    **evaluate(lam, test, corpus.topics),
                }  # fmt: skip
                rows.append(row)
                print(
                    f"  eps={epsilon:<5g} {accountant:5s} #{rep}: {seconds:6.2f} s  "
                    f"sigma {row['noise_std']:.4f}  perplexity {row['perplexity']:8.2f}  "
                    f"topic L1 {row['topic_l1']:.4f}  valid eps {row['epsilon_valid']:.3g}", flush=True,
                )  # fmt: skip

    settings = {k: v for k, v in vars(args).items() if k != "out"}
    out = Path(args.out)
    write_json(out.with_suffix(".json"), {"settings": settings, "rows": rows})
    fields = list(dict.fromkeys(key for row in rows for key in row))
    write_csv(out.with_suffix(".csv"), [{key: row.get(key) for key in fields} for row in rows])
    print_tables(rows)


def _mean(group: list[dict], key: str) -> float:
    return float(np.mean([r[key] for r in group]))


def print_tables(rows: list[dict]) -> None:
    base = [r for r in rows if r["part"] == "non-private"]
    methods = list(dict.fromkeys(r["method"] for r in base))
    groups = {m: [r for r in base if r["method"] == m] for m in methods}
    ours = groups["dptensor"]
    print("\n| method | fit time (s) | time / dptensor | held-out perplexity (min-max over seeds) "
          "| perplexity / dptensor | topic L1 |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for m, group in groups.items():
        perp = [r["perplexity"] for r in group]
        ratio = _mean(group, "seconds") / _mean(ours, "seconds")
        print(
            f"| {m} | {_mean(group, 'seconds'):.2f} | {ratio:.2f}x | "
            f"{np.mean(perp):.2f} ({min(perp):.2f}-{max(perp):.2f}) | "
            f"{np.mean(perp) / _mean(ours, 'perplexity'):.3f} | {_mean(group, 'topic_l1'):.4f} |"
        )
    private = [r for r in rows if r["part"] == "private"]
    print("\n| epsilon | accountant | valid epsilon | noise std | held-out perplexity | topic L1 "
          "| fit time (s) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    keys = sorted({(r["epsilon"], r["method"]) for r in private})
    for eps, method in keys:
        group = [r for r in private if (r["epsilon"], r["method"]) == (eps, method)]
        mean = {k: float(np.mean([r[k] for r in group]))
                for k in ("perplexity", "topic_l1", "seconds", "epsilon_valid")}  # fmt: skip
        print(
            f"| {eps:g} | {method.split('(')[1][:-1]} | {mean['epsilon_valid']:.3g} | "
            f"{group[0]['noise_std']:.4f} | {mean['perplexity']:.2f} | {mean['topic_l1']:.4f} | "
            f"{mean['seconds']:.2f} |"
        )
    print(f"\n(non-private dptensor: perplexity {_mean(ours, 'perplexity'):.2f}, topic L1 "
          f"{_mean(ours, 'topic_l1'):.4f}; private rows are means over {len(group)} fit(s))")  # fmt: skip


if __name__ == "__main__":
    main()
