"""Benchmark the judge client against a chat endpoint on loopback (tests/models/judge_server.py).

Two measurements:

- ``throughput``: the endpoint serves at most C requests at once, each taking L
  seconds, so it cannot do better than C / L requests per second. One
  :class:`JudgeClient` with ``max_in_flight = C`` sends N distinct requests;
  the figure is its rate as a share of C / L (target: at least 90%). The
  server runs in its own process so that it does not share a GIL with the client.
- ``pool``: the same endpoint, reached through a :class:`RewardPool` whose mix
  is one ``judge`` (``max_in_flight = C``) on a local Ray: the judge lane, the
  scheduler and the pool's batching included. Same figure, same target.
- ``outage``: a steady stream of requests while the endpoint is down for
  ``--outage-s`` seconds, then up again. Every request must get exactly one
  outcome (none lost); the figure is how many calls reached the endpoint
  while it was down (the breaker's failures plus its probes: a handful).
- ``tokens``: ``tokens_per_minute`` held at the server, for English, CJK and
  code prompts, side by side for each way the client counts prompts (the
  model's tokenizer from a folder, the server's ``/tokenize``, bytes). The
  server counts with the model's tokenizer (a byte-level BPE built here, as
  in the tests); figures: tokens per minute over the run and in its busiest
  5 s, against the limit.
- ``throttle``: N items against a server that serves 8 at a time and answers
  429 with ``Retry-After: 1`` beyond, the client's ``max_in_flight`` 64;
  adaptive concurrency on and off, side by side: requests per item at the
  server, 429s, masked items.
- ``recovery``: the endpoint goes down, 120 requests are sent (masked: the
  breaker opens), it stays down ``--outage-s`` in all, comes back, and the
  first 120 requests sent then are counted: scored or masked (and why).

    PYTHONPATH=$PWD python scripts/benchmarks/bench_judge.py throughput --concurrency 32 --latency-s 0.1
    PYTHONPATH=$PWD python scripts/benchmarks/bench_judge.py pool --concurrency 64 --latency-s 1.0
    PYTHONPATH=$PWD python scripts/benchmarks/bench_judge.py outage --outage-s 60
    PYTHONPATH=$PWD python scripts/benchmarks/bench_judge.py tokens --tokens-per-minute 24000 --seconds 20
    PYTHONPATH=$PWD python scripts/benchmarks/bench_judge.py throttle --items 400
    PYTHONPATH=$PWD python scripts/benchmarks/bench_judge.py recovery --outage-s 12
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))

from judge_server import JudgeServer, complete_all  # noqa: E402
from judge_texts import (  # noqa: E402
    SCRIPTS,
    load_tokenizer,
    messages,
    save_tokenizer,
    tokens_endpoint,
)

from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE, ModelRequest  # noqa: E402
from skyrl_rewards.rewards.models import limits  # noqa: E402
from skyrl_rewards.rewards.models.judge_client import EndpointConfig, JudgeClient  # noqa: E402


def request(i: int) -> ModelRequest:
    return ModelRequest(JUDGE_LANE, "bench", {"messages": [{"role": "user", "content": f"q{i}"}]})


def serve(concurrency: int, latency_s: float, urls: Any, stop: Any, counts: Any) -> None:
    with JudgeServer(latency_s=latency_s, max_concurrent=concurrency) as server:
        urls.put(server.url)
        cpu = time.process_time()
        stop.wait()
        counts.put({"calls": server.calls, "peak": server.peak, "cpu_s": time.process_time() - cpu})


@contextlib.contextmanager
def endpoint(concurrency: int, latency_s: float) -> Iterator[tuple[str, dict[str, Any]]]:
    """A loopback endpoint in its own process: yields its URL and, after the block, its counts."""
    context = multiprocessing.get_context("spawn")
    urls, counts, stop = context.Queue(), context.Queue(), context.Event()
    process = context.Process(target=serve, args=(concurrency, latency_s, urls, stop, counts))
    process.start()
    served: dict[str, Any] = {}
    try:
        yield urls.get(timeout=60), served
    finally:
        stop.set()
        served.update(counts.get(timeout=60))
        process.join(timeout=30)


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    with endpoint(args.concurrency, args.latency_s) as (url, server):
        elapsed, metrics, kinds = asyncio.run(measure_client(url, args))
    bound = args.concurrency / args.latency_s
    rate = args.requests / elapsed
    return {
        "bench": "throughput",
        "concurrency": args.concurrency,
        "latency_s": args.latency_s,
        "requests": args.requests,
        "outcomes": dict(kinds),
        "elapsed_s": round(elapsed, 3),
        "requests_per_s": round(rate, 1),
        "bound_per_s": round(bound, 1),
        "share_of_bound": round(rate / bound, 3),
        "server_peak_in_flight": server["peak"],
        "client_cpu_ms_per_request": round(metrics["cpu_s"] / args.requests * 1000, 3),
        "server_cpu_ms_per_request": round(server["cpu_s"] / server["calls"] * 1000, 3),
        "load_average_1min": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "latency_p50_s": metrics["latency_s"]["p50"],
        "latency_p99_s": metrics["latency_s"]["p99"],
    }


async def measure_client(
    url: str, args: argparse.Namespace
) -> tuple[float, dict[str, Any], Counter[str]]:
    """Elapsed seconds, client metrics and outcome kinds of ``args.requests`` distinct requests."""
    config = EndpointConfig.from_mapping(
        {"base_url": url, "model": "bench", "limits": {"max_in_flight": args.concurrency}}
    )
    client = JudgeClient(config)
    await asyncio.gather(*(client.complete(request(-i)) for i in range(1, args.concurrency + 1)))
    start, cpu = time.perf_counter(), time.process_time()  # connections open: steady state
    outcomes = await asyncio.gather(*(client.complete(request(i)) for i in range(args.requests)))
    elapsed = time.perf_counter() - start
    metrics = {**client.metrics(), "cpu_s": time.process_time() - cpu}
    kinds = Counter(o.failure or "ok" for o in outcomes)
    await client.aclose()
    return elapsed, metrics, kinds


def breaker_config(url: str, reset_s: float) -> EndpointConfig:
    """The outage benches' endpoint: 5 s calls, 3 retries, a breaker of 5 failures."""
    return EndpointConfig.from_mapping(
        {
            "base_url": url,
            "model": "bench",
            "timeout_s": 5.0,
            "retries": {"max_retries": 3, "backoff_base_s": 0.2},
            "breaker": {"failures": 5, "reset_s": reset_s},
        }
    )


