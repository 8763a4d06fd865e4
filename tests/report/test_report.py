"""Reports (issue 25): the pictures, the HTML page, every command's --report, and their privacy."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from dptensor.cli import main, observe_command
from dptensor.datasets import (
    make_lda_corpus,
    make_low_rank_completion,
    train_test_split_entries,
    write_entries,
    write_uci_bow,
)
from dptensor.datasets.corpus import load_corpus
from dptensor.privacy.audit import observable_differences
from dptensor.report import (
    ReportPage,
    intertopic_coordinates,
    plot_topics,
    topic_distributions,
    topic_prevalence,
)

PNG = b"\x89PNG\r\n\x1a\n"


class _Structure(HTMLParser):
    """Tags opened/closed (checked for nesting), headings, images, links and scripts of a page."""

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.h1: list[str] = []
        self.h2: list[str] = []
        self.images: list[str] = []
        self.external: list[str] = []
        self.tags: set[str] = set()
        self.doctype = ""
        self._heading: str | None = None

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        values = dict(attrs)
        if tag == "img":
            self.images.append(values.get("src") or "")
        for key in ("src", "href"):
            if values.get(key) and not str(values[key]).startswith("data:"):
                self.external.append(str(values[key]))
        if tag not in self.VOID:
            self.stack.append(tag)
        if tag in ("h1", "h2"):
            self._heading = ""

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()
        if tag in ("h1", "h2") and self._heading is not None:
            (self.h1 if tag == "h1" else self.h2).append(self._heading)
            self._heading = None

    def handle_data(self, data: str) -> None:
        if self._heading is not None:
            self._heading += data


def parse_page(path: Path) -> _Structure:
    """Parse a report and check it is a valid, self-contained page; returns its structure."""
    page = _Structure()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    assert page.doctype.lower() == "doctype html"
    assert not page.errors and not page.stack, (page.errors, page.stack)
    assert {"html", "head", "title", "body"} <= page.tags
    assert "script" not in page.tags and not page.external  # no network, nothing to run
    assert len(page.h1) == 1
    for src in page.images:
        header, _, data = src.partition(",")
        assert header == "data:image/png;base64"
        assert base64.b64decode(data, validate=True).startswith(PNG)
    return page


# --------------------------------------------------------------------------- the pictures


def test_topic_distributions_and_prevalence_from_each_kind_of_model() -> None:
    class Fitted:
        components_ = np.array([[2.0, -1.0, 2.0], [0.0, 0.0, 0.0]])
        weights_ = np.array([3.0, 1.0])

    topics = topic_distributions(Fitted())
    np.testing.assert_allclose(topics, [[0.5, 0.0, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    np.testing.assert_allclose(topic_prevalence(Fitted()), [0.75, 0.25])

    class Lambda:  # variational LDA: prevalence from the expected counts per topic
        components_ = np.array([[1.0, 3.0], [2.0, 2.0], [0.5, 1.5]])

    np.testing.assert_allclose(topic_prevalence(Lambda()), [4 / 10, 4 / 10, 2 / 10])


def test_intertopic_map_reproduces_the_jensen_shannon_distances_of_three_topics() -> None:
    # three points always embed exactly in the plane: MDS must recover their distances
    rng = np.random.default_rng(0)
    topics = rng.dirichlet(np.full(20, 0.3), size=3)
    xy = intertopic_coordinates(topics)
    for i, j in combinations(range(3), 2):
        expected = jensenshannon(topics[i], topics[j], base=2)
        assert np.linalg.norm(xy[i] - xy[j]) == pytest.approx(expected, rel=1e-3, abs=1e-4)


def test_heldout_section_reports_the_evaluation_modules_numbers() -> None:
    from dptensor.evaluation import completion_perplexity, split_documents, topic_npmi, unigram_perplexity
    from dptensor.models import SpectralLDA
    from dptensor.report import add_heldout_topics

    corpus = make_lda_corpus(500, 30, 3, alpha=0.2, doc_length=30, random_state=0).counts
    train, test = corpus[:400], corpus[400:]
    model = SpectralLDA(3, alpha0=0.6, random_state=0).fit(train)
    text = add_heldout_topics(ReportPage("t"), model, test, train=train, top=5).to_html()
    split = split_documents(test, random_state=0)
    for value in (completion_perplexity(model, split), unigram_perplexity(train, split),
                  topic_npmi(model, test, n_top=5).mean()):
        assert f"<td>{value:.4g}</td>" in text
    page = add_heldout_topics(ReportPage("t"), model, test, unigram_note="No unigram baseline: private")
    assert "No unigram baseline" in page.to_html() and "training word frequencies" not in page.to_html()


def test_plot_topics_draws_one_chart_per_topic_with_the_top_words() -> None:
    class Fitted:
        components_ = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
        alpha_ = np.array([1.0, 3.0])

    fig = plot_topics(Fitted(), ["a", "b", "c"], top=2, columns=2)
    visible = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in visible] == ["topic 1 (25.0%)", "topic 2 (75.0%)"]
    assert [t.get_text() for t in visible[1].get_yticklabels()] == ["b", "c"][::-1] or \
        [t.get_text() for t in visible[1].get_yticklabels()] == ["c", "a"]
    with pytest.raises(ValueError, match="vocabulary"):
        plot_topics(Fitted(), ["a"])


def test_guarantee_sentences_say_holds_or_why_not_from_a_guarantee_or_a_model_files_dict() -> None:
    from dptensor.report import guarantee_sentences

    assert guarantee_sentences(None)[0].startswith("Not private")
    written = {"epsilon": 1.5, "delta": 1e-6, "holds": True, "neighbouring": "document",
               "protected": "one doc", "public": "N", "accountant": "pld", "n_releases": 2,
               "mechanism": "gaussian",
               "noise_multiplier": "nan", "epsilon_exact": 1.5}  # JSON writes NaN as a string
    text = " ".join(guarantee_sentences(written))
    assert "(1.5, 1e-06)-differentially private under the 'document'" in text
    assert "Protected (what one neighbouring change may be): one doc." in text
    assert "noise multiplier" not in text
    failing = {**written, "holds": False, "epsilon": "inf", "claim": "paper", "nominal_epsilon": 1.0,
               "reason": "the sensitivity is wrong"}
    first = guarantee_sentences(failing)[0]
    assert first.startswith("NOT PRIVATE") and "epsilon = 1" in first and "the sensitivity is wrong" in first


def test_guarantee_table_says_what_a_missing_noise_multiplier_means(tmp_path: Path) -> None:
    """A composed guarantee has no single noise multiplier: the table says so instead of "nan"."""
    from dptensor.report.sections import add_guarantee

    written = {"epsilon": 1.5, "delta": 1e-6, "holds": True, "neighbouring": "document",
               "protected": "one doc", "public": "N", "accountant": "pld", "n_releases": 2,
               "mechanism": "gaussian", "noise_multiplier": "nan", "epsilon_exact": 1.5}  # as JSON holds it
    for guarantee in (written, {**written, "noise_multiplier": float("nan")}):
        text = add_guarantee(ReportPage("r"), guarantee).write(tmp_path / "g.html").read_text()
        assert "several (one per release)" in text and ">nan<" not in text


def test_page_escapes_text_and_inlines_figures(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure()
    fig.subplots().plot([0, 1], [1, 0])
    page = ReportPage("a <b> & c").heading("x<y").paragraph("1 < 2").table(["k"], [(0.123456,)])
    path = page.figure(fig, "a line").write(tmp_path / "page.html")
    parsed = parse_page(path)
    assert parsed.h1 == ["a <b> & c"] and parsed.h2 == ["x<y"] and len(parsed.images) == 1
    assert "0.1235" in path.read_text()


# --------------------------------------------------------------------------- the commands


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    corpus = make_lda_corpus(600, 40, 3, alpha=0.2, doc_length=40, random_state=0)
    vocabulary = [f"w{i}" for i in range(40)]
    write_uci_bow(corpus.counts[:500], folder / "docword.train.txt", vocabulary)
    write_uci_bow(corpus.counts[500:], folder / "docword.test.txt", vocabulary)
    return folder


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_lda_fit_report_has_topics_map_heldout_and_provenance(
    corpus_files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "fit.html"
    argv = ["lda", "fit", str(corpus_files / "docword.train.txt"), "--topics", "3", "--alpha0", "0.6", "-q",
            "--seed", "0", "--report", str(report), "--report-test", str(corpus_files / "docword.test.txt")]
    code, out, _ = run_cli(argv, capsys)
    assert code == 0 and f"wrote report {report}" in out
    page = parse_page(report)
    assert page.h2 == ["Privacy guarantee", "Topics", "Held-out evaluation", "Reproduce"]
    assert len(page.images) == 2  # topic bars, intertopic map
    text = report.read_text()
    for expected in ("Not private", "unigram baseline (training word frequencies)", "uniform baseline",
                     "NPMI coherence", "dptensor lda fit", "--report-test", "<td>topic 3</td>"):
        assert expected in text


def test_private_lda_report_with_ledger_shows_budget_and_no_training_baseline(
    corpus_files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger, report = tmp_path / "b.ledger", tmp_path / "private.html"
    assert main(["budget", "create", str(ledger), "--epsilon", "5", "--delta", "1e-5", "-q"]) == 0
    code, _, _ = run_cli(["lda", "fit", str(corpus_files / "docword.train.txt"), "--topics", "3", "-q",
                          "--epsilon", "1", "--delta", "1e-6", "--ledger", str(ledger),
                          "--report", str(report), "--report-test", str(corpus_files / "docword.test.txt"),
                          "--out", str(tmp_path / "m.json"), "--topic-recovery", "tensor"], capsys)
    assert code == 0
    page = parse_page(report)
    assert page.h2 == ["Privacy guarantee", "Topics", "Whitening", "Held-out evaluation", "Privacy budget",
                       "Reproduce"]  # fmt: skip
    assert len(page.images) == 3  # + spend over time
    text = report.read_text()
    saved_alignment = json.loads((tmp_path / "m.json").read_text())["whitening_alignment"]
    assert "directions of the released second moment" in text and "<td>direction 3</td>" in text
    assert all(f"<td>{a:.2f}</td>" in text for a in saved_alignment)
    assert "Guarantee: holds" in text and "differentially private under the &#x27;document&#x27;" in text
    assert "before this run" in text and "after this run" in text
    assert "No unigram baseline" in text and "training word frequencies)" not in text
    # dptensor report on the saved model
    saved = tmp_path / "saved.html"
    code, out, _ = run_cli(["report", str(tmp_path / "m.json"), "--out", str(saved)], capsys)
    assert code == 0 and "wrote report" in out
    page = parse_page(saved)
    assert "Guarantee: holds" in saved.read_text() and "Topics" in page.h2 and "Whitening" in page.h2
    # budget show --plot
    plot = tmp_path / "budget.png"
    assert run_cli(["budget", "show", str(ledger), "--plot", str(plot)], capsys)[0] == 0
    assert plot.read_bytes().startswith(PNG)


def test_private_lda_report_of_an_nmf_fit_says_how_the_topics_were_recovered(
    corpus_files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # this corpus is small enough for the planner to choose topic_recovery="nmf" (public sizes)
    report, model = tmp_path / "nmf.html", tmp_path / "m.json"
    code, out, _ = run_cli(["lda", "fit", str(corpus_files / "docword.train.txt"), "--topics", "3",
                            "--epsilon", "1", "--delta", "1e-6", "--seed", "0", "--report", str(report),
                            "--out", str(model)], capsys)  # fmt: skip
    assert code == 0 and "whitening:" not in out
    assert "topics: a non-negative factor of the released word co-occurrences (M2)" in out
    page = parse_page(report)
    assert page.h2 == ["Privacy guarantee", "Topics", "Topic recovery", "Held-out evaluation", "Reproduce"]
    text = report.read_text()
    assert "topic_recovery=&#x27;nmf&#x27;" in text and "The planner chose it" in text
    saved = json.loads(model.read_text())
    assert saved["topic_recovery"] == "nmf" and "whitening_alignment" not in saved
    assert saved["guarantee"]["n_releases"] == 2
    code, out, _ = run_cli(["report", str(model), "--out", str(tmp_path / "again.html")], capsys)
    assert code == 0 and "Topic recovery" in parse_page(tmp_path / "again.html").h2
    asked = tmp_path / "asked.html"
    code, _, _ = run_cli(["lda", "fit", str(corpus_files / "docword.train.txt"), "--topics", "3", "-q",
                          "--epsilon", "1", "--delta", "1e-6", "--topic-recovery", "nmf",
                          "--report", str(asked)], capsys)  # fmt: skip
    assert code == 0 and "It was asked for" in asked.read_text() and "planner" not in asked.read_text()


@pytest.mark.parametrize("argv, message", [
    (["--report", "r.txt"], "--report r.txt: the file name must end in .html"),
    (["--report-test", "x.txt"], "--report-test: needs --report"),
])
def test_report_options_are_refused_before_any_work(
    argv: list[str], message: str, corpus_files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(["lda", "fit", str(corpus_files / "docword.train.txt"), "-k", "3", *argv], capsys)
    assert code == 2 and message in err and err.count("\n") == 1


def test_single_topic_fit_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dptensor.datasets import make_single_topic_corpus

    np.save(tmp_path / "tokens.npy", make_single_topic_corpus(800, 12, 3, random_state=0).tokens)
    report = tmp_path / "st.html"
    code, _, _ = run_cli(["single-topic", "fit", str(tmp_path / "tokens.npy"), "-k", "3", "--n-words", "12",
                          "--mechanism", "agn", "--epsilon", "2", "--delta", "1e-5", "--seed", "0",
                          "--report", str(report), "--out", str(tmp_path / "st.json")], capsys)
    assert code == 0
    page = parse_page(report)
    assert page.h2 == ["Privacy guarantee", "Topics", "Reproduce"] and len(page.images) == 2
    code, _, _ = run_cli(["report", str(tmp_path / "st.json"), "--out", str(tmp_path / "st2.html")], capsys)
    assert code == 0 and "Guarantee: holds" in (tmp_path / "st2.html").read_text()


@pytest.fixture(scope="module")
def ratings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ratings")
    train, test = train_test_split_entries(make_low_rank_completion((30, 20, 4), 2, random_state=0).observed,
                                           random_state=0)
    write_entries(folder / "train.csv", train)
    write_entries(folder / "test.csv", test)
    return folder


def test_complete_report_has_rmse_by_count_against_the_baselines(
    ratings: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "c.html"
    code, _, _ = run_cli(["complete", str(ratings / "train.csv"), "--rank", "2", "--test",
                          str(ratings / "test.csv"), "--seed", "0", "-q", "--report", str(report)], capsys)
    assert code == 0
    page = parse_page(report)
    assert page.h2 == ["Privacy guarantee", "Model", "Held-out error", "Reproduce"]
    assert len(page.images) == 2  # by ratings per user, per item
    text = report.read_text()
    assert "mean baseline" in text and "bias baseline" in text and "ratings per user" in text


def test_private_user_relation_report_shows_no_aggregate_of_predictions(
    ratings: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "u.html"
    code, _, _ = run_cli(["complete", str(ratings / "train.csv"), "--rank", "2", "--shape", "30", "20", "4",
                          "--test", str(ratings / "test.csv"), "--privacy", "als", "--neighbouring", "user",
                          "--epsilon", "1", "--value-range", "-3", "3", "--seed", "0", "-q",
                          "--report", str(report)], capsys)
    assert code == 0
    page = parse_page(report)
    text = report.read_text()
    assert "joint-DP rule" in text
    assert "<th>test RMSE</th>" not in text and "<th>ratings per user</th>" not in text
    assert not page.images


def test_private_entry_value_report_leaves_out_the_baselines(
    ratings: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "e.html"
    code, _, _ = run_cli(["complete", str(ratings / "train.csv"), "--rank", "2", "--test",
                          str(ratings / "test.csv"), "--privacy", "gradient_dpsgd", "--neighbouring",
                          "entry-value", "--epsilon", "1", "--value-range", "-3", "3", "--seed", "0", "-q",
                          "--report", str(report)], capsys)
    assert code == 0
    parse_page(report)
    text = report.read_text()
    assert "test RMSE" in text and "baselines are left out" in text and "bias baseline (" not in text


# --------------------------------------------------------------------------- privacy of a private page


def _neighbours(folder: Path) -> tuple[Path, Path]:
    """Two corpora differing in one document: the second's first document is huge and one-word."""
    counts = make_lda_corpus(300, 30, 3, alpha=0.2, doc_length=30, random_state=1).counts.tolil()
    vocabulary = [f"w{i}" for i in range(30)]
    first, second = folder / "a", folder / "b"
    for sub in (first, second):
        sub.mkdir()
    write_uci_bow(counts.tocsr(), first / "docword.train.txt", vocabulary)
    counts[0, :] = 0
    counts[0, 7] = 10**6
    write_uci_bow(counts.tocsr(), second / "docword.train.txt", vocabulary)
    return first, second


