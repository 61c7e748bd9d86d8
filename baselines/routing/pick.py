"""Instance selection from per-instance score arrays, with explicit tie-breaking."""

from __future__ import annotations

import numpy as np


def argmin_lowest(scores: np.ndarray) -> int:
    """Index of the minimum; ties go to the lowest index."""
    return int(np.argmin(scores))


def argmin_random(scores: np.ndarray, rng: np.random.Generator) -> int:
    """Index of the minimum; exact ties are broken uniformly at random with ``rng``."""
    ties = np.flatnonzero(scores == scores.min())
    return int(ties[0]) if len(ties) == 1 else int(rng.choice(ties))


def argmax_random(scores: np.ndarray, rng: np.random.Generator) -> int:
    """Index of the maximum; exact ties are broken uniformly at random with ``rng``."""
    return argmin_random(-scores, rng)


def range_normalize(x: np.ndarray, *, equal: float = 0.0) -> np.ndarray:
    """``(x - min) / (max - min)`` in [0, 1]; every entry is ``equal`` when all are equal."""
    x = np.asarray(x, dtype=np.float64)
    span = x.max() - x.min()
    if span == 0:
        return np.full(len(x), equal)
    return (x - x.min()) / span


def hit_ratio(hits: np.ndarray, input_tokens: int) -> np.ndarray:
    """Cached share of the prompt per instance (0 for an empty prompt)."""
    return np.asarray(hits, dtype=np.float64) / input_tokens if input_tokens > 0 else np.zeros(len(hits))
