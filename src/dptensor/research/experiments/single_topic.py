"""Private single-topic model: ``e_comp`` against epsilon and against N (Imtiaz & Sarwate 2018, slides
"Performance variation vs epsilon / vs N"), for AGN, AVN, DP-TPM and the non-private method.

Settings (the slides give only ``(D, K)``; everything else here is our choice, stated in the outputs):

* ``(D, K) = (10, 5)`` and ``(50, 10)``: topics ``a_k ~ Dirichlet(1_D)``, uniform weights, three words
  per document (the estimator reads three); epsilon sweep at ``N = 10^4``, N sweep at ``epsilon = 1``;
* ``(D, K) = (10^4, 20)``: the vocabulary-scale run (``noise_sampler="scalable"``). With
  ``Dirichlet(1)`` topics over ``10^4`` words, ``||a_k|| ~ 0.014`` and even the non-private method
  cannot recover them from ``N <= 10^6`` three-word documents, so topics are drawn from
  ``Dirichlet(0.01 * 1_D)`` (about a hundred words each); epsilon sweep at ``N = 10^5``, N sweep at
  ``epsilon = 100`` (the Analyze-Gauss noise on ``M2`` has spectral norm about ``2 sqrt(D) tau_1``,
  which needs ``N epsilon`` in the ``10^7`` range at this ``D``).

Each trial draws new topics (seeded, public) and, for each ``N``, a corpus; every method and
epsilon is fitted on the same corpus with fresh secret noise. ``delta = 1e-5``, budget split 1/2,
analytic calibration, faithful moments (``"first3"``), DP-TPM with the library's default ``L`` and
``R``. Reported: mean and standard error of ``e_comp`` (the slides' min-distance metric) and of its
Hungarian-matched version.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from dptensor._files import pyplot, save_figure, write_csv, write_json, write_text
from dptensor._progress import progress_bar
from dptensor._validation import check_random_state
from dptensor.datasets.single_topic import make_single_topic_corpus
from dptensor.metrics import e_comp
from dptensor.models.topics.single_topic import SingleTopicModel
from dptensor.models.topics.spectral import project_rows_to_simplex

METHODS = ("agn", "avn", "dp_tpm", "non-private")
PRIVATE = METHODS[:3]
DELTA = 1e-5


@dataclass(frozen=True)
class Setting:
    """One data set of the experiment and its two sweeps."""

    name: str
    n_words: int
    n_topics: int
    topic_concentration: float
    epsilons: tuple[float, ...]
    n_fixed: int
    sizes: tuple[int, ...]
    epsilon_fixed: float
    noise_sampler: str = "auto"

    def points(self) -> list[tuple[int, float]]:
        """Distinct ``(N, epsilon)`` pairs of both sweeps (their crossing point is fitted once)."""
        pairs = [(self.n_fixed, e) for e in self.epsilons] + [(n, self.epsilon_fixed) for n in self.sizes]
        return sorted(set(pairs))


SMALL = (
    Setting("D=10,K=5", 10, 5, 1.0, (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100), 10**4,
            (10**3, 3 * 10**3, 10**4, 3 * 10**4, 10**5, 3 * 10**5, 10**6), 1.0),
    Setting("D=50,K=10", 50, 10, 1.0, (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100), 10**4,
            (10**3, 3 * 10**3, 10**4, 3 * 10**4, 10**5, 3 * 10**5, 10**6), 1.0),
)  # fmt: skip
SCALE = (
    Setting("D=10000,K=20", 10**4, 20, 0.01, (1, 10, 100, 1000), 10**5, (10**4, 10**5, 10**6), 100.0,
            "scalable"),
)  # fmt: skip
QUICK = (
    Setting("D=10,K=5", 10, 5, 1.0, (1, 10), 3000, (1000, 3000), 1.0),
    Setting("D=150,K=3", 150, 3, 0.05, (10,), 3000, (3000,), 10.0, "scalable"),
)


@dataclass(frozen=True)
class SingleTopicResult:
    """Per-trial records, aggregated rows, the ordering summary and the written files."""

    trials: list
    rows: list
    summary: dict
    files: dict


def run(
    out_dir: str | Path,
    *,
    quick: bool = False,
    n_trials: int | None = None,
    parts: Sequence[str] = ("small", "scale"),
    random_state: int = 0,
    progress: bool = True,
) -> SingleTopicResult:
    """Run the sweeps and write CSV (aggregated and per trial), PNG, Markdown and JSON to ``out_dir``.

    Parameters
    ----------
    out_dir : path
    quick : bool, default False
        ``D = 10`` with two epsilons and two sizes plus a ``D = 150`` scalable-sampler point,
        2 trials (seconds).
    n_trials : int, optional
        Default 20 (2 when ``quick``).
    parts : sequence of {"small", "scale"}
        ``"small"``: ``(10, 5)`` and ``(50, 10)``; ``"scale"``: ``(10^4, 20)``.
    random_state : int
        Seeds the data (public); the privacy noise is fresh OS entropy.
    progress : bool
    """
    if quick:
        settings: tuple[Setting, ...] = QUICK
        n_trials = n_trials or 2
    else:
        unknown = set(parts) - {"small", "scale"}
        if unknown:
            raise ValueError(f"parts must be among 'small' and 'scale', got {sorted(unknown)}")
        settings = (SMALL if "small" in parts else ()) + (SCALE if "scale" in parts else ())
        n_trials = n_trials or 20
    rng = check_random_state(random_state)
    seeds = rng.integers(2**32, size=(len(settings), n_trials))
    total = sum(n_trials * (len(s.points()) * len(PRIVATE) + len(set(p[0] for p in s.points())))
                for s in settings)  # fmt: skip
    bar = progress_bar(total=total, enabled=progress, desc="single-topic")
    trials: list[dict] = []
    start = time.perf_counter()
    for setting, setting_seeds in zip(settings, seeds, strict=True):
        for trial, seed in enumerate(setting_seeds):
            trials += _run_trial(setting, trial, int(seed), bar)
    bar.close()
    return write_outputs(out_dir, trials, settings, n_trials, seconds=time.perf_counter() - start)


def _run_trial(setting: Setting, trial: int, seed: int, bar: tqdm) -> list[dict]:
    data_rng = np.random.default_rng(seed)
    topics = data_rng.dirichlet(np.full(setting.n_words, setting.topic_concentration), size=setting.n_topics)
    records = []
    zero = e_comp(topics.T, np.zeros((setting.n_words, 1)))  # the all-zero estimate: min_k ||a_k||
    by_size: dict[int, list[float]] = {}
    for n, eps in setting.points():
        by_size.setdefault(n, []).append(eps)
    for n, epsilons in sorted(by_size.items()):
        corpus = make_single_topic_corpus(
            n, setting.n_words, setting.n_topics, topics=topics, random_state=data_rng
        )
        runs = [("non-private", math.inf)] + [(m, e) for e in epsilons for m in PRIVATE]
        for method, eps in runs:
            private = method != "non-private"
            model = SingleTopicModel(
                setting.n_topics, mechanism=method if private else None, epsilon=eps if private else None,
                delta=DELTA if private else None, input="tokens", n_words=setting.n_words,
                noise_sampler=setting.noise_sampler, random_state=seed + 1,
            )  # fmt: skip
            tic = time.perf_counter()
            try:
                model.fit(corpus.tokens)
                errors = (e_comp(topics.T, model.components_.T),
                          e_comp(topics.T, model.components_.T, matching="hungarian"),
                          e_comp(topics.T, project_rows_to_simplex(model.components_).T))  # fmt: skip
                failed = False
            except ValueError:  # e.g. a zero eigenvalue: counted, not hidden
                errors, failed = (math.nan, math.nan, math.nan), True
            records.append({
                "setting": setting.name, "n_words": setting.n_words, "n_topics": setting.n_topics,
                "trial": trial, "method": method, "epsilon": eps, "n_documents": n,
                "e_comp": errors[0], "e_comp_hungarian": errors[1], "e_comp_simplex": errors[2],
                "e_comp_zero_estimate": zero, "failed": failed, "seconds": time.perf_counter() - tic,
            })  # fmt: skip
            bar.update()
    return records


def _aggregate(trials: list[dict], settings: Sequence[Setting]) -> list[dict]:
    rows = []
    for setting in settings:
        sweeps = (("epsilon", [(setting.n_fixed, e) for e in setting.epsilons]),
                  ("n_documents", [(n, setting.epsilon_fixed) for n in setting.sizes]))  # fmt: skip
        for sweep, points in sweeps:
            for method in METHODS:
                for n, eps in points:
                    eps_key = math.inf if method == "non-private" else eps
                    sel = [t for t in trials if t["setting"] == setting.name and t["method"] == method
                           and t["n_documents"] == n and t["epsilon"] == eps_key]  # fmt: skip
                    if not sel:
                        continue
                    row = {"setting": setting.name, "sweep": sweep, "method": method, "n_documents": n,
                           "epsilon": eps, "trials": len(sel),
                           "failed": sum(t["failed"] for t in sel)}  # fmt: skip
                    for key in ("e_comp", "e_comp_hungarian", "e_comp_simplex"):
                        values = np.array([t[key] for t in sel if not t["failed"]])
                        row[f"{key}_mean"] = float(values.mean()) if values.size else math.nan
                        row[f"{key}_se"] = (float(values.std(ddof=1) / math.sqrt(values.size))
                                            if values.size > 1 else math.nan)  # fmt: skip
                        row[f"{key}_median"] = float(np.median(values)) if values.size else math.nan
                    row["e_comp_zero_estimate"] = float(np.mean([t["e_comp_zero_estimate"] for t in sel]))
                    row["seconds_mean"] = float(np.mean([t["seconds"] for t in sel]))
                    rows.append(row)
    return rows


def _ordering(rows: list[dict], settings: Sequence[Setting]) -> dict:
    """Where the slides' claims hold: AGN <= AVN < DP-TPM, and AGN, AVN -> non-private."""
    out = {}
    for setting in settings:
        for sweep in ("epsilon", "n_documents"):
            cells = [r for r in rows if r["setting"] == setting.name and r["sweep"] == sweep]
            xs = sorted({r[sweep] for r in cells if r["method"] != "non-private"})

            def mean(method: str, x: float, cells: list = cells, sweep: str = sweep,
                     n_fixed: int = setting.n_fixed, key: str = "e_comp_mean") -> float:
                if method == "non-private":
                    n = x if sweep == "n_documents" else n_fixed
                    match = [r for r in cells if r["method"] == method and r["n_documents"] == n]
                else:
                    match = [r for r in cells if r["method"] == method and r[sweep] == x]
                return match[0][key] if match else math.nan

            agn_le_avn = [x for x in xs if mean("agn", x) <= mean("avn", x)]
            avn_lt_tpm = [x for x in xs if mean("avn", x) < mean("dp_tpm", x)]
            agn_lt_tpm = [x for x in xs if mean("agn", x) < mean("dp_tpm", x)]
            last = xs[-1]
            out[f"{setting.name} vs {sweep}"] = {
                "grid": xs,
                "agn_le_avn_at": agn_le_avn,
                "avn_lt_dp_tpm_at": avn_lt_tpm,
                "agn_lt_dp_tpm_at": agn_lt_tpm,
                "full_ordering_at": [x for x in agn_le_avn if x in avn_lt_tpm],
                "full_ordering_at_with_simplex_projection": [
                    x for x in xs
                    if mean("agn", x, key="e_comp_simplex_mean") <= mean("avn", x, key="e_comp_simplex_mean")
                    < mean("dp_tpm", x, key="e_comp_simplex_mean")
                ],
                "ratio_to_non_private_at_largest": {
                    m: mean(m, last) / mean("non-private", last) for m in PRIVATE
                },
            }
    return out


