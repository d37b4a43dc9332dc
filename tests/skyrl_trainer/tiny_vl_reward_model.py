"""A tiny random vision-language reward model and its processor, built here (no download).

The checkpoint has the layout vLLM serves with ``--convert classify``: a
``Qwen2_5_VLForSequenceClassification`` (``architectures`` in ``config.json``),
the base model's weights under ``model.`` and a one-label ``score`` head. The
processor is a real ``Qwen2_5_VLProcessor`` (the tests' tokenizer, the Qwen2.5-VL
image processor with small pixel bounds, TRL's Qwen2.5-VL chat template), which
needs torchvision: these tests live in the ``.venv-skyrl`` suite, which has it.

:func:`direct_value` is the reference: one unpadded input through the processor
and transformers' own Qwen2.5-VL base model (of ``Qwen2_5_VLForConditionalGeneration``) loaded
from the folder, the last
token's hidden state times the saved ``score.weight``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from cpu_training_step import image_processor
from PIL import Image
from safetensors.torch import load_file
from skyrl_helpers import build_tokenizer
from transformers import (
    AutoProcessor,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLVideoProcessor,
)
from trl.chat_template_utils import qwen2_5_vl_chat_template

from skyrl_rewards.rewards.models.vl_reward_model import Qwen2_5_VLForSequenceClassification

CORPUS = [
    "where is the cat ? the cat sits on a mat in the park while the sun shines",
    "<think> reasoning about the picture </think> <answer> [10, 20, 30, 40] </answer>",
] * 20


def save_vl_model(folder: Path) -> Path:
    """A random one-label Qwen2.5-VL sequence classifier and its processor, saved to ``folder``."""
    tokenizer = build_tokenizer(CORPUS, vocab_size=400)
    tokenizer.add_tokens(["<|video_pad|>"], special_tokens=True)
    ids = {
        f"{name}_token_id": tokenizer.convert_tokens_to_ids(f"<|{name}|>")
        for name in ("vision_start", "vision_end", "image_pad", "video_pad")
    }
    torch.manual_seed(0)
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": 65536,
            "rope_parameters": {
                "rope_type": "default",
                "mrope_section": [2, 3, 3],
                "rope_theta": 1e6,
            },
            "bos_token_id": None,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            "initializer_range": 0.2,  # values of order 1, so a 1e-5 tolerance means something
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 32,
            "fullatt_block_indexes": [1],
        },
        image_token_id=ids["image_pad_token_id"],
        video_token_id=ids["video_pad_token_id"],
        vision_start_token_id=ids["vision_start_token_id"],
        vision_end_token_id=ids["vision_end_token_id"],
        num_labels=1,
        architectures=["Qwen2_5_VLForSequenceClassification"],
    )
    Qwen2_5_VLForSequenceClassification(config).save_pretrained(folder)
    Qwen2_5_VLProcessor(
        image_processor=image_processor("qwen2_5_vl"),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=qwen2_5_vl_chat_template,
    ).save_pretrained(folder)
    return folder


def direct_value(folder: Path, messages: list[dict[str, Any]], images: list[Image.Image]) -> float:
    """One unpadded forward: the checkpoint's processor, the base model, ``score.weight``."""
    processor = AutoProcessor.from_pretrained(folder, local_files_only=True)
    text = processor.apply_chat_template(messages, tokenize=False)
    inputs = processor(text=[text], images=images or None, return_tensors="pt")
    # the generation model's base (its lm_head, absent here, is not used)
    base = Qwen2_5_VLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).model
    base.eval()
    score = load_file(str(folder / "model.safetensors"))["score.weight"]
    with torch.no_grad():
        hidden = base(**inputs).last_hidden_state[0, -1]
    return float(hidden @ score[0])
