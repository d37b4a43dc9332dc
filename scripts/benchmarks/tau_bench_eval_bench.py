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

Usage:
    python scripts/benchmarks/tau_bench_eval_bench.py --domains airline retail --trials 8
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
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

from tau_bench_bench import disk_loader  # noqa: E402
from tau_eval_helpers import AgentServer, user_turns  # noqa: E402

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


def serve(backend: str, domain_name: str, split: str, urls: Any) -> None:
    """Child process: the oracle agent server until terminated."""
    domain = load_domain(backend, domain_name)
    server = AgentServer(domain, domain.tasks(split))
    with server.running():
        urls.put(server.base_url)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="tau2")
    parser.add_argument("--domains", nargs="+", default=["airline", "retail"])
    parser.add_argument("--split", default="test")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

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
            url = urls.get(timeout=120)
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
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in columns) + " |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
