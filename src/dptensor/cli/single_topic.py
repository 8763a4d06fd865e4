"""``dptensor single-topic fit``: the single-topic model, non-private or with AGN, AVN or DP-TPM.

Input (``CORPUS``):

* a ``.npy`` integer array ``(N, L)`` of word ids, one document per row in order (``--n-words``
  gives the vocabulary size);
* plain text (every line a document, blank lines included, or a folder of ``.txt`` files) with
  ``--vocab``: each document becomes the sequence of its in-vocabulary tokens, in order;
* a count matrix (UCI ``docword.*.txt[.gz]``, Matrix Market ``.mtx``, SciPy ``.npz``): no word
  order, so ``--moments all``.

A private fit prints and records only what its guarantee covers: the guarantee, the public sizes
(``N``, ``d``, ``K``) and the released topics. The vocabulary must then be public: plain text needs
``--vocab`` (a vocabulary learned from the documents would reveal their words).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from dptensor.cli._io import write_json
from dptensor.cli._options import (
    add_noise_argument,
    add_quiet_argument,
    add_text_arguments,
    output_path,
    positive_float,
    positive_int,
    probability,
    progress_line,
    refuse_unused,
    seed,
)
from dptensor.cli._privacy import (
    ASKED_BEFORE_PARSING,
    add_ledger_argument,
    opened_ledger,
    refuse_before_parsing,
)
from dptensor.cli._report import add_report_arguments, begin_report, write_topic_report
from dptensor.datasets.corpus import (
    DEFAULT_ENCODING,
    check_vocabulary_tokens,
    is_count_file,
    load_corpus,
    load_vocabulary,
    public_corpus_shape,
    read_text_documents,
)
from dptensor.models.topics.single_topic import CALIBRATIONS, MECHANISMS, NOISE_SAMPLERS, SingleTopicModel
from dptensor.models.topics.single_topic_moments import MOMENTS
from dptensor.models.topics.vectorizer import TOPIC_TOKEN_PATTERN
from dptensor.privacy import PrivacyGuarantee
from dptensor.streams import load_matrix

#: Options of a private fit (refused without --mechanism).
PRIVATE_OPTIONS = ("epsilon", "delta", "budget_split", "calibration", "noise_sampler", "noise")

EXAMPLES = """examples:
  python -c "from dptensor.datasets import make_single_topic_corpus as m; import numpy as np
  np.save('tokens.npy', m(5000, 10, 3, random_state=0).tokens)"
  dptensor single-topic fit tokens.npy -k 3 --n-words 10 --out model.json
  dptensor single-topic fit tokens.npy -k 3 --n-words 10 --mechanism agn --epsilon 1 --delta 1e-6
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "single-topic",
        help="single-topic model by tensor decomposition, optionally private (AGN, AVN, DP-TPM)",
        description=(
            "One topic per document, recovered by whitening and orthogonal tensor decomposition; "
            "privately with the AGN or AVN mechanism of Imtiaz & Sarwate (2018) or their DP-TPM baseline "
            "(replace-one-document relation; N, d and K public)."
        ),
        epilog=EXAMPLES,
    )
    actions = parser.add_subparsers(dest="single_topic_command", metavar="ACTION", required=True)
    fit = actions.add_parser("fit", help="fit topics to a corpus; print the guarantee and the top words",
                             epilog=EXAMPLES)
    add_fit_arguments(fit)
    add_ledger_argument(fit, when=ASKED_BEFORE_PARSING)
    fit.add_argument("--out", metavar="FILE", help="write the model and its guarantee as JSON")
    add_report_arguments(fit)
    fit.set_defaults(func=run_fit)


