"""Every fenced code block of README.md and docs/*.md runs.

* ```` ```python ```` blocks are executed in order, the blocks of one file sharing a namespace;
* ```` ```bash ````/``console``/``sh`` blocks run line by line: ``dptensor ...`` and
  ``python -m dptensor ...`` through :func:`dptensor.cli.main` in-process (exit code 0), and
  ``python -c "..."`` by executing its code; any other command needs a skip marker;
* ```` ```text ```` blocks (usage synopses, printed output) are not run.

Each file runs in a fresh temporary folder holding small versions of the input files the docs
assume (``train.csv``, ``corpus.npz`` + ``vocab.txt``, ``tokens.npy``, ...; see :func:`inputs`).
An HTML comment right before a block marks it ``<!-- skip-test: reason -->`` (never run: a
cluster address, ``pip install``, a benchmark of 10^6 documents) or ``<!-- slow-test: reason -->``
(run only by ``pytest -m slow``); every marker must give its reason.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dptensor.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_LANGUAGES = {"python", "bash", "console", "sh"}
TEXT_LANGUAGES = {"text"}
MARKER = re.compile(r"^<!--\s*(skip-test|slow-test)\s*:(.*?)-->\s*$")
FENCE = re.compile(r"^```(\S*)\s*$")
#: The README opens with the two set-up commands (install + example, install + the whole test
#: suite); CI runs the second on a fresh machine, so the docs test does not run them again.
SETUP_BLOCK_REASON = "the README's set-up commands: pip install and the whole test suite (run by CI)"


@dataclass
class Block:
    path: Path
    line: int
    language: str
    code: str
    marker: str | None = None  # "skip-test" or "slow-test"
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, with the marker on the line before each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start, language = i, match.group(1)
        i += 1
        body = []
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        block = Block(path, start + 1, language, "\n".join(body) + "\n")
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(previous.strip())
        if marker:
            block.marker, block.reason = marker.group(1), marker.group(2).strip()
        elif path.name == "README.md" and not found and start == 0:
            block.marker, block.reason = "skip-test", SETUP_BLOCK_REASON
        found.append(block)
    return found


def commands(code: str) -> list[str]:
    """Shell lines of a block: continuation lines joined, multi-line quoted strings kept whole."""
    result, pending = [], ""
    for raw in code.splitlines():
        pending += raw + "\n"
        if pending.rstrip().endswith("\\"):
            pending = pending.rstrip()[:-1] + " "
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on on the next line
            continue
        if pending.strip():
            result.append(pending.strip())
        pending = ""
    assert not pending.strip(), f"unterminated command: {pending!r}"
    return result


def run_shell_line(line: str, where: str) -> None:
    argv = shlex.split(line, comments=True)
    if not argv:
        return
    if argv[0] == "dptensor":
        argv = argv[1:]
    elif argv[:3] == ["python", "-m", "dptensor"]:
        argv = argv[3:]
    elif argv[:2] == ["python", "-c"] and len(argv) == 3:
        exec(compile(argv[2], f"{where} (python -c)", "exec"), {"__name__": "__main__"})
        return
    else:
        raise AssertionError(f"{where}: cannot run {line!r}; mark the block <!-- skip-test: reason -->")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = main(argv)
    assert code == 0, f"{where}: `{line}` exited {code}: {stderr.getvalue()[-2000:]}"


def run_block(block: Block, namespace: dict) -> None:
    if block.language == "python":
        exec(compile(block.code, block.where, "exec"), namespace)
    else:
        for line in commands(block.code):
            run_shell_line(line, block.where)


def inputs(folder: Path) -> None:
    """Small versions of the files the documented commands read."""
    from dptensor.datasets import (
        make_lda_corpus,
        make_low_rank_completion,
        make_orthogonal_tensor,
        make_single_topic_corpus,
        train_test_split_entries,
        write_entries,
        write_uci_bow,
    )

    rng = np.random.default_rng(0)
    np.save(folder / "tensor.npy", make_orthogonal_tensor(12, 5, noise=0.01, random_state=0).tensor)
    sparse = sp.random(2_000, 20, density=0.2, format="csr", random_state=rng)
    sp.save_npz(folder / "X.npz", sparse)
    sp.save_npz(folder / "data.npz", sparse)
    np.save(folder / "X.npy", rng.random((2_000, 10)))
    corpus = make_lda_corpus(3_000, 200, 5, alpha=0.2, doc_length=60, random_state=0)
    # words of letters (wa, wb, ..., hh): the CLI's topic models count words of letters only
    words = ["w" + chr(97 + i // 26) + chr(97 + i % 26) if i >= 26 else "w" + chr(97 + i) for i in range(200)]
    sp.save_npz(folder / "corpus.npz", sp.csr_matrix(corpus.counts))
    for name in ("vocab.txt", "public_vocab.txt"):
        (folder / name).write_text("\n".join(words) + "\n")
    counts = corpus.counts.tocsr() if sp.issparse(corpus.counts) else sp.csr_matrix(corpus.counts)
    text = [" ".join(np.repeat(words, counts[d].toarray().ravel())) for d in range(counts.shape[0])]
    for name in ("corpus.txt", "docs.txt", "new_docs.txt"):
        (folder / name).write_text("\n".join(text) + "\n")
    # a Windows export (curly quotes in cp1252) and a text with ids (words with digits)
    quoted = "\n".join(f"\u201c{line}\u201d" for line in text) + "\n"
    (folder / "export.txt").write_bytes(quoted.encode("cp1252"))
    # the README's private text example: a cp1252 export with blank lines (empty documents)
    notes = [f"\u201c{line}\u201d" if d % 50 else "" for d, line in enumerate(text)]
    (folder / "notes.txt").write_bytes(("\n".join(notes) + "\n").encode("cp1252"))
    (folder / "ids.txt").write_text("\n".join(f"{line} id{d % 7}" for d, line in enumerate(text)) + "\n")
    for name in ("nytimes", "nips"):
        write_uci_bow(counts, folder / f"docword.{name}.txt", words)
        with (
            open(folder / f"docword.{name}.txt", "rb") as src,
            gzip.open(folder / f"docword.{name}.txt.gz", "wb") as dst,
        ):
            shutil.copyfileobj(src, dst)
        os.remove(folder / f"docword.{name}.txt")
        shutil.copy(folder / "vocab.txt", folder / f"vocab.{name}.txt")
    np.save(folder / "tokens.npy", make_single_topic_corpus(5_000, 10, 5, random_state=0).tokens)
    problem = make_low_rank_completion((40, 30, 12), 3, snr=4.0, missing_ratio=0.6, random_state=0)
    train, test = train_test_split_entries(problem.observed, 0.2, random_state=0)
    for name, part in (("train.csv", train), ("test.csv", test)):
        scaled = type(part)(part.indices, 1 + 4 * np.clip(part.values, 0, 1), part.shape)  # 1..5 ratings
        write_entries(folder / name, scaled)


ALL_BLOCKS = [block for path in DOCUMENTS for block in blocks(path)]


def _params():
    params = []
    for path in DOCUMENTS:
        found = blocks(path)
        if not any(b.language in RUN_LANGUAGES and b.marker != "skip-test" for b in found):
            continue
        name = str(path.relative_to(ROOT))
        params.append(pytest.param(path, False, id=name))
        if any(b.marker == "slow-test" for b in found):
            params.append(pytest.param(path, True, id=f"{name}-with-slow-blocks", marks=pytest.mark.slow))
    return params


def test_every_block_is_runnable_text_or_marked_with_a_reason():
    assert len(ALL_BLOCKS) > 40
    for block in ALL_BLOCKS:
        assert block.language in RUN_LANGUAGES | TEXT_LANGUAGES, (
            f"{block.where}: a ```{block.language} block; use python/bash, or text for output"
        )
        if block.marker is not None:
            assert block.reason, f"{block.where}: a {block.marker} marker needs a reason"
    runnable = [b for b in ALL_BLOCKS if b.language in RUN_LANGUAGES and b.marker is None]
    assert len(runnable) >= len([b for b in ALL_BLOCKS if b.language in RUN_LANGUAGES]) // 2


@pytest.mark.parametrize(("path", "with_slow"), _params())
def test_docs_blocks_run(path, with_slow, tmp_path, monkeypatch, capsys):
    inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    for block in blocks(path):
        if block.language not in RUN_LANGUAGES or block.marker == "skip-test":
            continue
        if block.marker == "slow-test" and not with_slow:
            continue
        run_block(block, namespace)
    capsys.readouterr()
