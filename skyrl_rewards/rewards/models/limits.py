"""Limits of one endpoint client: requests in flight, a rate pacer, a circuit breaker.

All three live on one asyncio event loop (the client's) and are not
thread-safe. Every wait is bounded: a caller that cannot get a slot within its
bound is told so (``False``) instead of waiting for ever.

- :class:`InFlight`: at most ``limit`` holders at once, first come first served.
  Adaptive (``adaptive=True``), it holds at most a *window* of slots that
  follows what the endpoint accepts: it starts at :data:`INITIAL_WINDOW` and
  grows by one slot per success up to ``limit`` (a slow start); a throttled
  call (HTTP 429) shrinks it to the calls still out, less the throttled one;
  after that it grows again by a step every :data:`GROWTH_ROUNDS` windows of
  successes, the step doubling while no call is throttled.
- :class:`Pacer`: a rate (requests or tokens per minute) as a virtual clock
  (the generic cell rate algorithm): each acquisition of ``amount`` moves the
  clock on by ``amount / rate``; callers wait in turn until the clock, less
  the allowed burst, reaches now. :meth:`Pacer.adjust` corrects an estimate
  once the real amount is known, and the caller waiting its turn sees the
  correction at once. Over any window the amount let through is at most
  ``rate * (window + CATCH_UP_S) + burst`` plus the corrections still to come.
- :class:`Breaker`: closed -> open after ``failures`` consecutive failures ->
  after ``reset_s`` half-open, where exactly one probe is let through; its
  success closes the breaker, its failure opens it again. It keeps the
  failure that opened it, and callers may wait (bounded) for the probe out.
"""

from __future__ import annotations

import asyncio
import collections
import time

INITIAL_WINDOW = 4
"""Slots an adaptive :class:`InFlight` starts with (it doubles every round of successes)."""

GROWTH_ROUNDS = 4
"""Once throttled, an adaptive :class:`InFlight` grows after this many windows of successes."""


class InFlight:
    """At most ``limit`` concurrent holders (``None``: no limit), FIFO, with bounded waits.

    With ``adaptive`` (and a limit), at most :attr:`window` holders (see the
    module docstring); a holder reports its call with :meth:`succeeded` or
    :meth:`throttled` before it releases its slot.

    >>> async def demo():
    ...     slots = InFlight(1)
    ...     return await slots.acquire(0.1), await slots.acquire(0.01)
    >>> asyncio.run(demo())
    (True, False)
    """

    def __init__(self, limit: int | None, *, adaptive: bool = False) -> None:
        self.limit = limit
        self.adaptive = adaptive and limit is not None
        self.window = float(min(INITIAL_WINDOW, limit)) if self.adaptive and limit else limit
        self.count = 0
        self.peak = 0
        self.throttles = 0
        self._slow_start = True
        self._step = 1
        self._successes = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def capacity(self) -> int | None:
        """Holders allowed now: the window when adaptive, else the limit (``None``: no limit)."""
        return None if self.window is None else max(1, int(self.window))

    async def acquire(self, timeout_s: float) -> bool:
        """Take a slot within ``timeout_s`` seconds: ``True``, else ``False`` (nothing held)."""
        capacity = self.capacity()
        if capacity is None or (self.count < capacity and not self._waiters):
            self._take()
            return True
        if timeout_s <= 0:
            return False
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait({waiter}, timeout=timeout_s)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted as we were cancelled: hand it on
            waiter.cancel()
            raise
        if waiter.done() and not waiter.cancelled():
            return True  # a slot was handed over (counted already)
        waiter.cancel()
        return False

    def release(self) -> None:
        """Give a slot back: to the longest waiter still waiting when the window allows, else to the pool."""
        capacity = self.capacity()
        if capacity is None or self.count <= capacity:
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self.count -= 1

    def succeeded(self) -> None:
        """A holder's call was accepted: an adaptive window grows (see the module docstring)."""
        if not self.adaptive or self.window is None or self.limit is None:
            return
        if self._slow_start:
            self.window = min(float(self.limit), self.window + 1.0)
        else:
            self._successes += 1
            if self._successes >= GROWTH_ROUNDS * self.capacity():  # type: ignore[operator]
                self.window = min(float(self.limit), self.window + self._step)
                self._step *= 2
                self._successes = 0
        self._wake()

    def throttled(self) -> None:
        """A holder's call was refused as too many (HTTP 429): the window shrinks to the others out."""
        self.throttles += 1
        if not self.adaptive or self.window is None:
            return
        self.window = float(max(1, min(int(self.window), self.count - 1)))
        self._slow_start = False
        self._step = 1
        self._successes = 0

    def _wake(self) -> None:
        """Hand slots to waiters while the (grown) window has room."""
        capacity = self.capacity()
        while self._waiters and capacity is not None and self.count < capacity:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._take()
                waiter.set_result(None)

    def _take(self) -> None:
        self.count += 1
        self.peak = max(self.peak, self.count)


