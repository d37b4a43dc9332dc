"""``tau-bench-env eval``: a policy endpoint against a domain, with local scripted servers.

The agent and user are OpenAI-compatible HTTP servers on 127.0.0.1 written in
``tau_eval_helpers``: an oracle playing each task's ground truth, an agent
making known mistakes, and servers failing chosen tasks.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from tau_eval_helpers import MISTAKES, AgentServer, UserServer, closing_reply, user_turns
from tau_helpers import action_texts, run_episode

from tau_bench_env.backends import load_domain
from tau_bench_env.cli.main import main
from tau_bench_env.config import env_config_from
from tau_bench_env.episode.env import TauBenchEnv
from tau_bench_env.episode.reward import GROUND_TRUTH
from tau_bench_env.evaluation.evaluate import (
    JOURNAL_FILE,
    PLOT_FILE,
    RESULTS_FILE,
    SUMMARY_FILE,
    EvalSpec,
    ResultsStore,
    evaluate,
    parse_selection,
    run_threads,
)
from tau_bench_env.evaluation.policy import ChatPolicy, PolicyConfig, PolicyEndpointError
from tau_bench_env.rescoring.figures import summarize
from tau_bench_env.rescoring.rescore import rescore

BACKEND = "tau2"
REPO = Path(__file__).resolve().parents[2]


def _spec(
    domain: str, split: str, agent_url: str, *, mode: str = "native", user: Any = None, **env: Any
) -> EvalSpec:
    tasks = load_domain(BACKEND, domain).tasks(split)
    user_config = user or {"kind": "replay"}
    return EvalSpec(
        env=env_config_from({"backend": BACKEND, "user": user_config, **env}),
        policy=PolicyConfig(
            base_url=agent_url, model="scripted", tool_mode=mode, max_retries=1, backoff_s=0.0
        ),
        domain=domain,
        split=split,
        user_turns=user_turns(tasks),
    )


def _ground_truth_passes(domain_name: str, split: str, indices: Sequence[int]) -> set[int]:
    """Tasks whose ground truth (and a reply naming the outputs) scores 1.0 through ``step()``."""
    domain = load_domain(BACKEND, domain_name)
    tasks = domain.tasks(split)
    passing = set()
    for index in indices:
        task = tasks[index]
        extras = {"domain": domain_name, "split": split, "task_index": index}
        extras["user_turns"] = user_turns([task])[task.task_id]
        env = TauBenchEnv({"backend": BACKEND, "user": {"kind": "replay"}}, extras=extras)
        outputs = run_episode(env, [*action_texts(task.actions), closing_reply(task)])
        if outputs[-1]["done"] and outputs[-1]["reward"] == 1.0:
            passing.add(index)
    return passing


def _evaluate(spec: EvalSpec, out: Path, tasks: Sequence[int], trials: int, **kw: Any) -> dict:
    runner = kw.pop("runner", partial(run_threads, concurrency=4))
    return evaluate(spec, out, tasks=tasks, trials=trials, runner=runner, progress=False, **kw)


def _rescored(out: Path, domain: str) -> dict[tuple[int, int], Any]:
    runs = json.loads((out / RESULTS_FILE).read_text())
    return {(s.task_id, s.trial): s for s in rescore(load_domain(BACKEND, domain), runs)}


def _oracle_check(domain_name: str, split: str, indices: list[int], mode: str, out: Path) -> None:
    domain = load_domain(BACKEND, domain_name)
    passing = _ground_truth_passes(domain_name, split, indices)
    assert passing  # the check below is not vacuous
    GROUND_TRUTH.clear()
    before = GROUND_TRUTH.computations
    with AgentServer(domain, domain.tasks(split)).running() as agent:
        summary = _evaluate(_spec(domain_name, split, agent.base_url, mode=mode), out, indices, 2)
    assert summary["errors"] == 0 and summary["episodes"] == 2 * len(indices)
    assert 0 < GROUND_TRUTH.computations - before <= len(indices)  # per task, not per episode
    for index in passing:
        assert summary["per_task"][str(index)]["rewards"] == [1.0, 1.0], index
    rescored = _rescored(out, domain_name)
    for episode in summary["episode_list"]:
        assert rescored[(episode["task_id"], episode["trial"])].reward == episode["reward"]
    # our own results replay on the same data with every recorded tool result reproduced
    assert sum(s.tool_results for s in rescored.values()) > 0
    assert [s.first_divergence for s in rescored.values() if s.diverged] == []


@pytest.mark.parametrize(
    ("domain", "mode"),
    [
        ("airline", "native"),  # tools= in the request, tool_calls in the reply
        ("retail", "text"),  # <tool_call> in the text, parsed as the env parses it
    ],
)
def test_oracle_scores_one_where_the_ground_truth_does(
    domain: str, mode: str, tmp_path: Path
) -> None:
    _oracle_check(domain, "test", list(range(0, 20, 2)), mode, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_oracle_on_every_task(domain: str, tmp_path: Path) -> None:
    count = len(load_domain(BACKEND, domain).tasks("base"))
    _oracle_check(domain, "base", list(range(count)), "native", tmp_path)


def test_known_mistakes_score_what_rescore_says(tmp_path: Path) -> None:
    domain = load_domain(BACKEND, "retail")
    tasks = domain.tasks("test")
    # tasks with outputs and with writes, so each mistake fails a different check
    chosen = [i for i, t in enumerate(tasks) if t.outputs and 1 < len(t.actions) < 10][:4]
    with AgentServer(domain, tasks, mistakes=True).running() as agent:
        spec = _spec("retail", "test", agent.base_url, max_turns=12)
        summary = _evaluate(spec, tmp_path, chosen, len(MISTAKES))
    rescored = _rescored(tmp_path, "retail")
    assert len(rescored) == len(chosen) * len(MISTAKES)
    for episode in summary["episode_list"]:
        score = rescored[(episode["task_id"], episode["trial"])]
        assert score.reward == episode["reward"] and list(score.result.failed) == episode["failed"]
    assert summary["pass_hat_k"] == pytest.approx(summarize(list(rescored.values()))["pass_hat_k"])
    for index in chosen:  # one oracle episode in four per task; the others fail
        assert sorted(summary["per_task"][str(index)]["rewards"]) == [0.0, 0.0, 0.0, 1.0]
    checks = summary["failed_checks"]
    assert checks["truncated"] == len(chosen)  # the looping agent hit max_turns
    assert checks["outputs"] >= len(chosen)  # the closing reply without the outputs
    assert checks["data_hash"] >= len(chosen)  # the dropped write (and the loop writes nothing)
    assert summary["success_rate"] == pytest.approx(0.25)
    assert summary["pass_hat_k"] == pytest.approx({"1": 0.25, "2": 0.0, "3": 0.0, "4": 0.0})


def test_cli_eval_then_rescore_round_trip(tmp_path: Path, capsys) -> None:
    domain = load_domain(BACKEND, "airline")
    tasks = domain.tasks("test")
    out = tmp_path / "run"
    with AgentServer(domain, tasks).running() as agent, UserServer(tasks).running() as user:
        args = ["eval", "--domain", "airline", "--backend", BACKEND, "--tasks", "0-5,9"]
        args += ["--trials", "3", "--out", str(out), "--concurrency", "3"]
        args += ["--agent-base-url", agent.base_url, "--agent-model", "scripted"]
        args += ["--user-kind", "openai", "--user-base-url", user.base_url, "--user-model", "u"]
        assert main(args) == 0
        text, progress = capsys.readouterr()
        assert "21/21" in progress and "success=1.000" in progress and "errors=0" in progress
        assert main([*args, "--json"]) == 2  # the directory holds a run: --resume or --out
        assert "--resume" in capsys.readouterr().err
        assert main([*args, "--json", "--resume"]) == 0  # nothing left to run
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 21 and summary["errors"] == 0
    assert "success rate: 1.0000" in text and "k=3: 1.0000" in text
    assert "per task (task:successes/judged): 0:3/3 1:3/3" in text
    assert f"task set: {domain.task_set}\n" in text  # tau2-bench 1.x's airline tasks
    assert summary["task_set"] == domain.task_set.to_dict()
    assert main(["rescore", str(out / RESULTS_FILE), "--domain", "airline", "--json"]) == 0
    rescored = json.loads(capsys.readouterr().out)
    assert rescored["agreement"] == 1.0 and rescored["runs"] == 21
    assert rescored["pass_hat_k"] == pytest.approx(summary["pass_hat_k"])
    assert (out / PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / SUMMARY_FILE).read_text())["episodes"] == 21


def test_failing_endpoints_are_errors_and_resume_completes(tmp_path: Path) -> None:
    domain = load_domain(BACKEND, "airline")
    tasks = domain.tasks("test")
    indices = list(range(6))
    user_config = {"kind": "openai", "model": "u", "max_retries": 1, "backoff_s": 0.0}
    with AgentServer(domain, tasks).running() as agent, UserServer(tasks).running() as user:
        user_config["base_url"] = user.base_url
        spec = _spec("airline", "test", agent.base_url, user=user_config)
        agent.fail_tasks = {tasks[1].task_id, tasks[2].task_id}  # the agent's endpoint: HTTP 500
        user.fail_tasks = {tasks[4].task_id}  # the user simulator: the env masks the episode
        first = _evaluate(spec, tmp_path, indices, 2)
        assert first["errors"] == 6 and first["episodes"] == 6
        kinds = sorted((e["task_id"], e["kind"]) for e in first["error_list"])
        assert kinds == [(1, "agent")] * 2 + [(2, "agent")] * 2 + [(4, "user")] * 2
        assert all("500" in e["cause"] for e in first["error_list"])
        assert first["success_rate"] == 1.0 and first["complete_tasks"] == 3  # errors left out
        runs = json.loads((tmp_path / RESULTS_FILE).read_text())
        assert sorted({r["task_id"] for r in runs}) == [0, 3, 5]  # no error became a 0.0
        agent.fail_tasks, user.fail_tasks = set(), set()
        second = _evaluate(spec, tmp_path, indices, 2, resume=True)
    assert second["errors"] == 0 and second["episodes"] == 12
    assert second["pass_hat_k"] == {"1": 1.0, "2": 1.0}
    journal = (tmp_path / JOURNAL_FILE).read_text().splitlines()
    assert len(journal) == 18  # 12 first (6 errors), then only the 6 errored pairs again


@pytest.mark.parametrize(
    ("user_up", "side"),
    [
        (True, "agent"),  # the user answers, the agent is down: every error names the agent
        (False, "user"),  # both down: the user is asked first (the opening message), so it
    ],
)
def test_errors_name_the_endpoint_that_failed_first(
    user_up: bool, side: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    domain = load_domain(BACKEND, "airline")
    tasks = domain.tasks("test")
    down = "http://127.0.0.1:9/v1"  # nothing listens on port 9 of loopback: connection refused
    with UserServer(tasks).running() as user:
        config = tmp_path / "env.yaml"  # no retries: the run is quick
        user_url = user.base_url if user_up else down
        config.write_text(json.dumps({"user": {"base_url": user_url, "max_retries": 0}}))
        args = ["eval", "--config", str(config), "--domain", "airline", "--backend", BACKEND]
        args += ["--tasks", "0-11", "--out", str(tmp_path / "run"), "--no-progress"]
        args += ["--agent-base-url", down, "--agent-model", "m", "--max-retries", "0"]
        assert main(args) == 1
    text = capsys.readouterr().out
    listed = [line for line in text.splitlines() if line.startswith("  error: ")]
    assert len(listed) == 10 and "  ... and 2 more (summary.json: error_list)" in text
    assert f"errors by the side that failed first: {side} 12\n" in text
    failed_url = down if side == "agent" else user_url
    for line in listed:
        assert f" {side}: " in line and f"{side} endpoint {failed_url}/chat/completions" in line
    other = "user" if side == "agent" else "agent"
    assert f"{other} endpoint" not in text
    hint = f"the user simulator is the chat endpoint {down}, set by --user-base-url"
    assert (hint in text) == (side == "user")
    assert f"agent: {down} (model m)  user: {user_url} (model gpt-4o)\n" in text


def test_agent_timeout_is_an_error(tmp_path: Path) -> None:
    domain = load_domain(BACKEND, "airline")
    with AgentServer(domain, domain.tasks("test")).running() as agent:
        agent.delay_s = 0.5
        spec = _spec("airline", "test", agent.base_url)
        policy = PolicyConfig(base_url=agent.base_url, timeout_s=0.1, max_retries=1, backoff_s=0)
        spec = EvalSpec(spec.env, policy, spec.domain, spec.split, spec.user_turns)
        summary = _evaluate(spec, tmp_path, [0], 1)
    assert summary["errors"] == 1 and summary["episodes"] == 0
    assert "after 2 attempts" in summary["error_list"][0]["cause"]


def test_an_interrupted_run_loses_no_finished_episode(tmp_path: Path) -> None:
    domain = load_domain(BACKEND, "retail")
    indices = list(range(8))

    def interrupted(spec: EvalSpec, items: Sequence[tuple[int, int]]) -> Iterator[dict]:
        for count, record in enumerate(run_threads(spec, items, concurrency=2)):
            if count == 5:
                raise KeyboardInterrupt  # Ctrl-C after five episodes
            yield record

    with AgentServer(domain, domain.tasks("test")).running() as agent:
        spec = _spec("retail", "test", agent.base_url)
        with pytest.raises(KeyboardInterrupt):
            _evaluate(spec, tmp_path, indices, 2, runner=interrupted)
        assert len(json.loads((tmp_path / RESULTS_FILE).read_text())) == 5
        (tmp_path / JOURNAL_FILE).open("a").write('{"task_id": 7, "tri')  # a kill mid-line
        summary = _evaluate(spec, tmp_path, indices, 2, resume=True)
    assert summary["episodes"] == 16 and summary["success_rate"] == 1.0
    assert len(json.loads((tmp_path / RESULTS_FILE).read_text())) == 16


def test_resume_refuses_another_split(tmp_path: Path) -> None:
    domain = load_domain(BACKEND, "airline")
    with AgentServer(domain, domain.tasks("base")).running() as agent:
        _evaluate(_spec("airline", "test", agent.base_url), tmp_path, [0], 1)
        with pytest.raises(ValueError, match="use another --out"):
            _evaluate(_spec("airline", "train", agent.base_url), tmp_path, [0], 1, resume=True)


def test_resume_refuses_another_task_set(tmp_path: Path) -> None:
    # a journal scored against other task files (another release) is not continued
    domain = load_domain(BACKEND, "airline")
    with AgentServer(domain, domain.tasks("base")).running() as agent:
        _evaluate(_spec("airline", "test", agent.base_url), tmp_path, [0], 1)
        journal = tmp_path / JOURNAL_FILE
        record = json.loads(journal.read_text())
        record["info"]["task_set"] = "tau2-bench 0.2.0, tasks sha256:000000000000"
        journal.write_text(json.dumps(record) + "\n")
        with pytest.raises(
            ValueError, match="scored against task set 'tau2-bench 0.2.0.*another --out"
        ):
            _evaluate(_spec("airline", "test", agent.base_url), tmp_path, [0], 1, resume=True)


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        (None, [0, 1, 2, 3]),  # every task
        ("all", [0, 1, 2, 3]),
        ("3,1", [1, 3]),  # sorted
        ("0-2,1", [0, 1, 2]),  # ranges, duplicates once
    ],
)
def test_parse_selection(selection: str | None, expected: list[int]) -> None:
    assert parse_selection(selection, 4) == expected


@pytest.mark.parametrize("selection", ["4", "x", "1-"])
def test_parse_selection_errors(selection: str) -> None:
    with pytest.raises(ValueError, match="--tasks"):
        parse_selection(selection, 4)


def test_policy_client_errors() -> None:
    with pytest.raises(ValueError, match="tool_mode"):
        PolicyConfig(tool_mode="xml")
    # nothing listens on port 9 of loopback: connection refused, retried, then a named error
    policy = ChatPolicy(PolicyConfig(base_url="http://127.0.0.1:9/v1", max_retries=1, backoff_s=0))
    with pytest.raises(PolicyEndpointError, match="after 2 attempts"):
        policy.act([{"role": "user", "content": "hi"}], [], 1)


def _sigint_default() -> None:
    """In a child before it runs: SIGINT's default action, whatever the parent inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_keeps_the_finished_episodes_and_says_so_in_one_line(tmp_path: Path) -> None:
    """A real `tau-bench-env eval` process group gets SIGINT after its first episode."""
    domain = load_domain(BACKEND, "airline")
    tasks = domain.tasks("test")
    out = tmp_path / "run"
    journal = out / JOURNAL_FILE
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with AgentServer(domain, tasks).running() as agent, UserServer(tasks).running() as user:
        agent.delay_s = 0.2  # episodes of a few seconds: the run is still going at the signal
        args = ["eval", "--domain", "airline", "--backend", BACKEND, "--tasks", "0-9"]
        args += ["--trials", "4", "--out", str(out), "--concurrency", "1", "--no-progress"]
        args += ["--agent-base-url", agent.base_url, "--agent-model", "scripted"]
        args += ["--user-kind", "openai", "--user-base-url", user.base_url, "--user-model", "u"]
        process = subprocess.Popen(
            [sys.executable, "-m", "tau_bench_env.cli", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a terminal's Ctrl-C reaches the whole group
            preexec_fn=_sigint_default,  # as a terminal's: not ignored (a background job's is)
        )
        try:
            deadline = time.monotonic() + 120
            while not (journal.exists() and journal.stat().st_size) and time.monotonic() < deadline:
                assert process.poll() is None, process.communicate()
                time.sleep(0.05)
            os.killpg(process.pid, signal.SIGINT)
            _, stderr = process.communicate(timeout=120)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    kept = len(journal.read_text().splitlines())
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert 0 < kept < 40
    assert stderr.strip().splitlines()[-1] == (
        f"tau-bench-env eval: interrupted; {kept} finished episodes are kept in {journal} "
        f"(judged runs in {out / RESULTS_FILE}); rerun the same command with --resume to run "
        "the rest"
    )
    assert len(json.loads((out / RESULTS_FILE).read_text())) == kept


# --- Ctrl-C inside ResultsStore.add: results.json and the journal agree -------------------------

ADD = ResultsStore.add.__code__
ADD_LINES = sorted(
    {line for _, _, line in ADD.co_lines() if line is not None and line > ADD.co_firstlineno + 1}
)
"""The lines of ``ResultsStore.add``'s body (not its ``def`` and docstring)."""
_SOURCE = Path(inspect.getsourcefile(ResultsStore)).read_text().splitlines()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[EvalSpec, list[dict[str, Any]]]:
    """Four real episodes' records (tau2 retail, two tasks, two trials), as the journal has them."""
    domain = load_domain(BACKEND, "retail")
    out = tmp_path_factory.mktemp("recorded")
    with AgentServer(domain, domain.tasks("test")).running() as agent:
        spec = _spec("retail", "test", agent.base_url)
        summary = _evaluate(spec, out, [0, 1], 2)
    assert summary["episodes"] == 4
    return spec, [json.loads(line) for line in (out / JOURNAL_FILE).read_text().splitlines()]


def _judged_keys(records: Sequence[dict[str, Any]]) -> list[tuple[int, int]]:
    return sorted((r["task_id"], r["trial"]) for r in records if "error" not in r)


@pytest.mark.parametrize(
    "line", ADD_LINES, ids=[_SOURCE[line - 1].strip()[:40] for line in ADD_LINES]
)
def test_ctrl_c_at_any_line_of_add_keeps_results_and_journal_equal(
    line: int,
    recorded: tuple[EvalSpec, list[dict[str, Any]]],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """A real SIGINT lands just before ``line`` of ``ResultsStore.add`` runs for the first
    record (a trace function sends it to this process; Python's own handler raises
    KeyboardInterrupt in ``add``'s frame). Among them: after the journal line is flushed and
    before the record is kept, the window a clean-clone CI run once lost an episode in."""
    spec, records = recorded
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own handler
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    by_key = {(r["task_id"], r["trial"]): r for r in records}
    fired: list[tuple[int, int]] = []  # (journal lines on disk, runs kept) at the signal
    calls = 0

    def in_add(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == line and calls == 1 and not fired:
            store = frame.f_locals["self"]
            fired.append(
                (len((tmp_path / JOURNAL_FILE).read_bytes().splitlines()), len(store.runs))
            )
            os.kill(os.getpid(), signal.SIGINT)
        return in_add

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal calls
        if frame.f_code is not ADD:
            return None
        calls += 1
        return in_add

    def replayed(spec: EvalSpec, items: Sequence[tuple[int, int]]) -> Iterator[dict[str, Any]]:
        yield from (by_key[item] for item in items)

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            _evaluate(spec, tmp_path, [0, 1], 2, runner=replayed)
    finally:
        sys.settrace(before)
    assert fired, f"the signal never landed before line {line} of ResultsStore.add"
    journal = [json.loads(x) for x in (tmp_path / JOURNAL_FILE).read_text().splitlines()]
    results = json.loads((tmp_path / RESULTS_FILE).read_text())
    assert _judged_keys(results) == _judged_keys(journal)
    assert len(journal) in (0, 1)  # the first record: in both or in neither
    if "_keep(record)" in _SOURCE[line - 1]:
        assert fired == [(1, 0)]  # the window: its line in the journal, the record not yet kept
    summary = _evaluate(spec, tmp_path, [0, 1], 2, runner=replayed, resume=True)
    journal = (tmp_path / JOURNAL_FILE).read_text().splitlines()
    assert summary["episodes"] == len(journal) == 4  # each episode stored once
    assert _judged_keys(json.loads((tmp_path / RESULTS_FILE).read_text())) == sorted(by_key)
