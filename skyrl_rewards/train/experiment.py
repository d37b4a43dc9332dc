"""``RewardsPPOExp``: SkyRL's PPO experiment with this project's generator."""

from typing import Any

from skyrl.backends.skyrl_train.inference_servers.utils import resolve_policy_model_name
from skyrl.train.entrypoints.main_base import BasePPOExp

from skyrl_rewards.train.generator import make_generator


class RewardsPPOExp(BasePPOExp):
    """``BasePPOExp`` whose generator masks fallbacks and contains env failures."""

    def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> Any:
        return make_generator(
            cfg, inference_engine_client, tokenizer, resolve_policy_model_name(cfg)
        )
