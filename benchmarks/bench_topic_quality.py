"""Topic quality and fit time on real text against tomotopy, gensim and scikit-learn (issue 35, item 4).

Per corpus (``--corpora``; loaders in ``benchmarks/_corpora.py``, never downloaded):

* **Vocabulary**: the corpus' *own* ``V`` most frequent words (``CountVectorizer`` with English stop
  words removed and :data:`_corpora.TOKEN_PATTERN`), not a public one: this is a quality
  comparison between tools, not a privacy experiment.
* **Documents**: those with at least 2 vocabulary tokens (the fewest a document-completion task
  needs, :func:`dptensor.evaluation.split_documents`); ``--test-fraction`` of them (at random,
  ``--seed``) are held out, the rest train every model.
* **Perplexity**: held-out document completion (:func:`dptensor.evaluation.completion_perplexity`):
  each model infers a test document's topic proportions from its observed half with its *own*
  inference (dptensor: ``transform``; tomotopy: ``LDAModel.infer``, 100 Gibbs iterations;
  gensim: its variational E-step; scikit-learn: ``transform``), and the other half is scored.
* **NPMI**: mean over topics of the top-10 words' NPMI (:func:`dptensor.evaluation.topic_npmi`) with
  the training counts as reference corpus.
* **Fit time**: wall-clock seconds (``time.perf_counter``) of the fit alone: corpus loading,
  vectorising, and tomotopy's ``add_doc`` (building its corpus) are excluded, and a small warm-up
  fit compiles numba's kernels first; inference and scoring are timed separately (``eval_seconds``).
* **Peak memory**: growth of the process' peak resident set during the fit (Linux ``VmHWM``,
  reset through ``/proc/self/clear_refs`` before each fit), MiB; ``None`` where unavailable.

Models, non-private (``--vocab-size`` 5000, ``--topics`` 20):

* ``spectral``: ``SpectralLDA(k, n_jobs=--n-jobs)`` with its defaults (moments, then CVB0 refinement);
* ``spectral-moments``: the same with ``refine=None`` (the moment estimate alone);
* ``tomotopy``: ``tp.LDAModel(k=k, alpha=1/k, eta=0.01, seed=--seed)``,
  ``train(--tomotopy-iterations, workers=--n-jobs)`` (collapsed Gibbs sampling, C++);
* ``gensim``: ``LdaMulticore(workers=1, passes=1)`` (online variational Bayes);
* ``sklearn``: scikit-learn's online ``LatentDirichletAllocation(max_iter=5)``;
* ``unigram``: the unigram model (:func:`dptensor.evaluation.unigram_perplexity`; no topics).

Private (``--private-vocab-size`` 2000, ``--private-topics`` 10): ``PrivateSpectralLDA(k,
epsilon, delta=1e-6)`` with its defaults at each of ``--epsilons`` (1 and 4), with its guarantee,
against tomotopy's *non-private* model at the same ``V`` and ``k``.

BLAS threads are limited to ``--n-jobs`` as well (threadpoolctl). The targets of the issue are
checked in the markdown: default ``SpectralLDA`` NPMI >= 0.95x and perplexity <= 1.05x tomotopy's
in at most 1/5 of its fit time; ``PrivateSpectralLDA`` at epsilon 1: perplexity <= 1.15x and NPMI
>= 0.8x tomotopy's; at epsilon 4: <= 1.08x and >= 0.9x.

Results: ``<out>/topic_quality.json`` (every row, settings) and ``<out>/topic_quality.md`` (one table
per corpus and cell, ratios to tomotopy, the targets). Progress goes to standard error.

Usage::

    pip install -e '.[bench]'                                    # tomotopy, gensim
    python benchmarks/bench_topic_quality.py --quick             # debian; spectral, tomotopy, private
    python benchmarks/bench_topic_quality.py                     # debian, wordnet, changelogs
    python benchmarks/bench_topic_quality.py --corpora wordnet --methods spectral tomotopy
"""

from __future__ import annotations

import argparse
import math
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
from bench_private_topics import guarantee_summary, log, split_corpus  # noqa: E402

