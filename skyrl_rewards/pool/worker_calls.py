"""One call on a worker, and what happens when it goes wrong: the scheduler's worker side.

:class:`WorkerCalls` is the base of :class:`~skyrl_rewards.pool.scheduler.Scheduler`
(same object, same event loop, same state; see the scheduler's docstring for the
life of an item). It owns: streaming a chunk of tasks through a worker and handing
out the scores as they come (:meth:`WorkerCalls._run_chunk`), waiting on a quiet
call that is in a CPU-bounded math check, pinning a stall on one task (a timeout)
or re-running the few suspects fenced, charging a lost worker's task an attempt,
requeueing (the queue, the isolated queue, the slow lane's passes), and replacing
a worker slot (up to :data:`START_ATTEMPTS` starts) or giving it up. The
scheduler owns admission, the queues' order, the cache and the results; this part
calls back into it through :meth:`_finish`, :meth:`_defer` and :meth:`_lose`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

import ray
from ray.actor import ActorHandle
from ray.exceptions import NodeDiedError, RayTaskError

from skyrl_rewards.pool.config import PoolConfig
from skyrl_rewards.pool.metrics import PoolMetrics
from skyrl_rewards.pool.ray_errors import WORKER_LOST
from skyrl_rewards.pool.replay_log import ReplayLog
from skyrl_rewards.pool.tasks import Call, PoolLostError, Slot, Task, WorkCache, WorkerStartError
from skyrl_rewards.pool.worker import CONTROL, DEFERRED, SLOW_LANE, Progress
from skyrl_rewards.rewards.contract.result import ComponentScore, Status

logger = logging.getLogger(__name__)

SECOND_PASS_S = 1.0
"""CPU seconds a slow-lane task gets on its first try; past it, it is tried last with its full limit."""


_RESTART_BACKOFF_S = 1.0


START_ATTEMPTS = 3
"""Workers started for a slot in a row, each given ``start_timeout_s``, before the slot is given up."""


_ASK_WORKER_S = 5.0
"""Longest to wait for a worker's control group to answer (``math_checks_running``)."""


_ERROR_LINE = re.compile(r"^\w+(?:Error|Exception)\b[^:]*: .+")


