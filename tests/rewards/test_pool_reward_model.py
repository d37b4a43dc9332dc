"""Reward models in a real reward pool: the reward-model worker group, on a tiny model built here.

The pool runs on a real Ray; its reward-model workers load a tiny random
sequence-classification model (built and saved by the test, no download) once
each. Checked: values equal a direct ``transformers`` forward; the workers ask
Ray for their own CPUs and GPUs (a GPU resource declared on a CPU node stands
in for a GPU machine: the model then runs on the CPU); a killed worker loses no
item; a model that does not load fails the pool's start with the cause.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster
from tiny_reward_model import CHAT_TEMPLATE, build_tokenizer, direct_value, save_model, template_ids

from skyrl_rewards.pool.cluster import NotEnoughGpusError
from skyrl_rewards.pool.reward_pool import PoolStartError, RewardPool
from skyrl_rewards.rewards.contract.lanes import REWARD_MODEL_LANE

pytestmark = pytest.mark.slow

WORDS = ["cat", "dog", "mat", "park", "sun", "forty", "two", "answer", "seven", "six"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_model(tmp_path_factory.mktemp("pool_rm"), build_tokenizer(CHAT_TEMPLATE))


def samples(count: int) -> list[dict[str, Any]]:
    """Distinct prompt + completion pairs of different lengths."""
    return [
        {
            "prompt": f"where is the {WORDS[i % 10]} ?",
            "completion": " ".join(WORDS[(i + j) % 10] for j in range(1 + i % 7)) + f" {i}",
            "solution": "",
        }
        for i in range(count)
    ]


def expected(folder: Path, sample: dict[str, Any]) -> float:
    chat = [
        {"role": "user", "content": sample["prompt"]},
        {"role": "assistant", "content": sample["completion"]},
    ]
    return direct_value(folder, template_ids(folder, chat))


def config(name: str, model_dir: Path, **workers: Any) -> dict[str, Any]:
    return {
        "name": name,
        "num_workers": 1,
        "rewards": {"format": {"weight": 0.5}, "reward_model": {"model": str(model_dir)}},
        "model_workers": {"num_workers": 2, "num_cpus_per_worker": 0.5, **workers},
    }


def test_pool_values_equal_a_direct_forward_and_a_killed_worker_loses_nothing(
    ray_local: None, model_dir: Path
) -> None:
    batch = samples(120)
    with RewardPool.from_config(config("t_rm_pool", model_dir, batch_size=8)) as pool:
        first = pool.score(batch[:12])
        directory = ray.get_actor("t_rm_pool", namespace="skyrl_rewards")
        workers = ray.get(directory.lane_actors.remote(REWARD_MODEL_LANE))
        assert len(workers) == 2
        results: list = []
        scoring = threading.Thread(target=lambda: results.extend(pool.score(batch)))
        scoring.start()
        deadline = time.monotonic() + 60
        while pool.metrics()["lane_calls"] < 4:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        ray.kill(workers[0][1], no_restart=True)
        scoring.join(timeout=300)
        metrics = pool.metrics()
    assert not scoring.is_alive() and len(results) == 120
    want = [expected(model_dir, sample) for sample in batch]
    assert [r.components["reward_model"] for r in first] == pytest.approx(want[:12], abs=1e-5)
    assert [r.components["reward_model"] for r in results] == pytest.approx(want, abs=1e-5)
    assert all(r.ok for r in results)
    assert metrics["worker_restarts"] >= 1
    # reward-model tasks never reached the CPU worker (format is scored in this process)
    assert metrics["worker_calls"] == 0


@pytest.fixture
def gpu_cluster(_ray_session: None) -> Iterator[Cluster]:
    """A head node (1 CPU) and a node that declares one GPU (its model still runs on the CPU)."""
    if ray.is_initialized():
        ray.shutdown()
    local = {"node_ip_address": "127.0.0.1", "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, **local})
    cluster.add_node(num_cpus=2, num_gpus=1, **local)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="skyrl_rewards", log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.mark.multinode
def test_reward_model_workers_are_placed_by_their_gpu_request(
    gpu_cluster: Cluster, model_dir: Path
) -> None:
    gpu_node = next(n.node_id for n in gpu_cluster.worker_nodes)
    cfg = config("t_rm_gpu", model_dir, num_gpus_per_worker=0.5)
    with RewardPool.from_config(cfg) as pool:
        directory = ray.get_actor("t_rm_gpu", namespace="skyrl_rewards")
        workers = ray.get(directory.lane_actors.remote(REWARD_MODEL_LANE))
        nodes = {ray.get(actor.ready.remote())[1] for _, actor in workers}
        results = pool.score(samples(6))
    assert nodes == {gpu_node}  # two half-GPU workers share the node's one GPU
    want = [expected(model_dir, s) for s in samples(6)]
    assert [r.components["reward_model"] for r in results] == pytest.approx(want, abs=1e-5)

    with pytest.raises(NotEnoughGpusError, match="ask for 4 GPUs .* has 1 of 1 GPUs free"):
        RewardPool.from_config(config("t_rm_no_gpu", model_dir, num_gpus_per_worker=2.0))


def test_a_model_that_does_not_load_fails_the_start_with_its_cause(
    ray_local: None, tmp_path: Path
) -> None:
    with pytest.raises(PoolStartError, match="reward model .*no_model"):
        RewardPool.from_config(config("t_rm_missing", tmp_path / "no_model"))
