"""Confidence intervals on pass^k and the success rate: a per-task bootstrap.

The runs of one task are not independent draws (a hard task fails every
time), so the unit resampled is the task: each of :data:`RESAMPLES` resamples
draws as many tasks as there are, with replacement, and recomputes the figure
over the drawn tasks' runs; the interval is the percentile interval of those
figures at :data:`LEVEL`. The generator's seed is fixed (:data:`SEED`), so the
same runs give the same interval every time. tau2-bench #540 reports that two
single runs of a 100-task domain must differ by 5.5-11 points before the gap is
real; a 95 % interval here is about +-9 points wide for 100 tasks at a 0.6 rate
(docs/tau_bench_env.md, "Intervals").

Pure Python (no numpy): the layer below ``evaluation`` loads without it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from math import comb
from typing import Any

LEVEL = 0.95
RESAMPLES = 2000
SEED = 0
METHOD = f"per-task bootstrap, {RESAMPLES} resamples, seed {SEED}, percentile"


def task_pass_hat_k(runs: int, successes: int, k: int) -> float:
    """pass^k of one task with ``runs`` runs of which ``successes`` succeeded: C(c,k)/C(n,k).

    >>> task_pass_hat_k(3, 2, 1), task_pass_hat_k(3, 2, 2), task_pass_hat_k(3, 2, 3)
    (0.6666666666666666, 0.3333333333333333, 0.0)
    """
    return comb(successes, k) / comb(runs, k)


def percentile_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """The ``level`` percentile interval of ``values`` (nearest rank, both tails equal).

    >>> percentile_interval([float(i) for i in range(101)], 0.9)
    (5.0, 95.0)
    """
    ordered = sorted(values)
    tail = (1.0 - level) / 2.0
    last = len(ordered) - 1
    return ordered[round(tail * last)], ordered[round((1.0 - tail) * last)]


def bootstrap_means(
    values: Sequence[Sequence[float]], weights: Sequence[float], rng: random.Random
) -> list[list[float]]:
    """Per figure, the weighted mean over each resample of the tasks (same draws for all)."""
    count = len(weights)
    indices = range(count)
    products = [[v * w for v, w in zip(per_task, weights, strict=True)] for per_task in values]
    figures: list[list[float]] = [[] for _ in values]
    for _ in range(RESAMPLES):
        drawn = rng.choices(indices, k=count)
        total = sum([weights[i] for i in drawn])
        for out, weighted in zip(figures, products, strict=True):
            out.append(sum([weighted[i] for i in drawn]) / total)
    return figures


def intervals(
    outcomes: Mapping[Any, tuple[int, int]], ks: Sequence[int], *, pass_tasks: set[Any]
) -> dict[str, Any]:
    """95 % per-task bootstrap intervals of the success rate and of pass^k for each k in ``ks``.

    ``outcomes`` maps each task to ``(runs, successes)`` over the runs the
    success rate counts (a task with no such run is left out);
    ``pass_tasks`` are the tasks pass^k is over (each has at least max(``ks``)
    runs). The success rate of a resample is its successes over its runs
    (tasks weighted by their runs, as the rate itself); pass^k is the mean over
    its tasks. JSON-able: ``{"method", "level", "success_rate": [low, high] |
    None, "pass_hat_k": {"k": [low, high]}}`` (None, and no k, without tasks).

    >>> found = intervals({0: (2, 2), 1: (2, 0)}, [1, 2], pass_tasks={0, 1})
    >>> found["success_rate"], found["pass_hat_k"]
    ([0.0, 1.0], {'1': [0.0, 1.0], '2': [0.0, 1.0]})
    """
    rng = random.Random(SEED)
    found: dict[str, Any] = {
        "method": METHOD,
        "level": LEVEL,
        "success_rate": None,
        "pass_hat_k": {},
    }
    counted = [task for task, (runs, _) in outcomes.items() if runs]
    if counted:
        rates = [outcomes[t][1] / outcomes[t][0] for t in counted]
        (draws,) = bootstrap_means([rates], [float(outcomes[t][0]) for t in counted], rng)
        found["success_rate"] = list(percentile_interval(draws))
    tasks = [task for task in outcomes if task in pass_tasks]
    if tasks and ks:
        per_k = [[task_pass_hat_k(*outcomes[t], k) for t in tasks] for k in ks]
        draws_k = bootstrap_means(per_k, [1.0] * len(tasks), rng)
        found["pass_hat_k"] = {
            str(k): list(percentile_interval(d)) for k, d in zip(ks, draws_k, strict=True)
        }
    return found


def interval_text(interval: Sequence[float] | None) -> str:
    """How a summary prints an interval: `` [low, high]``, or nothing without one.

    >>> interval_text([0.5, 0.75]), interval_text(None)
    (' [0.5000, 0.7500]', '')
    """
    return "" if interval is None else f" [{interval[0]:.4f}, {interval[1]:.4f}]"


def method_line(found: Mapping[str, Any]) -> str:
    """The summary's line naming the intervals' method."""
    return (
        f"intervals: {found['level']:.0%} confidence, {found['method']} "
        "(resampling tasks; a gap smaller than the intervals' width is noise)"
    )
