"""`skyrl-rewards serve` on a two-node loopback Ray cluster, through real HTTP.

One cluster, one pool and one service for the module (starting them takes
about 20 s). The service runs with a token, small caps (64 rows a request,
128 queued) and scorer replicas that take one request each, so that two slow
requests are sure to be on both replicas when one is killed. Slow rows are
math answers that make SymPy hang: each costs the pool's math child its CPU
limit (1 s here) and comes back ``timeout``, masked with its cause. Every
fault test proves its fault at the server: the gateway's counters and the
causes it logged (``GET /v1/metrics``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray
from nemo_gym_requests import verify_request
from ray import serve
from ray_clusters import two_node_cluster
from test_pool_faults import HANG_ANSWER, needs_hang

from skyrl_rewards.pool import service as pool_service
from skyrl_rewards.pool.config import load_pool_config
from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.rewards.mix import RewardMix
from skyrl_rewards.serve.launch import (
    NoPoolToServeError,
    ServeAddressError,
    ServiceExistsError,
    start_service,
    stop_service,
)
from skyrl_rewards.serve.settings import ServeConfig

pytestmark = [pytest.mark.slow, pytest.mark.multinode, needs_hang]

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
POOL = "serve_test_pool"
MIX = {"accuracy": {"weight": 1.0, "math_timeout_s": 1.0}, "format": {"weight": 0.5}}
WAIT_S = 180.0  # generous bound on any wait below (a loaded 2-core machine)
_slow = itertools.count()


def rows_of(n: int) -> list[dict[str, Any]]:
    """Rows with right, wrong, unparseable and missing-solution answers (the last is masked)."""
    kinds = [
        {"completion": "<think>a</think><answer>4</answer>", "solution": "<answer>4</answer>"},
        {"completion": "<think>b</think><answer>\\frac{1}{2}</answer>", "solution": "0.5"},
        {"completion": "<answer>5</answer>", "solution": "<answer>4</answer>"},
        {"completion": "no tags at all", "solution": "3"},
        {"completion": "<answer>7</answer>"},  # no solution: a dataset error, masked
    ]
    return [{**kinds[i % len(kinds)], "n": i} for i in range(n)]


def slow_rows(n: int) -> list[dict[str, Any]]:
    """``n`` rows each costing the math limit (distinct solutions: no cache answers them)."""
    return [
        {
            "completion": f"<think>t</think><answer>{HANG_ANSWER}</answer>",
            "solution": f"<answer>{next(_slow) + 10}</answer>",
        }
        for _ in range(n)
    ]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def service() -> Iterator[tuple[str, ServeConfig]]:
    """A two-node cluster, a 2-worker pool spread over it, and the service in front of it."""
    with two_node_cluster(head_cpus=2):
        pool_config = load_pool_config(
            {
                "name": POOL,
                "num_workers": 2,
                "local_rewards": [],  # every component crosses to the workers
                "timeout_s": 60.0,
                "rewards": MIX,
            }
        )
        pool_service.start(pool_config)
        config = ServeConfig(
            port=free_port(),
            token=TOKEN,
            pool_name=POOL,
            num_scorers=2,
            scorer_max_ongoing_requests=1,
            max_rows=64,
            max_queued_rows=128,
            max_body_bytes=256 * 1024,
            max_queued_bytes=300 * 1024,
        )
        url = start_service(config)
        try:
            yield url, config
        finally:
            stop_service(config)
            serve.shutdown()
            pool_service.stop(POOL)


def metrics(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/v1/metrics", headers=AUTH, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def replica_logs(app_name: str, deployment: str) -> dict[str, str]:
    """Replica id -> what it logged (Serve's replica log files of this cluster's session)."""
    logs = Path(ray._private.worker._global_node.get_logs_dir_path()) / "serve"
    prefix = f"replica_{app_name}_{deployment}_"
    return {
        path.stem[len(prefix) :]: path.read_text(errors="replace")
        for path in sorted(logs.glob(f"{prefix}*.log"))
    }


def gateway_log(app_name: str) -> str:
    """What the gateway replicas logged."""
    return "".join(replica_logs(app_name, "Gateway").values())


def scorer_replicas(app_name: str) -> dict[str, Any]:
    """Replica id -> actor handle of each live scorer replica."""
    prefix = f"SERVE_REPLICA::{app_name}#Scorer#"
    return {
        actor["name"][len(prefix) :]: ray.get_actor(actor["name"], namespace="serve")
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor["namespace"] == "serve" and actor["name"].startswith(prefix)
    }


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S:g}s: {what}"
        time.sleep(0.05)


def post(url: str, route: str, body: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{url}{route}", json=body, headers=AUTH, timeout=WAIT_S, **kwargs)


def in_process(rows: list[dict[str, Any]]) -> list[Any]:
    mix = RewardMix.from_config(MIX)
    return [mix.score(row) for row in rows]


def test_batch_route_gives_the_in_process_values_to_the_bit(service) -> None:
    url, _ = service
    rows = rows_of(40)
    response = post(url, "/v1/score", {"rows": rows})
    assert response.status_code == 200, response.text
    answered = response.json()["results"]
    pool = RewardPool.connect(POOL)
    try:
        through_pool = pool.score(rows)
    finally:
        pool.shutdown()
    for row, got, here, pooled in zip(rows, answered, in_process(rows), through_pool, strict=True):
        assert got["value"] == here.total == pooled.total, row  # floats equal, not close
        assert got["components"] == here.components == pooled.components
        assert got["status"] == here.status
        assert got["masked"] is here.should_mask
    masked = [got for got in answered if got["masked"]]
    assert len(masked) == 8 and all("solution: missing" in got["cause"] for got in masked)
    assert all(got["cause"] is None for got in answered if not got["masked"])


def test_openrlhf_route_speaks_openrlhfs_shapes(service) -> None:
    url, _ = service
    rows = rows_of(10)
    prompts = [f"Question {i}: " for i in range(10)]
    labels: list[Any] = [row["solution"] if "solution" in row else {} for row in rows]
    body = {
        "query": [p + row["completion"] for p, row in zip(prompts, rows, strict=True)],
        "prompts": prompts,
        "labels": labels,
    }
    response = post(url, "/get_reward", body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert set(answer) == {"rewards", "scores", "extra_logs"}
    expected = in_process(
        [
            {
                **({"solution": row["solution"]} if "solution" in row else {}),
                "prompt": p,
                "completion": row["completion"],
            }
            for p, row in zip(prompts, rows, strict=True)
        ]
    )
    assert answer["rewards"] == answer["scores"] == [r.total for r in expected]
    assert answer["extra_logs"]["masked"] == [float(r.should_mask) for r in expected]
    assert answer["extra_logs"]["accuracy"] == [r.components["accuracy"] for r in expected]


def test_verify_route_speaks_nemo_gyms_shapes(service) -> None:
    url, _ = service
    request = verify_request(["<think>x</think><answer>4</answer>"], solution="<answer>4</answer>")
    answer = post(url, "/verify", request).json()
    here = in_process(
        [{"solution": "<answer>4</answer>", "completion": "<think>x</think><answer>4</answer>"}]
    )[0]
    assert answer["reward"] == here.total == 1.5
    assert answer["reward_components"] == here.components
    assert answer["mask_sample"] is False and answer["failure_kind"] is None
    assert answer["response"] == request["response"]
    broken = post(url, "/verify", {**request, "solution": None}).json()
    assert broken["mask_sample"] is True and broken["failure_kind"] == "verifier_error"
    assert "solution" in broken["failure_reason"]


def test_verl_reward_function_through_the_service(service, monkeypatch) -> None:
    from skyrl_rewards.serve.verl_reward import compute_score

    url, _ = service
    monkeypatch.setenv("SKYRL_REWARDS_SERVE_TOKEN", TOKEN)
    rows = [row for row in rows_of(20) if "solution" in row]
    before = metrics(url)["routes"].get("/v1/score", {}).get("requests", 0)

    async def score_all() -> list[dict[str, float]]:
        # verl's reward loop: one awaited call per sample, all at once, verl's own keywords
        return await asyncio.gather(
            *(
                compute_score(
                    data_source="test",
                    solution_str=row["completion"],
                    ground_truth=row["solution"],
                    extra_info={"index": i},
                    url=url,
                )
                for i, row in enumerate(rows)
            )
        )

    answers = asyncio.run(score_all())
    expected = in_process(
        [
            {"solution": r["solution"], "data_source": "test", "completion": r["completion"]}
            for r in rows
        ]
    )
    assert [a["score"] for a in answers] == [r.total for r in expected]
    assert [a["accuracy"] for a in answers] == [r.components["accuracy"] for r in expected]
    assert all(a["masked"] == 0.0 for a in answers)
    sent = metrics(url)["routes"]["/v1/score"]["requests"] - before
    assert 1 <= sent < len(rows)  # gathered into batches, not one request per sample


def test_verl_reward_function_on_the_pool_itself(service) -> None:
    from skyrl_rewards.serve.verl_reward import close_pool_clients, compute_score

    rows = [row for row in rows_of(10) if "solution" in row]

    async def score_all() -> list[dict[str, float]]:
        return await asyncio.gather(
            *(
                compute_score(
                    data_source="test",
                    solution_str=row["completion"],
                    ground_truth={"solution": row["solution"]},
                    extra_info={"skyrl_rewards": {"problem_type": "math"}},
                    pool=POOL,
                )
                for row in rows
            )
        )

    try:
        answers = asyncio.run(score_all())
    finally:
        close_pool_clients()
    expected = in_process(
        [
            {
                "problem_type": "math",
                "solution": r["solution"],
                "data_source": "test",
                "completion": r["completion"],
            }
            for r in rows
        ]
    )
    assert [a["score"] for a in answers] == [r.total for r in expected]


@pytest.mark.parametrize(
    ("auth", "send", "status", "cause"),
    [
        # no token, a wrong token
        ({}, {"json": {"rows": []}}, 401, "no token"),
        (
            {"Authorization": "Bearer wrong-token-123456"},
            {"json": {"rows": []}},
            401,
            "wrong token",
        ),
        # malformed bodies
        (AUTH, {"content": b"{not json"}, 400, "body: not JSON"),
        (AUTH, {"json": {"rows": "x"}}, 400, "body.rows: expected array"),
        (AUTH, {"json": {"rows": [{"solution": "1"}]}}, 400, "rows[0].completion: missing"),
        # size caps: rows and bytes
        (AUTH, {"json": {"rows": rows_of(65)}}, 413, "65 rows in one request, at most 64"),
        (AUTH, {"content": b"{" + b" " * 300_000 + b"}"}, 413, "at most 262144"),
        # no Content-Length (chunked): the stream is counted as it is read
        (AUTH, {"content": iter([b"{", b" " * 300_000, b"}"])}, 413, "more than 262144"),
    ],
)
def test_refusals_answer_a_status_and_log_the_cause(service, auth, send, status, cause) -> None:
    url, config = service
    before = metrics(url)["events"].get(str(status), 0)
    headers = {**auth, "Content-Type": "application/json"}
    response = httpx.post(f"{url}/v1/score", headers=headers, timeout=60, **send)
    assert response.status_code == status, response.text
    assert cause in response.json()["error"]
    if status == 401:
        assert response.headers["WWW-Authenticate"] == "Bearer"
    seen = metrics(url)
    assert seen["events"][str(status)] == before + 1
    assert any(cause in fault["cause"] for fault in seen["recent_faults"])
    wait_for(lambda: cause in gateway_log(config.app_name), "the cause in the gateway's log")


def test_a_429_storm_is_refused_with_retry_after_and_loses_nothing(service) -> None:
    url, _ = service
    before = metrics(url)["events"].get("429", 0)
    slow = [slow_rows(6) + rows_of(58) for _ in range(2)]  # 2 x 64 rows fill the 128 queued
    storm = [rows_of(64) for _ in range(6)]
    with ThreadPoolExecutor(len(slow) + len(storm)) as threads:
        admitted = [threads.submit(post, url, "/v1/score", {"rows": b}) for b in slow]
        wait_for(lambda: metrics(url)["queued_rows"] == 128, "the queue full")
        refused = list(threads.map(lambda b: post(url, "/v1/score", {"rows": b}), storm))
        assert [r.status_code for r in refused] == [429] * len(storm)
        assert all(r.headers["Retry-After"] == "1" for r in refused)
        assert all("busy: 128 rows queued" in r.json()["error"] for r in refused)
        answered = [future.result(WAIT_S) for future in admitted]
    for batch, response in zip(slow, answered, strict=True):  # every admitted row answered
        results = response.json()["results"]
        assert [r["status"]["accuracy"] for r in results[:6]] == ["timeout"] * 6
        assert all("timed out" in r["cause"] for r in results[:6])
        assert [r["value"] for r in results[6:]] == [r.total for r in in_process(batch[6:])]
    for batch in storm:  # the refused come back after Retry-After and are scored
        time.sleep(1)
        response = post(url, "/v1/score", {"rows": batch})
        assert response.status_code == 200 and len(response.json()["results"]) == 64
    seen = metrics(url)
    assert seen["events"]["429"] == before + len(storm)
    assert seen["queued_rows"] == 0


def test_bodies_past_max_queued_bytes_are_refused_before_they_are_read(service) -> None:
    url, _ = service
    before = metrics(url)["events"].get("429", 0)
    padding = "x" * 30_000  # a column no reward reads
    held = [{**row, "padding": padding} for row in slow_rows(6)]  # about 180 kB, in flight
    large = [{**row, "padding": padding} for row in rows_of(5)]  # 150 kB more: past 300 KiB
    with ThreadPoolExecutor(1) as threads:
        admitted = threads.submit(post, url, "/v1/score", {"rows": held})
        wait_for(lambda: metrics(url)["queued_bytes"] > 180_000, "the held body in flight")
        refused = post(url, "/v1/score", {"rows": large})
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
        assert "body bytes in flight" in refused.json()["error"]
        assert admitted.result(WAIT_S).status_code == 200
    after = post(url, "/v1/score", {"rows": large})  # the held body answered: room again
    assert after.status_code == 200
    assert [r["value"] for r in after.json()["results"]] == [r.total for r in in_process(large)]
    seen = metrics(url)
    assert seen["events"]["429"] == before + 1 and seen["queued_bytes"] == 0


def test_a_cancelled_caller_leaves_shared_work_to_the_others(service) -> None:
    """What the scorer does when Serve cancels a disconnected client's request."""
    pool = RewardPool.connect(POOL)
    rows = slow_rows(2) + rows_of(5)

    async def both() -> list[Any]:
        first = asyncio.ensure_future(pool.score_async(rows))
        second = asyncio.ensure_future(pool.score_async(rows))  # the same work, joined
        await asyncio.sleep(0.2)
        first.cancel()
        return await asyncio.wait_for(second, WAIT_S)

    try:
        results = asyncio.run(both())
        assert [r.status["accuracy"] for r in results[:2]] == ["timeout", "timeout"]
        assert [r.total for r in results[2:]] == [r.total for r in in_process(rows[2:])]
        assert [r.total for r in pool.score(rows_of(5))] == [
            r.total for r in in_process(rows_of(5))
        ]
    finally:
        pool.shutdown()


