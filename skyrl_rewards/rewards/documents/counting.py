"""Counting reward: the number a completion states, against the ground-truth count.

The stated number is the **last** number of the completion's answer span:
digits (``7``, ``3,000``, ``2.5``, ``-1``) or English number words (``zero``
to ``nineteen``, the tens, ``hundred``, ``thousand``, ``million``, combined as
in ``twenty-one`` or ``one hundred and five``; ``3 thousand`` too). The
ground truth is the solution's answer span, a non-negative integer. The
reward is 1.0 when the two are equal (or within a tolerance), else 0.0.

What the model wrote never raises: no number in the answer span scores 0.0
with status ``unparseable``. A ground truth that is not an integer raises
``ValueError`` naming ``solution``. docs/rewards.md compares this with the
counting rewards of R1-V, AReaL and NeMo-Gym.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Mapping
from fractions import Fraction
from typing import Any

from skyrl_rewards.rewards.contract.component_base import (
    Component,
    answer_work_key,
    sample_solution,
)
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.contract.text import answer_span

MAX_NUMBER_CHARS = 64
"""A digit token longer than this reads as a number that equals no count (never parsed)."""

Number = Fraction | float
"""A stated number: exact (a :class:`~fractions.Fraction`), or ``math.inf`` for an absurdly long one."""

_UNITS = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
}
_TEENS = {
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
}
_TENS = {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
_SCALES = {"thousand": 1_000, "million": 1_000_000}

# A number: thousands groups ("3,000") or plain digits, an optional decimal part, and a
# minus sign only where it cannot be a hyphen ("3-4" is 3 and 4). Words: runs of letters.
_TOKEN = re.compile(
    r"(?P<number>(?:(?<![\w.-])-)?(?<![0-9])"
    r"(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?)"
    r"|(?P<word>[^\W\d_]+)"
)
_JOINER = re.compile(r"\s*-?\s*")
"""What may sit between two parts of one number: spaces, or one hyphen (``twenty-one``)."""

_INTEGER = re.compile(r"[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+")


def count_reward(
    content: str, sol: Any, *, tolerance: float = 0.0, relative_tolerance: float = 0.0
) -> float:
    """1.0 when the last number of ``content``'s answer span equals ``sol``'s count, else 0.0.

    ``sol``'s answer span (or ``sol`` itself, an ``int``) is a non-negative
    integer; otherwise ``ValueError`` naming ``solution``. With
    ``tolerance`` (absolute) and/or ``relative_tolerance`` (a fraction of the
    true count), a stated number within either bound also scores 1.0.

    >>> count_reward("<think>2 red, 1 blue</think><answer>There are three.</answer>", "3")
    1.0
    """
    return count_score(
        content, sol, tolerance=tolerance, relative_tolerance=relative_tolerance
    ).value


def count_score(
    content: str, sol: Any, *, tolerance: float = 0.0, relative_tolerance: float = 0.0
) -> ComponentScore:
    """:func:`count_reward` with its outcome: ``unparseable`` when the answer states no number."""
    truth = ground_truth_count(sol)
    stated = stated_number(content)
    if stated is None:
        return ComponentScore(0.0, Status.UNPARSEABLE, "no number in the answer")
    if math.isinf(stated):
        return ComponentScore(0.0)
    error = abs(stated - truth)
    exact_bound = Fraction(str(tolerance))
    relative_bound = Fraction(str(relative_tolerance)) * truth
    return ComponentScore(1.0 if error <= max(exact_bound, relative_bound) else 0.0)


def ground_truth_count(sol: Any) -> int:
    """The ground-truth count: ``sol``'s answer span as an integer (``3`` or ``3,000``), or an ``int``.

    Raises ``ValueError`` naming ``solution`` for anything else, or a
    negative count.

    >>> ground_truth_count("<answer> 1,200 </answer>")
    1200
    """
    if isinstance(sol, bool) or not isinstance(sol, (str, int)):
        raise ValueError(f"solution: expected a count, got {type(sol).__name__}")
    if isinstance(sol, int):
        count = sol
    else:
        span = answer_span(sol)
        if len(span) > MAX_NUMBER_CHARS or not _INTEGER.fullmatch(span):
            raise ValueError(f"solution: expected an integer count, got {span!r:.80}")
        count = int(span.replace(",", ""))
    if count < 0:
        raise ValueError(f"solution: a count cannot be negative, got {count}")
    return count


def check_tolerance(name: str, value: Any) -> float:
    """``value`` as a float when it is a finite number >= 0; else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}: expected a number >= 0, got {value!r:.80}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
    return float(value)


