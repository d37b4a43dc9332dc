"""How long a pool that starts its own Ray takes to start, next to busy CPUs.

Each run is a fresh ``python -c`` process: ``RewardPool(PoolConfig(num_workers=1,
...))``, then one ``score`` of one sample (so the worker has loaded its rewards),
timed from before the import. ``--burners N`` keeps N processes spinning on the
CPU meanwhile (nice 0, as a trainer would be). Two settings, interleaved:
``ray15`` sets ``RAY_worker_niceness=15`` (Ray's own default, how Ray started
workers before the pool set it; a value in the environment is kept) and
``pool`` leaves it to the pool (``worker_niceness``, default 0).

    python scripts/benchmarks/bench_pool_start.py --burners 2 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

PROBE = """
import time
start = time.perf_counter()
from skyrl_rewards.pool.config import PoolConfig
from skyrl_rewards.pool.reward_pool import RewardPool
rewards = {"accuracy": {"weight": 1.0}, "format": {"weight": 1.0}}
pool = RewardPool(PoolConfig(num_workers=1, rewards=rewards))
pool.score([{"completion": "<think>a</think><answer>2</answer>", "solution": "2"}])
print(f"START {time.perf_counter() - start:.2f}")
pool.shutdown()
"""
SETTINGS = {"ray15": {"RAY_worker_niceness": "15"}, "pool": {}}


def start_seconds(extra_env: dict[str, str], timeout_s: float) -> float:
    """Seconds to start a pool and score one sample in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_worker_niceness"} | extra_env
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
    )
    line = next(line for line in done.stdout.splitlines() if line.startswith("START "))
    return float(line.split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burners", type=int, default=2, help="CPU-bound processes meanwhile")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each setting")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="bound of one run")
    args = parser.parse_args()
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burners)
    ]
    times: dict[str, list[float]] = {name: [] for name in SETTINGS}
    try:
        time.sleep(1.0)
        for repeat in range(args.repeats):
            for name, extra in SETTINGS.items():
                seconds = start_seconds(extra, args.timeout_s)
                times[name].append(seconds)
                load = os.getloadavg()[0]
                print(f"run {repeat + 1} {name}: {seconds:.1f} s (load {load:.1f})", flush=True)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.1f} s over {len(values)} runs")


if __name__ == "__main__":
    main()
