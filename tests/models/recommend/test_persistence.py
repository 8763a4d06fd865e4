"""Model files of the top-N family: round trips, no training rows, exact guarantees, refused files."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.models.recommend import PrivateRecommender, Recommender, RecommenderOptions, persistence
from dptensor.models.recommend.ease import LowRankEase
from dptensor.models.recommend.persistence import (
    FORMAT_VERSION,
    load_recommender,
    read_recommender_file,
    save_recommender,
)
from dptensor.privacy import insecure_test_noise

N_USERS, N_ITEMS = 90, 14


@pytest.fixture(scope="module")
def X() -> sp.csr_array:
    """Two taste groups of users over two halves of the items, some noise."""
    rng = np.random.default_rng(0)
    group = rng.integers(2, size=N_USERS)
    half = np.arange(N_ITEMS) < N_ITEMS // 2
    p = np.where(group[:, None] == half[None, :].astype(int), 0.5, 0.08)
    return sp.csr_array((rng.random((N_USERS, N_ITEMS)) < p).astype(float))


MODELS = {
    "popularity": lambda: Recommender(method="popularity"),
    "ease": lambda: Recommender(method="ease"),
    "low-rank ease": lambda: Recommender(method="ease",
                                         options=RecommenderOptions(dense_items=5, low_rank=4)),
    "ials": lambda: Recommender(method="ials", n_factors=3, options=RecommenderOptions(iterations=2),
                                random_state=0),
    "private popularity": lambda: PrivateRecommender(epsilon=2.0, method="popularity"),
    "private ease": lambda: PrivateRecommender(epsilon=8.0, method="ease"),
    "private ials": lambda: PrivateRecommender(epsilon=8.0, method="ials", n_factors=3, random_state=0),
}


def _fit(name: str, X: sp.csr_array) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PrivacyWarning: delta against the few users of a test
        return MODELS[name]().fit(X)


@pytest.mark.parametrize("name", list(MODELS))
def test_round_trip_lists_alike_and_keeps_no_training_rows(name, X, tmp_path):
    model = _fit(name, X)
    path = save_recommender(model, tmp_path / "model.npz", item_ids=[f"i{j}" for j in range(N_ITEMS)],
                            binarisation="every listed pair", source="plays.csv")
    saved = read_recommender_file(path)
    loaded = saved.model
    assert type(loaded) is type(model)
    new = X[:7]
    a, b = model.recommend_for(new, 5), loaded.recommend_for(new, 5)
    np.testing.assert_array_equal(a.items, b.items)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(model.score_rows(new), loaded.score_rows(new))
    assert loaded.method_ == model.method_ and loaded.n_items_ == model.n_items_
    assert loaded.n_users_ == model.n_users_ == N_USERS
    assert loaded.get_params()["method"] == model.get_params()["method"]
    assert saved.item_ids.tolist() == [f"i{j}" for j in range(N_ITEMS)]
    assert saved.binarisation == "every listed pair" and saved.header["source"] == "plays.csv"
    with pytest.raises(ValueError, match="keeps no training rows.*recommend_for"):
        loaded.recommend(3)
    # nothing per user in the file: no array has a row per training user
    with np.load(path, allow_pickle=False) as archive:
        for key in archive.files:
            assert N_USERS not in archive[key].shape, key
    assert not hasattr(loaded, "_train")


def test_low_rank_ease_stays_low_rank(X, tmp_path):
    model = _fit("low-rank ease", X)
    assert isinstance(model.item_side_.weights, LowRankEase)
    loaded = load_recommender(save_recommender(model, tmp_path / "m.npz"))
    assert isinstance(loaded.item_side_.weights, LowRankEase)
    assert loaded.item_side_.weights.ridge == model.item_side_.weights.ridge


def test_options_are_restored(X, tmp_path):
    model = Recommender(method="ease", options=RecommenderOptions(ridge_scale=3.0)).fit(X)
    loaded = load_recommender(save_recommender(model, tmp_path / "m.npz"))
    assert loaded.options == RecommenderOptions(ridge_scale=3.0)


@pytest.mark.parametrize("name", ["private popularity", "private ease", "private ials"])
def test_private_guarantee_is_rebuilt_exactly(name, X, tmp_path):
    model = _fit(name, X)
    loaded = load_recommender(save_recommender(model, tmp_path / "m.npz"))
    assert loaded.guarantee_ == model.guarantee_
    assert loaded.guarantee_.to_dict() == model.guarantee_.to_dict()
    assert loaded.guarantee_.describe() == model.guarantee_.describe()
    assert loaded.guarantee_.to_dp_event() == model.guarantee_.to_dp_event()
    np.testing.assert_array_equal(loaded.items_, model.items_)
    # the released counts and (private popularity) the recounts of the candidates come back as fitted
    for attribute in ("popularity_", "candidates_", "recounts_"):
        np.testing.assert_array_equal(getattr(loaded, attribute), getattr(model, attribute))
    assert loaded.plan_ is None
    # what a private file holds besides the release: parameters, public sizes, the guarantee
    header = read_recommender_file(tmp_path / "m.npz").header
    assert set(header["params"]) == {"epsilon", "delta", "method", "max_items_per_user", "catalogue",
                                     "n_factors", "options"}


def test_selected_only_writes_the_selected_items_alone(X, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # reproducible noise (the guarantee then does not hold: a file records that too) that selects 3 items
        model = PrivateRecommender(epsilon=4.0, method="ease", catalogue="select", max_items_per_user=N_ITEMS,
                                   noise=insecure_test_noise(0)).fit(X)
    kept = model.items_
    assert 0 < kept.size < N_ITEMS
    ids = np.array([f"i{j}" for j in range(N_ITEMS)])[kept]
    path = save_recommender(model, tmp_path / "m.npz", item_ids=ids, selected_only=True)
    saved = read_recommender_file(path)
    assert saved.model.n_items_ == kept.size
    assert not saved.model.guarantee_.holds and saved.model.guarantee_ == model.guarantee_
    np.testing.assert_array_equal(saved.model.items_, np.arange(kept.size))
    assert saved.header["item_side"]["n_columns"] is None
    with np.load(path, allow_pickle=False) as archive:
        assert "columns" not in archive.files  # where the selected items lay among the columns: not kept
    full, small = model.recommend_for(X[:6], 3), saved.model.recommend_for(X[:6][:, kept], 3)
    as_small = np.where(full.items >= 0, np.searchsorted(kept, full.items), -1)
    np.testing.assert_array_equal(as_small, small.items)
    np.testing.assert_array_equal(full.scores, small.scores)
    # a selected popularity model: its candidates among the selected items, in the file's own positions
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        popular = PrivateRecommender(epsilon=4.0, method="popularity", catalogue="select",
                                     max_items_per_user=N_ITEMS, options=RecommenderOptions(recount_items=2),
                                     noise=insecure_test_noise(0)).fit(X)
    assert popular.candidates_.size == 2 and set(popular.candidates_) <= set(popular.items_)
    small = load_recommender(save_recommender(popular, tmp_path / "p.npz", selected_only=True,
                                              item_ids=np.arange(popular.items_.size)))
    np.testing.assert_array_equal(popular.items_[small.candidates_], popular.candidates_)
    np.testing.assert_array_equal(small.recounts_, popular.recounts_)
    # without selected_only every column is kept, and the columns are restored
    loaded = load_recommender(save_recommender(model, tmp_path / "all.npz"))
    assert loaded.n_items_ == N_ITEMS
    np.testing.assert_array_equal(loaded.items_, kept)


def test_item_ids_kinds_and_checks(X, tmp_path):
    model = Recommender(method="popularity").fit(X)
    ints = np.arange(100, 100 + N_ITEMS)
    saved = read_recommender_file(save_recommender(model, tmp_path / "m.npz", item_ids=ints))
    assert saved.item_ids.dtype == np.int64 and saved.item_ids.tolist() == ints.tolist()
    assert read_recommender_file(save_recommender(model, tmp_path / "n.npz")).item_ids is None
    with pytest.raises(ValueError, match="item_ids must be a 1-D sequence of the model's 14"):
        save_recommender(model, tmp_path / "x.npz", item_ids=ints[:-1])
    with pytest.raises(ValueError, match="repeats an id"):
        save_recommender(model, tmp_path / "x.npz", item_ids=[0] * N_ITEMS)
    assert not (tmp_path / "x.npz").exists()


def test_unfitted_model_is_refused(tmp_path):
    with pytest.raises(Exception, match="not fitted"):
        save_recommender(Recommender(), tmp_path / "m.npz")


def test_written_exactly_there_and_atomically(X, tmp_path, monkeypatch):
    model = Recommender(method="popularity").fit(X)
    odd = save_recommender(model, tmp_path / "model.bin")  # no ".npz" added
    assert odd == tmp_path / "model.bin" and odd.is_file() and not (tmp_path / "model.bin.npz").exists()
    assert load_recommender(odd).method_ == "popularity"
    before = odd.read_bytes()

    def broken(handle, **arrays):
        handle.write(b"PK\x03\x04 half a file")
        raise RuntimeError("disk full")

    monkeypatch.setattr(persistence.np, "savez_compressed", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        save_recommender(model, odd)
    assert odd.read_bytes() == before  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]  # no temporary file left


# ----------------------------------------------------------------------------- refused files


def _rewrite(path, **changes) -> None:
    """Rewrite a model file with some arrays changed (``None``: removed) or its header edited."""
    with np.load(path, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    for key, value in changes.items():
        if value is None:
            arrays.pop(key)
        else:
            arrays[key] = value
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


def _header(path) -> dict:
    with np.load(path, allow_pickle=False) as archive:
        return json.loads(str(archive["header"]))


@pytest.fixture()
def saved(X, tmp_path):
    return save_recommender(Recommender(method="ease").fit(X), tmp_path / "m.npz")


def test_newer_format_is_refused(saved):
    header = _header(saved)
    header["format_version"] = FORMAT_VERSION + 1
    _rewrite(saved, header=np.array(json.dumps(header)))
    with pytest.raises(ValueError, match=rf"newer dptensor .*format {FORMAT_VERSION + 1}.*upgrade"):
        load_recommender(saved)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda h: h.update(format="something-else"), "is not a model file"),
    (lambda h: h.update(format_version="1"), "format_version must be a positive integer"),
    (lambda h: h.update({"class": "TensorCompletion"}), "holds a 'TensorCompletion' model"),
    (lambda h: h.update(method="knn"), "unknown method 'knn'"),
    (lambda h: h.update(n_items=3), "'weights' has shape|'popularity' has shape"),
    (lambda h: h["params"].update(unknown=1), "parameters do not fit Recommender"),
    (lambda h: h["item_side"].update(weights="sparse"), "names weights 'sparse'"),
    (lambda h: h.update(n_users=True), "'n_users' is True"),
])
def test_tampered_header_is_refused(saved, edit, message):
    header = _header(saved)
    edit(header)
    _rewrite(saved, header=np.array(json.dumps(header)))
    with pytest.raises(ValueError, match=message):
        load_recommender(saved)


def test_tampered_arrays_are_refused(saved):
    with np.load(saved, allow_pickle=False) as archive:
        weights, popularity = archive["weights"], archive["popularity"]
    _rewrite(saved, weights=weights[:, :-1])
    with pytest.raises(ValueError, match="'weights' has shape"):
        load_recommender(saved)
    bad = popularity.copy()
    bad[0] = np.nan
    _rewrite(saved, weights=weights, popularity=bad)
    with pytest.raises(ValueError, match="NaN or infinite"):
        load_recommender(saved)
    _rewrite(saved, popularity=None)
    with pytest.raises(ValueError, match="no 'popularity' array"):
        load_recommender(saved)


def test_tampered_recounts_are_refused(X, tmp_path):
    # private popularity's two releases are checked like every other array of a file
    path = save_recommender(_fit("private popularity", X), tmp_path / "p.npz")
    with np.load(path, allow_pickle=False) as archive:
        counts, where, recounts = archive["counts"], archive["recounted"], archive["recounts"]
    cases = [
        ({"counts": None}, "counts, candidates and recounts together"),
        ({"counts": np.where(np.arange(counts.size) == 0, np.nan, counts)}, "NaN or infinite"),
        ({"recounts": recounts.astype(str)}, "'recounts' has shape"),
        ({"recounted": where[::-1].copy()}, "increasing positions"),
        ({"recounted": where + counts.size}, "increasing positions"),
    ]
    for changes, message in cases:
        _rewrite(path, counts=counts, recounted=where, recounts=recounts)
        _rewrite(path, **changes)
        with pytest.raises(ValueError, match=message):
            load_recommender(path)
    _rewrite(path, counts=counts, recounted=where, recounts=recounts)
    np.testing.assert_array_equal(load_recommender(path).recounts_, recounts)


def test_tampered_guarantee_is_refused(X, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = PrivateRecommender(epsilon=2.0, method="popularity").fit(X)
    path = save_recommender(model, tmp_path / "p.npz")
    header = _header(path)
    header["guarantee"]["dp_event"] = json.dumps({"module_name": "os", "class_name": "system"})
    _rewrite(path, header=np.array(json.dumps(header)))
    with pytest.raises(ValueError, match="guarantee cannot be read"):
        load_recommender(path)
    header["guarantee"] = None
    _rewrite(path, header=np.array(json.dumps(header)))
    with pytest.raises(ValueError, match="without its guarantee"):
        load_recommender(path)


def test_files_that_are_not_model_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model file"):
        load_recommender(tmp_path / "missing.npz")
    text = tmp_path / "text.npz"
    text.write_text("user,item\n1,2\n")
    with pytest.raises(ValueError, match="named .npz but is not a binary NumPy file"):
        load_recommender(text)
    plain = tmp_path / "plain.npz"
    np.savez(plain, a=np.zeros(3))
    with pytest.raises(ValueError, match="has no header"):
        load_recommender(plain)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, header=np.array([{"format": "dptensor-recommender"}], dtype=object))
    with pytest.raises(ValueError, match="cannot be read without pickle"):
        load_recommender(pickled)
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    with pytest.raises(ValueError, match="not a readable .npz archive"):
        load_recommender(broken)
    not_json = tmp_path / "notjson.npz"
    np.savez(not_json, header=np.array("{format"))
    with pytest.raises(ValueError, match="not valid JSON"):
        load_recommender(not_json)
