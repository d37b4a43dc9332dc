"""Whole-process wall time of ``tau-bench-env rescore`` on a tau-bench results file, against tau-bench's own method.

Three commands, each timed as a whole process (interpreter start, imports,
data load, every run, output) ``--repeats`` times, median reported:

- ``ours``: ``python -m tau_bench_env.cli rescore FILE --domain D --backend
  tau_bench --json`` run from this checkout (and from every ``--tree``, e.g.
  an older commit exported with ``git archive``, for a side-by-side figure;
  each runs with its own tree as working directory and first on
  ``PYTHONPATH``);
- ``tau-bench``: tau-bench's own reload-and-replay method on the same runs, in
  a fresh interpreter (this script with ``--reference-run``): per run, as
  tau-bench's ``run.py`` does, ``get_env`` (loads the data), ``reset`` (loads
  it again), every recorded agent action through ``Env.step`` (the first tool
  call of an assistant message, else a reply; the user's recorded messages
  answer the replies), and at the end ``Env.calculate_reward`` (hash, reload,
  replay the ground truth, hash again). A run that reaches neither
  ``###STOP###`` nor a terminate tool was cut off and scores 0.0, as in
  ``rescore``.

The rewards are checked once, outside the timing: ``rescore --keep-diverged``
(every run scored) and the reference must give the same number of runs and
the same success rate (the script exits 1 otherwise). Needs tau-bench
installed from its repository (with litellm, which its envs import).

Usage:
    python scripts/benchmarks/tau_bench_rescore_bench.py RESULTS.json --domain airline --repeats 5 \
        --tree /tmp/old-checkout
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STOP = "###STOP###"


def reference_rewards(path: Path, domain: str) -> list[float]:
    """tau-bench's own method on every run of the file: one reward per run, in file order."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from tau_bench.envs import get_env
    from tau_bench.envs.user import BaseUserSimulationEnv
    from tau_bench.types import RESPOND_ACTION_NAME, Action

    class RecordedUser(BaseUserSimulationEnv):
        """Answers with the run's recorded user messages, in order."""

        def __init__(self, messages: Sequence[str]) -> None:
            self._messages = list(messages)

        def reset(self, instruction: str | None = None) -> str:
            return self._next()

        def step(self, content: str) -> str:
            return self._next()

        def get_total_cost(self) -> float:
            return 0.0

        def _next(self) -> str:
            return self._messages.pop(0) if self._messages else ""

    rewards = []
    for run in json.loads(path.read_text(encoding="utf-8")):
        traj = run["traj"]
        env = get_env(domain, "human", "none", "test", task_index=int(run["task_id"]))
        env.user = RecordedUser(
            [str(m.get("content") or "") for m in traj if m.get("role") == "user"]
        )
        env.reset(task_index=int(run["task_id"]))
        reward = 0.0
        for message in traj:
            if message.get("role") != "assistant":
                continue
            calls = message.get("tool_calls") or []
            if calls:
                function = calls[0]["function"]
                action = Action(name=function["name"], kwargs=json.loads(function["arguments"]))
            else:
                action = Action(
                    name=RESPOND_ACTION_NAME, kwargs={"content": message.get("content") or ""}
                )
            response = env.step(action)
            if response.done:
                reward = response.reward
                break
        rewards.append(float(reward))
    return rewards


def timed(command: Sequence[str], *, cwd: Path, pythonpath: str) -> tuple[float, str]:
    """(wall seconds, stdout) of one whole process; raises when it fails."""
    env = {**os.environ, "PYTHONPATH": pythonpath}
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} (in {cwd}) exited {done.returncode}: {done.stderr}"
        )
    return wall, done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a tau-bench results file")
    parser.add_argument("--domain", required=True, choices=["airline", "retail"])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each command (median)")
    parser.add_argument(
        "--reference-repeats", type=int, default=3, help="runs of tau-bench's method (median)"
    )
    parser.add_argument(
        "--tree", type=Path, action="append", default=[], help="another checkout to time too"
    )
    parser.add_argument("--reference-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    path = args.results.resolve()
    if args.reference_run:
        print(json.dumps(reference_rewards(path, args.domain)))  # noqa: T201 - script output
        return 0
    rest = os.environ.get("PYTHONPATH", "")

    def path_with(tree: Path) -> str:
        return os.pathsep.join(part for part in (str(tree), rest) if part)

    load_before = os.getloadavg()
    python = sys.executable
    rescore = ["-m", "tau_bench_env.cli", "rescore", str(path), "--domain", args.domain]
    rescore += ["--backend", "tau_bench", "--json"]

    check = json.loads(
        timed([python, *rescore, "--keep-diverged"], cwd=ROOT, pythonpath=path_with(ROOT))[1]
    )
    walls: dict[str, list[float]] = {}
    trees = [ROOT, *(tree.resolve() for tree in args.tree)]
    reference_command = [python, str(Path(__file__).resolve()), str(path)]
    reference_command += ["--domain", args.domain, "--reference-run"]
    reference: list[float] = []
    for repeat in range(max(args.repeats, args.reference_repeats)):
        if repeat < args.repeats:
            for tree in trees:
                wall = timed([python, *rescore], cwd=tree, pythonpath=path_with(tree))[0]
                walls.setdefault(f"ours ({tree})", []).append(wall)
        if repeat < args.reference_repeats:
            wall, out = timed(reference_command, cwd=ROOT, pythonpath=path_with(ROOT))
            walls.setdefault("tau-bench's method", []).append(wall)
            reference = json.loads(out)
    medians = {name: statistics.median(values) for name, values in walls.items()}
    base = medians["tau-bench's method"]
    lines = [
        f"file: {path} ({len(reference)} runs, domain {args.domain}); load average "
        f"{load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after",
        "| command | repeats | whole-process wall s, median | min | each "
        "| x tau-bench's method (medians) |",
        "|---|---|---|---|---|---|",
    ]
    for name, values in walls.items():
        each = " ".join(f"{value:.2f}" for value in values)
        lines.append(
            f"| {name} | {len(values)} | {medians[name]:.2f} | {min(values):.2f} | {each} | "
            f"{base / medians[name]:.1f}x |"
        )
    success = sum(reference) / len(reference) if reference else 0.0
    same = check["scored"] == len(reference) and abs(check["success_rate"] - success) < 1e-12
    lines.append(
        f"rewards: rescore --keep-diverged {check['scored']} runs, success rate "
        f"{check['success_rate']:.4f}; tau-bench's method {len(reference)} runs, "
        f"{success:.4f}: {'same' if same else 'DIFFERENT'}"
    )
    print("\n".join(lines))  # noqa: T201 - script output
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
