"""The 95% confidence intervals `comlrl-bench` prints, over task instances (the unit a benchmark samples).

A benchmark plays n task instances, each k times (`samples_per_task`). The k episodes of one task share its
difficulty, so they are not k independent draws: every interval here treats the task as the unit. Task i
contributes a sum `y_i` over its `m_i` trials (episodes, or agent-actions for a per-action rate), and the
estimate is the pooled ratio `mean = sum(y) / sum(m)` (the mean over episodes when every task has k). Its
variance is the ratio (linearisation) estimator over tasks,

    var = sum_i (y_i - mean m_i)^2 / (n (n - 1) mbar^2),    mbar = sum(m) / n,

which, with equal m_i, is the variance of the per-task means over n: a deterministic policy repeated k times
has the same per-task means, so the interval does not shrink with k. Two intervals use it:

- `mean_interval` (a reward): `mean ± t_{n-1} sqrt(var)`, the t interval over tasks (infinite for one task);
- `rate_interval` (a 0/1 outcome: a success, a 0/1 reward, an invalid action, a used partner's part): the
  Wilson score interval at the effective sample size `n_eff = mean (1 - mean) / var` (the design effect, as
  Korn and Graubard do for clustered proportions), kept between the n tasks and the sum(m) trials. At a rate
  of 0 or 1 the variance says nothing, and `n_eff` is the n tasks: 8 failures of 8 give [0, 0.32], not 0 ± 0.
  When tasks hold several trials each, the design effect is itself estimated from the n tasks, so the score
  interval uses Student's t_{n-1} quantile in place of z (Korn and Graubard's degrees-of-freedom correction):
  with z alone, 2 to 8 tasks of k = 8 trials covered 0.80 to 0.92 (task success ~ Beta(1, 1)); with t_{n-1},
  0.96 to 1.00 in the same simulation. One trial per task (`m_i = 1`) needs no estimated design effect and
  keeps z.

A reward that is not 0/1 but whose tasks all scored alike shows no spread, and its t interval would be 0 wide.
When the task declares the range `[a, b]` its reward lies in, `bounded_interval` gives that case an honest width:
no variable in `[a, b]` with mean mu varies more than a 0/1 one (variance at most (mu - a)(b - mu)), so the
Wilson interval of the rescaled mean over the n tasks holds it. A task that declares no range gets an infinite
interval there, and the benchmark says "no spread observed".

Every function takes arrays whose last axis is the tasks and any leading (batch) axes, so a simulation can
check thousands of benchmarks at once (`tests/test_intervals_coverage.py`).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

__all__ = ["Z95", "Interval", "bounded_interval", "mean_interval", "rate_interval", "t_quantile", "wilson"]

Z95 = 1.959963984540054
"""The two-sided 95% normal quantile."""


class Interval(NamedTuple):
    """An estimate and its 95% interval `[low, high]` (floats, or arrays over leading batch axes)."""

    estimate: float
    low: float
    high: float

    @property
    def half_width(self) -> float:
        """The larger side, so `estimate ± half_width` holds the interval (the two differ for Wilson)."""
        return np.maximum(self.estimate - self.low, self.high - self.estimate)


def _t_two_sided(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with integer `df` (Abramowitz and Stegun 26.7.3 and 26.7.4: finite sums)."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 0:
        term = total = 1.0
        for j in range(2, df, 2):  # (1 3 ... (j-1)) / (2 4 ... j) cos^j
            term *= c2 * (j - 1) / j
            total += term
        return s * total
    if df == 1:
        return 2 * theta / math.pi
    term = total = math.cos(theta)
    for j in range(3, df, 2):  # (2 4 ... (j-1)) / (1 3 ... j) cos^j
        term *= c2 * (j - 1) / j
        total += term
    return 2 / math.pi * (theta + s * total)


@functools.lru_cache(maxsize=None)
def t_quantile(df: int, level: float = 0.95) -> float:
    """The two-sided `level` quantile of Student's t with `df` degrees of freedom (t_7 = 2.365), by bisection
    on its exact distribution function; the normal one (1.960) for `df` over 10,000."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}.")
    if df > 10_000:
        return Z95
    low, high = 0.0, math.pi / 2  # bisect on theta = atan(t / sqrt(df)), where P(|T| < t) rises from 0 to 1
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_two_sided(math.sqrt(df) * math.tan(mid), df) < level else (low, mid)
    return math.sqrt(df) * math.tan((low + high) / 2)


