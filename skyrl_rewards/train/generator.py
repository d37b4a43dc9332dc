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
  the group was judged). It still counts in the group's size, so with
  ``grpo_norm_by_std`` the judged trajectories' standard deviation is taken
  over the group with it.
- **Step-wise training** (``generator.step_wise_trajectories=true``; text
  only, SkyRL's VLM generator refuses it). SkyRL makes every turn a row and
  computes GRPO advantages from each trajectory's last row alone
  (``RayPPOTrainer.compute_advantages_and_returns``), broadcasting them to
  its other rows; ``env_metrics`` is only on the last row. So a trajectory is
  judged or masked by its last row, judged rewards count once per
  trajectory (the last row's), a masked trajectory's last row takes the
  group mean and its earlier rows reward 0.0 (``merge_stepwise_output`` adds
  merged rows' rewards up), and all its rows are masked. ``masked_share`` and
  ``env_errors`` count trajectories, not rows.
- **Containment.** With ``environment.skyrl_gym.on_env_error=mask`` (the
  default) an exception inside the agent loop ends that trajectory alone,
  masked; the cause is logged once per exception type and counted. A
  vision-language response that holds an image placeholder token
  (``<|image_pad|>``: SkyRL's policy forward would read it as an image slot
  and fail the step) ends its trajectory the same way. The
  stand-in follows SkyRL's ``generator.skip_failed_rollouts`` convention
  (SkyRL PRs #1641, #1986): ``stop_reason="rollout_error"``, an all-zero loss
  mask (its reward is imputed like any masked trajectory's). When every
  trajectory of a synchronous batch fails the batch raises: there is nothing
  to train on, and the first cause is in the error. Under the fully-async
  trainer (``per_group=True``: ``generate`` is called for one prompt group at
  a time, and an exception out of it ends the training process) a group whose
  every trajectory failed is returned masked and counted instead. The
  stand-in is a one-token trajectory (in step-wise mode a ``StepWiseOutput``
  of one such step, as SkyRL's ``generate`` reads ``step_outputs`` of every
  output); the vision-language generator gives it its own prompt as the
  engine renders it, images included (SkyRL's render of the chat), when that
  render succeeds. It must pass
  SkyRL's ``validate_generator_output`` and
  ``RayPPOTrainer.convert_to_training_input``, which want every per-token
  side channel on every row: ``rollout_logprobs`` (one per response token),
  ``rollout_expert_indices`` (MoE router replay, R3: a non-empty route prefix
  of the row; a row without loss may carry a short dummy one) and
  ``rollout_sample_support`` (one row per response token), and wrap
  ``pixel_values`` / ``image_grid_thw`` in ``TensorList``, whose entries must
  all be tensors (a None raises ``AttributeError``). So it gets zero
  logprobs, one route row (a copy of another row's first), a padding
  (``-1``) support row per token, each when the batch carries that channel;
  in a vision batch a stand-in without images of its own is a copy of a
  sibling row that carries images (prompt, response, images), fully masked,
  reward imputed: the model's
  forward then sees image tokens that match its images even when the row
  sits alone in a micro-batch (Qwen2.5-VL's vision tower rejects a
  micro-batch whose images are all empty). SkyRL pads its own batches the
  same way (``pad_training_input_batch`` copies row 0 with a zero loss mask).
- **Text rows in a vision batch.** SkyRL 0.4 cannot train them: its VLM
  generator gives a row without images ``pixel_values=None`` and the
  trainer's ``TensorList`` then fails. When some rows of a training batch
  have images and an unfailed row has none, ``generate`` raises
  :class:`TextRowInVisionBatchError` naming the rows and the fix. An
  evaluation batch (``batch_metadata.training_phase == "eval"``) never
  becomes a training batch and passes, as with SkyRL's own generator. A
  batch with no image at all is a text batch to SkyRL and trains as one.
- **Batched generation** (``generator.batched=true``) is refused when the
  generator is made: SkyRL's ``generate_batched`` bypasses the agent loop and
  returns no env metrics, so nothing here could apply.
- **Prompts that render right.** After the parquet round trip arrow gives
  every content part the union of keys (``{"type": "text", "text": ...,
  "image_url": None}``); chat templates that test for an ``image_url`` key
  (Qwen2-VL's) then render the question as a second image. Keys whose value
  is None are dropped from content parts before the first render.
- **Metrics.** ``rollout_metrics`` gains ``generate/masked_share`` (masked
  trajectories / all), ``generate/env_errors`` (trajectories ended by an
  exception) and ``generate/env_step_wall_s``: the wall-clock seconds of the
  ``generate()`` call during which at least one ``env.step`` was running
  (where the envs compute their rewards: the reward pool's round trip for
  ``skyrl_rewards``, tools and the final check for tau-bench), counted once
  however many trajectories step at the same time. :class:`RewardTimeShare`
  (a SkyRL trainer callback, installed by ``RewardsPPOExp``) divides it by the
  step's wall time: ``timing/reward_share``. Each ``generate()`` call keeps
  its own clock, so concurrent calls (the fully-async trainer's groups) do
  not mix their figures.
"""

import contextvars
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from skyrl.backends.renderer import decode_mm_kwargs
from skyrl.backends.skyrl_train.utils.sample_support import SAMPLE_SUPPORT_PADDING
from skyrl.train.generators.base import TRAINING_PHASE_EVAL
from skyrl.train.generators.skyrl_gym_generator import (
    SkyRLGymGenerator,
    StepWiseOutput,
    TrajectoryOutput,
)
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator
from skyrl.train.utils.callbacks import TrainingCallback

from skyrl_rewards.train.env import MASK_METRIC

logger = logging.getLogger(__name__)

ROLLOUT_ERROR = "rollout_error"
"""The stop reason of a trajectory an exception ended (SkyRL's ``skip_failed_rollouts`` name)."""


class _EnvStepClock:
    """Wall seconds during which at least one ``env.step`` of one ``generate()`` call ran."""

    def __init__(self) -> None:
        self.running = 0
        self.since = 0.0
        self.wall_s = 0.0

    def start(self) -> None:
        if self.running == 0:
            self.since = time.monotonic()
        self.running += 1

    def stop(self) -> None:
        self.running -= 1
        if self.running == 0:
            self.wall_s += time.monotonic() - self.since


_clock: contextvars.ContextVar[_EnvStepClock | None] = contextvars.ContextVar(
    "skyrl_rewards_env_step_clock", default=None
)
"""The clock of the ``generate()`` call a task runs under (its agent loops inherit it)."""


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
    if isinstance(output, StepWiseOutput):
        # no step at all: the prompt alone was over max_input_length; SkyRL emits no row for it
        return bool(output.step_outputs) and bool(
            output.step_outputs[-1].env_metrics.get(MASK_METRIC)
        )
    return bool(output.env_metrics.get(MASK_METRIC))


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

    def __init__(self, *args: Any, per_group: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.per_group = per_group
        """``generate`` is called per prompt group (fully async): a wholly failed call is masked."""
        if self.batched:
            raise ValueError(
                "generator.batched=true: SkyRL's batched generation bypasses the agent loop and "
                "returns no env metrics, so masking and containment cannot apply; set "
                "generator.batched=false (the default)"
            )
        self._causes_logged: set[str] = set()

    async def _run_in_executor_if_available(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        """SkyRL's call of ``env.init``/``env.step``/``env.close``; env steps are timed."""
        clock = _clock.get()
        if clock is None or getattr(func, "__name__", "") != "step":
            return await super()._run_in_executor_if_available(func, *args, **kwargs)
        clock.start()
        try:
            return await super()._run_in_executor_if_available(func, *args, **kwargs)
        finally:
            clock.stop()

    async def agent_loop(
        self, prompt: Any, env_class: str, env_extras: dict[str, Any], *args, **kwargs
    ):
        try:
            output = await super().agent_loop(
                clean_prompt(prompt), env_class, env_extras, *args, **kwargs
            )
            self._check_response(output)
        except Exception as error:
            if self.skyrl_gym_cfg.on_env_error == "raise":
                raise
            return await self._failed_trajectory(clean_prompt(prompt), env_class, error)
        if _is_masked(output):
            steps = output.step_outputs if isinstance(output, StepWiseOutput) else [output]
            for step in steps:
                step.loss_mask = [0] * len(step.loss_mask)
        return output

    def _check_response(self, output: TrajectoryOutput | StepWiseOutput) -> None:
        """Raise when the trainer could not train on ``output`` (the VLM generator checks)."""

    async def _stand_in_prompt(self, prompt: list[dict[str, Any]]) -> dict[str, Any]:
        """A failed trajectory's prompt fields: here one EOS token (the VLM generator renders)."""
        return {"prompt_ids": [self.tokenizer.eos_token_id]}

    async def _failed_trajectory(
        self, prompt: list[dict[str, Any]], env_class: str, error: Exception
    ) -> TrajectoryOutput | StepWiseOutput:
        """A one-token, fully masked trajectory standing for an agent loop that raised.

        In step-wise mode it is a trajectory of one step, as SkyRL's ``generate`` reads
        ``step_outputs`` of every agent loop's output.
        """
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
        stand_in = TrajectoryOutput(
            response_ids=[self.tokenizer.eos_token_id],
            reward=[0.0],
            stop_reason=ROLLOUT_ERROR,
            loss_mask=[0],
            rollout_logprobs=None,
            env_metrics={MASK_METRIC: 1.0, "env_error": 1.0},
            **await self._stand_in_prompt(prompt),
        )
        if self.generator_cfg.step_wise_trajectories:
            return StepWiseOutput(step_outputs=[stand_in])
        return stand_in

    async def generate(self, input_batch: Mapping[str, Any], disable_tqdm: bool = False):
        clock = _EnvStepClock()
        token = _clock.set(clock)
        try:
            out = await super().generate(input_batch, disable_tqdm=disable_tqdm)
        finally:
            _clock.reset(token)
        n = len(out["env_metrics"])
        # a trajectory's outcome is on its last row (step-wise: every step is a row)
        last = [bool(x) for x in out.get("is_last_step") or [True] * n]
        final = [m for m, is_last in zip(out["env_metrics"], last, strict=True) if is_last]
        masked = [bool(m.get(MASK_METRIC)) for m in final]
        errors = [bool(m.get("env_error")) for m in final]
        if final and all(errors) and not self.per_group:
            raise RuntimeError(
                f"every trajectory of the batch ({len(final)}) ended with an env error; nothing "
                "to train on. See the warning logged above for the first cause."
            )
        out["rewards"] = _impute_masked_rewards(
            out["rewards"], _per_row(last, masked), _groups(input_batch, out, n), last
        )
        metadata = input_batch.get("batch_metadata")
        training = metadata is None or metadata.training_phase != TRAINING_PHASE_EVAL
        _fit_failed_rows(out, _per_row(last, errors), refuse_text_rows=training)
        out["rollout_metrics"]["generate/masked_share"] = sum(masked) / max(1, len(final))
        out["rollout_metrics"]["generate/env_errors"] = float(sum(errors))
        out["rollout_metrics"]["generate/env_step_wall_s"] = clock.wall_s
        return out


class RewardTimeShare(TrainingCallback):
    """Adds ``timing/reward_share`` to each step's logs: ``generate/env_step_wall_s / timing/step``."""

    def on_log(self, trainer: Any, callback_input: Any, control: Any) -> None:
        logs = callback_input.logs
        if logs is None:
            return
        env_s, step_s = logs.get("generate/env_step_wall_s"), logs.get("timing/step")
        if env_s is not None and step_s:
            logs["timing/reward_share"] = env_s / step_s


def _per_row(last: Sequence[bool], per_trajectory: Sequence[bool]) -> list[bool]:
    """A per-trajectory flag on every row (step) of its trajectory; rows are contiguous."""
    out = []
    trajectory = 0
    for is_last in last:
        out.append(per_trajectory[trajectory])
        trajectory += is_last
    return out


def _fit_failed_rows(
    out: dict[str, Any], errors: Sequence[bool], *, refuse_text_rows: bool = True
) -> None:
    """Make the one-token stand-ins of failed trajectories acceptable to SkyRL's trainer, in place.

    In a vision batch (``pixel_values`` present) a stand-in without images of its own (its
    prompt did not render) becomes a copy of the first unfailed row with images (else of any
    row with images): same prompt, response and images, loss mask all zeros, its imputed
    reward on the last token. With ``refuse_text_rows`` (training batches; SkyRL's
    evaluation never builds a training batch, and takes such rows) an unfailed row without
    images raises :class:`TextRowInVisionBatchError`.
    Then it gets a zero logprob per response token when logprobs are collected, a one-row
    route (another row's first) when routed experts are (R3), and a padding support row per
    response token when sample supports are; SkyRL sets these channels only when some row
    has them, and a stand-in never does. The module docstring says why.
    """
    failed = [i for i, error in enumerate(errors) if error]
    pixel_values = out.get("pixel_values")
    if pixel_values is not None and refuse_text_rows:
        text_rows = [i for i, pv in enumerate(pixel_values) if pv is None and not errors[i]]
        if text_rows:
            raise TextRowInVisionBatchError(text_rows, len(pixel_values))
    if not failed:
        return
    bare = [i for i in failed if pixel_values is not None and pixel_values[i] is None]
    if bare:
        # SkyRL sets pixel_values only when some row has images; a stand-in whose prompt did
        # not render has none: it borrows a judged row's (or another stand-in's) row
        with_images = [i for i, pv in enumerate(pixel_values) if pv is not None]
        donor = next((i for i in with_images if not errors[i]), with_images[0])
        n = len(out["response_ids"][donor])
        for i in bare:
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
    routes = out.get("rollout_expert_indices")
    if routes is not None:
        with_routes = next(r for r in routes if r is not None)
        for i in failed:
            routes[i] = with_routes[:1].copy()
    support = out.get("rollout_sample_support")
    if support is not None:
        with_support = next(s for s in support if s is not None)
        for i in failed:
            shape = (len(out["response_ids"][i]), with_support.shape[1])
            support[i] = np.full(shape, SAMPLE_SUPPORT_PADDING, dtype=with_support.dtype)


class TextRowInVisionBatchError(ValueError):
    """A vision-language batch holds rows without images, which SkyRL 0.4 cannot train."""

    def __init__(self, rows: Sequence[int], n: int) -> None:
        super().__init__(
            f"rows {list(rows)} of this vision-language batch ({n} rows) carry no image while "
            "others do. SkyRL 0.4's trainer wraps pixel_values in a TensorList, which needs a "
            "tensor on every row (convert_to_training_input would fail with AttributeError: "
            "'NoneType' object has no attribute 'device'). Give every prompt of a "
            "vision-language dataset an image, or train the text-only prompts in a separate run "
            "with generator.vision_language_generator=false."
        )


def _groups(input_batch: Mapping[str, Any], out: Mapping[str, Any], n: int) -> list[Any]:
    """The prompt group of each output row (its trajectory's instance id), or one group per row."""
    ids = out.get("trajectory_ids") or input_batch.get("trajectory_ids")
    if ids is None or len(ids) != n:
        return list(range(n))
    return [getattr(i, "instance_id", i) for i in ids]


def _impute_masked_rewards(
    rewards: list[Any],
    masked: Sequence[bool],
    groups: Sequence[Any],
    last: Sequence[bool] | None = None,
) -> list[Any]:
    """Masked trajectories take the mean judged reward of their group (0.0 if none was judged).

    ``last`` marks the row carrying each trajectory's outcome (step-wise: its last step;
    default: every row is a trajectory). Judged trajectories count once, by that row's reward;
    a masked trajectory's last row gets the mean and its earlier rows a zero reward, so a
    merge of its steps (``merge_stepwise_output`` adds them up) keeps the mean.
    """
    last = [True] * len(rewards) if last is None else last
    judged: dict[Any, list[float]] = defaultdict(list)
    for reward, is_masked, group, is_last in zip(rewards, masked, groups, last, strict=True):
        if is_last and not is_masked:
            judged[group].append(_final_reward(reward))
    out = list(rewards)
    for i, (is_masked, group, is_last) in enumerate(zip(masked, groups, last, strict=True)):
        if is_masked:
            values = judged.get(group, [])
            mean = sum(values) / len(values) if values and is_last else 0.0
            out[i] = _with_final_reward(rewards[i], mean)
    return out


class MaskingGymGenerator(_MaskingMixin, SkyRLGymGenerator):
    """SkyRL's text generator with masking, containment and prompt cleaning (module docstring)."""


class ImagePlaceholderInResponseError(ValueError):
    """A vision-language response holds image placeholder tokens (``<|image_pad|>``).

    SkyRL's policy forward marks every such token of the sequence as an image slot
    (``HFModelWrapper.forward``: ``sequences == image_token_id``), so the model would find more
    slots than image features and the training step would fail; the trajectory is masked.
    """


IMAGE_PLACEHOLDERS = ("<|image_pad|>", "<|video_pad|>", "<IMG_CONTEXT>")
"""Tokens a vision-language model's forward reads as image or video slots (Qwen-VL, InternVL)."""


class MaskingVLMGymGenerator(_MaskingMixin, SkyRLVLMGymGenerator):
    """SkyRL's vision-language generator with masking, containment and prompt cleaning.

    A response whose generated tokens hold an image placeholder (a policy can sample one)
    ends as a failed trajectory: :class:`ImagePlaceholderInResponseError`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        vocab = self.tokenizer.get_vocab()
        self._placeholders = {vocab[t]: t for t in IMAGE_PLACEHOLDERS if t in vocab}

    def _check_response(self, output: TrajectoryOutput | StepWiseOutput) -> None:
        if isinstance(output, StepWiseOutput):  # SkyRL's VLM generator refuses step-wise mode
            return
        # the model's own tokens only (loss mask 1): an observation's image (loss mask 0) has
        # its placeholders matched by features in the render
        found = [
            self._placeholders[token]
            for token, generated in zip(output.response_ids, output.loss_mask, strict=False)
            if generated and token in self._placeholders
        ]
        if found:
            raise ImagePlaceholderInResponseError(
                f"the response holds {len(found)} image placeholder token(s) ({found[0]}); the "
                "policy's forward would read them as image slots without images, so the "
                "trajectory is masked"
            )

    async def _stand_in_prompt(self, prompt: list[dict[str, Any]]) -> dict[str, Any]:
        """The failed trajectory's prompt as the engine renders it, with its images' tensors
        (so a group whose every trajectory failed still trains as a vision batch); one EOS
        token when the render itself fails."""
        try:
            rendered = await self._render_conversation(prompt)
        except Exception as error:  # the failure may be the prompt itself (a broken image)
            logger.warning("a failed trajectory's prompt did not render either: %s", error)
            return await super()._stand_in_prompt(prompt)
        features = decode_mm_kwargs((rendered["features"] or {}).get("kwargs_data"))
        return {
            "prompt_ids": rendered["prompt_ids"],
            "pixel_values": features["pixel_values"],
            "image_grid_thw": features["image_grid_thw"],
        }


def make_generator(
    cfg: Any, inference_engine_client: Any, tokenizer: Any, policy_model_name: str | None = None
) -> MaskingGymGenerator | MaskingVLMGymGenerator:
    """The generator SkyRL's trainer uses for ``cfg`` (a :class:`~skyrl_rewards.train.config.TrainConfig`).

    Vision-language when ``cfg.generator.vision_language_generator`` is set, text otherwise;
    called per prompt group (``per_group``) when ``cfg.trainer.fully_async.enabled``.
    """
    cls = MaskingVLMGymGenerator if cfg.generator.vision_language_generator else MaskingGymGenerator
    return cls(
        generator_cfg=cfg.generator,
        skyrl_gym_cfg=cfg.environment.skyrl_gym,
        inference_engine_client=inference_engine_client,
        tokenizer=tokenizer,
        policy_model_name=policy_model_name,
        per_group=cfg.trainer.fully_async.enabled,
    )
