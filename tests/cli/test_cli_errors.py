"""The command line's convention on bad input: one line naming the flag, exit code 2, nothing written.

A table of (command line, exit code, part of the message); every row also checks that stderr has
one line, no traceback, and that no output file (or temporary file) was left behind. Ctrl-C in a
command exits 130 with one line. Also the CLI bugs of issue 17 (IDs in their base, ``--out`` paths
as written, progress of the batch power method, ``python -m dptensor``, examples in ``--help``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import numpy as np
import pytest

from dptensor.cli import EXIT_INTERRUPTED, build_parser, main
from dptensor.cli._options import leaf_parsers
from dptensor.datasets import make_lda_corpus, write_uci_bow

DOCWORD = "docword.small.txt"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Input files of the table: data, a text file named .npy, a corpus, a model, ratings."""
    d = tmp_path_factory.mktemp("cli_errors")
    rng = np.random.default_rng(0)
    np.save(d / "X.npy", rng.random((300, 5)))
    (d / "text.npy").write_text("1 2 3\n4 5 6\n")
    np.save(d / "corpus.npy", np.ones((4, 4)))
    corpus = make_lda_corpus(300, 40, 3, alpha=0.3, random_state=0)
    write_uci_bow(corpus.counts, d / DOCWORD, [f"w{i}" for i in range(40)])
    assert (
        main(["lda", "fit", str(d / DOCWORD), "-k", "3", "--seed", "0", "-q", "--out", str(d / "model.json")])
        == 0
    )
    (d / "bad.json").write_text('{"model": "SpectralLDA"}\n')
    (d / "not_json.json").write_text("topics: 3\n")
    rows = ["i,j,k,value"] + [
        f"{i},{j},{k},{(i + j + k) % 5 + 1}" for i in range(4) for j in range(3) for k in range(2)
    ]
    (d / "train.csv").write_text("\n".join(rows) + "\n")
    (d / "a_file.txt").write_text("not a folder\n")
    (d / "outdir").mkdir()
    return d


def _case(argv, message, code=2):
    return pytest.param(argv, code, message, id=" ".join(argv)[:70])


