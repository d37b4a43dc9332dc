"""RewardPool: score samples on a group of Ray actors, one result per sample, in order.

>>> pool = RewardPool.from_config("configs/pool.yaml", ["num_workers=2"])  # doctest: +SKIP
>>> [r.total for r in pool.score([{"completion": "<answer>2</answer>", "solution": "2"}])]
[1.0]
>>> pool.shutdown()

Five verbs hide Ray: :meth:`RewardPool.from_config` (or ``RewardPool(config)``)
creates a pool, :meth:`RewardPool.connect` reaches a running one from another
process of the cluster, :meth:`~RewardPool.score` / :meth:`~RewardPool.score_async`
score, :meth:`~RewardPool.metrics` reports, :meth:`~RewardPool.shutdown` ends.

Guarantees: every submitted sample gets exactly one
:class:`~skyrl_rewards.rewards.contract.result.RewardResult`, in submission order, also when a
worker hangs (the pool kills it after ``timeout_s``: signals play no part),
crashes, or its node goes away. Calls from many threads are gathered into
batches before they cross to Ray. See docs/pool.md for the design.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from skyrl_rewards.pool.batching import MicroBatcher
from skyrl_rewards.pool.cluster import (
    check_free_cpus,
    check_free_gpus,
    join_cluster,
    start_local_ray,
)
from skyrl_rewards.pool.config import PoolConfig, load_pool_config
from skyrl_rewards.pool.directory import PoolDirectory
from skyrl_rewards.pool.lane_dispatch import LaneStartError
from skyrl_rewards.pool.metrics import ErrorRateAlarm, PoolMetrics
from skyrl_rewards.pool.replay_log import ReplayLog
from skyrl_rewards.pool.scheduler import Item, Scheduler, record_results
from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE, REWARD_MODEL_LANE
from skyrl_rewards.rewards.contract.result import RewardResult
from skyrl_rewards.rewards.mix import RewardMix

logger = logging.getLogger(__name__)

_SHUTDOWN_WAIT_S = 60.0
_STATES_WAIT_S = 10.0


class PoolClosedError(RuntimeError):
    """Raised when scoring through a pool that was shut down."""


class PoolExistsError(ValueError):
    """Raised when creating a pool whose name is taken (use ``RewardPool.connect``)."""


class PoolStartError(TimeoutError):
    """Raised when a pool's workers are not all running within ``start_timeout_s``."""


class RewardAlarmError(RuntimeError):
    """Raised when the error-rate alarm fired on a pool configured with ``alarm_stop``."""


def refuse_taken_name(config: PoolConfig, hint: str) -> None:
    """Raise :class:`PoolExistsError` (ending with ``hint``) when ``config.name`` already runs."""
    try:
        ray.get_actor(config.name, namespace=config.namespace)
    except ValueError:
        return
    raise PoolExistsError(
        f"name: a reward pool named {config.name!r} already runs in "
        f"namespace {config.namespace!r}; {hint}"
    )


