"""Multiple-choice letter extraction, branch by branch."""

from __future__ import annotations

import pytest

from skyrl_rewards.rewards.text.choice import extract_choice


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("B", "B"),  # a lone letter at end of text
        ("b.", "B"),  # upper-cased, followed by a dot
        ("The answer is C", "C"),  # candidate at the end
        (
            "no letter here",
            None,
        ),  # no candidate: lower-case words become upper but are multi-letter
        ("AB.", None),  # preceded by a letter: not a candidate
        ("(D)", None),  # followed by ')' which is not in .,?!:;
        ("A: first, the answer is B.", "B"),  # B: keyword 'ANSWER' near, last 30%, followed by '.'
        (
            "Answer: A, but maybe C",
            "A",
        ),  # A: keyword +1, followed by ',' +1; C: tail +2 -> tie, first wins
        ("选择 A。 or perhaps B", "B"),  # A never a candidate ('。' is not a follower); B at end
        # only each letter's first occurrence is scored: A (+1 THINK, +1 ',') ties D (+1, +1)
        ("A, B, C, D. I think the answer is D.", "A"),
        ("B ", None),  # not stripped: B is followed by a space, so it is no candidate
        ("Bis ?B,A.\n\n", "B"),  # A starts exactly at 70%: no tail bonus (strictly past 70%)
        ("A? maybe B?", "B"),  # tail bonus (last 30%) breaks the tie
        ("A? B?", "A"),  # B starts before the last 30%: tie, first seen wins
        ("a\n\n  b   c.", "C"),  # whitespace collapsed before scoring
        ("", None),
    ],
)
def test_extract_choice(text: str, expected: str | None) -> None:
    assert extract_choice(text) == expected


def test_non_string_is_none() -> None:
    assert extract_choice(None) is None  # type: ignore[arg-type]
