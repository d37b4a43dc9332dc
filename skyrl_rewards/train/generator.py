"""SkyRL generators that honour masking: a fallback reward never reaches the loss.

SkyRL's generator reads an env's ``get_metrics()`` but not its step
``metadata``, and an exception out of ``env.init``/``env.step`` ends the whole
``generate()`` call. The generators here (text: :class:`MaskingGymGenerator`,
vision-language: :class:`MaskingVLMGymGenerator`; :func:`make_generator` picks
one from the config) add, around SkyRL's own agent loop:

- **Masking.** A trajectory whose env reports ``should_mask`` (the reward is
  a fallback: a timeout, a dataset error, a user simulator that failed) gets
  an all-zero loss mask, and its reward is replaced by the mean of the
  judged rewards of its prompt group (``trajectory_ids``), so it moves
  neither the GRPO baseline nor its own advantage (0.0 when no trajectory of
  the group was judged).
- **Containment.** With ``environment.skyrl_gym.on_env_error=mask`` (the
  default) an exception inside the agent loop ends that trajectory alone,
  masked; the cause is logged once per exception type and counted. When
  every trajectory of a batch fails the batch raises: there is nothing to
  train on, and the first cause is in the error. The stand-in row must pass
  SkyRL's ``RayPPOTrainer.convert_to_training_input``, which pads
  ``rollout_logprobs`` by ``len()`` of every row and wraps ``pixel_values`` /
  ``image_grid_thw`` in ``TensorList``, whose entries must all be tensors (a
  None raises ``AttributeError``). So it gets zero logprobs when logprobs are
  collected, and in a vision batch it is a copy of a sibling row that carries
  images (prompt, response, images), fully masked, reward imputed: the
  model's forward then sees image tokens that match its images even when the
  row sits alone in a micro-batch (Qwen2.5-VL's vision tower rejects a
  micro-batch whose images are all empty). SkyRL pads its own batches the
  same way (``pad_training_input_batch`` copies row 0 with a zero loss mask).
- **Prompts that render right.** After the parquet round trip arrow gives
  every content part the union of keys (``{"type": "text", "text": ...,
  "image_url": None}``); chat templates that test for an ``image_url`` key
  (Qwen2-VL's) then render the question as a second image. Keys whose value
  is None are dropped from content parts before the first render.
- **Metrics.** ``rollout_metrics`` gains ``generate/masked_share`` (masked
  trajectories / all) and ``generate/env_errors`` (trajectories ended by an
  exception).
"""

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl.train.generators.skyrl_gym_generator import (
    SkyRLGymGenerator,
    StepWiseOutput,
    TrajectoryOutput,
)
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator

from skyrl_rewards.train.env import MASK_METRIC

logger = logging.getLogger(__name__)


