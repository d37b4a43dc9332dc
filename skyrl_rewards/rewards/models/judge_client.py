"""The judge's client: a chat client that answers judge requests with verdict text, cached.

:class:`JudgeClient` is a :class:`~skyrl_rewards.rewards.models.chat_client.ChatClient`
(limits, retries honouring ``Retry-After``, circuit breaker, deadline, metrics:
see that module) that turns each
:class:`~skyrl_rewards.rewards.contract.lanes.ModelRequest` into exactly one
:class:`~skyrl_rewards.rewards.contract.lanes.ModelOutcome`. It never raises for
what the endpoint did; every failure is an outcome whose ``failure`` is one of
:data:`~skyrl_rewards.rewards.contract.lanes.FAILURE_KINDS`, and a reply without
``choices[0].message.content`` text is ``bad_response``.

A bounded LRU cache on :meth:`ModelRequest.cache_key` answers identical
requests (also those in flight at the same time) with one call; failures are
not cached.

The limits are per client: hold one client per endpoint per process (what
:func:`run_judge_requests` does) or per pool (the pool's judge lane), and they
hold for everything that shares it. ``httpx`` is imported when a client first calls.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_rewards.rewards.contract.lanes import ModelOutcome, ModelRequest
from skyrl_rewards.rewards.models.chat_client import ChatClient, ChatReply
from skyrl_rewards.rewards.models.chat_loop import current_loop_thread, loop_thread
from skyrl_rewards.rewards.models.endpoint_config import EndpointConfig
from skyrl_rewards.rewards.models.served_reward_model import (
    SERVED_KIND,
    ServedConfig,
    ServedRewardModelClient,
)

__all__ = ["EndpointConfig", "JudgeClient", "judge_metrics", "lane_client", "run_judge_requests"]


class JudgeClient(ChatClient):
    """One endpoint's asynchronous judge client; use it from one event loop.

    ``transport`` (an ``httpx`` transport) is for tests of this class only.
    Raises ``ValueError`` when ``api_key_env`` names an unset variable.
    """

    def __init__(self, config: EndpointConfig, *, transport: Any = None) -> None:
        super().__init__(config, transport=transport)
        self._cache: collections.OrderedDict[tuple[str, bytes], ModelOutcome] = (
            collections.OrderedDict()
        )
        self._pending: dict[tuple[str, bytes], asyncio.Task[ModelOutcome]] = {}
        self._asked = 0
        self._cache_hits = 0

    async def complete(self, request: ModelRequest) -> ModelOutcome:
        """The outcome of ``request``: its reply, or a failure; never raises for the endpoint.

        An identical request answered before, or in flight now, gives the same
        outcome with ``cached`` set and no tokens (no call is made for it).
        """
        self._asked += 1
        key = request.cache_key()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            self._cache_hits += 1
            return _from_cache(cached)
        task = self._pending.get(key)
        if task is not None:
            self._cache_hits += 1
            return _from_cache(await asyncio.shield(task))
        task = asyncio.ensure_future(self._complete_once(request))
        self._pending[key] = task
        task.add_done_callback(lambda done: self._finish(key, done))
        return await asyncio.shield(task)

    def metrics(self) -> dict[str, Any]:
        """The chat client's metrics (:meth:`ChatClient.metrics`), with the cache's.

        ``requests`` counts every request asked, cache hits included;
        ``cache_hits`` and ``cache_entries`` describe the cache.
        """
        metrics = super().metrics()
        metrics["requests"] = self._asked
        metrics["cache_hits"] = self._cache_hits
        metrics["cache_entries"] = len(self._cache)
        return metrics

    def _finish(self, key: tuple[str, bytes], task: asyncio.Task[ModelOutcome]) -> None:
        self._pending.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            return
        outcome = task.result()
        if outcome.ok and self.config.cache_size > 0:
            self._cache[key] = outcome
            if len(self._cache) > self.config.cache_size:
                self._cache.popitem(last=False)

    async def _complete_once(self, request: ModelRequest) -> ModelOutcome:
        body = {**self.config.sampling, **self.config.extra_body}
        body.update(model=self.config.model, messages=request.payload.get("messages"))
        return _outcome(await self.post(body, _content_problem))


def _outcome(reply: ChatReply) -> ModelOutcome:
    text = _reply_text(reply.data) if reply.ok else None
    return ModelOutcome(
        text=text or "",
        failure=reply.failure,
        message=reply.message,
        tokens_in=reply.tokens_in,
        tokens_out=reply.tokens_out,
        latency_s=reply.latency_s,
    )


def _content_problem(data: dict[str, Any]) -> str:
    if _reply_text(data) is None:
        return f"reply has no choices[0].message.content: {json.dumps(data)[:200]}"
    return ""


def _reply_text(data: Any) -> str | None:
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None


def _from_cache(outcome: ModelOutcome) -> ModelOutcome:
    """An outcome answered without a call: no tokens spent, no latency."""
    return dataclasses.replace(outcome, cached=True, tokens_in=0, tokens_out=0, latency_s=0.0)


def lane_client(config: Mapping[str, Any]) -> JudgeClient | ServedRewardModelClient:
    """The judge lane's client for one endpoint: a served reward model's (``kind``) or a judge's.

    Raises ``ValueError`` for a bad configuration.
    """
    if config.get("kind") == SERVED_KIND:
        return ServedRewardModelClient(ServedConfig.from_mapping(config))
    return JudgeClient(EndpointConfig.from_mapping(config))


def _endpoint_config(config: Mapping[str, Any]) -> EndpointConfig:
    """The chat endpoint part of a lane endpoint's configuration (``ValueError`` when bad)."""
    if config.get("kind") == SERVED_KIND:
        return ServedConfig.from_mapping(config).endpoint
    return EndpointConfig.from_mapping(config)


