"""Options of ``dptensor lda fit | plan | transform``: their groups, each method's option sets, examples.

Split from :mod:`dptensor.cli.lda` (the commands themselves); nothing here reads a corpus.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dptensor.cli._options import (
    RESEARCH_HEADING,
    add_noise_argument,
    add_text_arguments,
    positive_float,
    positive_int,
    probability,
)
from dptensor.cli._privacy import ASKED_BEFORE_PARSING, add_ledger_argument
from dptensor.datasets.corpus import is_count_file
from dptensor.privacy.vocabulary import DEFAULT_MAX_WORDS_PER_DOCUMENT

#: Options of the spectral fit only / of variational inference only (refused with the other --method).
SPECTRAL_OPTIONS = ("decomposition", "whitening", "config", "sensitivity", "calibration", "budget_split",
                    "private_whitening", "jobs", "scheduler", "no_clip", "public_corpus", "whitening_words",
                    "third_clip", "whitening_subspace", "topic_recovery", "typical_length")
VI_OPTIONS = ("batch_size", "passes", "max_doc_length", "accountant")
#: Options that configure a private fit (refused without --epsilon).
PRIVATE_OPTIONS = ("delta", "force", "noise", "allow_unproven", "config", "sensitivity", "calibration",
                   "budget_split", "private_whitening", "accountant", "no_clip", "public_corpus",
                   "private_vocab", "whitening_words", "third_clip", "whitening_subspace", "topic_recovery",
                   "typical_length")
#: Options of the private vocabulary (refused without --private-vocab).
PRIVATE_VOCAB_OPTIONS = ("vocab_share", "max_doc_words")
#: Options of plain-text corpora (they choose the vocabulary of a CountVectorizer).
TEXT_OPTIONS = ("stop_words", "min_df", "max_df", "token_pattern")
#: Files ``lda transform --out`` writes, by suffix.
THETA_FORMATS = (".txt", ".csv", ".npy")

#: What the research options of ``lda fit`` are, under their heading in ``--help``.
RESEARCH_DESCRIPTION = (
    "The papers' configurations and tuning knobs. The defaults are what docs/lda.md measured, so "
    "a fit needs none of these; change them to reproduce a paper's table or to study the method."
)

FIT_DEFAULT_ALPHA0 = 1.0
ALPHA0_HELP = (
    "Dirichlet concentration alpha_0 = sum of the topic priors alpha_i (default 1). It sets how many topics "
    "a document mixes: small (0.1-1) for documents about one or two topics, about k/2 or more for documents "
    "mixing many. The spectral fit's moments assume it, so a wrong value costs accuracy: try a grid "
    "(e.g. 0.1 0.3 1 3 10) and keep the value with the best held-out perplexity (docs/lda.md, 'Choosing "
    "alpha0'). A private --method vi fit defaults to 0.5 per topic (alpha_0 = k/2)"
)

FIT_EXAMPLES = """examples:
  python -c "from dptensor.datasets import make_lda_corpus, write_uci_bow
  c = make_lda_corpus(2_000, 500, 5, alpha=0.1, random_state=0)
  write_uci_bow(c.counts, 'docword.synthetic.txt', [f'w{i}' for i in range(500)])"
  dptensor lda fit docword.synthetic.txt --topics 5 --alpha0 0.5 --out model.json
  dptensor lda fit docword.synthetic.txt --topics 5 --epsilon 2 --delta 1e-6 --out private.json
  dptensor lda fit docword.synthetic.txt --method vi --topics 5 --passes 2 --out vi.json
  dptensor lda fit notes.txt --topics 5 --epsilon 2 --delta 1e-6 --private-vocab 500  # no public vocabulary
  dptensor lda fit notes.txt --topics 5 --encoding cp1252 --token-pattern '(?u)\\b\\w\\w+\\b'  # w0 too
"""

PLAN_EXAMPLES = """examples:
  dptensor lda plan --documents 44795 --words 2000 --topics 10 --epsilon 1 --delta 1e-6 --typical-length 7
"""

TRANSFORM_EXAMPLES = """examples:
  dptensor lda transform model.json docword.synthetic.txt --out theta.csv   # CSV: document,topic_1,...
  dptensor lda transform model.json docword.synthetic.txt --out theta.npy   # NumPy binary
