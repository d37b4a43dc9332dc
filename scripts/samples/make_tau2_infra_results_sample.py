"""Write small tau2-bench 1.0.1 results files with infrastructure-error runs, by tau2's own code.

Two files, each a tau2 ``Results`` JSON written by tau2's ``Results.save``:

- ``tau2_banking_grep_only_results.json``: ``banking_knowledge`` on the
  retrieval setup ``grep_only`` (not the default), three tasks, three trials;
- ``tau2_retail_infra_results.json``: ``retail``, two tasks, three trials.

What tau2's runner does, done by its own functions: the run header is
``tau2.runner.helpers.get_info`` of a ``TextRunConfig`` (so
``info.retrieval_config`` is what ``tau2 run --retrieval-config`` writes);
each run's environment is ``runner.build.build_environment`` with
``runner.build._build_env_kwargs`` (the retrieval setup, the task, the
read-log allowlist); every tool result is the environment's
``get_response``; each run goes through ``runner.progress.run_with_retry``,
and a run whose every attempt raises comes back as tau2's placeholder
(``termination_reason: "infrastructure_error"``, ``reward_info: null``, no
messages); the others are scored by ``evaluate_simulation`` as
``runner.simulation.run_simulation`` scores them. tau2's own metrics
(``metrics.agent_metrics.compute_metrics``: infrastructure errors left out,
pass^k up to the fewest runs a task has left) are written beside each file
(``*.metrics.json``) for the tests to compare ``rescore``'s figures with.

No model and no user simulator: the agent's turns (a knowledge-base search
first in banking, then the task's gold actions, or all but the last write)
and the user's lines are scripted, so no LLM and no network are needed.

Needs tau2-bench 1.0.1 installed with its data (``TAU2_DATA_DIR``). Usage:

    TAU2_DATA_DIR=/path/to/tau2-bench/data python \\
        scripts/samples/make_tau2_infra_results_sample.py --out-dir tau_bench_env/sample_data
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from make_tau2_results_sample import TIMESTAMP, first_line, stamped_run  # this folder

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

TRIALS = 3
READ_ONLY_TYPES = frozenset({"read", "generic", "think"})

# file stem -> (domain, retrieval setup or None, task id -> one plan per trial).
# Plans: "ground truth", "without last write", "infrastructure error" (every attempt raises).
FILES: dict[str, tuple[str, str | None, dict[str, list[str]]]] = {
    "tau2_banking_grep_only_results": (
        "banking_knowledge",
        "grep_only",
        {
            "task_036": ["ground truth", "infrastructure error", "without last write"],
            "task_031": ["ground truth", "ground truth", "without last write"],
            "task_046": ["infrastructure error", "ground truth", "ground truth"],
        },
    ),
    "tau2_retail_infra_results": (
        "retail",
        None,
        {
            "33": ["ground truth", "without last write", "infrastructure error"],
            "34": ["ground truth", "ground truth", "without last write"],
        },
    ),
}
SEARCH = {"banking_knowledge": ("grep", {"pattern": "order_replacement_credit_card_7291"})}
"""A knowledge-base search the agent makes before the gold actions (per domain)."""


def run_config(domain: str, setup: str | None, trials: int = TRIALS) -> Any:
    """The ``TextRunConfig`` a ``tau2 run`` of these files would have had."""
    from tau2.data_model.simulation import TextRunConfig

    return TextRunConfig(
        domain=domain,
        agent="llm_agent",
        llm_agent="scripted",
        user="user_simulator",
        llm_user="scripted",
        num_trials=trials,
        max_steps=30,
        max_errors=10,
        seed=0,
        retrieval_config=setup,
    )


def read_only(environment: Any, requestor: str, tool: str, arguments: dict[str, Any]) -> bool:
    """Whether tau2 types the call's tool (a discoverable call: the tool it calls) read-only."""
    kit = environment.user_tools if requestor == "user" else environment.tools
    if tool in ("call_discoverable_agent_tool", "call_discoverable_user_tool"):
        tool = arguments.get("agent_tool_name") or arguments.get("discoverable_tool_name") or tool
    try:
        return kit.tool_type(tool).value in READ_ONLY_TYPES
    except (KeyError, ValueError, AttributeError):
        return False


