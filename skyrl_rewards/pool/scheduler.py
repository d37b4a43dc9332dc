"""The pool's engine: it turns items into reward computations and runs them on workers.

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
import concurrent.futures
import contextlib
import logging
import math
import re
import sys
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.actor import ActorHandle
from ray.exceptions import NodeDiedError, RayTaskError

from skyrl_rewards.pool.config import PoolConfig
from skyrl_rewards.pool.lane_dispatch import LaneDispatcher, LaneLimits
from skyrl_rewards.pool.metrics import ErrorRateAlarm, PoolMetrics
from skyrl_rewards.pool.ray_errors import WORKER_LOST
from skyrl_rewards.pool.replay_log import ReplayLog
from skyrl_rewards.pool.worker import CONTROL, DEFERRED, SLOW_LANE, Progress
from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE
from skyrl_rewards.rewards.contract.result import ComponentScore, RewardResult, Status
from skyrl_rewards.rewards.mix import RewardMix

logger = logging.getLogger(__name__)

_RESTART_BACKOFF_S = 1.0
TAKE_OVER_AFTER_S = 0.5
"""Wall seconds a call's worker may stay quiet before an idle lane takes the tasks behind it."""
SECOND_PASS_S = 1.0
"""CPU seconds a slow-lane task gets on its first try; past it, it is tried last with its full limit."""
START_ATTEMPTS = 3
"""Workers started for a slot in a row, each given ``start_timeout_s``, before the slot is given up."""
_CLOSE_WAIT_S = 2.0
_ASK_WORKER_S = 5.0
"""Longest to wait for a worker's control group to answer (``math_checks_running``)."""


class PoolLostError(RuntimeError):
    """The pool's directory actor is gone (stopped, or its node lost), and its workers with it."""


class WorkerStartError(RuntimeError):
    """A worker slot's replacement did not start in :data:`START_ATTEMPTS` tries."""


@dataclass(eq=False)
class Item:
    """One submitted sample: its component scores so far and the future of its result."""

    sample: Mapping[str, Any]
    future: concurrent.futures.Future[RewardResult]
    submitted_s: float
    scores: dict[str, ComponentScore] = field(default_factory=dict)


@dataclass(eq=False)
class _Task:
    """One reward computation, shared by every item that needs identical work."""

    name: str
    key: Hashable | None
    sample: Mapping[str, Any]
    waiters: list[Item]
    attempts: int = 0
    slow_pass: int = 0
    """0: not deferred; 1: in the slow lane's second pass; 2: in its last pass (full limit)."""
    finished: bool = False
    """Scored: a second score (a task an idle lane took over, scored twice) is dropped."""


@dataclass(eq=False)
class _Call:
    """An ordinary call in flight: how far its worker got, so an idle lane can take its rest."""

    tasks: list[_Task]
    actor: ActorHandle
    progress_s: float
    """When the worker last reported (``time.perf_counter``)."""
    call_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """The worker's name for this call (:meth:`RewardWorker.stop_at`); unique across clients."""
    done: int = 0
    """Tasks reported so far."""
    fenced: tuple[bool, ...] | None = None
    """The worker's fences (its first message); None before it."""
    kept: int = 0
    """``tasks[:kept]`` are this call's; the rest was taken over by an idle lane."""

    def unstarted(self) -> int:
        """Where the tasks the worker surely has not started begin (see ``Scheduler._suspects``)."""
        if self.fenced is None:
            return 1
        return next((i for i in range(self.done + 1, self.kept) if self.fenced[i]), self.kept)


@dataclass(eq=False)
class _Slot:
    """This client's view of one worker slot of the directory."""

    index: int
    generation: int
    actor: ActorHandle
    pid: int = 0
    node_id: str = ""
    computations: int = 0
    in_flight: int = 0
    killed: int = -1
    """The generation this scheduler had killed on purpose (a hang, recycling)."""
    gone: str = ""
    """Why this slot was given up (its workers would not start); empty while it serves."""
    replacing: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while the slot's worker is replaced, so the two lanes replace a generation once."""


def record_results(
    metrics: PoolMetrics, alarm: ErrorRateAlarm, results: list[RewardResult]
) -> None:
    """Count finished items in the metrics and feed them to the error-rate alarm."""
    masked: list[bool] = []
    errors = 0
    for result in results:
        flag = result.should_mask
        masked.append(flag)
        if flag:
            errors += sum(s == Status.ERROR.value for s in result.status.values())
    metrics.record_items([r.latency_s for r in results], errors=errors, masked=sum(masked))
    alarm.record(masked)


