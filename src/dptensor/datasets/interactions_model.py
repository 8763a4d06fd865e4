"""A semi-synthetic implicit-feedback generator with user-dependent item choice (a benchmark tool).

:class:`ImplicitFeedbackModel` is fitted on a real binary user x item interaction matrix
(MovieLens-100K, say) and then draws any number of *new* users -- 10^3 to 10^6 and more, in blocks,
in memory bounded by the block -- whose rows look like the real ones in the respects that matter to
top-N benchmarks (the implicit-feedback analogue of :class:`~dptensor.datasets.RatingsModel`):

* **interactions per user**: each new user copies the row length ``n_u`` of a real user drawn
  uniformly (the "donor"), so lengths follow the real, heavy-tailed distribution (resampled);
* **taste**: a multinomial-logit choice model of low rank. The real rows, scaled to unit length
  ``xhat_u = x_u / ||x_u||``, give the truncated SVD ``Xhat ~ U_r S_r V_r^T`` (the top eigenvectors
  of the unit-row Gram ``sum_u xhat_u xhat_u^T`` that private top-N releases); a new user's taste is
  the donor's ``t = xhat_u V_r`` plus Gaussian noise (``taste_noise`` times each coordinate's spread
  over the real users), and item ``i`` has utility
  ``beta * <t, v_i> / scale + b_i`` (``v_i`` the item's row of ``V_r``, ``scale`` the spread of
  ``<t, v_i>`` over the real users and items, so ``beta = 1 / temperature`` is dimensionless);
* **choice**: the user's ``n_u`` items are drawn *without replacement* with probabilities
  ``softmax(utility)`` (successive sampling, done exactly by Gumbel keys: the ``n_u`` largest
  ``utility_i + G_i``, ``G_i`` standard Gumbel; Vieira 2014, Kool et al. 2019);
* **popularity**: the item offsets ``b_i`` start at ``log`` of the real counts and are then
  corrected by a few rounds of ``b_i += log(real count / drawn count)`` on a calibration draw, so
  that the drawn item counts follow the real popularity profile;
* **user dependence**: ``beta`` (``temperature="auto"``) is chosen so that a draw of as many users
  as the real set, with the real row lengths, has the real set's co-occurrence energy: the squared
  Frobenius norm of the off-diagonal part of the unit-row Gram ``sum_u xhat_u xhat_u^T``. That
  energy is what item-item models (EASE, item kNN) learn from; popularity-only choice
  (``beta = 0``) has less of it, so a model of item-item structure beats popularity on the draws
  about as much as on the real data.

The users drawn are independent of each other and of the real users (beyond the fitted model), so
the generator is a tool for measuring how methods scale with the number of users on data of a
realistic shape -- not a model of any real user, and not a privacy mechanism: the fitted model
(``item_factors_``, the donors' tastes and lengths) is computed from the real data without noise.
Never publish it, or data drawn from it, in place of private data.

Without real data (``fit()`` with no matrix, as the tests use), the model is fitted on a built-in
synthetic "real" set (:func:`planted_interactions`: users in taste groups with Zipf popularity and
heavy-tailed row lengths), so nothing depends on a downloaded file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils.extmath import randomized_svd

from dptensor._validation import (
    NotFittedError,
    RandomStateLike,
    check_positive_int,
    check_random_state,
    check_real,
)

__all__ = ["ImplicitFeedbackModel", "make_implicit_feedback", "planted_interactions", "unit_row_gram"]

#: Users x items keys per block when drawing (about 64 MB of float32 keys at 1 << 24).
KEY_BLOCK = 1 << 24

#: Rows per group of similar length when choosing items (:func:`_choose`).
CHOICE_GROUP = 512


def unit_row_gram(X: sp.sparray | sp.spmatrix) -> np.ndarray:
    """``sum_u xhat_u xhat_u^T`` with ``xhat_u = x_u / ||x_u||`` (empty rows add nothing), dense.

    Parameters
    ----------
    X : scipy sparse matrix, shape (n_users, n_items)
        Binary interactions (stored values are taken as they are).

    Returns
    -------
    ndarray of shape (n_items, n_items)
    """
    X = sp.csr_array(X, dtype=np.float64)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    Xhat = X.copy()
    Xhat.data *= np.repeat(scale, np.diff(X.indptr))
    return np.asarray((Xhat.T @ Xhat).toarray())


def _co_occurrence_energy(X: sp.csr_array) -> float:
    """Squared Frobenius norm of the off-diagonal part of :func:`unit_row_gram` (without forming it
    when that is cheaper: ``||G||_F^2 = ||Xhat Xhat^T||_F^2``)."""
    gram = unit_row_gram(X)
    return float(np.sum(gram * gram) - np.sum(np.diag(gram) ** 2))


def planted_interactions(
    n_users: int = 800, n_items: int = 400, *, n_groups: int = 6, random_state: RandomStateLike = 0
) -> sp.csr_array:
    """A small synthetic "real" interaction set with planted structure (the generator's fallback).

    Items get Zipf-like popularity ``1 / (rank + 20)`` and a random taste group; each user belongs to
    one group, has a heavy-tailed row length (log-normal, 10 to ``n_items / 3`` items) and chooses
    items without replacement with weights ``popularity * (20 if the item is in the user's group else
    1)``. Used when no real matrix is given, so that tests need no file.

    Parameters
    ----------
    n_users, n_items, n_groups : int
    random_state : None, int or Generator

    Returns
    -------
    scipy.sparse.csr_array of shape (n_users, n_items), binary
    """
    n_users = check_positive_int(n_users, "n_users")
    n_items = check_positive_int(n_items, "n_items", minimum=2)
    n_groups = check_positive_int(n_groups, "n_groups")
    rng = check_random_state(random_state)
    popularity = 1.0 / (rng.permutation(n_items) + 20.0)
    item_group = rng.integers(n_groups, size=n_items)
    user_group = rng.integers(n_groups, size=n_users)
    high = max(2, n_items // 3)
    lengths = np.clip(np.round(rng.lognormal(np.log(25.0), 0.8, size=n_users)), min(10, high), high)
    utility = np.log(popularity)[None, :] + np.log(20.0) * (user_group[:, None] == item_group[None, :])
    return _choose(utility, lengths.astype(np.int64), rng)


def _choose(utility: np.ndarray, lengths: np.ndarray, rng: np.random.Generator) -> sp.csr_array:
    """Each row ``u`` chooses ``lengths[u]`` distinct columns by successive sampling on
    ``softmax(utility[u])``, exactly: the smallest exponential keys ``E_i / exp(utility_i)``
    (Efraimidis & Spirakis 2006; the Gumbel top-k of ``utility_i - log E_i``).

    Rows are taken in order of length, in groups of :data:`CHOICE_GROUP`, so that each group
    partitions its keys at its own longest row instead of sorting all of them.
    """
    n_rows, n_items = utility.shape
    weight = np.exp(utility - utility.max(axis=1, keepdims=True)).astype(np.float32)
    keys = rng.standard_exponential((n_rows, n_items), dtype=np.float32)
    with np.errstate(over="ignore"):  # a weight below float32's range: that item's key is inf (last)
        keys /= np.maximum(weight, np.finfo(np.float32).tiny)
    by_length = np.argsort(lengths, kind="stable")
    rows_out, cols_out = [], []
    for lo in range(0, n_rows, CHOICE_GROUP):
        group = by_length[lo:lo + CHOICE_GROUP]
        need = lengths[group]
        widest = int(need.max(initial=0))
        if widest == 0:
            continue
        block = keys[group]
        if widest < n_items:
            candidates = np.argpartition(block, widest - 1, axis=1)[:, :widest]
        else:
            candidates = np.broadcast_to(np.arange(n_items), block.shape)
        order = np.argsort(np.take_along_axis(block, candidates, axis=1), axis=1, kind="stable")
        chosen = np.take_along_axis(candidates, order, axis=1)
        take = np.arange(widest)[None, :] < need[:, None]
        rows_out.append(np.broadcast_to(group[:, None], take.shape)[take])
        cols_out.append(chosen[take])
    rows = np.concatenate(rows_out) if rows_out else np.zeros(0, dtype=np.int64)
    cols = np.concatenate(cols_out) if cols_out else np.zeros(0, dtype=np.int64)
    X = sp.csr_array((np.ones(cols.shape[0]), (rows, cols)), shape=(n_rows, n_items))
    X.sort_indices()
    return X


def _as_interactions(X: object) -> sp.csr_array:
    """The binary csr form of a real interaction matrix, a RecBole/MovieLens file path, or None."""
    if X is None:
        return planted_interactions()
    if isinstance(X, str | Path):
        from dptensor.datasets.entries import read_recbole_inter  # only when a file is given

        entries = read_recbole_inter(X)
        users, items = entries.indices[:, 0], entries.indices[:, 1]
        X = sp.coo_array((np.ones(users.shape[0]), (users, items)), shape=tuple(entries.shape[:2]))
    if not sp.issparse(X):
        raise TypeError(f"X must be a scipy sparse matrix, a file path or None, got {type(X).__name__}")
    X = sp.csr_array(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}")
    X.sum_duplicates()
    if not np.all(np.isfinite(X.data)) or np.any(X.data < 0):
        raise ValueError("X must have finite non-negative entries")
    X.data = (X.data > 0).astype(np.float64)
    X.eliminate_zeros()
    if X.nnz == 0:
        raise ValueError("X has no interactions to fit")
    return X


class ImplicitFeedbackModel(BaseEstimator):
    """A semi-synthetic implicit-feedback generator fitted to a real interaction set (a benchmark tool).

    See the module docstring for what is kept from the real data and how users are drawn. The fitted
    model is computed from the real data **without** any privacy protection.

    Parameters
    ----------
    n_factors : int, default 24
        Rank ``r`` of the taste model (clipped to the data's size).
    temperature : float or "auto", default "auto"
        ``1 / beta`` of the choice model; ``"auto"`` matches the real co-occurrence energy.
    taste_noise : float, default 0.5
        Gaussian noise added to a donor's taste, in units of each coordinate's spread.
    calibration_rounds : int, default 6
        Rounds of the popularity correction (each one calibration draw).
    random_state : None, int or Generator
        Seeds the fit's calibration draws and, unless :meth:`iter_samples` gets its own, the users
        drawn.

    Attributes
    ----------
    n_items_ : int
    row_lengths_ : ndarray of int, shape (n_donors,)
        Interactions of every real user with at least one (the donors).
    item_popularity_ : ndarray of int, shape (n_items,)
        Real interactions per item.
    item_factors_ : ndarray, shape (n_items, r)
        ``V_r``, the top right singular vectors of the unit-row matrix.
    tastes_ : ndarray, shape (n_donors, r)
        The donors' tastes ``xhat_u V_r``.
    taste_spread_ : ndarray, shape (r,)
        Standard deviation of each taste coordinate over the donors.
    utility_scale_ : float
        Standard deviation of ``<t_u, v_i>`` over donors and items.
    beta_ : float
        ``1 / temperature``, the weight of taste in the utility.
    item_offsets_ : ndarray, shape (n_items,)
        ``b_i`` after the popularity correction.
    real_energy_ : float
        The real off-diagonal co-occurrence energy (what ``"auto"`` matches).
    """

    def __init__(
        self,
        n_factors: int = 24,
        *,
        temperature: float | str = "auto",
        taste_noise: float = 0.5,
        calibration_rounds: int = 6,
        random_state: RandomStateLike = None,
    ) -> None:
        self.n_factors = n_factors
        self.temperature = temperature
        self.taste_noise = taste_noise
        self.calibration_rounds = calibration_rounds
        self.random_state = random_state

    # ------------------------------------------------------------------ fit
    def fit(self, X: object = None) -> ImplicitFeedbackModel:
        """Fit the generator to a real interaction set.

        Parameters
        ----------
        X : scipy sparse matrix, path or None
            Users x items (any positive stored value is an interaction), a RecBole ``.inter`` file
            (every rating an interaction), or ``None`` for :func:`planted_interactions`.

        Returns
        -------
        self
        """
        n_factors = check_positive_int(self.n_factors, "n_factors")
        noise = check_real(self.taste_noise, "taste_noise", strict=False)
        rounds = check_positive_int(self.calibration_rounds, "calibration_rounds", minimum=0)
        if not (isinstance(self.temperature, str) and self.temperature == "auto"):
            check_real(self.temperature, "temperature")
        X = _as_interactions(X)
        rng = check_random_state(self.random_state)
        lengths = np.diff(X.indptr)
        donors = np.flatnonzero(lengths > 0)
        Xd = sp.csr_array(X[donors], dtype=np.float64)
        Xd.data *= np.repeat(1.0 / np.sqrt(lengths[donors]), lengths[donors])
        rank = min(n_factors, min(Xd.shape) - 1) if min(Xd.shape) > 1 else 1
        _, _, vt = randomized_svd(Xd, rank, n_iter=7, random_state=int(rng.integers(2**31)))
        self.n_items_ = X.shape[1]
        self.row_lengths_ = lengths[donors].astype(np.int64)
        self.item_popularity_ = np.bincount(X.indices, minlength=X.shape[1]).astype(np.int64)
        self.item_factors_ = vt.T.copy()
        self.tastes_ = np.asarray(Xd @ self.item_factors_)
        self.taste_spread_ = self.tastes_.std(axis=0)
        self.utility_scale_ = float(np.std(self.tastes_ @ self.item_factors_.T)) or 1.0
        self.real_energy_ = _co_occurrence_energy(X[donors])
        self.taste_noise_ = noise
        with np.errstate(divide="ignore"):
            self.item_offsets_ = np.log(self.item_popularity_ + 0.5)
        seed = int(rng.integers(2**63))
        if self.temperature == "auto":
            self.beta_ = self._match_energy(seed, rounds)
        else:
            self.beta_ = 1.0 / float(self.temperature)
            self._calibrate_popularity(seed, rounds)
        return self

    def _calibration_draw(self, seed: int) -> sp.csr_array:
        """As many users as the real set, each donor once (its real length), common random numbers."""
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7,)))
        return self._draw(np.arange(self.row_lengths_.shape[0]), rng)

    def _calibrate_popularity(self, seed: int, rounds: int) -> None:
        """``b_i += log(real / drawn)`` on calibration draws, ``rounds`` times (module docstring)."""
        target = self.item_popularity_ + 0.5
        for _ in range(rounds):
            drawn = np.bincount(self._calibration_draw(seed).indices, minlength=self.n_items_) + 0.5
            self.item_offsets_ = self.item_offsets_ + np.log(target / drawn)
            self.item_offsets_ -= self.item_offsets_.max()

    def _energy_at(self, beta: float, seed: int, rounds: int) -> float:
        self.beta_ = beta
        with np.errstate(divide="ignore"):
            self.item_offsets_ = np.log(self.item_popularity_ + 0.5)
        self._calibrate_popularity(seed, rounds)
        return _co_occurrence_energy(self._calibration_draw(seed))

    def _match_energy(self, seed: int, rounds: int) -> float:
        """Bisection on ``log beta`` for the real co-occurrence energy (energy grows with beta)."""
        low, high = 0.0, 8.0
        if self._energy_at(high, seed, rounds) <= self.real_energy_:
            return high
        for _ in range(12):
            middle = 0.5 * (low + high)
            if self._energy_at(middle, seed, rounds) < self.real_energy_:
                low = middle
            else:
                high = middle
        self._energy_at(0.5 * (low + high), seed, rounds)
        return self.beta_

    # ------------------------------------------------------------------ sampling
    def _check_fitted(self) -> None:
        if not hasattr(self, "beta_"):
            raise NotFittedError("this ImplicitFeedbackModel is not fitted yet; call fit first")

    def _draw(self, donors: np.ndarray, rng: np.random.Generator) -> sp.csr_array:
        """One block of users with the given donors."""
        tastes = self.tastes_[donors] + self.taste_noise_ * self.taste_spread_ * rng.standard_normal(
            (donors.shape[0], self.tastes_.shape[1]))
        utility = (self.beta_ / self.utility_scale_) * (tastes @ self.item_factors_.T) + self.item_offsets_
        lengths = np.minimum(self.row_lengths_[donors], self.n_items_)
        return _choose(utility, lengths, rng)

    def iter_samples(
        self, n_users: int, *, chunk_size: int | None = None, random_state: RandomStateLike = None
    ) -> Iterator[sp.csr_array]:
        """Draw ``n_users`` new users, ``chunk_size`` at a time (memory bounded by one chunk).

        Parameters
        ----------
        n_users : int
        chunk_size : int, optional
            Users per block; default about ``KEY_BLOCK / n_items`` (a block's keys in ~64 MB).
        random_state : None, int or Generator, optional
            Defaults to the model's ``random_state``. Block ``b`` draws from its own stream
            (``numpy.random.SeedSequence(seed, spawn_key=(b,))``), so a draw is reproducible for the
            same ``(random_state, chunk_size)``, and a smaller draw's full blocks are the first
            blocks of a larger one (the same users).

        Yields
        ------
        scipy.sparse.csr_array
            Each block's users x items binary interactions (rows in order).
        """
        self._check_fitted()
        n_users = check_positive_int(n_users, "n_users")
        chunk = max(1, KEY_BLOCK // self.n_items_) if chunk_size is None else check_positive_int(
            chunk_size, "chunk_size")
        seed = int(check_random_state(self.random_state if random_state is None else random_state,
                                      "random_state").integers(2**63))
        for b, first in enumerate(range(0, n_users, chunk)):
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(b,)))
            donors = rng.integers(self.row_lengths_.shape[0], size=min(chunk, n_users - first))
            yield self._draw(donors, rng)

    def sample(
        self, n_users: int, *, chunk_size: int | None = None, random_state: RandomStateLike = None
    ) -> sp.csr_array:
        """Draw ``n_users`` new users at once: :meth:`iter_samples`'s blocks stacked.

        Returns
        -------
        scipy.sparse.csr_array of shape (n_users, n_items_), binary
        """
        return sp.csr_array(sp.vstack(list(self.iter_samples(
            n_users, chunk_size=chunk_size, random_state=random_state)), format="csr"))


def make_implicit_feedback(
    n_users: int,
    X: object = None,
    *,
    n_factors: int = 24,
    temperature: float | str = "auto",
    taste_noise: float = 0.5,
    random_state: RandomStateLike = None,
) -> sp.csr_array:
    """Draw ``n_users`` semi-synthetic users from an :class:`ImplicitFeedbackModel` fitted on ``X``.

    A benchmark tool, not data: see :mod:`dptensor.datasets.interactions_model`.

    Parameters
    ----------
    n_users : int
    X : scipy sparse matrix, path or None
        The real interactions to fit (``None``: :func:`planted_interactions`).
    n_factors, temperature, taste_noise : see :class:`ImplicitFeedbackModel`
    random_state : None, int or Generator

    Returns
    -------
    scipy.sparse.csr_array of shape (n_users, n_items), binary
    """
    rng = check_random_state(random_state)
    model = ImplicitFeedbackModel(n_factors, temperature=temperature, taste_noise=taste_noise,
                                  random_state=rng).fit(X)
    return model.sample(n_users, random_state=rng)
