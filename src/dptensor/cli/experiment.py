"""``dptensor experiment NAME --out DIR [--quick]``: regenerate the papers' figures.

Each experiment writes a CSV table, a PNG figure and a JSON summary to ``--out`` and prints
the summary's key numbers.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
from pathlib import Path

from dptensor.cli._options import add_quiet_argument, positive_int, seed

#: name -> (module under dptensor.research.experiments, one-line description, keyword for --trials)
EXPERIMENTS = {
    "noise-tolerance": (
        "noise_tolerance",
        "phase transitions of the power method under three noise models (Wang & Anandkumar, App. A)",
        "n_trials",
    ),
    "whitening": (
        "whitening_comparison",
        "whitening by random marginalisation vs the power method (Wang & Anandkumar, App. B)",
        "n_trials",
    ),
    "privacy-utility": (
        "privacy_utility",
        "recovery of the top component against epsilon: private power method (both accountants), "
        "input perturbation, non-private (Wang & Anandkumar, Section 4)",
        "n_trials",
    ),
    "single-topic": (
        "single_topic",
        "e_comp against epsilon and N: AGN, AVN, DP-TPM and non-private single-topic models, at D = 10, 50 "
        "and 10^4 (Imtiaz & Sarwate, slides)",
        "n_trials",
    ),
    "private-lda": (
        "private_lda",
        "private spectral LDA: error against epsilon for Configurations 1-4 (Figure 2), the k-th largest "
        "eigenvalue of the second moment M2 (sigma_k) and eigengaps (Figure 3), real-corpus perplexity "
        "(DeCarolis et al., Section 7)",
        "n_trials",
    ),
    "completion": (
        "completion",
        "DP tensor completion RMSE against epsilon and missing ratio (Wei et al., Figures 2 and 3)",
        "n_repeats",
    ),
}


def _examples(name: str) -> str:
    return (f"examples:\n  dptensor experiment {name} --quick --out results/{name}  # a small grid, seconds\n"
            f"  dptensor experiment {name} --trials 5 --seed 1  # the paper's grid, 5 trials\n")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "experiment", help="regenerate a paper's figure as CSV, PNG and JSON",
        description="Run an experiment; --quick runs a small grid in seconds.",
        epilog=_examples("noise-tolerance"),
    )
    names = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    for name, (_, description, _) in EXPERIMENTS.items():
        sub = names.add_parser(name, help=description, description=description, epilog=_examples(name))
        sub.add_argument("--out", type=Path, default=Path("results") / name,
                         help="output folder (default results/NAME; created if missing)")
        sub.add_argument("--quick", action="store_true", help="small grid that runs in seconds")
        sub.add_argument("--trials", type=positive_int, help="trials per grid point (default: the paper's)")
        sub.add_argument("--seed", type=seed, default=0, help="base random seed (default 0)")
        add_quiet_argument(sub)
        sub.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    module_name, description, trials_keyword = EXPERIMENTS[args.experiment]
    if args.out.exists() and not args.out.is_dir():
        raise ValueError(f"--out {args.out} is a file; experiments write a folder of CSV, PNG and JSON files")
    module = importlib.import_module(f"dptensor.research.experiments.{module_name}")
    print(f"{args.experiment}: {description}")
    options = {trials_keyword: args.trials}
    if "progress" in inspect.signature(module.run).parameters:
        options["progress"] = not args.quiet
    result = module.run(args.out, quick=args.quick, random_state=args.seed, **options)
    summary = json.loads(Path(result.files["json"]).read_text())
    keys = ("fitted_exponents", "median_error_ratio_marginalisation_over_power", "smallest_epsilon")
    for key in keys:
        if key in summary:
            print(f"{key}: {json.dumps(summary[key], indent=2)}")
    for kind, path in result.files.items():
        print(f"wrote {kind}: {path}")
    return 0
