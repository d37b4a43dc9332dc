"""Micro-batching: single items arriving from many threads leave in batches.

SkyRL's generator calls ``env.step`` from a thread pool, one sample per call.
Sending each sample to Ray on its own would pay a round trip per sample, so the
pool gathers them on its event loop: a batch leaves as soon as it holds
``batch_size`` items, or ``batch_wait_s`` after its first item arrived,
whichever comes first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class MicroBatcher(Generic[T]):
    """Gathers items into batches bounded by size and by delay.

    Not thread-safe: call :meth:`add` on the event loop's thread (other threads
    use ``loop.call_soon_threadsafe(batcher.add, items)``).

    >>> async def demo():
    ...     out = []
    ...     batcher = MicroBatcher(out.append, batch_size=2, batch_wait_s=0.01)
    ...     batcher.add([1, 2, 3])
    ...     await asyncio.sleep(0.05)
    ...     return out
    >>> asyncio.run(demo())
    [[1, 2], [3]]
    """

    def __init__(
        self, flush: Callable[[list[T]], None], *, batch_size: int, batch_wait_s: float
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
        self._flush = flush
        self._batch_size = batch_size
        self._batch_wait_s = batch_wait_s
        self._buffer: list[T] = []
        self._timer: asyncio.TimerHandle | None = None

    def add(self, items: Sequence[T]) -> None:
        """Buffer ``items``; send every full batch now and arm the timer for the rest."""
        self._buffer.extend(items)
        while len(self._buffer) >= self._batch_size:
            batch, self._buffer = self._buffer[: self._batch_size], self._buffer[self._batch_size :]
            self._flush(batch)
        if not self._buffer:
            self._cancel_timer()
        elif self._batch_wait_s <= 0:
            self._send_partial()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(
                self._batch_wait_s, self._send_partial
            )

    def drain(self) -> list[T]:
        """Take back every buffered item without sending it (used at shutdown)."""
        self._cancel_timer()
        items, self._buffer = self._buffer, []
        return items

    def _send_partial(self) -> None:
        self._timer = None
        if self._buffer:
            batch, self._buffer = self._buffer, []
            self._flush(batch)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