class _LRU:
    """A bounded mapping that forgets the least recently used key; it counts its bytes.

    Work keys are fixed-size digests (``mix.work_key``), so ``max_size`` entries
    bound the memory; ``nbytes`` (keys and values, shallow sizes) shows it.
    """

    def __init__(self, max_size: int) -> None:
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._max_size = max_size
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: Hashable) -> Any:
        entry = self._data.get(key)
        if entry is None:
            return None
        self._data.move_to_end(key)
        return entry[0]

    def put(self, key: Hashable, value: Any) -> None:
        if self._max_size == 0:
            return
        old = self._data.pop(key, None)
        if old is not None:
            self.nbytes -= old[1]
        size = _approx_bytes(key) + _approx_bytes(value)
        self._data[key] = (value, size)
        self.nbytes += size
        while len(self._data) > self._max_size:
            self.nbytes -= self._data.popitem(last=False)[1][1]


def _approx_bytes(value: Any) -> int:
    """Shallow size of ``value`` plus its tuple items and dataclass fields (one level)."""
    parts = (
        list(value) if isinstance(value, tuple) else list(getattr(value, "__dict__", {}).values())
    )
    return sys.getsizeof(value) + sum(sys.getsizeof(part) for part in parts)


_ERROR_LINE = re.compile(r"^\w+(?:Error|Exception)\b[^:]*: .+")


