"""The service's JSON without Ray: rows from each protocol, answers from results, the bind rule, and
the verl function against replies it cannot read (a loopback HTTP server)."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from typing import Any

import pytest
from nemo_gym_requests import verify_request

from skyrl_rewards.rewards.contract.result import RewardResult
from skyrl_rewards.serve import verl_reward
from skyrl_rewards.serve.protocols import (
    openrlhf_response,
    openrlhf_rows,
    output_text,
    verify_response,
    verify_row,
)
from skyrl_rewards.serve.settings import ServeConfig, check_bind, is_loopback, read_token
from skyrl_rewards.serve.wire import BadRequest, parse_json, parse_rows, result_json

OK = RewardResult(1.5, {"accuracy": 1.0, "format": 1.0}, {}, {"accuracy": "ok", "format": "ok"})
TIMED_OUT = RewardResult(
    0.5,
    {"accuracy": 0.0, "format": 1.0},
    {"accuracy": "math-verify timed out after 2 s of CPU time"},
    {"accuracy": "timeout", "format": "ok"},
)


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"{bad", 400, "body: not JSON"),
        (b"\xff\xfe", 400, "body: not UTF-8"),
        (b"[]", 400, "body: expected a JSON object, got array"),
        (b"{}", 400, "body.rows: missing"),
        (b'{"rows": {}}', 400, "body.rows: expected array, got object"),
        (b'{"rows": [1]}', 400, "rows[0]: expected a JSON object, got number"),
        (b'{"rows": [{"solution": "2"}]}', 400, "rows[0].completion: missing"),
        (b'{"rows": [{"completion": 2}]}', 400, "rows[0].completion: expected string, got number"),
        (json.dumps({"rows": [{"completion": ""}] * 5}).encode(), 413, "5 rows in one request"),
    ],
)
def test_malformed_batches_name_the_field(body: bytes, status: int, says: str) -> None:
    with pytest.raises(BadRequest) as raised:
        parse_rows(parse_json(body), max_rows=4)
    assert raised.value.status == status
    assert says in str(raised.value)


def test_result_json_carries_mask_and_cause() -> None:
    assert result_json(OK) == {
        "value": 1.5,
        "components": {"accuracy": 1.0, "format": 1.0},
        "status": {"accuracy": "ok", "format": "ok"},
        "masked": False,
        "cause": None,
    }
    answered = result_json(TIMED_OUT)
    assert answered["masked"] is True
    assert answered["cause"] == "accuracy: timeout: math-verify timed out after 2 s of CPU time"


def test_openrlhf_rows_strip_the_prompt_and_read_labels() -> None:
    rows = openrlhf_rows(
        {
            "query": ["Q: 1+1?<answer>2</answer>", "other text"],
            "prompts": ["Q: 1+1?", "Q: 2+2?"],  # the second query does not start with its prompt
            "labels": ["2", {"solution": "4", "problem_type": "numeric"}],
        },
        max_rows=8,
    )
    assert rows == [
        {"solution": "2", "prompt": "Q: 1+1?", "completion": "<answer>2</answer>"},
        {
            "solution": "4",
            "problem_type": "numeric",
            "prompt": "Q: 2+2?",
            "completion": "other text",
        },
    ]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"prompts": [], "labels": []}, "body.query: missing"),
        ({"query": ["a"], "prompts": ["p", "q"], "labels": ["1"]}, "body.prompts: 2 entries for 1"),
        ({"query": ["a"], "prompts": ["p"]}, "body.labels: missing"),
        ({"query": [3], "prompts": ["p"], "labels": ["1"]}, "body.query[0]: expected string"),
        ({"query": ["a"], "prompts": ["p"], "labels": [3]}, "body.labels[0]: got number"),
        ({"query": ["a"], "prompts": ["p"], "labels": [None]}, "start OpenRLHF with --label_key"),
    ],
)
def test_openrlhf_malformed(body: dict, says: str) -> None:
    with pytest.raises(BadRequest) as raised:
        openrlhf_rows(body, max_rows=8)
    assert says in str(raised.value) and raised.value.status == 400


def test_openrlhf_response_has_its_three_keys_and_the_mask() -> None:
    answer = openrlhf_response([OK, TIMED_OUT])
    assert answer == {
        "rewards": [1.5, 0.5],
        "scores": [1.5, 0.5],
        "extra_logs": {"accuracy": [1.0, 0.0], "format": [1.0, 1.0], "masked": [0.0, 1.0]},
    }


NEMO_REQUEST = verify_request(
    ["<answer>4", "</answer>"], reasoning=True, solution="4", _ng_rollout_id="r-1"
)


def test_verify_row_and_answer() -> None:
    row = verify_row(NEMO_REQUEST)
    assert row == {"solution": "4", "completion": "<answer>4</answer>"}
    answer = verify_response(NEMO_REQUEST, TIMED_OUT)
    assert "_ng_rollout_id" not in answer  # NeMo-Gym's own response excludes it
    assert answer["response"] == NEMO_REQUEST["response"]  # the request is echoed
    assert answer["reward"] == 0.5 and answer["reward_components"] == TIMED_OUT.components
    assert answer["mask_sample"] is True
    assert answer["failure_kind"] == "verifier_error"
    assert "timed out" in answer["failure_reason"]
    clean = verify_response(NEMO_REQUEST, OK)
    assert (clean["mask_sample"], clean["failure_kind"], clean["failure_reason"]) == (
        False,
        None,
        None,
    )


def test_verify_malformed() -> None:
    with pytest.raises(BadRequest, match="body.response: missing"):
        verify_row({"responses_create_params": {}})
    with pytest.raises(BadRequest, match=r"body.response.output\[0\]: expected object"):
        output_text(["text"])


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.5", False),
        ("example.org", False),
    ],
)
def test_only_loopback_listens_without_a_token(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    if loopback:
        check_bind(ServeConfig(host=host))
    else:
        with pytest.raises(ValueError, match="no token is set"):
            check_bind(ServeConfig(host=host))
    check_bind(ServeConfig(host=host, token="t" * 24))  # a token: any host


def test_tokens_and_settings_are_checked(tmp_path, monkeypatch) -> None:
    with pytest.raises(ValueError, match="shorter than 16"):
        ServeConfig(token="short")
    with pytest.raises(ValueError, match="max_queued_rows"):
        ServeConfig(max_rows=100, max_queued_rows=10)
    assert "token" not in repr(ServeConfig(token="s" * 20))
    path = tmp_path / "token"
    path.write_text("  abc\n")
    assert read_token(path) == "abc"
    with pytest.raises(ValueError, match="cannot be read"):
        read_token(tmp_path / "absent")
    monkeypatch.setenv("SKYRL_REWARDS_SERVE_TOKEN", "from-env")
    assert read_token(None) == "from-env"
    monkeypatch.setenv(
        "SKYRL_REWARDS_SERVE_TOKEN", "from-env\n"
    )  # as `export X=$(cat f)` may leave
    assert read_token(None) == "from-env"
    monkeypatch.setenv("SKYRL_REWARDS_SERVE_TOKEN", " ")
    assert read_token(None) is None


def test_serve_command_refuses_an_open_host_without_a_token(capsys, monkeypatch) -> None:
    from skyrl_rewards.cli.main import main

    monkeypatch.delenv("SKYRL_REWARDS_SERVE_TOKEN", raising=False)
    assert main(["serve", "--config", "pool.yaml", "--host", "0.0.0.0"]) == 2  # the bundled one
    err = capsys.readouterr().err
    assert "0.0.0.0 is reachable from other machines and no token is set" in err


@pytest.mark.parametrize(
    ("status", "headers", "body", "cause"),
    [
        (200, {}, b"<html>a proxy's page</html>", "200 without a JSON results list"),
        (200, {}, b'{"scores": [1.0]}', "200 without a JSON results list"),
        (200, {}, b'{"results": {"0": 1.0}}', "no list of results for 1 rows"),
        (429, {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}, b"{}", "429"),
    ],
)
def test_the_verl_function_raises_on_a_reply_it_cannot_read_and_never_hangs(
    status: int, headers: dict[str, str], body: bytes, cause: str
) -> None:
    """Every caller of a batch gets an error, however the reply is broken (none waits forever);
    an HTTP-date ``Retry-After`` is waited as 1 s, within the call's deadline."""
    calls = []

    class Reply(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            calls.append(self.path)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Reply)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"

    async def one() -> Any:
        return await asyncio.wait_for(
            verl_reward.compute_score("math", "4", "4", url=url, timeout_s=1.5), timeout=30
        )

    try:
        with pytest.raises(verl_reward.RewardServiceError, match=cause):
            asyncio.run(one())
    finally:
        server.shutdown()
        server.server_close()
    assert calls and set(calls) == {"/v1/score"}  # the broken reply was really served
    if status == 429:
        assert len(calls) == 2  # waited 1 s once, then past the 1.5 s deadline: refused
