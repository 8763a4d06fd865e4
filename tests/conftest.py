"""Shared test set-up: dptensor's state directory is a fresh temporary folder in every test.

Layout: the folders of ``tests/`` mirror ``src/dptensor/`` (``tests/privacy/ledger/`` tests
``dptensor.privacy.ledger``, ``tests/models/topics/`` the topic models, ``tests/cli/`` the
commands, ...); ``tests/docs/`` runs the documentation's examples, ``tests/benchmarks/`` the
benchmarks' own logic, and the files left at the top test the top-level modules
(``evaluation``, ``streams``) or the package as a whole (``test_first_hour.py``,
``test_numerical_paths.py``, ``test_import_layers.py``, ``test_top_level_imports.py``).
Helpers that several files use are in ``tests/_helpers.py`` and ``tests/_tolerances.py``,
imported by name (``from _helpers import random_ratings``): this file puts ``tests/`` on
``sys.path``. Long statistical checks are marked ``slow`` and run by ``pytest -m slow``
(CI runs both sets).

Budget ledgers remember the latest state seen of each ledger in a per-user state directory
(``$DPTENSOR_STATE_DIR``); tests must never write to the real home directory, and one test's
ledgers must not be remembered by another's.
"""

from __future__ import annotations

import os

import pytest

#: ``pytest -q`` runs one xdist worker per core; each worker's BLAS then gets one thread, or two
#: workers on two cores would each start two BLAS threads and fight over the cores (the suite ran
#: about 185 s instead of 165 s). A caller who sets the BLAS threads (CI's two BLAS passes) keeps them.
_BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
if os.environ.get("PYTEST_XDIST_WORKER") and not any(name in os.environ for name in _BLAS_VARIABLES):
    from threadpoolctl import threadpool_limits

    for _name in _BLAS_VARIABLES:
        os.environ[_name] = "1"  # the CLI subprocesses the tests start
    _BLAS_LIMIT = threadpool_limits(1)  # the libraries this worker has loaded already


@pytest.fixture(autouse=True)
def _dptensor_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPTENSOR_STATE_DIR", str(tmp_path_factory.mktemp("dptensor-state")))