CATCH_UP_S = 1.0
"""A :class:`Pacer` caller that waited behind others makes up this much of lateness (wake-ups
on a busy machine), so that the rate holds under load; it bounds the catch-up burst."""


class Pacer:
    """A rate of ``per_minute`` units (requests or tokens) with ``burst`` units of slack.

    ``None`` means no limit. :meth:`acquire` waits its turn, then until the
    clock allows ``amount`` more units, and counts them; :meth:`adjust`
    corrects an estimate once the real amount is known (a negative amount
    gives units back), and the caller waiting its turn sees it at once.
    """

    def __init__(self, per_minute: float | None, burst: float = 0.0) -> None:
        self.per_minute = per_minute
        self._rate_s = None if per_minute is None else per_minute / 60.0
        self._burst_s = 0.0 if self._rate_s is None else burst / self._rate_s
        self._clock = 0.0  # when the units counted so far are all due (monotonic seconds)
        self._turn = InFlight(1)  # callers wait in turn: the first sees every correction
        self._changed: asyncio.Future[None] | None = None

    async def acquire(self, amount: float, timeout_s: float) -> bool:
        """Wait until ``amount`` units are due: ``True``; ``False`` once that is past ``timeout_s``.

        A refusal counts nothing.
        """
        if self._rate_s is None:
            return True
        deadline = time.monotonic() + timeout_s
        waited = self._turn.count > 0  # behind others: the clock runs on from theirs
        if not await self._turn.acquire(timeout_s):
            return False
        try:
            while True:
                now = time.monotonic()
                due = self._clock - self._burst_s
                if due <= now:
                    # behind others, a late wake-up is made up (up to CATCH_UP_S); after an idle
                    # spell the clock restarts from now
                    start = max(self._clock, now - (CATCH_UP_S if waited else 0.0))
                    self._clock = start + amount / self._rate_s
                    return True
                if due > deadline:
                    return False
                waited = True
                self._changed = asyncio.get_running_loop().create_future()
                await asyncio.wait({self._changed}, timeout=due - now)
        finally:
            self._changed = None
            self._turn.release()

    def adjust(self, amount: float) -> None:
        """Count ``amount`` more units (less when negative) against the rate."""
        if self._rate_s is not None:
            self._clock += amount / self._rate_s
            if self._changed is not None and not self._changed.done():
                self._changed.set_result(None)


BREAKER_STATES = ("closed", "open", "half_open")


class Breaker:
    """A circuit breaker: ``failures`` consecutive failures open it for ``reset_s`` seconds.

    :attr:`cause` is the last failure counted (what opened it, while open).

    >>> breaker = Breaker(failures=1, reset_s=60.0)
    >>> breaker.allow(), breaker.failure(), breaker.allow(), breaker.state
    (True, None, False, 'open')
    """

    def __init__(self, failures: int, reset_s: float) -> None:
        self.failures = failures
        self.reset_s = reset_s
        self.state = "closed"
        self.consecutive = 0
        self.opens = 0
        self.cause = ""
        self._opened_at = 0.0
        self._probing = False
        self._probe_waiters: list[asyncio.Future[bool]] = []

    def blocked(self) -> bool:
        """True while calls must not be made: open and not yet due a probe, or a probe out."""
        if self.state == "open":
            return time.monotonic() - self._opened_at < self.reset_s
        return self.state == "half_open" and self._probing

    def allow(self) -> bool:
        """May a call be made now? In half-open state only the first caller (the probe) may."""
        if self.state == "closed":
            return True
        if self.blocked():
            return False
        self.state = "half_open"
        self._probing = True
        return True

    def probing(self) -> bool:
        """True while the half-open breaker's probe is out."""
        return self.state == "half_open" and self._probing

    async def wait_probe(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the probe out now: ``True`` when it closed the breaker.

        ``False`` when it failed, when it took longer, or when no probe is out
        and the breaker is not closed.
        """
        if not self.probing():
            return self.state == "closed"
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._probe_waiters.append(waiter)
        try:
            await asyncio.wait({waiter}, timeout=timeout_s)
        finally:
            if not waiter.done():
                waiter.cancel()
                self._probe_waiters.remove(waiter)
        return not waiter.cancelled() and waiter.result()

    def success(self) -> None:
        """The endpoint answered: close the breaker."""
        self.state = "closed"
        self.consecutive = 0
        self._probing = False
        self._settle_probe(True)

    def failure(self, cause: str = "") -> None:
        """The endpoint failed (connect error, timeout, 5xx; ``cause`` says how): count it; open when due."""
        self.consecutive += 1
        self.cause = cause or self.cause
        if self.state == "half_open" or self.consecutive >= self.failures:
            if self.state != "open":
                self.opens += 1
            self.state = "open"
            self._opened_at = time.monotonic()
        self._probing = False
        self._settle_probe(self.state == "closed")

    def _settle_probe(self, closed: bool) -> None:
        waiters, self._probe_waiters = self._probe_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(closed)
