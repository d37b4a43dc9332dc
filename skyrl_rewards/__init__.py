"""skyrl_rewards: VLM-R1 reward functions, hardened, and a Ray pool that scores them for SkyRL.

Per-sample functions follow VLM-R1's names and signatures; batch functions
follow TRL's reward-function convention; :class:`RewardMix` scores a weighted
set of rewards on one sample; :class:`RewardPool` scores many on Ray actors;
:class:`SkyRLRewardEnv` is the skyrl-gym env ``skyrl_rewards``.

The layers live in subpackages, imports pointing one way:
``train``/``cli``/``data`` (integrations) -> ``pool`` (Ray runtime) ->
``rewards`` (pure functions: no Ray, no skyrl-gym). Names are loaded on first
use (PEP 562), so ``from skyrl_rewards import format_reward`` imports the
reward functions only, not Ray or skyrl-gym. Importing the package registers
the skyrl-gym env id ``skyrl_rewards`` when skyrl-gym is imported (now or
later), as ``import tau_bench_env`` registers ``tau_bench``; see
:mod:`skyrl_rewards.gym_registration`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from skyrl_rewards.gym_registration import register_when_gym_loads

_EXPORTS: dict[str, str] = {
    "BatchReward": "skyrl_rewards.rewards.batch",
    "accuracy_reward": "skyrl_rewards.rewards.batch",
    "detection_reward": "skyrl_rewards.rewards.batch",
    "make_reward": "skyrl_rewards.rewards.batch",
    "repetition_batch_reward": "skyrl_rewards.rewards.batch",
    "default_accuracy_reward": "skyrl_rewards.rewards.accuracy",
    "extract_choice": "skyrl_rewards.rewards.text.choice",
    "detection_score": "skyrl_rewards.rewards.boxes.detection",
    "format_reward": "skyrl_rewards.rewards.text.format_checks",
    "format_reward_rec": "skyrl_rewards.rewards.text.format_checks",
    "iou": "skyrl_rewards.rewards.geometry.boxes",
    "RewardMix": "skyrl_rewards.rewards.mix",
    "RewardSpec": "skyrl_rewards.rewards.mix",
    "iou_reward": "skyrl_rewards.rewards.boxes.rec",
    "COMPONENTS": "skyrl_rewards.rewards.registry",
    "ComponentScore": "skyrl_rewards.rewards.contract.result",
    "RewardResult": "skyrl_rewards.rewards.contract.result",
    "Status": "skyrl_rewards.rewards.contract.result",
    "CosineSchedule": "skyrl_rewards.rewards.text.shaping",
    "cosine_reward": "skyrl_rewards.rewards.text.shaping",
    "repetition_reward": "skyrl_rewards.rewards.text.shaping",
    "answer_span": "skyrl_rewards.rewards.contract.text",
    "clean": "skyrl_rewards.rewards.contract.text",
    "completion_text": "skyrl_rewards.rewards.contract.text",
    "RewardPool": "skyrl_rewards.pool.reward_pool",
    "SkyRLRewardEnv": "skyrl_rewards.train.env",
}

__all__ = [
    "BatchReward",
    "COMPONENTS",
    "ComponentScore",
    "CosineSchedule",
    "RewardMix",
    "RewardPool",
    "RewardResult",
    "RewardSpec",
    "SkyRLRewardEnv",
    "Status",
    "accuracy_reward",
    "answer_span",
    "clean",
    "completion_text",
    "cosine_reward",
    "default_accuracy_reward",
    "detection_reward",
    "detection_score",
    "extract_choice",
    "format_reward",
    "format_reward_rec",
    "iou",
    "iou_reward",
    "make_reward",
    "repetition_batch_reward",
    "repetition_reward",
]

if TYPE_CHECKING:
    from skyrl_rewards.pool.reward_pool import RewardPool
    from skyrl_rewards.rewards.accuracy import default_accuracy_reward
    from skyrl_rewards.rewards.batch import (
        BatchReward,
        accuracy_reward,
        detection_reward,
        make_reward,
        repetition_batch_reward,
    )
    from skyrl_rewards.rewards.boxes.detection import detection_score
    from skyrl_rewards.rewards.boxes.rec import iou_reward
    from skyrl_rewards.rewards.contract.result import ComponentScore, RewardResult, Status
    from skyrl_rewards.rewards.contract.text import answer_span, clean, completion_text
    from skyrl_rewards.rewards.geometry.boxes import iou
    from skyrl_rewards.rewards.mix import RewardMix, RewardSpec
    from skyrl_rewards.rewards.registry import COMPONENTS
    from skyrl_rewards.rewards.text.choice import extract_choice
    from skyrl_rewards.rewards.text.format_checks import format_reward, format_reward_rec
    from skyrl_rewards.rewards.text.shaping import CosineSchedule, cosine_reward, repetition_reward
    from skyrl_rewards.train.env import SkyRLRewardEnv


register_when_gym_loads()


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'skyrl_rewards' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
