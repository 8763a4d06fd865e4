"""Online robust tensor power method on a data stream (Wang & Anandkumar 2016, Algorithm 2).

The tensor to decompose is the population third moment ``T = E[x (x) x (x) x]`` of a data
stream ``x_1, x_2, ...`` in ``R^d``. Algorithm 2 never forms ``T`` (``d^3`` numbers, 8 PB for
``d = 100,000``): each power step ``T(I, u, u)`` is replaced by its empirical estimate on the
next ``n`` points, ``(1/n) sum_l (x_l^T u)^2 x_l``, computed for all ``L`` restarts at once as
``X^T (X U)^2 / n`` with two matrix products per batch. Memory is ``O(d(k + L))`` plus one
batch, time ``O(n k d L R)``, and the algorithm reads ``k R n`` points (Proposition 3.1).

The pseudocode, step by step, and where each step happens in :class:`OnlineTensorPower`:

1. for each component ``i = 1..k`` (:meth:`~OnlineTensorPower._start_component`):
   draw ``u_0^{(1..L)}`` uniformly from the unit sphere (step 3);
2. for each round ``t = 0..R-1``: set the accumulators ``u~_{t+1}^{(tau)}`` and
   ``lambda~^{(tau)}`` to zero (step 4);
3. *data association* (:meth:`~OnlineTensorPower._associate`, steps 5-6): read the next ``n``
   points and add ``(1/n)(x_l^T u_t)^2 x_l`` and ``(1/n)(x_l^T u_t)^3``;
4. *deflation* (:meth:`~OnlineTensorPower._finish_round`, step 7): subtract
   ``sum_{j<i} lambda^_j xi_{j,tau}^2 v^_j`` and ``sum_{j<i} lambda^_j xi_{j,tau}^3`` with
   ``xi_{j,tau} = v^_j^T u_t^{(tau)}``;
5. *normalisation* (step 8): ``u_{t+1} = u~_{t+1} / ||u~_{t+1}||``;
6. keep ``tau* = argmax_tau lambda~^{(tau)}`` and store ``lambda^_i = lambda~^{(tau*)}``,
   ``v^_i = u_R^{(tau*)}`` (step 10).

Two notes on reading the paper:

* **The deflation coefficient.** The renderings of step 7 disagree (``xi_{j,tau}`` is printed
  as ``v^_j^T u~_t`` in one and ``v^_j^T u~_{t+1}`` in the other). The deflated power step is
  ``(T - sum_j lambda^_j v^_j^{(x)3})(I, u, u) = T(I, u, u) - sum_j lambda^_j (v^_j^T u)^2 v^_j``
  at the *current unit vector* ``u = u_t`` (the vector the data were projected on), so this
  implementation uses ``xi_{j,tau} = v^_j^T u_t^{(tau)}``; the eigenvalue accumulator is
  deflated with ``(v^_j^T u_t)^3`` likewise.
* **Which vector lambda~ belongs to.** Step 6 accumulates ``lambda~ = T^(u_t, u_t, u_t)`` from
  ``u_t``, the vector *before* the update, in the same pass over the data as ``u~_{t+1}``,
  and the accumulators are reset every round. The eigenvalue kept at step 10 is therefore the
  estimate at ``u_{R-1}`` while the eigenvector is ``u_R``; no extra pass over the data is
  spent on ``u_R``. Once the iteration has converged the two agree.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import Interval

from dptensor._errors import PicklableFieldsError
from dptensor._validation import (
    NotFittedError,
    RandomStateLike,
    check_data_matrix,
    check_random_state,
    check_rank,
)
from dptensor.decomposition._online_checkpoint import data_fingerprint, read_checkpoint, write_checkpoint
from dptensor.decomposition.power_method import (
    PowerMethodResult,
    default_n_iter,
    default_n_restarts,
    select_restart,
)
from dptensor.parallel import as_row_blocks, effective_n_jobs, is_distributed
from dptensor.streams import ArrayStream, BatchStream, DaskArrayStream, check_lazy_matrix
from dptensor.tensor.operators import moment_contractions
from dptensor.tensor.sphere import random_unit_vectors

#: ``progress(n_samples_seen, n_samples_needed)``, called after each batch read by ``fit``.
ProgressCallback = Callable[[int, int], None]

#: Rows per slice when ``fit`` reads an in-memory matrix (bounds the ``rows x L`` work array).
_ARRAY_CHUNK_ELEMENTS = 1 << 21


class StreamTooShortError(PicklableFieldsError, ValueError):
    """A stream holds fewer than the ``k*R*n`` points Algorithm 2 reads (and ``cycle`` is off).

    Attributes
    ----------
    needed : int
        ``k*R*n``, the points the fit reads.
    available : int
        The points the stream held (or had given when it ended).
    """

    def __init__(self, message: str, *, needed: int, available: int) -> None:
        super().__init__(message)
        self.needed = needed
        self.available = available


class OnlineTensorPower(BaseEstimator):
    """Online robust tensor power method (Wang & Anandkumar 2016, Algorithm 2).

    Decomposes the third moment ``E[x (x) x (x) x] ~ sum_i lambda_i v_i^{(x)3}`` of a data
    stream in ``O(d(k + L))`` memory, reading every point once: component ``i`` runs ``R``
    rounds, each of which reads the next ``n = batch_size`` points and updates the
    accumulators of all ``L`` restarts together (two matrix products per batch; see the
    module docstring for the steps). The whole fit reads ``k R n`` points
    (:attr:`n_samples_needed_`).

    Theorem 3.1 of the paper: under Assumptions 3.1 (``E[x^{(x)3}]`` orthogonally
    decomposable) and 3.2 (sub-Gaussian ``x^{(x)3}`` with parameter ``sigma``), with
    ``n = Omega~(min(sigma^2 d / eps^2, sigma^2 d^2 / lambda_min^2))``,
    ``R = Omega(log(lambda_max d / eps))`` and ``L = Omega(k log k)``, the output is within
    ``|lambda_i - lambda^_i| <= C eps`` and ``||v_i - v^_i|| <= C eps / lambda_i`` with
    probability 0.9: the error falls like ``sqrt(d / n)``.

    Parameters
    ----------
    rank : int
        Number of components ``k``.
    batch_size : int
        ``n``, the number of points read per round (per power step). There is no safe
        default: Theorem 3.1 asks for ``n`` of order ``sigma^2 d / eps^2``.
    n_restarts : int, optional
        ``L``; default :func:`~dptensor.decomposition.default_n_restarts`,
        ``max(10, ceil(2 k ln k))`` -- a concrete ``L = Omega(k log k)``.
    n_iter : int, optional
        ``R``, rounds per component; default
        :func:`~dptensor.decomposition.default_n_iter` ``(d, target_error)``, i.e.
        ``ceil(log2(d / target_error)) + 10`` -- a concrete ``R = Omega(log(lambda_max d / eps))``
        with ``eps / lambda_max = target_error``. Algorithm 2 always runs exactly ``R`` rounds
        (there is no convergence test on noisy estimates).
    target_error : float, default 1e-2
        Relative accuracy ``eps / lambda_max`` used only to choose the default ``R``.
    random_state : None, int or numpy.random.Generator
        Seeds the restarts. The generator is created at the first batch (or by ``fit``) and
        its state is part of a checkpoint. With the same seed and ``L``, the restarts are the
        ones :func:`~dptensor.decomposition.power_method` draws.
    n_jobs : int, optional
        Threads for the batch sums of steps 5-6 (``None``: one; ``-1``: every core): each batch
        is cut into row blocks summed in a thread pool (:mod:`dptensor.parallel`). A Dask array
        given to :meth:`fit` or :meth:`partial_fit` is summed on the active Dask scheduler.

    Attributes
    ----------
    weights_ : ndarray of shape (k,)
        ``lambda^_i``, descending (set once all ``k R n`` points have been read).
    factors_ : ndarray of shape (d, k)
        Unit ``v^_i`` in the order of ``weights_``. A component whose selected estimate
        ``lambda~`` is negative is reported as ``(-lambda~, -u)``, the same rank-one term.
    extraction_order_ : ndarray of shape (k,)
        ``extraction_order_[i]`` is the deflation step at which component ``i`` was found.
    n_samples_seen_ : int
        Points read (used) so far.
    n_features_in_ : int
        ``d``.
    n_restarts_, n_iter_ : int
        The ``L`` and ``R`` in use (after defaults are resolved at the first batch).

    Notes
    -----
    Results do not depend on how the stream is cut into batches except through floating-point
    summation order; with the same batch boundaries they are bit-identical, including across
    :meth:`save_checkpoint` / :meth:`load_checkpoint`.

    Examples
    --------
    >>> from dptensor.datasets.moment_stream import make_orthogonal_moment_stream
    >>> from dptensor.decomposition.online import OnlineTensorPower
    >>> stream = make_orthogonal_moment_stream(20, 2, noise=0.05, random_state=0)
    >>> model = OnlineTensorPower(2, batch_size=2000, n_iter=8, random_state=0)
    >>> model = model.fit(stream.batches(500))
    >>> model.n_samples_seen_
    32000
    """

    _parameter_constraints: dict = {
        "rank": [Interval(numbers.Integral, 1, None, closed="left")],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_restarts": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "n_iter": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "target_error": [Interval(numbers.Real, 0, None, closed="neither")],  # excludes inf
        "random_state": [None, Interval(numbers.Integral, 0, None, closed="left"), np.random.Generator,
                         np.random.RandomState],
        "n_jobs": [numbers.Integral, None],
    }

    def __init__(
        self,
        rank: int,
        *,
        batch_size: int,
        n_restarts: int | None = None,
        n_iter: int | None = None,
        target_error: float = 1e-2,
        random_state: RandomStateLike = None,
        n_jobs: int | None = None,
    ) -> None:
        self.rank = rank
        self.batch_size = batch_size
        self.n_restarts = n_restarts
        self.n_iter = n_iter
        self.target_error = target_error
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _check_parameters(self) -> None:
        """Declared constraints plus ``n_jobs``; called before any data is read."""
        self._validate_params()
        effective_n_jobs(self.n_jobs)

    def _state(self, name: str, default: Any = None) -> Any:
        return self.__dict__.get(name, default)

    # ------------------------------------------------------------------ state
    def _reset(self) -> None:
        self._rng: np.random.Generator | None = None
        self._dim: int | None = None
        self._component = 0
        self._round = 0
        self._round_count = 0
        self._vectors = np.zeros((0, 0))
        self._images = np.zeros((0, 0))
        self._values = np.zeros(0)
        self._found_weights = np.zeros(0)
        self._found_factors = np.zeros((0, 0))
        self._data_fingerprint: dict | None = None
        self._checkpoint_path: Path | None = None
        self.n_samples_seen_ = 0
        for name in ("weights_", "factors_", "extraction_order_", "n_features_in_", "n_restarts_", "n_iter_"):
            self.__dict__.pop(name, None)

    @property
    def is_complete(self) -> bool:
        """Whether all ``k`` components have been found (``k R n`` points read)."""
        return self._state("_dim") is not None and self._component >= self.rank

    @property
    def n_samples_seen_(self) -> int:
        """Points read (used) so far (0 before the first batch)."""
        return self.__dict__.get("_n_samples_seen", 0)

    @n_samples_seen_.setter
    def n_samples_seen_(self, value: int) -> None:
        self._n_samples_seen = value

    @property
    def n_components_found_(self) -> int:
        """Components extracted so far."""
        return self._state("_component", 0)

    @property
    def n_samples_needed_(self) -> int | None:
        """``k R n``: points the whole fit reads (``None`` until ``R`` is known)."""
        n_iter = getattr(self, "n_iter_", self.n_iter)
        return None if n_iter is None else self.rank * n_iter * self.batch_size

    def _initialise(self, dim: int) -> None:
        """Resolve ``L`` and ``R`` for dimension ``d`` and draw the first restarts."""
        check_rank(self.rank, dim)
        self._dim = dim
        self.n_features_in_ = dim
        self.n_restarts_ = self.n_restarts if self.n_restarts is not None else default_n_restarts(self.rank)
        self.n_iter_ = self.n_iter if self.n_iter is not None else default_n_iter(dim, self.target_error)
        if self._state("_rng") is None:
            self._rng = check_random_state(self.random_state)
        self._found_weights = np.zeros(0)
        self._found_factors = np.zeros((dim, 0))
        self._start_component()

    def _start_component(self) -> None:
        """Algorithm 2, step 3: ``L`` restarts uniform on the sphere; step 4: zero accumulators."""
        self._vectors = random_unit_vectors(self._dim, self.n_restarts_, self._rng)
        self._round = 0
        self._clear_accumulators()

    def _clear_accumulators(self) -> None:
        self._images = np.zeros((self._dim, self.n_restarts_))
        self._values = np.zeros(self.n_restarts_)
        self._round_count = 0

    # ------------------------------------------------------------- algorithm
    def _associate(self, batch: np.ndarray | sp.csr_matrix) -> None:
        """Algorithm 2, steps 5-6 (data association) for all restarts on one batch.

        ``P = X U`` (rows x L); ``u~ += X^T P^2`` and ``lambda~ += sum_rows P^3``
        (:func:`~dptensor.tensor.operators.moment_contractions`, summed over the batch's row
        blocks). The factor ``1/n`` is applied once at the end of the round.
        """
        lazy = is_distributed(batch)
        blocks = as_row_blocks(batch, n_jobs=self.n_jobs)
        images, values = blocks.map_sum(
            moment_contractions, self._vectors, 1.0, "both", None, lazy, label="online-batch"
        )
        self._images += images
        self._values += values

    def _finish_round(self) -> None:
        """Algorithm 2, steps 7-8 (deflation, normalisation), and step 10 after round ``R``."""
        n = self.batch_size
        images = self._images  # the round's accumulator, finished in place
        images /= n
        values = self._values / n
        if self._component:
            # Step 7: xi_{j,tau} = v^_j^T u_t^{(tau)} for the current unit vectors u_t.
            xi = self._found_factors.T @ self._vectors
            xi_sq = xi * xi
            images -= self._found_factors @ (self._found_weights[:, None] * xi_sq)
            values -= self._found_weights @ (xi_sq * xi)
        # Step 8: normalise; an exactly zero image leaves its restart where it was.
        norms = np.sqrt(np.einsum("ij,ij->j", images, images))
        zero = norms == 0
        np.divide(images, np.where(zero, 1.0, norms), out=images)
        if zero.any():
            images[:, zero] = self._vectors[:, zero]
        previous, self._vectors = self._vectors, images
        self._round += 1
        if self._round < self.n_iter_:
            # Step 4 for the next round: the old vectors' buffer becomes the zeroed accumulator.
            previous.fill(0.0)
            self._images = previous
            self._values = np.zeros(self.n_restarts_)
            self._round_count = 0
            return
        # Step 10: the restart with the largest lambda~ (estimated at u_{R-1}) gives (lambda^, u_R).
        weight, vector, _ = select_restart(values, self._vectors)
        self._found_weights = np.append(self._found_weights, weight)
        self._found_factors = np.column_stack([self._found_factors, vector])
        self._component += 1
        if self._component < self.rank:
            self._start_component()
        else:
            self._images = np.zeros((self._dim, 0))
            self._values = np.zeros(0)
            self._vectors = np.zeros((self._dim, 0))
            self._round_count = 0
            self._finalise()

    def _finalise(self) -> None:
        order = np.argsort(-self._found_weights, kind="stable")
        self.weights_ = self._found_weights[order]
        self.factors_ = self._found_factors[:, order]
        self.extraction_order_ = order

    def _consume(self, batch: np.ndarray | sp.csr_matrix) -> int:
        """Feed a validated batch, splitting it at round boundaries; return the rows used."""
        rows = batch.shape[0]
        start = 0
        while start < rows and not self.is_complete:
            take = min(rows - start, self.batch_size - self._round_count)
            piece = batch if (start == 0 and take == rows) else batch[start : start + take]
            self._associate(piece)
            start += take
            self._round_count += take
            self.n_samples_seen_ += take
            if self._round_count == self.batch_size:
                self._finish_round()
        return start

    def _validated(self, batch: object, name: str) -> np.ndarray | sp.csr_matrix:
        if is_distributed(batch):
            data = check_lazy_matrix(batch, name)  # the values are checked where they are summed
        else:
            data = check_data_matrix(batch, name)
        if self._dim is None:
            self._initialise(data.shape[1])
        elif data.shape[1] != self._dim:
            raise ValueError(
                f"X has {data.shape[1]} features, but OnlineTensorPower is expecting {self._dim} "
                f"features as input: {name} must have {self._dim} columns (the dimension of the "
                f"earlier data), got shape {data.shape}"
            )
        return data

    # ------------------------------------------------------------ public API
    def __sklearn_tags__(self):  # noqa: ANN204 - sklearn.utils.Tags
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return self.is_complete

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X: np.ndarray | sp.spmatrix, y: object = None) -> OnlineTensorPower:
        """Read the next batch of the stream (Algorithm 2, steps 5-10 as rounds complete).

        Parameters
        ----------
        X : array_like or scipy.sparse matrix of shape (m, d)
            The next ``m >= 1`` points as rows, any ``m``: a batch that straddles a round
            boundary is split so that every round reads exactly ``batch_size`` points.
            Dense and sparse batches may be mixed. (Error messages call it ``X_batch``.)
        y : ignored

        Returns
        -------
        self

        Warns
        -----
        UserWarning
            When the fit is already complete, or completes within this batch, the points
            beyond the ``k R n`` the algorithm reads are not used.
        """
        self._check_parameters()
        if "_dim" not in self.__dict__:
            self._reset()
        data = self._validated(X, "X_batch")
        used = self._consume(data)
        if used < data.shape[0]:
            warnings.warn(
                f"OnlineTensorPower has read all k*R*n = {self.n_samples_needed_} points it needs; "
                f"the last {data.shape[0] - used} points of this batch were not used",
                UserWarning,
                stacklevel=2,
            )
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(
        self,
        X: np.ndarray | sp.spmatrix | BatchStream | Iterable,
        y: object = None,
        *,
        cycle: bool = False,
        resume: bool = False,
        progress: ProgressCallback | None = None,
    ) -> OnlineTensorPower:
        """Run Algorithm 2 on a stream until ``k R n`` points have been read.

        Parameters
        ----------
        X : array_like, scipy.sparse matrix, dask.array.Array, BatchStream or iterable of batches
            A finite data set (rows are points), a reader from
            :mod:`dptensor.streams`, or any iterable yielding batches (dense or
            sparse, of any size). Reading stops as soon as the fit is complete, so infinite
            generators are fine. A ``dask.array`` is read round by round on the active Dask
            scheduler: each round's rows are computed and summed on the workers, never
            gathered on the client. (Error messages call it ``stream``.)
        y : ignored
        cycle : bool, default False
            If the data run out before ``k R n`` points, start again from their beginning.
            Points are then reused across rounds, so the fit decomposes the *empirical*
            moment of the finite data set (with exactly ``n`` points and ``n = batch_size``
            every round is one exact deflated power step of
            :class:`~dptensor.tensor.SampleMoment`, so the result agrees with
            :func:`~dptensor.decomposition.power_method` with ``tol=0`` up to
            ``O(||u_R - u_{R-1}||)``, because Algorithm 2 estimates ``lambda`` at ``u_{R-1}``
            in the same pass) rather than the population
            moment of fresh samples that Theorem 3.1 is about. Needs a re-iterable stream.
            Without it, data that are too short raise a ``ValueError`` saying how many points
            were needed (for an in-memory matrix before any work is done).
        resume : bool, default False
            Keep the current state (e.g. from :meth:`load_checkpoint`) and continue:
            ``X`` is the *whole* stream from its beginning and its first
            :attr:`n_samples_seen_` points are skipped (readers jump to the position; other
            iterables are read through). Without ``resume`` the fit starts afresh. The stream
            must be the one the state was computed on: its fingerprint (:func:`data_fingerprint`:
            source name, shape and a hash of its first bytes, read once and cheaply) is compared
            with the one recorded in the state and a mismatch is a ``ValueError`` naming the
            checkpoint, before anything is read.
        progress : callable, optional
            ``progress(n_samples_seen, n_samples_needed)`` after every batch.

        Returns
        -------
        self
        """
        self._check_parameters()
        stream = X
        if not resume or "_dim" not in self.__dict__:
            self._reset()
        if isinstance(stream, np.ndarray) or sp.issparse(stream):
            stream = self._array_stream(stream)
        elif is_distributed(stream):
            stream = DaskArrayStream(stream, self.batch_size)
        elif not isinstance(stream, Iterable):
            raise TypeError(
                "stream must be an array, a scipy.sparse matrix, a BatchStream or an iterable of "
                f"batches, got {type(stream).__name__}"
            )
        self._check_fingerprint(data_fingerprint(stream), resume)
        if self.is_complete:
            return self
        if cycle and not isinstance(stream, BatchStream) and iter(stream) is stream:
            raise TypeError(
                "cycle=True needs a re-iterable stream (an array, a list of batches or a dptensor "
                "stream reader), not a one-shot iterator or generator"
            )
        if cycle and isinstance(stream, BatchStream) and not getattr(stream, "reiterable", True):
            raise TypeError(
                "cycle=True needs a re-iterable stream; this GeneratorStream wraps a one-shot iterator"
            )
        width = getattr(stream, "n_features", None) if isinstance(stream, BatchStream) else None
        if width is not None:
            # A finite data set of known shape: check it before reading anything.
            if self._dim is None:
                if width == 0 or stream.n_samples == 0:
                    raise ValueError(f"stream is empty ({stream.n_samples} rows, {width} columns)")
                self._initialise(width)
            elif width != self._dim:
                raise ValueError(f"stream must have {self._dim} columns, got {width}")
            if not cycle and stream.n_samples < self.n_samples_needed_:
                raise StreamTooShortError(self._short_message(stream.n_samples, finite=True),
                                          needed=self.n_samples_needed_, available=stream.n_samples)
        for batch in self._batches(stream, cycle):
            data = self._validated(batch, "stream batch")
            remaining = self.n_samples_needed_ - self.n_samples_seen_
            if data.shape[0] > remaining:
                data = data[:remaining]
            self._consume(data)
            if progress is not None:
                progress(self.n_samples_seen_, self.n_samples_needed_)
            if self.is_complete:
                return self
        raise StreamTooShortError(self._short_message(self.n_samples_seen_, finite=False),
                                  needed=self.n_samples_needed_, available=self.n_samples_seen_)

    def _check_fingerprint(self, fingerprint: dict | None, resume: bool) -> None:
        """Record the data's fingerprint on a fresh fit; on a resumed one, refuse other data."""
        recorded = self._state("_data_fingerprint")
        if not resume or self.n_samples_seen_ == 0 or recorded is None:
            if self.n_samples_seen_ == 0 or recorded is None:
                self._data_fingerprint = fingerprint
            return
        if fingerprint is None:
            return  # a plain iterable: nothing to compare it by
        differs = [
            f"{key} {recorded[key]!r} vs {fingerprint[key]!r}"
            for key in ("source", "n_samples", "n_features", "head_sha256")
            if recorded.get(key) is not None and fingerprint.get(key) is not None
            and recorded[key] != fingerprint[key]
        ]
        if differs:
            where = self._state("_checkpoint_path")
            what = f"the checkpoint {where}" if where is not None else "this OnlineTensorPower state"
            raise ValueError(
                f"{what} was computed on other data ({'; '.join(differs)}); resume it with the data it "
                "was written for, or start afresh with another checkpoint file"
            )

    def _array_stream(self, data: np.ndarray | sp.spmatrix) -> ArrayStream:
        if self.n_restarts is not None:
            width = self.n_restarts
        else:
            width = default_n_restarts(self.rank)
        chunk = max(1, min(self.batch_size, _ARRAY_CHUNK_ELEMENTS // max(width, 1)))
        return ArrayStream(data, chunk)

    def _short_message(self, available: int, *, finite: bool) -> str:
        needed = self.n_samples_needed_
        if finite:
            what = f"the data set has {available} points"
        else:
            what = f"the stream ended after {available} points"
        advice = (
            "pass cycle=True to cycle over a finite data set (this fits its empirical moment)"
            if finite
            else "the state so far is kept: continue with partial_fit, or fit(..., resume=True) on a "
            "longer stream, or pass cycle=True to cycle over a finite data set"
        )
        return (
            f"Algorithm 2 reads k*R*n = {self.rank}*{getattr(self, 'n_iter_', self.n_iter)}*{self.batch_size}"
            " "
            f"= {needed} points but {what}; {advice}"
        )

    def _batches(self, stream: BatchStream | Iterable, cycle: bool) -> Iterator[Any]:
        """Yield the stream's batches from point ``n_samples_seen_`` on, cycling if asked."""
        skip = self.n_samples_seen_
        total = stream.n_samples if isinstance(stream, BatchStream) else None
        if isinstance(stream, BatchStream) and (total is not None or not cycle):
            if total is not None and cycle and total > 0:
                skip %= total
            elif total is not None and skip > total:
                return
            source: Iterable = stream.iter_from(skip)
            skip = 0
        else:
            source = iter(stream)
        while True:
            rows = 0
            for batch in source:
                count = batch.shape[0] if hasattr(batch, "shape") and len(batch.shape) == 2 else None
                if count is None:
                    yield batch  # let validation report what is wrong with it
                    continue
                rows += count
                if skip >= count:
                    skip -= count
                    continue
                if skip:
                    batch = sp.csr_matrix(batch)[skip:] if sp.issparse(batch) else batch[skip:]
                    skip = 0
                yield batch
            if not cycle:
                return
            if rows == 0 and (total is None or total == 0):
                raise ValueError("cannot cycle over an empty stream")
            source = iter(stream)

    def to_result(self) -> PowerMethodResult:
        """The fitted decomposition as a :class:`~dptensor.decomposition.PowerMethodResult`.

        ``n_iter`` is ``R`` for every component and ``converged`` is ``False`` (Algorithm 2
        has no convergence test).
        """
        self._check_complete()
        return PowerMethodResult(
            weights=self.weights_.copy(),
            factors=self.factors_.copy(),
            n_iter=np.full(self.rank, self.n_iter_),
            converged=np.zeros(self.rank, dtype=bool),
            extraction_order=self.extraction_order_.copy(),
        )

    def _check_complete(self) -> None:
        if not self.is_complete:
            needed = self.n_samples_needed_
            raise NotFittedError(
                f"OnlineTensorPower is not fitted yet: it has read {self.n_samples_seen_} of the "
                f"{needed if needed is not None else 'k*R*n'} points Algorithm 2 needs"
            )

    # ------------------------------------------------------------ checkpoint
    def save_checkpoint(self, path: str | Path) -> None:
        """Save the complete state to a ``.npz`` file (arrays plus JSON metadata, no pickle).

        Can be called after any batch. The file holds the accumulators, the current restart
        vectors, the components found so far, the counters and the random generator's
        bit-generator state, so :meth:`load_checkpoint` followed by the rest of the stream
        gives bit-identical results to an uninterrupted run (with the same batch
        boundaries). The file is written to a temporary name and renamed, so an interrupted
        save never leaves a corrupt checkpoint.
        """
        write_checkpoint(self, path)

    @classmethod
    def load_checkpoint(cls, path: str | Path) -> OnlineTensorPower:
        """Restore an estimator saved by :meth:`save_checkpoint` (read with ``allow_pickle=False``).

        Continue with :meth:`partial_fit` on the rest of the stream, or with
        ``fit(stream, resume=True)`` on the whole stream; the latter refuses a stream whose
        fingerprint differs from the one saved (checkpoints of version 1 have none).
        """
        return read_checkpoint(cls, path)
