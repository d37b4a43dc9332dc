"""Benchmark: the reward pool against the usual ways of scoring GRPO rollouts.

One run scores the same workloads with four engines, side by side:

- ``loop``: a plain in-process loop over ``RewardMix.score`` (what TRL and VLM-R1 do);
- ``threads``: a ``ThreadPoolExecutor`` over the same function (SkyRL's env executor);
- ``processes``: a ``ProcessPoolExecutor`` whose processes each build the mix (verl's PRIME-style manager);
- ``pool``: :class:`skyrl_rewards.pool.reward_pool.RewardPool` with ``num_workers`` Ray workers.

Workloads:

- ``mixed``: GRPO steps of ``prompts`` x ``group_size`` samples: LaTeX and plain math, multiple
  choice, REC boxes on real PNG files (drawn with Pillow into a temporary folder) and detection
  JSON; each group repeats answers the way sampled groups do. Mix: accuracy + iou + format. Every
  engine scores every row with the same mix (iou reports ``error`` on rows without an image, in
  every engine alike). Accuracy (math-verify) dominates the cost.
- ``format``: ``format_items`` samples scored with the format reward alone (microseconds each):
  the pool's overhead against the loop.

Per item latency is the time from the moment a step is handed to the engine to the moment that
item's result is available; throughput is items per second of wall time. Every engine is set up
and warmed up on a separate step first (the pool's start-up time is reported on its own), then
the engines are timed in turns for ``repeats`` rounds, so that they share the machine's load;
the table gives the median round's wall time, and p50/p99 over all rounds. Every engine scores
its own fresh data in every round (same generator, different draws): no engine profits from a
cache another engine or an earlier round warmed (the in-process engines share one process), and
the pool's cache helps only with the repeats inside a step, as in training. Without a running
Ray, the pool starts a local one on 127.0.0.1 for each workload (and stops it).

Run: ``python scripts/bench_pool.py`` (or ``skyrl-rewards bench``); ``--help`` for the options.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import tempfile
import time
import types
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ENGINES = ("loop", "threads", "processes", "pool")
MIXED_REWARDS = {
    "accuracy": {"weight": 1.0, "math_guard": "inline"},
    "iou": {"weight": 1.0},
    "format": {"weight": 0.5},
}
FORMAT_REWARDS = {"format": {"weight": 1.0}}
PATCH = 14
Sample = dict[str, Any]


# -- workload --------------------------------------------------------------------------------


def _latex_group(rng: random.Random, group_size: int) -> list[Sample]:
    a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7])
    kind = rng.choice(["surd", "poly", "fraction"])
    if kind == "surd":  # a fraction plus a root, written in several equal ways
        gold = f"\\frac{{{a}}}{{{b}}}+\\sqrt{{{c}}}"
        right = [
            gold,
            f"\\sqrt{{{c}}}+\\frac{{{a}}}{{{b}}}",
            f"\\frac{{{a}+{b}\\sqrt{{{c}}}}}{{{b}}}",
        ]
        wrong = [
            f"\\frac{{{a}}}{{{b}}}-\\sqrt{{{c}}}",
            f"\\frac{{{b}}}{{{a}}}+\\sqrt{{{c}}}",
            f"\\sqrt{{{c + 1}}}+\\frac{{{a}}}{{{b}}}",
        ]
    elif kind == "poly":  # a square, expanded or not
        gold = f"x^2+{2 * a}x+{a * a}"
        right = [gold, f"(x+{a})^2", f"(x+{a})(x+{a})"]
        wrong = [f"(x-{a})^2", f"x^2+{a * a}", f"(x+{a + 1})^2"]
    else:
        gold = f"\\frac{{{a}}}{{{b + a}}}"
        right = [gold, f"\\frac{{{2 * a}}}{{{2 * (b + a)}}}", f"{a}/{b + a}"]
        wrong = [f"\\frac{{{b + a}}}{{{a}}}", f"\\frac{{{a + 1}}}{{{b + a}}}", f"{a + b}"]
    return _group(
        rng,
        group_size,
        f"<answer>${gold}$</answer>",
        [f"${r}$" for r in right],
        [f"${w}$" for w in wrong],
        "default",
    )


def _plain_group(rng: random.Random, group_size: int) -> list[Sample]:
    x, y = rng.randint(10, 999), rng.randint(10, 999)
    gold = str(x * y)
    wrong = [str(x * y + 1), str(x + y), str(x * y - 10), f"{x} \\times {y} + 1"]
    return _group(
        rng,
        group_size,
        f"<answer>{gold}</answer>",
        [gold, f"{gold}.0", f"{x} \\times {y}"],
        wrong,
        "default",
    )


def _choice_group(rng: random.Random, group_size: int) -> list[Sample]:
    gold = rng.choice("ABCD")
    right = [gold, f"{gold}.", f"The answer is {gold}."]
    wrong = [c for c in "ABCD" if c != gold]
    return _group(rng, group_size, f"<answer>{gold}</answer>", right, wrong, "mcq")


def _group(
    rng: random.Random,
    group_size: int,
    solution: str,
    right: Sequence[str],
    wrong: Sequence[str],
    method: str,
) -> list[Sample]:
    # a sampled group repeats itself: three or four distinct answers among eight samples
    distinct = [rng.choice(right), rng.choice(right), rng.choice(wrong), rng.choice(wrong)]
    answers = [rng.choice(distinct[: rng.randint(3, 4)]) for _ in range(group_size)]
    return [
        {
            "completion": f"<think>Let me work it out.</think> <answer>{a}</answer>",
            "solution": solution,
            "accu_reward_method": method,
        }
        for a in answers
    ]


def _draw_image(
    folder: Path,
    name: str,
    rng: random.Random,
    boxes: Sequence[tuple[int, int, int, int]],
    size: tuple[int, int],
) -> str:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    for box in boxes:
        draw.rectangle(box, fill=tuple(rng.randint(0, 200) for _ in range(3)))
    path = folder / f"{name}.png"
    image.save(path)
    return str(path)


def _vision_group(
    rng: random.Random, group_size: int, folder: Path, name: str, detection: bool
) -> list[Sample]:
    width, height = rng.randint(320, 800), rng.randint(240, 600)
    grid_h, grid_w = max(2, round(height / 28) * 2), max(2, round(width / 28) * 2)
    scale_x, scale_y = grid_w * PATCH / width, grid_h * PATCH / height
    boxes = []
    for _ in range(2 if detection else 1):
        x1, y1 = rng.randint(0, width // 2), rng.randint(0, height // 2)
        boxes.append((x1, y1, x1 + rng.randint(40, width // 2), y1 + rng.randint(40, height // 2)))
    path = _draw_image(folder, name, rng, boxes, (width, height))

    def predicted(box: tuple[int, int, int, int], jitter: int) -> list[int]:
        return [
            round(box[0] * scale_x) + jitter,
            round(box[1] * scale_y) + jitter,
            round(box[2] * scale_x) - jitter,
            round(box[3] * scale_y) - jitter,
        ]

    jitters = [rng.choice([0, 0, 3, 8, 30]) for _ in range(group_size)]
    row = {"image_path": path, "image_grid_thw": [1, grid_h, grid_w]}
    if not detection:
        return [
            {
                **row,
                "solution": f"<answer>{list(boxes[0])}</answer>",
                "completion": f"<think>The region is here.</think> <answer>{predicted(boxes[0], j)}"
                "</answer>",
            }
            for j in jitters
        ]
    gold = json.dumps([{"bbox_2d": list(b), "label": "box"} for b in boxes])
    return [
        {
            **row,
            "solution": f"<answer>```json\n{gold}\n```</answer>",
            "completion": "<think>I see the boxes.</think> <answer>```json\n"
            + json.dumps([{"bbox_2d": predicted(b, j), "label": "box"} for b in boxes])
            + "\n```</answer>",
        }
        for j in jitters
    ]


def mixed_step(
    rng: random.Random, prompts: int, group_size: int, folder: Path, tag: str
) -> list[Sample]:
    """One GRPO step: ``prompts`` groups of ``group_size`` samples across the five kinds."""
    kinds = ["latex"] * 40 + ["plain"] * 20 + ["choice"] * 20 + ["rec"] * 10 + ["det"] * 10
    samples: list[Sample] = []
    for index in range(prompts):
        kind = rng.choice(kinds)
        if kind in ("rec", "det"):
            samples += _vision_group(rng, group_size, folder, f"{tag}_{index}", kind == "det")
        else:
            maker = {"latex": _latex_group, "plain": _plain_group, "choice": _choice_group}[kind]
            samples += maker(rng, group_size)
    return samples


def format_step(rng: random.Random, items: int) -> list[Sample]:
    """``items`` completions, about half of them in the exact think/answer format."""
    return [
        {
            "completion": (
                f"<think>step {i}</think> <answer>{rng.randint(0, 99)}</answer>"
                if rng.random() < 0.5
                else f"The answer is {i}."
            ),
            "solution": "<answer>1</answer>",
        }
        for i in range(items)
    ]


# -- engines ---------------------------------------------------------------------------------


def _run_loop(mix: Any, samples: list[Sample]) -> list[float]:
    start = time.perf_counter()
    results, latencies = [], []
    for sample in samples:  # results are kept, as a trainer keeps its rewards
        results.append(mix.score(sample))
        latencies.append(time.perf_counter() - start)
    return latencies


def _run_threads(mix: Any, samples: list[Sample], executor: ThreadPoolExecutor) -> list[float]:
    start = time.perf_counter()

    def timed(sample: Sample) -> tuple[Any, float]:
        return mix.score(sample), time.perf_counter() - start

    return [latency for _, latency in executor.map(timed, samples)]


_PROCESS_MIX: Any = None


def _make_picklable() -> None:
    """Let pickle find this module's functions when it was loaded from its path
    (``skyrl-rewards bench`` does that): register it under its name."""
    if __name__ not in sys.modules:
        module = types.ModuleType(__name__)
        module.__dict__.update(globals())
        sys.modules[__name__] = module


def _process_init(rewards: Mapping[str, Any]) -> None:
    global _PROCESS_MIX
    from skyrl_rewards.rewards.mix import RewardMix

    _PROCESS_MIX = RewardMix.from_config(rewards)


def _process_chunk(chunk: list[Sample]) -> list[Any]:
    return [_PROCESS_MIX.score(sample) for sample in chunk]


def _run_processes(
    samples: list[Sample], executor: ProcessPoolExecutor, chunk_size: int
) -> list[float]:
    start = time.perf_counter()
    pending = {
        executor.submit(_process_chunk, samples[i : i + chunk_size])
        for i in range(0, len(samples), chunk_size)
    }
    latencies: list[float] = []
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        now = time.perf_counter() - start
        for future in done:
            latencies += [now] * len(future.result())
    return latencies


def _run_pool(pool: Any, samples: list[Sample]) -> list[float]:
    return [result.latency_s for result in pool.score(samples)]


# -- measurement -----------------------------------------------------------------------------


def _summary(name: str, runs: list[tuple[float, list[float]]]) -> dict[str, Any]:
    """Median wall time over the repeats; p50/p99 over every item of every repeat."""
    walls = sorted(wall for wall, _ in runs)
    wall_s = walls[len(walls) // 2]
    latencies = sorted(x for _, run in runs for x in run)
    items = len(runs[0][1])
    return {
        "engine": name,
        "items": items,
        "wall_s": round(wall_s, 3),
        "rounds_wall_s": [round(wall, 3) for wall, _ in runs],
        "items_per_s": round(items / wall_s, 1),
        "p50_ms": round(1000 * latencies[len(latencies) // 2], 1),
        "p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 1),
    }


def _bench_workload(
    rewards: Mapping[str, Any],
    warmup: list[Sample],
    make_steps: Callable[[str], list[list[Sample]]],
    *,
    engines: Sequence[str],
    num_workers: int,
    repeats: int,
    pool_overrides: Sequence[str],
) -> dict[str, Any]:
    """Set every engine up and warm it, then time them in turns for ``repeats`` rounds.

    ``make_steps(tag)`` draws fresh steps: one call per engine per round.
    """
    from skyrl_rewards.pool.reward_pool import RewardPool
    from skyrl_rewards.rewards.mix import RewardMix

    unknown = set(engines) - set(ENGINES)
    if unknown:
        raise ValueError(f"engines: unknown {sorted(unknown)}; expected some of {ENGINES}")
    mix = RewardMix.from_config(rewards)
    rounds = [{engine: make_steps(f"r{r}{engine}") for engine in engines} for r in range(repeats)]
    chunk = max(1, len(rounds[0][engines[0]][0]) // (8 * num_workers))
    extra: dict[str, Any] = {}
    runners: dict[str, Callable[[list[Sample]], list[float]]] = {}
    with ExitStack() as stack:
        for engine in sorted(engines, key=lambda e: e == "pool"):  # fork before Ray starts here
            if engine == "loop":
                runners[engine] = lambda s: _run_loop(mix, s)
            elif engine == "threads":
                threads = stack.enter_context(ThreadPoolExecutor(max_workers=32))
                runners[engine] = lambda s, ex=threads: _run_threads(mix, s, ex)
            elif engine == "processes":
                _make_picklable()
                processes = stack.enter_context(
                    ProcessPoolExecutor(
                        num_workers,
                        mp_context=multiprocessing.get_context("fork"),
                        initializer=_process_init,
                        initargs=(dict(rewards),),
                    )
                )
                runners[engine] = lambda s, ex=processes: _run_processes(s, ex, chunk)
            else:
                started = time.perf_counter()
                # the alarm stays quiet: iou reports 'error' on every row without an image, by design
                pool = RewardPool.from_config(
                    {
                        "name": "bench_pool",
                        "rewards": dict(rewards),
                        "num_workers": num_workers,
                        "alarm_error_rate": 1.0,
                        "alarm_min_items": 10**9,
                    },
                    pool_overrides,
                )
                stack.callback(pool.shutdown)
                extra["pool_start_s"] = round(time.perf_counter() - started, 2)
                runners[engine] = lambda s, p=pool: _run_pool(p, s)
            runners[engine](warmup)
        runs: dict[str, list[tuple[float, list[float]]]] = {engine: [] for engine in engines}
        for data in rounds:
            for engine in engines:
                start = time.perf_counter()
                latencies = [x for step in data[engine] for x in runners[engine](step)]
                runs[engine].append((time.perf_counter() - start, latencies))
        if "pool" in engines:
            metrics = pool.metrics()
            extra["pool_cache_hit_rate"] = round(metrics["cache_hit_rate"], 3)
            extra["pool_worker_calls"] = metrics["worker_calls"]
    rows = [_summary(engine, runs[engine]) for engine in engines]
    loop = next((r for r in rows if r["engine"] == "loop"), None)
    for row in rows:
        row["speedup_vs_loop"] = round(loop["wall_s"] / row["wall_s"], 2) if loop else None
    return {"rows": rows, **extra}


def run_bench(
    *,
    prompts: int = 64,
    group_size: int = 8,
    steps: int = 2,
    format_items: int = 10_000,
    num_workers: int = 2,
    engines: Sequence[str] = ENGINES,
    workloads: Sequence[str] = ("mixed", "format"),
    repeats: int = 3,
    seed: int = 0,
    pool_overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """Run the benchmark; return ``{workload: {"rows": [...], ...}, "targets": {...}}``.

    Each row: ``engine, items, wall_s, items_per_s, p50_ms, p99_ms, speedup_vs_loop``.
    ``targets`` says, for the pool, whether each target of issue 3 is met.
    """
    rng = random.Random(seed)
    report: dict[str, Any] = {
        "config": {
            "prompts": prompts,
            "group_size": group_size,
            "steps": steps,
            "format_items": format_items,
            "num_workers": num_workers,
            "repeats": repeats,
            "seed": seed,
            "pool_overrides": list(pool_overrides),
        }
    }
    with tempfile.TemporaryDirectory(prefix="bench_pool_") as folder:
        if "mixed" in workloads:
            warmup = mixed_step(rng, 8, group_size, Path(folder), "warm")
            report["mixed"] = _bench_workload(
                MIXED_REWARDS,
                warmup,
                lambda tag: [
                    mixed_step(rng, prompts, group_size, Path(folder), f"{tag}s{i}")
                    for i in range(steps)
                ],
                engines=engines,
                num_workers=num_workers,
                repeats=repeats,
                pool_overrides=pool_overrides,
            )
        if "format" in workloads:
            report["format"] = _bench_workload(
                FORMAT_REWARDS,
                format_step(rng, 500),
                lambda tag: [format_step(rng, format_items)],
                engines=engines,
                num_workers=num_workers,
                repeats=repeats,
                pool_overrides=pool_overrides,
            )
    report["targets"] = _targets(report)
    return report


def _targets(report: Mapping[str, Any]) -> dict[str, Any]:
    def wall(workload: str, engine: str) -> float | None:
        rows = report.get(workload, {}).get("rows", [])
        return next((r["wall_s"] for r in rows if r["engine"] == engine), None)

    checks = {
        "mixed: pool >= 1.7x loop": ("mixed", "loop", 1.7),
        "mixed: pool >= 1.5x threads": ("mixed", "threads", 1.5),
        "mixed: pool >= 1.0x processes": ("mixed", "processes", 1.0),
    }
    out: dict[str, Any] = {}
    for label, (workload, engine, need) in checks.items():
        pool, other = wall(workload, "pool"), wall(workload, engine)
        if pool and other:
            out[label] = {"ratio": round(other / pool, 2), "met": other / pool >= need}
    pool, loop = wall("format", "pool"), wall("format", "loop")
    if pool and loop:
        out["format: pool time <= 1.3x loop"] = {
            "ratio": round(pool / loop, 2),
            "met": pool / loop <= 1.3,
        }
    return out


def format_table(report: Mapping[str, Any]) -> str:
    """The report as Markdown tables (one per workload) plus the targets."""
    lines = []
    for workload in ("mixed", "format"):
        if workload not in report:
            continue
        part = report[workload]
        lines += [
            f"\n**{workload}**"
            + (
                f" (pool start-up {part['pool_start_s']} s, cache hit rate "
                f"{part['pool_cache_hit_rate']})"
                if "pool_start_s" in part
                else ""
            ),
            "",
            "| engine | items | wall s | items/s | p50 ms | p99 ms | vs loop |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {r['engine']} | {r['items']} | {r['wall_s']} | {r['items_per_s']} | {r['p50_ms']} "
            f"| {r['p99_ms']} | {r['speedup_vs_loop']}x |"
            for r in part["rows"]
        ]
    lines += ["", "| target | ratio | met |", "|---|---:|---|"]
    lines += [
        f"| {k} | {v['ratio']} | {'yes' if v['met'] else 'no'} |"
        for k, v in report["targets"].items()
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the benchmark, print the tables (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps of the mixed workload")
    parser.add_argument("--format-items", type=int, default=10_000)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument(
        "--workloads", nargs="+", default=["mixed", "format"], choices=["mixed", "format"]
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (median wall time)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument(
        "--pool",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="pool settings (configs/pool.yaml keys), e.g. --pool batch_size=128",
    )
    args = parser.parse_args(argv)
    report = run_bench(
        prompts=args.prompts,
        group_size=args.group_size,
        steps=args.steps,
        format_items=args.format_items,
        num_workers=args.num_workers,
        engines=args.engines,
        workloads=args.workloads,
        repeats=args.repeats,
        seed=args.seed,
        pool_overrides=args.pool,
    )
    print(format_table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
