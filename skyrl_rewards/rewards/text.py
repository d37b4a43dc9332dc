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
    """The assistant text of a completion, capped; ``""`` when there is none.

    Accepts a plain string, a message dict, or a list of message dicts (TRL's
    conversational format, where the text is the first message's ``content``).
    Bytes are decoded as UTF-8 with replacement; anything else yields ``""``.

    >>> completion_text([{"role": "assistant", "content": "hi"}])
    'hi'
    """
    if isinstance(completion, list):
        completion = completion[0] if completion else ""
    if isinstance(completion, dict):
        completion = completion.get("content", "")
    if isinstance(completion, (bytes, bytearray)):
        completion = bytes(completion[: MAX_TEXT_CHARS * 4]).decode("utf-8", errors="replace")
    if not isinstance(completion, str):
        return ""
    return cap(completion)


def answer_span(text: str) -> str:
    """The stripped text inside the last ``<answer>...</answer>`` of ``text``, capped.

    Without a complete answer tag the whole text, stripped. The span runs from
    the last ``<answer>`` before the last ``</answer>`` (so
    ``"<answer>a <answer>b</answer>"`` gives ``"b"``). Uses plain string
    search on the whole text (no regex), so it is linear and finds the answer
    at the end of a long reasoning trace; the span is then cut to
    :data:`MAX_ANSWER_CHARS`.

    >>> answer_span("<answer> 1 </answer> and <answer>2</answer>")
    '2'
    """
    if not isinstance(text, str):
        return ""
    close = text.rfind(_ANSWER_CLOSE)
    if close != -1:
        start = text.rfind(_ANSWER_OPEN, 0, close)
        if start != -1:
            return cap(text[start + len(_ANSWER_OPEN) : close].strip(), MAX_ANSWER_CHARS)
    return cap(text.strip(), MAX_ANSWER_CHARS)


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