CASES = [
    # decompose
    _case(
        ["decompose", "--example", "--seed", "-5"], "argument --seed: a seed must be a non-negative integer"
    ),
    _case(["decompose", "--example", "--rank", "0"], "argument --rank/-k: must be a positive integer"),
    _case(["decompose", "--example", "--tol", "nan"], "argument --tol: must be a finite number"),
    _case(
        ["decompose", "--example", "--cycle"],
        "--cycle: these options of the online mode apply only with --online",
    ),
    _case(
        ["decompose", "--example", "--batch-size", "10", "--checkpoint", "c.npz"],
        "--batch-size, --checkpoint: these options of the online mode",
    ),
    _case(
        ["decompose", "--online", "{d}/X.npy", "--rank", "2", "--batch-size", "100", "--tol", "1e-3"],
        "--tol: --online sets its steps with --target-error",
    ),
    _case(
        ["decompose", "--online", "{d}/X.npy", "--rank", "2", "--batch-size", "100", "--iters", "3", "-q"],
        "pass --cycle",
    ),
    _case(["decompose", "--online", "{d}/X.npy", "--rank", "2"], "--batch-size is required with --online"),
    _case(  # refused before any connection to the (here unreachable) scheduler is tried
        ["decompose", "--online", "{d}/X.npy", "--rank", "2", "--batch-size", "100", "--scheduler", "tcp://127.0.0.1:9"],
        "--scheduler: --online reads the file here once; use --jobs",
    ),
    _case(["decompose", "--example", "--out", "{d}/outdir"], "--out {d}/outdir is a directory"),
    _case(["decompose", "--example", "--out", "{d}/missing/r.json"], "the folder {d}/missing does not exist"),
    _case(
        ["decompose", "{d}/text.npy", "--rank", "2"], "text.npy is named .npy but is not a binary NumPy file"
    ),
    _case(["decompose", "{d}/nothing.npy", "--rank", "2"], "no such file"),
    _case(["decompose", "--example", "--bogus"], "unrecognized arguments: --bogus"),
    _case(
        ["decompose", "--example", "--jobs", "2"], "--jobs and --scheduler apply to the passes over records"
    ),
    # lda
    _case(
        ["lda", "fit", f"{{d}}/{DOCWORD}", "-k", "2", "--top", "0"],
        "argument --top: must be a positive integer",
    ),
    _case(["lda", "fit", f"{{d}}/{DOCWORD}", "-k", "0"], "argument --topics/-k: must be a positive integer"),
    _case(["lda", "fit", f"{{d}}/{DOCWORD}", "-k", "2", "--alpha0", "-1"], "argument --alpha0"),
    _case(["lda", "fit", f"{{d}}/{DOCWORD}", "-k", "2", "--seed", "-5"], "argument --seed"),
    _case(
        ["lda", "fit", "{d}/corpus.npy", "-k", "2"],
        "corpus.npy is a binary NumPy .npy array, not a text file",
    ),
    _case(["lda", "fit", f"{{d}}/{DOCWORD}", "-k", "2", "--passes", "3"], "--passes: options of --method vi"),
    _case(
        ["lda", "fit", f"{{d}}/{DOCWORD}", "-k", "2", "--method", "vi", "--config", "2"],
        "--config: options of the spectral fit",
    ),
    _case(
        ["lda", "fit", f"{{d}}/{DOCWORD}", "-k", "2", "--delta", "1e-6"],
        "--delta: privacy options need --epsilon",
    ),
    _case(
        ["lda", "fit", f"{{d}}/{DOCWORD}", "-k", "2", "--stop-words", "english"],
        "--stop-words: these choose the words of a plain-text corpus",
    ),
    _case(
        ["lda", "fit", f"{{d}}/{DOCWORD}", "-k", "2", "--out", "{d}/model.txt"],
        "--out {d}/model.txt: the file name must end in .json or .npz",
    ),
    _case(["lda", "transform", "{d}/bad.json", f"{{d}}/{DOCWORD}"], "bad.json has no 'components'"),
    _case(["lda", "transform", "{d}/not_json.json", f"{{d}}/{DOCWORD}"], "not_json.json is not JSON"),
    _case(
        ["lda", "transform", "{d}/model.json", f"{{d}}/{DOCWORD}", "--out", "{d}/theta.pdf"],
        "the file name must end in .txt or .csv or .npy",
    ),
    # complete
    _case(["complete", "{d}/train.csv", "--rank", "1000000000"], "choose a smaller --rank"),
    _case(
        ["complete", "{d}/train.csv", "--rank", "2", "--epsilon", "1"],
        "--epsilon: privacy options need --privacy MODE",
    ),
    _case(
        ["complete", "{d}/train.csv", "--rank", "2", "--privacy", "input", "--neighbouring", "entry-value"],
        "--privacy input needs --epsilon",
    ),
    _case(
        [
            "complete",
            "{d}/train.csv",
            "--rank",
            "2",
            "--privacy",
            "input",
            "--epsilon",
            "1",
            "--delta",
            "1e-6",
            "--neighbouring",
            "entry-value",
        ],
        "--delta: --privacy input is pure epsilon-DP",
    ),
    _case(
        ["complete", "{d}/train.csv", "--rank", "2", "--lr", "0.1"],
        "--lr: --lr, --epochs and --batch-size apply",
    ),
    _case(
        ["complete", "{d}/train.csv", "--rank", "2", "--one-based"],
        "leave out one_based=True (the --one-based flag)",
    ),
    _case(
        ["complete", "{d}/train.csv", "--rank", "2", "--reg-core", "0.1"],
        "--reg-core applies only to --model tucker",
    ),
    _case(["complete", "{d}/X.npy", "--rank", "2"], "X.npy is a binary NumPy .npy array, not a text file"),
    _case(["complete", "{d}/train.csv", "--rank", "2", "--out", "{d}/outdir"], "is a directory"),
    _case(
        ["complete", "{d}/train.csv", "--rank", "2", "--json", "{d}/no/fit.json"], "--json {d}/no/fit.json"
    ),
    # single-topic
    _case(["single-topic", "fit", "{d}/text.npy", "-k", "2", "--n-words", "5"], "is named .npy but is"),
    _case(
        ["single-topic", "fit", "{d}/X.npy", "-k", "2", "--epsilon", "1"],
        "--epsilon: privacy options need --mechanism",
    ),
    _case(["single-topic", "fit", "{d}/X.npy", "-k", "2", "--top", "0"], "argument --top"),
    # experiment
    _case(
        ["experiment", "noise-tolerance", "--trials", "0"], "argument --trials: must be a positive integer"
    ),
    _case(
        ["experiment", "noise-tolerance", "--trials", "-1"], "argument --trials: must be a positive integer"
    ),
    _case(["experiment", "noise-tolerance", "--seed", "-5"], "argument --seed"),
    _case(
        ["experiment", "whitening", "--quick", "--out", "{d}/a_file.txt"], "--out {d}/a_file.txt is a file"
    ),
    # budget
    _case(["budget", "create", "{d}/b.ledger", "--epsilon", "0", "--delta", "1e-5"], "argument --epsilon"),
    _case(
        ["budget", "create", "{d}/b.ledger", "--epsilon", "1", "--delta", "1"],
        "argument --delta: must lie in (0, 1)",
    ),
    _case(["budget", "show", "{d}/nothing.ledger"], "nothing.ledger"),
    # every missing option of a private text fit in one error, not one per try
    _case(["lda", "fit", "{d}/a_file.txt", "--topics", "2", "--epsilon", "1"],
          "2 options to fix: (1) --delta is required with --epsilon"),
    _case(["lda", "fit", "{d}/a_file.txt", "--topics", "2", "--epsilon", "1"],
          "(2) a private fit of plain text needs a public vocabulary file (--vocab) or a private one"),
    # a library's parameter names are given as the flags that set them (flag_names)
    _case(["lda", "plan", "-n", "100", "-V", "200", "-k", "300", "--epsilon", "1", "--delta", "1e-6"],
          "--topics=300 exceeds --words=200"),
    _case(["lda", "plan", "-n", "100", "-V", "200", "-k", "3", "--epsilon", "1", "--delta", "1e-6",
           "--typical-length", "2"], "--typical-length must be at least 3 tokens"),
    _case(["complete", "{d}/train.csv", "--rank", "2", "--value-range", "5", "1"],
          "--value-range must be finite with max > min"),
    _case(["complete", "plan", "--users", "9", "--items", "9", "--epsilon", "1", "--within", "0.9"],
          "--within must be at least 1"),
]


