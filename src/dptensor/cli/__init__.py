"""The ``dptensor`` command line (DESIGN.md, layer 6).

Each subcommand lives in its own module exposing ``register(subparsers)``, which adds its
parser and sets ``func`` to the function that runs it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dptensor import __version__
from dptensor.cli import budget, complete, decompose, experiment, lda, single_topic

COMMANDS = (decompose, lda, single_topic, complete, experiment, budget)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="dptensor",
        description="Fast, streaming and differentially private tensor decomposition.",
    )
    parser.add_argument("--version", action="version", version=f"dptensor {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dptensor`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, OSError) as exc:
        print(f"dptensor {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
