"""Measure what hangs and math time limits cost: the figures of docs/pool.md and docs/rewards.md.

Three measurements, each a subcommand (``all`` runs them in turn):

- ``hangs``: a reward pool (2 workers, accuracy + format + repetition, pool
  ``timeout_s`` 10) scores N ordinary GRPO-style samples, then N samples of
  which H are answers that pass the math pre-screen but make math-verify run
  for ever (``\\Gamma(99999^{2})``, ``\\sum_{n=1}^{99999} n^{n}``,
  ``(x+1)^{99999}``, a 12x12 symbolic determinant, with varied numbers). A
  fresh pool per run (its start-up is not timed). Reports wall time, latency
  of the ordinary items (median, p99), the hang items' statuses and the pool's
  counters, and checks the targets.
- ``borderline``: a correct answer whose check costs a couple of CPU seconds
  (``1/2 + (x+1)^n (x-1)^n - (x^2-1)^n`` against ``\\frac{1}{2}``), scored by
  ``default_accuracy_score`` once alone, then from 8 threads at once, then from
  8 threads next to CPU-burning processes: the value must not change.
- ``child``: the start-up time and RSS of the math fork server (of the math
  child, in older checkouts), and what a timeout costs the next call
  (replacement of the killed child).

The code measured is whatever ``skyrl_rewards`` imports; ``--compare REV ...``
runs the same subcommand on older commits too, in turns with this checkout, one
process per side (``benchlib.compare_sides``), and prints each side's report.

    python scripts/benchmarks/bench_hangs.py all --json out/bench_hangs.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import benchlib

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep a local Ray on loopback

OLD_MATH_CHECK = "skyrl_rewards.rewards.math_check"
"""Where the math check lived before the rewards/ family folders (older checkouts)."""

REWARDS = {
    "accuracy": {"weight": 1.0},
    "format": {"weight": 0.5},
    "repetition": {"weight": 0.5},
}
Sample = dict[str, Any]


def hang_answers(count: int) -> list[str]:
    """``count`` distinct answers that pass the pre-screen and make math-verify run for ever."""
    rows = " \\\\ ".join(" & ".join(f"x_{{{i * 12 + j}}}" for j in range(12)) for i in range(12))
    kinds = [
        lambda i: f"$\\Gamma({99999 - i}^{{2}})$",
        lambda i: f"$\\sum_{{n=1}}^{{{99999 - i}}} n^{{n}}$",
        lambda i: f"$(x+{1 + i})^{{{99999 - i}}}$",
        lambda i: f"$\\det\\begin{{pmatrix}}{rows}\\end{{pmatrix}} + {i}$",
    ]
    return [kinds[i % len(kinds)](i // len(kinds)) for i in range(count)]


def ordinary_samples(rng: random.Random, count: int) -> list[Sample]:
    """GRPO-like groups of 8: LaTeX and plain math, multiple choice; each group repeats answers."""
    samples: list[Sample] = []
    while len(samples) < count:
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        kind = rng.choice(["fraction", "poly", "plain", "choice"])
        if kind == "fraction":
            gold, right, wrong = (
                f"\\frac{{{a}}}{{{a + b}}}",
                f"{a}/{a + b}",
                f"\\frac{{{b}}}{{{a}}}",
            )
        elif kind == "poly":
            gold, right, wrong = f"x^2+{2 * a}x+{a * a}", f"(x+{a})^2", f"(x-{a})^2"
        elif kind == "plain":
            gold, right, wrong = str(a * b), f"{a} \\times {b}", str(a * b + 1)
        else:
            gold = rng.choice("ABCD")
            right, wrong = f"The answer is {gold}.", rng.choice([c for c in "ABCD" if c != gold])
        answers = [rng.choice([gold, right, wrong, f"{wrong} "]) for _ in range(8)]
        samples.extend(
            {
                "completion": f"<think>Let me work it out.</think> <answer>${x}$</answer>",
                "solution": f"<answer>${gold}$</answer>",
            }
            for x in answers
        )
    return samples[:count]


def _hang_sample(answer: str) -> Sample:
    return {
        "completion": f"<think>Let me work it out.</think> <answer>{answer}</answer>",
        "solution": "<answer>$1$</answer>",
    }


def _new_pool(pool_class: Any, cfg: dict[str, Any]) -> Any:
    """A new pool; retried for a minute while the previous pool's CPUs are being released."""
    deadline = time.monotonic() + 60.0
    while True:
        try:
            return pool_class.from_config(cfg)
        except (RuntimeError, ValueError) as error:  # NotEnoughCpusError in newer checkouts
            if "CPUs" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(2.0)


