"""Benchmark: end-to-end privacy audits of every private model (dptensor.privacy.audit.audit_estimator).

For each private model -- PrivateSpectralLDA, DPVariationalLDA, SingleTopicModel (AGN), DP-ALS
under "entry-value" and under "user", PrivateRecommender (popularity with its recount, EASE, the
implicit ALS, and popularity with a selected catalogue) -- at epsilon 1 and 4, three variants:

* ``honest``: the default configuration with fresh secret noise (its bound must stay <= the claim);
* ``under-noised``: the same with every noise draw divided by 10
  (``dptensor.privacy.noise.scaled_test_noise(0.1)``; the guarantee is void, the claim is kept as
  the nominal epsilon) -- the audit should refute the claim;
* ``paper``: the papers' unproven modes, opt-in (``enable_features("unproven")``): Wei et al.'s
  output and gradient perturbation for completion, DP-VI's moments accountant
  (``accountant="paper"``), private spectral LDA with the paper's sensitivities
  (``sensitivity="paper"``).

Each row: lower bound, claim, fits and seconds (one-run method of Steinke, Nasr & Jagielski 2023,
95% confidence). Tiny synthetic data (d = 20 words, 40 documents; a 16 x 8 x 2 tensor with 100
observed ratings), so the whole table takes a few minutes on one core. Three models also run in
the audit configurations with power (the default-suite tests' ones; their fits are fixed, not
``--runs``): PrivateSpectralLDA on 180 words with 80% of mu^2 on the word-frequency release
(32 one-word canaries per fit, 40 fits), SingleTopicModel on 4 words (2 frequent-word canaries
per fit, 600 fits) and DP-ALS under "user" with ``max_ratings=1`` and one sweep on a 60 x 48 x 2
tensor (32 canary users per fit, 200 fits, a tenth of the canaries guessed). PrivateRecommender runs on
200 random users x 64 items (16 canary users of two items each per fit; the implicit ALS with 40 fits and
its public seed fixed; with a selected catalogue, 2000 users choosing 2 of 32 items, 8 canaries per fit).
``--only TEXT`` runs the configurations whose name contains TEXT (``--only PrivateRecommender``).

Every release a model makes is scored (``audit_estimator``: one bound per release, Bonferroni over
them, the largest reported with its release). Three more rows check that a release without noise is
caught by its own score, the fit's plan and claim unchanged (the noise of one release point set to
zero, as the default-suite tests do): PrivateSpectralLDA's defaults on 180 words (``m2`` without
noise; 20 fits), PrivateSpectralLDA with ``topic_recovery="tensor"`` and ``k = d = 8`` (``m2`` and
``e3`` without noise; 40 fits) and SingleTopicModel with ``K = d = 4`` (``M3`` without noise; 300
fits). Three more (issue 53) where a public rule makes a release the small rows never make:
PrivateSpectralLDA's defaults on 3300 documents of 128 words (64 of them used by no document, rare
words for the canaries), where ``refine_passes="auto"`` refines (16 private CVB0 passes on 0.6 of
``mu^2``; ``rf``, the passes' releases, without noise; 20 fits), DPVariationalLDA with
``init="moments"`` on 40 documents of 84 words (the moment start without noise; 20 fits) and
user-level DP-ALS on 3000 users x 16 items with ``max_ratings=2``, where ``start="auto"`` makes the
spectral start (its covariance release without noise; 40 fits).

Usage::

    python benchmarks/bench_audit.py [--runs 20] [--epsilons 1 4] [--out benchmarks/results/audit.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
import warnings

import numpy as np
import scipy.sparse as sp

from dptensor.datasets import make_single_topic_corpus
from dptensor.datasets.lda import make_lda_corpus
from dptensor.models import (
    DPVariationalLDA,
    PrivateRecommender,
    PrivateSpectralLDA,
    SingleTopicModel,
    TensorCompletion,
)
from dptensor.models.completion import CompletionOptions
from dptensor.models.topics.dp_vi_options import DPVIOptions
from dptensor.privacy import enable_features
from dptensor.privacy.audit import audit_estimator
from dptensor.privacy.noise import scaled_test_noise
from dptensor.research import PaperDPVariationalLDA


def _ratings(shape=(16, 8, 2), n=100, seed=0):
    rng = np.random.default_rng(seed)
    idx = np.unique(np.column_stack([rng.integers(0, s, 2 * n) for s in shape]), axis=0)[:n]
    return idx, np.clip(np.round(3 + rng.normal(size=len(idx))), 1, 5), shape


def _interactions(n_users=200, n_items=64, density=0.08, seed=0):
    rng = np.random.default_rng(seed)
    return sp.csr_array((rng.random((n_users, n_items)) < density).astype(float))


def _popular(n_users=2000, popular=32, unused=32, seed=0):
    """Each user chooses 2 of ``popular`` items (far above the selection's threshold); nobody the rest."""
    rng = np.random.default_rng(seed)
    cols = np.concatenate([rng.choice(popular, 2, replace=False) for _ in range(n_users)])
    rows = np.repeat(np.arange(n_users), 2)
    return sp.csr_array((np.ones(2 * n_users), (rows, cols)), shape=(n_users, popular + unused))


def _no_noise(values, *args, **kwargs):
    return np.array(values, dtype=float)


def _patches() -> dict:
    """``release -> (owner, attribute, replacement)``: that release point without noise, all else kept."""
    import dptensor.models.completion._dp_als as dp_als
    import dptensor.models.topics._configuration1 as ps
    import dptensor.models.topics.private_refinement as pr
    import dptensor.models.topics.private_whitening as pw
    import dptensor.models.topics.single_topic as st

    noisy, passes = st.add_symmetric_gaussian, pr.release_expected_counts

    def quiet_passes(*args, noise_multiplier, **kwargs):  # the CVB0 passes' releases
        return passes(*args, noise_multiplier=noise_multiplier * 1e-9, **kwargs)

    def quiet_start(self, epsilon, seed):  # DP-VI's moment start, noise / 1e9
        return PrivateSpectralLDA(int(self.n_components), epsilon=epsilon, delta=float(self.delta),
                                  refine=None, random_state=seed, noise=scaled_test_noise(1e-9, seed=1))

    def m3_only(values, *args, **kwargs):  # single-topic M2 and M3 share the release point
        return values.copy() if values.ndim == 3 else noisy(values, *args, **kwargs)

    return {"m2": (pw, "add_symmetric_gaussian", _no_noise), "e3": (ps, "add_symmetric_gaussian", _no_noise),
            "M3": (st, "add_symmetric_gaussian", m3_only),
            "rf": (pr, "release_expected_counts", quiet_passes),
            "moment start": (DPVariationalLDA, "_moment_estimator", quiet_start),
            "spectral start": (dp_als, "add_symmetric_gaussian", _no_noise)}


@contextlib.contextmanager
def _without_noise(*releases: str):
    """The noise of the named release points set to zero (:func:`_patches`)."""
    patches = _patches()
    saved = [(patches[r][0], patches[r][1], getattr(patches[r][0], patches[r][1])) for r in releases]
    try:
        for r in releases:
            setattr(*patches[r])
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def refining_corpus(n_documents: int = 3300, n_topic_words: int = 64, n_unused: int = 64) -> sp.csr_matrix:
    """An LDA corpus in a vocabulary with ``n_unused`` words no document uses (rare words for the canaries).

    3300 documents of 128 words: ``refine_passes="auto"`` refines at epsilon = 1 (it needs 3250).
    """
    X = make_lda_corpus(n_documents, n_topic_words, 2, alpha=0.3, doc_length=20, random_state=0).counts
    return sp.hstack([X, sp.csr_matrix((n_documents, n_unused), dtype=X.dtype)], format="csr")


def cases(eps: float):
    """``(model, variant, factory(noise) -> estimator, data, unproven, audit options)`` for one epsilon."""
    counts = make_lda_corpus(40, 20, 2, alpha=0.3, doc_length=20, random_state=0).counts
    tokens = [np.asarray(t) for t in make_single_topic_corpus(40, 4, 2, random_state=0).tokens]
    ratings = _ratings()
    users = _ratings(shape=(60, 48, 2), n=300)
    wide = make_lda_corpus(40, 180, 2, alpha=0.3, doc_length=20, random_state=0).counts
    delta = 1e-5
    models = {
        "PrivateSpectralLDA": (lambda n, **kw: PrivateSpectralLDA(2, alpha0=0.6, epsilon=eps, delta=delta,
                                                                 random_state=0, noise=n, **kw), counts,
                               {"sensitivity": "paper"}),
        "PrivateSpectralLDA, 180 words, m1 0.8": (lambda n, **kw: PrivateSpectralLDA(
            2, alpha0=0.6, epsilon=eps, delta=delta, random_state=0, noise=n,
            budget_split={"m1": 0.8, "m2": 0.1, "e3": 0.1}, **kw
        ), wide, None),
        "DPVariationalLDA": (lambda n, **kw: (PaperDPVariationalLDA if kw else DPVariationalLDA)(
            2, epsilon=eps, delta=delta, random_state=0, noise=n,
            options=DPVIOptions(batch_size=50, n_passes=1), **kw,
        ), counts, {"accountant": "paper"}),  # the paper's accountant: the research wing's
        "SingleTopicModel (AGN), 4 words": (lambda n, **kw: SingleTopicModel(
            2, mechanism="agn", n_words=4, epsilon=eps, delta=delta, random_state=0, noise=n, **kw
        ), tokens, None),
        "DP-ALS entry-value": (lambda n, **kw: TensorCompletion(2, privacy="als", neighbouring="entry-value",
                                                               epsilon=eps, delta=delta, value_range=(1, 5),
                                                               random_state=0, noise=n, **kw), ratings, None),
        "DP-ALS user": (lambda n, **kw: TensorCompletion(2, privacy="als", neighbouring="user", epsilon=eps,
                                                        delta=delta, value_range=(1, 5), random_state=0,
                                                        noise=n, **kw), ratings, None),
        "DP-ALS user, max_ratings=1, one sweep": (lambda n, **kw: TensorCompletion(
            2, privacy="als", neighbouring="user", epsilon=eps, delta=delta, value_range=(1, 5),
            random_state=0, noise=n, options=CompletionOptions(max_ratings=1, max_iter=1, budget_split=0.1),
            **kw
        ), users, None),
        "PrivateRecommender (popularity)": (lambda n, **kw: PrivateRecommender(
            epsilon=eps, delta=delta, method="popularity", noise=n, **kw), _interactions(), None),
        "PrivateRecommender (EASE)": (lambda n, **kw: PrivateRecommender(
            epsilon=eps, delta=delta, method="ease", noise=n, **kw), _interactions(), None),
        "PrivateRecommender (implicit ALS)": (lambda n, **kw: PrivateRecommender(
            epsilon=eps, delta=delta, method="ials", random_state=0, noise=n, **kw), _interactions(), None),
        "PrivateRecommender (popularity, select)": (lambda n, **kw: PrivateRecommender(
            epsilon=eps, delta=delta, method="popularity", catalogue="select", max_items_per_user=2, noise=n,
            **kw), _popular(), None),
    }
    fixed = {"PrivateSpectralLDA, 180 words, m1 0.8": {"n_runs": 40},
             "SingleTopicModel (AGN), 4 words": {"n_runs": 600},
             "DP-ALS user, max_ratings=1, one sweep": {"n_runs": 200, "n_guesses": 640},
             "PrivateRecommender (implicit ALS)": {"n_runs": 40}}
    for name, (make, data, paper) in models.items():
        options = fixed.get(name, {})
        yield name, "honest", (lambda make=make: make(None)), data, False, options
        under = scaled_test_noise(0.1)
        yield (name, "under-noised (noise / 10)", (lambda make=make, under=under: make(under)), data, False,
               options)
        if paper is not None:
            yield (name, f"paper {paper}", (lambda make=make, paper=paper: make(None, **paper)), data, True,
                   options)
    narrow = make_lda_corpus(40, 8, 2, alpha=0.3, doc_length=20, random_state=0).counts
    refining, moments_corpus = refining_corpus(), refining_corpus(40, 20, 64)
    spectral_users = _ratings(shape=(3000, 16, 1), n=9000)
    square = [np.asarray(t) for t in make_single_topic_corpus(40, 4, 2, random_state=0).tokens]
    releases = {
        "PrivateSpectralLDA, 180 words, default split": (
            lambda: PrivateSpectralLDA(2, alpha0=0.6, epsilon=eps, delta=delta, random_state=0), wide,
            {"n_runs": 20}, ("m2",)),
        "PrivateSpectralLDA, 8 words, k = 8, tensor": (
            lambda: PrivateSpectralLDA(8, alpha0=0.6, epsilon=eps, delta=delta, random_state=0,
                                       topic_recovery="tensor"), narrow, {"n_runs": 40}, ("m2", "e3")),
        "SingleTopicModel (AGN), 4 words, K = 4": (
            lambda: SingleTopicModel(4, mechanism="agn", n_words=4, epsilon=eps, delta=delta, random_state=0),
            square, {"n_runs": 300}, ("M3",)),
        "PrivateSpectralLDA, 3300 docs, 128 words (refines)": (
            lambda: PrivateSpectralLDA(2, alpha0=0.6, epsilon=eps, delta=delta, random_state=0), refining,
            {"n_runs": 20}, ("rf",)),
        "DPVariationalLDA, init=moments, 84 words": (
            lambda: DPVariationalLDA(2, epsilon=eps, delta=delta, random_state=0,
                                     options=DPVIOptions(init="moments", n_passes=1)),
            moments_corpus, {"n_runs": 20}, ("moment start",)),
        "DP-ALS user, 3000 x 16 x 1, max_ratings=2, spectral start": (
            lambda: TensorCompletion(2, privacy="als", neighbouring="user", epsilon=eps, delta=delta,
                                     value_range=(1, 5), random_state=0,
                                     options=CompletionOptions(max_ratings=2)), spectral_users,
            {"n_runs": 40}, ("spectral start",)),
    }
    for name, (make, data, options, unnoised) in releases.items():
        yield name, "honest", make, data, False, options
        variant = f"{' and '.join(unnoised)} without noise"
        yield name, variant, make, data, False, {**options, "_unnoised": unnoised}
    for mode in ("output", "gradient"):
        yield (f"Wei et al. {mode} perturbation", "paper (unproven)",
               (lambda mode=mode: TensorCompletion(2, privacy=mode, neighbouring="entry-value", epsilon=eps,
                                                   value_range=(1, 5), random_state=0,
                                                   options=CompletionOptions(n_epochs=10))),
               ratings, True, {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="fits per audit (one-run method)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--only", default=None, help="the configurations whose name contains this text")
    parser.add_argument("--out", default=None, help="write the rows as JSON")
    args = parser.parse_args()
    rows = []
    print(f"{'model':<60} {'variant':<36} {'claim':>6} {'lower':>7} {'fits':>5} {'s':>6}  verdict")
    for eps in args.epsilons:
        for name, variant, make, data, unproven, options in cases(eps):
            if args.only is not None and args.only not in name:
                continue
            start = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    options = dict(options)
                    with enable_features(*(("unproven",) if unproven else ())), \
                            _without_noise(*options.pop("_unnoised", ())):
                        result = audit_estimator(make, data, method="one-run", random_state=0,
                                                 **{"n_runs": args.runs, **options})
            except Exception as exc:  # noqa: BLE001 - a configuration that cannot run is reported, not fatal
                print(f"{name:<60} {variant:<36} {eps:>6g}   error: {type(exc).__name__}: {exc}")
                continue
            seconds = time.perf_counter() - start
            verdict = "REFUTED" if result.violated else ("no power" if result.epsilon_lower == 0 else "ok")
            print(f"{name:<60} {variant:<36} {result.epsilon_claimed:>6g} {result.epsilon_lower:>7.3f} "
                  f"{result.n_runs:>5} {seconds:>6.1f}  {verdict} ({result.details['release']})", flush=True)
            rows.append({"model": name, "variant": variant, **result.to_dict(), "seconds": seconds})
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(rows, handle, indent=1, default=str)


if __name__ == "__main__":
    main()
