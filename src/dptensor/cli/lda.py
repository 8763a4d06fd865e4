"""``dptensor lda``: LDA topic models (``fit``) and document-topic proportions (``transform``).

``fit --method spectral`` (default) is the method of moments (:class:`SpectralLDA`), private with
``--epsilon/--delta`` (:class:`PrivateSpectralLDA`, DeCarolis et al.); ``fit --method vi`` is online
variational Bayes (:class:`DPVariationalLDA`), private with ``--epsilon/--delta`` (Park, Foulds,
Chaudhuri & Welling). Both private fits protect one document; the number of documents and the
vocabulary are public.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from dptensor._files import atomic_path, check_binary
from dptensor.cli._io import write_json
from dptensor.cli._options import (
    add_quiet_argument,
    output_path,
    positive_float,
    positive_int,
    probability,
    progress_line,
    refuse_unused,
    seed,
)
from dptensor.cli._parallel import ParallelSession, add_parallel_arguments, parallel_session
from dptensor.cli._privacy import add_ledger_argument, opened_ledger
from dptensor.cli._report import add_report_arguments, begin_report, write_topic_report
from dptensor.datasets.corpus import Corpus, load_corpus, load_text_corpus, load_vocabulary
from dptensor.models.dp_vi_lda import DPVariationalLDA
from dptensor.models.private_spectral_lda import PrivateSpectralLDA
from dptensor.models.spectral_lda import SpectralLDA, TopicModelInference
from dptensor.parallel import public_shape
from dptensor.privacy import NOISE_BACKENDS, BudgetLedger, enable_features

#: Options of the spectral fit only / of variational inference only (refused with the other --method).
SPECTRAL_OPTIONS = ("decomposition", "whitening", "config", "sensitivity", "calibration", "budget_split",
                    "private_whitening", "jobs", "scheduler")
VI_OPTIONS = ("batch_size", "passes", "clip", "max_doc_length", "accountant")
#: Options that configure a private fit (refused without --epsilon).
PRIVATE_OPTIONS = ("delta", "noise", "allow_unproven", "config", "sensitivity", "calibration", "budget_split",
                   "private_whitening", "accountant")
#: Options of plain-text corpora (they choose the vocabulary of a CountVectorizer).
TEXT_OPTIONS = ("stop_words", "min_df", "max_df")
#: Files ``lda transform --out`` writes, by suffix.
THETA_FORMATS = (".txt", ".csv", ".npy")

ALPHA0_HELP = (
    "Dirichlet concentration alpha_0 = sum of the topic priors alpha_i (default 1). It sets how many topics "
    "a document mixes: small (0.1-1) for documents about one or two topics, about k/2 or more for documents "
    "mixing many. The spectral fit's moments assume it, so a wrong value costs accuracy: try a grid "
    "(e.g. 0.1 0.3 1 3 10) and keep the value with the best held-out perplexity (docs/lda.md, 'Choosing "
    "alpha0')"
)

FIT_EXAMPLES = """examples:
  python -c "from dptensor.datasets import make_lda_corpus, write_uci_bow
  c = make_lda_corpus(2_000, 500, 5, alpha=0.1, random_state=0)
  write_uci_bow(c.counts, 'docword.synthetic.txt', [f'w{i}' for i in range(500)])"
  dptensor lda fit docword.synthetic.txt --topics 5 --alpha0 0.5 --out model.json
  dptensor lda fit docword.synthetic.txt --topics 5 --epsilon 1 --delta 1e-6 --out private.json
  dptensor lda fit docword.synthetic.txt --method vi --topics 5 --passes 2 --out vi.json
"""

TRANSFORM_EXAMPLES = """examples:
  dptensor lda transform model.json docword.synthetic.txt --out theta.csv   # text, one row per document
  dptensor lda transform model.json docword.synthetic.txt --out theta.npy   # NumPy binary
