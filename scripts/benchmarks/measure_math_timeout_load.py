"""What a loaded machine does to math-verify's CPU-time limit (issue 33, item 3).

Two measurements, each with load made by this script (busy processes it starts
and kills), so that they can be repeated anywhere:

- ``inflation``: the CPU time and the CPU/wall ratio of the same check
  (the borderline answer of ``bench_hangs.py``, correct), run in a fresh
  process pinned to CPU 0, quiet and next to busy processes: ``spin`` (a
  Python busy loop), ``fork`` (forks and reaps children in a loop, as a test
  suite does), ``mem`` (random writes over 256 MB), pinned to the same CPU or
  to the other one, and eight checks at once next to two spinning processes
  (unpinned: the issue's setting). Rounds are interleaved; medians.
- ``outcome``: ``default_accuracy_score`` of that answer from ``--threads``
  threads next to ``--burners`` spinning and as many forking processes, with
  a limit ``--limit-factor`` times the answer's quiet CPU time (inside the
  limit), in a fresh process per side; ``--compare REV`` runs another
  revision in turns with this checkout under the same load.

Usage::

    python scripts/benchmarks/measure_math_timeout_load.py [--exponent 120] [--rounds 3]
        [--threads 8] [--burners 2] [--limit-factor 1.1] [--compare e729040]

Prints one JSON line per measurement on standard error and the report (JSON)
on standard output; the load average is recorded beside every figure.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib  # noqa: E402

BURNERS = {
    "spin": "while True: pass",
    "fork": (
        "import os\n"
        "while True:\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
    ),
    "mem": (
        "import random\n"
        "data = bytearray(256 * 2**20)\n"
        "spots = [random.randrange(len(data)) for _ in range(1 << 16)]\n"
        "while True:\n"
        "    for spot in spots:\n"
        "        data[spot] ^= 1\n"
    ),
}
"""Busy processes, by kind: a Python loop, a fork loop, random writes over 256 MB."""

SCENARIOS: dict[str, tuple[int, list[tuple[str, int | None]]]] = {
    "quiet": (1, []),
    "2 spin, same CPU": (1, [("spin", 0), ("spin", 0)]),
    "2 fork, same CPU": (1, [("fork", 0), ("fork", 0)]),
    "2 mem, same CPU": (1, [("mem", 0), ("mem", 0)]),
    "2 spin, other CPU": (1, [("spin", 1), ("spin", 1)]),
    "2 mem, other CPU": (1, [("mem", 1), ("mem", 1)]),
    "8 checks + 2 spin, unpinned": (8, [("spin", None), ("spin", None)]),
}
"""Scenario -> (checks at once, busy processes as (kind, CPU or None for unpinned))."""

GOLD = "$\\frac{1}{2}$"


VARIABLES = "abcdefghijklmnopqrstuvwxyz"


def borderline_student(exponent: int, variable: str = "x") -> str:
    """A correct answer to :data:`GOLD` whose check costs CPU growing with ``exponent``.

    Answers in different variables cost the same, and share nothing in
    SymPy's cache: a process that checked one answer checks it again in
    milliseconds.
    """
    n, v = exponent, variable
    return f"$1/2 + ({v}+1)^{{{n}}} ({v}-1)^{{{n}}} - ({v}^2-1)^{{{n}}}$"


@contextmanager
def busy(processes: Sequence[tuple[str, int | None]]) -> Iterator[None]:
    """Busy processes of the given kinds, pinned where a CPU is given; killed on exit."""
    started = []
    try:
        for kind, cpu in processes:
            command = [sys.executable, "-c", BURNERS[kind]]
            if cpu is not None:
                command = ["taskset", "-c", str(cpu), *command]
            started.append(subprocess.Popen(command))
        time.sleep(0.5)  # let them start (imports, the 256 MB buffer)
        yield
    finally:
        for process in started:
            process.kill()
            process.wait()


def _math_module(name: str) -> Any:
    """``math_check`` or ``math_child`` of the checkout on ``PYTHONPATH``, whichever layout it has."""
    try:
        return importlib.import_module(f"skyrl_rewards.rewards.text.{name}")
    except ImportError:  # checkouts before the rewards/ family folders
        return importlib.import_module(f"skyrl_rewards.rewards.{name}")


def _one_check(args: tuple[int | None, int]) -> tuple[bool, float, float]:
    """In a fresh forked process: (equal, CPU seconds, wall seconds) of one check, parsers warm."""
    cpu, exponent = args
    verify_inline = _math_module("math_child").verify_inline

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    logging.disable(logging.WARNING)
    verify_inline(GOLD, "0.5")  # parsers warm, as in a forked math child
    student = borderline_student(exponent)
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    equal = verify_inline(GOLD, student)
    return equal, time.process_time() - cpu_start, time.perf_counter() - wall_start


def inflation(exponent: int, rounds: int) -> dict[str, Any]:
    """CPU time and CPU/wall ratio of the same check per scenario (medians over ``rounds``)."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in SCENARIOS}
    loads: list[float] = []
    for round_index in range(rounds):
        for name, (checks, processes) in SCENARIOS.items():
            pin = 0 if checks == 1 else None
            with busy(processes), get_context("fork").Pool(checks, maxtasksperchild=1) as pool:
                results = pool.map(_one_check, [(pin, exponent)] * checks, chunksize=1)
            if not all(equal for equal, _, _ in results):
                raise RuntimeError(f"{name}: the check did not find the answer equal")
            samples[name].extend((cpu, cpu / wall) for _, cpu, wall in results)
            loads.append(benchlib.load())
            benchlib.progress(
                json.dumps(
                    {
                        "round": round_index,
                        "scenario": name,
                        "cpu_s": [round(cpu, 3) for _, cpu, _ in results],
                        "ratio": [round(cpu / wall, 2) for _, cpu, wall in results],
                        "load": loads[-1],
                    }
                )
            )
    quiet = statistics.median(cpu for cpu, _ in samples["quiet"])
    return {
        "exponent": exponent,
        "rounds": rounds,
        "load": [min(loads), max(loads)],
        "scenarios": {
            name: {
                "cpu_s": benchlib.median(cpu for cpu, _ in values),
                "cpu_s_max": round(max(cpu for cpu, _ in values), 3),
                "inflation": round(statistics.median(cpu for cpu, _ in values) / quiet, 3),
                "inflation_max": round(max(cpu for cpu, _ in values) / quiet, 3),
                "ratio": benchlib.median((ratio for _, ratio in values), 2),
            }
            for name, values in samples.items()
        },
    }


