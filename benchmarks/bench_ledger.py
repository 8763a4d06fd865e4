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
3. **Server ledger** (``--server``; a ledger on PostgreSQL, ``BudgetLedger("postgresql://...")``):
   the same stress test against the server, and once more by 2 processes x 4 threads on two
   connection pools (attempted, accepted, refused, lost, doubled, attempts per second); the
   throughput of 8 client processes charging one
   ledger (``--server-charges`` charges in all, default 10 000, each a private power method run:
   the Gaussian workload) and, for comparison, of 8 processes on a file ledger
   (``--file-charges``, default 2000); then the time of ``dptensor budget show URL`` at that many
   charges -- in a new process (every charge read, its checksum checked, the composition
   computed) and, in-process, a second ``summary()`` of an open ledger (only new charges read,
   the composition memoised). The server is ``--server-url URL`` or, by default, a throwaway
   cluster started like the tests' (``tests/privacy/ledger/_postgres_server.py``, Debian's
   ``postgresql`` package). Results in ``benchmarks/results/ledger_server.json``.

Usage::

    python benchmarks/bench_ledger.py [--out benchmarks/results/ledger.json] [--sizes 0 100 1000]
        [--repeats 15] [--quick]
    python benchmarks/bench_ledger.py --server [--server-charges 10000] [--file-charges 2000]
        [--server-url postgresql://USER@HOST/DB] [--server-out benchmarks/results/ledger_server.json]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import dp_accounting
from dp_accounting import pld
from tqdm import tqdm

from dptensor._files import write_json
from dptensor.privacy import BudgetLedger, PrivacyGuarantee, composed_noise_multiplier
from dptensor.privacy import ledger as ledger_module

ROOT = Path(__file__).resolve().parent.parent
# the test suite's guarantee helper, stress test and throwaway PostgreSQL server, reused as they are
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "privacy" / "ledger"))
from _helpers import event_guarantee  # noqa: E402
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


def _client(where: str, n: int, guarantee: PrivacyGuarantee, barrier, queue) -> None:  # noqa: ANN001
    """One benchmark client: open the ledger, wait for the others, charge ``n`` times."""
    try:
        ledger = BudgetLedger(where)
        barrier.wait()
        start = time.perf_counter()
        for i in range(n):
            ledger.charge(guarantee, description=f"bench {i}")
        queue.put((start, time.perf_counter(), ""))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        queue.put((0.0, 0.0, repr(exc)))