def test_a_client_killed_mid_request_loses_nothing_others_wait_for(service, tmp_path) -> None:
    url, _ = service
    victim_rows = slow_rows(6)  # about 3 s on the pool's 2 workers: killed long before
    script = tmp_path / "client.py"
    script.write_text(
        "import httpx, json, sys\n"
        "httpx.post(sys.argv[1], json=json.loads(sys.argv[2]), headers=json.loads(sys.argv[3]),"
        " timeout=600)\n"
    )
    before = metrics(url)["events"].get("disconnected", 0)
    client = subprocess.Popen(
        [
            sys.executable,
            str(script),
            f"{url}/v1/score",
            json.dumps({"rows": victim_rows}),
            json.dumps(AUTH),
        ]
    )
    try:
        wait_for(lambda: metrics(url)["queued_rows"] >= 6, "the client's request admitted")
        # another caller is in flight too when the client dies
        other: dict[str, Any] = {}
        waiting = threading.Thread(
            target=lambda: other.update(r=post(url, "/v1/score", {"rows": rows_of(20)}))
        )
        waiting.start()
        client.send_signal(signal.SIGKILL)
        client.wait(timeout=30)
        waiting.join(WAIT_S)
    finally:
        if client.poll() is None:
            client.kill()
    wait_for(
        lambda: metrics(url)["events"].get("disconnected", 0) == before + 1,
        "the gateway saw the client go",
    )
    assert other["r"].status_code == 200
    assert [r["value"] for r in other["r"].json()["results"]] == [
        r.total for r in in_process(rows_of(20))
    ]
    seen = metrics(url)
    assert any("client went away with 6 rows" in f["cause"] for f in seen["recent_faults"])
    wait_for(lambda: metrics(url)["queued_rows"] == 0, "the cancelled request's rows released")
    assert post(url, "/v1/score", {"rows": rows_of(5)}).status_code == 200


