"""``skyrl-rewards score`` with the bundled judge config, against a loopback chat endpoint."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from judge_server import JudgeServer

from skyrl_rewards.cli.main import main

pytestmark = pytest.mark.slow


def grader(body: dict) -> str:
    """1.0 when the student's response (VLM-R1's llm prompt) says 'cat', else 0.0."""
    text = body["messages"][-1]["content"]
    return "1.0" if re.search(r"Student's response: .*cat", text) else "0.0"


def test_score_with_a_judge_prints_its_calls_and_masks_an_outage(
    ray_local: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        {
            "problem": "What animal?",
            "solution": "<answer>a cat</answer>",
            "accu_reward_method": "llm",
            "completion": "<think>t</think><answer>the cat</answer>",
        },
        {
            "problem": "What animal?",
            "solution": "<answer>a cat</answer>",
            "accu_reward_method": "llm",
            "completion": "<think>t</think><answer>a dog</answer>",
        },
        {"solution": "<answer>4</answer>", "completion": "<think>t</think><answer>4</answer>"},
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with JudgeServer(reply=grader) as server:
        overrides = [
            f"rewards.accuracy.judge.endpoint.base_url={server.url}",
            "rewards.accuracy.judge.endpoint.model=judge",
            "num_workers=1",
        ]
        args = ["score", "--config", "configs/vqa_judge.yaml", "--input", str(data)]
        code = main([*args, "--output", str(tmp_path / "ok.jsonl"), "--no-progress", *overrides])
        ok = capsys.readouterr().out
        server.down = True
        down = main(
            [
                *args,
                "--output",
                str(tmp_path / "down.jsonl"),
                "--no-progress",
                *overrides,
                "name=t_cli_judge_down",
                "rewards.accuracy.judge.endpoint.retries.max_retries=0",
                # one at a time, and the first failure opens the breaker: the second row is
                # masked breaker_open without a call
                "rewards.accuracy.judge.endpoint.limits.max_in_flight=1",
                "rewards.accuracy.judge.endpoint.breaker.failures=1",
            ]
        )
        down_out, down_err = capsys.readouterr()
    assert code == 0
    scored = [
        json.loads(line)["reward"] for line in (tmp_path / "ok.jsonl").read_text().splitlines()
    ]
    assert [r["components"]["accuracy"] for r in scored] == [1.0, 0.0, 1.0]
    assert re.search(rf"judge judge@{re.escape(server.url)}: requests 2, calls 2, ok 2", ok), ok
    assert down == 1  # masked rows: the scores are written, the exit code says so
    failed = [
        json.loads(line)["reward"] for line in (tmp_path / "down.jsonl").read_text().splitlines()
    ]
    assert [r["should_mask"] for r in failed] == [True, True, False]
    assert "errors breaker_open 1, connect 1" in down_out, down_out  # the fault happened
    # each masked row carries the failure, the breaker's row the one that opened it
    assert sorted(r["errors"]["accuracy"].split(":")[0] for r in failed[:2]) == [
        "judge breaker_open",
        "judge connect",
    ]
    assert all(
        f"cannot reach {server.url}/chat/completions" in r["errors"]["accuracy"] for r in failed[:2]
    )
    # the summary says it once, at its top (right above the table), with what to check
    lines = down_out.splitlines()
    at = next(i for i, line in enumerate(lines) if "was unreachable" in line)
    assert lines[at + 2].startswith("component"), lines
    expected = f"judge endpoint {server.url} (model judge) was unreachable: 2 of 2 requests failed"
    assert lines[at].startswith(expected), lines[at]
    assert f"cannot reach {server.url}/chat/completions" in lines[at] and "curl" in lines[at]
    assert down_out.count("was unreachable") == 1 and "was unreachable" not in ok
    # issue 43: no reply, no latency; each masked row's line cut; the advice names the endpoint
    assert "latency n/a (no reply)" in down_out and "latency n/a" not in ok
    masked = [line for line in lines if line.startswith("  line ")]
    assert len(masked) == 2 and all(len(line) < 220 for line in masked), masked
    advice = down_err.strip().splitlines()[-1]
    assert advice.endswith(
        "the judge endpoint was unreachable (above): start the judge server or fix the "
        "config's endpoint.base_url, then rerun, or pass --allow-errors to accept them"
    ), advice
