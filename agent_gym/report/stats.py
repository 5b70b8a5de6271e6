"""Estimators of a report: pass@k and pass^k over sibling samples, and binomial confidence intervals."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from agent_gym.checks import check_float, check_int

__all__ = ["mean_pass_at_k", "mean_pass_hat_k", "mean_wilson_interval", "pass_at_k", "pass_hat_k", "wilson_interval"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``n`` samples of a task, ``c`` of them correct.

    The probability that at least one of ``k`` samples drawn without replacement
    from the ``n`` is correct: ``1 - C(n - c, k) / C(n, k)``.

    Args:
        n: Samples of the task (>= 1).
        c: Correct samples (0 <= c <= n).
        k: Samples drawn (1 <= k <= n).

    Returns:
        The estimate, in [0, 1].

    Raises:
        TypeError: If a count is not an int.
        ConfigError: If the counts are inconsistent (a ``ValueError``).
    """
    check_int("n", n, low=1)
    check_int("c", c, low=0, high=n)
    check_int("k", k, low=1, high=n)
    if n - c < k:
        return 1.0
    # Product form of C(n-c, k) / C(n, k): no huge integers.
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def mean_pass_at_k(groups: Iterable[tuple[int, int]], k: int) -> float | None:
    """Mean of :func:`pass_at_k` over tasks given as ``(n, c)`` pairs; tasks with ``n < k`` are left out.

    Returns:
        The mean, or None when no task has ``k`` samples.
    """
    values = [pass_at_k(n, c, k) for n, c in groups if n >= k]
    return sum(values) / len(values) if values else None


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass^k from ``n`` samples of a task, ``c`` of them correct.

    The probability that all of ``k`` samples drawn without replacement from the ``n``
    are correct (the consistency measure of tau-bench): ``C(c, k) / C(n, k)``.

    Args:
        n: Samples of the task (>= 1).
        c: Correct samples (0 <= c <= n).
        k: Samples drawn (1 <= k <= n).

    Returns:
        The estimate, in [0, 1].

    Raises:
        TypeError: If a count is not an int.
        ConfigError: If the counts are inconsistent (a ``ValueError``).
    """
    check_int("n", n, low=1)
    check_int("c", c, low=0, high=n)
    check_int("k", k, low=1, high=n)
    if c < k:
        return 0.0
    # Product form of C(c, k) / C(n, k): no huge integers.
    hit = 1.0
    for i in range(k):
        hit *= (c - i) / (n - i)
    return hit


def mean_pass_hat_k(groups: Iterable[tuple[int, int]], k: int) -> float | None:
    """Mean of :func:`pass_hat_k` over tasks given as ``(n, c)`` pairs; tasks with ``n < k`` are left out.

    Returns:
        The mean, or None when no task has ``k`` samples.
    """
    values = [pass_hat_k(n, c, k) for n, c in groups if n >= k]
    return sum(values) / len(values) if values else None


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a success rate.

    Args:
        successes: Successful episodes (0 <= successes <= n).
        n: Episodes.
        confidence: Two-sided confidence level in (0, 1).

    Returns:
        ``(low, high)``; ``(0.0, 1.0)`` when ``n == 0``.

    Raises:
        TypeError: If a count is not an int or the level not a number.
        ConfigError: If the counts or the level are invalid (a ``ValueError``).
    """
    check_int("n", n, low=0)
    check_int("successes", successes, low=0, high=n)
    confidence = check_float("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    if n == 0:
        return 0.0, 1.0
    return _wilson(successes / n, n, confidence)


def mean_wilson_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of the mean of per-task estimates in [0, 1] (e.g. each task's pass@k).

    The tasks are the independent units: the interval is Wilson's with the mean as the rate and
    the number of tasks as ``n``. Since a value in [0, 1] with mean ``p`` has variance at most
    ``p (1 - p)``, the interval is conservative; with one 0/1 value per task it is
    :func:`wilson_interval` itself.

    Args:
        values: One estimate per task, each in [0, 1].
        confidence: Two-sided confidence level in (0, 1).

    Returns:
        ``(low, high)``; ``(0.0, 1.0)`` without values.

    Raises:
        TypeError: If the level is not a number.
        ConfigError: If a value is outside [0, 1] or the level invalid (a ``ValueError``).
    """
    confidence = check_float("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    for value in values:
        check_float("value", value, low=0.0, high=1.0)
    if not values:
        return 0.0, 1.0
    return _wilson(sum(values) / len(values), len(values), confidence)


def _wilson(p: float, n: int, confidence: float) -> tuple[float, float]:
    """Wilson score interval of rate ``p`` over ``n`` trials (``n`` >= 1)."""
    z = _normal_quantile(0.5 + confidence / 2)
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _normal_quantile(p: float) -> float:
    """Standard normal quantile by bisection on ``erf`` (exact to ~1e-12)."""
    low, high = -10.0, 10.0
    for _ in range(100):
        mid = (low + high) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2