def test_private_report_of_neighbouring_corpora_differs_only_in_released_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    observations = []
    for folder in _neighbours(tmp_path):
        monkeypatch.chdir(folder)
        assert main(["budget", "create", "b.ledger", "--epsilon", "5", "--delta", "1e-5", "-q"]) == 0
        out = folder / "out"
        out.mkdir()
        argv = ["lda", "fit", "docword.train.txt", "-k", "3", "-q", "--epsilon", "1", "--delta", "1e-6",
                "--ledger", "b.ledger", "--report", "out/report.html"]
        observations.append(observe_command(argv, out))
        # numbers are masked in the comparison: check directly that the private token counts are absent
        text = re.sub(r"base64,[A-Za-z0-9+/=]+", "", (out / "report.html").read_text())
        tokens = str(load_corpus(folder / "docword.train.txt").counts.sum())
        assert "1000000" not in text and "1e+06" not in text and tokens not in text
    assert observations[0].result == 0
    files = dict(observations[0].attributes)["files"]
    assert files[0][0] == "report.html" and files[0][1][0] == "html"
    assert observable_differences(*observations) == []


# --------------------------------------------------------------------------- a real browser


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def test_report_renders_in_a_headless_browser(
    corpus_files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    browser = _browser()
    if browser is None:
        pytest.skip("no Chromium on this machine (.ci/run installs Debian's chromium)")
    report = tmp_path / "fit.html"
    assert run_cli(["lda", "fit", str(corpus_files / "docword.train.txt"), "-k", "3", "--alpha0", "0.6",
                    "-q", "--seed", "0", "--report", str(report)], capsys)[0] == 0
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1000,1600", report.resolve().as_uri()],
                   check=True, capture_output=True, timeout=120)
    from matplotlib.image import imread

    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (1600, 1000)
    # the first topic's bars are matplotlib's C0 blue (31, 119, 180): the chart images rendered
    blue = np.all(np.abs(pixels - np.array([31, 119, 180]) / 255) < 0.03, axis=-1)
    orange = np.all(np.abs(pixels - np.array([255, 127, 14]) / 255) < 0.03, axis=-1)
    assert blue.sum() > 2000 and orange.sum() > 2000
