"""Benchmark: `skyrl-rewards serve` over HTTP against the in-process pool client, same batches.

One pool on the shipped defaults (``configs/pool.yaml``: accuracy + format, 2
workers) on a loopback Ray started by this script, and the service in front of
it (:mod:`skyrl_rewards.serve`, 2 scorer replicas). Two measurements, each side
by side in alternating turns so that both sides share the machine's load:

- ``batch``: ``--rounds`` rounds of GRPO steps of ``--batch`` MATH-style answers
  (the ``accuracy`` workload of ``bench_pool.py``, its groups of 8), scored by a
  ``RewardPool.connect`` client in this process and through ``POST /v1/score``
  (request, JSON both ways, the gateway and a scorer replica), in turns, the
  side that goes first alternating. Each side scores its own fresh draw of the
  same generator: a batch scored a second time would find the workers' parse
  caches warm (measured: whichever side went second was up to 2x faster).
  Items per second of wall time, median round; the overhead is
  1 - HTTP / in-process.
- ``transport``: ``--small`` batches of ``--batch`` copies of one fresh row (one
  piece of work: the pool joins the copies), median wall time per side: what
  carrying a full batch costs beyond its scoring.
- ``small``: ``--small`` one-row requests (fresh rows: no cache hit), one at a
  time, p50 and p99 latency per side.

Run: ``python scripts/benchmarks/bench_serve.py [--rounds 8] [--batch 256] [--small 200]``
(``--json`` prints the figures as one object). Prints the machine's load beside the table.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib  # noqa: E402
from bench_pool import accuracy_step  # noqa: E402

GROUP_SIZE = 8


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run(rounds: int, batch: int, small: int) -> dict[str, Any]:
    """Start Ray, the pool and the service; measure; stop them; return the figures."""
    import httpx
    import ray
    from ray import serve

    from skyrl_rewards.pool import service as pool_service
    from skyrl_rewards.pool.cluster import start_local_ray
    from skyrl_rewards.pool.config import load_pool_config
    from skyrl_rewards.pool.reward_pool import RewardPool
    from skyrl_rewards.serve.launch import start_service, stop_service
    from skyrl_rewards.serve.settings import ServeConfig

    pool_config = load_pool_config(benchlib.REPO / "configs" / "pool.yaml", ["name=bench_serve"])
    start_local_ray(pool_config.namespace, worker_niceness=pool_config.worker_niceness)
    pool_service.start(pool_config)
    settings = ServeConfig(port=_free_port(), pool_name=pool_config.name)
    started = time.perf_counter()
    url = start_service(settings)
    benchlib.progress(f"service up in {time.perf_counter() - started:.1f}s at {url}")
    pool = RewardPool.connect(pool_config.name)
    client = httpx.Client(timeout=600)
    rng = random.Random(44)

    def over_http(rows: list[dict[str, Any]]) -> list[float]:
        response = client.post(f"{url}/v1/score", json={"rows": rows})
        response.raise_for_status()
        return [row["value"] for row in response.json()["results"]]

    def in_process(rows: list[dict[str, Any]]) -> list[float]:
        return [result.total for result in pool.score(rows)]

    sides = {"in_process": in_process, "http": over_http}
    try:
        step = accuracy_step(rng, batch // GROUP_SIZE, GROUP_SIZE)
        for side in sides.values():  # warm-up: workers, math children, the HTTP path
            side(step)
        seconds: dict[str, list[float]] = {name: [] for name in sides}
        for round_index in range(rounds):
            order = list(sides) if round_index % 2 == 0 else list(reversed(sides))
            for name in order:
                step = accuracy_step(rng, batch // GROUP_SIZE, GROUP_SIZE)
                seconds[name].append(benchlib.timed(sides[name], step)[1])
            benchlib.progress(
                f"round {round_index + 1}: "
                + ", ".join(f"{n} {batch / seconds[n][-1]:.0f} items/s" for n in order)
            )
        transport: dict[str, list[float]] = {name: [] for name in sides}
        for index in range(small):
            for name in sides if index % 2 == 0 else reversed(list(sides)):
                row = {"completion": f"<answer>{index}</answer>", "solution": f"{name}{index}"}
                transport[name].append(benchlib.timed(sides[name], [row] * batch)[1])
        latency: dict[str, list[float]] = {name: [] for name in sides}
        for index in range(small):
            row = [{"completion": f"<answer>{index}</answer>", "solution": f"{index + 1}"}]
            for name in sides if index % 2 == 0 else reversed(list(sides)):
                latency[name].append(benchlib.timed(sides[name], row)[1])
    finally:
        client.close()
        pool.shutdown()
        stop_service(settings)
        serve.shutdown()
        pool_service.stop(pool_config.name)
        ray.shutdown()
    items_per_s = {name: batch / benchlib.median(seconds[name], 6) for name in sides}
    return {
        "batch": batch,
        "rounds": rounds,
        "items_per_s": {name: round(value, 1) for name, value in items_per_s.items()},
        "overhead": round(1 - items_per_s["http"] / items_per_s["in_process"], 4),
        "transport_ms": {n: round(benchlib.median(v, 6) * 1e3, 2) for n, v in transport.items()},
        "small_requests": small,
        "small_p50_ms": {
            n: round(benchlib.percentile(v, 0.5) * 1e3, 2) for n, v in latency.items()
        },
        "small_p99_ms": {
            n: round(benchlib.percentile(v, 0.99) * 1e3, 2) for n, v in latency.items()
        },
        "load": benchlib.load(),
    }


def format_table(report: dict[str, Any]) -> str:
    """The figures as a Markdown table."""
    rows = [
        "| | in-process pool client | HTTP (`POST /v1/score`) |",
        "|---|---|---|",
        f"| items/s, batches of {report['batch']} (median of {report['rounds']}) | "
        f"{report['items_per_s']['in_process']:.0f} | {report['items_per_s']['http']:.0f} |",
        f"| {report['batch']} copies of one row, median (ms, {report['small_requests']} each) | "
        f"{report['transport_ms']['in_process']:.1f} | {report['transport_ms']['http']:.1f} |",
        f"| one-row request p50 / p99 (ms, {report['small_requests']} each) | "
        f"{report['small_p50_ms']['in_process']:.1f} / {report['small_p99_ms']['in_process']:.1f} | "
        f"{report['small_p50_ms']['http']:.1f} / {report['small_p99_ms']['http']:.1f} |",
    ]
    return "\n".join(
        [*rows, "", f"HTTP overhead: {report['overhead']:.1%}; 1-minute load {report['load']}"]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="timed batches per side")
    parser.add_argument("--batch", type=int, default=256, help="rows per batch")
    parser.add_argument(
        "--small", type=int, default=200, help="one-row requests (and copies batches) per side"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    report = run(args.rounds, args.batch, args.small)
    print(json.dumps(report) if args.json else format_table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
