"""Benchmark the episode reward against a plain re-implementation of tau-bench's method.

Per domain, every task of the split is played ``--episodes-per-task`` times
(a GRPO group): even episodes play the ground-truth actions, odd ones drop the
last action, so both rewards occur. Each episode is scored two ways in one run:

- reference (tau-bench's method): load the data from disk at reset, run the
  actions on it, then at done hash everything, reload the data, replay the
  ground truth and hash everything again;
- this package: fork the shared data at reset (copy-on-write), run the
  actions, then hash incrementally and look up the ground-truth hash (replayed
  once per task).

Rewards and both hashes must be identical for every episode (the script
exits 1 otherwise). Memory: 256 live envs after their episodes, against the
reference's private copy of the data per episode.

Usage:
    python scripts/benchmarks/tau_bench_bench.py --backend tau_bench --domains airline retail
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from tau_bench_env.backends import BACKENDS, Domain, load_domain
from tau_bench_env.data_model.episode_data import clone
from tau_bench_env.data_model.hashing import data_hash
from tau_bench_env.data_model.tasks import RESPOND, Action, Task
from tau_bench_env.episode.env import TauBenchEnv
from tau_bench_env.episode.episode import Episode
from tau_bench_env.episode.reward import GROUND_TRUTH, check_outputs


def disk_loader(domain: Domain) -> Callable[[], dict[str, Any]]:
    """The backend's own way of loading fresh data from disk."""
    if domain.backend == "tau_bench":
        from importlib import import_module

        return import_module(f"tau_bench.envs.{domain.name}.data").load_data
    path = (
        resources.files(f"tau2_{domain.name}_mcp")
        / "data"
        / "tau2"
        / "domains"
        / domain.name
        / "db.json"
    )
    return lambda: json.loads(path.read_text(encoding="utf-8"))


def plain_run(domain: Domain, data: dict[str, Any], action: Action) -> None:
    """Run a tool on plain dict data as tau-bench's ``Env.step`` does (errors ignored)."""
    if action.name in domain.tools:
        try:
            domain.tools[action.name](data, clone(dict(action.kwargs)))
        except Exception:  # noqa: BLE001 - tau-bench turns any tool error into an observation
            pass


def reference_episode(
    domain: Domain, load: Callable[[], dict], task: Task, actions: Sequence[Action]
) -> tuple[float, str, str, dict[str, float]]:
    """tau-bench's method on plain dicts: (reward, agent hash, gt hash, seconds per phase)."""
    times: dict[str, float] = {}
    start = time.perf_counter()
    data = load()
    times["reset"] = time.perf_counter() - start
    start = time.perf_counter()
    for action in actions:
        plain_run(domain, data, action)
    times["actions"] = time.perf_counter() - start
    start = time.perf_counter()
    agent_hash = data_hash(data)
    gt_data = load()
    for action in task.actions:
        if action.name != RESPOND and action.name not in domain.terminate_tools:
            plain_run(domain, gt_data, action)
    gt_hash = data_hash(gt_data)
    responses = [str(a.kwargs["content"]) for a in actions if a.name == RESPOND]
    outputs_ok = all(check_outputs(task.outputs, responses).values())
    times["reward"] = time.perf_counter() - start
    return (1.0 if agent_hash == gt_hash and outputs_ok else 0.0), agent_hash, gt_hash, times


def our_episode(
    domain: Domain, task: Task, actions: Sequence[Action]
) -> tuple[float, str, str, dict[str, float]]:
    """This package's method: (reward, agent hash, gt hash, seconds per phase)."""
    times: dict[str, float] = {}
    start = time.perf_counter()
    episode = Episode(domain, task)
    times["reset"] = time.perf_counter() - start
    start = time.perf_counter()
    for action in actions:
        if action.name == RESPOND:
            episode.respond(str(action.kwargs["content"]))
        else:
            episode.call_tool(action.name, action.kwargs)
    times["actions"] = time.perf_counter() - start
    start = time.perf_counter()
    result = episode.score()
    times["reward"] = time.perf_counter() - start
    return result.reward, result.data_hash, result.gt_data_hash, times


def episode_actions(task: Task, number: int) -> list[Action]:
    """Even episodes: the ground truth and a reply with the outputs; odd: minus the last action."""
    actions = list(task.actions) if number % 2 == 0 else list(task.actions[:-1])
    return [*actions, Action(RESPOND, {"content": "Done: " + ", ".join(task.outputs)})]


