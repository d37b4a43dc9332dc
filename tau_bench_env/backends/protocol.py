"""The small protocol between the env and a domain backend.

A backend turns a domain name (``"retail"``, ``"airline"``) into a
:class:`Domain`: the shared base data, tools by name, which tools terminate
the episode and which never write, the task splits and the policy text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tau_bench_env.episode_data import EpisodeData, clone
from tau_bench_env.hashing import HashIndex
from tau_bench_env.tasks import Task

ToolFunction = Callable[[EpisodeData, Mapping[str, Any]], str]
"""Runs one tool on episode data with keyword arguments; returns the observation.

May raise anything the domain code raises; callers turn that into an
``"Error: ..."`` observation, as tau-bench does.
"""


class UnknownSplitError(ValueError):
    """A task split that the domain does not have."""


@dataclass(frozen=True, eq=False)
class Domain:
    """One domain of one backend; immutable, shared by every episode, compared by identity.

    ``base_data`` is never mutated: episodes fork it (see
    :class:`~tau_bench_env.episode_data.EpisodeData`) and tools run on the fork.
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

    @property
    def key(self) -> str:
        """``"backend:domain"``, unique per process."""
        return f"{self.backend}:{self.name}"

    def fresh_data(self) -> EpisodeData:
        """Fresh episode data over the shared base: no disk read, no copy."""
        return EpisodeData.fork(self.base_data)

    def run_tool(self, data: EpisodeData, name: str, kwargs: Mapping[str, Any]) -> str:
        """Run tool ``name`` on ``data``; raises ``KeyError`` for an unknown tool.

        ``kwargs`` are cloned first, so tools that mutate their arguments
        cannot change a task's ground truth. Read-only tools see base records
        uncloned; others clone each record they index.
        """
        function = self.tools[name]
        arguments = clone(dict(kwargs))
        if name in self.read_only_tools:
            with data.read_only():
                return function(data, arguments)
        return function(data, arguments)

    def tasks(self, split: str) -> Sequence[Task]:
        """The tasks of ``split``; raises :class:`UnknownSplitError` naming the choices."""
        if split not in self.splits:
            raise UnknownSplitError(
                f"split {split!r} is not a {self.key} split; choose one of {sorted(self.splits)}"
            )
        return self.splits[split]()
