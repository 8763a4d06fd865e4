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


def test_the_top_level_names_are_the_lazy_table_and_import_dptensor_stays_light():
    """``import dptensor`` loads no estimator (PEP 562): scikit-learn, SciPy, Dask, numba wait for a use."""
    assert set(dptensor.__all__) == set(dptensor._EXPORTS) | {"__version__"}
    code = ("import sys, dptensor; heavy = [m for m in ('sklearn', 'scipy', 'dask', 'numba', 'matplotlib', "
            "'dp_accounting', 'dptensor.models') if m in sys.modules]; print(heavy, dptensor.__version__)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("[] "), result.stdout
    code = "import dptensor; print(dptensor.nothing_here)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "module 'dptensor' has no attribute 'nothing_here'" in result.stderr


def test_version_answers_before_the_library_is_loaded():
    """``dptensor --version`` prints the version without importing a subcommand or scikit-learn."""
    code = ("import sys; from dptensor.cli import main; code = main(['--version']); "
            "print(code, [m for m in ('sklearn', 'scipy', 'dptensor.cli.lda', 'dptensor.models') "
            "if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"dptensor {dptensor.__version__}", "0 []"]


def test_no_alias_modules_remain():
    """``dptensor.models.private_spectral_lda`` and the other pre-folder paths are gone (issue 52)."""
    import importlib

    import pytest

    for name in ("spectral_lda", "private_spectral_lda", "dp_vi_lda", "single_topic"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"dptensor.models.{name}")


def test_subpackages_are_reachable_as_attributes_after_import_dptensor():
    """``import dptensor; dptensor.privacy.compose`` works as it did with an eager ``__init__``."""
    code = ("import dptensor, dptensor.cli; print(dptensor.privacy.compose.__name__, "
            "dptensor.models.PrivateRecommender.__name__, dptensor.cli.lda.__name__)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["compose", "PrivateRecommender", "dptensor.cli.lda"]
