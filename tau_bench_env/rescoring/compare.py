"""``tau-bench-env compare A B``: whether two results files differ beyond noise.

Each file gives, per task, the rewards its runs recorded (:func:`task_rewards`; a
run of ``eval`` is keyed by the task's own id, ``info.task_key``, so it pairs with a
tau2 file's run of the same task):
tau-bench's list of runs (what tau-bench's ``run.py`` and ``eval``'s
``results.json`` hold), tau2's results object (single file or "dir" format,
read by :func:`~tau_bench_env.rescoring.results_file.load_results`), or the
``summary.json`` an ``eval`` writes (its ``per_task`` rewards). Over the tasks
both files have, the figure is the mean per-task difference of pass^k (A minus
B); its interval is a paired bootstrap over those tasks (the same draws for
both files, so a task both always pass or always fail adds no noise), and the
verdict is "differ beyond noise" when the interval leaves out 0, else
"within noise". A run succeeds when its reward is 1.0.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from tau_bench_env.rescoring.intervals import (
    LEVEL,
    METHOD,
    SEED,
    bootstrap_means,
    percentile_interval,
    task_pass_hat_k,
)
from tau_bench_env.rescoring.run_score import SUCCESS_TOLERANCE

BEYOND = "differ beyond noise"
WITHIN = "within noise"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def task_rewards(raw: Any, where: str) -> dict[str, list[float]]:
    """Each task's recorded rewards in a parsed results file (task ids as strings).

    Raises ``ValueError`` naming ``where`` (the file) and the field when the
    file is none of the formats in the module docstring or a run lacks its
    task id or reward.
    """
    found: dict[str, list[float]] = {}
    if isinstance(raw, Mapping) and "simulations" in raw:
        runs, field, reward_of = raw["simulations"], "simulations", _tau2_reward
    elif isinstance(raw, Mapping) and "per_task" in raw:
        per_task = raw["per_task"]
        if not isinstance(per_task, Mapping):
            raise ValueError(f"{where}: per_task must be an object of task id -> entry")
        for task, entry in per_task.items():
            rewards = entry.get("rewards") if isinstance(entry, Mapping) else None
            if not isinstance(rewards, list) or not all(r is None or _number(r) for r in rewards):
                raise ValueError(f"{where}: per_task[{task!r}].rewards must be a list of numbers")
            key = entry.get("task_key")
            found[str(key) if key is not None else str(task)] = [
                float(r) for r in rewards if r is not None
            ]
        return {task: rewards for task, rewards in found.items() if rewards}
    elif isinstance(raw, list):
        runs, field, reward_of = raw, "runs", _tau_bench_reward
    else:
        raise ValueError(
            f"{where}: not a results file: expected tau-bench's list of runs, tau2's results "
            "object (with 'simulations') or eval's summary.json (with 'per_task')"
        )
    if not isinstance(runs, list):
        raise ValueError(f"{where}: {field} must be a list")
    for index, run in enumerate(runs):
        task = _task_key(run) if isinstance(run, Mapping) else None
        if not isinstance(task, str) and not _number(task):
            raise ValueError(f"{where}: {field}[{index}].task_id must be a string or a number")
        reward = reward_of(run)
        if not _number(reward):
            name = "reward_info.reward" if field == "simulations" else "reward"
            raise ValueError(f"{where}: {field}[{index}].{name} must be a number")
        found.setdefault(str(task), []).append(float(reward))
    return found


def _task_key(run: Mapping[str, Any]) -> Any:
    """A run's task: ``info.task_key`` where ``eval`` recorded it (the task's own id, as a
    tau2 file names it), else ``task_id`` (an index into the split in tau-bench's runs)."""
    info = run.get("info")
    key = info.get("task_key") if isinstance(info, Mapping) else None
    return key if isinstance(key, str) and key else run.get("task_id")


def _tau2_reward(run: Mapping[str, Any]) -> Any:
    info = run.get("reward_info")
    return info.get("reward") if isinstance(info, Mapping) else None


def _tau_bench_reward(run: Mapping[str, Any]) -> Any:
    return run.get("reward")


def _successes(rewards: Sequence[float]) -> int:
    return sum(1 for r in rewards if abs(r - 1.0) <= SUCCESS_TOLERANCE)


def compare(a: Mapping[str, list[float]], b: Mapping[str, list[float]]) -> dict[str, Any]:
    """The paired comparison of two files' :func:`task_rewards` (JSON-able).

    ``common``, ``only_a``, ``only_b``: the task ids; ``pass_hat_k``: for each
    k up to the fewest runs any common task has in either file, ``a`` and
    ``b`` (pass^k over the common tasks), ``difference`` (a - b), its
    ``interval`` and ``verdict``; ``method``, ``level``. Raises ``ValueError``
    when the files have no task in common.

    >>> found = compare({"1": [1.0], "2": [0.0]}, {"1": [1.0], "2": [0.0], "3": [1.0]})
    >>> found["pass_hat_k"]["1"], found["only_b"]
    ({'a': 0.5, 'b': 0.5, 'difference': 0.0, 'interval': [0.0, 0.0], 'verdict': 'within noise'}, ['3'])
    """
    common = sorted(set(a) & set(b), key=_task_order)
    if not common:
        raise ValueError(
            "the files have no task in common: compare runs of the same domain and task set"
        )
    top = min(min(len(a[t]), len(b[t])) for t in common)
    ks = list(range(1, top + 1))
    per_k = {
        k: (
            [task_pass_hat_k(len(a[t]), _successes(a[t]), k) for t in common],
            [task_pass_hat_k(len(b[t]), _successes(b[t]), k) for t in common],
        )
        for k in ks
    }
    differences = [[x - y for x, y in zip(*per_k[k], strict=True)] for k in ks]
    draws = bootstrap_means(differences, [1.0] * len(common), random.Random(SEED))
    figures = {}
    for k, diffs, drawn in zip(ks, differences, draws, strict=True):
        low, high = percentile_interval(drawn)
        figures[str(k)] = {
            "a": sum(per_k[k][0]) / len(common),
            "b": sum(per_k[k][1]) / len(common),
            "difference": sum(diffs) / len(common),
            "interval": [low, high],
            "verdict": BEYOND if low > 0.0 or high < 0.0 else WITHIN,
        }
    return {
        "method": f"paired {METHOD} over the common tasks",
        "level": LEVEL,
        "common": common,
        "only_a": sorted(set(a) - set(b), key=_task_order),
        "only_b": sorted(set(b) - set(a), key=_task_order),
        "pass_hat_k": figures,
    }


def _task_order(task: str) -> tuple[int, int | str]:
    """Numeric task ids in number order, before the others in text order."""
    return (0, int(task)) if task.isdigit() else (1, task)


def _ids(tasks: Sequence[str], shown: int = 30) -> str:
    more = f" ... ({len(tasks) - shown} more)" if len(tasks) > shown else ""
    return (" ".join(tasks[:shown]) + more) if tasks else "none"


def compare_lines(found: Mapping[str, Any], a: str, b: str) -> list[str]:
    """The printed comparison: the files, the tasks compared and left out, one line per k."""
    lines = [
        f"A: {a}",
        f"B: {b}",
        f"tasks compared (in both): {len(found['common'])}: {_ids(found['common'])}",
        f"only in A: {len(found['only_a'])}: {_ids(found['only_a'])}",
        f"only in B: {len(found['only_b'])}: {_ids(found['only_b'])}",
    ]
    for k, figure in found["pass_hat_k"].items():
        low, high = figure["interval"]
        lines.append(
            f"pass^{k}: A {figure['a']:.4f}  B {figure['b']:.4f}  A-B {figure['difference']:+.4f} "
            f"[{low:+.4f}, {high:+.4f}]: {figure['verdict']}"
        )
    lines.append(
        f"intervals: {found['level']:.0%} confidence, {found['method']} "
        "(the verdict is 'differ beyond noise' when the interval leaves out 0)"
    )
    return lines
