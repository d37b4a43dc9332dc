"""Helpers for driving SkyRL's own parser, dataset and generators (needs the ``skyrl`` package).

The one stand-in is the inference engine (the GPU part): :class:`ScriptedEngine`
answers each trajectory, by its session id, with the next of the replies
scripted for it, and renders VLM conversations with the test tokenizer's chat
template. The tokenizer is real (``transformers``), built here: byte-level
BPE with ChatML and Qwen2-VL's vision tokens, no download, carrying the real
Qwen2.5-VL chat template (shipped inside the installed ``trl`` package).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from trl.chat_template_utils import qwen2_5_vl_chat_template

IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A real fast tokenizer: 256 byte tokens, ChatML and vision special tokens, a chat template."""
    vocab = {ch: i for i, ch in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
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


class ScriptedEngine:
    """Stand-in for SkyRL's inference engine client: scripted replies per trajectory.

    ``replies[session_id]`` is the list of texts that trajectory's model says,
    one per turn (session id ``"<instance_id>_<repetition_id>"``).
    """

    model_name = "scripted-policy"

    def __init__(self, tokenizer: Any, replies: Mapping[str, Sequence[str]]) -> None:
        self.tokenizer = tokenizer
        self.replies = {k: list(v) for k, v in replies.items()}
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
            "response_logprobs": None,
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