def outage(args: argparse.Namespace) -> dict[str, Any]:
    async def go(server: JudgeServer) -> dict[str, Any]:
        client = JudgeClient(breaker_config(server.url, args.breaker_reset_s))
        tasks: list[asyncio.Task[Any]] = []
        start = time.monotonic()
        phases = {"before": args.warm_s, "down": args.warm_s + args.outage_s}
        end = phases["down"] + args.after_s
        calls_at: dict[str, int] = {}
        i = 0
        while (now := time.monotonic() - start) < end:
            if now >= phases["before"] and "down" not in calls_at:
                server.down = True
                calls_at["down"] = server.calls
            if now >= phases["down"] and "up" not in calls_at:
                server.down = False
                calls_at["up"] = server.calls
            tasks.append(asyncio.ensure_future(client.complete(request(i))))
            i += 1
            await asyncio.sleep(1.0 / args.rate)
        outcomes = await asyncio.gather(*tasks)
        metrics = client.metrics()
        await client.aclose()
        return {
            "bench": "outage",
            "outage_s": args.outage_s,
            "breaker_reset_s": args.breaker_reset_s,
            "sent": len(tasks),
            "outcomes": len(outcomes),
            "lost": len(tasks) - len(outcomes),
            "by_kind": dict(Counter(o.failure or "ok" for o in outcomes)),
            "calls_while_down": calls_at["up"] - calls_at["down"],
            "breaker_opens": metrics["breaker"]["opens"],
            "last_10_ok": sum(o.ok for o in outcomes[-10:]),
            "breaker_state_at_end": metrics["breaker"]["state"],
        }

    with JudgeServer(latency_s=args.latency_s) as server:
        return asyncio.run(go(server))


