"""The neighbouring-input fuzzer: every private entry point, on ordinary and adversarial neighbours.

One table, :data:`ENTRY_POINTS`, lists every private path of dptensor -- each estimator, function
and command with ``--epsilon`` -- with the kind of data it protects. A *kind* (:data:`KINDS`) knows
the neighbouring relation: how to draw an ordinary data set, a random neighbour of it, and the
adversarial neighbours of issue 27 (huge and tiny counts and values, ``0`` and ``2**63 - 1``, the
NaN-free extremes of float64, empty rows, a user with no ratings, a data set of a single record,
the longest document allowed). A new private path is covered by adding one row to the table.

For every row and every neighbour, each input is run (and observed with
:func:`dptensor.privacy.audit.observe` / :func:`dptensor.cli.observe_command`) and
everything a caller sees besides the noised numbers is compared: the exception (type and text),
warnings, printed and progress text, the result's attributes (types, shapes, dtypes, NaN and
infinity counts, exact integers, strings and the guarantee), files written (names and structure)
and exit codes. Differences that also occur between runs on the *same* input count as noise: when
two runs differ, each input is run again and the pair fails only if no run of the neighbour looks
like any run of the original.

The default suite draws a few random neighbours per row (``hypothesis``); ``pytest -m slow``
draws more.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dptensor import SingleTopicModel, TensorCompletion, input_perturbation, private_power_method
from dptensor.cli import observe_command
from dptensor.model_selection import PrivateGridSearchCV
from dptensor.models._options import build_estimator
from dptensor.models.recommend import PrivateRecommender
from dptensor.models.topics.dp_vi import DPVariationalLDA
from dptensor.models.topics.dp_vi_options import DPVIOptions
from dptensor.models.topics.private_spectral import PrivateSpectralLDA
from dptensor.models.topics.vectorizer import PrivateCountVectorizer
from dptensor.privacy.audit import Observation, observable_differences, observe
from dptensor.privacy.vocabulary import private_vocabulary
from dptensor.tensor import SampleMoment

#: Runs per input when the first two runs differ (the differences between them count as noise).
RUNS = 3
MAX_COUNT = 2**63 - 1
HUGE = float(np.finfo(np.float64).max)  # 1.7976931348623157e308
TINY = float(np.finfo(np.float64).smallest_subnormal)  # 5e-324


# ----------------------------------------------------------------------------- what a caller sees


def _array_profile(value: np.ndarray) -> tuple:
    if value.dtype.kind in "fc":
        return (value.shape, str(value.dtype), int(np.isnan(value).sum()), int(np.isinf(value).sum()))
    return (value.shape, str(value.dtype))


def _profile(value: object, depth: int = 0) -> object:
    """Exact integers, strings, NaN/inf counts of arrays, and the guarantee of a result (one level)."""
    if isinstance(value, np.ndarray):
        return _array_profile(value)
    if isinstance(value, bool | str | type(None)):
        return value
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return ("float", bool(np.isnan(value)), bool(np.isinf(value)))
    if type(value).__name__ == "PrivacyGuarantee":
        return repr(value)  # computed from parameters and public sizes only: equal, exactly
    if isinstance(value, list | tuple) and depth < 2:
        return tuple(_profile(v, depth + 1) for v in value[:20])
    if depth < 1 and hasattr(value, "__dict__"):
        return tuple((k, _profile(v, depth + 1)) for k, v in sorted(vars(value).items()))
    return type(value).__name__


@dataclass
class Seen:
    """One run's observation, reduced to what must not depend on the data."""

    observation: Observation
    extra: object = None
    numbers: dict[str, float] = field(default_factory=dict)

    def key(self) -> str:
        return json.dumps([self.observation.summary(), self.extra], default=repr, sort_keys=True)


# ----------------------------------------------------------------------------- data kinds


@dataclass(frozen=True)
class Kind:
    """A neighbouring relation: ordinary data, a random neighbour, the adversarial neighbours."""

    name: str
    draw: Callable[[np.random.Generator], Any]
    neighbour: Callable[[Any, np.random.Generator], Any]
    adversarial: dict[str, Callable[[Any], tuple[Any, Any]]]


def _document(rng: np.random.Generator, d: int) -> np.ndarray:
    row = rng.multinomial(int(rng.integers(3, 12)), np.full(d, 1.0 / d)).astype(float)
    return row


def _draw_counts(rng: np.random.Generator, n: int = 24, d: int = 6) -> np.ndarray:
    return np.array([_document(rng, d) for _ in range(n)])


def _replace_document(counts: np.ndarray, row: np.ndarray, index: int = 0) -> np.ndarray:
    out = counts.copy()
    out[index] = row
    return out


