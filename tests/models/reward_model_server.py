"""A served reward model on loopback, speaking vLLM's pooling endpoints, for tests and benchmarks.

Usage (the stable API other tests build on)::

    with RewardModelServer(latency_s=0.05, max_concurrent=4) as server:
        config = {"base_url": server.base_url, "model": MODEL, "api": "classify"}
        ...
        assert server.items == 8 and server.peak <= 4

The shapes are vLLM's, as its protocol modules define them (read in
``vllm/entrypoints/pooling/classify/protocol.py``,
``vllm/entrypoints/pooling/pooling/protocol.py`` and
``vllm/entrypoints/openai/generative_scores/protocol.py`` of vllm-project/vllm):

- ``POST /v1/classify``: ``{"model", "input": str | [str]}`` or
  ``{"model", "messages": [...]}`` (one conversation), extras
  ``use_activation`` (default true), ``truncate_prompt_tokens``, ``priority``,
  ``mm_processor_kwargs`` -> ``{"id", "object": "list", "created", "model",
  "data": [{"index", "label", "probs", "num_classes"}], "usage"}``. With
  ``use_activation: false`` ``probs`` holds the raw logits.
- ``POST /v1/pooling``: the same inputs -> ``data: [{"index", "object":
  "pooling", "data": [floats]}]`` (the raw logits).
- ``POST /v1/generative-scores`` (also answered at ``/v1/generative_scoring``):
  ``{"model", "query", "items": [str], "label_token_ids": [int, ...],
  "apply_softmax", "item_first"}`` -> ``{"id", "object": "generative_score",
  "created", "model", "results": [{"index", "token_probs": {"<id>": p}}],
  "usage"}``. The text scored is ``query + item`` (``item + query`` with
  ``item_first``); the first label id is scored as "yes" (label 1), every
  other id as "no" (label 0), softmax over the labels.

Values are a deterministic function of the input text, exported so tests
check them: :func:`expected_logits` (two logits, ``[-x, x]``),
:func:`expected_probs` and :func:`expected_score` (``P(LABEL_1)``). A
``messages`` input is scored as :func:`conversation_text` of its messages
(image parts count as ``"<image>"``).

Behaviour is set per test and may change while the server runs:
``latency_s`` (per HTTP request, whatever its item count: a batching server),
``max_concurrent`` (requests served at once; more wait), ``plan(n, body) ->
Response | None`` (an answer other than the values for the n-th call:
a 429 with ``Retry-After``, a 500/503, a delay, ``drop``), ``down`` (every
call is dropped: an outage), ``accept_at_once`` (one more request than this in
flight is answered 429 with ``Retry-After: retry_after`` at once) and
``text`` (a planned ``Response.text`` replaces the body: a bad shape).

It counts what reached it: ``requests`` (HTTP calls to a scoring route),
``items`` (inputs in them), ``peak`` (the most in flight, counted on arrival),
``throttled`` (429 answers), ``errors`` (planned 5xx answers), ``dropped``
(connections closed unanswered), ``bodies`` and ``paths``.
"""

from __future__ import annotations

import hashlib
import json
import math
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from judge_server import Response

from skyrl_rewards.cli.judge_server import send_json

__all__ = [
    "LABELS",
    "MODEL",
    "Response",
    "RewardModelServer",
    "conversation_text",
    "expected_logits",
    "expected_probs",
    "expected_score",
]

MODEL = "loopback-reward-model"
"""The model name the server reports (it accepts any)."""

LABELS = ("LABEL_0", "LABEL_1")
"""The classifier's labels, index order (``probs[i]`` is ``LABELS[i]``)."""


def expected_logits(text: str) -> list[float]:
    """The server's logits for ``text``: ``[-x, x]``, ``x`` in ``[-4, 4)`` from blake2b of the text.

    >>> a = expected_logits("hello")
    >>> a == expected_logits("hello") and a[0] == -a[1] and -4 <= a[1] < 4
    True
    """
    digest = hashlib.blake2b(text.encode(), digest_size=4).digest()
    x = int.from_bytes(digest, "big") / 2**32 * 8.0 - 4.0
    return [-x, x]


def expected_probs(text: str) -> list[float]:
    """Softmax of :func:`expected_logits`: ``[P(LABEL_0), P(LABEL_1)]``."""
    logits = expected_logits(text)
    top = max(logits)
    exps = [math.exp(v - top) for v in logits]
    return [e / sum(exps) for e in exps]


def expected_score(text: str) -> float:
    """``P(LABEL_1)`` for ``text``: classify's ``probs[1]``, generative scoring's P(yes)."""
    return expected_probs(text)[1]


def conversation_text(messages: list[dict[str, Any]]) -> str:
    """The text the server scores for a chat: ``"role: content"`` lines, image parts as ``<image>``."""
    lines = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                part.get("text", "") if part.get("type") == "text" else "<image>"
                for part in content
            )
        lines.append(f"{message.get('role')}: {content}")
    return "\n".join(lines)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default backlog of 5 refuses bursts of new connections


