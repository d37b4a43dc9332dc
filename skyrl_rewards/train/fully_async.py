"""SkyRL 0.4's fully-async trainer with this project's generators: the trainer and its check.

With ``trainer.fully_async.enabled=true`` the entry point trains with
:class:`RewardsFullyAsyncTrainer`, SkyRL's ``FullyAsyncRayPPOTrainer``: up to
``trainer.fully_async.num_parallel_generation_workers`` asyncio tasks each call
``generator.generate`` for one prompt group at a time while the policy trains;
each step trains on the first ``policy_mini_batch_size`` groups to finish,
then pauses generation, syncs the weights and resumes it; a group is scheduled
only while fewer than ``(max_staleness_steps + step) * mini_batch_size`` groups
are accepted or running (SkyRL's staleness manager: a group waits for a slot,
it is never refused once running; one that still ends up staler is trained on
and counted in ``async/staleness_violation_count``).

What this module adds to SkyRL's trainer:

- **Masked trajectories and zero-variance filtering agree.** A masked
  trajectory (a fallback reward, a failed user simulator, an env that raised)
  has an all-zero loss mask, as SkyRL's ``generator.skip_failed_rollouts``
  placeholder has (SkyRL PRs #1641, #1986: ``stop_reason="rollout_error"``,
  which the env-error stand-in also carries). SkyRL's ``zero_variance_filter``
  counts only *live* trajectories (loss mask not all zero), so masked ones never
  make a flat group look varied. SkyRL's placeholder scores 0.0; this project's
  generator gives a masked trajectory its group's mean judged reward instead,
  so it moves no baseline. The consequence: a group with fewer than two live
  trajectories carries no advantage at all here, and with
  ``trainer.fully_async.sample_full_batch=true`` it is dropped like a
  zero-variance group (:meth:`RewardsFullyAsyncTrainer._should_keep_group`)
  instead of taking a slot of the mini-batch for nothing.
- **Per-group metrics that add up.** SkyRL sums a generator's per-group
  ``rollout_metrics`` over the mini-batch unless the name says ``mean``;
  ``generate/masked_share`` is recomputed over the mini-batch's trajectories
  (``generate/env_errors`` and ``generate/env_step_wall_s`` are sums).
  ``timing/reward_share`` is not logged: the fully-async trainer refuses
  callbacks.

:func:`check_fully_async` is what ``--check`` runs: SkyRL's own trainer class
is constructed (its assertions, in its own words) without Ray, models or data.
"""

import copy
from collections.abc import Sequence
from typing import Any

from skyrl.backends.skyrl_train.utils.ppo_utils import LOSSES_WITHOUT_OLD_LOGPROBS, PolicyLossType
from skyrl.train.fully_async_trainer import FullyAsyncRayPPOTrainer, GeneratedOutputGroup

from skyrl_rewards.train.env import MASK_METRIC


def _live_trajectories(output: dict[str, Any]) -> int:
    """Trajectories of a group's output whose loss mask is not all zero (a step-wise
    trajectory counts once, on its last row; every row of a masked one is masked)."""
    last = output.get("is_last_step") or [True] * len(output["loss_masks"])
    masks = output["loss_masks"]
    return sum(1 for mask, is_last in zip(masks, last, strict=True) if is_last and any(mask))


def masked_share(groups: Sequence[GeneratedOutputGroup]) -> float:
    """Masked trajectories / trajectories over ``groups`` (each trajectory counted once)."""
    masked = total = 0
    for group in groups:
        output = group.generator_output
        last = output.get("is_last_step") or [True] * len(output["env_metrics"])
        for metrics, is_last in zip(output["env_metrics"], last, strict=True):
            if is_last:
                total += 1
                masked += bool(metrics.get(MASK_METRIC))
    return masked / max(1, total)


