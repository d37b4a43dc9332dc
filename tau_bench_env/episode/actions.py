"""Parse a model's text into one action: a tool call or a reply to the user.

Accepted tool-call forms (after ``<think>...</think>`` blocks are removed):

- Hermes / Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
- OpenAI: ``{"tool_calls": [{"function": {"name": ..., "arguments": "..."}}]}``
  (``arguments`` a JSON string or an object; the ``function`` wrapper optional)
- bare: ``{"name": ..., "arguments": {...}}`` (``parameters`` accepted too)

Anything else is a reply. Like tau-bench's tool-calling agent, one action per
turn: the first tool call runs, further ones are counted and ignored. A
tool call that cannot be used (bad JSON, no name, arguments not an object) is
*malformed*: the result carries an error message for the model instead of an
action. Model text is capped at ``max_chars`` before any parsing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tau_bench_env.config import DEFAULT_MAX_CHARS
from tau_bench_env.data_model.tasks import RESPOND, Action

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.DOTALL)


class MalformedToolCall(ValueError):
    """A tool call the env cannot run; the message says what is wrong."""


@dataclass(frozen=True)
class ParsedTurn:
    """The outcome of parsing one model turn.

    Exactly one of ``action`` and ``error`` is set. ``ignored_tool_calls``
    counts tool calls after the first.
    """

    action: Action | None
    error: str | None = None
    ignored_tool_calls: int = 0


def strip_thinking(text: str) -> str:
    """Remove ``<think>`` blocks, and any text before a lone ``</think>``.

    >>> strip_thinking("<think>hmm</think> Hi")
    'Hi'
    """
    text = _THINK.sub("", text)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    return text.strip()


def _arguments(raw: Any, name: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as error:
            raise MalformedToolCall(
                f"arguments of tool call {name!r} are not valid JSON: {error.msg} "
                f"(line {error.lineno}, column {error.colno})"
            ) from error
    if not isinstance(raw, Mapping):
        raise MalformedToolCall(
            f"arguments of tool call {name!r} must be a JSON object, got {type(raw).__name__}"
        )
    return dict(raw)


def _call_from_object(call: Any) -> Action:
    """Action from ``{"name", "arguments"}``, optionally wrapped in ``{"function": ...}``."""
    if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
        call = call["function"]
    if not isinstance(call, Mapping):
        raise MalformedToolCall(f"a tool call must be a JSON object, got {type(call).__name__}")
    name = call.get("name")
    if not isinstance(name, str) or not name.strip():
        raise MalformedToolCall('a tool call needs a non-empty string "name"')
    raw = call["arguments"] if "arguments" in call else call.get("parameters")
    action = Action(name.strip(), _arguments(raw, name))
    if action.name == RESPOND and not isinstance(action.kwargs.get("content"), str):
        raise MalformedToolCall(f'tool call {RESPOND!r} needs a string "content" argument')
    return action


def _load_json(text: str) -> Any:
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text
    try:
        return json.loads(body)
    except json.JSONDecodeError as error:
        raise MalformedToolCall(
            f"tool call is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
        ) from error


def _looks_like_call(text: str) -> bool:
    """JSON-looking text that names a tool: a failed parse is a malformed call."""
    body = text.strip("`").removeprefix("json").strip()
    return body.startswith("{") and ('"tool_calls"' in body or '"name"' in body)


def _parse(text: str) -> ParsedTurn:
    blocks = _TOOL_CALL.findall(text)
    if blocks:
        action = _call_from_object(_load_json(blocks[0].strip()))
        return ParsedTurn(action, ignored_tool_calls=len(blocks) - 1)
    if not _looks_like_call(text):
        return ParsedTurn(Action(RESPOND, {"content": text}))
    parsed = _load_json(text)
    if isinstance(parsed, Mapping) and "tool_calls" in parsed:
        calls = parsed["tool_calls"]
        if not isinstance(calls, list) or not calls:
            raise MalformedToolCall('"tool_calls" must be a non-empty list')
        return ParsedTurn(_call_from_object(calls[0]), ignored_tool_calls=len(calls) - 1)
    if isinstance(parsed, Mapping) and "name" in parsed:
        return ParsedTurn(_call_from_object(parsed))
    return ParsedTurn(Action(RESPOND, {"content": text}))


def parse_turn(text: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> ParsedTurn:
    """Parse one model turn into a tool call, a reply, or a malformed-call error.

    Never raises on model text.

    >>> parse_turn('<tool_call>{"name": "calculate", "arguments": {"x": 1}}</tool_call>').action
    Action(name='calculate', kwargs={'x': 1})
    >>> parse_turn("<think>plan</think>Sure, one moment.").action
    Action(name='respond', kwargs={'content': 'Sure, one moment.'})
    >>> parse_turn('<tool_call>{"name": 1}</tool_call>').error
    'a tool call needs a non-empty string "name"'
    """
    if not isinstance(text, str):
        return ParsedTurn(None, error=f"model output must be text, got {type(text).__name__}")
    try:
        return _parse(strip_thinking(text[:max_chars]))
    except MalformedToolCall as error:
        return ParsedTurn(None, error=str(error))
    except RecursionError:
        return ParsedTurn(None, error="tool call is nested too deeply")