def test_a_replica_killed_mid_request_reruns_its_work_exactly_once(service) -> None:
    url, config = service
    before = metrics(url)["events"].get("replica_retry", 0)
    batch = slow_rows(2) + rows_of(21)  # 23 rows: no other test sends a request of 23
    with ThreadPoolExecutor(1) as threads:
        pending = threads.submit(post, url, "/v1/score", {"rows": batch})

        def running_on() -> list[str]:  # the replica that logged starting this request
            logs = replica_logs(config.app_name, "Scorer")
            return [uid for uid, text in logs.items() if "scoring 23 rows" in text]

        wait_for(running_on, "the request running on a scorer replica")
        (victim,) = running_on()
        replicas = scorer_replicas(config.app_name)
        assert len(replicas) == 2 and victim in replicas
        ray.kill(replicas[victim], no_restart=True)
        response = pending.result(WAIT_S)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["value"] for r in results[2:]] == [r.total for r in in_process(batch[2:])]
    assert [r["status"]["accuracy"] for r in results[:2]] == ["timeout", "timeout"]
    seen = metrics(url)
    assert seen["events"]["replica_retry"] == before + 1  # exactly one re-run
    assert any("scorer replica died mid-request" in f["cause"] for f in seen["recent_faults"])
    reran = [u for u, t in replica_logs(config.app_name, "Scorer").items() if "scoring 23" in t]
    assert len(reran) == 2 and victim in reran  # the victim, then one other replica
    wait_for(lambda: len(scorer_replicas(config.app_name)) == 2, "Serve replaced the replica")
    after = post(url, "/v1/score", {"rows": rows_of(10)}).json()["results"]
    assert [r["value"] for r in after] == [r.total for r in in_process(rows_of(10))]


