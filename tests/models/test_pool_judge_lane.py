"""Judges in a real reward pool: the judge lane, against a loopback chat endpoint.

The pool runs on a real local Ray; the endpoint is a real HTTP server on
127.0.0.1 started by the test (``judge_server``). What is checked: judge tasks
never reach the CPU workers; the endpoint's limits hold for the whole pool
(counted at the server, two client processes); failures are masked with their
cause and asked again later (never cached); identical work is asked once;
every item gets exactly one result when the lane's actor is killed mid-judging.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from judge_server import JudgeServer
from ray import cloudpickle
from ray.cluster_utils import Cluster

from skyrl_rewards.pool import service
from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.rewards.models.lanes import JUDGE_LANE
from skyrl_rewards.rewards.result import Status

pytestmark = pytest.mark.slow


def grader(body: dict[str, Any]) -> str:
    """A stand-in judge model: 1.0 when the graded text says 'right', else 0.0."""
    return "1.0" if "right" in body["messages"][-1]["content"] else "0.0"


def pool_config(name: str, server: JudgeServer, **endpoint: Any) -> dict[str, Any]:
    return {
        "name": name,
        "num_workers": 1,
        "local_rewards": [],
        "rewards": {
            "format": {"weight": 0.5},
            "judge": {
                "weight": 1.0,
                "base_url": server.url,
                "model": "judge",
                "template": "Grade: {answer}",
                "backoff_base_s": 0.01,
                **endpoint,
            },
        },
    }


def rows(count: int, start: int = 0) -> list[dict[str, Any]]:
    """Distinct answers: even i right (judge 1.0), odd i wrong (0.0); all well formatted."""
    return [
        {
            "completion": f"<think>t</think><answer>{'right' if i % 2 == 0 else 'wrong'} {i}</answer>",
            "solution": "<answer>x</answer>",
        }
        for i in range(start, start + count)
    ]


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    with JudgeServer(reply=grader) as running:
        yield running


def test_a_mix_of_rules_and_a_judge_scores_each_item_once_in_order(
    ray_local: None, server: JudgeServer
) -> None:
    with RewardPool.from_config(pool_config("t_judge_mix", server)) as pool:
        results = pool.score(rows(40) + rows(40))  # the second half repeats the first
        metrics = pool.metrics()
        status = service.status("t_judge_mix")
    assert status["lanes"] == {JUDGE_LANE: {"running": 1}}
    assert [r.components["judge"] for r in results] == [1.0, 0.0] * 40
    assert all(r.components["format"] == 1.0 and r.ok for r in results)
    assert [r.total for r in results[:2]] == [1.5, 0.5]
    assert server.calls == 40  # identical work is asked once (the pool's work cache)
    assert metrics["lane_calls"] >= 1 and metrics["cache_hits"] >= 40
    # judge tasks never held a CPU worker: it saw only the 80 format computations (format has
    # no work key, so repeats are computed again)
    assert metrics["workers"][0]["computations"] == 80
    (judge,) = metrics["judge"].values()
    assert judge["requests"] == 40 and judge["ok"] == 40 and judge["tokens_in"] > 0


def test_an_outage_is_masked_with_its_cause_and_asked_again_after_recovery(
    ray_local: None, server: JudgeServer
) -> None:
    config = pool_config(
        "t_judge_outage", server, max_retries=1, breaker_failures=3, breaker_reset_s=1.0
    )
    with RewardPool.from_config(config) as pool:
        server.down = True
        during = pool.score(rows(6))
        server.down = False
        time.sleep(1.5)  # past breaker_reset_s: the next call is the breaker's probe
        probe = pool.score(rows(1))  # while the probe is out, other calls are masked at once
        after = pool.score(rows(6))  # the same inputs: failures were not cached
        metrics = pool.metrics()
    assert all(r.should_mask and r.status["judge"] == Status.ERROR.value for r in during)
    assert all(r.components["judge"] == 0.0 for r in during)  # the pool's fallback
    assert all(r.components["format"] == 1.0 for r in during)  # the rules still scored
    causes = {r.errors["judge"].split(":")[0] for r in during}
    assert causes <= {"judge connect", "judge breaker_open"}, causes
    assert probe[0].ok and probe[0].components["judge"] == 1.0
    assert [r.components["judge"] for r in after] == [1.0, 0.0] * 3
    assert not any(r.should_mask for r in after)
    assert metrics["lane_failures"] == 6 and metrics["masked_items"] == 6


def test_accuracy_llm_rows_go_to_the_judge_and_other_rows_to_the_rules(
    ray_local: None, server: JudgeServer
) -> None:
    judge = {"endpoint": {"base_url": server.url, "model": "judge"}, "template": "{answer}"}
    config = {
        "name": "t_judge_llm_rows",
        "num_workers": 1,
        "rewards": {"accuracy": {"judge": judge}},
    }
    samples = [
        {"completion": "<answer>right</answer>", "solution": "x", "accu_reward_method": "llm"},
        {"completion": "<answer>2</answer>", "solution": "<answer>2</answer>"},
        {"completion": "<answer>wrong</answer>", "solution": "x", "accu_reward_method": "llm"},
    ]
    with RewardPool.from_config(config) as pool:
        results = pool.score(samples)
    assert [r.components["accuracy"] for r in results] == [1.0, 1.0, 0.0]
    assert server.calls == 2


def _score_from_another_process(name: str, start: int, count: int) -> list[float]:
    pool = RewardPool.connect(name)
    try:
        return [r.components["judge"] for r in pool.score(rows(count, start))]
    finally:
        pool.shutdown()


@contextlib.contextmanager
def two_node_cluster(head_cpus: int) -> Iterator[list[Any]]:
    """A loopback Ray cluster: a head with ``head_cpus`` and two nodes of 2 CPUs; yields the nodes.

    The session's local Ray is shut down first (the next test that needs it starts it again).
    """
    if ray.is_initialized():
        ray.shutdown()
    local = {"node_ip_address": "127.0.0.1", "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus, **local})
    nodes = [cluster.add_node(num_cpus=2, **local) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="skyrl_rewards", log_to_driver=False)
    try:
        yield [cluster, *nodes]
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.multinode
def test_the_endpoint_limits_hold_for_the_whole_pool_across_processes_and_nodes(
    _ray_session: None,
) -> None:
    per_minute = 600.0  # 10 requests per second
    with two_node_cluster(head_cpus=2):
        with JudgeServer(reply=grader, latency_s=0.3) as server:
            config = pool_config(
                "t_judge_limits", server, max_in_flight=3, requests_per_minute=per_minute
            )
            config.update(num_workers=2, placement="spread")
            with RewardPool.from_config(config) as pool:
                # the other client is a Ray task: its process imports no test module
                cloudpickle.register_pickle_by_value(sys.modules[__name__])
                remote = ray.remote(num_cpus=0)(_score_from_another_process)
                other = remote.remote("t_judge_limits", 1000, 60)
                here = [r.components["judge"] for r in pool.score(rows(60))]
                there = ray.get(other, timeout=300)
            arrivals = sorted(server.arrivals)
    assert here == there == [1.0, 0.0] * 30
    assert server.calls == 120
    assert server.peak <= 3  # in flight, counted at the server, never above the limit
    steady = arrivals[10:]  # past the limiter's first burst
    rate_per_minute = 60.0 * (len(steady) - 1) / (steady[-1] - steady[0])
    assert abs(rate_per_minute - per_minute) / per_minute <= 0.05, rate_per_minute


def test_every_item_gets_one_result_when_the_judge_lane_is_killed_mid_judging(
    ray_local: None,
) -> None:
    with JudgeServer(reply=grader, latency_s=0.2) as server:
        with RewardPool.from_config(pool_config("t_judge_kill", server)) as pool:
            results: list = []
            scoring = threading.Thread(target=lambda: results.extend(pool.score(rows(200))))
            scoring.start()
            deadline = time.monotonic() + 60
            while server.calls < 20:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            directory = ray.get_actor("t_judge_kill", namespace="skyrl_rewards")
            ((_, lane),) = ray.get(directory.lane_actors.remote(JUDGE_LANE))
            ray.kill(lane, no_restart=True)
            scoring.join(timeout=240)
            metrics = pool.metrics()
    assert not scoring.is_alive()
    assert len(results) == 200
    assert [r.components["judge"] for r in results] == [1.0, 0.0] * 100
    assert not any(r.should_mask for r in results)
    assert metrics["retries"] > 0 and metrics["worker_restarts"] >= 1


@pytest.mark.multinode
def test_every_item_gets_one_result_when_the_judge_lanes_node_goes_away(
    _ray_session: None,
) -> None:
    with two_node_cluster(head_cpus=0) as (cluster, *nodes):
        with JudgeServer(reply=grader, latency_s=0.2) as server:
            config = pool_config("t_judge_node", server)
            config["judge_lane"] = {"num_cpus": 1.0}  # on a worker node, not the head
            with RewardPool.from_config(config) as pool:
                directory = ray.get_actor("t_judge_node", namespace="skyrl_rewards")
                ((_, lane),) = ray.get(directory.lane_actors.remote(JUDGE_LANE))
                _, lane_node = ray.get(lane.ready.remote())
                results: list = []
                scoring = threading.Thread(target=lambda: results.extend(pool.score(rows(200))))
                scoring.start()
                deadline = time.monotonic() + 60
                while server.calls < 20:
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
                cluster.remove_node(next(n for n in nodes if n.node_id == lane_node))
                scoring.join(timeout=300)
                metrics = pool.metrics()
    assert not scoring.is_alive()
    assert [r.components["judge"] for r in results] == [1.0, 0.0] * 100
    assert not any(r.should_mask for r in results)
    assert metrics["retries"] > 0
