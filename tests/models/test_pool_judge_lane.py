"""Judges in a real reward pool: the judge lane, against a loopback chat endpoint.

The pool runs on a real local Ray; the endpoint is a real HTTP server on
127.0.0.1 started by the test (``judge_server``). What is checked: judge tasks
never reach the CPU workers; the endpoint's limits hold for the whole pool
(counted at the server, two client processes); failures are masked with their
cause and asked again later (never cached); identical work is asked once;
every item gets exactly one result when the lane's actor is killed mid-judging.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from judge_lane import (
    grader,
    judged,
    pool_config,
    rows,
    score_elsewhere,
    scoring_until_judged,
    two_node_cluster,
    wait_for_calls,
)
from judge_server import JudgeServer
from judge_texts import load_tokenizer, save_tokenizer

from skyrl_rewards.pool import service
from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE
from skyrl_rewards.rewards.contract.result import Status

pytestmark = pytest.mark.slow


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
        after = pool.score(rows(6))  # the same inputs: failures were not cached
        metrics = pool.metrics()
    assert all(r.should_mask and r.status["judge"] == Status.ERROR.value for r in during)
    assert all(r.components["judge"] == 0.0 for r in during)  # the pool's fallback
    assert all(r.components["format"] == 1.0 for r in during)  # the rules still scored
    causes = {r.errors["judge"].split(":")[0] for r in during}
    assert causes <= {"judge connect", "judge breaker_open"}, causes
    assert "judge breaker_open" in causes  # the fault happened: the breaker opened
    # every masked row names the failure behind it, the breaker's too
    assert all(f"cannot reach {server.url}/chat/completions" in r.errors["judge"] for r in during)
    # the first call after recovery is the probe; the others waited for it and were sent
    assert [r.components["judge"] for r in after] == judged(6)
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


@pytest.mark.multinode
def test_the_endpoint_limits_hold_for_the_whole_pool_across_processes_and_nodes(
    _ray_session: None,
) -> None:
    per_minute = 600.0  # 10 requests per second
    with two_node_cluster(head_cpus=2):
        # 3 in flight of 0.2 s allow 15 a second: the rate binds, with room for a loaded machine
        # (at 0.3 s both bound at exactly 10 a second, and any delay read as a slow limiter)
        with JudgeServer(reply=grader, latency_s=0.2) as server:
            config = pool_config(
                "t_judge_limits", server, max_in_flight=3, requests_per_minute=per_minute
            )
            config.update(num_workers=2, placement="spread")
            with RewardPool.from_config(config) as pool:
                other = score_elsewhere("t_judge_limits", 1000, 60)
                wait_for_calls(server, 1, timeout_s=300)  # the other process judges (slow start)
                here = [r.components["judge"] for r in pool.score(rows(60))]
                there = ray.get(other, timeout=300)
            arrivals = sorted(server.arrivals)
    assert here == there == judged(60)
    assert server.calls == 120
    assert server.peak <= 3  # in flight, counted at the server, never above the limit
    steady = arrivals[10:]  # past the limiter's first burst
    rate_per_minute = 60.0 * (len(steady) - 1) / (steady[-1] - steady[0])
    # the limit holds for both processes together (each alone would send up to its own limit);
    # load can only slow the calls below it, so the lower bound says only that none starves
    assert 0.5 * per_minute <= rate_per_minute <= 1.05 * per_minute, rate_per_minute


@pytest.mark.multinode
def test_tokens_per_minute_hold_for_the_whole_pool_across_processes_and_nodes(
    _ray_session: None, tmp_path: Path
) -> None:
    tokens_per_minute = 90_000.0  # CJK answers of about 320 tokens: about 4.5 calls a second
    tokenizer = load_tokenizer(save_tokenizer(tmp_path / "tokenizer"))
    with two_node_cluster(head_cpus=2):
        # the server counts with the model's tokenizer and serves /tokenize (as vLLM does);
        # the lane, on its node, asks it for each prompt's count
        with JudgeServer(reply=grader, latency_s=0.1, tokenizer=tokenizer) as server:
            config = pool_config(
                "t_judge_tokens",
                server,
                tokens_per_minute=tokens_per_minute,
                sampling={"max_tokens": 8},
            )
            config.update(num_workers=2, placement="spread")
            with RewardPool.from_config(config) as pool:
                other = score_elsewhere("t_judge_tokens", 1000, 25, script="cjk")
                wait_for_calls(server, 1, timeout_s=300)  # the other process judges (slow start)
                here = [r.components["judge"] for r in pool.score(rows(25, script="cjk"))]
                there = ray.get(other, timeout=300)
                (judge,) = pool.metrics()["judge"].values()
            rate = server.tokens_per_minute(skip=2)  # past the first calls (the allowed burst)
    assert here == there == judged(25)
    assert server.calls == 50 and judge["token_count"]["endpoint"] == 50
    assert server.tokenize_calls == 50  # counted by the model's tokenizer, at the server
    assert 0.5 * tokens_per_minute <= rate <= 1.05 * tokens_per_minute, rate  # as above


def test_rows_sent_after_an_outage_all_score_while_the_breaker_probes(
    ray_local: None, server: JudgeServer
) -> None:
    reset_s = 2.0
    config = pool_config(
        "t_judge_recovery", server, max_retries=1, breaker_failures=5, breaker_reset_s=reset_s
    )
    with RewardPool.from_config(config) as pool:
        server.down = True
        during = pool.score(rows(120))
        time.sleep(reset_s + 0.5)  # the outage outlasts the breaker's reset: a probe is due
        server.down = False
        server.latency_s = 0.2  # the probe is out a while: the rows below arrive meanwhile
        calls_before = server.calls
        after = pool.score(rows(120, start=1000))
        metrics = pool.metrics()
    # the fault happened: the outage masked every row, and the breaker opened
    assert all(r.should_mask for r in during)
    assert {r.errors["judge"].split(":")[0] for r in during} >= {"judge breaker_open"}
    (judge,) = metrics["judge"].values()
    assert judge["breaker"]["opens"] >= 1 and judge["breaker"]["state"] == "closed"
    # the first 120 rows after recovery all score: one probe, the others held until it answered
    assert [r.components["judge"] for r in after] == judged(120, 1000)
    assert not any(r.should_mask for r in after)
    probe, *held = server.arrivals[calls_before:]
    assert len(held) == 119 and min(held) - probe >= 0.15


def test_every_item_gets_one_result_when_the_judge_lane_is_killed_mid_judging(
    ray_local: None,
) -> None:
    with JudgeServer(reply=grader, latency_s=0.2) as server:
        with RewardPool.from_config(pool_config("t_judge_kill", server)) as pool:
            scoring, results = scoring_until_judged(pool, server)
            directory = ray.get_actor("t_judge_kill", namespace="skyrl_rewards")
            ((_, lane),) = ray.get(directory.lane_actors.remote(JUDGE_LANE))
            ray.kill(lane, no_restart=True)
            scoring.join(timeout=240)
            metrics = pool.metrics()
    assert not scoring.is_alive()
    assert len(results) == 200
    assert [r.components["judge"] for r in results] == judged(200)
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
                scoring, results = scoring_until_judged(pool, server)
                cluster.remove_node(next(n for n in nodes if n.node_id == lane_node))
                scoring.join(timeout=300)
                metrics = pool.metrics()
    assert not scoring.is_alive()
    assert [r.components["judge"] for r in results] == judged(200)
    assert not any(r.should_mask for r in results)
    assert metrics["retries"] > 0