def outcome_side(exponent: int, threads: int, burners: int, limit_s: float) -> dict[str, Any]:
    """One side of ``outcome``: ``threads`` scores at once next to busy processes."""
    from skyrl_rewards.rewards.accuracy import default_accuracy_score

    math_check = _math_module("math_check")

    sol = f"<answer>{GOLD}</answer>"
    usage = getattr(math_check, "last_check_usage", None)  # absent before the margin

    def score(index: int) -> tuple[float, str, bool]:
        content = f"<answer>{borderline_student(exponent, VARIABLES[index])}</answer>"
        result = default_accuracy_score(content, sol, timeout_s=limit_s)
        last = usage() if usage is not None else None
        return result.value, result.status.value, bool(last and last.extended)

    processes = [("spin", None)] * burners + [("fork", None)] * burners
    with busy(processes):
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads) as executor:
            results = list(executor.map(score, range(threads)))
        wall_s = time.perf_counter() - start
    statuses = [status for _, status, _ in results]
    return {
        "values": sorted({round(value, 3) for value, _, _ in results}),
        "ok": statuses.count("ok"),
        "timeout": statuses.count("timeout"),
        "extended": sum(extended for _, _, extended in results) if usage is not None else None,
        "wall_s": round(wall_s, 2),
        "load": benchlib.load(),
    }


def outcome(
    exponent: int,
    threads: int,
    burners: int,
    limit_factor: float,
    rounds: int,
    revisions: list[str],
) -> dict[str, Any]:
    """``outcome_side`` for each revision in turns, the limit set from the quiet CPU time."""
    with get_context("fork").Pool(1, maxtasksperchild=1) as pool:
        checks = pool.map(_one_check, [(None, exponent)] * 3, chunksize=1)
    quiet = statistics.median(cpu for _, cpu, _ in checks)
    limit_s = round(quiet * limit_factor, 3)
    sides = benchlib.compare_sides(
        Path(__file__),
        revisions,
        lambda _: [str(exponent), str(threads), str(burners), str(limit_s)],
        repeats=rounds,
        timeout_s=900,
        on_result=lambda rev, repeat, result: benchlib.progress(
            json.dumps({"revision": rev, "round": repeat, **result})
        ),
    )
    return {
        "quiet_cpu_s": round(quiet, 3),
        "limit_s": limit_s,
        "threads": threads,
        "busy_processes": f"{burners} spin + {burners} fork",
        "sides": sides,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the measurements and print the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", choices=["inflation", "outcome", "all"], default="all")
    parser.add_argument("--exponent", type=int, default=120, help="check cost (120: about 1 s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--limit-factor", type=float, default=1.1)
    benchlib.add_compare_argument(parser, "the outcome measurement")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--side"]:  # one side of the outcome comparison (compare_sides)
        exponent, threads, burners, limit_s = argv[1:]
        benchlib.print_side(outcome_side(int(exponent), int(threads), int(burners), float(limit_s)))
        return 0
    args = parser.parse_args(argv)
    if args.threads > len(VARIABLES):
        parser.error(f"--threads: at most {len(VARIABLES)} (one answer per thread)")
    if os.cpu_count() is None or os.cpu_count() < 2:  # type: ignore[operator]
        parser.error("needs at least 2 CPUs (busy processes are pinned to CPU 0 and CPU 1)")
    report: dict[str, Any] = {"cpus": os.cpu_count()}
    if args.what in ("inflation", "all"):
        report["inflation"] = inflation(args.exponent, args.rounds)
    if args.what in ("outcome", "all"):
        report["outcome"] = outcome(
            args.exponent,
            args.threads,
            args.burners,
            args.limit_factor,
            args.rounds,
            [benchlib.THIS_CHECKOUT, *args.compare],
        )
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
