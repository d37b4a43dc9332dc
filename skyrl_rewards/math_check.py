"""Symbolic answer checking with math-verify, the same in any thread, bounded in time.

math-verify's own timeout is ``signal.alarm``: it works only on a main thread
and raises ``ValueError`` anywhere else (SPEC, "Pitfalls"). Here math-verify
always runs with its signal timeouts off, so a call gives the same answer on
the main thread, in a worker thread, in a subprocess and in a Ray actor. Time is
bounded another way, chosen by ``guard``:

- ``"subprocess"`` (default): the check runs in a long-lived child process
  (:mod:`skyrl_rewards.math_child`); past ``timeout_s`` the child is killed and
  replaced, and the call returns :attr:`MathStatus.TIMEOUT`.
- ``"inline"``: the check runs in this thread with no bound. Only for callers
  that enforce a hard deadline themselves (the reward pool kills a worker stuck
  past its limit).

Before anything is parsed, answers longer than :data:`MAX_MATH_CHARS`,
nested deeper than :data:`MAX_MATH_NESTING`, or holding a numeric power
tower, an exponent of a million or more, or the factorial of a large number
are refused (:attr:`MathStatus.TOO_COMPLEX`), and pairs that timed out before are answered
as timeouts at once. Nothing here prints, logs or ``str()``s a parsed object.
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
    if _too_complex(gold) or _too_complex(student):
        return MathStatus.TOO_COMPLEX
    key = (gold, student)
    if _TIMED_OUT.contains(key):
        return MathStatus.TIMEOUT
    if (guard or default_guard()) == "inline":
        return MathStatus.EQUAL if verify_inline(gold, student) else MathStatus.NOT_EQUAL
    outcome = _CHILDREN.check(gold, student, timeout_s)
    if outcome is MathStatus.TIMEOUT:
        _TIMED_OUT.add(key)
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


_EXPLOSIVE = re.compile(
    r"\d\s*\^\s*\{?\s*\d+\s*\^"  # numeric power tower: 9^{9^{9}}, 9^9^9
    r"|\^\s*\{?\s*\d{6,}"  # exponent of a million or more
    r"|\d{4,}\s*\}?\s*\)?\s*!"  # factorial of 1000 or more
    r"|\^\s*\{?\s*\d{2,}\s*\}?\s*\)\s*!"  # factorial of a power: (10^{100})!
    r"|!\s*\)\s*!"  # factorial of a factorial: (999!)!
)


def _too_complex(text: str) -> bool:
    """Refuse what is too long, too deep, or a known way to make SymPy compute a giant number."""
    if len(text) > MAX_MATH_CHARS:
        return True
    if _EXPLOSIVE.search(text):
        return True
    depth = deepest = 0
    for char in text:
        if char in "{([":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "})]":
            depth = max(0, depth - 1)
    return deepest > MAX_MATH_NESTING


class _RecentSet:
    """A thread-safe bounded set that forgets its oldest entries."""

    def __init__(self, max_size: int) -> None:
        self._items: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._max_size = max_size
        self._lock = threading.Lock()

    def contains(self, key: tuple[str, str]) -> bool:
        with self._lock:
            return key in self._items

    def add(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._items[key] = None
            self._items.move_to_end(key)
            while len(self._items) > self._max_size:
                self._items.popitem(last=False)


class _Child:
    """One long-lived ``python -m skyrl_rewards.math_child`` process."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "skyrl_rewards.math_child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
        )
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], CHILD_START_TIMEOUT_S)
        if not ready or self._proc.stdout.readline().strip() != "ready":
            self.kill()
            raise RuntimeError("math-verify child process did not start; is math-verify installed?")

    def alive(self) -> bool:
        return self._proc.poll() is None

    def check(self, gold: str, student: str, timeout_s: float) -> MathStatus | None:
        """The child's answer, or ``None`` when it did not answer in time (then it is dead)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(json.dumps([gold, student]) + "\n")
            self._proc.stdin.flush()
            ready, _, _ = select.select([self._proc.stdout], [], [], timeout_s)
            line = self._proc.stdout.readline() if ready else ""
        except (OSError, ValueError):
            line = ""
        if not line:
            self.kill()
            return None
        return MathStatus.EQUAL if line.strip() == "1" else MathStatus.NOT_EQUAL

    def kill(self) -> None:
        self._proc.kill()
        self._proc.wait()


class _ChildPool:
    """Idle children shared by all threads of this process; a child serves one call at a time."""

    def __init__(self) -> None:
        self._idle: list[_Child] = []
        self._lock = threading.Lock()

    def check(self, gold: str, student: str, timeout_s: float) -> MathStatus:
        child = self._take()
        outcome = child.check(gold, student, timeout_s)
        if outcome is None:
            return MathStatus.TIMEOUT
        with self._lock:
            self._idle.append(child)
        return outcome

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


_CHILDREN = _ChildPool()
atexit.register(_CHILDREN.close)
_TIMED_OUT = _RecentSet(max_size=10_000)