from dptensor import SpectralLDA  # noqa: E402
from dptensor._files import write_json  # noqa: E402
from dptensor.evaluation import completion_perplexity, topic_npmi, unigram_perplexity  # noqa: E402
from dptensor.models.topics.private_spectral import PrivateSpectralLDA  # noqa: E402

METHODS = ("unigram", "spectral", "spectral-moments", "tomotopy", "gensim", "sklearn", "private-spectral",
           "private-moments")
QUICK_METHODS = ("unigram", "spectral", "spectral-moments", "tomotopy", "private-spectral", "private-moments")
#: The private methods: fitted at every ``--epsilons`` on the private ``V`` and ``k``.
PRIVATE_METHODS = ("private-spectral", "private-moments")
LABELS = {
    "unigram": "unigram model (no topics)",
    "spectral": "`SpectralLDA` (defaults: moments + CVB0 refinement)",
    "spectral-moments": "`SpectralLDA(refine=None)` (moments only)",
    "tomotopy": "tomotopy `LDAModel` (collapsed Gibbs)",
    "gensim": "gensim `LdaMulticore` (online VB, 1 pass)",
    "sklearn": "scikit-learn online LDA (5 passes)",
    "private-spectral": "`PrivateSpectralLDA` (defaults: moments + private CVB0 refinement)",
    "private-moments": "`PrivateSpectralLDA(refine=None)` (private moments only)",
}
MIN_TOKENS = 2
N_TOP = 10
TOMOTOPY_INFER_ITERATIONS = 100
#: The issue's targets for the private rows: epsilon -> (perplexity at most x, NPMI at least x) tomotopy's.
PRIVATE_TARGETS = {1.0: (1.15, 0.8), 4.0: (1.08, 0.9)}
#: Default SpectralLDA against tomotopy: NPMI at least x, perplexity at most x, time at most 1/x.
SPECTRAL_TARGETS = {"npmi": 0.95, "perplexity": 1.05, "speedup": 5.0}


# -- tomotopy and gensim as topic models with transform / components_ ------------------------------
def import_tomotopy():
    try:
        import tomotopy
    except ImportError as exc:
        raise SystemExit(
            "tomotopy is not installed; the peer tools of the benchmarks are the bench extra: "
            "pip install -e '.[bench]'"
        ) from exc
    return tomotopy


def _token_words(row: sp.csr_matrix, vocabulary: np.ndarray) -> list[str]:
    """The tokens of one document (a CSR row of counts) as words, each repeated by its count."""
    return list(np.repeat(vocabulary[row.indices], row.data.astype(np.int64)))


class TomotopyLDA:
    """tomotopy's ``LDAModel`` behind ``fit`` / ``transform`` / ``components_`` over our vocabulary.

    ``add_documents`` builds tomotopy's corpus (not timed as fitting), ``fit`` trains. Topics:
    ``(n_kw + eta) / (n_k + V eta)`` over the whole vocabulary, with tomotopy's topic-word counts
    ``n_kw`` recovered from its distributions over the words it saw (equal to tomotopy's own
    distribution where it has one; a word absent from the training documents gets ``eta``).
    ``transform`` folds documents in by ``infer`` (:data:`TOMOTOPY_INFER_ITERATIONS` Gibbs
    iterations); a document without any word tomotopy saw gets the prior mean (uniform).
    """

    def __init__(self, n_components: int, *, iterations: int, workers: int, seed: int) -> None:
        tp = import_tomotopy()
        self.n_components, self.iterations, self.workers = n_components, iterations, workers
        self.eta = 0.01
        self.model = tp.LDAModel(k=n_components, alpha=1.0 / n_components, eta=self.eta, seed=seed)

    def add_documents(self, X: sp.csr_matrix, vocabulary) -> None:
        self.vocabulary = np.asarray(vocabulary, dtype=object)
        for n in range(X.shape[0]):
            self.model.add_doc(_token_words(X[n], self.vocabulary))

    def fit(self, X=None) -> TomotopyLDA:
        with warnings.catch_warnings():  # "may differ even with fixed seed if workers != 1": known
            warnings.filterwarnings("ignore", message=".*workers.*", category=RuntimeWarning)
            self.model.train(self.iterations, workers=self.workers)
        k, d = self.n_components, len(self.vocabulary)
        used = list(self.model.used_vocabs)
        column = {word: i for i, word in enumerate(self.vocabulary)}
        used_columns = np.array([column[w] for w in used])
        totals = np.asarray(self.model.get_count_by_topics(), dtype=np.float64)
        dists = np.array([self.model.get_topic_word_dist(j) for j in range(k)], dtype=np.float64)
        counts = np.zeros((k, d))
        counts[:, used_columns] = np.maximum(dists * (totals + len(used) * self.eta)[:, None] - self.eta, 0.0)
        self.components_ = (counts + self.eta) / (counts + self.eta).sum(axis=1, keepdims=True)
        self._known = np.zeros(d, dtype=bool)
        self._known[used_columns] = True
        return self

    def transform(self, X: sp.csr_matrix) -> np.ndarray:
        X = sp.csr_matrix(X)
        X = X @ sp.diags(self._known.astype(np.float64))  # words tomotopy never saw are dropped
        X.eliminate_zeros()
        theta = np.full((X.shape[0], self.n_components), 1.0 / self.n_components)
        rows = np.flatnonzero(np.diff(X.indptr) > 0)  # make_doc([]) aborts the process: skip them
        docs = [self.model.make_doc(_token_words(X[n], self.vocabulary)) for n in rows]
        if docs:
            inferred, _ = self.model.infer(docs, iterations=TOMOTOPY_INFER_ITERATIONS, workers=self.workers)
            theta[rows] = np.array([np.asarray(t, dtype=np.float64) for t in inferred])
        return theta