def through_pool(args: argparse.Namespace) -> dict[str, Any]:
    from skyrl_rewards.pool.reward_pool import RewardPool

    def rows(count: int, start: int) -> list[dict[str, Any]]:
        return [{"completion": f"answer {start + i}", "solution": ""} for i in range(count)]

    with endpoint(args.concurrency, args.latency_s) as (url, server):
        judge = {"base_url": url, "model": "bench", "max_in_flight": args.concurrency}
        config = {
            "name": "bench_judge_pool",
            "num_workers": 1,
            "local_rewards": [],
            "rewards": {"judge": {**judge, "template": "{completion}"}},
        }
        with RewardPool.from_config(config) as pool:
            pool.score(rows(args.concurrency, -args.concurrency))  # connections open
            start = time.perf_counter()
            results = pool.score(rows(args.requests, 0))
            elapsed = time.perf_counter() - start
            metrics = pool.metrics()
    bound = args.concurrency / args.latency_s
    rate = args.requests / elapsed
    (judge_metrics,) = metrics["judge"].values()
    return {
        "bench": "pool",
        "concurrency": args.concurrency,
        "latency_s": args.latency_s,
        "requests": args.requests,
        "ok": sum(r.ok for r in results),
        "elapsed_s": round(elapsed, 3),
        "requests_per_s": round(rate, 1),
        "bound_per_s": round(bound, 1),
        "share_of_bound": round(rate / bound, 3),
        "server_peak_in_flight": server["peak"],
        "lane_calls": metrics["lane_calls"],
        "judge_in_flight_peak": judge_metrics["in_flight_peak"],
        "load_average_1min": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
    }


def load() -> dict[str, Any]:
    """The machine's load beside a figure (other work shares the CPUs)."""
    return {"load_average_1min": round(os.getloadavg()[0], 1), "cpus": os.cpu_count()}


def busiest_window(server: JudgeServer, window_s: float) -> int:
    """The most prompt plus completion tokens the server took within ``window_s``."""
    served = sorted((s for s in server.served if s.status == 200), key=lambda s: s.arrival)
    best, first, total = 0, 0, 0
    for last in served:
        total += last.prompt_tokens + last.completion_tokens
        while last.arrival - served[first].arrival > window_s:
            total -= served[first].prompt_tokens + served[first].completion_tokens
            first += 1
        best = max(best, total)
    return best


def tokens(args: argparse.Namespace) -> dict[str, Any]:
    rate = args.tokens_per_minute
    catch_up_s = getattr(limits, "CATCH_UP_S", 0.0)  # 0 on revisions before it
    with tempfile.TemporaryDirectory() as folder:
        tokenizer_dir = save_tokenizer(Path(folder))
        tokenizer = load_tokenizer(tokenizer_dir)
        cases = []
        for script in SCRIPTS:
            for counting in args.counting:
                with JudgeServer(tokenizer=tokenizer, latency_s=args.latency_s) as server:
                    per_call = server.prompt_tokens(messages(script, 300, 0)) + 3
                    count = max(10, int(rate / 60 * args.seconds / per_call))
                    config = EndpointConfig.from_mapping(
                        tokens_endpoint(server.url, "bench", rate, counting, tokenizer_dir)
                    )
                    chats = [messages(script, 300, seed) for seed in range(count)]
                    requests = [ModelRequest(JUDGE_LANE, "bench", {"messages": c}) for c in chats]
                    outcomes, metrics = complete_all(config, requests)
                    busiest = busiest_window(server, 5.0)
                    cases.append(
                        {
                            "script": script,
                            "counting": counting,
                            "calls": server.calls,
                            "ok": sum(o.ok for o in outcomes),
                            "prompt_tokens_per_call": per_call - 3,
                            "tokens_per_minute": round(server.tokens_per_minute(skip=2)),
                            "share_of_limit": round(server.tokens_per_minute(skip=2) / rate, 3),
                            "busiest_5s_tokens": busiest,
                            # the pacer's bound over 5 s (see limits.py), and the call at its end
                            "busiest_5s_bound": round(rate / 60 * (5 + catch_up_s) + 8 + per_call),
                            "counted": metrics.get("token_count"),
                        }
                    )
    return {"bench": "tokens", "tokens_per_minute": rate, "cases": cases, **load()}


