"""Every completion form TRL hands to a reward is judged like the plain text the user means.

Forms (docs/rewards.md, "Completion forms"): plain text; a message list (the
last assistant message, tool turns in between); a parsed response with
``reasoning_content`` (judged as if the reasoning were the think block);
content given as text parts. Each form runs through the real reward functions.
"""

from __future__ import annotations

from typing import Any

import pytest

from skyrl_rewards.rewards.batch import accuracy_reward, make_reward
from skyrl_rewards.rewards.boxes.rec import iou_reward
from skyrl_rewards.rewards.contract.text import completion_text
from skyrl_rewards.rewards.text.format_checks import format_reward, format_reward_rec

ANSWER = "<think>six times seven</think>\n<answer>42</answer>"
PARSED_TEXT = "<think>\nsix times seven\n</think>\n\n<answer>42</answer>"
TOOL_CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [{"type": "function", "function": {"name": "mul", "arguments": {"a": 6}}}],
}
TOOL_RESULT = {"role": "tool", "name": "mul", "content": "42"}

FORMS: list[tuple[str, Any, str]] = [
    ("plain text", ANSWER, ANSWER),
    ("one message", [{"role": "assistant", "content": ANSWER}], ANSWER),
    ("a bare message dict", {"role": "assistant", "content": ANSWER}, ANSWER),
    (
        "parsed response",
        [
            {
                "role": "assistant",
                "reasoning_content": "six times seven",
                "content": "<answer>42</answer>",
            }
        ],
        PARSED_TEXT,
    ),
    (
        "parsed response, reasoning under 'thinking'",
        [{"role": "assistant", "thinking": "six times seven", "content": "<answer>42</answer>"}],
        PARSED_TEXT,
    ),
    (
        "tool call, tool result, final answer",
        [TOOL_CALL, TOOL_RESULT, {"role": "assistant", "content": ANSWER}],
        ANSWER,
    ),
    (
        "tool turns, then a parsed final answer",
        [
            dict(TOOL_CALL, reasoning_content="I should multiply"),
            TOOL_RESULT,
            {
                "role": "assistant",
                "reasoning_content": "six times seven",
                "content": "<answer>42</answer>",
            },
        ],
        PARSED_TEXT,
    ),
    (
        "content as text parts",
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "<think>six times seven</think>\n"},
                    {"type": "image"},
                    {"type": "text", "text": "<answer>42</answer>"},
                ],
            }
        ],
        ANSWER,
    ),
    (
        "content with its own think block: reasoning not added",
        [{"role": "assistant", "reasoning_content": "other", "content": ANSWER}],
        ANSWER,
    ),
    ("ends in a tool turn: the last assistant message", [TOOL_CALL, TOOL_RESULT], ""),
    ("no assistant message", [{"role": "user", "content": ANSWER}], ""),
    (
        "empty reasoning adds nothing",
        [{"role": "assistant", "reasoning_content": "", "content": "x"}],
        "x",
    ),
]


@pytest.mark.parametrize(("form", "completion", "text"), FORMS, ids=[f[0] for f in FORMS])
def test_completion_text_reads_each_form(form: str, completion: Any, text: str) -> None:
    assert completion_text(completion) == text


@pytest.mark.parametrize(("form", "completion", "text"), FORMS, ids=[f[0] for f in FORMS])
def test_real_rewards_score_each_form_like_its_text(
    form: str, completion: Any, text: str, bpe_tokenizer: Any
) -> None:
    rewards = [
        accuracy_reward,
        format_reward,
        make_reward("length", tokenizer=bpe_tokenizer),
        make_reward("repetition"),
    ]
    for reward in rewards:
        as_form = reward([completion], solution=["<answer>42</answer>"])
        as_text = reward([text], solution=["<answer>42</answer>"])
        assert as_form == as_text, (form, reward.__name__)


def test_tool_use_with_a_final_answer_scores_like_the_answer(bpe_tokenizer: Any) -> None:
    # The case: [tool call, tool result, final answer] used to read the tool call's "".
    completion = [TOOL_CALL, TOOL_RESULT, {"role": "assistant", "content": ANSWER}]
    solution = ["<answer>42</answer>"]
    assert accuracy_reward([completion], solution=solution) == [1.0]
    assert format_reward([completion]) == [1.0]
    assert make_reward("length", tokenizer=bpe_tokenizer)([completion], solution=solution)[0] > 0.5


def test_parsed_response_keeps_the_format_reward() -> None:
    # With a response schema TRL strips the think block into reasoning_content: still formatted.
    parsed = {
        "role": "assistant",
        "reasoning_content": "look",
        "content": "<answer>[1, 2, 3, 4]</answer>",
    }
    assert format_reward([[parsed]]) == [1.0]
    rec = dict(parsed, content='<answer>{"bbox_2d": [1, 2, 3, 4]}</answer>')
    assert format_reward_rec([[rec]]) == [1.0]
    assert iou_reward([[rec]], solution=["<answer>[1, 2, 3, 4]</answer>"]) == [1.0]
    assert format_reward([[dict(parsed, reasoning_content=None)]]) == [
        0.0
    ]  # no reasoning: no think


def test_huge_reasoning_is_capped() -> None:
    from skyrl_rewards.rewards.contract.text import MAX_TEXT_CHARS

    message = {"role": "assistant", "reasoning_content": "x" * (MAX_TEXT_CHARS * 2), "content": "y"}
    assert len(completion_text([message])) == MAX_TEXT_CHARS
