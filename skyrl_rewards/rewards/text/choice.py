"""Multiple-choice letter extraction (VLM-R1's ``extract_choice``)."""

from __future__ import annotations

import re

from skyrl_rewards.rewards.contract.text import cap

MAX_CHOICE_TEXT_CHARS = 20_000
"""Longer texts are cut before the letter search."""

_CANDIDATE = re.compile(r"(?<![A-Z])([A-Z])(?=[.,?!:;]|$)")
_WHITESPACE = re.compile(r"\s+")
_KEYWORDS = (
    "ANSWER", "CORRECT", "CHOOSE", "SELECT", "RIGHT", "THINK", "BELIEVE", "SHOULD",
    "答案", "选择", "正确", "是", "对", "认为", "应该", "觉得",
)  # fmt: skip
_KEYWORD_WINDOW = 20
_TAIL_FRACTION = 0.7
_STRONG_FOLLOWERS = frozenset("。.!！,，")


def extract_choice(text: str) -> str | None:
    """The multiple-choice letter ``text`` commits to, or ``None``.

    The text is upper-cased and its whitespace runs collapsed to one space (not
    stripped: ``"B "`` has no candidate). Candidates are single letters A-Z not
    preceded by a letter and followed by one of ``.,?!:;`` or the end of the
    text. With several candidates, each scores +1 per keyword in the 20
    characters either side of its first occurrence, +2 if it starts past 70% of
    the text, +1 if followed by one of ``。.!！,，``; the highest score wins,
    ties go to the first seen.

    >>> extract_choice("I think the answer is B.")
    'B'
    """
    if not isinstance(text, str):
        return None
    text = _WHITESPACE.sub(" ", cap(text, MAX_CHOICE_TEXT_CHARS).upper())
    first_seen: dict[str, int] = {}
    for match in _CANDIDATE.finditer(text):
        first_seen.setdefault(match.group(1), match.start())
    if not first_seen:
        return None
    if len(first_seen) == 1:
        return next(iter(first_seen))
    best_letter, best_score = None, -1
    for letter, pos in first_seen.items():
        score = _candidate_score(text, pos)
        if score > best_score:
            best_letter, best_score = letter, score
    return best_letter


def _candidate_score(text: str, pos: int) -> int:
    window = text[max(0, pos - _KEYWORD_WINDOW) : pos + _KEYWORD_WINDOW]
    score = sum(1 for keyword in _KEYWORDS if keyword in window)
    if pos > len(text) * _TAIL_FRACTION:
        score += 2
    if pos + 1 < len(text) and text[pos + 1] in _STRONG_FOLLOWERS:
        score += 1
    return score
