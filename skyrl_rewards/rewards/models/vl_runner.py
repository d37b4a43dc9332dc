"""The local runner of a vision-language reward model (Qwen2.5-VL): images processed a batch at a time.

:class:`VisionRewardModelRunner` is the text runner
(:class:`~skyrl_rewards.rewards.models.reward_model.RewardModelRunner`: token
budget, OOM halving, failures per input, ``batch_invariant``) for the
classifier of :mod:`~skyrl_rewards.rewards.models.vl_reward_model`. A
request's images are read and its chat rendered when the call arrives; its
token ids, the images' tokens included, are known then without processing a
pixel (the image processor's ``get_number_of_image_patches`` gives each
image's count), so inputs are packed by the token budget first and each
batch's images then go through the fast (torchvision) image processor in one
call, on the model's device, and through the vision tower together.

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyrl_rewards.rewards.contract.lanes import ModelOutcome, ModelRequest
from skyrl_rewards.rewards.models.reward_model import (
    VL_ARCHITECTURE,
    RewardModelRunner,
    _failure,
    _Item,
)
from skyrl_rewards.rewards.models.reward_model_payload import InputError, payload_messages


@dataclass
class _VisionItem(_Item):
    """An input with its images (read, RGB, capped) and each image's token count in ``ids``."""

    images: list[Any] = field(default_factory=list)
    image_tokens: list[int] = field(default_factory=list)