class GensimLDA:
    """gensim's ``LdaMulticore`` behind ``fit`` / ``transform`` / ``components_``.

    ``transform`` is gensim's variational E-step (``inference``): the normalised ``gamma``.
    """

    def __init__(self, n_components: int, *, seed: int) -> None:
        self.n_components, self.seed = n_components, seed

    def fit(self, X: sp.csr_matrix) -> GensimLDA:
        try:
            from gensim.matutils import Sparse2Corpus
            from gensim.models import LdaMulticore
        except ImportError as exc:
            raise RuntimeError("gensim is not installed: pip install -e '.[bench]'") from exc
        self._corpus = lambda M: Sparse2Corpus(sp.csr_matrix(M), documents_columns=False)
        id2word = {i: str(i) for i in range(X.shape[1])}
        self.model = LdaMulticore(self._corpus(X), num_topics=self.n_components, id2word=id2word,
                                  workers=1, passes=1, random_state=self.seed)  # fmt: skip
        self.components_ = self.model.get_topics()
        return self

    def transform(self, X: sp.csr_matrix) -> np.ndarray:
        gamma, _ = self.model.inference(list(self._corpus(X)))
        return gamma / gamma.sum(axis=1, keepdims=True)


def make_model(method: str, k: int, epsilon: float | None, args):
    """The estimator of ``method`` (only what the protocol fixes is set) and its threads."""
    if method == "spectral":
        return SpectralLDA(k, n_jobs=args.n_jobs, random_state=args.seed), args.n_jobs
    if method == "spectral-moments":
        return SpectralLDA(k, refine=None, n_jobs=args.n_jobs, random_state=args.seed), args.n_jobs
    if method in PRIVATE_METHODS:
        model = PrivateSpectralLDA(k, epsilon=epsilon, delta=args.delta, n_jobs=args.n_jobs,
                                   refine=None if method == "private-moments" else "cvb0",
                                   random_state=args.seed)  # fmt: skip
        return model, args.n_jobs
    if method == "tomotopy":
        model = TomotopyLDA(k, iterations=args.tomotopy_iterations, workers=args.n_jobs, seed=args.seed)
        return model, args.n_jobs
    if method == "gensim":
        return GensimLDA(k, seed=args.seed), 1
    if method == "sklearn":
        from sklearn.decomposition import LatentDirichletAllocation

        return LatentDirichletAllocation(k, learning_method="online", max_iter=5, random_state=args.seed), 1
    raise ValueError(f"unknown method {method!r}")


