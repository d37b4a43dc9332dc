"""How soon ``skyrl-rewards score`` answers Ctrl-C, at 8 instants of its start-up, and what it leaves.

Each instant is one fresh ``score`` run on a reward pool (480 rows of the math
sample: more than ``score`` scores in-process, so it starts a local Ray, on any
revision), in a session of its own, interrupted with SIGINT to its process
group (what a terminal's Ctrl-C does) when an event of its start-up is seen:

- ``imports``: 0.3 s after launch (Python still importing);
- ``config``: the ``rewards:`` line is printed (config and input read);
- ``gcs``: Ray's GCS server process runs (``ray.init`` under way);
- ``gcs+3s``: 3 s later (deep inside ``ray.init`` on a busy machine);
- ``raylet``: Ray's raylet runs;
- ``workers``: a Ray worker process runs (the pool's actors import the rewards);
- ``workers+2s``: 2 s later;
- ``scoring``: the first scored rows are written.

Per instant it reports ``answer_s`` (SIGINT to the first line of output that
answers it: ``Ctrl-C`` or ``interrupted``; the exit, if that comes first),
``exit_s`` (SIGINT to the process's exit) and ``left`` (processes of its
session still alive 3 s after the exit: Ray's, if any). ``--second S`` sends
a second SIGINT S seconds after the first when the command is still running.
``--compare REV`` runs another revision in turns (e.g. ``cc081a1``, before
Ctrl-C was answered at once).

    python scripts/benchmarks/bench_ctrl_c.py
    python scripts/benchmarks/bench_ctrl_c.py --second 1
    python scripts/benchmarks/bench_ctrl_c.py --compare cc081a1 --instants gcs gcs+3s workers
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (  # noqa: E402
    THIS_CHECKOUT,
    add_compare_argument,
    compare_sides,
    load,
    print_side,
    progress,
)

ROWS_COPIES = 20
WAIT_S = 300.0
INSTANTS = ("imports", "config", "gcs", "gcs+3s", "raylet", "workers", "workers+2s", "scoring")


def session_members(session: int) -> list[tuple[int, str]]:
    """``(pid, command line)`` of the live processes of session ``session`` (Linux ``/proc``)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            text = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()[:120]
            found.append((int(stat.parent.name), text))
    return found


def session_processes(session: int) -> list[str]:
    """Command lines of the live processes of session ``session``."""
    return [command for _, command in session_members(session)]


def write_input(folder: Path) -> Path:
    """480 rows: the math sample 20 times over, each copy's completions distinct (no cache hits)."""
    sample = Path("skyrl_rewards/sample_data/math.jsonl").resolve()
    rows = [json.loads(line) for line in sample.read_text().splitlines() if line.strip()]
    path = folder / "long.jsonl"
    with path.open("w") as f:
        for copy in range(ROWS_COPIES):
            for row in rows:
                f.write(json.dumps({**row, "completion": row["completion"] + " " * copy}) + "\n")
    return path


