"""Text extraction shared by the rewards: completion text, answer spans, cleaning.

Model text is untrusted: everything here accepts any object, never raises for
it, and caps sizes before a regex runs.
"""

from __future__ import annotations

import re
from typing import Any

MAX_TEXT_CHARS = 1_000_000
"""Model text longer than this (far past any generation length) is cut to its head."""

MAX_ANSWER_CHARS = 100_000
"""An answer span longer than this is cut before any regex or parser sees it."""

_ANSWER_OPEN = "<answer>"
_ANSWER_CLOSE = "</answer>"
_NEWLINE_AFTER_SPACE = re.compile(r"(?<=\s)[\r\n]")
_NEWLINE = re.compile(r"[\r\n]")


def cap(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """Return ``text`` cut to at most ``limit`` characters."""
    return text if len(text) <= limit else text[:limit]


def completion_text(completion: Any) -> str:
    """The text a reward judges in one completion, capped; ``""`` when there is none.

    Every form TRL hands to a reward function is read the way the user means it:

    - a plain string: itself (bytes are decoded as UTF-8 with replacement);
    - a message list (conversational completions, with tool calls and tool
      results in between): the **last** assistant message, i.e. the final
      answer; a list that ends in a tool turn reads the last assistant
      message before it;
    - a parsed response (a message with ``reasoning_content``, ``reasoning``
      or ``thinking`` beside ``content``, as produced when the tokenizer has a
      response schema): the reasoning is put back as the think block,
      ``"<think>\\n{reasoning}\\n</think>\\n\\n{content}"``, unless the content
      already holds a ``<think>``; an empty reasoning adds nothing;
    - a ``content`` given as a list of parts: its text parts, joined.

    Anything else (``None``, numbers, a list with no assistant message)
    yields ``""``. Never raises.

    >>> completion_text([{"role": "assistant", "content": "hi"}])
    'hi'
    >>> completion_text([{"role": "assistant", "content": "4", "reasoning_content": "2+2"}])
    '<think>\\n2+2\\n</think>\\n\\n4'
    """
    if isinstance(completion, list):
        completion = _last_assistant_message(completion)
    if isinstance(completion, dict):
        return _message_text(completion)
    return _plain_text(completion)


_REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")


def _plain_text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value[: MAX_TEXT_CHARS * 4]).decode("utf-8", errors="replace")
    return cap(value) if isinstance(value, str) else ""


def _last_assistant_message(messages: list[Any]) -> Any:
    for message in reversed(messages):
        if isinstance(message, (str, bytes, bytearray)):
            return message
        if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
            return message
    return None


def _message_text(message: dict[Any, Any]) -> str:
    content = message.get("content")
    if isinstance(
        content, list
    ):  # content parts: [{"type": "text", "text": ...}, {"type": "image"}]
        content = "".join(
            cap(part["text"])
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    text = _plain_text(content)
    reasoning = next(
        (message[key] for key in _REASONING_KEYS if isinstance(message.get(key), str)), ""
    )
    reasoning = cap(reasoning).strip("\n")
    if not reasoning or "<think>" in text:
        return text
    return cap(f"<think>\n{reasoning}\n</think>\n\n{text.lstrip()}")


def answer_span(text: str) -> str:
    """The stripped text inside the last ``<answer>...</answer>`` of ``text``, capped.

    Without a complete answer tag the whole text, stripped. The span opens at
    the last ``<answer>`` that some ``</answer>`` follows and closes at the
    first ``</answer>`` after it: the last match of VLM-R1's
    ``re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)``, so a stray
    closing tag after the answer changes nothing
    (``"<answer>42</answer> done.</answer>"`` gives ``"42"``). One deliberate
    difference: an unclosed ``<answer>`` inside the span starts it afresh
    (``"<answer>a <answer>b</answer>"`` gives ``"b"``; the regex gives
    ``"a <answer>b"``). Uses plain string search on the whole text (no
    regex), so it is linear and finds the answer at the end of a long
    reasoning trace; the span is then cut to :data:`MAX_ANSWER_CHARS`.

    >>> answer_span("<answer> 1 </answer> and <answer>2</answer>")
    '2'
    >>> answer_span("<answer>42</answer> done.</answer>")
    '42'
    """
    if not isinstance(text, str):
        return ""
    span = tagged_answer(text)
    return span if span is not None else cap(text.strip(), MAX_ANSWER_CHARS)


def tagged_answer(text: str) -> str | None:
    """:func:`answer_span` when ``text`` has a complete answer tag, else ``None``.

    >>> tagged_answer("no tags here") is None
    True
    """
    if not isinstance(text, str):
        return None
    last_close = text.rfind(_ANSWER_CLOSE)
    if last_close == -1:
        return None
    start = text.rfind(_ANSWER_OPEN, 0, last_close)
    if start == -1:
        return None
    start += len(_ANSWER_OPEN)
    close = text.find(_ANSWER_CLOSE, start)  # found: last_close at the latest
    return cap(text[start:close].strip(), MAX_ANSWER_CHARS)


def clean(text: str) -> str:
    """SPEC's ``clean``: answer span, newline folding, trailing dots dropped, lower case.

    A newline that follows whitespace is deleted; any other newline becomes a
    space.

    >>> clean("<answer>The Cat.\\n</answer>")
    'the cat'
    """
    span = answer_span(text)
    span = _NEWLINE_AFTER_SPACE.sub("", span)
    span = _NEWLINE.sub(" ", span)
    return span.strip().rstrip(".").lower()