"""


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

    fit = actions.add_parser("fit", help="fit topics to a corpus and print the top words of each",
                             epilog=FIT_EXAMPLES)
    _corpus_arguments(fit)
    fit.add_argument("--topics", "-k", type=positive_int, required=True, help="number of topics k")
    fit.add_argument("--alpha0", type=positive_float, default=1.0, help=ALPHA0_HELP)
    fit.add_argument("--stop-words", default=None, help="'english' or none (plain text only)")
    fit.add_argument("--min-df", type=float, default=1, help="CountVectorizer min_df (plain text only)")
    fit.add_argument("--max-df", type=float, default=1.0, help="CountVectorizer max_df (plain text only)")
    fit.add_argument("--max-features", type=positive_int, default=None, help="keep the n most frequent words")
    fit.add_argument(
        "--decomposition", choices=("simultaneous", "robust"), default="simultaneous",
        help="tensor decomposition (default: simultaneous power iteration)",
    )  # fmt: skip
    fit.add_argument(
        "--whitening", choices=("auto", "dense", "randomized", "eigsh"), default="auto",
        help="eigensolver for M2 (default auto)",
    )  # fmt: skip
    fit.add_argument(
        "--method", choices=("spectral", "vi"), default="spectral",
        help="spectral (method of moments, default) or vi (online variational Bayes)",
    )  # fmt: skip
    fit.add_argument("--top", type=positive_int, default=10, help="top words printed per topic (default 10)")
    fit.add_argument("--seed", type=seed, default=None,
                     help="seed of the public randomness (the privacy noise is always fresh)")
    add_quiet_argument(fit)
    fit.add_argument("--out", metavar="FILE", help="write the model (.json, or .npz for large vocabularies)")
    _private_arguments(fit)
    _vi_arguments(fit)
    add_parallel_arguments(fit)
    add_report_arguments(fit, test=True)
    fit.set_defaults(func=run_fit)

    transform = actions.add_parser("transform", help="document-topic proportions under a fitted model",
                                   epilog=TRANSFORM_EXAMPLES)
    transform.add_argument("model", help="model file written by 'dptensor lda fit --out'")
    _corpus_arguments(transform)
    transform.add_argument(
        "--out", metavar="FILE",
        help="write the proportions (documents x topics) to exactly FILE, in the format its extension names: "
        ".csv (comma-separated text), .txt (space-separated text) or .npy (NumPy binary); "
        "default: print them",
    )  # fmt: skip
    add_quiet_argument(transform)
    transform.set_defaults(func=run_transform)


def _corpus_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "corpus",
        help=(
            "text file (one document per line), folder of .txt files, UCI docword.*.txt[.gz], "
            "Matrix Market .mtx or scipy .npz count matrix"
        ),
    )
    parser.add_argument("--vocab", help="vocabulary file, one word per line (for .mtx/.npz/UCI)")


def _private_arguments(parser: argparse.ArgumentParser) -> None:
    """Privacy options of both methods, and those of the private spectral fit (``PrivateSpectralLDA``)."""
    group = parser.add_argument_group(
        "differential privacy",
        "With --epsilon the fit is document-level (epsilon, delta)-DP (replace one document; N and the "
        "vocabulary public). Every document must have at least 3 tokens, and a plain-text corpus needs a "
        "public --vocab (a vocabulary built from the documents would leak).",
    )
    group.add_argument("--epsilon", type=positive_float, default=None, help="total privacy budget epsilon")
    group.add_argument("--delta", type=probability, default=None,
                       help="total delta (required with --epsilon)")
    group.add_argument("--allow-unproven", action="store_true",
                       help="run the paper's modes whose guarantee does not hold (reported as NOT PRIVATE)")
    group.add_argument("--noise", choices=NOISE_BACKENDS, default="numpy",
                       help="sampler of the privacy noise (numpy, or opendp: floating-point safe)")
    add_ledger_argument(group)
    spectral = parser.add_argument_group("private spectral fit (--method spectral --epsilon)")
    spectral.add_argument("--config", type=int, choices=(1, 2, 3, 4), default=1,
                          help="configuration of DeCarolis et al. (default 1; 2-4 need --allow-unproven)")
    spectral.add_argument("--sensitivity", choices=("derived", "paper"), default="derived",
                          help="'paper' reproduces the printed noise levels (unproven)")
    spectral.add_argument("--calibration", choices=("analytic", "classic"), default="analytic",
                          help="exact Gaussian-DP composition (default) or the paper's classic tau per edge")
    spectral.add_argument("--budget-split", metavar="EDGE=W,...", default=None,
                          help="relative budget weights per edge, e.g. e3=0.6,e4=0.2,e8=0.2")
    spectral.add_argument("--private-whitening", choices=("auto", "analyze-gauss", "noisy-power"),
                          default="auto", help="release of M2: Analyze Gauss or the noisy power method")


def _vi_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of online variational Bayes (``--method vi``, ``DPVariationalLDA``)."""
    vi = parser.add_argument_group("variational inference (--method vi)")
    vi.add_argument("--batch-size", type=positive_int, default=128,
                    help="(expected) minibatch size S (default 128)")
    vi.add_argument("--passes", type=positive_int, default=10, help="passes over the corpus (default 10)")
    vi.add_argument("--clip", type=positive_float, default=None,
                    help="clipping norm C of each document's statistics (default 0.1 x max document length)")
    vi.add_argument("--max-doc-length", type=positive_int, default=None,
                    help="declared maximum document length; longer documents are truncated (default C: 500)")
    vi.add_argument("--accountant", choices=("exact", "paper"), default="exact",
                    help="exact (Poisson sampling, PLD accountant; default) or paper (unproven; needs "
                         "--allow-unproven)")


