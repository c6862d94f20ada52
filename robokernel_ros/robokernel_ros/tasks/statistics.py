"""Success statistics of a benchmark's episodes: the Wilson interval and pass^k.

wilson_interval(7, 10)           # (0.397, 0.892): the 95 % interval of 7 successes in 10
pass_hat_k([True, False, True])  # {"1": 0.667, "2": 0.333, "3": 0.0}
"""

from __future__ import annotations

import math


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95 % by default)."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # exact at the ends: 0 of n has lower bound 0 (not 5.6e-17), n of n upper bound 1
    lower = 0.0 if successes <= 0 else max(0.0, centre - half)
    upper = 1.0 if successes >= n else min(1.0, centre + half)
    return (lower, upper)


def pass_hat_k(successes: list[bool]) -> dict[str, float]:
    """pass^k for k = 1..n: the chance that k trials drawn without replacement all succeed.

    C(c, k) / C(n, k) with c successes of n (tau-bench's estimator); keys are strings
    so the report stays JSON.
    """
    n = len(successes)
    c = sum(1 for s in successes if s)
    return {str(k): (math.comb(c, k) / math.comb(n, k)) for k in range(1, n + 1)}
