"""The named actor behind a pool: its settings and its current workers.

Every process that scores through a pool (the one that created it and any that
``RewardPool.connect(name)``) asks this actor which workers exist, and asks it
to replace one that hung, died or served its quota. The directory owns the
worker actors, so they live as long as it does, whichever client asked for them.

Each worker slot has a *generation*. A client asks to replace the generation it
saw; when another client already replaced it, the directory hands back the
current worker instead of killing a healthy one.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.actor import ActorHandle

from skyrl_rewards.pool.config import PoolConfig
from skyrl_rewards.pool.worker import RewardWorker

_STRATEGIES = {"spread": "SPREAD", "default": "DEFAULT"}


class PoolDirectory:
    """Ray actor body. One per pool, named ``config.name`` in ``config.namespace``."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = PoolConfig(**config)
        self._worker_cls = ray.remote(RewardWorker).options(
            num_cpus=self._config.num_cpus_per_worker,
            scheduling_strategy=_STRATEGIES[self._config.placement],
            max_concurrency=1,
            max_restarts=0,
        )
        self._slots: list[tuple[int, ActorHandle]] = [
            (0, self._start_worker()) for _ in range(self._config.num_workers)
        ]

    def config(self) -> dict[str, Any]:
        """The pool's settings as a plain dict (see :class:`PoolConfig`)."""
        return self._config.to_dict()

    def workers(self) -> list[tuple[int, ActorHandle]]:
        """``(generation, worker)`` for every slot."""
        return list(self._slots)

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
        self._slots[slot] = (generation + 1, self._start_worker())
        return self._slots[slot]

    def shutdown(self) -> None:
        """Kill every worker (the pool's owner calls this before killing the directory)."""
        for _, worker in self._slots:
            ray.kill(worker, no_restart=True)

    def _start_worker(self) -> ActorHandle:
        return self._worker_cls.remote(self._config.rewards, self._config.worker_niceness)
