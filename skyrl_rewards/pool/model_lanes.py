"""The actors of a pool's model lanes: the judge lane and the reward-model workers.

Both score ``(sample_index, component_name)`` tasks of components whose
:meth:`~skyrl_rewards.rewards.contract.component_base.Component.lane` names their lane, and
answer one ``(value, status, error)`` per task, in order, never raising for a
sample: the component builds the request, the lane runs it, the component
settles the outcome (a failure settles masked, with its cause).

- :class:`JudgeLane`: one asynchronous actor per pool. It holds one client per
  endpoint (a judge's, or a served reward model's:
  :mod:`~skyrl_rewards.rewards.models.served_reward_model`), so the endpoint's limits (in flight, requests and
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
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_rewards.rewards.contract.lanes import (
    JUDGE_LANE,
    REWARD_MODEL_LANE,
    ModelOutcome,
    ModelRequest,
)
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.mix import RewardMix

ScoreTuple = tuple[float, str, str]
"""``(value, status, error)``: a :class:`ComponentScore` as it crosses Ray."""

logger = logging.getLogger(__name__)


def _as_tuple(score: ComponentScore) -> ScoreTuple:
    return float(score.value), score.status.value, score.error


def _where() -> tuple[int, str]:
    import ray

    return os.getpid(), ray.get_runtime_context().get_node_id()


def _request(mix: RewardMix, name: str, sample: Mapping[str, Any]) -> ModelRequest | ScoreTuple:
    """Component ``name``'s request for ``sample``, or the error score of a row it cannot build.

    A ``ValueError`` is the row's fault (a missing field, an unreadable image); any
    other exception is a bug, logged with its traceback, and scores this item only.
    """
    try:
        return mix.component(name).lane_request(sample)
    except ValueError as error:
        return _as_tuple(ComponentScore(0.0, Status.ERROR, f"{name}: {error}"))
    except Exception as error:  # noqa: BLE001 - one bad row must not fail the call's others
        logger.exception("reward %s failed to build its model request", name)
        return _as_tuple(
            ComponentScore(0.0, Status.ERROR, f"{name}: {type(error).__name__}: {error}")
        )


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
        from skyrl_rewards.rewards.models.judge_client import lane_client

        self._mix = RewardMix.from_config(rewards)
        self._clients = {
            key: lane_client(config)
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
        request = _request(self._mix, name, sample)
        if not isinstance(request, ModelRequest):
            return request
        client = self._clients.get(request.endpoint)
        if client is None:  # a bug: the component named an endpoint it did not declare
            return _as_tuple(ComponentScore(0.0, Status.ERROR, f"{name}: unknown judge endpoint"))
        outcome = await client.complete(request)
        return _as_tuple(self._mix.component(name).settle(request, outcome))

    async def metrics(self) -> dict[str, Any]:
        """Per endpoint (``model@base_url``): the judge client's counters (see ``JudgeClient``)."""
        return {
            f"{client.config.model}@{client.config.base_url}": client.metrics()
            for client in self._clients.values()
        }


class RewardModelWorker:
    """Ray actor body (synchronous, one call at a time). Build it with ``ray.remote``."""

    def __init__(self, rewards: Mapping[str, Mapping[str, Any]]) -> None:
        self._mix = RewardMix.from_config(rewards)
        self._endpoints = _lane_endpoints(self._mix, REWARD_MODEL_LANE)

    def ready(self) -> tuple[int, str]:
        """Load every reward model of the mix; ``(pid, node_id)`` of this worker.

        Raises ``RuntimeError`` with the cause when a model does not load, so the
        pool's start fails and says why instead of masking every item.
        """
        from skyrl_rewards.rewards.models.reward_model import runner_for

        for key, config in self._endpoints.items():
            runner = runner_for(key, config)
            if runner.load_error:
                raise RuntimeError(f"reward model {config.get('model')!r}: {runner.load_error}")
        return _where()

    def score_tasks(
        self, samples: Sequence[Mapping[str, Any]], tasks: Sequence[tuple[int, str]]
    ) -> list[ScoreTuple]:
        """Score every task, the model requests of the call run as one batch."""
        from skyrl_rewards.rewards.models.local import run_requests

        scores: list[ScoreTuple | None] = [None] * len(tasks)
        pending: list[tuple[int, str, ModelRequest]] = []
        for position, (index, name) in enumerate(tasks):
            request = _request(self._mix, name, samples[index])
            if isinstance(request, ModelRequest):
                pending.append((position, name, request))
            else:
                scores[position] = request
        outcomes: list[ModelOutcome] = run_requests(
            [request for _, _, request in pending], self._endpoints
        )
        for (position, name, request), outcome in zip(pending, outcomes, strict=True):
            scores[position] = _as_tuple(self._mix.component(name).settle(request, outcome))
        return [score for score in scores if score is not None]
