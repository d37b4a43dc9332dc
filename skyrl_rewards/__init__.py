"""skyrl_rewards: VLM-R1 reward functions, hardened, and a Ray pool that scores them for SkyRL.

Per-sample functions follow VLM-R1's names and signatures; batch functions
follow TRL's reward-function convention; :class:`RewardMix` scores a weighted
set of rewards on one sample; :class:`RewardPool` scores many on Ray actors;
:class:`SkyRLRewardEnv` is registered with skyrl-gym as ``skyrl_rewards`` on
import.
"""

from skyrl_rewards.accuracy import default_accuracy_reward
from skyrl_rewards.batch import (
    BatchReward,
    accuracy_reward,
    detection_reward,
    make_reward,
    repetition_batch_reward,
)
from skyrl_rewards.choice import extract_choice
from skyrl_rewards.detection import detection_score
from skyrl_rewards.env import SkyRLRewardEnv  # importing it registers the env with skyrl-gym
from skyrl_rewards.format_checks import format_reward, format_reward_rec
from skyrl_rewards.geometry import iou
from skyrl_rewards.mix import RewardMix, RewardSpec
from skyrl_rewards.pool import RewardPool
from skyrl_rewards.rec import iou_reward
from skyrl_rewards.registry import COMPONENTS
from skyrl_rewards.result import ComponentScore, RewardResult, Status
from skyrl_rewards.shaping import CosineSchedule, cosine_reward, repetition_reward
from skyrl_rewards.text import answer_span, clean, completion_text

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
