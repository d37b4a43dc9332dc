"""The agent under evaluation: a policy behind an OpenAI-compatible chat endpoint.

:class:`ChatPolicy` posts the conversation to ``<base_url>/chat/completions``
(urllib, no SDK) and turns the reply into the text the env's ``step`` parses:

- ``tool_mode="native"`` sends the tool schemas as ``tools=`` and reads the
  reply's ``tool_calls``; only the first call is kept (tau-bench's
  tool-calling agent does the same), rendered as OpenAI JSON
  (``{"tool_calls": [...]}``), a form :func:`~tau_bench_env.episode.actions.parse_turn`
  accepts. A reply without tool calls is its ``content``.
- ``tool_mode="text"`` sends no ``tools=``; the model writes its calls in the
  text (Hermes ``<tool_call>``, OpenAI JSON or bare JSON, as the system prompt
  asks) and the env parses them.

Every request has a timeout; connection errors, timeouts and 5xx/429 answers
are retried with doubling back-off, then :class:`PolicyEndpointError` is
raised (an outage is an error, never a judgement of the agent).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TOOL_MODES = ("native", "text")
MAX_BACKOFF_S = 30.0


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
    """Wait before the first retry, doubled for each further one (at most 30 s)."""

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


def post_chat(
    url: str,
    body: Mapping[str, Any],
    *,
    api_key_env: str | None,
    timeout_s: float,
    max_retries: int,
    backoff_s: float,
) -> dict[str, Any]:
    """POST ``body`` to ``url`` and return the JSON reply, retrying transient failures.

    Raises :class:`PolicyEndpointError` naming the URL and the last failure
    after ``max_retries + 1`` attempts, or at once on a 4xx (other than 429)
    or a reply that is not a JSON object.
    """
    headers = {"Content-Type": "application/json"}
    key = os.environ.get(api_key_env) if api_key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode("utf-8")
    last_error = ""
    for attempt in range(max_retries + 1):
        if attempt:
            time.sleep(min(backoff_s * 2.0 ** (attempt - 1), MAX_BACKOFF_S))
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            last_error = f"HTTP {error.code} from {url}"
            if error.code == 429 or error.code >= 500:
                continue
            raise PolicyEndpointError(last_error) from error
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as error:
            last_error = f"cannot reach {url}: {error}"
            continue
        try:
            payload = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise PolicyEndpointError(f"{url} answered with invalid JSON") from error
        if not isinstance(payload, dict):
            raise PolicyEndpointError(f"{url} answered with JSON that is not an object")
        return payload
    raise PolicyEndpointError(
        f"{last_error} (after {max_retries + 1} attempts; check that the server is up "
        "and the base URL ends in /v1)"
    )


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
        payload = post_chat(
            self._url,
            body,
            api_key_env=config.api_key_env,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
            backoff_s=config.backoff_s,
        )
        try:
            message = payload["choices"][0]["message"]
        except (KeyError, IndexError, TypeError) as error:
            raise PolicyEndpointError(f"{self._url} answered without choices[0].message") from error
        if not isinstance(message, Mapping):
            raise PolicyEndpointError(f"{self._url} answered with a non-object message")
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
