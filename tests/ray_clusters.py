"""A loopback multi-node Ray cluster for the tests (``ray.cluster_utils.Cluster``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import ray
from ray.cluster_utils import Cluster


@contextlib.contextmanager
def two_node_cluster(head_cpus: int) -> Iterator[list[Any]]:
    """A loopback Ray cluster: a head with ``head_cpus`` and two nodes of 2 CPUs; yields the
    cluster and the two nodes, with this process connected to it.

    The session's local Ray is shut down first (the next test that needs it starts it again).
    """
    if ray.is_initialized():
        ray.shutdown()
    local = {"node_ip_address": "127.0.0.1", "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus, **local})
    nodes = [cluster.add_node(num_cpus=2, **local) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="skyrl_rewards", log_to_driver=False)
    try:
        yield [cluster, *nodes]
    finally:
        ray.shutdown()
        cluster.shutdown()