def _parse_split(text: str | None) -> dict[str, float] | None:
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


def check_fit_options(args: argparse.Namespace) -> None:
    """Refuse, before the corpus is read, options that do nothing with this method, mode or corpus."""
    output_path(args.out, suffixes=(".json", ".npz"))
    if args.method == "vi":
        refuse_unused(args, SPECTRAL_OPTIONS, "options of the spectral fit; this is --method vi")
    else:
        refuse_unused(args, VI_OPTIONS, "options of --method vi; this is the spectral fit (the default)")
    if args.epsilon is None:
        refuse_unused(args, PRIVATE_OPTIONS, "privacy options need --epsilon (without it nothing is private)")
    if not _is_plain_text(Path(args.corpus)):
        refuse_unused(args, TEXT_OPTIONS, f"these choose the words of a plain-text corpus; {args.corpus} "
                      "is a count matrix whose columns are the vocabulary")


def run_fit(args: argparse.Namespace) -> int:
    check_fit_options(args)
    begin_report(args)
    # --ledger without --epsilon is an error: nothing would be charged
    with opened_ledger(args, private=args.epsilon is not None) as ledger:
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
    if args.stop_words or args.min_df != 1 or args.max_df != 1.0 or args.max_features is not None:
        raise ValueError(
            "--stop-words, --min-df, --max-df and --max-features apply to plain-text corpora, not to "
            "count-matrix parts (their columns are the vocabulary)"
        )
    records = session.parts(path)
    vocabulary = load_vocabulary(args.vocab) if args.vocab else None
    if vocabulary is not None and len(vocabulary) != records.n_cols:
        raise ValueError(
            f"--vocab has {len(vocabulary)} words but the parts in {path} have {records.n_cols} columns"
        )
    empty = sp.csr_matrix((0, records.n_cols))
    return Corpus(counts=empty, vocabulary=vocabulary, source=f"{path} ({records.n_blocks} parts)"), records


