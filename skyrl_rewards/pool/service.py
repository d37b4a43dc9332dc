"""A reward pool that outlives the command that started it: ``skyrl-rewards pool start|status|stop``.

:class:`~skyrl_rewards.pool.reward_pool.RewardPool` ties its pool to the process that
created it (Ray's default actor lifetime), which is right for a training job
or a ``score`` run. On a shared cluster a pool should rather run on its own,
for every job to ``RewardPool.connect(name)`` to: :func:`start` creates the
pool's named directory actor with a detached lifetime (its workers live as
long as it does), :func:`status` describes it and :func:`stop` ends it.

These commands join a *running* cluster (``address``: ``auto`` by default, or
``host:port``); a pool on a throwaway local Ray would die with the command.
"""

from __future__ import annotations

from typing import Any

import ray

from skyrl_rewards.pool.config import PoolConfig
from skyrl_rewards.pool.directory import PoolDirectory
from skyrl_rewards.pool.reward_pool import refuse_taken_name


class NoClusterError(ConnectionError):
    """Raised when no running Ray cluster can be reached at the address."""


class NoPoolError(ValueError):
    """Raised when no pool of that name runs in the namespace."""


def _connect(address: str | None, namespace: str) -> None:
    if ray.is_initialized():
        return
    try:
        ray.init(address=address or "auto", namespace=namespace, log_to_driver=False)
    except ConnectionError as e:
        raise NoClusterError(
            f"address: no running Ray cluster at {address or 'auto'!r}; start one with "
            "`ray start --head` or pass address=HOST:PORT"
        ) from e


def _directory(name: str, namespace: str) -> Any:
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError as e:
        raise NoPoolError(f"name: no reward pool {name!r} runs in namespace {namespace!r}") from e


def start(config: PoolConfig) -> dict[str, Any]:
    """Start the pool ``config.name`` detached on the cluster; return its settings.

    Returns once the directory and its workers were created. Raises
    ``PoolExistsError`` when the name is taken, ``NoClusterError`` without a cluster.
    """
    _connect(config.address, config.namespace)
    refuse_taken_name(config, f"`skyrl-rewards pool stop --name {config.name}` first")
    directory = (
        ray.remote(PoolDirectory)
        .options(name=config.name, namespace=config.namespace, num_cpus=0, lifetime="detached")
        .remote(config.to_dict())
    )
    return ray.get(directory.config.remote(), timeout=config.start_timeout_s)


def status(
    name: str, *, namespace: str = PoolConfig.namespace, address: str | None = None
) -> dict[str, Any]:
    """The running pool's settings, worker count and worker replacements so far."""
    _connect(address, namespace)
    directory = _directory(name, namespace)
    config = ray.get(directory.config.remote())
    generations = [generation for generation, _ in ray.get(directory.workers.remote())]
    return {
        "name": name,
        "namespace": namespace,
        "workers": len(generations),
        "worker_replacements": sum(generations),
        "rewards": config["rewards"],
        "config": config,
    }


def stop(name: str, *, namespace: str = PoolConfig.namespace, address: str | None = None) -> None:
    """Stop the pool's workers and its directory (clients then get errors, not hangs)."""
    _connect(address, namespace)
    directory = _directory(name, namespace)
    ray.get(directory.shutdown.remote(), timeout=60)
    ray.kill(directory)
