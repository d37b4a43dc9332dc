"""Import cost of the reward functions: wall time and peak memory of a fresh interpreter.

Runs ``STATEMENT`` in a new ``python -c`` process ``--repeats`` times (the
first run warms the file cache and is dropped) and prints the median import
time and the median peak RSS, with the heavy runtime modules it loaded.

    python scripts/benchmarks/bench_import.py
    python scripts/benchmarks/bench_import.py --statement "import skyrl_rewards.pool.reward_pool"
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

DEFAULT_STATEMENT = "from skyrl_rewards import default_accuracy_reward, iou_reward, format_reward"
HEAVY = ("ray", "skyrl_gym", "skyrl", "pandas", "pyarrow", "torch", "omegaconf")
PROBE = """
import resource, sys, time, json
start = time.perf_counter()
{statement}
elapsed = time.perf_counter() - start
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"s": elapsed, "rss_mb": rss_mb, "heavy": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def measure(statement: str) -> dict:
    """One fresh interpreter: seconds spent in ``statement``, peak RSS in MB, heavy modules."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(statement=statement, heavy=HEAVY)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statement", default=DEFAULT_STATEMENT)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    runs = [measure(args.statement) for _ in range(args.repeats + 1)][1:]
    print(f"statement: {args.statement}")
    print(
        f"import time: median {statistics.median(r['s'] for r in runs):.3f} s over {len(runs)} runs"
    )
    print(f"peak RSS:    median {statistics.median(r['rss_mb'] for r in runs):.0f} MB")
    print(f"heavy modules loaded: {', '.join(runs[-1]['heavy']) or 'none'}")


if __name__ == "__main__":
    main()
