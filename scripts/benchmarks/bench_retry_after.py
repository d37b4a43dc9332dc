"""Benchmark a 429 storm: requests per item, counted at the loopback server, judge and served RM.

Every call in the storm's first ``--storm-s`` seconds is answered 429 with
``Retry-After: --retry-after-s``; then the server serves. ``--items`` items
go at once through the shipped defaults (64 in flight, adaptive concurrency,
4 retries): a judge (:class:`JudgeClient` on ``tests/models/judge_server.py``)
and a served reward model (``make_reward("reward_model", ..., batch_size=1)``
on ``tests/models/reward_model_server.py``, so one request is one item).
Figures per side: requests at the server per item (target: at most 1.3),
``early``: requests that arrived while an earlier 429's Retry-After was still
running (past 50 ms after it), masked items, and the time the items took.

The client is whichever ``skyrl_rewards`` is first on the path, so the same
script measures another commit's client (its servers are this checkout's)::

    PYTHONPATH=$PWD python scripts/benchmarks/bench_retry_after.py
    git worktree add /tmp/base cc081a1
    PYTHONPATH=/tmp/base python scripts/benchmarks/bench_retry_after.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))
sys.path.insert(1, str(ROOT / "scripts" / "benchmarks"))

from benchlib import load  # noqa: E402
from judge_server import JudgeServer, complete_all  # noqa: E402
from loopback_server import Storm  # noqa: E402
from reward_model_server import RewardModelServer  # noqa: E402

import skyrl_rewards  # noqa: E402
from skyrl_rewards.rewards.batch import make_reward  # noqa: E402
from skyrl_rewards.rewards.models.judge_client import EndpointConfig  # noqa: E402

try:
    from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE, ModelRequest
except ImportError:  # checkouts before the rewards/ family folders (cc081a1)
    from skyrl_rewards.rewards.models.lanes import JUDGE_LANE, ModelRequest  # type: ignore[no-redef]


def judge_side(args: argparse.Namespace) -> dict[str, Any]:
    storm = Storm(args.storm_s, args.retry_after_s)
    with JudgeServer(plan=storm) as server:
        config = EndpointConfig.from_mapping({"base_url": server.url, "model": "bench"})
        requests = [
            ModelRequest(JUDGE_LANE, "e", {"messages": [{"role": "user", "content": f"q{i}"}]})
            for i in range(args.items)
        ]
        start = time.perf_counter()
        outcomes, _ = complete_all(config, requests)
        elapsed = time.perf_counter() - start
    served = [(s.arrival, s.status) for s in server.served]
    masked = Counter(o.failure for o in outcomes if not o.ok)
    return _figures(
        args, server.calls, server.throttled, storm.early_calls(served), masked, elapsed
    )


def reward_model_side(args: argparse.Namespace) -> dict[str, Any]:
    storm = Storm(args.storm_s, args.retry_after_s)
    with RewardModelServer(plan=storm) as server:
        reward = make_reward(
            "reward_model", base_url=server.base_url, model="bench-rm", batch_size=1
        )
        start = time.perf_counter()
        values = reward([f"answer {i}" for i in range(args.items)], prompts=["q"] * args.items)
        elapsed = time.perf_counter() - start
    masked = Counter({"masked": sum(v is None for v in values)}) if None in values else Counter()
    early = storm.early_calls(server.served)
    return _figures(args, server.requests, server.throttled, early, masked, elapsed)


def _figures(
    args: argparse.Namespace,
    calls: int,
    throttled: int,
    early: int,
    masked: Counter[str],
    elapsed: float,
) -> dict[str, Any]:
    return {
        "requests_at_server": calls,
        "requests_per_item": round(calls / args.items, 3),
        "answered_429": throttled,
        "early": early,
        "masked": dict(masked),
        "elapsed_s": round(elapsed, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--storm-s", type=float, default=1.5)
    parser.add_argument("--retry-after-s", type=int, default=2)
    args = parser.parse_args()
    result = {
        "bench": "retry_after_storm",
        "client": str(Path(skyrl_rewards.__file__).resolve().parents[1]),
        "items": args.items,
        "storm_s": args.storm_s,
        "retry_after_s": args.retry_after_s,
        "load_at_start": load(),
        "judge": judge_side(args),
        "served_reward_model": reward_model_side(args),
        "load_at_end": load(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
