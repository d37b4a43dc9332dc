"""Answer spans, cleaning and completion extraction."""

from __future__ import annotations

import pytest

from skyrl_rewards.rewards.contract.text import MAX_TEXT_CHARS, answer_span, clean, completion_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer> 7 </answer>", "7"),  # one tag, stripped
        ("<answer>1</answer> then <answer>2</answer>", "2"),  # last tag wins
        ("<answer>a\nb</answer>", "a\nb"),  # DOTALL
        ("  no tags  ", "no tags"),  # no tag: whole text stripped
        ("<answer>unclosed", "<answer>unclosed"),  # incomplete tag: whole text
        ("</answer><answer>x", "</answer><answer>x"),  # close before open: whole text
        ("<answer>42</answer> done.</answer>", "42"),  # a stray closer: VLM-R1 reads 42 too
        ("<answer>a <answer>b</answer>", "b"),  # an unclosed opener inside restarts the span
        ("<answer></answer>", ""),  # empty answer
        (None, ""),  # not a string
    ],
)
def test_answer_span(text: object, expected: str) -> None:
    assert answer_span(text) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>The Cat.</answer>", "the cat"),  # lower case, trailing dot dropped
        ("<answer>a\nb</answer>", "a b"),  # newline after a letter becomes a space
        ("<answer>a \nb</answer>", "a b"),  # newline after whitespace is deleted
        ("<answer>a\n\nb</answer>", "a b"),  # second newline follows whitespace: deleted
        ("<answer>3...</answer>", "3"),  # every trailing dot dropped
        ("<answer>x\r\ny</answer>", "x y"),  # \r becomes a space, the \n after it is deleted
    ],
)
def test_clean(text: str, expected: str) -> None:
    assert clean(text) == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("plain", "plain"),
        ([{"role": "assistant", "content": "msg"}], "msg"),  # TRL conversational form
        ({"role": "assistant", "content": "one"}, "one"),  # a single message
        ([], ""),  # empty list
        (b"bytes \xff", "bytes \ufffd"),  # bytes decoded with replacement
        (None, ""),
        (123, ""),
        ([{"role": "assistant", "content": None}], ""),
    ],
)
def test_completion_text(completion: object, expected: str) -> None:
    assert completion_text(completion) == expected


def test_completion_text_caps_size() -> None:
    assert len(completion_text("x" * (MAX_TEXT_CHARS + 10))) == MAX_TEXT_CHARS