def _counts_neighbour(counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return _replace_document(counts, _document(rng, counts.shape[1]), int(rng.integers(counts.shape[0])))


def _one_hot(d: int, word: int, count: float) -> np.ndarray:
    row = np.zeros(d)
    row[word] = count
    return row


def _counts_adversarial() -> dict[str, Callable]:
    def pair(make_row: Callable[[int], np.ndarray]) -> Callable:
        def build(counts: np.ndarray) -> tuple:
            return counts, _replace_document(counts, make_row(counts.shape[1]))
        return build

    def spread(count: float) -> Callable[[int], np.ndarray]:
        return lambda d: np.full(d, count)

    return {
        "count-2**63-1": pair(lambda d: _one_hot(d, 1, float(MAX_COUNT))),
        "count-1e110": pair(lambda d: _one_hot(d, 1, 1e110)),
        "count-1e160": pair(lambda d: _one_hot(d, 1, 1e160)),
        "count-float-max": pair(lambda d: _one_hot(d, 1, HUGE)),
        "two-counts-float-max": pair(lambda d: _one_hot(d, 1, HUGE) + _one_hot(d, 2, HUGE)),
        "every-word-float-max": pair(spread(HUGE)),
        "shortest-document": pair(lambda d: _one_hot(d, 0, 3.0)),
        "empty-document": pair(np.zeros),
        "one-token": pair(lambda d: _one_hot(d, 2, 1.0)),
        "single-document-corpus": lambda counts: (counts[:1], _replace_document(counts[:1], _one_hot(
            counts.shape[1], 4, float(MAX_COUNT)))),
    }


def _draw_tokens(rng: np.random.Generator, n: int = 24, d: int = 6) -> list:
    return [rng.integers(0, d, size=int(rng.integers(3, 9))) for _ in range(n)]


def _tokens_neighbour(tokens: list, rng: np.random.Generator) -> list:
    out = list(tokens)
    out[int(rng.integers(len(out)))] = rng.integers(0, 6, size=int(rng.integers(3, 9)))
    return out


def _tokens_adversarial() -> dict[str, Callable]:
    def replace(doc: np.ndarray) -> Callable:
        return lambda tokens: (tokens, [doc, *tokens[1:]])

    return {
        "longest-document": replace(np.arange(200_000) % 6),
        "shortest-document": replace(np.array([5, 5, 5])),
        "single-document-corpus": lambda tokens: (tokens[:1], [np.array([1, 2, 3])]),
    }


def _draw_tensor(rng: np.random.Generator, d: int = 4) -> np.ndarray:
    """``sum_k w_k v_k^{(x)3}`` with two unit vectors, weights 3 and 1.5."""
    v = rng.standard_normal((2, d))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return np.einsum("k,ka,kb,kc->abc", np.array([3.0, 1.5]), v, v, v)


def _change_entry(tensor: np.ndarray, index: tuple[int, int, int], by: float) -> np.ndarray:
    """Change one entry and its permuted copies by ``by`` (Definition 4.2: ``|by| <= 1``)."""
    out = tensor.copy()
    i, j, k = index
    for p in {(i, j, k), (i, k, j), (j, i, k), (j, k, i), (k, i, j), (k, j, i)}:
        out[p] += by
    return out


def _tensor_neighbour(tensor: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    index = tuple(int(x) for x in rng.integers(0, tensor.shape[0], size=3))
    return _change_entry(tensor, index, float(rng.uniform(-1, 1)))


def _tensor_adversarial() -> dict[str, Callable]:
    return {
        "zero-tensor": lambda t: (np.zeros_like(t), _change_entry(np.zeros_like(t), (0, 0, 0), 1.0)),
        "tiny-change": lambda t: (t, _change_entry(t, (0, 1, 2), TINY)),
        "largest-change": lambda t: (t, _change_entry(t, (1, 1, 1), -1.0)),
        "entry-near-float-max": lambda t: (_change_entry(t, (0, 0, 0), 1e307),
                                           _change_entry(_change_entry(t, (0, 0, 0), 1e307), (0, 1, 2), 1.0)),
    }


def _draw_records(rng: np.random.Generator, n: int = 30, d: int = 4) -> np.ndarray:
    x = rng.standard_normal((n, d))
    return x / (2 * np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1.0))


def _records_neighbour(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    out = x.copy()
    out[int(rng.integers(len(x)))] = rng.standard_normal(x.shape[1])
    return out


def _records_adversarial() -> dict[str, Callable]:
    def row(value: float) -> Callable:
        def build(x: np.ndarray) -> tuple:
            out = x.copy()
            out[0] = value
            return x, out
        return build

    return {"record-float-max": row(HUGE), "record-float-min": row(-HUGE), "record-tiny": row(TINY),
            "record-zero": row(0.0), "single-record": lambda x: (x[:1], np.full((1, x.shape[1]), HUGE))}


SHAPE = (6, 5, 3)


def _draw_ratings(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    indices = np.argwhere(rng.random(SHAPE) < 0.5)
    return indices, rng.integers(1, 6, size=len(indices)).astype(float)


def _value_neighbour(data: tuple, rng: np.random.Generator) -> tuple:
    indices, values = data
    out = values.copy()
    out[int(rng.integers(len(values)))] = float(rng.uniform(-10, 10))
    return indices, out


def _value_adversarial() -> dict[str, Callable]:
    def value(v: float) -> Callable:
        def build(data: tuple) -> tuple:
            indices, values = data
            out = values.copy()
            out[0] = v
            return data, (indices, out)
        return build

    def single(data: tuple) -> tuple:
        indices, values = data
        return indices[:1], values[:1]

    return {"value-float-max": value(HUGE), "value-float-min": value(-HUGE), "value-tiny": value(TINY),
            "value-zero": value(0.0), "value-2**63-1": value(float(MAX_COUNT)),
            "single-rating": lambda data: (single(data), (single(data)[0], np.array([-HUGE])))}


def _user_ratings(rng: np.random.Generator, user: int) -> tuple[np.ndarray, np.ndarray]:
    cells = np.argwhere(rng.random(SHAPE[1:]) < 0.5)
    indices = np.column_stack([np.full(len(cells), user), cells]).astype(np.int64)
    return indices, rng.integers(1, 6, size=len(cells)).astype(float)


def _replace_user(data: tuple, user: int, new: tuple) -> tuple:
    indices, values = data
    keep = indices[:, 0] != user
    return np.vstack([indices[keep], new[0]]).astype(np.int64), np.concatenate([values[keep], new[1]])


def _user_neighbour(data: tuple, rng: np.random.Generator) -> tuple:
    user = int(rng.integers(SHAPE[0]))
    return _replace_user(data, user, _user_ratings(rng, user))


def _user_adversarial() -> dict[str, Callable]:
    none = (np.zeros((0, 3), dtype=np.int64), np.zeros(0))

    def every_cell(user: int, value: float) -> tuple:
        cells = np.argwhere(np.ones(SHAPE[1:], dtype=bool))
        return np.column_stack([np.full(len(cells), user), cells]), np.full(len(cells), value)

    def reversed_user(data: tuple, user: int) -> tuple:
        """The user's ratings on the 1..5 scale mirrored (5 <-> 1): the same cells, other values."""
        indices, values = data
        mine = indices[:, 0] == user
        return indices[mine], 6.0 - values[mine]

    def single(data: tuple) -> tuple:
        indices, values = data
        return (indices[:1], values[:1])

    return {
        "user-with-no-ratings": lambda data: (data, _replace_user(data, 0, none)),
        "empty-neighbour": lambda data: (single(data), none),  # the only user with ratings removed
        "user-rates-everything-float-max": lambda data: (data, _replace_user(data, 1, every_cell(1, HUGE))),
        "user-values-float-min": lambda data: (data, _replace_user(data, 2, every_cell(2, -HUGE))),
        "user-ratings-reversed": lambda data: (data, _replace_user(data, 0, reversed_user(data, 0))),
    }


WORDS = ("tensor", "power", "method", "topic", "model", "privacy", "noise", "budget")


def _text(rng: np.random.Generator) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(3, 9))))


