"""Property tests: every reward returns a finite float inside its documented range for any text."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyrl_rewards import (
    cosine_reward,
    default_accuracy_reward,
    detection_score,
    extract_choice,
    format_reward,
    format_reward_rec,
    iou,
    iou_reward,
    repetition_reward,
)
from skyrl_rewards.rewards.text.shaping import WordTokenizer

# Text biased towards the characters the rewards care about.
_PIECES = st.sampled_from(
    ["<think>", "</think>", "<answer>", "</answer>", "```json", "```", "[", "]", "{", "}", ",", '"bbox_2d"',
     '"label"', ":", "1", "2.5", "-3", "NaN", "A", "B.", "yes", "no", "\\frac{1}{2}", "^", " ", "\n", "é", "答案"]
)  # fmt: skip
TEXT = st.one_of(st.text(max_size=200), st.lists(_PIECES, max_size=40).map("".join))
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _in(value: float, low: float, high: float) -> bool:
    return isinstance(value, float) and math.isfinite(value) and low <= value <= high


@SETTINGS
@given(
    TEXT,
    st.sampled_from(["<answer>2</answer>", "<answer>B</answer>", "<answer>a red car</answer>"]),
)
def test_accuracy_in_unit_interval(content: str, sol: str) -> None:
    assert _in(default_accuracy_reward(content, sol, math_guard="inline"), 0.0, 1.0)


@SETTINGS
@given(TEXT)
def test_iou_reward_in_unit_interval(content: str) -> None:
    (value,) = iou_reward([content], solution=["<answer>[1, 2, 30, 40]</answer>"])
    assert _in(value, 0.0, 1.0)


@SETTINGS
@given(st.lists(st.one_of(st.floats(), st.integers(-10**6, 10**6)), min_size=4, max_size=4),
       st.lists(st.floats(-1e6, 1e6), min_size=4, max_size=4))  # fmt: skip
def test_iou_in_unit_interval_for_any_numbers(box1: list, box2: list) -> None:
    assert _in(iou(box1, box2), 0.0, 1.0)


@SETTINGS
@given(TEXT)
def test_detection_in_unit_interval(content: str) -> None:
    sol = '```json [{"bbox_2d": [1, 2, 30, 40], "label": "cat"}] ```'
    assert _in(detection_score(content, sol), 0.0, 1.0)


@SETTINGS
@given(TEXT, st.floats(allow_nan=True, allow_infinity=True))
def test_cosine_within_schedule_bounds(content: str, acc: float) -> None:
    if not math.isfinite(acc):  # acc_reward is the caller's: NaN/inf is a caller error
        with pytest.raises(ValueError, match="acc_reward"):
            cosine_reward(content, WordTokenizer(), acc)
        return
    assert _in(cosine_reward(content, WordTokenizer(), acc), -0.5, 1.0)


@SETTINGS
@given(TEXT)
def test_repetition_in_minus_one_zero(content: str) -> None:
    assert _in(repetition_reward(content), -1.0, 0.0)


@SETTINGS
@given(TEXT)
def test_format_rewards_are_zero_or_one(content: str) -> None:
    assert format_reward([content])[0] in (0.0, 1.0)
    assert format_reward_rec([content])[0] in (0.0, 1.0)


@SETTINGS
@given(TEXT)
def test_extract_choice_is_a_letter_or_none(content: str) -> None:
    choice = extract_choice(content)
    assert choice is None or (len(choice) == 1 and "A" <= choice <= "Z")
