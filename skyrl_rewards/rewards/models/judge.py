"""The ``judge`` reward component: an LLM/VLM behind an OpenAI-compatible chat endpoint.

Configured as::

    rewards:
      judge:
        weight: 1.0
        endpoint: {base_url: http://127.0.0.1:8000/v1, model: Qwen/Qwen2.5-7B-Instruct,
                   api_key_env: JUDGE_API_KEY, sampling: {temperature: 0.0, max_tokens: 8},
                   limits: {max_in_flight: 64, requests_per_minute: 600}}
        template: vlm_r1_llm        # or a text, {system, user}, or a message list
        parser: binary              # or {kind: scale, lo: 0, hi: 10}, regex, json
        images: false               # true: the row's images go to the judge

The endpoint's fields may also be given flat (``base_url=..., model=...``),
as ``make_reward("judge", base_url=..., model=...)`` does. Every sample goes
through the judge lane (:data:`~skyrl_rewards.rewards.contract.lanes.JUDGE_LANE`):
:meth:`Judge.lane_request` renders the prompt (see
:mod:`~skyrl_rewards.rewards.models.judge_prompts`), a runner calls the
endpoint, :meth:`Judge.settle` reads the verdict (see
:mod:`~skyrl_rewards.rewards.models.verdicts`). A failed call settles as a
masked score naming its cause (status ``timeout`` for a timeout, else
``error``), and so does a reply that does not parse: never 0.0, never a
fallback score.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import Any

from skyrl_rewards.rewards.contract.component_base import Component, work_digest
from skyrl_rewards.rewards.contract.lanes import (
    JUDGE_LANE,
    ModelOutcome,
    ModelRequest,
    endpoint_key,
)
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.geometry.box_formats import IMAGE_COLUMNS
from skyrl_rewards.rewards.models.judge_client import EndpointConfig
from skyrl_rewards.rewards.models.judge_prompts import (
    MAX_FIELD_CHARS,
    MAX_IMAGE_BYTES,
    MAX_IMAGE_SIDE,
    JudgeTemplate,
    in_memory_images,
)
from skyrl_rewards.rewards.models.local import run_requests
from skyrl_rewards.rewards.models.verdicts import UnparseableVerdict, Verdict

ENDPOINT_FIELDS = frozenset(f.name for f in dataclasses.fields(EndpointConfig)) | {
    "limits",
    "retries",
    "breaker",
    "prices",
}
"""Keys a judge accepts flat, as parts of its endpoint."""


class Judge(Component):
    """A reward read from a chat model's verdict on the row (see the module docstring)."""

    name = "judge"

    def __init__(
        self,
        endpoint: Mapping[str, Any] | None = None,
        template: Any = None,
        parser: Any = None,
        images: bool = False,
        max_field_chars: int = MAX_FIELD_CHARS,
        max_image_side: int = MAX_IMAGE_SIDE,
        max_image_bytes: int = MAX_IMAGE_BYTES,
        **endpoint_fields: Any,
    ) -> None:
        unknown = sorted(set(endpoint_fields) - ENDPOINT_FIELDS)
        if unknown:
            raise ValueError(
                f"unknown parameters {unknown}; a judge takes endpoint, template, parser, images, "
                f"max_field_chars, max_image_side, max_image_bytes and endpoint fields"
            )
        if endpoint is not None and not isinstance(endpoint, Mapping):
            raise ValueError(f"endpoint: expected a mapping, got {endpoint!r:.80}")
        config = EndpointConfig.from_mapping({**dict(endpoint or {}), **endpoint_fields})
        config.api_key()  # an unset key variable is a configuration error, told now
        self.endpoint = config
        self._endpoint_config = dataclasses.asdict(config)
        self.endpoint_key = endpoint_key(self._endpoint_config)
        self.template = JudgeTemplate.from_config(
            template,
            images=images,
            max_field_chars=max_field_chars,
            max_image_side=max_image_side,
            max_image_bytes=max_image_bytes,
        )
        self.verdict = Verdict.from_config(parser)

    def lanes(self) -> frozenset[str]:
        return frozenset({JUDGE_LANE})

    def lane(self, sample: Mapping[str, Any]) -> str | None:
        return JUDGE_LANE

    def run_lane(self, request: ModelRequest) -> ModelOutcome:
        (outcome,) = run_requests([request], self.endpoints())
        return outcome

    def lane_request(self, sample: Mapping[str, Any]) -> ModelRequest:
        return ModelRequest(
            JUDGE_LANE, self.endpoint_key, {"messages": self.template.render(sample)}
        )

    def settle(self, request: ModelRequest, outcome: ModelOutcome) -> ComponentScore:
        return settle_verdict(self.verdict, outcome)

    def endpoints(self) -> dict[str, dict[str, Any]]:
        return {self.endpoint_key: dict(self._endpoint_config)}

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        raise ValueError("judge: scored through its model lane only (score(), a batch or a pool)")

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        """Digest of the endpoint, template, parser and the row's rendered text fields (and image paths).

        ``None`` when the images are in memory (no stable key) or a field is missing.
        """
        wants_images = self.template.wants_images()
        if wants_images and in_memory_images(sample):
            return None
        try:
            fields = self.template.text_fields(sample)
        except ValueError:
            return None
        images = repr([sample.get(key) for key in IMAGE_COLUMNS]) if wants_images else ""
        return work_digest(
            self.name,
            self.endpoint_key,
            repr(self.template),
            repr(self.verdict),
            *(f"{name}={value}" for name, value in sorted(fields.items())),
            images,
        )


def settle_verdict(verdict: Verdict, outcome: ModelOutcome) -> ComponentScore:
    """The score of a judge's outcome: the verdict's value, or a masked score naming the cause."""
    if not outcome.ok:
        status = Status.TIMEOUT if outcome.failure == "timeout" else Status.ERROR
        return ComponentScore(0.0, status, f"judge {outcome.failure}: {outcome.message}")
    try:
        return ComponentScore(verdict.read(outcome.text))
    except UnparseableVerdict as error:
        return ComponentScore(0.0, Status.ERROR, f"judge: unparseable verdict: {error}")
