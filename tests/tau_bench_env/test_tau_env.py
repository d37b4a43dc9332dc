"""TauBenchEnv: SkyRL contract, multi-turn episodes, turn limit, config errors."""

from __future__ import annotations

import builtins
from typing import Any

import pytest
import skyrl_gym
from tau_helpers import action_texts, replay_env_config, run_episode, tool_text

import tau_bench_env
from tau_bench_env import backends
from tau_bench_env.backends import BackendUnavailableError, load_domain
from tau_bench_env.data_model.tasks import Task
from tau_bench_env.episode.env import EpisodeEndedError, TauBenchEnv

USER_TURNS = ["Hi, I want to cancel an order.", "My order id is #W1.", "Yes, please."]


def _write_task(domain_name: str = "airline") -> Task:
    """A tau2 task without outputs whose ground truth is a single successful write."""
    domain = load_domain("tau2", domain_name)
    return next(
        t
        for t in domain.tasks("base")
        if len(t.actions) == 1 and t.actions[0].name not in domain.read_only_tools and not t.outputs
    )


def _make(config: dict[str, Any] | None = None, **extras: Any) -> TauBenchEnv:
    task = _write_task()
    row = {"task": task.to_dict(), "user_turns": USER_TURNS, **extras}
    return skyrl_gym.make(
        "tau_bench", env_config=replay_env_config("tau2", "airline", **(config or {})), extras=row
    )


def test_registered_on_import() -> None:
    assert tau_bench_env.ENV_ID in skyrl_gym.registry
    assert isinstance(_make(), TauBenchEnv)


def test_init_returns_system_prompt_and_first_user_message() -> None:
    env = _make()
    messages, info = env.init([{"role": "user", "content": "dataset prompt (replaced)"}])
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"] == USER_TURNS[0]
    domain = load_domain("tau2", "airline")
    assert domain.policy.strip()[:200] in messages[0]["content"]
    assert all(s["function"]["name"] in messages[0]["content"] for s in domain.tool_schemas)
    assert info["domain"] == "airline" and len(info["tools"]) == len(domain.tool_schemas)


def test_multi_turn_episode_with_replay_user() -> None:
    task = _write_task()
    texts = [
        "Sure, what is your order id?",
        "Thanks, one moment.",
        *action_texts(task.actions),
        "Done!",
    ]
    outputs = run_episode(_make(), texts)
    observed = [out["observations"] for out in outputs]
    assert observed[0] == [{"role": "user", "content": USER_TURNS[1]}]
    assert observed[1] == [{"role": "user", "content": USER_TURNS[2]}]
    assert observed[2][0]["role"] == "tool" and not observed[2][0]["content"].startswith("Error")
    assert [out["reward"] for out in outputs] == [0.0, 0.0, 0.0, 1.0]
    assert outputs[-1]["done"] and outputs[-1]["observations"] == []  # ###STOP### ended it


def test_terminate_tool_ends_the_episode() -> None:
    outputs = run_episode(_make(), [tool_text("transfer_to_human_agents", {"summary": "help"})])
    assert outputs[0]["done"] and outputs[0]["metadata"]["action"] == "transfer_to_human_agents"
    assert outputs[0]["reward"] == 0.0  # the write was not done


@pytest.mark.parametrize(
    ("config", "extras", "reward", "failed"),
    [
        ({"max_turns": 1}, {}, 0.0, ["truncated"]),  # cut off: 0.0 though the data matches
        ({"max_turns": 1, "score_truncated": True}, {}, 1.0, []),  # configured to score it
        ({"max_turns": 5}, {"max_turns": 1}, 0.0, ["truncated"]),  # SkyRL's extras.max_turns wins
    ],
)
def test_turn_limit(config: dict, extras: dict, reward: float, failed: list[str]) -> None:
    env = _make(config, **extras)
    outputs = run_episode(env, action_texts(_write_task().actions) + ["Done!"])
    assert len(outputs) == 1 and outputs[0]["done"]
    assert outputs[0]["metadata"]["truncated"] is True
    assert outputs[0]["reward"] == reward
    assert outputs[0]["metadata"]["reward_info"]["failed"] == failed
    assert env.get_metrics()["truncated"] is True


def test_malformed_tool_call_is_an_error_observation_not_a_user_message() -> None:
    env = _make()
    env.init([])
    out = env.step('<tool_call>{"name": "cancel_reservation", "arguments": [1]}</tool_call>')
    assert out["observations"][0]["role"] == "tool"
    assert "malformed tool call" in out["observations"][0]["content"]
    assert "must be a JSON object" in out["observations"][0]["content"]
    assert out["metadata"]["malformed_tool_calls"] == 1 and out["metadata"]["action"] is None
    assert env.episode is not None and env.episode.actions == []  # nothing logged or run
    reply = env.step("What is your order id?")
    assert reply["observations"] == [
        {"role": "user", "content": USER_TURNS[1]}
    ]  # user saw nothing before
    assert env.get_metrics()["malformed_tool_calls"] == 1


def test_unknown_tool_is_reported_like_tau_bench() -> None:
    env = _make()
    env.init([])
    out = env.step(tool_text("fly_me_to_the_moon", {}))
    assert out["observations"][0]["content"] == "Unknown action fly_me_to_the_moon"
    assert env.get_metrics()["unknown_tool_calls"] == 1


