"""``RewardsPPOExp``: SkyRL's PPO experiment with this project's generator.

Four differences from SkyRL's ``BasePPOExp``:

- the generator comes from :func:`~skyrl_rewards.train.generator.make_generator`;
- the prompt datasets filter long prompts with ``data.dataloader.num_workers`` processes
  (0 or 1: in this process) instead of SkyRL's fixed 8, which cost about 30-60 s of
  process start-up on a 2-core machine for a handful of rows;
- the trainer logs ``timing/reward_share``, the share of the step's wall time during which
  an env step (where the envs compute their rewards) was running
  (:class:`~skyrl_rewards.train.generator.RewardTimeShare`);
- with ``trainer.fully_async.enabled=true`` the trainer is SkyRL's fully-async one
  (:class:`~skyrl_rewards.train.fully_async.RewardsFullyAsyncTrainer`; SkyRL's own
  ``BasePPOExp`` builds the synchronous trainer whatever the flag says). It takes no
  callbacks, so it logs no ``timing/reward_share``.
"""

from typing import Any

from skyrl.backends.skyrl_train.inference_servers.utils import resolve_policy_model_name
from skyrl.train.dataset import PromptDataset
from skyrl.train.entrypoints.main_base import BasePPOExp

from skyrl_rewards.train.fully_async import RewardsFullyAsyncTrainer
from skyrl_rewards.train.generator import RewardTimeShare, make_generator

SKYRL_FILTER_WORKERS = 8
"""SkyRL's own number of prompt-filter processes, kept when ``data.dataloader.num_workers`` is unset."""


class RewardsPPOExp(BasePPOExp):
    """``BasePPOExp`` whose generator masks fallbacks and contains env failures."""

    def _prompt_dataset(self, files: list[str]) -> PromptDataset:
        workers = self.cfg.data.dataloader.num_workers
        return PromptDataset(
            datasets=files,
            tokenizer=self.tokenizer,
            max_prompt_length=self.cfg.trainer.max_prompt_length,
            num_workers=SKYRL_FILTER_WORKERS if workers is None else max(1, workers),
        )

    def get_train_dataset(self) -> PromptDataset:
        dataset = self._prompt_dataset(self.cfg.data.train_data)
        if len(dataset) < self.cfg.trainer.train_batch_size:
            raise ValueError(
                f"the training set has {len(dataset)} prompts, fewer than "
                f"trainer.train_batch_size={self.cfg.trainer.train_batch_size}: add data or "
                "lower the batch size"
            )
        return dataset

    def get_eval_dataset(self) -> PromptDataset | None:
        if self.cfg.trainer.eval_interval > 0 and self.cfg.data.val_data:
            return self._prompt_dataset(self.cfg.data.val_data)
        return None

    def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> Any:
        return make_generator(
            cfg, inference_engine_client, tokenizer, resolve_policy_model_name(cfg)
        )

    def get_trainer(self, *args: Any, **kwargs: Any) -> Any:
        if self.cfg.trainer.fully_async.enabled:
            return RewardsFullyAsyncTrainer(*args, **kwargs)
        trainer = super().get_trainer(*args, **kwargs)
        trainer.add_callback(RewardTimeShare())
        return trainer
