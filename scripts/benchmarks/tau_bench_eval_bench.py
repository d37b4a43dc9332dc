"""Benchmark ``tau-bench-env eval``: oracle-agent episodes per second, one process vs Ray workers.

The agent is the tests' scripted oracle (``tests/tau_bench_env/tau_eval_helpers.py``)
behind an OpenAI-compatible HTTP server on 127.0.0.1, run in its own process;
it plays each task's ground truth with native ``tool_calls``. The user is the
replay user (no model). Per domain, every task of the split runs
``--trials`` times in four setups:

- ``tau-bench loop``: tau-bench's per-episode method re-implemented plainly
  (tau-bench itself is not needed): the same agent over HTTP, data loaded from
  disk at reset, and at the end the whole data hashed, reloaded, the ground
  truth replayed and hashed again; ``--concurrency`` threads in one process;
- ``eval, 1 process``: ``tau-bench-env eval`` with ``--concurrency`` threads;
- ``eval, N Ray workers``: the same on a local Ray with ``--workers`` actors
  (``--concurrency`` threads each); the time includes starting the workers
  and loading the domain in each ("2nd half" is the rate over the second
  half of the episodes: the steady rate, once every worker is up).

Every setup must score every episode 1.0 (the script exits 1 otherwise).

``--latency-s L`` measures instead what ``eval`` adds to episodes that wait on
endpoints: the oracle agent and a scripted user (``UserServer``: names the
task, then ``###STOP###``; the ``openai`` user kind) both answer every request
after L seconds, in a child process, and ``eval`` runs ``--concurrency``
episodes at once (default 16 here) in one process. An episode's ideal time is
its requests times L; the figure is the *overhead*, total episode wall time
over total ideal time, minus one (the run's end-to-end overhead, which adds
the waves' tail, is printed beside it). ``--compare DIR ...`` runs the same
measurement, in alternating rounds, on other checkouts (``PYTHONPATH=DIR``:
for example a ``git worktree`` of an older commit) and prints the medians side
by side.

Usage:
    python scripts/benchmarks/tau_bench_eval_bench.py --domains airline retail --trials 8
    python scripts/benchmarks/tau_bench_eval_bench.py --latency-s 0.1 --domains airline \\
        --trials 4 --rounds 5 --compare /tmp/wt-e484cde
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tau_bench_env"))
sys.path.insert(0, str(ROOT / "scripts" / "benchmarks"))

from tau_eval_helpers import AgentServer, UserServer, user_turns  # noqa: E402

from tau_bench_env.backends import Domain, load_domain  # noqa: E402
from tau_bench_env.config import env_config_from  # noqa: E402
from tau_bench_env.data_model.episode_data import clone  # noqa: E402
from tau_bench_env.data_model.hashing import data_hash  # noqa: E402
from tau_bench_env.data_model.tasks import RESPOND, Task  # noqa: E402
from tau_bench_env.episode.actions import parse_turn  # noqa: E402
from tau_bench_env.episode.prompts import system_prompt  # noqa: E402
from tau_bench_env.episode.reward import GROUND_TRUTH, check_outputs  # noqa: E402
from tau_bench_env.evaluation.evaluate import EvalSpec, evaluate, run_threads  # noqa: E402
from tau_bench_env.evaluation.policy import ChatPolicy, PolicyConfig  # noqa: E402


def serve(backend: str, domain_name: str, split: str, urls: Any, latency_s: float = 0.0) -> None:
    """Child process: the oracle agent server (and, with a latency, the scripted user's) until
    terminated; puts the agent's base URL (and the user's) on ``urls``."""
    domain = load_domain(backend, domain_name)
    agent = AgentServer(domain, domain.tasks(split))
    user = UserServer(domain.tasks(split))
    agent.delay_s = user.delay_s = latency_s
    with agent.running(), user.running():
        urls.put((agent.base_url, user.base_url))
        while True:
            time.sleep(3600)


def _plain_tool(domain: Domain, data: dict[str, Any], name: str, kwargs: dict[str, Any]) -> str:
    if name not in domain.tools:
        return f"Unknown action {name}"
    try:
        return domain.tools[name](data, clone(kwargs))
    except Exception as error:  # noqa: BLE001 - tau-bench turns any tool error into an observation
        return f"Error: {error}"


def tau_bench_loop_episode(
    domain: Domain, task: Task, policy: ChatPolicy, first_message: str, max_turns: int = 30
) -> float:
    """One episode the way tau-bench's run.py scores it: disk load, full hashes, replay."""
    from tau_bench_bench import disk_loader

    load = disk_loader(domain)
    data = load()
    conversation: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt(domain)},
        {"role": "user", "content": first_message},
    ]
    replies: list[str] = []
    for turn in range(1, max_turns + 1):
        reply = policy.act(conversation, domain.tool_schemas, turn)
        conversation.append(reply.message)
        action = parse_turn(reply.text).action
        if action is None:
            continue
        if action.name == RESPOND:
            replies.append(str(action.kwargs["content"]))
            break  # the replay user has no more turns: ###STOP###
        observation = _plain_tool(domain, data, action.name, dict(action.kwargs))
        conversation.append(
            {"role": "tool", "tool_call_id": reply.tool_call_id, "content": observation}
        )
        if action.name in domain.terminate_tools:
            break
    agent_hash = data_hash(data)
    gt_data = load()
    for action in task.actions:
        if action.name != RESPOND and action.name not in domain.terminate_tools:
            _plain_tool(domain, gt_data, action.name, dict(action.kwargs))
    ok = agent_hash == data_hash(gt_data) and all(check_outputs(task.outputs, replies).values())
    return 1.0 if ok else 0.0


