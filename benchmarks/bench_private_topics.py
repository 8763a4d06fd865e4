"""Private topic models on real text: NPMI and held-out perplexity against the unigram model (issue 23).

One run measures, on real corpora that a Debian machine holds (``benchmarks/_corpora.py``; never
downloaded, never committed):

1. **The grid.** For each corpus (``--corpora``: Debian package descriptions, WordNet synsets),
   public vocabulary size ``V`` (``--vocab-sizes``; the vocabulary comes from *separate* public
   text, see ``_corpora.vocabulary_for``), number of topics ``k`` (``--topics``) and privacy
   budget ``epsilon`` (``--epsilons``, ``delta = --delta``): the mean NPMI of the topics' top-10
   words on the whole corpus (``dptensor.evaluation.topic_npmi``) and the held-out
   document-completion perplexity (``completion_perplexity``, observed half / held-out half of
   each test document) of

   * the unigram model (training word frequencies; no topics, non-private reference),
   * ``SpectralLDA`` (non-private, defaults), ``PrivateSpectralLDA`` (defaults),
   * ``DPVariationalLDA`` non-private and private (defaults),
   * scikit-learn's online ``LatentDirichletAllocation`` (non-private reference).

   Documents are those with at least 3 vocabulary tokens (a private spectral fit refuses shorter
   ones: ``N`` is public in its guarantee); ``--test-fraction`` of them (at random) are held out.
   Every model trains on the same documents. Private noise is fresh and secret in every fit;
   ``--seed`` fixes only the split and the public randomness of the fits.
2. **The scaling curve** (``--scaling-sizes``; off with ``--no-scaling``): the non-private spectral
   fit's topics ``mu`` and ``alpha`` on ``--scaling-corpus`` (``V = --scaling-vocab``,
   ``k = --scaling-topics``) generate synthetic corpora of ``N`` documents whose lengths are drawn
   from that real corpus' lengths (``make_lda_corpus(lengths=...)``). At each ``N`` and each
   ``--scaling-epsilons``: NPMI (on the real corpus) and mean L1 error of the matched topics
   against the generating ones, for non-private ``SpectralLDA`` and ``PrivateSpectralLDA``
   (``alpha0`` = the generating ``alpha_0``); then the smallest ``N`` at which the private NPMI
   reaches 90% of the non-private NPMI at the same ``N``, and the private L1 error at the largest
   ``N``. The ``planner`` column is the prediction of ``dptensor lda plan``
   (:func:`planner_prediction`; empty until that planner is merged).

Results: ``<out>/private_topics.json`` (every row, settings, timings) and ``<out>/private_topics.md``
(the tables). Progress goes to standard error.

Usage::

    python benchmarks/bench_private_topics.py --quick            # V = 2000, k = 10, epsilon 1 and 4
                                                                 # (no non-private VI references)
    python benchmarks/bench_private_topics.py                    # the full grid
    python benchmarks/bench_private_topics.py --corpora debian --epsilons 1 --no-scaling
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _corpora  # noqa: E402  (next to this script)

from dptensor import DPVariationalLDA, SpectralLDA  # noqa: E402
from dptensor._files import write_json  # noqa: E402
from dptensor.datasets.lda import make_lda_corpus  # noqa: E402
from dptensor.evaluation import (  # noqa: E402
    completion_perplexity,
    split_documents,
    topic_npmi,
    unigram_perplexity,
)
from dptensor.models.topics.private_spectral import PrivateSpectralLDA  # noqa: E402
from dptensor.research.experiments.private_lda import topic_error  # noqa: E402

METHODS = ("unigram", "spectral", "private-spectral", "vi", "dp-vi", "sklearn")
#: The issue's "before" table; the slow non-private references (10 passes of online VB) are left out.
QUICK_METHODS = ("unigram", "spectral", "private-spectral", "dp-vi")
PRIVATE = {"private-spectral", "dp-vi"}
LABELS = {
    "unigram": "unigram model (no topics)",
    "spectral": "`SpectralLDA` (non-private)",
    "private-spectral": "`PrivateSpectralLDA` (defaults)",
    "vi": "`DPVariationalLDA` (non-private)",
    "dp-vi": "`DPVariationalLDA` (defaults)",
    "sklearn": "scikit-learn online LDA (non-private)",
}
MIN_TOKENS = 3
N_TOP = 10


def log(message: str) -> None:
    tqdm.write(message, file=sys.stderr)


def make_model(method: str, k: int, epsilon: float | None, delta: float, seed: int, sklearn_passes: int):
    """The estimator of ``method`` with its defaults (only what the benchmark must set is set)."""
    if method == "spectral":
        return SpectralLDA(k, random_state=seed)
    if method == "private-spectral":
        return PrivateSpectralLDA(k, epsilon=epsilon, delta=delta, random_state=seed)
    if method == "vi":
        return DPVariationalLDA(k, random_state=seed)
    if method == "dp-vi":
        return DPVariationalLDA(k, epsilon=epsilon, delta=delta, random_state=seed)
    if method == "sklearn":
        from sklearn.decomposition import LatentDirichletAllocation

        return LatentDirichletAllocation(
            k, learning_method="online", max_iter=sklearn_passes, random_state=seed
        )
    raise ValueError(f"unknown method {method!r}")


def guarantee_summary(model: object) -> str | None:
    """``"(epsilon, delta), relation, accountant"`` of a private fit (None for a non-private one)."""
    guarantee = getattr(model, "guarantee_", None)
    if guarantee is None:
        return None
    parts = [f"epsilon={guarantee.epsilon:.4g}", f"delta={guarantee.delta:.3g}",
             f"neighbouring={guarantee.neighbouring}", f"accountant={guarantee.accountant}",
             f"holds={guarantee.holds}"]  # fmt: skip
    return ", ".join(parts)


def fit_and_score(method, train, split, reference, k, epsilon, args, vocabulary) -> dict:
    """Fit one model and score it; a failure is recorded, not raised."""
    row: dict = {"method": method, "epsilon": epsilon}
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = make_model(method, k, epsilon, args.delta, args.seed, args.sklearn_passes).fit(train)
        row["seconds"] = time.perf_counter() - start
        npmi = topic_npmi(model, reference, n_top=N_TOP)
        row.update(
            npmi=float(npmi.mean()),
            npmi_per_topic=[round(float(v), 4) for v in npmi],
            perplexity=completion_perplexity(model, split),
            guarantee=guarantee_summary(model),
            warnings=sorted({str(w.message)[:200] for w in caught}),
            top_words=[
                [vocabulary[i] for i in row_]
                for row_ in np.argsort(-np.asarray(model.components_), axis=1, kind="stable")[:, :N_TOP]
            ],
        )
    except Exception as exc:  # noqa: BLE001 - a benchmark records every failure and goes on
        row.update(seconds=time.perf_counter() - start, error=f"{type(exc).__name__}: {exc}"[:400])
    return row


def corpus_counts(
    name: str, texts: list[str], vocab_size: int
) -> tuple[sp.csr_matrix, sp.csr_matrix, list[str]]:
    """``(kept documents' counts, every document's counts, vocabulary)`` of a corpus."""
    vocabulary = _corpora.vocabulary_for(name, vocab_size)
    counts = _corpora.vectorize(texts, vocabulary)
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    return counts[lengths >= MIN_TOKENS], counts, vocabulary


def split_corpus(kept: sp.csr_matrix, seed: int, test_fraction: float) -> tuple[sp.csr_matrix, object]:
    """``(training documents, DocumentSplit of the held-out ones)``: a random ``test_fraction`` held out."""
    order = np.random.default_rng(seed).permutation(kept.shape[0])
    n_test = int(round(test_fraction * kept.shape[0]))
    test, train = kept[np.sort(order[:n_test])], kept[np.sort(order[n_test:])]
    return train, split_documents(test, random_state=seed)


def run_grid(args, bar) -> list[dict]:
    rows = []
    for name in args.corpora:
        texts = _corpora.load(name)
        for vocab_size in args.vocab_sizes:
            kept, everything, vocabulary = corpus_counts(name, texts, vocab_size)
            train, split = split_corpus(kept, args.seed, args.test_fraction)
            lengths = np.asarray(kept.sum(axis=1)).ravel()
            cell = {
                "corpus": name, "n_raw_documents": len(texts), "n_documents": int(kept.shape[0]),
                "n_train": int(train.shape[0]), "n_test": int(split.held_out.shape[0]),
                "n_held_out_tokens": split.n_held_out_tokens, "vocab_size": vocab_size,
                "vocabulary_source": _corpora.VOCABULARY_SOURCE[name],
                "median_length": float(np.median(lengths)), "mean_length": float(lengths.mean()),
            }  # fmt: skip
            log(f"[{name} V={vocab_size}] {cell['n_train']} training and {cell['n_test']} test documents "
                f"(of {len(texts)}), median length {cell['median_length']:g} tokens")  # fmt: skip
            if "unigram" in args.methods:
                row = {**cell, "n_topics": None, "method": "unigram", "epsilon": None,
                       "perplexity": unigram_perplexity(train, split), "seconds": 0.0}  # fmt: skip
                rows.append(row)
                log(f"[{name} V={vocab_size}] unigram: perplexity {row['perplexity']:.1f}")
            for k in args.topics:
                for method in args.methods:
                    if method == "unigram":
                        continue
                    for epsilon in args.epsilons if method in PRIVATE else [None]:
                        row = {**cell, "n_topics": k, **fit_and_score(
                            method, train, split, everything, k, epsilon, args, vocabulary)}  # fmt: skip
                        rows.append(row)
                        bar.update()
                        eps = "" if epsilon is None else f" epsilon={epsilon:g}"
                        result = (row["error"] if "error" in row else
                                  f"NPMI {row['npmi']:.3f}, perplexity {row['perplexity']:.1f}")  # fmt: skip
                        log(f"[{name} V={vocab_size} k={k}] {method}{eps}: {result} ({row['seconds']:.1f} s)")
    return rows


def planner_prediction(
    *, n_documents: int, vocab_size: int, n_topics: int, alpha0: float, epsilon: float, delta: float,
    typical_length: float,
) -> str | None:
    """The privacy-utility planner's prediction for a private spectral fit (issue 23 item 4).

    Only public quantities go in (in the scaling curve the corpus is synthetic, so its typical
    length is public). Uses ``dptensor.models.topics.plan.plan_private_lda`` (``dptensor lda
    plan``, built on the "spectral-clip" branch) and returns ``"snr <value>: <verdict>"``, or
    ``None`` where the planner is not importable yet.
    """
    try:
        from dptensor.models.topics.plan import plan_private_lda
    except ImportError:
        return None
    plan = plan_private_lda(n_documents, vocab_size, n_topics, alpha0, epsilon, delta,
                            typical_length=max(typical_length, 3.0), whitening_words=None)  # fmt: skip
    return f"snr {plan.snr:.2f}: {plan.verdict}"


def run_scaling(args, bar) -> tuple[list[dict], dict]:
    """The scaling curve on corpora sampled from a real corpus' fitted topics (module documentation)."""
    name, vocab_size, k = args.scaling_corpus, args.scaling_vocab, args.scaling_topics
    kept, everything, vocabulary = corpus_counts(name, _corpora.load(name), vocab_size)
    source = SpectralLDA(k, random_state=args.seed).fit(kept)
    topics, alpha = source.components_, source.alpha_
    alpha0 = float(alpha.sum())
    lengths = np.asarray(kept.sum(axis=1)).ravel().astype(np.int64)
    generating_npmi = float(topic_npmi(topics, everything, n_top=N_TOP).mean())
    info = {"corpus": name, "vocab_size": vocab_size, "n_topics": k, "source_documents": int(kept.shape[0]),
            "alpha": [float(a) for a in alpha], "alpha0": alpha0, "generating_npmi": generating_npmi,
            "lengths": "drawn with replacement from the real corpus' document lengths (>= 3 tokens)",
            }  # fmt: skip
    log(f"[scaling] topics from {name} (V={vocab_size}, k={k}): alpha0={alpha0:.3g}, "
        f"generating topics' NPMI {generating_npmi:.3f}")  # fmt: skip
    rows = []
    for n in args.scaling_sizes:
        corpus = make_lda_corpus(n, vocab_size, k, alpha=alpha, topics=topics, lengths=lengths,
                                 random_state=args.seed + n)  # fmt: skip
        counts = corpus.counts.astype(np.float64)
        fits = [("spectral", None)] + [("private-spectral", e) for e in args.scaling_epsilons]
        for method, epsilon in fits:
            start = time.perf_counter()
            row = {"n_documents": n, "method": method, "epsilon": epsilon}
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if method == "spectral":
                        model = SpectralLDA(k, alpha0, random_state=args.seed).fit(counts)
                    else:
                        model = PrivateSpectralLDA(k, alpha0, epsilon=epsilon, delta=args.delta,
                                                   random_state=args.seed).fit(counts)  # fmt: skip
                row.update(seconds=time.perf_counter() - start,
                           npmi=float(topic_npmi(model, everything, n_top=N_TOP).mean()),
                           topic_l1=topic_error(topics, model.components_))  # fmt: skip
            except Exception as exc:  # noqa: BLE001
                row.update(seconds=time.perf_counter() - start, error=f"{type(exc).__name__}: {exc}"[:400])
            if epsilon is not None:
                row["planner"] = planner_prediction(n_documents=n, vocab_size=vocab_size, n_topics=k,
                                                    alpha0=alpha0, epsilon=epsilon, delta=args.delta,
                                                    typical_length=float(np.median(lengths)))  # fmt: skip
            rows.append(row)
            bar.update()
            result = row.get("error") or f"NPMI {row['npmi']:.3f}, topic L1 {row['topic_l1']:.3f}"
            eps = "" if epsilon is None else f" epsilon={epsilon:g}"
            log(f"[scaling N={n}] {method}{eps}: {result} ({row['seconds']:.1f} s)")
    info["summary"] = scaling_summary(rows, args.scaling_epsilons)
    return rows, info


