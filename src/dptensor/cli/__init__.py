"""The ``dptensor`` command line (docs/design.md, layer 6).

Each subcommand lives in its own module exposing ``register(subparsers)``, which adds its
parser and sets ``func`` to the function that runs it. The conventions every subcommand follows
(one-line errors with exit code 2, Ctrl-C exit code 130, ``--quiet``, checked ``--out`` paths,
an example at the end of ``--help``) live in :mod:`dptensor.cli._options`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import select
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dptensor._version import __version__

if TYPE_CHECKING:
    from dptensor.privacy.audit import Observation

#: The subcommands' modules (each with ``register(subparsers)``), imported when a parser is built, so
#: that ``dptensor --version`` answers without loading the library.
COMMANDS = ("decompose", "lda", "single_topic", "complete", "recommend", "experiment", "budget", "audit",
            "report")

#: Exit status of a command interrupted by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130
#: Exit status of a user error (bad option, bad input file, refused privacy budget, ...).
EXIT_USAGE = 2
#: Exit status when the reader of standard output went away (``dptensor ... | head``): 128 + SIGPIPE,
#: what a shell reports for a program the broken pipe ended (``set -o pipefail`` sees it, as for ``cat``).
EXIT_BROKEN_PIPE = 141

EXAMPLES = """examples:
  dptensor decompose --example                  # a built-in noisy orthogonal tensor
  dptensor lda fit docword.synthetic.txt --topics 10 --out model.json
  python -m dptensor COMMAND --help              # every command's options and an example