def _root_cause(exc: BaseException) -> str:
    """The first ``SomeError: message`` line of a Ray error's traceback text, else its first line."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines()]
    found = next((line for line in lines if _ERROR_LINE.match(line)), None)
    return (found or f"{type(exc).__name__}: {lines[0] if lines else ''}")[:300]


@contextlib.contextmanager
def _off_the_worker(slot: _Slot, tasks: int) -> Iterator[None]:
    """While a lost or stalled call is recovered, its tasks do not count as in flight on ``slot``."""
    slot.in_flight -= tasks
    try:
        yield
    finally:
        slot.in_flight += tasks


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


class Scheduler:
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
        self._slots: list[_Slot] = []
        self._servers: list[asyncio.Task[None]] = []
        self._queue: deque[_Task] = deque()
        self._isolated: deque[_Task] = deque()
        self._second_pass: deque[_Task] = deque()
        self._last_pass: deque[_Task] = deque()
        self._wakeup = asyncio.Event()
        self._slow_wakeup = asyncio.Event()
        self._cache = _LRU(config.cache_size)
        self._timed_out = _LRU(config.cache_size)
        self._running: dict[tuple[str, Hashable], _Task] = {}
        self._calls: set[_Call] = set()
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
        self._slots = [_Slot(i, gen, actor) for i, (gen, actor) in enumerate(workers)]
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
        task = _Task(name, key, item.sample, [item])
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

    def _finish(self, task: _Task, score: ComponentScore, *, cacheable: bool) -> None:
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

    def _timeout_score(
        self, name: str, *, remembered: bool, deadline_s: float = 0.0
    ) -> ComponentScore:
        why = (
            "this input timed out before and is not scored again"
            if remembered
            else f"ran past {deadline_s:g} s of wall time ("
            + (
                f"timeout_s={deadline_s:g}"
                if deadline_s == self._config.timeout_s
                else f"slow_lane_timeout_s={deadline_s:g}, in the slow lane"
            )
            + "); the worker was killed and replaced"
        )
        return ComponentScore(self._config.fallback, Status.TIMEOUT, f"{name}: {why}")

    # -- serving ---------------------------------------------------------

    async def _serve(self, slot: _Slot, *, slow: bool) -> None:
        """Serve one lane of one slot until the scheduler closes or the slot is given up."""
        try:
            await self._serve_lane(slot, slow)
        except PoolLostError as exc:
            self._lose(str(exc))
        except WorkerStartError as exc:
            self._give_up(slot, str(exc))

    async def _serve_lane(self, slot: _Slot, slow: bool) -> None:
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

    async def _next_chunk(self) -> tuple[list[_Task], bool]:
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

    def _take_over(self) -> tuple[list[_Task], float | None]:
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
        stuck: tuple[float, _Call, list[_Task]] | None = None
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

    async def _next_slow(self) -> tuple[list[_Task], bool]:
        """The next slow-lane task (alone, fenced): second passes first; empty when closing."""
        while not (self._second_pass or self._last_pass or self._closing):
            self._slow_wakeup.clear()
            await self._slow_wakeup.wait()
        if self._closing:
            return [], True
        source = self._second_pass if self._second_pass else self._last_pass
        return [source.popleft()], True

    def _defer(self, task: _Task) -> None:
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

    def _pass_queue(self, task: _Task) -> deque[_Task]:
        """Where a slow-lane task waits: the second pass or the last."""
        return self._second_pass if task.slow_pass == 1 else self._last_pass

    @staticmethod
    def _pass_cap(task: _Task) -> float:
        """The math cap of a slow-lane task's pass (0: its full limit)."""
        return SECOND_PASS_S if task.slow_pass == 1 else 0.0

    def _serving_slots(self) -> int:
        return sum(not slot.gone for slot in self._slots)

    async def _run_chunk(
        self, slot: _Slot, tasks: list[_Task], fence_all: bool, slow: bool
    ) -> None:
        """Stream ``tasks`` through the slot's worker: a first pass, or a slow-lane task.

        ``slow``: in the worker's slow lane (its nice math children). A
        slow-lane task (deferred) keeps its pass's cap, deadline and queue in
        either lane.
        """
        deferred = tasks[0].slow_pass > 0
        samples: list[Mapping[str, Any]] = []
        index_of: dict[int, int] = {}
        calls = []
        for task in tasks:
            if id(task.sample) not in index_of:
                index_of[id(task.sample)] = len(samples)
                samples.append(task.sample)
            calls.append((index_of[id(task.sample)], task.name))
        logger.debug(
            "worker %d gen %d: call with %d tasks (fence_all=%s, slow=%s)",
            slot.index,
            slot.generation,
            len(tasks),
            fence_all,
            slow,
        )
        generation = slot.generation
        call = _Call(tasks, slot.actor, time.perf_counter(), kept=len(tasks))
        options: dict[str, Any] = {"num_returns": "streaming"}
        if slow:
            options["concurrency_group"] = SLOW_LANE
        stream = slot.actor.score_tasks.options(**options).remote(
            samples,
            calls,
            self._config.progress_interval_s,
            self._config.fence_min_s,
            fence_all,
            self._pass_cap(tasks[0]) if deferred else self._config.first_pass_s,
            self._config.slow_lane_niceness if slow else 0,
            call.call_id,
        )
        deadline_s = self._config.slow_lane_timeout_s if deferred else self._config.timeout_s
        if not deferred:
            self._calls.add(call)
        slot.in_flight += len(tasks)
        try:
            await self._read_stream(slot, generation, stream, call, deadline_s, deferred)
        finally:
            slot.in_flight -= len(tasks)
            self._calls.discard(call)

    async def _read_stream(
        self,
        slot: _Slot,
        generation: int,
        stream: Any,
        call: _Call,
        deadline_s: float,
        slow: bool,
    ) -> None:
        """Hand out the scores of a worker's stream as they come; on a stall or loss, recover.

        A task already scored (taken over by an idle lane, which was faster) is
        skipped; a recovery leaves out the tasks taken over (their new call has them).
        """
        tasks = call.tasks
        done = 0
        fenced: tuple[bool, ...] | None = None
        while True:
            wait_s = self._config.queue_timeout_s if fenced is None else deadline_s
            try:
                ref = await asyncio.wait_for(stream.__anext__(), timeout=wait_s)
                progress: Progress = await ref
            except StopAsyncIteration:
                break
            except (TimeoutError, *WORKER_LOST) as exc:
                if isinstance(exc, TimeoutError) and await self._in_math(slot, call, fenced, slow):
                    continue  # a math check bounded on CPU time: it ends by itself
                tasks = tasks[: call.kept]
                with _off_the_worker(slot, len(tasks)):
                    if slot.killed == generation:  # killed on purpose (the other lane, recycling)
                        self._requeue(tasks[done:], isolated=False, slow=slow)
                        await self._replace(
                            slot, graceful=False, generation=generation, deliberate=True
                        )
                    elif isinstance(exc, TimeoutError):
                        await self._on_stall(
                            slot, generation, tasks, done, fenced, deadline_s, slow
                        )
                    else:
                        await self._on_lost(slot, generation, tasks, done, fenced, exc, slow)
                return
            except RayTaskError as exc:  # our worker code raised: a bug, not the item's fault
                logger.error("worker %d raised while scoring: %s", slot.index, exc)
                for task in tasks[done : call.kept]:
                    self._finish(
                        task,
                        ComponentScore(
                            self._config.fallback, Status.ERROR, f"{task.name}: worker error: {exc}"
                        ),
                        cacheable=False,
                    )
                return
            if fenced is None:
                fenced = call.fenced = progress.fenced
            for value, status, error in progress.scores:
                task = tasks[done]
                if status != DEFERRED:
                    self._finish(task, ComponentScore(value, Status(status), error), cacheable=True)
                elif not task.finished and (slow or task.slow_pass == 0):  # not deferred twice
                    self._defer(task)
                done += 1
            call.done, call.progress_s = done, time.perf_counter()
        slot.computations += len(tasks)

    async def _in_math(
        self, slot: _Slot, call: _Call, fenced: tuple[bool, ...] | None, slow: bool
    ) -> bool:
        """Whether a quiet ordinary call's worker is in a math check (bounded on CPU time).

        ``timeout_s`` is wall time; a math check's limit is CPU time, which a
        loaded machine stretches in wall time. So a quiet ordinary call whose
        worker runs a math child waits on, up to ``slow_lane_timeout_s`` of
        quiet in all (the net of a slow-lane task), instead of being killed as
        hung. Slow-lane calls already have that net.
        """
        if slow or fenced is None:
            return False
        if time.perf_counter() - call.progress_s >= self._config.slow_lane_timeout_s:
            return False
        try:
            running = await asyncio.wait_for(
                slot.actor.math_checks_running.options(concurrency_group=CONTROL).remote(),
                timeout=_ASK_WORKER_S,
            )
        except (TimeoutError, *WORKER_LOST, RayTaskError):
            return False
        if running:
            self._metrics.count("math_waits")
        return running > 0

    def _suspects(
        self, tasks: list[_Task], done: int, fenced: tuple[bool, ...] | None
    ) -> tuple[list[_Task], list[_Task]]:
        """Split unfinished tasks into (could be the current one, surely not started).

        Before the worker's first message only the first task can have started.
        """
        if fenced is None:
            return tasks[:1], tasks[1:]
        end = next((i for i in range(done + 1, len(tasks)) if fenced[i]), len(tasks))
        return tasks[done:end], tasks[end:]

    def _requeue(self, tasks: list[_Task], *, isolated: bool, slow: bool = False) -> None:
        """Put ``tasks`` back at the front of the slow lane, the isolated queue or the queue."""
        if slow:
            for task in reversed(tasks):
                self._pass_queue(task).appendleft(task)
            self._slow_wakeup.set()
            self._wakeup.set()
            return
        target = self._isolated if isolated else self._queue
        target.extendleft(reversed(tasks))
        self._wakeup.set()

    async def _on_stall(
        self,
        slot: _Slot,
        generation: int,
        tasks: list[_Task],
        done: int,
        fenced: tuple[bool, ...] | None,
        deadline_s: float,
        slow: bool,
    ) -> None:
        if fenced is not None and await self._node_lost(slot):
            await self._on_lost(
                slot, generation, tasks, done, fenced, NodeDiedError("node lost"), slow
            )
            return
        suspects, rest = self._suspects(tasks, done, fenced)
        self._metrics.count("worker_restarts")
        replaced = asyncio.create_task(
            self._replace(slot, graceful=False, generation=generation, deliberate=True)
        )
        if fenced is None:  # never started: stuck behind another client's call
            logger.warning(
                "worker %d did not start a call within queue_timeout_s=%g; replacing it",
                slot.index,
                self._config.queue_timeout_s,
            )
            self._requeue(suspects, isolated=False, slow=slow)
        elif len(suspects) == 1:
            task = suspects[0]
            score = self._timeout_score(task.name, remembered=False, deadline_s=deadline_s)
            logger.warning(
                "%s timed out on worker %d (pid %d); killed and replaced",
                task.name,
                slot.index,
                slot.pid,
            )
            self._metrics.count("timeouts")
            if task.key is not None:
                self._timed_out.put((task.name, task.key), True)
            if self._replay is not None:
                self._replay.append("timeout", task.name, task.sample, score.error)
            self._finish(task, score, cacheable=False)
        else:
            self._metrics.count("isolations", len(suspects))
            self._requeue(suspects, isolated=True)
        self._requeue(rest, isolated=False, slow=slow)
        await replaced

    async def _on_lost(
        self,
        slot: _Slot,
        generation: int,
        tasks: list[_Task],
        done: int,
        fenced: tuple[bool, ...] | None,
        exc: BaseException,
        slow: bool,
    ) -> None:
        logger.warning("worker %d (pid %d) was lost: %s", slot.index, slot.pid, type(exc).__name__)
        self._metrics.count("worker_restarts")
        replaced = asyncio.create_task(
            self._replace(slot, graceful=False, generation=generation, deliberate=False)
        )
        suspects, rest = self._suspects(tasks, done, fenced)
        again = []
        for task in suspects:
            task.attempts += 1
            if task.attempts <= self._config.max_retries:
                again.append(task)
                continue
            message = (
                f"{task.name}: the worker died {task.attempts} times while scoring this "
                f"({type(exc).__name__})"
            )
            if self._replay is not None:
                self._replay.append("crash", task.name, task.sample, message)
            self._finish(
                task, ComponentScore(self._config.fallback, Status.ERROR, message), cacheable=False
            )
        if len(suspects) == 1 and again and self._replay is not None:
            self._replay.append(
                "crash",
                again[0].name,
                again[0].sample,
                f"worker died while scoring this ({type(exc).__name__}); retried",
            )
        self._metrics.count("retries", len(again) + len(rest))
        self._requeue(again, isolated=len(again) > 1 and not slow, slow=slow)
        self._requeue(rest, isolated=False, slow=slow)
        await replaced

    # -- workers ---------------------------------------------------------

    async def _replace(
        self, slot: _Slot, *, graceful: bool, generation: int, deliberate: bool
    ) -> None:
        """Replace the slot's worker if it still is ``generation``, and wait until the new one runs.

        The two lanes of a slot may both ask; the second waits for the first's
        replacement. ``deliberate``: this scheduler kills a working worker (a
        hang, recycling), so the other lane's tasks are not charged for it.
        """
        async with slot.replacing:
            if slot.generation != generation or slot.gone:
                return
            if deliberate:
                slot.killed = generation
            logger.debug(
                "worker %d gen %d: replacing (graceful=%s)", slot.index, slot.generation, graceful
            )
            slot.generation, slot.actor = await self._ask_directory_to_replace(slot, graceful)
            slot.computations = 0
            await self._ensure_ready(slot)
            logger.debug("worker %d gen %d: ready (pid %d)", slot.index, slot.generation, slot.pid)

    async def _ensure_ready(self, slot: _Slot) -> None:
        """Wait for the slot's worker; start another up to :data:`START_ATTEMPTS` times in all.

        Raises :class:`WorkerStartError` naming the cause when none starts.
        """
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                slot.pid, slot.node_id = await asyncio.wait_for(
                    slot.actor.ready.remote(), timeout=self._config.start_timeout_s
                )
                return
            except (TimeoutError, *WORKER_LOST, RayTaskError) as exc:
                cause = (
                    f"not running within start_timeout_s={self._config.start_timeout_s:g}s"
                    if isinstance(exc, TimeoutError)
                    else _root_cause(exc)
                )
                logger.error(
                    "worker %d did not start (attempt %d of %d): %s",
                    slot.index,
                    attempt,
                    START_ATTEMPTS,
                    cause,
                )
                if attempt == START_ATTEMPTS:
                    raise WorkerStartError(
                        f"worker {slot.index} of pool {self._config.name!r} did not start in "
                        f"{START_ATTEMPTS} attempts (last: {cause}). Either the cluster has no "
                        f"CPU for it (num_cpus_per_worker={self._config.num_cpus_per_worker:g}; "
                        "see `ray status` and `skyrl-rewards pool status`) or its rewards fail "
                        "to load (see the worker's log); raise start_timeout_s if they load "
                        "slowly"
                    ) from exc
                await asyncio.sleep(_RESTART_BACKOFF_S)
                slot.generation, slot.actor = await self._ask_directory_to_replace(slot, False)

    def _give_up(self, slot: _Slot, message: str) -> None:
        """Stop using ``slot``; when no slot is left, the pool is lost."""
        logger.error("reward pool: giving up worker slot %d: %s", slot.index, message)
        slot.gone = message
        if not self._serving_slots():
            self._lose(f"no reward worker is left: {message}")
            return
        self._wakeup.set()
        self._slow_wakeup.set()

    async def _ask_directory_to_replace(
        self, slot: _Slot, graceful: bool
    ) -> tuple[int, ActorHandle]:
        try:
            return await self._directory.replace.remote(slot.index, slot.generation, graceful)
        except WORKER_LOST as exc:
            raise PoolLostError(
                f"the reward pool {self._config.name!r} is gone (its directory "
                f"actor died: {type(exc).__name__})"
            ) from exc

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

    async def _node_lost(self, slot: _Slot) -> bool:
        nodes = await asyncio.get_running_loop().run_in_executor(None, ray.nodes)
        return any(n["NodeID"] == slot.node_id and not n["Alive"] for n in nodes)