class RewardModelServer:
    """See the module docstring. Use as a context manager; ``base_url`` is ``http://127.0.0.1:PORT/v1``."""

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        max_concurrent: int | None = None,
        plan: Callable[[int, dict[str, Any]], Response | None] | None = None,
        accept_at_once: int | None = None,
        retry_after: str = "1",
    ) -> None:
        self.latency_s = latency_s
        self.plan = plan
        self.accept_at_once = accept_at_once
        self.retry_after = retry_after
        self.down = False
        self.requests = 0
        self.items = 0
        self.concurrent = 0
        self.peak = 0
        self.throttled = 0
        self.errors = 0
        self.dropped = 0
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._accepted = 0
        self._lock = threading.Lock()
        self._serving = threading.BoundedSemaphore(max_concurrent) if max_concurrent else None
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    url = base_url

    def __enter__(self) -> RewardModelServer:
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
                route = self.path.rstrip("/").rsplit("/", 1)[-1]
                if route not in ("classify", "pooling", "generative-scores", "generative_scoring"):
                    self._send(404, {"detail": "Not Found"}, {})
                    return
                texts = _texts(route, body)
                with server._lock:
                    server.requests += 1
                    number = server.requests
                    server.items += len(texts)
                    server.concurrent += 1
                    server.peak = max(server.peak, server.concurrent)
                    server.bodies.append(body)
                    server.paths.append(self.path)
                try:
                    self._answer(number, route, body, texts)
                finally:
                    with server._lock:
                        server.concurrent -= 1

            def _answer(
                self, number: int, route: str, body: dict[str, Any], texts: list[str]
            ) -> None:
                planned = server.plan(number, body) if server.plan else None
                if server.down or (planned is not None and planned.drop):
                    with server._lock:
                        server.dropped += 1
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if server.accept_at_once is not None:
                    with server._lock:
                        refused = server._accepted >= server.accept_at_once
                        server._accepted += not refused
                        server.throttled += refused
                    if refused:
                        headers = {"Retry-After": server.retry_after}
                        self._send(429, {"error": {"message": "too many requests"}}, headers)
                        return
                try:
                    if server._serving is not None:
                        server._serving.acquire()
                    try:
                        time.sleep(planned.delay_s if planned is not None else server.latency_s)
                    finally:
                        if server._serving is not None:
                            server._serving.release()
                finally:
                    if server.accept_at_once is not None:
                        with server._lock:
                            server._accepted -= 1
                if planned is not None and planned.status != 200:
                    with server._lock:
                        server.throttled += planned.status == 429
                        server.errors += planned.status >= 500
                    self._send(planned.status, {"error": {"message": "planned"}}, planned.headers)
                    return
                if planned is not None and planned.text is not None:
                    self._send_raw(planned.text)
                    return
                self._send(200, _reply(route, body, texts), {})

            def _send_raw(self, text: str) -> None:
                data = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _send(self, status: int, payload: Any, headers: dict[str, str]) -> None:
                try:
                    send_json(self, status, payload, headers)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (its timeout)

        return Handler


def _texts(route: str, body: dict[str, Any]) -> list[str]:
    """The texts a request scores, in order."""
    if route in ("generative-scores", "generative_scoring"):
        query, items = body.get("query", ""), body.get("items") or []
        return [item + query if body.get("item_first") else query + item for item in items]
    if "messages" in body:
        return [conversation_text(body["messages"])]
    value = body.get("input", [])
    return [value] if isinstance(value, str) else list(value)


def _usage(texts: list[str]) -> dict[str, Any]:
    tokens = sum(max(1, len(text) // 4) for text in texts)
    return {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}


def _reply(route: str, body: dict[str, Any], texts: list[str]) -> dict[str, Any]:
    created = int(time.time())
    model = body.get("model") or MODEL
    if route in ("generative-scores", "generative_scoring"):
        ids = [str(i) for i in body.get("label_token_ids", [])]
        results = []
        for index, text in enumerate(texts):
            p_no, p_yes = expected_probs(text)
            probs = {ids[0]: p_yes} if ids else {}
            probs.update({i: p_no / max(1, len(ids) - 1) for i in ids[1:]})
            results.append({"index": index, "token_probs": probs})
        return {
            "id": "genscore-1",
            "object": "generative_score",
            "created": created,
            "model": model,
            "results": results,
            "usage": _usage(texts),
        }
    if route == "pooling":
        data: list[dict[str, Any]] = [
            {"index": index, "object": "pooling", "data": expected_logits(text)}
            for index, text in enumerate(texts)
        ]
    else:
        activate = body.get("use_activation", True) is not False
        data = []
        for index, text in enumerate(texts):
            probs = expected_probs(text) if activate else expected_logits(text)
            label = LABELS[max(range(len(probs)), key=probs.__getitem__)]
            data.append({"index": index, "label": label, "probs": probs, "num_classes": 2})
    return {
        "id": f"{route}-1",
        "object": "list",
        "created": created,
        "model": model,
        "data": data,
        "usage": _usage(texts),
    }
