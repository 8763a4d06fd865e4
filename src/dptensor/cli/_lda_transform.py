"""``dptensor lda transform``: the topic proportions of documents under a saved model."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from dptensor._files import atomic_path
from dptensor.cli._lda_options import THETA_FORMATS, is_plain_text
from dptensor.cli._options import output_path, refuse_unused
from dptensor.datasets.corpus import (
    SKLEARN_TOKEN_PATTERN,
    load_corpus,
    load_text_corpus,
)
from dptensor.models.topics.persistence import read_model_file


def transform_token_pattern(meta: dict, given: str | None) -> str:
    """The token pattern ``lda transform`` splits new text with: the one the model was fitted with.

    ``meta`` is the model file's metadata (:func:`read_model_file`). A file written before the
    pattern was recorded was fitted with scikit-learn's; one fitted on a count matrix records
    None (scikit-learn's pattern then applies: it splits out every word such a vocabulary may hold,
    digits and underscores included, as files written before the pattern was recorded).
    ``given`` (``--token-pattern``) may only repeat the recorded pattern, or choose one where none
    is recorded.
    """
    if "token_pattern" not in meta:  # written before the pattern was recorded: scikit-learn's then
        recorded = SKLEARN_TOKEN_PATTERN
    else:
        recorded = meta["token_pattern"]
        if recorded is None:  # fitted on a count matrix: scikit-learn's pattern yields every word it may hold
            return SKLEARN_TOKEN_PATTERN if given is None else given
    if given is not None and given != recorded:
        raise ValueError(
            f"--token-pattern {given!r}: the model was fitted with the token pattern {recorded!r}; new "
            "documents must be split into words the same way (leave out --token-pattern)"
        )
    return recorded


def run_transform(args: argparse.Namespace) -> int:
    if args.out is not None:
        output_path(args.out, suffixes=THETA_FORMATS)
    model, vocabulary, meta = read_model_file(args.model)
    path = Path(args.corpus)
    if is_plain_text(path) and vocabulary is not None:
        corpus = load_text_corpus(path, fixed_vocabulary=vocabulary, encoding=args.encoding,
                                  token_pattern=transform_token_pattern(meta, args.token_pattern))
    else:
        refuse_unused(args, ("token_pattern",), f"it splits plain text into words; {args.corpus} is a count "
                      "matrix (or the model has no vocabulary)")
        corpus = load_corpus(path, vocabulary=args.vocab, encoding=args.encoding)
    theta = model.transform(corpus.counts)
    if args.out:
        out = Path(args.out)
        with atomic_path(out) as tmp:  # the temporary name keeps the suffix: np.save adds none
            if out.suffix.lower() == ".npy":
                np.save(tmp, theta)
            elif out.suffix.lower() == ".csv":
                header = ",".join(["document"] + [f"topic_{i}" for i in range(1, theta.shape[1] + 1)])
                table = np.column_stack([np.arange(theta.shape[0]), theta])
                np.savetxt(tmp, table, delimiter=",", fmt=["%d"] + ["%.6g"] * theta.shape[1], header=header,
                           comments="")
            else:
                np.savetxt(tmp, theta, delimiter=" ", fmt="%.6g")
        print(f"wrote {out} ({theta.shape[0]} documents x {theta.shape[1]} topics)")
    else:
        for row in theta:
            print(" ".join(f"{x:.4f}" for x in row))
    return 0
