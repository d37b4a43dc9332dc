"""The user-simulator review (tau2-bench PR #392): a real loopback judge gives scripted verdicts.

``rescore --review-user`` on recorded files, ``eval --review-user`` on a
scripted run, the env's ``review_user`` option masking episodes, and every
judge failure (5xx, outage, unreadable reply) masked and counted as *review
failed*, each fault proven by what the server counted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tau_eval_helpers import MISTAKES, AgentServer, user_turns
from tau_helpers import SAMPLES, action_texts, closing_reply, judge_config, run_episode

from tau_bench_env.backends import load_domain
from tau_bench_env.cli.main import main
from tau_bench_env.config import env_config_from
from tau_bench_env.episode.env import TauBenchEnv
from tau_bench_env.episode.user_review import (
    CATEGORIES,
    SYSTEM_PROMPT,
    ReviewCase,
    UserReview,
    parse_verdict,
    review_line,
    review_many,
    summarize_reviews,
)
from tau_bench_env.evaluation.evaluate import RESULTS_FILE, SUMMARY_FILE

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from judge_server import JudgeServer, Response  # noqa: E402

TAU2_RETAIL = SAMPLES / "tau2_retail_results.json"
AIRLINE = SAMPLES / "airline_results.json"
TASK_38 = "split the payment"
"""Words of task 38's instructions in ``tau2_retail_results.json`` (task 76's lack them)."""


def _verdict(at_fault: bool, category: str = "none", reason: str = "scripted") -> str:
    return json.dumps({"at_fault": at_fault, "category": category, "reason": reason})


def _user_message(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def _rescore_json(url: str, path: Path, capsys: Any, *more: str) -> dict[str, Any]:
    args = ["rescore", str(path), "--review-user", "--judge-base-url", url, "--judge-model", "j"]
    assert main([*args, *more, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"at_fault": true, "category": "wrong_data", "reason": "r"}', ("wrong_data", True)),
        (
            'Verdict:\n```json\n{"at_fault": true, "category": "Ended early", "reason": "r"}\n```',
            ("ended_early", True),
        ),  # fmt: skip
        (
            'Here: {"at_fault": false, "category": null, "reason": "agent erred"} done',
            ("none", False),
        ),  # fmt: skip
    ],
)
def test_a_verdict_is_read_from_json_fenced_or_in_prose(reply: str, expected: tuple) -> None:
    review = parse_verdict(reply)
    assert (review.category, review.at_fault) == expected and review.failure == ""


@pytest.mark.parametrize(
    "reply",
    [
        "The user ended early.",  # no JSON
        '{"at_fault": "yes", "category": "ended_early", "reason": "r"}',  # not a boolean
        '{"at_fault": true, "category": "rude", "reason": "r"}',  # not a category
        '{"at_fault": true, "category": "ended_early"}',  # no reason
        "[true]",  # not an object
        "```" * 50_000,  # fences without a verdict, past the cut
        '{"a": ' * 50_000 + "1" + "}" * 50_000,  # nested past the parser's recursion limit
    ],
)
def test_an_unreadable_verdict_is_refused(reply: str) -> None:
    with pytest.raises(ValueError, match="judge's"):
        parse_verdict(reply)


def test_rescore_reviews_every_failed_run_of_a_recorded_tau2_file(capsys) -> None:
    def reply(body: dict[str, Any]) -> str:
        if TASK_38 in _user_message(body):
            return _verdict(True, "ended_early", "The user said ###STOP### after confirming.")
        return _verdict(False, reason="The agent modified the wrong item.")

    with JudgeServer(reply=reply) as server:
        summary = _rescore_json(server.url, TAU2_RETAIL, capsys)
        assert server.calls == 4  # the file's 4 failed runs, not its 2 successes
        body = server.bodies[0]
        assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
        assert "\n\nThe conversation:\n" in _user_message(body)
        args = ["rescore", str(TAU2_RETAIL), "--review-user"]
        assert main([*args, "--judge-base-url", server.url, "--judge-model", "j"]) == 0
    review = summary["user_review"]
    assert summary["scored"] == 6 and summary["success_rate"] == pytest.approx(2 / 6)
    assert review["failed_runs"] == 4 and review["reviewed"] == 4 and review["review_failed"] == 0
    assert review["at_fault"] == 2 and review["share"] == 0.5
    assert review["categories"] == {"ended_early": 2}
    assert review["per_task"]["38"]["at_fault"] == 2 and review["per_task"]["76"]["at_fault"] == 0
    reasons = {(r["task_id"], r["trial"]): r for r in review["runs"]}
    assert reasons[("38", 1)]["reason"] == "The user said ###STOP### after confirming."
    assert reasons[("76", 1)] == {
        "task_id": "76",
        "trial": 1,
        "at_fault": False,
        "category": "none",
        "reason": "The agent modified the wrong item.",
    }
    text = capsys.readouterr().out
    assert "user simulator at fault in 2 of 4 failed runs reviewed (50%): ended early 2\n" in text
    assert "  task 38: at fault in 2 of 2 reviewed\n" in text
    assert "    trial 1: ended early: The user said ###STOP### after confirming.\n" in text


def test_rescore_reviews_a_tau_bench_file_with_the_tool_calls_shown(capsys) -> None:
    with JudgeServer(reply=lambda body: _verdict(True, "wrong_data", "wrong id")) as server:
        summary = _rescore_json(server.url, AIRLINE, capsys, "--domain", "airline")
        failed = summary["scored"] - round(summary["success_rate"] * summary["scored"])
        assert server.calls == failed == summary["user_review"]["failed_runs"] > 0
        conversation = _user_message(server.bodies[0])
    assert "assistant: [tool call] " in conversation and "system" not in conversation[:20]
    assert summary["user_review"]["categories"] == {"wrong_data": failed}


def _failing_judge(fault: str) -> JudgeServer:
    """A judge that fails every review: ``http_<status>`` answers, ``outage`` drops, ``unreadable``
    replies with no verdict."""
    server = JudgeServer(reply=lambda body: "The user seems fine to me.")
    if fault.startswith("http_"):
        status = int(fault.removeprefix("http_"))
        server.plan = lambda number, body: Response(status=status)
    elif fault == "outage":
        server.down = True
    return server


@pytest.mark.parametrize("fault", ["http_500", "outage", "unreadable"])
def test_a_judge_failure_is_masked_and_counted_neither_way(fault: str, capsys) -> None:
    with _failing_judge(fault) as server:
        summary = _rescore_json(server.url, TAU2_RETAIL, capsys)
        # the reviews reached the server and failed there (retries, then the breaker may open)
        assert server.calls >= (4 if fault == "unreadable" else 1)
        if fault == "http_500":
            assert {s.status for s in server.served} == {500}
    review = summary["user_review"]
    named = {"http_500": "HTTP 500", "outage": "cannot reach", "unreadable": "bad_reply"}[fault]
    assert all(named in run["failure"] for run in review["runs"])
    assert review["review_failed"] == 4 and review["reviewed"] == 0 and review["at_fault"] == 0
    assert review["share"] is None and review["categories"] == {}
    assert all(run["failure"].startswith("judge ") for run in review["runs"])
    assert review_line(review) == (
        "user simulator at fault: n/a (no review gave a verdict); "
        "review failed for 4 of 4 (masked: counted neither way)"
    )


def test_rescore_review_user_needs_a_judge(capsys) -> None:
    assert main(["rescore", str(TAU2_RETAIL), "--review-user"]) == 2
    assert "--review-user asks a judge: pass --judge-base-url" in capsys.readouterr().err


def test_summary_counts_per_task_and_leaves_failures_out_of_the_share() -> None:
    cases = [ReviewCase(t, n, "", ()) for t, n in [(1, 0), (1, 1), (2, 0), (2, 1)]]
    replies = [
        _verdict(True, "left_instructions"),
        _verdict(False),
        "no verdict",
        _verdict(True, "left_instructions"),
    ]
    reviews = []
    for reply in replies:
        try:
            reviews.append(parse_verdict(reply))
        except ValueError as error:
            reviews.append(UserReview(failure=str(error)))
    summary = summarize_reviews(cases, reviews)
    assert (summary["reviewed"], summary["at_fault"], summary["review_failed"]) == (3, 2, 1)
    assert summary["per_task"]["2"] == {
        "failed_runs": 2,
        "reviewed": 1,
        "at_fault": 1,
        "share": 1.0,
        "categories": {"left_instructions": 1},
        "review_failed": 1,
    }
    assert review_line(summary) == (
        "user simulator at fault in 2 of 3 failed runs reviewed (67%): left the instructions 2; "
        "review failed for 1 of 4 (masked: counted neither way)"
    )
    assert set(CATEGORIES) >= {"ended_early", "left_instructions", "wrong_data"}


LOOP_MARK = "2 + 2"
"""In a review request of the scripted agent's ``loop_until_truncated`` episodes only."""
NO_OUTPUTS_MARK = "All done. Anything else?"
"""In a review request of its ``malformed_then_no_outputs`` episodes only."""


