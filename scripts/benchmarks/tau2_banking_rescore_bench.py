"""Per-run time of ``rescore``'s replay of banking_knowledge runs against tau2's own evaluator.

The runs are written by tau2-bench 1.x's own code, through the ``simulate`` of
``scripts/samples/make_tau2_infra_results_sample.py`` (as its banking file):
for each of the first ``--tasks`` tasks whose gold actions hold at least one
read and two writes, ``--trials`` runs on the retrieval setup, each a
greeting, one call of every search tool of the setup (``KB_search``,
``grep``; the query names the task's first discoverable tool or required
document), the task's gold actions (a read and a few writes; every second
trial without its last write, so half the runs pay 0.0), a closing reply and
the user's ``###STOP###``. Every result is tau2's environment's
``get_response``; each run is scored by ``evaluate_simulation`` and the file
saved with ``Results.save`` (in a scratch folder).

Timed, per setup:

- ``tau2``: ``evaluate_simulation`` (evaluation type ``all``, the environment
  arguments of tau2's runner) on every run of ``Results.load`` of the file,
  in this process, each run once;
- ``ours``: in a fresh process per checkout (this one and every
  ``--compare`` tree, e.g. ``git worktree add /tmp/base 39434f1``; each runs
  from its own folder, first on ``PYTHONPATH``, and says where its
  ``tau_bench_env`` came from) and per reward (the default, ``hash``, and
  ``reward="tau2"``): the domain loaded, then ``replay_simulation`` of every
  run of the file, each run once in file order (the first pass: what a
  ``rescore`` pays, each task's initial state and gold replay included), then
  once more (the second pass: those built already). Checkouts alternate over
  ``--rounds``; medians of the per-run means are printed.

Both wall and CPU (process) time are measured; the CPU time is the figure on
a shared machine. With ``reward="tau2"`` every run's reward must equal tau2's,
on every checkout and pass; the default reward (tau-bench's data hash, which
reads no reward basis: it fails a run that tau2 passes on its ``ACTION`` basis
alone) must give the same rewards on every checkout and pass, and its
agreement with tau2 is printed (the script exits 1 otherwise). Needs tau2-bench 1.x installed
with its data (``TAU2_DATA_DIR``), Python 3.12. Usage:

    TAU2_DATA_DIR=/path/to/tau2-bench/data python scripts/benchmarks/tau2_banking_rescore_bench.py \\
        --setups grep_only bm25_grep --tasks 20 --trials 2 --rounds 3 --compare /tmp/base-39434f1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "samples"))  # the sample writers' tau2 code
DOMAIN = "banking_knowledge"
SEARCH_ARGUMENT = {"KB_search": "query", "grep": "pattern"}
"""The search tools of the served setups and their one argument."""


def _quiet() -> None:
    from loguru import logger

    logger.disable("tau2")


def _query(task: Any) -> str:
    """What the run searches for: the task's first discoverable tool, else its first document."""
    for action in task.evaluation_criteria.actions or []:
        if action.arguments.get("agent_tool_name"):
            return str(action.arguments["agent_tool_name"])
    return str((task.required_documents or ["card"])[0])


def write_file(path: Path, setup: str, tasks: int, trials: int) -> None:
    """Write the runs (see above) as tau2's ``Results`` JSON at ``path``."""
    from make_tau2_infra_results_sample import read_only, run_config, simulate
    from make_tau2_results_sample import TIMESTAMP
    from tau2.data_model.simulation import Results
    from tau2.registry import registry
    from tau2.runner.build import build_environment
    from tau2.runner.helpers import get_info

    config = run_config(DOMAIN, setup, trials)
    environment = build_environment(DOMAIN, env_kwargs={"retrieval_variant": setup})
    searches = [name for name in SEARCH_ARGUMENT if environment.tools.has_tool(name)]

    def shape(task: Any) -> tuple[int, int]:
        actions = [
            (a.requestor, a.name, dict(a.arguments)) for a in task.evaluation_criteria.actions
        ]
        reads = sum(read_only(environment, *a) for a in actions)
        return reads, len(actions) - reads

    chosen = [
        t
        for t in sorted(registry.get_tasks_loader(DOMAIN)(), key=lambda t: t.id)
        if shape(t)[0] >= 1 and shape(t)[1] >= 2
    ][:tasks]
    runs = [
        simulate(
            config,
            task,
            "without last write" if trial % 2 else "ground truth",
            trial,
            [("assistant", name, {SEARCH_ARGUMENT[name]: _query(task)}) for name in searches],
        )
        for trial in range(trials)
        for task in chosen
    ]
    info = get_info(config)
    Results(timestamp=TIMESTAMP, info=info, tasks=chosen, simulations=runs).save(path)


