"""The ``reward_model`` reward component: a sequence-classification reward model's score, normalised.

The component builds a reward-model request per sample (the prompt and the
completion as a chat), a runner scores it (in this process:
:mod:`~skyrl_rewards.rewards.models.reward_model`; in a pool: its reward-model
workers) and :meth:`RewardModel.settle` normalises the raw scalar. A failed
request, or a value that is not finite, settles as a masked ``error``
(``timeout`` for a timeout), never as a score.

The prompt is read from the row: ``prompt_field`` names the column; by default
the first of ``prompt`` (a string or a chat message list; TRL's ``prompts``
arrive here too) and ``problem`` (VLM-R1's rows) that the row has. A row with
neither is a dataset error. Message contents given as parts keep their text
parts (a text reward model reads no image). The completion is the sample's
final answer text (:func:`~skyrl_rewards.rewards.text.completion_text`), sent
as the assistant's turn.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_rewards.rewards.component_base import Component, work_digest
from skyrl_rewards.rewards.models.lanes import (
    REWARD_MODEL_LANE,
    ModelOutcome,
    ModelRequest,
    endpoint_key,
)
from skyrl_rewards.rewards.models.reward_model import RewardModelConfig
from skyrl_rewards.rewards.result import ComponentScore, Status
from skyrl_rewards.rewards.text import completion_text

PROMPT_FIELDS = ("prompt", "problem")
"""Columns read for the prompt, in order, when ``prompt_field`` is not given."""


@dataclass(frozen=True)
class Normalization:
    """Raw score -> reward: ``none``, ``sigmoid`` or ``affine`` (``value * scale + shift``), then an optional clip.

    >>> Normalization.parse({"affine": {"scale": 2.0, "shift": 1.0}}, clip=(0.0, 4.0))(3.0)
    4.0
    >>> round(Normalization.parse("sigmoid")(0.0), 3)
    0.5
    """

    kind: str = "none"
    scale: float = 1.0
    shift: float = 0.0
    clip: tuple[float, float] | None = None

    @classmethod
    def parse(cls, spec: Any = "none", clip: Any = None) -> Normalization:
        """From the component's ``normalize`` and ``clip`` parameters; ``ValueError`` when malformed."""
        bounds = None
        if clip is not None:
            if (
                not isinstance(clip, Sequence)
                or isinstance(clip, str)
                or len(clip) != 2
                or not all(_is_number(v) for v in clip)
                or not clip[0] <= clip[1]
            ):
                raise ValueError(f"clip: expected [low, high] with low <= high, got {clip!r}")
            bounds = (float(clip[0]), float(clip[1]))
        if spec in ("none", "sigmoid"):
            return cls(kind=spec, clip=bounds)
        if isinstance(spec, Mapping) and list(spec) == ["affine"]:
            params = spec["affine"]
            if not isinstance(params, Mapping) or not set(params) <= {"scale", "shift"}:
                raise ValueError(f"normalize.affine: expected {{scale, shift}}, got {params!r}")
            scale, shift = params.get("scale", 1.0), params.get("shift", 0.0)
            if not (_is_number(scale) and _is_number(shift)):
                raise ValueError(
                    f"normalize.affine: scale and shift must be numbers, got {params!r}"
                )
            return cls(kind="affine", scale=float(scale), shift=float(shift), clip=bounds)
        raise ValueError(
            "normalize: expected 'none', 'sigmoid' or {'affine': {'scale': s, 'shift': b}}, "
            f"got {spec!r}"
        )

    def __call__(self, value: float) -> float:
        if self.kind == "sigmoid":
            value = _sigmoid(value)
        elif self.kind == "affine":
            value = value * self.scale + self.shift
        if self.clip is not None:
            value = min(max(value, self.clip[0]), self.clip[1])
        return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _sigmoid(value: float) -> float:
    if value >= 0:
        return 1.0 / (1.0 + math.exp(-value))
    exp = math.exp(value)
    return exp / (1.0 + exp)