def _draw_texts(rng: np.random.Generator, n: int = 300) -> list:
    return [_text(rng) for _ in range(n)]


def _texts_neighbour(texts: list, rng: np.random.Generator) -> list:
    out = list(texts)
    out[int(rng.integers(len(out)))] = _text(rng)
    return out


def _texts_adversarial() -> dict[str, Callable]:
    def replace(text: str) -> Callable:
        return lambda texts: (texts, [text, *texts[1:]])

    return {
        "longest-document": replace("rare " * 100_000),
        "empty-document": replace(""),
        "single-document-corpus": lambda texts: (texts[:1], ["rare words only here"]),
    }



#: Users x items of the ``interactions`` kind (top-N recommenders; the user relation).
INTERACTIONS = (30, 8)


def _interaction_row(rng: np.random.Generator) -> np.ndarray:
    """One user's listed values: 1 (an interaction) on a random set of items, 0 elsewhere."""
    return (rng.random(INTERACTIONS[1]) < rng.uniform(0.1, 0.7)).astype(float)


def _draw_interactions(rng: np.random.Generator) -> np.ndarray:
    return np.array([_interaction_row(rng) for _ in range(INTERACTIONS[0])])


def _interactions_neighbour(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return _replace_document(values, _interaction_row(rng), int(rng.integers(values.shape[0])))


def _interactions_adversarial() -> dict[str, Callable]:
    """One user's whole row replaced: empty, every item, one item, huge or tiny values, a lone user.

    A value of at least 1 is an interaction (``--threshold 1``); below it the pair is listed but is no
    interaction (so an empty row keeps its user, whose number is public)."""
    def row(make: Callable[[int], np.ndarray]) -> Callable:
        return lambda values: (values, _replace_document(values, make(values.shape[1])))

    return {
        "empty-row": row(np.zeros),
        "every-item": row(np.ones),
        "one-item": row(lambda d: _one_hot(d, 3, 1.0)),
        "every-item-value-2**63-1": row(lambda d: np.full(d, float(MAX_COUNT))),
        "every-item-value-float-max": row(lambda d: np.full(d, HUGE)),
        "values-tiny": row(lambda d: np.full(d, TINY)),
        "single-user": lambda values: (values[:1], np.ones((1, values.shape[1]))),
    }


KINDS = {
    "texts": Kind("texts", _draw_texts, _texts_neighbour, _texts_adversarial()),
    "counts": Kind("counts", _draw_counts, _counts_neighbour, _counts_adversarial()),
    "tokens": Kind("tokens", _draw_tokens, _tokens_neighbour, _tokens_adversarial()),
    "tensor": Kind("tensor", _draw_tensor, _tensor_neighbour, _tensor_adversarial()),
    "records": Kind("records", _draw_records, _records_neighbour, _records_adversarial()),
    "entry-value": Kind("entry-value", _draw_ratings, _value_neighbour, _value_adversarial()),
    "user": Kind("user", _draw_ratings, _user_neighbour, _user_adversarial()),
    "interactions": Kind("interactions", _draw_interactions, _interactions_neighbour,
                         _interactions_adversarial()),
}


# ----------------------------------------------------------------------------- the entry points


def _api(fit: Callable[[Any], Any]) -> Callable[[Any, Path], Seen]:
    def run(data: Any, workdir: Path) -> Seen:
        observation = observe(fit, data)
        return Seen(observation, _profile(observation.result) if observation.result is not None else None)
    return run


def _write_counts(counts: np.ndarray, path: Path) -> str:
    """A ``.npz`` count matrix: int64 where every count fits, float64 (whole numbers) otherwise."""
    fits = bool(np.all(counts < 2.0**63))
    sp.save_npz(path, sp.csr_matrix(counts.astype(np.int64) if fits else counts))
    return str(path)


def _write_ratings(data: tuple, path: Path) -> str:
    indices, values = data
    with open(path, "w") as handle:
        for (i, j, k), v in zip(indices.tolist(), values.tolist(), strict=True):
            handle.write(f"{i},{j},{k},{v!r}\n")
    return str(path)


def _cli(write: Callable[[Any, Path], str], argv: Callable[[str], list[str]]) -> Callable[[Any, Path], Seen]:
    """A command on data written to ``workdir`` (relative paths, so that every run prints the same)."""
    def run(data: Any, workdir: Path) -> Seen:
        import os

        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "out").mkdir(exist_ok=True)
        here = os.getcwd()
        os.chdir(workdir)
        try:
            source = write(data, Path("data"))
            observation = observe_command(argv(source), workdir)
            numbers = _json_numbers(workdir / "out")
            return Seen(observation, _public_sizes(numbers), numbers=numbers)
        finally:
            os.chdir(here)
    return run


