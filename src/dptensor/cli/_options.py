"""The command-line convention every ``dptensor`` subcommand follows, written once.

* :class:`Parser`: argparse with one-line errors (``dptensor <command>: error: ...``, exit code 2,
  no usage block) and help that ends with the subcommand's example (``epilog``, printed as written).
* ``type=`` validators (:func:`positive_int`, :func:`nonnegative_int`, :func:`positive_float`,
  :func:`probability`): a bad value is refused while the command line is parsed, naming the flag.
* :func:`add_quiet_argument`: the one ``--quiet`` flag (progress is shown unless it is given).
* :func:`add_noise_argument`: the one ``--noise`` flag, its help saying what OpenDP does not cover.
* :func:`add_text_arguments`: ``--token-pattern`` (letters-only words by default for topic models)
  and ``--encoding`` of every command that reads text.
* :func:`output_path`: an ``--out`` path is checked before any work (not a directory, parent exists).
* :func:`refuse_overwriting_inputs`: no output option (:data:`OUTPUT_FLAGS`) names a file that another
  path on the command line names (the data, ``--test``, ``--ledger``, ...), nor another output's file;
  :func:`dptensor.cli.main` checks every command this way before it runs.
* :func:`refuse_unused`: options that do nothing in the chosen mode are an error naming them.
* :func:`research_options_last`: ``--help`` lists the everyday options first and the papers'
  configurations and tuning knobs last, in groups headed :data:`RESEARCH_HEADING`.

:func:`dptensor.cli.main` turns every user error raised by a command (``ValueError``, ``OSError``,
``MemoryError``, ...) into one line and exit code 2, and Ctrl-C into one line and exit code 130.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import NoReturn

from dptensor.datasets.corpus import DEFAULT_ENCODING, SKLEARN_TOKEN_PATTERN
from dptensor.models.topics.vectorizer import TOPIC_TOKEN_PATTERN
from dptensor.privacy import NOISE_BACKENDS

__all__ = [
    "Parser",
    "add_noise_argument",
    "add_quiet_argument",
    "add_text_arguments",
    "encoding",
    "nonnegative_int",
    "output_path",
    "positive_float",
    "positive_int",
    "positive_int_or_auto",
    "probability",
    "refuse_overwriting_inputs",
    "refuse_problems",
    "refuse_unused",
    "research_options_last",
    "seed",
    "token_pattern",
]

#: Options whose value is a file a command writes (and may replace). Every other path-valued
#: option or positional argument is an input as far as :func:`refuse_overwriting_inputs` goes.
OUTPUT_FLAGS = ("--out", "--json", "--report", "--plot", "--csv", "--recommend")


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's help, with a flag's default placeholder spelled like the flag (``MAX-RATINGS``,
    not the Python name ``MAX_RATINGS``)."""

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        return action.dest.upper().replace("_", "-")


