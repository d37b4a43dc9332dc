"""A synchronous transport for callers that post from their own threads (the tau-bench eval).

The eval's agent and user simulator call their endpoints from episode
threads, one request at a time per thread, and bound their own concurrency.
Sending those requests through :func:`~skyrl_rewards.rewards.models.chat_loop.post_chat`
hops to the process's event-loop thread and back for every call (a future, a
task, ``wait_for``, the async HTTP stack): 2-3 ms of CPU per request on a
shared 2-core machine, growing with load. :func:`post_sync` sends them from
the calling thread instead, on :class:`SyncChatClient`: one pool of kept-alive
``http.client`` connections per endpoint, shared by every thread, with no
event loop.

It keeps :class:`~skyrl_rewards.rewards.models.chat_client.ChatClient`'s
contract for the configurations it serves (:func:`serves`: no in-flight limit,
no request or token pacing, no circuit breaker, no proxy for the URL; that is
what :func:`~skyrl_rewards.rewards.models.endpoint_config.caller_endpoint` builds):
one :class:`~skyrl_rewards.rewards.models.chat_client.ChatReply` per request,
never an exception for what the endpoint did; connect errors, timeouts, 429
and 5xx retried up to ``max_retries`` times with full-jitter back-off; a
``Retry-After`` (seconds or an HTTP date) honoured, and one past
``max_retry_after_s`` ending the request at once; ``timeout_s`` per
operation of a call; ``deadline_s`` over the whole request (every call and
wait is cut to what is left of it); failure kinds and messages as the async
client words them, naming the URL and the cause; the endpoint-wide
``Retry-After`` pause (:mod:`~skyrl_rewards.rewards.models.endpoint_hold`,
shared with every client of the server in the process): a 429's or 503's
``Retry-After`` holds every request to the server until it has passed, and a
request whose deadline or ``max_retry_after_s`` ends first fails
``rate_limited`` at once, uncalled. Any
other configuration is sent through ``post_chat``, whose client enforces
the limits and the breaker.
"""

from __future__ import annotations

import collections
import dataclasses
import http.client
import json
import os
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from skyrl_rewards.rewards.contract.lanes import endpoint_key
from skyrl_rewards.rewards.models.chat_client import (
    ChatReply,
    ReplyCheck,
    _Attempt,
    _held_reply,
    _quantile,
    _reply_attempt,
    _status_attempt,
    after_call,
)
from skyrl_rewards.rewards.models.chat_loop import post_chat
from skyrl_rewards.rewards.models.endpoint_config import EndpointConfig
from skyrl_rewards.rewards.models.endpoint_hold import endpoint_hold

_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
"""What a kept-alive connection the server has closed raises on reuse (sent again, fresh)."""


def serves(config: EndpointConfig) -> bool:
    """Whether :class:`SyncChatClient` keeps every guarantee ``config`` asks for.

    It does not pace or limit requests and has no breaker, and it does not go
    through proxies: a configuration with any of those goes to ``post_chat``.
    """
    return (
        config.max_in_flight is None
        and config.requests_per_minute is None
        and config.tokens_per_minute is None
        and config.breaker_failures is None
        and not _proxied(config.base_url)
    )