def _json_numbers(folder: Path) -> dict[str, float]:
    """The numbers a command wrote to JSON files, by path (not the guarantee's nor the timing)."""
    found: dict[str, float] = {}

    def walk(value: object, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key not in ("guarantee", "seconds"):
                    walk(item, f"{where}.{key}")
        elif isinstance(value, list):
            for n, item in enumerate(value):
                walk(item, f"{where}[{n}]")
        elif isinstance(value, int | float) and not isinstance(value, bool):
            found[where] = float(value)

    for path in sorted(folder.glob("*.json")):
        walk(json.loads(path.read_text()), path.name)
    return found


#: Numbers in a command's JSON files that are public in every guarantee, compared exactly (the
#: profile of a file masks every number; these must not move at all between neighbours).
PUBLIC_SIZES = ("n_documents",)


def _public_sizes(numbers: dict[str, float]) -> list[tuple[str, float]]:
    """The public sizes among a command's JSON numbers (see :data:`PUBLIC_SIZES`), by path."""
    return sorted((path, value) for path, value in numbers.items()
                  if path.rsplit(".", 1)[-1] in PUBLIC_SIZES)


def _counts_file(data: Any, path: Path, suffix: str = ".npz") -> str:
    return _write_counts(data, path.with_suffix(suffix))


def _ratings_file(data: Any, path: Path, suffix: str = ".csv") -> str:
    return _write_ratings(data, path.with_suffix(suffix))


def _interactions_file(data: Any, path: Path) -> str:
    """``user,item,value`` lines of the listed pairs (a user with none: one pair of value 0, listed), the
    public item list ``items.txt`` and a public file of new users ``new.csv`` beside it."""
    lines = ["user,item,value"]
    for u, row in enumerate(data):
        listed = np.flatnonzero(row)
        lines += [f"u{u},i{j},{float(row[j])!r}" for j in listed] or [f"u{u},i0,0"]
    target = path.with_suffix(".csv")
    target.write_text("\n".join(lines) + "\n")
    path.with_name("items.txt").write_text("".join(f"i{j}\n" for j in range(data.shape[1])))
    path.with_name("new.csv").write_text("user,item\nann,i0\nann,i1\nbob,i5\nbob,unknown\n")
    return target.name


def _model_profile(path: Path) -> object:
    """A top-N model file by structure: its JSON header (every entry public) and its arrays' shapes."""
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as archive:
        return (json.loads(str(archive["header"])),
                sorted((key, archive[key].shape, str(archive[key].dtype)) for key in archive.files))


def _with_model(run: Callable[[Any, Path], Seen]) -> Callable[[Any, Path], Seen]:
    """A command's observation with the model file it wrote (``out/model.npz``) compared too."""
    def observed(data: Any, workdir: Path) -> Seen:
        seen = run(data, workdir)
        seen.extra = [seen.extra, _model_profile(workdir / "out" / "model.npz")]
        return seen
    return observed


RECOMMEND_FIT = ["recommend", "fit", "--threshold", "1", "--epsilon", "1", "--delta", "1e-5", "--items",
                 "items.txt", "--quiet", "--out", "out/model.npz"]


def _recommend_fit(path: str, *extra: str) -> list[str]:
    return [*RECOMMEND_FIT[:2], path, *RECOMMEND_FIT[2:], *extra]


def _recommend_top(data: Any, workdir: Path) -> Seen:
    """``recommend fit`` (private) on the data, then ``recommend top`` for the public new users (observed)."""
    import os

    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "out").mkdir(exist_ok=True)
    here = os.getcwd()
    os.chdir(workdir)
    try:
        source = _interactions_file(data, Path("data"))
        fitted = observe_command(_recommend_fit(source, "--method", "ease"), workdir)
        observation = observe_command(["recommend", "top", "out/model.npz", "--for", "new.csv", "--top", "3",
                                       "--out", "out/top.csv"], workdir)
        return Seen(observation, fitted.result)
    finally:
        os.chdir(here)


#: The fuzzer's words as written to files: ``w<i>``. A command prints its topics' top words, which
#: follow the noise; numbered words then differ only in digits, which the comparison masks. The
#: same map for both inputs, so neighbours stay neighbours; other words ("rare") stay as they are.
NUMBERED = {word: f"w{i}" for i, word in enumerate(WORDS)}
#: Numbered words have digits: text rows pass scikit-learn's token pattern (the CLI's default: letters).
DIGIT_WORDS = ["--token-pattern", r"(?u)\b\w\w+\b"]


def _numbered(texts: list) -> list:
    return [" ".join(NUMBERED.get(w, w) for w in text.split()) for text in texts]


def _texts_folder(data: Any, path: Path) -> str:
    """A folder of ``.txt`` documents, one file each (numbered words)."""
    folder = path.with_suffix("")
    folder.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(_numbered(data)):
        (folder / f"{i:05d}.txt").write_text(text, encoding="utf-8")
    return folder.name


def _texts_file(data: Any, path: Path) -> str:
    """One ``.txt`` file, a document per line (numbered words): an empty document is a blank line."""
    target = path.with_suffix(".txt")
    target.write_text("".join(f"{text}\n" for text in _numbered(data)), encoding="utf-8")
    return target.name


def _texts_file_and_vocabulary(data: Any, path: Path) -> str:
    """:func:`_texts_file`, and beside it the public vocabulary ``vocab.txt`` of the numbered words."""
    path.with_name("vocab.txt").write_text("\n".join(NUMBERED.values()) + "\n", encoding="utf-8")
    return _texts_file(data, path)


BUDGET = {"epsilon": 1.0, "delta": 1e-5}
RATING_RANGE = (1.0, 5.0)


def _completion(privacy: str, relation: str, **extra: Any) -> Callable[[Any], Any]:
    def fit(data: tuple) -> TensorCompletion:
        indices, values = data
        return build_estimator(TensorCompletion, rank=2, privacy=privacy, neighbouring=relation,
            value_range=RATING_RANGE, random_state=0, **BUDGET, **extra).fit(indices, values, SHAPE)
    return fit


@dataclass(frozen=True)
class EntryPoint:
    """One private path: its data kind, how to run it, and neighbours known to fail (fixed elsewhere)."""

    name: str
    kind: str
    run: Callable[[Any, Path], Seen]
    #: Joint DP (the user relation): what is shown to the analyst is the DP model, never an aggregate
    #: of users' own predictions, so no number written may move between neighbours beyond its noise.
    joint: bool = False
    #: Adversarial neighbours outside the path's documented domain (documents of fewer than three
    #: tokens where every document needs three: docs/protection.md, *Bounds enforced*). Such an input
    #: must be refused (an exception, or exit code 2), and refused exactly like another input outside
    #: the domain: the refusal tells only that the domain was left, never which document or how.
    outside_domain: frozenset[str] = frozenset()