def run_spectral_fit(args: argparse.Namespace, session: ParallelSession | None = None) -> int:
    """``dptensor lda fit``: SpectralLDA (passes on ``--jobs`` threads or the ``--scheduler`` cluster)."""
    session = session or ParallelSession(None)
    start = time.perf_counter()
    parts = _corpus_parts(args, session)
    if parts is not None:
        corpus, records = parts
        progress_line(f"{records.n_blocks} parts of {records.n_cols} words: {corpus.source}", args.quiet)
        model = SpectralLDA(
            args.topics, args.alpha0, decomposition=args.decomposition, whitening=args.whitening,
            verbose=not args.quiet, random_state=args.seed, n_jobs=session.n_jobs,
        )  # fmt: skip
        model.fit(records)
        progress_line(f"{model.n_documents_} documents; passes over them: {session.describe()}", args.quiet)
        _print_topics(args, model, corpus)
        return 0
    progress_line(f"reading {args.corpus} ...", args.quiet)
    corpus = _load_fit_corpus(args, private=False)
    progress_line(
        f"{corpus.n_documents} documents, {corpus.n_words} words, {corpus.counts.sum()} tokens "
        f"({time.perf_counter() - start:.1f} s)",
        args.quiet,
    )
    model = SpectralLDA(
        args.topics, args.alpha0, decomposition=args.decomposition, whitening=args.whitening,
        verbose=not args.quiet, random_state=args.seed, n_jobs=session.n_jobs,
    )  # fmt: skip
    model.fit(session.records(corpus.counts))
    progress_line(f"passes over the documents: {session.describe()}", args.quiet)
    if model.n_dropped_documents_:
        dropped = model.n_dropped_documents_
        progress_line(f"left out {dropped} document(s) with fewer than 3 tokens", args.quiet)
    _print_topics(args, model, corpus)
    return 0


def _print_topics(args: argparse.Namespace, model: TopicModelInference, corpus: Corpus) -> None:
    top = model.top_words(corpus.vocabulary, args.top)
    # a private fit prints no durations (they depend on the documents; see save_model)
    seconds = sum(model.timings_.values())
    took = "" if isinstance(model, PrivateSpectralLDA) else f", fitted in {seconds:.2f} s"
    print(f"{args.topics} topics, alpha_0 = {args.alpha0:g}{took}")
    for i, (alpha, words) in enumerate(zip(model.alpha_, top, strict=True), start=1):
        print(f"topic {i:>3}  alpha={alpha:.4f}  {' '.join(words)}")
    if args.out:
        save_model(args.out, model, corpus)
        print(f"wrote {args.out}")
    private_or_parts = isinstance(model, PrivateSpectralLDA) or corpus.counts.shape[0] == 0
    write_topic_report(args, model, corpus.vocabulary, None if private_or_parts else corpus.counts)


def _is_plain_text(path: Path) -> bool:
    return path.is_dir() or not (path.suffix in (".mtx", ".npz") or path.name.startswith("docword."))


def _load_fit_corpus(args: argparse.Namespace, *, private: bool) -> Corpus:
    """The corpus of a fit; a private fit's vocabulary must be public (never chosen from the data)."""
    path = Path(args.corpus)
    plain_text = _is_plain_text(path)
    if private:
        options = (
            ("--max-features", args.max_features is not None), ("--min-df", float(args.min_df) != 1),
            ("--max-df", float(args.max_df) != 1), ("--stop-words", args.stop_words is not None),
        )  # fmt: skip
        chosen = [flag for flag, on in options if on]
        if chosen:
            raise ValueError(
                f"{', '.join(chosen)} would choose the vocabulary from the private documents; a private "
                "fit needs a public vocabulary (pass it with --vocab, or a count matrix)"
            )
        if plain_text and args.vocab is None:
            raise ValueError(
                "a private fit of plain text needs a public vocabulary file (--vocab): building it from "
                "the documents would reveal which words they contain"
            )
    if plain_text and args.vocab is not None:
        return load_text_corpus(path, fixed_vocabulary=load_vocabulary(args.vocab))
    min_df = int(args.min_df) if float(args.min_df).is_integer() and args.min_df >= 1 else args.min_df
    max_df = int(args.max_df) if args.max_df > 1 else args.max_df
    return load_corpus(
        path, vocabulary=args.vocab, stop_words=args.stop_words, min_df=min_df, max_df=max_df,
        max_features=args.max_features,
    )  # fmt: skip


