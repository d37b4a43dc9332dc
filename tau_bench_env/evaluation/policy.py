"""The agent under evaluation: a policy behind an OpenAI-compatible chat endpoint.

:class:`ChatPolicy` posts the conversation to ``<base_url>/chat/completions``
(on the judge's chat client, :func:`skyrl_rewards.rewards.models.chat_loop.post_chat`)
and turns the reply into the text the env's ``step`` parses:

- ``tool_mode="native"`` sends the tool schemas as ``tools=`` and reads the
  reply's ``tool_calls``; only the first call is kept (tau-bench's
  tool-calling agent does the same), rendered as OpenAI JSON
  (``{"tool_calls": [...]}``), a form :func:`~tau_bench_env.episode.actions.parse_turn`
  accepts. A reply without tool calls is its ``content``.
- ``tool_mode="text"`` sends no ``tools=``; the model writes its calls in the
  text (Hermes ``<tool_call>``, OpenAI JSON or bare JSON, as the system prompt
  asks) and the env parses them.

Every call has a timeout; connection errors, timeouts and 5xx/429 answers are
retried with doubling, jittered back-off (a 429's or 503's ``Retry-After`` is
honoured), then :class:`PolicyEndpointError` is raised naming the cause
(``connect``, ``timeout``, ``http_status``, ``rate_limited``, ``bad_response``):
an outage is an error, never a judgement of the agent. Replies are never cached
(sampling may differ between identical requests).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_rewards.rewards.models.chat_client import message_problem
from skyrl_rewards.rewards.models.chat_loop import post_chat
from skyrl_rewards.rewards.models.endpoint_config import caller_endpoint

TOOL_MODES = ("native", "text")


class PolicyEndpointError(RuntimeError):
    """The agent's endpoint gave no usable reply (down, timing out, 4xx, malformed JSON)."""


@dataclass(frozen=True)
class PolicyConfig:
    """Where the agent runs and how it is asked."""

    base_url: str = "http://127.0.0.1:8000/v1"
    """OpenAI-compatible endpoint root (``.../v1``)."""
    model: str = "policy"
    """Model name sent to the endpoint (a vLLM server's ``--served-model-name``)."""
    tool_mode: str = "native"
    """``native`` (``tools=`` in the request, ``tool_calls`` in the reply) or ``text``."""
    api_key_env: str | None = "OPENAI_API_KEY"
    """Name of the environment variable holding the API key (no key sent when unset)."""
    temperature: float = 0.0
    """Sampling temperature."""
    max_tokens: int | None = None
    """Cap on a reply's tokens; None leaves it to the server."""
    timeout_s: float = 120.0
    """Per-request timeout in seconds."""
    max_retries: int = 3
    """Retries after a connection error, a timeout or a 5xx/429 answer."""
    backoff_s: float = 1.0
    """Bound of the wait before the first retry, doubled for each further one (at most
    30 s; each wait uniform below its bound, at least a 429's ``Retry-After``)."""

    def __post_init__(self) -> None:
        if self.tool_mode not in TOOL_MODES:
            raise ValueError(f"tool_mode must be one of {list(TOOL_MODES)}, got {self.tool_mode!r}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s!r}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries!r}")
        if self.backoff_s < 0:
            raise ValueError(f"backoff_s must be >= 0, got {self.backoff_s!r}")


@dataclass(frozen=True)
class PolicyTurn:
    """One reply of the policy.

    ``text`` is what the env's ``step`` receives; ``message`` is the assistant
    message to keep in the agent's conversation (with at most one tool call);
    ``tool_call_id`` is that call's id (native mode) for the tool's answer.
    """

    text: str
    message: dict[str, Any]
    tool_call_id: str | None
    prompt_tokens: int
    completion_tokens: int


def _usage(payload: Mapping[str, Any]) -> tuple[int, int]:
    usage = payload.get("usage")
    if not isinstance(usage, Mapping):
        return 0, 0
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )


def _first_tool_call(message: Mapping[str, Any], turn: int) -> dict[str, Any] | None:
    """The reply's first tool call as ``{"id", "type", "function": {"name", "arguments"}}``."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls or not isinstance(calls[0], Mapping):
        return None
    function = calls[0].get("function")
    if not isinstance(function, Mapping):
        return None
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {})
    call_id = calls[0].get("id")
    return {
        "id": call_id if isinstance(call_id, str) and call_id else f"call_{turn}",
        "type": "function",
        "function": {"name": str(function.get("name") or ""), "arguments": arguments},
    }


class ChatPolicy:
    """An agent behind an OpenAI-compatible chat endpoint (see the module docstring).

    Thread-safe: it holds no per-episode state.
    """

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        self._endpoint = caller_endpoint(
            config.base_url,
            config.model,
            api_key_env=config.api_key_env,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
            backoff_s=config.backoff_s,
        )

    def act(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], turn: int
    ) -> PolicyTurn:
        """Ask the policy for its next turn given the conversation so far.

        ``tools`` are the domain's OpenAI tool schemas (sent in native mode);
        ``turn`` numbers the turn (used for a tool call id the server left out).
        Raises :class:`PolicyEndpointError` when the endpoint gives no usable reply.
        """
        config = self.config
        body: dict[str, Any] = {
            "model": config.model,
            "messages": list(messages),
            "temperature": config.temperature,
        }
        if config.max_tokens is not None:
            body["max_tokens"] = config.max_tokens
        if config.tool_mode == "native":
            body["tools"] = list(tools)
        reply = post_chat(self._endpoint, body, message_problem)
        if not reply.ok or reply.data is None:
            raise PolicyEndpointError(
                f"agent endpoint {self._url}: {reply.failure} after {reply.calls} attempts: "
                f"{reply.message}; check that the server is up and the base URL ends in /v1"
            )
        payload = reply.data
        message = payload["choices"][0]["message"]
        content = message.get("content")
        content = content if isinstance(content, str) else ""
        prompt_tokens, completion_tokens = _usage(payload)
        call = _first_tool_call(message, turn) if config.tool_mode == "native" else None
        if call is None:
            return PolicyTurn(
                text=content,
                message={"role": "assistant", "content": content},
                tool_call_id=None,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
            )
        return PolicyTurn(
            text=json.dumps({"tool_calls": [call]}),
            message={"role": "assistant", "content": content or None, "tool_calls": [call]},
            tool_call_id=call["id"],
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )
