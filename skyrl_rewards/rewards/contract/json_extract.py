"""Finding and parsing the JSON a model wrote, safely.

The parsers here get at most :data:`MAX_JSON_CHARS` characters, turn every
failure into ``None``, and accept only a list or dict free of NaN/inf.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import json_repair

from skyrl_rewards.rewards.contract.text import cap

MAX_JSON_CHARS = 100_000
"""Longer JSON candidates are cut before ``json.loads`` (linear) sees them."""

MAX_REPAIR_CHARS = 4_000
"""json-repair runs only on candidates up to this length (it is quadratic on some inputs)."""

MAX_SEARCH_CHARS = 50_000
"""Longer model texts are cut before a block search runs (trusted ground truth is not cut)."""

_JSON_BLOCK = re.compile(r"```json(.*?)```", re.DOTALL)
_ANY_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)


def json_block(text: str, *, max_chars: int | None = MAX_SEARCH_CHARS) -> str | None:
    """The stripped body of the first ```` ```json ... ``` ```` block, or ``None``.

    ``text`` is cut to ``max_chars`` first (``None``: no cut, for trusted
    ground truth; the lazy search is linear either way).

    >>> json_block('see ```json [1, 2] ``` here')
    '[1, 2]'
    """
    text = cap(text, max_chars) if max_chars is not None else text
    match = _JSON_BLOCK.search(text)
    return match.group(1).strip() if match else None


def last_json_block(text: str, *, max_chars: int | None = MAX_SEARCH_CHARS) -> str | None:
    """The stripped body of the last ```` ```json ... ``` ```` block, or ``None`` (``max_chars`` as above).

    Blocks are found left to right without overlap, as ``re.findall`` finds
    them; the search is linear.

    >>> last_json_block('```json [1] ``` then ```json [2] ```')
    '[2]'
    """
    text = cap(text, max_chars) if max_chars is not None else text
    last = None
    for match in _JSON_BLOCK.finditer(text):
        last = match
    return last.group(1).strip() if last is not None else None


def any_block(text: str, *, max_chars: int | None = MAX_SEARCH_CHARS) -> str | None:
    """The stripped body of the first ```` ``` ... ``` ```` block, or ``None`` (``max_chars`` as above)."""
    text = cap(text, max_chars) if max_chars is not None else text
    match = _ANY_BLOCK.search(text)
    return match.group(1).strip() if match else None


def parse_json(
    text: str, *, repair: bool = True, max_chars: int | None = MAX_JSON_CHARS
) -> list[Any] | dict[str, Any] | None:
    """``text`` parsed as JSON (then, if allowed, with json-repair); ``None`` unless a finite list/dict.

    ``text`` is cut to ``max_chars`` first (``None``: no cut, for trusted
    ground truth); json-repair only sees candidates up to
    :data:`MAX_REPAIR_CHARS`.

    >>> parse_json('[{"a": 1},]')
    [{'a': 1}]
    """
    if not isinstance(text, str) or not text:
        return None
    if max_chars is not None:
        text = cap(text, max_chars)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError, or an integer past Python's digit limit
        data = _repair(text) if repair and len(text) <= MAX_REPAIR_CHARS else None
    if isinstance(data, (list, dict)) and _finite(data):
        return data
    return None


def _repair(text: str) -> Any:
    try:
        return json_repair.loads(text)
    except (RecursionError, TypeError, ValueError, IndexError, KeyError, AttributeError):
        return None


def _finite(data: Any, depth: int = 0) -> bool:
    if depth > 64:
        return False
    if isinstance(data, float):
        return math.isfinite(data)
    if isinstance(data, list):
        return all(_finite(item, depth + 1) for item in data)
    if isinstance(data, dict):
        return all(_finite(item, depth + 1) for item in data.values())
    return True
