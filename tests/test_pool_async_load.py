"""The reward pool under SkyRL's fully-async load, on a real Ray with the real rewards.

The fully-async trainer keeps up to 768 groups generating at once on one event
loop, and every trajectory's ``env.step`` waits for its reward in SkyRL's
32-thread executor (:mod:`async_groups` does the same). What must hold, each
checked from what ran: every trajectory gets exactly one reward, its own (the
values say whose), counted once at the pool (the client's ``items``) and once
where it was computed (the workers' own ``scored`` counters); a reward comes
back when its trajectory ends, not when the batch does; a worker killed in the
middle (its process proven gone) costs a retry, never a result or a deadlock;
several generation processes share the pool the same way; a math hang delays
only its own group. Every wait is bounded (the tests' own timeouts).
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import ray
from async_groups import Outcome, Trajectory, expected_reward, integer, play, play_groups
from ray_clusters import two_node_cluster

from skyrl_rewards.pool.config import for_streaming, load_pool_config
from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.pool.worker import CONTROL
from skyrl_rewards.rewards.text.math_screen import too_complex
from skyrl_rewards.train.env import close_shared_pools, shared_pool

pytestmark = pytest.mark.slow

REWARDS = {"accuracy": {"weight": 1.0}, "format": {"weight": 0.5}}
TESTS = Path(__file__).resolve().parent
HANG_ANSWERS = [  # as in test_pool_faults: the first one the math pre-screen lets through
    "$\\Gamma(10^{10})$",
    "\\boxed{7^{\\frac{199960002}{2}}}",
    "\\boxed{7^{\\sqrt{10000000000000000}}}",
]
LATE_S = 10.0
"""How much longer the late groups of the 768-group test generate."""
HANG_ANSWER = next((a for a in HANG_ANSWERS if not too_complex(a)), None)


def groups_of(
    count: int, size: int, spread_s: float, *, distinct: int, seed: int = 0, first: int = 0
) -> list[list[Trajectory]]:
    """``count`` groups of ``size`` trajectories ending within ``spread_s`` of the start.

    Group ``g`` answers a prompt of its own (solution ``first + g * size``); its
    trajectory ``k`` answers ``solution + k % distinct``: right when ``k % distinct``
    is 0, and ``distinct`` different answers per group (GRPO samples repeat).
    """
    rng = random.Random(seed)
    return [
        [
            integer(first + g * size + k % distinct, first + g * size, rng.uniform(0, spread_s))
            for k in range(size)
        ]
        for g in range(count)
    ]


def assert_each_scored_once_and_its_own(
    groups: list[list[Trajectory]], outcomes: list[list[Outcome]]
) -> None:
    assert len(outcomes) == len(groups)
    for g, (group, results) in enumerate(zip(groups, outcomes, strict=True)):
        assert len(results) == len(group)
        for k, (trajectory, outcome) in enumerate(zip(group, results, strict=True)):
            assert outcome.metadata["status"] == {"accuracy": "ok", "format": "ok"}, (g, k)
            assert outcome.reward == expected_reward(trajectory), (g, k, outcome.reward)


def worker_handles(pool_name: str) -> list:
    directory = ray.get_actor(pool_name, namespace="skyrl_rewards")
    return [actor for _, actor in ray.get(directory.workers.remote(), timeout=30)]


def scored_by_workers(pool_name: str) -> int:
    """Computations counted by the pool's live workers themselves."""
    return sum(
        ray.get(
            [
                a.scored.options(concurrency_group=CONTROL).remote()
                for a in worker_handles(pool_name)
            ],
            timeout=30,
        )
    )


def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g}s"
        time.sleep(0.05)


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def pool(ray_local: None) -> Iterator[RewardPool]:
    """The pool as the entry point starts it for a fully-async run (the latency view)."""
    config = for_streaming(load_pool_config({"name": "test_async_load", "rewards": REWARDS}))
    with RewardPool(config) as reward_pool:
        yield reward_pool
    close_shared_pools()


