"""SpectralLDA: topic recovery, estimator conventions, inference, bad input, CLI."""

import json

import numpy as np
import pytest
import scipy.sparse as sp
from _helpers import topic_l1_error

from dptensor import NotFittedError
from dptensor.cli import main
from dptensor.datasets.corpus import write_uci_bow
from dptensor.datasets.lda import make_lda_corpus
from dptensor.models import SpectralLDA


@pytest.fixture(scope="module")
def corpus():
    return make_lda_corpus(20000, 60, 4, alpha=0.25, doc_length=50, topic_concentration=0.2, random_state=0)


def test_recovers_topics_and_alpha(corpus):
    model = SpectralLDA(4, corpus.alpha0, random_state=0)
    assert model.fit(corpus.counts) is model
    assert model.components_.shape == (4, 60)
    assert np.all(model.components_ >= 0)
    np.testing.assert_allclose(model.components_.sum(axis=1), 1.0)
    error, match = topic_l1_error(corpus.topics, model.components_, return_matching=True)
    assert error < 0.1
    np.testing.assert_allclose(model.alpha_[match], corpus.alpha, rtol=0.15)
    assert np.all(np.diff(model.alpha_) <= 0)
    assert model.whitened_tensor_.shape == (4, 4, 4)
    assert set(model.timings_) >= {"whitening", "whitened third moment", "tensor decomposition"}


def test_error_falls_with_more_documents():
    errors = []
    for n in (1000, 10000, 100000):
        c = make_lda_corpus(n, 40, 3, alpha=0.3, doc_length=30, topic_concentration=0.3, random_state=1)
        fitted = SpectralLDA(3, c.alpha0, random_state=0).fit(c.counts)
        errors.append(topic_l1_error(c.topics, fitted.components_))
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.05


def test_robust_power_method_option_agrees(corpus):
    simultaneous = SpectralLDA(4, corpus.alpha0, random_state=0).fit(corpus.counts)
    robust = SpectralLDA(4, corpus.alpha0, decomposition="robust", random_state=0).fit(corpus.counts)
    # T_hat is only nearly orthogonally decomposable, so the two methods differ slightly.
    assert topic_l1_error(simultaneous.components_, robust.components_) < 0.01
    assert topic_l1_error(corpus.topics, robust.components_) < 0.1


def test_large_vocabulary_uses_products_only():
    c = make_lda_corpus(20000, 2000, 5, alpha=0.2, doc_length=80, topic_concentration=0.02, random_state=2)
    model = SpectralLDA(5, c.alpha0, random_state=0).fit(c.counts)  # randomised whitening
    lanczos = SpectralLDA(5, c.alpha0, whitening="eigsh", random_state=0).fit(c.counts)
    assert topic_l1_error(lanczos.components_, model.components_) < 0.01
    assert topic_l1_error(c.topics, model.components_) < 0.3


def test_same_seed_same_result(corpus):
    a = SpectralLDA(4, corpus.alpha0, random_state=3).fit(corpus.counts)
    b = SpectralLDA(4, corpus.alpha0, random_state=3).fit(corpus.counts)
    np.testing.assert_array_equal(a.components_, b.components_)


def test_estimator_conventions(corpus):
    model = SpectralLDA(4, 2.0, whitening="dense")
    params = model.get_params()
    assert params["n_components"] == 4 and params["alpha0"] == 2.0 and params["whitening"] == "dense"
    assert model.set_params(alpha0=corpus.alpha0) is model and model.alpha0 == corpus.alpha0
    with pytest.raises(ValueError, match="Invalid parameter 'n_topics'"):
        model.set_params(n_topics=3)
    assert "n_components=4" in repr(model)
    assert not hasattr(model, "components_")
    with pytest.raises(NotFittedError, match="not fitted"):
        model.transform(corpus.counts)
    sklearn_base = pytest.importorskip("sklearn.base")
    clone = sklearn_base.clone(model)
    assert clone.get_params() == model.get_params() and clone is not model
    checks = pytest.importorskip("sklearn.utils.estimator_checks")
    for check in (
        "check_no_attributes_set_in_init",
        "check_get_params_invariance",
        "check_set_params",
        "check_parameters_default_constructible",
        "check_estimators_unfitted",
    ):
        getattr(checks, check)("SpectralLDA", SpectralLDA(3, 1.0, random_state=0))


