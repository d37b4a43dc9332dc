"""User simulators: who answers the agent's replies.

All follow one contract, :class:`UserSimulator`: ``reset(instruction)``
returns the user's first message, ``step(agent_text)`` the next one. A
message containing :data:`STOP` ends the episode (tau-bench's convention).

- :class:`ReplayUser` plays back recorded user turns (evaluation, tests).
- :class:`OpenAIUser` asks any OpenAI-compatible chat endpoint (a local vLLM
  server or a provider) with tau-bench's user prompt.
- :class:`TauBenchUser` wraps tau-bench's own simulators (``tau_bench`` backend).

Dual control (tau2's telecom: the user has a phone): the env hands the user
simulator the user tool schemas and a runner with :meth:`bind_tools`; the
runner runs a call on the episode's user data (bounded like an agent's call)
and returns the observation. A replay turn may carry tool calls, run before
its text is passed on; the OpenAI user gets the schemas in its requests and
its tool calls are run and answered until it replies in text.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from tau_bench_env.config import DEFAULT_MAX_TOOL_CALLS

STOP = "###STOP###"
"""A user message containing this ends the episode."""

FIRST_AGENT_MESSAGE = "Hi! How can I help you today?"
"""The agent greeting tau-bench's user model answers first."""


MAX_TOOL_ARGUMENT_CHARS = 65_536
"""A user model's tool-call arguments beyond this many characters are refused unparsed."""

UserToolRunner = Callable[[str, Mapping[str, Any]], str]
"""Runs one user tool call (name, arguments) on the episode's data; returns the observation."""

USER_TOOLS_GUIDANCE = (
    "\n- You have tools that act on your own end (your phone, your inbox). When the agent "
    "asks you to check or change something on your end, call the matching tool and base your "
    "answer on what it returns. Never make up the result of a tool call."
)
"""Added to the user prompt when the user has tools (dual-control domains: telecom's phone,
tau2-bench 1.x mock's inbox)."""


class UserSimulatorError(RuntimeError):
    """The user simulator could not produce a message (endpoint down, bad reply)."""


class UserSimulator(Protocol):
    """What the env needs from a user simulator."""

    def reset(self, instruction: str) -> str:
        """Start a conversation for ``instruction``; return the first user message."""
        ...

    def step(self, content: str) -> str:
        """Return the user's answer to the agent's ``content``."""
        ...


def user_system_prompt(instruction: str) -> str:
    """tau-bench's system prompt for an LLM playing the user."""
    return (
        "You are a user interacting with an agent.\n\nInstruction: " + instruction + "\nRules:\n"
        "- Just generate one line at a time to simulate the user's message.\n"
        "- Do not give away all the instruction at once. Only provide the information "
        "that is necessary for the current step.\n"
        "- Do not hallucinate information that is not provided in the instruction. For "
        "example, if the agent asks for the order id but it is not mentioned in the "
        "instruction, do not make up an order id, just say you do not remember or have it.\n"
        f"- If the instruction goal is satisified, generate '{STOP}' as a standalone "
        "message without anything else to end the conversation.\n"
        "- Do not repeat the exact instruction in the conversation. Instead, use your own "
        "words to convey the same information.\n"
        "- Try to make the conversation as natural as possible, and stick to the "
        "personalities in the instruction."
    )


ReplayTurn = tuple[str, tuple[tuple[str, dict[str, Any]], ...]]
"""A recorded user turn: its text and the user tool calls (name, arguments) made before it."""


def _replay_turn(turn: Any) -> ReplayTurn:
    """Check one recorded turn: a string, or ``{"content": str, "tool_calls": [...]}``."""
    if isinstance(turn, str):
        return turn, ()
    if not isinstance(turn, Mapping) or not isinstance(turn.get("content"), str):
        raise ValueError(
            "user_turns must be a non-empty list of strings or "
            '{"content": str, "tool_calls": [{"name": str, "arguments": {...}}]} objects'
        )
    calls = []
    for call in turn.get("tool_calls") or []:
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise ValueError("user_turns: each tool call needs a string 'name'")
        arguments = call.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise ValueError(f"user_turns: tool call {call['name']!r} arguments must be an object")
        calls.append((call["name"], dict(arguments)))
    return turn["content"], tuple(calls)