def test_eval_review_user_writes_each_verdict_into_the_results(tmp_path: Path, capsys) -> None:
    domain = load_domain("tau2", "retail")
    tasks = domain.tasks("test")
    chosen = [i for i, t in enumerate(tasks) if t.outputs and 1 < len(t.actions) < 10][:2]

    def reply(body: dict[str, Any]) -> str:
        text = _user_message(body)
        if LOOP_MARK in text:
            return _verdict(True, "other", "The user never answered the agent.")
        if NO_OUTPUTS_MARK in text:
            return "I cannot tell."  # unreadable: masked
        return _verdict(False, reason="The agent skipped a write.")

    out = tmp_path / "run"
    turns = tmp_path / "turns.json"
    turns.write_text(json.dumps(user_turns(tasks)))
    with (
        AgentServer(domain, tasks, mistakes=True).running() as agent,
        JudgeServer(reply=reply) as judge,
    ):
        args = ["eval", "--domain", "retail", "--backend", "tau2", "--tasks", ",".join(map(str, chosen))]  # fmt: skip
        args += ["--trials", str(len(MISTAKES)), "--out", str(out), "--max-turns", "12"]
        args += ["--agent-base-url", agent.base_url, "--agent-model", "scripted"]
        args += ["--user-kind", "replay", "--user-turns", str(turns), "--no-progress"]
        args += ["--review-user"]
        args += ["--judge-base-url", judge.url, "--judge-model", "j"]
        assert main(args) == 0
        calls = judge.calls
    text = capsys.readouterr().out
    failed = len(chosen) * (len(MISTAKES) - 1)  # one oracle episode in four per task passes
    assert calls == failed
    runs = json.loads((out / RESULTS_FILE).read_text())
    for run in runs:
        review = run["info"].get("user_review")
        if run["reward"] == 1.0:
            assert review is None
        elif LOOP_MARK in json.dumps(run["traj"]):
            assert review == {
                "at_fault": True,
                "category": "other",
                "reason": "The user never answered the agent.",
            }
        elif NO_OUTPUTS_MARK in json.dumps(run["traj"]):
            assert review["failure"].startswith("judge bad_reply: ")
        else:
            assert review["at_fault"] is False
    summary = json.loads((out / SUMMARY_FILE).read_text())["user_review"]
    assert (summary["failed_runs"], summary["at_fault"], summary["review_failed"]) == (
        failed,
        len(chosen),
        len(chosen),
    )
    assert (
        f"user simulator at fault in {len(chosen)} of {failed - len(chosen)} failed runs reviewed"
        in text
    )


