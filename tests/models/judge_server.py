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
- ``down``: every call is dropped (an outage) until set back.

It counts what reached it: ``calls``, the concurrency ``peak`` (counted on
arrival, before any wait), ``arrivals`` (monotonic times) and ``bodies``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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
    ) -> None:
        self.reply = reply or (lambda body: "1.0")
        self.latency_s = latency_s
        self.plan = plan
        self.down = False
        self.calls = 0
        self.concurrent = 0
        self.peak = 0
        self.arrivals: list[float] = []
        self.bodies: list[dict[str, Any]] = []
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

            def _answer(self, number: int, body: dict[str, Any]) -> None:
                planned = server.plan(number, body) if server.plan else None
                if server.down or (planned is not None and planned.drop):
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if server._serving is not None:
                    server._serving.acquire()
                try:
                    time.sleep(planned.delay_s if planned is not None else server.latency_s)
                finally:
                    if server._serving is not None:
                        server._serving.release()
                if planned is not None and planned.status != 200:
                    self._send(planned.status, {"error": {"message": "planned"}}, planned.headers)
                    return
                text = planned.text if planned is not None and planned.text is not None else None
                content = text if text is not None else server.reply(body)
                prompt = json.dumps(body.get("messages"))
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
                            "prompt_tokens": len(prompt) // 4,
                            "completion_tokens": max(1, len(content or "") // 4),
                        },
                    },
                    {},
                )

            def _send(self, status: int, payload: Any, headers: dict[str, str]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (its timeout)

        return Handler