def run_judge_requests(
    requests: Sequence[ModelRequest], endpoints: Mapping[str, Mapping[str, Any]]
) -> list[ModelOutcome]:
    """Run judge and served reward model requests concurrently here: one outcome per request, in order.

    One :class:`JudgeClient` per endpoint key lives as long as the process, on
    the private event loop thread of :mod:`~skyrl_rewards.rewards.models.chat_client`
    (shared with :func:`~skyrl_rewards.rewards.models.chat_loop.post_chat`),
    so limits and the cache hold across calls, and this works from inside a
    running event loop too (it blocks the caller until the batch is done). The
    wait is bounded by the endpoints' ``deadline_s``. Raises ``ValueError`` for
    a bad endpoint configuration or an unset API key variable (configuration errors).
    """
    if not requests:
        return []
    keys = {request.endpoint for request in requests}
    configs = {key: _endpoint_config(endpoints[key]) for key in keys}
    for config in configs.values():
        config.api_key()
    loop = loop_thread()

    async def run() -> list[ModelOutcome]:
        clients = {}
        for key in keys:  # made on the loop thread only: one client per endpoint per process
            client = loop.clients.get("judge:" + key)
            if not isinstance(client, (JudgeClient, ServedRewardModelClient)):
                client = loop.clients["judge:" + key] = lane_client(endpoints[key])
            clients[key] = client
        return list(await asyncio.gather(*(clients[r.endpoint].complete(r) for r in requests)))

    bound_s = max(config.deadline_s for config in configs.values()) + 60.0
    return loop.submit(run()).result(timeout=bound_s)


def judge_metrics() -> dict[str, dict[str, Any]]:
    """Metrics of this process's in-process judge clients, by endpoint key (see :meth:`JudgeClient.metrics`)."""
    loop = current_loop_thread()
    if loop is None:
        return {}

    async def collect() -> dict[str, dict[str, Any]]:
        return {
            key.removeprefix("judge:"): client.metrics()
            for key, client in loop.clients.items()
            if isinstance(client, (JudgeClient, ServedRewardModelClient))
        }

    return loop.submit(collect()).result(timeout=30.0)
