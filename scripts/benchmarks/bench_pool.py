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
- ``accuracy`` (also ``--compare REV ...``): accuracy-heavy GRPO steps (``prompts`` groups of 8
  MATH-style LaTeX answers, about a quarter distinct work), the accuracy reward alone, scored by
  the pool on the SHIPPED DEFAULTS (``configs/pool.yaml`` of the checkout measured) and by
  in-process loops of ``default_accuracy_reward`` in the same process, in turns. Reports the
  speed-up and the efficiency: the loop's CPU seconds / (pool wall x workers). Each side runs
  in its own subprocess with ``PYTHONPATH`` on its tree (another revision is extracted with
  ``git archive`` into a temporary folder), sides alternate, medians per side.
- ``dispatch``: the ceiling of one pool: the format reward alone with ``local_rewards: []`` (so
  every item travels to a worker and back) on 2, 4, 8 workers, items per second.

Every engine uses the pool's shipped defaults (``PoolConfig``, the same as ``configs/pool.yaml``;
math checks in math children, a first pass): ``--pool KEY=VALUE`` changes them.

Per item latency is the time from the moment a step is handed to the engine to the moment that
item's result is available; throughput is items per second of wall time. Every engine is set up
and warmed up on a separate step first (the pool's start-up time is reported on its own), then
the engines are timed in turns for ``repeats`` rounds, so that they share the machine's load;
the table gives the median round's wall time, and p50/p99 over all rounds. Every engine scores
its own fresh data in every round (same generator, different draws): no engine profits from a
cache another engine or an earlier round warmed (the in-process engines share one process), and
the pool's cache helps only with the repeats inside a step, as in training. Without a running
Ray, the pool starts a local one on 127.0.0.1 for each workload (and stops it).

Run: ``python scripts/benchmarks/bench_pool.py`` (or ``skyrl-rewards bench``); ``--help`` for the options.
``python scripts/benchmarks/bench_pool.py --compare 61383b7 main --repeats 3`` puts this checkout beside
two commits on the accuracy workload.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
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

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path (`skyrl-rewards bench`)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

# before Ray is imported: keep every address of a multi-node cluster on this machine on 127.0.0.1
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

ENGINES = ("loop", "threads", "processes", "pool")
MIXED_REWARDS = {
    "accuracy": {"weight": 1.0},
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
    latencies = [x for _, run in runs for x in run]
    items = len(runs[0][1])
    return {
        "engine": name,
        "items": items,
        "wall_s": round(wall_s, 3),
        "rounds_wall_s": [round(wall, 3) for wall, _ in runs],
        "items_per_s": round(items / wall_s, 1),
        "p50_ms": round(1000 * benchlib.percentile(latencies, 0.5), 1),
        "p99_ms": round(1000 * benchlib.percentile(latencies, 0.99), 1),
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
                per_step, wall_s = benchlib.timed(
                    lambda s=data[engine], e=engine: [runners[e](x) for x in s]
                )
                runs[engine].append((wall_s, [x for step in per_step for x in step]))
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


# -- accuracy-heavy work on the shipped defaults; two commits side by side ---------------------

ACCURACY_REWARDS = {"accuracy": {"weight": 1.0}}
DEFAULTS_FILE = "configs/pool.yaml"


def _math_answers(rng: random.Random) -> tuple[str, list[str], list[str]]:
    """A MATH-style final answer: (gold, equal forms, wrong forms), all LaTeX as models write it."""
    a, b, c = rng.randint(2, 19), rng.randint(2, 19), rng.choice([2, 3, 5, 6, 7, 10, 11])
    n = rng.randint(2, 60)
    g = math.gcd(a, a + b)
    p, q = a // g, (a + b) // g
    kinds = [
        (
            f"\\frac{{{p}}}{{{q}}}",
            [f"\\dfrac{{{p}}}{{{q}}}", f"{p}/{q}", f"\\frac{{{2 * p}}}{{{2 * q}}}"],
            [f"\\frac{{{q}}}{{{p}}}", f"\\frac{{{p + 1}}}{{{q}}}"],
        ),
        (
            f"{a}\\sqrt{{{c}}}",
            [f"\\sqrt{{{a * a * c}}}", f"{a} \\sqrt{{{c}}}"],
            [f"{a + 1}\\sqrt{{{c}}}", f"\\sqrt{{{a * c}}}"],
        ),
        (
            f"\\frac{{{a}+\\sqrt{{{c}}}}}{{{b}}}",
            [
                f"\\frac{{\\sqrt{{{c}}}+{a}}}{{{b}}}",
                f"\\frac{{{a}}}{{{b}}}+\\frac{{\\sqrt{{{c}}}}}{{{b}}}",
            ],
            [f"\\frac{{{a}-\\sqrt{{{c}}}}}{{{b}}}"],
        ),
        (
            f"\\frac{{{a}\\pi}}{{{b}}}",
            [f"\\frac{{{a}}}{{{b}}}\\pi", f"{a}\\pi/{b}"],
            [f"\\frac{{{b}\\pi}}{{{a}}}", f"{a}\\pi"],
        ),
        (
            f"(-\\infty, {a}]",
            [f"\\left(-\\infty, {a}\\right]", f"(-\\infty,{a}]"],
            [f"(-\\infty, {a})", f"[{a}, \\infty)"],
        ),
        (
            f"({a}, -{b})",
            [f"\\left({a},-{b}\\right)", f"({a},-{b})"],
            [f"(-{b}, {a})", f"({a}, {b})"],
        ),
        (
            f"x^2-{2 * a}x+{a * a}",
            [f"(x-{a})^2", f"x^{{2}} - {2 * a} x + {a * a}"],
            [f"(x+{a})^2", f"x^2+{a * a}"],
        ),
        (
            f"{a * b}",
            [f"{a * b}.0", f"{a}\\cdot {b}", f"{a * b}^\\circ"],
            [f"{a * b + 1}", f"{a + b}"],
        ),
        (f"{a}.{b:02d}", [f"{a}.{b:02d}0", f"\\${a}.{b:02d}"], [f"{a}.{b + 1:02d}"]),
        (f"{n}\\%", [f"{n}", f"{n}\\%"], [f"{n + 5}\\%"]),
        (
            f"\\begin{{pmatrix}} {a} \\\\ -{b} \\end{{pmatrix}}",
            [f"\\begin{{pmatrix}}{a}\\\\-{b}\\end{{pmatrix}}"],
            [f"\\begin{{pmatrix}} -{a} \\\\ {b} \\end{{pmatrix}}"],
        ),
        (f"y = {a}x + {b}", [f"y={a}x+{b}", f"{a}x+{b}"], [f"y = {b}x + {a}"]),
        (f"\\{{{a}, {a + b}\\}}", [f"\\{{{a + b}, {a}\\}}", f"{a}, {a + b}"], [f"\\{{{a}\\}}"]),
        (f"{a} + {b}i", [f"{b}i + {a}", f"{a}+{b}i"], [f"{a} - {b}i", f"{b} + {a}i"]),
        (
            f"\\log_{{2}} {c}",
            [f"\\log_2 {c}", f"\\frac{{\\ln {c}}}{{\\ln 2}}"],
            [f"\\log_{{{c}}} 2"],
        ),
        (
            f"\\binom{{{a + b}}}{{{a}}}",
            [f"\\binom{{{a + b}}}{{{b}}}"],
            [f"\\binom{{{a + b}}}{{{a + 1}}}"],
        ),
        (f"\\frac{{1}}{{{a}}}e^{{{b}x}}", [f"\\frac{{e^{{{b}x}}}}{{{a}}}"], [f"{a}e^{{{b}x}}"]),
        ("\\text{(C)}", ["\\text{(C)}", "C"], ["\\text{(B)}", "A"]),
        # heavier ones (precalculus, intermediate algebra): 0.05-0.12 s of CPU in a math child
        (
            "\\frac{\\sqrt{6}-\\sqrt{2}}{4}",
            ["\\frac{\\sqrt{2}(\\sqrt{3}-1)}{4}", "\\sin 15^\\circ"],
            ["\\frac{\\sqrt{6}+\\sqrt{2}}{4}", "\\tan 75^\\circ"],
        ),
        (
            f"(x-{a})(x+{b})(x-{c})",
            [f"x^3+{b - a - c}x^2+{a * c - a * b - b * c}x+{a * b * c}"],
            [
                f"x^3+{b - a - c}x^2+{a * c - a * b - b * c}x+{a * b * c + 1}",
                f"(x+{a})(x-{b})(x-{c})",
            ],
        ),
        (
            f"\\log_2 {a * c}",
            [f"\\log_2 {a} + \\log_2 {c}", f"\\frac{{\\ln {a * c}}}{{\\ln 2}}"],
            [f"\\log_2 {a + c}", f"\\log_{{{a * c}}} 2"],
        ),
        (
            f"\\frac{{1}}{{2}}+\\frac{{\\sqrt{{{c}}}}}{{2}}i",
            [f"\\frac{{1+i\\sqrt{{{c}}}}}{{2}}"],
            [f"e^{{i\\pi/{a}}}", f"\\frac{{1}}{{2}}-\\frac{{\\sqrt{{{c}}}}}{{2}}i"],
        ),
        (
            "1+\\tan x",
            ["\\sin^2 x+\\cos^2 x+\\tan x", "1+\\frac{\\sin x}{\\cos x}"],
            ["1+\\cot x", "\\sec^2 x"],
        ),
        (
            f"\\frac{{{a}}}{{3}}",
            [f"\\int_0^1 {a}x^2 \\, dx", f"\\frac{{{2 * a}}}{{6}}"],
            [f"\\int_0^1 {a}x \\, dx", f"\\frac{{{a}}}{{2}}"],
        ),
    ]
    return rng.choice(kinds)


def accuracy_step(rng: random.Random, prompts: int, group_size: int) -> list[Sample]:
    """A GRPO step of math answers: each group of ``group_size`` repeats 2-3 distinct answers.

    About a quarter of the samples are distinct work (1,600 samples: about 370).
    """
    samples: list[Sample] = []
    for _ in range(prompts):
        gold, right, wrong = _math_answers(rng)
        distinct = [rng.choice(right), rng.choice(wrong)]
        if rng.random() < 0.3:
            distinct.append(rng.choice(right + wrong))
        samples += [
            {
                "completion": "<think>Let me work it out step by step.</think> "
                f"<answer>The answer is ${rng.choice(distinct)}$</answer>",
                "solution": f"<answer>${gold}$</answer>",
            }
            for _ in range(group_size)
        ]
    return samples


def _math_cpu_s() -> float:
    """CPU seconds of this process plus its math processes (fork server and children) so far.

    The in-process loop's math runs in those processes (the ``subprocess`` guard).
    """
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS)
    roots = []
    for pid, (ppid, _) in stats.items():
        if ppid == os.getpid():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    if b"math_c" in handle.read():
                        roots.append(pid)
            except OSError:
                continue
    tree, frontier = set(roots), list(roots)
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in stats.items() if ppid == parent]
        tree.update(children)
        frontier += children
    return time.process_time() + sum(stats[pid][1] for pid in tree)


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _shipped_pool_config(num_workers: int) -> dict[str, Any]:
    """``configs/pool.yaml`` of the checkout that ``skyrl_rewards`` is imported from, accuracy only."""
    import yaml

    import skyrl_rewards

    root = Path(skyrl_rewards.__file__).resolve().parent.parent
    config = yaml.safe_load((root / DEFAULTS_FILE).read_text())
    config.update(
        name=f"bench_accuracy_{os.getpid()}",
        rewards=ACCURACY_REWARDS,
        num_workers=num_workers,
        alarm_min_items=10**9,
        _tree=str(root),
    )
    return config


def run_accuracy_side(
    *,
    rounds: int,
    prompts: int,
    group_size: int,
    num_workers: int,
    seed: int,
    pool_overrides: Sequence[str] = (),
    naive: bool = True,
) -> dict[str, Any]:
    """Time the shipped pool against in-process loops of ``default_accuracy_reward``, in turns.

    Every round draws a fresh step (seeded by ``seed`` and the round, so two
    commits see the same data): the pool and the deduplicated loop score the
    same step, the naive loop another draw (so it warms no parse cache of theirs).
    ``dedup``: the loop scores each distinct (completion, solution) once, the
    work the pool's cache leaves; ``naive``: every sample. Works on older
    checkouts too (it imports what they named differently).
    """
    # the old layout first: a missing module could be found elsewhere (an editable install
    # of another checkout fills in submodules its tree lacks)
    try:
        from skyrl_rewards.accuracy import default_accuracy_reward  # type: ignore[no-redef]
    except ImportError:  # the rewards package
        from skyrl_rewards.rewards.accuracy import default_accuracy_reward
    try:
        from skyrl_rewards.pool.reward_pool import RewardPool
    except ImportError:  # before the pool package
        from skyrl_rewards.pool import RewardPool  # type: ignore[no-redef,attr-defined]

    config = _shipped_pool_config(num_workers)
    tree = Path(config.pop("_tree"))
    for module in (default_accuracy_reward, RewardPool):
        if not Path(sys.modules[module.__module__].__file__ or "").is_relative_to(tree):
            raise RuntimeError(f"{module.__module__} was not imported from {tree}")

    def loop(samples: list[Sample], dedup: bool) -> tuple[float, float]:
        seen: dict[tuple[str, str], float] = {}
        cpu, start = _math_cpu_s(), time.perf_counter()
        for sample in samples:
            key = (sample["completion"], sample["solution"])
            if not dedup or key not in seen:
                seen[key] = default_accuracy_reward(sample["completion"], sample["solution"])
        return time.perf_counter() - start, _math_cpu_s() - cpu

    warm = accuracy_step(random.Random("warm-up"), 16, group_size)  # Random(-1) is Random(1)
    loop(warm, dedup=False)
    started = time.perf_counter()
    pool = RewardPool.from_config(config, pool_overrides)
    try:
        start_s = time.perf_counter() - started
        pool.score(warm)
        runs = []
        for index in range(rounds):
            step = accuracy_step(random.Random(seed * 1000 + index), prompts, group_size)
            other = accuracy_step(random.Random(seed * 1000 + index + 500), prompts, group_size)
            before = pool.metrics()
            row: dict[str, Any] = {"load": os.getloadavg()[0], "items": len(step)}
            row["distinct"] = len({(s["completion"], s["solution"]) for s in step})
            for engine in ("pool", "dedup", "naive") if index % 2 else ("dedup", "naive", "pool"):
                if engine == "pool":
                    start = time.perf_counter()
                    pool.score(step)
                    row["pool_wall_s"] = time.perf_counter() - start
                elif engine == "dedup":
                    row["dedup_wall_s"], row["dedup_cpu_s"] = loop(step, dedup=True)
                elif naive:
                    row["naive_wall_s"], row["naive_cpu_s"] = loop(other, dedup=False)
            after = pool.metrics()
            for counter in (
                "deferred",
                "deferred_again",
                "second_pass_idle",
                "worker_calls",
                "cache_hits",
            ):
                row[counter] = after.get(counter, 0) - before.get(counter, 0)
            runs.append(row)
    finally:
        pool.shutdown()
    settings = {k: config.get(k) for k in ("first_pass_s", "slow_lane_niceness", "local_rewards")}
    return {"pool_start_s": start_s, "settings": settings, "runs": runs}


def _accuracy_figures(runs: Sequence[Mapping[str, Any]], num_workers: int) -> dict[str, float]:
    """Medians over rounds: speed-ups, efficiency (in-process CPU / (pool wall x workers)), counts."""

    median = benchlib.median
    out = {
        "pool_wall_s": median([r["pool_wall_s"] for r in runs]),
        "dedup_wall_s": median([r["dedup_wall_s"] for r in runs]),
        "speedup_vs_dedup_loop": median([r["dedup_wall_s"] / r["pool_wall_s"] for r in runs]),
        "dedup_efficiency": median(
            [r["dedup_cpu_s"] / (r["pool_wall_s"] * num_workers) for r in runs]
        ),
        "deferred": median([r["deferred"] for r in runs]),
        "load": median([r["load"] for r in runs]),
    }
    if all("naive_wall_s" in r for r in runs):
        out["naive_wall_s"] = median([r["naive_wall_s"] for r in runs])
        out["speedup"] = median([r["naive_wall_s"] / r["pool_wall_s"] for r in runs])
        out["efficiency"] = median(
            [r["naive_cpu_s"] / (r["pool_wall_s"] * num_workers) for r in runs]
        )
    return out


def compare_commits(
    revisions: Sequence[str],
    *,
    repeats: int,
    rounds: int,
    prompts: int,
    group_size: int,
    num_workers: int,
    seed: int,
    pool_overrides: Sequence[str],
    naive: bool,
) -> dict[str, Any]:
    """Run :func:`run_accuracy_side` for each revision in turn (A, B, A, B, ...), each in a subprocess.

    ``"."`` is this checkout's working tree; another revision is extracted
    with ``git archive`` into a temporary folder and put first on ``PYTHONPATH``
    (:func:`benchlib.compare_sides`).
    """
    sides = benchlib.compare_sides(
        Path(__file__).resolve(),
        revisions,
        lambda repeat: [
            f"--rounds={rounds}",
            f"--prompts={prompts}",
            f"--group-size={group_size}",
            f"--num-workers={num_workers}",
            f"--seed={seed + repeat}",
            *([] if naive else ["--no-naive"]),
            "--pool",
            *pool_overrides,
        ],
        repeats=repeats,
        timeout_s=3600,
        on_result=lambda rev, repeat, result: benchlib.progress(
            f"repeat {repeat + 1}/{repeats} {rev}: "
            + json.dumps(_accuracy_figures(result["runs"], num_workers))
        ),
    )
    report: dict[str, Any] = {"sides": {}}
    for rev, results in sides.items():
        runs = [run for result in results for run in result["runs"]]
        report["sides"][rev] = {
            "runs": runs,
            "starts": [round(result["pool_start_s"], 2) for result in results],
            "settings": results[-1]["settings"],
            "figures": _accuracy_figures(runs, num_workers),
        }
    return report


def format_compare(report: Mapping[str, Any], num_workers: int) -> str:
    """The side-by-side medians as a Markdown table."""
    lines = [
        f"accuracy-heavy work on the SHIPPED DEFAULTS ({DEFAULTS_FILE} of each side; rewards: "
        f"accuracy only; {num_workers} workers); medians over rounds",
        "",
        "| code | first_pass_s | rounds | load | pool wall s | loop wall s | speed-up "
        "| efficiency | loop wall s, distinct work | speed-up vs it | deferred |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rev, side in report["sides"].items():
        f = side["figures"]
        lines.append(
            f"| {rev} | {side['settings'].get('first_pass_s')} | {len(side['runs'])} | {f['load']} "
            f"| {f['pool_wall_s']} | {f.get('naive_wall_s', '-')} | {f.get('speedup', '-')}x "
            f"| {f.get('efficiency', '-')} | {f['dedup_wall_s']} | {f['speedup_vs_dedup_loop']}x "
            f"| {f['deferred']} |"
        )
    lines += [
        "",
        f"target: speed-up >= {0.9 * num_workers:.1f}x (0.9 x workers) over the in-process loop "
        "of default_accuracy_reward over every sample; efficiency = that loop's CPU s (this "
        "process and its math children) / (pool wall s x workers). The loop over distinct work "
        "scores each repeated answer once, as the pool's cache does.",
    ]
    return "\n".join(lines)


# -- the ceiling of one pool: dispatch of cheap items ------------------------------------------


def bench_dispatch(
    worker_counts: Sequence[int],
    items: int,
    repeats: int,
    seed: int,
    nodes: int = 1,
    pool_overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """Items per second one pool dispatches when the work itself costs nothing.

    The format reward alone (microseconds per item) with ``local_rewards: []``,
    so every item goes through the scheduler to a worker and back; ``items``
    distinct samples per call (no cache hits), median of ``repeats`` calls, for
    each worker count. What limits it is the calling process (its scheduler's
    event loop and Ray's calls), not the workers. ``nodes`` > 1: a Ray cluster
    of that many nodes on this machine (``ray.cluster_utils.Cluster``, loopback;
    the driver on the head), the workers spread over them; else the local Ray
    (its CPUs shared out: ``num_cpus_per_worker`` = CPUs / workers, at most 1).
    ``pool_overrides`` change the pool's settings (``fence_min_s=1e-9``: every item
    reported on its own, as accuracy's are).
    """
    import ray

    from skyrl_rewards.pool.reward_pool import RewardPool

    rng = random.Random(seed)
    cpus = os.cpu_count() or 2
    config: dict[str, Any] = {"rewards": FORMAT_REWARDS, "local_rewards": []}
    with ExitStack() as stack:
        if nodes > 1:
            from ray.cluster_utils import Cluster

            local = {"node_ip_address": "127.0.0.1", "include_dashboard": False}
            per_node = -(-max(worker_counts) // nodes)
            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": per_node, **local})
            stack.callback(cluster.shutdown)
            for _ in range(nodes - 1):
                cluster.add_node(num_cpus=per_node, **local)
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, namespace="skyrl_rewards", log_to_driver=False)
            stack.callback(ray.shutdown)
            config["address"] = cluster.address
        rows = []
        for workers in worker_counts:
            config |= {
                "name": f"bench_dispatch_{os.getpid()}_{workers}",
                "num_workers": workers,
                "num_cpus_per_worker": 1.0 if nodes > 1 else min(1.0, cpus / workers),
            }
            with RewardPool.from_config(config, pool_overrides) as pool:
                pool.score(format_step(rng, 500))
                walls = []
                for _ in range(repeats):
                    step = [
                        {**sample, "completion": f"{sample['completion']} #{rng.random()}"}
                        for sample in format_step(rng, items)
                    ]
                    walls.append(benchlib.timed(pool.score, step)[1])
                metrics = pool.metrics()
            wall_s = benchlib.median(walls)
            rows.append(
                {
                    "nodes": nodes,
                    "workers": workers,
                    "worker_nodes": len({w["node_id"] for w in metrics["workers"]}),
                    "items": items,
                    "wall_s": wall_s,
                    "items_per_s": round(items / wall_s),
                    "worker_calls": metrics["worker_calls"],
                    "load": benchlib.load(),
                }
            )
            benchlib.progress(json.dumps(rows[-1]))
        if nodes == 1 and ray.is_initialized():
            ray.shutdown()
    return {"rows": rows, "overrides": list(pool_overrides)}


def format_dispatch(report: Mapping[str, Any]) -> str:
    lines = [
        "dispatch ceiling: format reward only, local_rewards: [] (every item to a worker)"
        + (f"; pool settings: {' '.join(report['overrides'])}" if report["overrides"] else ""),
        "",
        "| nodes | workers (on nodes) | items | wall s | items/s | worker calls | load |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['nodes']} | {r['workers']} ({r['worker_nodes']}) | {r['items']} | {r['wall_s']} "
        f"| {r['items_per_s']} | {r['worker_calls']} | {r['load']} |"
        for r in report["rows"]
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the benchmark, print the tables (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=None, help="64 (mixed), 200 (accuracy)")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps of the mixed workload")
    parser.add_argument("--format-items", type=int, default=10_000)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument(
        "--workloads",
        nargs="+",
        default=["mixed", "format"],
        choices=["mixed", "format", "accuracy", "dispatch"],
    )
    parser.add_argument(
        "--dispatch-workers",
        nargs="+",
        type=int,
        default=[2, 4, 8],
        help="dispatch: worker counts",
    )
    parser.add_argument("--dispatch-items", type=int, default=20_000)
    parser.add_argument(
        "--dispatch-nodes",
        type=int,
        default=1,
        help="dispatch: Ray nodes on this machine (ray.cluster_utils.Cluster) to spread over",
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
    benchlib.add_compare_argument(parser, "accuracy workload")
    parser.add_argument(
        "--rounds", type=int, default=2, help="accuracy: timed rounds per pool start"
    )
    parser.add_argument(
        "--no-naive", action="store_true", help="accuracy: skip the loop over every sample"
    )
    args = parser.parse_args(argv)
    if args.side:  # one side of an accuracy comparison, in the checkout on PYTHONPATH
        result = run_accuracy_side(
            rounds=args.rounds,
            prompts=args.prompts or 200,
            group_size=args.group_size,
            num_workers=args.num_workers,
            seed=args.seed,
            pool_overrides=args.pool,
            naive=not args.no_naive,
        )
        benchlib.print_side(result)
        return 0
    report: dict[str, Any] = {}
    workloads = [w for w in args.workloads if w in ("mixed", "format")]
    if workloads and not args.compare:
        report = run_bench(
            prompts=args.prompts or 64,
            group_size=args.group_size,
            steps=args.steps,
            format_items=args.format_items,
            num_workers=args.num_workers,
            engines=args.engines,
            workloads=workloads,
            repeats=args.repeats,
            seed=args.seed,
            pool_overrides=args.pool,
        )
        print("pool: the shipped defaults (configs/pool.yaml) " + " ".join(args.pool))
        print(format_table(report))
    if "accuracy" in args.workloads or args.compare:
        report["accuracy"] = compare_commits(
            [*args.compare, benchlib.THIS_CHECKOUT],
            repeats=args.repeats,
            rounds=args.rounds,
            prompts=args.prompts or 200,
            group_size=args.group_size,
            num_workers=args.num_workers,
            seed=args.seed,
            pool_overrides=args.pool,
            naive=not args.no_naive,
        )
        print(format_compare(report["accuracy"], args.num_workers))
    if "dispatch" in args.workloads:
        report["dispatch"] = bench_dispatch(
            args.dispatch_workers,
            args.dispatch_items,
            args.repeats,
            args.seed,
            args.dispatch_nodes,
            args.pool,
        )
        print(format_dispatch(report["dispatch"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
