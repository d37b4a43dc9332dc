"""The two format checks, their edge cases, and REC format's equivalence with the reference regex."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyrl_rewards import format_reward, format_reward_rec
from skyrl_rewards.rewards.text.format_checks import has_rec_format

# VLM-R1's REC format regex: the oracle our linear-time check must agree with.
REFERENCE_REC = re.compile(
    r"<think>.*?</think>\s*<answer>.*?\{.*\[\d+,\s*\d+,\s*\d+,\s*\d+\].*\}.*?</answer>", re.DOTALL
)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<think>x</think><answer>y</answer>", 1.0),
        ("<think>x</think> \n <answer>y</answer>", 1.0),  # whitespace between blocks
        ("<think>\nmulti\nline\n</think><answer>\n1\n</answer>", 1.0),  # DOTALL
        ("<think></think><answer></answer>", 1.0),  # empty blocks are still the format
        (" <think>x</think><answer>y</answer>", 0.0),  # nothing before
        ("<think>x</think><answer>y</answer> ", 0.0),  # nothing after
        ("<think>x</think>text<answer>y</answer>", 0.0),  # text between
        ("<answer>y</answer><think>x</think>", 0.0),  # wrong order
        (
            "<think>a</think><answer>b</answer><think>c</think><answer>d</answer>",
            0.0,
        ),  # chained pairs: hedging
        ("<think>a</think><answer>b<answer>c</answer>", 0.0),  # two answer openings
        ("<think>x</think><answer>y", 0.0),  # unclosed
        ("", 0.0),
    ],
)
def test_format_reward(content: str, expected: float) -> None:
    assert format_reward([content]) == [expected]
    assert format_reward([[{"role": "assistant", "content": content}]]) == [expected]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('<think>x</think><answer>{"bbox_2d": [1, 2, 3, 4]}</answer>', 1.0),
        (
            'before <think>x</think>\n<answer>{"bbox": [10,20, 30,  40], "label": "cat"}</answer> after',
            1.0,
        ),
        ("<think>x</think><answer>[1, 2, 3, 4]</answer>", 0.0),  # no braces
        (
            '<think>x</think><answer>{"b": [1.5, 2, 3, 4]}</answer>',
            0.0,
        ),  # decimals are not integers
        ('<think>x</think><answer>{"b": [1, 2, 3]}</answer>', 0.0),
        ('<answer>{"b": [1, 2, 3, 4]}</answer>', 0.0),  # no think block
        ('<think>x</think> y <answer>{"b": [1, 2, 3, 4]}</answer>', 0.0),  # text between blocks
    ],
)
def test_format_reward_rec(content: str, expected: float) -> None:
    assert format_reward_rec([content]) == [expected]


_PIECES = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
        "{",
        "}",
        "[1,2,3,4]",
        "[1, 2,3, 4]",
        "[1,2,3]",
        " ",
        "\n",
        "x",
    ]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(_PIECES, max_size=14).map("".join))
def test_rec_format_agrees_with_the_reference_regex(content: str) -> None:
    assert has_rec_format(content) == bool(REFERENCE_REC.search(content))