def test_tool_errors_are_observations() -> None:
    env = _make()
    env.init([])
    out = env.step(tool_text("get_reservation_details", {"reservation_id": "NOPE"}))
    assert out["observations"][0]["content"].startswith("Error: ")
    out = env.step(tool_text("get_reservation_details", {"bogus": 1}))
    assert out["observations"][0]["content"].startswith("Error: ")


def test_init_resets_without_reading_from_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    env = _make()
    run_episode(env, action_texts(_write_task().actions))
    assert env.episode is not None and env.episode.data.own_records() > 0

    def no_disk(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("init read a file")

    monkeypatch.setattr(builtins, "open", no_disk)
    env.init([])
    assert env.episode.data.own_records() == 0 and env.turns == 0


def test_episode_holds_only_the_records_it_wrote() -> None:
    env = _make()
    run_episode(env, action_texts(_write_task().actions) + ["Done!"])
    domain = load_domain("tau2", "airline")
    total = sum(len(table) for table in domain.base_data.values())
    assert 0 < env.get_metrics()["own_records"] <= 5 < total


def test_step_before_init_and_after_done_raises() -> None:
    env = _make()
    with pytest.raises(EpisodeEndedError):
        env.step("hello")
    run_episode(env, [tool_text("transfer_to_human_agents", {"summary": "x"})])
    with pytest.raises(EpisodeEndedError):
        env.step("hello")


def test_metrics_after_done() -> None:
    env = _make(user_turns=["hi"])
    run_episode(env, action_texts(_write_task().actions) + ["Done!"])
    metrics = env.get_metrics()
    assert metrics["reward"] == 1.0 and metrics["r_actions"] is True
    assert metrics["turns"] == 2 and metrics["tool_calls"] == 1
    assert TauBenchEnv.aggregate_metrics([metrics])["reward"] == 1.0


@pytest.mark.parametrize(
    ("extras", "field"),
    [
        ({"split": "test", "task_index": 3}, None),  # by index
        ({"split": "test", "task_id": "2"}, None),  # by id
    ],
)
def test_task_from_split(extras: dict, field: None) -> None:
    env = TauBenchEnv(replay_env_config("tau2", "airline"), {"user_turns": ["hi"], **extras})
    assert env.task in load_domain("tau2", "airline").tasks("test")


@pytest.mark.parametrize(
    ("config", "extras", "field"),
    [
        ({"backend": "nope"}, {}, "backend"),
        ({"max_turns": 0}, {}, "max_turns"),
        ({"max_turns": "3"}, {}, "max_turns"),
        ({"tool_observation_role": "system"}, {}, "tool_observation_role"),
        ({"user": {"kind": "human"}}, {}, "user.kind"),
        ({"user": {"timeout_s": 0}}, {}, "user.timeout_s"),
        ({"user": {"colour": "red"}}, {}, "user.colour"),
        ({"turns": 3}, {}, "turns"),
        ({}, {"split": "test", "task_index": 99}, "extras.task_index"),
        ({}, {"split": "test", "task_index": True}, "extras.task_index"),
        ({}, {"split": "test", "task_id": "nope"}, "extras.task_id"),
        ({}, {"split": "nope", "task_index": 0}, "split"),
        ({}, {"split": "test"}, "extras must name a task"),
        ({}, {"task": {"instruction": "x"}}, "task.actions"),
        # a task that starts from its own state cannot be replayed from the domain's data
        ({}, {"task": {"actions": [], "initial_state": {}}}, "extras.task.initial_state"),
        ({}, {"split": "test", "task_index": 0, "max_turns": 0}, "extras.max_turns"),
        ({}, {"domain": "bank", "task_index": 0}, "domain"),
    ],
)
def test_config_and_row_errors_name_the_field(config: dict, extras: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        TauBenchEnv(
            {**replay_env_config("tau2", "airline"), **config}, {"user_turns": ["hi"], **extras}
        )


def test_replay_user_needs_turns() -> None:
    with pytest.raises(ValueError, match="extras.user_turns"):
        TauBenchEnv(replay_env_config("tau2", "airline"), {"split": "test", "task_index": 0})


def test_missing_backend_fails_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "_domains", {})
    monkeypatch.setattr(backends, "installed_backends", lambda: ["tau2"])
    with pytest.raises(BackendUnavailableError) as caught:
        TauBenchEnv(
            replay_env_config("tau_bench", "airline"), {"task_index": 0, "user_turns": ["hi"]}
        )
    assert "installed backends: tau2" in str(caught.value)
    assert "to use backend 'tau_bench'" in str(caught.value)


def test_omegaconf_config_is_accepted() -> None:
    from omegaconf import OmegaConf

    config = OmegaConf.create(replay_env_config("tau2", "retail", max_turns=7))
    env = TauBenchEnv(config, {"split": "test", "task_index": 0, "user_turns": ["hi"]})
    assert env.max_turns == 7 and env.domain.name == "retail"


def test_numpy_integers_from_parquet_rows() -> None:
    numpy = pytest.importorskip("numpy")
    row = {"split": "test", "task_index": numpy.int64(2), "max_turns": numpy.int64(4)}
    env = TauBenchEnv(replay_env_config("tau2", "airline"), {**row, "user_turns": ["hi"]})
    assert env.task == load_domain("tau2", "airline").tasks("test")[2] and env.max_turns == 4
