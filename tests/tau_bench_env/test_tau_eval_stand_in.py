"""``tau-bench-env eval --stand-in``: a run end to end without model servers (issue 43), and no
empty pass^k figure when nothing was judged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tau_bench_env.backends import load_domain
from tau_bench_env.cli.main import main
from tau_bench_env.cli.stand_in import MODEL, StandInAgent, opening_turn
from tau_bench_env.evaluation.evaluate import PLOT_FILE, SUMMARY_FILE


def test_a_stand_in_run_pays_every_episode_and_says_what_played(tmp_path: Path, capsys) -> None:
    out = tmp_path / "try"
    args = ["eval", "--domain", "retail", "--tasks", "0-4", "--trials", "2", "--stand-in"]
    assert main([*args, "--out", str(out), "--no-progress"]) == 0
    text, err = capsys.readouterr()
    announced = err.strip().splitlines()[0]
    assert announced.startswith("tau-bench-env eval: stand-in agent and user (no model): ")
    assert "measures nothing" in announced
    assert f"(model {MODEL})  user: replay (recorded turns)" in text
    summary = json.loads((out / SUMMARY_FILE).read_text())
    assert summary["episodes"] == 10 and summary["errors"] == 0
    assert summary["success_rate"] == 1.0 and summary["pass_hat_k"] == {"1": 1.0, "2": 1.0}
    assert f"pass^k figure: {out / PLOT_FILE}" in text
    assert (out / PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_stand_in_agent_replays_the_tasks_actions_then_closes() -> None:
    task = load_domain("tau2", "retail").tasks("test")[0]
    agent = StandInAgent([task])
    messages = [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": opening_turn(task)},
    ]
    calls = []
    for _ in range(len(task.actions) + 1):
        reply = agent.reply(messages)
        messages.append(reply)
        if not reply.get("tool_calls"):
            break
        function = reply["tool_calls"][0]["function"]
        calls.append((function["name"], json.loads(function["arguments"])))
        messages.append({"role": "tool", "content": "ok", "tool_call_id": "x"})
    expected = [(a.name, dict(a.kwargs)) for a in task.actions if a.name != "respond"]
    assert calls == expected
    assert reply["content"].startswith("Done")
    assert all(output in reply["content"] for output in task.outputs)
    with pytest.raises(ValueError, match="stand-in user"):
        agent.reply([{"role": "user", "content": "hello"}])


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            [],
            "--agent-base-url and --agent-model name the policy's endpoint; without model "
            "servers, try --stand-in",
        ),
        (
            ["--stand-in", "--agent-model", "m"],
            "--stand-in plays the agent and the user itself: drop --agent-model",
        ),
    ],
)
def test_the_agent_is_named_or_stood_in(
    extra: list[str], said: str, tmp_path: Path, capsys
) -> None:
    args = ["eval", "--domain", "retail", "--tasks", "0", "--out", str(tmp_path / "o"), *extra]
    assert main(args) == 2
    assert said in capsys.readouterr().err


def test_no_figure_when_nothing_was_judged(tmp_path: Path, capsys) -> None:
    down = "http://127.0.0.1:9/v1"  # nothing listens on port 9 of loopback
    config = tmp_path / "env.yaml"
    config.write_text(json.dumps({"user": {"kind": "replay"}}))
    out = tmp_path / "run"
    args = ["eval", "--config", str(config), "--domain", "retail", "--tasks", "0-1"]
    args += ["--out", str(out), "--no-progress", "--agent-base-url", down, "--agent-model", "m"]
    assert main([*args, "--max-retries", "0"]) == 1
    text = capsys.readouterr().out
    assert "pass^k figure: none (no task had every trial judged)" in text
    assert not (out / PLOT_FILE).exists()