def test_transform_score_perplexity(corpus):
    model = SpectralLDA(4, corpus.alpha0, random_state=0).fit(corpus.counts)
    held_out = make_lda_corpus(500, 60, 4, alpha=0.25, doc_length=200, topics=corpus.topics, random_state=9)
    theta = model.transform(held_out.counts)
    assert theta.shape == (500, 4)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0)
    _, match = topic_l1_error(corpus.topics, model.components_, return_matching=True)
    assert np.mean(np.abs(theta[:, match] - held_out.doc_topic)) < 0.1
    np.testing.assert_allclose(model.fit_transform(corpus.counts[:100])[:1].sum(), 1.0)
    model.fit(corpus.counts)
    score = model.score(held_out.counts)
    assert np.isfinite(score) and score < 0
    perplexity = model.perplexity(held_out.counts)
    unigram = np.asarray(held_out.counts.sum(axis=0)).ravel()
    unigram_perplexity = np.exp(-(unigram @ np.log(unigram / unigram.sum())) / unigram.sum())
    assert 1 < perplexity < unigram_perplexity
    # An empty document gets the prior mean, and transform says so (issue 17).
    empty = sp.vstack([sp.csr_matrix((1, 60)), held_out.counts[:2], sp.csr_matrix((1, 60))]).tocsr()
    with pytest.warns(UserWarning, match="2 of 4 document"):
        theta = model.transform(empty)
    prior = model.document_topic_prior()
    np.testing.assert_allclose(theta[[0, 3]], np.tile(prior / prior.sum(), (2, 1)))
    assert not np.allclose(theta[1], prior / prior.sum())


def test_top_words(corpus):
    model = SpectralLDA(4, corpus.alpha0, random_state=0).fit(corpus.counts)
    vocab = [f"w{i}" for i in range(60)]
    top = model.top_words(vocab, 5)
    assert len(top) == 4 and all(len(t) == 5 for t in top)
    assert top[0][0] == vocab[int(np.argmax(model.components_[0]))]
    assert model.top_words(n=2)[0][0] == str(int(np.argmax(model.components_[0])))
    with pytest.raises(ValueError, match="vocabulary has 3 words"):
        model.top_words(["a", "b", "c"])


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ({"n_components": 70}, ValueError, "exceeds the vocabulary size"),
        ({"n_components": 0}, ValueError, "n_components"),
        ({"n_components": 2.5}, TypeError, "n_components"),
        ({"alpha0": 0.0}, ValueError, "alpha0"),
        ({"alpha0": -1.0}, ValueError, "alpha0"),
        ({"decomposition": "svd"}, ValueError, "decomposition"),
        ({"whitening": "qr"}, ValueError, "whitening"),
        ({"smoothing": 0.0}, ValueError, "smoothing"),
        ({"smoothing": 1.0}, ValueError, "smoothing"),
    ],
)
def test_bad_parameters(corpus, params, error, message):
    kwargs = {"n_components": 3, "alpha0": 1.0, **params}
    with pytest.raises(error, match=message):
        SpectralLDA(**kwargs).fit(corpus.counts[:2000])
    if "n_components" not in params:  # partial_fit refuses too, before counting the batch
        model = SpectralLDA(**kwargs)
        with pytest.raises(error, match=message):
            model.partial_fit(corpus.counts[:2000])
        assert not hasattr(model, "_accumulator")


def test_partial_fit_retry_after_bad_option_counts_each_document_once(corpus):
    model = SpectralLDA(3, 1.0, random_state=0).partial_fit(corpus.counts[:1000])
    model.decomposition = "robust_typo"
    with pytest.raises(ValueError, match="decomposition"):
        model.partial_fit(corpus.counts[1000:2000])
    model.decomposition = "simultaneous"
    model.partial_fit(corpus.counts[1000:2000])
    assert model.n_documents_ == 2000 - model.n_dropped_documents_


def test_bad_transform_input(corpus):
    model = SpectralLDA(4, corpus.alpha0, random_state=0).fit(corpus.counts)
    with pytest.raises(ValueError, match="60"):
        model.transform(corpus.counts[:, :50])
    with pytest.raises(ValueError, match="negative"):
        model.transform(-corpus.counts[:5])