# -- measuring ---------------------------------------------------------------------------------
def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_memory() -> int | None:
    """Reset the peak resident set to the current one; the current one in KiB (None if unsupported)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return None
    return _status_kib("VmRSS")


def peak_memory_growth(start_kib: int | None) -> float | None:
    """MiB by which the peak resident set rose above ``start_kib`` (from :func:`reset_peak_memory`)."""
    peak = _status_kib("VmHWM")
    return None if start_kib is None or peak is None else max(peak - start_kib, 0) / 1024


def fit_and_score(method, train, split, k, epsilon, args, vocabulary) -> dict:
    """Fit one model and score it; a failure is recorded, not raised."""
    row: dict = {"method": method, "n_topics": k, "epsilon": epsilon}
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model, threads = make_model(method, k, epsilon, args)
            row["threads"] = threads
            if method == "tomotopy":
                model.add_documents(train, vocabulary)  # tomotopy's corpus: not part of the fit time
            memory = reset_peak_memory()
            start = time.perf_counter()
            model.fit(train)
            row["seconds"] = time.perf_counter() - start
            row["peak_memory_mib"] = peak_memory_growth(memory)
            start = time.perf_counter()
            perplexity = completion_perplexity(model, split)
            row["eval_seconds"] = time.perf_counter() - start
        npmi = topic_npmi(np.asarray(model.components_), train, n_top=N_TOP)
        top = np.argsort(-np.asarray(model.components_), axis=1, kind="stable")[:, :N_TOP]
        row.update(
            npmi=float(npmi.mean()),
            npmi_per_topic=[round(float(v), 4) for v in npmi],
            perplexity=perplexity,
            guarantee=guarantee_summary(model),
            warnings=sorted({str(w.message)[:200] for w in caught}),
            top_words=[[vocabulary[i] for i in words] for words in top],
        )
        for name in ("topic_recovery_", "shrinkage_"):  # a private fit's data-independent choices
            if getattr(model, name, None) is not None:
                row[name.rstrip("_")] = getattr(model, name)
        refinement = getattr(model, "refinement_", None)
        if refinement is not None:
            row.update(
                refinement_passes=int(refinement.n_passes), refinement_converged=bool(refinement.converged)
            )
    except Exception as exc:  # noqa: BLE001 - a benchmark records every failure and goes on
        row.setdefault("seconds", time.perf_counter() - start)
        row["error"] = f"{type(exc).__name__}: {exc}"[:400]
    return row


def own_vocabulary_counts(texts: list[str], vocab_size: int) -> tuple[sp.csr_matrix, list[str], int]:
    """``(counts of the documents with >= MIN_TOKENS tokens, vocabulary, documents dropped)``.

    The vocabulary is the corpus' own ``vocab_size`` most frequent words (English stop words out).
    """
    from sklearn.feature_extraction.text import CountVectorizer

    vectorizer = CountVectorizer(stop_words="english", token_pattern=_corpora.TOKEN_PATTERN,
                                 max_features=vocab_size)  # fmt: skip
    counts = sp.csr_matrix(vectorizer.fit_transform(texts), dtype=np.float64)
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    return (
        counts[lengths >= MIN_TOKENS],
        list(vectorizer.get_feature_names_out()),
        int((lengths < MIN_TOKENS).sum()),
    )


def plan_fits(args) -> list[tuple[int, int, str, float | None]]:
    """``(V, k, method, epsilon)`` of every fit of one corpus, without repeats (tomotopy may serve both)."""
    fits = []
    for method in args.methods:
        if method == "unigram":
            continue
        if method in PRIVATE_METHODS:
            fits += [(args.private_vocab_size, args.private_topics, method, eps) for eps in args.epsilons]
        else:
            fits.append((args.vocab_size, args.topics, method, None))
    if any(m in args.methods for m in PRIVATE_METHODS) and "tomotopy" in args.methods:
        fits.append((args.private_vocab_size, args.private_topics, "tomotopy", None))
    return list(dict.fromkeys(fits))


def run_corpus(name: str, args, bar) -> list[dict]:
    texts = _corpora.load(name)
    fits = plan_fits(args)
    rows = []
    for vocab_size in dict.fromkeys(v for v, *_ in fits):  # the non-private cell first
        kept, vocabulary, dropped = own_vocabulary_counts(texts, vocab_size)
        train, split = split_corpus(kept, args.seed, args.test_fraction)
        lengths = np.asarray(kept.sum(axis=1)).ravel()
        cell = {
            "corpus": name, "vocab_size": vocab_size, "n_raw_documents": len(texts),
            "n_documents": int(kept.shape[0]), "n_dropped_documents": dropped,
            "n_train": int(train.shape[0]), "n_test": int(split.held_out.shape[0]),
            "n_train_tokens": int(train.sum()), "n_held_out_tokens": split.n_held_out_tokens,
            "median_length": float(np.median(lengths)), "mean_length": float(lengths.mean()),
        }  # fmt: skip
        log(f"[{name} V={vocab_size}] {cell['n_train']} training and {cell['n_test']} test documents "
            f"(of {len(texts)}; {dropped} with < {MIN_TOKENS} tokens dropped), median length "
            f"{cell['median_length']:g} tokens")  # fmt: skip
        if "unigram" in args.methods:
            rows.append({**cell, "method": "unigram", "n_topics": None, "epsilon": None,
                         "perplexity": unigram_perplexity(train, split)})  # fmt: skip
            log(f"[{name} V={vocab_size}] unigram: perplexity {rows[-1]['perplexity']:.1f}")
        for v, k, method, epsilon in fits:
            if v != vocab_size:
                continue
            row = {**cell, **fit_and_score(method, train, split, k, epsilon, args, vocabulary)}
            rows.append(row)
            bar.update()
            eps = "" if epsilon is None else f" epsilon={epsilon:g}"
            result = row.get("error") or (
                f"NPMI {row['npmi']:.3f}, perplexity {row['perplexity']:.1f}, fit {row['seconds']:.1f} s"
            )
            log(f"[{name} V={vocab_size} k={k}] {method}{eps}: {result}")
    return rows


# -- tables --------------------------------------------------------------------------------------
def _fmt(value, spec: str) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _ok(row: dict | None) -> bool:
    return row is not None and "error" not in row and row.get("perplexity") is not None


def ratios(row: dict, reference: dict | None) -> dict:
    """Time ratio tomotopy/ours, NPMI ratio ours/tomotopy, perplexity ratio ours/tomotopy."""
    if not (_ok(row) and _ok(reference)) or row is reference:
        return {"speedup": None, "npmi_ratio": None, "perplexity_ratio": None}
    return {
        "speedup": reference["seconds"] / row["seconds"] if row["seconds"] > 0 else None,
        "npmi_ratio": row["npmi"] / reference["npmi"] if reference["npmi"] > 0 else None,
        "perplexity_ratio": row["perplexity"] / reference["perplexity"],
    }


def _verdict(flag: bool | None) -> str:
    return "not measured" if flag is None else ("**met**" if flag else "**not met**")


def target_lines(rows: list[dict], k: int, private: bool) -> list[str]:
    tomotopy = next((r for r in rows if r["method"] == "tomotopy" and r["n_topics"] == k), None)
    if not _ok(tomotopy):
        return ["- Targets: no tomotopy reference in this cell."]
    out = []
    if not private:
        row = next((r for r in rows if r["method"] == "spectral" and r["n_topics"] == k), None)
        if row is not None:
            q = ratios(row, tomotopy)
            t = SPECTRAL_TARGETS
            checks = [q["npmi_ratio"] is not None and q["npmi_ratio"] >= t["npmi"],
                      q["perplexity_ratio"] is not None and q["perplexity_ratio"] <= t["perplexity"],
                      q["speedup"] is not None and q["speedup"] >= t["speedup"]]  # fmt: skip
            met = None if not _ok(row) else all(checks)
            out.append(
                f"- Target, default `SpectralLDA`: NPMI ≥ {t['npmi']}× ({_fmt(q['npmi_ratio'], '.2f')}×), "
                f"perplexity ≤ {t['perplexity']}× ({_fmt(q['perplexity_ratio'], '.3f')}×), in ≤ "
                f"1/{t['speedup']:g} of tomotopy's fit time (tomotopy/ours {_fmt(q['speedup'], '.1f')}×): "
                f"{_verdict(met)}."
            )
        return out
    for eps, (max_ppl, min_npmi) in PRIVATE_TARGETS.items():
        row = next((r for r in rows if r["method"] == "private-spectral" and r["n_topics"] == k
                    and r["epsilon"] == eps), None)  # fmt: skip
        if row is None:
            continue
        q = ratios(row, tomotopy)
        met = (
            None
            if not _ok(row)
            else bool(
                q["perplexity_ratio"] is not None
                and q["perplexity_ratio"] <= max_ppl
                and q["npmi_ratio"] is not None
                and q["npmi_ratio"] >= min_npmi
            )
        )
        out.append(
            f"- Target, `PrivateSpectralLDA` at ε = {eps:g}: perplexity ≤ {max_ppl}× "
            f"({_fmt(q['perplexity_ratio'], '.3f')}×), NPMI ≥ {min_npmi}× ({_fmt(q['npmi_ratio'], '.2f')}×) "
            f"tomotopy's (non-private, same V and k): {_verdict(met)}."
        )
    return out


def markdown(summary: dict) -> str:
    s = summary["settings"]
    lines = [
        "# Topic quality on real text against tomotopy, gensim and scikit-learn", "",
        f"Command: `{summary['command']}`  ", f"Date: {summary['date']}; {summary['machine']}  ",
        f"Versions: {', '.join(f'{k} {v}' for k, v in summary['versions'].items())}", "",
        f"Vocabulary: each corpus' own V most frequent words (English stop words removed); documents with "
        f">= {MIN_TOKENS} vocabulary tokens, {s['test_fraction']:g} of them held out (seed {s['seed']}). "
        "Perplexity: held-out document completion, each model's own inference (tomotopy: `infer`, "
        f"{TOMOTOPY_INFER_ITERATIONS} iterations). NPMI: mean over topics of the top-{N_TOP} words' NPMI "
        "on the training documents. Fit: wall seconds of the fit only (no loading, vectorising or "
        "tomotopy `add_doc`); threads: document-pass threads / tomotopy workers (BLAS limited to "
        f"{s['n_jobs']}); peak MiB: rise of the peak resident set during the fit. Ratios to tomotopy "
        "(same V and k): time tomotopy/ours (higher: faster), NPMI ours/tomotopy (higher: better), "
        "perplexity ours/tomotopy (lower: better).", "",
    ]  # fmt: skip
    rows = summary["rows"]
    for corpus in dict.fromkeys(r["corpus"] for r in rows):
        here = [r for r in rows if r["corpus"] == corpus]
        cells = dict.fromkeys((r["vocab_size"], r["n_topics"]) for r in here if r["n_topics"] is not None)
        for vocab_size, k in cells:
            cell = [r for r in here if r["vocab_size"] == vocab_size and r["n_topics"] in (k, None)]
            info = cell[0]
            private = any(r["method"] in PRIVATE_METHODS for r in cell if r["n_topics"] == k)
            tomotopy = next((r for r in cell if r["method"] == "tomotopy" and r["n_topics"] == k), None)
            lines += [f"## {corpus}, V = {vocab_size}, k = {k}" + (" (private rows)" if private else ""), "",
                      f"{info['n_train']} training / {info['n_test']} test documents (of "
                      f"{info['n_raw_documents']}; {info['n_dropped_documents']} with < {MIN_TOKENS} "
                      f"tokens dropped), median length {info['median_length']:g} tokens.", "",
                      "| model | ε | NPMI | perplexity | fit s | threads | peak MiB | tomotopy/ours time "
                      "| NPMI ratio | perplexity ratio |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
            for r in cell:
                if r["method"] == "unigram":
                    q = ratios({**r, "npmi": 0.0, "seconds": 1.0}, tomotopy)
                    lines.append(f"| {LABELS['unigram']} | — | — | {_fmt(r['perplexity'], '.1f')} | — | — "
                                 f"| — | — | — | {_fmt(q['perplexity_ratio'], '.3f')} |")  # fmt: skip
                    continue
                if r["n_topics"] != k:
                    continue
                eps = "—" if r["epsilon"] is None else format(r["epsilon"], "g")
                if "error" in r:
                    error = r["error"][:80].replace("|", "/")
                    lines.append(f"| {LABELS[r['method']]} | {eps} | error: {error} | | | | | | | |")
                    continue
                q = ratios(r, tomotopy)
                lines.append(f"| {LABELS[r['method']]} | {eps} | {r['npmi']:.3f} | {r['perplexity']:.1f} | "
                             f"{r['seconds']:.1f} | {r.get('threads', '—')} | "
                             f"{_fmt(r.get('peak_memory_mib'), '.0f')} | {_fmt(q['speedup'], '.1f')} | "
                             f"{_fmt(q['npmi_ratio'], '.2f')} | "
                             f"{_fmt(q['perplexity_ratio'], '.3f')} |")  # fmt: skip
            lines += ["", *target_lines(cell, k, private), ""]
            guarantees = [r for r in cell if r.get("guarantee")]
            if guarantees:
                for r in guarantees:
                    recovery, shrinkage = r.get("topic_recovery", "—"), _fmt(r.get("shrinkage"), ".3f")
                    lines.append(f"- ε = {r['epsilon']:g}: topic recovery {recovery}, shrinkage {shrinkage}; "
                                 f"{r['guarantee']}")  # fmt: skip
                lines.append("")
    return "\n".join(lines)


# -- command line --------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="debian only; no gensim, no scikit-learn (QUICK_METHODS)"
    )
    parser.add_argument("--corpora", nargs="+", default=None, choices=sorted(_corpora.LOADERS),
                        help="default debian wordnet changelogs (quick: debian)")  # fmt: skip
    parser.add_argument("--methods", nargs="+", default=None, choices=METHODS,
                        help="default: all (quick: no gensim, no sklearn)")  # fmt: skip
    parser.add_argument("--vocab-size", type=int, default=5000, help="V of the non-private rows")
    parser.add_argument("--topics", type=int, default=20, help="k of the non-private rows")
    parser.add_argument("--private-vocab-size", type=int, default=2000, help="V of the private rows")
    parser.add_argument("--private-topics", type=int, default=10, help="k of the private rows")
    parser.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 4.0])
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--test-fraction", type=float, default=0.1)
    parser.add_argument("--tomotopy-iterations", type=int, default=200)
    parser.add_argument(
        "--n-jobs", type=int, default=2, help="threads of dptensor's passes, tomotopy's workers and BLAS"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args(argv)
    args.corpora = args.corpora or (["debian"] if args.quick else ["debian", "wordnet", "changelogs"])
    args.methods = args.methods or list(QUICK_METHODS if args.quick else METHODS)
    positive = (
        "vocab_size",
        "topics",
        "private_vocab_size",
        "private_topics",
        "tomotopy_iterations",
        "n_jobs",
    )
    for name in positive:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if not 0 < args.test_fraction < 1:
        parser.error("--test-fraction must lie in (0, 1)")
    return args


def versions(methods) -> dict:
    import importlib.metadata as metadata

    names = ["dptensor", "numpy", "scipy", "scikit-learn"]
    names += [m for m in ("tomotopy", "gensim") if m in methods]
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def warm_up(args) -> None:
    """Compile what numba compiles (refinement, fold-in) on a small corpus, so that no fit times it."""
    from dptensor.datasets.lda import make_lda_corpus

    if {"spectral", "spectral-moments"} & set(args.methods):
        corpus = make_lda_corpus(300, 50, 3, alpha=0.3, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = SpectralLDA(3, random_state=0).fit(corpus.counts)
            model.transform(corpus.counts[:10])


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if "tomotopy" in args.methods:
        import_tomotopy()  # fail now, with the install hint, not after the first fits
    warm_up(args)
    total = len(args.corpora) * len(plan_fits(args))
    start = time.perf_counter()
    with threadpool_limits(args.n_jobs), tqdm(total=total, desc="fits", file=sys.stderr) as bar:
        rows = [row for name in args.corpora for row in run_corpus(name, args, bar)]
    summary = {
        "command": " ".join(
            ["python benchmarks/bench_topic_quality.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{args.n_jobs} thread(s) per model (gensim and scikit-learn: 1)",
        "versions": versions(args.methods),
        "seconds": time.perf_counter() - start,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "rows": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "topic_quality.json", summary)
    (out / "topic_quality.md").write_text(markdown(summary) + "\n", encoding="utf-8")
    log(f"wrote {out / 'topic_quality.json'} and {out / 'topic_quality.md'} ({summary['seconds']:.0f} s)")
    return summary


if __name__ == "__main__":
    main()