def _pool_run(
    samples: list[Sample], hang_at: set[int], name: str, settings: dict[str, Any]
) -> dict[str, Any]:
    from skyrl_rewards.pool.reward_pool import RewardPool

    cfg = {"name": name, "rewards": REWARDS, "num_workers": 2, "timeout_s": 10.0, **settings}
    started = time.monotonic()
    with _new_pool(RewardPool, cfg) as pool:
        pool.score(ordinary_samples(random.Random(99), 64))  # warm-up, not timed
        startup_s = time.monotonic() - started
        load = benchlib.load()
        before = pool.metrics()
        started = time.monotonic()
        results = pool.score(samples)
        wall_s = time.monotonic() - started
        after = pool.metrics()
    ordinary = [r.latency_s for i, r in enumerate(results) if i not in hang_at]
    hangs = [results[i] for i in sorted(hang_at)]
    counters = (
        "timeouts",
        "worker_restarts",
        "isolations",
        "deferred",
        "deferred_again",
        "second_pass_idle",
        "remembered_timeouts",
        "retries",
    )
    return {
        "items": len(samples),
        "hangs": len(hang_at),
        "pool_startup_s": round(startup_s, 1),
        "load_at_start": load,
        "load_at_end": benchlib.load(),
        "wall_s": round(wall_s, 2),
        "ordinary_p50_s": benchlib.median(ordinary),
        "ordinary_p99_s": round(benchlib.percentile(ordinary, 0.99), 3),
        "hang_statuses": sorted({r.status["accuracy"] for r in hangs}),
        "hang_latency_max_s": round(max((r.latency_s for r in hangs), default=0.0), 2),
        "counters": {c: after.get(c, 0) - before.get(c, 0) for c in counters},
    }


