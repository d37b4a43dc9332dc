"""JudgeClient against a real chat endpoint on loopback: retries, limits, breaker, cache, metrics."""

from __future__ import annotations

import asyncio
import email.utils
import time
from typing import Any

import pytest
from judge_server import JudgeServer, Response, complete_all

from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE, ModelOutcome, ModelRequest
from skyrl_rewards.rewards.models.judge_client import EndpointConfig, JudgeClient


def config(server: JudgeServer, **fields: Any) -> EndpointConfig:
    base = {"base_url": server.url, "model": "judge", "backoff_base_s": 0.01, "timeout_s": 5.0}
    return EndpointConfig.from_mapping({**base, **fields})


def request(text: str = "q") -> ModelRequest:
    return ModelRequest(JUDGE_LANE, "e", {"messages": [{"role": "user", "content": text}]})


def test_reply_tokens_and_metrics() -> None:
    with JudgeServer(reply=lambda body: "0.0") as server:
        (outcome,), metrics = complete_all(
            config(server, price_in_per_1m=1.0, price_out_per_1m=2.0), [request()]
        )
    assert (
        outcome.ok and outcome.text == "0.0" and outcome.tokens_in > 0 and outcome.tokens_out == 1
    )
    body = server.bodies[0]
    assert body["model"] == "judge" and body["temperature"] == 0.0
    assert metrics["calls"] == 1 and metrics["ok"] == 1 and metrics["errors"] == {}
    assert metrics["tokens_in"] == outcome.tokens_in and metrics["latency_s"]["count"] == 1
    assert metrics["cost"] == pytest.approx((outcome.tokens_in * 1.0 + 1 * 2.0) / 1e6)
    assert metrics["breaker"] == {"state": "closed", "opens": 0, "cause": ""}


def test_api_key_comes_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    with JudgeServer() as server:
        monkeypatch.delenv("JUDGE_TEST_KEY", raising=False)
        with pytest.raises(ValueError, match="JUDGE_TEST_KEY is not set"):
            JudgeClient(config(server, api_key_env="JUDGE_TEST_KEY"))
        monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
        client = JudgeClient(config(server, api_key_env="JUDGE_TEST_KEY"))
        assert client._api_key == "sk-test"


@pytest.mark.parametrize(
    "retry_after",
    [
        "1",  # delta seconds
        "http-date",  # an HTTP date about 2 s ahead (whole seconds: at least 1 s from now)
    ],
)
def test_429_retry_honours_retry_after(retry_after: str) -> None:
    def plan(n: int, body: dict) -> Response | None:
        value = retry_after
        if value == "http-date":
            value = email.utils.formatdate(time.time() + 2, usegmt=True)
        return Response(429, {"Retry-After": value}) if n == 1 else None

    with JudgeServer(plan=plan) as server:
        (outcome,), metrics = complete_all(config(server), [request()])
    assert outcome.ok and server.calls == 2 and metrics["retries"] == 1
    assert server.arrivals[1] - server.arrivals[0] >= 0.95


def test_429_past_the_retry_budget_is_rate_limited() -> None:
    with JudgeServer(plan=lambda n, body: Response(429, {"Retry-After": "0"})) as server:
        (outcome,), metrics = complete_all(config(server, max_retries=2), [request()])
    assert outcome.failure == "rate_limited" and "HTTP 429" in outcome.message
    assert server.calls == 3 and metrics["errors"] == {"rate_limited": 1}


def test_retry_after_longer_than_allowed_ends_at_once() -> None:
    with JudgeServer(plan=lambda n, body: Response(429, {"Retry-After": "3600"})) as server:
        (outcome,), _ = complete_all(config(server, max_retry_after_s=5.0), [request()])
    assert outcome.failure == "rate_limited" and "past max_retry_after_s" in outcome.message
    assert server.calls == 1


def test_5xx_is_retried_and_4xx_is_not() -> None:
    with JudgeServer(plan=lambda n, body: Response(500) if n <= 2 else None) as server:
        (outcome,), _ = complete_all(config(server), [request()])
    assert outcome.ok and server.calls == 3
    with JudgeServer(plan=lambda n, body: Response(400)) as server:
        (outcome,), _ = complete_all(config(server), [request()])
    assert outcome.failure == "http_status" and "HTTP 400" in outcome.message and server.calls == 1


