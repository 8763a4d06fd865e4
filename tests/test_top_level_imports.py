"""The estimators users fit are importable from the package itself (issue 34)."""

from __future__ import annotations

import subprocess
import sys

import dptensor
from dptensor import models

ESTIMATORS = [
    "DPVariationalLDA",
    "PrivateCountVectorizer",
    "PrivateRecommender",
    "PrivateSpectralLDA",
    "Recommender",
    "SpectralLDA",
    "TensorCompletion",
]


def test_estimators_import_from_the_top_level():
    from dptensor import (  # noqa: F401
        DPVariationalLDA,
        PrivateCountVectorizer,
        PrivateSpectralLDA,
        SpectralLDA,
        TensorCompletion,
    )

    for name in ESTIMATORS:
        assert name in dptensor.__all__, name
        # the same class as in dptensor.models, not a copy
        assert getattr(dptensor, name) is getattr(models, name), name


def test_every_name_in_all_exists():
    for name in dptensor.__all__:
        assert hasattr(dptensor, name), name


def test_top_level_import_in_a_fresh_interpreter():
    """No import cycle: a fresh process imports the estimators from the package first."""
    code = (
        "from dptensor import PrivateSpectralLDA, PrivateCountVectorizer, DPVariationalLDA, "
        "TensorCompletion, SpectralLDA; print(PrivateSpectralLDA.__module__)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "dptensor.models.topics.private_spectral"
