"""DPVariationalLDA's options (issue 52): few constructor parameters, DPVIOptions, the research accountant."""

from __future__ import annotations

import inspect
import json
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

from dptensor import DPVariationalLDA
from dptensor.datasets.lda import make_lda_corpus
from dptensor.models._options import build_estimator, flat_params
from dptensor.models.topics.dp_vi_options import DPVIOptions
from dptensor.models.topics.persistence import load_model, save_model
from dptensor.privacy import UnprovenPrivacyError, enable_features, insecure_test_noise
from dptensor.research import PaperDPVariationalLDA

OPTION_NAMES = {"batch_size", "n_passes", "clip", "max_doc_length", "learning_offset", "learning_decay",
                "max_doc_update_iter", "mean_change_tol", "init", "init_share"}  # fmt: skip


def _parameters(cls: type) -> set[str]:
    return {name for name in inspect.signature(cls.__init__).parameters if name != "self"}


@pytest.fixture(scope="module")
def counts():
    return make_lda_corpus(200, 20, 3, alpha=0.3, doc_length=20, random_state=0).counts


class _Corpus:
    vocabulary = None
    source = "synthetic"
    token_pattern = None


def test_the_constructor_holds_what_a_user_chooses():
    names = _parameters(DPVariationalLDA)
    assert len(names) <= 15 and "accountant" not in names and "options" in names
    assert not names & OPTION_NAMES and _parameters(DPVIOptions) == OPTION_NAMES
    assert DPVariationalLDA._options_class is DPVIOptions
    assert set(DPVIOptions._parameter_constraints) == OPTION_NAMES  # declared once, there
    assert not set(DPVariationalLDA._parameter_constraints) & OPTION_NAMES
    with pytest.raises(TypeError, match="accountant"):
        DPVariationalLDA(3, accountant="paper")  # the paper's accountant is the research wing's
    assert _parameters(PaperDPVariationalLDA) == names | {"accountant"}


def test_options_keep_the_old_defaults():
    defaults = DPVIOptions().get_params()
    assert defaults == {"batch_size": None, "n_passes": 10, "clip": None, "max_doc_length": None,
                        "learning_offset": 10.0, "learning_decay": 0.7, "max_doc_update_iter": 100,
                        "mean_change_tol": 1e-3, "init": "random", "init_share": 0.3}  # fmt: skip
    def resolved(model):
        s = model.settings(1000)
        return s.batch_size, s.clip, s.max_doc_length, s.doc_topic_prior, s.accountant

    assert resolved(DPVariationalLDA(3)) == (128, None, None, 1 / 3, "exact")
    assert resolved(DPVariationalLDA(3, epsilon=1.0, delta=1e-6)) == (1000, 2.0, 500, 0.5, "exact")
    assert resolved(PaperDPVariationalLDA(3, epsilon=1.0, delta=1e-6)) == (128, 50.0, 500, 1 / 3, "paper")


def test_options_are_nested_parameters(counts):
    model = DPVariationalLDA(3, random_state=0, options=DPVIOptions(n_passes=1, batch_size=50))
    params = model.get_params()
    assert params["options__n_passes"] == 1 and params["options__batch_size"] == 50
    model.set_params(options__clip=3.0)
    assert model.options.clip == 3.0 and clone(model).options is not model.options
    assert flat_params(clone(model)) == flat_params(model)
    search = GridSearchCV(model, {"options__learning_decay": [0.6, 0.9]}, cv=2).fit(counts)
    assert search.best_params_["options__learning_decay"] in (0.6, 0.9)
    assert search.best_estimator_.options.learning_decay == search.best_params_["options__learning_decay"]


def test_options_are_checked_when_fitting(counts):
    with pytest.raises(ValueError, match="clip"):
        DPVariationalLDA(3, options=DPVIOptions(clip=-1.0)).fit(counts)
    with pytest.raises(ValueError, match="options"):
        DPVariationalLDA(3, options={"clip": 1.0}).fit(counts)
    with pytest.raises(ValueError, match="init"):
        model = DPVariationalLDA(3, epsilon=1.0, delta=1e-6, options=DPVIOptions(init="spectral"))
        model.check_configuration(200)


def test_build_estimator_routes_flat_settings(counts):
    flat = dict(n_components=3, n_passes=2, batch_size=40, clip=1.5, epsilon=1.0, delta=1e-6, random_state=0)
    model = build_estimator(DPVariationalLDA, **flat)
    assert model.options.get_params()["clip"] == 1.5 and model.epsilon == 1.0
    assert {k: v for k, v in flat_params(model).items() if k in flat} == flat
    direct = DPVariationalLDA(3, epsilon=1.0, delta=1e-6, random_state=0,
                              options=DPVIOptions(n_passes=2, batch_size=40, clip=1.5))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = model.set_params(noise=insecure_test_noise(1)).fit(counts)
        b = direct.set_params(noise=insecure_test_noise(1)).fit(counts)
    np.testing.assert_array_equal(a.components_, b.components_)
    with pytest.raises(TypeError, match="accountant"):
        build_estimator(DPVariationalLDA, n_components=3, accountant="paper")


