"""A loopback multi-node Ray cluster for the tests (``ray.cluster_utils.Cluster``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import ray
from ray.cluster_utils import Cluster

START_ATTEMPTS = 3
START_TIMEOUTS = ("timed out during startup", "Timed out waiting for file")
"""What Ray says when a node misses its fixed start-up deadline (a loaded machine: other
clusters and test runs starting at the same moment); only these are tried again."""


def _start(head_cpus: int) -> list[Any]:
    """The cluster and its two nodes, started; a partial start is shut down before it raises."""
    local = {"node_ip_address": "127.0.0.1", "include_dashboard": False}
    cluster = Cluster(initialize_head=False)
    try:
        cluster.add_node(num_cpus=head_cpus, **local)
        nodes = [cluster.add_node(num_cpus=2, **local) for _ in range(2)]
        cluster.wait_for_nodes()
    except Exception:
        cluster.shutdown()
        raise
    return [cluster, *nodes]


@contextlib.contextmanager
def two_node_cluster(head_cpus: int) -> Iterator[list[Any]]:
    """A loopback Ray cluster: a head with ``head_cpus`` and two nodes of 2 CPUs; yields the
    cluster and the two nodes, with this process connected to it.

    A start that misses Ray's start-up deadline is tried again, up to :data:`START_ATTEMPTS`
    times; any other failure raises at once. The session's local Ray is shut down first (the
    next test that needs it starts it again).
    """
    if ray.is_initialized():
        ray.shutdown()
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            started = _start(head_cpus)
            break
        except Exception as error:  # Ray raises a bare Exception for a start-up timeout
            if not any(text in str(error) for text in START_TIMEOUTS) or attempt == START_ATTEMPTS:
                raise
    cluster = started[0]
    ray.init(address=cluster.address, namespace="skyrl_rewards", log_to_driver=False)
    try:
        yield started
    finally:
        ray.shutdown()
        cluster.shutdown()
