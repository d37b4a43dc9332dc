"""What ``skyrl-rewards score`` costs on the bundled samples: imports, then the command itself.

Each run is a fresh process that imports ``skyrl_rewards.cli.main`` (timed:
``import_s``) and runs ``main(["score", ...])`` on one bundled sample
(timed: ``command_s``, everything after the imports: config, input, Ray and
the pool when there is one, scoring, table, histograms). This checkout scores
the samples (24 or 8 rows) in-process; ``--compare cc081a1`` runs the commit
before, which started a local Ray and a pool for every input, in turns with
it on the same load. ``--pool`` adds this checkout's ``--pool`` runs.

    python scripts/benchmarks/bench_score_start.py --compare cc081a1
    python scripts/benchmarks/bench_score_start.py --tasks rec math --repeats 3 --pool
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (  # noqa: E402
    THIS_CHECKOUT,
    add_compare_argument,
    compare_sides,
    load,
    print_side,
)

TASKS = ("rec", "detection", "math", "gui", "docqa")
PROBE = """
import json, sys, time
start = time.perf_counter()
from skyrl_rewards.cli.main import main
imported = time.perf_counter()
code = main(sys.argv[1:])
done = time.perf_counter()
print(json.dumps({"import_s": imported - start, "command_s": done - imported, "rc": code}))
"""


def one_run(task: str, extra: list[str], folder: Path) -> dict[str, Any]:
    """One fresh ``score`` process on the sample ``task``; its import and command seconds."""
    args = ["score", "--config", f"configs/{task}.yaml"]
    args += ["--input", f"skyrl_rewards/sample_data/{task}.jsonl"]
    args += ["--output", str(folder / f"{task}.jsonl"), "--no-progress", *extra]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=600
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"import_s"')]
    if not lines:
        raise RuntimeError(f"{task}: the run failed:\n{done.stderr[-2000:]}")
    return json.loads(lines[-1])


def side(args: argparse.Namespace) -> dict[str, Any]:
    """Every task once (and with ``--pool`` when asked), in this revision's tree."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench_score_start_") as name:
        for task in args.tasks:
            knows_pool = "--pool" in Path("skyrl_rewards/cli/main.py").read_text()
            modes = [("default", [])] + (
                [("--pool", ["--pool"])] if args.pool and knows_pool else []
            )
            for mode, extra in modes:
                runs.append({"task": task, "mode": mode, **one_run(task, extra, Path(name))})
    return {"runs": runs, "load": load()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each task per revision")
    parser.add_argument("--pool", action="store_true", help="also this checkout's --pool runs")
    add_compare_argument(parser, "score start-up")
    args = parser.parse_args()
    if args.side:
        print_side(side(args))
        return
    forwarded = ["--tasks", *args.tasks]
    results = compare_sides(
        Path(__file__).resolve(),
        [THIS_CHECKOUT, *args.compare],
        lambda repeat: forwarded + (["--pool"] if args.pool else []),
        repeats=args.repeats,
        timeout_s=600.0 * len(args.tasks) * (2 if args.pool else 1),
    )
    # --pool runs only where the revision's `score` knows it (not before this change)
    print("skyrl-rewards score on the bundled samples: median seconds over repeats")
    print(f"{'revision':<10} {'task':<10} {'mode':<8} {'import s':>8} {'command s':>9} load")
    for revision, sides in results.items():
        loads = [side_result["load"] for side_result in sides]
        rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for side_result in sides:
            for run in side_result["runs"]:
                rows.setdefault((run["task"], run["mode"]), []).append(run)
        for (task, mode), runs in rows.items():
            imports = statistics.median(r["import_s"] for r in runs)
            command = statistics.median(r["command_s"] for r in runs)
            print(
                f"{revision:<10} {task:<10} {mode:<8} {imports:>8.2f} {command:>9.2f} "
                f"{statistics.median(loads):.1f}"
            )


if __name__ == "__main__":
    main()
