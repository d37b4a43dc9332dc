"""What the scheduler keeps track of: a submitted item, a task (one reward computation shared
by the items that need it), an ordinary call in flight on a worker, a worker slot, and the
bounded work cache; plus the two errors that end a slot or the pool and the item counting
(:func:`record_results`). Plain records, no scheduling logic (see
:mod:`~skyrl_rewards.pool.scheduler` and :mod:`~skyrl_rewards.pool.worker_calls`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import uuid
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ray.actor import ActorHandle

from skyrl_rewards.pool.metrics import ErrorRateAlarm, PoolMetrics
from skyrl_rewards.rewards.contract.result import ComponentScore, RewardResult, Status


class PoolLostError(RuntimeError):
    """The pool's directory actor is gone (stopped, or its node lost), and its workers with it."""


class WorkerStartError(RuntimeError):
    """A worker slot's replacement did not start in :data:`~skyrl_rewards.pool.worker_calls.START_ATTEMPTS` tries."""


@dataclass(eq=False)
class Item:
    """One submitted sample: its component scores so far and the future of its result."""

    sample: Mapping[str, Any]
    future: concurrent.futures.Future[RewardResult]
    submitted_s: float
    scores: dict[str, ComponentScore] = field(default_factory=dict)


@dataclass(eq=False)
class Task:
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
class Call:
    """An ordinary call in flight: how far its worker got, so an idle lane can take its rest."""

    tasks: list[Task]
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
        """Where the tasks the worker surely has not started begin (see ``WorkerCalls._suspects``)."""
        if self.fenced is None:
            return 1
        return next((i for i in range(self.done + 1, self.kept) if self.fenced[i]), self.kept)


@dataclass(eq=False)
class Slot:
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
    """Count finished items (and their clamped boxes) in the metrics and feed them to the error-rate alarm."""
    masked: list[bool] = []
    errors = clamped = 0
    for result in results:
        flag = result.should_mask
        masked.append(flag)
        if flag:
            errors += sum(s == Status.ERROR.value for s in result.status.values())
        clamped += sum(result.clamped.values())
    metrics.record_items(
        [r.latency_s for r in results], errors=errors, masked=sum(masked), clamped=clamped
    )
    alarm.record(masked)


class WorkCache:
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
