"""Parsing model text into a tool call, a reply or a malformed-call error."""

from __future__ import annotations

import json

import pytest

from tau_bench_env.data_model.tasks import Action
from tau_bench_env.episode.actions import parse_turn, strip_thinking

ARGS = {"order_id": "#W1", "item_ids": ["1", "2"]}
CALL = json.dumps({"name": "get_order_details", "arguments": ARGS})
EXPECTED = Action("get_order_details", ARGS)

ACTION_CASES = [
    # Hermes / Qwen tags
    (f"<tool_call>{CALL}</tool_call>", EXPECTED, 0),
    # think block removed first; surrounding text ignored
    (f"<think>look it up</think>Let me check.\n<tool_call>\n{CALL}\n</tool_call>", EXPECTED, 0),
    # opening think in the chat template: only the closing tag is generated
    (f"planning...</think><tool_call>{CALL}</tool_call>", EXPECTED, 0),
    # unterminated tag at the end of generation
    (f"<tool_call>{CALL}", EXPECTED, 0),
    # two calls: the first runs, one is ignored
    (f"<tool_call>{CALL}</tool_call><tool_call>{CALL}</tool_call>", EXPECTED, 1),
    # OpenAI form, arguments as a JSON string
    (
        json.dumps(
            {
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {"name": "get_order_details", "arguments": json.dumps(ARGS)},
                    }
                ]
            }
        ),
        EXPECTED,
        0,
    ),
    # OpenAI form, arguments as an object, no function wrapper, two calls
    (
        json.dumps({"tool_calls": [{"name": "get_order_details", "arguments": ARGS}] * 2}),
        EXPECTED,
        1,
    ),
    # bare call
    (CALL, EXPECTED, 0),
    # bare call with "parameters"
    (json.dumps({"name": "get_order_details", "parameters": ARGS}), EXPECTED, 0),
    # bare call in a json fence
    (f"```json\n{CALL}\n```", EXPECTED, 0),
    # no arguments at all
    ('<tool_call>{"name": "list_all_airports"}</tool_call>', Action("list_all_airports", {}), 0),
    # plain reply
    ("Your order is on its way.", Action("respond", {"content": "Your order is on its way."}), 0),
    # reply after thinking
    ("<think>done</think>  Bye!  ", Action("respond", {"content": "Bye!"}), 0),
    # JSON that is not a call is a reply
    ('{"total": 3}', Action("respond", {"content": '{"total": 3}'}), 0),
    # respond as a tool call is a reply
    (
        '<tool_call>{"name": "respond", "arguments": {"content": "hi"}}</tool_call>',
        Action("respond", {"content": "hi"}),
        0,
    ),
]


@pytest.mark.parametrize(("text", "action", "ignored"), ACTION_CASES)
def test_parse_actions(text: str, action: Action, ignored: int) -> None:
    parsed = parse_turn(text)
    assert parsed.error is None
    assert parsed.action == action
    assert parsed.ignored_tool_calls == ignored


MALFORMED_CASES = [
    # invalid JSON inside the tags
    ('<tool_call>{"name": "x", "arguments": {</tool_call>', "not valid JSON"),
    # no name
    ('<tool_call>{"arguments": {}}</tool_call>', '"name"'),
    # name not a string
    ('<tool_call>{"name": 3, "arguments": {}}</tool_call>', '"name"'),
    # arguments a list
    ('<tool_call>{"name": "x", "arguments": [1]}</tool_call>', "must be a JSON object"),
    # arguments string that is not JSON
    ('{"tool_calls": [{"function": {"name": "x", "arguments": "{oops"}}]}', "not valid JSON"),
    # arguments string holding a list
    ('{"tool_calls": [{"function": {"name": "x", "arguments": "[1]"}}]}', "must be a JSON object"),
    # empty tool_calls
    ('{"tool_calls": []}', "non-empty list"),
    # broken bare call
    ('{"name": "x", "arguments": {"a": }', "not valid JSON"),
    # the call is not an object
    ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
    # respond without content
    ('<tool_call>{"name": "respond", "arguments": {}}</tool_call>', "content"),
    # pathological nesting never raises
    ("<tool_call>" + "[" * 200_000 + "</tool_call>", ""),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED_CASES)
def test_malformed_tool_calls(text: str, message: str) -> None:
    parsed = parse_turn(text)
    assert parsed.action is None
    assert parsed.error is not None and message in parsed.error


def test_text_is_capped_before_parsing() -> None:
    text = "x" * 100 + f"<tool_call>{CALL}</tool_call>"
    parsed = parse_turn(text, max_chars=100)
    assert parsed.action == Action("respond", {"content": "x" * 100})


def test_non_text_is_an_error() -> None:
    assert parse_turn(None).error == "model output must be text, got NoneType"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>a</think>b<think>c</think>d", "bd"),  # several blocks
        ("a</think>b", "b"),  # lone closing tag
        ("answer <think>unfinished", "answer"),  # unfinished block dropped
    ],
)
def test_strip_thinking(text: str, expected: str) -> None:
    assert strip_thinking(text) == expected
