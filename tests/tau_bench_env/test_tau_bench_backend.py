"""The ``tau_bench`` backend against the real tau-bench package (skipped when it is absent)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from tau_helpers import action_texts, closing_reply, replay_env_config, run_episode, tau_bench_only

from tau_bench_env.backends import load_domain
from tau_bench_env.data_model.hashing import data_hash
from tau_bench_env.data_model.tasks import Task
from tau_bench_env.episode.env import TauBenchEnv
from tau_bench_env.episode.episode import Episode
from tau_bench_env.episode.reward import GroundTruthCache

pytestmark = tau_bench_only


class _SilentUser:
    """Answers tau-bench's env in place of a model (its replay may send ``respond``)."""

    def step(self, content: str) -> str:
        return "ok"

    def get_total_cost(self) -> float:
        return 0.0


def _tau_bench_env(domain: str, split: str) -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from tau_bench.envs import get_env

    env = get_env(domain, user_strategy="human", user_model="none", task_split=split, task_index=0)
    env.user = _SilentUser()
    return env


def _their_reward(env: Any, index: int, actions: list[Any]) -> tuple[float, str]:
    """tau-bench's own reward and agent-data hash for ``actions`` on task ``index``."""
    from tau_bench.types import Action as TBAction

    env.task_index, env.task = index, env.tasks[index]
    env.data, env.actions = env.data_load_func(), []
    for action in actions:
        env.step(TBAction(name=action.name, kwargs=dict(action.kwargs)))
    agent_hash = env.get_data_hash()
    return env.calculate_reward().reward, agent_hash


@pytest.mark.parametrize("domain_name", ["airline", "retail"])
def test_fresh_data_hash_equals_tau_benchs(domain_name: str) -> None:
    from tau_bench.envs.base import consistent_hash, to_hashable

    env = _tau_bench_env(domain_name, "test")
    domain = load_domain("tau_bench", domain_name)
    expected = consistent_hash(to_hashable(env.data_load_func()))
    assert domain.hash_index.digest(domain.fresh_data()) == expected == data_hash(domain.base_data)


@pytest.mark.parametrize(
    ("domain_name", "split", "step"),
    [("airline", "test", 10), ("retail", "test", 23), ("retail", "train", 125)],
)
def test_rewards_and_hashes_equal_tau_benchs(domain_name: str, split: str, step: int) -> None:
    """Ground truth and ground truth minus its last action, scored by both.

    tau-bench's own scoring is slow (it reloads the data), so this runs on a sample.
    """
    env = _tau_bench_env(domain_name, split)
    domain = load_domain("tau_bench", domain_name)
    tasks = domain.tasks(split)
    for index in range(0, len(tasks), step):
        task: Task = tasks[index]
        for actions in (list(task.actions), list(task.actions[:-1])):
            theirs, their_hash = _their_reward(env, index, actions)
            episode = Episode(domain, task)
            for action in actions:
                if action.name == "respond":
                    episode.respond(str(action.kwargs["content"]))
                else:
                    episode.call_tool(action.name, action.kwargs)
            ours = episode.score(cache=GroundTruthCache())
            assert episode.data_hash() == their_hash, (split, index)
            assert ours.reward == theirs, (split, index, ours.failed)


@pytest.mark.parametrize(
    ("domain_name", "split"), [("airline", "test"), ("retail", "test"), ("retail", "dev")]
)
def test_ground_truth_trajectories_score_one(domain_name: str, split: str) -> None:
    domain = load_domain("tau_bench", domain_name)
    before = data_hash(domain.base_data)
    for index, task in enumerate(domain.tasks(split)):
        env = TauBenchEnv(
            replay_env_config("tau_bench", domain_name),
            {"split": split, "task_index": index, "user_turns": ["Hi."]},
        )
        outputs = run_episode(env, action_texts(task.actions) + [closing_reply(task)])
        assert outputs[-1]["done"] and outputs[-1]["reward"] == 1.0, (
            index,
            outputs[-1]["metadata"],
        )
    assert data_hash(domain.base_data) == before  # read-only tools never wrote to the shared data


def test_task_index_is_bounded() -> None:
    # tau-bench's own sampler randint(0, len(tasks)) can pick one past the end
    with pytest.raises(ValueError, match=r"extras.task_index must be an integer in \[0, 50\)"):
        TauBenchEnv(
            replay_env_config("tau_bench", "airline"),
            {"split": "test", "task_index": 50, "user_turns": ["hi"]},
        )


def test_tau_bench_user_drives_an_episode(monkeypatch: pytest.MonkeyPatch) -> None:
    # tau-bench's "human" user reads stdin; answer it from a script instead
    answers = iter(["My user id is ethan_martin_2396.", "###STOP###"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    config = {
        "backend": "tau_bench",
        "domain": "airline",
        "user": {"kind": "tau_bench", "strategy": "human"},
    }
    env = TauBenchEnv(config, {"split": "test", "task_index": 16})
    messages, _ = env.init([])
    assert messages[1]["content"] == "My user id is ethan_martin_2396."
    task = env.task
    for text in action_texts(task.actions):
        assert env.step(text)["reward"] == 0.0
    out = env.step("Your certificate has been sent.")
    assert out["done"] and out["reward"] == 1.0


def test_tool_calls_cannot_change_a_tasks_ground_truth() -> None:
    # tau-bench's book_reservation keeps its payment_methods list inside the data,
    # and update_reservation_baggages appends to that list
    domain = load_domain("tau_bench", "airline")
    task = domain.tasks("test")[0]
    booking = task.actions[0]
    before = repr(task.actions)
    episode = Episode(domain, task)
    assert not episode.call_tool(booking.name, booking.kwargs).startswith("Error")
    payment = booking.kwargs["payment_methods"][-1]["payment_id"]
    update = {"reservation_id": "HATHAT", "total_baggages": 4, "nonfree_baggages": 1}
    result = episode.call_tool("update_reservation_baggages", {**update, "payment_id": payment})
    assert not result.startswith("Error"), result
    assert repr(task.actions) == before


def test_the_domain_loads_without_tau_benchs_llm_client() -> None:
    # a fresh interpreter: the domain's modules without litellm (seconds of a rescore), and
    # tau-bench's own package imported whole afterwards
    import subprocess
    import sys

    script = """
import sys
from tau_bench_env.backends import load_domain
domain = load_domain("tau_bench", "retail")
assert len(domain.tasks("test")) == 115 and domain.task_set.digest
assert "litellm" not in sys.modules and "tau_bench.envs" not in sys.modules
import tau_bench.envs.retail.tools as tools
from tau_bench.envs import get_env
assert "litellm" in sys.modules and get_env and tools.ALL_TOOLS
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
