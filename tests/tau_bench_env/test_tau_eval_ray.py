"""``tau-bench-env eval`` spread over a three-node Ray cluster on this machine (loopback)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, suppress
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray
from ray._private import ray_constants
from ray.cluster_utils import Cluster
from tau_eval_helpers import AgentServer, user_turns

from tau_bench_env.backends import load_domain
from tau_bench_env.cli.main import main
from tau_bench_env.config import env_config_from
from tau_bench_env.evaluation.eval_ray import run_ray
from tau_bench_env.evaluation.evaluate import JOURNAL_FILE, RESULTS_FILE, EvalSpec, evaluate
from tau_bench_env.evaluation.policy import PolicyConfig
from tau_bench_env.rescoring.figures import summarize
from tau_bench_env.rescoring.rescore import rescore

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


HOLD_WAIT_S = 120.0
"""Longest wait for a worker node's episode to be held at the agent before the kill."""


def _node_processes(node: Any) -> list[psutil.Process]:
    """A Ray node's raylet and every process it started (the workers running episodes)."""
    raylet = psutil.Process(node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid)
    return [raylet, *raylet.children(recursive=True)]


def _ports_to(processes: Sequence[psutil.Process], port: int) -> set[int]:
    """Local ports of the processes' TCP connections to 127.0.0.1:``port``."""
    found = set()
    for process in processes:
        try:
            connections = process.net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        found |= {c.laddr.port for c in connections if c.raddr and c.raddr.port == port}
    return found


def test_a_killed_node_loses_no_episode(
    cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker node is killed while one of its episodes waits for the agent's answer.

    After 10 episodes the agent holds its answers; the run goes on filling every worker's
    slots, each new episode stopping at its first agent request. Once a request held at the
    agent comes from a worker node's process (its TCP connection's port is one of that node's
    processes'), the node's processes are killed, and only then are the answers released:
    that episode cannot end on the killed node, so it must be re-queued."""
    domain = load_domain("tau2", "retail")
    tasks = domain.tasks("test")
    killed: list[tuple[str, set[str]]] = []  # (node id, tasks of its requests held at the agent)
    failures: list[BaseException] = []

    def kill_a_node_running_an_episode() -> None:
        agent.answering.clear()
        try:
            agent_port = int(agent.base_url.rsplit(":", 1)[1].split("/")[0])
            deadline = time.monotonic() + HOLD_WAIT_S
            while not killed:
                for node in cluster.worker_nodes:
                    processes = _node_processes(node)
                    held = agent.held
                    ports = held.keys() & _ports_to(processes, agent_port)
                    if ports:
                        killed.append((node.node_id, {held[port] for port in ports}))
                        cluster.remove_node(node, allow_graceful=False)
                        for process in processes:
                            with suppress(psutil.NoSuchProcess):
                                process.kill()
                        _, alive = psutil.wait_procs(processes, timeout=30)
                        assert not alive, f"processes of the killed node still run: {alive}"
                        break
                else:
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"no worker node's episode waited for the agent within "
                            f"{HOLD_WAIT_S:.0f} s: the run did not refill its workers"
                        )
                    time.sleep(0.05)
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            failures.append(error)
        finally:
            agent.answering.set()

    def kill_a_node_midway(spec: EvalSpec, items: Sequence[tuple[int, int]]) -> Iterator[dict]:
        runner = run_ray(spec, items, workers=5, concurrency=2, address=cluster.address)
        killer = threading.Thread(target=kill_a_node_running_an_episode, daemon=True)
        with closing(runner):
            for count, record in enumerate(runner):
                if count == 10:
                    killer.start()  # the driver keeps refilling the workers meanwhile
                yield record
        killer.join(timeout=HOLD_WAIT_S + 60)

    caplog.set_level(logging.INFO, logger="tau_bench_env.evaluation.eval_ray")
    with AgentServer(domain, tasks).running() as agent:
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
    assert not failures, failures
    assert killed, "no node was killed"
    node_id, running = killed[0]
    assert node_id not in {n.node_id for n in cluster.worker_nodes}
    # every episode held at the agent on the killed node was played again elsewhere
    requeued = [r.args for r in caplog.records if "re-queued" in r.getMessage()]
    assert running <= {tasks[int(task)].task_id for task, _ in requeued}, (running, requeued)
    assert any("is gone" in r.getMessage() for r in caplog.records)
    assert summary["episodes"] == 40 and summary["errors"] == 0 and summary["missing"] == 0
    assert summary["success_rate"] == 1.0
    journal = [json.loads(line) for line in (tmp_path / JOURNAL_FILE).read_text().splitlines()]
    assert len(journal) == 40  # each episode stored once