def run_private_fit(
    args: argparse.Namespace, ledger: BudgetLedger | None = None, session: ParallelSession | None = None
) -> int:
    """``dptensor lda fit --epsilon E --delta D``: PrivateSpectralLDA; prints the guarantee.

    Nothing printed or written depends on the documents except through the release: no token
    counts, no dropped documents (short ones are an input error), no timings in the model file.
    With ``--jobs``/``--scheduler`` the passes run on threads or workers; the noise is drawn here.
    """
    session = session or ParallelSession(None)
    parts = _corpus_parts(args, session)
    if parts is not None:
        corpus, records = parts
    else:
        corpus = _load_fit_corpus(args, private=True)
        records = session.records(corpus.counts)
    n_documents, n_words = public_shape(records)
    progress_line(f"{n_documents} documents, {n_words} words (public)", args.quiet)
    progress_line(f"passes over the documents: {session.describe()}", args.quiet)
    model = PrivateSpectralLDA(
        args.topics, args.alpha0, epsilon=args.epsilon, delta=args.delta, config=args.config,
        sensitivity=args.sensitivity, calibration=args.calibration,
        budget_split=_parse_split(args.budget_split), private_whitening=args.private_whitening,
        decomposition=args.decomposition, verbose=not args.quiet,
        random_state=args.seed, noise=args.noise, ledger=ledger, n_jobs=session.n_jobs,
    )  # fmt: skip
    with enable_features("unproven") if args.allow_unproven else nullcontext():
        model.fit(records)
    print(f"guarantee: {model.guarantee_.describe()}")
    _print_topics(args, model, corpus)
    return 0


def run_fit_vi(args: argparse.Namespace, ledger: BudgetLedger | None = None) -> int:
    """``lda fit --method vi``: online VB LDA, differentially private with ``--epsilon``.

    Everything printed or written depends on the documents only through the noised model: the
    corpus line gives the public sizes (no token count), there are no timings, and the model
    file holds the topics, the public parameters and the guarantee.
    """
    if args.topics is None or args.topics < 1:
        raise ValueError(f"--topics must be a positive integer, got {args.topics}")
    private = args.epsilon is not None
    progress_line(f"reading {args.corpus} ...", args.quiet)
    corpus = _load_fit_corpus(args, private=private)
    progress_line(f"{corpus.n_documents} documents, {corpus.n_words} words", args.quiet)
    model = DPVariationalLDA(
        args.topics, doc_topic_prior=args.alpha0 / args.topics, batch_size=args.batch_size,
        n_passes=args.passes, clip=args.clip, max_doc_length=args.max_doc_length, epsilon=args.epsilon,
        delta=args.delta, accountant=args.accountant, random_state=args.seed,
        noise=args.noise if private else None, ledger=ledger, verbose=not args.quiet,
    )  # fmt: skip
    with enable_features("unproven") if args.allow_unproven else nullcontext():
        model.fit(corpus.counts)
    top = model.top_words(corpus.vocabulary, args.top)
    print(f"{args.topics} topics by online variational Bayes, doc_topic_prior = {model.doc_topic_prior_:g}")
    for i, words in enumerate(top, start=1):
        print(f"topic {i:>3}  {' '.join(words)}")
    print("privacy: " + (model.guarantee_.describe() if private else "none (no --epsilon)"))
    if args.out:
        save_model(args.out, model, corpus)
        print(f"wrote {args.out}")
    write_topic_report(args, model, corpus.vocabulary, None if private else corpus.counts)
    return 0


def save_model(path: str | Path, model: TopicModelInference | DPVariationalLDA, corpus: Corpus) -> None:
    """Write a fitted model: JSON (human-readable) or ``.npz`` (compact, for large vocabularies).

    A private model records its guarantee and omits everything computed from the documents without
    noise (token counts, dropped documents, timings: wall-clock time is not covered by the guarantee).
    A :class:`DPVariationalLDA` file holds ``lambda`` (``components``).
    """
    path = Path(path)
    skip = {"random_state", "noise", "ledger", "verbose"}
    meta = {
        "model": type(model).__name__,
        "params": {k: v for k, v in model.get_params().items() if k not in skip},
        "n_documents": model.n_documents_,
        "source": corpus.source,
    }
    arrays = {"components": model.components_}
    layout = "n_topics x n_words, rows on the probability simplex"
    if isinstance(model, DPVariationalLDA):
        guarantee = model.guarantee_
        meta["guarantee"] = None if guarantee is None else guarantee.to_dict()
        layout = "n_topics x n_words variational Dirichlet parameters lambda (normalise rows for topics)"
    else:
        meta["alpha0"] = model.alpha0
        arrays["alpha"] = model.alpha_
        if isinstance(model, PrivateSpectralLDA):
            meta["guarantee"] = model.guarantee_.to_dict()
        else:
            meta["n_dropped_documents"] = model.n_dropped_documents_
            meta["timings"] = model.timings_
    if path.suffix == ".npz":
        with atomic_path(path) as tmp:
            _save_npz(tmp, arrays, corpus, meta)
        return
    write_json(path, {**meta, **arrays, "vocabulary": corpus.vocabulary, "components_layout": layout})


