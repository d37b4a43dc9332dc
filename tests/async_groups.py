"""Groups of trajectories scored the way SkyRL 0.4's fully-async trainer scores them.

``FullyAsyncRayPPOTrainer`` runs up to ``num_parallel_generation_workers`` (768)
asyncio tasks on one event loop, each calling ``generator.generate`` for one
group; SkyRL's agent loop makes one env per trajectory
(``skyrl_gym.make``, on the loop) and runs ``env.step`` in the generator's
``ThreadPoolExecutor`` (``max_env_workers``: 32 threads) through
``loop.run_in_executor`` (``SkyRLGymGenerator._run_in_executor_if_available``).
:func:`play_groups` does exactly that with this project's ``skyrl_rewards`` env
and a stand-in for the engine (an ``asyncio.sleep`` per trajectory), and
records when each trajectory ended and when its reward came back.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from skyrl_rewards.train.env import SkyRLRewardEnv

SKYRL_MAX_ENV_WORKERS = 32
"""SkyRL 0.4's default ``environment.skyrl_gym.max_env_workers``."""


@dataclass(frozen=True)
class Trajectory:
    """One trajectory: how long the engine takes, what it answers, against what."""

    engine_s: float
    completion: str
    solution: str


@dataclass(frozen=True)
class Outcome:
    """When a trajectory's text was ready, when its reward came back, and the step's output."""

    ended_s: float
    scored_s: float
    reward: float
    metadata: dict[str, Any]


def integer(answer: int, solution: int, engine_s: float = 0.0) -> Trajectory:
    """An integer answer to a prompt whose solution is ``solution``."""
    return Trajectory(
        engine_s, f"<think>t</think><answer>{answer}</answer>", f"<answer>{solution}</answer>"
    )


def expected_reward(t: Trajectory) -> float:
    """The mix ``accuracy`` (1.0) + ``format`` (0.5) on an :func:`integer` trajectory."""
    right = t.completion.split("<answer>")[1] == t.solution.split("<answer>")[1]
    return 1.5 if right else 0.5


async def play_groups(
    pool_name: str,
    groups: list[list[Trajectory]],
    executor_threads: int = SKYRL_MAX_ENV_WORKERS,
) -> tuple[list[list[Outcome]], list[float]]:
    """Every group at once, one task per group, as the fully-async trainer runs them.

    Returns each trajectory's :class:`Outcome` and each group's completion time
    (seconds from the start of the run; ``time.monotonic`` for the ``*_s`` fields).
    """
    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(executor_threads, thread_name_prefix="skyrl-gym-env-")

    async def trajectory(t: Trajectory) -> Outcome:
        env = SkyRLRewardEnv({"pool": pool_name}, {"reward_spec": {"ground_truth": t.solution}})
        await asyncio.sleep(t.engine_s)
        ended = time.monotonic()
        out = await loop.run_in_executor(executor, env.step, t.completion)
        return Outcome(ended, time.monotonic(), out["reward"], out["metadata"])

    async def group(trajectories: list[Trajectory]) -> tuple[list[Outcome], float]:
        outcomes = await asyncio.gather(*(trajectory(t) for t in trajectories))
        return list(outcomes), time.monotonic() - start

    start = time.monotonic()
    try:
        done = await asyncio.gather(*(group(g) for g in groups))
    finally:
        executor.shutdown(wait=False)
    return [d[0] for d in done], [d[1] for d in done]


def play(pool_name: str, groups: list[list[Trajectory]]) -> tuple[list[list[Outcome]], list[float]]:
    """:func:`play_groups` on a fresh event loop (blocking)."""
    return asyncio.run(play_groups(pool_name, groups))
