"""The judge client's limits on a real event loop: in-flight slots, the pacer, the breaker."""

from __future__ import annotations

import asyncio
import time

import pytest

from skyrl_rewards.rewards.models.limits import (
    GROWTH_ROUNDS,
    INITIAL_WINDOW,
    Breaker,
    InFlight,
    Pacer,
)


def test_in_flight_hands_slots_over_in_order_and_never_leaks() -> None:
    async def go() -> None:
        slots = InFlight(2)
        assert await slots.acquire(0.1) and await slots.acquire(0.1)
        waiter = asyncio.ensure_future(slots.acquire(5.0))
        cancelled = asyncio.ensure_future(slots.acquire(5.0))
        await asyncio.sleep(0.01)
        cancelled.cancel()
        slots.release()  # handed to the first waiter: still 2 held
        assert await waiter and slots.count == 2
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert not await slots.acquire(0.05)  # full: a bounded wait says no
        slots.release()
        slots.release()
        assert slots.count == 0 and slots.peak == 2

    asyncio.run(go())


def test_pacer_spaces_units_and_refuses_past_the_bound_without_reserving() -> None:
    async def go() -> None:
        pacer = Pacer(per_minute=600)  # one every 0.1 s
        start = time.monotonic()
        for _ in range(5):
            assert await pacer.acquire(1, timeout_s=1.0)
        assert time.monotonic() - start == pytest.approx(0.4, abs=0.08)
        assert not await pacer.acquire(20, timeout_s=0.0)  # due 0.1 s from now: past a 0 s bound
        assert await pacer.acquire(1, timeout_s=0.5)  # the refusal reserved nothing
        pacer.adjust(-100)  # an estimate that was too high gives units back
        before = time.monotonic()
        assert await pacer.acquire(1, timeout_s=0.01)
        assert time.monotonic() - before < 0.05

    asyncio.run(go())


def test_breaker_lets_exactly_one_probe_through_when_half_open() -> None:
    breaker = Breaker(failures=2, reset_s=0.05)
    breaker.failure()
    assert breaker.allow() and breaker.state == "closed"
    breaker.failure()
    assert breaker.state == "open" and breaker.blocked() and not breaker.allow()
    time.sleep(0.06)
    assert breaker.allow() and breaker.state == "half_open"
    assert breaker.blocked() and not breaker.allow()  # the probe is out: others are masked
    breaker.failure()  # the probe failed
    assert breaker.state == "open" and breaker.opens == 2
    time.sleep(0.06)
    assert breaker.allow()
    breaker.success()
    assert breaker.state == "closed" and not breaker.blocked() and breaker.allow()


def test_adaptive_in_flight_starts_small_shrinks_on_429_and_grows_back() -> None:
    async def go() -> None:
        slots = InFlight(64, adaptive=True)
        assert slots.capacity() == INITIAL_WINDOW
        for _ in range(INITIAL_WINDOW):
            assert await slots.acquire(0.1)
        waiter = asyncio.ensure_future(slots.acquire(5.0))  # the window is full: it waits
        await asyncio.sleep(0.01)
        assert not waiter.done()
        slots.succeeded()  # slow start: one more slot per success, handed to the waiter
        assert slots.capacity() == INITIAL_WINDOW + 1 and await waiter
        # 5 out, one refused (429): the window shrinks to the 4 others still out
        slots.throttled()
        slots.release()
        assert slots.capacity() == 4 and slots.throttles == 1
        # past the slow start: one more slot only after GROWTH_ROUNDS windows of successes
        for _ in range(GROWTH_ROUNDS * 4 - 1):
            slots.succeeded()
        assert slots.capacity() == 4
        slots.succeeded()
        assert slots.capacity() == 5
        for _ in range(GROWTH_ROUNDS * 5):
            slots.succeeded()
        assert slots.capacity() == 7  # the step doubles while nothing is refused
        fixed = InFlight(8)
        fixed.throttled()
        assert fixed.capacity() == 8  # not adaptive: the limit stays

    asyncio.run(go())