def test_768_groups_from_one_loop_each_trajectory_scored_once_as_it_ends(
    pool: RewardPool,
) -> None:
    groups = groups_of(768, 8, spread_s=1.0, distinct=3)
    for group in groups[1::2]:  # every other group generates for 10 s longer
        group[:] = [replace(t, engine_s=t.engine_s + LATE_S) for t in group]
    start = time.monotonic()
    outcomes, _ = play(pool.config.name, groups)
    elapsed_s = time.monotonic() - start
    assert_each_scored_once_and_its_own(groups, outcomes)
    n = 768 * 8
    metrics = shared_pool(pool.config.name).metrics()  # the client every env of this process uses
    # counted once at the pool (an item completed twice would count twice) ...
    assert metrics["items"] == n and metrics["tasks"] == 2 * n
    # ... and once where it ran: accuracy on a worker, once per distinct answer (3 per group:
    # the rest joined work in flight or found it done), format in this process
    assert scored_by_workers(pool.config.name) == 768 * 3
    assert metrics["cache_hits"] == n - 768 * 3
    assert metrics["retries"] == 0 and metrics["masked_items"] == 0
    # streaming: each reward comes back as its trajectory ends, not when the batch does; the
    # early groups' all came back while the late ones were still generating
    early = [o for group in outcomes[0::2] for o in group]
    late = [o for group in outcomes[1::2] for o in group]
    assert max(o.scored_s for o in early) < min(o.ended_s for o in late)
    assert elapsed_s < 120.0, elapsed_s


@pytest.mark.skipif(HANG_ANSWER is None, reason="the math pre-screen refuses every known hang")
def test_a_math_hang_delays_only_its_own_group(pool: RewardPool) -> None:
    # the same load twice (fresh answers each time: nothing from the cache), the second time
    # with one hanging answer in group 0
    _, baseline_s = play(pool.config.name, groups_of(64, 8, spread_s=1.0, distinct=8, seed=1))
    groups = groups_of(64, 8, spread_s=1.0, distinct=8, seed=1, first=100_000)
    hang = Trajectory(0.0, f"<think>t</think><answer>{HANG_ANSWER}</answer>", "<answer>1</answer>")
    groups[0] = [hang, *groups[0][1:]]
    outcomes, completion_s = play(pool.config.name, groups)
    hung = outcomes[0][0]
    assert hung.metadata["status"]["accuracy"] == "timeout" and hung.metadata["should_mask"]
    assert "CPU time" in hung.metadata["errors"]["accuracy"]
    assert_each_scored_once_and_its_own(groups[1:], outcomes[1:])
    assert all(o.metadata["status"]["accuracy"] == "ok" for o in outcomes[0][1:])
    # the hang costs its own group its math limit (3 s of CPU); the others barely notice it
    others = completion_s[1:]
    assert completion_s[0] >= 3.0 and max(others) < completion_s[0]
    assert statistics.median(others) < 1.5 * statistics.median(baseline_s) + 0.5, (
        statistics.median(others),
        statistics.median(baseline_s),
    )


def held_worker(pool_name: str, hold_s: float = 0.5) -> dict | None:
    """A worker with a task in flight now and ``hold_s`` ago, in the same process, as this
    process's env client sees it (the one scoring the hang: its math check runs for
    seconds); None when there is none."""
    before = {w["pid"] for w in shared_pool(pool_name).metrics()["workers"] if w["in_flight"]}
    time.sleep(hold_s)
    workers = shared_pool(pool_name).metrics()["workers"]
    return next((w for w in workers if w["in_flight"] and w["pid"] in before), None)


