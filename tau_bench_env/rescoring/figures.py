"""The figures of re-scored runs: pass^k per task (:func:`pass_hat_k`), each task's runs and
successes (:func:`task_outcomes`), their intervals, and the summary :func:`summarize` prints
(diverged runs left out unless ``keep_diverged``, infrastructure failures counted apart).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tau_bench_env.rescoring.intervals import intervals, task_pass_hat_k
from tau_bench_env.rescoring.run_score import (
    CAUSE_FIELDS,
    DIVERGENCE_CAUSES,
    SUCCESS_TOLERANCE,
    RunScore,
)


def pass_hat_k(scores: Sequence[RunScore], *, max_k: int | None = None) -> dict[int, float]:
    """pass^k over each task's runs, from our rewards (tau-bench's and tau2's estimator).

    For a task with ``n`` runs of which ``c`` succeed, pass^k is
    C(c, k) / C(n, k); the figure averages it over tasks, for k = 1 up to the
    fewest runs any task has (and at most ``max_k``: tau2's ``compute_metrics``
    stops at its file's ``info.num_trials``). ``n`` counts runs, not distinct
    trial numbers: runs that share a task and a trial number each count.

    >>> s = [RunScore(0, t, 0.0, r, None) for t, r in enumerate([1.0, 1.0, 0.0])]
    >>> pass_hat_k(s)
    {1: 0.6666666666666666, 2: 0.3333333333333333, 3: 0.0}
    >>> pass_hat_k([RunScore(0, 0, 0.0, 1.0, None), RunScore(0, 0, 0.0, 0.0, None)])
    {1: 0.5, 2: 0.0}
    """
    outcomes = task_outcomes(scores)
    if not outcomes:
        return {}
    fewest = min(runs for runs, _ in outcomes.values())
    top = fewest if max_k is None else min(fewest, max_k)
    return {
        k: sum(task_pass_hat_k(n, c, k) for n, c in outcomes.values()) / len(outcomes)
        for k in range(1, top + 1)
    }


def task_outcomes(scores: Sequence[RunScore]) -> dict[Any, tuple[int, int]]:
    """Each task's ``(runs, successes)`` among ``scores`` (a success: reward 1.0 within tolerance)."""
    outcomes: dict[Any, tuple[int, int]] = {}
    for score in scores:
        runs, successes = outcomes.get(score.task_id, (0, 0))
        success = abs(score.reward - 1.0) <= SUCCESS_TOLERANCE
        outcomes[score.task_id] = (runs + 1, successes + int(success))
    return outcomes


def figure_intervals(
    scored: Sequence[RunScore], pass_scores: Sequence[RunScore], ks: Sequence[int]
) -> dict[str, Any]:
    """Intervals of the success rate over ``scored`` and of pass^k (each of ``ks``) over
    ``pass_scores``' tasks (:func:`tau_bench_env.rescoring.intervals.intervals`)."""
    return intervals(task_outcomes(scored), ks, pass_tasks={s.task_id for s in pass_scores})


def divergence_causes(scores: Sequence[RunScore]) -> dict[str, dict[str, Any]]:
    """Why the diverged runs diverged: each cause (:data:`DIVERGENCE_CAUSES`) with ``runs``
    (how many runs show it; a run may show several) and ``fields`` (where it shows), most
    runs first.

    >>> from tau_bench_env.rescoring.run_score import RunScore
    >>> divergence_causes([RunScore(1, 0, 1.0, 1.0, None, 2, 1, divergence_causes={"values": ["b"]})])
    {'values': {'runs': 1, 'fields': ['b']}}
    """
    found: dict[str, dict[str, Any]] = {}
    for score in scores:
        for cause, names in score.divergence_causes.items():
            entry = found.setdefault(cause, {"runs": 0, "fields": []})
            entry["runs"] += 1
            entry["fields"].extend(n for n in names if n not in entry["fields"])
            del entry["fields"][CAUSE_FIELDS:]
    ranked = sorted(found, key=lambda c: (-found[c]["runs"], list(DIVERGENCE_CAUSES).index(c)))
    return {cause: found[cause] for cause in ranked}


def summarize(
    scores: Sequence[RunScore], *, keep_diverged: bool = False, max_k: int | None = None
) -> dict[str, Any]:
    """The figures of a rescore (JSON-able).

    ``runs``: every run; ``diverged``: the runs with a tool result that
    differs from the recorded one, listed in ``divergences`` (their rewards,
    counts and first difference); ``tool_results``: the results compared.
    The figures are over the ``scored`` runs: all of them with
    ``keep_diverged``, else the runs that did not diverge (pass^k over the
    tasks none of whose runs diverged, so every task keeps all its runs; k at
    most ``max_k``, see :func:`pass_hat_k`).
    ``success_rate``; ``agreement``, the share whose reward equals the
    recorded one (both None when no run is scored); ``pass_hat_k``, over
    ``pass_hat_k_tasks`` of the file's ``tasks``; ``disagreements`` lists the scored runs
    that do not agree, with the check that failed. ``foreign``: the runs whose
    agent called only tools the domain lacks (tau2 files), scored like the
    others and listed in ``foreign_runs`` (the tools, those of them that are
    the user's, the reward). ``left_out``: the runs that are no judgement
    (:attr:`RunScore.left_out`), out of every figure and listed in
    ``left_out_runs`` with the cause (pass^k counts a task's other runs);
    ``infra_error_count``: those that are tau2's infrastructure errors (its metrics' name).
    ``intervals``: 95 % per-task bootstrap intervals of the success rate and
    of each pass^k (:func:`figure_intervals`; method and level named).
    ``divergence_causes``: why the diverged runs diverged (:func:`divergence_causes`;
    each of ``divergences`` names its own ``causes``).
    """
    diverged_tasks = set() if keep_diverged else {s.task_id for s in scores if s.diverged}
    scored = [s for s in scores if not s.left_out and (keep_diverged or not s.diverged)]
    count = len(scored)
    successes = sum(1 for s in scored if abs(s.reward - 1.0) <= SUCCESS_TOLERANCE)
    whole_tasks = [s for s in scored if s.task_id not in diverged_tasks]
    pass_k = pass_hat_k(whole_tasks, max_k=max_k)
    return {
        "runs": len(scores),
        "scored": count,
        "diverged": sum(1 for s in scores if s.diverged),
        "tool_results": sum(s.tool_results for s in scores),
        "success_rate": successes / count if count else None,
        "agreement": sum(1 for s in scored if s.agrees) / count if count else None,
        "pass_hat_k": {str(k): value for k, value in pass_k.items()},
        "pass_hat_k_tasks": len({s.task_id for s in whole_tasks}),
        "intervals": figure_intervals(scored, whole_tasks, list(pass_k)),
        "tasks": len({s.task_id for s in scores}),
        "disagreements": [
            {
                "task_id": s.task_id,
                "trial": s.trial,
                "recorded_reward": s.recorded_reward,
                "reward": s.reward,
                "failed": list(s.result.failed) if s.result else ["no trajectory"],
                "diverged": s.diverged,
            }
            for s in scored
            if not s.agrees
        ],
        "left_out": sum(1 for s in scores if s.left_out),
        "infra_error_count": sum(1 for s in scores if s.left_out == "infrastructure_error"),
        "left_out_runs": [
            {
                "task_id": s.task_id,
                "trial": s.trial,
                "cause": s.left_out,
                "detail": getattr(s.result, "judge_failure", "") or s.left_out,
            }
            for s in scores
            if s.left_out
        ],
        "foreign": sum(1 for s in scores if s.foreign_tools),
        "foreign_runs": [
            {
                "task_id": s.task_id,
                "trial": s.trial,
                "tools": list(s.foreign_tools),
                "reward": s.reward,
            }
            for s in scores
            if s.foreign_tools
        ],
        "divergences": [
            {
                "task_id": s.task_id,
                "trial": s.trial,
                "recorded_reward": s.recorded_reward,
                "reward": s.reward,
                "tool_results": s.tool_results,
                "diverged_results": s.diverged_results,
                "first": s.first_divergence.to_dict() if s.first_divergence else None,
                "causes": s.divergence_causes,
            }
            for s in scores
            if s.diverged
        ],
        "divergence_causes": divergence_causes(scores),
    }
