"""Callers that score batches back to back, so a pool has work in flight until they stop.

Fault tests use them to be sure a fault (a stall, a lost node) hits a worker
with ordinary work in flight on any machine, fast or slow, instead of
hoping that one large batch outlasts the fault.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.rewards.contract.result import RewardResult


class BackToBack:
    """``callers`` threads each scoring ``make_batch(size, start)`` in turn until :meth:`stop`.

    Batches are distinct (``start`` advances by ``size``). ``scored`` holds each
    batch with its results; ``observed`` the value of ``observe()`` right after
    each batch returned (e.g. whether a fault was still under way).
    """

    def __init__(
        self,
        pool: RewardPool,
        make_batch: Callable[[int, int], list[dict]],
        size: int,
        *,
        callers: int = 2,
        observe: Callable[[], bool] = lambda: False,
    ) -> None:
        self.scored: list[tuple[list[dict], list[RewardResult]]] = []
        self.observed: list[bool] = []
        self._starts = itertools.count(0, size)
        self._stopped = threading.Event()

        def keep_scoring() -> None:
            while not self._stopped.is_set():
                batch = make_batch(size, next(self._starts))
                self.scored.append((batch, pool.score(batch)))
                self.observed.append(observe())

        self._threads = [threading.Thread(target=keep_scoring) for _ in range(callers)]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout_s: float) -> None:
        """Let each caller finish its batch, waiting at most ``timeout_s`` for each."""
        self._stopped.set()
        for thread in self._threads:
            thread.join(timeout=timeout_s)
            assert not thread.is_alive(), f"a caller's batch did not return in {timeout_s} s"