class Parser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` with one-line errors and a verbatim example epilog.

    Subparsers made with ``add_subparsers`` are of this class too. The description is wrapped as
    usual; the ``epilog`` (the example commands) is printed exactly as written; a flag's default
    placeholder is spelled like the flag (:class:`_HelpFormatter`).
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        """Print ``<prog>: error: <message>`` and a pointer to ``--help`` on one line; exit 2."""
        self.exit(2, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")

    def format_help(self) -> str:
        epilog, self.epilog = self.epilog, None
        try:
            text = super().format_help()
        finally:
            self.epilog = epilog
        if epilog:
            text += "\n" + epilog.strip("\n") + "\n"
        return text


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """``type=`` for counts that must be at least 1 (``--top``, ``--trials``, ``--rank``, ...)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (at least 1), got {value}")
    return value


def positive_int_or_auto(text: str) -> int | str:
    """``type=`` for a count that a rule may choose: ``"auto"`` or an integer of at least 1."""
    if text == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (at least 1) or 'auto', got {value}")
    return value


def nonnegative_int(text: str) -> int:
    """``type=`` for integers that may be 0 but not negative."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {value}")
    return value


def seed(text: str) -> int:
    """``type=`` for ``--seed``: a non-negative integer (NumPy's seeds)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed must be a non-negative integer, got {value}")
    return value


def positive_float(text: str) -> float:
    """``type=`` for finite numbers greater than 0 (``--epsilon``, ``--tol``, ``--alpha0``, ...)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number greater than 0, got {text}")
    return value


def probability(text: str) -> float:
    """``type=`` for ``--delta``: a number in (0, 1)."""
    value = positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1), got {text}")
    return value


def token_pattern(text: str) -> str:
    """``type=`` for ``--token-pattern``: a regular expression Python compiles."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a valid regular expression ({exc}): {text!r}") from None
    return text


def encoding(text: str) -> str:
    """``type=`` for ``--encoding``: an encoding Python knows (``utf-8``, ``cp1252``, ``latin-1``, ...)."""
    try:
        codecs.lookup(text)
    except LookupError:
        raise argparse.ArgumentTypeError(
            f"unknown encoding {text!r} (e.g. utf-8, cp1252, latin-1, utf-16)"
        ) from None
    return text


#: Heading (or its start) of the argument groups of the papers' configurations and tuning knobs.
RESEARCH_HEADING = "research options"


def research_options_last(parser: argparse.ArgumentParser) -> None:
    """List the groups headed :data:`RESEARCH_HEADING` last in ``parser``'s ``--help``.

    A command adds its own options after the shared ones of its fit (``add_fit_arguments``);
    this moves the research groups behind them, keeping every other group in the order it was
    added. Only the listing changes, never the parsing.
    """
    parser._action_groups.sort(key=lambda group: (group.title or "").startswith(RESEARCH_HEADING))


#: ``--token-pattern``'s help: what a word is, and the letters-only default of the topic models.
TOKEN_PATTERN_HELP = (
    "regular expression of one word of plain text (Python's re, as scikit-learn's CountVectorizer takes it); "
    "default: words of two or more letters, no digits or underscores, so numbers, dates and ids are "
    "not words of a topic, contractions whole (don't, we'll), a possessive 's dropped: '"
    + TOPIC_TOKEN_PATTERN.replace("%", "%%") + "'. For words with digits too "
    "(w0, covid19) pass scikit-learn's default '" + SKLEARN_TOKEN_PATTERN.replace("%", "%%") + "'"
)


def add_text_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, from_model: bool = False
) -> None:
    """Add ``--token-pattern`` and ``--encoding`` (commands that read text).

    ``--token-pattern`` defaults to :data:`~dptensor.models.topics.vectorizer.TOPIC_TOKEN_PATTERN`
    (words of letters only; the Python API keeps scikit-learn's default), or, with
    ``from_model`` (``lda transform``), to None: the pattern the model file records.
    ``--encoding`` (default UTF-8) applies to every text file the command reads.
    """
    if from_model:
        parser.add_argument(
            "--token-pattern", type=token_pattern, default=None, metavar="REGEX",
            help="regular expression of one word of plain text; default: the one the model was fitted with "
                 "(recorded in the model file; scikit-learn's '" + SKLEARN_TOKEN_PATTERN.replace("%", "%%")
                 + "' for files written before it was recorded)",
        )  # fmt: skip
    else:
        parser.add_argument("--token-pattern", type=token_pattern, default=TOPIC_TOKEN_PATTERN,
                            metavar="REGEX", help=TOKEN_PATTERN_HELP)
    parser.add_argument(
        "--encoding", type=encoding, default=DEFAULT_ENCODING, metavar="NAME",
        help=f"encoding of the text files read (corpus, vocabulary; default {DEFAULT_ENCODING}); e.g. "
             "cp1252 or latin-1 for a Windows/Latin export",
    )  # fmt: skip


def add_quiet_argument(parser: argparse.ArgumentParser, *, old_spellings: Iterable[str] = ()) -> None:
    """Add ``--quiet``/``-q``: no progress bars or messages (progress is shown by default).

    ``old_spellings`` (e.g. ``--no-progress``) are accepted as hidden, deprecated aliases.
    """
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bars or progress messages")
    for spelling in old_spellings:
        parser.add_argument(spelling, dest="quiet", action="store_true", help=argparse.SUPPRESS)


def add_noise_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *,
    not_covered: str,
    default: str | None = "numpy",
) -> None:
    """``--noise {numpy,opendp}``, with what OpenDP's samplers do not cover in this command.

    docs/protection.md (*Noise backends*) lists, release by release, which go through OpenDP's
    measurements under ``noise="opendp"``; the others draw NumPy noise under both backends, so
    the help never calls the whole command floating-point safe. ``not_covered`` names this
    command's releases outside OpenDP (``"none"`` when every one is covered).
    """
    parser.add_argument(
        "--noise", choices=NOISE_BACKENDS, default=default,
        help="sampler of the privacy noise: numpy (default) or opendp (OpenDP's floating-point-safe "
        f"samplers for the releases docs/protection.md marks OpenDP; not covered here: {not_covered}; "
        "needs pip install 'dptensor[opendp]')",
    )  # fmt: skip


def progress_line(message: str, quiet: bool) -> None:
    """Print one progress line to standard error unless ``--quiet``."""
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def output_path(
    path: str | Path | None, flag: str = "--out", *, suffixes: Iterable[str] | None = None
) -> None:
    """Check an output file before any work: not a directory, its folder exists, a known suffix.

    Raises
    ------
    ValueError
        Naming ``flag``: the path is a directory, its parent folder does not exist, or its
        suffix is not one of ``suffixes``.
    """
    if path is None or str(path) == "-":
        return
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: the folder {parent} does not exist (create it first)")
    if suffixes is not None:
        suffixes = tuple(suffixes)
        if path.suffix.lower() not in suffixes:
            raise ValueError(f"{flag} {path}: the file name must end in {' or '.join(suffixes)}")


def _same_file(a: str, b: str) -> bool:
    """Whether two command-line paths name one file (links and ``./`` spellings included)."""
    try:
        if Path(a).exists() and Path(b).exists():
            return Path(a).samefile(b)
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, ValueError):
        return False


def refuse_overwriting_inputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output option that names an input's file or another output's.

    ``dptensor complete ratings.csv --out ratings.csv`` would replace the ratings with the
    predictions. The outputs are the options in :data:`OUTPUT_FLAGS`; the inputs are every other
    string given on the command line that names an existing file (the positional data files,
    ``--test``, ``--ledger``, ``--vocab``, ...). Only the command line is read (public).

    Raises
    ------
    ValueError
        Naming both flags (or the positional argument's name) and the file.
    """
    parser: argparse.ArgumentParser | None = getattr(args, "_parser", None)
    if parser is None:
        return
    outputs: list[tuple[str, str]] = []
    inputs: list[tuple[str, str]] = []
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        if action.dest.startswith("_") or action.dest == argparse.SUPPRESS:
            continue
        values = value if isinstance(value, list) else [value]
        paths = [v for v in values if isinstance(v, str) and v and v != "-"]
        name = action.option_strings[0] if action.option_strings else action.metavar or action.dest.upper()
        if action.option_strings and action.option_strings[0] in OUTPUT_FLAGS:
            outputs += [(name, path) for path in paths]
        elif action.choices is None:  # a ledger is read and charged even when the run creates it
            inputs += [(name, path) for path in paths if Path(path).is_file() or action.dest == "ledger"]
    for n, (flag, path) in enumerate(outputs):
        for other, source in inputs:
            if _same_file(path, source):
                raise ValueError(f"{flag} {path} is also the input file {other}: writing it would "
                                 f"overwrite that input; give {flag} another file name")
        for other, target in outputs[:n]:
            if _same_file(path, target):
                raise ValueError(f"{other} and {flag} both name {path}: one output would overwrite the "
                                 "other; give each its own file")


def refuse_unused(args: argparse.Namespace, dests: Iterable[str], reason: str) -> None:
    """Refuse options that were given but do nothing in the chosen mode.

    An option counts as given when its value differs from its parser default. The error names
    every such option with its flag spelling, followed by ``reason`` (e.g. "apply only with --online").
    """
    parser: argparse.ArgumentParser | None = getattr(args, "_parser", None)
    actions = {a.dest: a for a in parser._actions} if parser is not None else {}
    given = []
    for dest in dests:
        action = actions.get(dest)
        default = action.default if action is not None else None
        if getattr(args, dest, default) != default:
            given.append(action.option_strings[0] if action and action.option_strings else dest)
    if given:
        raise ValueError(f"{', '.join(given)}: {reason}")


def leaf_parsers(parser: argparse.ArgumentParser) -> Iterable[argparse.ArgumentParser]:
    """Every parser under ``parser`` that runs a command (has no subcommands of its own)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser
        return
    seen = set()
    for action in subs:
        for child in action.choices.values():
            if id(child) not in seen:
                seen.add(id(child))
                yield from leaf_parsers(child)


def error_line(prog: str, exc: BaseException) -> str:
    """One line ``<prog>: error: <message>`` for an exception (newlines folded)."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, FileNotFoundError) and exc.filename and str(exc.filename) not in message:
        message = f"{message}: {exc.filename}"
    return f"{prog}: error: {message}"


def refuse_problems(problems: list[str]) -> None:
    """Raise one ``ValueError`` naming every problem found with the options (nothing if none).

    One problem is its own message; several are numbered in one line (``2 options to fix: (1) ...;
    (2) ...``), so that a user fixes them all in one try.
    """
    if len(problems) == 1:
        raise ValueError(problems[0])
    if problems:
        raise ValueError(f"{len(problems)} options to fix: " + "; ".join(
            f"({n}) {problem}" for n, problem in enumerate(problems, start=1)))


@contextlib.contextmanager
def flag_names(names: Mapping[str, str]) -> Iterator[None]:
    """Re-raise a library's ``ValueError`` or ``TypeError`` with its parameter names as the command's flags.

    ``names`` maps a Python parameter (``typical_length``) to the flag that sets it
    (``--typical-length``); only whole names are replaced, so ``n_words`` leaves
    ``max_words_per_document`` alone, and neither does a name inside a path. Only plain
    ``ValueError`` and ``TypeError`` are rewritten (a subclass such as a budget refusal carries
    attributes of its own and passes unchanged). The message is otherwise unchanged, so it reveals
    no more than the library's did.
    """
    try:
        yield
    except (ValueError, TypeError) as exc:
        if type(exc) not in (ValueError, TypeError):  # a subclass may carry more than its message
            raise
        message = str(exc)
        for name, flag in names.items():  # not inside a path such as value_range/ratings.csv
            message = re.sub(rf"(?<![-\w/.]){re.escape(name)}\b(?![/.\-]\w)", flag, message)
        if message == str(exc):
            raise
        raise type(exc)(message) from exc


def print_error(prog: str, exc: BaseException) -> None:
    print(error_line(prog, exc), file=sys.stderr)