#: The documents of fewer than three tokens among the adversarial count neighbours.
SHORT_DOCUMENTS = frozenset({"empty-document", "one-token"})


def _private_search(x: np.ndarray) -> dict:
    """``PrivateGridSearchCV`` over two candidates; what it releases but the noisy choice's index."""
    search = PrivateGridSearchCV(PrivateSpectralLDA(2, alpha0=1.0, **BUDGET, random_state=0),
                                 {"alpha0": [1.0, 1.0]}, selection_epsilon=1.0, selection_delta=1e-5, cv=2,
                                 random_state=0).fit(sp.csr_matrix(x))
    released = ("guarantee_", "cv_results_", "best_params_", "best_score_", "best_estimator_",
                "score_sensitivity_", "selection_noise_std_")
    return {name: getattr(search, name) for name in released}


ENTRY_POINTS = [
    EntryPoint("private_power_method(entry)", "tensor", _api(
        lambda t: private_power_method(t, 2, **BUDGET, n_restarts=2, n_iter=3, random_state=0))),
    EntryPoint("private_power_method(record)", "records", _api(
        lambda x: private_power_method(SampleMoment(x), 2, **BUDGET, neighbouring="record", record_bound=1.0,
                                       n_restarts=2, n_iter=3, random_state=0))),
    EntryPoint("input_perturbation(entry)", "tensor", _api(
        lambda t: input_perturbation(t, 2, **BUDGET, n_restarts=2, random_state=0))),
    EntryPoint("input_perturbation(record)", "records", _api(
        lambda x: input_perturbation(x, 2, **BUDGET, neighbouring="record", record_bound=1.0, n_restarts=2,
                                     random_state=0))),
    EntryPoint("TensorCompletion(input)", "entry-value", _api(
        _completion("input", "entry-value", n_epochs=2))),
    EntryPoint("TensorCompletion(gradient_dpsgd)", "entry-value", _api(
        _completion("gradient_dpsgd", "entry-value", n_epochs=2, batch_size=16))),
    EntryPoint("TensorCompletion(output_clipped)", "entry-value", _api(
        _completion("output_clipped", "entry-value", n_epochs=2, output_epochs=2))),
    EntryPoint("TensorCompletion(als, entry-value)", "entry-value", _api(
        _completion("als", "entry-value", max_iter=2))),
    EntryPoint("TensorCompletion(als, user)", "user", _api(
        _completion("als", "user", max_iter=2, max_ratings=8))),
    EntryPoint("TensorCompletion(als, user, spectral start)", "user", _api(
        _completion("als", "user", max_iter=1, max_ratings=8, start="spectral"))),
    EntryPoint("PrivateSpectralLDA", "counts", _api(
        lambda x: PrivateSpectralLDA(2, alpha0=1.0, **BUDGET, random_state=0).fit(sp.csr_matrix(x)))),
    # the search charges its whole plan once and releases noisy held-out scores, the choice and the refit;
    # two identical candidates, so that the noisy choice (best_index_, which differs from run to run)
    # moves nothing else a caller sees, and the rest of what it releases compares neighbours
    EntryPoint("PrivateGridSearchCV(PrivateSpectralLDA)", "counts", _api(_private_search)),
    EntryPoint("PrivateSpectralLDA(tensor)", "counts", _api(
        lambda x: PrivateSpectralLDA(2, alpha0=1.0, **BUDGET, topic_recovery="tensor", random_state=0)
        .fit(sp.csr_matrix(x)))),
    EntryPoint("PrivateSpectralLDA(nmf, whitening words)", "counts", _api(
        lambda x: PrivateSpectralLDA(2, alpha0=1.0, **BUDGET, topic_recovery="nmf", whitening_words=4,
                                     random_state=0).fit(sp.csr_matrix(x)))),
    EntryPoint("PrivateSpectralLDA(whitening words, third clip)", "counts", _api(
        lambda x: PrivateSpectralLDA(2, alpha0=1.0, **BUDGET, whitening_words=3, third_clip=0.01,
                                     topic_recovery="tensor", random_state=0).fit(sp.csr_matrix(x)))),
    # a budget large enough for the q3 release on 24 documents: the support and C3 both chosen privately
    EntryPoint("PrivateSpectralLDA(q3, whitening words)", "counts", _api(
        lambda x: PrivateSpectralLDA(2, alpha0=1.0, epsilon=1000.0, delta=1e-5, whitening_words=4,
                                     topic_recovery="tensor", random_state=0).fit(sp.csr_matrix(x)))),
    # private refinement (issue 35): passes forced on a small corpus, progress lines printed
    EntryPoint("PrivateSpectralLDA(refinement)", "counts", _api(
        lambda x: PrivateSpectralLDA(2, alpha0=1.0, **BUDGET, refine_passes=2, refine_clip=0.5, verbose=True,
                                     random_state=0).fit(sp.csr_matrix(x)))),
    EntryPoint("PrivateSpectralLDA(refinement, tensor)", "counts", _api(
        lambda x: PrivateSpectralLDA(2, alpha0=1.0, epsilon=1000.0, delta=1e-5, topic_recovery="tensor",
                                     refine_passes=3, random_state=0).fit(sp.csr_matrix(x)))),
    # the worst-case (unclipped) releases: clip=None, and the modes that fall back to them
    EntryPoint("PrivateSpectralLDA(clip=None)", "counts", _api(
        lambda x: PrivateSpectralLDA(2, alpha0=1.0, **BUDGET, clip=None, random_state=0)
        .fit(sp.csr_matrix(x))), outside_domain=SHORT_DOCUMENTS),
    EntryPoint("PrivateSpectralLDA(shared_m2=False)", "counts", _api(
        lambda x: PrivateSpectralLDA(2, alpha0=1.0, **BUDGET, shared_m2=False, random_state=0)
        .fit(sp.csr_matrix(x))), outside_domain=SHORT_DOCUMENTS),
    EntryPoint("PrivateSpectralLDA(calibration=classic)", "counts", _api(
        lambda x: PrivateSpectralLDA(2, alpha0=1.0, **BUDGET, calibration="classic", random_state=0)
        .fit(sp.csr_matrix(x))), outside_domain=SHORT_DOCUMENTS),
    EntryPoint("DPVariationalLDA", "counts", _api(
        lambda x: DPVariationalLDA(2, **BUDGET, random_state=0,
                                   options=DPVIOptions(batch_size=24, n_passes=1))  # every document
        .fit(sp.csr_matrix(x)))),
    EntryPoint("DPVariationalLDA(init=moments)", "counts", _api(
        lambda x: DPVariationalLDA(2, **BUDGET, random_state=0,
                                   options=DPVIOptions(n_passes=1, init="moments"))
        .fit(sp.csr_matrix(x)))),
    EntryPoint("PrivateCountVectorizer", "texts", _api(
        lambda texts: PrivateCountVectorizer(20, epsilon=1.0, delta=1e-6).fit(texts))),
    # The policy stops a word's weight at its cutoff: at the default tau + 2 sigma each of the 8 words
    # misses the threshold with probability 2.3% however frequent it is, so which words are released
    # differs between runs of one input by noise alone (a false alarm in about 1 of 40 runs); at
    # tau + 8 sigma the same code releases all 8. (PrivateCountVectorizer's own code is the row above.)
    EntryPoint("private_vocabulary(mechanism=policy-gaussian)", "texts", _api(
        lambda texts: private_vocabulary([text.split() for text in texts], 20, epsilon=1.0, delta=1e-6,
                                         mechanism="policy-gaussian", cutoff_sigmas=8.0))),
    EntryPoint("SingleTopicModel(agn, counts)", "counts", _api(
        lambda x: SingleTopicModel(2, mechanism="agn", **BUDGET, moments="all", random_state=0)
        .fit(sp.csr_matrix(x))), outside_domain=SHORT_DOCUMENTS),
    EntryPoint("SingleTopicModel(avn, tokens)", "tokens", _api(
        lambda docs: SingleTopicModel(2, mechanism="avn", **BUDGET, n_words=6, random_state=0).fit(docs))),
    EntryPoint("SingleTopicModel(dp_tpm, counts)", "counts", _api(
        lambda x: SingleTopicModel(2, mechanism="dp_tpm", **BUDGET, moments="all", n_restarts=2, n_iter=3,
                                   random_state=0).fit(sp.csr_matrix(x))), outside_domain=SHORT_DOCUMENTS),
    # the fuzzer's corpora are small: the planner predicts noise and a fit stops on it (public N and V:
    # the same for neighbours); --force fits anyway
    EntryPoint("dptensor lda fit --epsilon (stops on the planner's verdict)", "counts", _cli(
        _counts_file, lambda path: [
            "lda", "fit", path, "-k", "2", "--alpha0", "1", "--epsilon", "0.05", "--delta", "1e-5",
            "--seed", "0", "--out", "out/model.json"])),
    EntryPoint("dptensor lda fit --epsilon", "counts", _cli(_counts_file, lambda path: [
        "lda", "fit", path, "-k", "2", "--alpha0", "1", "--epsilon", "1", "--delta", "1e-5", "--seed", "0",
        "--quiet", "--force", "--out", "out/model.json"])),
    EntryPoint("dptensor lda fit --epsilon --topic-recovery tensor", "counts", _cli(_counts_file, lambda p: [
        "lda", "fit", p, "-k", "2", "--alpha0", "1", "--epsilon", "1", "--delta", "1e-5", "--seed", "0",
        "--topic-recovery", "tensor", "--force", "--quiet", "--out", "out/model.json"])),
    EntryPoint("dptensor lda fit --epsilon --no-clip", "counts", _cli(_counts_file, lambda path: [
        "lda", "fit", path, "-k", "2", "--alpha0", "1", "--epsilon", "1", "--delta", "1e-5", "--seed", "0",
        "--no-clip", "--quiet", "--out", "out/model.json"]), outside_domain=SHORT_DOCUMENTS),
    EntryPoint("dptensor lda fit --method vi --epsilon", "counts", _cli(_counts_file, lambda path: [
        "lda", "fit", path, "-k", "2", "--method", "vi", "--epsilon", "1", "--delta", "1e-5", "--passes", "1",
        "--batch-size", "24", "--seed", "0", "--quiet", "--out", "out/model.json"])),
    EntryPoint("dptensor lda fit --private-vocab --epsilon", "texts", _cli(_texts_folder, lambda path: [
        "lda", "fit", path, "-k", "2", "--private-vocab", "20", "--epsilon", "4", "--vocab-share", "0.5",
        "--delta", "1e-5", "--seed", "0", "--quiet", "--force", "--out", "out/model.json",
        *DIGIT_WORDS])),  # words pass: a model
    EntryPoint("dptensor lda fit --private-vocab --epsilon (a text file)", "texts", _cli(
        _texts_file, lambda path: [
            "lda", "fit", path, "-k", "2", "--private-vocab", "20", "--epsilon", "4", "--vocab-share", "0.5",
            "--delta", "1e-5", "--seed", "0", "--force", "--out", "out/model.json", *DIGIT_WORDS])),
    EntryPoint("dptensor lda fit --private-vocab --epsilon (a text file, the planner's share)", "texts", _cli(
        _texts_file, lambda path: [
            "lda", "fit", path, "-k", "2", "--private-vocab", "20", "--epsilon", "4", "--delta", "1e-5",
            "--seed", "0", "--force", "--out", "out/model.json", *DIGIT_WORDS])),
    EntryPoint("dptensor lda fit --vocab --epsilon (a text file)", "texts", _cli(
        _texts_file_and_vocabulary, lambda path: [
            "lda", "fit", path, "--vocab", "vocab.txt", "-k", "2", "--alpha0", "1", "--epsilon", "1",
            "--delta", "1e-5", "--seed", "0", "--force", "--out", "out/model.json", *DIGIT_WORDS])),
    EntryPoint("dptensor lda fit --method vi --vocab --epsilon (a text file)", "texts", _cli(
        _texts_file_and_vocabulary, lambda path: [
            "lda", "fit", path, "--vocab", "vocab.txt", "-k", "2", "--method", "vi", "--epsilon", "1",
            "--delta", "1e-5", "--passes", "1", "--batch-size", "24", "--seed", "0", "--out",
            "out/model.json", *DIGIT_WORDS])),
    EntryPoint("dptensor single-topic fit --epsilon", "counts", _cli(_counts_file, lambda path: [
        "single-topic", "fit", path, "-k", "2", "--mechanism", "agn", "--epsilon", "1", "--delta", "1e-5",
        "--seed", "0", "--quiet", "--out", "out/model.json"]), outside_domain=SHORT_DOCUMENTS),
    EntryPoint("dptensor complete --neighbouring entry-value --epsilon", "entry-value", _cli(
        _ratings_file, lambda path: [
            "complete", path, "--shape", *map(str, SHAPE), "--rank", "2", "--privacy", "gradient_dpsgd",
            "--neighbouring", "entry-value", "--epsilon", "1", "--value-range", "1", "5", "--epochs", "2",
            "--seed", "0", "--quiet", "--json", "out/fit.json", "--recommend", "out/top.csv", "--top", "3"])),
    EntryPoint("dptensor complete --neighbouring user --epsilon", "user", _cli(_ratings_file, lambda path: [
        "complete", path, "--shape", *map(str, SHAPE), "--rank", "2", "--privacy", "als", "--neighbouring",
        "user", "--epsilon", "8", "--value-range", "1", "5", "--max-ratings", "8", "--max-iter", "2",
        "--test", "test.csv", "--seed", "0", "--quiet", "--out", "out/pred.csv", "--json", "out/fit.json",
        "--recommend", "out/top.csv", "--top", "3"]),
        joint=True),
    EntryPoint("dptensor recommend fit --epsilon --items (ease)", "interactions", _with_model(_cli(
        _interactions_file,
        lambda path: _recommend_fit(path, "--method", "ease", "--report", "out/fit.json")))),
    EntryPoint("dptensor recommend fit --epsilon --items (popularity)", "interactions", _with_model(_cli(
        _interactions_file, lambda path: _recommend_fit(path, "--method", "popularity", "--report",
                                                        "out/fit.html")))),
    EntryPoint("dptensor recommend top (a private model)", "interactions", _recommend_top),
]
# Not rows: ``dptensor budget create --epsilon`` reads no data (it only creates a ledger), and the
# unproven modes (refused without an opt-in, identically for every input) release nothing.


