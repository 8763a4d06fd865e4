"""How many whitening directions survive the M2 release on real text, is ``whitening_alignment_`` right?

For each corpus (``--corpora``, read from this Debian machine by ``_corpora``; never downloaded,
never committed) and each ``epsilon`` (``--epsilons``), with ``PrivateSpectralLDA``'s defaults
(``V = --vocab-size``, ``k = --topics``, ``delta = --delta``):

1. the *un-noised* clipped ``M2`` on the whitening words the default fit would use (the most
   frequent words by the exact clipped frequencies, standing in for the released ones) and its
   top-``k`` eigenpairs -- a non-private reference, computed here only to judge the release;
2. the noise scale the default fit adds to it (its own plan: multiplier times the clipped
   sensitivity, over the exact ``S0``), the noise's spectral edge ``sqrt(2 V') s`` and the
   detection threshold of a direction (half the edge; Benaych-Georges & Nadakuditi 2011): how many
   of the ``k`` true directions lie above it;
3. ``--runs`` simulated Analyze Gauss releases (the library's ``analyze_gauss_eigenpairs`` with
   seeded test noise): per direction the released eigenvalue over the edge, the estimated alignment
   (``spike_alignment``, what ``whitening_alignment_`` reports) and the measured squared cosine with
   the true eigenvector of the same index and with the true top-``k`` subspace;
4. with the same noise, how much of the true top-``k`` subspace the non-negative subspace captures
   (``analyze_gauss_eigenpairs(subspace="nonnegative")``, ``whitening_subspace`` of the estimator).

Run: ``python benchmarks/bench_whitening_alignment.py --out benchmarks/results/whitening_alignment.json``
(writes the JSON and a Markdown table next to it).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.linalg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _corpora  # noqa: E402  (next to this script)
from bench_private_topics import corpus_counts  # noqa: E402

from dptensor._files import write_json  # noqa: E402
from dptensor.models.topics._releases import check_clipped_counts  # noqa: E402
from dptensor.models.topics.clipped_moments import ClippedMoments, ClippedSecondMoment  # noqa: E402
from dptensor.models.topics.plan import plan_private_spectral_lda  # noqa: E402
from dptensor.models.topics.private_spectral import PrivateSpectralLDA  # noqa: E402
from dptensor.models.topics.private_whitening import analyze_gauss_eigenpairs  # noqa: E402
from dptensor.models.topics.sensitivity import clipped_sensitivities  # noqa: E402
from dptensor.privacy import insecure_test_noise  # noqa: E402


def measure(counts, k: int, epsilon: float, delta: float, runs: int) -> dict:
    n_documents, n_words = counts.shape
    # the tensor step's whitening (topic_recovery="nmf" releases M2 at another noise and whitens nothing)
    model = PrivateSpectralLDA(k, epsilon=epsilon, delta=delta, topic_recovery="tensor")
    plan = plan_private_spectral_lda(model.get_params(), n_documents, n_words)
    clip, word_clip, _ = plan.clipping
    size = plan.whitening_words
    moments = ClippedMoments(check_clipped_counts(counts), clip, word_clip)
    total, frequency_total, sums = moments.first_order()
    mean = sums / frequency_total
    support = np.sort(np.argsort(-mean, kind="stable")[:size])
    clean = ClippedSecondMoment(moments, total, mean, model.alpha0, support=support).to_dense()
    values, vectors = scipy.linalg.eigh(clean, subset_by_index=[size - k, size - 1])
    values, vectors = values[::-1], vectors[:, ::-1]
    scale = plan.noise_multipliers["m2"] * clipped_sensitivities(clip, word_clip)["m2"] / total
    edge = math.sqrt(2.0 * size) * scale
    released, estimated, same, subspace, nonnegative = [], [], [], [], []
    for run in range(runs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # seeded test noise: a simulation, not a release
            result = analyze_gauss_eigenpairs(clean, k, noise_scale=scale,
                                              source=insecure_test_noise(run), subspace="eigen")  # fmt: skip
            factorised = analyze_gauss_eigenpairs(clean, k, noise_scale=scale,
                                                  source=insecure_test_noise(run), subspace="nonnegative")
        nonnegative.append(np.sum((vectors.T @ factorised.whitening.eigenvectors) ** 2) / k)
        # the floor hides eigenvalues below the edge; the alignment is what the fit reports
        released.append(result.whitening.eigenvalues / edge)
        estimated.append(result.alignment)
        U = result.whitening.eigenvectors
        same.append(np.sum(vectors * U, axis=0) ** 2)
        subspace.append(np.sum((vectors.T @ U) ** 2, axis=0))
    return {
        "n_documents": n_documents, "whitening_words": size, "noise_scale": scale, "edge": edge,
        "true_over_edge": (values / edge).tolist(),
        "resolvable": int(np.count_nonzero(values > edge / 2.0)),
        "released_over_edge": np.mean(released, axis=0).tolist(),
        "estimated_alignment": np.mean(estimated, axis=0).tolist(),
        "measured_alignment": np.mean(same, axis=0).tolist(),
        "measured_in_true_subspace": np.mean(subspace, axis=0).tolist(),
        "nonnegative_subspace_captured": float(np.mean(nonnegative)),
    }  # fmt: skip


def markdown(rows: list[dict]) -> str:
    lines = [
        "# Whitening directions that survive the M2 release (`bench_whitening_alignment.py`)",
        "",
        "Per corpus and epsilon: how many of the k true directions of the clipped M2 (on the default",
        "whitening words) lie above the detection threshold (half the noise's spectral edge), and the",
        "mean over the k directions of the estimated alignment (`whitening_alignment_`) against the",
        "measured squared cosine with the true eigenvector (same index) and the true top-k subspace;",
        "last, the share of the true top-k subspace that the non-negative subspace captures (same noise).",
        "",
        "| corpus | ε | V' | above threshold | estimated | measured (same index) | measured (top-k) "
        "| non-negative subspace (top-k) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['corpus']} | {r['epsilon']:g} | {r['whitening_words']} | {r['resolvable']} of "
            f"{len(r['true_over_edge'])} | {np.mean(r['estimated_alignment']):.2f} | "
            f"{np.mean(r['measured_alignment']):.2f} | {np.mean(r['measured_in_true_subspace']):.2f} | "
            f"{r['nonnegative_subspace_captured']:.2f} |"
        )
    lines += ["", "Per direction (true eigenvalue / edge; released / edge; estimated; measured top-k):", ""]
    for r in rows:
        cells = zip(r["true_over_edge"], r["released_over_edge"], r["estimated_alignment"],
                    r["measured_in_true_subspace"], strict=True)  # fmt: skip
        text = "  ".join(f"{t:.2f}/{x:.2f}/{e:.2f}/{m:.2f}" for t, x, e, m in cells)
        lines.append(f"- {r['corpus']}, ε = {r['epsilon']:g}: {text}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", default=["debian", "wordnet", "changelogs"])
    parser.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 2.0, 4.0])
    parser.add_argument("--vocab-size", type=int, default=2000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = []
    start = time.perf_counter()
    for name in args.corpora:
        counts, _, _ = corpus_counts(name, _corpora.load(name), args.vocab_size)
        for epsilon in args.epsilons:
            row = {"corpus": name, "epsilon": epsilon,
                   **measure(counts, args.topics, epsilon, args.delta, args.runs)}  # fmt: skip
            rows.append(row)
            print(f"{name} eps {epsilon:g}: {row['resolvable']} of {args.topics} above the threshold, "
                  f"estimated {np.mean(row['estimated_alignment']):.2f}, "
                  f"measured {np.mean(row['measured_in_true_subspace']):.2f}, "
                  f"non-negative subspace {row['nonnegative_subspace_captured']:.2f}",
                  flush=True)  # fmt: skip
    print(f"{time.perf_counter() - start:.0f} s")
    if args.out is not None:
        write_json(args.out, {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows})
        args.out.with_suffix(".md").write_text(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