def write_outputs(
    out_dir: str | Path, trials: list[dict], settings: Sequence[Setting], n_trials: int, *, seconds: float
) -> SingleTopicResult:
    """Aggregate per-trial records and write every output file."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = _aggregate(trials, settings)
    ordering = _ordering(rows, settings)
    summary = {
        "settings": [
            {"name": s.name, "D": s.n_words, "K": s.n_topics,
             "topic_prior": f"Dirichlet({s.topic_concentration:g})", "weights": "uniform",
             "document_length": 3, "epsilon_grid": list(s.epsilons), "N_for_epsilon_sweep": s.n_fixed,
             "N_grid": list(s.sizes), "epsilon_for_N_sweep": s.epsilon_fixed,
             "noise_sampler": s.noise_sampler}
            for s in settings
        ],
        "delta": DELTA, "budget_split": 0.5, "calibration": "analytic", "moments": "first3",
        "neighbouring": "replace one document (N, D, K public)", "n_trials": n_trials,
        "metric": "e_comp = (1/K) sum_k min_k' ||a_hat_k - a_k'||_2 (slides) of the raw estimates; "
                  "e_comp_hungarian: one-to-one; e_comp_simplex: estimates projected onto the simplex first; "
                  "e_comp_zero_estimate: the all-zero estimate (min_k ||a_k||), a reference level",
        "ordering": ordering, "seconds": seconds,
    }  # fmt: skip
    files = {
        "csv": write_csv(out_dir / "single_topic.csv", rows),
        "trials_csv": write_csv(out_dir / "single_topic_trials.csv", trials),
        "md": _write_markdown(out_dir / "single_topic.md", rows, summary),
        "json": write_json(out_dir / "single_topic.json", {"summary": summary, "rows": rows}),
    }
    files["png"] = _plot(out_dir / "single_topic.png", rows, settings)
    return SingleTopicResult(trials, rows, summary, {k: str(v) for k, v in files.items()})


def _write_markdown(path: Path, rows: list[dict], summary: dict) -> Path:
    lines = [
        f"delta = {summary['delta']:g}, budget split 1/2, analytic calibration, faithful moments (first "
        f"three words), {summary['n_trials']} trials; cells: mean e_comp ± s.e. (Hungarian-matched in "
        "brackets).",
        "",
    ]
    for setting in summary["settings"]:
        for sweep, label in (("epsilon", "epsilon"), ("n_documents", "N")):
            fixed = (f"N = {setting['N_for_epsilon_sweep']:g}" if sweep == "epsilon"
                     else f"epsilon = {setting['epsilon_for_N_sweep']:g}")  # fmt: skip
            lines += [f"### {setting['name']}, {setting['topic_prior']} topics: vs {label} ({fixed})", "",
                      f"| {label} | " + " | ".join(METHODS) + " |",
                      "|---:|" + "---:|" * len(METHODS)]  # fmt: skip
            cells = [r for r in rows if r["setting"] == setting["name"] and r["sweep"] == sweep]
            for x in sorted({r[sweep] for r in cells if r["method"] != "non-private"}):
                out = []
                for method in METHODS:
                    if method == "non-private":
                        n = x if sweep == "n_documents" else setting["N_for_epsilon_sweep"]
                        match = [r for r in cells if r["method"] == method and r["n_documents"] == n]
                    else:
                        match = [r for r in cells if r["method"] == method and r[sweep] == x]
                    r = match[0] if match else None
                    out.append("" if r is None else
                               f"{r['e_comp_mean']:.3g} ± {r['e_comp_se']:.2g} "
                               f"({r['e_comp_hungarian_mean']:.3g})"
                               + (f" [{r['failed']} failed]" if r["failed"] else ""))  # fmt: skip
                lines.append(f"| {x:g} | " + " | ".join(out) + " |")
            lines.append("")
    write_text(path, "\n".join(lines) + "\n")
    return path


def _plot(path: Path, rows: list[dict], settings: Sequence[Setting]) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(len(settings), 2, figsize=(11, 3.6 * len(settings)), squeeze=False)
    styles = {"agn": "C0-o", "avn": "C1-s", "dp_tpm": "C3-^", "non-private": "k--"}
    for row_axes, setting in zip(axes, settings, strict=True):
        for ax, sweep in zip(row_axes, ("epsilon", "n_documents"), strict=True):
            cells = [r for r in rows if r["setting"] == setting.name and r["sweep"] == sweep]
            for method, style in styles.items():
                sel = sorted((r for r in cells if r["method"] == method), key=lambda r: r[sweep])
                if not sel:
                    continue
                if method == "non-private" and sweep == "epsilon":
                    ax.axhline(sel[0]["e_comp_mean"], color="k", ls="--", lw=1, label="non-private")
                    continue
                x = np.array([r[sweep] for r in sel])
                y = np.array([r["e_comp_mean"] for r in sel])
                se = np.nan_to_num(np.array([r["e_comp_se"] for r in sel]))
                ax.plot(x, y, style, ms=4, label=method)
                ax.fill_between(x, np.maximum(y - se, 1e-12), y + se,
                                color=style[:2] if style[0] == "C" else "k", alpha=0.15)  # fmt: skip
            if cells:
                ax.axhline(cells[0]["e_comp_zero_estimate"], color="0.5", ls=":", lw=1, label="zero estimate")
            fixed = f"N={setting.n_fixed:g}" if sweep == "epsilon" else f"epsilon={setting.epsilon_fixed:g}"
            ax.set(xscale="log", yscale="log",
                   xlabel="epsilon" if sweep == "epsilon" else "N (documents)",
                   ylabel="e_comp (mean ± s.e.)",
                   title=f"{setting.name}, Dirichlet({setting.topic_concentration:g}) topics, "
                         f"{fixed}")  # fmt: skip
            ax.title.set_fontsize(9)
            ax.legend(fontsize=7)
    fig.suptitle(f"Private single-topic model (Imtiaz & Sarwate): delta={DELTA:g}, split 1/2, analytic "
                 "calibration, first three words", fontsize=10)  # fmt: skip
    fig.tight_layout()
    return save_figure(fig, path)
