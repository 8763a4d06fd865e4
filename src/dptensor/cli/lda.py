"""``dptensor lda``: LDA topic models (``fit``) and document-topic proportions (``transform``).

``fit --method spectral`` (default) is the method of moments (:class:`SpectralLDA`), private with
``--epsilon/--delta`` (:class:`PrivateSpectralLDA`, DeCarolis et al.); ``fit --method vi`` is online
variational Bayes (:class:`DPVariationalLDA`), private with ``--epsilon/--delta`` (Park, Foulds,
Chaudhuri & Welling). Both private fits protect one document; the number of documents and the
vocabulary are public -- or, for plain text with ``--private-vocab V``, the vocabulary is chosen
under DP (:class:`PrivateCountVectorizer`) from a share of the budget and the total is composed.
"""

from __future__ import annotations

import argparse
import time
import warnings
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone

from dptensor.cli._lda_options import (
    ALPHA0_HELP,
    FIT_DEFAULT_ALPHA0,
    FIT_EXAMPLES,
    PLAN_EXAMPLES,
    PRIVATE_OPTIONS,
    PRIVATE_VOCAB_OPTIONS,
    SPECTRAL_OPTIONS,
    TEXT_OPTIONS,
    TRANSFORM_EXAMPLES,
    VI_OPTIONS,
    corpus_arguments,
    is_plain_text,
    parse_split,
    private_arguments,
    research_arguments,
    vi_arguments,
    vocab_share,
)
from dptensor.cli._lda_transform import run_transform
from dptensor.cli._options import (
    add_quiet_argument,
    flag_names,
    output_path,
    positive_float,
    positive_int,
    probability,
    progress_line,
    refuse_problems,
    refuse_unused,
    research_options_last,
    seed,
)
from dptensor.cli._parallel import ParallelSession, add_parallel_arguments, parallel_session
from dptensor.cli._privacy import (
    opened_ledger,
    refuse_before_parsing,
)
from dptensor.cli._report import add_report_arguments, begin_report, write_topic_report
from dptensor.datasets.corpus import (
    Corpus,
    load_corpus,
    load_text_corpus,
    load_vocabulary,
    public_corpus_shape,
    read_text_documents,
)
from dptensor.models._options import build_estimator
from dptensor.models.pipeline_plan import model_guarantees
from dptensor.models.topics._fitted import topic_words_text
from dptensor.models.topics.dp_vi import MAX_EPSILON, DPVariationalLDA
from dptensor.models.topics.inference import TopicModelInference
from dptensor.models.topics.persistence import load_model as load_model  # moved there; importable here
from dptensor.models.topics.persistence import save_model
from dptensor.models.topics.private_spectral import PrivateSpectralLDA
from dptensor.models.topics.private_whitening import whitening_subspace_rule
from dptensor.models.topics.spectral import SpectralLDA
from dptensor.models.topics.text_budget import TextBudget
from dptensor.models.topics.text_model import PrivateTopicModel
from dptensor.models.topics.vectorizer import TOPIC_TOKEN_PATTERN
from dptensor.parallel import public_shape
from dptensor.privacy import (
    BudgetLedger,
    PrivacyGuarantee,
    UtilityWarning,
    compose,
    enable_features,
)
from dptensor.privacy.vocabulary import DEFAULT_MAX_WORDS_PER_DOCUMENT, predicted_vocabulary_size
from dptensor.research.paper_dp_vi import PaperDPVariationalLDA


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "lda",
        help="LDA topic models: spectral (method of moments) or variational, optionally private",
        description=(
            "Latent Dirichlet Allocation by the method of moments (DeCarolis et al., Section 4): "
            "unbiased moments, whitening, simultaneous tensor power iteration, un-whitening; or by "
            "online variational Bayes (--method vi). With --epsilon/--delta either fit is "
            "document-level differentially private (one document is protected; the number of "
            "documents and the vocabulary are public)."
        ),
        epilog=FIT_EXAMPLES,
    )
    actions = parser.add_subparsers(dest="lda_command", metavar="ACTION", required=True)

    fit = actions.add_parser(
        "fit", help="fit topics to a corpus and print the top words of each", epilog=FIT_EXAMPLES,
        usage="%(prog)s [-h] corpus --topics K [--epsilon EPSILON --delta DELTA] [option ...]",
    )  # fmt: skip
    add_fit_arguments(fit)
    fit.add_argument(
        "--force", action="store_true",
        help="fit even where the planner predicts topics no better than noise (without it such a private "
             "fit stops before anything is charged; the prediction reads public sizes only)",
    )  # fmt: skip
    fit.add_argument("--out", metavar="FILE", help="write the model (.json, or .npz for large vocabularies)")
    add_report_arguments(fit, test=True)
    add_parallel_arguments(fit)
    research_options_last(fit)
    fit.set_defaults(func=run_fit)

    plan = actions.add_parser(
        "plan", help="predict, from public quantities only, whether a private spectral fit will work",
        description="Predict the signal-to-noise of a private spectral fit's release of the word "
        "co-occurrences (the second moment M2 of PrivateSpectralLDA, clipped contributions) "
        "from N, V, k, alpha0, epsilon, delta and a public typical document length; nothing is read or "
        "charged (docs/lda.md, 'Planning a private fit').",
        epilog=PLAN_EXAMPLES,
    )  # fmt: skip
    plan.add_argument("--documents", "-n", type=positive_int, required=True, metavar="N",
                      help="number of documents N")
    plan.add_argument("--words", "-V", type=positive_int, required=True, metavar="V",
                      help="vocabulary size V")
    plan.add_argument("--topics", "-k", type=positive_int, required=True, metavar="K",
                      help="number of topics k")
    plan.add_argument("--alpha0", type=positive_float, default=1.0, help="alpha_0 (default 1)")
    plan.add_argument("--epsilon", type=positive_float, required=True, help="total privacy budget epsilon")
    plan.add_argument("--delta", type=probability, required=True, help="total delta")
    plan.add_argument("--typical-length", type=positive_float, default=None, metavar="L",
                      help="a public typical document length in vocabulary tokens (default 10)")
    plan.add_argument("--private-whitening", choices=("auto", "analyze-gauss", "noisy-power"), default="auto",
                      help="how the word co-occurrences (second moment M2) are released under DP (as "
                           "for lda fit)")
    plan.add_argument("--vocab-share", type=vocab_share, default=None, metavar="SHARE",
                      help="plan a fit with --private-vocab V (V = --words, the most words it may keep) that "
                           "spends this share of --epsilon and --delta on the vocabulary, or 'auto': the "
                           "share lda fit chooses when --vocab-share is left out; the plan then predicts the "
                           "vocabulary's size")
    plan.add_argument("--max-doc-words", type=positive_int, default=DEFAULT_MAX_WORDS_PER_DOCUMENT,
                      metavar="M",
                      help="with --vocab-share: the vocabulary's bound on one document's distinct words (as "
                           f"for lda fit, default {DEFAULT_MAX_WORDS_PER_DOCUMENT})")
    plan.add_argument("--doc-words", type=positive_float, default=None, metavar="W",
                      help="with --vocab-share: a public guess of a typical document's distinct (non-stop) "
                           "words (default: --typical-length)")
    plan.add_argument("--no-refine", action="store_true",
                      help="plan a fit without private refinement passes (as lda fit --no-refine)")
    add_quiet_argument(plan)
    plan.set_defaults(func=run_plan)

    transform = actions.add_parser("transform", help="document-topic proportions under a fitted model",
                                   epilog=TRANSFORM_EXAMPLES)
    transform.add_argument("model", help="model file written by 'dptensor lda fit --out'")
    corpus_arguments(transform, from_model=True)
    transform.add_argument(
        "--out", metavar="FILE",
        help="write the proportions (documents x topics) to exactly FILE, in the format its extension names: "
        ".csv (a header 'document,topic_1,...' and the document's row number from 0 in the corpus's "
        "order, then its proportions), .txt (space-separated numbers only) or .npy (NumPy binary); "
        "default: print them",
    )  # fmt: skip
    add_quiet_argument(transform)
    transform.set_defaults(func=run_transform)


