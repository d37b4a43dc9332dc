"""A reward pool that outlives the command that started it: ``skyrl-rewards pool start|status|stop``.

:class:`~skyrl_rewards.pool.reward_pool.RewardPool` ties its pool to the process that
created it (Ray's default actor lifetime), which is right for a training job
or a ``score`` run. On a shared cluster a pool should rather run on its own,
for every job to ``RewardPool.connect(name)`` to: :func:`start` creates the
pool's named directory actor with a detached lifetime (its workers live as
long as it does), :func:`status` describes it and :func:`stop` ends it.

These commands join a *running* cluster (``address``: ``auto`` by default, or
``host:port``); a pool on a throwaway local Ray would die with the command.
Every wait is bounded (see :mod:`~skyrl_rewards.pool.cluster`): no cluster at
the address, a cluster that wants a token, too few free CPUs and workers that
do not start within ``start_timeout_s`` each end in an error naming the fix.
"""

from __future__ import annotations

import os
import time
from typing import Any

import ray

from skyrl_rewards.pool.cluster import (
    NoClusterError,
    check_free_cpus,
    check_free_gpus,
    join_cluster,
)
from skyrl_rewards.pool.config import PoolConfig
from skyrl_rewards.pool.directory import PoolDirectory
from skyrl_rewards.pool.reward_pool import PoolStartError, refuse_taken_name
from skyrl_rewards.rewards.contract.lanes import REWARD_MODEL_LANE
from skyrl_rewards.rewards.mix import RewardMix
from skyrl_rewards.suggest import did_you_mean

__all__ = ["NoClusterError", "NoPoolError", "PoolStartError", "start", "status", "stop"]

_POLL_S = 0.2
_STOP_WAIT_S = 60.0


class NoPoolError(ValueError):
    """Raised when no pool of that name runs in the namespace."""


def _connect(address: str | None, namespace: str) -> None:
    if not ray.is_initialized():
        join_cluster(address or "auto", namespace)


def _directory(name: str, namespace: str) -> Any:
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError as e:
        running = sorted(
            actor["name"]
            for actor in ray.util.list_named_actors(all_namespaces=True)
            if actor["namespace"] == namespace
        )
        listed = f"; named actors there: {', '.join(running)}" if running else ""
        raise NoPoolError(
            f"name: no reward pool {name!r} runs in namespace {namespace!r}"
            f"{did_you_mean(name, running)}{listed}"
        ) from e