# ----------------------------------------------------------------------------- PrivateRecommender (library)
#: Public users who chose every item, added to both inputs (neighbours stay neighbours): each item's
#: selection weight is then at least 60 / sqrt(8) = 21, far above the threshold (8.3, sigma 1.5 at
#: epsilon 8), so a selected catalogue keeps every item in every run instead of one that follows the noise.
PUBLIC_CROWD = np.ones((60, INTERACTIONS[1]))
#: Public new users, listed from their own rows and the release alone (joint DP: what may be shown).
NEW_USERS = sp.csr_array(np.eye(2, INTERACTIONS[1]))


def _recommender(method: str, catalogue: str = "public", epsilon: float = 1.0,
                 crowd: bool = False) -> Callable[[Any], dict]:
    """Fit ``PrivateRecommender`` and return what it releases: the item side and lists for public users.

    The fitted estimator also keeps the training rows (``_train``), each user's own data for their own
    list (joint DP), never released: they are not observed, as ``recommend`` for training users is not."""
    def fit(values: np.ndarray) -> dict:
        rows = np.vstack([values, PUBLIC_CROWD]) if crowd else values
        model = PrivateRecommender(epsilon=epsilon, delta=BUDGET["delta"], method=method, catalogue=catalogue,
                                   max_items_per_user=INTERACTIONS[1] if catalogue == "select" else None)
        model.fit(sp.csr_array(rows))
        released = ("guarantee_", "plan_", "method_", "item_side_", "popularity_", "items_", "n_items_",
                    "n_users_", "sweeps_", "candidates_", "recounts_")
        return {**{name: getattr(model, name) for name in released},
                "new_users": model.recommend_for(NEW_USERS, n=3)}
    return fit