def add_fit_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``lda fit`` that configure the model and read the corpus (shared with ``audit lda``).

    The everyday options come first (the main options, the corpus, differential privacy); the
    papers' configurations and tuning knobs sit in groups headed :data:`RESEARCH_HEADING`, which
    :func:`~dptensor.cli._options.research_options_last` lists last in ``--help``. Argument
    groups change only the listing, never the parsing.
    """
    parser.add_argument("--topics", "-k", type=positive_int, required=True, metavar="K",
                        help="number of topics k")
    parser.add_argument("--alpha0", type=positive_float, default=FIT_DEFAULT_ALPHA0, help=ALPHA0_HELP)
    parser.add_argument(
        "--method", choices=("spectral", "vi"), default="spectral",
        help="spectral (method of moments, default) or vi (online variational Bayes)",
    )  # fmt: skip
    parser.add_argument("--seed", type=seed, default=None,
                        help="seed of the public randomness (the privacy noise is always fresh)")
    add_quiet_argument(parser)
    corpus_arguments(parser.add_argument_group("corpus"))
    private_arguments(parser)
    more = parser.add_argument_group("more options (printing, and choosing the words of plain text)")
    more.add_argument("--top", type=positive_int, default=10, metavar="N",
                      help="top words printed per topic (default 10)")
    more.add_argument("--stop-words", default=None, help="'english' or none (plain text only)")
    more.add_argument("--min-df", type=float, default=1,
                      help="CountVectorizer min_df: drop words in fewer documents (plain text only)")
    more.add_argument("--max-df", type=float, default=1.0,
                      help="CountVectorizer max_df: drop words in more documents (plain text only)")
    more.add_argument("--max-features", type=positive_int, default=None, metavar="N",
                      help="keep the n most frequent words")
    more.add_argument("--no-refine", action="store_true",
                      help="spectral fits: keep the moment estimate, without the CVB0 refinement passes "
                           "that follow it by default (private fits: their share of the budget goes to the "
                           "moments; docs/lda.md, Refinement and Private refinement)")
    research_arguments(parser)
    vi_arguments(parser)


#: Why a private fit of plain text needs --vocab or --private-vocab.
PRIVATE_TEXT_VOCABULARY = (
    "a private fit of plain text needs a public vocabulary file (--vocab) or a private one, chosen under DP "
    "from a share of the budget (--private-vocab V, e.g. --private-vocab 2000): building it from the "
    "documents without noise would reveal which words they contain"
)


def check_fit_options(args: argparse.Namespace) -> None:
    """Refuse, before the corpus is read, options that do nothing with this method, mode or corpus."""
    output_path(args.out, suffixes=(".json", ".npz"))
    if args.method == "vi":
        refuse_unused(args, SPECTRAL_OPTIONS, "options of the spectral fit; this is --method vi")
    else:
        refuse_unused(args, VI_OPTIONS, "options of --method vi; this is the spectral fit (the default)")
    if args.epsilon is None:
        refuse_unused(args, PRIVATE_OPTIONS, "privacy options need --epsilon (without it nothing is private)")
        if args.method != "vi":
            refuse_unused(args, ("clip",), "bounds the contributions of a private fit; pass --epsilon")
    elif args.delta is None:  # both private fits are (epsilon, delta)-DP; said before the corpus is read
        problems = ["--delta is required with --epsilon: the private fit is (epsilon, delta)-DP; choose "
                    "delta well below 1/(number of documents), e.g. --delta 1e-6"]
        if args.vocab is None and args.private_vocab is None and is_plain_text(Path(args.corpus)):
            problems.append(PRIVATE_TEXT_VOCABULARY)  # said once with the other, not one try later
        refuse_problems(problems)
    if args.no_clip and args.clip is not None:
        raise ValueError("--clip: cannot be combined with --no-clip")
    if args.private_vocab is None:
        refuse_unused(args, PRIVATE_VOCAB_OPTIONS, "they need --private-vocab")
    elif args.vocab is not None:
        raise ValueError("--private-vocab chooses the vocabulary under DP, --vocab gives a public one")
    elif getattr(args, "public_corpus", None) is not None:
        raise ValueError("--public-corpus needs the public vocabulary of the fit (--vocab), "
                         "not --private-vocab")
    else:
        refuse_unused(args, ("min_df", "max_df", "max_features"), "these would choose words from the private "
                      "documents without noise; --private-vocab V chooses them under DP")
    if not is_plain_text(Path(args.corpus)):
        refuse_unused(args, (*TEXT_OPTIONS, "private_vocab"), "these choose the words of a plain-text "
                      f"corpus; {args.corpus} is a count matrix whose columns are the vocabulary")


#: ``lda fit``'s flags named in its errors (:func:`flag_names`); n_components and typical_length only:
#: the planner's sentence (raised when a fit stops on it) keeps lda plan's words
FIT_FLAGS = {"n_components": "--topics", "typical_length": "--typical-length"}


def run_fit(args: argparse.Namespace) -> int:
    check_fit_options(args)
    begin_report(args)
    # --ledger without --epsilon is an error: nothing would be charged
    private = args.epsilon is not None
    with opened_ledger(args, private=private) as ledger, flag_names(FIT_FLAGS):
        if args.method == "vi":
            return run_fit_vi(args, ledger)
        with parallel_session(args) as session:
            if args.epsilon is not None:
                return run_private_fit(args, ledger, session)
            return run_spectral_fit(args, session)


def _corpus_parts(args: argparse.Namespace, session: ParallelSession) -> tuple[Corpus, object] | None:
    """A directory of ``.npz`` count-matrix parts (row blocks, read by the workers with --scheduler)."""
    path = Path(args.corpus)
    if not (path.is_dir() and any(path.glob("*.npz")) and not any(path.glob("*.txt"))):
        return None
    if (args.stop_words or args.min_df != 1 or args.max_df != 1.0 or args.max_features is not None
            or getattr(args, "private_vocab", None) is not None
            or args.token_pattern != TOPIC_TOKEN_PATTERN):
        raise ValueError(
            "--stop-words, --min-df, --max-df, --max-features, --private-vocab and --token-pattern apply to "
            "plain-text corpora, not to count-matrix parts (their columns are the vocabulary)"
        )
    records = session.parts(path)
    vocabulary = load_vocabulary(args.vocab, encoding=args.encoding) if args.vocab else None
    if vocabulary is not None and len(vocabulary) != records.n_cols:
        raise ValueError(
            f"--vocab has {len(vocabulary)} words but the parts in {path} have {records.n_cols} columns"
        )
    empty = sp.csr_matrix((0, records.n_cols))
    return Corpus(counts=empty, vocabulary=vocabulary, source=f"{path} ({records.n_blocks} parts)"), records


def _spectral_model(args: argparse.Namespace, session: ParallelSession) -> SpectralLDA:
    """The non-private ``SpectralLDA`` of ``lda fit``'s options (refined unless ``--no-refine``)."""
    return SpectralLDA(
        args.topics, args.alpha0, decomposition=args.decomposition, whitening=args.whitening,
        refine=None if args.no_refine else "cvb0", verbose=not args.quiet, random_state=args.seed,
        n_jobs=session.n_jobs,
    )  # fmt: skip