class RewardModel(Component):
    """A reward model's scalar for prompt plus completion (see the module doc).

    ``model``, ``device``, ``dtype``, ``max_length``, ``max_tokens_per_batch``
    and ``truncation`` configure the runner
    (:class:`~skyrl_rewards.rewards.models.reward_model.RewardModelConfig`);
    ``normalize`` and ``clip`` the score; ``prompt_field`` the prompt column.
    Nothing is loaded here: the model loads where requests run, so a bad path
    shows as a masked ``model_error`` per sample naming the path.
    """

    name = "reward_model"

    def __init__(
        self,
        model: str,
        device: str | None = None,
        dtype: str | None = None,
        max_length: int = 4096,
        max_tokens_per_batch: int = 16384,
        truncation: str = "error",
        normalize: Any = "none",
        clip: Any = None,
        prompt_field: str | None = None,
    ) -> None:
        if hasattr(model, "__fspath__"):
            model = str(model)
        self.config = RewardModelConfig(
            model=model,
            device=device,
            dtype=dtype,
            max_length=max_length,
            max_tokens_per_batch=max_tokens_per_batch,
            truncation=truncation,
        )
        self.normalization = Normalization.parse(normalize, clip)
        if prompt_field is not None and (not isinstance(prompt_field, str) or not prompt_field):
            raise ValueError(f"prompt_field: expected a column name, got {prompt_field!r}")
        self.prompt_field = prompt_field
        self._endpoint_config = self.config.to_mapping()
        self._endpoint = endpoint_key(self._endpoint_config)

    def lanes(self) -> frozenset[str]:
        return frozenset({REWARD_MODEL_LANE})

    def lane(self, sample: Mapping[str, Any]) -> str | None:
        return REWARD_MODEL_LANE

    def lane_request(self, sample: Mapping[str, Any]) -> ModelRequest:
        """The chat ``prompt messages + [assistant: completion]``; ``ValueError`` without a prompt."""
        messages = self._prompt_messages(sample)
        messages.append({"role": "assistant", "content": completion_text(sample.get("completion"))})
        return ModelRequest(REWARD_MODEL_LANE, self._endpoint, {"messages": messages})

    def settle(self, request: ModelRequest, outcome: ModelOutcome) -> ComponentScore:
        if not outcome.ok:
            status = Status.TIMEOUT if outcome.failure == "timeout" else Status.ERROR
            return ComponentScore(
                0.0, status, f"reward model {outcome.failure}: {outcome.message}".rstrip(": ")
            )
        if not math.isfinite(outcome.value):
            return ComponentScore(
                0.0, Status.ERROR, f"reward model gave a non-finite value ({outcome.value})"
            )
        return ComponentScore(float(self.normalization(outcome.value)))

    def endpoints(self) -> dict[str, dict[str, Any]]:
        return {self._endpoint: dict(self._endpoint_config)}

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        try:
            request = self.lane_request(sample)
        except ValueError:
            return None
        return work_digest(
            self.name,
            request.endpoint,
            repr(self.normalization),
            json.dumps(request.payload, sort_keys=True),
        )

    def _prompt_messages(self, sample: Mapping[str, Any]) -> list[dict[str, str]]:
        fields = (self.prompt_field,) if self.prompt_field else PROMPT_FIELDS
        for name in fields:
            value = sample.get(name)
            if value is None:
                continue
            if isinstance(value, str):
                return [{"role": "user", "content": value}]
            if isinstance(value, list) and value:
                return [_plain_message(name, position, m) for position, m in enumerate(value)]
            raise ValueError(
                f"{name}: expected a string or a list of chat messages, got {type(value).__name__}"
            )
        raise ValueError(f"{' or '.join(fields)}: missing from the row (the reward model's prompt)")


def _plain_message(column: str, position: int, message: Any) -> dict[str, str]:
    """``{"role", "content": str}`` from a chat message whose content may be a list of parts."""
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        raise ValueError(f"{column}[{position}]: expected a chat message with a role")
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    if not isinstance(content, str):
        raise ValueError(f"{column}[{position}].content: expected text or a list of parts")
    return {"role": message["role"], "content": content}