def throughput(where: str, n_charges: int, n_clients: int = 8) -> dict:
    """Charges per second of ``n_clients`` processes charging ``n_charges`` in all to ``where``."""
    guarantee = workloads()["gaussian"][0]
    ledger = BudgetLedger(where, epsilon=1e9, delta=DELTA, **({} if where.startswith("postgres") else
                                                               {"dataset": "bench"}))  # fmt: skip
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(n_clients), ctx.Queue()
    shares = [n_charges // n_clients + (k < n_charges % n_clients) for k in range(n_clients)]
    procs = [ctx.Process(target=_client, args=(where, n, guarantee, barrier, queue)) for n in shares]
    for p in procs:
        p.start()
    results = [queue.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join(60)
    errors = [r[2] for r in results if r[2]]
    seconds = max(r[1] for r in results) - min(r[0] for r in results)
    n = len(ledger.charges())
    return {"where": "server" if where.startswith("postgres") else "file", "clients": n_clients,
            "charges": n, "errors": errors, "seconds": seconds, "charges_per_second": n / seconds,
            "workload": "gaussian (a private power method run per charge)"}  # fmt: skip


def show_time(url: str) -> dict:
    """``dptensor budget show URL`` in a new process, and a second summary() of an open ledger."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dptensor", "budget", "show", url], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    cli = time.perf_counter() - start
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import dptensor.cli"], check=True)
    imports = time.perf_counter() - start
    ledger_module._EPSILON_CACHE.clear()
    start = time.perf_counter()
    ledger = BudgetLedger(url)
    summary = ledger.summary()
    cold = time.perf_counter() - start
    start = time.perf_counter()
    again = ledger.summary()
    warm = time.perf_counter() - start
    assert again["spent_epsilon"] == summary["spent_epsilon"]
    return {"n_charges": summary["n_charges"], "cli_show_seconds": cli, "python_import_seconds": imports,
            "summary_new_process_like_seconds": cold, "summary_again_seconds": warm,
            "spent_epsilon": summary["spent_epsilon"]}  # fmt: skip


def server_benchmark(url: str | None, n_server: int, n_file: int) -> dict:
    cluster = None
    if url is None:
        from _postgres_server import start_cluster

        cluster = start_cluster()
        url = cluster.url()
    else:  # a database of its own, so that the data set names `stress` and `bench` are new
        import psycopg

        database = f"dptensor_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {database}")  # (a generated name)
        parts = url.split("?")[0].rsplit("/", 1)
        url = f"{parts[0]}/{database}"
    try:
        base = url.split("?")[0]
        stress_stats = run_stress(f"{base}?dataset=stress")  # (a new database for every run: see below)
        print(f"server stress: {stress_stats['attempted']} attempted, {stress_stats['accepted']} accepted, "
              f"{stress_stats['refused']} refused, {stress_stats['seconds']:.2f} s")  # fmt: skip
        import psycopg
        from test_privacy_ledger_server_pool import two_pools

        pooled_db = f"{base.rsplit('/', 1)[0]}/pooled_{uuid.uuid4().hex[:8]}"  # (stress: run_stress)
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {pooled_db.rsplit('/', 1)[1]}")  # (a generated name)
        pooled = run_stress(f"{pooled_db}?dataset=stress", n_processes=2, n_attempts=50, n_threads=4,
                            ledgers=two_pools)  # fmt: skip
        print(f"pooled stress (2 processes x 4 threads on two pools of 2 connections): {pooled['attempted']} "
              f"attempted, {pooled['accepted']} accepted, {pooled['refused']} refused, "
              f"{pooled['lost']} lost, {pooled['doubled']} doubled, "
              f"{pooled['attempts_per_second']:.1f} attempts/s, "
              f"{pooled['accepted'] / pooled['seconds']:.1f} accepted charges/s")  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            file_stats = throughput(str(Path(tmp) / "bench.ledger"), n_file)
        print(f"file ledger: {file_stats['charges']} charges from 8 processes, "
              f"{file_stats['charges_per_second']:.1f} charges/s")  # fmt: skip
        target = f"{base}?dataset=bench"
        server_stats = throughput(target, n_server)
        print(f"server ledger: {server_stats['charges']} charges from 8 processes, "
              f"{server_stats['charges_per_second']:.1f} charges/s")  # fmt: skip
        shown = show_time(target)
        print(f"budget show at {shown['n_charges']} charges: {shown['cli_show_seconds']:.2f} s (new process; "
              f"{shown['python_import_seconds']:.2f} s of it importing), summary() "
              f"{shown['summary_new_process_like_seconds']:.2f} s fresh, "
              f"{shown['summary_again_seconds']:.3f} s again")  # fmt: skip
    finally:
        if cluster is not None:
            cluster.close()
    return {"stress": stress_stats, "pooled_stress": pooled, "file_throughput": file_stats,
            "server_throughput": server_stats,
            "show": shown, "server": "throwaway cluster" if cluster is not None else "given URL"}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ledger.json"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[0, 100, 1000])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--workloads", nargs="+", default=["gaussian", "laplace", "mixed"])
    parser.add_argument("--quick", action="store_true", help="sizes 0 and 100, 5 repeats")
    parser.add_argument("--server", action="store_true", help="benchmark the ledger on a PostgreSQL server")
    parser.add_argument("--server-url", help="the server (default: a throwaway cluster)")
    parser.add_argument("--server-charges", type=int, default=10_000)
    parser.add_argument("--file-charges", type=int, default=2000)
    parser.add_argument("--server-out", default=str(ROOT / "benchmarks" / "results" / "ledger_server.json"))
    args = parser.parse_args()
    if args.server:
        payload = {
            "command": " ".join(["python benchmarks/bench_ledger.py", *sys.argv[1:]]),
            "machine": {"python": platform.python_version(), "platform": platform.platform(),
                        "processor": platform.processor()},  # fmt: skip
            **server_benchmark(args.server_url, args.server_charges, args.file_charges),
        }
        print(f"wrote {write_json(args.server_out, payload)}")
        return
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