def _root_cause(exc: BaseException) -> str:
    """The first ``SomeError: message`` line of a Ray error's traceback text, else its first line."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines()]
    found = next((line for line in lines if _ERROR_LINE.match(line)), None)
    return (found or f"{type(exc).__name__}: {lines[0] if lines else ''}")[:300]


@contextlib.contextmanager
def _off_the_worker(slot: Slot, tasks: int) -> Iterator[None]:
    """While a lost or stalled call is recovered, its tasks do not count as in flight on ``slot``."""
    slot.in_flight -= tasks
    try:
        yield
    finally:
        slot.in_flight += tasks


class WorkerCalls:
    """The worker side of the scheduler (see the module docstring); never built on its own."""

    _config: PoolConfig
    _directory: ActorHandle
    _metrics: PoolMetrics
    _replay: ReplayLog | None
    _slots: list[Slot]
    _queue: deque[Task]
    _isolated: deque[Task]
    _second_pass: deque[Task]
    _last_pass: deque[Task]
    _wakeup: asyncio.Event
    _slow_wakeup: asyncio.Event
    _timed_out: WorkCache
    _calls: set[Call]

    def _finish(self, task: Task, score: ComponentScore, *, cacheable: bool) -> None:
        """Give ``task``'s score to its items (the scheduler's)."""
        raise NotImplementedError

    def _defer(self, task: Task) -> None:
        """Send a task to the slow lane's next pass (the scheduler's)."""
        raise NotImplementedError

    def _lose(self, message: str) -> None:
        """End the pool: every open item scores as an error (the scheduler's)."""
        raise NotImplementedError

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

    def _pass_queue(self, task: Task) -> deque[Task]:
        """Where a slow-lane task waits: the second pass or the last."""
        return self._second_pass if task.slow_pass == 1 else self._last_pass

    @staticmethod
    def _pass_cap(task: Task) -> float:
        """The math cap of a slow-lane task's pass (0: its full limit)."""
        return SECOND_PASS_S if task.slow_pass == 1 else 0.0

    def _serving_slots(self) -> int:
        return sum(not slot.gone for slot in self._slots)

    async def _run_chunk(self, slot: Slot, tasks: list[Task], fence_all: bool, slow: bool) -> None:
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
        call = Call(tasks, slot.actor, time.perf_counter(), kept=len(tasks))
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
        slot: Slot,
        generation: int,
        stream: Any,
        call: Call,
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
            for value, status, error, clamped in progress.scores:
                task = tasks[done]
                if status != DEFERRED:
                    score = ComponentScore(value, Status(status), error, clamped)
                    self._finish(task, score, cacheable=True)
                elif not task.finished and (slow or task.slow_pass == 0):  # not deferred twice
                    self._defer(task)
                done += 1
            call.done, call.progress_s = done, time.perf_counter()
        slot.computations += len(tasks)

    async def _in_math(
        self, slot: Slot, call: Call, fenced: tuple[bool, ...] | None, slow: bool
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
        self, tasks: list[Task], done: int, fenced: tuple[bool, ...] | None
    ) -> tuple[list[Task], list[Task]]:
        """Split unfinished tasks into (could be the current one, surely not started).

        Before the worker's first message only the first task can have started.
        """
        if fenced is None:
            return tasks[:1], tasks[1:]
        end = next((i for i in range(done + 1, len(tasks)) if fenced[i]), len(tasks))
        return tasks[done:end], tasks[end:]

    def _requeue(self, tasks: list[Task], *, isolated: bool, slow: bool = False) -> None:
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
        slot: Slot,
        generation: int,
        tasks: list[Task],
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
        slot: Slot,
        generation: int,
        tasks: list[Task],
        done: int,
        fenced: tuple[bool, ...] | None,
        exc: BaseException,
        slow: bool,
    ) -> None:
        logger.warning("worker %d (pid %d) was lost: %s", slot.index, slot.pid, type(exc).__name__)
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

    async def _replace(
        self, slot: Slot, *, graceful: bool, generation: int, deliberate: bool
    ) -> None:
        """Replace the slot's worker if it still is ``generation``, and wait until the new one runs.

        The two lanes of a slot may both ask; the second waits for the first's
        replacement, and only the first counts a restart (``worker_restarts``; a
        ``graceful`` replacement is recycling, counted by its caller). ``deliberate``:
        this scheduler kills a working worker (a hang, recycling), so the other lane's
        tasks are not charged for it.
        """
        async with slot.replacing:
            if slot.generation != generation or slot.gone:
                return
            if not graceful:
                self._metrics.count("worker_restarts")
            if deliberate:
                slot.killed = generation
            logger.debug(
                "worker %d gen %d: replacing (graceful=%s)", slot.index, slot.generation, graceful
            )
            slot.generation, slot.actor = await self._ask_directory_to_replace(slot, graceful)
            slot.computations = 0
            await self._ensure_ready(slot)
            logger.debug("worker %d gen %d: ready (pid %d)", slot.index, slot.generation, slot.pid)

    async def _ensure_ready(self, slot: Slot) -> None:
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

    def _give_up(self, slot: Slot, message: str) -> None:
        """Stop using ``slot``; when no slot is left, the pool is lost."""
        logger.error("reward pool: giving up worker slot %d: %s", slot.index, message)
        slot.gone = message
        if not self._serving_slots():
            self._lose(f"no reward worker is left: {message}")
            return
        self._wakeup.set()
        self._slow_wakeup.set()

    async def _ask_directory_to_replace(
        self, slot: Slot, graceful: bool
    ) -> tuple[int, ActorHandle]:
        try:
            return await self._directory.replace.remote(slot.index, slot.generation, graceful)
        except WORKER_LOST as exc:
            raise PoolLostError(
                f"the reward pool {self._config.name!r} is gone (its directory "
                f"actor died: {type(exc).__name__})"
            ) from exc

    async def _node_lost(self, slot: Slot) -> bool:
        nodes = await asyncio.get_running_loop().run_in_executor(None, ray.nodes)
        return any(n["NodeID"] == slot.node_id and not n["Alive"] for n in nodes)
