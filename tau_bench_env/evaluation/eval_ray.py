"""Spread an evaluation over Ray: episode workers on the cluster's nodes.

:func:`run_ray` starts ``workers`` actors (placed with the ``SPREAD``
strategy, so a multi-node cluster gets them on different nodes), each running
up to ``concurrency`` episodes at once in threads against the endpoints. Each
actor is one process: it loads the domain once and computes a task's
ground-truth hash once (the process-wide cache). Records stream back to the
driver as episodes end, and the driver stores them.

A lost worker (its node killed) is taken out of rotation and its unfinished
episodes are queued again on the workers left (a restart could wait forever
for the lost node's CPUs); finished episodes are already with the driver.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import ray
from ray.exceptions import RayActorError

from tau_bench_env.evaluation.evaluate import (
    EpisodeKey,
    EvalSpec,
    load_episode_code,
    run_episode,
)
from tau_bench_env.evaluation.policy import ChatPolicy

logger = logging.getLogger(__name__)

WORKER_CPUS = 1.0
"""Logical CPUs each worker reserves (episodes mostly wait on endpoints)."""
STALL_TIMEOUT_S = 3600.0
"""Longest wait for any episode to end before the run fails."""


@ray.remote
class EvalWorker:
    """One process running episodes of one :class:`EvalSpec` (threaded actor)."""

    def __init__(self, spec: EvalSpec) -> None:
        self._spec = spec
        self._policy = ChatPolicy(spec.policy)
        load_episode_code(spec)
        self._node_id = ray.get_runtime_context().get_node_id()

    def run(self, task_index: int, trial: int) -> dict[str, Any]:
        """Play one episode; its record carries this worker's node id in ``info.node_id``."""
        record = run_episode(self._spec, task_index, trial, self._policy)
        record["info"]["node_id"] = self._node_id
        return record


def run_ray(
    spec: EvalSpec,
    items: Sequence[EpisodeKey],
    *,
    workers: int,
    concurrency: int,
    address: str | None = None,
    worker_cpus: float = WORKER_CPUS,
    stall_timeout_s: float = STALL_TIMEOUT_S,
) -> Iterator[dict[str, Any]]:
    """Run ``items`` on ``workers`` Ray actors; yield records as episodes end.

    Connects to ``address`` (``"auto"``, ``"ray://host:10001"``, a GCS
    address) or, when None and Ray is not initialised, starts a local Ray
    (shut down again at the end). The workers are killed when the iterator
    closes (also on Ctrl-C). Raises ``TimeoutError`` when no episode ends for
    ``stall_timeout_s``, and ``RuntimeError`` when every worker is gone.
    """
    if workers < 1 or concurrency < 1:
        raise ValueError(f"workers and concurrency must be >= 1, got {workers}, {concurrency}")
    started = False
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
        started = address is None
    actors = [
        EvalWorker.options(
            num_cpus=worker_cpus,
            max_concurrency=concurrency,
            scheduling_strategy="SPREAD",
            max_restarts=0,
            max_task_retries=0,
        ).remote(spec)
        for _ in range(workers)
    ]
    queue: deque[EpisodeKey] = deque(items)
    running: dict[Any, tuple[int, EpisodeKey]] = {}
    load = [0] * workers
    dead: set[int] = set()

    def submit(worker: int) -> None:
        while queue and load[worker] < concurrency and worker not in dead:
            item = queue.popleft()
            running[actors[worker].run.remote(*item)] = (worker, item)
            load[worker] += 1

    try:
        for worker in range(workers):
            submit(worker)
        while running:
            done, _ = ray.wait(list(running), num_returns=1, timeout=stall_timeout_s)
            if not done:
                raise TimeoutError(
                    f"no episode ended in {stall_timeout_s:.0f} s on {workers} Ray workers: "
                    "check that the agent and user endpoints answer from the worker nodes"
                )
            worker, item = running.pop(done[0])
            load[worker] -= 1
            try:
                record = ray.get(done[0])
            except RayActorError:
                if worker not in dead:
                    logger.warning(
                        "eval worker %d is gone (its node or process died); its episodes are "
                        "played again by the other workers",
                        worker,
                    )
                dead.add(worker)
                queue.append(item)
                logger.info("episode %s trial %s re-queued after its worker died", *item)
                if len(dead) == workers:
                    raise RuntimeError("every Ray eval worker died; see the Ray logs") from None
            else:
                yield record
            for other in range(workers):
                submit(other)
    finally:
        if ray.is_initialized():
            for actor in actors:
                ray.kill(actor)
        if started:
            ray.shutdown()
