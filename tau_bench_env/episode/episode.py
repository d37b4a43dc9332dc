"""One episode's state: its copy-on-write data and its action log.

Shared by the SkyRL env (live episodes) and by ``rescore`` (recorded ones).
The data starts in the task's initial state (``domain.initial_data``). In a
domain with user tools (dual control) the user's tool calls run on the same
data and are logged apart from the agent's (:attr:`Episode.user_calls`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tau_bench_env.backends.protocol import Domain
from tau_bench_env.config import DEFAULT_TOOL_TIMEOUT_S
from tau_bench_env.data_model.hashing import UnhashableDataError
from tau_bench_env.data_model.tasks import RESPOND, Action, Task
from tau_bench_env.episode.reward import (
    GROUND_TRUTH,
    GroundTruthCache,
    RewardResult,
    run_action,
    score_episode,
)


@dataclass(frozen=True)
class UserCall:
    """A tool call the user made: after ``after`` agent actions, with its observation."""

    after: int
    action: Action
    observation: str


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
        """CPU-time budget of one tool call (see :mod:`tau_bench_env.backends.tool_limits`)."""
        self.data = domain.initial_data(task)
        self.actions: list[Action] = []
        self.user_calls: list[UserCall] = []
        self.transcript: list[tuple[str, str | None]] = []
        """The episode's messages as ``(role, content)``, as tau2's trajectory holds them
        (history, user texts, replies, each tool call as its caller's message without text
        followed by its ``tool`` result): what tau2's NL-assertion judge reads. The env logs
        the user's texts (:meth:`user_says`); ``rescore``'s replays do not."""
        self._log_history()
        self.opening_user_calls = len(self.user_calls)
        """The user's calls of the task's message history (already applied, not run again)."""

    def _log_history(self) -> None:
        """Log the task's message history as the episode's first actions (not run again).

        The agent's calls and replies there count for the checks that read the
        action log (outputs, tau2's ACTION and COMMUNICATE), as in tau2's
        evaluator, which reads the whole trajectory, history included.
        """
        for message in self.task.history:
            content = message.get("content")
            self.transcript.append(
                (str(message.get("role")), None if content is None else str(content))
            )
            calls = [
                Action(c["name"], dict(c.get("arguments") or {}))
                for c in message.get("tool_calls") or []
            ]
            if message.get("role") == "assistant":
                self.actions.extend(calls)
                if message.get("content"):
                    self.actions.append(Action(RESPOND, {"content": str(message["content"])}))
            elif message.get("role") == "user":
                self.user_calls.extend(UserCall(len(self.actions), call, "") for call in calls)

    def call_tool(self, name: str, kwargs: Mapping[str, Any]) -> str:
        """Log and run a tool call; returns the observation (errors and refusals included)."""
        action = Action(name, dict(kwargs))
        self.actions.append(action)
        observation = run_action(self.domain, self.data, action, tool_timeout_s=self.tool_timeout_s)
        self.transcript += [("assistant", None), ("tool", observation)]
        return observation

    def log_tool_call(self, name: str, kwargs: Mapping[str, Any], observation: str) -> None:
        """Log a tool call with a known observation, without running it (``rescore``'s
        replay of a call to one of :attr:`Domain.search_tools`, which touch no data)."""
        self.actions.append(Action(name, dict(kwargs)))
        self.transcript += [("assistant", None), ("tool", observation)]

    def call_user_tool(self, name: str, kwargs: Mapping[str, Any]) -> str:
        """Log and run a user-side tool call (same bounds); returns the observation."""
        action = Action(name, dict(kwargs))
        observation = run_action(
            self.domain, self.data, action, tool_timeout_s=self.tool_timeout_s, requestor="user"
        )
        self.user_calls.append(UserCall(len(self.actions), action, observation))
        self.transcript += [("user", None), ("tool", observation)]
        return observation

    def tool_calls(self) -> list[Action]:
        """Every tool call of the episode, the agent's then the user's (no replies)."""
        return [a for a in self.actions if a.name != RESPOND] + [c.action for c in self.user_calls]

    def respond(self, content: str) -> None:
        """Log a reply to the user (scanned by the outputs check)."""
        self.actions.append(Action(RESPOND, {"content": content}))
        self.transcript.append(("assistant", content))

    def user_says(self, content: str) -> None:
        """Log a text of the user's (the transcript only: no check reads it but the judge's)."""
        self.transcript.append(("user", content))

    def is_terminal(self, name: str) -> bool:
        """Whether tool ``name`` ends the episode (e.g. ``transfer_to_human_agents``)."""
        return name in self.domain.terminate_tools

    def data_hash(self) -> str:
        """tau-bench's hash of this episode's data, computed incrementally.

        Data too deeply nested to hash (no ground truth is) gives a text that
        is not a hex digest, so the data check fails instead of raising.
        """
        try:
            return self.domain.data_digest(self.data)
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
        """The binary reward for the episode as it stands (see :mod:`tau_bench_env.episode.reward`)."""
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
