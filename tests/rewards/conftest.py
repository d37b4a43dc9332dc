"""Fixtures for the reward tests: a real tokenizer trained here, real image files."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

_CORPUS = [
    "the answer is 42 because six times seven is forty two",
    "<think> reasoning about the picture </think> <answer> [10, 20, 30, 40] </answer>",
    "a cat sits on a mat and a dog runs in the park",
] * 50


@pytest.fixture(scope="session")
def bpe_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained in the test (no download), wrapped by transformers."""
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"])
    tokenizer.train_from_iterator(_CORPUS, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]")


def write_image(path: Path, width: int, height: int) -> str:
    """Write a real PNG of the given size and return its path."""
    Image.new("RGB", (width, height), (120, 40, 200)).save(path)
    return str(path)


@pytest.fixture
def image_640x480(tmp_path: Path) -> str:
    """A real 640x480 PNG file."""
    return write_image(tmp_path / "img.png", 640, 480)
