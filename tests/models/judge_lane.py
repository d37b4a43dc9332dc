"""What the judge-lane tests share: a pool with a judge on the loopback endpoint, rows it grades,
a two-node loopback Ray cluster, a second client process, scoring in the background.

The endpoint is :class:`~judge_server.JudgeServer`, which counts at the server what reached
it; these helpers only set up and drive, the tests assert.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import judge_texts
import ray
from judge_server import JudgeServer
from ray import cloudpickle
from ray_clusters import two_node_cluster  # noqa: F401  (the tests of this folder take it from here)

from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.rewards.contract.result import RewardResult


def grader(body: dict[str, Any]) -> str:
    """A stand-in judge model: 1.0 when the graded text says 'right', else 0.0."""
    return "1.0" if "right" in body["messages"][-1]["content"] else "0.0"


def pool_config(name: str, server: JudgeServer, **endpoint: Any) -> dict[str, Any]:
    """A pool of one CPU worker: ``format`` (rules) and a ``judge`` on ``server``, grading ``{answer}``."""
    return {
        "name": name,
        "num_workers": 1,
        "local_rewards": [],
        "rewards": {
            "format": {"weight": 0.5},
            "judge": {
                "weight": 1.0,
                "base_url": server.url,
                "model": "judge",
                "template": "Grade: {answer}",
                "backoff_base_s": 0.01,
                **endpoint,
            },
        },
    }


def rows(count: int, start: int = 0, script: str | None = None) -> list[dict[str, Any]]:
    """Distinct answers: even i right (judge 1.0), odd i wrong (0.0); all well formatted.

    With ``script`` (see :data:`judge_texts.SCRIPTS`), each answer carries 300
    characters of text in that script.
    """
    return [
        {
            "completion": f"<think>t</think><answer>{'right' if i % 2 == 0 else 'wrong'} {i}"
            f"{' ' + judge_texts.text(script, 300, i) if script else ''}</answer>",
            "solution": "<answer>x</answer>",
        }
        for i in range(start, start + count)
    ]


def judged(count: int, start: int = 0) -> list[float]:
    """The judge's values for :func:`rows`: 1.0, 0.0, ..."""
    return [1.0 if i % 2 == 0 else 0.0 for i in range(start, start + count)]


def _score_rows(name: str, start: int, count: int, script: str | None) -> list[float]:
    pool = RewardPool.connect(name)
    try:
        return [r.components["judge"] for r in pool.score(rows(count, start, script))]
    finally:
        pool.shutdown()


def score_elsewhere(name: str, start: int, count: int, script: str | None = None) -> ray.ObjectRef:
    """Score ``rows(count, start, script)`` from another process (a Ray task); its judge values."""
    # the task's process imports no test module: these travel by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cloudpickle.register_pickle_by_value(judge_texts)
    return ray.remote(num_cpus=0)(_score_rows).remote(name, start, count, script)


def wait_for_calls(server: JudgeServer, calls: int, timeout_s: float = 120.0) -> None:
    """Return once the server has seen ``calls`` calls; fail after ``timeout_s`` (the judge is not asked)."""
    deadline = time.monotonic() + timeout_s
    while server.calls < calls:
        assert time.monotonic() < deadline, (
            f"the judge saw {server.calls} of {calls} calls in {timeout_s:g} s: scoring is not "
            "reaching it"
        )
        time.sleep(0.01)


def scoring_until_judged(
    pool: RewardPool, server: JudgeServer, count: int = 200, calls: int = 20
) -> tuple[threading.Thread, list[RewardResult]]:
    """Score ``rows(count)`` in a thread; return it and its results once the server saw ``calls`` calls.

    Fails when the server does not see them within 60 s (the judge is not being asked).
    """
    results: list[RewardResult] = []
    scoring = threading.Thread(target=lambda: results.extend(pool.score(rows(count))))
    scoring.start()
    wait_for_calls(server, calls, timeout_s=60.0)
    return scoring, results
