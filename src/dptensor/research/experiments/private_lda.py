"""Private spectral LDA experiments (DeCarolis et al., paper 004, Section 7, Figures 2--4).

* **Figure 2** -- topic error against the composite epsilon (``delta = 1e-7``) on synthetic LDA
  corpora, three panels: ``alpha_0 = 0.1, N = 10^5``; ``alpha_0 = 1000, N = 10^3``;
  ``alpha_0 = 1000, N = 10^5``. The paper omits ``d``, ``k``, the document lengths and the trial
  count; we use ``d = 100`` words, ``k = 3`` topics (symmetric ``alpha_i = alpha_0 / 3``, topics
  from ``Dirichlet(0.1)``), mean length 50 tokens for ``alpha_0 = 0.1`` and 500 for
  ``alpha_0 = 1000`` (mixed topics need long documents even without privacy), 5 trials (fresh
  corpus and noise per trial). Curves: Configuration 1 as corrected here (guarantee holds),
  Configuration 1 with the budget split chosen by the true error over a grid (**oracle**: looks at
  the ground truth, not private -- the paper's grid search), Configuration 1 as printed (two
  ``M2_hat`` copies, ``1/N`` noise, classic calibration; unproven), Configurations 2--4 as printed
  (unproven), DP variational inference and its non-private version (``DPVariationalLDA``) and
  non-private spectral LDA. Error: mean L1 distance between true and estimated
  topics after Hungarian matching on the L1 cost (at most 2).
* **Figure 3** -- (a) ``sigma_k(M2_hat)`` against ``alpha_0`` (``k = 3``, ``N = 10^5``); (b) the
  smallest eigengap of the whitened tensor against ``k`` at ``alpha_0 = 1000``. Non-private
  quantities of synthetic corpora.
* **Real corpus** (full runs only; needs gensim's test data, ``pip install "dptensor[bench]"``):
  held-out document-completion perplexity against epsilon on the ``head500.noblanks.cor`` text
  that gensim ships, cut into 40-token documents (the privacy unit is such a document); the
  vocabulary (2000 most frequent words, stop words removed) is treated as public.

Every fit's noise is secure and fresh; ``random_state`` seeds only the corpora and the
decompositions' starts.
"""

from __future__ import annotations

import csv
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from dptensor._files import pyplot, save_figure, write_csv, write_json
from dptensor._progress import progress_bar
from dptensor.datasets.lda import make_lda_corpus
from dptensor.evaluation import completion_perplexity, split_documents
from dptensor.metrics import matched_topic_l1
from dptensor.models.topics._lda_whitening import top_eigenpairs
from dptensor.models.topics._third_moment import whitened_third_moment
from dptensor.models.topics.dp_vi import DPVariationalLDA
from dptensor.models.topics.dp_vi_options import DPVIOptions
from dptensor.models.topics.moments import LDASecondMoment, prepare_counts
from dptensor.models.topics.private_spectral import PrivateSpectralLDA
from dptensor.models.topics.spectral import SpectralLDA, decompose_whitened_tensor
from dptensor.privacy import enable_features

DELTA = 1e-7
PANELS = (
    {"name": "a", "alpha0": 0.1, "n_documents": 100_000, "doc_length": 50},
    {"name": "b", "alpha0": 1000.0, "n_documents": 1_000, "doc_length": 500},
    {"name": "c", "alpha0": 1000.0, "n_documents": 100_000, "doc_length": 500},
)
ORACLE_SHARES = (0.05, 0.2, 0.5, 0.8, 0.95, 0.995)

#: Spectral methods: label -> PrivateSpectralLDA options (None: non-private SpectralLDA).
METHODS: dict[str, dict | None] = {
    "config 1": {"config": 1},
    "config 1 (paper)": {"config": 1, "sensitivity": "paper", "shared_m2": False, "calibration": "classic"},
    "config 2 (paper)": {"config": 2, "sensitivity": "paper", "calibration": "classic"},
    "config 3 (paper)": {"config": 3, "sensitivity": "paper", "calibration": "classic"},
    "config 4 (paper)": {"config": 4, "sensitivity": "paper", "calibration": "classic"},
    "unnoised": None,
}


