"""One episode's state: its copy-on-write data and its action log.

Shared by the SkyRL env (live episodes) and by ``rescore`` (recorded ones).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tau_bench_env.backends.protocol import Domain
from tau_bench_env.hashing import UnhashableDataError
from tau_bench_env.reward import (
    GROUND_TRUTH,
    GroundTruthCache,
    RewardResult,
    run_action,
    score_episode,
)
from tau_bench_env.tasks import RESPOND, Action, Task
from tau_bench_env.tool_limits import DEFAULT_TOOL_TIMEOUT_S


class Episode:
    """A task being played on a fresh fork of the domain's shared data.

    >>> from tau_bench_env.backends import load_domain
    >>> domain = load_domain("tau2", "retail")
    >>> episode = Episode(domain, domain.tasks("test")[0])
    >>> episode.respond("Hello!"); len(episode.actions)
    1
    """

    def __init__(
        self, domain: Domain, task: Task, *, tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    ) -> None:
        self.domain = domain
        self.task = task
        self.tool_timeout_s = tool_timeout_s
        """CPU-time budget of one tool call (see :mod:`tau_bench_env.tool_limits`)."""
        self.data = domain.fresh_data()
        self.actions: list[Action] = []

    def call_tool(self, name: str, kwargs: Mapping[str, Any]) -> str:
        """Log and run a tool call; returns the observation (errors and refusals included)."""
        action = Action(name, dict(kwargs))
        self.actions.append(action)
        return run_action(self.domain, self.data, action, tool_timeout_s=self.tool_timeout_s)

    def respond(self, content: str) -> None:
        """Log a reply to the user (scanned by the outputs check)."""
        self.actions.append(Action(RESPOND, {"content": content}))

    def is_terminal(self, name: str) -> bool:
        """Whether tool ``name`` ends the episode (e.g. ``transfer_to_human_agents``)."""
        return name in self.domain.terminate_tools

    def data_hash(self) -> str:
        """tau-bench's hash of this episode's data, computed incrementally.

        Data too deeply nested to hash (no ground truth is) gives a text that
        is not a hex digest, so the data check fails instead of raising.
        """
        try:
            return self.domain.hash_index.digest(self.data)
        except UnhashableDataError as error:
            return f"unhashable: {error}"

    def score(
        self,
        *,
        truncated: bool = False,
        score_truncated: bool = False,
        strict_outputs: bool = False,
        cache: GroundTruthCache = GROUND_TRUTH,
    ) -> RewardResult:
        """The binary reward for the episode as it stands (see :mod:`tau_bench_env.reward`)."""
        return score_episode(
            self.domain,
            self.task,
            self.data_hash(),
            self.actions,
            truncated=truncated,
            score_truncated=score_truncated,
            strict_outputs=strict_outputs,
            cache=cache,
        )