def _env(url: str, **config: Any) -> TauBenchEnv:
    env_config = {
        "backend": "tau2",
        "domain": "retail",
        "user": {"kind": "replay"},
        "judge": judge_config(url),
        "review_user": True,
        **config,
    }
    extras = {"task_index": 0, "user_turns": ["I want to exchange my items."]}
    return TauBenchEnv(env_config, extras)


def _fail(env: TauBenchEnv) -> dict[str, Any]:
    """An agent that only talks: the user stops, the task's writes are missing (reward 0.0)."""
    outputs = run_episode(env, ["How can I help?", "Goodbye."])
    assert outputs[-1]["done"] and outputs[-1]["reward"] == 0.0
    return outputs[-1]


def test_env_masks_an_episode_whose_simulator_was_at_fault() -> None:
    with JudgeServer(reply=lambda body: _verdict(True, "ended_early", "stopped")) as server:
        env = _env(server.url)
        last = _fail(env)
        assert server.calls == 1
        assert env.task.instruction in _user_message(server.bodies[0])
        assert "assistant: How can I help?" in _user_message(server.bodies[0])
    metadata = last["metadata"]
    assert metadata["should_mask"] is True
    assert metadata["failure"] == "user simulator at fault (ended_early): stopped"
    assert metadata["user_review"] == {"at_fault": True, "category": "ended_early", "reason": "stopped"}  # fmt: skip
    metrics = env.get_metrics()
    assert metrics["should_mask"] == 1.0 and metrics["user_at_fault"] == 1.0
    assert metrics["user_reviewed"] == 1.0 and metrics["user_review_failed"] == 0.0


