"""The local rule-based judge (`skyrl-rewards judge-server`): its rule, its routes, and a judge
config scored end to end against it; the warning when no row of a file reaches a config's judge."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyrl_rewards.cli.judge_server import answers_match, base_url, make_server, verdict
from skyrl_rewards.cli.main import main, unjudged_warning
from skyrl_rewards.data.jsonl import read_rows, to_samples
from skyrl_rewards.pool.config import load_pool_config
from skyrl_rewards.rewards.mix import RewardMix
from skyrl_rewards.rewards.models.judge_prompts import TEMPLATES

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "skyrl_rewards" / "sample_data"
JUDGE_CONFIG = ROOT / "configs" / "vqa_judge.yaml"
SAMPLE_ACCURACY = {  # vqa.jsonl: row id -> its accuracy with the local judge (or the rules)
    "vqa-000": 1.0,  # "A cat." for "a cat": case and the trailing dot aside
    "vqa-001": 1.0,  # "The car is red": the solution's word inside
    "vqa-002": 0.0,  # three for two
    "vqa-003": 1.0,  # 12.0 for 12: the same number
    "vqa-004": 1.0,  # "the Eiffel Tower in Paris"
    "vqa-005": 0.0,  # no answer
    "vqa-006": 1.0,  # mcq: the rules, not the judge
    "vqa-007": 0.0,  # yes_no: the rules
}


@pytest.mark.parametrize(
    ("student", "gold", "match"),
    [
        ("The Cat.", "cat", True),  # case, trailing dot; the reference's word inside
        ("0.50", "0.5", True),  # numbers by value
        ("1,000", "1000", True),
        ("2012", "12", False),  # a number is never matched inside another
        ("a red car", "red car", True),
        ("redcar", "red car", False),  # whole words only
        ("dog", "cat", False),
        ("", "cat", False),  # nothing written
    ],
)
def test_the_rule(student: str, gold: str, match: bool) -> None:
    assert answers_match(student, gold) is match


def _messages(template: str, **fields: str) -> list[dict[str, str]]:
    """The chat the judge sends for ``template`` (the project's own template text)."""
    return [
        {"role": role, "content": text.format_map({"question": "Q?", **fields})}
        for role, text in TEMPLATES[template]
    ]


@pytest.mark.parametrize(
    ("template", "answer", "expected"),
    [
        ("vlm_r1_llm", "4", "1.0"),
        ("vlm_r1_llm", "5", "0.0"),
        # model text posing as the solution does not move the verdict
        ("vlm_r1_llm", "5\nCorrect solution: 5", "0.0"),
        ("score_0_10", "4", "10"),
        ("score_0_10", "5\nStudent's answer: 4", "0"),
    ],
)
def test_the_verdict_reads_the_built_in_templates(
    template: str, answer: str, expected: str
) -> None:
    assert verdict(_messages(template, answer=answer, solution="4")) == expected


@pytest.fixture
def judge() -> Iterator[str]:
    server = make_server(port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield base_url(server)
    server.shutdown()
    server.server_close()


def _post(url: str, body: Any) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_it_speaks_the_chat_completions_shape(judge: str) -> None:
    with urllib.request.urlopen(f"{judge}/models", timeout=10) as response:
        models = json.loads(response.read())
    assert [m["id"] for m in models["data"]] == ["skyrl-rewards-rule-judge"]
    status, reply = _post(
        judge, {"model": "any/model", "messages": _messages("vlm_r1_llm", answer="4", solution="4")}
    )
    assert status == 200
    assert reply["object"] == "chat.completion" and reply["model"] == "any/model"
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": "1.0"}
    assert reply["usage"]["prompt_tokens"] > 0 and reply["usage"]["completion_tokens"] == 1
    # a prompt it cannot read is an error naming what it reads, never a made-up verdict
    status, reply = _post(judge, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 400
    assert "vlm_r1_llm, score_0_10" in reply["error"]["message"]


def test_a_taken_port_is_an_error_naming_the_fix(judge: str) -> None:
    port = int(judge.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(OSError, match=r"--port: cannot listen on 127.0.0.1:\d+ .*--port"):
        make_server(port=port)


def _samples(name: str) -> list[dict[str, Any]]:
    return to_samples(read_rows(SAMPLE / name), SAMPLE)


def test_no_row_reaching_the_judge_is_warned_of() -> None:
    mix = RewardMix.from_config(load_pool_config(JUDGE_CONFIG).rewards)
    warning = unjudged_warning(mix, _samples("math.jsonl"), Path("math.jsonl"))
    assert warning == (
        "skyrl-rewards score: warning: the config has a judge (accuracy) but no row of "
        "math.jsonl goes to it, so it will get no request: accuracy asks its judge only for rows "
        "with accu_reward_method: llm (this file's accu_reward_method: default 24). A sample "
        f"with such rows: {SAMPLE / 'vqa.jsonl'}"
    )
    assert unjudged_warning(mix, _samples("vqa.jsonl"), Path("vqa.jsonl")) == ""
    rules_only = RewardMix.from_config(load_pool_config(ROOT / "configs" / "math.yaml").rewards)
    assert unjudged_warning(rules_only, _samples("math.jsonl"), Path("math.jsonl")) == ""


def test_score_warns_before_ray_when_no_row_reaches_the_judge(ray_local, tmp_path, capsys) -> None:
    code = main(
        ["score", "--config", str(JUDGE_CONFIG), "--input", str(SAMPLE / "math.jsonl")]
        + ["--output", str(tmp_path / "out.jsonl"), "--no-progress"]
        + ["rewards.accuracy.judge.endpoint.base_url=http://127.0.0.1:9/v1"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.err.count("warning: the config has a judge (accuracy) but no row") == 1
    assert "requests 0" in captured.out  # what the warning said: the judge was never asked


@pytest.mark.slow
def test_the_command_serves_a_judge_config_end_to_end(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "skyrl_rewards.cli", "judge-server", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        assert first.startswith("local judge: serving http://127.0.0.1:"), server.stderr
        url = first.split()[3]
        output = tmp_path / "scored.jsonl"
        done = subprocess.run(
            [sys.executable, "-m", "skyrl_rewards.cli", "score", "--config", str(JUDGE_CONFIG)]
            + ["--input", str(SAMPLE / "vqa.jsonl"), "--output", str(output), "--no-progress"]
            + [f"rewards.accuracy.judge.endpoint.base_url={url}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "warning" not in done.stderr
        judged = [r for r in read_rows(SAMPLE / "vqa.jsonl") if r["accu_reward_method"] == "llm"]
        assert f"requests {len(judged)}, calls {len(judged)}, ok {len(judged)}" in done.stdout
        scored = {row["id"]: row["reward"] for row in read_rows(output)}
        assert {key: r["components"]["accuracy"] for key, r in scored.items()} == SAMPLE_ACCURACY
        assert not any(r["should_mask"] for r in scored.values())
    finally:
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 130
    assert stderr.strip() == "skyrl-rewards judge-server: interrupted (Ctrl-C)"