ENTRY_POINTS += [
    EntryPoint("PrivateRecommender(popularity)", "interactions", _api(_recommender("popularity"))),
    EntryPoint("PrivateRecommender(ease)", "interactions", _api(_recommender("ease"))),
    EntryPoint("PrivateRecommender(ials)", "interactions", _api(_recommender("ials"))),
    EntryPoint("PrivateRecommender(popularity, select)", "interactions", _api(
        _recommender("popularity", "select", epsilon=8.0, crowd=True))),
    EntryPoint("PrivateRecommender(ease, select)", "interactions", _api(
        _recommender("ease", "select", epsilon=8.0, crowd=True))),
    # 30 users at epsilon 1: no item passes the threshold (47), for every neighbour: the empty model
    EntryPoint("PrivateRecommender(ease, select, nothing passes)", "interactions", _api(
        _recommender("ease", "select"))),
]


# ----------------------------------------------------------------------------- the comparison


def _write_public_test_file(workdir: Path) -> None:
    """The held-out entries of the ``complete --test`` rows (the same file for both inputs)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "test.csv").write_text("0,0,0,5.0\n0,2,2,5.0\n0,4,0,5.0\n")


def _observations(entry: EntryPoint, data: Any, workdir: Path, runs: int) -> list[Seen]:
    seen = []
    for run in range(runs):
        where = workdir / f"run{run}"
        _write_public_test_file(where)
        seen.append(entry.run(data, where))
    return seen


def _separated_numbers(a: list[Seen], b: list[Seen]) -> list[str]:
    """Numbers whose values on the two inputs lie apart by far more than they vary between runs.

    A DP release moves between neighbours by at most about its noise; a number computed from
    un-noised private rows (an aggregate of joint-DP predictions) moves by far more. Flagged: the
    two ranges are disjoint and the gap exceeds four times the larger range (and 1e-6); for two
    samples of three Gaussians 0.3 sd apart that happens with probability 3e-4.
    """
    flagged = []
    for name in set(a[0].numbers) & set(b[0].numbers):
        x = [s.numbers[name] for s in a if name in s.numbers]
        y = [s.numbers[name] for s in b if name in s.numbers]
        spread = max(max(x) - min(x), max(y) - min(y))
        gap = max(min(x) - max(y), min(y) - max(x))
        if gap > max(4.0 * spread, 1e-6):
            flagged.append(f"{name}: {sorted(x)} vs {sorted(y)}")
    return flagged


def assert_indistinguishable(entry: EntryPoint, first: Any, second: Any, workdir: Path) -> None:
    """Fail when some observable tells ``first`` from ``second`` beyond run-to-run noise."""
    a = _observations(entry, first, workdir / "a", 1)
    b = _observations(entry, second, workdir / "b", 1)
    if entry.joint:
        a += _observations(entry, first, workdir / "a2", RUNS - 1)
        b += _observations(entry, second, workdir / "b2", RUNS - 1)
        moved = _separated_numbers(a, b)
        if moved:
            pytest.fail(f"{entry.name}: numbers move between neighbours beyond their noise:\n"
                        + "\n".join(moved))
    if a[0].key() == b[0].key():
        return
    if len(a) == 1:
        a += _observations(entry, first, workdir / "a2", RUNS - 1)
        b += _observations(entry, second, workdir / "b2", RUNS - 1)
    if {s.key() for s in a} & {s.key() for s in b}:
        return  # the difference also occurs between runs on one input: noise
    details = observable_differences(a[0].observation, b[0].observation)
    if a[0].extra != b[0].extra:
        details.append(f"attributes: {a[0].extra!r} != {b[0].extra!r}")
    pytest.fail(f"{entry.name}: neighbours are distinguishable:\n" + "\n".join(details))


def _adversarial_cases() -> list:
    cases = []
    for entry in ENTRY_POINTS:
        for label in KINDS[entry.kind].adversarial:
            cases.append(pytest.param(entry, label, id=f"{entry.name}-{label}"))
    return cases


def _refused(seen: Seen) -> bool:
    """An exception (API) or exit code 2 (a command's input error)."""
    observation = seen.observation
    return observation.exception is not None or (
        isinstance(observation.result, int) and not isinstance(observation.result, bool)
        and observation.result == 2
    )


def assert_refused_alike(entry: EntryPoint, first: np.ndarray, second: np.ndarray, workdir: Path) -> None:
    """``second`` leaves ``entry``'s domain: refused, like another input outside it (two tokens of word 5)."""
    seen = _observations(entry, second, workdir / "refused", 1)[0]
    assert _refused(seen), f"{entry.name}: an input outside the documented domain was accepted"
    other = _replace_document(first, _one_hot(first.shape[1], 5, 2.0))
    assert_indistinguishable(entry, other, second, workdir)


@pytest.mark.parametrize(("entry", "label"), _adversarial_cases())
def test_adversarial_neighbours_are_indistinguishable(entry: EntryPoint, label: str, tmp_path: Path) -> None:
    kind = KINDS[entry.kind]
    first, second = kind.adversarial[label](kind.draw(np.random.default_rng(0)))
    if label in entry.outside_domain:
        assert_refused_alike(entry, first, second, tmp_path)
        return
    assert_indistinguishable(entry, first, second, tmp_path)


def _random_pair(entry: EntryPoint, seed: int) -> tuple[Any, Any]:
    kind = KINDS[entry.kind]
    rng = np.random.default_rng(seed)
    data = kind.draw(rng)
    return data, kind.neighbour(data, rng)


_RANDOM = settings(max_examples=1, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=[e.name for e in ENTRY_POINTS])
@_RANDOM
@given(seed=st.integers(0, 2**32 - 1))
def test_random_neighbours_are_indistinguishable(entry: EntryPoint, seed: int, tmp_path: Path) -> None:
    first, second = _random_pair(entry, seed)
    assert_indistinguishable(entry, first, second, tmp_path / str(seed))


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=[e.name for e in ENTRY_POINTS])
@settings(_RANDOM, max_examples=20)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_neighbours_are_indistinguishable_slow(entry: EntryPoint, seed: int, tmp_path: Path) -> None:
    first, second = _random_pair(entry, seed)
    assert_indistinguishable(entry, first, second, tmp_path / str(seed))