"""



def corpus_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, from_model: bool = False
) -> None:
    """``CORPUS``, ``--vocab``, ``--token-pattern`` and ``--encoding`` (``from_model``: ``lda transform``)."""
    parser.add_argument(
        "corpus",
        help=(
            "text file (every line a document, blank lines too: row i is line i+1), folder of .txt files, "
            "UCI docword.*.txt[.gz], "
            "Matrix Market .mtx or scipy .npz count matrix"
        ),
    )
    parser.add_argument("--vocab", metavar="FILE",
                        help="vocabulary file, one word per line (for .mtx/.npz/UCI)")
    add_text_arguments(parser, from_model=from_model)


def private_arguments(parser: argparse.ArgumentParser) -> None:
    """The everyday privacy options of both methods: the budget, the ledger, a private vocabulary."""
    group = parser.add_argument_group(
        "differential privacy",
        "With --epsilon the fit is document-level (epsilon, delta)-DP (replace one document; N and the "
        "vocabulary public). Each document's contribution is bounded (research options: --clip; "
        "spectral: any document, short or empty too), and a plain-text corpus needs a public --vocab "
        "(a vocabulary built from the documents would leak) or --private-vocab V (the V most frequent "
        "words chosen under DP, paid from the budget).",
    )
    group.add_argument("--epsilon", type=positive_float, default=None, help="total privacy budget epsilon")
    group.add_argument("--delta", type=probability, default=None,
                       help="total delta (required with --epsilon)")
    group.add_argument(
        "--private-vocab", type=positive_int, default=None, metavar="V",
        help="plain text without a public --vocab: choose up to V frequent words under DP (Gaussian "
             "partition selection) from --vocab-share of --epsilon and --delta; the total composes both",
    )  # fmt: skip
    group.add_argument("--vocab-share", type=vocab_share, default=None, metavar="SHARE",
                       help="share of --epsilon and --delta spent on --private-vocab; default (or 'auto'): "
                            "chosen by the planner from public sizes, the largest share from 0.1 to 0.5 that "
                            "keeps its verdict on the topics (0.2 where it does not apply: --method vi, "
                            "--no-clip)")
    add_ledger_argument(group, when=ASKED_BEFORE_PARSING)


def research_arguments(parser: argparse.ArgumentParser) -> None:
    """The papers' configurations and tuning knobs of the fit, private spectral ones mostly."""
    research = parser.add_argument_group(RESEARCH_HEADING, RESEARCH_DESCRIPTION)
    research.add_argument("--config", type=int, choices=(1, 2, 3, 4), default=1,
                          help="private spectral fit: configuration of DeCarolis et al. (default 1; 2-4 need "
                               "--allow-unproven)")
    research.add_argument("--allow-unproven", action="store_true",
                          help="run the paper's modes whose guarantee does not hold (reported as NOT "
                               "PRIVATE)")
    add_noise_argument(research, not_covered="--method vi's secret Poisson subsample and initialisation "
                       "(NumPy's PCG64)")
    research.add_argument("--sensitivity", choices=("derived", "paper"), default="derived",
                          help="'paper' reproduces the printed noise levels (unproven)")
    research.add_argument("--calibration", choices=("analytic", "classic"), default="analytic",
                          help="exact Gaussian-DP composition (default) or the paper's classic tau per edge "
                               "(one noisy release of the paper's figure)")
    research.add_argument("--budget-split", metavar="EDGE=W,...", default=None,
                          help="relative budget weights of the noisy releases, by the paper's edge names: "
                               "m1 the word frequencies, m2 the second moment M2, e3 the third moment M3 "
                               "(default m1=0.25,m2=0.58,e3=0.17; --no-clip --config 1: e3, and e4 and e8 "
                               "of M2, e.g. e3=0.6,e4=0.2,e8=0.2)")
    research.add_argument("--clip", type=positive_float, default=None,
                          help="clipping norm C of each document's statistics (private fits; spectral: "
                               "default 1/V, docs/lda.md; vi: default 2, 0.1 x max document length with "
                               "--accountant paper)")
    research.add_argument("--no-clip", action="store_true",
                          help="private spectral fit: noise for the worst-case document instead of clipped "
                               "contributions (--clip; every document then needs at least 3 tokens)")
    research.add_argument("--third-clip", type=bound_or_none, default=None, metavar="C3|none",
                          help="bound on each document's term of the projected third moment (M3) (default: "
                               "a private quantile charged to the budget; 'none': no second clip)")
    research.add_argument("--public-corpus", metavar="FILE", default=None,
                          help="public documents of similar text (same format and --vocab as the corpus): "
                               "the whitening comes from them, only the word frequencies (M1) and the "
                               "whitened third moment (M3) are released")
    research.add_argument("--private-whitening", choices=("auto", "analyze-gauss", "noisy-power"),
                          default="auto", help="how the second moment (M2) is released under DP: Analyze "
                                               "Gauss or the noisy power method")
    research.add_argument("--whitening-subspace", choices=("auto", "eigen", "nonnegative"), default="auto",
                          help="whitening subspace from the noisy second moment (M2): its eigenvectors, a "
                               "non-negative factorisation, or chosen by how much of the eigenvectors "
                               "survived the noise (default auto)")
    research.add_argument("--topic-recovery", choices=("auto", "tensor", "nmf"), default="auto",
                          help="topics from the whitened third moment (tensor) or from a non-negative "
                               "factor of the noisy second moment with no third-moment release (nmf); "
                               "default auto: nmf where the planner predicts little signal (public sizes "
                               "only)")
    research.add_argument("--whitening-words", type=count_or_all, default=None, metavar="N|all",
                          help="release the second and third moments (M2, M3) on the N words most frequent "
                               "in the private word-frequency release ('all': every word; default: chosen "
                               "from public sizes, at least 300)")
    research.add_argument("--typical-length", type=positive_float, default=None, metavar="L",
                          help="a public guess of a typical document's length in vocabulary tokens, for the "
                               "planner's verdict printed before a private fit (as lda plan "
                               "--typical-length; default 10)")
    research.add_argument(
        "--max-doc-words", type=positive_int, default=DEFAULT_MAX_WORDS_PER_DOCUMENT, metavar="N",
        help="public bound on the distinct words one document contributes to --private-vocab (longer "
             f"documents keep their most frequent ones; default {DEFAULT_MAX_WORDS_PER_DOCUMENT})",
    )  # fmt: skip
    research.add_argument(
        "--decomposition", choices=("simultaneous", "robust"), default="simultaneous",
        help="tensor decomposition (default: simultaneous power iteration)",
    )  # fmt: skip
    research.add_argument(
        "--whitening", choices=("auto", "dense", "randomized", "eigsh"), default="auto",
        help="eigensolver for the second moment (M2) (default auto)",
    )  # fmt: skip


