"""The synchronous transport of the eval's callers against a real chat endpoint on loopback.

:class:`JudgeServer` (``judge_server.py``) answers ``/v1/chat/completions``
and scripts the faults; every fault test counts what reached the server.
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from judge_server import JudgeServer
from loopback_server import Response

from skyrl_rewards.rewards.models.chat_client import message_problem
from skyrl_rewards.rewards.models.endpoint_config import EndpointConfig, caller_endpoint
from skyrl_rewards.rewards.models.sync_chat_client import SyncChatClient, post_sync, sync_client

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def endpoint(url: str, **overrides: float) -> EndpointConfig:
    """The eval's endpoint (``caller_endpoint``: no limits, no breaker), ``overrides`` replaced."""
    config = caller_endpoint(
        url, "m", api_key_env=None, timeout_s=5.0, max_retries=2, backoff_s=0.0
    )
    fields = {**config.__dict__, **overrides}
    return EndpointConfig(**fields)


def test_the_eval_endpoint_goes_sync_and_a_limited_one_to_the_async_client() -> None:
    assert isinstance(sync_client(endpoint("http://127.0.0.1:9/v1")), SyncChatClient)
    for limited in ({"max_in_flight": 4}, {"requests_per_minute": 60.0}, {"breaker_failures": 5}):
        assert sync_client(endpoint("http://127.0.0.1:9/v1", **limited)) is None


def test_threads_share_one_pool_of_kept_alive_connections() -> None:
    with JudgeServer(latency_s=0.05) as server:
        config = endpoint(server.url)
        with ThreadPoolExecutor(16) as pool:
            replies = list(pool.map(lambda _: post_sync(config, BODY, message_problem), range(64)))
        client = sync_client(config)
        assert client is not None
        metrics = client.metrics()
    assert all(r.ok and r.calls == 1 for r in replies)
    assert replies[0].data["choices"][0]["message"]["content"] == "1.0"
    assert server.calls == 64 and metrics["calls"] == 64 and metrics["ok"] == 64
    assert 1 <= metrics["idle_connections"] <= 16  # at most one per thread, kept for reuse


def test_a_429_holds_every_request_to_the_endpoint_for_its_retry_after() -> None:
    def plan(n: int, body: dict) -> Response | None:
        return Response(429, {"Retry-After": "1"}) if n == 1 else None

    with JudgeServer(plan=plan) as server:
        client = SyncChatClient(endpoint(server.url))
        replies: list = []
        first = threading.Thread(target=lambda: replies.append(client.post(BODY)))
        first.start()
        time.sleep(0.3)  # the 429 has come back: the endpoint is held
        second = client.post(BODY)
        first.join()
    assert server.throttled == 1 and server.calls == 3
    assert second.ok and replies[0].ok and replies[0].calls == 2
    refused_at = server.arrivals[0]
    assert all(arrival - refused_at >= 0.95 for arrival in server.arrivals[1:])


def test_a_retry_after_past_its_bound_ends_the_request_at_once() -> None:
    def plan(n: int, body: dict) -> Response | None:
        return Response(429, {"Retry-After": "30"})

    with JudgeServer(plan=plan) as server:
        reply = SyncChatClient(endpoint(server.url, max_retry_after_s=5.0)).post(BODY)
    assert server.calls == 1 and server.throttled == 1
    assert reply.failure == "rate_limited" and "past max_retry_after_s=5" in reply.message


def test_5xx_is_retried_then_named() -> None:
    with JudgeServer(plan=lambda n, body: Response(500)) as server:
        reply = SyncChatClient(endpoint(server.url)).post(BODY, message_problem)
    assert server.errors == 3 and reply.calls == 3
    assert reply.failure == "http_status" and "HTTP 500" in reply.message
    assert "after 2 retries" in reply.message


def test_a_slow_call_times_out_and_the_deadline_bounds_the_request() -> None:
    with JudgeServer(plan=lambda n, body: Response(delay_s=1.5)) as server:
        start = time.monotonic()
        reply = SyncChatClient(endpoint(server.url, timeout_s=0.3, deadline_s=0.8)).post(BODY)
        took = time.monotonic() - start
        assert server.calls >= 2  # the first call timed out and was retried
    assert reply.failure == "timeout" and took < 1.2 and "deadline_s=0.8" in reply.message


def test_an_unreachable_endpoint_is_a_connect_failure_naming_the_url() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    reply = SyncChatClient(endpoint(url, max_retries=1)).post(BODY)
    assert reply.failure == "connect" and reply.calls == 2
    assert f"cannot reach {url}/chat/completions" in reply.message


def test_a_kept_alive_connection_the_server_dropped_is_replaced() -> None:
    # the 2nd call arrives on the connection the 1st left open, and the server drops it
    def plan(n: int, body: dict) -> Response | None:
        return Response(drop=True) if n == 2 else None

    with JudgeServer(plan=plan) as server:
        client = SyncChatClient(endpoint(server.url, max_retries=0))
        assert client.post(BODY).ok
        reply = client.post(BODY)
    assert server.dropped == 1 and server.calls == 3
    assert reply.ok and reply.calls == 1


def test_an_outage_fails_after_its_retries() -> None:
    with JudgeServer() as server:
        server.down = True
        reply = SyncChatClient(endpoint(server.url, max_retries=1)).post(BODY)
    assert reply.failure == "connect" and reply.calls == 2 and server.dropped >= 2


@pytest.mark.parametrize("status", [400, 404])
def test_other_4xx_are_not_retried(status: int) -> None:
    with JudgeServer(plan=lambda n, body: Response(status)) as server:
        reply = SyncChatClient(endpoint(server.url)).post(BODY)
    assert server.calls == 1 and reply.failure == "http_status"
    assert f"HTTP {status}" in reply.message


def test_the_pause_holds_the_async_client_of_the_same_server_too() -> None:
    # the sync transport's 429 pauses the server for post_chat's client as well (one hold per server)
    def plan(n: int, body: dict) -> Response | None:
        return Response(429, {"Retry-After": "1"}) if n == 1 else None

    with JudgeServer(plan=plan) as server:
        replies: list = []
        first = threading.Thread(
            target=lambda: replies.append(SyncChatClient(endpoint(server.url)).post(BODY))
        )
        first.start()
        time.sleep(0.3)  # the 429 has come back
        limited = endpoint(server.url, max_in_flight=4)  # goes through post_chat
        assert sync_client(limited) is None
        second = post_sync(limited, BODY)
        first.join()
    assert server.throttled == 1 and second.ok and replies[0].ok
    assert all(arrival - server.arrivals[0] >= 0.95 for arrival in server.arrivals[1:])