@pytest.mark.parametrize("label", ["ordinary", *KINDS["interactions"].adversarial])
def test_recommend_rows_run_on_every_input(label: str, tmp_path: Path) -> None:
    """The ``recommend`` rows compare runs that succeed (two identical refusals would prove nothing)."""
    kind = KINDS["interactions"]
    data = kind.draw(np.random.default_rng(0))
    inputs = [data] if label == "ordinary" else list(kind.adversarial[label](data))
    top = next(entry for entry in ENTRY_POINTS if entry.name.startswith("dptensor recommend top"))
    for n, values in enumerate(inputs):
        seen = top.run(values, tmp_path / f"top{n}")  # fit --epsilon (its exit code: extra), then top
        assert seen.extra == 0 and seen.observation.result == 0, seen.observation.printed
        assert (tmp_path / f"top{n}" / "out" / "model.npz").is_file()


def test_every_private_entry_point_has_a_row() -> None:
    """Each estimator and function with epsilon, and each command with --epsilon, is in the table."""
    names = " ".join(entry.name for entry in ENTRY_POINTS)
    for path in ("private_power_method", "input_perturbation", "TensorCompletion", "PrivateSpectralLDA",
                 "PrivateCountVectorizer",
                 "DPVariationalLDA", "SingleTopicModel", "lda fit --epsilon", "lda fit --method vi",
                 "single-topic fit", "lda fit --private-vocab",
                 "complete --neighbouring entry-value", "complete --neighbouring user",
                 "recommend fit --epsilon", "recommend top", "PrivateRecommender(", "PrivateGridSearchCV("):
        assert path in names
    for kind in {entry.kind for entry in ENTRY_POINTS}:
        assert KINDS[kind].adversarial
