"""A 429 storm costs few requests: a ``Retry-After`` holds every request to the endpoint.

Every call in the storm's first 1.5 s is answered 429 with ``Retry-After:
2``; the judge client and the served reward model send 200 items at once (the
shipped limits: 64 in flight, adaptive). Counted at the server: at most 1.3
requests per item, and no request arrives while an earlier 429's
``Retry-After`` runs (past the 50 ms a call already on its way may take).
Before the hold was endpoint-wide the same storm cost 1.5 to 1.9 requests per
item, nearly all of them inside a running ``Retry-After``.
"""

from __future__ import annotations

import asyncio

from judge_server import JudgeServer, complete_all
from loopback_server import Response, Storm
from reward_model_server import RewardModelServer

from skyrl_rewards.rewards.batch import make_reward
from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE, ModelRequest
from skyrl_rewards.rewards.models.chat_client import ChatClient
from skyrl_rewards.rewards.models.endpoint_hold import Hold, endpoint_hold
from skyrl_rewards.rewards.models.judge_client import EndpointConfig

ITEMS = 200
MAX_REQUESTS_PER_ITEM = 1.3


def test_a_judge_storm_costs_at_most_1_3_requests_per_item() -> None:
    storm = Storm(storm_s=1.5, retry_after_s=2)
    with JudgeServer(plan=storm) as server:
        config = EndpointConfig.from_mapping({"base_url": server.url, "model": "judge"})
        requests = [
            ModelRequest(JUDGE_LANE, "e", {"messages": [{"role": "user", "content": f"q{i}"}]})
            for i in range(ITEMS)
        ]
        outcomes, metrics = complete_all(config, requests)
    served = [(s.arrival, s.status) for s in server.served]
    assert server.throttled >= 1  # the storm happened
    assert all(o.ok for o in outcomes)
    assert server.calls <= MAX_REQUESTS_PER_ITEM * ITEMS, server.calls
    assert storm.early_calls(served) == 0
    assert metrics["retry_after"]["pauses"] >= 1


def test_a_served_reward_model_storm_costs_at_most_1_3_requests_per_item() -> None:
    storm = Storm(storm_s=1.5, retry_after_s=2)
    with RewardModelServer(plan=storm) as server:
        reward = make_reward(
            "reward_model", base_url=server.base_url, model="rm-storm", batch_size=1
        )
        values = reward([f"answer {i}" for i in range(ITEMS)], prompts=["q"] * ITEMS)
    assert server.throttled >= 1
    assert None not in values
    assert server.requests <= MAX_REQUESTS_PER_ITEM * ITEMS, server.requests
    assert storm.early_calls(server.served) == 0


def test_the_pause_holds_every_client_of_the_server() -> None:
    # a judge's 429 pauses the reward model of the same server too (one endpoint block serves both)
    with JudgeServer() as server:
        judge = EndpointConfig.from_mapping({"base_url": server.url, "model": "judge"})
        other = EndpointConfig.from_mapping({"base_url": server.url, "model": "other"})
        hold = endpoint_hold(server.url.removesuffix("/v1") + "/")

        async def go() -> float:
            client = ChatClient(other)
            try:
                endpoint_hold(judge.base_url).extend(0.5)  # what a 429 with Retry-After does
                started = asyncio.get_running_loop().time()
                reply = await client.post({"model": "other", "messages": []})
                assert reply.ok
                return asyncio.get_running_loop().time() - started
            finally:
                await client.aclose()

        waited = asyncio.run(go())
    assert hold is endpoint_hold(server.url)  # one hold per server root
    assert waited >= 0.45 and server.calls == 1


def test_a_pause_past_max_retry_after_masks_later_requests_uncalled() -> None:
    # the server asks for an hour: the request that got it ends at once, and so do the next ones,
    # without a call (the pause is the server's, not that request's)
    with JudgeServer(plan=lambda n, body: Response(429, {"Retry-After": "3600"})) as server:
        config = EndpointConfig.from_mapping(
            {"base_url": server.url, "model": "judge", "retries": {"max_retry_after_s": 5}}
        )
        chat = {"messages": [{"role": "user", "content": "q"}]}
        (first,), _ = complete_all(config, [ModelRequest(JUDGE_LANE, "e", chat)])
        (later,), _ = complete_all(config, [ModelRequest(JUDGE_LANE, "e2", chat)])
        calls = server.calls
    assert first.failure == "rate_limited" and "past max_retry_after_s" in first.message
    assert later.failure == "rate_limited" and "not called" in later.message
    assert calls == 1


def test_a_hold_wait_is_bounded() -> None:
    hold = Hold()
    hold.extend(10.0)

    async def go() -> tuple[bool, float]:
        started = asyncio.get_running_loop().time()
        passed = await hold.wait(0.5)
        return passed, asyncio.get_running_loop().time() - started

    passed, waited = asyncio.run(go())
    assert not passed and waited < 0.1  # told at once: the pause ends past the bound
    hold.extend(1.0)  # a shorter pause never shortens a longer one
    assert hold.remaining() > 9.0 and hold.pauses == 1