def clean_prompt(prompt: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``prompt`` with None-valued keys dropped from list-of-parts message contents.

    >>> clean_prompt([{"role": "user", "content": [{"type": "text", "text": "q", "image_url": None}]}])
    [{'role': 'user', 'content': [{'type': 'text', 'text': 'q'}]}]
    """
    cleaned = []
    for message in prompt:
        message = dict(message)
        content = message.get("content")
        if isinstance(content, list):
            message["content"] = [
                {k: v for k, v in part.items() if v is not None}
                if isinstance(part, Mapping)
                else part
                for part in content
            ]
        cleaned.append(message)
    return cleaned


def _is_masked(output: TrajectoryOutput | StepWiseOutput) -> bool:
    final = output.step_outputs[-1] if isinstance(output, StepWiseOutput) else output
    return bool(final.env_metrics.get(MASK_METRIC))


def _final_reward(reward: float | list[float]) -> float:
    return float(sum(reward)) if isinstance(reward, list) else float(reward)


def _with_final_reward(reward: float | list[float], value: float) -> float | list[float]:
    """``reward`` (a scalar or per-token list) carrying ``value`` in place of its total."""
    if not isinstance(reward, list):
        return value
    out = [0.0] * len(reward)
    if out:
        out[-1] = value
    return out


class _MaskingMixin:
    """Masking, containment and prompt cleaning around a SkyRL generator's agent loop."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._causes_logged: set[str] = set()

    async def agent_loop(
        self, prompt: Any, env_class: str, env_extras: dict[str, Any], *args, **kwargs
    ):
        try:
            output = await super().agent_loop(
                clean_prompt(prompt), env_class, env_extras, *args, **kwargs
            )
        except Exception as error:
            if self.skyrl_gym_cfg.on_env_error == "raise":
                raise
            return self._failed_trajectory(env_class, error)
        if _is_masked(output):
            steps = output.step_outputs if isinstance(output, StepWiseOutput) else [output]
            for step in steps:
                step.loss_mask = [0] * len(step.loss_mask)
        return output

    def _failed_trajectory(self, env_class: str, error: Exception) -> TrajectoryOutput:
        """A one-token, fully masked trajectory standing for an agent loop that raised."""
        cause = f"{type(error).__name__}: {error}"[:500]
        if type(error).__name__ not in self._causes_logged:
            self._causes_logged.add(type(error).__name__)
            logger.warning(
                "env %s: a trajectory ended with an error and is masked (%s); further errors of "
                "this type are counted in generate/env_errors. Set "
                "environment.skyrl_gym.on_env_error=raise to stop on it instead.",
                env_class,
                cause,
            )
        eos = self.tokenizer.eos_token_id
        return TrajectoryOutput(
            response_ids=[eos],
            reward=[0.0],
            stop_reason="env_error",
            loss_mask=[0],
            prompt_ids=[eos],
            rollout_logprobs=None,
            env_metrics={MASK_METRIC: 1.0, "env_error": 1.0},
        )

    async def generate(self, input_batch: Mapping[str, Any], disable_tqdm: bool = False):
        out = await super().generate(input_batch, disable_tqdm=disable_tqdm)
        metrics = out["env_metrics"]
        masked = [bool(m.get(MASK_METRIC)) for m in metrics]
        errors = [bool(m.get("env_error")) for m in metrics]
        if metrics and all(errors):
            raise RuntimeError(
                f"every trajectory of the batch ({len(errors)}) ended with an env error; nothing "
                "to train on. See the warning logged above for the first cause."
            )
        groups = _groups(input_batch, out, len(metrics))
        out["rewards"] = _impute_masked_rewards(out["rewards"], masked, groups)
        _fit_failed_rows(out, errors)
        out["rollout_metrics"]["generate/masked_share"] = sum(masked) / max(1, len(masked))
        out["rollout_metrics"]["generate/env_errors"] = float(sum(errors))
        return out


def _fit_failed_rows(out: dict[str, Any], errors: Sequence[bool]) -> None:
    """Make the one-token stand-ins of failed trajectories acceptable to SkyRL's trainer, in place.

    With logprobs collected a stand-in gets a zero logprob per response token. In a vision
    batch (``pixel_values`` present) it becomes a copy of the first unfailed row that carries
    images: same prompt, response and images, loss mask all zeros, its imputed reward on the
    last token. The module docstring says why.
    """
    failed = [i for i, error in enumerate(errors) if error]
    pixel_values = out.get("pixel_values")
    if pixel_values is not None and failed:
        donor = next(i for i, pv in enumerate(pixel_values) if pv is not None and not errors[i])
        n = len(out["response_ids"][donor])
        for i in failed:
            out["prompt_token_ids"][i] = list(out["prompt_token_ids"][donor])
            out["response_ids"][i] = list(out["response_ids"][donor])
            out["loss_masks"][i] = [0] * n
            reward = out["rewards"][i]
            if isinstance(reward, list):
                out["rewards"][i] = _with_final_reward([0.0] * n, _final_reward(reward))
            pixel_values[i] = pixel_values[donor]
            out["image_grid_thw"][i] = out["image_grid_thw"][donor]
    logprobs = out.get("rollout_logprobs")
    if logprobs is not None:
        for i in failed:
            logprobs[i] = [0.0] * len(out["response_ids"][i])


def _groups(input_batch: Mapping[str, Any], out: Mapping[str, Any], n: int) -> list[Any]:
    """The prompt group of each output row (its trajectory's instance id), or one group per row."""
    ids = out.get("trajectory_ids") or input_batch.get("trajectory_ids")
    if ids is None or len(ids) != n:
        return list(range(n))
    return [getattr(i, "instance_id", i) for i in ids]


def _impute_masked_rewards(
    rewards: list[Any], masked: Sequence[bool], groups: Sequence[Any]
) -> list[Any]:
    """Masked rows take the mean judged reward of their group (0.0 if none was judged)."""
    judged: dict[Any, list[float]] = defaultdict(list)
    for reward, is_masked, group in zip(rewards, masked, groups, strict=True):
        if not is_masked:
            judged[group].append(_final_reward(reward))
    out = list(rewards)
    for i, (is_masked, group) in enumerate(zip(masked, groups, strict=True)):
        if is_masked:
            values = judged.get(group, [])
            out[i] = _with_final_reward(rewards[i], sum(values) / len(values) if values else 0.0)
    return out


class MaskingGymGenerator(_MaskingMixin, SkyRLGymGenerator):
    """SkyRL's text generator with masking, containment and prompt cleaning (module docstring)."""


class MaskingVLMGymGenerator(_MaskingMixin, SkyRLVLMGymGenerator):
    """SkyRL's vision-language generator with masking, containment and prompt cleaning."""


def make_generator(
    cfg: Any, inference_engine_client: Any, tokenizer: Any, policy_model_name: str | None = None
) -> MaskingGymGenerator | MaskingVLMGymGenerator:
    """The generator SkyRL's trainer uses for ``cfg`` (a :class:`~skyrl_rewards.train.config.TrainConfig`).

    Vision-language when ``cfg.generator.vision_language_generator`` is set, text otherwise.
    """
    cls = MaskingVLMGymGenerator if cfg.generator.vision_language_generator else MaskingGymGenerator
    return cls(
        generator_cfg=cfg.generator,
        skyrl_gym_cfg=cfg.environment.skyrl_gym,
        inference_engine_client=inference_engine_client,
        tokenizer=tokenizer,
        policy_model_name=policy_model_name,
    )