def _files(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


@pytest.mark.parametrize(("argv", "code", "message"), CASES)
def test_bad_input_is_one_line_naming_the_flag(work, argv, code, message, capsys, monkeypatch):
    monkeypatch.chdir(work / "outdir")
    before = _files(work)
    argv = [a.replace("{d}", str(work)) for a in argv]
    assert main(argv) == code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if ": error: " in line]
    assert len(errors) == 1 and errors[0] == lines[-1], err  # progress lines may come before it
    assert "Traceback" not in err
    assert errors[0].startswith(f"dptensor {argv[0]}")
    assert message.replace("{d}", str(work)) in errors[0]
    assert _files(work) == before  # no output, no temporary file, no created folder


def test_ctrl_c_exits_130_with_one_line_and_no_file(tmp_path, capsys, monkeypatch):
    import dptensor.cli.decompose as decompose

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(decompose, "power_method", interrupted)
    out = tmp_path / "r.json"
    assert main(["decompose", "--example", "-q", "--out", str(out)]) == EXIT_INTERRUPTED
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "interrupted" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_writing_leaves_no_partial_file(tmp_path, capsys, monkeypatch):
    import dptensor._files as files

    def interrupted(self, *args, **kwargs):
        with open(self, "w") as handle:
            handle.write('{"weights": [1.0,')  # half of the file, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(files.Path, "write_text", interrupted)
    assert main(["decompose", "--example", "-q", "--out", str(tmp_path / "r.json")]) == EXIT_INTERRUPTED
    assert list(tmp_path.iterdir()) == []


def test_every_command_help_ends_with_an_example():
    parser = build_parser()
    leaves = list(leaf_parsers(parser))
    assert len(leaves) >= 13
    for leaf in [parser, *leaves]:
        text = leaf.format_help().rstrip()
        assert "\nexample" in text, leaf.prog
        assert "dptensor " in text.rsplit("\nexample", 1)[1], leaf.prog  # the help ends with an example
        assert leaf.get_default("_parser") in (None, leaf)
        assert any(a.dest == "quiet" for a in leaf._actions) or leaf is parser, f"{leaf.prog} has no --quiet"


