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

This module owns the check's meaning (guards, first passes, priorities, the
record of timed-out pairs, the CPU-time window); the pre-screen is
:mod:`~skyrl_rewards.rewards.text.math_screen`, the fork server and its children
:mod:`~skyrl_rewards.rewards.text.math_children`.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from skyrl_rewards.rewards.text.math_child import verify_inline
from skyrl_rewards.rewards.text.math_children import (
    ChildPool,
    MathStatus,
)
from skyrl_rewards.rewards.text.math_screen import too_complex

DEFAULT_TIMEOUT_S = 3.0
"""Default limit of one guarded check, in seconds of the check's own CPU time."""

MAX_CHILDREN = max(2, os.cpu_count() or 2)
"""Children alive at once in one process; more concurrent callers wait for a free one."""


RECENT_CHECKS = 1000
"""Checks whose CPU time :func:`recent_check_cpu_s` remembers."""

CONTENDED_MARGIN = 2.0
"""A check that reaches its limit under contention may use this many times the limit in all.

CPU time itself grows when a check shares its CPU with busy processes
(caches refilled after every switch): by up to 1.68x against the same
check on a quiet machine in the measurements of
``scripts/benchmarks/measure_math_timeout_load.py`` (docs/rewards.md,
"Time limits under load").
"""


MathGuard = Literal["subprocess", "inline"]
GUARD_ENV_VAR = "SKYRL_REWARDS_MATH_GUARD"
"""Environment variable that sets the default guard (``subprocess`` or ``inline``)."""


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
        if attempt.cpu_s is not None and attempt.outcome in (
            MathStatus.EQUAL,
            MathStatus.NOT_EQUAL,
        ):
            _CHECK_CPU.add(attempt.cpu_s)  # the checks that answered
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


_CHILDREN = ChildPool(MAX_CHILDREN)
atexit.register(lambda: _CHILDREN.close())
_TIMED_OUT = _TimedOutPairs(max_size=10_000)
_CHECK_CPU = _RecentCpu(RECENT_CHECKS)


def _after_fork_in_child() -> None:
    """A forked process (multiprocessing, a data loader) starts its own server when it checks."""
    global _CHILDREN, _TIMED_OUT, _CHECK_CPU
    _CHILDREN.abandon()
    _CHILDREN = ChildPool(MAX_CHILDREN)
    _TIMED_OUT = _TimedOutPairs(max_size=10_000)
    _CHECK_CPU = _RecentCpu(RECENT_CHECKS)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
_THREAD = threading.local()
"""Per thread: ``first_pass`` (a :class:`FirstPass` or None) and ``niceness`` of its checks."""
