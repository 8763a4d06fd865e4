"""Secret randomness for mechanism noise, kept apart from the public ``random_state``.

Every private function in dptensor draws two kinds of randomness:

* **public** randomness -- random restarts, shuffles, initialisations -- from ``random_state``
  (``None``, an int or a :class:`numpy.random.Generator`), so that equal seeds repeat them; and
* **secret** randomness -- the noise of the mechanism -- from a :class:`NoiseSource` that
  :func:`resolve_noise` builds from the ``noise`` argument. The privacy of the release rests on
  this noise being unknown to the adversary, so it is **never** derived from ``random_state``:
  two runs with ``random_state=0`` share their restarts and differ in their noise.

Backends
--------
``noise=None`` or ``"numpy"`` (default)
    NumPy's PCG64 generator seeded with fresh entropy from the operating system
    (:class:`numpy.random.SeedSequence` with no seed reads 128 bits from :mod:`secrets`) at the
    start of every private call. Fast. Two caveats, stated plainly: PCG64 is a statistical, not a
    cryptographic, generator; and NumPy's floating-point samplers (the ziggurat Gaussian, the
    inverse-CDF Laplace) are not exactly the distributions the proofs assume. Mironov (2012,
    *On significance of the least significant bits for differential privacy*) showed that the
    textbook floating-point Laplace mechanism can leak the input through the low-order bits of
    its output; the same concern applies in principle to every floating-point sampler, NumPy's
    included. The guarantees dptensor states are those of the ideal real-valued mechanisms.
``noise="opendp"``
    The samplers of the OpenDP library (``pip install "dptensor[opendp]"``), which draw from the
    operating system's cryptographically secure generator and sample the Gaussian and Laplace
    mechanisms exactly on a fine grid (floating-point safe), about 10^5 values per second.
    **What it covers, exactly** (``docs/protection.md``, *Noise backends*): OpenDP's measurement is
    applied *to the released values* by :meth:`NoiseSource.add_gaussian` and
    :meth:`NoiseSource.add_laplace`, which every Gaussian and Laplace release calls on the values it
    releases -- except those below. Not covered, under either backend: noise that is transformed
    before it is added (:meth:`NoiseSource.gaussian` / :meth:`~NoiseSource.laplace` draw OpenDP noise
    on zeros; the single-topic model's scalable ``M3`` noise ``E3(W, W, W)`` is such a linear image,
    added in NumPy), the single-topic model's scalable ``M2`` noise (a secret key expanded block by
    block through PCG64), the l2 exponential-norm mechanism (NumPy's normal and Gamma samplers), and
    the secret random choices that are not noise on a value (DP-VI's Poisson subsample and its
    secret Gamma initialisation: :meth:`NoiseSource.random`, :meth:`~NoiseSource.gamma`). Those are
    drawn by PCG64 seeded from fresh OS entropy, as under ``"numpy"``; for them the guarantee is that
    of the ideal real-valued mechanism, as for the NumPy backend.
:func:`insecure_test_noise` (``seed``)
    Reproducible noise from a public seed, **for tests and experiments on synthetic data only**.
    The noise is known to anyone who knows the seed, so a release made with it carries a
    guarantee that does not hold (``epsilon = inf``), and a :class:`PrivacyWarning` is issued.
:func:`scaled_test_noise` (``scale``, ``seed``)
    **Test-only** noise multiplied by ``scale`` (e.g. ``0.1``: an under-noised variant), for
    privacy audits that must show they can catch a mis-calibrated mechanism
    (:func:`dptensor.privacy.audit.audit_estimator`). The guarantee is voided (``holds=False``,
    ``epsilon = inf``; the claimed value is kept as ``nominal_epsilon``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np

from dptensor.privacy.errors import PrivacyWarning

NOISE_BACKENDS: tuple[str, ...] = ("numpy", "opendp")

#: Why a guarantee does not hold when the noise came from :func:`insecure_test_noise`.
INSECURE_NOISE_REASON = (
    "the noise was drawn from insecure_test_noise(seed): anyone who knows the seed knows the noise, "
    "so the release is not private (use only for tests and experiments on synthetic data)"
)


@dataclass(frozen=True)
class InsecureTestNoise:
    """Reproducible, **not private** noise for tests: see :func:`insecure_test_noise`."""

    seed: int

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int | np.integer) or self.seed < 0:
            raise ValueError(f"insecure_test_noise needs a non-negative integer seed, got {self.seed!r}")


def insecure_test_noise(seed: int) -> InsecureTestNoise:
    """Noise reproducible from ``seed`` -- for tests only; the guarantee then does not hold.

    Pass it as ``noise=insecure_test_noise(0)`` to any private function or estimator to make its
    noise repeat exactly (every call restarts the stream from ``seed``). The result's guarantee
    reports ``holds=False`` and ``epsilon=inf``, and a :class:`PrivacyWarning` is issued.
    """
    return InsecureTestNoise(int(seed))


NoiseLike = None | Literal["numpy", "opendp"] | InsecureTestNoise


class NoiseSource:
    """A live sampler of mechanism noise (build one with :func:`resolve_noise`).

    Attributes
    ----------
    backend : {"numpy", "opendp"}
    secure : bool
        ``False`` only for :func:`insecure_test_noise`.
    """

    def __init__(self, backend: str, generator: np.random.Generator, *, secure: bool) -> None:
        self.backend = backend
        self.secure = secure
        self._rng = generator

    def __repr__(self) -> str:
        return f"NoiseSource(backend={self.backend!r}, secure={self.secure})"

    # -- copies ------------------------------------------------------------------------------
    # An estimator holding a source is copied by scikit-learn's ``clone`` (GridSearchCV,
    # cross_val_score) and by ``copy.deepcopy``: a copy of the generator would draw the very noise the
    # original draws, and two releases with the same noise reveal their difference exactly. Every
    # copy in this process is therefore the source itself (one stream); a pickled secure source
    # (joblib's worker processes) is unpickled with a generator of fresh OS entropy, never the
    # original's state.
    def __copy__(self) -> NoiseSource:
        return self

    def __deepcopy__(self, memo: dict) -> NoiseSource:
        return self

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if self.secure:
            del state["_rng"]  # the secret generator's state never leaves the process
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if "_rng" not in state:
            self._rng = _fresh_generator()

    # -- Gaussian ----------------------------------------------------------------------------
    def add_gaussian(self, values: np.ndarray, sigma: float | np.ndarray) -> np.ndarray:
        """``values + N(0, sigma^2)`` elementwise (``sigma`` a number or broadcastable array)."""
        values = np.asarray(values, dtype=np.float64)
        sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), values.shape)
        if self.backend == "opendp":
            return _opendp_add(values, sigma, "gaussian")
        return values + sigma * self._rng.standard_normal(values.shape)

    def gaussian(self, shape: int | tuple[int, ...], sigma: float | np.ndarray = 1.0) -> np.ndarray:
        """``N(0, sigma^2)`` noise of the given shape (``add_gaussian`` on zeros).

        Whoever adds the result to a value does so in NumPy: under ``"opendp"`` only the draw is
        OpenDP's. To release ``values + noise`` through OpenDP's measurement, call :meth:`add_gaussian`.
        """
        return self.add_gaussian(np.zeros(shape), sigma)

    # -- Laplace -----------------------------------------------------------------------------
    def add_laplace(self, values: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
        """``values + Laplace(0, scale)`` elementwise."""
        values = np.asarray(values, dtype=np.float64)
        scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), values.shape)
        if self.backend == "opendp":
            return _opendp_add(values, scale, "laplace")
        return values + self._rng.laplace(0.0, 1.0, size=values.shape) * scale

    def laplace(self, shape: int | tuple[int, ...], scale: float | np.ndarray = 1.0) -> np.ndarray:
        """``Laplace(0, scale)`` noise of the given shape (``add_laplace`` on zeros; see :meth:`gaussian`)."""
        return self.add_laplace(np.zeros(shape), scale)

    # -- raw draws for samplers OpenDP does not offer ----------------------------------------
    def standard_normal(self, shape: int | tuple[int, ...]) -> np.ndarray:
        """Standard normal draws from the secret generator (NumPy's sampler under both backends)."""
        return self._rng.standard_normal(shape)

    def gamma(self, shape: float, scale: float, size: int | tuple[int, ...]) -> np.ndarray:
        """Gamma draws from the secret generator (NumPy's sampler under both backends)."""
        return self._rng.gamma(shape, scale, size=size)

    def random(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Uniform ``[0, 1)`` draws, e.g. for secret (Poisson) subsampling (PCG64 under both backends)."""
        return self._rng.random(size)


class ScaledTestNoise(NoiseSource):
    """A :class:`NoiseSource` whose every draw is multiplied by ``scale`` -- **test-only**, not private.

    Built by :func:`scaled_test_noise`. ``secure`` is ``False``, so a release made with it reports
    ``holds=False`` (the claimed epsilon stays as ``nominal_epsilon``). Uniform draws
    (:meth:`random`, used for subsampling) are not scaled.
    """

    def __init__(self, scale: float, generator: np.random.Generator) -> None:
        super().__init__("numpy", generator, secure=False)
        self.scale = float(scale)
        #: Why a release made with this source is not private (its guarantee's ``reason``).
        self.insecure_reason = (
            f"the noise came from scaled_test_noise({self.scale:g}): every draw is multiplied by "
            f"{self.scale:g}, a test-only variant whose calibration is not the claimed one"
        )

    def __repr__(self) -> str:
        return f"ScaledTestNoise(scale={self.scale:g})"

    def add_gaussian(self, values: np.ndarray, sigma: float | np.ndarray) -> np.ndarray:
        """``values + N(0, (scale sigma)^2)``."""
        return super().add_gaussian(values, np.asarray(sigma, dtype=np.float64) * self.scale)

    def add_laplace(self, values: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
        """``values + Laplace(0, self.scale * scale)``."""
        return super().add_laplace(values, np.asarray(scale, dtype=np.float64) * self.scale)

    def standard_normal(self, shape: int | tuple[int, ...]) -> np.ndarray:
        """``scale`` times standard normal draws."""
        return self.scale * super().standard_normal(shape)

    def gamma(self, shape: float, scale: float, size: int | tuple[int, ...]) -> np.ndarray:
        """Gamma draws with their scale multiplied by ``self.scale`` (norms of K-norm noise)."""
        return super().gamma(shape, scale * self.scale, size)


def scaled_test_noise(scale: float, seed: int | None = None) -> ScaledTestNoise:
    """Mechanism noise multiplied by ``scale`` -- **for privacy audits' tests only**.

    ``scaled_test_noise(0.1)`` divides every noise draw by 10: the under-noised variant an audit
    must catch (:func:`dptensor.privacy.audit.audit_estimator`). ``scaled_test_noise(1.0, seed)``
    is correctly scaled but reproducible noise, for deterministic tests of an honest
    configuration. Pass the *same* object to every fit of an audit: its stream continues from
    fit to fit (copies in this process are the object itself; but a test source is pickled with
    its state, so fits in worker processes -- ``n_jobs`` > 1 with processes -- would replay one
    stream: run an audit's fits in one process). Either way the release is not private: its
    guarantee reports ``holds=False`` (the claim is kept as ``nominal_epsilon``).

    Parameters
    ----------
    scale : float
        Positive multiplier of every noise draw.
    seed : int, optional
        Public seed of the stream (``None``: fresh OS entropy).
    """
    if isinstance(scale, bool) or not isinstance(scale, int | float | np.number) or not scale > 0 \
            or not np.isfinite(scale):
        raise ValueError(f"scaled_test_noise needs a positive finite scale, got {scale!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0):
        raise ValueError(f"scaled_test_noise needs a non-negative integer seed or None, got {seed!r}")
    generator = _fresh_generator() if seed is None else np.random.default_rng(int(seed))
    return ScaledTestNoise(float(scale), generator)


def resolve_noise(noise: NoiseLike | NoiseSource) -> NoiseSource:
    """Build the :class:`NoiseSource` a private call draws its noise from.

    Parameters
    ----------
    noise : None, "numpy", "opendp", InsecureTestNoise or NoiseSource
        ``None`` and ``"numpy"``: NumPy with fresh OS entropy; ``"opendp"``: OpenDP's samplers;
        :func:`insecure_test_noise`: reproducible test noise (with a :class:`PrivacyWarning`); a
        :class:`NoiseSource` is used as it is (to share one source between calls).

    Raises
    ------
    ValueError
        Unknown backend. ``ImportError`` (with the install command) if ``"opendp"`` is asked for
        and OpenDP is not installed.
    """
    if isinstance(noise, NoiseSource):
        return noise
    if isinstance(noise, InsecureTestNoise):
        warnings.warn(
            "insecure_test_noise: the privacy noise is reproducible from a public seed, so this "
            "release is NOT differentially private (its guarantee reports holds=False)",
            PrivacyWarning,
            stacklevel=3,
        )
        return NoiseSource("numpy", np.random.default_rng(noise.seed), secure=False)
    if noise is None or noise == "numpy":
        return NoiseSource("numpy", _fresh_generator(), secure=True)
    if noise == "opendp":
        _opendp()  # fail early, before any work, if it is missing
        return NoiseSource("opendp", _fresh_generator(), secure=True)
    raise ValueError(
        f"noise must be None, 'numpy', 'opendp' or insecure_test_noise(seed), got {noise!r}"
        + (" (integer seeds are not accepted: they would make the noise public)"
           if isinstance(noise, int | np.integer) else "")
    )


def check_noise(noise: object) -> None:
    """Validate a ``noise`` argument without drawing anything (for estimators' parameter checks)."""
    if noise is None or noise in NOISE_BACKENDS or isinstance(noise, InsecureTestNoise | NoiseSource):
        return
    resolve_noise(noise)  # raises with the message above


def _fresh_generator() -> np.random.Generator:
    # SeedSequence() without entropy draws 128 bits from the OS (secrets.randbits).
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence()))


def _opendp():
    try:
        import opendp.prelude as dp
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "noise='opendp' needs the OpenDP library: pip install \"dptensor[opendp]\""
        ) from exc
    return dp


def _opendp_add(values: np.ndarray, scales: np.ndarray, kind: str) -> np.ndarray:
    """Add OpenDP-sampled noise, one OpenDP measurement per distinct scale."""
    dp = _opendp()
    # OpenDP lists its vector Gaussian and Laplace measurements under its "contrib" features;
    # enable them for this call only and restore the caller's setting afterwards.
    import opendp.mod

    was_enabled = "contrib" in opendp.mod.GLOBAL_FEATURES
    dp.enable_features("contrib")
    try:
        return _opendp_sample(dp, values, scales, kind)
    finally:
        if not was_enabled:
            dp.disable_features("contrib")


def _opendp_sample(dp, values: np.ndarray, scales: np.ndarray, kind: str) -> np.ndarray:
    out = values.copy()
    flat_values, flat_scales, flat_out = values.ravel(), scales.ravel(), out.ravel()
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    for scale in np.unique(flat_scales):
        where = np.flatnonzero(flat_scales == scale)
        if scale == 0:
            continue
        if kind == "gaussian":
            measurement = dp.m.make_gaussian(domain, dp.l2_distance(T=float), scale=float(scale))
        else:
            measurement = dp.m.make_laplace(domain, dp.l1_distance(T=float), scale=float(scale))
        flat_out[where] = measurement(flat_values[where].tolist())
    return flat_out.reshape(values.shape)
