"""``dptensor report MODEL``: the HTML report of a saved model (``lda fit --out``, ``single-topic fit``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from dptensor.cli._options import add_quiet_argument, output_path, positive_int, progress_line
from dptensor.cli._report import begin_report, model_file_guarantee, write_topic_report

EXAMPLES = """examples:
  dptensor lda fit docword.synthetic.txt --topics 5 --epsilon 1 --delta 1e-6 --out private.json
  dptensor report private.json --out private.html
  dptensor report private.json --test docword.heldout.txt --out private.html   # + perplexity, coherence
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write the HTML report of a saved topic model",
        description=(
            "One self-contained HTML page for a model file written by 'lda fit --out' or "
            "'single-topic fit --out': its privacy guarantee, top words, prevalence, intertopic distance "
            "map, and with --test the held-out perplexity and coherence. The page shows only what the file "
            "holds (the released model) and the held-out corpus."
        ),
        epilog=EXAMPLES,
    )
    parser.add_argument("model", help="model file (.json or .npz) written by 'lda fit --out' or "
                        "'single-topic fit --out'")
    parser.add_argument("--out", metavar="FILE.html", required=True, help="the report to write")
    parser.add_argument("--test", metavar="CORPUS", help="held-out corpus: perplexity and coherence")
    parser.add_argument("--vocab", help="vocabulary file of a --test count matrix without one")
    parser.add_argument("--top", type=positive_int, default=10, help="words per topic (default 10)")
    add_quiet_argument(parser)
    parser.set_defaults(func=run)


def _single_topic(path: Path) -> tuple[object, list[str] | None] | None:
    """A ``single-topic fit --out`` file as an object with ``components_``, ``weights_``, ``guarantee_``."""
    if path.suffix != ".json":
        return None
    meta = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(meta, dict) or meta.get("model") != "SingleTopicModel":
        return None
    model = SimpleNamespace(components_=np.asarray(meta["components"], dtype=np.float64),
                            weights_=np.asarray(meta["weights"], dtype=np.float64), guarantee_=None)
    return model, meta.get("vocabulary")


def run(args: argparse.Namespace) -> int:
    output_path(args.out, "--out", suffixes=(".html", ".htm"))
    args.report = args.out
    begin_report(args)
    path = Path(args.model)
    if not path.exists():
        raise FileNotFoundError(f"no such model file: {path}")
    progress_line(f"reading {path} ...", args.quiet)
    single = _single_topic(path)
    if single is not None:
        model, vocabulary = single
        title = "dptensor single-topic model report"
        if args.test is not None:
            raise ValueError("--test: held-out evaluation is for LDA models; this is a single-topic model")
    else:
        from dptensor.models.topics.persistence import load_model

        model, vocabulary = load_model(path)
        title = "dptensor topic model report"
    model.guarantee_ = model_file_guarantee(path)  # the recorded guarantee (a dict), or None
    write_topic_report(args, model, vocabulary, title=title, test=args.test)
    return 0
