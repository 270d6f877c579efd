"""Intervals for evaluation figures: Wilson for success rates, bootstrap for mean rewards;
paired tests for two evaluations of the same items (exact McNemar, paired bootstrap).

Pure Python (the SDK has no numpy): an evaluation holds tens to thousands of rollouts.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

__all__ = ["bootstrap_mean", "mcnemar_exact", "wilson"]


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


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value for paired successes: `only_a` items solved by A
    alone, `only_b` by B alone (items both or neither solved carry no information).

    Under "A and B are equally good" each discordant item is a fair coin, so the count
    `only_b` is Binomial(only_a + only_b, 1/2); the p-value doubles the smaller tail
    (capped at 1). Exact rather than the chi-square form, which is poor at the small
    discordant counts held-out sets give.
    """
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2 ** n
    return min(1.0, 2.0 * float(tail))