def _proxied(url: str) -> bool:
    """Whether the environment routes ``url`` through a proxy (httpx would honour it)."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    return parts.scheme in proxies and not urllib.request.proxy_bypass(parts.hostname or "")


class _Response:
    """An ``http.client`` reply read whole, with the attributes the async client's readers use."""

    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes) -> None:
        self.status_code = status
        self.headers = headers
        self.content = body

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class SyncChatClient:
    """One endpoint's client for synchronous callers; thread-safe (see the module docstring).

    Raises ``ValueError`` when ``api_key_env`` names an unset variable.
    """

    def __init__(self, config: EndpointConfig) -> None:
        self.config = config
        parts = urllib.parse.urlsplit(config.base_url.rstrip("/"))
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path
        self._url = config.base_url.rstrip("/")
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        api_key = config.api_key()
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._context = _tls_context() if self._https else None
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._hold = endpoint_hold(config.base_url)  # Retry-After, for every client of the server
        self._latencies: collections.deque[float] = collections.deque(maxlen=4096)
        self._counts: collections.Counter[str] = collections.Counter()
        self._errors: collections.Counter[str] = collections.Counter()
        self._latency_sum_s = 0.0

    def post(
        self,
        body: Mapping[str, Any],
        check: ReplyCheck | None = None,
        *,
        path: str = "/chat/completions",
    ) -> ChatReply:
        """POST ``body`` to ``base_url + path``; the reply or the failure, never raises for the
        endpoint (as :meth:`~skyrl_rewards.rewards.models.chat_client.ChatClient.post`)."""
        start = time.monotonic()
        with self._lock:
            self._counts["requests"] += 1
        reply = self._with_retries(json.dumps(body).encode(), check, path, start)
        reply = dataclasses.replace(reply, latency_s=time.monotonic() - start)
        with self._lock:
            if reply.ok:
                self._counts["ok"] += 1
            else:
                self._errors[reply.failure] += 1
        return reply

    def metrics(self) -> dict[str, Any]:
        """The async client's counters that apply here: ``requests``, ``calls``, ``retries``,
        ``ok``, ``errors`` by kind, ``tokens_in``/``tokens_out``, ``latency_s`` (sum, count,
        p50, p90, p99 of recent calls), ``idle_connections``, ``retry_after`` (the server's
        pauses and the calls held, as the async client counts them)."""
        with self._lock:
            latencies = sorted(self._latencies)
            counts, errors = dict(self._counts), dict(self._errors)
            idle = len(self._idle)
        return {
            **{k: counts.get(k, 0) for k in ("requests", "calls", "retries", "ok")},
            "errors": errors,
            "tokens_in": counts.get("tokens_in", 0),
            "tokens_out": counts.get("tokens_out", 0),
            "latency_s": {
                "sum": self._latency_sum_s,
                "count": counts.get("latency_count", 0),
                **{f"p{q}": _quantile(latencies, q / 100) for q in (50, 90, 99)},
            },
            "idle_connections": idle,
            "retry_after": {"pauses": self._hold.pauses, "held": self._hold.held},
        }

    def close(self) -> None:
        """Close the idle connections (calls under way close theirs when done)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _with_retries(
        self, payload: bytes, check: ReplyCheck | None, path: str, start: float
    ) -> ChatReply:
        config = self.config
        end = start + config.deadline_s
        retry, calls = 0, 0
        while True:
            bound = min(end - time.monotonic(), config.max_retry_after_s)
            if not self._hold.wait_blocking(bound):
                return dataclasses.replace(_held_reply(config, self._hold.remaining()), calls=calls)
            left = end - time.monotonic()
            if left <= 0:
                return _deadline_reply(config, calls)
            calls += 1
            attempt = self._call(payload, check, path, min(config.timeout_s, left))
            if attempt.failure == "timeout" and left < config.timeout_s:
                return _deadline_reply(config, calls, "the call cut to what was left of it")
            if attempt.retry_after_s is not None:
                self._hold.extend(attempt.retry_after_s)
            delay = after_call(config, attempt, retry, calls)
            if isinstance(delay, ChatReply):
                return delay
            retry += 1
            if time.monotonic() + delay >= end:
                wait = f"the next retry's wait, {delay:.2f} s, passes it"
                return _deadline_reply(config, calls, wait)
            with self._lock:
                self._counts["retries"] += 1
            time.sleep(delay)

    def _call(
        self, payload: bytes, check: ReplyCheck | None, path: str, timeout_s: float
    ) -> _Attempt:
        url = self._url + path
        start = time.monotonic()
        with self._lock:
            self._counts["calls"] += 1
        try:
            response = self._exchange(self._prefix + path, payload, timeout_s)
        except TimeoutError as error:
            return _Attempt(
                failure="timeout",
                message=f"no reply from {url} within timeout_s={timeout_s:g} "
                f"({type(error).__name__})",
                retryable=True,
                endpoint_fault=True,
            )
        except (OSError, http.client.HTTPException) as error:
            return _Attempt(
                failure="connect",
                message=f"cannot reach {url}: {type(error).__name__}: {error}",
                retryable=True,
                endpoint_fault=True,
            )
        elapsed = time.monotonic() - start
        attempt = (
            _status_attempt(response)
            if response.status_code != 200
            else _reply_attempt(response, check)
        )
        with self._lock:
            self._latencies.append(elapsed)
            self._latency_sum_s += elapsed
            self._counts["latency_count"] += 1
            self._counts["tokens_in"] += attempt.tokens_in
            self._counts["tokens_out"] += attempt.tokens_out
        return attempt

    def _exchange(self, target: str, payload: bytes, timeout_s: float) -> _Response:
        """One HTTP exchange on a pooled connection; a kept-alive one the server closed
        meanwhile is replaced by a fresh one once (nothing was received on it)."""
        connection, reused = self._connection(timeout_s)
        try:
            try:
                return self._send(connection, target, payload)
            except _STALE:
                if not reused:
                    raise
                connection.close()
                connection, reused = self._new_connection(timeout_s), False
                return self._send(connection, target, payload)
        except BaseException:
            connection.close()
            raise

    def _send(
        self, connection: http.client.HTTPConnection, target: str, payload: bytes
    ) -> _Response:
        connection.request("POST", target, body=payload, headers=self._headers)
        raw = connection.getresponse()
        response = _Response(raw.status, raw.headers, raw.read())
        if raw.will_close:
            connection.close()
        else:
            with self._lock:
                self._idle.append(connection)
        return response

    def _connection(self, timeout_s: float) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection (its timeout now ``timeout_s``) and True, or a new one and False."""
        with self._lock:
            connection = self._idle.pop() if self._idle else None
        if connection is None:
            return self._new_connection(timeout_s), False
        connection.timeout = timeout_s
        if connection.sock is not None:
            connection.sock.settimeout(timeout_s)
        return connection, True

    def _new_connection(self, timeout_s: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout_s, context=self._context
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)


