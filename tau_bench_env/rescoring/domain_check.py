"""Whether recorded runs belong to the domain they are re-scored with, checked before replaying.

A tau-bench run's task must name only the domain's tools and users
(:func:`run_mismatch`); a tau2 simulation's gold actions likewise, and a tau2 file
that names its domain must name this one (:func:`check_tau2_domain`). A file
recorded on another domain is refused (:class:`DomainMismatchError`, naming up to
:data:`MAX_LISTED_MISMATCHES` runs), not scored: its unknown tools would fail on
both sides and the data check would pass by accident.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tau_bench_env.backends.protocol import Domain
from tau_bench_env.data_model.tasks import RESPOND, task_from_dict
from tau_bench_env.rescoring.tau2_results import (
    Tau2Simulation,
    agent_tool_names,
    recorded_domain,
)

MAX_LISTED_MISMATCHES = 5
"""Mismatching runs named in the error; the rest are counted."""


class DomainMismatchError(ValueError):
    """The recorded runs' tasks are not tasks of the domain they are re-scored with."""


def _traj_tool_names(traj: Sequence[Any]) -> list[str]:
    names = []
    for message in traj:
        if not isinstance(message, Mapping) or message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping) and function.get("name"):
                names.append(str(function["name"]))
    return names


def run_mismatch(domain: Domain, run: Mapping[str, Any]) -> str:
    """Why ``run`` is not a task of ``domain``, or ``""`` when nothing says so.

    The run's task (trusted: the benchmark wrote it) must name only the
    domain's tools in its ground-truth actions, and its ``user_id``, when it
    has one, must be a user of the domain's data. The trajectory (model-written)
    counts only when every tool it calls is unknown to the domain.

    Raises ``ValueError`` when the run has no readable ``info.task``.
    """
    info = run.get("info") or {}
    if not isinstance(info, Mapping) or "task" not in info:
        raise ValueError(f"run task_id={run.get('task_id')!r}: info.task is required")
    task = task_from_dict(info["task"], task_id=str(run.get("task_id")))
    reasons = []
    for side, tools in (("assistant", domain.tools), ("user", domain.user_tools)):
        names = {
            a.name
            for i, a in enumerate(task.actions)
            if a.name != RESPOND and task.requestor(i) == side
        }
        unknown = sorted(names - set(tools))
        if unknown:
            whose = "" if side == "assistant" else "user "
            reasons.append(
                f"its task's actions use {whose}tools {unknown} that {domain.name} does not have"
            )
    users = domain.base_data.get("users")
    if task.user_id is not None and isinstance(users, Mapping) and task.user_id not in users:
        reasons.append(f"its user {task.user_id!r} is not a user of {domain.name}")
    called = _traj_tool_names(run.get("traj") or [])
    if called and not set(called) & set(domain.tools):
        reasons.append(
            f"its trajectory calls only tools {sorted(set(called))} unknown to {domain.name}"
        )
    return "; ".join(reasons)


def domain_mismatches(domain: Domain, runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per run that is not a task of ``domain`` (see :func:`run_mismatch`)."""
    lines = []
    for run in runs:
        if why := run_mismatch(domain, run):
            lines.append(f"run task_id={run.get('task_id')!r} trial={run.get('trial', 0)}: {why}")
    return lines


def _refuse(domain: Domain, mismatches: Sequence[str], runs: int) -> None:
    if not mismatches:
        return
    listed = "\n  ".join(mismatches[:MAX_LISTED_MISMATCHES])
    more = len(mismatches) - MAX_LISTED_MISMATCHES
    raise DomainMismatchError(
        f"{len(mismatches)} of {runs} runs are not {domain.key} tasks; was the file "
        f"recorded on another domain? Pass the domain it was recorded on (--domain).\n  "
        + listed
        + (f"\n  ... and {more} more" if more > 0 else "")
    )


def check_domain(domain: Domain, runs: Sequence[Mapping[str, Any]]) -> None:
    """Raise :class:`DomainMismatchError` naming the runs that are not tasks of ``domain``."""
    _refuse(domain, domain_mismatches(domain, runs), len(runs))


def foreign_tools(domain: Domain, simulation: Tau2Simulation) -> tuple[str, ...]:
    """The tools the agent called, sorted, when ``domain`` has none of them; else ``()``.

    Such a run (a model that invented its tools, or a telecom agent that made
    the user's phone calls itself) is scored as tau2 scores it: each call is
    an error that changes nothing.
    """
    called = set(agent_tool_names(simulation))
    return tuple(sorted(called)) if called and not called & set(domain.tools) else ()


def simulation_mismatch(
    domain: Domain, simulation: Tau2Simulation, *, trajectory: bool = True
) -> str:
    """Why ``simulation`` is not a task of ``domain``, or ``""`` (as :func:`run_mismatch`).

    Its task's gold actions of the agent must name only the domain's tools;
    with ``trajectory``, a run whose agent calls only tools unknown to the
    domain (:func:`foreign_tools`) is a mismatch too. A file that names its
    domain passes ``trajectory=False``: the name settles the domain, and such
    a run is scored (tau2 scores it) and reported instead.
    """
    criteria = simulation.task.get("evaluation_criteria")
    gold = (
        [a for a in criteria.get("actions") or [] if isinstance(a, Mapping)]
        if isinstance(criteria, Mapping)
        else []
    )
    reasons = []
    for side, tools in (("assistant", domain.tools), ("user", domain.user_tools)):
        names = {str(a.get("name")) for a in gold if (a.get("requestor") or "assistant") == side}
        unknown = sorted(names - set(tools))
        if unknown:
            whose = "" if side == "assistant" else "user "
            reasons.append(
                f"its task's actions use {whose}tools {unknown} that {domain.name} does not have"
            )
    called = foreign_tools(domain, simulation)
    if trajectory and called:
        reasons.append(f"its trajectory calls only tools {list(called)} unknown to {domain.name}")
    return "; ".join(reasons)


def check_tau2_domain(
    domain: Domain, results: Mapping[str, Any], simulations: Sequence[Tau2Simulation]
) -> None:
    """Raise :class:`DomainMismatchError` when a tau2 file is not of ``domain``.

    The file's ``info.environment_info.domain_name``, when present, must be
    ``domain.name``; every simulation must pass :func:`simulation_mismatch`
    (its trajectory checked only when the file does not name its domain).
    """
    recorded = recorded_domain(results)
    if recorded is not None and recorded != domain.name:
        raise DomainMismatchError(
            f"the file was recorded on domain {recorded!r} (info.environment_info.domain_name), "
            f"not {domain.name!r}; pass --domain {recorded} or leave --domain out"
        )
    mismatches = [
        f"{s.where} trial={s.trial}: {why}"
        for s in simulations
        if (why := simulation_mismatch(domain, s, trajectory=recorded is None))
    ]
    _refuse(domain, mismatches, len(simulations))
