"""``dptensor lda``: spectral LDA topic models (``fit``) and document-topic proportions (``transform``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from dptensor.cli._io import write_json
from dptensor.datasets.corpus import Corpus, load_corpus, load_text_corpus
from dptensor.models.spectral_lda import SpectralLDA


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


def _progress(message: str, quiet: bool = False) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def run_fit(args: argparse.Namespace) -> int:
    start = time.perf_counter()
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
        verbose=not args.quiet, random_state=args.seed,
    )  # fmt: skip
    model.fit(corpus.counts)
    if model.n_dropped_documents_:
        _progress(f"left out {model.n_dropped_documents_} document(s) with fewer than 3 tokens", args.quiet)
    top = model.top_words(corpus.vocabulary, args.top)
    print(f"{args.topics} topics, alpha_0 = {args.alpha0:g}, fitted in {sum(model.timings_.values()):.2f} s")
    for i, (alpha, words) in enumerate(zip(model.alpha_, top, strict=True), start=1):
        print(f"topic {i:>3}  alpha={alpha:.4f}  {' '.join(words)}")
    if args.out:
        save_model(args.out, model, corpus)
        print(f"wrote {args.out}")
    return 0


def save_model(path: str | Path, model: SpectralLDA, corpus: Corpus) -> None:
    """Write a fitted model: JSON (human-readable) or ``.npz`` (compact, for large vocabularies)."""
    path = Path(path)
    meta = {
        "model": "SpectralLDA",
        "params": {k: v for k, v in model.get_params().items() if k != "random_state"},
        "alpha0": model.alpha0,
        "n_documents": model.n_documents_,
        "n_dropped_documents": model.n_dropped_documents_,
        "source": corpus.source,
        "timings": model.timings_,
    }
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


def load_model(path: str | Path) -> tuple[SpectralLDA, list[str] | None]:
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
    if meta.get("model") != "SpectralLDA":
        raise ValueError(f"{path} is not a SpectralLDA model file")
    model = SpectralLDA(**meta["params"])
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