def _ratio(sums: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(pooled mean, its variance over tasks, n tasks) of per-task sums and counts, tasks on the last axis."""
    sums, counts = np.asarray(sums, dtype=float), np.broadcast_to(np.asarray(counts, dtype=float), np.shape(sums))
    n = sums.shape[-1]
    mean = sums.sum(-1) / counts.sum(-1)
    if n < 2:
        return mean, np.full(mean.shape, np.inf), n
    spread = ((sums - mean[..., None] * counts) ** 2).sum(-1)
    return mean, spread / (n * (n - 1) * counts.mean(-1) ** 2), n


def mean_interval(sums: np.ndarray, counts: np.ndarray) -> Interval:
    """The t interval over tasks of a mean: `sums[..., i]` is task i's total over its `counts[..., i]`
    episodes (module docstring). One task gives an infinite interval."""
    mean, var, n = _ratio(sums, counts)
    half = t_quantile(n - 1) * np.sqrt(var) if n > 1 else np.full(mean.shape, np.inf)
    return Interval(mean, mean - half, mean + half)


def wilson(rate: np.ndarray, n: np.ndarray, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """The Wilson score interval `(low, high)` of a proportion `rate` seen over `n` trials, at quantile `z`
    (95%: the normal one, or Student's t for an estimated `n`)."""
    z2 = z ** 2 / n
    centre = (rate + z2 / 2) / (1 + z2)
    half = np.sqrt(z2 * rate * (1 - rate) + z2 ** 2 / 4) / (1 + z2)
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def rate_interval(hits: np.ndarray, trials: np.ndarray) -> Interval:
    """The Wilson interval over tasks of a rate: `hits[..., i]` of task i's `trials[..., i]` 0/1 outcomes were
    1, at the effective sample size of the module docstring, with t_{n-1} in place of z when tasks hold several
    trials (one task of several trials: [0, 1])."""
    rate, var, n = _ratio(hits, trials)
    counts = np.broadcast_to(np.asarray(trials, dtype=float), np.shape(hits))
    total = counts.sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        n_eff = np.where(var > 0, rate * (1 - rate) / var, total)
    n_eff = np.where((rate <= 0) | (rate >= 1), n, np.clip(n_eff, n, total))
    clustered = bool((counts > 1).any())  # the design effect is estimated from n tasks
    z = (t_quantile(n - 1) if n > 1 else math.inf) if clustered else Z95
    if math.isinf(z):
        return Interval(rate, np.zeros_like(rate), np.ones_like(rate))
    low, high = wilson(rate, n_eff, z)
    return Interval(rate, low, high)


def bounded_interval(sums: np.ndarray, counts: np.ndarray, reward_range: tuple[float, float]) -> Interval:
    """The t interval over tasks of a mean known to lie in `reward_range = (a, b)`, widened where the tasks
    showed no spread: there the Wilson interval of the rescaled mean `(mean - a) / (b - a)` over the n tasks
    (a 0/1 variable has the largest variance a variable in `[a, b]` can have), mapped back to `[a, b]`."""
    a, b = float(reward_range[0]), float(reward_range[1])
    if not b > a:
        raise ValueError(f"reward_range must be (low, high) with low < high, got {reward_range!r}.")
    interval = mean_interval(sums, counts)
    n = np.shape(sums)[-1]
    if n < 2:
        return interval
    flat = np.asarray(interval.high - interval.low) == 0  # every task's mean the same: no spread seen
    scaled = np.clip((np.asarray(interval.estimate, dtype=float) - a) / (b - a), 0.0, 1.0)
    clustered = bool((np.asarray(counts) > 1).any())
    low, high = wilson(scaled, np.full(np.shape(scaled), float(n)), t_quantile(n - 1) if clustered else Z95)
    low, high = np.where(flat, a + (b - a) * low, interval.low), np.where(flat, a + (b - a) * high, interval.high)
    return Interval(interval.estimate, np.clip(low, a, b), np.clip(high, a, b))  # the mean lies in [a, b]