class VisionRewardModelRunner(RewardModelRunner):
    """:class:`~skyrl_rewards.rewards.models.reward_model.RewardModelRunner` for a vision-language classifier (Qwen2.5-VL).

    The checkpoint, its processor and the value are described in
    :mod:`~skyrl_rewards.rewards.models.vl_reward_model`. A payload's
    ``images`` (paths, or in-memory images as they are) are read, converted to
    RGB and downscaled to the judge's cap
    (:data:`~skyrl_rewards.rewards.models.judge_prompts.MAX_IMAGE_SIDE`; no
    re-encoding), then put as ``{"type": "image"}`` parts before the text of
    the last user message; the checkpoint's chat template renders the chat,
    its tokenizer tokenizes every input of a call at once, and each image
    placeholder is expanded to the image's token count, as the processor
    expands it. Batches are packed as the text runner's (token budget over the
    expanded ids, OOM halving), padded on the right; a batch's images are
    processed together by the checkpoint's image processor with its
    torchvision backend on the model's device (``metrics.preprocess_s``
    counts it; on CUDA it is synchronised, so the time is its own;
    ``metrics.images`` and ``metrics.image_calls`` count the images and the
    calls).

    An input past ``max_length`` is a failure: inputs are never cut (a cut
    could split an image's tokens), so a ``truncation`` other than ``"error"``
    is a load error naming the fix.
    """

    _needs = (
        "a vision-language reward model needs torch, transformers >= 4.52 and torchvision "
        "(its processor) where it runs"
    )
    _layout = f"{VL_ARCHITECTURE}, with its processor"

    def _load(self) -> None:
        if self.config.truncation != "error":
            self.load_error = (
                f"reward model {self.config.model!r} is a vision-language model, whose inputs "
                f"are not cut: set truncation: error (got {self.config.truncation!r}) and raise "
                "max_length if inputs are long"
            )
            return
        super()._load()

    def _from_pretrained(self, path: str, dtype: Any) -> tuple[Any, Any]:
        """The checkpoint at ``path``: its model in ``dtype`` and its processor (fast image processor)."""
        from skyrl_rewards.rewards.models.vl_reward_model import (
            Qwen2_5_VLForSequenceClassification,
            fast_processor,
        )

        processor = fast_processor(path)
        model = Qwen2_5_VLForSequenceClassification.from_pretrained(
            path, local_files_only=True, dtype=dtype
        )
        return model, processor

    def _padding(self, model: Any, tokenizer: Any) -> int | None:
        """The processor's tokenizer's pad id, else its end (rows are found by their mask)."""
        pad_id = tokenizer.tokenizer.pad_token_id
        return tokenizer.tokenizer.eos_token_id if pad_id is None else pad_id

    def _items(
        self, requests: Sequence[ModelRequest], outcomes: list[ModelOutcome | None]
    ) -> list[_Item]:
        rendered: list[tuple[int, str, list[Any]]] = []
        for index, request in enumerate(requests):
            try:
                rendered.append((index, *self._render(request.payload)))
            except InputError as error:
                outcomes[index] = _failure(str(error))
        if not rendered:
            return []
        # the processor's own call: the tokenizer's defaults (special tokens added, no padding)
        encoded = self._tokenizer.tokenizer([text for _, text, _ in rendered])["input_ids"]
        items: list[_Item] = []
        for (index, _, images), ids in zip(rendered, encoded, strict=True):
            try:
                items.append(self._expand(index, list(ids), images))
            except InputError as error:
                outcomes[index] = _failure(str(error))
        return items

    def _render(self, payload: Any) -> tuple[str, list[Any]]:
        """A payload's text (its chat through the template, images as parts) and its images."""
        from jinja2 import TemplateError

        if not isinstance(payload, Mapping):
            raise InputError(f"payload: expected a mapping, got {type(payload).__name__}")
        images = [
            self._image(position, ref) for position, ref in enumerate(payload.get("images") or [])
        ]
        if "text" in payload and isinstance(payload["text"], str) and not images:
            return payload["text"], []
        messages: list[dict[str, Any]] = payload_messages(payload)
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        if images and not users:
            raise InputError("payload: images but no user message to put them in")
        if images:
            last = messages[users[-1]]
            last["content"] = [
                *({"type": "image"} for _ in images),
                {"type": "text", "text": last["content"]},
            ]
        try:
            text = self._tokenizer.apply_chat_template(messages, tokenize=False)
        except (TemplateError, ValueError, TypeError, KeyError, IndexError) as error:
            raise InputError(f"processor: {type(error).__name__}: {error}") from error
        return text, images

    def _expand(self, index: int, ids: list[int], images: list[Any]) -> _VisionItem:
        """The input's ids with each image placeholder repeated to the image's token count."""
        processor = self._tokenizer
        image_processor = processor.image_processor
        merged = image_processor.merge_size**2
        counts = [
            image_processor.get_number_of_image_patches(image.height, image.width, {}) // merged
            for image in images
        ]
        image_id = processor.image_token_id
        if ids.count(image_id) != len(images):
            raise InputError(
                f"processor: the chat gives {ids.count(image_id)} image tokens for "
                f"{len(images)} images"
            )
        pending = iter(counts)
        expanded: list[int] = []
        for token in ids:
            expanded.extend([token] * next(pending) if token == image_id else [token])
        if len(expanded) > self.config.max_length:
            raise InputError(
                f"input of {len(expanded)} tokens (images included) is longer than "
                f"max_length={self.config.max_length}; raise max_length"
            )
        return _VisionItem(index, expanded, images=images, image_tokens=counts)

    def _image(self, position: int, ref: Any) -> Any:
        from skyrl_rewards.rewards.models.judge_prompts import (
            MAX_IMAGE_SIDE,
            downscale,
            load_image,
        )

        field_name = f"payload.images[{position}]"
        try:
            image = load_image(ref, field_name)
        except (ValueError, OSError) as error:
            raise InputError(str(error)) from error
        return downscale(image.convert("RGB"), MAX_IMAGE_SIDE)

    def _prepare(self, batch: list[_Item]) -> dict[str, Any]:
        """The text runner's padded ids and mask, the image-token types, the batch's images processed."""
        import torch

        inputs = super()._prepare(batch)
        processor = self._tokenizer
        if hasattr(processor, "create_mm_token_type_ids"):  # transformers 5 places images by it
            inputs["mm_token_type_ids"] = (inputs["input_ids"] == processor.image_token_id).int()
        items = [item for item in batch if isinstance(item, _VisionItem)]
        images = [image for item in items for image in item.images]
        if not images:
            return inputs
        features = processor.image_processor(
            images=images, return_tensors="pt", device=self._device
        )
        grid = features["image_grid_thw"]
        tokens = (grid.prod(dim=-1) // processor.image_processor.merge_size**2).tolist()
        expected = [count for item in items for count in item.image_tokens]
        if tokens != expected:
            raise ValueError(
                f"image processor gave {tokens} tokens for images counted as {expected}"
            )
        inputs["pixel_values"] = features["pixel_values"].to(self._device)
        inputs["image_grid_thw"] = grid.to(self._device)
        if self._device.startswith("cuda"):
            torch.cuda.synchronize(self._device)
        self.metrics.images += len(images)
        self.metrics.image_calls += 1
        return inputs

    def _forward(self, inputs: dict[str, Any]) -> list[float]:
        from skyrl_rewards.rewards.models.vl_reward_model import last_token_values

        return last_token_values(self._model, inputs)
