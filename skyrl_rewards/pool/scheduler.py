"""The pool's engine: it turns items into reward computations and runs them on workers.

This module owns admission (the cache, shared work, remembered timeouts), the
queues and their order, an idle lane's take-over, the results and the pool's
end; the worker side (streaming a call, a stall, a lost worker, replacing a
worker) is :mod:`~skyrl_rewards.pool.worker_calls`, the base of
:class:`Scheduler`; the records (items, tasks, calls, slots, the work cache) are
:mod:`~skyrl_rewards.pool.tasks`.

Everything here runs on one asyncio event loop (the pool's background thread),
so the state needs no locks. The life of a submitted item:

1. It is split into one *task* per reward component. A task whose work key
   (``mix.work_key``) matches finished work is answered from the cache; one
   that matches work already queued or running waits for it; one whose input
   timed out before is answered as a timeout at once. Only new work is queued.
2. One coroutine per worker slot takes a chunk of queued tasks (at most
   ``batch_size`` items' worth, fewer when the queue is short so every worker
   gets a share) and streams it through the worker (see
   :mod:`skyrl_rewards.pool.worker`). A coroutine with nothing queued takes
   over the tasks waiting behind a slow one in another worker's call (quiet
   for :data:`TAKE_OVER_AFTER_S`; that worker is told to stop before them),
   so a batch ends when its slowest single task does (its makespan: what a
   GRPO step waits for).
3. By default (``first_pass_s`` 0) a math check runs with its full limit in
   the ordinary stream. With ``first_pass_s`` > 0 (per-item latency first)
   workers score a chunk in a *first pass*: every math check is capped at
   :func:`~skyrl_rewards.pool.worker.first_pass_cap` CPU seconds (at least
   ``first_pass_s``). A task whose check needs more comes back *deferred*
   for a second pass, capped at :data:`SECOND_PASS_S`: taken by an ordinary
   lane with nothing queued (at full priority), or by a slow lane: each
   worker has a second lane (its own thread, one task at a time) that scores
   deferred tasks beside the ordinary stream, in math children that yield
   the CPU to ordinary work (``slow_lane_niceness``). Tasks that need more
   still get their full limit last, in the slow lane only. So a slowish
   but real answer does not queue behind hangs. An ordinary item waits behind
   a slow or hanging one at most for a second pass that an idle lane had
   started, never for its full limit, and a math hang costs its math limit
   of CPU in a math child, not a worker (the child is killed).
4. A stream that stays quiet for ``timeout_s`` means a stuck task (a hang that
   is not math's: the safety net). The worker is
   killed and replaced. When the stream pins the hang on one task, that task
   scores ``fallback`` with status ``timeout``; when it could be one of a few
   cheap tasks, those are re-run one by one (fenced), so the next hang is
   pinned. Everything after them goes back to the front of the queue.
5. A worker that dies (its process killed, its node gone) is replaced; its
   unfinished tasks go back to the queue. The task it was on (or the few it
   could have been on) is charged one attempt; past ``max_retries`` it scores
   ``fallback`` with status ``error``. Tasks of the other lane of a worker
   replaced on purpose (hung, recycled) go back uncharged. A worker that does
   not start in :data:`START_ATTEMPTS` tries of ``start_timeout_s`` is given
   up; when no worker is left, every open and later item scores ``error``
   with the cause.
6. A task whose component names a model lane (a judge request, a reward
   model) goes to that lane's :class:`~skyrl_rewards.pool.lane_dispatch.LaneDispatcher`
   instead of the queue: the judge lane (one asynchronous actor per pool, so
   an endpoint's limits hold for the whole pool) or the reward-model workers.
   It never holds a CPU worker's slot; the cache and the one-result rule are
   the same, and a failed judge request is masked and never cached.
7. When all of an item's components have a score, its
   :class:`~skyrl_rewards.rewards.contract.result.RewardResult` resolves the item's future.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Hashable, Mapping
from typing import Any

from ray.actor import ActorHandle

from skyrl_rewards.pool.config import PoolConfig
from skyrl_rewards.pool.lane_dispatch import LaneDispatcher, LaneLimits
from skyrl_rewards.pool.metrics import ErrorRateAlarm, PoolMetrics
from skyrl_rewards.pool.replay_log import ReplayLog
from skyrl_rewards.pool.tasks import (
    Call,
    Item,
    PoolLostError,
    Slot,
    Task,
    WorkCache,
    WorkerStartError,
    record_results,
)
from skyrl_rewards.pool.worker import CONTROL
from skyrl_rewards.pool.worker_calls import SECOND_PASS_S, WorkerCalls
from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE
from skyrl_rewards.rewards.contract.result import ComponentScore, RewardResult, Status
from skyrl_rewards.rewards.mix import RewardMix

logger = logging.getLogger(__name__)

TAKE_OVER_AFTER_S = 0.5
"""Wall seconds a call's worker may stay quiet before an idle lane takes the tasks behind it."""
_CLOSE_WAIT_S = 2.0


def _lane_limits(config: PoolConfig, lane: str) -> LaneLimits:
    """The per-call bounds of a model lane, from the pool's settings."""
    if lane == JUDGE_LANE:
        section = config.judge_lane
        batch_size = config.batch_size
    else:
        section = config.model_workers  # type: ignore[assignment]
        batch_size = config.model_workers.batch_size
    return LaneLimits(
        batch_size=batch_size,
        timeout_s=section.timeout_s,
        max_retries=section.max_retries,
        start_timeout_s=config.start_timeout_s,
        fallback=config.fallback,
    )


class Scheduler(WorkerCalls):
    """Runs items through the workers of one pool. Call every method on the loop thread."""

    def __init__(
        self,
        config: PoolConfig,
        mix: RewardMix,
        directory: ActorHandle,
        metrics: PoolMetrics,
        alarm: ErrorRateAlarm,
        replay: ReplayLog | None,
    ) -> None:
        self._config = config
        self._mix = mix
        self._directory = directory
        self._metrics = metrics
        self._alarm = alarm
        self._replay = replay
        self._slots: list[Slot] = []
        self._servers: list[asyncio.Task[None]] = []
        self._queue: deque[Task] = deque()
        self._isolated: deque[Task] = deque()
        self._second_pass: deque[Task] = deque()
        self._last_pass: deque[Task] = deque()
        self._wakeup = asyncio.Event()
        self._slow_wakeup = asyncio.Event()
        self._cache = WorkCache(config.cache_size)
        self._timed_out = WorkCache(config.cache_size)
        self._running: dict[tuple[str, Hashable], Task] = {}
        self._calls: set[Call] = set()
        self._open: set[Item] = set()
        self._closing = False
        self.lost = ""
        """Why the pool is gone (its directory died); empty while it runs."""
        self._local = frozenset(config.local_rewards) & set(mix.names)
        self._max_chunk_tasks = config.batch_size * max(1, len(mix.names) - len(self._local))
        self._lanes = {
            lane: LaneDispatcher(lane, directory, _lane_limits(config, lane), self._finish, metrics)
            for lane in sorted(mix.lanes())
        }

    async def start(self) -> None:
        """Wait until every worker has loaded its rewards, then start serving."""
        workers = await self._directory.workers.remote()
        self._slots = [Slot(i, gen, actor) for i, (gen, actor) in enumerate(workers)]
        await asyncio.gather(
            *(self._ensure_ready(slot) for slot in self._slots),
            *(lane.start() for lane in self._lanes.values()),
        )
        self._servers = [
            asyncio.create_task(self._serve(slot, slow=slow))
            for slot in self._slots
            for slow in (False, True)
        ]

    def admit(self, items: list[Item]) -> None:
        """Take a batch of items: score local rewards, answer what is known, queue new work."""
        self._metrics.count("tasks", len(items) * len(self._mix.names))
        if self.lost:
            for item in items:
                self._fail(item, self.lost)
            return
        for item in items:
            self._open.add(item)
            for name in self._mix.names:
                if name in self._local:
                    self._give(item, name, self._mix.score_component(name, item.sample))
                else:
                    self._admit_task(item, name, self._mix.lane(name, item.sample))
        self._wakeup.set()

    async def close(self, pending: list[Item]) -> None:
        """Stop serving; every unfinished item (and ``pending``) scores as an error.

        Besides cancelling, a flag ends the serving loops: ``asyncio.wait_for`` can
        swallow a cancellation that arrives as its inner call completes (Python < 3.12).
        """
        self._closing = True
        self._wakeup.set()
        self._slow_wakeup.set()
        for lane in self._lanes.values():
            await lane.close(_CLOSE_WAIT_S)
        for server in self._servers:
            server.cancel()
        if self._servers:
            _, stuck = await asyncio.wait(self._servers, timeout=_CLOSE_WAIT_S)
            for server in stuck:  # left behind: the loop stops without it
                logger.warning(
                    "reward pool: a worker coroutine did not stop within %gs: %s",
                    _CLOSE_WAIT_S,
                    server.get_stack(),
                )
        message = "the reward pool was shut down before this item was scored"
        for item in [*self._open, *pending]:
            self._fail(item, message)

    def describe(self) -> dict[str, Any]:
        """Queue lengths, work-cache size, and each worker's slot, generation, pid, node and load."""
        return {
            "queued_tasks": len(self._queue)
            + len(self._isolated)
            + len(self._second_pass)
            + len(self._last_pass),
            "lane_queued_tasks": {name: lane.queued() for name, lane in self._lanes.items()},
            "open_items": len(self._open),
            "cache": {
                "entries": len(self._cache),
                "max_entries": self._config.cache_size,
                "bytes": self._cache.nbytes,
                "timed_out_entries": len(self._timed_out),
                "timed_out_bytes": self._timed_out.nbytes,
            },
            "workers": [
                {
                    "slot": s.index,
                    "generation": s.generation,
                    "pid": s.pid,
                    "node_id": s.node_id,
                    "computations": s.computations,
                    "in_flight": s.in_flight,
                    "gone": s.gone,
                }
                for s in self._slots
            ],
        }

    # -- admission -------------------------------------------------------

    def _admit_task(self, item: Item, name: str, lane: str | None) -> None:
        """Answer the task from what is known, or queue it: for the workers, or for its lane."""
        key = self._work_key(name, item.sample)
        if key is not None:
            if self._timed_out.get((name, key)) is not None:
                self._metrics.count("remembered_timeouts")
                self._give(item, name, self._timeout_score(name, remembered=True))
                return
            cached = self._cache.get((name, key))
            if cached is not None:
                self._metrics.count("cache_hits")
                self._give(item, name, cached)
                return
            running = self._running.get((name, key))
            if running is not None:
                self._metrics.count("cache_hits")
                running.waiters.append(item)
                return
        task = Task(name, key, item.sample, [item])
        if key is not None:
            self._running[(name, key)] = task
        if lane is None:
            self._queue.append(task)
        else:
            self._lanes[lane].put(task)

    def _work_key(self, name: str, sample: Mapping[str, Any]) -> Hashable | None:
        try:
            key = self._mix.work_key(name, sample)
            hash(key)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            logger.warning("work_key(%r) failed (%s); this work is not shared", name, exc)
            return None
        return key

    # -- results ---------------------------------------------------------

    def _finish(self, task: Task, score: ComponentScore, *, cacheable: bool) -> None:
        if task.finished:  # taken over and scored by the other call first
            return
        task.finished = True
        if task.key is not None:
            self._running.pop((task.name, task.key), None)
            if cacheable:
                self._cache.put((task.name, task.key), score)
        for item in task.waiters:
            self._give(item, task.name, score)

    def _give(self, item: Item, name: str, score: ComponentScore) -> None:
        item.scores[name] = score
        if len(item.scores) < len(self._mix.names):
            return
        self._open.discard(item)
        latency_s = time.perf_counter() - item.submitted_s
        result = RewardResult.from_components(
            {n: item.scores[n] for n in self._mix.names}, self._mix.weights, latency_s
        )
        record_results(self._metrics, self._alarm, [result])
        if not item.future.done():
            item.future.set_result(result)

    # -- serving ---------------------------------------------------------

    async def _serve(self, slot: Slot, *, slow: bool) -> None:
        """Serve one lane of one slot until the scheduler closes or the slot is given up."""
        try:
            await self._serve_lane(slot, slow)
        except PoolLostError as exc:
            self._lose(str(exc))
        except WorkerStartError as exc:
            self._give_up(slot, str(exc))

    async def _serve_lane(self, slot: Slot, slow: bool) -> None:
        while not (self._closing or slot.gone):
            chunk, fence_all = await (self._next_slow() if slow else self._next_chunk())
            if not chunk:
                return
            if slot.gone:  # given up while this lane waited for work
                self._requeue(chunk, isolated=fence_all, slow=chunk[0].slow_pass > 0)
                return
            self._metrics.count("worker_calls")
            try:
                await self._run_chunk(slot, chunk, fence_all, slow)
            except (PoolLostError, WorkerStartError):
                raise
            except Exception:  # last line of defence: a bug here must not leave items waiting
                logger.exception("reward pool scheduler failed on a call to worker %d", slot.index)
                for task in chunk:
                    if any(task.name not in item.scores for item in task.waiters):
                        self._finish(
                            task,
                            ComponentScore(
                                self._config.fallback,
                                Status.ERROR,
                                f"{task.name}: reward pool bug (see log)",
                            ),
                            cacheable=False,
                        )
            if not slow and 0 < self._config.max_items_per_worker <= slot.computations:
                self._metrics.count("workers_recycled")
                await self._replace(
                    slot, graceful=True, generation=slot.generation, deliberate=True
                )

    async def _next_chunk(self) -> tuple[list[Task], bool]:
        """The next ordinary chunk and whether to fence every task; empty when closing.

        Isolated tasks come first, then the queue in chunks. A lane with
        neither takes over the tasks queued behind a slow one in another
        worker's call (see :meth:`_take_over`), else a task waiting for its
        second pass (alone, fenced): idle capacity scores deferred checks at
        full priority, bounded by :data:`SECOND_PASS_S` of CPU, instead of
        leaving them to the nice slow lane.
        """
        while not (self._queue or self._isolated or self._closing):
            taken, wait_s = self._take_over()
            if taken:
                return taken, False
            if self._second_pass:
                self._metrics.count("second_pass_idle")
                return [self._second_pass.popleft()], True
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=wait_s)
        if self._closing:
            return [], False
        if self._isolated:
            source, fence_all = self._isolated, True
        else:
            source, fence_all = self._queue, False
        share = math.ceil(len(source) / max(1, self._serving_slots()))
        size = max(1, min(self._max_chunk_tasks, share))
        return [source.popleft() for _ in range(min(size, len(source)))], fence_all

    def _take_over(self) -> tuple[list[Task], float | None]:
        """Take the unstarted tasks of the call stuck longest on one task, or say when to look again.

        A call whose worker has been quiet for :data:`TAKE_OVER_AFTER_S` (on a
        hang, a slow check) gives the tasks it surely has not started (those
        from the next fenced one on: never one it could be on) to an idle lane:
        at the end of a batch they need not wait for it. Its worker is told
        to stop before them; should it score one first all the same (the
        message came late), the first score counts (``_finish`` drops the
        second). Returns (tasks, None), or ([], seconds
        until a call in flight could be taken over; None: none could).
        """
        now = time.perf_counter()
        wait_s: float | None = None
        stuck: tuple[float, Call, list[Task]] | None = None
        for call in self._calls:
            start = call.unstarted()
            rest = [t for t in call.tasks[start : call.kept] if not t.finished]
            if not rest:
                continue
            quiet_s = now - call.progress_s
            if quiet_s < TAKE_OVER_AFTER_S:
                left_s = TAKE_OVER_AFTER_S - quiet_s
                wait_s = left_s if wait_s is None else min(wait_s, left_s)
            elif stuck is None or quiet_s > stuck[0]:
                stuck = (quiet_s, call, rest)
        if stuck is None:
            return [], wait_s
        _, call, rest = stuck
        call.kept = call.unstarted()
        # its worker stops before them; a worker lost meanwhile is the call's own concern
        call.actor.stop_at.options(concurrency_group=CONTROL).remote(call.call_id, call.kept)
        self._metrics.count("taken_over", len(rest))
        logger.debug("an idle lane takes over %d tasks behind a slow one", len(rest))
        return rest, None

    async def _next_slow(self) -> tuple[list[Task], bool]:
        """The next slow-lane task (alone, fenced): second passes first; empty when closing."""
        while not (self._second_pass or self._last_pass or self._closing):
            self._slow_wakeup.clear()
            await self._slow_wakeup.wait()
        if self._closing:
            return [], True
        source = self._second_pass if self._second_pass else self._last_pass
        return [source.popleft()], True

    def _defer(self, task: Task) -> None:
        """Send a task that ran past its pass's cap to the slow lane's next pass."""
        if task.slow_pass == 0:
            self._metrics.count("deferred")
            task.slow_pass = 1 if SECOND_PASS_S > self._config.first_pass_s else 2
        else:
            self._metrics.count("deferred_again")
            task.slow_pass = 2
        self._pass_queue(task).append(task)
        self._slow_wakeup.set()
        self._wakeup.set()

    def _lose(self, message: str) -> None:
        """The pool is gone: every open item and every later one scores as an error."""
        if self.lost:
            return
        logger.error("%s; open items score as errors", message)
        self.lost = message
        self._closing = True
        self._wakeup.set()
        self._slow_wakeup.set()
        self._queue.clear()
        self._isolated.clear()
        self._second_pass.clear()
        self._last_pass.clear()
        for lane in self._lanes.values():
            lane.drop_queued()
        self._running.clear()
        for item in list(self._open):
            self._fail(item, message)

    def _fail(self, item: Item, message: str) -> None:
        for name in self._mix.names:
            if name not in item.scores:
                self._give(item, name, ComponentScore(self._config.fallback, Status.ERROR, message))