def add_fit_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``single-topic fit`` that configure the model and read the corpus (also ``audit``)."""
    parser.add_argument(
        "corpus",
        help="word ids (.npy, N x L), plain text with --vocab (every line a document, blank lines too), "
        "or counts (UCI docword, .mtx, .npz)",
    )
    parser.add_argument("--topics", "-k", type=positive_int, required=True, help="number of topics K")
    parser.add_argument("--mechanism", choices=MECHANISMS, help="privacy mechanism (default: not private)")
    parser.add_argument("--epsilon", type=positive_float, help="total epsilon of the fit")
    parser.add_argument("--delta", type=probability, help="total delta of the fit")
    parser.add_argument("--budget-split", type=probability, default=0.5,
                        help="share of the budget for the word-pair moment M2 (the rest: the word-triple "
                             "moment M3; default 0.5)")
    parser.add_argument("--calibration", choices=CALIBRATIONS, default="analytic",
                        help="Gaussian calibration (classic: the slides', only for per-release epsilon < 1)")
    parser.add_argument("--moments", choices=MOMENTS,
                        help="first3 (the slides') or all (U-statistics); default: first3 for word ids and "
                        "text, all for counts")
    parser.add_argument("--n-words", type=positive_int, help="vocabulary size d (for .npy word ids)")
    parser.add_argument("--vocab", help="vocabulary file, one word per line (required for private text)")
    add_text_arguments(parser)
    parser.add_argument("--noise-sampler", choices=NOISE_SAMPLERS, default="auto",
                        help="dense (the slides' arrays) or scalable (same laws, no d^2 or d^3 array)")
    add_noise_argument(parser, default=None, not_covered="AVN's exponential-norm noise and the scalable "
                       "sampler's noise on the word-pair and word-triple moments M2 and M3 (NumPy)")
    parser.add_argument("--simplex", action="store_true", help="project the topics onto the simplex")
    parser.add_argument("--top", type=positive_int, default=10,
                        help="top words printed per topic (default 10)")
    parser.add_argument("--seed", type=seed, default=None, help="public random seed (restarts)")
    add_quiet_argument(parser)


def read_documents(
    path: str | Path, *, vocabulary: str | None, n_words: int | None, private: bool,
    token_pattern: str = TOPIC_TOKEN_PATTERN, encoding: str = DEFAULT_ENCODING,
) -> tuple[object, str, int | None, list[str] | None]:
    """Read ``CORPUS``: returns ``(documents, input form, n_words, vocabulary)``.

    Plain text is split into words by ``token_pattern`` (the command line's letters-only default)
    and read, as the vocabulary file is, in ``encoding``; ``token_pattern`` other than the default
    is refused for word ids and count matrices, which are not split into words.
    """
    path = Path(path)
    not_text = path.suffix == ".npy" or is_count_file(path)
    if not_text and token_pattern != TOPIC_TOKEN_PATTERN:
        raise ValueError(f"--token-pattern: it splits plain text into words; {path} holds word ids or counts")
    if path.suffix == ".npy":
        tokens = load_matrix(path)
        vocab = load_vocabulary(vocabulary, encoding=encoding) if vocabulary else None
        if n_words is None and vocab is not None:
            n_words = len(vocab)
        return tokens, "tokens", n_words, vocab
    counts_file = is_count_file(path)
    if counts_file:
        corpus = load_corpus(path, vocabulary=vocabulary, encoding=encoding, private=private)
        return corpus.counts, "counts", None, corpus.vocabulary
    from sklearn.feature_extraction.text import CountVectorizer

    if vocabulary is None and private:
        raise ValueError(
            "a private fit on plain text needs a public vocabulary (--vocab FILE): a vocabulary learned from "
            "the documents would reveal which words they contain"
        )
    documents = read_text_documents(path, encoding=encoding, private=private)
    # With a fixed vocabulary, fit only validates it; without one it learns it (non-private fits only).
    fixed = None if vocabulary is None else load_vocabulary(vocabulary, encoding=encoding)
    vectorizer = CountVectorizer(vocabulary=fixed, token_pattern=token_pattern)
    if fixed is not None:
        check_vocabulary_tokens(fixed, vectorizer)
    vectorizer.fit(documents)
    analyzer = vectorizer.build_analyzer()
    index = vectorizer.vocabulary_
    words = [""] * len(index)
    for word, column in index.items():
        words[column] = word
    tokens = [np.array([index[t] for t in analyzer(doc) if t in index], dtype=np.int64)
              for doc in documents]
    return tokens, "tokens", len(words), words


def build_model(
    args: argparse.Namespace, form: str, n_words: int | None, ledger: object = None, noise: object = None
) -> SingleTopicModel:
    """The :class:`SingleTopicModel` ``single-topic fit`` configures (``noise`` replaces ``--noise``)."""
    return SingleTopicModel(
        args.topics, mechanism=args.mechanism, epsilon=args.epsilon, delta=args.delta,
        budget_split=args.budget_split, calibration=args.calibration,
        moments=args.moments or ("first3" if form == "tokens" else "all"), input=form,
        n_words=n_words, noise_sampler=args.noise_sampler, simplex=args.simplex,
        random_state=args.seed, noise=noise or args.noise, ledger=ledger,
    )  # fmt: skip


def _planned_fit(args: argparse.Namespace) -> list[list[PrivacyGuarantee]]:
    """The fit's charge from the options and the corpus's public number of documents (no parse)."""
    shape = public_corpus_shape(args.corpus, encoding=args.encoding)
    if shape is None or shape[0] < 1:
        return []
    return [[build_model(args, "tokens", None).planned_guarantee(shape[0])]]


def run_fit(args: argparse.Namespace) -> int:
    private = args.mechanism is not None
    output_path(args.out)
    begin_report(args)
    if not private:
        refuse_unused(args, PRIVATE_OPTIONS, "privacy options need --mechanism (else nothing is private)")
    with opened_ledger(args, private=private) as ledger:
        if private:  # asked from the public number of documents, before the corpus is parsed
            refuse_before_parsing(ledger, lambda: _planned_fit(args), what="the model of this run")
        progress_line(f"reading {args.corpus} ...", args.quiet)
        documents, form, n_words, vocabulary = read_documents(
            args.corpus, vocabulary=args.vocab, n_words=args.n_words, private=private,
            token_pattern=args.token_pattern, encoding=args.encoding,
        )
        moments = args.moments or ("first3" if form == "tokens" else "all")
        progress_line(f"fitting {args.topics} topics ({args.mechanism or 'not private'}, moments {moments}) "
                      "...", args.quiet)
        model = build_model(args, form, n_words, ledger).fit(documents)  # charged before the moments
    print(f"single-topic model: K={args.topics} topics, d={model.n_features_in_} words, "
          f"N={model.n_documents_} documents, moments {moments}")  # fmt: skip
    if private:
        print(model.guarantee_.describe())
    else:
        print("not private: no --mechanism given, so no privacy guarantee")
    top = np.argsort(-model.components_, axis=1, kind="stable")[:, : args.top]
    for i, (weight, row) in enumerate(zip(model.weights_, top, strict=True), start=1):
        words = [vocabulary[j] if vocabulary else str(j) for j in row]
        print(f"topic {i:>3}  weight={weight:.4f}  {' '.join(words)}")
    if args.out:
        write_json(args.out, {
            "model": "SingleTopicModel",
            "params": {k: v for k, v in model.get_params().items() if k not in ("noise", "ledger")},
            "n_documents": model.n_documents_,
            "n_words": model.n_features_in_,
            "source": str(args.corpus),
            "guarantee": model.guarantee_.to_dict() if private else None,
            "weights": model.weights_,
            "components": model.components_,
            "components_layout": "n_topics x n_words, rows are the recovered topics a_k (raw unless simplex)",
            "vocabulary": vocabulary,
        })  # fmt: skip
        print(f"wrote {args.out}")
    write_topic_report(args, model, vocabulary, title="dptensor single-topic model report")
    return 0