def throttle(args: argparse.Namespace) -> dict[str, Any]:
    sides = {}
    for adaptive in (True, False):
        with JudgeServer(latency_s=args.latency_s, accept_at_once=8, retry_after="1") as server:
            config = EndpointConfig.from_mapping(
                {
                    "base_url": server.url,
                    "model": "bench",
                    "limits": {"max_in_flight": 64, "adaptive_concurrency": adaptive},
                    "retries": {"max_retries": 4},
                }
            )
            requests = [request(i) for i in range(args.items)]
            start = time.perf_counter()
            outcomes, metrics = complete_all(config, requests)
            elapsed = time.perf_counter() - start
        sides["adaptive" if adaptive else "fixed"] = {
            "requests_at_server": server.calls,
            "requests_per_item": round(server.calls / args.items, 3),
            "answered_429": server.throttled,
            "masked": dict(Counter(o.failure for o in outcomes if not o.ok)),
            "elapsed_s": round(elapsed, 2),
            "in_flight_window_at_end": metrics["in_flight_window"],
        }
    return {"bench": "throttle", "items": args.items, "server_at_once": 8, **sides, **load()}


def recovery(args: argparse.Namespace) -> dict[str, Any]:
    async def go(server: JudgeServer) -> dict[str, Any]:
        client = JudgeClient(breaker_config(server.url, args.breaker_reset_s))
        start = time.monotonic()
        server.down = True
        during = await asyncio.gather(*(client.complete(request(i)) for i in range(120)))
        await asyncio.sleep(max(0.0, args.outage_s - (time.monotonic() - start)))
        server.down = False
        calls_before = server.calls
        after = await asyncio.gather(*(client.complete(request(1000 + i)) for i in range(120)))
        await client.aclose()
        return {
            "bench": "recovery",
            "outage_s": args.outage_s,
            "breaker_reset_s": args.breaker_reset_s,
            "during": dict(Counter(o.failure or "ok" for o in during)),
            "after_recovery": dict(Counter(o.failure or "ok" for o in after)),
            "masked_after_recovery": sum(not o.ok for o in after),
            "calls_after_recovery": server.calls - calls_before,
            **load(),
        }

    with JudgeServer(latency_s=args.latency_s) as server:
        return asyncio.run(go(server))


MODES: dict[str, tuple[Callable[[argparse.Namespace], dict[str, Any]], dict[str, float]]] = {
    "throughput": (throughput, {"--concurrency": 32, "--latency-s": 0.1, "--requests": 3000}),
    "pool": (through_pool, {"--concurrency": 64, "--latency-s": 1.0, "--requests": 2000}),
    "outage": (
        outage,
        {
            "--outage-s": 60.0,
            "--warm-s": 3.0,
            "--after-s": 12.0,
            "--latency-s": 0.05,
            "--breaker-reset-s": 10.0,
        },
    ),
    "tokens": (tokens, {"--tokens-per-minute": 24000.0, "--seconds": 20.0, "--latency-s": 0.05}),
    "throttle": (throttle, {"--items": 400, "--latency-s": 0.05}),
    "recovery": (recovery, {"--outage-s": 12.0, "--breaker-reset-s": 10.0, "--latency-s": 0.2}),
}
"""Each mode's function and its options' defaults (an option's type is its default's)."""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = parser.add_subparsers(dest="bench", required=True)
    for mode, (_, defaults) in MODES.items():
        mode_parser = sub.add_parser(mode)
        for flag, default in defaults.items():
            mode_parser.add_argument(flag, type=type(default), default=default)
    sub.choices["outage"].add_argument(
        "--rate", type=float, default=20.0, help="requests sent per second"
    )
    sub.choices["tokens"].add_argument(
        "--counting",
        nargs="+",
        choices=("tokenizer", "endpoint", "bytes"),
        default=["tokenizer", "endpoint", "bytes"],
        help="how the client counts prompts: the model's tokenizer, /tokenize, bytes",
    )
    args = parser.parse_args()
    result = MODES[args.bench][0](args)
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