def test_env_keeps_a_failed_episode_the_judge_lays_on_the_agent() -> None:
    with JudgeServer(reply=lambda body: _verdict(False, reason="agent erred")) as server:
        env = _env(server.url)
        last = _fail(env)
        assert server.calls == 1
    assert last["metadata"]["should_mask"] is False and "failure" not in last["metadata"]
    assert last["metadata"]["user_review"]["at_fault"] is False
    metrics = env.get_metrics()
    assert metrics["should_mask"] == 0.0 and metrics["user_at_fault"] == 0.0
    assert metrics["user_reviewed"] == 1.0


@pytest.mark.parametrize("fault", ["http_503", "outage", "unreadable"])
def test_env_masks_an_episode_the_judge_gives_no_verdict_on(fault: str) -> None:
    with _failing_judge(fault) as server:
        env = _env(server.url)
        last = _fail(env)
        assert server.calls == 1  # the review was asked, and failed
        if fault == "http_503":
            assert [s.status for s in server.served] == [503]
    metadata = last["metadata"]
    assert metadata["should_mask"] is True and metadata["failure"].startswith("user review failed")
    assert "failure" in metadata["user_review"]
    metrics = env.get_metrics()
    assert metrics["user_review_failed"] == 1.0 and metrics["should_mask"] == 1.0
    assert metrics["user_reviewed"] == 0.0 and metrics["user_at_fault"] == 0.0


def test_env_asks_nothing_for_a_successful_episode() -> None:
    with JudgeServer(reply=lambda body: _verdict(True, "other", "x")) as server:
        env = _env(server.url)
        task = env.task
        outputs = run_episode(env, [*action_texts(task.actions), closing_reply(task)])
        assert server.calls == 0
    assert outputs[-1]["reward"] == 1.0 and outputs[-1]["metadata"]["should_mask"] is False
    assert env.get_metrics()["user_reviewed"] == 0.0


def test_review_user_needs_a_judge() -> None:
    with pytest.raises(ValueError, match="review_user asks the judge"):
        env_config_from({"review_user": True})


def test_eval_refuses_the_training_option_and_names_the_flag(tmp_path: Path, capsys) -> None:
    config = tmp_path / "env.yaml"
    config.write_text("review_user: true\njudge: {base_url: 'http://127.0.0.1:9/v1', model: j}\n")
    args = ["eval", "--domain", "retail", "--backend", "tau2", "--out", str(tmp_path / "out")]
    args += ["--config", str(config), "--agent-base-url", "http://127.0.0.1:9/v1"]
    assert main([*args, "--agent-model", "m"]) == 2
    assert "eval reports them instead: drop it and pass --review-user" in capsys.readouterr().err


def test_reviews_run_concurrently_under_the_judges_in_flight_limit() -> None:
    cases = [ReviewCase(n, 0, "Cancel order #W1.", [("user", f"run {n}")]) for n in range(6)]
    with JudgeServer(reply=lambda body: _verdict(False), latency_s=0.3) as server:
        judge = {**judge_config(server.url), "limits": {"max_in_flight": 2}}
        reviews = review_many(cases, judge)
        assert server.calls == 6 and server.peak == 2  # concurrent, never past the limit
    assert [r.at_fault for r in reviews] == [False] * 6 and not any(r.failure for r in reviews)
