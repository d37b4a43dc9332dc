"""The named actor behind a pool: its settings and its current workers.

Every process that scores through a pool (the one that created it and any that
``RewardPool.connect(name)``) asks this actor which workers exist, and asks it
to replace one that hung, died or served its quota. The directory owns the
worker actors, so they live as long as it does, whichever client asked for them.

Each worker slot has a *generation*. A client asks to replace the generation it
saw; when another client already replaced it, the directory hands back the
current worker instead of killing a healthy one.

The directory also asks every worker it starts whether it is up, so that
:meth:`PoolDirectory.worker_states` tells running workers from workers still
pending (waiting for a CPU, or loading their rewards) without waiting.
"""

from __future__ import annotations

from typing import Any

import ray
from ray import ObjectRef
from ray.actor import ActorHandle

from skyrl_rewards.pool.config import PoolConfig
from skyrl_rewards.pool.worker import SLOW_LANE, RewardWorker

_STRATEGIES = {"spread": "SPREAD", "default": "DEFAULT"}
MAX_NICENESS = 19


def worker_niceness(steps: int | None, driver_niceness: int) -> int | None:
    """The niceness a worker sets: ``steps`` nicer than the driver, at most 19; None: Ray's.

    >>> worker_niceness(0, 10), worker_niceness(15, 10), worker_niceness(None, 10)
    (10, 19, None)
    """
    return None if steps is None else min(MAX_NICENESS, driver_niceness + steps)


class PoolDirectory:
    """Ray actor body. One per pool, named ``config.name`` in ``config.namespace``."""

    def __init__(self, config: dict[str, Any], driver_niceness: int = 0) -> None:
        """``driver_niceness``: the niceness of the process that starts the pool; workers run
        ``config["worker_niceness"]`` steps nicer than it (at most 19)."""
        self._config = PoolConfig(**config)
        self._niceness = worker_niceness(self._config.worker_niceness, driver_niceness)
        self._worker_cls = ray.remote(concurrency_groups={SLOW_LANE: 1})(RewardWorker).options(
            num_cpus=self._config.num_cpus_per_worker,
            scheduling_strategy=_STRATEGIES[self._config.placement],
            max_concurrency=1,
            max_restarts=0,
        )
        self._ready: list[ObjectRef] = []
        self._slots: list[tuple[int, ActorHandle]] = []
        for _ in range(self._config.num_workers):
            worker, ready = self._start_worker()
            self._slots.append((0, worker))
            self._ready.append(ready)

    def config(self) -> dict[str, Any]:
        """The pool's settings as a plain dict (see :class:`PoolConfig`)."""
        return self._config.to_dict()

    def workers(self) -> list[tuple[int, ActorHandle]]:
        """``(generation, worker)`` for every slot."""
        return list(self._slots)

    def worker_states(self) -> list[str]:
        """Per slot: ``running`` (its worker answered), ``pending`` (not yet) or ``failed``.

        Never waits: a pending worker is one Ray has not placed or that is
        still loading its rewards.
        """
        done, _ = ray.wait(self._ready, num_returns=len(self._ready), timeout=0)
        finished = set(done)
        states = []
        for ready in self._ready:
            if ready not in finished:
                states.append("pending")
                continue
            try:
                ray.get(ready, timeout=0)
            except ray.exceptions.RayError:
                states.append("failed")
            else:
                states.append("running")
        return states

    def worker_errors(self) -> list[str]:
        """The error of each failed worker (its exception's last line), in slot order; never waits."""
        done, _ = ray.wait(self._ready, num_returns=len(self._ready), timeout=0)
        errors = []
        for ready in done:
            try:
                ray.get(ready, timeout=0)
            except ray.exceptions.RayError as error:
                lines = [line.strip() for line in str(error).splitlines() if line.strip()]
                errors.append(lines[-1] if lines else type(error).__name__)
        return errors

    def replace(self, slot: int, generation: int, graceful: bool) -> tuple[int, ActorHandle]:
        """Replace slot ``slot`` if it still holds ``generation``; return the slot's worker.

        ``graceful`` lets the old worker finish the calls it already accepted
        (recycling); otherwise it is killed at once (hang, crash).
        """
        current_generation, worker = self._slots[slot]
        if current_generation != generation:
            return self._slots[slot]
        if graceful:
            worker.__ray_terminate__.remote()
        else:
            ray.kill(worker, no_restart=True)
        new_worker, self._ready[slot] = self._start_worker()
        self._slots[slot] = (generation + 1, new_worker)
        return self._slots[slot]

    def shutdown(self) -> None:
        """Kill every worker (the pool's owner calls this before killing the directory)."""
        for _, worker in self._slots:
            ray.kill(worker, no_restart=True)

    def _start_worker(self) -> tuple[ActorHandle, ObjectRef]:
        worker = self._worker_cls.remote(self._config.rewards, self._niceness)
        return worker, worker.ready.remote()
