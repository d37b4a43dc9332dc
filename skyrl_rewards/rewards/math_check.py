"""Symbolic answer checking with math-verify, the same in any thread, bounded in time.

math-verify's own timeout is ``signal.alarm``: it works only on a main thread
and raises ``ValueError`` anywhere else (SPEC, "Pitfalls"). Here math-verify
always runs with its signal timeouts off, so a call gives the same answer on
the main thread, in a worker thread, in a subprocess and in a Ray actor. Time is
bounded another way, chosen by ``guard``:

- ``"subprocess"`` (default): the check runs in a long-lived child process
  (:mod:`skyrl_rewards.rewards.math_child`); past ``timeout_s`` the child is killed and
  replaced, and the call returns :attr:`MathStatus.TIMEOUT`.
- ``"inline"``: the check runs in this thread with no bound. Only for callers
  that enforce a hard deadline themselves (the reward pool kills a worker stuck
  past its limit).

Before anything is parsed, answers longer than :data:`MAX_MATH_CHARS`,
nested deeper than :data:`MAX_MATH_NESTING`, or holding a numeric exponent
that is itself a power or product, an exponent of a million or more, or the
factorial of a large number or of a power or product, are refused
(:attr:`MathStatus.TOO_COMPLEX`). A pair that timed out is answered as a
timeout at once when asked again with no larger limit. At most
:data:`MAX_CHILDREN` children run at once; a child that cannot start or
dies mid-check gives :attr:`MathStatus.CRASHED`. Nothing here prints, logs or
``str()``s a parsed object.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import select
import subprocess
import sys
import threading
from collections import OrderedDict
from enum import Enum
from typing import Any, Literal

MAX_MATH_CHARS = 2_000
"""Answers longer than this (either side) are not parsed symbolically."""

MAX_MATH_NESTING = 40
"""Answers with deeper ``{``/``(``/``[`` nesting are not parsed symbolically."""

DEFAULT_TIMEOUT_S = 3.0
"""Default wall-clock limit of one guarded check."""

MAX_CHILDREN = max(2, os.cpu_count() or 2)
"""Children alive at once in one process; more concurrent callers wait for a free one."""

CHILD_START_TIMEOUT_S = 120.0
"""How long a new child may take to import math-verify (slow on a loaded machine)."""

MathGuard = Literal["subprocess", "inline"]
GUARD_ENV_VAR = "SKYRL_REWARDS_MATH_GUARD"
"""Environment variable that sets the default guard (``subprocess`` or ``inline``)."""


class MathStatus(str, Enum):
    """How a symbolic check ended."""

    EQUAL = "equal"
    NOT_EQUAL = "not_equal"
    TIMEOUT = "timeout"
    TOO_COMPLEX = "too_complex"
    CRASHED = "crashed"


def default_guard() -> MathGuard:
    """The guard named by ``SKYRL_REWARDS_MATH_GUARD``, else ``"subprocess"``."""
    value = os.environ.get(GUARD_ENV_VAR, "subprocess")
    if value not in ("subprocess", "inline"):
        raise ValueError(f"{GUARD_ENV_VAR}: expected 'subprocess' or 'inline', got {value!r}")
    return value  # type: ignore[return-value]


def check_equal(
    gold: str,
    student: str,
    *,
    guard: MathGuard | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> MathStatus:
    """Whether ``student`` is mathematically equal to ``gold`` (gold first, as math-verify wants).

    Never raises for what ``student`` holds. ``guard`` defaults to
    :func:`default_guard`.

    >>> check_equal("$\\\\frac{1}{2}$", "0.5")
    <MathStatus.EQUAL: 'equal'>
    """
    if too_complex(gold) or too_complex(student):
        return MathStatus.TOO_COMPLEX
    key = (gold, student)
    if _TIMED_OUT.timed_out(key, timeout_s):
        return MathStatus.TIMEOUT
    if (guard or default_guard()) == "inline":
        return MathStatus.EQUAL if verify_inline(gold, student) else MathStatus.NOT_EQUAL
    outcome = _CHILDREN.check(gold, student, timeout_s)
    if outcome is MathStatus.TIMEOUT:
        _TIMED_OUT.add(key, timeout_s)
    return outcome


def verify_inline(gold: str, student: str) -> bool:
    """math-verify's ``verify(parse(gold), parse(student))`` with signal timeouts off.

    Parses of ``gold`` are cached (a prompt group shares its ground truth).
    Errors inside math-verify count as "not equal".
    """
    from math_verify import parse, verify

    try:
        gold_parsed = _parse_gold(gold)
        student_parsed = parse(student, parsing_timeout=None)  # type: ignore[arg-type]
        if not gold_parsed or not student_parsed:
            return False
        return bool(verify(list(gold_parsed), student_parsed, timeout_seconds=None))
    except (ValueError, TypeError, ArithmeticError, RecursionError, AttributeError):
        return False


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> tuple[Any, ...]:
    from math_verify import parse

    return tuple(parse(gold, parsing_timeout=None))  # type: ignore[arg-type]


_BIG_FACTORIAL = re.compile(r"\d{4,}\s*!")
_BARE_TOWER = re.compile(r"\d\s*\^\s*\d+\s*\^")
_NUMERIC_OPERAND = re.compile(r"^[\d\s.+\-*/^(){}]*$")
_POWER_OR_PRODUCT = re.compile(r"[\^*]")
_LONG_NUMBER = re.compile(r"\d{6,}")
_PRODUCT_WORDS = re.compile(r"\\(?:cdot|times)")
_BRACKETS = {"{": "}", "(": ")"}


def too_complex(text: str) -> bool:
    """Whether ``text`` is too long, too deep, or a known way to make SymPy build a giant number.

    Refused: an exponent made only of numbers and operators that holds a power
    or product (``9^{9^9}``, ``9^{(9^9)}``, ``10^{99*99}``, ``9^9^9``) or a number of six
    digits or more; a factorial of a number of four digits or more, or of a
    bracketed group holding a power, product or factorial (``(10^{100})!``,
    ``(999!)!``, ``(99 \\cdot 99)!``). Symbolic exponents (``e^{-x^2}``) pass.
    """
    if len(text) > MAX_MATH_CHARS or _nesting(text) > MAX_MATH_NESTING:
        return True
    text = _PRODUCT_WORDS.sub("*", text)
    if _BIG_FACTORIAL.search(text) or _BARE_TOWER.search(text):
        return True
    for index, char in enumerate(text):
        if char == "^" and _explosive_exponent(_operand_after(text, index + 1)):
            return True
        if char == "!" and _explosive_factorial(_operand_before(text, index)):
            return True
    return False


def _nesting(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char in "{([":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "})]":
            depth = max(0, depth - 1)
    return deepest


def _explosive_exponent(operand: str) -> bool:
    if not _NUMERIC_OPERAND.match(operand):
        return False
    return bool(_POWER_OR_PRODUCT.search(operand) or _LONG_NUMBER.search(operand))


def _explosive_factorial(operand: str) -> bool:
    return len(operand) > 1 and operand[0] in "({" and bool(re.search(r"[\^*!]|\d{4,}", operand))


def _operand_after(text: str, start: int) -> str:
    """The bracketed group or run of digits that starts at ``start`` (after spaces)."""
    while start < len(text) and text[start].isspace():
        start += 1
    if start < len(text) and text[start] in _BRACKETS:
        end = _matching(text, start)
        return text[start:end]
    end = start
    while end < len(text) and text[end].isdigit():
        end += 1
    return text[start:end]


def _operand_before(text: str, end: int) -> str:
    """The bracketed group that ends just before ``end`` (after spaces), else ``""``."""
    while end > 0 and text[end - 1].isspace():
        end -= 1
    if end == 0 or text[end - 1] not in "})":
        return ""
    closing, opening = text[end - 1], "{" if text[end - 1] == "}" else "("
    depth = 0
    for index in range(end - 1, -1, -1):
        if text[index] == closing:
            depth += 1
        elif text[index] == opening:
            depth -= 1
            if depth == 0:
                return text[index:end]
    return ""


def _matching(text: str, start: int) -> int:
    """Index just past the bracket that closes ``text[start]`` (or the end of the text)."""
    opening, closing = text[start], _BRACKETS[text[start]]
    depth = 0
    for index in range(start, len(text)):
        if text[index] == opening:
            depth += 1
        elif text[index] == closing:
            depth -= 1
            if depth == 0:
                return index + 1
    return len(text)


class _TimedOutPairs:
    """A thread-safe bounded record of pairs that timed out, with the limit they had."""

    def __init__(self, max_size: int) -> None:
        self._limits: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._max_size = max_size
        self._lock = threading.Lock()

    def timed_out(self, key: tuple[str, str], timeout_s: float) -> bool:
        """True when ``key`` timed out before under a limit of at least ``timeout_s``."""
        with self._lock:
            return self._limits.get(key, 0.0) >= timeout_s

    def add(self, key: tuple[str, str], timeout_s: float) -> None:
        with self._lock:
            self._limits[key] = max(timeout_s, self._limits.get(key, 0.0))
            self._limits.move_to_end(key)
            while len(self._limits) > self._max_size:
                self._limits.popitem(last=False)


class _ChildFailed(Exception):
    """The child process could not start, died, or stopped answering."""


class _Child:
    """One long-lived ``python -m skyrl_rewards.rewards.math_child`` process."""

    def __init__(self) -> None:
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "skyrl_rewards.rewards.math_child"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                encoding="utf-8",
            )
        except OSError as error:
            raise _ChildFailed(f"cannot start: {error}") from error
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], CHILD_START_TIMEOUT_S)
        if not ready or self._proc.stdout.readline().strip() != "ready":
            self.kill()
            raise _ChildFailed("did not start; is math-verify installed?")

    def alive(self) -> bool:
        return self._proc.poll() is None

    def check(self, gold: str, student: str, timeout_s: float) -> MathStatus:
        """The child's answer; TIMEOUT (the child is then killed) past ``timeout_s``.

        Raises :class:`_ChildFailed` when the child died without answering.
        """
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(json.dumps([gold, student]) + "\n")
            self._proc.stdin.flush()
            ready, _, _ = select.select([self._proc.stdout], [], [], timeout_s)
            if not ready:
                self.kill()
                return MathStatus.TIMEOUT
            line = self._proc.stdout.readline()
        except (OSError, ValueError) as error:
            self.kill()
            raise _ChildFailed(str(error)) from error
        if not line:
            self.kill()
            raise _ChildFailed("died mid-check")
        return MathStatus.EQUAL if line.strip() == "1" else MathStatus.NOT_EQUAL

    def kill(self) -> None:
        self._proc.kill()
        self._proc.wait()


class _ChildPool:
    """Children shared by the threads of this process: one call per child, at most ``size`` alive."""

    def __init__(self, size: int) -> None:
        self._idle: list[_Child] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(size)

    def check(self, gold: str, student: str, timeout_s: float) -> MathStatus:
        """Check on an idle (or new) child; a child that dies is replaced once, then CRASHED."""
        with self._slots:
            for _ in range(2):
                try:
                    child = self._take()
                    outcome = child.check(gold, student, timeout_s)
                except _ChildFailed:
                    continue
                if outcome is not MathStatus.TIMEOUT:
                    with self._lock:
                        self._idle.append(child)
                return outcome
            return MathStatus.CRASHED

    def _take(self) -> _Child:
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.alive():
                    return child
        return _Child()

    def close(self) -> None:
        """Stop every idle child (children in use stop when their call ends)."""
        with self._lock:
            children, self._idle = self._idle, []
        for child in children:
            child.kill()


_CHILDREN = _ChildPool(MAX_CHILDREN)
atexit.register(_CHILDREN.close)
_TIMED_OUT = _TimedOutPairs(max_size=10_000)