class ReplayUser:
    """Plays back recorded user turns; answers :data:`STOP` once they run out.

    A turn is a string, or ``{"content": str, "tool_calls": [{"name", "arguments"}]}``:
    its tool calls run on the user's side (:meth:`bind_tools`) before its text
    is returned; their observations go nowhere (the text is recorded).

    >>> user = ReplayUser(["I want to cancel.", "Yes."])
    >>> user.reset("ignored"), user.step("Sure?"), user.step("Done.")
    ('I want to cancel.', 'Yes.', '###STOP###')
    """

    def __init__(self, turns: Sequence[Any]) -> None:
        if isinstance(turns, (str, Mapping)) or not turns:
            raise ValueError("user_turns must be a non-empty list of strings")
        self._turns = [_replay_turn(turn) for turn in turns]
        self._next = 0
        self._run_tool: UserToolRunner | None = None

    def bind_tools(self, schemas: Sequence[Mapping[str, Any]], run: UserToolRunner) -> None:
        """Run the turns' tool calls with ``run`` (the schemas are not needed here)."""
        self._run_tool = run

    def _play(self, index: int) -> str:
        content, calls = self._turns[index]
        if calls and self._run_tool is None:
            raise UserSimulatorError(
                f"recorded user turn {index} calls tools, but this domain's user has none"
            )
        for name, arguments in calls:
            self._run_tool(name, arguments)
        return content

    def reset(self, instruction: str) -> str:
        self._next = 1
        return self._play(0)

    def step(self, content: str) -> str:
        if self._next >= len(self._turns):
            return STOP
        self._next += 1
        return self._play(self._next - 1)


