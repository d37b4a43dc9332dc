"""Measure: driver memory of the pool's work cache on long, distinct completions.

Scores ``--items`` distinct completions of ``--chars`` characters each (no
``<answer>`` tag, so the accuracy work key covers the whole completion)
through a :class:`~skyrl_rewards.pool.reward_pool.RewardPool` with the
accuracy reward (``accu_reward_method: all_match``, a cheap method that uses
the same work key as math). Prints the driver's resident memory after a warm-up
step and after every ``--step`` items, the growth per 1,000 items (overall,
and from the end of the first step on: the first step also pays for the
allocator's one-time growth), and the pool's ``metrics()["cache"]``.

Run: ``python scripts/benchmarks/measure_work_cache.py`` (starts a loopback Ray and stops it).
``--compare REV ...`` measures older commits too, in turns with this checkout, and prints each
side's summary (``benchlib.compare_sides``).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import string
from pathlib import Path

import benchlib

REWARDS = {"accuracy": {"weight": 1.0}}


def rss_mb() -> float:
    """Resident memory of this process in MB (Linux ``/proc``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("VmRSS not found in /proc/self/status (Linux only)")


def completions(count: int, chars: int, seed: int) -> list[dict]:
    """``count`` distinct samples whose completion has ``chars`` characters and no answer tag."""
    rng = random.Random(seed)
    alphabet = string.ascii_lowercase + " "
    return [
        {
            "completion": f"{i} " + "".join(rng.choices(alphabet, k=chars - len(str(i)) - 1)),
            "solution": "<answer>a red car</answer>",
            "accu_reward_method": "all_match",
        }
        for i in range(count)
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; prints one line per step and a JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=6000, help="distinct completions to score")
    parser.add_argument("--chars", type=int, default=50_000, help="characters per completion")
    parser.add_argument("--step", type=int, default=1000, help="items per measured step")
    parser.add_argument("--batch", type=int, default=100, help="items per pool.score call")
    parser.add_argument("--workers", type=int, default=1, help="pool workers")
    parser.add_argument("--seed", type=int, default=0)
    benchlib.add_compare_argument(parser, "the driver's memory")
    args = parser.parse_args(argv)
    if args.compare:
        options = [
            f"--items={args.items}",
            f"--chars={args.chars}",
            f"--step={args.step}",
            f"--batch={args.batch}",
            f"--workers={args.workers}",
            f"--seed={args.seed}",
        ]
        sides = benchlib.compare_sides(
            Path(__file__).resolve(),
            [*args.compare, benchlib.THIS_CHECKOUT],
            lambda _: options,
            repeats=1,
            timeout_s=3600,
        )
        for rev, (summary,) in sides.items():
            print(f"{rev}: {json.dumps(summary)}")
        return 0
    say = benchlib.progress if args.side else print  # a side keeps its output for the JSON

    from skyrl_rewards.pool.reward_pool import RewardPool

    warmup = completions(args.batch, args.chars, args.seed + 1)
    with RewardPool.from_config(
        {"name": "measure_work_cache", "rewards": REWARDS, "num_workers": args.workers}
    ) as pool:
        pool.score(warmup)
        del warmup
        gc.collect()
        start_mb = rss_mb()
        say(f"after warm-up: driver RSS {start_mb:.1f} MB")
        done = 0
        first_step_mb = start_mb
        while done < args.items:
            step = min(args.step, args.items - done)
            samples = completions(step, args.chars, args.seed * 1_000_003 + done + 2)
            for i in range(0, step, args.batch):
                pool.score(samples[i : i + args.batch])
            del samples
            gc.collect()
            done += step
            if done == min(args.step, args.items):
                first_step_mb = rss_mb()
            say(f"{done:6d} items: driver RSS {rss_mb():.1f} MB (+{rss_mb() - start_mb:.1f})")
        end_mb = rss_mb()
        metrics = pool.metrics()
    summary = {
        "items": args.items,
        "chars": args.chars,
        "driver_growth_mb": round(end_mb - start_mb, 1),
        "growth_mb_per_1000_items": round(1000 * (end_mb - start_mb) / args.items, 2),
        "growth_mb_per_1000_items_after_first_step": round(
            1000 * (end_mb - first_step_mb) / max(1, args.items - args.step), 2
        ),
        "cache": metrics.get("cache", "not reported by this version"),
        "cache_hits": metrics.get("cache_hits"),
    }
    if args.side:
        benchlib.print_side(summary)
    else:
        print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
