"""Benchmark: the makespan of GRPO steps, what a trainer waits for, by each way of scoring them.

A GRPO step needs every reward of its batch before it can go on: the figure that
counts is the batch's makespan (from handing the batch over to its last
reward), not an item's latency. One run scores the same batches, side by
side and in turns (so that every method shares the machine's load), with:

- ``loop``: an in-process loop over ``RewardMix.score`` (TRL, VLM-R1);
- ``threads``: SkyRL's own path: ``SkyRLRewardEnv.step`` (``in_process``)
  called from a ``ThreadPoolExecutor(8)``, one env per sample, as SkyRL's
  generator does;
- ``processes``: ``multiprocessing.Pool(workers).map`` over ``RewardMix.score``;
- ``pool``: :class:`~skyrl_rewards.pool.reward_pool.RewardPool` with ``workers``
  workers on the SHIPPED DEFAULTS (``configs/pool.yaml`` of the code measured),
  ``pool.score(batch)``; each ``--variant KEY=VALUE[,KEY=VALUE]`` adds a pool
  with those settings changed, in the same turns.

The mix is the shipped one (accuracy + format). Batches are accuracy-heavy GRPO
steps (MATH-style LaTeX answers, each group repeating 2-3 distinct answers; see
``bench_pool.accuracy_step``) of each ``--shapes`` ITEMSxGROUP, hang-free and with
``--hangs`` answers that make math-verify run for ever (``bench_hangs.hang_answers``)
at seeded positions. Every method gets the same layout in a round (the same
hang positions); the in-process methods (one process) each get their own draw of
the answers, so that none profits from a cache another one warmed, and the
pools (each its own cache) share one; every round draws afresh.

The pools' workers share Ray's CPUs (``num_cpus_per_worker`` is set so that
every pool of the run fits at once: a Ray reservation, not a CPU pin; idle
pools cost no CPU).

Per shape and method: the median makespan over rounds, hang-free and with
hangs; the speed-up over the loop (median of the per-round ratios); and for
the pool, the slot-seconds a hang cost: (makespan with hangs - hang-free) x
workers / hangs, which stays at most a math limit (``math_timeout_s``, 3 s)
when a hang costs one slot its limit.

Run: ``python scripts/benchmarks/bench_makespan.py`` (a few minutes on 2 cores);
``--compare REV ...`` runs the pool of older commits (their own shipped
defaults) in turns with this checkout's, on the same batches.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import benchlib
from bench_hangs import hang_answers
from bench_pool import accuracy_step

PEERS = ("loop", "threads", "processes")
SKYRL_THREADS = 8
"""Threads of SkyRL's env executor (``generator.max_env_workers`` in its examples)."""
DEFAULTS_FILE = "configs/pool.yaml"
COUNTERS = (
    "worker_calls",
    "cache_hits",
    "timeouts",
    "deferred",
    "taken_over",
    "math_waits",
    "worker_restarts",
    "isolations",
)
"""Pool counters reported after the run."""
Sample = dict[str, Any]


def parse_shape(text: str) -> tuple[int, int]:
    """``"1024x16"`` -> (1024 items, groups of 16)."""
    items, _, group = text.partition("x")
    return int(items), int(group or 8)


