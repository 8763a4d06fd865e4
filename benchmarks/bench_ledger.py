"""Benchmark: the cost of a BudgetLedger charge, and the stress test's numbers.

Two parts, one JSON file (``benchmarks/results/ledger.json`` by default):

1. **Overhead of a charge** as a function of the number of charges already stored
   (``--sizes``, default 0, 100, 1000), for three workloads:

   * ``gaussian`` -- every charge a private power method run (``SelfComposedDpEvent`` of 550
     Gaussian releases, calibrated to epsilon 0.1 at delta 1e-7): the ledger composes them in
     closed form (one Gaussian, GDP);
   * ``laplace`` -- every charge an input-perturbation completion (one Laplace release,
     epsilon 0.05): PLD accountant, one self-composition;
   * ``mixed`` -- the two alternating: PLD accountant, one Gaussian and one self-composed Laplace.

   Compared, in the same run and on the same events, with two in-memory ways to account exactly
   with dp-accounting (no file, no process safety): ``recompose`` -- a fresh ``PLDAccountant``
   composing every event in order, then ``get_epsilon`` (what a program without the ledger's
   regrouping would do after a restart); ``incremental`` -- one accountant kept in memory,
   composing the new event and reading ``get_epsilon`` (an in-process odometer). Medians over
   ``--repeats`` charges (the in-memory recompose over fewer at 1000 charges: it is slow). The
   sum of epsilons (basic composition) is reported too, as the total a naive budget would count.
2. **Stress test**: 8 processes x 50 charges racing against a budget that allows exactly 100
   (the default test suite's ``test_racing_processes_never_overspend``, run here once more):
   attempted, accepted, refused, final epsilon, seconds.

Usage::

    python benchmarks/bench_ledger.py [--out benchmarks/results/ledger.json] [--sizes 0 100 1000]
        [--repeats 15] [--quick]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dp_accounting
from dp_accounting import pld
from tqdm import tqdm

from dptensor._files import write_json
from dptensor.privacy import BudgetLedger, PrivacyGuarantee, composed_noise_multiplier
from dptensor.privacy import ledger as ledger_module

ROOT = Path(__file__).resolve().parent.parent
# the test suite's guarantee helper and stress test, reused as they are
sys.path.insert(0, str(ROOT / "tests"))
from test_privacy_ledger import event_guarantee  # noqa: E402
from test_privacy_ledger_reliability import run_stress  # noqa: E402

DELTA = 1e-5


def workloads() -> dict[str, list[PrivacyGuarantee]]:
    z = composed_noise_multiplier(0.1, 1e-7, 550, "exact")
    power = event_guarantee(
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), 550),
        epsilon=0.1,
        delta=1e-7,
        neighbouring="benchmark",
        mechanism="gaussian",
    )
    laplace = event_guarantee(
        dp_accounting.LaplaceDpEvent(1 / 0.05),
        epsilon=0.05,
        delta=0.0,
        neighbouring="benchmark",
        mechanism="laplace",
    )
    return {"gaussian": [power], "laplace": [laplace], "mixed": [power, laplace]}


def measure(
    name: str, cycle: list[PrivacyGuarantee], sizes: list[int], repeats: int, workdir: Path
) -> list[dict]:
    """Charge a fresh ledger up to each size, then time ``repeats`` charges there (and the peers)."""
    ledger = BudgetLedger(workdir / f"{name}.ledger", epsilon=1e9, delta=DELTA)
    events: list[dp_accounting.DpEvent] = []
    incremental = pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    bar = tqdm(total=max(sizes) + repeats * len(sizes), desc=f"{name} charges", leave=False)
    rows = []

    def step(timed: bool, recompose: bool) -> dict:
        g = cycle[len(events) % len(cycle)]
        event = g.to_dp_event()
        out: dict = {}
        if recompose:  # peer 1: a fresh dp-accounting accountant, every event in order
            start = time.perf_counter()
            fresh = pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
            for e in [*events, event]:
                fresh.compose(e)
            out["recompose_epsilon"] = fresh.get_epsilon(DELTA)
            out["recompose"] = time.perf_counter() - start
        start = time.perf_counter()  # peer 2: one accountant kept in memory
        incremental.compose(event)
        if timed:
            out["incremental_epsilon"] = incremental.get_epsilon(DELTA)
            out["incremental"] = time.perf_counter() - start
        ledger_module._EPSILON_CACHE.clear()  # a new total is never in the cache anyway
        start = time.perf_counter()
        ledger.charge(g, description=f"{name} {len(events)}")
        out["ledger"] = time.perf_counter() - start
        events.append(event)
        bar.update()
        return out

    for size in sizes:
        while len(events) < size:
            step(timed=False, recompose=False)
        stored = len(events)
        # recomposing 1000+ events in memory takes seconds: time it on 3 charges there
        timings = [step(timed=True, recompose=r < (3 if size >= 1000 else repeats)) for r in range(repeats)]
        spent = ledger.spent()

        def med(key: str, timings: list[dict] = timings) -> float:
            return statistics.median(t[key] for t in timings if key in t)

        rows.append(
            {
                "workload": name,
                "stored_charges": stored,
                "repeats": repeats,
                "recompose_repeats": sum("recompose" in t for t in timings),
                "ledger_charge_median_ms": 1e3 * med("ledger"),
                "inmemory_incremental_median_ms": 1e3 * med("incremental"),
                "inmemory_recompose_median_ms": 1e3 * med("recompose"),
                "ratio_ledger_to_incremental": med("ledger") / med("incremental"),
                "ratio_ledger_to_recompose": med("ledger") / med("recompose"),
                "n_charges_after": len(events),
                "ledger_epsilon": spent,
                "dp_accounting_epsilon": timings[-1]["incremental_epsilon"],
                "sum_of_epsilons": sum(cycle[k % len(cycle)].epsilon for k in range(len(events))),
            }
        )
        row = rows[-1]
        bar.write(
            f"{name:>8} {stored:>5} stored: ledger {row['ledger_charge_median_ms']:.2f} ms, in-memory "
            f"incremental {row['inmemory_incremental_median_ms']:.2f} ms, recompose "
            f"{row['inmemory_recompose_median_ms']:.2f} ms; after {len(events)} charges epsilon "
            f"{spent:.4f} (dp-accounting {row['dp_accounting_epsilon']:.4f}, sum of epsilons "
            f"{row['sum_of_epsilons']:.2f})"
        )
    bar.close()
    return rows


def stress(workdir: Path) -> dict:
    return run_stress(workdir / "stress.ledger")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ledger.json"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[0, 100, 1000])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--workloads", nargs="+", default=["gaussian", "laplace", "mixed"])
    parser.add_argument("--quick", action="store_true", help="sizes 0 and 100, 5 repeats")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeats = [0, 100], 5
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.workloads:
            rows.extend(measure(name, workloads()[name], sorted(args.sizes), args.repeats, work))
        stress_stats = stress(work)
    print(
        f"stress: {stress_stats['attempted']} attempted, {stress_stats['accepted']} accepted, "
        f"{stress_stats['refused']} refused, final epsilon {stress_stats['final_epsilon']:.6f} <= budget "
        f"{stress_stats['budget_epsilon']:.6f}, {stress_stats['seconds']:.2f} s"
    )
    payload = {
        "command": "python benchmarks/bench_ledger.py" + (" --quick" if args.quick else ""),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "processor": platform.processor(),
        },
        "delta": DELTA,
        "charge_overhead": rows,
        "stress": stress_stats,
    }
    print(f"wrote {write_json(args.out, payload)}")


if __name__ == "__main__":
    main()