def test_a_second_service_or_one_without_its_pool_is_refused(service) -> None:
    url, config = service
    with pytest.raises(NoPoolToServeError, match="no reward pool 'absent'"):
        start_service(ServeConfig(pool_name="absent", port=config.port, app_name="other"))
    with pytest.raises(ServiceExistsError, match="'skyrl_rewards' already runs"):
        start_service(config)
    # Serve has one address per cluster: a service asking for another one is refused before
    # it deploys (Serve would keep its own address, not the one asked for and printed)
    with pytest.raises(ServeAddressError, match=f"already listens on 127.0.0.1:{config.port}"):
        start_service(replace(config, app_name="other", port=config.port + 1))
    assert "other" not in serve.status().applications
    # the command line: a second `skyrl-rewards serve` is refused and leaves the first running
    second = subprocess.run(
        [
            *(sys.executable, "-m", "skyrl_rewards.cli", "serve"),
            *("--config", "configs/pool.yaml", "--port", str(config.port)),
            f"name={POOL}",
            f"address={ray.get_runtime_context().gcs_address}",
        ],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert second.returncode == 2, second.stderr[-2000:]
    assert "'skyrl_rewards' already runs" in second.stderr
    assert config.app_name in serve.status().applications
    assert post(url, "/v1/score", {"rows": rows_of(2)}).status_code == 200  # untouched
