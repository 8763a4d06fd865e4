"""A new user's first hour (issue 26, item 4): no silent wrong results, messages that name the fix."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse

import dptensor
from dptensor import datasets
from dptensor._files import write_csv, write_json, write_text
from dptensor._validation import check_random_state
from dptensor.cli import main, warning_line
from dptensor.datasets import ratings_day_origin, read_entries, read_movielens, read_recbole_inter
from dptensor.datasets.corpus import load_text_corpus
from dptensor.decomposition import input_perturbation, private_power_method
from dptensor.decomposition.input_perturbation import INPUT_ACCOUNTANTS
from dptensor.models import SpectralLDA
from dptensor.models.completion.estimator import compare_with_mean
from dptensor.privacy import HeldOutUtilityWarning, PrivacyWarning, ReleaseUtilityWarning
from dptensor.privacy.calibration import ACCOUNTANT_MEANINGS, ACCOUNTANTS
from dptensor.streams import CsvStream

DAY = 86_400
T0 = 874_965_758


def _udata(path, rows):
    path.write_text("".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows))
    return path


@pytest.fixture()
def temporal_split(tmp_path):
    """A MovieLens pair split by time: training days 0-2, test days 5-6 of the same calendar."""
    train = [(1, 1, 5, T0), (2, 2, 3, T0 + DAY), (1, 2, 4, T0 + 2 * DAY), (2, 1, 2, T0 + 2 * DAY + 7)]
    test = [(1, 3, 4, T0 + 5 * DAY), (2, 3, 1, T0 + 6 * DAY + 3)]
    return _udata(tmp_path / "train.data", train), _udata(tmp_path / "test.data", test)


def test_movielens_pair_shares_one_day_origin(temporal_split, tmp_path):
    train_path, test_path = temporal_split
    # the bug: each file numbered its days from its own first rating, so test days 5, 6 became 0, 1
    assert read_movielens(test_path).indices[:, 2].tolist() == [0, 1]
    origin = ratings_day_origin(train_path, test_path)
    assert origin == T0
    test = read_movielens(test_path, day_origin=origin)
    assert test.indices[:, 2].tolist() == [5, 6] and test.shape[2] == 7
    assert read_movielens(train_path, day_origin=origin).indices[:, 2].tolist() == [0, 1, 2, 2]
    # the RecBole format takes the same origin, and the origin may come from either format
    inter = tmp_path / "test.inter"
    inter.write_text("user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
                     + "".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in
                               [(1, 3, 4, T0 + 5 * DAY), (2, 3, 1, T0 + 6 * DAY + 3)]))
    assert read_recbole_inter(inter, day_origin=origin).indices[:, 2].tolist() == [5, 6]
    assert ratings_day_origin(inter, train_path) == T0
    with pytest.raises(ValueError, match="precedes day_origin.*ratings_day_origin"):
        read_movielens(train_path, day_origin=T0 + 1)
    with pytest.raises(TypeError, match="day_origin"):
        read_movielens(train_path, day_origin=1.5)


def test_complete_movielens_test_days_follow_the_training_days(temporal_split, tmp_path, capsys):
    train_path, test_path = temporal_split
    out = tmp_path / "pred.csv"
    assert main(["complete", str(train_path), "--movielens", "--test", str(test_path), "--no-factors",
                 "--quiet", "--out", str(out)]) == 0
    with open(out) as handle:
        days = [int(row["k"]) for row in csv.DictReader(handle)]
    assert days == [5, 6]
    assert "shape (2, 3, 7)" in capsys.readouterr().out


def test_movielens_file_without_movielens_flag_is_refused(temporal_split, capsys):
    train_path, _ = temporal_split
    with pytest.raises(ValueError, match="--movielens"):
        read_entries(train_path)
    assert read_entries(train_path, check_timestamps=False).values[0] == T0
    assert main(["complete", str(train_path), "--rank", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Unix timestamp" in err and "--movielens" in err


def test_entries_with_ordinary_large_values_are_read(tmp_path):
    path = tmp_path / "e.csv"
    # not every value is a whole number of seconds in the timestamp range: an ordinary file
    path.write_text("0,0,0,881250949\n1,0,0,3\n")
    assert read_entries(path).values.tolist() == [881250949, 3]
    path.write_text("0,0,0,881250949.5\n1,0,0,891717742.25\n")
    assert len(read_entries(path)) == 2


def test_output_files_respect_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        json_path = write_json(tmp_path / "a.json", {"a": 1})
        os.umask(0o077)
        private = write_text(tmp_path / "b.txt", "b")
    finally:
        os.umask(old)
    assert stat.S_IMODE(json_path.stat().st_mode) == 0o644
    assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_cli_warnings_are_one_clean_line(temporal_split, capsys):
    class Shown(UserWarning):
        pass

    line = warning_line("dptensor x", Shown("two\n  lines"), Shown)
    assert line == "dptensor x: warning: two lines (Shown)"
    # a command's warnings: no file name, line number or source line of the code that issued them
    train_path, _ = temporal_split
    assert main(["complete", str(train_path), "--movielens", "--no-factors", "--quiet",
                 "--privacy", "als", "--neighbouring", "entry-value", "--value-range", "1", "5",
                 "--epsilon", "50"]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and all(line.startswith("dptensor complete: warning: ") for line in lines), err
    assert ".py:" not in err and "PrivacyWarning" in err
    # the handler is restored afterwards
    assert warnings.showwarning.__module__ == "warnings"


def test_cli_stdout_is_line_buffered_while_a_command_runs(monkeypatch, tmp_path):
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8")  # block-buffered, as a redirected stdout
    seen = []

    def command(args):
        print("header")
        seen.append(raw.getvalue())  # written through before the command goes on
        return 0

    import dptensor.cli as cli
    from dptensor.cli._options import leaf_parsers

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    for leaf in leaf_parsers(parser):
        leaf.set_defaults(func=command)
    monkeypatch.setattr(sys, "stdout", stream)
    assert main(["decompose", "--example"]) == 0
    assert seen == [b"header\n"]
    assert not stream.line_buffering


def test_compare_with_mean_warns_only_when_worse():
    truth = np.array([1.0, 2.0, 3.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        error, baseline = compare_with_mean(truth, truth + 0.1)
    assert error == pytest.approx(0.1) and baseline == pytest.approx(np.std(truth))
    with pytest.warns(HeldOutUtilityWarning, match=r"worse than predicting one constant.*; use more data"):
        compare_with_mean(truth, truth[::-1], advice="use more data")


@pytest.fixture()
def completion_files(tmp_path):
    prob = datasets.make_low_rank_completion((12, 10, 8), 2, snr=100.0, missing_ratio=0.5, random_state=0)
    train, test = datasets.train_test_split_entries(prob.observed, 0.2, random_state=1)
    write = datasets.write_entries
    return write(tmp_path / "train.csv", train), write(tmp_path / "test.csv", test)


def test_private_completion_below_the_mean_says_so(completion_files, tmp_path, capsys):
    train_path, test_path = completion_files
    summary = tmp_path / "fit.json"
    base = ["complete", str(train_path), "--test", str(test_path), "--rank", "2", "--quiet", "--seed", "0"]
    assert main(base + ["--json", str(summary)]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err and "predicting their mean" in captured.out
    payload = json.loads(summary.read_text())
    assert payload["test_rmse"] < payload["test_rmse_constant"]
    # input perturbation at epsilon 0.05: Laplace noise of scale 20 x the range on every value
    assert main(base + ["--privacy", "input", "--neighbouring", "entry-value", "--epsilon", "0.05",
                        "--value-range", "0", "1", "--json", str(summary)]) == 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("dptensor complete: warning: held-out RMSE") and err.count("\n") == 0
    assert "--privacy input at --epsilon 0.05" in err and "--privacy als" in err
    assert "(HeldOutUtilityWarning)" in err
    payload = json.loads(summary.read_text())
    assert payload["test_rmse"] > payload["test_rmse_constant"]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_decompose_messages_name_the_option(tmp_path, capsys):
    sym = tmp_path / "sym.npy"
    np.save(sym, np.zeros((3, 3, 3)))
    data = tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).standard_normal((50, 3)))
    base = ["decompose", "--online", str(data), "--rank", "1", "--batch-size", "5", "--cycle", "--quiet"]
    assert main([*base, "--checkpoint", str(sym)]) == 2
    err = _one_error_line(capsys)
    assert f"--checkpoint {sym}" in err and "not an OnlineTensorPower checkpoint" in err
    assert "context manager" not in err
    counts = tmp_path / "counts.npz"
    scipy.sparse.save_npz(counts, scipy.sparse.random(20, 10, density=0.5, format="csr", random_state=0))
    for matrix in (counts, data):
        assert main(["decompose", str(matrix), "--rank", "2", "--quiet"]) == 2
        err = _one_error_line(capsys)
        assert f"--moment-of {matrix}" in err and "not a d x d x d tensor" in err


def test_online_csv_header_is_skipped(tmp_path, capsys):
    rows = np.random.default_rng(0).standard_normal((40, 3))
    plain, headed = tmp_path / "plain.csv", tmp_path / "headed.csv"
    np.savetxt(plain, rows, delimiter=",")
    np.savetxt(headed, rows, delimiter=",", header="a,b,c", comments="")
    assert headed.read_text().startswith("a,b,c\n")
    np.testing.assert_array_equal(np.vstack(list(CsvStream(headed, 7))), np.vstack(list(CsvStream(plain, 7))))
    assert len(np.vstack(list(CsvStream(headed, 7, skip_header=0, comments="a")))) == 40
    outputs = []
    for path in (plain, headed):
        out = tmp_path / f"{path.stem}.json"
        assert main(["decompose", "--online", str(path), "--rank", "1", "--batch-size", "10", "--cycle",
                     "--quiet", "--seed", "0", "--out", str(out)]) == 0
        outputs.append(json.loads(out.read_text())["weights"])
    assert outputs[0] == outputs[1]


def test_short_online_stream_gives_command_line_advice(tmp_path, capsys):
    path = tmp_path / "short.csv"
    np.savetxt(path, np.ones((3, 2)), delimiter=",")
    assert main(["decompose", "--online", str(path), "--rank", "2", "--batch-size", "10", "--quiet"]) == 2
    err = _one_error_line(capsys)
    assert "pass --cycle" in err and "--batch-size" in err
    assert "partial_fit" not in err and "resume=True" not in err and "cycle=True" not in err


def _text_corpus(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(30):
        (folder / f"d{i:02d}.txt").write_text(f"apple banana cherry w{i} dog n{i % 3} egg\n")
    return folder


def test_min_df_above_the_corpus_names_the_option(tmp_path, capsys):
    folder = _text_corpus(tmp_path)
    with pytest.raises(ValueError, match=r"min_df=5000 keeps only words in at least 5000 .*of the 30"):
        load_text_corpus(folder, min_df=5000)
    with pytest.raises(ValueError, match=r"at least 15 documents, but max_df=0.2 .* at most 6"):
        load_text_corpus(folder, min_df=0.5, max_df=0.2)
    assert load_text_corpus(folder, min_df=30).vocabulary == ["apple", "banana", "cherry", "dog", "egg"]
    assert main(["lda", "fit", str(folder), "--topics", "2", "--min-df", "5000", "--quiet"]) == 2
    err = _one_error_line(capsys)
    assert "--min-df" in err and "corresponds to" not in err  # not scikit-learn's own wording


def test_lda_epsilon_without_delta_fails_before_reading(tmp_path, capsys):
    missing = tmp_path / "no-such-corpus"
    for method in ("spectral", "vi"):
        assert main(["lda", "fit", str(missing), "--topics", "2", "--method", method, "--epsilon", "1",
                     "--quiet"]) == 2
        err = _one_error_line(capsys)
        assert "--delta is required with --epsilon" in err and "no such" not in err


def test_random_state_accepts_a_legacy_random_state():
    corpus = datasets.make_lda_corpus(300, 30, 3, random_state=0)
    fits = [SpectralLDA(3, 1.0, random_state=np.random.RandomState(0)).fit(corpus.counts) for _ in range(2)]
    np.testing.assert_array_equal(fits[0].components_, fits[1].components_)
    state = np.random.RandomState(5)
    first, second = check_random_state(state).random(), check_random_state(state).random()
    assert first != second  # successive calls continue the RandomState's stream
    assert check_random_state(np.random.RandomState(5)).random() == first
    with pytest.raises(TypeError, match="RandomState"):
        check_random_state("seed")


def test_accountant_names_say_what_they_mean_and_where():
    tensor = np.zeros((3, 3, 3))
    with pytest.raises(ValueError, match=r"'advanced' \(Algorithm 3.*does not apply for input_pert"):
        input_perturbation(tensor, 1, epsilon=0.5, delta=1e-6, accountant="advanced")
    with pytest.raises(ValueError, match=r"'classic' \(.*single release.*for private_power_method"):
        private_power_method(tensor, 1, epsilon=0.5, delta=1e-6, accountant="classic")
    assert set(ACCOUNTANT_MEANINGS) == set(ACCOUNTANTS) | set(INPUT_ACCOUNTANTS)


def test_no_factors_needs_no_rank(completion_files, capsys):
    train_path, test_path = completion_files
    assert main(["complete", str(train_path), "--test", str(test_path), "--no-factors", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("offsets alone (--no-factors), shape (12, 10, 8)")
    assert main(["complete", str(train_path), "--quiet"]) == 2
    assert "--rank is required" in _one_error_line(capsys)
    assert main(["complete", str(train_path), "--no-factors", "--rank", "2", "--quiet"]) == 2
    assert "--rank: --no-factors fits the offsets alone" in _one_error_line(capsys)


def test_json_outputs_record_version_command_and_settings(completion_files, tmp_path, capsys):
    out = tmp_path / "result.json"
    train_path, _ = completion_files
    assert main(["complete", str(train_path), "--no-factors", "-q", "--seed", "3", "--json", str(out)]) == 0
    run = json.loads(out.read_text())["run"]
    assert run["dptensor_version"] == dptensor.__version__ and run["command"] == "dptensor complete"
    assert run["settings"]["seed"] == 3 and run["settings"]["no_factors"] is True
    assert run["settings"]["json"] == str(out) and run["settings"]["entries"] == str(train_path)
    # outside a command nothing is added
    assert "run" not in json.loads(write_json(tmp_path / "plain.json", {"a": 1}).read_text())


def test_theta_csv_has_a_header_and_document_ids(tmp_path, capsys):
    corpus = datasets.make_lda_corpus(60, 20, 2, doc_length=30, random_state=0)
    docword = tmp_path / "docword.toy.txt"
    datasets.write_uci_bow(corpus.counts, docword)
    model, theta_path = tmp_path / "model.json", tmp_path / "theta.csv"
    assert main(["lda", "fit", str(docword), "--topics", "2", "--quiet", "--out", str(model)]) == 0
    assert main(["lda", "transform", str(model), str(docword), "--out", str(theta_path)]) == 0
    with open(theta_path) as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["document", "topic_1", "topic_2"]
    assert [int(row[0]) for row in rows[1:]] == list(range(60))
    theta = np.array([[float(x) for x in row[1:]] for row in rows[1:]])
    np.testing.assert_allclose(theta.sum(axis=1), 1.0, atol=1e-4)


def _completion_row(figure, method, x, rep, err):
    return {"figure": figure, "model": "cp", "method": method, "epsilon": x if figure == 2 else 1.0,
            "missing_ratio": 0.5 if figure == 2 else x, "repeat": rep, "rmse_mean_predictor": 0.5,
            "rmse": err, "rmse_noisy": err + 0.1, "holds": None if method == "baseline" else True,
            "seconds": 0.1}


def test_completion_experiment_names_averages_and_the_mean_predictor_apart(tmp_path):
    from dptensor.research.experiments import completion

    rows = [_completion_row(2, "baseline", float("nan"), rep, err) for rep, err in enumerate((0.2, 0.4))]
    rows += [_completion_row(2, "IP (Alg. 1)", eps, rep, eps + rep) for eps in (0.1, 1.0) for rep in (0, 1)]
    rows += [_completion_row(3, "baseline", ratio, 0, 0.3) for ratio in (0.1, 0.5)]
    summary = completion.summarise(rows)
    baseline = [r for r in summary if r["figure"] == 2 and r["method"] == "baseline"]
    assert len(baseline) == 1 and baseline[0]["n"] == 2  # every NaN-epsilon repeat in one group
    assert baseline[0]["rmse_avg"] == pytest.approx(0.3) and baseline[0]["rmse_std"] == pytest.approx(0.1)
    assert {"rmse_avg", "rmse_std", "rmse_noisy_avg", "rmse_mean_predictor"} <= set(summary[0])
    assert "rmse_mean" not in summary[0]
    assert completion._spread_label([1, 1]) == "one repeat per point: no spread shown"
    assert completion._spread_label([5, 5]) == "average +- std over 5 repeats"
    assert completion._spread_label([3, 5]) == "average +- std over 3-5 repeats"
    rows_csv = write_csv(tmp_path / "completion.csv", rows)
    files = completion.redraw_from_rows(rows_csv, tmp_path)
    with open(files["summary_csv"], newline="") as handle:
        again = list(csv.DictReader(handle))
    assert len(again) == len(summary) and float(again[0]["rmse_avg"]) == pytest.approx(0.3)
    assert all((tmp_path / name).stat().st_size > 1000
               for name in ("completion_figure2.png", "completion_figure3.png"))


def test_privacy_utility_grid_does_not_warn_about_itself(tmp_path):
    from dptensor.research.experiments.privacy_utility import run as privacy_utility

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = privacy_utility(tmp_path, quick=True, dim=8, rank=1, n_trials=1, epsilons=[1.0, 100.0],
                                 n_restarts=2, n_iter=2, progress=False)
    assert not [w for w in caught if issubclass(w.category, PrivacyWarning)]
    assert "on purpose" in Path(result.files["md"]).read_text()
    # outside the experiment the same call still warns
    with pytest.warns(PrivacyWarning, match="epsilon=100 exceeds 10"):
        private_power_method(np.zeros((3, 3, 3)), 1, epsilon=100, delta=1e-6, n_restarts=2, n_iter=2)


def test_private_lda_figure3_has_a_title_and_whole_k_ticks(tmp_path, monkeypatch):
    from dptensor.research.experiments import private_lda

    rows = [{"figure": 3, "panel": "a", "alpha0": a, "n_topics": 3, "value": 1 / a} for a in (0.1, 1.0, 10.0)]
    rows += [{"figure": 3, "panel": "b", "alpha0": 1000.0, "n_topics": k, "value": 0.01 * k} for k in (3, 6)]
    drawn = {}

    def keep(fig, path):
        drawn["title"] = fig._suptitle.get_text() if fig._suptitle else ""
        drawn["ticks"] = list(fig.axes[1].get_xticks())
        return path

    monkeypatch.setattr(private_lda, "save_figure", keep)
    private_lda.plot_figure3_from_csv(write_csv(tmp_path / "f3.csv", rows), tmp_path)
    assert "Figure 3" in drawn["title"]
    assert drawn["ticks"] == [3, 6]


def test_complete_day_origin_option(temporal_split, tmp_path, capsys):
    train_path, test_path = temporal_split
    out = tmp_path / "pred.csv"
    base = ["complete", str(train_path), "--movielens", "--test", str(test_path), "--no-factors", "--quiet",
            "--out", str(out)]
    assert main([*base, "--day-origin", str(T0 - 2 * DAY)]) == 0
    with open(out) as handle:
        assert [int(row["k"]) for row in csv.DictReader(handle)] == [7, 8]
    capsys.readouterr()
    assert main([*base, "--day-origin", str(T0 + DAY)]) == 2
    assert "precedes day_origin" in _one_error_line(capsys)
    # under the user relation the earliest rating is private: the origin must be declared
    private = ["--privacy", "als", "--neighbouring", "user", "--shape", "2", "3", "9", "--value-range", "1",
               "5", "--epsilon", "1"]
    assert main([*base, *private]) == 2
    assert "needs --day-origin" in _one_error_line(capsys)
    assert main(["complete", str(train_path), "--no-factors", "--day-origin", "0"]) == 2
    assert "--day-origin" in _one_error_line(capsys)


def test_audit_treats_a_utility_warning_as_part_of_the_release():
    from dptensor.privacy.audit import observable_differences, observe

    def run(worse: bool, category=HeldOutUtilityWarning):
        print("fit done")
        if worse:
            warnings.warn("held-out RMSE 2 is worse than ...", category, stacklevel=1)
            print("dptensor complete: warning: held-out RMSE 2 is worse (HeldOutUtilityWarning)",
                  file=sys.stderr)
        return 0

    assert not observable_differences(observe(run, True), observe(run, False))

    def short_vocabulary(short: bool):
        print("fit done")
        if short:
            warnings.warn("only 8 of the 50 words asked for passed", ReleaseUtilityWarning, stacklevel=1)
            print("dptensor lda fit: warning: only 8 of the 50 words asked for passed "
                  "(ReleaseUtilityWarning)", file=sys.stderr)
        return 0

    assert not observable_differences(observe(short_vocabulary, True), observe(short_vocabulary, False))
    # any other warning still tells the runs apart
    assert observable_differences(observe(run, True, PrivacyWarning), observe(run, False, PrivacyWarning))
