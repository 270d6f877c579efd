"""Intervals for evaluation figures: Wilson for success rates, bootstrap for mean rewards.

Pure Python (the SDK has no numpy): an evaluation holds tens to thousands of rollouts.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

__all__ = ["bootstrap_mean", "wilson"]


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95% by default).

    Unlike the normal approximation it stays inside [0, 1] and is usable at 0 or n
    successes, which small held-out sets hit.
    """
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_mean(values: Sequence[float], *, resamples: int = 2000, level: float = 0.95,
                   seed: int = 0) -> tuple[float, float]:
    """A percentile bootstrap interval of the mean (seeded, so a report is reproducible)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1 - level) / 2
    return means[int(tail * (resamples - 1))], means[int((1 - tail) * (resamples - 1))]
