"""A tiny random reward model and a real tokenizer built here (no download), for reward-model tests.

The tokenizer is a BPE trained on a small corpus; the model a 2-layer
``LlamaForSequenceClassification`` with random weights; both are saved to a
folder and loaded back the way a user's model is.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    LlamaConfig,
    LlamaForSequenceClassification,
    PreTrainedTokenizerFast,
)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIALS = ["[PAD]", "[UNK]", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CORPUS = [
    "what is six times seven ? the answer is 42 because six times seven is forty two",
    "<think> reasoning about the picture </think> <answer> [10, 20, 30, 40] </answer>",
    "a cat sits on a mat and a dog runs in the park while the sun shines",
] * 30


def build_tokenizer(chat_template: str | None) -> PreTrainedTokenizerFast:
    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    bpe.train_from_iterator(
        CORPUS, trainer=trainers.BpeTrainer(vocab_size=200, special_tokens=SPECIALS)
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, unk_token="[UNK]", pad_token="[PAD]", eos_token="<|end|>"
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def save_model(folder: Path, tokenizer: PreTrainedTokenizerFast) -> Path:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.2,  # values of order 1, so a 1e-5 tolerance means something
    )
    LlamaForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def direct_value(folder: Path, ids: list[int]) -> float:
    """A plain ``transformers`` forward on one unpadded input: the reference value."""
    model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return float(model(input_ids=torch.tensor([ids])).logits[0, 0])


def template_ids(folder: Path, messages: list[dict[str, str]]) -> list[int]:
    """The ids the model's own tokenizer gives the chat, through its chat template."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]
