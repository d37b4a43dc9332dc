"""``tau-bench-env eval`` spread over a three-node Ray cluster on this machine (loopback)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import closing
from functools import partial
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster
from tau_eval_helpers import AgentServer, user_turns

from tau_bench_env.backends import load_domain
from tau_bench_env.cli.main import main
from tau_bench_env.config import env_config_from
from tau_bench_env.evaluation.eval_ray import run_ray
from tau_bench_env.evaluation.evaluate import JOURNAL_FILE, RESULTS_FILE, EvalSpec, evaluate
from tau_bench_env.evaluation.policy import PolicyConfig
from tau_bench_env.rescoring.rescore import rescore, summarize

pytestmark = [pytest.mark.multinode, pytest.mark.slow]


def test_cli_on_local_ray_workers(ray_local: None, tmp_path: Path, capsys) -> None:
    domain = load_domain("tau2", "retail")
    tasks = domain.tasks("test")
    turns = tmp_path / "turns.json"
    turns.write_text(json.dumps(user_turns(tasks)))
    config = Path(__file__).parents[2] / "configs" / "tau_bench_eval.yaml"  # replay user
    with AgentServer(domain, tasks).running() as agent:
        args = ["eval", "--config", str(config), "--backend", "tau2", "--domain", "retail"]
        args += ["--tasks", "0-7", "--trials", "2", "--workers", "2", "--concurrency", "2"]
        args += ["--agent-base-url", agent.base_url, "--agent-model", "scripted", "--json"]
        args += ["--tool-mode", "text", "--user-turns", str(turns), "--out", str(tmp_path / "o")]
        assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 16 and summary["pass_hat_k"] == {"1": 1.0, "2": 1.0}


@pytest.fixture(scope="module")
def cluster(_ray_session: None) -> Iterator[Cluster]:
    """Head (1 CPU, where this driver runs) and two worker nodes (2 CPUs each), loopback only.

    Shared by the tests below in file order; the last one removes a node.
    """
    if ray.is_initialized():
        ray.shutdown()  # the session's local Ray; the next test that needs it starts it again
    local = {"node_ip_address": "127.0.0.1", "include_dashboard": False}
    three_nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, **local})
    for _ in range(2):
        three_nodes.add_node(num_cpus=2, **local)
    three_nodes.wait_for_nodes()
    yield three_nodes
    if ray.is_initialized():
        ray.shutdown()
    three_nodes.shutdown()


def test_eval_spreads_over_the_cluster(cluster: Cluster, tmp_path: Path) -> None:
    domain = load_domain("tau2", "airline")
    tasks = domain.tasks("test")
    with AgentServer(domain, tasks).running() as agent:
        spec = EvalSpec(
            env=env_config_from({"backend": "tau2", "user": {"kind": "replay"}}),
            policy=PolicyConfig(base_url=agent.base_url, model="scripted"),
            domain="airline",
            split="test",
            user_turns=user_turns(tasks),
        )
        runner = partial(run_ray, workers=5, concurrency=2, address=cluster.address)
        summary = evaluate(
            spec, tmp_path, tasks=list(range(len(tasks))), trials=2, runner=runner, progress=False
        )
    assert summary["episodes"] == 2 * len(tasks) and summary["errors"] == 0
    assert summary["pass_hat_k"] == {"1": 1.0, "2": 1.0}
    journal = [json.loads(line) for line in (tmp_path / JOURNAL_FILE).read_text().splitlines()]
    assert len({record["info"]["node_id"] for record in journal}) == 3  # every node ran episodes
    runs = json.loads((tmp_path / RESULTS_FILE).read_text())
    assert summarize(rescore(domain, runs))["agreement"] == 1.0


def test_a_killed_node_loses_no_episode(
    cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    domain = load_domain("tau2", "retail")
    tasks = domain.tasks("test")

    killed: list[tuple[int, str]] = []  # (records before the kill, node id)

    def kill_a_node_midway(spec: EvalSpec, items: Sequence[tuple[int, int]]) -> Iterator[dict]:
        runner = run_ray(spec, items, workers=5, concurrency=2, address=cluster.address)
        seen: set[str] = set()
        with closing(runner):
            for count, record in enumerate(runner):
                seen.add(record["info"]["node_id"])
                working = [node for node in cluster.worker_nodes if node.node_id in seen]
                if count >= 10 and working and not killed:
                    # a node that has run episodes: its processes are killed mid-run, while
                    # the agent holds its answers, so its episodes under way cannot end first
                    killed.append((count, working[0].node_id))
                    agent.answering.clear()
                    try:
                        cluster.remove_node(working[0], allow_graceful=False)
                    finally:
                        agent.answering.set()
                yield record

    caplog.set_level(logging.INFO, logger="tau_bench_env.evaluation.eval_ray")
    with AgentServer(domain, tasks).running() as agent:
        agent.delay_s = 0.02  # episodes are still running when the node goes
        spec = EvalSpec(
            env=env_config_from({"backend": "tau2", "user": {"kind": "replay"}}),
            policy=PolicyConfig(base_url=agent.base_url, model="scripted"),
            domain="retail",
            split="test",
            user_turns=user_turns(tasks),
        )
        summary = evaluate(
            spec,
            tmp_path,
            tasks=list(range(20)),
            trials=2,
            runner=kill_a_node_midway,
            progress=False,
        )
    # the killed node's episodes (under way, or sent to it and not yet begun: the agent may
    # never have seen those) were played again by the other workers
    requeued = [r.getMessage() for r in caplog.records if "re-queued" in r.getMessage()]
    assert requeued and any("is gone" in r.getMessage() for r in caplog.records)
    assert summary["episodes"] == 40 and summary["errors"] == 0 and summary["missing"] == 0
    assert summary["success_rate"] == 1.0
    journal = [json.loads(line) for line in (tmp_path / JOURNAL_FILE).read_text().splitlines()]
    assert len(journal) == 40  # each episode stored once
    count, node_id = killed[0]
    # the node was killed mid-run; which of its finished results arrive after the kill depends on
    # the machine's load, so the test asks only that the run completed without it
    assert count < 40 and node_id not in {n.node_id for n in cluster.worker_nodes}