def stated_number(text: str) -> Number | None:
    """The last number of ``text``'s answer span, or ``None`` when it holds none. Never raises.

    Digits and English number words (see the module docstring). A digit
    token longer than :data:`MAX_NUMBER_CHARS` reads as ``math.inf``.

    >>> stated_number("<answer>twenty-one, not 20</answer>")
    Fraction(20, 1)
    >>> stated_number("<answer>I see one hundred and five</answer>")
    Fraction(105, 1)
    """
    numbers = _numbers(answer_span(text) if isinstance(text, str) else "")
    return numbers[-1] if numbers else None


class _Phrase:
    """One number being read: finished scale groups plus the group below 1000."""

    def __init__(self, value: Number, kind: str) -> None:
        self.total: Number = Fraction(0)
        self.group: Number = value
        self.kind = kind  # of the last part read: digits, zero, unit, teen, tens, hundred, scale
        self.scale: int | None = None
        if kind == "scale":
            self.total, self.group, self.scale = value, Fraction(0), int(value)

    @property
    def value(self) -> Number:
        return self.total + self.group

    def extend(self, kind: str, value: int, *, after_and: bool) -> bool:
        """Add the next number word when it continues this number; False when it starts another."""
        if after_and and kind not in ("unit", "teen", "tens"):
            return False
        if kind == "unit" and self.kind in ("tens", "hundred", "scale"):
            self.group += value
        elif kind in ("teen", "tens") and self.kind in ("hundred", "scale"):
            self.group += value
        elif kind == "hundred" and self.kind in ("digits", "unit", "teen") and self.group < 100:
            self.group *= 100
        elif (
            kind == "scale"
            and self.kind not in ("zero", "scale")
            and (self.scale is None or value < self.scale)
        ):
            self.total += self.group * value
            self.group, self.scale = Fraction(0), value
        else:
            return False
        self.kind = kind
        return True


def _word(word: str) -> tuple[str, int] | None:
    if word in _UNITS:
        return ("zero" if word == "zero" else "unit"), _UNITS[word]
    if word in _TEENS:
        return "teen", _TEENS[word]
    if word in _TENS:
        return "tens", _TENS[word]
    if word == "hundred":
        return "hundred", 100
    if word in _SCALES:
        return "scale", _SCALES[word]
    return None


def _digits(token: str) -> Number:
    if len(token) > MAX_NUMBER_CHARS:
        return math.inf
    return Fraction(token.replace(",", ""))


def _numbers(span: str) -> list[Number]:
    """Every number of ``span``, in order (see :func:`stated_number`)."""
    found: list[Number] = []
    phrase: _Phrase | None = None
    after_and = False
    end = 0
    lowered = span.lower()
    for match in _TOKEN.finditer(lowered):
        joined = _JOINER.fullmatch(lowered, end, match.start()) is not None
        end = match.end()
        if phrase is not None and not joined:
            found.append(phrase.value)
            phrase, after_and = None, False
        if match.group("number") is not None:
            if phrase is not None:
                found.append(phrase.value)
            phrase, after_and = _Phrase(_digits(match.group("number")), "digits"), False
            continue
        word = match.group("word")
        if word == "and" and phrase is not None and phrase.kind in ("hundred", "scale"):
            after_and = True  # "one hundred and five": the "and" joins only if a number follows
            continue
        part = _word(word)
        if part is None:
            if phrase is not None:
                found.append(phrase.value)
            phrase, after_and = None, False
            continue
        kind, value = part
        if phrase is None or not phrase.extend(kind, value, after_and=after_and):
            if phrase is not None:
                found.append(phrase.value)
            phrase = _Phrase(Fraction(value), kind)
        after_and = False
    if phrase is not None:
        found.append(phrase.value)
    return found


class Count(Component):
    """Counting: 1.0 when the last number of the answer span is the row's count (see counting).

    ``tolerance`` (absolute) and ``relative_tolerance`` (a fraction of the
    count) widen "equal"; both default to 0 (exact).
    """

    name = "count"

    def __init__(self, tolerance: float = 0.0, relative_tolerance: float = 0.0) -> None:
        self.tolerance = check_tolerance("tolerance", tolerance)
        self.relative_tolerance = check_tolerance("relative_tolerance", relative_tolerance)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return count_score(
            content,
            sample_solution(sample),
            tolerance=self.tolerance,
            relative_tolerance=self.relative_tolerance,
        )

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        return answer_work_key(self.name, sample)
