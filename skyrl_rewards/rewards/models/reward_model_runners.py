"""Which runner a reward-model endpoint gets, and this process's runners: one per endpoint, loaded once.

:func:`build_runner` picks the runner for a checkpoint (text, or the
vision-language runner of :mod:`~skyrl_rewards.rewards.models.vl_runner`),
:func:`runner_for` keeps one per endpoint key in this process (what a pool's
reward-model worker holds), :func:`run_reward_model_requests` scores a batch
of reward-model requests in this process (TRL, an in-process mix).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_rewards.rewards.contract.lanes import ModelOutcome, ModelRequest
from skyrl_rewards.rewards.models.reward_model import (
    VL_ARCHITECTURE,
    RewardModelConfig,
    RewardModelRunner,
)
from skyrl_rewards.rewards.models.vl_runner import VisionRewardModelRunner

_RUNNERS: dict[str, RewardModelRunner] = {}
_RUNNERS_LOCK = threading.Lock()


def runner_for(key: str, config: Mapping[str, Any]) -> RewardModelRunner:
    """This process's runner for endpoint ``key``, built (the model loaded) on first use.

    A runner whose model failed to load is kept too: every later request fails
    at once with the same message instead of loading again.
    """
    with _RUNNERS_LOCK:
        runner = _RUNNERS.get(key)
        if runner is None:
            runner = _RUNNERS[key] = build_runner(RewardModelConfig.from_mapping(config))
        return runner


def build_runner(config: RewardModelConfig) -> RewardModelRunner:
    """The runner for the checkpoint at ``config.model``.

    A checkpoint whose ``config.json`` names the vision-language classifier
    (:data:`VL_ARCHITECTURE`) gets a
    :class:`~skyrl_rewards.rewards.models.vl_runner.VisionRewardModelRunner`;
    any other (or one whose config cannot be read: the runner then says why) a
    text :class:`~skyrl_rewards.rewards.models.reward_model.RewardModelRunner`.
    """
    if _architectures(config.model) == [VL_ARCHITECTURE]:
        return VisionRewardModelRunner(config)
    return RewardModelRunner(config)


def _architectures(path: str) -> list[str]:
    """The ``architectures`` of the checkpoint's ``config.json`` (empty when it cannot be read)."""
    try:
        from transformers import PretrainedConfig

        config, _ = PretrainedConfig.get_config_dict(path, local_files_only=True)
    except (ImportError, OSError, ValueError):
        return []
    architectures = config.get("architectures")
    return list(architectures) if isinstance(architectures, list) else []


def run_reward_model_requests(
    requests: Sequence[ModelRequest], endpoints: Mapping[str, Mapping[str, Any]]
) -> list[ModelOutcome]:
    """Score reward-model requests in this process: one outcome per request, in order.

    Requests are grouped by endpoint; each endpoint's model is loaded once per
    process (:func:`runner_for`) and its requests scored in token-budget
    batches. ``endpoints`` maps each key to a
    :class:`~skyrl_rewards.rewards.models.reward_model.RewardModelConfig` mapping.
    """
    outcomes: list[ModelOutcome | None] = [None] * len(requests)
    for key in dict.fromkeys(request.endpoint for request in requests):
        indices = [i for i, request in enumerate(requests) if request.endpoint == key]
        runner = runner_for(key, endpoints[key])
        for index, outcome in zip(
            indices, runner.score([requests[i] for i in indices]), strict=True
        ):
            outcomes[index] = outcome
    assert all(outcome is not None for outcome in outcomes)
    return outcomes  # type: ignore[return-value]
