"""Shared test set-up: dptensor's state directory is a fresh temporary folder in every test.

Budget ledgers remember the latest state seen of each ledger in a per-user state directory
(``$DPTENSOR_STATE_DIR``); tests must never write to the real home directory, and one test's
ledgers must not be remembered by another's.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _dptensor_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPTENSOR_STATE_DIR", str(tmp_path_factory.mktemp("dptensor-state")))
