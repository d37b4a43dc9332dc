"""Run model requests in this process: what TRL's batch rewards and an in-process mix use.

A reward pool does not use this module: it sends requests to its judge lane
and reward-model workers instead (limits for the whole pool, GPUs where
asked). Here, one client per endpoint lives as long as the process, so a
batch of judge requests runs concurrently on one event loop and a reward
model is loaded once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_rewards.rewards.contract.lanes import (
    JUDGE_LANE,
    REWARD_MODEL_LANE,
    ModelOutcome,
    ModelRequest,
)


def run_requests(
    requests: Sequence[ModelRequest], endpoints: Mapping[str, Mapping[str, Any]]
) -> list[ModelOutcome]:
    """One outcome per request, in order; never raises for what an endpoint or model did.

    ``endpoints`` maps each request's ``endpoint`` key to its configuration
    (:meth:`~skyrl_rewards.rewards.contract.component_base.Component.endpoints`). Raises
    ``ValueError`` for a request whose lane or endpoint is unknown (a bug).
    """
    outcomes: list[ModelOutcome | None] = [None] * len(requests)
    for lane in {request.lane for request in requests}:
        indices = [i for i, request in enumerate(requests) if request.lane == lane]
        batch = [requests[i] for i in indices]
        for request in batch:
            if request.endpoint not in endpoints:
                raise ValueError(f"model request for unknown endpoint {request.endpoint!r}")
        if lane == JUDGE_LANE:
            from skyrl_rewards.rewards.models.judge_client import run_judge_requests

            results = run_judge_requests(batch, endpoints)
        elif lane == REWARD_MODEL_LANE:
            from skyrl_rewards.rewards.models.reward_model import run_reward_model_requests

            results = run_reward_model_requests(batch, endpoints)
        else:
            raise ValueError(f"model request for unknown lane {lane!r}")
        for index, outcome in zip(indices, results, strict=True):
            outcomes[index] = outcome
    assert all(outcome is not None for outcome in outcomes)
    return outcomes  # type: ignore[return-value]
