"""The pictures of a report, as matplotlib figures a notebook can show or a page can embed.

Everything here draws what it is given: a fitted model's released topics (post-processing of a
private release), held-out errors, or a ledger's charges. Nothing reads training data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from scipy.spatial.distance import jensenshannon

from dptensor.decomposition.whitening import orient_columns

__all__ = [
    "intertopic_coordinates",
    "plot_budget",
    "plot_error_by_count",
    "plot_intertopic_map",
    "plot_topics",
    "topic_distributions",
    "topic_prevalence",
]


def topic_distributions(model: Any) -> np.ndarray:
    """The fitted topics of ``model`` as rows on the probability simplex (``k x d``).

    Negative entries (a raw single-topic or private estimate) are clipped to 0 before the rows are
    normalised; a :class:`~dptensor.models.DPVariationalLDA`'s ``lambda`` is normalised row by row.
    """
    components = np.asarray(getattr(model, "components_", model), dtype=np.float64)
    if components.ndim != 2:
        raise ValueError(f"model: expected k x d topics (components_), got shape {components.shape}")
    rows = np.clip(components, 0.0, None)
    sums = rows.sum(axis=1, keepdims=True)
    uniform = np.full_like(rows, 1.0 / rows.shape[1])
    return np.where(sums > 0, rows / np.where(sums > 0, sums, 1.0), uniform)


def topic_prevalence(model: Any) -> np.ndarray:
    """Each topic's share of the corpus as the model releases it (sums to 1).

    ``alpha_ / alpha_0`` for the spectral fits (DeCarolis et al., the Dirichlet prior), ``weights_``
    for the single-topic model (Imtiaz & Sarwate, ``w_k``), and the expected word counts per topic
    (row sums of ``lambda``, as pyLDAvis does) for variational LDA.
    """
    for name in ("alpha_", "weights_"):
        value = getattr(model, name, None)
        if value is not None:
            weights = np.clip(np.asarray(value, dtype=np.float64), 0.0, None)
            break
    else:
        weights = np.clip(np.asarray(model.components_, dtype=np.float64), 0.0, None).sum(axis=1)
    total = weights.sum()
    return weights / total if total > 0 else np.full(weights.shape, 1.0 / weights.size)


def intertopic_coordinates(topics: np.ndarray) -> np.ndarray:
    """2-D coordinates of the topics: classical scaling of their Jensen-Shannon distances (as LDAvis).

    Sievert & Shirley (2014), LDAvis: classical (Torgerson) multidimensional scaling of the
    Jensen-Shannon distances between topic-word distributions (base 2, so in ``[0, 1]``): the top
    two eigenpairs of the double-centred squared distances, each column given one sign
    (:func:`~dptensor.decomposition.whitening.orient_columns`). Deterministic and exact whenever
    the distances embed in the plane (always for three topics).
    """
    topics = np.asarray(topics, dtype=np.float64)
    k = topics.shape[0]
    if k == 1:
        return np.zeros((1, 2))
    distances = np.zeros((k, k))
    for i in range(k):
        for j in range(i + 1, k):
            distances[i, j] = distances[j, i] = jensenshannon(topics[i], topics[j], base=2)
    distances = np.nan_to_num(distances)
    centring = np.eye(k) - 1.0 / k
    gram = -0.5 * centring @ (distances**2) @ centring
    values, vectors = np.linalg.eigh(gram)
    top = np.argsort(values)[::-1][:2]
    coordinates = orient_columns(vectors[:, top]) * np.sqrt(np.clip(values[top], 0.0, None))
    return np.pad(coordinates, ((0, 0), (0, 2 - coordinates.shape[1])))


def plot_topics(
    model: Any, vocabulary: Sequence[str] | None = None, *, top: int = 10, columns: int = 5
) -> Figure:
    """Bar charts of each topic's ``top`` words with their probabilities, titled by prevalence.

    Parameters
    ----------
    model : fitted topic model
        Anything with ``components_`` (``k x d``): SpectralLDA, PrivateSpectralLDA,
        DPVariationalLDA, SingleTopicModel (see :func:`topic_distributions`).
    vocabulary : sequence of str, optional
        Word of each column (word indices are shown without it).
    top : int, default 10
        Words per topic.
    columns : int, default 5
        Charts per row.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if top < 1 or columns < 1:
        raise ValueError(f"top and columns must be positive, got top={top}, columns={columns}")
    topics = topic_distributions(model)
    prevalence = topic_prevalence(model)
    k, d = topics.shape
    if vocabulary is not None and len(vocabulary) != d:
        raise ValueError(f"vocabulary has {len(vocabulary)} words but the model has {d}")
    top = min(top, d)
    columns = min(columns, k)
    rows = -(-k // columns)
    fig = Figure(figsize=(2.7 * columns, 0.28 * top * rows + 0.9 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, columns, squeeze=False)).ravel()
    for t, ax in enumerate(axes):
        if t >= k:
            ax.set_axis_off()
            continue
        order = np.argsort(-topics[t], kind="stable")[:top]
        words = [str(vocabulary[j]) if vocabulary is not None else str(j) for j in order]
        ax.barh(range(top)[::-1], topics[t, order], color=f"C{t % 10}")
        ax.set_yticks(range(top)[::-1], words, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(3))
        ax.set_title(f"topic {t + 1} ({100 * prevalence[t]:.1f}%)", fontsize=9)
    return fig


def plot_intertopic_map(model: Any) -> Figure:
    """The intertopic distance map: each topic a circle at its MDS position, area ~ prevalence."""
    topics = topic_distributions(model)
    prevalence = topic_prevalence(model)
    xy = intertopic_coordinates(topics)
    fig = Figure(figsize=(5, 4.5), layout="constrained")
    ax = fig.subplots()
    ax.scatter(xy[:, 0], xy[:, 1], s=200 + 4000 * prevalence, c=[f"C{t % 10}" for t in range(len(xy))],
               alpha=0.55, edgecolors="k")
    for t, (x, y) in enumerate(xy):
        ax.annotate(str(t + 1), (x, y), ha="center", va="center", fontsize=9, weight="bold")
    ax.set_xlabel("MDS 1")
    ax.set_ylabel("MDS 2")
    ax.set_title("intertopic distance map (Jensen-Shannon, MDS)", fontsize=10)
    ax.margins(0.25)
    return fig


def plot_error_by_count(labels: Sequence[str], series: dict[str, Sequence[float]], *, title: str) -> Figure:
    """Grouped bars: one group per count bucket (``labels``), one bar per method in ``series``."""
    fig = Figure(figsize=(6, 3.2), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / max(len(series), 1)
    x = np.arange(len(labels))
    for m, (name, values) in enumerate(series.items()):
        ax.bar(x + (m - (len(series) - 1) / 2) * width, np.asarray(values, dtype=float), width, label=name)
    ax.set_xticks(x, list(labels))
    ax.set_ylabel("held-out RMSE")
    ax.set_title(title, fontsize=10)
    highest = np.nanmax([np.nanmax(np.asarray(v, dtype=float), initial=0.0) for v in series.values()] + [0.0])
    ax.set_ylim(0, 1.5 * highest if highest > 0 else 1.0)  # headroom for the legend
    ax.legend(fontsize=7, loc="upper left")
    return fig


def plot_budget(charges: Sequence[Any], *, budget: float | None = None) -> Figure:
    """Epsilon spent over time (exact composition after each charge), one marker colour per caller.

    ``charges`` are :class:`~dptensor.privacy.Charge` records (``time``, ``spent_after``,
    ``caller``); ``budget`` draws the ledger's total as a dashed line.
    """
    import datetime as dt

    fig = Figure(figsize=(7, 3.4), layout="constrained")
    ax = fig.subplots()
    if charges:
        times = [dt.datetime.fromisoformat(c.time.replace("Z", "+00:00")) for c in charges]
        spent = [c.spent_after for c in charges]
        ax.step(times, spent, where="post", color="0.6", zorder=1)
        labels = [_caller_label(c) for c in charges]
        for n, caller in enumerate(dict.fromkeys(labels)):
            mine = [(t, s) for t, s, label in zip(times, spent, labels, strict=True) if label == caller]
            ax.scatter(*zip(*mine, strict=True), color=f"C{n % 10}", label=caller, zorder=2)
        ax.legend(fontsize=7, loc="upper left")
        if min(times) == max(times):  # one moment: give the axis a minute each side
            ax.set_xlim(times[0] - dt.timedelta(minutes=1), times[0] + dt.timedelta(minutes=1))
        locator = AutoDateLocator(maxticks=6)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    else:
        ax.text(0.5, 0.5, "no charges yet", ha="center", va="center", transform=ax.transAxes)
    if budget is not None:
        ax.axhline(budget, ls="--", color="k", lw=1)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("epsilon spent")
    ax.set_xlabel("time (UTC)")
    ax.set_title("privacy budget spent over time, by caller", fontsize=10)
    return fig


def _caller_label(charge: Any) -> str:
    """Who charged, for a legend: ``user@host`` and the calling function, or the dptensor command run."""
    caller = str(charge.caller)
    if caller.startswith("__main__") or caller.startswith("dptensor"):
        words = [w for w in str(charge.argv).split()[1:] if not w.startswith("-")][:2]
        caller = "dptensor " + " ".join(words)
    return f"{charge.user}@{charge.host}: {caller}"