def run_spectral_fit(args: argparse.Namespace, session: ParallelSession | None = None) -> int:
    """``dptensor lda fit``: SpectralLDA (passes on ``--jobs`` threads or the ``--scheduler`` cluster)."""
    session = session or ParallelSession(None)
    start = time.perf_counter()
    parts = _corpus_parts(args, session)
    if parts is not None:
        corpus, records = parts
        progress_line(f"{records.n_blocks} parts of {records.n_cols} words: {corpus.source}", args.quiet)
        model = _spectral_model(args, session)
        model.fit(records)
        progress_line(f"{model.n_documents_} documents; passes over them: {session.describe()}", args.quiet)
        _print_topics(args, model, corpus)
        return 0
    progress_line(f"reading {args.corpus} ...", args.quiet)
    corpus = load_fit_corpus(args, private=False)
    progress_line(
        f"{corpus.n_documents} documents, {corpus.n_words} words, {corpus.counts.sum()} tokens "
        f"({time.perf_counter() - start:.1f} s)",
        args.quiet,
    )
    model = _spectral_model(args, session)
    model.fit(session.records(corpus.counts))
    progress_line(f"passes over the documents: {session.describe()}", args.quiet)
    if model.n_dropped_documents_:
        dropped = model.n_dropped_documents_
        progress_line(f"left out {dropped} document(s) with fewer than 3 tokens", args.quiet)
    _print_topics(args, model, corpus)
    return 0


