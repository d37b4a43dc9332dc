"""A tiny random vision-language reward model and its processor, built here (no download).

The checkpoint has the layout vLLM serves with ``--convert classify``: a
``Qwen2_5_VLForSequenceClassification`` (``architectures`` in ``config.json``),
the base model's weights under ``model.`` and a one-label ``score`` head. The
processor is a real ``Qwen2_5_VLProcessor`` (the tests' tokenizer, the Qwen2.5-VL
image processor with small pixel bounds, TRL's Qwen2.5-VL chat template), which
needs torchvision: these tests live in the ``.venv-skyrl`` suite, which has it.

:func:`direct_value` is the reference: one unpadded input through the
checkpoint's processor (its torchvision image processor, as the runner's) and
transformers' own Qwen2.5-VL base model (of ``Qwen2_5_VLForConditionalGeneration``) loaded
from the folder, the last
token's hidden state times the saved ``score.weight``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from cpu_training_step import qwen2_5_vl_parts
from PIL import Image
from safetensors.torch import load_file
from transformers import Qwen2_5_VLForConditionalGeneration

from skyrl_rewards.rewards.models.vl_reward_model import (
    Qwen2_5_VLForSequenceClassification,
    fast_processor,
)

CORPUS = [
    "where is the cat ? the cat sits on a mat in the park while the sun shines",
    "<think> reasoning about the picture </think> <answer> [10, 20, 30, 40] </answer>",
] * 20


def save_vl_model(folder: Path) -> Path:
    """A random one-label Qwen2.5-VL sequence classifier and its processor, saved to ``folder``."""
    config, processor = qwen2_5_vl_parts(
        CORPUS,
        vocab_size=400,
        # values of order 1, so a 1e-5 tolerance means something
        text={"initializer_range": 0.2},
        num_labels=1,
        architectures=["Qwen2_5_VLForSequenceClassification"],
    )
    torch.manual_seed(0)
    Qwen2_5_VLForSequenceClassification(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def direct_value(folder: Path, messages: list[dict[str, Any]], images: list[Image.Image]) -> float:
    """One unpadded forward: the checkpoint's processor, the base model, ``score.weight``."""
    processor = fast_processor(str(folder))
    text = processor.apply_chat_template(messages, tokenize=False)
    inputs = processor(text=[text], images=images or None, return_tensors="pt")
    # the generation model's base (its lm_head, absent here, is not used)
    base = Qwen2_5_VLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).model
    base.eval()
    score = load_file(str(folder / "model.safetensors"))["score.weight"]
    with torch.no_grad():
        hidden = base(**inputs).last_hidden_state[0, -1]
    return float(hidden @ score[0])
