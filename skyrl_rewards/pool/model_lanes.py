"""The actors of a pool's model lanes: the judge lane and the reward-model workers.

Both score ``(sample_index, component_name)`` tasks of components whose
:meth:`~skyrl_rewards.rewards.components.Component.lane` names their lane, and
answer one ``(value, status, error)`` per task, in order, never raising for a
sample: the component builds the request, the lane runs it, the component
settles the outcome (a failure settles masked, with its cause).

- :class:`JudgeLane`: one asynchronous actor per pool. It holds one judge
  client per endpoint, so the endpoint's limits (in flight, requests and
  tokens per minute), its retries and its circuit breaker see every judge
  request of the pool, from every client process and node. Requests are I/O:
  thousands wait on one event loop, and the lane reserves no CPU by default.
- :class:`RewardModelWorker`: a synchronous actor of the reward-model worker
  group (``model_workers``), on GPUs where asked; it loads each reward model
  once and runs a call's requests as one batch (the model batches them further
  by its token budget).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_rewards.rewards.mix import RewardMix
from skyrl_rewards.rewards.models.lanes import (
    JUDGE_LANE,
    REWARD_MODEL_LANE,
    ModelOutcome,
    ModelRequest,
)
from skyrl_rewards.rewards.result import ComponentScore, Status

ScoreTuple = tuple[float, str, str]
"""``(value, status, error)``: a :class:`ComponentScore` as it crosses Ray."""


def _as_tuple(score: ComponentScore) -> ScoreTuple:
    return float(score.value), score.status.value, score.error


def _where() -> tuple[int, str]:
    import ray

    return os.getpid(), ray.get_runtime_context().get_node_id()


def _lane_endpoints(mix: RewardMix, lane: str) -> dict[str, dict[str, Any]]:
    """Every endpoint of the mix's components that may use ``lane``."""
    endpoints: dict[str, dict[str, Any]] = {}
    for name in mix.names:
        component = mix.component(name)
        if lane in component.lanes():
            endpoints.update(component.endpoints())
    return endpoints


class JudgeLane:
    """Ray actor body (asynchronous). Build it with ``ray.remote(JudgeLane)``."""

    def __init__(self, rewards: Mapping[str, Mapping[str, Any]]) -> None:
        from skyrl_rewards.rewards.models.judge_client import JudgeClient

        self._mix = RewardMix.from_config(rewards)
        self._clients = {
            key: JudgeClient(config)
            for key, config in _lane_endpoints(self._mix, JUDGE_LANE).items()
        }

    async def ready(self) -> tuple[int, str]:
        """``(pid, node_id)`` of this lane."""
        return _where()

    async def score_tasks(
        self, samples: Sequence[Mapping[str, Any]], tasks: Sequence[tuple[int, str]]
    ) -> list[ScoreTuple]:
        """Score every task at once (each waits on its endpoint's limits); one tuple per task."""
        return list(
            await asyncio.gather(*(self._score(samples[index], name) for index, name in tasks))
        )

    async def _score(self, sample: Mapping[str, Any], name: str) -> ScoreTuple:
        component = self._mix.component(name)
        try:
            request = component.lane_request(sample)
        except ValueError as error:
            return _as_tuple(ComponentScore(0.0, Status.ERROR, f"{name}: {error}"))
        client = self._clients.get(request.endpoint)
        if client is None:  # a bug: the component named an endpoint it did not declare
            return _as_tuple(
                ComponentScore(0.0, Status.ERROR, f"{name}: unknown judge endpoint")
            )
        outcome = await client.complete(request)
        return _as_tuple(component.settle(request, outcome))

    async def metrics(self) -> dict[str, Any]:
        """Per endpoint (``model@base_url``): the judge client's counters."""
        return {client.label: client.metrics() for client in self._clients.values()}


class RewardModelWorker:
    """Ray actor body (synchronous, one call at a time). Build it with ``ray.remote``."""

    def __init__(self, rewards: Mapping[str, Mapping[str, Any]]) -> None:
        self._mix = RewardMix.from_config(rewards)
        self._endpoints = _lane_endpoints(self._mix, REWARD_MODEL_LANE)

    def ready(self) -> tuple[int, str]:
        """Load every reward model of the mix; ``(pid, node_id)`` of this worker."""
        from skyrl_rewards.rewards.models.reward_model import load_runner

        for config in self._endpoints.values():
            load_runner(config)
        return _where()

    def score_tasks(
        self, samples: Sequence[Mapping[str, Any]], tasks: Sequence[tuple[int, str]]
    ) -> list[ScoreTuple]:
        """Score every task, the model requests of the call run as one batch."""
        from skyrl_rewards.rewards.models.local import run_requests

        scores: list[ScoreTuple | None] = [None] * len(tasks)
        pending: list[tuple[int, str, ModelRequest]] = []
        for position, (index, name) in enumerate(tasks):
            try:
                request = self._mix.component(name).lane_request(samples[index])
            except ValueError as error:
                scores[position] = _as_tuple(ComponentScore(0.0, Status.ERROR, f"{name}: {error}"))
                continue
            pending.append((position, name, request))
        outcomes: list[ModelOutcome] = run_requests(
            [request for _, _, request in pending], self._endpoints
        )
        for (position, name, request), outcome in zip(pending, outcomes, strict=True):
            scores[position] = _as_tuple(self._mix.component(name).settle(request, outcome))
        return [score for score in scores if score is not None]