def _print_topics(
    args: argparse.Namespace, model: TopicModelInference, corpus: Corpus,
    guarantees: dict[str, PrivacyGuarantee] | None = None,
) -> None:
    # a private fit prints --top words per topic whatever their weight: how many of the released
    # weights are zero would otherwise change the printed text's shape (tests/privacy/test_privacy_fuzzer.py)
    private = isinstance(model, PrivateSpectralLDA)
    top = model.top_words(corpus.vocabulary, args.top, positive_only=not private)
    # a private fit prints no durations (they depend on the documents; see save_model)
    seconds = sum(model.timings_.values())
    took = "" if private else f", fitted in {seconds:.2f} s"
    print(f"{args.topics} topics, alpha_0 = {args.alpha0:g}{took}")
    stability = getattr(model, "topic_stability_", None)  # SpectralLDA: share of runs finding it again
    # the prior that transform uses (it sums to alpha_0), not the raw moment estimate alpha_, which
    # for a private fit is a noisy release that can be far from it (e.g. 79039.68 with alpha_0 = 1)
    prior = model.document_topic_prior()
    for i, (alpha, words) in enumerate(zip(prior, top, strict=True), start=1):
        stable = "" if stability is None else f"  (stable={stability[i - 1]:.2f})"
        print(f"topic {i:>3}  alpha={alpha:.4f}  {topic_words_text(words)}{stable}")
    alignment = getattr(model, "whitening_alignment_", None)
    if alignment is not None:  # post-processing of the M2 release; the wording depends on parameters only
        resolved = int(np.count_nonzero(alignment > 0))
        print(f"whitening: {resolved} of {alignment.size} directions (eigenvectors) of the released word "
              f"co-occurrences (second moment M2) above the release's noise, estimated alignment "
              f"{' '.join(f'{a:.2f}' for a in alignment)} (near 0: noise; "
              f"{whitening_subspace_rule(model.whitening_subspace)}; docs/lda.md)")
    if getattr(model, "topic_recovery_", "tensor") == "nmf":  # a parameter or public sizes decided it
        print("topics: a non-negative factor of the released word co-occurrences (M2), no release of word "
              "triples (third moment M3) (topic_recovery='nmf'; docs/lda.md)")
    if args.out:
        save_model(args.out, model, corpus, guarantees)
        print(f"wrote {args.out}")
    private_or_parts = isinstance(model, PrivateSpectralLDA) or corpus.counts.shape[0] == 0
    write_topic_report(args, model, corpus.vocabulary, None if private_or_parts else corpus.counts,
                       guarantees=guarantees)


def load_fit_corpus(args: argparse.Namespace, *, private: bool) -> Corpus:
    """The corpus of a fit; a private fit's vocabulary must be public (never chosen from the data)."""
    path = Path(args.corpus)
    plain_text = is_plain_text(path)
    if private:
        options = (
            ("--max-features", args.max_features is not None), ("--min-df", float(args.min_df) != 1),
            ("--max-df", float(args.max_df) != 1), ("--stop-words", args.stop_words is not None),
        )  # fmt: skip
        chosen = [flag for flag, on in options if on]
        if chosen:
            raise ValueError(
                f"{', '.join(chosen)} would choose the vocabulary from the private documents; a private "
                "fit needs a public vocabulary (pass it with --vocab, or a count matrix) or one chosen "
                "under DP (--private-vocab V)"
            )
        if plain_text and args.vocab is None:
            raise ValueError(PRIVATE_TEXT_VOCABULARY)
    text = {"token_pattern": args.token_pattern, "encoding": args.encoding, "private": private}
    if plain_text and args.vocab is not None:
        return load_text_corpus(path, fixed_vocabulary=load_vocabulary(args.vocab, encoding=args.encoding),
                                **text)
    min_df = int(args.min_df) if float(args.min_df).is_integer() and args.min_df >= 1 else args.min_df
    max_df = int(args.max_df) if args.max_df > 1 else args.max_df
    return load_corpus(
        path, vocabulary=args.vocab, stop_words=args.stop_words, min_df=min_df, max_df=max_df,
        max_features=args.max_features, **text,
    )  # fmt: skip


