"""Canaries for auditing dptensor's private estimators end to end (registered on import).

:func:`dptensor.privacy.audit.audit_estimator` lives in the privacy layer, which may not import
the models; this module tells it, for each private estimator, what a canary is under the
estimator's neighbouring relation and which released numbers score it
(:class:`~dptensor.privacy.audit.CanaryAdapter`). Each canary is as distinguishable as the
relation allows, and reads only the public API of a fitted estimator (``components_``,
``predict``), never its internals:

* **documents** (``"document"`` relation: :class:`PrivateSpectralLDA`, :class:`DPVariationalLDA`,
  :class:`SingleTopicModel`; replace one document): a document made only of one of the rarest
  words of the corpus, as long as the longest document of the corpus (so no length bound it must
  respect is crossed; for :class:`DPVariationalLDA`, as long as its declared ``max_doc_length``,
  so that its statistics reach the clipping norm); left out, a copy of a corpus document takes
  its place (the number of documents stays the same). Score: the canary word's total weight in
  the released topics (``components_`` summed over topics). Extra features for the
  distinguishing attack: every word's total and largest weight.
* **ratings** (``"entry-value"``: :class:`TensorCompletion`, change one observed value): an
  observed entry set to the top of the declared ``value_range``, left out set to its bottom.
  Score: the predicted rating at the entry; extras: predictions at the entries sharing its
  user or item.
* **users** (``"user"``: change every rating of one user, their number and cells included): a
  user who rates ``max_ratings`` cells (all of them if fewer) at the top of ``value_range``, left
  out the same cells at its bottom.
  Under joint DP the user's own row is not released to others, so the score is what other users
  see: the mean prediction for *other* users at the canary's items; extras: those predictions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dptensor.models.completion import TensorCompletion
from dptensor.models.dp_vi_lda import DEFAULT_MAX_DOC_LENGTH, DPVariationalLDA
from dptensor.models.private_spectral_lda import PrivateSpectralLDA
from dptensor.models.single_topic import SingleTopicModel
from dptensor.privacy.end_to_end_audit import register_canaries

__all__ = ["CompletionCanaries", "DocumentCanaries"]


def _topic_word_features(components: np.ndarray, words: np.ndarray) -> list[np.ndarray]:
    """Per canary word: its total released weight, then every word's total and largest weight."""
    comp = np.asarray(components, dtype=float)
    total, top = comp.sum(axis=0), comp.max(axis=0)
    return [np.concatenate(([total[w]], total, top)) for w in words]


@dataclass
class _DocumentPlan:
    base: Any
    words: np.ndarray
    canaries: list
    fillers: list
    tokens: bool

    @property
    def n_canaries(self) -> int:
        return len(self.words)


class DocumentCanaries:
    """Document canaries made of one rare word (see the module docstring)."""

    relation = "document"

    def __init__(self, words: str = "rare", min_length: int = 0) -> None:
        if words not in ("rare", "frequent"):
            raise ValueError(f"words must be 'rare' or 'frequent', got {words!r}")
        self.words = words
        self.min_length = int(min_length)
    description = ("canary documents made of one of the corpus's rarest words, as long as its longest "
                   "document (a copy of a corpus document when left out); score: the canary word's "
                   "weight in the released topics")

    def plan(self, estimator: Any, X: Any, n_canaries: int, rng: np.random.Generator) -> _DocumentPlan:
        """Pick the rarest words (one per canary) and a corpus document as each canary's neighbour."""
        tokens = isinstance(X, list | tuple)
        if tokens:
            docs = [np.asarray(doc, dtype=np.int64) for doc in X]
            if not docs:
                raise ValueError("X must hold at least one document")
            n_words = getattr(estimator, "n_words", None) or int(max(int(d.max()) for d in docs) + 1)
            freq = np.bincount(np.concatenate(docs), minlength=n_words)
            length = max(self.min_length, max(len(d) for d in docs))
        else:
            X = sp.csr_matrix(X)
            if X.shape[0] == 0:
                raise ValueError("X must hold at least one document")
            freq = np.asarray(X.sum(axis=0)).ravel()
            length = max(self.min_length, int(np.asarray(X.sum(axis=1)).max()))
        m = min(int(n_canaries), freq.size)
        order = np.lexsort((rng.random(freq.size), freq if self.words == "rare" else -freq))
        words = np.sort(order[:m])
        n_docs = len(docs) if tokens else X.shape[0]
        picks = rng.integers(n_docs, size=m)
        if tokens:
            canaries = [np.full(length, w, dtype=np.int64) for w in words]
            fillers = [docs[i] for i in picks]
            base: Any = docs
        else:
            canaries = [sp.csr_matrix(([length], ([0], [w])), shape=(1, X.shape[1])) for w in words]
            fillers = [X[i] for i in picks]
            base = X
        return _DocumentPlan(base, words, canaries, fillers, tokens)

    def fit_args(self, plan: _DocumentPlan, included: np.ndarray) -> tuple:
        """The corpus followed by each canary or its filler."""
        extra = [c if inc else f for c, f, inc in zip(plan.canaries, plan.fillers, included, strict=True)]
        if plan.tokens:
            return (list(plan.base) + extra,)
        return (sp.vstack([plan.base, *extra], format="csr"),)

    def features(self, estimator: Any, plan: _DocumentPlan) -> list[np.ndarray]:
        """The canary word's released weight, then every word's (``components_`` only)."""
        return _topic_word_features(estimator.components_, plan.words)