def simulate(
    config: Any,
    task: Any,
    plan: str,
    trial: int,
    searches: list[tuple[str, str, Any]] | None = None,
) -> Any:
    """One scored ``SimulationRun`` of ``plan`` on ``task`` (tau2's environment and evaluator);
    ``searches``: the (requestor, tool, arguments) calls before the gold actions (default: the
    domain's :data:`SEARCH`)."""
    from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.runner.build import _build_env_kwargs, build_environment

    env_kwargs = _build_env_kwargs(config, task)
    environment = build_environment(config.domain, env_kwargs=env_kwargs)
    start = task.initial_state
    if start is not None:
        environment.set_state(
            initialization_data=start.initialization_data,
            initialization_actions=start.initialization_actions,
            message_history=list(start.message_history or []),
        )
    gold = [(a.requestor, a.name, dict(a.arguments)) for a in task.evaluation_criteria.actions]
    if plan == "without last write":
        writes = [i for i, a in enumerate(gold) if not read_only(environment, *a)]
        gold = [a for i, a in enumerate(gold) if i != writes[-1]]
    if searches is None:
        searches = [("assistant", *SEARCH[config.domain])] if config.domain in SEARCH else []
    steps = searches + gold
    messages: list[Any] = [
        AssistantMessage(role="assistant", content="Hi! How can I help you today?"),
        UserMessage(role="user", content="Hi, I need some help with my account."),
    ]
    for number, (requestor, tool, arguments) in enumerate(steps):
        call = ToolCall(id=f"call_{number}", name=tool, arguments=arguments, requestor=requestor)
        sender = UserMessage if requestor == "user" else AssistantMessage
        messages.append(sender(role=requestor, tool_calls=[call]))
        messages.append(environment.get_response(call))
    messages.append(AssistantMessage(role="assistant", content="Is there anything else?"))
    messages.append(UserMessage(role="user", content="Thanks, that is all. ###STOP###"))
    run_id = f"{config.domain}-{task.id}-trial{trial}"
    run = stamped_run(run_id, task.id, "user_stop", messages, trial)
    run.reward_info = evaluate_simulation(
        simulation=run,
        task=task,
        evaluation_type=EvaluationType.ALL,
        solo_mode=False,
        domain=config.domain,
        env_kwargs=env_kwargs,
    )
    return run


class EndpointDown(ConnectionError):
    """What the agent's LLM call raises in an infrastructure-error run."""


def results(stem: str) -> Any:
    """tau2's ``Results`` of :data:`FILES` entry ``stem``."""
    from tau2.data_model.simulation import Results
    from tau2.registry import registry
    from tau2.runner.helpers import get_info
    from tau2.runner.progress import run_with_retry

    domain, setup, plan = FILES[stem]
    config = run_config(domain, setup)
    tasks = {t.id: t for t in registry.get_tasks_loader(domain)()}
    simulations = []
    for trial in range(TRIALS):
        for task_id, plans in plan.items():

            def run_fn(
                task: Any = tasks[task_id], label: str = plans[trial], trial: int = trial
            ) -> Any:
                if label == "infrastructure error":
                    raise EndpointDown("agent endpoint unreachable (scripted)")
                return simulate(config, task, label, trial)

            simulation = run_with_retry(
                run_fn, tasks[task_id], trial, trial, retry_delay=0.0, console_display=False
            )
            if simulation.reward_info is None:  # tau2's placeholder: fix its clock and id
                simulation.id = f"{domain}-{task_id}-trial{trial}-infra"
                simulation.timestamp = simulation.start_time = simulation.end_time = TIMESTAMP
                simulation.info["error_traceback"] = "(omitted)"
            simulations.append(simulation)
    info = get_info(config)
    info.git_commit = "tau2-bench v1.0.1"
    info.environment_info.policy = first_line(info.environment_info.policy)
    guidelines = info.user_info.global_simulation_guidelines
    info.user_info.global_simulation_guidelines = first_line(guidelines or "")
    return Results(
        timestamp=TIMESTAMP,
        info=info,
        tasks=[tasks[task_id] for task_id in plan],
        simulations=simulations,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args()
    from loguru import logger
    from tau2.data_model.simulation import Results
    from tau2.metrics.agent_metrics import compute_metrics

    for stem in FILES:
        path = args.out_dir / f"{stem}.json"
        results(stem).save(path)
        logger.disable("tau2")  # run_with_retry logs each attempt; compute_metrics warns
        metrics = compute_metrics(Results.load(path)).as_dict()
        metrics_path = args.out_dir / f"{stem}.metrics.json"
        metrics_path.write_text(json.dumps(metrics, indent=1, sort_keys=True) + "\n")
        print(f"{path}: {metrics}")  # noqa: T201 - script output


if __name__ == "__main__":
    main()