def count_or_all(text: str) -> int | str:
    """``--whitening-words``: a positive count or ``all``."""
    return "all" if text == "all" else positive_int(text)


def bound_or_none(text: str) -> float | str:
    """``--third-clip``: a positive bound or ``none``."""
    return "none" if text == "none" else positive_float(text)


def vi_arguments(parser: argparse.ArgumentParser) -> None:
    """Tuning knobs of online variational Bayes (``--method vi``, ``DPVariationalLDA``)."""
    vi = parser.add_argument_group(f"{RESEARCH_HEADING} of variational inference (--method vi)")
    vi.add_argument("--batch-size", type=positive_int, default=None, metavar="S",
                    help="(expected) minibatch size S (default: all documents when private, else 128)")
    vi.add_argument("--passes", type=positive_int, default=10, metavar="N",
                    help="passes over the corpus (default 10)")
    vi.add_argument("--max-doc-length", type=positive_int, default=None, metavar="N",
                    help="declared maximum document length; longer documents are scaled down to it "
                    "(default 500 when private)")
    vi.add_argument("--accountant", choices=("exact", "paper"), default="exact",
                    help="exact (Poisson sampling, PLD accountant; default) or paper (unproven; needs "
                         "--allow-unproven)")
    vi.add_argument("--vi-init", choices=("random", "moments"), default="random",
                    help="start: random (default) or moments (the spectral moment estimate; private: "
                         "on --vi-init-share of the budget, full batch only)")
    vi.add_argument("--vi-init-share", type=float, default=0.3, metavar="F",
                    help="--vi-init moments, private: the moments' share of the budget's mu^2 (default 0.3)")


def parse_split(text: str | None) -> dict[str, float] | None:
    if text is None:
        return None
    split = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--budget-split: expected EDGE=WEIGHT items, got {item!r}")
        try:
            split[key.strip()] = float(value)
        except ValueError:
            raise ValueError(f"--budget-split: {key.strip()!r} has a non-numeric weight: {value!r}") from None
    return split


def vocab_share(text: str) -> float | str:
    """``type=`` for ``--vocab-share``: a number in (0, 1), or ``auto`` (the planner's choice)."""
    return "auto" if text.strip().lower() == "auto" else probability(text)


def is_plain_text(path: Path) -> bool:
    """Whether ``path`` is a plain-text corpus (not a count file: UCI, Matrix Market, ``.npz``)."""
    return not is_count_file(path)