@dataclass
class _CompletionPlan:
    indices: np.ndarray
    values: np.ndarray
    shape: tuple
    canary_rows: list  # observed entries each canary sets
    probes: list  # entries whose predictions score each canary
    low: float
    high: float

    @property
    def n_canaries(self) -> int:
        return len(self.canary_rows)


class CompletionCanaries:
    """Extreme-rating canaries for tensor completion (entry-value or user relation)."""

    def __init__(self, relation: str) -> None:
        if relation not in ("entry-value", "user"):
            raise ValueError(f"no completion canaries for the {relation!r} relation")
        self.relation = relation
        if relation == "entry-value":
            self.description = ("canary ratings: observed entries at the top of value_range (its bottom when "
                                "left out); score: the predicted rating at the entry")
        else:
            self.description = ("canary users: every rating of a user at the top of value_range (its bottom "
                                "when left out); score: other users' predicted ratings at the canary's items")

    def plan(self, estimator: Any, X: Any, n_canaries: int, rng: np.random.Generator) -> _CompletionPlan:
        """Pick canaries in distinct users; the pattern of observed entries is kept."""
        if not (isinstance(X, tuple | list) and len(X) == 3):
            raise TypeError("X must be (indices, values, shape) for TensorCompletion")
        indices = np.asarray(X[0], dtype=np.int64)
        values = np.asarray(X[1], dtype=float)
        shape = tuple(int(s) for s in X[2])
        if estimator.value_range is None:
            raise ValueError("auditing TensorCompletion needs a declared value_range (the canaries' "
                             "extremes)")
        low, high = (float(v) for v in estimator.value_range)
        users = rng.permutation(np.unique(indices[:, 0]))[: int(n_canaries)]
        rows, probes = [], []
        if self.relation == "user":
            # a canary user rates as many (item, day) cells as the relation's bound allows
            keep = ~np.isin(indices[:, 0], users)
            cells = np.array([(j, k) for j in range(shape[1]) for k in range(shape[2])], dtype=np.int64)
            cells = cells[rng.permutation(len(cells))[: int(getattr(estimator, "max_ratings", len(cells)))]]
            new_rows = [np.column_stack([np.full(len(cells), u), cells]) for u in users]
            start = int(keep.sum())
            indices = np.vstack([indices[keep], *new_rows])
            values = np.concatenate([values[keep], np.full(len(cells) * len(users), low)])
            for n, u in enumerate(users):
                rows.append(np.arange(start + n * len(cells), start + (n + 1) * len(cells)))
                others = np.flatnonzero(indices[:, 0] != u)
                probes.append(indices[others])
        for u in users if self.relation == "entry-value" else ():
            mine = np.flatnonzero(indices[:, 0] == u)
            entry = int(rng.choice(mine))
            i, j = indices[entry, 0], indices[entry, 1]
            near = np.flatnonzero((indices[:, 0] == i) | (indices[:, 1] == j))
            rows.append(np.array([entry]))
            probes.append(np.vstack([indices[entry], indices[near[near != entry]]]))
        return _CompletionPlan(indices, values, shape, rows, probes, low, high)

    def fit_args(self, plan: _CompletionPlan, included: np.ndarray) -> tuple:
        """The observed entries with each canary's ratings at the top (in) or bottom (out) of the range."""
        values = plan.values.copy()
        for rows, inc in zip(plan.canary_rows, included, strict=True):
            values[rows] = plan.high if inc else plan.low
        return plan.indices, values, plan.shape

    def features(self, estimator: Any, plan: _CompletionPlan) -> list[np.ndarray]:
        """Predictions at each canary's probes (``predict`` only); first the score."""
        out = []
        for probe in plan.probes:
            pred = np.asarray(estimator.predict(probe), dtype=float)
            score = pred[0] if self.relation == "entry-value" else pred.mean()
            out.append(np.concatenate(([score], pred)))
        return out


def _completion_canaries(estimator: TensorCompletion) -> CompletionCanaries:
    return CompletionCanaries(estimator.neighbouring or "entry-value")


def _dp_vi_canaries(estimator: DPVariationalLDA) -> DocumentCanaries:
    # a document may be as long as the declared maximum (the public default when none is declared):
    # long enough for its statistics to reach the clipping norm
    return DocumentCanaries(min_length=estimator.max_doc_length or DEFAULT_MAX_DOC_LENGTH)


for _type in (PrivateSpectralLDA, SingleTopicModel):
    register_canaries(_type, lambda estimator: DocumentCanaries())
register_canaries(DPVariationalLDA, _dp_vi_canaries)
register_canaries(TensorCompletion, _completion_canaries)
