"""Saving and loading fitted topic models: the files of ``dptensor lda fit --out``.

:func:`save_model` writes a fitted :class:`~dptensor.models.topics.spectral.SpectralLDA`,
:class:`~dptensor.models.topics.private_spectral.PrivateSpectralLDA` or
:class:`~dptensor.models.topics.dp_vi.DPVariationalLDA` as JSON (human-readable) or ``.npz``
(compact, for large vocabularies); :func:`load_model` and :func:`read_model_file` read it back,
ready for ``transform`` (``dptensor lda transform``, ``dptensor report``). A private model's file
holds only what its guarantee covers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

import numpy as np

from dptensor._files import atomic_path, check_binary, write_json
from dptensor.models._options import flat_params
from dptensor.models.topics.dp_vi import DPVariationalLDA
from dptensor.models.topics.inference import TopicModelInference
from dptensor.models.topics.private_spectral import PrivateSpectralLDA
from dptensor.models.topics.refinement import DEFAULT_TOPIC_WORD_PRIOR, Refinement
from dptensor.models.topics.spectral import SpectralLDA
from dptensor.privacy import PrivacyGuarantee

__all__ = ["FittedCorpus", "load_model", "read_model_file", "save_model"]


class FittedCorpus(Protocol):
    """What :func:`save_model` reads of the corpus a model was fitted on.

    :class:`dptensor.datasets.corpus.Corpus` is one; the models layer does not import the data layer.
    """

    @property
    def vocabulary(self) -> list[str] | None:
        """``vocabulary[j]`` is the word of column ``j`` (None when the source has none)."""

    @property
    def source(self) -> str:
        """Where the corpus came from."""

    @property
    def token_pattern(self) -> str | None:
        """The regular expression that split plain text into words (None for count matrices)."""


def save_model(
    path: str | Path, model: TopicModelInference | DPVariationalLDA, corpus: FittedCorpus,
    guarantees: dict[str, PrivacyGuarantee] | None = None, *, extra: dict | None = None,
) -> None:
    """Write a fitted model: JSON (human-readable) or ``.npz`` (compact, for large vocabularies).

    A private model records its guarantee and omits everything computed from the documents without
    noise (token counts, dropped documents, timings: wall-clock time is not covered by the guarantee).
    A :class:`DPVariationalLDA` file holds ``lambda`` (``components``). ``guarantees`` adds more
    (e.g. ``vocabulary_guarantee`` and ``total_guarantee`` of a private vocabulary).

    Parameters
    ----------
    path : str or Path
        The file to write, ``.npz`` or JSON (any other suffix); written atomically.
    model : SpectralLDA, PrivateSpectralLDA or DPVariationalLDA
        A fitted model.
    corpus : FittedCorpus
        The corpus the model was fitted on (a :class:`dptensor.datasets.corpus.Corpus`): only its
        vocabulary, source and token pattern are written.
    guarantees : dict of str to PrivacyGuarantee, optional
        More guarantees to record, each under its key.
    extra : dict, optional
        More JSON-friendly records of the file's metadata, each under its key (e.g.
        :class:`~dptensor.models.topics.text_model.PrivateTopicModel`'s settings).
    """
    path = Path(path)
    skip = {"random_state", "noise", "ledger", "verbose", "public_corpus"}  # data, not settings
    vi = isinstance(model, DPVariationalLDA)  # its options flat; the research wing's subclass under its name
    params = flat_params(model) if vi else model.get_params()
    meta = {
        "model": "DPVariationalLDA" if vi else type(model).__name__,
        "params": {k: v for k, v in params.items() if k not in skip},
        "n_documents": model.n_documents_,
        "source": corpus.source,
        # how plain text was split into words (None: a count matrix); lda transform splits new text alike
        "token_pattern": corpus.token_pattern,
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
        if getattr(model, "unigram_", None) is not None:  # inference matches the topics to it
            arrays["unigram"] = model.unigram_
        refinement = getattr(model, "refinement_", None)
        if refinement is not None:  # components are the refined topics; inference uses this prior
            arrays["doc_topic_prior"] = refinement.doc_topic_prior
            meta["refinement"] = {
                "n_passes": refinement.n_passes, "converged": refinement.converged,
                "topic_word_prior": refinement.topic_word_prior,
                "log_likelihood": refinement.log_likelihood.tolist(),  # empty for a private model
            }  # fmt: skip
        if isinstance(model, PrivateSpectralLDA):
            meta["guarantee"] = model.guarantee_.to_dict()
            meta["shrinkage"] = model.shrinkage_  # inference's weight of the released unigram_
            meta["topic_recovery"] = model.topic_recovery_
            if model.whitening_alignment_ is not None:
                meta["whitening_alignment"] = model.whitening_alignment_.tolist()
        else:
            meta["n_dropped_documents"] = model.n_dropped_documents_
            meta["timings"] = model.timings_
            if model.topic_stability_ is not None:
                meta["topic_stability"] = model.topic_stability_.tolist()
    meta.update({key: g.to_dict() for key, g in (guarantees or {}).items()})
    meta.update(extra or {})
    if path.suffix == ".npz":
        with atomic_path(path) as tmp:
            _save_npz(tmp, arrays, corpus, meta)
        return
    write_json(path, {**meta, **arrays, "vocabulary": corpus.vocabulary, "components_layout": layout})


def _save_npz(path: Path, arrays: dict, corpus: FittedCorpus, meta: dict) -> None:
    np.savez_compressed(
        path,
        **arrays,
        vocabulary=np.array(corpus.vocabulary if corpus.vocabulary is not None else [], dtype=str),
        meta=np.array(json.dumps(meta)),
    )


def load_model(path: str | Path) -> tuple[TopicModelInference | DPVariationalLDA, list[str] | None]:
    """Read a model written by :func:`save_model`; returns the model and its vocabulary.

    Parameters
    ----------
    path : str or Path
        A ``.npz`` or JSON model file.

    Returns
    -------
    model : SpectralLDA, PrivateSpectralLDA or DPVariationalLDA
        Ready for ``transform``.
    vocabulary : list of str or None
    """
    model, vocabulary, _ = read_model_file(path)
    return model, vocabulary


def read_model_file(
    path: str | Path,
) -> tuple[TopicModelInference | DPVariationalLDA, list[str] | None, dict]:
    """Read a model written by :func:`save_model`: the model, its vocabulary and the file's metadata.

    The metadata holds ``params``, ``n_documents``, ``source``, ``token_pattern`` (files written
    before it was recorded have no such key) and, for private models, the guarantee.

    Parameters
    ----------
    path : str or Path
        A ``.npz`` or JSON model file.

    Returns
    -------
    model : SpectralLDA, PrivateSpectralLDA or DPVariationalLDA
    vocabulary : list of str or None
    meta : dict

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        The file is not a model file written by :func:`save_model`.
    """
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
            unigram = f["unigram"] if "unigram" in f.files else None
            doc_topic_prior = f["doc_topic_prior"] if "doc_topic_prior" in f.files else None
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
        unigram = np.asarray(meta["unigram"]) if "unigram" in meta else None
        doc_topic_prior = np.asarray(meta["doc_topic_prior"]) if "doc_topic_prior" in meta else None
        vocabulary = meta.get("vocabulary")
    if not isinstance(meta, dict) or "params" not in meta:
        raise ValueError(f"{path} has no 'params': it is not {written_by}")
    if meta.get("model") == "DPVariationalLDA":
        model = DPVariationalLDA.from_components(components, **_vi_params(meta["params"], components))
        return model, vocabulary, meta
    classes = {"SpectralLDA": SpectralLDA, "PrivateSpectralLDA": PrivateSpectralLDA}
    if meta.get("model") not in classes:
        raise ValueError(f"{path} is not a SpectralLDA, PrivateSpectralLDA or DPVariationalLDA model file")
    # A file written before match_unigram (or refinement) existed keeps the inference it was written with.
    defaults = {"match_unigram": False, "refine": None}
    model = classes[meta["model"]](**{**defaults, **meta["params"]})
    model.components_ = np.asarray(components, dtype=np.float64)
    model.alpha_ = np.asarray(alpha, dtype=np.float64)
    model.n_features_in_ = model.components_.shape[1]
    model.unigram_ = None if unigram is None else np.asarray(unigram, dtype=np.float64)
    model.refinement_ = None
    if doc_topic_prior is not None:
        record = meta.get("refinement", {})
        model.refinement_ = Refinement(
            topics=model.components_, doc_topic_prior=np.asarray(doc_topic_prior, dtype=np.float64),
            topic_word_prior=float(record.get("topic_word_prior", DEFAULT_TOPIC_WORD_PRIOR)),
            log_likelihood=np.asarray(record.get("log_likelihood", []), dtype=np.float64),
            n_passes=int(record.get("n_passes", 0)), converged=bool(record.get("converged", False)),
        )  # fmt: skip
    if isinstance(model, PrivateSpectralLDA):  # the shrinkage toward the released unigram distribution
        model.shrinkage_ = float(meta.get("shrinkage", 0.0)) if unigram is not None else 0.0
        saved = meta.get("whitening_alignment")  # absent from files of other modes and older versions
        model.whitening_alignment_ = None if saved is None else np.asarray(saved, dtype=np.float64)
        model.topic_recovery_ = meta.get("topic_recovery", "tensor")  # files before it: the tensor step
    return model, vocabulary, meta


def _vi_params(params: dict, components: object) -> dict:
    """A DP-VI file's flat parameters for :meth:`DPVariationalLDA.from_components`.

    ``accountant`` (written by ``accountant="paper"`` fits, now the research wing's) is dropped: its
    one effect on inference, the default prior ``1/K`` of a private paper-mode fit, is made explicit.
    """
    params = dict(params)
    if params.pop("accountant", "exact") == "paper" and params.get("doc_topic_prior") is None:
        params["doc_topic_prior"] = 1.0 / np.asarray(components).shape[0]
    return params