def _load_public_corpus(args: argparse.Namespace) -> sp.csr_matrix | None:
    """``--public-corpus``: counts over the fit's vocabulary (plain text needs ``--vocab``)."""
    if args.public_corpus is None:
        return None
    path = Path(args.public_corpus)
    if is_plain_text(path):
        if args.vocab is None:
            raise ValueError("--public-corpus: plain text needs the public vocabulary of the fit (--vocab)")
        vocabulary = load_vocabulary(args.vocab, encoding=args.encoding)
        return load_text_corpus(path, fixed_vocabulary=vocabulary, token_pattern=args.token_pattern,
                                encoding=args.encoding).counts
    return load_corpus(path, vocabulary=args.vocab, encoding=args.encoding).counts


def _text_model(
    args: argparse.Namespace, ledger: BudgetLedger | None, model: PrivateSpectralLDA | DPVariationalLDA
) -> PrivateTopicModel:
    """``--private-vocab V``: the vocabulary and ``model`` under ``--epsilon`` and ``--delta`` together.

    :class:`~dptensor.models.topics.text_model.PrivateTopicModel` splits the budget (``--vocab-share``
    or the planner's share, then both shares calibrated so that their exact composition spends
    ``--epsilon``), asks the ledger for both releases before the first charge, releases the
    vocabulary, pads the documents a worst-case release would refuse and fits ``model`` (whose
    own budget it sets).
    """
    share = "auto" if args.vocab_share in (None, "auto") else float(args.vocab_share)
    return PrivateTopicModel(
        args.topics, epsilon=args.epsilon, delta=args.delta, n_words=args.private_vocab,
        vocabulary_share=share, max_words_per_document=args.max_doc_words, stop_words=args.stop_words,
        token_pattern=args.token_pattern, model=model, random_state=args.seed,
        noise=args.noise, ledger=ledger,
    )  # fmt: skip


def _plan_text_budget(args: argparse.Namespace, text: PrivateTopicModel, n_documents: int) -> TextBudget:
    """The split of the run's budget (public: the options and ``N``), said in two lines."""
    from dptensor.models.topics.plan import DEFAULT_VOCABULARY_SHARE, VOCABULARY_SHARE_RULE

    with _opt_in(args):
        budget = text.plan(n_documents)
    share = budget.vocabulary_share
    if args.vocab_share in (None, "auto"):
        if budget.share_chosen:
            progress_line(f"vocabulary share: {share:g} of --epsilon and --delta, chosen by the planner: "
                          f"{VOCABULARY_SHARE_RULE} (--vocab-share sets it)", args.quiet)
        else:
            progress_line(f"vocabulary share: {DEFAULT_VOCABULARY_SHARE:g} of --epsilon and --delta (the "
                          "planner does not model this fit; --vocab-share sets it)", args.quiet)
    if budget.scale != 1.0:
        progress_line(f"budget: the vocabulary's epsilon {budget.vocabulary_epsilon:.4g} and the model's "
                      f"{budget.model_epsilon:.4g} (the shares scaled by {budget.scale:.4f}) compose "
                      f"exactly to {budget.total.epsilon:.4g} of --epsilon {args.epsilon:g}", args.quiet)
    args.vocab_share = share  # the linear split: the planner's verdict below is stated in it
    return budget


def _fit_text_model(
    args: argparse.Namespace, text: PrivateTopicModel, budget: TextBudget, documents: list[str], path: Path
) -> tuple[Corpus, PrivacyGuarantee]:
    """Fit ``text`` on the documents; the vocabulary's lines; the corpus record of the model file."""
    # public: the planner's prediction (N, V, the budget, m; no document is read for it)
    predicted = predicted_vocabulary_size(len(documents), args.private_vocab, budget.vocabulary_epsilon,
                                          budget.vocabulary_delta, args.max_doc_words)
    with _opt_in(args), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            text.fit(documents)
        except ValueError as error:
            raise ValueError(_in_flags(str(error))) from None
    for warning in caught:  # the model's own verdict was printed (or stopped on) before
        verdict = str(warning.message).startswith("PrivateSpectralLDA")
        if not (issubclass(warning.category, UtilityWarning) and verdict):
            warnings.warn(_in_flags(str(warning.message)), warning.category, stacklevel=1)
    words = text.vocabulary_
    args._private_vocabulary = {"asked": args.private_vocab, "released": len(words), "predicted": predicted}
    progress_line(f"private vocabulary: {len(words)} words (released under DP; the planner predicted "
                  f"{predicted:.0f})", args.quiet)
    if text.padded_:
        progress_line("documents with fewer than 3 tokens over it were padded one by one "
                      "(pad_short_documents)", args.quiet)
    empty = sp.csr_matrix((0, len(words)), dtype=np.int64)  # the counts stay inside the fit
    return Corpus(empty, words, str(path), args.token_pattern), text.vocabulary_guarantee_