def test_timeout_after_retries() -> None:
    with JudgeServer(plan=lambda n, body: Response(delay_s=1.0)) as server:
        (outcome,), _ = complete_all(config(server, timeout_s=0.2, max_retries=1), [request()])
    assert outcome.failure == "timeout" and "timeout_s=0.2" in outcome.message and server.calls == 2


def test_deadline_bounds_a_request() -> None:
    with JudgeServer(plan=lambda n, body: Response(500)) as server:
        (outcome,), _ = complete_all(
            config(server, deadline_s=0.5, max_retries=50, backoff_base_s=0.2), [request()]
        )
    assert outcome.failure == "timeout" and "deadline_s=0.5" in outcome.message


def test_bad_response_is_not_retried() -> None:
    with JudgeServer(reply=lambda body: None) as server:  # type: ignore[arg-type,return-value]
        (outcome,), _ = complete_all(config(server), [request()])
    assert outcome.failure == "bad_response" and server.calls == 1


def test_breaker_opens_masks_at_once_probes_and_closes() -> None:
    async def go(server: JudgeServer) -> None:
        client = JudgeClient(config(server, breaker_failures=3, breaker_reset_s=0.5, max_retries=0))
        server.down = True
        for i in range(3):
            assert (await client.complete(request(f"a{i}"))).failure == "connect"
        assert client.metrics()["breaker"]["state"] == "open"
        start = time.monotonic()
        outcomes = await asyncio.gather(*(client.complete(request(f"b{i}")) for i in range(20)))
        assert {o.failure for o in outcomes} == {"breaker_open"}
        assert time.monotonic() - start < 1.0 and server.calls == 3  # masked at once, not called
        # a masked request names the failure that opened the breaker
        assert f"the last: cannot reach {server.url}/chat/completions" in outcomes[0].message
        await asyncio.sleep(0.6)
        # still down: the probe fails, and the requests that waited for it are masked with it
        probe, *held = await asyncio.gather(
            *(client.complete(request(f"probe-{i}")) for i in range(5))
        )
        assert probe.failure == "connect" and server.calls == 4
        assert {o.failure for o in held} == {"breaker_open"}
        assert (await client.complete(request("c"))).failure == "breaker_open"
        server.down = False
        await asyncio.sleep(0.6)
        # back up: one probe goes out, the nine that came while it was out wait and are sent
        outcomes = await asyncio.gather(*(client.complete(request(f"d{i}")) for i in range(10)))
        assert all(o.ok for o in outcomes) and server.calls == 14
        probe_arrival, *held_arrivals = server.arrivals[4:]
        assert min(held_arrivals) - probe_arrival >= 0.04  # sent once the probe had answered
        assert client.metrics()["breaker"]["state"] == "closed"
        assert client.metrics()["breaker"]["opens"] == 2
        await client.aclose()

    with JudgeServer(latency_s=0.05) as server:
        asyncio.run(go(server))


def test_requests_held_for_a_probe_wait_at_most_its_timeout() -> None:
    async def go(server: JudgeServer) -> None:
        cfg = config(server, breaker_failures=1, breaker_reset_s=0.2, max_retries=0, timeout_s=1.0)
        client = JudgeClient(cfg)
        server.down = True
        assert (await client.complete(request("a"))).failure == "connect"
        server.down = False
        server.latency_s = 3.0  # the probe outlasts its timeout_s
        await asyncio.sleep(0.3)
        start = time.monotonic()
        probe, *held = await asyncio.gather(*(client.complete(request(f"b{i}")) for i in range(4)))
        assert probe.failure == "timeout" and {o.failure for o in held} == {"breaker_open"}
        assert time.monotonic() - start < 2.5  # the wait was bounded by the probe's timeout_s
        assert server.calls == 2
        await client.aclose()

    with JudgeServer() as server:
        asyncio.run(go(server))