"""


def __getattr__(name: str) -> object:
    """A subcommand's module (``dptensor.cli.lda``) imported on first use, as an eager import would have."""
    if name in COMMANDS:
        return importlib.import_module(f"dptensor.cli.{name}")
    raise AttributeError(f"module 'dptensor.cli' has no attribute {name!r}")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    from dptensor.cli._options import Parser, leaf_parsers

    parser = Parser(
        prog="dptensor",
        description="Fast, streaming and differentially private tensor decomposition.",
        epilog=EXAMPLES,
    )
    parser.add_argument("--version", action="version", version=f"dptensor {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"dptensor.cli.{name}").register(subparsers)
    for leaf in leaf_parsers(parser):
        leaf.set_defaults(_parser=leaf)  # lets a command name its own options (refuse_unused)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dptensor`` console script; returns the exit status.

    A user error -- a bad option (refused while parsing), a missing or malformed input file, a
    refused privacy budget, a size that does not fit in memory -- prints one line
    ``dptensor <command>: error: ...`` on stderr and returns 2; Ctrl-C prints one line and
    returns 130. Outputs are written atomically, so neither leaves a partial file behind. When
    the reader of standard output goes away (``dptensor budget show | head -1``) the command
    stops quietly, with no message, and returns 141 (:func:`_quiet_broken_pipe`).
    """
    try:
        return _main(argv)
    except BrokenPipeError:
        return _quiet_broken_pipe()


def observe_command(argv: Sequence[str], workdir: str | Path) -> Observation:
    """Run ``dptensor ARGV`` in-process and record exit code, printed text and written files.

    :func:`dptensor.privacy.audit.observe_main` with this command's :func:`main`: the side-channel
    audit of a command, for neighbouring inputs compared by
    :func:`~dptensor.privacy.audit.observable_differences`.

    Parameters
    ----------
    argv : sequence of str
        The arguments after ``dptensor``.
    workdir : str or Path
        A fresh directory that the command writes its outputs into; every file under it after the
        run is described by name and structure (JSON keys and value types, CSV header and row
        count, an HTML report's text with inline images dropped), never by its numbers.

    Returns
    -------
    Observation
    """
    from dptensor.privacy.audit import observe_main

    return observe_main(main, argv, workdir)


def _stdout_closed() -> bool:
    """Whether standard output's reader has gone (its pipe reports an error, or a flush breaks it)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return True
    except (OSError, ValueError):
        return False
    try:  # the buffer may be empty: ask the pipe itself (POLLERR once its read end is closed)
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows) or no file descriptor
        return False


def _quiet_broken_pipe() -> int:
    """Stop writing to a closed standard output, without a message: the reader has what it wanted.

    Standard output is pointed at ``os.devnull``, so that Python's final flush of what is still
    buffered does not fail again at exit (the "Exception ignored ... BrokenPipeError" line);
    Python's documented way (the ``signal`` module's note on SIGPIPE).
    """
    with contextlib.suppress(OSError, ValueError):  # no file descriptor (e.g. a test's StringIO)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:  # argparse's answer, before a subcommand (and the library) is loaded
        print(f"dptensor {__version__}")
        return 0
    from dptensor._files import recording_run
    from dptensor.cli._options import print_error, refuse_overwriting_inputs
    from dptensor.cli._report import command_line

    parser = build_parser()
    from dptensor.cli.complete import default_subcommand

    argv = default_subcommand(argv)  # dptensor complete FILE ... is dptensor complete fit FILE ...
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:  # reported by the subcommand's parser, which names the command
            args._parser.error(f"unrecognized arguments: {' '.join(extras)}")
    except KeyboardInterrupt:
        print("dptensor: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SystemExit as exc:  # argparse: --help, --version, or a one-line usage error
        return int(exc.code or 0) if isinstance(exc.code, int) or exc.code is None else EXIT_USAGE
    prog = args._parser.prog
    args._argv = command_line(None if argv is None else list(argv))  # for reports: the command run
    try:
        refuse_overwriting_inputs(args)  # before any work, for every command
        with _line_buffered_stdout(), _one_line_warnings(prog), recording_run(run_record(args)):
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted (Ctrl-C); no output file was written by the interrupted step",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError as exc:
        if _stdout_closed():  # no error of the command: the reader of its output stopped reading
            return _quiet_broken_pipe()
        print_error(prog, exc)  # another pipe (an --out FIFO, a worker's connection): a real error
        return EXIT_USAGE
    except MemoryError as exc:
        detail = f" ({exc})" if str(exc) else ""
        print(f"{prog}: error: out of memory{detail}; use smaller sizes (--rank, --shape, "
              "--batch-size) or a machine with more memory", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, TypeError, OSError, ImportError) as exc:
        print_error(prog, exc)
        return EXIT_USAGE


def run_record(args: argparse.Namespace) -> dict:
    """What a command's JSON outputs record about the run: version, command and every option.

    The options are the parsed command line (paths, seed, parameters), public by construction:
    nothing computed from the data.
    """
    settings = {key: value for key, value in sorted(vars(args).items())
                if not key.startswith("_") and key not in ("func", "command", "experiment")}
    return {"dptensor_version": __version__, "command": args._parser.prog, "settings": settings}


def warning_line(prog: str, message: Warning | str, category: type[Warning]) -> str:
    """One line ``<prog>: warning: <message> (<Category>)`` for a warning (newlines folded)."""
    text = " ".join(str(message).split())
    return f"{prog}: warning: {text} ({category.__name__})"


@contextlib.contextmanager
def _one_line_warnings(prog: str) -> Iterator[None]:
    """Show every warning a command raises as one clean line on stderr.

    Python's default format names the library file and line that issued the warning (e.g.
    scikit-learn's ``base.py:1403``, through which estimators are fitted) and repeats a source line,
    which means nothing to a command-line user. Filters are left as they are (``-W`` still works).
    """
    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ARG001
        print(warning_line(prog, message, category), file=sys.stderr if file is None else file, flush=True)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


@contextlib.contextmanager
def _line_buffered_stdout() -> Iterator[None]:
    """Flush standard output at every line, also when it is redirected to a file or a pipe.

    Python buffers a redirected stdout in blocks, so a command's header lines would appear after
    its progress bars (stderr, unbuffered) or only at the end; line buffering keeps the two streams
    in the order they were written.
    """
    stream = sys.stdout
    reconfigure = getattr(stream, "reconfigure", None)
    if not isinstance(stream, io.TextIOWrapper) or reconfigure is None or stream.line_buffering:
        yield
        return
    reconfigure(line_buffering=True)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # closed by the command
            reconfigure(line_buffering=False)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
