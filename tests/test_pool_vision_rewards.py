"""Every vision reward beyond VLM-R1 in one real pool batch: equal to in-process scoring, in order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vision_rows import TASKS, completion

from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.rewards.mix import RewardMix

REWARDS = {name: {"weight": 1.0} for name in TASKS}


@pytest.fixture(scope="module")
def pool(ray_module: None) -> Iterator[RewardPool]:
    config = {"name": "test_pool_vision_rewards", "num_workers": 2, "rewards": REWARDS}
    with RewardPool.from_config(config) as reward_pool:
        yield reward_pool


def test_every_vision_reward_scores_in_one_batch(pool: RewardPool) -> None:
    # One mix of all nine: each row is its own task's and a dataset error for the others
    # (masked), so the pool's error alarm fires here; a real mix holds one task's rewards.
    samples = [
        {**task["columns"], "task": name, "completion": completion(answer)}
        for name, task in TASKS.items()
        for answer in task["answers"]
    ]
    results = pool.score(samples * 4)  # a GRPO-step-sized batch, repeats served from the cache
    mix = RewardMix.from_config(REWARDS)
    expected = [mix.score(sample) for sample in samples] * 4
    assert [r.components for r in results] == [e.components for e in expected]
    assert [r.status for r in results] == [e.status for e in expected]
    results = results[: len(samples)]
    for sample, result in zip(samples, results, strict=True):
        own = sample["task"]
        assert result.status[own] in ("ok", "unparseable"), (own, result.errors)
    for name in TASKS:  # each reward tells its task's four answers apart
        values = [
            r.components[name] for s, r in zip(samples, results, strict=True) if s["task"] == name
        ]
        assert len(set(values)) >= 2, (name, values)
        assert max(values) > 0.9, (name, values)  # the right answer is paid