def _help_sections(argv: list[str]) -> tuple[str, list[tuple[str, list[str]]]]:
    """``dptensor <argv> --help``, and (heading, flags) of each of its non-empty groups, as printed."""
    sub = build_parser()
    for name in argv:
        sub = next(a for a in sub._actions if isinstance(a.choices, dict) and name in a.choices).choices[name]
    text = sub.format_help()
    sections, at = [], 0
    for group in sub._action_groups:
        flags = [a.option_strings[0] for a in group._group_actions
                 if a.option_strings and a.help != argparse.SUPPRESS]
        if not group._group_actions:
            continue
        at = text.index(f"\n{group.title}:\n", at) + 1  # printed, and after the group before it
        sections.append((group.title, [f for f in flags if f != "-h"]))
    for _, flags in sections:
        for flag in flags:
            assert f"  {flag}" in text, flag
    return text, sections


#: issue 37: the options a first ``lda fit`` needs, before any other group of its --help.
LDA_EVERYDAY = {"--topics", "--alpha0", "--method", "--seed", "--quiet", "--force", "--out", "--vocab",
                "--token-pattern", "--encoding", "--epsilon", "--delta", "--private-vocab", "--vocab-share",
                "--ledger"}
LDA_RESEARCH = {"--config", "--sensitivity", "--calibration", "--budget-split", "--private-whitening",
                "--whitening-subspace", "--topic-recovery", "--no-clip", "--clip", "--third-clip",
                "--whitening-words", "--public-corpus", "--decomposition", "--whitening", "--accountant",
                "--allow-unproven", "--noise", "--max-doc-words", "--typical-length", "--batch-size",
                "--passes", "--max-doc-length", "--vi-init", "--vi-init-share"}
COMPLETE_EVERYDAY = {"--rank", "--seed", "--quiet", "--test", "--out", "--json", "--one-based", "--shape",
                     "--value-range", "--movielens", "--day-origin", "--privacy", "--neighbouring",
                     "--epsilon", "--delta", "--ledger"}
COMPLETE_RESEARCH = {"--model", "--no-factors", "--solver", "--offsets", "--lr", "--reg", "--reg-core",
                     "--reg-bias", "--epochs", "--max-iter", "--early-stopping", "--batch-size", "--clip",
                     "--max-ratings", "--start", "--noise", "--allow-unproven"}


@pytest.mark.parametrize(("argv", "everyday", "research", "first"), [
    (["lda", "fit"], LDA_EVERYDAY, LDA_RESEARCH, ["options", "corpus", "differential privacy"]),
    (["complete", "fit"], COMPLETE_EVERYDAY, COMPLETE_RESEARCH,
     ["options", "entries", "differential privacy"]),
])  # fmt: skip
def test_help_lists_the_everyday_options_first_and_the_research_options_last(argv, everyday, research, first):
    """issue 37: --help opens with what a user needs; the papers' knobs sit under 'research options', last."""
    text, sections = _help_sections(argv)
    assert text.split("\n\n")[0].startswith("usage: ") and text.split("\n\n")[0].endswith("[option ...]")
    assert [title for title, _ in sections[:3]] == first
    assert {flag for _, flags in sections[:3] for flag in flags} == everyday and len(everyday) <= 16
    titles = [title for title, _ in sections]
    n_research = sum(title.startswith("research options") for title in titles)
    assert n_research >= 1 and all(t.startswith("research options") for t in titles[-n_research:])
    assert {flag for _, flags in sections[-n_research:] for flag in flags} == research
    if argv == ["lda", "fit"]:
        assert {"--jobs", "--scheduler", "--report", "--top"}.isdisjoint(everyday | research)


