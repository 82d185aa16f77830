"""The arithmetic of paired comparisons: mean difference, its t-interval and test, the minimum
detectable effect and the number of pairs a target effect needs (two-sided, paired t)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

__all__ = ["Paired", "paired", "minimum_detectable_effect", "pairs_needed", "correlation"]


def _t(q: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(q, df))


def minimum_detectable_effect(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean difference a two-sided paired t-test at ``alpha`` detects with
    probability ``power`` from ``n`` pairs whose differences have standard deviation ``sd``:
    (t_{1 - alpha/2, n-1} + t_{power, n-1}) sd / sqrt(n) (the usual approximation)."""
    if n < 2:
        return math.inf
    df = n - 1
    return (_t(1 - alpha / 2, df) + _t(power, df)) * sd / math.sqrt(n)


def pairs_needed(sd: float, effect: float, alpha: float = 0.05, power: float = 0.8, at_least: int = 2,
                 at_most: int = 1000) -> int | None:
    """The smallest n in [at_least, at_most] whose :func:`minimum_detectable_effect` is at most
    ``effect``; None when even ``at_most`` pairs cannot."""
    for n in range(max(at_least, 2), at_most + 1):
        if minimum_detectable_effect(sd, n, alpha, power) <= effect:
            return n
    return None


def correlation(a: list[float], b: list[float]) -> float | None:
    """Pearson correlation of the two arms of the pairs (None below 3 pairs or without spread)."""
    if len(a) < 3 or statistics.pstdev(a) == 0 or statistics.pstdev(b) == 0:
        return None
    return statistics.correlation(a, b)


@dataclass(frozen=True)
class Paired:
    """A paired comparison: ``n`` differences a - b."""

    n: int
    mean: float
    sd: float
    low: float  # 95% t-interval (or 1 - alpha)
    high: float
    p: float  # two-sided paired t-test
    mde: float  # at 80% power (or the given power)
    correlation: float | None

    @property
    def resolved(self) -> bool:
        """The interval excludes 0."""
        return self.low > 0 or self.high < 0


def paired(a: list[float], b: list[float], alpha: float = 0.05, power: float = 0.8) -> Paired | None:
    """The paired comparison of ``a`` and ``b`` (same order: pair i is a[i], b[i]); None below
    2 pairs."""
    if len(a) != len(b):
        raise ValueError(f"paired: {len(a)} values against {len(b)}")
    n = len(a)
    if n < 2:
        return None
    diffs = [x - y for x, y in zip(a, b)]
    mean, sd = statistics.mean(diffs), statistics.stdev(diffs)
    sem = sd / math.sqrt(n)
    half = _t(1 - alpha / 2, n - 1) * sem
    if sem == 0:
        p = 1.0 if mean == 0 else 0.0
    else:
        from scipy.stats import t

        p = float(2 * t.sf(abs(mean) / sem, n - 1))
    return Paired(n, mean, sd, mean - half, mean + half, p, minimum_detectable_effect(sd, n, alpha, power),
                  correlation(a, b))
