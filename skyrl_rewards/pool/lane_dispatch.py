"""A client's side of one model lane: queued tasks go to the lane's actors in calls.

The :class:`~skyrl_rewards.pool.scheduler.Scheduler` hands every task whose
component names a model lane (a judge request, a reward-model request) to that
lane's :class:`LaneDispatcher` instead of its CPU workers' queue. The dispatcher
runs on the scheduler's event loop (no locks) and keeps the pool's contract:

- every task gets exactly one score, handed back through ``finish``;
- a call that fails because its actor died (the process killed, its node
  lost) is sent again to the replacement the directory starts, charged one
  attempt per task; past ``max_retries`` each task scores ``error``;
- a call that does not answer within the lane's ``timeout_s`` (the wall-clock
  safety net: a judge's own timeouts, retries and limit waits come first)
  has its actor killed and replaced; its tasks are charged an attempt and
  sent again, past ``max_retries`` they score ``timeout``.

The judge lane is one asynchronous actor: its dispatcher keeps up to
``channels`` calls in flight to it. The reward-model group has one channel per
worker, one call at a time each.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ray.actor import ActorHandle
from ray.exceptions import RayTaskError

from skyrl_rewards.pool.metrics import PoolMetrics
from skyrl_rewards.pool.ray_errors import WORKER_LOST
from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE
from skyrl_rewards.rewards.contract.result import MASKING_STATUSES, ComponentScore, Status

logger = logging.getLogger(__name__)

JUDGE_CHANNELS = 64
"""Calls one client keeps in flight to the judge lane (each up to ``batch_size`` requests)."""


class LaneTask(Protocol):
    """What a dispatcher needs of a scheduler task."""

    name: str
    sample: Mapping[str, Any]
    attempts: int


Finish = Callable[..., None]
"""``finish(task, score, cacheable=bool)``: the scheduler's way to hand a score to the task's items."""


class LaneStartError(RuntimeError):
    """A lane's actors did not start (no GPU, a model that fails to load): names the cause."""


@dataclass(eq=False)
class _Channel:
    """One stream of calls to one actor of the lane."""

    index: int
    generation: int
    actor: ActorHandle
    replacing: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(frozen=True)
class LaneLimits:
    """A lane's per-call bounds, from the pool config."""

    batch_size: int
    timeout_s: float
    max_retries: int
    start_timeout_s: float
    fallback: float