def _paper_fit(counts, **kw):
    model = PaperDPVariationalLDA(3, epsilon=1.0, delta=1e-6, random_state=0, noise=insecure_test_noise(5),
                                  options=DPVIOptions(n_passes=2, batch_size=40), **kw)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(counts)


def test_research_class_refuses_the_paper_accountant_without_the_opt_in(counts):
    for check in ("check_configuration", "planned_guarantee"):
        with pytest.raises(UnprovenPrivacyError, match="accountant='paper'"):
            getattr(PaperDPVariationalLDA(3, epsilon=1.0, delta=1e-6), check)(200)
    with pytest.raises(UnprovenPrivacyError, match="accountant='paper'"):
        _paper_fit(counts)


def test_research_class_reproduces_the_paper_accountant(counts):
    """The fit of ``DPVariationalLDA(accountant="paper")`` before issue 52 (numbers from that code)."""
    with enable_features("unproven"):
        model = _paper_fit(counts)
    g = model.guarantee_
    assert not g.holds and g.claim == "paper" and g.noise_multiplier == 3.447998046875
    assert g.details["epsilon_valid"] == pytest.approx(2.5637812322360563, rel=1e-12)
    assert (model.noise_std_, model.clip_, model.doc_topic_prior_, model.n_batch_iter_) == (
        4.30999755859375, 50.0, 1 / 3, 11)
    assert model.components_.sum() == pytest.approx(20831.845641938202, rel=1e-9)
    assert model.components_[0, 0] == pytest.approx(605.8485309351695, rel=1e-9)


def test_research_class_with_the_exact_accountant_is_dp_vi(counts):
    exact = _paper_fit(counts, accountant="exact")
    plain = DPVariationalLDA(3, epsilon=1.0, delta=1e-6, random_state=0, noise=insecure_test_noise(5),
                             options=DPVIOptions(n_passes=2, batch_size=40))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain.fit(counts)
    np.testing.assert_array_equal(exact.components_, plain.components_)
    assert exact.guarantee_.to_dict() == plain.guarantee_.to_dict() and exact.guarantee_.claim != "paper"
    with pytest.raises(ValueError, match="accountant"):
        PaperDPVariationalLDA(3, accountant="moments").fit(counts)


def test_model_files_name_the_settings_flatly(counts, tmp_path):
    model = DPVariationalLDA(3, random_state=0, options=DPVIOptions(n_passes=1, max_doc_length=15))
    model.fit(counts)
    save_model(tmp_path / "m.json", model, _Corpus())
    meta = json.loads((tmp_path / "m.json").read_text())
    assert "options" not in meta["params"] and meta["params"]["max_doc_length"] == 15
    loaded, _ = load_model(tmp_path / "m.json")
    assert loaded.options.max_doc_length == 15
    np.testing.assert_array_equal(loaded.transform(counts[:5]), model.transform(counts[:5]))
    with enable_features("unproven"):
        paper = _paper_fit(counts)
    save_model(tmp_path / "p.npz", paper, _Corpus())
    loaded, _ = load_model(tmp_path / "p.npz")  # a DPVariationalLDA for inference, with the paper's prior
    assert type(loaded) is DPVariationalLDA and loaded.doc_topic_prior_ == pytest.approx(1 / 3)
    np.testing.assert_array_equal(loaded.transform(counts[:5]), paper.transform(counts[:5]))


def test_a_model_file_written_before_the_options_loads(counts, tmp_path):
    """The file of ``DPVariationalLDA(3, accountant=..., batch_size=40, n_passes=2)`` before issue 52."""
    lam = np.random.default_rng(0).gamma(5.0, 1.0, (3, 20))
    for accountant, prior in (("paper", 1 / 3), ("exact", 0.5)):
        params = {"accountant": accountant, "batch_size": 40, "clip": None, "delta": 1e-06,
                  "doc_topic_prior": None, "epsilon": 1.0, "init": "random", "init_share": 0.3,
                  "learning_decay": 0.7, "learning_offset": 10.0, "max_doc_length": None,
                  "max_doc_update_iter": 100, "mean_change_tol": 0.001, "n_components": 3, "n_passes": 2,
                  "topic_word_prior": None}  # fmt: skip
        old = {"model": "DPVariationalLDA", "params": params, "n_documents": 200, "source": "synthetic",
               "token_pattern": None, "guarantee": None, "components": lam.tolist(), "vocabulary": None}
        (tmp_path / "old.json").write_text(json.dumps(old))
        model, vocabulary = load_model(tmp_path / "old.json")
        assert vocabulary is None and model.options.batch_size == 40 and model.options.n_passes == 2
        assert model.doc_topic_prior_ == pytest.approx(prior)
        assert model.topic_word_prior_ == pytest.approx(1 / 3)
        np.testing.assert_array_equal(model.components_, lam)
        assert np.allclose(model.transform(counts[:3]).sum(axis=1), 1.0)