class RewardPool:
    """A client of a pool of reward workers (the pool's creator, or a connected process)."""

    def __init__(self, config: PoolConfig | None = None) -> None:
        """Create the pool ``config.name`` (starting a loopback Ray if none runs) and its workers.

        Returns once every worker has loaded its reward functions. Raises
        ``NotEnoughCpusError`` when the cluster has too few free CPUs for the
        workers, ``NoClusterError`` when ``config.address`` reaches no cluster,
        ``PoolStartError`` when the workers are not running within
        ``start_timeout_s``.
        """
        config = config or PoolConfig()
        mix = RewardMix.from_config(config.rewards)  # a bad mix fails here, before any worker
        _ensure_ray(config.address, config.namespace, worker_niceness=config.worker_niceness)
        refuse_taken_name(config, "use RewardPool.connect")
        check_free_cpus(config.num_workers, config.num_cpus_per_worker)
        if REWARD_MODEL_LANE in mix.lanes():
            workers = config.model_workers
            check_free_gpus(workers.num_workers, workers.num_gpus_per_worker)
        # the directory lives on the creator's node: it shares the creator's fate anyway
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        directory = (
            ray.remote(PoolDirectory)
            .options(
                name=config.name, namespace=config.namespace, num_cpus=0, scheduling_strategy=here
            )
            .remote(
                config.to_dict(), tuple(sorted(mix.lanes())), os.getpriority(os.PRIO_PROCESS, 0)
            )
        )
        self._open(config, directory, owner=True, mix=mix)

    @classmethod
    def from_config(
        cls,
        source: str | Path | Mapping[str, Any] | PoolConfig | None = None,
        overrides: Sequence[str] = (),
    ) -> RewardPool:
        """Create a pool from a YAML path, mapping or omegaconf node plus ``key=value`` overrides."""
        return cls(load_pool_config(source, overrides))

    @classmethod
    def connect(
        cls, name: str, *, namespace: str = "skyrl_rewards", address: str | None = None
    ) -> RewardPool:
        """Reach the running pool ``name`` from another process of the same Ray cluster.

        The connected client shares the pool's workers; :meth:`shutdown` on it
        closes only this client. Raises ``ValueError`` when no such pool runs,
        ``NoClusterError`` when ``address`` reaches no cluster, ``PoolStartError``
        when the pool's workers are not running within its ``start_timeout_s``.
        """
        _ensure_ray(address or "auto", namespace)
        directory = ray.get_actor(name, namespace=namespace)
        config = PoolConfig(**ray.get(directory.config.remote()))
        pool = cls.__new__(cls)
        pool._open(config, directory, owner=False)
        return pool

    def _open(
        self, config: PoolConfig, directory: Any, *, owner: bool, mix: RewardMix | None = None
    ) -> None:
        self._config = config
        self._directory = directory
        self._owner = owner
        self._closed = False
        self._metrics = PoolMetrics(config.name)
        self._alarm = ErrorRateAlarm(
            window_items=config.alarm_window_items,
            max_rate=config.alarm_error_rate,
            min_items=config.alarm_min_items,
            stop=config.alarm_stop,
            pool_name=config.name,
        )
        replay = (
            ReplayLog(config.replay_path, pool_name=config.name) if config.replay_path else None
        )
        self._mix = mix or RewardMix.from_config(config.rewards)
        self._all_local = set(self._mix.names) <= set(config.local_rewards)
        self._scheduler = Scheduler(
            config, self._mix, directory, self._metrics, self._alarm, replay
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"reward-pool-{config.name}", daemon=True
        )
        self._thread.start()
        self._batcher: MicroBatcher[Item] = MicroBatcher(
            self._scheduler.admit, batch_size=config.batch_size, batch_wait_s=config.batch_wait_s
        )
        started = asyncio.run_coroutine_threadsafe(self._scheduler.start(), self._loop)
        try:
            started.result(timeout=config.start_timeout_s)
        except concurrent.futures.TimeoutError:
            message = self._start_failure()
            self._stop_loop()
            if owner:
                ray.kill(self._directory)  # its workers die with it
            raise PoolStartError(message) from None
        except LaneStartError as error:
            self._stop_loop()
            if owner:
                ray.kill(self._directory)
            raise PoolStartError(str(error)) from None
        except BaseException:  # Ctrl-C while the workers start: stop the loop and them too
            self._stop_loop()
            if owner:
                ray.kill(self._directory)
            raise
        atexit.register(self.shutdown)  # a clean stop of the loop, also for connected clients

    def _start_failure(self) -> str:
        """Why the workers did not all start (asked of the directory), with the fix."""
        config = self._config
        try:
            states = ray.get(self._directory.worker_states.remote(), timeout=_STATES_WAIT_S)
            lanes = ray.get(self._directory.lane_states.remote(), timeout=_STATES_WAIT_S)
        except (ray.exceptions.RayError, TimeoutError) as error:
            states, lanes = [], {}
            counts = f"the directory did not answer ({type(error).__name__})"
        else:
            counts = (
                f"{states.count('running')} of {len(states)} workers running, "
                f"{states.count('pending')} pending"
            )
        stuck = [lane for lane, lane_states in lanes.items() if "running" not in lane_states]
        if states and all(s == "running" for s in states) and stuck:
            return (
                f"start_timeout_s: the {stuck[0]} lane of pool {config.name!r} did not start "
                f"within {config.start_timeout_s:g}s ({counts}; its actors are pending: no "
                "free GPU or CPU for them, or the model loads slowly; see `ray status`). Fix: "
                "free the resources (model_workers.num_gpus_per_worker, num_cpus_per_worker) "
                "or raise start_timeout_s"
            )
        free = ray.available_resources().get("CPU", 0.0)
        return (
            f"start_timeout_s: the workers of pool {config.name!r} did not all start within "
            f"{config.start_timeout_s:g}s ({counts}; the cluster has {free:g} CPUs free, "
            f"each worker needs {config.num_cpus_per_worker:g}). Fix: free CPUs (stop another "
            "pool: `skyrl-rewards pool stop --name NAME`), lower num_workers, or raise "
            "start_timeout_s if the rewards load slowly"
        )

    def _stop_loop(self) -> None:
        """Cancel and await every task still on the loop, then stop and close it."""
        try:
            asyncio.run_coroutine_threadsafe(_cancel_tasks(), self._loop).result(
                timeout=_SHUTDOWN_WAIT_S
            )
        except concurrent.futures.TimeoutError:
            logger.warning("reward pool: tasks did not stop within %gs", _SHUTDOWN_WAIT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_SHUTDOWN_WAIT_S)
        if not self._thread.is_alive():
            self._loop.close()

    @property
    def config(self) -> PoolConfig:
        """The pool's settings."""
        return self._config

    def score(
        self, samples: Sequence[Mapping[str, Any]], *, wait_timeout_s: float | None = None
    ) -> list[RewardResult]:
        """Score ``samples``; one result per sample, in order. Thread-safe.

        Blocks until every result is in (bounded by the pool's per-item limits);
        ``wait_timeout_s`` bounds the wait per result and raises ``TimeoutError``.
        Raises ``PoolClosedError`` after :meth:`shutdown`, ``RewardAlarmError``
        when a stopping alarm fired, ``ValueError`` when a sample is not a mapping.
        """
        if self._all_local:
            return self._score_here(samples)
        futures = self._submit(samples)
        return [future.result(timeout=wait_timeout_s) for future in futures]

    async def score_async(self, samples: Sequence[Mapping[str, Any]]) -> list[RewardResult]:
        """Like :meth:`score`, for ``await`` inside any event loop."""
        if self._all_local:
            return self._score_here(samples)
        futures = self._submit(samples)
        return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in futures)))

    def _score_here(self, samples: Sequence[Mapping[str, Any]]) -> list[RewardResult]:
        """Score a mix made only of local rewards in this thread (microseconds per sample)."""
        self._check_open(samples)
        start = time.perf_counter()
        results = []
        for sample in samples:
            result = self._mix.score(sample)
            result.latency_s = time.perf_counter() - start
            results.append(result)
        self._metrics.count("tasks", len(samples) * len(self._mix.names))
        record_results(self._metrics, self._alarm, results)
        return results

    def metrics(self) -> dict[str, Any]:
        """Counters, cache hit rate, latency histogram and p50/p99, alarm state, workers.

        With a judge in the mix, ``judge`` holds the judge lane's counters per
        endpoint (requests, tokens, latency, errors by kind, cache hits, breaker
        state, cost): the whole pool's, whichever client asks.
        """
        described = self._call(self._describe()) if not self._closed else {}
        snapshot = {**self._metrics.snapshot(), "alarm": self._alarm.snapshot(), **described}
        if JUDGE_LANE in self._mix.lanes() and not self._closed:
            snapshot["judge"] = self._judge_metrics()
        return snapshot

    def _judge_metrics(self) -> dict[str, Any]:
        """The judge lane's counters, or ``{"error": why}`` when it does not answer in time."""
        try:
            actors = ray.get(self._directory.lane_actors.remote(JUDGE_LANE), timeout=_STATES_WAIT_S)
            return ray.get(actors[0][1].metrics.remote(), timeout=_STATES_WAIT_S)
        except (ray.exceptions.RayError, TimeoutError, IndexError) as error:
            return {"error": f"the judge lane did not answer ({type(error).__name__})"}

    async def _describe(self) -> dict[str, Any]:
        return self._scheduler.describe()

    def shutdown(self) -> None:
        """Score what is unfinished as errors and stop. The creator also stops the workers.

        Idempotent. A local Ray the pool started stays up for later pools (Ray stops
        it at process exit). Also run at exit for a pool never shut down, so the
        client's event loop ends cleanly.
        """
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.shutdown)
        self._call(self._close())
        self._stop_loop()
        if self._owner and not self._scheduler.lost and ray.is_initialized():
            try:
                ray.get(self._directory.shutdown.remote(), timeout=_SHUTDOWN_WAIT_S)
                ray.kill(self._directory)
            except RayActorError:  # the directory died meanwhile: its workers died with it
                pass

    async def _close(self) -> None:
        await self._scheduler.close(self._batcher.drain())

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def _submit(self, samples: Sequence[Mapping[str, Any]]) -> list[concurrent.futures.Future]:
        self._check_open(samples)
        now = time.perf_counter()
        items = [Item(sample, concurrent.futures.Future(), now) for sample in samples]
        if items:
            self._loop.call_soon_threadsafe(self._batcher.add, items)
        return [item.future for item in items]

    def _check_open(self, samples: Sequence[Mapping[str, Any]]) -> None:
        if self._closed:
            raise PoolClosedError(f"reward pool {self._config.name!r} was shut down")
        if self._scheduler.lost:
            raise PoolClosedError(self._scheduler.lost)
        if self._alarm.stopped:
            raise RewardAlarmError(
                f"reward pool {self._config.name!r} stopped scoring: "
                f"error rate {self._alarm.rate:.0%} (see the logs)"
            )
        for index, sample in enumerate(samples):
            if type(sample) is not dict and not isinstance(sample, Mapping):  # dict: the fast test
                raise ValueError(
                    f"samples[{index}]: expected a mapping with 'completion' and "
                    f"'solution', got {type(sample).__name__}"
                )

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()


async def _cancel_tasks() -> None:
    """Cancel every other task of the running loop and wait for them to end."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _ensure_ray(address: str | None, namespace: str, *, worker_niceness: int | None = None) -> None:
    """Connect to Ray unless connected.

    ``address=None`` starts a fresh local Ray listening on 127.0.0.1 only, no
    dashboard, whose workers start at ``worker_niceness`` (``None``: Ray's 15);
    ``"auto"`` or ``"host:port"`` joins that cluster (bounded waits,
    token authentication handled: see :mod:`~skyrl_rewards.pool.cluster`).
    Either stays connected for the rest of the process (Ray stops it at exit)
    and later pools reuse it: each ``ray.init``/``ray.shutdown`` cycle of a
    driver that used actors leaks native threads and sockets inside Ray.
    """
    if ray.is_initialized():
        return
    if address is None:
        start_local_ray(namespace, worker_niceness=worker_niceness)
    else:
        join_cluster(address, namespace)