def batch(
    shape: tuple[int, int], hangs: int, *, layout_seed: int, draw_seed: int | str, hang_offset: int
) -> list[Sample]:
    """A GRPO step of ``shape``: ``hangs`` samples replaced by hanging answers.

    ``layout_seed`` places the hangs (the same for every method of a round);
    ``draw_seed`` draws the answers; ``hang_offset`` picks distinct hanging
    answers (the pool remembers inputs that timed out).
    """
    items, group = shape
    samples = accuracy_step(random.Random(draw_seed), -(-items // group), group)[:items]
    positions = random.Random(layout_seed).sample(range(items), hangs)
    for position, answer in zip(
        positions, hang_answers(hang_offset + hangs)[hang_offset:], strict=True
    ):
        samples[position] = {
            "completion": f"<think>Let me work it out.</think> <answer>{answer}</answer>",
            "solution": "<answer>$1$</answer>",
        }
    return samples


def shipped_config(tree: Path) -> dict[str, Any]:
    """``configs/pool.yaml`` of ``tree`` (the code measured)."""
    import yaml

    return yaml.safe_load((tree / DEFAULTS_FILE).read_text())


_PROCESS_MIX: Any = None


def _process_init(rewards: Mapping[str, Any]) -> None:
    global _PROCESS_MIX
    from skyrl_rewards.rewards.mix import RewardMix

    _PROCESS_MIX = RewardMix.from_config(rewards)


def _process_score(sample: Sample) -> float:
    return _PROCESS_MIX.score(sample).total


def _threads_runner(rewards: Mapping[str, Any], stack: ExitStack) -> Callable[[list[Sample]], Any]:
    from skyrl_rewards.train.env import SkyRLRewardEnv

    executor = stack.enter_context(ThreadPoolExecutor(SKYRL_THREADS))
    config = {"in_process": True, "rewards": dict(rewards)}

    def step(sample: Sample) -> float:
        env = SkyRLRewardEnv(
            env_config=config,
            extras={"reward_spec": {"ground_truth": sample["solution"]}},
        )
        return env.step(sample["completion"])["reward"]

    return lambda samples: list(executor.map(step, samples))


def run_side(
    *,
    shapes: Sequence[tuple[int, int]],
    hangs: int,
    rounds: int,
    num_workers: int,
    seed: int,
    engines: Sequence[str],
    variants: Sequence[str],
) -> dict[str, Any]:
    """Time every engine on every shape, hang-free and with hangs, in turns, ``rounds`` times.

    Returns ``{"runs": [{shape, hangs, round, load, <engine>: wall_s, ...}], "settings",
    "counters", ...}``; pool engines are named ``pool`` (shipped defaults) and
    ``pool <variant>``.
    """
    import skyrl_rewards
    from skyrl_rewards.pool.reward_pool import RewardPool
    from skyrl_rewards.rewards.mix import RewardMix

    tree = Path(skyrl_rewards.__file__).resolve().parent.parent
    shipped = shipped_config(tree)
    rewards = shipped["rewards"]
    names = ["pool", *(f"pool {v}" for v in variants)] if "pool" in engines else []
    runners: dict[str, Callable[[list[Sample]], Any]] = {}
    pools: dict[str, Any] = {}
    settings: dict[str, dict[str, Any]] = {}
    # a draw no round makes (rounds draw from non-negative seeds; Random(-n) is Random(n))
    warm = batch((64, 8), 0, layout_seed=0, draw_seed="warm-up", hang_offset=0)
    with ExitStack() as stack:
        mix = RewardMix.from_config(rewards)
        if "processes" in engines:  # forked before Ray starts in this process
            processes = stack.enter_context(
                multiprocessing.get_context("fork").Pool(
                    num_workers, initializer=_process_init, initargs=(rewards,)
                )
            )
            runners["processes"] = lambda s: processes.map(_process_score, s)
        if "loop" in engines:
            runners["loop"] = lambda s: [mix.score(sample) for sample in s]
        if "threads" in engines:
            runners["threads"] = _threads_runner(rewards, stack)
        cpus = min(1.0, (os.cpu_count() or 2) / (num_workers * max(1, len(names))))
        for index, name in enumerate(names):
            overrides = [f"num_cpus_per_worker={cpus:g}"]
            overrides += [] if name == "pool" else name.split(" ", 1)[1].split(",")
            config = {
                **shipped,
                "name": f"bench_makespan_{os.getpid()}_{index}",
                "num_workers": num_workers,
                "alarm_min_items": 10**9,
            }
            pools[name] = stack.enter_context(RewardPool.from_config(config, overrides))
            runners[name] = pools[name].score
            settings[name] = {
                key: getattr(pools[name].config, key, None)
                for key in ("first_pass_s", "batch_size")
            }
        for runner in runners.values():
            runner(warm)
        order = [e for e in engines if e != "pool"] + names
        runs = []
        for round_ in range(rounds):
            for s, shape in enumerate(shapes):
                for with_hangs in (0, hangs) if hangs else (0,):
                    layout = seed * 1_000_003 + round_ * 1000 + s * 10 + with_hangs
                    row: dict[str, Any] = {
                        "shape": f"{shape[0]}x{shape[1]}",
                        "hangs": with_hangs,
                        "round": round_,
                        "load": benchlib.load(),
                    }
                    for engine in order if round_ % 2 == 0 else order[::-1]:
                        # pools (each its own cache) score the same draw; the in-process
                        # engines (one process) each another one
                        e = order.index("pool" if engine in names else engine)
                        samples = batch(
                            shape,
                            with_hangs,
                            layout_seed=layout,
                            draw_seed=layout * 31 + e,
                            hang_offset=((round_ * len(shapes) + s) * len(order) + e) * hangs,
                        )
                        _, row[engine] = benchlib.timed(runners[engine], samples)
                    benchlib.progress(json.dumps({k: _round(v) for k, v in row.items()}))
                    runs.append(row)
        counters = {
            name: {k: v for k, v in pool.metrics().items() if k in COUNTERS}
            for name, pool in pools.items()
        }
    return {
        "runs": runs,
        "workers": num_workers,
        "tree": str(tree),
        "settings": settings,
        "counters": counters,
    }


def _round(value: Any) -> Any:
    return round(value, 3) if isinstance(value, float) else value


def figures(runs: Sequence[Mapping[str, Any]], workers: int, hangs: int) -> list[dict[str, Any]]:
    """Per shape and engine: median makespans (hang-free, with hangs), speed-up over the loop,
    and the slot-seconds one hang cost (pools)."""
    out = []
    engines = [k for k in runs[0] if k not in ("shape", "hangs", "round", "load")]
    for shape in dict.fromkeys(r["shape"] for r in runs):
        free = [r for r in runs if r["shape"] == shape and r["hangs"] == 0]
        hung = [r for r in runs if r["shape"] == shape and r["hangs"]]
        for engine in engines:
            row: dict[str, Any] = {"shape": shape, "engine": engine}
            row["free_s"] = benchlib.median(r[engine] for r in free)
            if "loop" in free[0]:
                row["speedup"] = benchlib.median((r["loop"] / r[engine] for r in free), 2)
            if hung:
                row["hangs_s"] = benchlib.median(r[engine] for r in hung)
                row["load"] = benchlib.median((r["load"] for r in free + hung), 1)
                if engine.startswith("pool"):
                    row["slot_s_per_hang"] = round(
                        (row["hangs_s"] - row["free_s"]) * workers / hangs, 1
                    )
            out.append(row)
    return out


def format_table(rows: Sequence[Mapping[str, Any]], workers: int, hangs: int) -> str:
    """The figures as a Markdown table."""
    lines = [
        f"| shape (items x group) | method | hang-free makespan s | speed-up over loop "
        f"| with {hangs} hangs s | hang cost, slot-s per hang | load |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    names = {
        "loop": "in-process loop",
        "threads": f"SkyRL's path: env.step in ThreadPoolExecutor({SKYRL_THREADS})",
        "processes": f"multiprocessing.Pool({workers})",
        "pool": "RewardPool, shipped defaults",
    }
    for r in rows:
        name = names.get(r["engine"], f"RewardPool, {r['engine'].removeprefix('pool ')}")
        speedup = f"{r['speedup']}x" if "speedup" in r else "-"
        lines.append(
            f"| {r['shape']} | {name} | {r['free_s']} | {speedup} "
            f"| {r.get('hangs_s', '-')} | {r.get('slot_s_per_hang', '-')} | {r.get('load', '-')} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the benchmark, print the table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["256x8", "1024x16"], metavar="NxG")
    parser.add_argument("--hangs", type=int, default=4, help="hanging answers per batch (0: none)")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds (medians)")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engines", nargs="+", default=[*PEERS, "pool"], choices=[*PEERS, "pool"])
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="another pool with these settings, in the same turns (repeatable)",
    )
    parser.add_argument("--json", type=Path, help="also write the report here")
    benchlib.add_compare_argument(parser, "the pool on its shipped defaults")
    args = parser.parse_args(argv)
    shapes = [parse_shape(s) for s in args.shapes]
    side = {
        "shapes": shapes,
        "hangs": args.hangs,
        "rounds": args.rounds,
        "num_workers": args.num_workers,
        "seed": args.seed,
    }
    if args.side:
        benchlib.print_side(run_side(**side, engines=args.engines, variants=args.variant))
        return 0
    command = " ".join(["python", "scripts/benchmarks/bench_makespan.py", *(argv or sys.argv[1:])])
    if not args.compare:
        report = run_side(**side, engines=args.engines, variants=args.variant)
        report["figures"] = figures(report["runs"], args.num_workers, args.hangs)
        print(f"{command}\nload (1 min) at the end: {benchlib.load()}\n")
        print(format_table(report["figures"], args.num_workers, args.hangs))
        print(f"\npool counters: {report['counters']}")
    else:
        revisions = [*args.compare, benchlib.THIS_CHECKOUT]
        results = benchlib.compare_sides(
            Path(__file__).resolve(),
            revisions,
            lambda repeat: [
                "--shapes",
                *args.shapes,
                f"--hangs={args.hangs}",
                "--rounds=1",
                f"--num-workers={args.num_workers}",
                f"--seed={args.seed + repeat}",
                "--engines",
                "loop",
                "pool",
            ],
            repeats=args.rounds,
            timeout_s=1800,
            on_result=lambda rev, repeat, _: benchlib.progress(f"round {repeat + 1}: {rev} done"),
        )
        report = {"sides": {}}
        print(f"{command}\nload (1 min) at the end: {benchlib.load()}")
        for rev, sides in results.items():
            runs = [run for side_result in sides for run in side_result["runs"]]
            report["sides"][rev] = {
                "runs": runs,
                "settings": sides[0]["settings"],
                "counters": [side_result["counters"] for side_result in sides],
            }
            report["sides"][rev]["figures"] = figures(runs, args.num_workers, args.hangs)
            print(
                f"\n**{rev}** (pool settings: {sides[0]['settings']}; counters per side run: "
                f"{report['sides'][rev]['counters']})\n"
            )
            print(format_table(report["sides"][rev]["figures"], args.num_workers, args.hangs))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
