"""The plan of PrivateSpectralLDA is one pure function, shared by ``fit`` and ``dptensor lda plan``."""

import ast
import dataclasses
import warnings
from pathlib import Path

import pytest

import dptensor.models.topics._private_plan as private_plan
import dptensor.models.topics.private_spectral as private_spectral
from dptensor.cli import main
from dptensor.datasets.lda import make_lda_corpus
from dptensor.models import PrivateSpectralLDA
from dptensor.models.topics.plan import SpectralLDAPlan, plan_private_lda, plan_private_spectral_lda

TOPICS = Path(private_spectral.__file__).parent


def _corpus(n_documents=400, n_words=30):
    return make_lda_corpus(n_documents, n_words, 3, alpha=0.3, doc_length=20, random_state=0).counts


def _recording(monkeypatch, module):
    """Wrap ``module.plan_private_spectral_lda`` so that every plan it returns is kept."""
    plans, real = [], module.plan_private_spectral_lda

    def recording(*args, **kwargs):
        plans.append(real(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(module, "plan_private_spectral_lda", recording)
    return plans


@pytest.mark.parametrize(
    "params",
    [{}, {"topic_recovery": "tensor"}, {"clip": None}, {"clip": None, "private_whitening": "noisy-power"}],
    ids=["default", "tensor", "unclipped", "unclipped-noisy-power"],
)
def test_the_fit_uses_the_plan_the_function_gives(params, monkeypatch):
    X = _corpus()
    plans = _recording(monkeypatch, private_spectral)
    model = PrivateSpectralLDA(3, 0.3, epsilon=2.0, delta=1e-6, random_state=0, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # UtilityWarning on a small corpus
        model.fit(X)
    assert len(plans) == 1  # resolved once
    used = plans[0]
    planned = plan_private_spectral_lda(model.get_params(), *X.shape)
    assert isinstance(planned, SpectralLDAPlan) and used == planned
    # what the fit reports is the plan's: the same noise multipliers, DpEvent and guarantee
    assert model.guarantee_ == planned.guarantee
    assert model.guarantee_.dp_event == planned.dp_event is not None
    assert model.guarantee_.details["noise_multipliers"] == dict(planned.noise_multipliers)
    assert model.budget_split_ == dict(planned.shares)
    assert model.topic_recovery_ == planned.topic_recovery
    assert model.whitening_words_ == planned.whitening_words
    assert model.planned_guarantee(*X.shape) == planned.guarantee
    assert model.check_configuration(*X.shape) == (planned.clipping is not None)


def test_the_planner_uses_the_fits_arithmetic(monkeypatch):
    # dptensor lda plan predicts from the noise multipliers of the very plan a fit with the same options
    # makes: the multipliers it reports are those the fit charges for
    X = _corpus(3000)
    model = PrivateSpectralLDA(3, 0.3, epsilon=2.0, delta=1e-6, whitening_words=None, topic_recovery="tensor",
                               random_state=0)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X)
    prediction = plan_private_lda(3000, 30, 3, 0.3, 2.0, 1e-6, whitening_words=None)
    assert prediction.noise_multipliers == model.guarantee_.details["noise_multipliers"]
    # ... and the command calls the same function
    plans = _recording(monkeypatch, private_plan)
    assert main(["lda", "plan", "-n", "3000", "-V", "30", "-k", "3", "--alpha0", "0.3", "--epsilon", "2",
                 "--delta", "1e-6"]) == 0  # fmt: skip
    assert plans and all(isinstance(plan, SpectralLDAPlan) for plan in plans)
    assert any(dict(plan.noise_multipliers) == prediction.noise_multipliers for plan in plans)


def test_the_plan_is_pure_data():
    public = _corpus(50)
    params = PrivateSpectralLDA(3, 0.3, epsilon=1.0, delta=1e-6, public_corpus=public).get_params()
    plan = plan_private_spectral_lda(params, 400, 30)
    assert plan == plan_private_spectral_lda(params, 400, 30)  # a function of its inputs only
    assert plan.public_whitening and set(plan.shares) == {"m1", "e3"}
    # nothing in it is data: numbers, strings, the guarantee
    assert not any(value is public for value in vars(plan).values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.topic_recovery = "nmf"
    with pytest.raises(TypeError):
        plan.noise_multipliers["m1"] = 0.0
    # the parameters the plan does not read change nothing; those it reads do
    assert plan_private_spectral_lda({**params, "n_restarts": 7, "verbose": True}, 400, 30) == plan
    assert plan_private_spectral_lda({**params, "epsilon": 2.0}, 400, 30) != plan


def test_the_plan_refuses_what_the_fit_refuses():
    params = PrivateSpectralLDA(3, 0.3, epsilon=1.0, delta=1e-6).get_params()
    with pytest.raises(ValueError, match="at least 3"):
        plan_private_spectral_lda(params, 2, 30)
    with pytest.raises(ValueError, match="exceeds the vocabulary size"):
        plan_private_spectral_lda(params, 400, 2)
    with pytest.raises(ValueError, match="topic_recovery='nmf' applies"):
        plan_private_spectral_lda({**params, "clip": None, "topic_recovery": "nmf"}, 400, 30)
    with pytest.raises(ValueError, match="budget_split"):
        plan_private_spectral_lda({**params, "budget_split": {"m1": 1.0}}, 400, 30)


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_import_circle_between_the_estimator_and_the_planner():
    estimator, planner = "dptensor.models.topics.private_spectral", "dptensor.models.topics.plan"
    assert planner not in _imported_modules(TOPICS / "private_spectral.py")
    assert estimator not in _imported_modules(TOPICS / "plan.py")
    # the plan's own modules import neither
    for name in ("_private_plan.py", "_private_guarantee.py", "_utility_plan.py", "_paper_variants.py",
                 "_releases.py", "_configuration1.py", "_plan_noise.py"):  # fmt: skip
        imported = _imported_modules(TOPICS / name)
        assert estimator not in imported and planner not in imported, name
