"""``tau-bench-env check-tasks``: gold runs replayed on a real domain, and the summaries' count."""

from __future__ import annotations

import json

import pytest
from tau_helpers import SAMPLES

from tau_bench_env.backends import load_domain
from tau_bench_env.cli.main import main
from tau_bench_env.data_model.tasks import Action, Task
from tau_bench_env.rescoring.gold_check import GoldChecks, check_task

TAU2_499 = {
    # tau2-bench #499: 18 gold actions of retail fail during replay, in these 15 tasks
    # (16 reads of users, products or orders absent from db.json, 2 writes: 64 and 105)
    "2": [(1, "get_product_details")],
    "3": [(1, "get_product_details")],
    "4": [(1, "get_product_details")],
    "35": [(0, "find_user_id_by_email")],
    "37": [(0, "find_user_id_by_email")],
    "38": [(0, "find_user_id_by_email")],
    "39": [(0, "find_user_id_by_name_zip")],
    "46": [(1, "get_order_details"), (2, "get_order_details")],
    "47": [(1, "get_order_details"), (2, "get_order_details")],
    "54": [(0, "find_user_id_by_email")],
    "55": [(0, "find_user_id_by_email")],
    "64": [(6, "exchange_delivered_order_items")],
    "67": [(0, "find_user_id_by_name_zip"), (1, "find_user_id_by_name_zip")],
    "68": [(0, "find_user_id_by_name_zip")],
    "105": [(0, "exchange_delivered_order_items")],
}


def test_retail_list_is_tau2_499s(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-tasks", "--domain", "retail", "--json", "--no-progress"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert (found["tasks"], found["affected"], found["not_paid"]) == (114, 15, 0)
    listed = {
        c["task_id"]: [(a["index"], a["name"]) for a in c["failed_actions"]]
        for c in found["checks"]
    }
    assert listed == TAU2_499
    assert sum(len(v) for v in listed.values()) == 18
    writes = {c["task_id"]: c["failed_actions"][0]["error"] for c in found["checks"]}
    assert writes["64"] == "Error: Non-delivered order cannot be exchanged"
    assert writes["105"] == "Error: Insufficient gift card balance to pay for the price difference"


def test_airline_gold_runs_all_replay_and_pay(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-tasks", "--domain", "airline", "--split", "test", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "tasks checked: 20  affected: 0 (0 with a gold action that fails in replay" in out


def test_a_failing_action_and_an_unpayable_output_are_listed() -> None:
    """A gold action the domain lacks fails in replay (and is ignored by the reward's own
    replay); an output with a comma can never be paid (tau-bench's check removes commas from
    the reply, not from the output): the gold run that states it is paid 0.0."""
    domain = load_domain("tau2", "retail")
    base = domain.tasks("test")[0]
    task = Task(
        task_id="bad",
        instruction=base.instruction,
        actions=(*base.actions, Action("no_such_tool", {})),
        outputs=("1,234.50",),
        user_id=base.user_id,
    )
    found = check_task(domain, task)
    assert found.affected and not found.unchecked
    assert [(a.name, a.error) for a in found.failed_actions] == [
        ("no_such_tool", "Unknown action no_such_tool")
    ]
    assert (found.reward, found.failed_checks) == (0.0, ("outputs",))


def test_the_check_runs_once_per_task() -> None:
    domain = load_domain("tau2", "airline")
    checks = GoldChecks()
    task = domain.tasks("test")[0]
    assert checks.get(domain, task) is checks.get(domain, task)


def test_rescore_names_the_affected_scored_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rescore", str(SAMPLES / "tau2_retail_results.json"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["gold_checks"]["affected_tasks"] == ["38"]
    assert summary["gold_checks"]["tasks"] == summary["tasks"]
    assert main(["rescore", str(SAMPLES / "tau2_retail_results.json")]) == 0
    out = capsys.readouterr().out
    assert (
        "gold checks: 1 of 2 scored tasks affected (1 with a gold action that fails in replay, "
        "0 whose gold run is not paid 1.0; tau-bench-env check-tasks lists them): 38\n"
    ) in out


def test_unknown_domain_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-tasks", "--domain", "telecom", "--no-progress"]) == 2
    assert "telecom" in capsys.readouterr().err
