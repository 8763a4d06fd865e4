"""Helpers shared by test files in several folders: import them with ``from _helpers import ...``.

``tests/`` is on ``sys.path`` because ``tests/conftest.py`` is imported from there (pytest's default
``prepend`` import mode), like ``tests/_tolerances.py``. A helper belongs here once two test files
need the same one; one file's own helpers stay in that file.
"""

from __future__ import annotations

import importlib.util
import math
import os
import pickle
import sys
from collections.abc import Callable
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from dptensor.privacy import PrivacyGuarantee, gaussian_epsilon

# ----------------------------------------------------------------------------- ratings (completion)


def random_ratings(shape=(6, 5, 3), density=0.6, seed=0):
    """``(indices, values, shape)``: each cell observed with probability ``density``, ratings 1..5."""
    rng = np.random.default_rng(seed)
    indices = np.argwhere(rng.random(shape) < density)
    values = rng.integers(1, 6, len(indices)).astype(float)
    return indices, values, shape


def write_ratings_csv(path: Path, indices: np.ndarray, values: np.ndarray) -> None:
    """One ``i,j,k,value`` line per entry (no header), the values written exactly (``repr``)."""
    path.write_text("".join(f"{i},{j},{k},{v!r}\n" for (i, j, k), v in zip(indices.tolist(), values.tolist(),
                                                                            strict=True)))  # fmt: skip


# ----------------------------------------------------------------------------- topics


def topic_l1_error(true: np.ndarray, est: np.ndarray, *, return_matching: bool = False):
    """Mean l1 distance between matched rows of ``true`` and ``est`` (the best one-to-one matching).

    With ``return_matching``, ``(error, cols)``: row ``i`` of ``true`` is matched to row ``cols[i]``.
    """
    cost = np.abs(true[:, None, :] - est[None, :, :]).sum(axis=2)
    rows, cols = linear_sum_assignment(cost)
    error = cost[rows, cols].mean()
    return (error, cols) if return_matching else error


# ----------------------------------------------------------------------------- privacy guarantees

DELTA = 1e-5


def event_guarantee(
    event: dp_accounting.DpEvent,
    *,
    epsilon: float = 1.0,
    delta: float = DELTA,
    neighbouring: str = "entry",
    mechanism: str = "test",
    noise_multiplier: float = math.nan,
    **extra: object,
) -> PrivacyGuarantee:
    """A guarantee carrying ``event`` (its epsilon, delta are what the release states on its own)."""
    return PrivacyGuarantee(
        epsilon=epsilon,
        delta=delta,
        neighbouring=neighbouring,
        accountant="test",
        n_releases=1,
        mechanism=mechanism,
        noise_multiplier=noise_multiplier,
        epsilon_exact=epsilon,
        dp_event=event,
        **extra,
    )


def gaussian_guarantee(
    sigma: float, *, delta: float = DELTA, neighbouring: str = "entry"
) -> PrivacyGuarantee:
    """One Gaussian release with noise multiplier ``sigma``, stated at ``delta``."""
    return event_guarantee(
        dp_accounting.GaussianDpEvent(sigma),
        epsilon=gaussian_epsilon(sigma, delta),
        delta=delta,
        neighbouring=neighbouring,
        mechanism="gaussian",
        noise_multiplier=sigma,
    )


# ----------------------------------------------------------------------------- processes


def in_child(function: Callable[[], object], timeout: float = 60.0) -> object:
    """Run ``function`` in a forked child and return its (pickled) result or exception."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            try:
                result: object = ("ok", function())
            except BaseException as exc:  # noqa: BLE001 - sent to the parent
                result = ("raised", exc)
            with os.fdopen(write, "wb") as handle:
                pickle.dump(result, handle)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as handle:
        data = handle.read()
    os.waitpid(pid, 0)
    status, value = pickle.loads(data)
    return value if status == "ok" else ("raised", value)


#: The benchmark scripts (``benchmarks/`` is not a package).
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str):
    """Import ``benchmarks/<name>.py`` as a module (its sibling scripts importable while it loads)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def assert_caught_by(result, variant: str, release: str, releases: set[str]) -> None:
    """An audit with one score per release: honest, not refuted; otherwise refuted by ``release``'s own
    score (the bound reported), every other release's score below the claim."""
    per_release = {name: r["epsilon_lower"] for name, r in result.details["per_release"].items()}
    assert set(per_release) == releases and result.epsilon_claimed == 1.0
    assert result.details["release_confidence"] == pytest.approx(1 - 0.05 / len(releases))
    if variant == "honest":
        assert result.epsilon_lower <= result.epsilon_claimed
        return
    assert result.epsilon_lower > result.epsilon_claimed and result.details["release"] == release
    assert per_release[release] == result.epsilon_lower and f"the {release} release's" in result.describe()
    assert all(bound <= result.epsilon_claimed for name, bound in per_release.items() if name != release)
