"""Benchmark: the cost of the secret-noise backends (issue 10).

Draws ``n`` Gaussian and ``n`` Laplace samples from each ``NoiseSource`` backend -- ``"numpy"``
(NumPy's ``Generator`` seeded from fresh OS entropy, the default) and ``"opendp"`` (OpenDP's
floating-point-safe samplers, Mironov 2012) -- and reports the median time per call and per
sample, with the ratio ``opendp / numpy`` measured in the same run. A private power method
release of a ``d x d x d`` tensor draws about ``d^3 / 6`` samples per Gaussian release (the
unique entries), which is what the sizes are meant to span.

Usage::

    python benchmarks/bench_noise.py [--out benchmarks/results/noise.json] [--sizes 1000 100000]
        [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from dptensor._files import write_json
from dptensor.privacy.noise import resolve_noise

BACKENDS = ("numpy", "opendp")


def median_seconds(draw, repeats: int) -> float:
    """Median wall time of ``draw()`` over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        draw()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/noise.json"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    rows = []
    for n in args.sizes:
        row: dict[str, float | int] = {"samples": n}
        for backend in BACKENDS:
            source = resolve_noise(backend)
            for law in ("gaussian", "laplace"):
                draw = getattr(source, law)
                row[f"{backend}_{law}_s"] = median_seconds(lambda d=draw, n=n: d(n, 1.0), args.repeats)
        for law in ("gaussian", "laplace"):
            row[f"{law}_ratio"] = row[f"opendp_{law}_s"] / row[f"numpy_{law}_s"]
        rows.append(row)

    print("| samples | numpy Gaussian | OpenDP Gaussian | ratio | numpy Laplace | OpenDP Laplace | ratio |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(
            f"| {row['samples']} | {row['numpy_gaussian_s'] * 1e3:.2f} ms"
            f" | {row['opendp_gaussian_s'] * 1e3:.1f} ms"
            f" | {row['gaussian_ratio']:.0f}x | {row['numpy_laplace_s'] * 1e3:.2f} ms"
            f" | {row['opendp_laplace_s'] * 1e3:.1f} ms | {row['laplace_ratio']:.0f}x |"
        )
    write_json(args.out, {"rows": rows, "repeats": args.repeats})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
