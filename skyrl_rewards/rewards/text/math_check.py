"""Symbolic answer checking with math-verify, the same in any thread, bounded in CPU time.

math-verify's own timeout is ``signal.alarm``: it works only on a main thread
and raises ``ValueError`` anywhere else (SPEC, "Pitfalls"). Here math-verify
always runs with its signal timeouts off, so a call gives the same answer on
the main thread, in a worker thread, in a subprocess and in a Ray actor. Time is
bounded another way, chosen by ``guard``:

- ``"subprocess"`` (default): the check runs in a long-lived child process,
  forked from this process's math fork server
  (:mod:`skyrl_rewards.rewards.text.math_child`: isolated from the working
  directory, math-verify and SymPy only, warmed up before it forks). The limit
  ``timeout_s`` is on the child's own CPU time for this check (read from
  ``/proc/<pid>/stat``), not on wall time: waiting for a free child, or for a
  CPU on a busy machine, does not count, so the same input gives the same
  outcome on an idle and on a loaded machine. Past it the child is killed and
  the call returns :attr:`MathStatus.TIMEOUT`; the next check forks a new
  child in milliseconds. CPU time itself grows on an oversubscribed machine,
  so a check that reaches its limit having waited for a CPU much of the time
  is given a margin before it counts (:func:`check_equal`). Two wall-clock
  bounds are only safety nets, and a timeout they give is not remembered: a
  child whose CPU time has not moved for :data:`STARVED_S` (stopped, or
  starved; also one that reads none of a request for that long), and
  :func:`wall_bound_s` in all (at least five minutes). Inside :func:`low_priority` the children run
  nicer, so that slow checks take only CPU time that nothing else wants; their
  outcome does not change, since the limit is on their own CPU time.
- ``"inline"``: the check runs in this thread with no bound. Only for callers
  that enforce a hard deadline themselves.

Before anything is parsed, answers nested deeper than :data:`MAX_MATH_NESTING`,
or holding a power of numbers with :data:`MAX_POWER_DIGITS` digits or more, or
the factorial of a large number (:data:`MAX_FACTORIAL_ARGUMENT`), are refused
(:attr:`MathStatus.TOO_COMPLEX`); a numeric exponent or factorial argument is
evaluated (bounded, in floating point) to tell ``(1.025)^{4 \\cdot 5}`` from
``10^{99 \\cdot 99 \\cdot 99}``. Length alone is not a reason
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
import math
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Literal

from skyrl_rewards.rewards.text import math_child
from skyrl_rewards.rewards.text.math_child import verify_inline

MAX_MATH_CHARS = 50_000
"""Answers longer than this (either side) are not parsed symbolically (memory; real answers are a few KB)."""

MAX_MATH_NESTING = 40
"""Answers with deeper ``{``/``(``/``[`` nesting are not parsed symbolically."""

DEFAULT_TIMEOUT_S = 3.0
"""Default limit of one guarded check, in seconds of the check's own CPU time."""

MAX_CHILDREN = max(2, os.cpu_count() or 2)
"""Children alive at once in one process; more concurrent callers wait for a free one."""

CHILD_START_TIMEOUT_S = 120.0
"""How long the fork server may take to import math-verify and warm up (slow on a loaded machine)."""
FORK_TIMEOUT_S = 30.0
"""How long the fork server may take to fork a child (milliseconds when it is healthy)."""

WALL_SAFETY_FACTOR = 100.0
WALL_SAFETY_MIN_S = 300.0
STARVED_S = 30.0
"""A child whose CPU time does not move for this long (wall) is given up on."""
CHILD_WAIT_S = 600.0
"""How long a call waits for a free child before giving up (status timeout, not remembered)."""

RECENT_CHECKS = 1000
"""Checks whose CPU time :func:`recent_check_cpu_s` remembers."""

CONTENDED_RATIO = 0.8
"""Below this CPU/wall ratio, a check that ran out of CPU time is taken to have waited for a CPU.

A check computes and nothing else (no reads, no writes until it answers), so
its CPU/wall ratio is about 1.0 when a CPU is free for it and drops as the
machine is oversubscribed: about 0.33 with two busy processes on its core.
"""
CONTENDED_MARGIN = 2.0
"""A check that reaches its limit under contention may use this many times the limit in all.

CPU time itself grows when a check shares its CPU with busy processes
(caches refilled after every switch): by up to 1.68x against the same
check on a quiet machine in the measurements of
``scripts/benchmarks/measure_math_timeout_load.py`` (docs/rewards.md,
"Time limits under load").
"""

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
    A guarded check that reaches its limit having waited for a CPU much of
    the time (its CPU/wall ratio so far under :data:`CONTENDED_RATIO`) is not
    stopped there but given :data:`CONTENDED_MARGIN` times the limit in all,
    once: CPU time grows on an oversubscribed machine, and an answer inside
    the limit must not time out for it. A :func:`first_pass` cap is not
    extended (the check is deferred instead).

    >>> check_equal("$\\\\frac{1}{2}$", "0.5")
    <MathStatus.EQUAL: 'equal'>
    """
    _THREAD.usage = None
    if too_complex(gold) or too_complex(student):
        return MathStatus.TOO_COMPLEX
    if (guard or default_guard()) == "inline":
        return MathStatus.EQUAL if verify_inline(gold, student) else MathStatus.NOT_EQUAL
    cap = getattr(_THREAD, "first_pass", None)
    limit = timeout_s if cap is None else min(cap.limit_s, timeout_s)
    key = _pair_key(gold, student)
    if _TIMED_OUT.timed_out(key, limit):
        outcome = MathStatus.TIMEOUT
    else:
        niceness = getattr(_THREAD, "niceness", 0)
        # a first pass's cap is not extended: a check past it is deferred instead
        contended_limit = limit * CONTENDED_MARGIN if limit >= timeout_s else limit
        attempt = _CHILDREN.check(gold, student, limit, contended_limit, niceness)
        _THREAD.usage = CheckUsage(attempt.cpu_s, attempt.wall_s, attempt.extended)
        outcome = attempt.outcome
        if outcome is MathStatus.TIMEOUT and attempt.on_limit:
            _TIMED_OUT.add(key, limit)
    if outcome is MathStatus.TIMEOUT and limit < timeout_s:
        cap.deferred = True  # type: ignore[union-attr]
    return outcome


@dataclass(frozen=True)
class CheckUsage:
    """What one guarded check cost: the child's CPU seconds and the wall seconds it took."""

    cpu_s: float | None
    """``None`` without ``/proc`` (the limit is then on wall time)."""
    wall_s: float
    extended: bool
    """True when the check ran past its limit while it waited for a CPU, and was given the margin."""


def last_check_usage() -> CheckUsage | None:
    """The cost of this thread's last :func:`check_equal` that ran in a child; else ``None``.

    ``None`` after an inline check, a refused answer, or a timeout answered
    from the record of pairs that timed out.

    >>> check_equal("$1$", "1")
    <MathStatus.EQUAL: 'equal'>
    >>> last_check_usage().extended
    False
    """
    return getattr(_THREAD, "usage", None)


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
    previous = getattr(_THREAD, "first_pass", None)
    _THREAD.first_pass = state
    try:
        yield state
    finally:
        _THREAD.first_pass = previous


@contextlib.contextmanager
def low_priority(niceness: int) -> Iterator[None]:
    """Run every guarded check in this thread in children ``niceness`` steps nicer (0 to 19).

    The limit stays on the check's own CPU time, so the outcome is the same;
    only when the CPU is contended does the check yield to other work (it is
    slower in wall time). The reward pool's slow lane uses this, so that
    checks deferred from a first pass never slow ordinary items down.

    >>> with low_priority(10):
    ...     check_equal("$1$", "1")
    <MathStatus.EQUAL: 'equal'>
    """
    if not 0 <= niceness <= 19:
        raise ValueError(f"niceness must be between 0 and 19, got {niceness!r}")
    previous = getattr(_THREAD, "niceness", 0)
    _THREAD.niceness = niceness
    try:
        yield
    finally:
        _THREAD.niceness = previous


def _pair_key(gold: str, student: str) -> bytes:
    """A fixed-size key for a pair (answers may be tens of KB; the record holds thousands)."""
    digest = hashlib.blake2b(digest_size=16)
    for text in (gold, student):
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.digest()


MAX_POWER_DIGITS = 100_000
"""A power of numbers is refused when its value would have this many digits or more.

Digits are ``|exponent| * max(1, log10|base|)``; a base that is not a plain
number (``x``, ``\\left(1.025\\right)``) counts as 10, so ``x^{99999}`` passes
and ``x^{100000}`` does not, as before; ``2^{2023}`` and ``(1.025)^{4 \\cdot 5}``
pass, ``10^{99 \\cdot 99 \\cdot 99}`` and ``(10^{99999})^{99999}`` do not.
"""

MAX_FACTORIAL_ARGUMENT = 1_000
"""A factorial of a number this large or larger is refused (``1000!`` has 2,568 digits)."""

_BIG_FACTORIAL = re.compile(r"\d{4,}\s*!")
_BARE_TOWER = re.compile(r"\d\s*\^\s*\d+\s*\^")
_NUMERIC_OPERAND = re.compile(r"^[\d\s.+\-*/^(){}]*$")
_NUMERIC_TOKEN = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+|[-+*/^(){}])")
_PRODUCT_WORDS = re.compile(r"\\(?:cdot|times)")
_BRACKETS = {"{": "}", "(": ")"}
_OPENING = {"}": "{", ")": "("}
MAX_OPERAND_CHARS = 1_000
"""Exponents, bases and factorial arguments longer than this are not evaluated (see too_complex)."""


def too_complex(text: str) -> bool:
    """Whether ``text`` is past the memory cap, too deep, or a known way to make SymPy build a giant number.

    Refused: a power of numbers whose value would have :data:`MAX_POWER_DIGITS`
    digits or more (``9^{9^9}``, ``9^{(9^9)}``, ``10^{99*99*99}``,
    ``10^{1000000}``), a bare tower ``9^9^9``; a factorial of a number of
    :data:`MAX_FACTORIAL_ARGUMENT` or more, written or computed (``5000!``,
    ``(10^{100})!``), or of a bracketed group that is not plain arithmetic and
    holds a power, product or factorial (``(999!)!``). A numeric exponent is
    evaluated, so worked answers such as ``(1.025)^{4 \\cdot 5}`` pass;
    symbolic exponents (``e^{-x^2}``) pass.
    """
    if len(text) > MAX_MATH_CHARS or _nesting(text) > MAX_MATH_NESTING:
        return True
    text = _PRODUCT_WORDS.sub("*", text)
    if _BIG_FACTORIAL.search(text) or _BARE_TOWER.search(text):
        return True
    if "^" not in text and "!" not in text:
        return False
    pairs = _bracket_pairs(text)
    for index, char in enumerate(text):
        if char == "^" and _explosive_power(text, index, pairs):
            return True
        if char == "!" and _explosive_factorial(text, index, pairs):
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


def _explosive_power(text: str, caret: int, pairs: dict[int, int]) -> bool:
    """Whether the power at ``text[caret] == "^"`` would have :data:`MAX_POWER_DIGITS` digits or more."""
    start, end = _operand_after(text, caret + 1, pairs)
    if end - start > MAX_OPERAND_CHARS:  # plain arithmetic this long is no small exponent
        return bool(_NUMERIC_OPERAND.match(text[start : start + MAX_OPERAND_CHARS]))
    operand = text[start:end]
    if operand and operand[0] in _BRACKETS and start not in pairs:  # unclosed: read to the end
        operand += _BRACKETS[operand[0]]
    exponent = _numeric_value(operand)
    if exponent is None:
        return False
    start, end = _base_before(text, caret, pairs)
    base = _numeric_value(text[start:end]) if end - start <= MAX_OPERAND_CHARS else None
    base_digits = math.log10(abs(base)) if base is not None and base != 0 else 1.0
    return abs(exponent) * max(1.0, base_digits) >= MAX_POWER_DIGITS


def _explosive_factorial(text: str, bang: int, pairs: dict[int, int]) -> bool:
    start, end = _group_before(text, bang, pairs)
    if end - start <= 1:
        return False
    operand = text[start : min(end, start + MAX_OPERAND_CHARS)]
    value = _numeric_value(operand) if end - start <= MAX_OPERAND_CHARS else None
    if value is not None:
        return abs(value) >= MAX_FACTORIAL_ARGUMENT
    return bool(re.search(r"[\^*!]|\d{4,}", operand))


def _bracket_pairs(text: str) -> dict[int, int]:
    """Index of each ``{``/``(`` to that of the bracket of its kind that closes it, and back."""
    open_at: dict[str, list[int]] = {"{": [], "(": []}
    pairs: dict[int, int] = {}
    for index, char in enumerate(text):
        if char in open_at:
            open_at[char].append(index)
        elif char in _OPENING:
            stack = open_at[_OPENING[char]]
            if stack:
                opening = stack.pop()
                pairs[opening], pairs[index] = index, opening
    return pairs


def _operand_after(text: str, start: int, pairs: dict[int, int]) -> tuple[int, int]:
    """Span of the bracketed group (to the end if unclosed) or run of digits at ``start`` (after spaces)."""
    while start < len(text) and text[start].isspace():
        start += 1
    if start < len(text) and text[start] in _BRACKETS:
        return start, pairs[start] + 1 if start in pairs else len(text)
    end = start
    while end < len(text) and text[end].isdigit():
        end += 1
    return start, end


def _group_before(text: str, end: int, pairs: dict[int, int]) -> tuple[int, int]:
    """Span of the bracketed group that ends just before ``end`` (after spaces); empty if none."""
    while end > 0 and text[end - 1].isspace():
        end -= 1
    if end == 0 or end - 1 not in pairs or text[end - 1] not in _OPENING:
        return end, end
    return pairs[end - 1], end


def _base_before(text: str, caret: int, pairs: dict[int, int]) -> tuple[int, int]:
    """Span of the bracketed group or run of digits (with its decimal point) that ends before ``caret``."""
    start, end = _group_before(text, caret, pairs)
    if end > start:
        return start, end
    while start > 0 and (text[start - 1].isdigit() or text[start - 1] == "."):
        start -= 1
    return start, end


def _numeric_value(operand: str) -> float | None:
    """``operand`` evaluated as plain arithmetic, ``inf`` past float range; ``None`` if not arithmetic.

    Numbers, ``+ - * / ^``, brackets and juxtaposition (a product); no names.
    Evaluated in floating point, so the cost is linear in the operand whatever
    the number it denotes.
    """
    if not operand or not _NUMERIC_OPERAND.match(operand) or not any(c.isdigit() for c in operand):
        return None
    tokens = _NUMERIC_TOKEN.findall(operand)
    if "".join(tokens) != "".join(operand.split()):
        return None
    parser = _Arithmetic(tokens)
    try:
        value = parser.sum()
    except (ValueError, ZeroDivisionError):
        return None
    except RecursionError:  # a tower too deep to evaluate is too deep for SymPy too
        return math.inf
    return value if parser.done() else None


class _Arithmetic:
    """A recursive-descent evaluator over the tokens of a numeric operand (depth bounded by nesting)."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.position = 0

    def done(self) -> bool:
        return self.position == len(self.tokens)

    def _peek(self) -> str:
        return self.tokens[self.position] if self.position < len(self.tokens) else ""

    def _take(self) -> str:
        token = self._peek()
        if not token:
            raise ValueError("unexpected end")
        self.position += 1
        return token

    def sum(self) -> float:
        value = self.product()
        while self._peek() in ("+", "-"):
            right = self.product() if self._take() == "+" else -self.product()
            value = _finite_or_inf(value + right)
        return value

    def product(self) -> float:
        value = self.unary()
        while self._peek() and self._peek() not in "+-)}":
            if self._peek() == "/":
                self._take()
                value = _finite_or_inf(value / self.unary())
            else:
                if self._peek() == "*":
                    self._take()
                value = _finite_or_inf(value * self.unary())
        return value

    def unary(self) -> float:
        sign = 1.0
        while self._peek() in ("+", "-"):
            sign = -sign if self._take() == "-" else sign
        return sign * self.power()

    def power(self) -> float:
        base = self.atom()
        if self._peek() != "^":
            return base
        self._take()
        exponent = self.unary()
        return _power(base, exponent)

    def atom(self) -> float:
        token = self._take()
        if token in _BRACKETS:
            value = self.sum()
            if self._take() != _BRACKETS[token]:
                raise ValueError("unbalanced bracket")
            return value
        if token[0].isdigit() or token[0] == ".":
            return float(token)
        raise ValueError(f"unexpected {token!r}")


def _finite_or_inf(value: float) -> float:
    return value if not math.isnan(value) else math.inf


def _power(base: float, exponent: float) -> float:
    """``|base| ** exponent`` with the sign of an odd integer power, ``inf`` past float range."""
    if math.isinf(base) or math.isinf(exponent):
        return math.inf
    if base == 0:
        if exponent < 0:
            raise ZeroDivisionError("0 to a negative power")
        return 0.0
    try:
        magnitude = abs(base) ** exponent
    except OverflowError:
        return math.inf
    odd = exponent.is_integer() and int(exponent) % 2 == 1
    return -magnitude if base < 0 and odd else magnitude


class _RecentCpu:
    """A thread-safe window of the CPU seconds of the last ``size`` checks that answered."""

    def __init__(self, size: int) -> None:
        self._times: deque[float] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self._times.append(seconds)

    def quantile(self, q: float) -> float:
        with self._lock:
            times = sorted(self._times)
        return times[min(len(times) - 1, int(q * len(times)))] if times else 0.0


def recent_check_cpu_s(q: float) -> float:
    """The ``q`` quantile of the CPU seconds of this process's last guarded checks that answered.

    Over the last :data:`RECENT_CHECKS` checks (timeouts and inline checks
    are not in it); 0.0 before the first. Times are in clock ticks
    (10 ms on Linux). The reward pool sets its first-pass cap from it.
    """
    return _CHECK_CPU.quantile(q)


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
    """The fork server or a child could not start, died, or stopped answering."""


@dataclass(frozen=True)
class _Attempt:
    """How one check in a child ended, and what it cost."""

    outcome: MathStatus
    on_limit: bool
    """For a TIMEOUT: decided on the limit (remembered), not by a safety net or a wait."""
    cpu_s: float | None
    """The child's CPU seconds for this check; ``None`` without ``/proc`` (or no child)."""
    wall_s: float
    extended: bool
    """The check reached its limit while it waited for a CPU, and went on with the margin."""


def server_command(socket_fd: int) -> list[str]:
    """The command that starts the math fork server on socket ``socket_fd``: isolated, with this ``sys.path``.

    Isolated mode (``-I``) keeps the working directory, the script's directory,
    ``PYTHONPATH`` and user site off the server's ``sys.path``; the server then
    takes this process's ``sys.path`` minus ``""`` and the working directory
    (which keeps user-site and ``PYTHONPATH`` installs working).
    """
    cwd = os.path.realpath(os.getcwd())
    paths = [p for p in sys.path if p and os.path.realpath(p) != cwd]
    return [sys.executable, "-I", str(Path(math_child.__file__)), json.dumps(paths), str(socket_fd)]


def _cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of process ``pid`` so far; ``None`` without ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def _read_line(sock: socket.socket, timeout_s: float) -> bytes:
    """One line from ``sock`` (without the newline); ``b""`` when it closed or stayed quiet."""
    sock.settimeout(timeout_s)
    data = b""
    try:
        while not data.endswith(b"\n"):
            part = sock.recv(64)
            if not part:
                return b""
            data += part
    except OSError:  # socket.timeout is an OSError
        return b""
    return data.strip()


class _Child:
    """One forked math child: its pid and the two ends of its pipes (see :mod:`math_child`)."""

    def __init__(self, pid: int, request_fd: int, answer_fd: int) -> None:
        self.pid = pid
        os.set_blocking(request_fd, False)  # a request past the pipe buffer never blocks a caller
        self._requests: int | None = request_fd
        self._answers = open(answer_fd, encoding="utf-8")
        self._pidfd: int | None = None
        if hasattr(os, "pidfd_open"):  # Linux: signals reach this process, never a reused pid
            try:
                self._pidfd = os.pidfd_open(pid)
            except OSError as error:
                self.kill()
                raise _ChildFailed(f"died at start: {error}") from error

    def alive(self) -> bool:
        if self._pidfd is not None:
            exited, _, _ = select.select([self._pidfd], [], [], 0)
            return not exited
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        return True

    def check(
        self, gold: str, student: str, timeout_s: float, contended_timeout_s: float
    ) -> _Attempt:
        """The child's answer and what it cost; the child is killed on a timeout.

        A check that reaches ``timeout_s`` of CPU time with a CPU/wall ratio
        under :data:`CONTENDED_RATIO` goes on up to ``contended_timeout_s``.
        Raises :class:`_ChildFailed` when the child died without answering.
        """
        start_cpu = _cpu_seconds(self.pid)
        start_wall = last_move = time.monotonic()
        last_cpu = start_cpu
        wall_limit = timeout_s if start_cpu is None else wall_bound_s(contended_timeout_s)
        extended = False

        def ended(outcome: MathStatus, on_limit: bool = False) -> _Attempt:
            used = None if start_cpu is None else _cpu_seconds(self.pid)
            cpu_s = None if start_cpu is None or used is None else used - start_cpu
            return _Attempt(outcome, on_limit, cpu_s, time.monotonic() - start_wall, extended)

        try:
            if not self._send(
                (json.dumps([gold, student]) + "\n").encode("utf-8", "surrogatepass")
            ):
                self.kill()
                return ended(MathStatus.TIMEOUT)
            while True:
                ready, _, _ = select.select([self._answers], [], [], _POLL_S)
                if ready:
                    break
                now = time.monotonic()
                used = None if start_cpu is None else _cpu_seconds(self.pid)
                if start_cpu is not None and used is not None:
                    if used - start_cpu > timeout_s:
                        waited = used - start_cpu < CONTENDED_RATIO * (now - start_wall)
                        if not (waited and timeout_s < contended_timeout_s):
                            attempt = ended(MathStatus.TIMEOUT, on_limit=True)
                            self.kill()
                            return attempt
                        timeout_s, extended = contended_timeout_s, True
                    if used != last_cpu:
                        last_cpu, last_move = used, now
                    elif now - last_move > STARVED_S:
                        self.kill()
                        return ended(MathStatus.TIMEOUT)
                if now - start_wall > wall_limit:
                    self.kill()
                    return ended(MathStatus.TIMEOUT, on_limit=start_cpu is None)
            line = self._answers.readline()
        except (OSError, ValueError) as error:
            self.kill()
            raise _ChildFailed(str(error)) from error
        if not line:
            self.kill()
            raise _ChildFailed("died mid-check")
        attempt = ended(MathStatus.EQUAL if line.strip() == "1" else MathStatus.NOT_EQUAL)
        if attempt.cpu_s is not None:
            _CHECK_CPU.add(attempt.cpu_s)
        return attempt

    def _send(self, request: bytes) -> bool:
        """Write ``request`` to the child; ``False`` when it took none of it for :data:`STARVED_S`.

        Requests can be larger than a pipe's buffer (two answers of up to
        :data:`MAX_MATH_CHARS`), and a stopped child reads nothing.
        """
        sent = 0
        while sent < len(request):
            _, writable, _ = select.select([], [self._requests], [], STARVED_S)
            if not writable:
                return False
            sent += os.write(self._requests, request[sent:])  # type: ignore[arg-type]
        return True

    def close_inherited(self) -> None:
        """Close this process's copies of the pipes and pidfd (after a fork); signal nothing."""
        if self._requests is not None:
            with contextlib.suppress(OSError):
                os.close(self._requests)
            self._requests = None
        with contextlib.suppress(OSError):
            self._answers.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def kill(self) -> None:
        """Kill the child (the fork server's kernel-side reaping collects it) and close its pipes."""
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass  # already gone
        self.close_inherited()


class _ForkServer:
    """This process's math fork server (:mod:`math_child`): started on first use, again if it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None

    def fork(self, niceness: int) -> _Child:
        """A new child, ``niceness`` steps nicer than the server. Raises :class:`_ChildFailed`."""
        with self._lock:
            if self._sock is not None:
                try:
                    return self._fork(self._sock, niceness)
                except _ChildFailed:
                    self._stop()  # the server died: start another once
            self._sock = self._start()
            try:
                return self._fork(self._sock, niceness)
            except _ChildFailed:
                self._stop()
                raise

    def close_inherited(self) -> None:
        """Close this process's copy of the socket (after a fork); the server keeps running."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._proc = None

    def stop(self) -> None:
        """Stop the server; its idle children see the end of their input, busy ones are killed."""
        with self._lock:
            self._stop()

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = subprocess.Popen(
                server_command(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError as error:
            ours.close()
            raise _ChildFailed(f"cannot start the math fork server: {error}") from error
        finally:
            theirs.close()
        if _read_line(ours, CHILD_START_TIMEOUT_S) != b"ready":
            ours.close()
            self._stop()
            raise _ChildFailed("the math fork server did not start; is math-verify installed?")
        return ours

    def _fork(self, sock: socket.socket, niceness: int) -> _Child:
        request_read, request_write = os.pipe()
        answer_read, answer_write = os.pipe()
        try:
            socket.send_fds(sock, [f"{niceness}\n".encode()], [request_read, answer_write])
            reply = _read_line(sock, FORK_TIMEOUT_S)
        except OSError:
            reply = b""
        finally:
            os.close(request_read)
            os.close(answer_write)
        if not reply.isdigit() or int(reply) <= 0:
            os.close(request_write)
            os.close(answer_read)
            raise _ChildFailed("the math fork server did not fork a child")
        return _Child(int(reply), request_write, answer_read)

    def _stop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None


class _ChildPool:
    """Children shared by the threads of this process: one call per child, at most ``size`` busy.

    Idle children are kept per niceness; a child killed on a timeout is
    replaced by a fork of the server, which takes milliseconds.
    """

    def __init__(self, size: int) -> None:
        self._idle: dict[int, list[_Child]] = {}
        self._lock = threading.Lock()
        self._size = size
        self._slots = threading.BoundedSemaphore(size)
        self._server = _ForkServer()

    def check(
        self, gold: str, student: str, timeout_s: float, contended_timeout_s: float, niceness: int
    ) -> _Attempt:
        """Check on an idle (or new) child; a child that dies is replaced once, then CRASHED.

        The wait for a free child does not count against ``timeout_s``; past
        :data:`CHILD_WAIT_S` it gives up (TIMEOUT, not decided on CPU time).
        """
        if not self._slots.acquire(timeout=CHILD_WAIT_S):
            return _Attempt(MathStatus.TIMEOUT, False, None, CHILD_WAIT_S, False)
        try:
            for _ in range(2):
                try:
                    child = self._take(niceness)
                    attempt = child.check(gold, student, timeout_s, contended_timeout_s)
                except _ChildFailed:
                    continue
                if attempt.outcome is not MathStatus.TIMEOUT:  # a timed-out child is dead
                    self._put(child, niceness)
                return attempt
            return _Attempt(MathStatus.CRASHED, False, None, 0.0, False)
        finally:
            self._slots.release()

    def _take(self, niceness: int) -> _Child:
        with self._lock:
            idle = self._idle.setdefault(niceness, [])
            while idle:
                child = idle.pop()
                if child.alive():
                    return child
                child.kill()
        return self._server.fork(niceness)

    def _put(self, child: _Child, niceness: int) -> None:
        with self._lock:
            idle = self._idle.setdefault(niceness, [])
            if len(idle) < self._size:
                idle.append(child)
                return
        child.kill()

    def abandon(self) -> None:
        """In a process forked from the owner: close the inherited ends, signal nothing.

        The server and children belong to the parent; a forked copy that used
        the same socket would read the parent's replies.
        """
        for child in (child for idle in self._idle.values() for child in idle):
            child.close_inherited()
        self._server.close_inherited()

    def close(self) -> None:
        """Stop every idle child and the fork server (children in use are killed with it)."""
        with self._lock:
            children = [child for idle in self._idle.values() for child in idle]
            self._idle = {}
        for child in children:
            child.kill()
        self._server.stop()


_CHILDREN = _ChildPool(MAX_CHILDREN)
atexit.register(lambda: _CHILDREN.close())
_TIMED_OUT = _TimedOutPairs(max_size=10_000)
_CHECK_CPU = _RecentCpu(RECENT_CHECKS)


def _after_fork_in_child() -> None:
    """A forked process (multiprocessing, a data loader) starts its own server when it checks."""
    global _CHILDREN, _TIMED_OUT, _CHECK_CPU
    _CHILDREN.abandon()
    _CHILDREN = _ChildPool(MAX_CHILDREN)
    _TIMED_OUT = _TimedOutPairs(max_size=10_000)
    _CHECK_CPU = _RecentCpu(RECENT_CHECKS)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
_THREAD = threading.local()
"""Per thread: ``first_pass`` (a :class:`FirstPass` or None) and ``niceness`` of its checks."""