def time_tau_bench_loop(
    domain: Domain, split: str, url: str, trials: int, concurrency: int
) -> tuple[float, int, int, float | None]:
    """(seconds, episodes, successes, no steady rate) of the plain tau-bench loop."""
    policy = ChatPolicy(PolicyConfig(base_url=url, model="oracle"))
    tasks = domain.tasks(split)
    firsts = user_turns(tasks)
    jobs = [task for task in tasks for _ in range(trials)]
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        rewards = list(
            pool.map(
                lambda t: tau_bench_loop_episode(domain, t, policy, firsts[t.task_id][0]), jobs
            )
        )
    return time.perf_counter() - start, len(rewards), int(sum(rewards)), None


def time_eval(
    spec: EvalSpec, tasks: int, trials: int, runner: Any
) -> tuple[float, int, int, float]:
    """(seconds, episodes, successes, episodes/s over the second half) of ``evaluate``."""
    GROUND_TRUTH.clear()
    ends: list[float] = []

    def timed(spec: EvalSpec, items: Any) -> Iterator[dict[str, Any]]:
        for record in runner(spec, items):
            ends.append(time.perf_counter())
            yield record

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        summary = evaluate(
            spec, Path(out), tasks=list(range(tasks)), trials=trials, runner=timed, progress=False
        )
        end = time.perf_counter()
    wins = round(summary["success_rate"] * summary["episodes"])
    half = len(ends) // 2
    steady = (len(ends) - half) / (ends[-1] - ends[half - 1])
    return end - start, summary["episodes"] + summary["errors"], wins, steady


def measure_latency(
    backend: str, name: str, split: str, trials: int, concurrency: int, latency_s: float
) -> dict[str, Any]:
    """One run of the ``--latency-s`` setup (see the module docstring) in this process."""
    domain = load_domain(backend, name)
    tasks = domain.tasks(split)
    urls = multiprocessing.get_context("spawn").Queue()
    server = multiprocessing.get_context("spawn").Process(
        target=serve, args=(backend, name, split, urls, latency_s)
    )
    server.start()
    try:
        agent_url, user_url = urls.get(timeout=120)
        user = {"kind": "openai", "base_url": user_url, "model": "user"}
        spec = EvalSpec(
            env=env_config_from({"backend": backend, "user": user}),
            policy=PolicyConfig(base_url=agent_url, model="oracle"),
            domain=name,
            split=split,
        )
        with tempfile.TemporaryDirectory() as out:
            start, cpu = time.perf_counter(), time.process_time()
            summary = evaluate(
                spec,
                Path(out),
                tasks=list(range(len(tasks))),
                trials=trials,
                runner=partial(run_threads, concurrency=concurrency),
                progress=False,
            )
            seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu
            runs = json.loads((Path(out) / "results.json").read_text())
    finally:
        server.terminate()
        server.join()
    # requests per episode: the agent's turns, and the user's messages (the opening one, one per
    # reply of the agent, the closing ###STOP###: the user messages of the trajectory)
    requests = [
        run["info"]["metrics"]["turns"] + sum(1 for m in run["traj"] if m["role"] == "user")
        for run in runs
    ]
    walls = [run["info"]["wall_s"] for run in runs]
    ideal = sum(requests) * latency_s
    import tau_bench_env

    return {
        "code": str(Path(tau_bench_env.__file__).resolve().parents[1]),
        "episodes": summary["episodes"],
        "errors": summary["errors"],
        "success_rate": summary["success_rate"],
        "requests": sum(requests),
        "seconds": seconds,
        "cpu_ms_per_request": 1000 * cpu_s / sum(requests),
        "episode_overhead": sum(walls) / ideal - 1.0,
        "run_overhead": seconds / (ideal / concurrency) - 1.0,
    }