def scaling_summary(rows: list[dict], epsilons) -> dict:
    """Per epsilon: the smallest N with private NPMI >= 0.9 x non-private NPMI, and L1 at the largest N."""
    base = {r["n_documents"]: r.get("npmi") for r in rows if r["method"] == "spectral"}
    out = {}
    for eps in epsilons:
        private = sorted((r for r in rows if r["method"] == "private-spectral" and r["epsilon"] == eps),
                         key=lambda r: r["n_documents"])  # fmt: skip
        reached = [r["n_documents"] for r in private
                   if r.get("npmi") is not None and base.get(r["n_documents"]) is not None
                   and base[r["n_documents"]] > 0 and r["npmi"] >= 0.9 * base[r["n_documents"]]]  # fmt: skip
        largest = private[-1] if private else {}
        out[f"{eps:g}"] = {
            "n_for_90pct_npmi": min(reached) if reached else None,
            "largest_n": largest.get("n_documents"),
            "topic_l1_at_largest_n": largest.get("topic_l1"),
            "target_topic_l1": 0.3,
        }
    return out


# -- tables ---------------------------------------------------------------------------------------
def _cell(row: dict | None, key: str, fmt: str) -> str:
    if row is None:
        return "—"
    if "error" in row:
        return "error"
    value = row.get(key)
    return "—" if value is None else format(value, fmt)