def test_help_groups_change_no_parsing():
    """Options under any heading parse as before (argument groups only change the listing)."""
    args = build_parser().parse_args(["lda", "fit", "c.txt", "-k", "3", "--epsilon", "1", "--delta", "1e-6",
                                      "--config", "2", "--whitening-words", "all", "--passes", "2",
                                      "--private-vocab", "50", "--top", "4", "--jobs", "2"])
    assert (args.topics, args.epsilon, args.config, args.whitening_words, args.passes, args.private_vocab,
            args.top, args.jobs, args.corpus) == (3, 1.0, 2, "all", 2, 50, 4, 2, "c.txt")
    args = build_parser().parse_args(["complete", "fit", "e.csv", "-r", "2", "--model", "tucker", "--lr",
                                      "0.1", "--privacy", "als", "--ledger", "b.json"])
    assert (args.rank, args.model, args.lr, args.privacy, args.ledger, args.entries) == (
        2, "tucker", 0.1, "als", "b.json", "e.csv")
    audit = build_parser().parse_args(["audit", "complete", "e.csv", "-r", "2", "--runs", "3"])
    assert not hasattr(audit, "ledger") and audit.runs == 3  # the audit charges nothing


def test_every_noise_option_says_what_opendp_does_not_cover():
    """docs/protection.md: some releases draw NumPy noise under --noise opendp; no help hides that."""
    noise_options = [action for leaf in leaf_parsers(build_parser()) for action in leaf._actions
                     if "--noise" in action.option_strings]
    assert len(noise_options) >= 3  # complete, lda fit, single-topic fit (and the audits that share them)
    for action in noise_options:
        assert "not covered here:" in action.help and "docs/protection.md" in action.help, action.help
    complete = next(leaf for leaf in leaf_parsers(build_parser()) if leaf.prog.endswith("complete"))
    assert "output_clipped" in complete.format_help()