def compare_latency(args: argparse.Namespace) -> int:
    """``--latency-s``: rounds of the measurement on this checkout and each ``--compare`` one,
    alternating, each in a fresh interpreter; prints every round and the medians."""
    trees = [str(ROOT), *args.compare]
    rows = []
    failed = False
    for name in args.domains:
        results: dict[str, list[dict[str, Any]]] = {tree: [] for tree in trees}
        for round_ in range(args.rounds):
            for tree in trees if round_ % 2 == 0 else trees[::-1]:
                command = [sys.executable, __file__, "--one-latency-run", "--domains", name]
                command += ["--backend", args.backend, "--split", args.split]
                command += ["--trials", str(args.trials), "--latency-s", str(args.latency_s)]
                command += ["--concurrency", str(args.concurrency)]
                env = dict(os.environ, PYTHONPATH=tree)
                done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    print(done.stderr, file=sys.stderr)
                    return 1
                result = json.loads(done.stdout.strip().splitlines()[-1])
                if result["code"] != str(Path(tree).resolve()):
                    raise RuntimeError(
                        f"{tree}: the run imported tau_bench_env from {result['code']}"
                    )
                failed |= result["errors"] > 0 or result["success_rate"] != 1.0
                results[tree].append(result)
                print(json.dumps({"domain": name, "round": round_, **result}), flush=True)
        for tree, runs in results.items():
            rows.append(
                {
                    "domain": f"{args.backend}:{name}",
                    "code": tree,
                    "episodes": runs[0]["episodes"],
                    "requests": runs[0]["requests"],
                    "episode overhead (median)": f"{statistics.median(r['episode_overhead'] for r in runs):.1%}",
                    "run overhead (median)": f"{statistics.median(r['run_overhead'] for r in runs):.1%}",
                    "seconds (median)": round(statistics.median(r["seconds"] for r in runs), 2),
                    "eval CPU ms per request (median)": round(
                        statistics.median(r["cpu_ms_per_request"] for r in runs), 2
                    ),
                }
            )
    print(
        f"latency {args.latency_s} s per request, {args.concurrency} episodes at once, "
        f"{args.rounds} rounds"
    )
    print_table(rows)
    return 1 if failed else 0


def print_table(rows: list[dict[str, Any]]) -> None:
    """``rows`` as a Markdown table."""
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in columns) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="tau2")
    parser.add_argument("--domains", nargs="+", default=["airline", "retail"])
    parser.add_argument("--split", default="test")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--concurrency", type=int, help="default 4 (16 with --latency-s)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--latency-s", type=float, help="the endpoints' latency (see above)")
    parser.add_argument("--rounds", type=int, default=5, help="--latency-s: rounds per checkout")
    parser.add_argument("--compare", nargs="*", default=[], help="--latency-s: other checkouts")
    parser.add_argument("--one-latency-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.latency_s is not None:
        args.concurrency = args.concurrency or 16
        if args.one_latency_run:
            result = measure_latency(
                args.backend,
                args.domains[0],
                args.split,
                args.trials,
                args.concurrency,
                args.latency_s,
            )
            print(json.dumps(result))
            return 0
        return compare_latency(args)
    args.concurrency = args.concurrency or 4

    import ray

    ray.init(
        address="local",
        num_cpus=args.workers,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
    )
    rows = []
    failed = False
    context = multiprocessing.get_context("spawn")
    for name in args.domains:
        domain = load_domain(args.backend, name)
        tasks = domain.tasks(args.split)
        urls = context.Queue()
        server = context.Process(target=serve, args=(args.backend, name, args.split, urls))
        server.start()
        try:
            url, _ = urls.get(timeout=120)
            spec = EvalSpec(
                env=env_config_from({"backend": args.backend, "user": {"kind": "replay"}}),
                policy=PolicyConfig(base_url=url, model="oracle"),
                domain=name,
                split=args.split,
                user_turns=user_turns(tasks),
            )
            from tau_bench_env.evaluation.eval_ray import run_ray

            eval_runs = partial(time_eval, spec, len(tasks), args.trials)
            setups = {
                "tau-bench loop (1 process)": partial(
                    time_tau_bench_loop, domain, args.split, url, args.trials, args.concurrency
                ),
                "eval, 1 process": partial(
                    eval_runs, partial(run_threads, concurrency=args.concurrency)
                ),
                f"eval, {args.workers} Ray workers": partial(
                    eval_runs,
                    partial(run_ray, workers=args.workers, concurrency=args.concurrency),
                ),
            }
            for setup, measure in setups.items():
                seconds, episodes, wins, steady = measure()
                failed |= wins != episodes
                rows.append(
                    {
                        "domain": f"{args.backend}:{name}",
                        "setup": setup,
                        "episodes": episodes,
                        "rewards = 1": wins,
                        "seconds": round(seconds, 2),
                        "episodes/s": round(episodes / seconds, 1),
                        "episodes/s, 2nd half": round(steady, 1) if steady else "-",
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
        finally:
            server.terminate()
            server.join()
    ray.shutdown()
    print_table(rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