#: PrivateTopicModel's parameter names in its messages, and the flags of lda fit that set them.
_TEXT_FLAGS = (("PrivateTopicModel: ", ""), (" topics:", " topics (--topics):"),
               ("a larger epsilon", "a larger --epsilon"), ("or vocabulary_share,", "or --vocab-share,"),
               ("max_words_per_document", "--max-doc-words"))


def _in_flags(message: str) -> str:
    """A :class:`PrivateTopicModel` message in the command's words (its flags)."""
    for name, flag in _TEXT_FLAGS:
        message = message.replace(name, flag)
    return message


def check_ledger_before_parsing(
    args: argparse.Namespace, ledger: BudgetLedger | None, model: PrivateSpectralLDA | DPVariationalLDA,
    shape: tuple[int, int | None] | None, budget: TextBudget | None = None,
) -> None:
    """Ask the ledger for the whole run from the corpus's public sizes, before the corpus is parsed.

    ``shape`` is :func:`~dptensor.datasets.corpus.public_corpus_shape`'s ``(N, V)``; with a private
    vocabulary ``budget`` holds the planned releases of the vocabulary and the model. A ledger that
    cannot pay for the run refuses here (:func:`~dptensor.cli._privacy.refuse_before_parsing`),
    before a byte of a document is interpreted: the refusal depends on the ledger and public sizes only.
    """
    if budget is not None:
        refuse_before_parsing(ledger, lambda: budget.planned,
                              what="the vocabulary and the model of this run together")
        return
    if shape is None or shape[0] < 1 or shape[1] is None:
        return
    n_documents, n_words = shape

    def plan() -> list[list[PrivacyGuarantee]]:
        with _opt_in(args):
            return [model_guarantees(model, n_documents, n_words)]

    refuse_before_parsing(ledger, plan, what="the model of this run")


def _public_shape_of(args: argparse.Namespace) -> tuple[int, int | None] | None:
    """The corpus's ``(N, V)`` before it is parsed (the vocabulary file names ``V`` of plain text only)."""
    path = Path(args.corpus)
    return public_corpus_shape(path, vocabulary=args.vocab if is_plain_text(path) else None,
                               encoding=args.encoding)


def _opt_in(args: argparse.Namespace) -> AbstractContextManager:
    """``--allow-unproven``: the papers' unproven modes run (reported as not private)."""
    return enable_features("unproven") if args.allow_unproven else nullcontext()


def _model_budget(args: argparse.Namespace) -> tuple[float | None, float | None]:
    """The model's ``(epsilon, delta)``: all of it, or what ``--private-vocab`` leaves."""
    if getattr(args, "private_vocab", None) is None or args.epsilon is None:
        return args.epsilon, args.delta
    if args.vocab_share in (None, "auto"):  # not yet planned: PrivateTopicModel sets the model's budget
        return args.epsilon, args.delta
    rest = 1.0 - args.vocab_share
    return args.epsilon * rest, args.delta * rest


def _print_guarantees(model_guarantee: PrivacyGuarantee, vocabulary: PrivacyGuarantee | None,
                      delta: float, ledger: BudgetLedger | None = None) -> dict[str, PrivacyGuarantee] | None:
    """Print the model's guarantee, and with a private vocabulary its guarantee and the composed total.

    With a ledger, one more line puts the run's total epsilon (at the run's delta) beside what the
    ledger counts for the run (the same releases composed at the ledger's own delta).
    """
    parts = (model_guarantee,) if vocabulary is None else (vocabulary, model_guarantee)
    total = model_guarantee if vocabulary is None else compose(*parts, delta=delta)
    if vocabulary is None:
        print(f"guarantee: {model_guarantee.describe()}")
    else:
        print(f"vocabulary guarantee: {vocabulary.describe()}")
        print(f"model guarantee: {model_guarantee.describe()}")
        print(f"guarantee (total, vocabulary + model): {total.describe()}")
    if ledger is not None and model_guarantee.holds:
        counted = compose(*parts, delta=ledger.delta).epsilon
        print(f"total epsilon {total.epsilon:.4g} at delta {delta:g} (the ledger, at its delta "
              f"{ledger.delta:g}, counts {counted:.4g})")
    if vocabulary is None:
        return None
    return {"vocabulary_guarantee": vocabulary, "total_guarantee": total}


def check_prediction(
    args: argparse.Namespace, model: PrivateSpectralLDA, n_documents: int, n_words: int
) -> bool:
    """Print the planner's verdict for this fit, or stop on it before anything is charged.

    The verdict (:meth:`PrivateSpectralLDA.utility_plan`, the sentence ``dptensor lda plan``
    prints) comes from public inputs only: the options and the sizes ``N`` and ``V`` (with
    ``--private-vocab V``, the most words the vocabulary may have, and the model's share of the
    budget). Stopping on it therefore reveals nothing about the documents. A fit predicted to be
    no better than noise stops with an error unless ``--force``.

    Returns
    -------
    bool
        Whether a verdict was printed (the planner applies: a clipped fit without ``--public-corpus``).
    """
    with _opt_in(args):
        model.check_configuration(n_documents, n_words)  # the fit's own refusals come first
        share = args.vocab_share if args.private_vocab is not None else None
        plan = model.utility_plan(n_documents, n_words, vocabulary_share=share,
                                  max_words_per_document=getattr(args, "max_doc_words", None),
                                  typical_length=getattr(args, "typical_length", None))
    if plan is None:
        return False
    if plan.hopeless and not args.force:
        raise ValueError(f"{plan.sentence()}. Stopped before anything was charged; --force fits anyway")
    progress_line(plan.sentence() + ("; fitting anyway (--force)" if plan.hopeless else ""), args.quiet)
    return True


