"""Shaping rewards: cosine length shaping and the repetition penalty."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from skyrl_rewards.rewards.contract.component_base import Component
from skyrl_rewards.rewards.contract.hub import load_pretrained_tokenizer
from skyrl_rewards.rewards.contract.json_extract import (
    MAX_SEARCH_CHARS,
    any_block,
    json_block,
    parse_json,
)
from skyrl_rewards.rewards.contract.result import ComponentScore
from skyrl_rewards.rewards.contract.text import cap

MAX_REPETITION_CHARS = 100_000
"""Content is cut to this length before the repetition penalty looks at it."""

CHARS_PER_TOKEN_BOUND = 32
"""Only the first ``max_len * CHARS_PER_TOKEN_BOUND`` characters are tokenized."""

_ARRAY_START = re.compile(r"\[\s*\{")
_ARRAY_END = re.compile(r"\}\s*\]")


class Tokenizer(Protocol):
    """Anything with ``encode(text) -> list`` (a ``transformers`` tokenizer fits)."""

    def encode(self, text: str) -> list[Any]: ...


@dataclass(frozen=True)
class CosineSchedule:
    """The four endpoint values and the period of cosine length shaping.

    ``*_start`` is the value at zero length, ``*_end`` at ``max_len`` tokens.
    With ``clamp`` (default) lengths past ``max_len`` score like ``max_len``;
    without it the cosine keeps cycling, as in the reference.
    """

    correct_start: float = 1.0
    correct_end: float = 0.5
    wrong_start: float = -0.5
    wrong_end: float = 0.0
    max_len: int = 1024
    correct_threshold: float = 0.7
    clamp: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.max_len, int) or self.max_len <= 0:
            raise ValueError(f"max_len: expected a positive integer, got {self.max_len!r}")
        values = (self.correct_start, self.correct_end, self.wrong_start, self.wrong_end)
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            raise ValueError(f"cosine values: expected finite numbers, got {values}")

    def value(self, length: int, correct: bool) -> float:
        """Shaped value for ``length`` tokens."""
        if self.clamp:
            length = min(length, self.max_len)
        start, end = (
            (self.correct_start, self.correct_end)
            if correct
            else (self.wrong_start, self.wrong_end)
        )
        progress = (1.0 - math.cos(length * math.pi / self.max_len)) / 2.0
        return float(start + (end - start) * progress)

    @property
    def bounds(self) -> tuple[float, float]:
        """Smallest and largest value the schedule can give."""
        values = (self.correct_start, self.correct_end, self.wrong_start, self.wrong_end)
        return min(values), max(values)


DEFAULT_SCHEDULE = CosineSchedule()


def token_length(content: str, tokenizer: Tokenizer, max_len: int | None) -> int:
    """Tokens in ``content``; with a ``max_len``, texts too long to matter are cut so the count stays cheap."""
    if max_len is None:
        return len(tokenizer.encode(content))
    limit = max_len * CHARS_PER_TOKEN_BOUND
    length = len(tokenizer.encode(cap(content, limit)))
    return max(length, max_len) if len(content) > limit else length


def cosine_reward(content: str, tokenizer: Tokenizer, acc_reward: float, **kwargs: Any) -> float:
    """Cosine length shaping (SPEC): correct answers 1.0 -> 0.5, wrong ones -0.5 -> 0.0 over 1024 tokens.

    ``correct`` is ``acc_reward >= 0.7`` (the argument is honoured, unlike the
    reference). kwargs ``schedule`` (a :class:`CosineSchedule`) changes the
    values, the period and the clamp. A non-string ``content`` counts as empty.
    ``acc_reward`` comes from the caller, not the model: anything but a finite
    real number raises ``ValueError`` naming it.

    >>> class Chars:
    ...     def encode(self, text): return list(text)
    >>> cosine_reward("", Chars(), 1.0)
    1.0
    """
    schedule: CosineSchedule = kwargs.get("schedule", DEFAULT_SCHEDULE)
    text = content if isinstance(content, str) else ""
    correct = _finite_float("acc_reward", acc_reward) >= schedule.correct_threshold
    max_len = schedule.max_len if schedule.clamp else None
    return schedule.value(token_length(text, tokenizer, max_len), correct)


def _finite_float(name: str, value: Any) -> float:
    """``value`` as a float, or ``ValueError`` naming ``name`` unless it is a finite real number."""
    try:
        number = float(value) if isinstance(value, numbers.Real) else math.nan
    except OverflowError:  # an int past the float range
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{name}: expected a finite number, got {value!r:.80}")
    return number


def repetition_reward(content: str, **kwargs: Any) -> float:
    """Repetition penalty in [-1, 0]: minus the fraction of repeated n-grams (SPEC).

    JSON detections (a ```` ```json ``` ```` block, else any ```` ``` ```` block,
    else a bare ``[{... "bbox_2d" ... "label" ...}]`` array) are compared as
    ``f"{bbox_2d}_{label}"`` items with n = 1; anything else as lower-cased
    words with n = 6.

    >>> repetition_reward("a b c d e f a b c d e f a b c d e f")
    -0.5384615384615384
    """
    if not isinstance(content, str) or not content:
        return 0.0
    content = cap(content, MAX_REPETITION_CHARS)
    items = _detection_items(content)
    if items is not None:
        return _ngram_penalty(items, 1)
    return _ngram_penalty(content.lower().split(), 6)


def _detection_items(content: str) -> list[str] | None:
    """``bbox_2d``/``label`` items of the content's JSON list, or ``None`` to score it as text."""
    candidate = json_block(content) or any_block(content) or bbox_array(content)
    data = parse_json(candidate) if candidate else None
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        return None
    return [
        f"{item['bbox_2d']}_{item['label']}"
        for item in data
        if "bbox_2d" in item and "label" in item
    ]


def bbox_array(content: str) -> str | None:
    """The first ``[{ ... "bbox_2d" ... "label" ... }]`` span of ``content``, in linear time.

    Matches what the reference's lazy regex
    ``\\[\\s*\\{.*?"bbox_2d".*?"label".*?\\}\\s*\\]`` (DOTALL) finds: only the first
    ``[{`` can start a match, since any later start sees a subset of the text.
    """
    content = cap(content, MAX_SEARCH_CHARS)
    start = _ARRAY_START.search(content)
    if start is None:
        return None
    bbox = content.find('"bbox_2d"', start.end())
    label = content.find('"label"', bbox + len('"bbox_2d"')) if bbox != -1 else -1
    end = _ARRAY_END.search(content, label + len('"label"')) if label != -1 else None
    return content[start.start() : end.end()] if end is not None else None


def _ngram_penalty(items: list[str], n: int) -> float:
    total = len(items) - n + 1
    if total <= 0:
        return 0.0
    unique = len(set(zip(*(items[i:] for i in range(n)), strict=False)))
    return 0.0 - (1.0 - unique / total)  # never -0.0 when every n-gram is unique


class WordTokenizer:
    """A tokenizer-free length: words and punctuation marks count one token each."""

    _TOKEN = re.compile(r"\w+|[^\w\s]")

    def encode(self, text: str) -> list[str]:
        """The word and punctuation tokens of ``text``."""
        return self._TOKEN.findall(text)


def load_tokenizer(tokenizer: Any) -> Tokenizer:
    """``None`` -> :class:`WordTokenizer`; a folder or hub name -> its tokenizer (see ``hub``); else as given.

    A hub name that is not cached and cannot be reached fails at once with the
    fix (pass a local folder), not after ``transformers``' network retries.
    """
    if tokenizer is None:
        return WordTokenizer()
    if isinstance(tokenizer, str):
        return load_pretrained_tokenizer(tokenizer)
    if not callable(getattr(tokenizer, "encode", None)):
        raise ValueError(
            f"tokenizer: expected a name, a path or an object with encode(), got {tokenizer!r:.80}"
        )
    return tokenizer


class Repetition(Component):
    """Repetition penalty in [-1, 0]."""

    name = "repetition"

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return ComponentScore(repetition_reward(content))
