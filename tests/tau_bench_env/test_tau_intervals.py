"""Intervals on pass^k and the success rate: the per-task bootstrap, its coverage, the summaries."""

from __future__ import annotations

import random

import pytest

from tau_bench_env.rescoring.figures import summarize
from tau_bench_env.rescoring.intervals import (
    METHOD,
    bootstrap_means,
    intervals,
    percentile_interval,
    task_pass_hat_k,
)
from tau_bench_env.rescoring.run_score import RunScore


def test_the_estimator_against_a_hand_computed_case() -> None:
    # two tasks of 4 runs: 3 and 1 successes. pass^2 = (C(3,2)/C(4,2) + C(1,2)/C(4,2)) / 2
    assert task_pass_hat_k(4, 3, 2) == pytest.approx(3 / 6)
    assert task_pass_hat_k(4, 1, 2) == 0.0
    # a bootstrap of two tasks draws (a,a), (a,b), (b,a) or (b,b): the mean is one of
    # 0.5, 0.25, 0.0; with 2000 draws the 95 % interval spans both ends
    rng = random.Random(0)
    (draws,) = bootstrap_means([[0.5, 0.0]], [1.0, 1.0], rng)
    assert set(draws) == {0.0, 0.25, 0.5}
    assert percentile_interval(draws) == (0.0, 0.5)


def test_one_task_has_no_spread() -> None:
    found = intervals({"7": (4, 3)}, [1, 2, 3, 4], pass_tasks={"7"})
    assert found["success_rate"] == [0.75, 0.75]
    assert found["pass_hat_k"] == {
        "1": [0.75, 0.75],
        "2": [0.5, 0.5],
        "3": [0.25, 0.25],
        "4": [0.0, 0.0],
    }


def test_the_interval_is_reproducible() -> None:
    outcomes = {t: (4, t % 5) for t in range(50)}
    assert intervals(outcomes, [1, 2], pass_tasks=set(outcomes)) == intervals(
        outcomes, [1, 2], pass_tasks=set(outcomes)
    )


def test_coverage_on_simulated_data_with_a_known_rate() -> None:
    """Tasks of a domain have their own success rates (drawn from a known mix); over 200
    simulated evaluations of 100 tasks x 4 trials, the 95 % intervals of pass^1 and pass^2
    hold the domain's true values about 95 % of the time."""
    rng = random.Random(1234)
    true_p1 = 0.5 * 0.9 + 0.5 * 0.3  # half the tasks easy (0.9), half hard (0.3)
    true_p2 = 0.5 * 0.9**2 + 0.5 * 0.3**2
    held = {1: 0, 2: 0}
    repeats = 200
    for _ in range(repeats):
        outcomes = {}
        for task in range(100):
            p = 0.9 if rng.random() < 0.5 else 0.3
            outcomes[task] = (4, sum(rng.random() < p for _ in range(4)))
        found = intervals(outcomes, [1, 2], pass_tasks=set(outcomes))
        for k, true in ((1, true_p1), (2, true_p2)):
            low, high = found["pass_hat_k"][str(k)]
            held[k] += low <= true <= high
    for k in (1, 2):
        assert 0.89 <= held[k] / repeats <= 0.99, (k, held[k])


def test_width_matches_tau2_540_on_a_realistic_size() -> None:
    """tau2-bench #540: two single runs of airline (50 tasks) or retail (114) must differ by
    5.5-11 points before the gap is real; a single run's 95 % interval here has a
    half-width of that order (the task sampling is in it, so it is the wider of the two)."""
    rng = random.Random(5)
    for tasks, low_pts, high_pts in ((50, 8, 16), (114, 5, 11)):
        outcomes = {t: (1, int(rng.random() < 0.6)) for t in range(tasks)}
        low, high = intervals(outcomes, [1], pass_tasks=set(outcomes))["pass_hat_k"]["1"]
        assert low_pts <= 100 * (high - low) / 2 <= high_pts, (tasks, low, high)


def test_rescore_summary_carries_the_intervals() -> None:
    scores = [
        RunScore(task, trial, 0.0, float((task + trial) % 2), None)
        for task in range(6)
        for trial in range(2)
    ]
    summary = summarize(scores)
    found = summary["intervals"]
    assert found["method"] == METHOD and found["level"] == 0.95
    assert set(found["pass_hat_k"]) == set(summary["pass_hat_k"]) == {"1", "2"}
    low, high = found["success_rate"]
    assert low <= summary["success_rate"] <= high
    # every task succeeds once in two runs: no spread between tasks
    assert found["pass_hat_k"]["1"] == [0.5, 0.5] and found["pass_hat_k"]["2"] == [0.0, 0.0]


def test_no_run_scored_gives_no_interval() -> None:
    summary = summarize([])
    assert summary["intervals"]["success_rate"] is None
    assert summary["intervals"]["pass_hat_k"] == {}