def run_private_fit(
    args: argparse.Namespace, ledger: BudgetLedger | None = None, session: ParallelSession | None = None
) -> int:
    """``dptensor lda fit --epsilon E --delta D``: PrivateSpectralLDA; prints the guarantee.

    Nothing printed or written depends on the documents except through the release: no token
    counts, no dropped documents (clipped: short ones get weight 0; ``--no-clip``: they are an input
    error), no timings in the model file.
    With ``--jobs``/``--scheduler`` the passes run on threads or workers; the noise is drawn here.
    """
    session = session or ParallelSession(None)
    parts = _corpus_parts(args, session)
    if args.private_vocab is not None and parts is None:  # (parts: refused)
        return _run_private_text_fit(args, ledger, session)
    model = build_private_model(args, ledger, n_jobs=session.n_jobs)
    check_ledger_before_parsing(args, ledger, model, None if parts is not None else _public_shape_of(args))
    predicted = False
    if parts is not None:
        corpus, records = parts
    else:
        corpus = load_fit_corpus(args, private=True)
        records = session.records(corpus.counts)
    n_documents, n_words = public_shape(records)
    progress_line(f"{n_documents} documents, {n_words} words (public)", args.quiet)
    predicted = check_prediction(args, model, n_documents, n_words)
    progress_line(f"passes over the documents: {session.describe()}", args.quiet)
    with _opt_in(args), warnings.catch_warnings():
        if predicted:  # the model's UtilityWarning would repeat the verdict printed above
            warnings.simplefilter("ignore", UtilityWarning)
        model.fit(records)
    guarantees = _print_guarantees(model.guarantee_, None, args.delta, ledger)
    _print_topics(args, model, corpus, guarantees)
    return 0


def _run_private_text_fit(
    args: argparse.Namespace, ledger: BudgetLedger | None, session: ParallelSession
) -> int:
    """``lda fit TEXT --epsilon E --delta D --private-vocab V``: through :class:`PrivateTopicModel`.

    ``N`` (public) is counted before the documents are parsed where it can be; the split of the
    budget, the ledger's answer for both releases and the planner's verdict come before anything is
    charged.
    """
    path = Path(args.corpus)
    shape = _public_shape_of(args)
    documents = read_text_documents(path, encoding=args.encoding, private=True) if shape is None else None
    n_documents = len(documents) if shape is None else shape[0]
    text = _text_model(args, ledger, build_private_model(args, ledger, n_jobs=session.n_jobs))
    budget = _plan_text_budget(args, text, n_documents)
    check_ledger_before_parsing(args, ledger, text.model, shape, budget)
    if documents is None:
        documents = read_text_documents(path, encoding=args.encoding, private=True)
    if isinstance(text.model, PrivateSpectralLDA):  # the verdict, on the linear split (public)
        linear = clone(text.model).set_params(epsilon=args.epsilon * (1 - budget.vocabulary_share),
                                              delta=args.delta * (1 - budget.vocabulary_share))
        check_prediction(args, linear, len(documents), args.private_vocab)
    corpus, vocabulary_guarantee = _fit_text_model(args, text, budget, documents, path)
    progress_line(f"{len(documents)} documents, {len(corpus.vocabulary)} words (public)", args.quiet)
    model = text.model_
    if isinstance(model, DPVariationalLDA):
        return _print_vi_result(args, model, corpus, vocabulary_guarantee, ledger)
    guarantees = _print_guarantees(model.guarantee_, vocabulary_guarantee, args.delta, ledger)
    _print_topics(args, model, corpus, guarantees)
    return 0


def build_vi_model(
    args: argparse.Namespace, ledger: BudgetLedger | None = None, noise: object = None
) -> DPVariationalLDA:
    """The :class:`DPVariationalLDA` that ``lda fit --method vi`` configures (private with ``--epsilon``).

    ``noise`` replaces ``--noise`` (e.g. a test-only source for ``dptensor audit``).
    """
    private = args.epsilon is not None
    epsilon, delta = _model_budget(args)
    # --alpha0 left at its default: the estimator's own default prior (0.5 per topic when private)
    default_alpha0 = args.alpha0 == FIT_DEFAULT_ALPHA0 and args.accountant == "exact" and private
    paper = {"accountant": "paper"} if args.accountant == "paper" else {}  # the research wing's accountant
    return build_estimator(
        PaperDPVariationalLDA if paper else DPVariationalLDA, n_components=args.topics,
        doc_topic_prior=None if default_alpha0 else args.alpha0 / args.topics, batch_size=args.batch_size,
        n_passes=args.passes, clip=args.clip, max_doc_length=args.max_doc_length, epsilon=epsilon,
        delta=delta, init=args.vi_init, init_share=args.vi_init_share, **paper,
        random_state=args.seed, noise=(noise or args.noise) if private else None, ledger=ledger,
        verbose=not args.quiet,
    )  # fmt: skip


