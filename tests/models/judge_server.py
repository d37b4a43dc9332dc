"""A real OpenAI-compatible chat endpoint on loopback, for judge tests and benchmarks.

:class:`JudgeServer` is a stdlib ``ThreadingHTTPServer`` (HTTP/1.1, keep-alive)
that answers ``POST /v1/chat/completions`` in the chat-completions shape. What
it does is set per test, and may change while it runs:

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
``served`` (one :class:`Served` per chat call: when, status, tokens),
``throttled`` (429 answers) and ``tokenize_calls``.

:func:`complete_all` sends requests to it through one real ``JudgeClient``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from skyrl_rewards.cli.judge_server import send_json
from skyrl_rewards.rewards.models.judge_client import EndpointConfig, JudgeClient
from skyrl_rewards.rewards.models.lanes import ModelOutcome, ModelRequest


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


@dataclass
class Response:
    """A planned answer: ``status`` with ``headers`` and ``text``, after ``delay_s``; or ``drop``."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    text: str | None = None
    delay_s: float = 0.0
    drop: bool = False


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default backlog of 5 refuses bursts of new connections


class JudgeServer:
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
        self.reply = reply or (lambda body: "1.0")
        self.latency_s = latency_s
        self.plan = plan
        self.accept_at_once = accept_at_once
        self.retry_after = retry_after
        self.tokenizer = tokenizer
        self.down = False
        self.calls = 0
        self.concurrent = 0
        self.peak = 0
        self.throttled = 0
        self.tokenize_calls = 0
        self.arrivals: list[float] = []
        self.bodies: list[dict[str, Any]] = []
        self.served: list[Served] = []
        self._accepted = 0
        self._lock = threading.Lock()
        self._serving = threading.BoundedSemaphore(max_concurrent) if max_concurrent else None
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> JudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

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

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
                return

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.path.rstrip("/").endswith("/tokenize"):
                    self._tokenize(body)
                    return
                with server._lock:
                    server.calls += 1
                    number = server.calls
                    server.concurrent += 1
                    server.peak = max(server.peak, server.concurrent)
                    server.arrivals.append(time.monotonic())
                    server.bodies.append(body)
                try:
                    self._answer(number, body)
                finally:
                    with server._lock:
                        server.concurrent -= 1

            def _tokenize(self, body: dict[str, Any]) -> None:
                with server._lock:
                    server.tokenize_calls += 1
                if server.tokenizer is None or server.down:
                    self._send(404, {"detail": "Not Found"}, {})
                    return
                if "messages" in body:
                    count = server.prompt_tokens(body["messages"])
                else:
                    count = server.count_tokens(body.get("prompt", ""))
                self._send(200, {"count": count, "max_model_len": 32768, "tokens": []}, {})

            def _answer(self, number: int, body: dict[str, Any]) -> None:
                arrival = time.monotonic()
                planned = server.plan(number, body) if server.plan else None
                if server.down or (planned is not None and planned.drop):
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.admitted = False
                if server.accept_at_once is not None:
                    with server._lock:
                        refused = server._accepted >= server.accept_at_once
                        server._accepted += not refused
                        server.throttled += refused
                        if refused:
                            server.served.append(Served(arrival, 429))
                    if refused:
                        headers = {"Retry-After": server.retry_after}
                        self._send(429, {"error": {"message": "too many requests"}}, headers)
                        return
                    self.admitted = True
                try:
                    self._serve(arrival, number, body, planned)
                finally:
                    self._leave()

            def _leave(self) -> None:
                """An admitted request stops counting against ``accept_at_once`` (once)."""
                if self.admitted:
                    self.admitted = False
                    with server._lock:
                        server._accepted -= 1

            def _serve(
                self, arrival: float, number: int, body: dict[str, Any], planned: Response | None
            ) -> None:
                if server._serving is not None:
                    server._serving.acquire()
                try:
                    time.sleep(planned.delay_s if planned is not None else server.latency_s)
                finally:
                    if server._serving is not None:
                        server._serving.release()
                if planned is not None and planned.status != 200:
                    with server._lock:
                        server.served.append(Served(arrival, planned.status))
                    self._leave()
                    self._send(planned.status, {"error": {"message": "planned"}}, planned.headers)
                    return
                text = planned.text if planned is not None and planned.text is not None else None
                content = text if text is not None else server.reply(body)
                prompt_tokens = server.prompt_tokens(body.get("messages"))
                completion_tokens = (
                    max(1, len(content or "") // 4)
                    if server.tokenizer is None
                    else server.count_tokens(content or "")
                )
                with server._lock:
                    server.served.append(Served(arrival, 200, prompt_tokens, completion_tokens))
                self._leave()  # served: it no longer counts (see the module docstring)
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{number}",
                        "object": "chat.completion",
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
                        },
                    },
                    {},
                )

            def _send(self, status: int, payload: Any, headers: dict[str, str]) -> None:
                try:
                    send_json(self, status, payload, headers)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (its timeout)

        return Handler