def _save_npz(path: Path, arrays: dict, corpus: Corpus, meta: dict) -> None:
    np.savez_compressed(
        path,
        **arrays,
        vocabulary=np.array(corpus.vocabulary if corpus.vocabulary is not None else [], dtype=str),
        meta=np.array(json.dumps(meta)),
    )


def load_model(path: str | Path) -> tuple[TopicModelInference | DPVariationalLDA, list[str] | None]:
    """Read a model written by :func:`save_model`; returns the model and its vocabulary."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such model file: {path}")
    written_by = "a model file written by 'dptensor lda fit --out'"
    if path.suffix == ".npz":
        with np.load(check_binary(path, "npz"), allow_pickle=False) as f:
            missing = [key for key in ("meta", "components", "vocabulary") if key not in f.files]
            if missing:
                raise ValueError(f"{path} has no {', '.join(missing)}: it is not {written_by}")
            meta = json.loads(str(f["meta"]))
            components = f["components"]
            alpha = f["alpha"] if "alpha" in f.files else None
            vocabulary = [str(w) for w in f["vocabulary"]] or None
    else:
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ValueError(f"{path} is not JSON: expected {written_by} (.json or .npz)") from None
        if not isinstance(meta, dict) or "components" not in meta:
            raise ValueError(f"{path} has no 'components': it is not {written_by}")
        components = np.asarray(meta["components"])
        alpha = np.asarray(meta["alpha"]) if "alpha" in meta else None
        vocabulary = meta.get("vocabulary")
    if not isinstance(meta, dict) or "params" not in meta:
        raise ValueError(f"{path} has no 'params': it is not {written_by}")
    if meta.get("model") == "DPVariationalLDA":
        return DPVariationalLDA.from_components(components, **meta["params"]), vocabulary
    classes = {"SpectralLDA": SpectralLDA, "PrivateSpectralLDA": PrivateSpectralLDA}
    if meta.get("model") not in classes:
        raise ValueError(f"{path} is not a SpectralLDA, PrivateSpectralLDA or DPVariationalLDA model file")
    model = classes[meta["model"]](**meta["params"])
    model.components_ = np.asarray(components, dtype=np.float64)
    model.alpha_ = np.asarray(alpha, dtype=np.float64)
    model.n_features_in_ = model.components_.shape[1]
    return model, vocabulary


def run_transform(args: argparse.Namespace) -> int:
    if args.out is not None:
        output_path(args.out, suffixes=THETA_FORMATS)
    model, vocabulary = load_model(args.model)
    path = Path(args.corpus)
    if _is_plain_text(path) and vocabulary is not None:
        corpus = load_text_corpus(path, fixed_vocabulary=vocabulary)
    else:
        corpus = load_corpus(path, vocabulary=args.vocab)
    theta = model.transform(corpus.counts)
    if args.out:
        out = Path(args.out)
        with atomic_path(out) as tmp:  # the temporary name keeps the suffix: np.save adds none
            if out.suffix.lower() == ".npy":
                np.save(tmp, theta)
            else:
                np.savetxt(tmp, theta, delimiter="," if out.suffix.lower() == ".csv" else " ", fmt="%.6g")
        print(f"wrote {out} ({theta.shape[0]} documents x {theta.shape[1]} topics)")
    else:
        for row in theta:
            print(" ".join(f"{x:.4f}" for x in row))
    return 0
