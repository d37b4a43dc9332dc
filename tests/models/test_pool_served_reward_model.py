"""A served reward model in a real reward pool: its requests go through the judge lane.

The pool runs on real Ray; the endpoint is :mod:`reward_model_server`, a loopback
server speaking vLLM's ``/classify``, which counts what reached it. What is
checked: values equal the server's documented function of the text; a failing
endpoint masks each row with its cause (the server counted the failures); the
in-flight limit and batching hold for the whole pool, from two client processes
on a two-node cluster, counted at the server; a 429 storm's ``Retry-After``
pauses the endpoint for both client processes (one lane), counted at the server.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
import ray
import reward_model_server
from judge_lane import two_node_cluster
from loopback_server import Storm
from ray import cloudpickle
from reward_model_server import Response, RewardModelServer, expected_score

from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.rewards.contract.result import Status

pytestmark = pytest.mark.slow


def pool_config(name: str, server: RewardModelServer, **endpoint: Any) -> dict[str, Any]:
    """A pool of one CPU worker whose only reward is a served reward model on ``server``."""
    return {
        "name": name,
        "num_workers": 1,
        "local_rewards": [],
        "rewards": {
            "reward_model": {
                "weight": 1.0,
                "base_url": server.base_url,
                "model": "rm",
                "retries": {"backoff_base_s": 0.01, "backoff_max_s": 0.05},
                **endpoint,
            }
        },
    }


def rows(count: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"prompt": f"What is {i} + {i}?", "completion": f"The answer is {2 * i}."}
        for i in range(start, start + count)
    ]


def expected(count: int, start: int = 0) -> list[float]:
    """The server's values for :func:`rows` (text input: prompt and completion joined by a newline)."""
    return [expected_score(f"{r['prompt']}\n{r['completion']}") for r in rows(count, start)]


def _score_rows(name: str, start: int, count: int) -> list[float]:
    pool = RewardPool.connect(name)
    try:
        return [r.components["reward_model"] for r in pool.score(rows(count, start))]
    finally:
        pool.shutdown()


def score_elsewhere(name: str, start: int, count: int) -> ray.ObjectRef:
    """Score ``rows(count, start)`` from another process (a Ray task); its reward-model values."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cloudpickle.register_pickle_by_value(reward_model_server)
    return ray.remote(num_cpus=0)(_score_rows).remote(name, start, count)


def test_values_and_masked_failures_through_the_pool(ray_local: None) -> None:
    with RewardModelServer(latency_s=0.02) as server:
        with RewardPool.from_config(
            pool_config("t_served_rm", server, batch_size=8, batch_wait_s=0.02)
        ) as pool:
            results = pool.score(rows(32))
            served_before = server.items
            server.plan = lambda n, body: Response(status=503)
            failed = pool.score(rows(4, start=100))
    assert [r.components["reward_model"] for r in results] == pytest.approx(expected(32), abs=1e-9)
    assert served_before == 32 and server.requests - server.errors < 32  # batched
    assert server.errors >= 1  # the 503s happened, at the server
    for result in failed:
        assert result.should_mask  # masked: never trained on as a 0.0
        assert result.status["reward_model"] == Status.ERROR.value
        assert "http_status" in result.errors["reward_model"]


@pytest.mark.multinode
def test_limits_and_batching_hold_for_the_whole_pool_across_processes_and_nodes(
    _ray_session: None,
) -> None:
    with two_node_cluster(head_cpus=2):
        with RewardModelServer(latency_s=0.1) as server:
            config = pool_config(
                "t_served_rm_limits",
                server,
                batch_size=4,
                batch_wait_s=0.02,
                limits={"max_in_flight": 2},
            )
            config.update(num_workers=2, placement="spread")
            with RewardPool.from_config(config) as pool:
                other = score_elsewhere("t_served_rm_limits", 1000, 60)
                here = [r.components["reward_model"] for r in pool.score(rows(60))]
                there = ray.get(other, timeout=300)
    assert here == pytest.approx(expected(60), abs=1e-9)
    assert there == pytest.approx(expected(60, start=1000), abs=1e-9)
    assert server.items == 120  # each row asked once
    assert server.peak <= 2  # in flight, counted at the server, never above the pool's limit
    assert server.requests < 120  # batched: many rows per request


def test_a_storm_pauses_the_endpoint_for_every_client_process(ray_local: None) -> None:
    storm = Storm(storm_s=1.5, retry_after_s=2)
    with RewardModelServer(plan=storm) as server:
        with RewardPool.from_config(pool_config("t_served_rm_storm", server, batch_size=1)) as pool:
            other = score_elsewhere("t_served_rm_storm", 2000, 60)
            here = [r.components["reward_model"] for r in pool.score(rows(60))]
            there = ray.get(other, timeout=300)
    assert here == pytest.approx(expected(60), abs=1e-9)
    assert there == pytest.approx(expected(60, start=2000), abs=1e-9)
    assert server.throttled >= 1  # the storm happened
    assert server.requests <= 1.3 * 120, server.requests  # requests per item, at the server
    # none while a Retry-After ran; two client processes and a Ray lane on a loaded machine:
    # a call that passed the pause check before the first 429 came back may reach the server
    # up to a few tenths of a second later (the clean-clone run saw one 90 ms after it), still
    # far inside a 2 s Retry-After that a call ignoring it would land in
    assert storm.early_calls(server.served, grace_s=0.3) == 0
