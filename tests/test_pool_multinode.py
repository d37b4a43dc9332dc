"""A pool across three Ray nodes on this machine (``ray.cluster_utils.Cluster``).

Workers are spread over the nodes; removing a node in the middle of a run
loses nothing: its workers are replaced on the nodes left and their
unfinished items are scored again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import ray
from back_to_back import BackToBack
from ray.cluster_utils import Cluster

from skyrl_rewards.pool.reward_pool import RewardPool

pytestmark = [pytest.mark.multinode, pytest.mark.slow]


def numbers(count: int, start: int = 0) -> list[dict]:
    """Distinct integer answers: even i right (accuracy 1.0), odd i wrong (0.0)."""
    return [
        {
            "completion": f"<think>t</think><answer>{i}</answer>",
            "solution": f"<answer>{i if i % 2 == 0 else i + 1}</answer>",
        }
        for i in range(start, start + count)
    ]


@pytest.fixture
def cluster(_ray_session: None) -> Iterator[Cluster]:
    """Head (1 CPU, where this driver runs) and two worker nodes (2 CPUs each), loopback only."""
    if ray.is_initialized():
        ray.shutdown()  # the session's local Ray; the next test that needs it starts it again
    local = {"node_ip_address": "127.0.0.1", "include_dashboard": False}
    three_nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, **local})
    for _ in range(2):
        three_nodes.add_node(num_cpus=2, **local)
    three_nodes.wait_for_nodes()
    ray.init(address=three_nodes.address, namespace="skyrl_rewards", log_to_driver=False)
    yield three_nodes
    ray.shutdown()
    three_nodes.shutdown()


@pytest.mark.parametrize(
    "graceful",
    [
        True,  # the node drains: Ray reports the actors dead at once
        False,  # the node's processes are killed: the driver sees its calls fail (ActorUnavailable)
    ],
)
def test_workers_spread_and_a_lost_node_loses_nothing(cluster: Cluster, graceful: bool) -> None:
    cfg = {
        "name": "test_pool_nodes",
        "rewards": {"accuracy": {}},
        "num_workers": 3,
        "placement": "spread",
        "batch_size": 128,
        "timeout_s": 60.0,
    }
    with RewardPool.from_config(cfg) as pool:
        workers = pool.metrics()["workers"]
        assert len({w["node_id"] for w in workers}) == 3  # one worker per node

        # Two callers score batches back to back until the lost worker is replaced, so the
        # victim has work in flight when its node goes, however fast the machine is (one batch
        # could end while remove_node is still taking the node down: no retry to see).
        ordinary = BackToBack(pool, numbers, 300)
        deadline = time.monotonic() + 60
        while pool.metrics()["items"] < 100:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        head = ray.get_runtime_context().get_node_id()
        victim = None
        while victim is None:  # a worker node whose worker has work in flight
            assert time.monotonic() < deadline
            busy = {
                w["node_id"]
                for w in pool.metrics()["workers"]
                if w["in_flight"] and w["node_id"] != head
            }
            victim = next((n for n in cluster.worker_nodes if n.node_id in busy), None)
        cluster.remove_node(victim, allow_graceful=graceful)
        while pool.metrics()["worker_restarts"] < 1:
            assert time.monotonic() < deadline + 120, "the lost node's worker was not replaced"
            time.sleep(0.1)
        ordinary.stop(timeout_s=180)

        assert len(ordinary.scored) >= 2
        for batch, results in ordinary.scored:
            assert len(results) == len(batch)
            assert [r.components["accuracy"] for r in results] == [1.0, 0.0] * 150
            assert all(r.ok for r in results)
        metrics = pool.metrics()
        assert metrics["worker_restarts"] >= 1 and metrics["retries"] > 0
        assert metrics["timeouts"] == 0  # a lost node is not blamed on an item
        while victim.node_id in {w["node_id"] for w in pool.metrics()["workers"]}:
            assert time.monotonic() < deadline + 120, "the lost node's worker was not replaced"
            time.sleep(0.1)