def _run_cli(argv):
    return main(argv)


def test_cli_fit_and_transform_on_text(tmp_path, capsys):
    pytest.importorskip("sklearn")  # plain text is vectorised by scikit-learn
    rng = np.random.default_rng(0)
    sports = ["goal", "match", "team", "score", "league", "coach"]
    food = ["bread", "cheese", "apple", "soup", "salad", "wine"]
    lines = []
    for _ in range(400):
        mix = rng.dirichlet([0.3, 0.3])
        words = [rng.choice(sports) if rng.random() < mix[0] else rng.choice(food) for _ in range(20)]
        lines.append(" ".join(words))
    text = tmp_path / "docs.txt"
    text.write_text("\n".join(lines) + "\n")
    model_path = tmp_path / "model.json"
    assert _run_cli(["lda", "fit", str(text), "--topics", "2", "--alpha0", "0.6", "--seed", "0",
                     "--quiet", "--out", str(model_path)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "topic   1" in out and "topic   2" in out
    payload = json.loads(model_path.read_text())
    assert np.array(payload["components"]).shape == (2, 12)
    tops = [line.split()[3:6] for line in out.splitlines() if line.startswith("topic")]
    for words in tops:
        assert set(words) <= set(sports) or set(words) <= set(food)
    theta_path = tmp_path / "theta.csv"
    assert _run_cli(["lda", "transform", str(model_path), str(text), "--out", str(theta_path)]) == 0
    assert theta_path.read_text().startswith("document,topic_1,topic_2\n0,")
    theta = np.loadtxt(theta_path, delimiter=",", skiprows=1)[:, 1:]
    assert theta.shape == (400, 2)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0, atol=1e-5)


def test_cli_fit_uci_npz_model(tmp_path, capsys, corpus):
    docword = tmp_path / "docword.toy.txt"
    write_uci_bow(corpus.counts[:5000], docword, [f"w{i}" for i in range(60)])
    model_path = tmp_path / "model.npz"
    assert _run_cli(["lda", "fit", str(docword), "--topics", "4", "--alpha0", "1", "--quiet",
                     "--seed", "1", "--out", str(model_path)]) == 0  # fmt: skip
    assert "w" in capsys.readouterr().out
    theta_path = tmp_path / "theta.npy"
    assert _run_cli(["lda", "transform", str(model_path), str(docword), "--out", str(theta_path)]) == 0
    assert np.load(theta_path).shape == (5000, 4)


def test_cli_bad_input(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert _run_cli(["lda", "fit", str(empty), "--topics", "2", "--quiet"]) == 2
    assert "empty corpus" in capsys.readouterr().err
    empty.write_text("\n\n")  # two documents, both empty
    assert _run_cli(["lda", "fit", str(empty), "--topics", "2", "--quiet"]) == 2
    assert "every line is blank" in capsys.readouterr().err
    assert _run_cli(["lda", "fit", str(tmp_path / "missing.txt"), "--topics", "2", "--quiet"]) == 2
    assert "no such corpus" in capsys.readouterr().err


def test_partial_fit_accumulates_moments(corpus):
    full = SpectralLDA(4, corpus.alpha0, random_state=0).fit(corpus.counts)
    model = SpectralLDA(4, corpus.alpha0, random_state=0)
    for lo in range(0, 20000, 5000):
        assert model.partial_fit(corpus.counts[lo : lo + 5000]) is model
    assert model.n_documents_ == full.n_documents_
    np.testing.assert_allclose(model.components_.sum(axis=1), 1.0)
    assert model.refinement_ is None  # partial_fit fits the moments only
    assert topic_l1_error(full.moment_components_, model.components_) < 0.02
    assert topic_l1_error(corpus.topics, model.components_) < 0.1
    with pytest.raises(ValueError, match="earlier batches had 60"):
        model.partial_fit(corpus.counts[:10, :50])
    short = sp.csr_matrix(np.array([[1] + [0] * 59, [2] + [0] * 59]))
    model.partial_fit(short)
    assert model.n_dropped_documents_ == 2 and model.n_documents_ == full.n_documents_
    model.fit(corpus.counts[:3000])  # fit starts afresh
    assert model.n_documents_ == 3000 and not hasattr(model, "_accumulator")


def test_document_chunks_cover_every_document_once_within_the_budget():
    from dptensor.models.topics._fitted import INFERENCE_CHUNK_CELLS, document_chunks

    counts = sp.random(3000, 40, density=0.2, format="csr", random_state=0)
    k = INFERENCE_CHUNK_CELLS // 1000  # about 1000 stored entries per chunk
    chunks = document_chunks(counts, k)
    assert chunks[0][0] == 0 and chunks[-1][1] == counts.shape[0] and len(chunks) > 10
    assert all(a < b and b == c for (a, b), (c, _) in zip(chunks[:-1], chunks[1:], strict=True))  # contiguous
    longest_row = int(np.diff(counts.indptr).max())
    assert max(counts.indptr[b] - counts.indptr[a] for a, b in chunks) <= 1000 + longest_row
    assert document_chunks(counts[:0], k) == []
    assert document_chunks(sp.csr_matrix((5, 4)), k) == [(0, 5)]  # no tokens: one chunk


def test_randomized_whitening_falls_back_to_lanczos_when_negative_eigenvalues_dominate():
    # Subspace iteration converges to the largest *magnitudes*: with negative eigenvalues as large
    # as the positive ones its top Ritz values included a negative one (change logs, d = 5000, k = 20).
    from dptensor.models.topics._lda_whitening import top_eigenpairs

    rng = np.random.default_rng(0)
    basis, _ = np.linalg.qr(rng.standard_normal((60, 60)))
    spectrum = np.concatenate([[1.0, 0.9, 0.8, 0.7, 0.6], -np.linspace(0.95, 0.65, 20), np.zeros(35)])
    matrix = (basis * spectrum) @ basis.T
    values, vectors = top_eigenpairs(matrix, 5, method="randomized", n_oversamples=2, n_power_iter=8,
                                     random_state=0)  # fmt: skip
    np.testing.assert_allclose(values, [1.0, 0.9, 0.8, 0.7, 0.6], atol=1e-8)
    np.testing.assert_allclose(np.abs(vectors.T @ basis[:, :5]), np.eye(5), atol=1e-6)
    # the same through a LinearOperator sum (a private M2 release plus its noise operator)
    from scipy.sparse.linalg import aslinearoperator

    summed = aslinearoperator(matrix) + aslinearoperator(np.zeros((60, 60)))
    values, _ = top_eigenpairs(summed, 5, method="randomized", n_oversamples=2, n_power_iter=8,
                               random_state=0)  # fmt: skip
    np.testing.assert_allclose(values, [1.0, 0.9, 0.8, 0.7, 0.6], atol=1e-8)


def test_lanczos_takes_the_single_topic_models_implicit_second_moment():
    # its LinearOperator's single-vector product once broke eigsh ("could not be broadcast")
    from dptensor.datasets import make_single_topic_corpus
    from dptensor.models.topics._lda_whitening import top_eigenpairs
    from dptensor.models.topics.single_topic import check_documents, second_moment

    corpus = make_single_topic_corpus(400, 50, 3, random_state=0)
    docs = check_documents([np.asarray(t) for t in corpus.tokens], n_words=50, input="tokens", moments="all")
    operator = second_moment(docs, "all")
    lanczos, _ = top_eigenpairs(operator, 3, method="eigsh", random_state=0)
    subspace, _ = top_eigenpairs(operator, 3, method="randomized", n_power_iter=20, random_state=0)
    np.testing.assert_allclose(lanczos, subspace, rtol=1e-6)


def test_top_words_lists_only_words_of_positive_probability():
    from dptensor.models.topics._fitted import topic_words_text

    model = SpectralLDA(3, 1.0)
    model.components_ = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    model.n_features_in_ = 4
    # a degenerate topic is not padded with words it never draws
    assert model.top_words(["a", "b", "c", "d"], 3) == [["a", "b"], ["d"], []]
    assert model.top_words(None, 10) == [["0", "1"], ["3"], []]
    assert topic_words_text(["a", "b"]) == "a b"
    assert topic_words_text([]) == "(no word of positive probability)"