class LaneDispatcher:
    """Sends one lane's tasks to its actors; every task scored exactly once."""

    def __init__(
        self,
        lane: str,
        directory: ActorHandle,
        limits: LaneLimits,
        finish: Finish,
        metrics: PoolMetrics,
    ) -> None:
        self.lane = lane
        self._directory = directory
        self._limits = limits
        self._finish = finish
        self._metrics = metrics
        self._queue: deque[LaneTask] = deque()
        self._wakeup = asyncio.Event()
        self._closing = False
        self._channels: list[_Channel] = []
        self._servers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Wait until the lane's actors run (bounded by ``start_timeout_s``), then serve."""
        actors = await self._directory.lane_actors.remote(self.lane)
        channels = [_Channel(i, generation, actor) for i, (generation, actor) in enumerate(actors)]
        try:
            await asyncio.wait_for(
                asyncio.gather(*(c.actor.ready.remote() for c in channels)),
                timeout=self._limits.start_timeout_s,
            )
        except TimeoutError as error:
            raise LaneStartError(
                f"start_timeout_s: the {self.lane} lane of the pool did not start within "
                f"{self._limits.start_timeout_s:g}s (no free GPU or CPU for it, or its model "
                "loads slowly; see `ray status`). Fix: free the resources (model_workers."
                "num_gpus_per_worker / num_cpus_per_worker), or raise start_timeout_s"
            ) from error
        except RayTaskError as error:
            raise LaneStartError(
                f"the {self.lane} lane of the pool failed to start: {_first_line(error)}"
            ) from error
        if self.lane == JUDGE_LANE:  # one asynchronous actor, many calls in flight
            channels = [channels[0]] * JUDGE_CHANNELS
        self._channels = channels
        self._servers = [asyncio.create_task(self._serve(channel)) for channel in channels]

    def put(self, task: LaneTask) -> None:
        """Queue a task for the lane."""
        self._queue.append(task)
        self._wakeup.set()

    def queued(self) -> int:
        """Tasks waiting for a call."""
        return len(self._queue)

    def drop_queued(self) -> list[LaneTask]:
        """Take every queued task out (the pool is lost; the scheduler fails them)."""
        tasks = list(self._queue)
        self._queue.clear()
        return tasks

    async def close(self, wait_s: float) -> None:
        """Stop serving; calls in flight are cancelled (their items fail with the pool)."""
        self._closing = True
        self._wakeup.set()
        for server in self._servers:
            server.cancel()
        if self._servers:
            await asyncio.wait(self._servers, timeout=wait_s)

    # -- serving -----------------------------------------------------------

    async def _serve(self, channel: _Channel) -> None:
        while not self._closing:
            chunk = await self._next_chunk()
            if not chunk:
                return
            try:
                await self._call(channel, chunk)
            except asyncio.CancelledError:
                raise
            except Exception:  # last line of defence: a bug must not leave items waiting
                logger.exception("reward pool: %s lane call failed", self.lane)
                for task in chunk:
                    self._score(task, Status.ERROR, f"{task.name}: reward pool bug (see log)")

    async def _next_chunk(self) -> list[LaneTask]:
        while not (self._queue or self._closing):
            self._wakeup.clear()
            await self._wakeup.wait()
        if self._closing:
            return []
        share = math.ceil(len(self._queue) / max(1, len(self._channels)))
        size = max(1, min(self._limits.batch_size, share))
        return [self._queue.popleft() for _ in range(min(size, len(self._queue)))]

    async def _call(self, channel: _Channel, chunk: list[LaneTask]) -> None:
        samples: list[Mapping[str, Any]] = []
        index_of: dict[int, int] = {}
        calls = []
        for task in chunk:
            if id(task.sample) not in index_of:
                index_of[id(task.sample)] = len(samples)
                samples.append(task.sample)
            calls.append((index_of[id(task.sample)], task.name))
        generation = channel.generation
        self._metrics.count("lane_calls")
        try:
            scores = await asyncio.wait_for(
                channel.actor.score_tasks.remote(samples, calls), timeout=self._limits.timeout_s
            )
        except TimeoutError:
            self._metrics.count("lane_timeouts", len(chunk))
            logger.warning(
                "reward pool: a %s lane call did not answer within %gs; replacing the actor",
                self.lane,
                self._limits.timeout_s,
            )
            await self._replace(channel, generation)
            self._again(chunk, Status.TIMEOUT, f"no answer within {self._limits.timeout_s:g}s")
            return
        except RayTaskError as error:  # our lane code raised: a bug, not the item's fault
            logger.error("reward pool: the %s lane raised: %s", self.lane, error)
            for task in chunk:
                self._score(task, Status.ERROR, f"{task.name}: {self.lane} lane error: {error}")
            return
        except WORKER_LOST as error:
            logger.warning("reward pool: the %s lane's actor was lost: %s", self.lane, error)
            self._metrics.count("worker_restarts")
            await self._replace(channel, generation)
            self._again(chunk, Status.ERROR, f"its actor died ({type(error).__name__})")
            return
        for task, (value, status, error) in zip(chunk, scores, strict=True):
            score = ComponentScore(value, Status(status), error)
            if score.status in MASKING_STATUSES:
                score = ComponentScore(self._limits.fallback, score.status, score.error)
                self._metrics.count("lane_failures")
            # a failed request (an outage, a timeout) may succeed later: never cached
            self._finish(task, score, cacheable=score.status not in MASKING_STATUSES)

    def _again(self, chunk: list[LaneTask], status: Status, why: str) -> None:
        """Charge every task of a failed call an attempt; send it again or score it ``status``."""
        for task in chunk:
            task.attempts += 1
            if task.attempts <= self._limits.max_retries:
                self._metrics.count("retries")
                self._queue.appendleft(task)
            else:
                self._score(
                    task,
                    status,
                    f"{task.name}: the {self.lane} lane failed {task.attempts} times on this "
                    f"(last: {why})",
                )
        self._wakeup.set()

    def _score(self, task: LaneTask, status: Status, message: str) -> None:
        self._finish(task, ComponentScore(self._limits.fallback, status, message), cacheable=False)

    async def _replace(self, channel: _Channel, generation: int) -> None:
        """Have the directory replace the channel's actor (once per generation); wait for it."""
        async with channel.replacing:
            if channel.generation != generation:
                return
            channel.generation, channel.actor = await self._directory.replace_lane_actor.remote(
                self.lane, channel.index, generation
            )
            try:
                await asyncio.wait_for(
                    channel.actor.ready.remote(), timeout=self._limits.start_timeout_s
                )
            except Exception as error:  # noqa: BLE001 - its calls fail and are retried or scored
                logger.error(
                    "reward pool: the replacement %s lane actor did not start: %s",
                    self.lane,
                    _first_line(error),
                )


def _first_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else type(error).__name__