def build_private_model(
    args: argparse.Namespace, ledger: BudgetLedger | None = None, *, n_jobs: int | None = None,
    noise: object = None,
) -> PrivateSpectralLDA | DPVariationalLDA:
    """The private estimator ``lda fit --epsilon`` configures: PrivateSpectralLDA, or DP-VI (--method vi)."""
    if args.method == "vi":
        return build_vi_model(args, ledger, noise)
    epsilon, delta = _model_budget(args)
    return PrivateSpectralLDA(
        args.topics, args.alpha0, epsilon=epsilon, delta=delta, config=args.config,
        sensitivity=args.sensitivity, calibration=args.calibration,
        budget_split=parse_split(args.budget_split), private_whitening=args.private_whitening,
        whitening_subspace=args.whitening_subspace, topic_recovery=args.topic_recovery,
        clip=None if args.no_clip else (args.clip if args.clip is not None else "auto"),
        public_corpus=_load_public_corpus(args),
        whitening_words={None: "auto", "all": None}.get(args.whitening_words, args.whitening_words),
        third_clip={None: "auto", "none": None}.get(args.third_clip, args.third_clip),
        decomposition=args.decomposition, refine=None if args.no_refine else "cvb0", verbose=not args.quiet,
        random_state=args.seed, noise=noise or args.noise, ledger=ledger, n_jobs=n_jobs,
    )  # fmt: skip


#: ``lda plan``'s flags for the planner's parameters, named in its errors (:func:`flag_names`).
PLAN_FLAGS = {"n_documents": "--documents", "n_words": "--words", "n_components": "--topics",
              "typical_length": "--typical-length", "vocabulary_share": "--vocab-share",
              "max_words_per_document": "--max-doc-words", "distinct_words": "--doc-words"}


def run_plan(args: argparse.Namespace) -> int:
    """``dptensor lda plan``: the planner's prediction (:mod:`dptensor.models.topics.plan`)."""
    from dptensor.models.topics.plan import plan_private_lda

    with flag_names(PLAN_FLAGS):
        prediction = plan_private_lda(
            args.documents, args.words, args.topics, args.alpha0, args.epsilon, args.delta,
            typical_length=args.typical_length, private_whitening=args.private_whitening,
            vocabulary_share=args.vocab_share, max_words_per_document=args.max_doc_words,
            distinct_words=args.doc_words, refine=None if args.no_refine else "cvb0",
        )  # fmt: skip
    print(prediction.describe())
    return 0


def run_fit_vi(args: argparse.Namespace, ledger: BudgetLedger | None = None) -> int:
    """``lda fit --method vi``: online VB LDA, differentially private with ``--epsilon``.

    Everything printed or written depends on the documents only through the noised model: the
    corpus line gives the public sizes (no token count), there are no timings, and the model
    file holds the topics, the public parameters and the guarantee.
    """
    private = args.epsilon is not None
    if private and args.epsilon > MAX_EPSILON:
        raise ValueError(
            f"--epsilon {args.epsilon:g} is above {MAX_EPSILON:g}, the largest budget --method vi "
            "calibrates; leave out --epsilon for a non-private fit"
        )
    progress_line(f"reading {args.corpus} ...", args.quiet)
    if private and args.private_vocab is not None:
        return _run_private_text_fit(args, ledger, ParallelSession(None))
    model = build_vi_model(args, ledger)
    if private:
        check_ledger_before_parsing(args, ledger, model, _public_shape_of(args))
    corpus = load_fit_corpus(args, private=private)
    progress_line(f"{corpus.n_documents} documents, {corpus.n_words} words", args.quiet)
    with _opt_in(args):
        model.fit(corpus.counts)
    return _print_vi_result(args, model, corpus, None, ledger)


def _print_vi_result(
    args: argparse.Namespace, model: DPVariationalLDA, corpus: Corpus,
    vocabulary_guarantee: PrivacyGuarantee | None, ledger: BudgetLedger | None,
) -> int:
    """``lda fit --method vi``'s topics, guarantee, model file and report."""
    private = args.epsilon is not None
    top = model.top_words(corpus.vocabulary, args.top, positive_only=not private)  # as _print_topics
    print(f"{args.topics} topics by online variational Bayes, doc_topic_prior = {model.doc_topic_prior_:g}")
    for i, words in enumerate(top, start=1):
        print(f"topic {i:>3}  {topic_words_text(words)}")
    guarantees = None
    if not private:
        print("privacy: none (no --epsilon)")
    elif vocabulary_guarantee is None:
        print("privacy: " + model.guarantee_.describe())
    else:
        guarantees = _print_guarantees(model.guarantee_, vocabulary_guarantee, args.delta, ledger)
    if args.out:
        save_model(args.out, model, corpus, guarantees)
        print(f"wrote {args.out}")
    write_topic_report(args, model, corpus.vocabulary, None if private else corpus.counts,
                       guarantees=guarantees)
    return 0