def test_python_dash_m_dptensor():
    done = subprocess.run(
        [sys.executable, "-m", "dptensor", "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.startswith("dptensor ")


def test_batch_decompose_shows_progress_unless_quiet(capsys, monkeypatch):
    monkeypatch.setattr("dptensor._progress.bars_shown", lambda stream=None: True)  # as on a terminal
    assert main(["decompose", "--example", "--seed", "0"]) == 0
    assert "components" in capsys.readouterr().err
    assert main(["decompose", "--example", "--seed", "0", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert (
        main(["decompose", "--online", "missing.npy", "--rank", "2", "--batch-size", "5", "--no-progress"])
        == 2
    )
    assert "no such file" in capsys.readouterr().err  # the old spelling still parses (hidden alias)


def _predictions(path):
    rows = np.loadtxt(path, delimiter=",", skiprows=1)
    return rows[:, :3].astype(int)


def test_one_based_ids_are_written_back_one_based(tmp_path, capsys):
    rows = ["1 1 1 3", "1 2 2 4", "2 1 2 5", "3 3 1 2", "2 3 2 1", "3 2 1 4"]
    (tmp_path / "train.txt").write_text("\n".join(rows) + "\n")
    out = tmp_path / "pred.csv"
    assert (
        main(
            [
                "complete",
                str(tmp_path / "train.txt"),
                "--rank",
                "1",
                "--one-based",
                "-q",
                "--seed",
                "0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    ids = _predictions(out)
    np.testing.assert_array_equal(ids, [[int(x) for x in r.split()[:3]] for r in rows])


def test_movielens_ids_are_written_back_as_in_the_file(tmp_path):
    day = 86400
    rows = [
        (1, 1, 5, 0),
        (1, 2, 3, day),
        (2, 1, 4, 2 * day),
        (3, 2, 2, day),
        (2, 3, 1, 0),
        (3, 3, 4, 2 * day),
    ]
    (tmp_path / "u.data").write_text("\n".join("\t".join(map(str, r)) for r in rows) + "\n")
    out = tmp_path / "pred.csv"
    assert (
        main(
            [
                "complete",
                str(tmp_path / "u.data"),
                "--movielens",
                "--rank",
                "1",
                "-q",
                "--seed",
                "0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    ids = _predictions(out)
    np.testing.assert_array_equal(ids[:, :2], [r[:2] for r in rows])  # user and item ids as in u.data
    np.testing.assert_array_equal(ids[:, 2], [r[3] // day for r in rows])  # the day index, from 0


@pytest.mark.parametrize(
    ("name", "reader"),
    [
        ("theta.txt", lambda p: np.loadtxt(p)),
        ("theta.csv", lambda p: np.loadtxt(p, delimiter=",", skiprows=1)[:, 1:]),  # header, document id
        ("theta.npy", lambda p: np.load(p)),
    ],
)
def test_lda_transform_writes_exactly_the_out_path(work, tmp_path, name, reader, capsys):
    out = tmp_path / name
    assert main(["lda", "transform", str(work / "model.json"), str(work / DOCWORD), "--out", str(out)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == [name]
    theta = reader(out)
    assert theta.shape == (300, 3)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0, atol=1e-4)
    assert f"wrote {out}" in capsys.readouterr().out


def _dptensor(*argv, **popen):
    return subprocess.Popen([sys.executable, "-m", "dptensor", *argv], stderr=subprocess.PIPE, **popen)


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    ledger = str(tmp_path / "budget.db")
    assert main(["budget", "create", ledger, "--epsilon", "1", "--delta", "1e-6"]) == 0
    # the reader is gone before the first line is written: the write fails, deterministically
    process = _dptensor("budget", "show", ledger, stdout=subprocess.PIPE)
    process.stdout.close()
    _, err = process.communicate(timeout=120)
    assert process.returncode == 141  # 128 + SIGPIPE, as a shell reports for cat or yes
    assert err.decode() == ""  # no "Broken pipe" error, no "Exception ignored" at exit


def test_piping_into_head_prints_no_broken_pipe(tmp_path):
    ledger = str(tmp_path / "budget.db")
    assert main(["budget", "create", ledger, "--epsilon", "1", "--delta", "1e-6"]) == 0
    head = subprocess.run(["head", "-1"], stdin=(show := _dptensor("budget", "show", ledger,
                                                                    stdout=subprocess.PIPE)).stdout,
                          capture_output=True, timeout=120, check=True)
    show.stdout.close()
    _, err = show.communicate(timeout=120)
    assert len(head.stdout.decode().splitlines()) == 1
    assert "Broken pipe" not in err.decode() and "Traceback" not in err.decode()
    assert show.returncode in (0, 141)  # 0 when everything fitted in the pipe before head left


def test_progress_bars_only_on_a_terminal(tmp_path, capsys, monkeypatch):
    import io

    from dptensor._progress import bars_shown, progress_bar

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal, log = Terminal(), io.StringIO()
    for stream in (terminal, log):
        with progress_bar(total=3, desc="steps", file=stream) as bar:
            bar.update(3)
    assert "\r" in terminal.getvalue() and "steps" in terminal.getvalue()
    assert log.getvalue() == ""  # a log file gets no bar
    with progress_bar(total=3, file=terminal, enabled=False) as bar:  # --quiet
        bar.update(3)
    assert bars_shown(terminal) and not bars_shown(log)
    # a command whose standard error is not a terminal (here captured) keeps its progress lines only
    counts = make_lda_corpus(200, 30, 2, alpha=0.5, random_state=0).counts
    write_uci_bow(counts, tmp_path / "docword.toy.txt")
    assert main(["lda", "fit", str(tmp_path / "docword.toy.txt"), "-k", "2", "--method", "vi",
                 "--passes", "2", "--seed", "0"]) == 0
    err = capsys.readouterr().err
    assert "200 documents, 30 words" in err  # progress_line still prints
    assert "\r" not in err and "VI steps" not in err


def test_flag_names_replaces_whole_parameter_names_only():
    from dptensor.cli._options import flag_names

    with pytest.raises(ValueError, match=r"^--words=3 but max_words_per_document=2$"):
        with flag_names({"n_words": "--words"}):
            raise ValueError("n_words=3 but max_words_per_document=2")
    with pytest.raises(ValueError, match=r"^value_range/bad\.csv, line 2: --value-range must"):
        with flag_names({"value_range": "--value-range"}):  # a name inside a path stays
            raise ValueError("value_range/bad.csv, line 2: value_range must be finite")

    class Refusal(ValueError):  # a subclass (e.g. a budget refusal) may carry attributes of its own
        pass

    refusal = Refusal("value_range.ledger: value_range is over budget")
    with pytest.raises(Refusal) as caught:
        with flag_names({"value_range": "--value-range"}):
            raise refusal
    assert caught.value is refusal
    original = TypeError("nothing to rename")
    with pytest.raises(TypeError) as caught:
        with flag_names({"n_words": "--words"}):
            raise original
    assert caught.value is original  # re-raised as it was
