"""User simulators: replay, and an OpenAI-compatible endpoint served locally."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from tau_helpers import tool_text

from skyrl_rewards.cli.judge_server import send_json
from tau_bench_env.episode.env import EpisodeEndedError, TauBenchEnv
from tau_bench_env.users.simulators import STOP, OpenAIUser, ReplayUser, UserSimulatorError


@pytest.mark.parametrize(
    ("turns", "agent_messages", "expected"),
    [
        (["a"], ["x"], ["a", STOP]),  # one turn, then stop
        (["a", "b", "c"], ["x", "y"], ["a", "b", "c"]),  # played in order
        (["a", "b"], ["x", "y", "z"], ["a", "b", STOP, STOP]),  # stops for good
    ],
)
def test_replay_user(turns: list[str], agent_messages: list[str], expected: list[str]) -> None:
    user = ReplayUser(turns)
    assert [user.reset("ignored"), *(user.step(m) for m in agent_messages)] == expected


@pytest.mark.parametrize("turns", [[], [1], "abc"])
def test_replay_user_rejects_bad_turns(turns: Any) -> None:
    with pytest.raises(ValueError, match="user_turns"):
        ReplayUser(turns)


class _Server:
    """A tiny chat-completions endpoint: scripted statuses and replies, requests recorded."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self.replies: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(
                    {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                )
                status = server.statuses.pop(0) if server.statuses else 200
                payload = (
                    {
                        "choices": [
                            {"message": {"role": "assistant", "content": server.replies.pop(0)}}
                        ]
                    }
                    if status == 200
                    else {"error": "x"}
                )
                send_json(self, status, payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    yield srv
    srv.close()


def test_openai_user_conversation(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_USER_KEY", "secret")
    server.replies = ["I want to cancel.", STOP]
    user = OpenAIUser(base_url=server.url + "/", model="user-model", api_key_env="TEST_USER_KEY")
    assert user.reset("You are Ann. Cancel order #W1.") == "I want to cancel."
    assert user.step("Which order?") == STOP
    first, second = server.requests
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer secret"
    assert first["body"]["model"] == "user-model" and first["body"]["temperature"] == 0.0
    system, greeting = first["body"]["messages"]
    assert (
        system["role"] == "system"
        and "Cancel order #W1." in system["content"]
        and STOP in system["content"]
    )
    assert greeting == {"role": "user", "content": "Hi! How can I help you today?"}
    assert [m["role"] for m in second["body"]["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
    ]


def test_openai_user_without_key_sends_no_auth(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    server.replies = ["hi"]
    OpenAIUser(base_url=server.url, model="m", api_key_env="NO_SUCH_KEY_VAR").reset("x")
    assert server.requests[0]["auth"] is None


@pytest.mark.parametrize(
    ("statuses", "retries", "ok", "attempts"),
    [
        ([500, 429], 2, True, 3),  # retried server errors, then answered
        ([503, 503], 1, False, 2),  # gave up after the retries
        ([400], 3, False, 1),  # client errors are not retried
    ],
)
def test_openai_user_retries(
    server: _Server, statuses: list[int], retries: int, ok: bool, attempts: int
) -> None:
    server.statuses = list(statuses)
    server.replies = ["hello"]
    user = OpenAIUser(base_url=server.url, model="m", max_retries=retries, backoff_s=0.0)
    if ok:
        assert user.reset("x") == "hello"
    else:
        with pytest.raises(UserSimulatorError, match="HTTP"):
            user.reset("x")
    assert len(server.requests) == attempts


def test_openai_user_unreachable() -> None:
    user = OpenAIUser(base_url="http://127.0.0.1:9/v1", model="m", max_retries=0, timeout_s=2.0)
    with pytest.raises(UserSimulatorError, match="cannot reach"):
        user.reset("x")


def test_env_with_openai_user(server: _Server) -> None:
    server.replies = ["Please transfer me to a human.", STOP]
    config = {
        "backend": "tau2",
        "domain": "retail",
        "user": {"kind": "openai", "base_url": server.url, "model": "m"},
    }
    env = TauBenchEnv(config, {"split": "test", "task_index": 0})
    messages, _ = env.init([])
    assert messages[1]["content"] == "Please transfer me to a human."
    out = env.step("Let me check something first.")
    assert out["done"] and out["reward"] == 0.0
    assert "Reason for call" in server.requests[0]["body"]["messages"][0]["content"]
    env2 = TauBenchEnv(config, {"split": "test", "task_index": 0})
    server.replies = ["hi"]
    env2.init([])
    out = env2.step(tool_text("transfer_to_human_agents", {"summary": "x"}))
    assert out["done"] and len(server.requests) == 3  # the tool call did not reach the user


def _openai_env(url: str) -> TauBenchEnv:
    config = {
        "backend": "tau2",
        "domain": "retail",
        "user": {"kind": "openai", "base_url": url, "model": "m", "max_retries": 0},
    }
    return TauBenchEnv(config, {"split": "test", "task_index": 0})


def test_unreachable_user_ends_the_episode_masked_without_raising() -> None:
    env = _openai_env("http://127.0.0.1:9/v1")  # nothing listens on the discard port
    messages, info = env.init([])
    assert [m["role"] for m in messages] == ["system", "user"]
    assert info["failure"].startswith("UserSimulatorError")
    out = env.step("Hello, how can I help?")
    assert out["done"] and out["reward"] == 0.0 and out["observations"] == []
    assert out["metadata"]["should_mask"] is True
    assert "cannot reach" in out["metadata"]["failure"]
    assert env.get_metrics()["should_mask"] == 1.0
    with pytest.raises(EpisodeEndedError):
        env.step("again")


def test_user_failing_mid_episode_ends_it_masked(server: _Server) -> None:
    server.replies = ["I want to return an item."]
    server.statuses = [200, 500]  # the second request (the agent's first reply) fails
    env = _openai_env(server.url)
    env.init([])
    out = env.step("Sure, what is your order id?")
    assert out["done"] and out["reward"] == 0.0
    assert out["metadata"]["should_mask"] is True
    assert out["metadata"]["failure"].startswith("UserSimulatorError")
    assert env.get_metrics()["should_mask"] == 1.0


def test_healthy_episode_is_not_masked(server: _Server) -> None:
    server.replies = ["Please transfer me to a human.", STOP]
    env = _openai_env(server.url)
    env.init([])
    out = env.step("Let me check.")
    assert out["done"] and out["metadata"]["should_mask"] is False
    assert env.get_metrics()["should_mask"] == 0.0
