"""Evaluating topic models (perplexity, the unigram baseline, NPMI), completion models and top-N recommenders.

The top-N metrics (Recall@k, NDCG@k, precision@k, coverage) and their splits live in
:mod:`dptensor.evaluation.topn` and are re-exported here.

Three measures a user applies to any fitted topic model (``SpectralLDA``, ``PrivateSpectralLDA``,
``DPVariationalLDA`` or scikit-learn's ``LatentDirichletAllocation``):

* **Document-completion perplexity** (Wallach et al., *Evaluation methods for topic models*,
  ICML 2009, Section 4.3; Rosen-Zvi et al. 2004): the tokens of each test document are split at
  random into an observed half and a held-out half (:func:`split_documents`); the model infers the
  document's topic proportions ``theta_n`` from the observed half alone (its ``transform``) and the
  held-out half is scored under ``p(w | n) = sum_i theta_ni phi_iw``:
  ``exp(-sum log p(w | n) / held-out tokens)`` (:func:`completion_perplexity`). Lower is better.
* **The unigram model** (:func:`unigram_perplexity`): every document draws its words from one
  distribution, the training corpus' word frequencies with add-``pseudo_count`` smoothing, scored on
  the *same* held-out tokens. A topic model that does not beat it has learned nothing usable. The
  baseline is computed **without privacy**, as a reference: it reads the training counts exactly.
  (A private unigram model -- one Gaussian release of ``d`` word counts with each document's count
  vector bounded -- is within rounding of it for ``N >= 10^4`` documents, so the non-private baseline
  is the bar a private topic model must clear, not a handicap.)
* **Topic coherence NPMI** (Bouma 2009; Aletras & Stevenson 2013; Lau et al. 2014; the ``C_NPMI``
  of Röder et al. 2015 with boolean-document co-occurrence) of each topic's top-``n`` words on a
  reference corpus (:func:`topic_npmi`, :func:`word_set_npmi`). With ``P(w) = D(w)/D`` and
  ``P(w, w') = D(w, w')/D`` the fractions of reference documents containing ``w`` (and ``w'``),

  ``NPMI(w, w') = log((P(w, w') + eps) / (P(w) P(w'))) / -log(P(w, w') + eps)``,

  averaged over the ``n(n-1)/2`` pairs of a topic's top words. ``eps = 1e-12`` smooths pairs that
  never co-occur, exactly as gensim's ``CoherenceModel(coherence="c_npmi")`` does (so such a pair
  scores about ``-0.5 .. -0.8``, not ``-1``; ``eps=0`` gives Bouma's limit ``-1``). A pair with a
  word that occurs in *no* reference document has no probability estimate; it scores ``-1``
  (the lower limit of NPMI), and a pair present in every reference document scores ``1``.
  Range ``[-1, 1]``; higher is better.

For a completion model (``TensorCompletion``), :func:`held_out_user_rmse` scores **held-out
users** -- users who were not in the training data -- by folding each of them in from their own
observed ratings through the released item side of the model
(:func:`dptensor.models.completion.fold_in_users`) and measuring the RMSE on their other ratings.
It reads no training user's row, so under user-level (joint) DP it is post-processing of the
release as far as the training users are concerned.

Privacy: these are evaluations, not releases. Each reads the documents passed to it without
noise (test documents, reference corpus, training counts for the unigram model); a score of a
private model on private data is *about that data* and is not covered by the model's guarantee.
Use them on data you may see, or to measure utility in a benchmark.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dptensor._validation import (
    RandomStateLike,
    check_positive_int,
    check_random_state,
    check_real,
)
from dptensor.evaluation.topn import (
    DEFAULT_KS,
    HeldOutUsers,
    coverage,
    evaluate_top_n,
    held_out_users_split,
    ndcg_at_k,
    per_user_split,
    precision_at_k,
    recall_at_k,
    relevant_from_ratings,
)
from dptensor.models.completion.fold_in import fold_in_users, predict_folded
from dptensor.models.topics._fitted import mixture_log_likelihood
from dptensor.models.topics.moments import check_count_matrix

#: gensim's ``EPSILON`` in ``topic_coherence.direct_confirmation_measure`` (Röder et al. 2015).
NPMI_EPSILON = 1e-12


@dataclass(frozen=True)
class CompletionSplit:
    """Test documents split into an observed and a held-out half (:func:`split_documents`).

    Attributes
    ----------
    observed : scipy.sparse.csr_matrix of shape (n_kept, n_words)
        ``floor(L_n / 2)`` tokens of each kept document, drawn without replacement.
    held_out : scipy.sparse.csr_matrix of shape (n_kept, n_words)
        The other ``ceil(L_n / 2)`` tokens.
    documents : ndarray of int, shape (n_kept,)
        Rows of the input that were kept (those with at least ``min_tokens`` tokens).
    """

    observed: sp.csr_matrix
    held_out: sp.csr_matrix
    documents: np.ndarray

    @property
    def n_held_out_tokens(self) -> int:
        """Tokens scored by :func:`completion_perplexity` and :func:`unigram_perplexity`."""
        return int(self.held_out.sum())


def split_documents(
    X: object, *, min_tokens: int = 2, random_state: RandomStateLike = None
) -> CompletionSplit:
    """Split each test document's tokens at random into an observed half and a held-out half.

    A document of ``L`` tokens (with multiplicity) keeps a uniformly random subset of
    ``floor(L/2)`` of them as observed; the rest are held out (Wallach et al. 2009, Section 4.3).
    Documents with fewer than ``min_tokens`` tokens carry no completion task and are left out;
    ``documents`` says which rows remain. Vectorised: one sort of all tokens by (document, random
    key), no loop over documents.

    Parameters
    ----------
    X : array_like or scipy.sparse matrix of shape (n_documents, n_words)
        Word counts of the test documents (never used for fitting).
    min_tokens : int, default 2
        At least 2, so that both halves are non-empty.
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    CompletionSplit
    """
    counts = check_count_matrix(X, allow_no_tokens=True)
    min_tokens = check_positive_int(min_tokens, "min_tokens", minimum=2)
    rng = check_random_state(random_state)
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    kept = np.flatnonzero(lengths >= min_tokens)
    if kept.size == 0:
        raise ValueError(f"X has no document with at least min_tokens={min_tokens} tokens")
    counts = counts[kept]
    counts.sort_indices()
    reps = counts.data.astype(np.int64)
    entry_row = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))
    token_row = np.repeat(entry_row, reps)
    token_col = np.repeat(counts.indices, reps)
    order = np.lexsort((rng.random(token_row.size), token_row))  # random order within each document
    starts = np.concatenate(([0], np.cumsum(lengths[kept].astype(np.int64))[:-1]))
    position = np.arange(token_row.size) - starts[token_row[order]]
    observed_token = np.empty(token_row.size, dtype=bool)
    observed_token[order] = position < (lengths[kept].astype(np.int64) // 2)[token_row[order]]

    def half(mask: np.ndarray) -> sp.csr_matrix:
        m = sp.csr_matrix(
            (np.ones(int(mask.sum())), (token_row[mask], token_col[mask])), shape=counts.shape
        )
        m.sum_duplicates()
        return m

    return CompletionSplit(half(observed_token), half(~observed_token), kept)


def topic_word_distribution(model: object) -> np.ndarray:
    """A fitted topic model's topics as word distributions (``k x d``, rows on the simplex).

    Uses the model's own ``topic_word_distribution()`` where it has one (dptensor's models: the
    smoothed topics their inference uses), otherwise ``components_`` with rows normalised
    (scikit-learn's ``LatentDirichletAllocation``, whose ``components_`` are variational
    Dirichlet parameters).
    """
    method = getattr(model, "topic_word_distribution", None)
    if callable(method):
        topics = np.asarray(method(), dtype=np.float64)
    else:
        components = getattr(model, "components_", None)
        if components is None:
            raise TypeError(
                f"model must be a fitted topic model with components_ (k x d), got {type(model).__name__}"
            )
        topics = np.asarray(components, dtype=np.float64)
        topics = topics / topics.sum(axis=1, keepdims=True)
    if topics.ndim != 2 or not np.all(np.isfinite(topics)) or np.any(topics < 0):
        raise ValueError("model's topics must be a finite, non-negative (k x d) matrix")
    return topics


def completion_perplexity(model: object, split: CompletionSplit) -> float:
    """Held-out document-completion perplexity of a fitted topic model (lower is better).

    ``theta_n = model.transform(split.observed)`` (rows renormalised to sum to one) and
    ``exp(-sum_{n, w in held-out} log (theta_n^T phi)_w / held-out tokens)`` with ``phi`` from
    :func:`topic_word_distribution` (Wallach et al. 2009, Section 4.3, with the point estimate of
    ``theta_n`` that each model's inference gives).

    Parameters
    ----------
    model : fitted topic model
        Anything with ``transform`` and topics (see :func:`topic_word_distribution`) over the
        same vocabulary as ``split``.
    split : CompletionSplit
        From :func:`split_documents`.

    Returns
    -------
    float
        ``inf`` when a held-out word has probability zero under the model.
    """
    split = _check_split(split)
    topics = topic_word_distribution(model)
    if topics.shape[1] != split.held_out.shape[1]:
        raise ValueError(
            f"the model has {topics.shape[1]} words but split has {split.held_out.shape[1]} columns"
        )
    theta = np.asarray(model.transform(split.observed), dtype=np.float64)
    if theta.shape != (split.held_out.shape[0], topics.shape[0]):
        raise ValueError(f"model.transform returned shape {theta.shape}, expected "
                         f"{(split.held_out.shape[0], topics.shape[0])}")  # fmt: skip
    theta = theta / theta.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        log_likelihood = mixture_log_likelihood(split.held_out, theta, topics)
    return math.exp(-log_likelihood / split.n_held_out_tokens)


def unigram_perplexity(train: object, split: CompletionSplit, *, pseudo_count: float = 1.0) -> float:
    """Perplexity of the unigram model on the held-out tokens of ``split`` (the no-topics baseline).

    ``p(w) = (c_w + pseudo_count) / (sum_v c_v + d pseudo_count)``, with ``c_w`` the count of word
    ``w`` in ``train`` (additive smoothing keeps unseen words possible); every held-out token is
    scored under ``p``, whatever its document. Computed **without privacy** from ``train``: a
    reference, not a release (see the module documentation).

    Parameters
    ----------
    train : array_like or scipy.sparse matrix of shape (n_documents, n_words)
        The training documents' counts (the documents the topic models were fitted on).
    split : CompletionSplit
    pseudo_count : float, default 1.0
        Added to every word's count (``> 0``, or ``0`` when every held-out word occurs in ``train``).
    """
    split = _check_split(split)
    counts = check_count_matrix(train, "train")
    if counts.shape[1] != split.held_out.shape[1]:
        raise ValueError(f"train has {counts.shape[1]} words but split has {split.held_out.shape[1]}")
    pseudo_count = check_real(pseudo_count, "pseudo_count", strict=False)
    word_counts = np.asarray(counts.sum(axis=0)).ravel() + pseudo_count
    held = np.asarray(split.held_out.sum(axis=0)).ravel()
    seen = held > 0
    with np.errstate(divide="ignore"):
        log_p = np.log(word_counts[seen]) - math.log(word_counts.sum())
    return math.exp(-float(held[seen] @ log_p) / split.n_held_out_tokens)


def _check_split(split: object) -> CompletionSplit:
    if not isinstance(split, CompletionSplit):
        raise TypeError(f"split must be a CompletionSplit (from split_documents), got {type(split).__name__}")
    return split


def top_word_indices(topics: object, n_top: int = 10) -> np.ndarray:
    """The ``n_top`` largest entries of each row of ``topics`` (``k x d``), largest first (stable ties).

    ``topics`` is a ``k x d`` weight matrix or a fitted model with ``components_``.
    """
    weights = np.asarray(getattr(topics, "components_", topics), dtype=np.float64)
    if weights.ndim != 2 or not np.all(np.isfinite(weights)):
        raise ValueError(f"topics must be a finite (k x d) matrix, got shape {weights.shape}")
    n_top = check_positive_int(n_top, "n_top", minimum=2)
    if n_top > weights.shape[1]:
        raise ValueError(f"n_top={n_top} exceeds the vocabulary size {weights.shape[1]}")
    return np.argsort(-weights, axis=1, kind="stable")[:, :n_top]


def topic_npmi(
    topics: object, reference: object, *, n_top: int = 10, epsilon: float = NPMI_EPSILON
) -> np.ndarray:
    """NPMI coherence of each topic's ``n_top`` most probable words on a reference corpus.

    Parameters
    ----------
    topics : ndarray of shape (k, d) or fitted topic model
        Topic-word weights (``components_`` of a fitted model is used).
    reference : array_like or scipy.sparse matrix of shape (n_documents, d)
        Word counts of the reference documents, over the topics' vocabulary; only whether a word
        occurs in a document matters.
    n_top : int, default 10
    epsilon : float, default 1e-12
        Smoothing of the joint probability (see the module documentation).

    Returns
    -------
    ndarray of shape (k,)
        Mean NPMI over the pairs of each topic's top words (:func:`word_set_npmi`).
    """
    return word_set_npmi(top_word_indices(topics, n_top), reference, epsilon=epsilon)


def word_set_npmi(word_sets: object, reference: object, *, epsilon: float = NPMI_EPSILON) -> np.ndarray:
    """Mean pairwise NPMI of each set of words (rows of ``word_sets``) on a reference corpus.

    Document co-occurrence counts of the words involved come from one sparse product
    ``B_U^T B_U`` of the reference's binary document-word matrix restricted to those words; no
    loop over documents or pairs. See the module documentation for the definition.

    Parameters
    ----------
    word_sets : array_like of int, shape (k, n)
        Word indices (columns of ``reference``), ``n >= 2`` distinct words per row.
    reference : array_like or scipy.sparse matrix of shape (n_documents, d)
    epsilon : float, default 1e-12

    Returns
    -------
    ndarray of shape (k,)
    """
    sets = np.asarray(word_sets)
    if sets.ndim != 2 or sets.shape[1] < 2 or not np.issubdtype(sets.dtype, np.integer):
        raise ValueError(f"word_sets must be a (k, n) integer array with n >= 2, got shape {sets.shape}")
    matrix = check_count_matrix(reference, "reference")
    if sets.min() < 0 or sets.max() >= matrix.shape[1]:
        raise ValueError(f"word_sets has indices outside the reference vocabulary [0, {matrix.shape[1]})")
    if np.any(np.diff(np.sort(sets, axis=1), axis=1) == 0):
        raise ValueError("each row of word_sets must hold distinct words")
    epsilon = check_real(epsilon, "epsilon", strict=False)
    words, position = np.unique(sets, return_inverse=True)
    position = position.reshape(sets.shape)
    present = matrix[:, words]
    present.data[:] = 1.0
    present.eliminate_zeros()
    n_docs = matrix.shape[0]
    co = np.asarray((present.T @ present).todense()) / n_docs  # |U| x |U| joint document frequencies
    marginal = np.diag(co).copy()
    i, j = np.triu_indices(sets.shape[1], k=1)
    a, b = position[:, i], position[:, j]  # k x pairs
    joint = co[a, b] + epsilon
    indep = marginal[a] * marginal[b]
    with np.errstate(divide="ignore", invalid="ignore"):
        npmi = np.log(joint / indep) / -np.log(joint)
    # a word absent from the reference, or (epsilon = 0) a pair that never co-occurs: the lower limit
    npmi = np.where((indep == 0) | (joint == 0), -1.0, npmi)
    npmi = np.where((indep > 0) & (joint >= 1.0), 1.0, npmi)  # a pair in every document
    return npmi.mean(axis=1)


def _entries(data: object, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, values)`` of TensorEntries or of an ``(indices, values)`` pair."""
    if hasattr(data, "indices") and hasattr(data, "values"):
        return np.asarray(data.indices), np.asarray(data.values)
    if isinstance(data, tuple) and len(data) == 2:
        return np.asarray(data[0]), np.asarray(data[1])
    raise TypeError(f"{name} must be TensorEntries or an (indices, values) pair, got {type(data).__name__}")


def held_out_user_rmse(model: object, observed: object, held_out: object) -> float:
    """RMSE on held-out users' ratings, each user folded in from their own observed ratings.

    The evaluation a model trained under user-level differential privacy allows: users who were
    **not** in the training data are split into ratings they show the model (``observed``) and
    ratings to predict (``held_out``). Each user's row and bias are the ridge regression of their
    observed ratings on the model's released item side, with the fit's ``reg_`` and ``reg_bias_``
    (:func:`dptensor.models.completion.fold_in_users`); the predictions at their held-out entries
    are clamped to the declared value range, as :meth:`TensorCompletion.predict` clamps them.

    What it reads: from the model only ``mean_``, the item and time factors and biases, ``core_``,
    ``reg_``, ``reg_bias_``, ``prediction_range_`` and ``shape_`` -- under user-level DP-ALS, the
    DP release and public hyper-parameters -- never the training users' rows ``factors_[0]`` and
    ``biases_[0]`` (joint DP gives each of those to its own user alone), and no training data at
    all. The RMSE is therefore post-processing of the release with respect to every training user,
    and can be reported without breaking their (joint) DP. It reads the held-out users' ratings
    exactly: it is *not* private with respect to them (they are the evaluator's own users).

    Parameters
    ----------
    model : TensorCompletion
        A fitted model (not ``offsets="biscale"``, not with mode 0 as a context mode).
    observed : TensorEntries or (indices, values)
        The held-out users' ratings shown to the model, ``(user, item, time)`` indices. User labels
        are the caller's own (they do not refer to training users); items and times must lie in
        the model's shape.
    held_out : TensorEntries or (indices, values)
        The same users' ratings to predict. A user with no observed rating is predicted from the
        mean and the item and time offsets alone.

    Returns
    -------
    float
        ``sqrt(mean((x - x_hat)^2))`` over ``held_out``.
    """
    obs_indices, obs_values = _entries(observed, "observed")
    test_indices, test_values = _entries(held_out, "held_out")
    test_values = np.asarray(test_values, dtype=np.float64)
    if test_values.size == 0:
        raise ValueError("held_out has no ratings")
    folded = fold_in_users(model, obs_indices, obs_values)
    predictions = predict_folded(model, folded, test_indices)
    if predictions.shape != test_values.shape:
        raise ValueError(
            f"held_out values must have shape ({predictions.shape[0]},), got {test_values.shape}"
        )
    return float(np.sqrt(np.mean((test_values - predictions) ** 2)))


__all__ = [
    "DEFAULT_KS",
    "NPMI_EPSILON",
    "CompletionSplit",
    "HeldOutUsers",
    "completion_perplexity",
    "coverage",
    "evaluate_top_n",
    "held_out_user_rmse",
    "held_out_users_split",
    "ndcg_at_k",
    "per_user_split",
    "precision_at_k",
    "recall_at_k",
    "relevant_from_ratings",
    "split_documents",
    "top_word_indices",
    "topic_npmi",
    "topic_word_distribution",
    "unigram_perplexity",
    "word_set_npmi",
]