@dataclass(frozen=True)
class PrivateLDAResult:
    """Rows of every figure, the summary and the files written."""

    rows: list
    summary: dict
    files: dict


def topic_error(true_topics: np.ndarray, est_topics: np.ndarray) -> float:
    """Mean L1 distance between matched topics (Hungarian matching on the L1 cost; rows normalised)."""
    est = np.asarray(est_topics, dtype=np.float64)
    return float(matched_topic_l1(true_topics, est / est.sum(axis=1, keepdims=True)).mean())


def _fit_spectral(options: dict | None, counts, k, alpha0, epsilon, seed) -> np.ndarray:
    if options is None:
        return SpectralLDA(k, alpha0, random_state=seed).fit(counts).components_
    with enable_features("unproven"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        model = PrivateSpectralLDA(k, alpha0, epsilon=epsilon, delta=DELTA, random_state=seed, **options)
        return model.fit(counts).components_


def _fit_vi(counts, k, alpha0, epsilon, seed, n_passes) -> np.ndarray:
    private = {} if epsilon is None else {"epsilon": epsilon, "delta": DELTA}
    options = DPVIOptions(batch_size=min(1000, counts.shape[0]), n_passes=n_passes, clip=None)
    model = DPVariationalLDA(k, doc_topic_prior=alpha0 / k, random_state=seed, options=options, **private)
    return model.fit(counts).components_


def figure2(
    quick: bool, epsilons: Sequence[float], n_trials: int, seed: int, progress: bool
) -> list[dict]:
    """Rows ``(panel, method, epsilon, trial, error, seconds)`` of Figure 2."""
    k, d = 3, (30 if quick else 100)
    rows = []
    panels = [dict(p) for p in PANELS]
    if quick:
        for p, n in zip(panels, (5000, 1000, 5000), strict=True):
            p["n_documents"], p["doc_length"] = n, min(p["doc_length"], 100)
    total = len(panels) * n_trials
    bar = progress_bar(total=total, desc="figure 2", enabled=progress)
    for number, panel in enumerate(panels):
        for trial in range(n_trials):
            # a fixed seed per (panel, trial): str hashes change from one process to the next
            rng_seed = seed + 1000 * trial + 101 * number
            corpus = make_lda_corpus(
                panel["n_documents"], d, k, alpha=panel["alpha0"] / k, doc_length=panel["doc_length"],
                topic_concentration=0.1, random_state=rng_seed,
            )  # fmt: skip
            alpha0 = panel["alpha0"]

            def record(method, eps, error, seconds, panel=panel, trial=trial):
                rows.append({"figure": 2, "panel": panel["name"], "alpha0": panel["alpha0"],
                             "n_documents": panel["n_documents"], "n_words": d, "n_topics": k,
                             "doc_length": panel["doc_length"], "method": method, "epsilon": eps,
                             "trial": trial, "error": error, "seconds": seconds})  # fmt: skip

            start = time.perf_counter()
            error = topic_error(corpus.topics, _fit_spectral(None, corpus.counts, k, alpha0, None, trial))
            record("unnoised", math.nan, error, time.perf_counter() - start)
            start = time.perf_counter()
            est = _fit_vi(corpus.counts, k, alpha0, None, trial, 1 if quick else 3)
            record("vi-u", math.nan, topic_error(corpus.topics, est), time.perf_counter() - start)
            for eps in epsilons:
                for method, options in METHODS.items():
                    if options is None:
                        continue
                    start = time.perf_counter()
                    est = _fit_spectral(options, corpus.counts, k, alpha0, eps, trial)
                    record(method, eps, topic_error(corpus.topics, est), time.perf_counter() - start)
                oracle = min(
                    topic_error(corpus.topics, _fit_spectral(
                        {"config": 1, "clip": None,  # the worst-case release whose split the oracle tunes
                         "budget_split": {"e3": s, "e4": (1 - s) / 2, "e8": (1 - s) / 2}},
                        corpus.counts, k, alpha0, eps, trial))
                    for s in (ORACLE_SHARES[1::2] if quick else ORACLE_SHARES)
                )  # fmt: skip
                record("config 1 (oracle split)", eps, oracle, math.nan)
                start = time.perf_counter()
                est = _fit_vi(corpus.counts, k, alpha0, eps, trial, 1 if quick else 3)
                record("vi", eps, topic_error(corpus.topics, est), time.perf_counter() - start)
            bar.update()
    bar.close()
    return rows


def figure3(quick: bool, seed: int) -> list[dict]:
    """``sigma_k(M2_hat)`` against ``alpha_0`` and the smallest eigengap of ``T_hat`` against ``k``."""
    rows = []
    n = 5000 if quick else 100_000
    d = 30 if quick else 100
    for alpha0 in np.logspace(-1, 3, 5 if quick else 9):
        corpus = make_lda_corpus(n, d, 3, alpha=alpha0 / 3, doc_length=100, topic_concentration=0.1,
                                 random_state=seed)  # fmt: skip
        values, _ = top_eigenpairs(LDASecondMoment(prepare_counts(corpus.counts), alpha0), 3)
        rows.append({"figure": 3, "panel": "a", "alpha0": float(alpha0), "n_topics": 3,
                     "value": float(values[-1])})  # fmt: skip
    ks = (3, 6) if quick else (10, 20, 40, 60, 80, 100)
    for k in ks:
        d = max(2 * k, 30 if quick else 200)
        corpus = make_lda_corpus(n, d, k, alpha=1000.0 / k, doc_length=200, topic_concentration=0.1,
                                 random_state=seed)  # fmt: skip
        docs = prepare_counts(corpus.counts)
        values, vectors = top_eigenpairs(LDASecondMoment(docs, 1000.0), k)
        W = vectors / np.sqrt(np.maximum(values, 1e-300))
        lam = decompose_whitened_tensor(whitened_third_moment(docs, 1000.0, W), k, random_state=seed).weights
        gap = float(np.min(-np.diff(lam))) if k > 1 else float(lam[0])
        rows.append({"figure": 3, "panel": "b", "alpha0": 1000.0, "n_topics": k, "value": gap})
    return rows


def real_corpus(epsilons: Sequence[float], n_trials: int, seed: int, progress: bool) -> tuple[list, dict]:
    """Held-out document-completion perplexity on gensim's ``head500.noblanks.cor`` (see module doc)."""
    try:
        import gensim
    except ImportError:
        return [], {"skipped": "gensim is not installed (pip install 'dptensor[bench]')"}
    from sklearn.feature_extraction.text import CountVectorizer

    path = Path(gensim.__file__).parent / "test" / "test_data" / "head500.noblanks.cor"
    words = path.read_text().split()
    docs = [" ".join(words[i : i + 40]) for i in range(0, len(words) - 40, 40)]
    vectorizer = CountVectorizer(stop_words="english", max_features=2000)
    counts = sp.csr_matrix(vectorizer.fit_transform(docs), dtype=np.float64)
    counts = counts[np.asarray(counts.sum(axis=1)).ravel() >= 6]
    rng = np.random.default_rng(seed)
    order = rng.permutation(counts.shape[0])
    n_test = counts.shape[0] // 10
    test, train = counts[order[:n_test]], counts[order[n_test:]]
    split = split_documents(test, random_state=rng)
    k, alpha0 = 20, 1.0
    rows = []

    base = SpectralLDA(k, alpha0, random_state=seed).fit(train)
    rows.append({"method": "unnoised", "epsilon": math.nan, "trial": 0,
                 "perplexity": completion_perplexity(base, split)})  # fmt: skip
    bar = progress_bar(total=len(epsilons) * n_trials, desc="real corpus", enabled=progress)
    for eps in epsilons:
        for trial in range(n_trials):
            for method in ("config 1", "config 2 (paper)"):
                with enable_features("unproven"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    model = PrivateSpectralLDA(k, alpha0, epsilon=eps, delta=DELTA, random_state=trial,
                                               **METHODS[method]).fit(train)  # fmt: skip
                rows.append({"method": method, "epsilon": eps, "trial": trial,
                             "perplexity": completion_perplexity(model, split)})  # fmt: skip
            bar.update()
    bar.close()
    info = {"source": str(path.name), "n_train": int(train.shape[0]), "n_test": int(test.shape[0]),
            "n_words": int(counts.shape[1]), "n_topics": k, "alpha0": alpha0,
            "unit": "a 40-token document cut from the text", "vocabulary": "2000 most frequent words, "
            "English stop words removed (treated as public)"}  # fmt: skip
    return rows, info


def _mean(rows, **match) -> float:
    values = [r["error"] for r in rows if all(r.get(key) == value for key, value in match.items())]
    return float(np.mean(values)) if values else math.nan


def run(
    out_dir: str | Path,
    *,
    quick: bool = False,
    n_trials: int | None = None,
    epsilons: Sequence[float] | None = None,
    random_state: int = 0,
    progress: bool = True,
) -> PrivateLDAResult:
    """Run Figures 2 and 3 (and the real-corpus curve unless ``quick``); write CSV, PNG and JSON.

    Parameters
    ----------
    out_dir : path
    quick : bool
        Small corpora (``d = 30``, ``N <= 5000``), three epsilons, one trial, no real corpus.
    n_trials : int, optional
        Trials per point (default 5, 1 when quick).
    epsilons : sequence of float, optional
        Default ``0.1, 0.2, 0.3, 0.5, 1, 2, 3`` (``0.3, 1, 3`` when quick).
    random_state : int
    progress : bool
    """
    out_dir = Path(out_dir)
    n_trials = n_trials or (1 if quick else 5)
    epsilons = tuple(epsilons or ((0.3, 1.0, 3.0) if quick else (0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0)))
    fig2 = figure2(quick, epsilons, n_trials, random_state, progress)
    fig3 = figure3(quick, random_state)
    real_rows, real_info = ([], {"skipped": "--quick"}) if quick else real_corpus(
        (0.1, 0.3, 1.0, 3.0, 10.0), min(n_trials, 3), random_state, progress
    )
    files = {
        "csv": write_csv(out_dir / "private_lda_figure2.csv", fig2),
        "figure3_csv": write_csv(out_dir / "private_lda_figure3.csv", fig3),
    }
    if real_rows:
        files["real_csv"] = write_csv(out_dir / "private_lda_real_corpus.csv", real_rows)
    methods = sorted({r["method"] for r in fig2})
    table = {
        panel["name"]: {
            method: {f"{eps:g}": _mean(fig2, panel=panel["name"], method=method, epsilon=eps)
                     for eps in epsilons}  # fmt: skip
            for method in methods if method not in ("unnoised", "vi-u")
        } | {m: _mean(fig2, panel=panel["name"], method=m) for m in ("unnoised", "vi-u") if m in methods}
        for panel in PANELS
    }
    summary = {
        "settings": {"delta": DELTA, "epsilons": list(epsilons), "n_trials": n_trials,
                     "panels": sorted({(r["panel"], r["alpha0"], r["n_documents"], r["n_words"],
                                        r["n_topics"], r["doc_length"]) for r in fig2}),
                     "error": "mean L1 distance of Hungarian-matched topics (max 2)",
                     "oracle_shares_of_e3": list(ORACLE_SHARES)},  # fmt: skip
        "mean_error": table,
        "figure3": fig3,
        "real_corpus": real_info,
    }
    files["png"] = _plot(out_dir / "private_lda_figure2.png", fig2, epsilons)
    files["figure3_png"] = _plot_figure3(out_dir / "private_lda_figure3.png", fig3)
    if real_rows:
        files["real_png"] = _plot_real(out_dir / "private_lda_real_corpus.png", real_rows)
    files["json"] = write_json(out_dir / "private_lda.json", summary)
    return PrivateLDAResult(fig2 + fig3 + real_rows, summary, files)


def _plot(path: Path, rows: list, epsilons: Sequence[float]) -> Path:
    plt = pyplot()
    panels = sorted({r["panel"] for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    names = [*METHODS, "config 1 (oracle split)", "vi", "vi-u"]
    methods = [m for m in names if any(r["method"] == m for r in rows)]
    for ax, panel in zip(axes[0], panels, strict=True):
        sample = next(r for r in rows if r["panel"] == panel)
        for method in methods:
            if method in ("unnoised", "vi-u"):
                ax.axhline(_mean(rows, panel=panel, method=method), linestyle="--", label=method,
                           color="black" if method == "unnoised" else "grey")  # fmt: skip
                continue
            ys = [_mean(rows, panel=panel, method=method, epsilon=e) for e in epsilons]
            ax.plot(epsilons, ys, marker="o", label=method, linestyle=":" if "paper" in method else "-")
        ax.set_title(f"({panel}) alpha0={sample['alpha0']:g}, N={sample['n_documents']}, "
                     f"d={sample['n_words']}, k={sample['n_topics']}")  # fmt: skip
        ax.set_xlabel("composite epsilon (delta = 1e-7)")
        ax.set_ylabel("mean L1 topic error")
        ax.set_ylim(0, 2.05)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Private spectral LDA (dotted: paper's modes, guarantee does not hold)")
    fig.tight_layout()
    return save_figure(fig, path)


def _plot_figure3(path: Path, rows: list) -> Path:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    a = [r for r in rows if r["panel"] == "a"]
    left.loglog([r["alpha0"] for r in a], [r["value"] for r in a], marker="o")
    left.set_xlabel("alpha0")
    left.set_ylabel("sigma_k(M2_hat)")
    left.set_title("(a) k = 3")
    b = [r for r in rows if r["panel"] == "b"]
    right.plot([r["n_topics"] for r in b], [r["value"] for r in b], marker="o")
    right.set_xticks(sorted({int(r["n_topics"]) for r in b}))  # k is a whole number: no tick at 3.5
    right.set_xlabel("k")
    right.set_ylabel("smallest eigengap of T_hat")
    right.set_title("(b) alpha0 = 1000")
    fig.suptitle("Private spectral LDA, DeCarolis et al. Figure 3: the quantities its noise scales with")
    fig.tight_layout()
    return save_figure(fig, path)


def plot_figure3_from_csv(figure3_csv: str | Path, out_dir: str | Path) -> Path:
    """Redraw ``private_lda_figure3.png`` from a ``private_lda_figure3.csv`` written by :func:`run`."""
    with open(figure3_csv, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row.update(alpha0=float(row["alpha0"]), value=float(row["value"]), n_topics=int(row["n_topics"]))
    return _plot_figure3(Path(out_dir) / "private_lda_figure3.png", rows)


def _plot_real(path: Path, rows: list) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for method in ("config 1", "config 2 (paper)"):
        eps = sorted({r["epsilon"] for r in rows if r["method"] == method})
        ys = [np.mean([r["perplexity"] for r in rows if r["method"] == method and r["epsilon"] == e])
              for e in eps]  # fmt: skip
        ax.semilogx(eps, ys, marker="o", label=method, linestyle=":" if "paper" in method else "-")
    base = next(r["perplexity"] for r in rows if r["method"] == "unnoised")
    ax.axhline(base, color="black", linestyle="--", label="unnoised")
    ax.set_xlabel("epsilon (delta = 1e-7)")
    ax.set_ylabel("held-out completion perplexity")
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, path)
