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
parts. The completion is the sample's final answer text
(:func:`~skyrl_rewards.rewards.contract.text.completion_text`), sent as the assistant's
turn. The row's images (``image_path``, ``image`` or ``images``) go in the
payload's ``images`` (:func:`~skyrl_rewards.rewards.models.reward_model_payload.row_images`):
a vision-language reward model reads them, a text one ignores them.

A served reward model (``endpoint``, or flat ``base_url`` with ``model`` the
served name: :mod:`~skyrl_rewards.rewards.models.served_reward_model`) gets
the same chat through the pool's judge lane (I/O, one client per pool, the
judge's limits, retries and breaker), never the reward-model workers. With
``images: true`` (it needs ``input: messages``) the row's images go in the
last user message as ``image_url`` parts, the original files encoded and
size-capped as the judge's are (``max_image_side``, ``max_image_bytes``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_rewards.rewards.contract.component_base import Component, work_digest
from skyrl_rewards.rewards.contract.lanes import (
    JUDGE_LANE,
    REWARD_MODEL_LANE,
    ModelOutcome,
    ModelRequest,
    endpoint_key,
)
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.contract.text import completion_text
from skyrl_rewards.rewards.models.judge_prompts import (
    MAX_IMAGE_BYTES,
    MAX_IMAGE_SIDE,
    image_url_parts,
    in_memory_images,
)
from skyrl_rewards.rewards.models.local import run_requests
from skyrl_rewards.rewards.models.reward_model import RewardModelConfig
from skyrl_rewards.rewards.models.reward_model_payload import row_images
from skyrl_rewards.rewards.models.served_reward_model import ServedConfig

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

    Served instead (exactly one of a local ``model`` and an endpoint):
    ``endpoint`` (a mapping, see
    :class:`~skyrl_rewards.rewards.models.served_reward_model.ServedConfig`),
    or its fields flat (``base_url``, ``model`` as the served name, ``api``,
    ...); ``images`` sends the row's images. ``ValueError`` for a bad or
    ambiguous configuration.
    """

    name = "reward_model"

    def __init__(
        self,
        model: str | None = None,
        device: str | None = None,
        dtype: str | None = None,
        max_length: int = 4096,
        max_tokens_per_batch: int = 16384,
        truncation: str = "error",
        normalize: Any = "none",
        clip: Any = None,
        prompt_field: str | None = None,
        endpoint: Mapping[str, Any] | None = None,
        images: bool = False,
        max_image_side: int = MAX_IMAGE_SIDE,
        max_image_bytes: int = MAX_IMAGE_BYTES,
        **endpoint_fields: Any,
    ) -> None:
        if hasattr(model, "__fspath__"):
            model = str(model)
        self.normalization = Normalization.parse(normalize, clip)
        if prompt_field is not None and (not isinstance(prompt_field, str) or not prompt_field):
            raise ValueError(f"prompt_field: expected a column name, got {prompt_field!r}")
        self.prompt_field = prompt_field
        self.images = images
        self.max_image_side, self.max_image_bytes = max_image_side, max_image_bytes
        self.served: ServedConfig | None = None
        if endpoint is not None or "base_url" in endpoint_fields:
            self._serve(model, endpoint, endpoint_fields, device, dtype)
            return
        if endpoint_fields:
            raise ValueError(
                f"unknown parameters {sorted(endpoint_fields)}; a local reward model takes model, "
                "device, dtype, max_length, max_tokens_per_batch, truncation, normalize, clip, "
                "prompt_field (a served one: endpoint, or base_url, model, api, ...)"
            )
        if images:
            raise ValueError("images: true is for a served reward model (endpoint)")
        if not isinstance(model, str) or not model:
            raise ValueError(
                "reward_model: give model (a local folder) or endpoint "
                "({base_url, model, api}: a served reward model)"
            )
        self.config = RewardModelConfig(
            model=model,
            device=device,
            dtype=dtype,
            max_length=max_length,
            max_tokens_per_batch=max_tokens_per_batch,
            truncation=truncation,
        )
        self._endpoint_config = self.config.to_mapping()
        self._endpoint = endpoint_key(self._endpoint_config)

    def _serve(
        self,
        model: str | None,
        endpoint: Mapping[str, Any] | None,
        fields: Mapping[str, Any],
        device: str | None,
        dtype: str | None,
    ) -> None:
        if endpoint is not None and not isinstance(endpoint, Mapping):
            raise ValueError(f"endpoint: expected a mapping, got {endpoint!r:.80}")
        if endpoint is not None and model is not None:
            raise ValueError(
                "reward_model: give either model (a local folder) or endpoint (a served model, "
                "whose model name goes inside it), not both"
            )
        if device is not None or dtype is not None:
            raise ValueError(
                "device and dtype are for a local model; a served one has its server's"
            )
        config = {**dict(endpoint or {}), **fields}
        if model is not None:
            config["model"] = model
        self.served = ServedConfig.from_mapping(config)
        self.served.endpoint.api_key()  # an unset key variable is a configuration error, told now
        if self.images and self.served.input != "messages":
            raise ValueError(
                "images: true needs endpoint.input: messages (images go as chat image parts, "
                "one conversation per request)"
            )
        self._endpoint_config = self.served.to_mapping()
        self._endpoint = endpoint_key(self._endpoint_config)

    @property
    def _lane(self) -> str:
        return JUDGE_LANE if self.served is not None else REWARD_MODEL_LANE

    def lanes(self) -> frozenset[str]:
        return frozenset({self._lane})

    def lane(self, sample: Mapping[str, Any]) -> str | None:
        return self._lane

    def run_lane(self, request: ModelRequest) -> ModelOutcome:
        (outcome,) = run_requests([request], self.endpoints())
        return outcome

    def lane_request(self, sample: Mapping[str, Any]) -> ModelRequest:
        """The chat ``prompt messages + [assistant: completion]`` and the row's images; ``ValueError`` without a prompt."""
        messages = self._prompt_messages(sample)
        messages.append({"role": "assistant", "content": completion_text(sample.get("completion"))})
        if self.served is not None:
            if self.images:
                self._add_image_parts(messages, sample)
            return ModelRequest(JUDGE_LANE, self._endpoint, {"messages": messages})
        payload: dict[str, Any] = {"messages": messages}
        images = row_images(sample)
        if images:
            payload["images"] = images
        return ModelRequest(REWARD_MODEL_LANE, self._endpoint, payload)

    def _add_image_parts(self, messages: list[dict[str, Any]], sample: Mapping[str, Any]) -> None:
        """Put the row's images as ``image_url`` parts before the text of the last user message."""
        parts = image_url_parts(
            sample, self.max_image_side, self.max_image_bytes, asked_by="images: true"
        )
        user = [m for m in messages if m["role"] == "user"]
        target = user[-1] if user else messages[0]
        target["content"] = [*parts, {"type": "text", "text": target["content"]}]

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
        if in_memory_images(sample):
            return None
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