def markdown(summary: dict) -> str:
    lines = ["# Private topic models on real text", "",
             f"Command: `{summary['command']}`  ", f"Date: {summary['date']}; {summary['machine']}  ",
             f"delta = {summary['settings']['delta']:g}; NPMI: mean over topics of the top-{N_TOP} words' "
             "pairwise NPMI on the whole corpus (boolean documents, eps = 1e-12); perplexity: held-out "
             "document completion (observed half / held-out half of each test document).", ""]  # fmt: skip
    rows = summary["rows"]
    cells = sorted({(r["corpus"], r["vocab_size"]) for r in rows}, key=lambda c: (c[0], c[1]))
    epsilons = summary["settings"]["epsilons"]
    for corpus, vocab_size in cells:
        here = [r for r in rows if r["corpus"] == corpus and r["vocab_size"] == vocab_size]
        info = here[0]
        unigram = next((r for r in here if r["method"] == "unigram"), None)
        for k in sorted({r["n_topics"] for r in here if r["n_topics"] is not None}):
            lines += [f"## {corpus}, V = {vocab_size}, k = {k}", "",
                      f"{info['n_train']} training / {info['n_test']} test documents (of "
                      f"{info['n_raw_documents']}; those with >= {MIN_TOKENS} vocabulary tokens), median "
                      f"length {info['median_length']:g} tokens; vocabulary from "
                      f"{info['vocabulary_source']}.", "",
                      "| model | ε | NPMI | perplexity | seconds |", "|---|---:|---:|---:|---:|"]  # fmt: skip
            if unigram is not None:
                lines.append(f"| {LABELS['unigram']} | — | — | {_cell(unigram, 'perplexity', '.1f')} | — |")
            for method in METHODS[1:]:
                for eps in epsilons if method in PRIVATE else [None]:
                    row = next((r for r in here if r["n_topics"] == k and r["method"] == method
                                and r["epsilon"] == eps), None)  # fmt: skip
                    if row is None:
                        continue
                    lines.append(f"| {LABELS[method]} | {'—' if eps is None else format(eps, 'g')} | "
                                 f"{_cell(row, 'npmi', '.3f')} | {_cell(row, 'perplexity', '.1f')} | "
                                 f"{_cell(row, 'seconds', '.1f')} |")  # fmt: skip
            lines += ["", *criteria_lines(here, k, unigram), ""]
    scaling = summary.get("scaling")
    if scaling:
        info = scaling["info"]
        lines += [f"## Scaling: corpora sampled from {info['corpus']}'s topics (V = {info['vocab_size']}, "
                  f"k = {info['n_topics']}, alpha0 = {info['alpha0']:.3g})", "",
                  f"Generating topics' NPMI on the real corpus: {info['generating_npmi']:.3f}. Lengths "
                  f"{info['lengths']}.", "",
                  "| N | model | ε | NPMI | topic L1 | planner | seconds |",
                  "|---:|---|---:|---:|---:|---|---:|"]  # fmt: skip
        for r in scaling["rows"]:
            eps = "—" if r["epsilon"] is None else format(r["epsilon"], "g")
            planner = "—" if r.get("planner") is None else str(r["planner"])
            lines.append(f"| {r['n_documents']} | {LABELS[r['method']]} | {eps} | "
                         f"{_cell(r, 'npmi', '.3f')} | {_cell(r, 'topic_l1', '.3f')} | {planner} | "
                         f"{_cell(r, 'seconds', '.1f')} |")  # fmt: skip
        lines.append("")
        for eps, s in info["summary"].items():
            reached = s["n_for_90pct_npmi"]
            l1 = s["topic_l1_at_largest_n"]
            lines.append(f"- ε = {eps}: private NPMI reaches 90% of the non-private NPMI at "
                         f"N = {reached if reached is not None else 'none of the sizes tried'}; topic L1 at "
                         f"N = {s['largest_n']}: {'—' if l1 is None else format(l1, '.3f')} "
                         "(target <= 0.3).")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def criteria_lines(rows: list[dict], k: int, unigram: dict | None) -> list[str]:
    """The issue's done criteria for one cell: the best private model at epsilon 1 and 4."""
    base = next((r for r in rows if r["n_topics"] == k and r["method"] == "spectral" and "npmi" in r), None)
    if base is None or unigram is None:
        return []
    out = []
    for eps, share in ((1.0, 0.5), (4.0, 0.8)):
        private = [r for r in rows if r["n_topics"] == k and r["method"] in PRIVATE and r["epsilon"] == eps
                   and "npmi" in r]  # fmt: skip
        if not private:
            continue
        best = max(private, key=lambda r: r["npmi"])
        better = min(private, key=lambda r: r["perplexity"])
        out.append(
            f"- ε = {eps:g}: best private NPMI {best['npmi']:.3f} ({best['method']}) = "
            f"{best['npmi'] / base['npmi']:.2f}× the non-private {base['npmi']:.3f} (target ≥ {share}×); "
            f"best private perplexity {better['perplexity']:.1f} ({better['method']}) against the unigram "
            f"model's {unigram['perplexity']:.1f}" + (" (target: below)" if eps == 1.0 else "") + "."
        )
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="V = 2000, k = 10, epsilon 1 and 4, scaling N = 1e4..1e6 at epsilon 1 (the issue's cells)",
    )
    parser.add_argument(
        "--corpora", nargs="+", default=["debian", "wordnet"], choices=sorted(_corpora.LOADERS)
    )
    parser.add_argument("--vocab-sizes", nargs="+", type=int, default=None, help="default 1000 2000 5000")
    parser.add_argument("--topics", nargs="+", type=int, default=None, help="default 10 20")
    parser.add_argument("--epsilons", nargs="+", type=float, default=None, help="default 0.5 1 2 4 8")
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument(
        "--methods", nargs="+", default=None, choices=METHODS,
        help="default: all (quick: unigram spectral private-spectral dp-vi)",
    )  # fmt: skip
    parser.add_argument("--test-fraction", type=float, default=0.1)
    parser.add_argument(
        "--sklearn-passes", type=int, default=10, help="scikit-learn's max_iter (its default 10)"
    )
    parser.add_argument("--no-scaling", dest="scaling", action="store_false")
    parser.add_argument("--scaling-corpus", default="debian", choices=sorted(_corpora.LOADERS))
    parser.add_argument("--scaling-vocab", type=int, default=2000)
    parser.add_argument("--scaling-topics", type=int, default=10)
    parser.add_argument(
        "--scaling-sizes", nargs="+", type=int, default=[10_000, 30_000, 100_000, 300_000, 1_000_000]
    )
    parser.add_argument(
        "--scaling-epsilons", nargs="+", type=float, default=None, help="default 1 (quick) or 1 4"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args(argv)
    args.vocab_sizes = args.vocab_sizes or ([2000] if args.quick else [1000, 2000, 5000])
    args.topics = args.topics or ([10] if args.quick else [10, 20])
    args.methods = args.methods or (list(QUICK_METHODS) if args.quick else list(METHODS))
    args.epsilons = args.epsilons or ([1.0, 4.0] if args.quick else [0.5, 1.0, 2.0, 4.0, 8.0])
    args.scaling_epsilons = args.scaling_epsilons or ([1.0] if args.quick else [1.0, 4.0])
    for name in ("vocab_sizes", "topics", "scaling_sizes"):
        if min(getattr(args, name)) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if not 0 < args.test_fraction < 1:
        parser.error("--test-fraction must lie in (0, 1)")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    fits_per_k = sum(len(args.epsilons) if m in PRIVATE else 1 for m in args.methods if m != "unigram")
    total = len(args.corpora) * len(args.vocab_sizes) * len(args.topics) * fits_per_k
    if args.scaling:
        total += len(args.scaling_sizes) * (1 + len(args.scaling_epsilons))
    start = time.perf_counter()
    with threadpool_limits(args.threads), tqdm(total=total, desc="fits", file=sys.stderr) as bar:
        rows = run_grid(args, bar)
        scaling = run_scaling(args, bar) if args.scaling else None
    summary = {
        "command": " ".join(
            ["python benchmarks/bench_private_topics.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{args.threads} BLAS thread(s); shared 2-core machine (timings contended)",
        "seconds": time.perf_counter() - start,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "rows": rows,
        "scaling": None if scaling is None else {"rows": scaling[0], "info": scaling[1]},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "private_topics.json", summary)
    (out / "private_topics.md").write_text(markdown(summary) + "\n", encoding="utf-8")
    log(f"wrote {out / 'private_topics.json'} and {out / 'private_topics.md'} ({summary['seconds']:.0f} s)")
    return summary


if __name__ == "__main__":
    main()