def start(config: PoolConfig) -> dict[str, Any]:
    """Start the pool ``config.name`` detached on the cluster; return its settings.

    Returns once every worker has loaded its rewards. Raises ``ValueError``
    naming the reward for a wrong reward name or parameter (before joining
    the cluster), ``PoolExistsError`` when the name is taken, ``NoClusterError`` without a
    cluster, ``NotEnoughCpusError`` when the cluster has too few free CPUs, and
    ``PoolStartError`` (after stopping what it started) when a worker failed
    to load the rewards (its error in the message) or the workers are not all
    running within ``start_timeout_s``.
    """
    # a typo fails here, before any worker starts
    lanes = tuple(sorted(RewardMix.from_config(config.rewards).lanes()))
    _connect(config.address, config.namespace)
    refuse_taken_name(config, f"`skyrl-rewards pool stop --name {config.name}` first")
    check_free_cpus(config.num_workers, config.num_cpus_per_worker)
    if REWARD_MODEL_LANE in lanes:
        workers = config.model_workers
        check_free_gpus(workers.num_workers, workers.num_gpus_per_worker)
    directory = (
        ray.remote(PoolDirectory)
        .options(name=config.name, namespace=config.namespace, num_cpus=0, lifetime="detached")
        .remote(config.to_dict(), lanes, os.getpriority(os.PRIO_PROCESS, 0))
    )
    deadline = time.monotonic() + config.start_timeout_s
    try:
        settings = ray.get(directory.config.remote(), timeout=config.start_timeout_s)
        states = ray.get(directory.worker_states.remote(), timeout=config.start_timeout_s)
        lane_states = ray.get(directory.lane_states.remote(), timeout=config.start_timeout_s)
        while (
            "pending" in states or any("pending" in s for s in lane_states.values())
        ) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            states = ray.get(directory.worker_states.remote(), timeout=config.start_timeout_s)
            lane_states = ray.get(directory.lane_states.remote(), timeout=config.start_timeout_s)
        lane_errors = ray.get(directory.lane_errors.remote(), timeout=config.start_timeout_s)
    except BaseException:
        ray.kill(directory)
        raise
    stuck = {lane: s for lane, s in lane_states.items() if any(x != "running" for x in s)}
    if stuck and all(state == "running" for state in states):
        _stop(directory)
        lane, lane_state = next(iter(stuck.items()))
        cause = lane_errors.get(lane) or (
            f"{lane_state.count('pending')} of {len(lane_state)} not running within "
            f"{config.start_timeout_s:g}s (no free GPU or CPU for them?)"
        )
        raise PoolStartError(
            f"the {lane} lane of pool {config.name!r} did not start: {cause}; the pool was "
            "stopped. Fix: see `ray status` for free GPUs/CPUs (model_workers."
            "num_gpus_per_worker, num_cpus_per_worker), or the error above"
        )
    if any(state != "running" for state in states):
        errors = ray.get(directory.worker_errors.remote(), timeout=config.start_timeout_s)
        _stop(directory)
        running = (
            f"{states.count('running')} of {len(states)} workers running, "
            f"{states.count('pending')} pending"
        )
        if errors:
            distinct = list(dict.fromkeys(errors))
            raise PoolStartError(
                f"the workers of pool {config.name!r} did not start: {len(errors)} failed to "
                f"load the rewards: {'; '.join(distinct)} ({running}); the pool was stopped. "
                "Fix: that error (a reward's file or package missing on a worker node?)"
            )
        raise PoolStartError(
            f"start_timeout_s: the workers of pool {config.name!r} did not start: not all "
            f"running within {config.start_timeout_s:g}s ({running}; the cluster has "
            f"{ray.available_resources().get('CPU', 0.0):g} CPUs free); the pool was stopped. "
            "Fix: free CPUs (stop another pool), lower num_workers, or raise start_timeout_s "
            "if the rewards load slowly"
        )
    return settings


def status(
    name: str, *, namespace: str = PoolConfig.namespace, address: str | None = None
) -> dict[str, Any]:
    """The running pool's settings, its workers running and pending, and replacements so far.

    ``lanes``: per model lane (judge, reward model) its actors by state (``running``, ...).
    """
    _connect(address, namespace)
    directory = _directory(name, namespace)
    config = ray.get(directory.config.remote(), timeout=_STOP_WAIT_S)
    generations = [
        generation for generation, _ in ray.get(directory.workers.remote(), timeout=_STOP_WAIT_S)
    ]
    states = ray.get(directory.worker_states.remote(), timeout=_STOP_WAIT_S)
    lanes = ray.get(directory.lane_states.remote(), timeout=_STOP_WAIT_S)
    return {
        "name": name,
        "namespace": namespace,
        "workers": len(generations),
        "workers_running": states.count("running"),
        "workers_pending": states.count("pending"),
        "workers_failed": states.count("failed"),
        "worker_replacements": sum(generations),
        "lanes": {
            lane: {s: lane_states.count(s) for s in set(lane_states)}
            for lane, lane_states in lanes.items()
        },
        "rewards": config["rewards"],
        "config": config,
    }


def stop(name: str, *, namespace: str = PoolConfig.namespace, address: str | None = None) -> None:
    """Stop the pool's workers and its directory (clients then get errors, not hangs)."""
    _connect(address, namespace)
    _stop(_directory(name, namespace))


def _stop(directory: Any) -> None:
    ray.get(directory.shutdown.remote(), timeout=_STOP_WAIT_S)
    ray.kill(directory)