def time_tau2(path: Path) -> dict[str, Any]:
    """tau2's ``evaluate_simulation`` on every run of the file: per-run times and rewards."""
    from tau2.data_model.simulation import Results
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.runner.build import _build_env_kwargs

    results = Results.load(path)
    from make_tau2_infra_results_sample import run_config

    config = run_config(DOMAIN, results.info.retrieval_config, results.info.num_trials)
    tasks = {t.id: t for t in results.tasks}
    wall, cpu, rewards = [], [], []
    for run in results.simulations:
        task = tasks[run.task_id]
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        info = evaluate_simulation(
            simulation=run,
            task=task,
            evaluation_type=EvaluationType.ALL,
            solo_mode=False,
            domain=DOMAIN,
            env_kwargs=_build_env_kwargs(config, task),
        )
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start_wall)
        rewards.append(info.reward)
    return {"wall": wall, "cpu": cpu, "rewards": rewards}


def one_checkout(path: Path, reward: str) -> dict[str, Any]:
    """Child process: this checkout's two passes over every run with ``reward`` (see above)."""
    import tau_bench_env
    from tau_bench_env.backends import load_domain
    from tau_bench_env.rescoring.rescore import replay_simulation
    from tau_bench_env.rescoring.tau2_results import read_simulations

    raw = json.loads(path.read_text())
    domain = load_domain("tau2_bench", f"{DOMAIN}@{raw['info']['retrieval_config']}")
    simulations = read_simulations(raw)
    figures: dict[str, Any] = {"code": str(Path(tau_bench_env.__file__).parents[1])}
    for number in (1, 2):
        wall, cpu, rewards = [], [], []
        for simulation in simulations:
            start_wall, start_cpu = time.perf_counter(), time.process_time()
            score = replay_simulation(domain, simulation, reward=reward)
            cpu.append(time.process_time() - start_cpu)
            wall.append(time.perf_counter() - start_wall)
            rewards.append(score.reward)
        figures[f"{reward} pass {number}"] = {"wall": wall, "cpu": cpu, "rewards": rewards}
    return figures


def run_checkout(tree: Path, path: Path, reward: str) -> dict[str, Any]:
    """:func:`one_checkout` in a fresh interpreter from ``tree``."""
    rest = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(tree), rest) if p)}
    command = [sys.executable, str(Path(__file__).resolve()), "--one-checkout", str(path), reward]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: exited {done.returncode}: {done.stderr[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(figures["code"]).resolve() != tree.resolve():
        raise RuntimeError(f"{tree}: tau_bench_env came from {figures['code']}")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", nargs="+", default=["grep_only", "bm25_grep"])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every checkout")
    parser.add_argument("--compare", nargs="*", type=Path, default=[], help="other checkouts")
    parser.add_argument("--one-checkout", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    _quiet()
    if args.one_checkout is not None:
        path, reward = args.one_checkout
        print(json.dumps(one_checkout(Path(path), reward)))  # noqa: T201 - to the parent
        return 0
    trees = [ROOT, *args.compare]
    print(f"load before: {os.getloadavg()}")  # noqa: T201 - script output
    failed = False
    with tempfile.TemporaryDirectory() as scratch:
        for setup in args.setups:
            path = Path(scratch) / f"{setup}.json"
            write_file(path, setup, args.tasks, args.trials)
            tau2 = [time_tau2(path) for _ in range(args.rounds)]
            theirs = tau2[0]["rewards"]
            ours: dict[Path, list[dict[str, Any]]] = {tree: [] for tree in trees}
            for _ in range(args.rounds):
                for tree in trees:
                    figures = run_checkout(tree, path, "hash")
                    ours[tree].append({**figures, **run_checkout(tree, path, "tau2")})
            runs, paid = len(theirs), sum(r == 1.0 for r in theirs)
            print(f"\n{setup}: {runs} runs, {paid} pay 1.0 (tau2)")  # noqa: T201
            tau2_cpu = statistics.median(statistics.mean(r["cpu"]) for r in tau2)
            tau2_wall = statistics.median(statistics.mean(r["wall"]) for r in tau2)
            print(  # noqa: T201
                f"  tau2 evaluate_simulation: {1000 * tau2_cpu:.2f} ms CPU, "
                f"{1000 * tau2_wall:.2f} ms wall per run (median of {args.rounds} rounds)"
            )
            hashes = ours[ROOT][0]["hash pass 1"]["rewards"]
            agree = sum(ours == theirs for ours, theirs in zip(hashes, theirs, strict=True))
            print(f"  reward hash: {agree} of {runs} runs as tau2's reward")  # noqa: T201
            for tree in trees:
                for key in ("hash pass 1", "hash pass 2", "tau2 pass 1", "tau2 pass 2"):
                    rounds = [r[key] for r in ours[tree]]
                    expected = theirs if key.startswith("tau2") else hashes
                    if any(r["rewards"] != expected for r in rounds):
                        print(f"  {tree} {key}: other rewards")  # noqa: T201
                        failed = True
                    cpu = statistics.median(statistics.mean(r["cpu"]) for r in rounds)
                    wall = statistics.median(statistics.mean(r["wall"]) for r in rounds)
                    print(  # noqa: T201
                        f"  {tree} reward {key}: {1000 * cpu:.2f} ms CPU ({tau2_cpu / cpu:.1f}x), "
                        f"{1000 * wall:.2f} ms wall ({tau2_wall / wall:.1f}x) per run"
                    )
    print(f"\nload after: {os.getloadavg()}")  # noqa: T201
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
