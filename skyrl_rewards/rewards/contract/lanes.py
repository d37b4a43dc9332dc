"""The contract between a model-based reward component and whatever runs its requests.

A component that needs a model for a sample returns a :class:`ModelRequest`
from :meth:`~skyrl_rewards.rewards.contract.component_base.Component.lane_request` (``None``:
the sample is scored by rules, ``compute``, as usual). A runner turns each
request into exactly one :class:`ModelOutcome`, never raising for what the
endpoint or the model did: a failure is an outcome with ``failure`` set. The
component's :meth:`~skyrl_rewards.rewards.contract.component_base.Component.settle` turns the
outcome into a :class:`~skyrl_rewards.rewards.contract.result.ComponentScore`; a failed
outcome, or a reply that does not parse, settles as a masked score (status
``error`` or ``timeout``) whose error names the cause, never as 0.0.

Runners:
- in this process (TRL, the CLI without a pool): :func:`~skyrl_rewards.rewards.models.local.run_requests`;
- in a reward pool: the judge lane (one asynchronous actor per pool, holding the
  endpoint clients, so limits hold for the whole pool) and the reward-model
  worker group (actors that load the model once, on GPUs where asked).

Requests name their *endpoint* by key: the component's :meth:`endpoints`
maps each key to the plain configuration a runner builds its client or model
from, so a runner holds one client per endpoint however many components and
samples use it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

JUDGE_LANE = "judge"
"""Requests to an HTTP model endpoint: a chat judge, or a served reward model
(:mod:`~skyrl_rewards.rewards.models.served_reward_model`); I/O, never a CPU worker slot."""

REWARD_MODEL_LANE = "reward_model"
"""Requests to a sequence-classification reward model (a worker group, GPUs where asked)."""

LANES = (JUDGE_LANE, REWARD_MODEL_LANE)

FAILURE_KINDS = (
    "connect",  # the endpoint could not be reached
    "timeout",  # no answer within the request's time limit (after retries)
    "http_status",  # a 4xx/5xx answer that retries did not cure (429 excluded)
    "rate_limited",  # 429s past the retry budget, or the pool's own limits past their wait bound
    "breaker_open",  # the endpoint's circuit breaker is open: not called
    "bad_response",  # an answer that is not the API's shape (no choices, not JSON)
    "model_error",  # the reward model failed on this input (load error, OOM, too long)
    "lane_lost",  # the pool's lane or worker died and retries were used up
)
"""Values of :attr:`ModelOutcome.failure` (empty when the request succeeded)."""


def endpoint_key(config: dict[str, Any]) -> str:
    """A short stable key for an endpoint configuration (equal configs share one client).

    >>> endpoint_key({"model": "m"}) == endpoint_key({"model": "m"})
    True
    """
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


@dataclass(frozen=True)
class ModelRequest:
    """One call to a model: which lane and endpoint, and the JSON-able payload.

    Judge payload: ``{"messages": [...chat messages, image parts as data URLs...]}``
    (sampling parameters live in the endpoint configuration; a served reward
    model's requests are on this lane too, with the reward-model payload). Reward-model
    payload: ``{"messages": [...]}`` (prompt and completion as a chat, the
    model's chat template applied by the runner) or ``{"text": str}``.
    """

    lane: str
    endpoint: str
    payload: dict[str, Any] = field(hash=False)

    def cache_key(self) -> tuple[str, bytes]:
        """``(lane, digest)``: equal for requests that must get equal answers."""
        digest = hashlib.blake2b(digest_size=16)
        digest.update(self.endpoint.encode())
        digest.update(json.dumps(self.payload, sort_keys=True, default=str).encode())
        return self.lane, digest.digest()


@dataclass(frozen=True)
class ModelOutcome:
    """What running one :class:`ModelRequest` gave: a reply or a failure, and its cost.

    ``text``: the judge's reply; ``value``: the reward model's raw scalar.
    ``failure`` is one of :data:`FAILURE_KINDS` (empty: success) and
    ``message`` says why, for people. Tokens and latency are measured; ``cached``
    says the outcome came from a cache (no call was made).
    """

    text: str = ""
    value: float = 0.0
    failure: str = ""
    message: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    cached: bool = False

    @property
    def ok(self) -> bool:
        """True when the request succeeded."""
        return not self.failure