def time_domain(domain: Domain, split: str, per_task: int) -> dict[str, Any]:
    """Per-episode seconds of both methods and the equality check."""
    load = disk_loader(domain)
    GROUND_TRUTH.clear()
    totals = {
        "reference": {"reset": 0.0, "actions": 0.0, "reward": 0.0},
        "ours": {"reset": 0.0, "actions": 0.0, "reward": 0.0},
    }
    episodes = mismatches = successes = 0
    for task in domain.tasks(split):
        for number in range(per_task):
            actions = episode_actions(task, number)
            ref = reference_episode(domain, load, task, actions)
            ours = our_episode(domain, task, actions)
            for name, result in (("reference", ref), ("ours", ours)):
                for phase, seconds in result[3].items():
                    totals[name][phase] += seconds
            mismatches += ref[:3] != ours[:3]
            successes += ours[0] == 1.0
            episodes += 1
    per_episode = {
        name: {phase: s / episodes for phase, s in phases.items()}
        for name, phases in totals.items()
    }
    return {
        "episodes": episodes,
        "successes": successes,
        "mismatches": mismatches,
        "per_episode_s": per_episode,
    }


def memory_domain(domain: Domain, split: str, envs: int) -> dict[str, float]:
    """Bytes per episode: ``envs`` live envs after their episodes, vs private data copies."""
    tasks = domain.tasks(split)
    load = disk_loader(domain)
    GROUND_TRUTH.clear()
    gc.collect()
    tracemalloc.start()
    base_current = tracemalloc.get_traced_memory()[0]
    live = []
    for number in range(envs):
        task = tasks[number % len(tasks)]
        env = TauBenchEnv(
            {
                "backend": domain.backend,
                "domain": domain.name,
                "split": split,
                "user": {"kind": "replay"},
            },
            {"split": split, "task_index": number % len(tasks), "user_turns": ["hi"]},
        )
        env.init([])
        for action in task.actions:
            env.step(json.dumps({"name": action.name, "arguments": dict(action.kwargs)}))
            if env.result is not None:
                break
        live.append(env)
    ours = (tracemalloc.get_traced_memory()[0] - base_current) / envs
    del live
    gc.collect()
    copies = 8
    base_current = tracemalloc.get_traced_memory()[0]
    private = [load() for _ in range(copies)]
    reference = (tracemalloc.get_traced_memory()[0] - base_current) / copies
    del private
    tracemalloc.stop()
    return {"ours_bytes": ours, "reference_bytes": reference}


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of the results."""
    columns = [
        "domain",
        "episodes",
        "rewards = 1",
        "identical rewards and hashes",
        "reference reward ms/ep",
        "ours reward ms/ep",
        "speedup (reward)",
        "reference reset+reward ms/ep",
        "ours reset+reward ms/ep",
        "speedup (reset+reward)",
        "actions ms/ep ref / ours",
        "memory/ep, 256 envs: ours",
        "memory/ep: reference",
    ]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        ref, ours = row["per_episode_s"]["reference"], row["per_episode_s"]["ours"]
        ref_total, ours_total = ref["reset"] + ref["reward"], ours["reset"] + ours["reward"]
        lines.append(
            f"| {row['backend']}:{row['domain']} | {row['episodes']} | {row['successes']} | "
            f"{'yes' if row['mismatches'] == 0 else 'NO (' + str(row['mismatches']) + ')'} | "
            f"{ref['reward'] * 1e3:.1f} | {ours['reward'] * 1e3:.2f} | "
            f"{ref['reward'] / ours['reward']:.0f}x | "
            f"{ref_total * 1e3:.1f} | {ours_total * 1e3:.2f} | {ref_total / ours_total:.0f}x | "
            f"{ref['actions'] * 1e3:.2f} / {ours['actions'] * 1e3:.2f} | "
            f"{row['memory']['ours_bytes'] / 1024:.0f} KiB | "
            f"{row['memory']['reference_bytes'] / 2**20:.1f} MiB |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="tau2", choices=sorted(BACKENDS))
    parser.add_argument("--domains", nargs="+", default=["airline", "retail"])
    parser.add_argument("--split", default="test")
    parser.add_argument("--episodes-per-task", type=int, default=8)
    parser.add_argument(
        "--envs", type=int, default=256, help="live envs for the memory measurement"
    )
    parser.add_argument("--json", action="store_true", help="print the raw numbers as JSON too")
    args = parser.parse_args(argv)
    rows = []
    for name in args.domains:
        domain = load_domain(args.backend, name)
        row = {
            "backend": args.backend,
            "domain": name,
            **time_domain(domain, args.split, args.episodes_per_task),
        }
        row["memory"] = memory_domain(domain, args.split, args.envs)
        rows.append(row)
    print(table(rows))  # noqa: T201 - script output
    if args.json:
        print(json.dumps(rows, indent=1))  # noqa: T201 - script output
    return 1 if any(row["mismatches"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
