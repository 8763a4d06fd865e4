"""``dptensor lda``: spectral LDA topic models (``fit``) and document-topic proportions (``transform``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from dptensor.cli._io import write_json
from dptensor.cli._parallel import ParallelSession, add_parallel_arguments, parallel_session
from dptensor.cli._privacy import add_ledger_argument, open_ledger, opened_ledger
from dptensor.datasets.corpus import Corpus, load_corpus, load_text_corpus, load_vocabulary
from dptensor.models.private_spectral_lda import PrivateSpectralLDA
from dptensor.models.spectral_lda import SpectralLDA, TopicModelInference
from dptensor.parallel import public_shape
from dptensor.privacy import BudgetLedger, enable_features


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "lda",
        help="spectral LDA topic models by the method of moments",
        description=(
            "Latent Dirichlet Allocation by the method of moments (DeCarolis et al., Section 4): "
            "unbiased moments, whitening, simultaneous tensor power iteration, un-whitening."
        ),
    )
    actions = parser.add_subparsers(dest="lda_command", metavar="ACTION", required=True)

    fit = actions.add_parser("fit", help="fit topics to a corpus and print the top words of each")
    _corpus_arguments(fit)
    fit.add_argument("--topics", "-k", type=int, required=True, help="number of topics k")
    fit.add_argument("--alpha0", type=float, default=1.0, help="Dirichlet concentration alpha_0 (default 1)")
    fit.add_argument("--stop-words", default=None, help="'english' or none (plain text only)")
    fit.add_argument("--min-df", type=float, default=1, help="CountVectorizer min_df (plain text only)")
    fit.add_argument("--max-df", type=float, default=1.0, help="CountVectorizer max_df (plain text only)")
    fit.add_argument("--max-features", type=int, default=None, help="keep the n most frequent words")
    fit.add_argument(
        "--decomposition", choices=("simultaneous", "robust"), default="simultaneous",
        help="tensor decomposition (default: simultaneous power iteration)",
    )  # fmt: skip
    fit.add_argument(
        "--whitening", choices=("auto", "dense", "randomized", "eigsh"), default="auto",
        help="eigensolver for M2 (default auto)",
    )  # fmt: skip
    fit.add_argument("--top", type=int, default=10, help="top words printed per topic (default 10)")
    fit.add_argument("--seed", type=int, default=None, help="random seed")
    fit.add_argument("--quiet", action="store_true", help="no progress messages")
    fit.add_argument("--out", metavar="FILE", help="write the model (.json, or .npz for large vocabularies)")
    _private_arguments(fit)
    add_parallel_arguments(fit)
    fit.set_defaults(func=run_fit)

    transform = actions.add_parser("transform", help="document-topic proportions under a fitted model")
    transform.add_argument("model", help="model file written by 'dptensor lda fit --out'")
    _corpus_arguments(transform)
    transform.add_argument("--out", metavar="FILE", help="write proportions (.npy, or .csv)")
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
    """Options of the private spectral fit (``PrivateSpectralLDA``); active with ``--epsilon``."""
    group = parser.add_argument_group(
        "differential privacy (spectral)",
        "With --epsilon the fit is document-level (epsilon, delta)-DP (PrivateSpectralLDA; replace one "
        "document, N and the vocabulary public). Every document must have at least 3 tokens, and a "
        "plain-text corpus needs a public --vocab (a vocabulary built from the documents would leak).",
    )
    group.add_argument("--epsilon", type=float, default=None, help="total privacy budget epsilon")
    group.add_argument("--delta", type=float, default=None, help="total delta (required with --epsilon)")
    group.add_argument("--config", type=int, choices=(1, 2, 3, 4), default=1,
                       help="configuration of DeCarolis et al. (default 1; 2-4 need --allow-unproven)")
    group.add_argument("--sensitivity", choices=("derived", "paper"), default="derived",
                       help="'paper' reproduces the printed noise levels (unproven)")
    group.add_argument("--calibration", choices=("analytic", "classic"), default="analytic",
                       help="exact Gaussian-DP composition (default) or the paper's classic tau per edge")
    group.add_argument("--budget-split", metavar="EDGE=W,...", default=None,
                       help="relative budget weights per edge, e.g. e3=0.6,e4=0.2,e8=0.2")
    group.add_argument("--private-whitening", choices=("auto", "analyze-gauss", "noisy-power"),
                       default="auto", help="release of M2: Analyze Gauss or the noisy power method")
    group.add_argument("--allow-unproven", action="store_true",
                       help="run the paper's modes whose guarantee does not hold (reported as NOT PRIVATE)")
    add_ledger_argument(group)


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


def _progress(message: str, quiet: bool = False) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def run_fit(args: argparse.Namespace) -> int:
    with parallel_session(args) as session:
        if getattr(args, "epsilon", None) is not None:
            with opened_ledger(args) as ledger:
                return run_private_fit(args, ledger, session)
        open_ledger(args, private=False)  # --ledger without --epsilon is an error
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
        _progress(f"{records.n_blocks} parts of {records.n_cols} words: {corpus.source}", args.quiet)
        model = SpectralLDA(
            args.topics, args.alpha0, decomposition=args.decomposition, whitening=args.whitening,
            verbose=not args.quiet, random_state=args.seed, n_jobs=session.n_jobs,
        )  # fmt: skip
        model.fit(records)
        _progress(f"{model.n_documents_} documents; passes over them: {session.describe()}", args.quiet)
        _print_topics(args, model, corpus)
        return 0
    _progress(f"reading {args.corpus} ...", args.quiet)
    min_df = int(args.min_df) if float(args.min_df).is_integer() and args.min_df >= 1 else args.min_df
    max_df = int(args.max_df) if args.max_df > 1 else args.max_df
    corpus = load_corpus(
        args.corpus, vocabulary=args.vocab, stop_words=args.stop_words, min_df=min_df, max_df=max_df,
        max_features=args.max_features,
    )  # fmt: skip
    _progress(
        f"{corpus.n_documents} documents, {corpus.n_words} words, {corpus.counts.sum()} tokens "
        f"({time.perf_counter() - start:.1f} s)",
        args.quiet,
    )
    model = SpectralLDA(
        args.topics, args.alpha0, decomposition=args.decomposition, whitening=args.whitening,
        verbose=not args.quiet, random_state=args.seed, n_jobs=session.n_jobs,
    )  # fmt: skip
    model.fit(session.records(corpus.counts))
    _progress(f"passes over the documents: {session.describe()}", args.quiet)
    if model.n_dropped_documents_:
        _progress(f"left out {model.n_dropped_documents_} document(s) with fewer than 3 tokens", args.quiet)
    _print_topics(args, model, corpus)
    return 0


def _print_topics(args: argparse.Namespace, model: TopicModelInference, corpus: Corpus) -> None:
    top = model.top_words(corpus.vocabulary, args.top)
    print(f"{args.topics} topics, alpha_0 = {args.alpha0:g}, fitted in {sum(model.timings_.values()):.2f} s")
    for i, (alpha, words) in enumerate(zip(model.alpha_, top, strict=True), start=1):
        print(f"topic {i:>3}  alpha={alpha:.4f}  {' '.join(words)}")
    if args.out:
        save_model(args.out, model, corpus)
        print(f"wrote {args.out}")


def _load_private_corpus(args: argparse.Namespace) -> Corpus:
    """A corpus whose vocabulary does not depend on the documents (it is public in the guarantee)."""
    if args.stop_words or args.min_df != 1 or args.max_df != 1.0 or args.max_features is not None:
        raise ValueError(
            "--stop-words, --min-df, --max-df and --max-features choose the vocabulary from the documents, "
            "which would leak them; a private fit needs a public vocabulary (--vocab, or a count matrix)"
        )
    path = Path(args.corpus)
    plain_text = path.is_dir() or not (path.suffix in (".mtx", ".npz") or path.name.startswith("docword."))
    if plain_text:
        if args.vocab is None:
            raise ValueError(
                "a private fit of a plain-text corpus needs a public vocabulary file (--vocab): a "
                "vocabulary built from the documents would reveal their words"
            )
        return load_text_corpus(path, fixed_vocabulary=load_vocabulary(args.vocab))
    return load_corpus(path, vocabulary=args.vocab)


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
        corpus = _load_private_corpus(args)
        records = session.records(corpus.counts)
    n_documents, n_words = public_shape(records)
    _progress(f"{n_documents} documents, {n_words} words (public)", args.quiet)
    _progress(f"passes over the documents: {session.describe()}", args.quiet)
    model = PrivateSpectralLDA(
        args.topics, args.alpha0, epsilon=args.epsilon, delta=args.delta, config=args.config,
        sensitivity=args.sensitivity, calibration=args.calibration,
        budget_split=_parse_split(args.budget_split), private_whitening=args.private_whitening,
        decomposition=args.decomposition, verbose=not args.quiet,
        random_state=args.seed, ledger=ledger, n_jobs=session.n_jobs,
    )  # fmt: skip
    if args.allow_unproven:
        with enable_features("unproven"):
            model.fit(records)
    else:
        model.fit(records)
    print(f"guarantee: {model.guarantee_.describe()}")
    _print_topics(args, model, corpus)
    return 0


def save_model(path: str | Path, model: TopicModelInference, corpus: Corpus) -> None:
    """Write a fitted model: JSON (human-readable) or ``.npz`` (compact, for large vocabularies).

    A private model records its guarantee and omits the timings (wall-clock time is not covered
    by the guarantee).
    """
    path = Path(path)
    private = isinstance(model, PrivateSpectralLDA)
    skip = {"random_state", "noise", "ledger"}
    meta = {
        "model": type(model).__name__,
        "params": {k: v for k, v in model.get_params().items() if k not in skip},
        "alpha0": model.alpha0,
        "n_documents": model.n_documents_,
        "source": corpus.source,
    }
    if private:
        meta["guarantee"] = model.guarantee_.to_dict()
    else:
        meta["n_dropped_documents"] = model.n_dropped_documents_
        meta["timings"] = model.timings_
    if path.suffix == ".npz":
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(
            path,
            components=model.components_,
            alpha=model.alpha_,
            vocabulary=np.array(corpus.vocabulary if corpus.vocabulary is not None else [], dtype=str),
            meta=np.array(json.dumps(meta)),
        )
        return
    write_json(
        path,
        {
            **meta,
            "alpha": model.alpha_,
            "vocabulary": corpus.vocabulary,
            "components": model.components_,
            "components_layout": "n_topics x n_words, rows on the probability simplex",
        },
    )


def load_model(path: str | Path) -> tuple[TopicModelInference, list[str] | None]:
    """Read a model written by :func:`save_model`; returns the model and its vocabulary."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such model file: {path}")
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"]))
            components, alpha = f["components"], f["alpha"]
            vocabulary = [str(w) for w in f["vocabulary"]] or None
    else:
        meta = json.loads(path.read_text())
        components, alpha = np.asarray(meta["components"]), np.asarray(meta["alpha"])
        vocabulary = meta.get("vocabulary")
    classes = {"SpectralLDA": SpectralLDA, "PrivateSpectralLDA": PrivateSpectralLDA}
    if meta.get("model") not in classes:
        raise ValueError(f"{path} is not a SpectralLDA or PrivateSpectralLDA model file")
    model = classes[meta["model"]](**meta["params"])
    model.components_ = np.asarray(components, dtype=np.float64)
    model.alpha_ = np.asarray(alpha, dtype=np.float64)
    model.n_features_in_ = model.components_.shape[1]
    return model, vocabulary


def run_transform(args: argparse.Namespace) -> int:
    model, vocabulary = load_model(args.model)
    path = Path(args.corpus)
    plain_text = path.is_dir() or not (path.suffix in (".mtx", ".npz") or path.name.startswith("docword."))
    if plain_text and vocabulary is not None:
        corpus = load_text_corpus(path, fixed_vocabulary=vocabulary)
    else:
        corpus = load_corpus(path, vocabulary=args.vocab)
    theta = model.transform(corpus.counts)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix == ".csv":
            np.savetxt(out, theta, delimiter=",", fmt="%.6g")
        else:
            np.save(out, theta)
        print(f"wrote {out} ({theta.shape[0]} documents x {theta.shape[1]} topics)")
    else:
        for row in theta:
            print(" ".join(f"{x:.4f}" for x in row))
    return 0
