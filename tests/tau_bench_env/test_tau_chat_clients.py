"""The eval's agent and user simulator on the judge's chat client, against a loopback endpoint.

The server answers each call by a plan (429 with ``Retry-After``, 500, or a
reply) and records when each call arrived, so retries are counted where they land.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from skyrl_rewards.cli.judge_server import send_json
from tau_bench_env.episode.env import TauBenchEnv
from tau_bench_env.evaluation.policy import ChatPolicy, PolicyConfig, PolicyEndpointError

Plan = Callable[[int], tuple[int, dict[str, str]]]
"""Call number (1-based) -> (status, headers); a 200 answers with ``reply``."""


class PlannedServer:
    """A chat-completions endpoint on 127.0.0.1 whose answers follow ``plan``."""

    def __init__(self, plan: Plan, reply: str = "Hello.") -> None:
        self.arrivals: list[float] = []
        self.bodies: list[dict[str, Any]] = []
        lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    owner.arrivals.append(time.monotonic())
                    owner.bodies.append(body)
                    number = len(owner.arrivals)
                status, headers = plan(number)
                message = {"role": "assistant", "content": reply}
                payload = {"choices": [{"message": message}]} if status == 200 else {"error": "x"}
                send_json(self, status, payload, headers)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> PlannedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()


@pytest.fixture
def retry_after_once() -> Iterator[PlannedServer]:
    with PlannedServer(lambda n: (429, {"Retry-After": "1"}) if n == 1 else (200, {})) as server:
        yield server


def test_agent_429_is_retried_after_its_retry_after(retry_after_once: PlannedServer) -> None:
    # backoff_s=0: without the header the retry would follow at once
    policy = ChatPolicy(PolicyConfig(base_url=retry_after_once.url, max_retries=2, backoff_s=0))
    turn = policy.act([{"role": "user", "content": "hi"}], [], 1)
    assert turn.text == "Hello."
    first, second = retry_after_once.arrivals
    assert len(retry_after_once.arrivals) == 2 and second - first >= 0.95


def test_agent_429_past_its_retries_names_the_cause() -> None:
    with PlannedServer(lambda n: (429, {"Retry-After": "0"})) as server:
        policy = ChatPolicy(PolicyConfig(base_url=server.url, max_retries=1, backoff_s=0))
        with pytest.raises(PolicyEndpointError, match="rate_limited after 2 attempts: HTTP 429"):
            policy.act([{"role": "user", "content": "hi"}], [], 1)
    assert len(server.arrivals) == 2


def test_agent_replies_are_not_cached() -> None:
    # sampling may differ between identical requests: each one is sent
    with PlannedServer(lambda n: (200, {})) as server:
        policy = ChatPolicy(PolicyConfig(base_url=server.url))
        for _ in range(2):
            policy.act([{"role": "user", "content": "same"}], [], 1)
    assert len(server.arrivals) == 2 and server.bodies[0] == server.bodies[1]


def test_user_failing_after_its_retries_ends_the_episode_masked() -> None:
    # the user's first message is answered; every later call is a 503, retried once
    with PlannedServer(lambda n: (200, {}) if n == 1 else (503, {"Retry-After": "0"})) as server:
        config = {
            "backend": "tau2",
            "domain": "retail",
            "user": {"kind": "openai", "base_url": server.url, "model": "m", "max_retries": 1},
        }
        env = TauBenchEnv(config, {"split": "test", "task_index": 0})
        env.init([])
        out = env.step("Sure, what is your order id?")
    assert out["done"] and out["reward"] == 0.0 and out["metadata"]["should_mask"] is True
    failure = out["metadata"]["failure"]
    assert failure.startswith("UserSimulatorError") and "http_status after 2 attempts" in failure
    assert "HTTP 503" in failure and len(server.arrivals) == 3
    assert env.get_metrics()["should_mask"] == 1.0


def test_agent_failures_do_not_open_a_breaker_on_other_episodes() -> None:
    # more consecutive 5xx than the judge's breaker allows (5): the next request is still sent
    with PlannedServer(lambda n: (500, {}) if n <= 6 else (200, {})) as server:
        policy = ChatPolicy(PolicyConfig(base_url=server.url, max_retries=0))
        for _ in range(6):
            with pytest.raises(PolicyEndpointError, match="http_status after 1 attempts: HTTP 500"):
                policy.act([{"role": "user", "content": "hi"}], [], 1)
        assert policy.act([{"role": "user", "content": "hi"}], [], 1).text == "Hello."
    assert len(server.arrivals) == 7
