"""Limits of one endpoint client: requests in flight, a rate pacer, a circuit breaker.

All three live on one asyncio event loop (the client's) and are not
thread-safe. Every wait is bounded: a caller that cannot get a slot within its
bound is told so (``False``) instead of waiting for ever.

- :class:`InFlight`: at most ``limit`` holders at once, first come first served.
- :class:`Pacer`: a rate (requests or tokens per minute) as a virtual clock
  (the generic cell rate algorithm): each acquisition of ``amount`` moves the
  clock on by ``amount / rate``; a caller waits until the clock, less the
  allowed burst, reaches now. Over any window the amount let through is at
  most ``rate * window + burst``.
- :class:`Breaker`: closed -> open after ``failures`` consecutive failures ->
  after ``reset_s`` half-open, where exactly one probe is let through; its
  success closes the breaker, its failure opens it again.
"""

from __future__ import annotations

import asyncio
import collections
import time


class InFlight:
    """At most ``limit`` concurrent holders (``None``: no limit), FIFO, with bounded waits.

    >>> async def demo():
    ...     slots = InFlight(1)
    ...     return await slots.acquire(0.1), await slots.acquire(0.01)
    >>> asyncio.run(demo())
    (True, False)
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.count = 0
        self.peak = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def acquire(self, timeout_s: float) -> bool:
        """Take a slot within ``timeout_s`` seconds: ``True``, else ``False`` (nothing held)."""
        if self.limit is None or (self.count < self.limit and not self._waiters):
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
            return True  # release() handed its slot over (count unchanged)
        waiter.cancel()
        return False

    def release(self) -> None:
        """Give a slot back: to the longest waiter still waiting, else to the pool."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.count -= 1

    def _take(self) -> None:
        self.count += 1
        self.peak = max(self.peak, self.count)


class Pacer:
    """A rate of ``per_minute`` units (requests or tokens) with ``burst`` units of slack.

    ``None`` means no limit. :meth:`acquire` reserves ``amount`` units and
    sleeps until they are due; :meth:`adjust` corrects an estimate once the
    real amount is known (a negative amount gives units back).
    """

    def __init__(self, per_minute: float | None, burst: float = 0.0) -> None:
        self.per_minute = per_minute
        self._rate_s = None if per_minute is None else per_minute / 60.0
        self._burst_s = 0.0 if self._rate_s is None else burst / self._rate_s
        self._clock = 0.0  # when the units reserved so far are all due (monotonic seconds)

    async def acquire(self, amount: float, timeout_s: float) -> bool:
        """Wait until ``amount`` units are due: ``True``; ``False`` at once when that is past ``timeout_s``."""
        if self._rate_s is None:
            return True
        now = time.monotonic()
        start = max(self._clock, now)
        due = max(now, start - self._burst_s)
        if due - now > timeout_s:
            return False
        self._clock = start + amount / self._rate_s
        if due > now:
            await asyncio.sleep(due - now)
        return True

    def adjust(self, amount: float) -> None:
        """Count ``amount`` more units (less when negative) against the rate."""
        if self._rate_s is not None:
            self._clock += amount / self._rate_s


BREAKER_STATES = ("closed", "open", "half_open")


class Breaker:
    """A circuit breaker: ``failures`` consecutive failures open it for ``reset_s`` seconds.

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
        self._opened_at = 0.0
        self._probing = False

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

    def success(self) -> None:
        """The endpoint answered: close the breaker."""
        self.state = "closed"
        self.consecutive = 0
        self._probing = False

    def failure(self) -> None:
        """The endpoint failed (connect error, timeout, 5xx): count it; open when due."""
        self.consecutive += 1
        if self.state == "half_open" or self.consecutive >= self.failures:
            if self.state != "open":
                self.opens += 1
            self.state = "open"
            self._opened_at = time.monotonic()
        self._probing = False
