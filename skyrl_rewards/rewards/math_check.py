"""Symbolic answer checking with math-verify, the same in any thread, bounded in CPU time.

math-verify's own timeout is ``signal.alarm``: it works only on a main thread
and raises ``ValueError`` anywhere else (SPEC, "Pitfalls"). Here math-verify
always runs with its signal timeouts off, so a call gives the same answer on
the main thread, in a worker thread, in a subprocess and in a Ray actor. Time is
bounded another way, chosen by ``guard``:

- ``"subprocess"`` (default): the check runs in a long-lived child process
  (:mod:`skyrl_rewards.rewards.math_child`, isolated from the working
  directory, math-verify and SymPy only). The limit ``timeout_s`` is on the
  child's own CPU time for this check (read from ``/proc/<pid>/stat``), not on
  wall time: waiting for a free child, or for a CPU on a busy machine, does not
  count, so the same input gives the same outcome on an idle and on a loaded
  machine. Past it the child is killed and the call returns
  :attr:`MathStatus.TIMEOUT`; a spare child, started in the background while
  the check ran, takes the next check at once. Two wall-clock bounds are
  only safety nets, and a timeout they give is not remembered: a child whose
  CPU time has not moved for :data:`STARVED_S` (stopped, or starved), and
  :func:`wall_bound_s` in all (at least five minutes).
- ``"inline"``: the check runs in this thread with no bound. Only for callers
  that enforce a hard deadline themselves.

Before anything is parsed, answers nested deeper than :data:`MAX_MATH_NESTING`,
or holding a numeric exponent that is itself a power or product, an exponent of
a million or more, or the factorial of a large number or of a power or product,
are refused (:attr:`MathStatus.TOO_COMPLEX`). Length alone is not a reason
(long correct answers exist, and math-verify judges them in milliseconds): only
past :data:`MAX_MATH_CHARS`, far above any real answer, to bound memory. A pair
that timed out is answered as a timeout at once when asked again with no larger
limit. At most :data:`MAX_CHILDREN` children run at once; a child that cannot
start or dies mid-check gives :attr:`MathStatus.CRASHED`. Nothing here prints,
logs or ``str()``s a parsed object.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Literal

from skyrl_rewards.rewards import math_child
from skyrl_rewards.rewards.math_child import verify_inline

MAX_MATH_CHARS = 50_000
"""Answers longer than this (either side) are not parsed symbolically (memory; real answers are a few KB)."""

MAX_MATH_NESTING = 40
"""Answers with deeper ``{``/``(``/``[`` nesting are not parsed symbolically."""

DEFAULT_TIMEOUT_S = 3.0
"""Default limit of one guarded check, in seconds of the check's own CPU time."""

MAX_CHILDREN = max(2, os.cpu_count() or 2)
"""Children alive at once in one process; more concurrent callers wait for a free one."""

CHILD_START_TIMEOUT_S = 120.0
"""How long a new child may take to import math-verify (slow on a loaded machine)."""

WALL_SAFETY_FACTOR = 100.0
WALL_SAFETY_MIN_S = 300.0
STARVED_S = 30.0
"""A child whose CPU time does not move for this long (wall) is given up on."""
CHILD_WAIT_S = 600.0
"""How long a call waits for a free child before giving up (status timeout, not remembered)."""

_POLL_S = 0.02
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

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


def wall_bound_s(timeout_s: float) -> float:
    """The wall-clock safety net of a guarded check with a CPU limit of ``timeout_s``.

    >>> wall_bound_s(3.0)
    300.0
    """
    return max(WALL_SAFETY_MIN_S, WALL_SAFETY_FACTOR * timeout_s)


def check_equal(
    gold: str,
    student: str,
    *,
    guard: MathGuard | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> MathStatus:
    """Whether ``student`` is mathematically equal to ``gold`` (gold first, as math-verify wants).

    Never raises for what ``student`` holds. ``guard`` defaults to
    :func:`default_guard`; ``timeout_s`` is CPU seconds of the check itself.

    >>> check_equal("$\\\\frac{1}{2}$", "0.5")
    <MathStatus.EQUAL: 'equal'>
    """
    if too_complex(gold) or too_complex(student):
        return MathStatus.TOO_COMPLEX
    if (guard or default_guard()) == "inline":
        return MathStatus.EQUAL if verify_inline(gold, student) else MathStatus.NOT_EQUAL
    cap = getattr(_FIRST_PASS, "cap", None)
    limit = timeout_s if cap is None else min(cap.limit_s, timeout_s)
    key = _pair_key(gold, student)
    outcome = MathStatus.TIMEOUT
    if not _TIMED_OUT.timed_out(key, limit):
        outcome, remember = _CHILDREN.check(gold, student, limit)
        if outcome is MathStatus.TIMEOUT and remember:
            _TIMED_OUT.add(key, limit)
    if outcome is MathStatus.TIMEOUT and limit < timeout_s:
        cap.deferred = True  # type: ignore[union-attr]
    return outcome


class FirstPass:
    """State of a :func:`first_pass` block: whether a check hit the block's cap."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.deferred = False
        """True when a check ran past ``limit_s`` but had a larger limit of its own."""


@contextlib.contextmanager
def first_pass(limit_s: float) -> Iterator[FirstPass]:
    """Cap every guarded check in this thread at ``limit_s`` CPU seconds for the block.

    A check that runs past the cap, but whose own limit is larger, returns
    TIMEOUT and sets :attr:`FirstPass.deferred`: the caller should throw that
    result away and score the input again later, outside the block, with its
    full limit. The reward pool does this so that ordinary items never wait
    behind a slow one. Inline checks are not capped.

    >>> with first_pass(0.5) as state:
    ...     check_equal("$1$", "1")
    <MathStatus.EQUAL: 'equal'>
    >>> state.deferred
    False
    """
    state = FirstPass(limit_s)
    previous = getattr(_FIRST_PASS, "cap", None)
    _FIRST_PASS.cap = state
    try:
        yield state
    finally:
        _FIRST_PASS.cap = previous


def _pair_key(gold: str, student: str) -> bytes:
    """A fixed-size key for a pair (answers may be tens of KB; the record holds thousands)."""
    digest = hashlib.blake2b(digest_size=16)
    for text in (gold, student):
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.digest()


_BIG_FACTORIAL = re.compile(r"\d{4,}\s*!")
_BARE_TOWER = re.compile(r"\d\s*\^\s*\d+\s*\^")
_NUMERIC_OPERAND = re.compile(r"^[\d\s.+\-*/^(){}]*$")
_POWER_OR_PRODUCT = re.compile(r"[\^*]")
_LONG_NUMBER = re.compile(r"\d{6,}")
_PRODUCT_WORDS = re.compile(r"\\(?:cdot|times)")
_BRACKETS = {"{": "}", "(": ")"}


def too_complex(text: str) -> bool:
    """Whether ``text`` is past the memory cap, too deep, or a known way to make SymPy build a giant number.

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
    """A thread-safe bounded record of pairs (by digest) that timed out, with the limit they had."""

    def __init__(self, max_size: int) -> None:
        self._limits: OrderedDict[bytes, float] = OrderedDict()
        self._max_size = max_size
        self._lock = threading.Lock()

    def timed_out(self, key: bytes, timeout_s: float) -> bool:
        """True when ``key`` timed out before under a limit of at least ``timeout_s``."""
        with self._lock:
            return self._limits.get(key, 0.0) >= timeout_s

    def add(self, key: bytes, timeout_s: float) -> None:
        with self._lock:
            self._limits[key] = max(timeout_s, self._limits.get(key, 0.0))
            self._limits.move_to_end(key)
            while len(self._limits) > self._max_size:
                self._limits.popitem(last=False)


class _ChildFailed(Exception):
    """The child process could not start, died, or stopped answering."""


def child_command() -> list[str]:
    """The command that starts a math child: isolated, with this process's ``sys.path``.

    Isolated mode (``-I``) keeps the working directory, the script's directory,
    ``PYTHONPATH`` and user site off the child's ``sys.path``; the child then
    takes this process's ``sys.path`` minus ``""`` and the working directory
    (which keeps user-site and ``PYTHONPATH`` installs working).
    """
    cwd = os.path.realpath(os.getcwd())
    paths = [p for p in sys.path if p and os.path.realpath(p) != cwd]
    return [sys.executable, "-I", str(Path(math_child.__file__)), json.dumps(paths)]


def _cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of process ``pid`` so far; ``None`` without ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class _Child:
    """One long-lived math child process (see :mod:`skyrl_rewards.rewards.math_child`)."""

    def __init__(self) -> None:
        try:
            self._proc = subprocess.Popen(
                child_command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                encoding="utf-8",
                errors="surrogatepass",
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

    def check(self, gold: str, student: str, timeout_s: float) -> tuple[MathStatus, bool]:
        """The child's answer, and whether a TIMEOUT was decided on CPU time (not the safety net).

        The child is killed on a timeout. Raises :class:`_ChildFailed` when the
        child died without answering.
        """
        assert self._proc.stdin is not None and self._proc.stdout is not None
        pid = self._proc.pid
        start_cpu = _cpu_seconds(pid)
        start_wall = last_move = time.monotonic()
        last_cpu = start_cpu
        wall_limit = timeout_s if start_cpu is None else wall_bound_s(timeout_s)
        try:
            self._proc.stdin.write(json.dumps([gold, student]) + "\n")
            self._proc.stdin.flush()
            while True:
                ready, _, _ = select.select([self._proc.stdout], [], [], _POLL_S)
                if ready:
                    break
                now = time.monotonic()
                used = None if start_cpu is None else _cpu_seconds(pid)
                if start_cpu is not None and used is not None:
                    if used - start_cpu > timeout_s:
                        self.kill()
                        return MathStatus.TIMEOUT, True
                    if used != last_cpu:
                        last_cpu, last_move = used, now
                    elif now - last_move > STARVED_S:
                        self.kill()
                        return MathStatus.TIMEOUT, False
                if now - start_wall > wall_limit:
                    self.kill()
                    return MathStatus.TIMEOUT, start_cpu is None
            line = self._proc.stdout.readline()
        except (OSError, ValueError) as error:
            self.kill()
            raise _ChildFailed(str(error)) from error
        if not line:
            self.kill()
            raise _ChildFailed("died mid-check")
        return (MathStatus.EQUAL if line.strip() == "1" else MathStatus.NOT_EQUAL), False

    def kill(self) -> None:
        self._proc.kill()
        self._proc.wait()


class _ChildPool:
    """Children shared by the threads of this process: one call per child, at most ``size`` busy.

    A spare child is kept started in the background (one beyond those in
    use), so a child killed on a timeout is replaced at once and the next call
    does not pay for a start (about 0.45 s of CPU).
    """

    def __init__(self, size: int) -> None:
        self._idle: list[_Child] = []
        self._lock = threading.Lock()
        self._spare_ready = threading.Condition(self._lock)
        self._starting = 0
        self._size = size
        self._slots = threading.BoundedSemaphore(size)

    def check(self, gold: str, student: str, timeout_s: float) -> tuple[MathStatus, bool]:
        """Check on an idle (or new) child; a child that dies is replaced once, then CRASHED.

        The second value says whether a TIMEOUT may be remembered (it was
        decided on CPU time). The wait for a free child does not count against
        ``timeout_s``; past :data:`CHILD_WAIT_S` it gives up (TIMEOUT, not remembered).
        """
        if not self._slots.acquire(timeout=CHILD_WAIT_S):
            return MathStatus.TIMEOUT, False
        try:
            for _ in range(2):
                try:
                    child = self._take()
                    outcome, by_cpu = child.check(gold, student, timeout_s)
                except _ChildFailed:
                    continue
                if outcome is not MathStatus.TIMEOUT:  # a timed-out child is dead
                    self._put(child)
                return outcome, by_cpu
            return MathStatus.CRASHED, False
        finally:
            self._slots.release()

    def _take(self) -> _Child:
        """An idle child, else one a spare start is about to deliver, else a new one.

        When no idle child is left behind, a spare starts in the background, so
        that a child killed on a timeout is replaced at once.
        """
        child = None
        with self._lock:
            while child is None:
                while self._idle and child is None:
                    candidate = self._idle.pop()
                    if candidate.alive():
                        child = candidate
                if child is not None or not self._starting:
                    break
                self._spare_ready.wait(CHILD_START_TIMEOUT_S)
            spare_needed = not self._idle and not self._starting
        if spare_needed:
            self._start_spare()
        return child if child is not None else _Child()

    def _put(self, child: _Child) -> None:
        with self._lock:
            if len(self._idle) < self._size:
                self._idle.append(child)
                self._spare_ready.notify()
                return
        child.kill()

    def _start_spare(self) -> None:
        with self._lock:
            self._starting += 1

        def start() -> None:
            try:
                child = _Child()
            except _ChildFailed:
                child = None  # the next call starts one itself and reports the failure
            with self._lock:
                self._starting -= 1
                if child is not None and len(self._idle) < self._size:
                    self._idle.append(child)
                    child = None
                self._spare_ready.notify_all()
            if child is not None:
                child.kill()

        threading.Thread(target=start, name="math-child-spare", daemon=True).start()

    def close(self) -> None:
        """Stop every idle child (children in use stop when their call ends)."""
        with self._lock:
            children, self._idle = self._idle, []
        for child in children:
            child.kill()


_CHILDREN = _ChildPool(MAX_CHILDREN)
atexit.register(_CHILDREN.close)
_TIMED_OUT = _TimedOutPairs(max_size=10_000)
_FIRST_PASS = threading.local()