class Run:
    """One ``score`` run in a session of its own, its stderr lines timed as they come."""

    def __init__(self, data: Path, output: Path) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("RAY_ADDRESS", None)
        self.start = time.monotonic()
        self.output = output
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "skyrl_rewards.cli",
                "score",
                "--config",
                "configs/math.yaml",
                "--input",
                str(data),
                "--output",
                str(output),
                "--no-progress",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line.rstrip()))

    def running(self, part: str) -> bool:
        return any(part in p for p in session_processes(self.process.pid))

    def printed(self, part: str) -> bool:
        return any(part in line for _, line in self.lines)

    def wait_for(self, condition: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + WAIT_S
        while not condition():
            if self.process.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True


def reach(run: Run, instant: str) -> bool:
    """Wait until ``instant`` of the run's start-up; False when the run ended first."""
    if instant == "imports":
        time.sleep(0.3)
        return run.process.poll() is None
    if instant == "config":
        return run.wait_for(lambda: run.printed("rewards:"))
    base, _, extra = instant.partition("+")
    condition = {
        "gcs": lambda: run.running("gcs_server"),
        "raylet": lambda: run.running("raylet"),
        "workers": lambda: any(
            p.startswith("ray::") and "Agent" not in p for p in session_processes(run.process.pid)
        ),
        "scoring": lambda: run.output.exists() and run.output.stat().st_size > 0,
    }[base]
    if not run.wait_for(condition):
        return False
    if extra:
        time.sleep(float(extra.rstrip("s")))
    return run.process.poll() is None


def measure(instant: str, data: Path, folder: Path, second_s: float | None) -> dict[str, Any]:
    """One run interrupted at ``instant``: answer and exit latencies, processes left."""
    run = Run(data, folder / f"{instant}.jsonl")
    try:
        if not reach(run, instant):
            return {"instant": instant, "error": "the run ended before the instant"}
        sent = time.monotonic()
        already = len(run.lines)
        os.killpg(run.process.pid, signal.SIGINT)
        if second_s is not None:
            try:
                run.process.wait(timeout=second_s)
            except subprocess.TimeoutExpired:
                os.killpg(run.process.pid, signal.SIGINT)
        run.process.wait(timeout=WAIT_S)
        ended = time.monotonic()
        run._reader.join(timeout=5)
        answers = [
            t for t, line in run.lines[already:] if "Ctrl-C" in line or "interrupted" in line
        ]
        time.sleep(3.0)
        left = session_processes(run.process.pid)
    finally:
        if run.process.poll() is None:
            os.killpg(run.process.pid, signal.SIGKILL)
    for pid, _ in session_members(run.process.pid):  # never leave one behind; counted above
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    return {
        "instant": instant,
        "answer_s": round(min([*answers, ended]) - sent, 2),
        "exit_s": round(ended - sent, 2),
        "rc": run.process.returncode,
        "left": len(left),
        "left_names": left[:3],
    }


def side(args: argparse.Namespace) -> dict[str, Any]:
    """Every instant once, in this revision's tree (the working directory)."""
    with tempfile.TemporaryDirectory(prefix="bench_ctrl_c_") as name:
        folder = Path(name)
        data = write_input(folder)
        runs = []
        for instant in args.instants:
            result = measure(instant, data, folder, args.second)
            progress(json.dumps(result))
            runs.append(result)
    return {"runs": runs, "load": load()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instants", nargs="+", default=list(INSTANTS), choices=INSTANTS)
    parser.add_argument(
        "--second", type=float, default=None, help="seconds after the first SIGINT to send another"
    )
    add_compare_argument(parser, "Ctrl-C latencies")
    args = parser.parse_args()
    if args.side:
        print_side(side(args))
        return
    forwarded = ["--instants", *args.instants]
    if args.second is not None:
        forwarded += ["--second", str(args.second)]
    results = compare_sides(
        Path(__file__).resolve(),
        [THIS_CHECKOUT, *args.compare],
        lambda repeat: forwarded,
        repeats=1,
        timeout_s=WAIT_S * len(args.instants),
    )
    second = f", a second Ctrl-C {args.second:g} s after the first" if args.second else ""
    print(f"Ctrl-C during `skyrl-rewards score` start-up (480 rows, a local Ray){second}")
    print(
        f"{'revision':<10} {'instant':<11} {'answer s':>8} {'exit s':>7} {'rc':>4} {'left':>5} load"
    )
    for revision, sides in results.items():
        for result in sides:
            for run in result["runs"]:
                if "error" in run:
                    print(f"{revision:<10} {run['instant']:<11} {run['error']}")
                    continue
                print(
                    f"{revision:<10} {run['instant']:<11} {run['answer_s']:>8.2f} "
                    f"{run['exit_s']:>7.2f} {run['rc']:>4} {run['left']:>5} {result['load']}"
                )


if __name__ == "__main__":
    main()
