"""User simulators: who answers the agent's replies.

All follow one contract, :class:`UserSimulator`: ``reset(instruction)``
returns the user's first message, ``step(agent_text)`` the next one. A
message containing :data:`STOP` ends the episode (tau-bench's convention).

- :class:`ReplayUser` plays back recorded user turns (evaluation, tests).
- :class:`OpenAIUser` asks any OpenAI-compatible chat endpoint (a local vLLM
  server or a provider) with tau-bench's user prompt.
- :class:`TauBenchUser` wraps tau-bench's own simulators (``tau_bench`` backend).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any, Protocol

STOP = "###STOP###"
"""A user message containing this ends the episode."""

FIRST_AGENT_MESSAGE = "Hi! How can I help you today?"
"""The agent greeting tau-bench's user model answers first."""


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


class ReplayUser:
    """Plays back recorded user turns; answers :data:`STOP` once they run out.

    >>> user = ReplayUser(["I want to cancel.", "Yes."])
    >>> user.reset("ignored"), user.step("Sure?"), user.step("Done.")
    ('I want to cancel.', 'Yes.', '###STOP###')
    """

    def __init__(self, turns: Sequence[str]) -> None:
        if isinstance(turns, str) or not turns or not all(isinstance(t, str) for t in turns):
            raise ValueError("user_turns must be a non-empty list of strings")
        self._turns = list(turns)
        self._next = 0

    def reset(self, instruction: str) -> str:
        self._next = 1
        return self._turns[0]

    def step(self, content: str) -> str:
        if self._next >= len(self._turns):
            return STOP
        turn = self._turns[self._next]
        self._next += 1
        return turn


class OpenAIUser:
    """A user played by a model behind an OpenAI-compatible ``/chat/completions``.

    The API key is read from the environment variable named ``api_key_env``
    (no key is sent when it is unset, as local servers need none). Each
    request has a timeout of ``timeout_s`` and is retried ``max_retries``
    times on connection errors and 5xx/429 answers, waiting ``backoff_s``
    seconds and doubling the wait each time; then
    :class:`UserSimulatorError` is raised.
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
    ) -> None:
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._model = model
        self._api_key_env = api_key_env
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self.messages: list[dict[str, str]] = []

    def reset(self, instruction: str) -> str:
        self.messages = [
            {"role": "system", "content": user_system_prompt(instruction)},
            {"role": "user", "content": FIRST_AGENT_MESSAGE},
        ]
        return self._next_message()

    def step(self, content: str) -> str:
        self.messages.append({"role": "user", "content": content})
        return self._next_message()

    def _next_message(self) -> str:
        reply = self._complete()
        self.messages.append({"role": "assistant", "content": reply})
        return reply

    def _complete(self) -> str:
        body: dict[str, Any] = {
            "model": self._model,
            "messages": self.messages,
            "temperature": self._temperature,
        }
        if self._max_tokens is not None:
            body["max_tokens"] = self._max_tokens
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self._api_key_env) if self._api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(
            self._url, data=json.dumps(body).encode("utf-8"), headers=headers, method="POST"
        )
        last_error = ""
        for attempt in range(self._max_retries + 1):
            if attempt:
                time.sleep(min(self._backoff_s * 2.0 ** (attempt - 1), 30.0))
            try:
                with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                    payload = json.loads(response.read().decode("utf-8"))
            except urllib.error.HTTPError as error:
                last_error = f"HTTP {error.code} from {self._url}"
                if error.code == 429 or error.code >= 500:
                    continue
                raise UserSimulatorError(last_error) from error
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                last_error = f"cannot reach {self._url}: {error}"
                continue
            except json.JSONDecodeError as error:
                raise UserSimulatorError(f"{self._url} answered with invalid JSON") from error
            return self._content(payload)
        raise UserSimulatorError(f"{last_error} (after {self._max_retries + 1} attempts)")

    def _content(self, payload: Any) -> str:
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as error:
            raise UserSimulatorError(f"{self._url} answered without choices[0].message") from error
        if not isinstance(content, str):
            raise UserSimulatorError(f"{self._url} answered with non-text content")
        return content


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
