"""The end of an evaluation: its summary (:func:`summarize_eval`: pass^k with intervals over
the judged runs, errors counted apart by kind) and the pass^k plot (:func:`plot_pass_hat_k`).
The episodes and the results file are :mod:`~tau_bench_env.evaluation.evaluate`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tau_bench_env.rescoring.figures import figure_intervals, pass_hat_k
from tau_bench_env.rescoring.run_score import SUCCESS_TOLERANCE, RunScore


def summarize_eval(
    runs: Iterable[Mapping[str, Any]],
    errors: Iterable[Mapping[str, Any]],
    *,
    tasks: Sequence[int],
    trials: int,
) -> dict[str, Any]:
    """The summary of an evaluation (JSON-able).

    Keys: ``episodes`` (judged), ``errors`` (count), ``missing`` (pairs
    neither judged nor failed), ``success_rate`` (over judged episodes; None
    when none was judged, not a 0.0 that would read as a judgement),
    ``pass_hat_k`` (tau-bench's unbiased estimator, over the tasks whose
    ``trials`` trials were all judged: ``complete_tasks``), ``intervals`` (95 %
    per-task bootstrap intervals of both, :func:`figure_intervals`), ``per_task``,
    ``failed_checks`` (how many judged episodes failed each check:
    ``data_hash`` = actions, ``outputs``, ``truncated``), ``tokens`` and
    ``wall_s`` (per episode), ``error_list`` and ``episode_list``.
    """
    runs = list(runs)
    errors = list(errors)
    success = [abs(float(r["reward"]) - 1.0) <= SUCCESS_TOLERANCE for r in runs]
    per_task: dict[int, dict[str, Any]] = {
        t: {"task_key": None, "rewards": [None] * trials, "errors": 0} for t in tasks
    }
    for run in runs:
        entry = per_task.setdefault(
            int(run["task_id"]), {"task_key": None, "rewards": [None] * trials, "errors": 0}
        )
        entry["task_key"] = run["info"].get("task_key")
        if int(run["trial"]) < trials:
            entry["rewards"][int(run["trial"])] = float(run["reward"])
    for error in errors:
        entry = per_task.setdefault(
            int(error["task_id"]), {"task_key": None, "rewards": [None] * trials, "errors": 0}
        )
        entry["task_key"] = error["info"].get("task_key")
        entry["errors"] += 1
    complete = [
        task for task, entry in per_task.items() if all(r is not None for r in entry["rewards"])
    ]
    scores = [
        RunScore(task, trial, reward, reward, None)
        for task in complete
        for trial, reward in enumerate(per_task[task]["rewards"])
    ]
    judged = [
        RunScore(int(r["task_id"]), int(r["trial"]), 0.0, float(r["reward"]), None) for r in runs
    ]
    pass_k = pass_hat_k(scores)
    failed_checks = {"data_hash": 0, "outputs": 0, "truncated": 0}
    episode_list = []
    for run in runs:
        failed = list((run["info"].get("reward_info") or {}).get("failed") or [])
        for check in failed:
            failed_checks[check] = failed_checks.get(check, 0) + 1
        episode_list.append(
            {
                "task_id": run["task_id"],
                "trial": run["trial"],
                "reward": run["reward"],
                "failed": failed,
                "turns": (run["info"].get("metrics") or {}).get("turns"),
                "prompt_tokens": run["info"]["tokens"]["prompt"],
                "completion_tokens": run["info"]["tokens"]["completion"],
                "wall_s": run["info"]["wall_s"],
            }
        )
    walls = [run["info"]["wall_s"] for run in runs]
    prompt = [run["info"]["tokens"]["prompt"] for run in runs]
    completion = [run["info"]["tokens"]["completion"] for run in runs]
    judged_pairs = {(int(r["task_id"]), int(r["trial"])) for r in runs}
    error_pairs = {(int(e["task_id"]), int(e["trial"])) for e in errors} - judged_pairs

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    return {
        "episodes": len(runs),
        "errors": len(error_pairs),
        "missing": len(tasks) * trials - len(judged_pairs) - len(error_pairs),
        "success_rate": mean([1.0 if s else 0.0 for s in success]) if runs else None,
        "complete_tasks": len(complete),
        "pass_hat_k": {str(k): v for k, v in pass_k.items()},
        "intervals": figure_intervals(judged, scores, list(pass_k)),
        "failed_checks": failed_checks,
        "tokens": {
            "prompt_per_episode": mean(prompt),
            "completion_per_episode": mean(completion),
            "total": sum(prompt) + sum(completion),
        },
        "wall_s": {"mean_per_episode": mean(walls), "max_per_episode": max(walls, default=0.0)},
        "per_task": {str(task): entry for task, entry in sorted(per_task.items())},
        "error_list": [
            {"task_id": e["task_id"], "trial": e["trial"], **e["error"]}
            for e in errors
            if (int(e["task_id"]), int(e["trial"])) in error_pairs
        ],
        "episode_list": episode_list,
    }


def plot_pass_hat_k(summary: Mapping[str, Any], path: Path, *, title: str) -> Path:
    """Save a PNG of pass^k against k (matplotlib, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    points = sorted((int(k), float(v)) for k, v in summary["pass_hat_k"].items())
    figure, axes = pyplot.subplots(figsize=(5, 3.5), dpi=100)
    if points:
        axes.plot([k for k, _ in points], [v for _, v in points], marker="o")
        axes.set_xticks([k for k, _ in points])
    axes.set_ylim(0.0, 1.05)
    axes.set_xlabel("k (trials that must all succeed)")
    axes.set_ylabel("pass^k")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
    return path
