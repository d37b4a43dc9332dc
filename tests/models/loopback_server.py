"""The HTTP plumbing the loopback test servers share (judge, reward model, embeddings).

:class:`LoopbackServer` serves a :class:`LoopbackHandler` subclass from a
stdlib ``ThreadingHTTPServer`` (HTTP/1.1, keep-alive, ``TCP_NODELAY``, a
backlog for bursts) on ``127.0.0.1`` at a free port, on a thread while its
``with`` block runs; ``url`` is the base URL (``http://127.0.0.1:PORT/v1``).
A handler reads the JSON body (:meth:`LoopbackHandler.read_json`), answers
JSON (:meth:`LoopbackHandler.send`: a client that gave up is not an error) or
closes the connection unanswered (:meth:`LoopbackHandler.drop`).

:class:`ScriptedServer` adds the faults tests script, the same on every
server, set per test and changeable while it runs:

- ``latency_s``: how long each answer takes;
- ``max_concurrent``: requests served at once (more wait their turn);
- ``plan(n, body) -> Response | None``: an answer other than the normal one
  for the n-th call (1-based): a status with headers (429 with
  ``Retry-After``, 500, 503), a delay (a timeout), ``text`` (the server
  decides what it replaces), or ``drop`` (the connection is closed without an
  answer, as a server going down does);
- ``down``: every call is dropped (an outage) until set back;
- ``accept_at_once``: at most this many requests served at once; one more is
  answered 429 with ``Retry-After: retry_after`` at once (as a provider's
  concurrency limit does; a served request stops counting before its answer
  is written, so a client that sends on the answer is never refused for it).

It counts ``peak`` (the most calls in flight, counted on arrival, before any
wait), ``throttled`` (429 answers, refused or planned), ``errors`` (planned
5xx answers) and ``dropped`` (connections closed unanswered).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from skyrl_rewards.cli.judge_server import send_json


@dataclass
class Response:
    """A planned answer: ``status`` with ``headers`` and ``text``, after ``delay_s``; or ``drop``."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    text: str | None = None
    delay_s: float = 0.0
    drop: bool = False


@dataclass(frozen=True)
class Turn:
    """A call the scripted faults let through: its arrival (monotonic) and its planned answer."""

    arrival: float
    planned: Response | None


_S = TypeVar("_S", bound="LoopbackServer")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default backlog of 5 refuses bursts of new connections


class LoopbackHandler(BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler with ``TCP_NODELAY``; ``owner`` is the server object it answers for."""

    protocol_version = "HTTP/1.1"
    owner: Any = None

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        return

    def read_json(self) -> Any:
        """The request's JSON body."""
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    def send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        """Answer ``payload`` as JSON; a client that already gave up (its timeout) is let go."""
        try:
            send_json(self, status, payload, headers or {})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def drop(self) -> None:
        """Close the connection without an answer, as a server going down does."""
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)


class LoopbackServer:
    """``handler`` served on loopback while the ``with`` block runs (see the module docstring)."""

    def __init__(self, handler: type[LoopbackHandler]) -> None:
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self: _S) -> _S:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class ScriptedServer(LoopbackServer):
    """A :class:`LoopbackServer` with the scripted faults of the module docstring."""

    def __init__(
        self,
        handler: type[ScriptedHandler],
        *,
        latency_s: float = 0.0,
        max_concurrent: int | None = None,
        plan: Callable[[int, dict[str, Any]], Response | None] | None = None,
        accept_at_once: int | None = None,
        retry_after: str = "1",
    ) -> None:
        super().__init__(handler)
        self.latency_s = latency_s
        self.plan = plan
        self.accept_at_once = accept_at_once
        self.retry_after = retry_after
        self.down = False
        self.concurrent = 0
        self.peak = 0
        self.throttled = 0
        self.errors = 0
        self.dropped = 0
        self._accepted = 0
        self._serving = threading.BoundedSemaphore(max_concurrent) if max_concurrent else None

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        """Count one call in flight (``concurrent``, ``peak``) while the block runs."""
        with self._lock:
            self.concurrent += 1
            self.peak = max(self.peak, self.concurrent)
        try:
            yield
        finally:
            with self._lock:
                self.concurrent -= 1

    def answered(self, arrival: float, status: int) -> None:
        """Count a fault's answer (429 or a planned status); a server may record more."""
        with self._lock:
            self.throttled += status == 429
            self.errors += status >= 500


class ScriptedHandler(LoopbackHandler):
    """A handler whose calls go through :meth:`take_turn` (the server's scripted faults)."""

    owner: ScriptedServer

    def take_turn(self, number: int, body: dict[str, Any]) -> Turn | None:
        """Play the scripted faults on the ``number``-th call; ``None`` when they answered it.

        Dropped when the server is ``down`` or the plan says ``drop``; 429 at
        once beyond ``accept_at_once``; else it waits its turn
        (``max_concurrent``) for the planned delay or ``latency_s``, stops
        counting against ``accept_at_once``, and a planned status other than
        200 is sent. The returned :class:`Turn` is the call to answer.
        """
        owner = self.owner
        arrival = time.monotonic()
        planned = owner.plan(number, body) if owner.plan else None
        if owner.down or (planned is not None and planned.drop):
            with owner._lock:
                owner.dropped += 1
            self.drop()
            return None
        limit = owner.accept_at_once
        if limit is not None:
            with owner._lock:
                refused = owner._accepted >= limit
                owner._accepted += not refused
            if refused:
                owner.answered(arrival, 429)
                headers = {"Retry-After": owner.retry_after}
                self.send(429, {"error": {"message": "too many requests"}}, headers)
                return None
        try:
            if owner._serving is not None:
                owner._serving.acquire()
            try:
                time.sleep(planned.delay_s if planned is not None else owner.latency_s)
            finally:
                if owner._serving is not None:
                    owner._serving.release()
        finally:
            if limit is not None:
                with owner._lock:
                    owner._accepted -= 1
        if planned is not None and planned.status != 200:
            owner.answered(arrival, planned.status)
            self.send(planned.status, {"error": {"message": "planned"}}, planned.headers)
            return None
        return Turn(arrival, planned)


class Storm:
    """A 429 storm: every call in the first ``storm_s`` seconds (from the first call) is answered
    429 with ``Retry-After: retry_after_s``; later calls are served. Use it as a server's ``plan``.

    :meth:`early_calls` counts the calls that arrived while an earlier 429's
    ``Retry-After`` was still running, past ``grace_s`` after that 429 (calls
    already on their way when it was answered may arrive that late).
    """

    def __init__(self, storm_s: float, retry_after_s: int) -> None:
        self.storm_s = storm_s
        self.retry_after_s = retry_after_s
        self._lock = threading.Lock()
        self._start: float | None = None

    def __call__(self, number: int, body: dict[str, Any]) -> Response | None:
        now = time.monotonic()
        with self._lock:
            if self._start is None:
                self._start = now
        if now - self._start < self.storm_s:
            return Response(429, {"Retry-After": str(self.retry_after_s)})
        return None

    def early_calls(self, served: list[tuple[float, int]], grace_s: float = 0.05) -> int:
        """Calls (``(arrival, status)``) that arrived inside an earlier 429's Retry-After."""
        throttled = sorted(arrival for arrival, status in served if status == 429)
        return sum(
            any(t + grace_s < arrival < t + self.retry_after_s for t in throttled)
            for arrival, _ in served
        )
