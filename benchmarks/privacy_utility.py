"""Privacy-utility comparison of private tensor decomposition methods (issue #4).

Runs :func:`dptensor.research.experiments.privacy_utility.run` (d=100, k=5, L=10, R=10, 10 trials,
13 values of epsilon from 0.01 to 1000) and writes CSV, PNG, Markdown and JSON under
``benchmarks/results/privacy_utility/`` (or the directory given as the first argument).
Takes a few minutes on two idle cores; ``--quick`` runs a small smoke version.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dptensor.research.experiments.privacy_utility import run


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    args = [a for a in argv if a != "--quick"]
    out = Path(args[0]) if args else Path(__file__).parent / "results" / "privacy_utility"
    result = run(out, quick=quick)
    print(Path(result.files["md"]).read_text())
    print(f"{result.settings['seconds']:.0f} s; files: {result.files}")


if __name__ == "__main__":
    main(sys.argv[1:])
