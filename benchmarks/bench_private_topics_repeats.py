"""Repeated private fits on real text: mean and spread of perplexity and NPMI per setting (issue 23).

One private fit is one draw of fresh secret noise; on short texts two draws at the same settings
can differ by more than two settings do. This benchmark fits ``PrivateSpectralLDA`` ``--repeats``
times (``random_state`` 0, 1, ...; new noise each time) for each corpus (``--corpora``), ``epsilon``
(``--epsilons``) and setting (``--settings``: keyword arguments of the estimator, ``name=value``
separated by commas, one string per setting; ``""`` is the defaults), on the same documents and
held-out split as ``bench_private_topics.py`` (``--vocab-size`` words, ``--topics`` topics), and
reports the mean and standard deviation of the held-out document-completion perplexity and of the
mean NPMI of the topics' top 10 words on the whole corpus, beside the unigram model and the
non-private ``SpectralLDA``, and which ``topic_recovery`` the fits used (a function of public
inputs, the same in every repeat).

Run: ``python benchmarks/bench_private_topics_repeats.py --settings whitening_subspace=eigen ""
--out benchmarks/results/private_topics_repeats.json`` (writes the JSON and a Markdown table).
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _corpora  # noqa: E402  (next to this script)
from bench_private_topics import N_TOP, corpus_counts, split_corpus  # noqa: E402

from dptensor import SpectralLDA  # noqa: E402
from dptensor._files import write_json  # noqa: E402
from dptensor.evaluation import completion_perplexity, topic_npmi, unigram_perplexity  # noqa: E402
from dptensor.models.topics.private_spectral import PrivateSpectralLDA  # noqa: E402


def parse_setting(text: str) -> dict:
    """``"a=1,b=eigen"`` -> ``{"a": 1, "b": "eigen"}`` (values as Python literals, else strings)."""
    setting = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        try:
            setting[name.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            setting[name.strip()] = value.strip()
    return setting


def summary(values: list[float]) -> dict:
    return {"mean": float(np.mean(values)), "sd": float(np.std(values)), "values": [float(v) for v in values]}


def markdown(result: dict) -> str:
    lines = [
        "# Repeated private fits (`bench_private_topics_repeats.py`)",
        "",
        f"Command: `{result['command']}`  ",
        f"{result['repeats']} fits per cell (fresh secret noise each), mean ± sd; "
        f"V = {result['vocab_size']}, k = {result['topics']}, δ = {result['delta']:g}; "
        f"{result['seconds']:.0f} s on a shared machine.",
        "",
        "| corpus (unigram; non-private NPMI / perplexity) | ε | setting | perplexity | NPMI |",
        "|---|---:|---|---|---|",
    ]
    for cell in result["cells"]:
        head = (f"{cell['corpus']} ({cell['unigram_perplexity']:.1f}; {cell['spectral_npmi']:.3f} / "
                f"{cell['spectral_perplexity']:.1f})")  # fmt: skip
        for row in cell["rows"]:
            p, n = row["perplexity"], row["npmi"]
            recovery = f" ({row['topic_recovery']})" if "topic_recovery" in row else ""
            lines.append(f"| {head} | {row['epsilon']:g} | {row['setting'] or 'defaults'}{recovery} | "
                         f"{p['mean']:.1f} ± {p['sd']:.1f} | {n['mean']:.3f} ± {n['sd']:.3f} |")  # fmt: skip
            head = ""
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", default=["wordnet", "debian", "changelogs"])
    parser.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 2.0, 4.0])
    parser.add_argument("--settings", nargs="+", default=[""])
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--vocab-size", type=int, default=2000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=0, help="the split (as bench_private_topics.py)")
    parser.add_argument("--test-fraction", type=float, default=0.1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    settings = {text: parse_setting(text) for text in args.settings}
    start = time.perf_counter()
    cells = []
    for name in args.corpora:
        kept, everything, _ = corpus_counts(name, _corpora.load(name), args.vocab_size)
        train, split = split_corpus(kept, args.seed, args.test_fraction)
        spectral = SpectralLDA(args.topics, random_state=args.seed).fit(train)
        cell = {"corpus": name, "n_train": int(train.shape[0]),
                "unigram_perplexity": unigram_perplexity(train, split),
                "spectral_npmi": float(topic_npmi(spectral, everything, n_top=N_TOP).mean()),
                "spectral_perplexity": completion_perplexity(spectral, split), "rows": []}  # fmt: skip
        for epsilon in args.epsilons:
            for text, setting in settings.items():
                perplexities, npmis = [], []
                for repeat in range(args.repeats):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # UtilityWarning and the like: recorded elsewhere
                        model = PrivateSpectralLDA(args.topics, epsilon=epsilon, delta=args.delta,
                                                   random_state=repeat, **setting).fit(train)  # fmt: skip
                    perplexities.append(completion_perplexity(model, split))
                    npmis.append(float(topic_npmi(model, everything, n_top=N_TOP).mean()))
                row = {"epsilon": epsilon, "setting": text, "perplexity": summary(perplexities),
                       "npmi": summary(npmis), "topic_recovery": model.topic_recovery_}  # fmt: skip
                cell["rows"].append(row)
                print(f"{name} eps {epsilon:g} [{text or 'defaults'}]: perplexity "
                      f"{row['perplexity']['mean']:.1f} ± {row['perplexity']['sd']:.1f}, NPMI "
                      f"{row['npmi']['mean']:.3f} ± {row['npmi']['sd']:.3f}", flush=True)  # fmt: skip
        cells.append(cell)
    result = {"command": "python benchmarks/bench_private_topics_repeats.py " + " ".join(
                  repr(a) if a == "" else a for a in (argv if argv is not None else sys.argv[1:])),
              "repeats": args.repeats, "vocab_size": args.vocab_size, "topics": args.topics,
              "delta": args.delta, "seconds": time.perf_counter() - start, "cells": cells}  # fmt: skip
    if args.out is not None:
        write_json(args.out, result)
        args.out.with_suffix(".md").write_text(markdown(result))
    return result


if __name__ == "__main__":
    main()