def test_a_worker_killed_mid_flight_loses_nothing_and_blocks_nothing(pool: RewardPool) -> None:
    # a hang in group 0 keeps its worker busy for seconds after the others are done: killed
    # then, that worker certainly dies with a task in flight
    groups = groups_of(256, 8, spread_s=2.0, distinct=8, seed=2)
    hang = Trajectory(0.0, f"<think>t</think><answer>{HANG_ANSWER}</answer>", "<answer>1</answer>")
    groups[0] = [hang, *groups[0][1:]]
    out: list = []
    runner = threading.Thread(target=lambda: out.append(play(pool.config.name, groups)))
    runner.start()
    time.sleep(2.0)  # the ordinary trajectories end within 2 s; the hang runs on
    deadline = time.monotonic() + 60
    while (victim := held_worker(pool.config.name)) is None:
        assert time.monotonic() < deadline, "no worker held a task for 0.5 s within 60 s"
    os.kill(victim["pid"], signal.SIGKILL)
    runner.join(timeout=180)
    assert not runner.is_alive(), "the groups did not finish after a worker was killed"
    wait_until(lambda: pid_gone(victim["pid"]), 30, "the killed worker's process to end")
    outcomes, _ = out[0]
    assert outcomes[0][0].metadata["should_mask"]  # the hang: still its math limit, masked
    assert_each_scored_once_and_its_own(groups[1:], outcomes[1:])
    assert all(o.metadata["status"]["accuracy"] == "ok" for o in outcomes[0][1:])
    metrics = shared_pool(pool.config.name).metrics()
    assert metrics["items"] == 256 * 8 and metrics["worker_restarts"] == 1
    assert metrics["retries"] > 0  # it died with tasks in flight: they were scored again

    # the groups did not wait for the replacement; it comes up meanwhile (a new process)
    def replaced() -> dict:
        workers = shared_pool(pool.config.name).metrics()["workers"]
        return next(w for w in workers if w["slot"] == victim["slot"])

    wait_until(lambda: replaced()["pid"] not in (0, victim["pid"]), 240, "the replacement")
    assert replaced()["generation"] == victim["generation"] + 1


# ---- several generation processes, on several nodes ----------------------------------------


@ray.remote(num_cpus=0)
class GenerationProcess:
    """One generation process (as a SkyRL trainer's driver is): its own event loop, executor
    and pool client, scoring its groups through the shared pool."""

    def __init__(self) -> None:
        self.done = 0

    async def play(self, pool_name: str, groups: list[list[Trajectory]]) -> dict:
        outcomes, _ = await play_groups(pool_name, groups)
        from skyrl_rewards.train.env import shared_pool

        metrics = shared_pool(pool_name).metrics()
        return {
            "outcomes": outcomes,
            "node": ray.get_runtime_context().get_node_id(),
            "items": metrics["items"],
            "retries": metrics["retries"],
            "worker_restarts": metrics["worker_restarts"],
        }


GROUPS_PER_PROCESS = 384
"""Two generation processes, 768 groups of 8 in flight between them."""


@pytest.mark.multinode
def test_generation_processes_on_two_nodes_share_the_pool_through_a_worker_kill(
    _ray_session: None,
) -> None:
    cfg = {"name": "test_async_nodes", "rewards": REWARDS, "num_workers": 2}
    with two_node_cluster(head_cpus=1), RewardPool.from_config(cfg) as pool:
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        head = ray.get_runtime_context().get_node_id()
        env = {
            "env_vars": {
                "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
            }
        }
        processes = [
            GenerationProcess.options(
                scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                    node, soft=False
                ),
                runtime_env=env,
            ).remote()
            for node in nodes
            if node != head
        ]
        assert len(processes) == 2
        per_process = [  # 768 groups in all, GRPO-like; distinct answers across the processes
            groups_of(GROUPS_PER_PROCESS, 8, spread_s=3.0, distinct=3, seed=p, first=p * 10_000)
            for p in range(2)
        ]
        before = {w["slot"]: w for w in pool.metrics()["workers"]}
        calls = [
            gen.play.remote(pool.config.name, g)
            for gen, g in zip(processes, per_process, strict=True)
        ]
        wait_until(lambda: scored_by_workers(pool.config.name) > 100, 120, "scoring to start")
        victim = before[0]
        os.kill(victim["pid"], signal.SIGKILL)
        reports = ray.get(calls, timeout=240)
        wait_until(lambda: pid_gone(victim["pid"]), 30, "the killed worker's process to end")
        assert {r["node"] for r in reports} == set(nodes) - {head}
        for groups, report in zip(per_process, reports, strict=True):
            assert_each_scored_once_and_its_own(groups, report["outcomes"])
            assert report["items"] == GROUPS_PER_PROCESS * 8
        # each process saw the worker go: one replaced it, the other found the replacement
        assert sum(r["retries"] for r in reports) > 0
        directory = ray.get_actor(cfg["name"], namespace="skyrl_rewards")
        generations = dict(enumerate(g for g, _ in ray.get(directory.workers.remote(), timeout=30)))
        assert generations[0] == before[0]["generation"] + 1
        for gen in processes:
            ray.kill(gen)
