"""Helpers for driving SkyRL's own parser, dataset and generators (needs the ``skyrl`` package).

The one stand-in is the inference engine (the GPU part): :class:`ScriptedEngine`
answers each trajectory, by its session id, with the next of the replies
scripted for it, and renders VLM conversations with the test tokenizer's chat
template; :class:`VisionEngine` also renders their images into real vision
features. The tokenizer is real (``transformers``), built here: byte-level
BPE with ChatML and Qwen2-VL's vision tokens, no download, carrying the real
Qwen2.5-VL chat template (shipped inside the installed ``trl`` package).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2VLImageProcessor
from trl.chat_template_utils import qwen2_5_vl_chat_template
from vllm.entrypoints.scale_out.token_in_token_out.mm_serde import encode_mm_kwargs_item
from vllm.multimodal.inputs import MultiModalBatchedField, MultiModalFieldElem, MultiModalKwargsItem

IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"


def build_tokenizer(corpus: Sequence[str] = (), vocab_size: int = 2048) -> PreTrainedTokenizerFast:
    """A real fast tokenizer: byte-level BPE, ChatML and vision special tokens, a chat template.

    Without ``corpus``: 256 byte tokens, no merges (one token per byte). With it: BPE merges
    learned from ``corpus`` up to ``vocab_size`` (long prompts, such as tau-bench's system
    prompt, become a few times shorter).
    """
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if corpus:
        backend = Tokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.train_from_iterator(
            corpus,
            trainers.BpeTrainer(
                vocab_size=vocab_size, initial_alphabet=alphabet, show_progress=False
            ),
        )
    else:
        backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=[
            "<|im_start|>",
            "<|vision_start|>",
            "<|image_pad|>",
            "<|vision_end|>",
        ],
    )
    tokenizer.chat_template = (
        qwen2_5_vl_chat_template  # the real Qwen2.5-VL template, as TRL ships it
    )
    return tokenizer


def message_images(messages: Sequence[Mapping[str, Any]]) -> list[Image.Image]:
    """The RGB images of a chat's ``image_url`` content parts (base64 data URIs), in order."""
    return [
        Image.open(io.BytesIO(base64.b64decode(part["image_url"]["url"].split(",", 1)[1]))).convert(
            "RGB"
        )
        for message in messages
        if isinstance(message["content"], list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


def serialized_image_features(pixel_values: Any, image_grid_thw: Any) -> str:
    """One image's processor outputs as vLLM's render endpoint serializes them (``kwargs_data``).

    ``pixel_values``: the image's ``[patches, dim]`` rows; ``image_grid_thw``: its ``(t, h, w)``.
    SkyRL's ``decode_mm_kwargs`` reads the result back.
    """
    item = MultiModalKwargsItem(
        {
            "pixel_values": MultiModalFieldElem(data=pixel_values, field=MultiModalBatchedField()),
            "image_grid_thw": MultiModalFieldElem(
                data=image_grid_thw, field=MultiModalBatchedField()
            ),
        }
    )
    return encode_mm_kwargs_item(item)


class ScriptedEngine:
    """Stand-in for SkyRL's inference engine client: scripted replies per trajectory.

    ``replies[session_id]`` is the list of texts that trajectory's model says,
    one per turn (session id ``"<instance_id>_<repetition_id>"``). With
    ``logprobs`` each reply token comes with a logprob (-1.0), as vLLM returns
    them when the sampling params ask for logprobs (SkyRL's default).
    """

    model_name = "scripted-policy"

    def __init__(
        self, tokenizer: Any, replies: Mapping[str, Sequence[str]], *, logprobs: bool = False
    ) -> None:
        self.tokenizer = tokenizer
        self.replies = {k: list(v) for k, v in replies.items()}
        self.logprobs = logprobs
        self.rendered: list[list[dict[str, Any]]] = []

    async def generate(self, engine_input: Mapping[str, Any], model: str | None = None) -> dict:
        texts = [self.replies[sid].pop(0) for sid in engine_input["session_ids"]]
        ids = [
            self.tokenizer.encode(t, add_special_tokens=False) + [self.tokenizer.eos_token_id]
            for t in texts
        ]
        return {
            "responses": texts,
            "response_ids": ids,
            "stop_reasons": ["stop"] * len(texts),
            "response_logprobs": [[-1.0] * len(i) for i in ids] if self.logprobs else None,
        }

    async def render_chat_completion(self, payload: Mapping[str, Any]) -> dict:
        messages = payload["json"]["messages"]
        self.rendered.append(messages)
        ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        return {"token_ids": ids, "features": None}

    async def finish_session(self, session_id: str) -> None:
        pass


class VisionEngine(ScriptedEngine):
    """:class:`ScriptedEngine` that renders images the way vLLM's render endpoint does.

    Each image content part (a data URI) is run through transformers' real Qwen2-VL image
    processor; its ``<|image_pad|>`` is repeated once per merged patch, and the processed
    ``pixel_values`` / ``image_grid_thw`` come back as vLLM-serialized ``kwargs_data``, which
    SkyRL's VLM agent loop decodes with its own ``decode_mm_kwargs``. A scripted reply that is
    an exception is raised by ``generate`` (an inference call that fails).
    """

    def __init__(
        self, tokenizer: Any, replies: Mapping[str, Sequence[Any]], *, logprobs: bool = False
    ) -> None:
        super().__init__(tokenizer, replies, logprobs=logprobs)
        # small images: a few dozen image tokens each
        self.processor = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112)

    async def generate(self, engine_input: Mapping[str, Any], model: str | None = None) -> dict:
        for sid in engine_input["session_ids"]:
            if isinstance(self.replies[sid][0], Exception):
                raise self.replies[sid].pop(0)
        return await super().generate(engine_input, model)

    async def render_chat_completion(self, payload: Mapping[str, Any]) -> dict:
        messages = payload["json"]["messages"]
        self.rendered.append(messages)
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        images = message_images(messages)
        assert text.count(IMAGE_PLACEHOLDER) == len(images)
        items = []
        for image in images:
            features = self.processor(images=[image], return_tensors="pt")
            thw = features["image_grid_thw"][0]
            n_tokens = int(thw.prod()) // self.processor.merge_size**2
            text = text.replace(
                IMAGE_PLACEHOLDER,
                "<|vision_start|>" + "<|image_pad|>" * n_tokens + "<|vision_end|>",
                1,
            )
            items.append(serialized_image_features(features["pixel_values"], thw))
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        features_out = {"kwargs_data": {"image": items}} if items else None
        return {"token_ids": ids, "features": features_out}


class SideChannelEngine(VisionEngine):
    """:class:`VisionEngine` that also returns the per-token side channels vLLM can record.

    Routed experts (R3, MoE router replay): ``[tokens, layers, topk]`` expert ids for each
    token the engine evaluated since the trajectory's route prefix (prompt start), less the
    last sampled one. Sample supports: ``[tokens, top_k]`` token ids the sampler could pick,
    ``-1`` padded, one row per generated token.
    """

    def __init__(
        self,
        tokenizer: Any,
        replies: Mapping[str, Sequence[Any]],
        *,
        layers: int = 2,
        topk: int = 2,
        top_k: int = 4,
        logprobs: bool = True,
    ) -> None:
        super().__init__(tokenizer, replies, logprobs=logprobs)
        self.layers, self.topk, self.top_k = layers, topk, top_k

    async def generate(self, engine_input: Mapping[str, Any], model: str | None = None) -> dict:
        out = await super().generate(engine_input, model)
        routes, supports = [], []
        starts = engine_input["routed_experts_prompt_starts"]
        for prompt, ids, start in zip(
            engine_input["prompt_token_ids"], out["response_ids"], starts, strict=True
        ):
            rows = len(prompt) - start + len(ids) - 1
            routes.append(
                np.arange(rows * self.layers * self.topk).reshape(rows, -1, self.topk) % 8
            )
            support = np.full((len(ids), self.top_k), -1, dtype=np.int32)
            support[:, 0] = ids
            supports.append(support.reshape(-1))
        out["rollout_expert_indices"] = routes
        out["rollout_sample_support"] = supports
        return out