class OpenAIUser:
    """A user played by a model behind an OpenAI-compatible ``/chat/completions``.

    The API key is read from the environment variable named ``api_key_env``
    (no key is sent when it is unset, as local servers need none). Requests go
    through the judge's chat client
    (:func:`skyrl_rewards.rewards.models.chat_loop.post_chat`, imported on the
    first request; never cached). Each call has a timeout of ``timeout_s`` and is
    retried ``max_retries`` times on connection errors, timeouts and 5xx/429
    answers, the first wait bounded by ``backoff_s`` seconds and the bound
    doubling each time (jittered; at least a 429's ``Retry-After``); then
    :class:`UserSimulatorError` is raised naming the cause (``connect``,
    ``timeout``, ``http_status``, ``rate_limited``, ``bad_response``).

    With user tools bound (:meth:`bind_tools`), requests carry the tool
    schemas; each tool call the model answers with is run and its result sent
    back as a ``tool`` message, until the model answers in text. After
    ``max_tool_calls`` calls in one turn, further calls in the same answer are
    answered with an error and the next request sets ``tool_choice: "none"``;
    a model that still answers without text raises :class:`UserSimulatorError`
    (so one turn makes at most ``max_tool_calls + 1`` requests). The endpoint must
    return OpenAI ``tool_calls`` (vLLM: ``--enable-auto-tool-choice`` and a
    ``--tool-call-parser``).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        backoff_s: float = 1.0,
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
    ) -> None:
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._base_url = base_url
        self._model = model
        self._api_key_env = api_key_env
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self._max_tool_calls = max_tool_calls
        self._tools: tuple[Mapping[str, Any], ...] = ()
        self._run_tool: UserToolRunner | None = None
        self.tool_calls = 0
        """User tool calls made in this conversation (for metrics)."""
        self.messages: list[dict[str, Any]] = []

    def bind_tools(self, schemas: Sequence[Mapping[str, Any]], run: UserToolRunner) -> None:
        """Offer ``schemas`` to the model and run its calls with ``run``."""
        self._tools = tuple(schemas)
        self._run_tool = run

    def reset(self, instruction: str) -> str:
        prompt = user_system_prompt(instruction)
        if self._tools:
            prompt += USER_TOOLS_GUIDANCE
        self.messages = [
            {"role": "system", "content": prompt},
            {"role": "user", "content": FIRST_AGENT_MESSAGE},
        ]
        self.tool_calls = 0
        return self._next_message()

    def step(self, content: str) -> str:
        self.messages.append({"role": "user", "content": content})
        return self._next_message()

    def _next_message(self) -> str:
        calls_this_turn = 0
        while True:
            message = self._complete(tool_choice_none=calls_this_turn >= self._max_tool_calls)
            calls = message.get("tool_calls")
            bounded = calls_this_turn >= self._max_tool_calls
            if self._tools and isinstance(calls, list) and calls and not bounded:
                self.messages.append(
                    {"role": "assistant", "content": message.get("content"), "tool_calls": calls}
                )
                for call in calls:
                    calls_this_turn += 1
                    self.messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": _call_id(call),
                            "content": self._run_call(call, calls_this_turn),
                        }
                    )
                continue
            reply = message.get("content")
            if not isinstance(reply, str):
                raise UserSimulatorError(f"{self._url} answered with non-text content")
            self.messages.append({"role": "assistant", "content": reply})
            return reply

    def _run_call(self, call: Any, number: int) -> str:
        """Run one of the model's tool calls; errors in what it wrote become the observation."""
        if number > self._max_tool_calls:
            return (
                f"Error: more than {self._max_tool_calls} tool calls in one turn; answer in text."
            )
        try:
            function = call["function"]
            name = function["name"]
            arguments = function.get("arguments") or {}
            if isinstance(arguments, str):
                if len(arguments) > MAX_TOOL_ARGUMENT_CHARS:
                    return "Error: tool call arguments too long"
                arguments = json.loads(arguments) if arguments.strip() else {}
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError, RecursionError):
            return "Error: malformed tool call"
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return "Error: malformed tool call (name must be a string, arguments an object)"
        self.tool_calls += 1
        return self._run_tool(name, arguments)

    def _complete(self, *, tool_choice_none: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._model,
            "messages": self.messages,
            "temperature": self._temperature,
        }
        if self._max_tokens is not None:
            body["max_tokens"] = self._max_tokens
        if self._tools:
            body["tools"] = list(self._tools)
            if tool_choice_none:
                body["tool_choice"] = "none"
        from skyrl_rewards.rewards.models.chat_client import message_problem
        from skyrl_rewards.rewards.models.chat_loop import post_chat
        from skyrl_rewards.rewards.models.endpoint_config import caller_endpoint

        endpoint = caller_endpoint(
            self._base_url,
            self._model,
            api_key_env=self._api_key_env,
            timeout_s=self._timeout_s,
            max_retries=self._max_retries,
            backoff_s=self._backoff_s,
        )
        reply = post_chat(endpoint, body, message_problem)
        if not reply.ok or reply.data is None:
            raise UserSimulatorError(
                f"user endpoint {self._url}: {reply.failure} after {reply.calls} attempts: "
                f"{reply.message}"
            )
        return reply.data["choices"][0]["message"]


def _call_id(call: Any) -> str:
    """The id of a tool call as the model gave it ("" when it gave none)."""
    identifier = call.get("id") if isinstance(call, dict) else None
    return identifier if isinstance(identifier, str) else ""


class TauBenchUser:
    """tau-bench's own user simulator (``llm``, ``react``, ``verify``, ``reflection``).

    tau-bench's LLM users call their model once when constructed; this class
    constructs one on the first :meth:`reset` and reuses it after.
    """

    def __init__(self, *, strategy: str, model: str, provider: str | None) -> None:
        self._strategy = strategy
        self._model = model
        self._provider = provider
        self._user: Any = None

    def reset(self, instruction: str) -> str:
        if self._user is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            from tau_bench.envs.user import load_user

            self._user = load_user(
                user_strategy=self._strategy, model=self._model, provider=self._provider
            )
        return self._user.reset(instruction=instruction)

    def step(self, content: str) -> str:
        return self._user.step(content)
