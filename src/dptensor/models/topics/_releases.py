"""Release steps of :class:`~dptensor.models.PrivateSpectralLDA` shared by its configurations.

The ``e3`` release in a public basis, the released unigram distribution (post-processing of
``m1``), the post-processing of a decomposition's weights, the pairing of two ``M2`` releases, the
whitening from a public corpus, and the input checks of a private fit (DeCarolis et al., paper
004; ``docs/lda.md``, *Privacy*).
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.sparse.linalg as spla

from dptensor.decomposition.power_method import PowerMethodResult
from dptensor.decomposition.whitening import Whitening
from dptensor.models.topics._lda_whitening import top_eigenpairs
from dptensor.models.topics._third_moment import whitened_third_moment
from dptensor.models.topics.clipped_moments import ClippedMoments, ClippedSecondMoment
from dptensor.models.topics.moments import (
    MIN_DOCUMENT_LENGTH,
    DocumentBlocks,
    DocumentCounts,
    Documents,
    check_count_matrix,
    document_lengths,
    short_document_error,
)
from dptensor.models.topics.spectral import _Step
from dptensor.parallel import RowBlocks, as_row_blocks, effective_n_jobs, is_distributed
from dptensor.privacy.denoising import nonnegative_posterior_means
from dptensor.privacy.mechanisms import add_symmetric_gaussian
from dptensor.privacy.noise import NoiseSource

#: Steps of a private fit print their names, never their durations (see ``timings_``).
private_step = functools.partial(_Step, report_time=False)

#: Floor, in noise standard deviations, of every word of the released unigram distribution. The
#: empirical-Bayes prior is fitted to the release; where the noise swamps every frequency (tiny
#: epsilon, few words) it can put almost all its mass on zero, and the floor keeps the estimate
#: near uniform there. On the real corpora 0.3 costs under 0.1% of held-out perplexity against none.
UNIGRAM_FLOOR = 0.3



def released_unigram(mean: np.ndarray, noise_std: float) -> np.ndarray:
    """The private unigram distribution from the released ``E1 = S1 / T0`` (post-processing).

    Each word's empirical-Bayes posterior mean given ``E1`` and the public standard deviation
    ``s`` of the noise on each entry (the ``m1`` noise scale over the released ``T0``), with a
    prior on non-negative frequencies fitted to the release itself
    (:func:`~dptensor.privacy.denoising.nonnegative_posterior_means`), floored at
    ``UNIGRAM_FLOOR * s`` and normalised. A word whose frequency is below the noise is
    indistinguishable from an absent one; the posterior mean keeps it possible, at the frequency
    such words have on average. On Debian descriptions, with the noise of ``epsilon = 1``, the
    held-out perplexity of the released distribution is 414 against 428 for the former
    ``max(E1, 0) + s / 2`` and 566 for the projection onto the simplex (396 without noise;
    docs/lda.md, *Matching the unigram distribution*).
    """
    mean = np.asarray(mean, dtype=np.float64)
    s = max(float(noise_std), 0.0)
    out = np.maximum(nonnegative_posterior_means(mean, s), UNIGRAM_FLOOR * s)
    total = float(out.sum())
    if not total > 0:  # every entry non-positive and no noise: fall back to uniform
        return np.full(mean.shape, 1.0 / mean.size)
    return out / total



def release_projected_m3(
    docs: Documents, alpha0: float, basis: np.ndarray, scale: float, source: NoiseSource
) -> np.ndarray:
    """``M3_hat(U, U, U) + scale * Sym(H)``: the ``e3`` release of Configuration 1 in a public basis.

    ``U`` (``d x k``, orthonormal columns) must be public -- here, the eigenvectors of the released
    ``M2_hat``. ``Sym(H)`` is the ``"frobenius"`` symmetric Gaussian in ``k^3``, so with
    ``scale = z Delta`` and ``Delta`` a bound on ``||dM3_hat(U, U, U)||_F``
    (:func:`~dptensor.models.topics.sensitivity.m3_sensitivity`) this is the Gaussian mechanism with
    noise multiplier ``z``; it has the law of ``d^3`` Frobenius noise on ``M3_hat`` projected on
    ``U`` (:func:`~dptensor.privacy.mechanisms.whitened_symmetric_gaussian_tensor`).
    """
    projected = whitened_third_moment(docs, alpha0, basis)
    return add_symmetric_gaussian(projected, scale, convention="frobenius", noise=source)


def with_inverse(whitening: Whitening, other: Whitening) -> Whitening:
    """``whitening``'s ``W`` with ``other``'s un-whitening ``(W^T)^+`` (two releases of ``M2_hat``)."""
    return Whitening(whitening.matrix, other.inverse, whitening.eigenvalues, whitening.eigenvectors)


def positive_weights(result: PowerMethodResult) -> PowerMethodResult:
    """Post-processing: ``(lambda, v) -> (|lambda|, sign(lambda) v)``, zero raised to a tiny floor."""
    weights = np.nan_to_num(np.asarray(result.weights, dtype=np.float64), posinf=1e12, neginf=-1e12)
    factors = np.nan_to_num(result.factors) * np.where(weights < 0, -1.0, 1.0)[None, :]
    weights = np.clip(np.abs(weights), 1e-12, 1e12)
    return PowerMethodResult(
        weights=weights, factors=factors, n_iter=result.n_iter, converged=result.converged,
        extraction_order=result.extraction_order,
    )


def whitening_from_public_corpus(
    public_corpus: object, clipping: tuple[float, float, float | None], d: int, n_components: int,
    alpha0: float, rng: np.random.Generator, timings: dict, verbose: bool,
) -> Whitening:  # fmt: skip
    """``M2``'s top eigenpairs from the public corpus, weighted as the private one (no noise).

    ``PrivateSpectralLDA(public_corpus=...)``: the whitening of the ``e3`` release is computed from
    public documents over the same vocabulary, clipped with the same bounds ``(C, C1, C3)``, so no
    ``M2`` release is made from the private ones. Not a release: public data only.
    """
    k = int(n_components)
    with private_step("whitening from the public corpus (no noise)", timings, verbose):
        public = ClippedMoments(check_clipped_counts(public_corpus, "public_corpus"), *clipping)
        if public.n_words != d:
            raise ValueError(f"public_corpus has {public.n_words} words, X has {d}: one vocabulary")
        total, frequency_total, sums = public.first_order()
        if total <= 0:
            raise ValueError("public_corpus has no document of at least 3 tokens")
        operator = ClippedSecondMoment(public, total, sums / frequency_total, alpha0)
        if d <= 5000:
            values, vectors = top_eigenpairs(operator.to_dense(), k, random_state=rng)
        else:
            linear = spla.LinearOperator((d, d), matvec=operator.matmat, matmat=operator.matmat)
            values, vectors = top_eigenpairs(linear, k, method="randomized", random_state=rng)
        floor = max(float(values[0]), 1e-300) * 1e-12
    return Whitening.from_eigenpairs(np.maximum(values, floor), vectors)


def _private_block(block: object, name: str) -> DocumentCounts:
    """One block of :func:`check_private_counts`; the error names no count and no row (private data)."""
    matrix = check_count_matrix(block, name)
    lengths = document_lengths(matrix)  # inf beyond float64's range, without a warning
    short = np.flatnonzero(lengths < MIN_DOCUMENT_LENGTH)
    if short.size:
        raise short_document_error(name, short, private=True, why=(
            f"a private fit needs at least {MIN_DOCUMENT_LENGTH} tokens in every document (they are not "
            "dropped: N is public in the guarantee). Remove or merge them first"))
    return DocumentCounts(
        counts=matrix, lengths=lengths, kept=np.arange(matrix.shape[0]), n_input_documents=matrix.shape[0]
    )


def _clipped_block(block: object, name: str) -> DocumentCounts:
    """One block of :func:`check_clipped_counts`: any valid counts, no row dropped, nothing summed."""
    matrix = check_count_matrix(block, name, allow_no_tokens=True)
    n = matrix.shape[0]
    return DocumentCounts(counts=matrix, lengths=np.zeros(n), kept=np.arange(n), n_input_documents=n)


def check_clipped_counts(X: object, name: str = "X", *, n_jobs: int | None = None) -> Documents:
    """Validate counts for a clipped private fit: every row is a document, short or empty ones too.

    The clipped releases give documents of fewer than three tokens weight 0, so no document is an
    input error and ``N`` stays the number of rows. No length is summed here (a sum of huge
    counts could overflow): :mod:`dptensor.models.topics.clipped_moments` scales each row first.
    """
    if isinstance(X, RowBlocks) or is_distributed(X) or effective_n_jobs(n_jobs) > 1:
        blocks = as_row_blocks(X, n_jobs=n_jobs)
        blocks = blocks.map(_clipped_block, name, label="clipped-counts")
        return DocumentBlocks(blocks, blocks.n_rows)
    return _clipped_block(X, name)


def check_private_counts(X: object, name: str = "X", *, n_jobs: int | None = None) -> Documents:
    """Validate counts for a private fit: every document must have at least three tokens.

    Documents with fewer tokens are an input error, not dropped: the guarantee treats ``N`` as
    public, and dropping would change it between neighbouring corpora. The error names the rows
    (for blocks, those of the first block found to have one). Threads (``n_jobs``) or Dask input
    give :class:`~dptensor.models.topics.moments.DocumentBlocks`, checked where the blocks are.
    """
    if isinstance(X, RowBlocks) or is_distributed(X) or effective_n_jobs(n_jobs) > 1:
        blocks = as_row_blocks(X, n_jobs=n_jobs)
        blocks = blocks.map(_private_block, name, label="private-counts")
        return DocumentBlocks(blocks, blocks.n_rows)
    return _private_block(X, name)