def test_in_flight_never_above_the_limit_at_the_server() -> None:
    with JudgeServer(latency_s=0.05) as server:
        outcomes, metrics = complete_all(
            config(server, max_in_flight=4), [request(str(i)) for i in range(40)]
        )
    assert all(o.ok for o in outcomes) and server.calls == 40
    assert server.peak == 4 and metrics["in_flight_peak"] == 4


def test_queue_timeout_gives_rate_limited() -> None:
    with JudgeServer(latency_s=0.5) as server:
        outcomes, _ = complete_all(
            config(server, max_in_flight=1, queue_timeout_s=0.1), [request("a"), request("b")]
        )
    assert [o.failure for o in outcomes] == ["", "rate_limited"]
    assert "max_in_flight" in outcomes[1].message and server.calls == 1


def test_requests_per_minute_within_5_percent() -> None:
    # 600/min is 10/s: 61 requests take 6 s at the server
    with JudgeServer() as server:
        outcomes, _ = complete_all(
            config(server, requests_per_minute=600), [request(str(i)) for i in range(61)]
        )
    assert all(o.ok for o in outcomes)
    span = server.arrivals[-1] - server.arrivals[0]
    rate_per_min = (len(server.arrivals) - 1) / span * 60
    assert rate_per_min == pytest.approx(600, rel=0.05)


def test_tokens_per_minute_paces_calls() -> None:
    # each request is estimated at about 100 + 16 tokens; 6960/min is 116 tokens per second
    with JudgeServer() as server:
        cfg = config(server, tokens_per_minute=6960, sampling={"max_tokens": 16})
        outcomes, _ = complete_all(cfg, [request("x" * 400 + str(i)) for i in range(4)])
    assert all(o.ok for o in outcomes)
    span = server.arrivals[-1] - server.arrivals[0]
    assert span >= 1.5  # at most one request's worth of burst; unpaced this takes milliseconds


def test_identical_requests_are_answered_once() -> None:
    with JudgeServer(latency_s=0.1) as server:
        outcomes, metrics = complete_all(config(server), [request("same")] * 5 + [request("other")])
    assert all(o.ok for o in outcomes) and server.calls == 2
    assert metrics["cache_hits"] == 4 and sum(o.cached for o in outcomes) == 4

    async def twice(server: JudgeServer) -> list[ModelOutcome]:
        client = JudgeClient(config(server))
        first = await client.complete(request("again"))
        second = await client.complete(request("again"))
        await client.aclose()
        return [first, second]

    with JudgeServer() as server:
        first, second = asyncio.run(twice(server))
    assert server.calls == 1 and not first.cached and second.cached and second.text == first.text


def test_failures_are_not_cached() -> None:
    with JudgeServer(plan=lambda n, body: Response(400) if n == 1 else None) as server:
        cfg = config(server)

        async def go() -> list[ModelOutcome]:
            client = JudgeClient(cfg)
            outcomes = [await client.complete(request("r")) for _ in range(2)]
            await client.aclose()
            return outcomes

        first, second = asyncio.run(go())
    assert first.failure == "http_status" and second.ok and server.calls == 2


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"model": ""}, "endpoint.model"),  # no model
        ({"base_url": "127.0.0.1:8000/v1"}, "http:// or https://"),  # no scheme
        ({"limits": {"max_in_flight": 0}}, "max_in_flight"),  # a limit must be positive
        ({"limits": {"rpm": 10}}, "endpoint.limits.rpm: unknown"),  # a misspelt setting
        ({"api_key_env": ""}, "api_key_env"),  # the variable's name, not empty
        ({"temperature": 0.0}, "unknown settings"),  # sampling goes under sampling
    ],
)
def test_bad_endpoint_settings_are_named(fields: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EndpointConfig.from_mapping({"base_url": "http://h/v1", "model": "m", **fields})


def test_breaker_can_be_off() -> None:
    with JudgeServer() as server:
        server.down = True
        cfg = config(server, breaker={"failures": None}, max_retries=0)
        outcomes, metrics = complete_all(cfg, [request(str(i)) for i in range(8)])
    assert {o.failure for o in outcomes} == {"connect"} and server.calls == 8
    assert metrics["breaker"] == {"state": "off", "opens": 0}
