"""Uniform random directions on the unit sphere."""

from __future__ import annotations

import numpy as np


def random_unit_vectors(dim: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """Draw ``count`` vectors uniformly from the unit sphere ``S^{dim-1}`` as columns.

    Standard Gaussian vectors divided by their norms are uniform on the sphere by rotational
    invariance of the Gaussian law.

    Returns
    -------
    ndarray of shape (dim, count)
    """
    vectors = rng.standard_normal((dim, count))
    return vectors / np.linalg.norm(vectors, axis=0)