class RewardsFullyAsyncTrainer(FullyAsyncRayPPOTrainer):
    """SkyRL's ``FullyAsyncRayPPOTrainer`` with masked trajectories counted as this project
    counts them (module docstring)."""

    def _should_keep_group(self, group: GeneratedOutputGroup) -> bool:
        """SkyRL's zero-variance rule, and a group needs two live trajectories: with masked
        rewards imputed by the group mean, one alone has a zero advantage."""
        return super()._should_keep_group(group) and _live_trajectories(group.generator_output) > 1

    def convert_generation_group_mini_batch_to_training_input(
        self,
        cur_generation_group_mini_batch: list[GeneratedOutputGroup],
        dropped_groups: list[GeneratedOutputGroup] | None = None,
    ) -> Any:
        batch = super().convert_generation_group_mini_batch_to_training_input(
            cur_generation_group_mini_batch, dropped_groups
        )
        groups = [*cur_generation_group_mini_batch, *(dropped_groups or [])]
        self.all_metrics["generate/masked_share"] = masked_share(groups)
        return batch


ROLLOUT_ANCHORED = "rollout"
"""``trainer.algorithm.cispo.cispo_anchor`` that makes CISPO optimise against rollout logprobs."""


class _OneBatch(list):
    """What the trainer's constructor reads of a dataloader: its length, rows and state."""

    def state_dict(self) -> dict[str, Any]:
        return {}


class _ConfigOnlyTrainer(RewardsFullyAsyncTrainer):
    """The trainer built for its assertions alone: a one-batch dataloader, no tracker, no models."""

    def _build_train_dataloader_and_compute_training_steps(self) -> None:
        self.train_dataloader = _OneBatch([[{"uid": "0"}]])
        self.num_steps_per_epoch = 1
        self.total_training_steps = 1


def config_only_trainer(cfg: Any) -> RewardsFullyAsyncTrainer:
    """:class:`RewardsFullyAsyncTrainer` built from ``cfg`` alone (its constructor's
    assertions run): no Ray, tracker, tokenizer, data, engine, generator or models."""
    probe = copy.deepcopy(cfg)
    # metrics collectors that ask a running Ray for its nodes; no assertion reads them
    probe.generator.inference_engine.enable_ray_prometheus_stats = False
    probe.trainer.enable_ray_gpu_monitor = False
    return _ConfigOnlyTrainer(
        cfg=probe,
        tracker=None,
        tokenizer=None,
        train_dataset=None,
        inference_engine_client=None,
        generator=None,
    )


def check_fully_async(cfg: Any) -> None:
    """Refuse a fully-async config SkyRL's trainer would refuse at start, in its words.

    Does nothing unless ``trainer.fully_async.enabled``. Builds SkyRL's own trainer class
    (its asserts: the worker count against the mini-batch and staleness, no callbacks,
    ``train_batch_size == policy_mini_batch_size``, no dynamic sampling, ``sample_full_batch``
    needs ``zero_variance_filter``, no ``generator.batched``, no ``colocate_all``, a policy
    loss against rollout logprobs) without Ray, models or data, then checks what SkyRL's
    trainer leaves to its first training step: that loss needs the rollout logprobs
    (``generator.sampling_params.logprobs``). Raises ``AssertionError`` (SkyRL's) or
    ``ValueError``.
    """
    if not cfg.trainer.fully_async.enabled:
        return
    config_only_trainer(cfg)
    algorithm = cfg.trainer.algorithm
    loss = PolicyLossType(algorithm.policy_loss_type)
    needs_rollout_logprobs = loss in LOSSES_WITHOUT_OLD_LOGPROBS or (
        loss == PolicyLossType.CISPO and algorithm.cispo.cispo_anchor == ROLLOUT_ANCHORED
    )
    if needs_rollout_logprobs and cfg.generator.sampling_params.logprobs is None:
        raise ValueError(
            f"trainer.algorithm.policy_loss_type={loss.value} optimises against the rollout "
            "logprobs, and generator.sampling_params.logprobs is null, so the engine returns "
            "none and the first training step fails; set generator.sampling_params.logprobs=0"
        )
