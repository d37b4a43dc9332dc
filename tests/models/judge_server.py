"""A real OpenAI-compatible chat endpoint on loopback, for judge tests and benchmarks.

:class:`JudgeServer` is a :class:`loopback_server.ScriptedServer` (a stdlib
``ThreadingHTTPServer``, HTTP/1.1, keep-alive, with its scripted faults) that
answers ``POST /v1/chat/completions`` in the chat-completions shape and
``POST /tokenize`` (at the root, as vLLM mounts it); any other route is a 404.
Where vLLM is installed (``.venv-skyrl``) both go through vLLM's own routers,
request classes (``ChatCompletionRequest``, ``TokenizeChatRequest``) and
response classes (:mod:`vllm_protocol`): a body vLLM refuses is its 400.
Without it they answer in the same shapes, pinned. What it does is set per
test, and may change while it runs:

- ``reply(body) -> str``: the verdict text (default ``"1.0"``);
- ``latency_s``: how long each answer takes;
- ``max_concurrent``: requests served at once (more wait their turn);
- ``plan(n, body) -> Response | None``: an answer other than the verdict for
  the n-th call (1-based): a status with headers (429 with ``Retry-After``,
  500, 503), a delay (a timeout), or ``drop`` (the connection is closed
  without an answer, as a server going down does);
- ``down``: every call is dropped (an outage) until set back;
- ``accept_at_once``: at most this many requests served at once; one more is
  answered 429 with ``Retry-After: retry_after`` at once (as a provider's
  concurrency limit does; a served request stops counting before its answer
  is written, so a client that sends on the answer is never refused for it);
- ``tokenizer`` (a ``transformers`` tokenizer): ``usage`` counts with it
  (prompt through its chat template, with the generation prompt), and
  ``POST /tokenize`` answers as vLLM's does: ``{"model", "prompt"}`` or
  ``{"model", "messages"}`` -> ``{"count", "max_model_len", "tokens"}``.
  Without one, ``usage`` is a quarter of the prompt's JSON length and
  ``/tokenize`` is 404, as on a provider's endpoint.

It counts what reached it: ``calls``, the concurrency ``peak`` (counted on
arrival, before any wait), ``arrivals`` (monotonic times), ``bodies``,
``served`` (one :class:`Served` per answered chat call: when, status,
tokens), ``throttled`` (429 answers), ``errors`` (planned 5xx), ``dropped``,
``refused`` (4xx answers of the protocol: an unknown route, a body the
request class refuses) and ``tokenize_calls``.

:func:`complete_all` sends requests to it through one real ``JudgeClient``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loopback_server import Response, ScriptedHandler, ScriptedServer, Turn
from vllm_protocol import VLLM_VERSION, Answer, VllmApp, protocol

from skyrl_rewards.rewards.contract.lanes import ModelOutcome, ModelRequest
from skyrl_rewards.rewards.models.judge_client import EndpointConfig, JudgeClient


def complete_all(
    config: EndpointConfig, requests: Sequence[ModelRequest]
) -> tuple[list[ModelOutcome], dict[str, Any]]:
    """Every request at once through one ``JudgeClient``: the outcomes in order, its metrics."""

    async def go() -> tuple[list[ModelOutcome], dict[str, Any]]:
        client = JudgeClient(config)
        try:
            outcomes = await asyncio.gather(*(client.complete(r) for r in requests))
            return list(outcomes), client.metrics()
        finally:
            await client.aclose()

    return asyncio.run(go())


@dataclass(frozen=True)
class Served:
    """One chat call as the server saw it: arrival (monotonic), status, tokens it counted."""

    arrival: float
    status: int
    prompt_tokens: int = 0
    completion_tokens: int = 0


class JudgeServer(ScriptedServer):
    """See the module docstring. Use as a context manager; ``url`` is the base URL (``.../v1``)."""

    def __init__(
        self,
        *,
        reply: Callable[[dict[str, Any]], str] | None = None,
        latency_s: float = 0.0,
        max_concurrent: int | None = None,
        plan: Callable[[int, dict[str, Any]], Response | None] | None = None,
        accept_at_once: int | None = None,
        retry_after: str = "1",
        tokenizer: Any = None,
    ) -> None:
        super().__init__(
            self._handler_class(),
            latency_s=latency_s,
            max_concurrent=max_concurrent,
            plan=plan,
            accept_at_once=accept_at_once,
            retry_after=retry_after,
        )
        self.reply = reply or (lambda body: "1.0")
        self.tokenizer = tokenizer
        self.vllm = VllmApp(self._vllm_answers()) if VLLM_VERSION else None
        self.calls = 0
        self.tokenize_calls = 0
        self.refused = 0
        self._replies: dict[str, tuple[str, int, int]] = {}
        self._reply_ids = itertools.count()
        self.arrivals: list[float] = []
        self.bodies: list[dict[str, Any]] = []
        self.served: list[Served] = []

    @property
    def protocol(self) -> str:
        """Whose request and response classes answer: ``"vllm 0.30.0"`` (installed) or ``"pinned"``."""
        return f"vllm {VLLM_VERSION}" if self.vllm is not None else "pinned"

    def answered(self, arrival: float, status: int) -> None:
        """Count a fault's answer and record it in ``served``."""
        super().answered(arrival, status)
        with self._lock:
            self.served.append(Served(arrival, status))

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` by the server's tokenizer (no special tokens added)."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_tokens(self, messages: Any) -> int:
        """Prompt tokens of a chat: the tokenizer's through its chat template, else JSON length / 4."""
        if self.tokenizer is None:
            return len(json.dumps(messages)) // 4
        texts = [
            {
                "role": m["role"],
                "content": m["content"]
                if isinstance(m["content"], str)
                else "".join(p.get("text", "") for p in m["content"] if p.get("type") == "text"),
            }
            for m in messages
        ]
        text = self.tokenizer.apply_chat_template(texts, tokenize=False, add_generation_prompt=True)
        return self.count_tokens(text)

    def tokens_per_minute(self, skip: int = 0) -> float:
        """Prompt plus completion tokens per minute of the served calls, from the ``skip``-th on.

        The slope of a least-squares line through (arrival, tokens let through
        before it): what a rate limit holds, and one arrival late by the
        machine's load at either end does not move it as it moves a first-to-last ratio.
        """
        served = sorted((s for s in self.served if s.status == 200), key=lambda s: s.arrival)[skip:]
        times = [s.arrival for s in served]
        totals = [0]
        for s in served[:-1]:
            totals.append(totals[-1] + s.prompt_tokens + s.completion_tokens)
        mean_t, mean_n = sum(times) / len(times), sum(totals) / len(totals)
        spread = sum((t - mean_t) ** 2 for t in times)
        slope = (
            sum((t - mean_t) * (n - mean_n) for t, n in zip(times, totals, strict=True)) / spread
        )
        return 60.0 * slope

    def pinned_chat(
        self,
        number: int,
        body: dict[str, Any],
        content: str | None,
        prompt_tokens: int,
        completion_tokens: int,
    ) -> dict[str, Any]:
        """The chat reply without vLLM installed: vLLM's ``ChatCompletionResponse`` fields the
        client reads, as pinned here (``test_vllm_protocol.py`` checks them against vLLM's)."""
        return {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def pinned_tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        """The ``/tokenize`` reply without vLLM installed (``{"count", "max_model_len", "tokens"}``)."""
        if "messages" in body:
            count = self.prompt_tokens(body["messages"])
        else:
            count = self.count_tokens(body.get("prompt", ""))
        return {"count": count, "max_model_len": 32768, "tokens": []}

    def _vllm_answers(self) -> dict[str, Answer]:
        """The stand-in engine behind vLLM's chat and tokenize routers (vLLM's response objects)."""
        p = protocol()

        def chat(request: Any, headers: Any) -> Any:
            content, prompt_tokens, completion_tokens = self._replies.pop(headers[_REPLY_HEADER])
            return p.ChatCompletionResponse(
                model=request.model or "judge",
                choices=[
                    p.ChatCompletionResponseChoice(
                        index=0,
                        message=p.ChatMessage(role="assistant", content=content),
                        finish_reason="stop",
                    )
                ],
                usage=p.UsageInfo(
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    total_tokens=prompt_tokens + completion_tokens,
                ),
            )

        def tokenize(request: Any, headers: Any) -> Any:
            if isinstance(request, p.TokenizeChatRequest):
                count = self.prompt_tokens(request.messages)
            else:
                count = self.count_tokens(request.prompt)
            return p.TokenizeResponse(count=count, max_model_len=32768, tokens=[])

        return {"chat": chat, "tokenize": tokenize}

    def _handler_class(self) -> type[ScriptedHandler]:
        server = self

        class Handler(ScriptedHandler):
            owner = server

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                body = self.read_json()
                path = self.path.split("?", 1)[0]
                if path == "/tokenize":
                    self._tokenize(body)
                    return
                if path != CHAT_ROUTE:
                    with server._lock:
                        server.refused += 1
                    self.send(404, {"detail": "Not Found"})
                    return
                with server._lock:
                    server.calls += 1
                    number = server.calls
                    server.arrivals.append(time.monotonic())
                    server.bodies.append(body)
                with server.in_flight():
                    turn = self.take_turn(number, body)
                    if turn is not None:
                        self._serve(turn, number, body)

            def _tokenize(self, body: dict[str, Any]) -> None:
                with server._lock:
                    server.tokenize_calls += 1
                if server.tokenizer is None or server.down:
                    self.send(404, {"detail": "Not Found"})
                    return
                if server.vllm is not None:
                    self._answer(*server.vllm.post("/tokenize", body))
                    return
                self.send(200, server.pinned_tokenize(body))

            def _serve(self, turn: Turn, number: int, body: dict[str, Any]) -> None:
                planned = turn.planned
                text = planned.text if planned is not None and planned.text is not None else None
                content = text if text is not None else server.reply(body)
                prompt_tokens = server.prompt_tokens(body.get("messages"))
                completion_tokens = (
                    max(1, len(content or "") // 4)
                    if server.tokenizer is None
                    else server.count_tokens(content or "")
                )
                with server._lock:
                    server.served.append(
                        Served(turn.arrival, 200, prompt_tokens, completion_tokens)
                    )
                if server.vllm is not None:
                    key = str(next(server._reply_ids))
                    server._replies[key] = (content, prompt_tokens, completion_tokens)
                    self._answer(*server.vllm.post(CHAT_ROUTE, body, {_REPLY_HEADER: key}))
                    server._replies.pop(key, None)  # a body vLLM refused never took it
                    return
                self.send(
                    200, server.pinned_chat(number, body, content, prompt_tokens, completion_tokens)
                )

            def _answer(self, status: int, reply: Any) -> None:
                with server._lock:
                    server.refused += 400 <= status < 500
                self.send(status, reply)

        return Handler


CHAT_ROUTE = "/v1/chat/completions"
"""The chat route (vLLM's, OpenAI's)."""

_REPLY_HEADER = "x-loopback-reply"
"""Carries the key of a call's precomputed reply to the stand-in engine behind vLLM's router."""