def bench_hangs(
    items: int, hangs: int, repeats: int, settings: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Hang-free and hang runs, ``repeats`` times each, alternating; ``settings``: pool overrides."""
    settings = settings or {}
    runs: list[dict[str, Any]] = []
    for repeat in range(repeats):
        rng = random.Random(repeat)
        free = ordinary_samples(rng, items)
        with_hangs = ordinary_samples(rng, items)
        positions = {int((k + 0.5) * items / hangs) for k in range(hangs)} if hangs else set()
        for position, answer in zip(sorted(positions), hang_answers(hangs), strict=True):
            with_hangs[position] = _hang_sample(answer)
        free_run = _pool_run(free, set(), f"bench_hangs_free_{repeat}", settings)
        hang_run = _pool_run(with_hangs, positions, f"bench_hangs_{repeat}", settings)
        bound_pool = free_run["wall_s"] + hangs * 10.0 / 2
        bound_math = free_run["wall_s"] + hangs * 3.0 / 2
        runs.append(
            {
                "settings": settings,
                "free": free_run,
                "hangs": hang_run,
                "targets": {
                    "wall <= free + hangs*timeout_s(10)/workers": hang_run["wall_s"] <= bound_pool,
                    "wall <= free + hangs*math_limit(3)/workers": hang_run["wall_s"] <= bound_math,
                    "ordinary p50 <= 2x free p50": hang_run["ordinary_p50_s"]
                    <= 2 * free_run["ordinary_p50_s"],
                },
            }
        )
        print(json.dumps(runs[-1]), flush=True)
    return {"runs": runs}


def borderline_case(exponent: int) -> tuple[str, str]:
    """(content, solution) of a correct answer whose check costs CPU growing with ``exponent``."""
    n = exponent
    student = f"$1/2 + (x+1)^{{{n}}} (x-1)^{{{n}}} - (x^2-1)^{{{n}}}$"
    return f"<answer>{student}</answer>", "<answer>$\\frac{1}{2}$</answer>"


def _borderline_call(content: str, sol: str, timeout_s: float) -> dict[str, Any]:
    from skyrl_rewards.rewards.accuracy import default_accuracy_score

    started = time.monotonic()
    score = default_accuracy_score(content, sol, timeout_s=timeout_s)
    return {
        "value": round(score.value, 3),
        "status": score.status.value,
        "wall_s": round(time.monotonic() - started, 2),
    }


def bench_borderline(exponent: int, timeout_s: float, threads: int, burners: int) -> dict[str, Any]:
    """One call, then ``threads`` at once, then ``threads`` at once next to CPU burners.

    Each stage uses a fresh process (a timeout is remembered per process).
    """
    out: dict[str, Any] = {"exponent": exponent, "timeout_s": timeout_s, "load": os.getloadavg()}
    for stage, count, burn in (
        ("alone", 1, 0),
        ("threads", threads, 0),
        ("busy", threads, burners),
    ):
        out[stage] = json.loads(
            subprocess.run(
                [sys.executable, __file__, "_borderline_stage", str(exponent), str(timeout_s),
                 str(count), str(burn)],
                capture_output=True, text=True, check=True, timeout=1800,
            ).stdout.strip().splitlines()[-1]
        )  # fmt: skip
        print(stage, json.dumps(out[stage]), flush=True)
    return out


def _borderline_stage(exponent: int, timeout_s: float, count: int, burners: int) -> None:
    content, sol = borderline_case(exponent)
    burning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)]
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=count) as executor:
            calls = list(
                executor.map(lambda _: _borderline_call(content, sol, timeout_s), range(count))
            )
        wall_s = time.monotonic() - started
    finally:
        for process in burning:
            process.kill()
            process.wait()
    statuses = [c["status"] for c in calls]
    print(
        json.dumps(
            {
                "calls": count,
                "burners": burners,
                "values": sorted({c["value"] for c in calls}),
                "ok": statuses.count("ok"),
                "timeout": statuses.count("timeout"),
                "max_call_wall_s": max(c["wall_s"] for c in calls),
                "wall_s": round(wall_s, 2),
            }
        )
    )


def _start_math_process() -> tuple[float, int, Any]:
    """Start what the math guard starts first: (seconds to 'ready', its RSS in KB, a closer).

    The fork server in current checkouts; in older ones the math child itself.
    """
    import socket

    started = time.monotonic()
    try:
        from skyrl_rewards.rewards.text.math_children import server_command
    except ImportError:  # checkouts before the rewards/ family folders
        server_command = getattr(importlib.import_module(OLD_MATH_CHECK), "server_command", None)
    if server_command is None:  # older checkouts: one interpreter per child
        child_command = importlib.import_module(OLD_MATH_CHECK).child_command

        child = subprocess.Popen(
            child_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None and child.stdin is not None
        child.stdout.readline()
        ready_s, pid = time.monotonic() - started, child.pid

        def close() -> None:
            assert child.stdin is not None
            child.stdin.close()
            child.wait()

    else:
        ours, theirs = socket.socketpair()
        server = subprocess.Popen(server_command(theirs.fileno()), pass_fds=(theirs.fileno(),))
        theirs.close()
        ours.recv(64)
        ready_s, pid = time.monotonic() - started, server.pid

        def close() -> None:
            ours.close()
            server.wait()

    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = int(next(x for x in status.splitlines() if x.startswith("VmRSS")).split()[1])
    return ready_s, rss_kb, close


def bench_child(starts_count: int, timeouts: int) -> dict[str, Any]:
    """Math process start-up (time to 'ready', RSS) and the cost of a timeout to the next call."""
    starts, rss = [], []
    for _ in range(starts_count):
        ready_s, rss_kb, close = _start_math_process()
        starts.append(ready_s)
        rss.append(rss_kb)
        close()
    try:
        from skyrl_rewards.rewards.text.math_check import check_equal
    except ImportError:  # checkouts before the rewards/ family folders
        check_equal = importlib.import_module(OLD_MATH_CHECK).check_equal

    def timed(student: str, timeout_s: float = 3.0) -> float:
        started = time.monotonic()
        check_equal("$\\frac{1}{2}$", student, timeout_s=timeout_s)
        return time.monotonic() - started

    timed("0.5")  # a warm child
    warm = benchlib.median((timed(f"{i}/{2 * i}") for i in range(2, 7)), 4)
    after_timeout, one_s_later, timeout_calls = [], [], []
    for i in range(timeouts):
        timeout_calls.append(timed(f"$\\Gamma({99990 - i}^{{2}})$", timeout_s=1.0))
        after_timeout.append(timed(f"{i + 10}/{2 * i + 20}"))
        timeout_calls.append(timed(f"$\\Gamma({99980 - i}^{{2}})$", timeout_s=1.0))
        time.sleep(1.0)
        one_s_later.append(timed(f"{i + 30}/{2 * i + 60}"))
    return {
        "load": os.getloadavg(),
        "startup_s_median": benchlib.median(starts),
        "rss_mb_median": round(benchlib.median(rss) / 1024, 1),
        "warm_call_s": warm,
        "timeout_call_1s_limit_wall_s_median": benchlib.median(timeout_calls, 2),
        "next_call_right_after_timeout_s_median": benchlib.median(after_timeout),
        "next_call_1s_after_timeout_s_median": benchlib.median(one_s_later),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "_borderline_stage":
        _borderline_stage(int(args[1]), float(args[2]), int(args[3]), int(args[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["hangs", "borderline", "child", "all"])
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--hangs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--exponent", type=int, default=170)
    parser.add_argument("--math-timeout", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="pool setting for the hangs runs (repeatable), e.g. --set first_pass_s=0.1",
    )
    benchlib.add_compare_argument(parser, "the same measurement")
    options = parser.parse_args(args)
    if options.compare:
        sides = benchlib.compare_sides(
            Path(__file__).resolve(),
            [*options.compare, benchlib.THIS_CHECKOUT],
            lambda _: [arg for arg in args if arg != "--compare" and arg not in options.compare],
            repeats=1,
            timeout_s=7200,
        )
        report = {rev: side for rev, (side,) in sides.items()}
        for rev, side in report.items():
            print(f"{rev}: {json.dumps(side)}")
        if options.json is not None:
            options.json.parent.mkdir(parents=True, exist_ok=True)
            options.json.write_text(json.dumps(report, indent=2))
        return 0
    import skyrl_rewards

    report: dict[str, Any] = {
        "code": str(Path(skyrl_rewards.__file__).parent),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(report), flush=True)
    if options.what in ("child", "all"):
        report["child"] = bench_child(6, options.repeats)
        print("child", json.dumps(report["child"]), flush=True)
    if options.what in ("borderline", "all"):
        report["borderline"] = bench_borderline(
            options.exponent, options.math_timeout, options.threads, options.burners
        )
    if options.what in ("hangs", "all"):
        settings = {k: json.loads(v) for k, v in (item.split("=", 1) for item in options.set)}
        report["hangs"] = bench_hangs(options.items, options.hangs, options.repeats, settings)
    if options.side:
        benchlib.print_side(report)
    elif options.json is not None:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