def _tls_context() -> ssl.SSLContext:
    """The certificate authorities httpx trusts (certifi's), or the system's without certifi."""
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def _deadline_reply(config: EndpointConfig, calls: int, what: str = "") -> ChatReply:
    detail = f" ({what})" if what else ""
    return ChatReply(
        failure="timeout",
        message=f"no reply within deadline_s={config.deadline_s:g} "
        f"(waits and retries included){detail}; raise deadline_s or the endpoint's limits",
        calls=calls,
    )


_LOCK = threading.Lock()
_ROUTES: dict[str, SyncChatClient | None] = {}
"""Endpoint key -> its client, or None: sent through ``post_chat`` (see :func:`serves`)."""
_PID = os.getpid()


def sync_client(config: EndpointConfig) -> SyncChatClient | None:
    """This process's :class:`SyncChatClient` for ``config`` (one per endpoint configuration),
    or None when it does not :func:`serves` it. A forked child starts with none (its parent's
    connections are not its own)."""
    global _PID
    key = endpoint_key(dataclasses.asdict(config))
    with _LOCK:
        if _PID != os.getpid():
            _ROUTES.clear()
            _PID = os.getpid()
        if key not in _ROUTES:
            _ROUTES[key] = SyncChatClient(config) if serves(config) else None
        return _ROUTES[key]


def post_sync(
    config: EndpointConfig, body: Mapping[str, Any], check: ReplyCheck | None = None
) -> ChatReply:
    """POST ``body`` to ``config``'s endpoint from this thread; the reply or the failure.

    On :class:`SyncChatClient` when it :func:`serves` ``config``, else through
    :func:`~skyrl_rewards.rewards.models.chat_loop.post_chat` (limits, breaker).
    Raises ``ValueError`` for an unset API key variable. Bounded by ``deadline_s``.
    """
    client = sync_client(config)
    if client is None:
        return post_chat(config, body, check)
    return client.post(body, check)
