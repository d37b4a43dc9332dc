"""Scoring a small input in this process, without Ray: what ``score`` does for a few hundred rows.

A reward pool pays for itself on large inputs and in training; for a small
file its start (Ray's processes, each worker importing the rewards: 8-30 s
on 2 busy cores) costs more than the scoring. :func:`choose_runner` picks:

- in this process (:class:`InProcessScorer`): ``--local``, or by default an
  input of at most :data:`IN_PROCESS_MAX_ROWS` rows whose mix is rule-based
  and whose config names no cluster (``address``);
- a reward pool (``RewardPool``): ``--pool``, a config with ``address``, a
  larger input, or a mix with a model lane (a judge, a reward model: their
  limits and counters live in the pool's lanes).

Values are the same either way: both score each sample with the same
:class:`~skyrl_rewards.rewards.mix.RewardMix` (math checks in their own
CPU-time-bounded child processes); what the pool adds is parallel workers
and a wall-clock limit (``timeout_s``) per component, which the rule-based
rewards, capped on their input sizes, do not reach on such inputs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_rewards.rewards.contract.result import RewardResult, Status
from skyrl_rewards.rewards.mix import RewardMix

IN_PROCESS_MAX_ROWS = 256
"""Largest input ``score`` scores in this process by default (rule-based mixes)."""

IN_PROCESS = "in-process"
POOL = "pool"


def choose_runner(
    *, rows: int, mix: RewardMix, address: str | None, local: bool, pool: bool
) -> tuple[str, str]:
    """``(runner, why)``: :data:`IN_PROCESS` or :data:`POOL`, and the reason, for one line.

    Raises ``ValueError`` for ``--local`` with a mix that needs a pool's model lane.
    """
    lanes = sorted(mix.lanes())
    if local:
        if lanes:
            raise ValueError(
                f"--local: the mix uses the {', '.join(lanes)} lane ({_laned(mix)}), which runs "
                "in a reward pool (its limits and counters); drop --local"
            )
        return IN_PROCESS, "--local"
    if pool:
        return POOL, "--pool"
    if address is not None:
        return POOL, f"the config joins the Ray cluster at address={address}"
    if lanes:
        return POOL, f"the mix asks a model ({_laned(mix)}: the {', '.join(lanes)} lane)"
    if rows > IN_PROCESS_MAX_ROWS:
        return POOL, f"{rows} rows, more than {IN_PROCESS_MAX_ROWS}; --local scores them here"
    return IN_PROCESS, f"{rows} rows, rule-based rewards; --pool scores them on a Ray reward pool"


def _laned(mix: RewardMix) -> str:
    return ", ".join(name for name in mix.names if mix.component(name).lanes())


class InProcessScorer:
    """The scoring side of a reward pool (``score``, ``metrics``, ``shutdown``), in this process.

    >>> scorer = InProcessScorer(RewardMix.from_config({"format": {}}))
    >>> [r.total for r in scorer.score([{"completion": "<think>a</think><answer>b</answer>"}])]
    [1.0]
    >>> scorer.metrics()["items"]
    1
    """

    def __init__(self, mix: RewardMix) -> None:
        self._mix = mix
        self._latencies_s: list[float] = []
        self._counts = {"items": 0, "timeouts": 0, "errors": 0}

    def score(self, samples: Sequence[Mapping[str, Any]]) -> list[RewardResult]:
        """One result per sample, in order (``RewardMix.score`` never raises)."""
        results = []
        for sample in samples:
            start = time.perf_counter()
            result = self._mix.score(sample)
            result.latency_s = time.perf_counter() - start
            results.append(result)
            self._latencies_s.append(result.latency_s)
            self._counts["items"] += 1
            for status in result.status.values():
                if status == Status.TIMEOUT.value:
                    self._counts["timeouts"] += 1
                elif status == Status.ERROR.value:
                    self._counts["errors"] += 1
        return results

    def metrics(self) -> dict[str, Any]:
        """Items, component timeouts and errors, and the p50/p99 latency of one row."""
        ordered = sorted(self._latencies_s)

        def percentile(q: float) -> float:
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

        return {**self._counts, "latency_s": {"p50": percentile(0.5), "p99": percentile(0.99)}}

    def shutdown(self) -> None:
        """Nothing to stop: there is no pool."""
