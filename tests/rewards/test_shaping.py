"""Cosine length shaping (with a real tokenizer) and the repetition penalty."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerFast

from skyrl_rewards import CosineSchedule, cosine_reward, repetition_reward
from skyrl_rewards.rewards.text.shaping import bbox_array


def _text_of_tokens(tokenizer: PreTrainedTokenizerFast, n: int) -> str:
    text = " ".join(["cat"] * n)
    assert len(tokenizer.encode(text)) == n
    return text


@pytest.mark.parametrize(
    ("length", "acc", "expected"),
    [
        (0, 1.0, 1.0),  # correct, empty: best
        (1024, 1.0, 0.5),  # correct, full length
        (512, 1.0, 0.75),  # halfway: (1 - cos(pi/2)) / 2 = 0.5
        (0, 0.0, -0.5),  # wrong and short: punished hardest
        (1024, 0.0, 0.0),  # wrong and long
        (0, 0.7, 1.0),  # threshold is inclusive
        (0, 0.69, -0.5),  # just below the threshold is wrong
        (2048, 1.0, 0.5),  # clamped at the period (the reference would give 1.0)
        (3000, 0.0, 0.0),
    ],
)
def test_cosine_endpoints_threshold_and_clamp(
    bpe_tokenizer: PreTrainedTokenizerFast, length: int, acc: float, expected: float
) -> None:
    content = _text_of_tokens(bpe_tokenizer, length)
    assert cosine_reward(content, bpe_tokenizer, acc) == pytest.approx(expected)


def test_cosine_without_clamp_cycles_like_the_reference(
    bpe_tokenizer: PreTrainedTokenizerFast,
) -> None:
    content = _text_of_tokens(bpe_tokenizer, 2048)
    assert cosine_reward(
        content, bpe_tokenizer, 1.0, schedule=CosineSchedule(clamp=False)
    ) == pytest.approx(1.0)


def test_cosine_without_clamp_counts_every_token(bpe_tokenizer: PreTrainedTokenizerFast) -> None:
    content = "cat " * 40_000  # 40,000 tokens; the cheap cut must not apply without the clamp
    expected = 1.0 - 0.5 * (1 - math.cos(40_000 * math.pi / 1024)) / 2
    schedule = CosineSchedule(clamp=False)
    assert cosine_reward(content, bpe_tokenizer, 1.0, schedule=schedule) == pytest.approx(expected)


def test_cosine_schedule_is_configurable(bpe_tokenizer: PreTrainedTokenizerFast) -> None:
    schedule = CosineSchedule(correct_start=2.0, correct_end=1.0, max_len=10)
    assert cosine_reward(
        _text_of_tokens(bpe_tokenizer, 10), bpe_tokenizer, 1.0, schedule=schedule
    ) == pytest.approx(1.0)


@pytest.mark.parametrize("bad", [{"max_len": 0}, {"max_len": 1.5}, {"wrong_end": float("nan")}])
def test_cosine_schedule_rejects_bad_values(bad: dict) -> None:
    with pytest.raises(ValueError):
        CosineSchedule(**bad)


def test_cosine_handles_huge_and_odd_input(bpe_tokenizer: PreTrainedTokenizerFast) -> None:
    assert cosine_reward("cat " * 1_000_000, bpe_tokenizer, 1.0) == pytest.approx(0.5)
    assert cosine_reward(None, bpe_tokenizer, 1.0) == 1.0  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "acc_reward",
    [
        10**400,  # issue 11: was an OverflowError
        "garbage",
        "0.9",  # a string, even a numeric one, is a caller error
        None,
        float("nan"),
        float("inf"),
    ],
)
def test_cosine_bad_acc_reward_is_a_value_error_naming_it(
    acc_reward: object, bpe_tokenizer: PreTrainedTokenizerFast
) -> None:
    with pytest.raises(ValueError, match="acc_reward"):
        cosine_reward("x", bpe_tokenizer, acc_reward)  # type: ignore[arg-type]


def test_repetition_never_gives_negative_zero() -> None:
    # issue 11: "repetition": -0.0 appeared in outputs when every n-gram is unique
    value = repetition_reward("one two three four five six seven eight")
    assert value == 0.0 and math.copysign(1.0, value) == 1.0


def _items(boxes: list[tuple[list[int], str]]) -> str:
    return json.dumps([{"bbox_2d": box, "label": label} for box, label in boxes])


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("", 0.0),
        ("one two three four five", 0.0),  # fewer than 6 words
        ("a b c d e f", 0.0),  # one 6-gram
        ("a b c d e f a b c d e f a b c d e f", -(1 - 6 / 13)),  # 13 6-grams, 6 unique
        ("A B C D E F a b c d e f", -(1 - 6 / 7)),  # lower-cased before counting
        # JSON in a ```json block: items compared with n = 1
        ("```json\n" + _items([([1, 2, 3, 4], "a")] * 4) + "\n```", -(1 - 1 / 4)),
        # a plain ``` block
        ("```\n" + _items([([1, 2, 3, 4], "a"), ([1, 2, 3, 5], "a")]) + "\n```", 0.0),
        # a bare array with bbox_2d and label
        ("boxes: " + _items([([1, 2, 3, 4], "a")] * 2) + " done", -(1 - 1 / 2)),
        # a JSON list with no bbox/label items scores 0.0 (reference)
        ('```json [{"x": 1}, {"x": 1}]```', 0.0),
        # discovery order: the ```json block wins over a plain block and a bare array
        (
            "```\n"
            + _items([([1, 2, 3, 4], "a")] * 4)
            + "\n```\n```json\n"
            + _items([([1, 2, 3, 4], "a")])
            + "\n```",
            0.0,
        ),
        # a plain block wins over a bare array
        (
            "```\n" + _items([([1, 2, 3, 4], "a")]) + "\n``` " + _items([([1, 2, 3, 4], "a")] * 2),
            0.0,
        ),
        # JSON past Python's integer digit limit does not raise: scored as text
        ("```json\n[" + "1" * 5000 + "]\n```", 0.0),
        # a list of non-dicts is scored as text, without crashing
        ("```json [1, 1, 1]``` w w w w w w w w", -(1 - 5 / 7)),
    ],
)
def test_repetition(content: str, expected: float) -> None:
    assert repetition_reward(content) == pytest.approx(expected)


_REFERENCE_ARRAY = re.compile(r'\[\s*\{.*?"bbox_2d".*?"label".*?\}\s*\]', re.DOTALL)
_ARRAY_PIECES = st.sampled_from(
    ["[", "{", "}", "]", " ", '"bbox_2d"', '"label"', "x", "\n", "[{", "}]"]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(_ARRAY_PIECES, max_size=16).map("".join))
def test_bbox_array_finds_what_the_reference_regex_finds(content: str) -> None:
    match = _REFERENCE_ARRAY.search(content)
    assert bbox_array(content) == (match.group(0) if match else None)
