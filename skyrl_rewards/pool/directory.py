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

Model lanes (:mod:`~skyrl_rewards.pool.model_lanes`) are started only when the
mix may use them (the creator says which): the judge lane, one asynchronous
actor; the reward-model workers, ``model_workers.num_workers`` actors with
their own CPUs and GPUs. They are replaced the same way, by lane and index.
"""

from __future__ import annotations

from typing import Any

import ray
from ray import ObjectRef
from ray.actor import ActorHandle

from skyrl_rewards.pool.config import PoolConfig
from skyrl_rewards.pool.model_lanes import JudgeLane, RewardModelWorker
from skyrl_rewards.pool.worker import CONCURRENCY_GROUPS, RewardWorker
from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE, LANES, REWARD_MODEL_LANE

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

    def __init__(
        self, config: dict[str, Any], lanes: tuple[str, ...] = (), driver_niceness: int = 0
    ) -> None:
        """``lanes``: the model lanes to start (those the mix may use); ``driver_niceness``: the
        niceness of the process that starts the pool; workers run ``config["worker_niceness"]``
        steps nicer than it (at most 19)."""
        self._config = PoolConfig(**config)
        self._niceness = worker_niceness(self._config.worker_niceness, driver_niceness)
        unknown = set(lanes) - set(LANES)
        if unknown:
            raise ValueError(f"unknown model lanes {sorted(unknown)}; expected some of {LANES}")
        self._worker_cls = ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(RewardWorker).options(
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
        self._lane_cls = {lane: self._lane_actor_class(lane) for lane in lanes}
        self._lanes: dict[str, list[tuple[int, ActorHandle]]] = {}
        self._lane_ready: dict[str, list[ObjectRef]] = {}
        for lane in lanes:
            count = 1 if lane == JUDGE_LANE else self._config.model_workers.num_workers
            started = [self._start_lane_actor(lane) for _ in range(count)]
            self._lanes[lane] = [(0, actor) for actor, _ in started]
            self._lane_ready[lane] = [ready for _, ready in started]

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
        return _states(self._ready)

    def lane_states(self) -> dict[str, list[str]]:
        """Per model lane, per actor: ``running``, ``pending`` or ``failed`` (never waits)."""
        return {lane: _states(ready) for lane, ready in self._lane_ready.items()}

    def lane_errors(self) -> dict[str, str]:
        """Per model lane whose actor failed to start: its error's last line; never waits."""
        return {
            lane: errors[0] for lane, refs in self._lane_ready.items() if (errors := _errors(refs))
        }

    def lane_actors(self, lane: str) -> list[tuple[int, ActorHandle]]:
        """``(generation, actor)`` for every actor of a model lane (empty: not started)."""
        return list(self._lanes.get(lane, []))

    def replace_lane_actor(self, lane: str, index: int, generation: int) -> tuple[int, ActorHandle]:
        """Kill and replace actor ``index`` of ``lane`` if it still is ``generation``."""
        current_generation, actor = self._lanes[lane][index]
        if current_generation != generation:
            return self._lanes[lane][index]
        ray.kill(actor, no_restart=True)
        new_actor, self._lane_ready[lane][index] = self._start_lane_actor(lane)
        self._lanes[lane][index] = (generation + 1, new_actor)
        return self._lanes[lane][index]

    def worker_errors(self) -> list[str]:
        """The error of each failed worker (its exception's last line); never waits."""
        return _errors(self._ready)

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
        for actors in self._lanes.values():
            for _, actor in actors:
                ray.kill(actor, no_restart=True)

    def _start_worker(self) -> tuple[ActorHandle, ObjectRef]:
        worker = self._worker_cls.remote(self._config.rewards, self._niceness)
        return worker, worker.ready.remote()

    def _lane_actor_class(self, lane: str) -> Any:
        if lane == JUDGE_LANE:
            judge = self._config.judge_lane
            return ray.remote(JudgeLane).options(
                num_cpus=judge.num_cpus, max_concurrency=judge.max_concurrency, max_restarts=0
            )
        assert lane == REWARD_MODEL_LANE
        workers = self._config.model_workers
        return ray.remote(RewardModelWorker).options(
            num_cpus=workers.num_cpus_per_worker,
            num_gpus=workers.num_gpus_per_worker,
            scheduling_strategy=_STRATEGIES[workers.placement],
            max_concurrency=1,
            max_restarts=0,
        )

    def _start_lane_actor(self, lane: str) -> tuple[ActorHandle, ObjectRef]:
        actor = self._lane_cls[lane].remote(self._config.rewards)
        return actor, actor.ready.remote()


def _states(refs: list[ObjectRef]) -> list[str]:
    """``running``, ``pending`` or ``failed`` per readiness reference, without waiting."""
    done, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
    finished = set(done)
    states = []
    for ready in refs:
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


def _errors(refs: list[ObjectRef]) -> list[str]:
    """The last line of the error of each finished readiness reference that failed."""
    done, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
    errors = []
    for ready in done:
        try:
            ray.get(ready, timeout=0)
        except ray.exceptions.RayError as error:
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            errors.append(lines[-1] if lines else type(error).__name__)
    return errors
