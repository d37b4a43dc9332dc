"""An asynchronous client for one OpenAI-compatible chat endpoint: limits, retries, a breaker.

:class:`ChatClient` sends ``POST {base_url}/chat/completions`` (or another
``path``: a served reward model's ``/classify``) on long-lived
``httpx.AsyncClient`` connections and turns each request body into exactly one
:class:`ChatReply`: the whole reply JSON, or a failure whose ``failure`` is one
of :data:`~skyrl_rewards.rewards.models.lanes.FAILURE_KINDS`. It never raises
for what the endpoint did.

- limits (:mod:`~skyrl_rewards.rewards.models.limits`): requests in flight,
  requests per minute and tokens per minute (prompt plus completion tokens:
  the prompt counted before a call by
  :mod:`~skyrl_rewards.rewards.models.token_count`, the completion at its
  ``max_tokens`` bound, both corrected from the reply's ``usage``). A request
  that cannot get a slot within ``queue_timeout_s`` is ``rate_limited``. With
  ``adaptive_concurrency`` (the default) the calls in flight follow what the
  endpoint accepts: a 429 shrinks them, successes grow them back up to
  ``max_in_flight`` (:class:`~skyrl_rewards.rewards.models.limits.InFlight`).
- retries: connect errors, timeouts, 429 and 5xx are retried up to
  ``max_retries`` times with exponential back-off and full jitter; a
  ``Retry-After`` (seconds or an HTTP date) is honoured, and one longer than
  ``max_retry_after_s`` ends the request at once. Other 4xx are not retried.
  A 429 or 503 with ``Retry-After`` pauses the whole server: no call of any
  client of it in this process goes out until it has passed
  (:mod:`~skyrl_rewards.rewards.models.endpoint_hold`).
- a circuit breaker (unless ``breaker_failures`` is ``None``):
  ``breaker_failures`` consecutive connect errors, timeouts or 5xx open it;
  while open every request is ``breaker_open`` at once, without a call, its
  message naming the failure that opened it; after ``breaker_reset_s`` one
  probe goes out and its success closes the breaker. Requests that come while
  the probe is out wait for it (at most ``timeout_s``, the probe's own bound)
  and are sent when it succeeds.
- ``deadline_s`` bounds one request from start to reply, waits and retries included.
- metrics: calls, retries, errors by kind, tokens, latency, in flight, breaker, cost.

Users: the judge (:class:`~skyrl_rewards.rewards.models.judge_client.JudgeClient`
adds the verdict text and a cache), and the tau-bench eval's agent and user
simulator, which call :func:`post_chat` from their threads. The limits are per
client: :func:`post_chat` and the judge's
:func:`~skyrl_rewards.rewards.models.judge_client.run_judge_requests` hold one
client per endpoint configuration per process, on one private event loop
thread. ``httpx`` is imported when a client first calls.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import email.utils
import json
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from skyrl_rewards.rewards.models.endpoint_hold import endpoint_hold
from skyrl_rewards.rewards.models.lanes import endpoint_key
from skyrl_rewards.rewards.models.limits import Breaker, InFlight, Pacer
from skyrl_rewards.rewards.models.token_count import TokenCounter

CONNECTIONS_PER_SHARD = 16
"""Connections per ``httpx.AsyncClient``: a client's pool does work quadratic in its
connections on every request (httpcore 1.0), so ``max_in_flight`` connections are
spread over clients of at most this many, each request going to the least busy one."""

_ENDPOINT_SECTIONS = ("sampling", "extra_body", "limits", "retries", "breaker", "prices")


@dataclass(frozen=True)
class EndpointConfig:
    """One OpenAI-compatible chat endpoint: where, which model, and the limits of its client.

    Built from the plain mapping a component's ``endpoints()`` gives
    (:meth:`from_mapping`); every field has a default but ``base_url`` and ``model``.
    """

    base_url: str
    """Server root up to and including the API version, e.g. ``http://127.0.0.1:8000/v1``."""
    model: str
    """The ``model`` field of each request (``vllm serve MODEL`` serves it as ``MODEL``)."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (``None``: no key sent)."""
    sampling: Mapping[str, Any] = field(default_factory=lambda: {"temperature": 0.0})
    """Sampling fields of each request body (``temperature``, ``max_tokens``, ``top_p``, ...)."""
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    """More request-body fields, sent as given (e.g. ``chat_template_kwargs``)."""
    timeout_s: float = 60.0
    """Time limit of one HTTP call (connect, write, read)."""
    deadline_s: float = 600.0
    """Time limit of one request from start to outcome, queueing and retries included."""
    max_in_flight: int | None = 64
    """Most calls under way at once (``None``: no limit)."""
    requests_per_minute: float | None = None
    """Most calls started per minute (``None``: no limit)."""
    tokens_per_minute: float | None = None
    """Most prompt plus completion tokens per minute (``None``: no limit)."""
    tokenizer: str | None = None
    """How prompts are counted for ``tokens_per_minute``: a local folder holding the model's
    tokenizer, ``bytes``, or ``None``: the endpoint's ``/tokenize`` where it serves it, else
    bytes (see :mod:`~skyrl_rewards.rewards.models.token_count`)."""
    adaptive_concurrency: bool = True
    """Shrink the calls in flight on a 429 and grow them back on success (up to ``max_in_flight``)."""
    queue_timeout_s: float = 300.0
    """Longest wait for a slot under the limits; past it a request is ``rate_limited``."""
    max_retries: int = 4
    """Retries of one request after a connect error, timeout, 429 or 5xx."""
    backoff_base_s: float = 0.5
    """First back-off bound; the n-th retry waits uniformly in [0, base * 2**(n-1)] (full jitter)."""
    backoff_max_s: float = 30.0
    """Largest back-off bound."""
    max_retry_after_s: float = 120.0
    """A ``Retry-After`` longer than this ends the request at once (``rate_limited``/``http_status``)."""
    breaker_failures: int | None = 5
    """Consecutive failed calls (connect, timeout, 5xx) that open the breaker (``None``: no breaker)."""
    breaker_reset_s: float = 10.0
    """How long the breaker stays open before one probe is let through."""
    cache_size: int = 10_000
    """Successful outcomes kept for identical requests (0: no cache; the judge client only)."""
    price_in_per_1m: float | None = None
    """Price of one million prompt tokens; with the output price, metrics report ``cost``."""
    price_out_per_1m: float | None = None
    """Price of one million completion tokens."""

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> EndpointConfig:
        """Read a configuration (flat, or with ``limits``, ``retries``, ``breaker``, ``prices`` sections).

        Section keys: ``limits`` {max_in_flight, requests_per_minute,
        tokens_per_minute, tokenizer, adaptive_concurrency, queue_timeout_s};
        ``retries`` {max_retries, backoff_base_s, backoff_max_s,
        max_retry_after_s}; ``breaker`` {failures, reset_s}; ``prices``
        {input_per_1m, output_per_1m}.
        Raises ``ValueError`` naming the field for a missing or bad value.

        >>> EndpointConfig.from_mapping({"base_url": "http://h/v1", "model": "m",
        ...                              "limits": {"max_in_flight": 8}}).max_in_flight
        8
        """
        if not isinstance(config, Mapping):
            raise ValueError(f"endpoint: expected a mapping, got {type(config).__name__}")
        flat = {k: v for k, v in config.items() if k not in _ENDPOINT_SECTIONS}
        for key in ("sampling", "extra_body"):
            if key in config:
                flat[key] = _section(config, key)
        for section, renames in _SECTION_FIELDS.items():
            for key, value in _section(config, section).items():
                if key not in renames:
                    raise ValueError(
                        f"endpoint.{section}.{key}: unknown setting; expected one of {sorted(renames)}"
                    )
                flat[renames[key]] = value
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(flat) - names)
        if unknown:
            raise ValueError(
                f"endpoint: unknown settings {unknown}; expected some of {sorted(names)}"
            )
        for key in ("base_url", "model"):
            if not isinstance(flat.get(key), str) or not flat[key]:
                raise ValueError(
                    f"endpoint.{key}: expected a non-empty string, got {flat.get(key)!r}"
                )
        if not flat["base_url"].startswith(("http://", "https://")):
            raise ValueError(
                "endpoint.base_url: expected an http:// or https:// URL such as "
                f"http://127.0.0.1:8000/v1, got {flat['base_url']!r}"
            )
        endpoint = cls(**flat)
        endpoint.check()
        return endpoint

    def check(self) -> None:
        """Raise ``ValueError`` naming the first bad setting."""
        positive = ("timeout_s", "deadline_s", "queue_timeout_s", "backoff_max_s")
        for name in positive + ("backoff_base_s", "breaker_reset_s", "max_retry_after_s"):
            _check_number(name, getattr(self, name), minimum=0.0, strict=name in positive)
        for name in ("max_in_flight", "requests_per_minute", "tokens_per_minute"):
            if getattr(self, name) is not None:
                _check_number(name, getattr(self, name), minimum=0.0, strict=True)
        for name in ("price_in_per_1m", "price_out_per_1m"):
            if getattr(self, name) is not None:
                _check_number(name, getattr(self, name), minimum=0.0)
        for name in ("max_retries", "cache_size", "breaker_failures"):
            value = getattr(self, name)
            if name == "breaker_failures" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"endpoint.{name}: expected a non-negative integer, got {value!r}")
        if self.breaker_failures is not None and self.breaker_failures < 1:
            raise ValueError("endpoint.breaker.failures: expected at least 1 (or null: no breaker)")
        if self.tokenizer is not None and (
            not isinstance(self.tokenizer, str) or not self.tokenizer
        ):
            raise ValueError(
                f"endpoint.tokenizer: expected a local folder, 'bytes' or null, got "
                f"{self.tokenizer!r}"
            )
        if not isinstance(self.adaptive_concurrency, bool):
            raise ValueError(
                f"endpoint.adaptive_concurrency: expected true or false, got "
                f"{self.adaptive_concurrency!r}"
            )
        if self.api_key_env is not None and (
            not isinstance(self.api_key_env, str) or not self.api_key_env
        ):
            raise ValueError(
                f"endpoint.api_key_env: expected the NAME of an environment variable, got "
                f"{self.api_key_env!r}"
            )

    def api_key(self) -> str | None:
        """The API key from ``$api_key_env``; ``ValueError`` when that variable is unset or empty."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env, "")
        if not key:
            raise ValueError(
                f"endpoint.api_key_env: environment variable {self.api_key_env} is not set on this "
                "host; export it (the key itself never goes in a config)"
            )
        return key


_SECTION_FIELDS: dict[str, dict[str, str]] = {
    "limits": {
        "max_in_flight": "max_in_flight",
        "requests_per_minute": "requests_per_minute",
        "tokens_per_minute": "tokens_per_minute",
        "tokenizer": "tokenizer",
        "adaptive_concurrency": "adaptive_concurrency",
        "queue_timeout_s": "queue_timeout_s",
    },
    "retries": {
        "max_retries": "max_retries",
        "backoff_base_s": "backoff_base_s",
        "backoff_max_s": "backoff_max_s",
        "max_retry_after_s": "max_retry_after_s",
    },
    "breaker": {"failures": "breaker_failures", "reset_s": "breaker_reset_s"},
    "prices": {"input_per_1m": "price_in_per_1m", "output_per_1m": "price_out_per_1m"},
}


def _section(config: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = config.get(key) or {}
    if not isinstance(value, Mapping):
        raise ValueError(f"endpoint.{key}: expected a mapping, got {value!r:.80}")
    return value


def _check_number(name: str, value: Any, *, minimum: float, strict: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < minimum or (strict and value == minimum):
        bound = "positive" if strict else "non-negative"
        raise ValueError(f"endpoint.{name}: expected a {bound} number, got {value!r}")


@dataclass(frozen=True)
class ChatReply:
    """What one request gave: the reply JSON, or a failure and why.

    ``failure`` is one of :data:`~skyrl_rewards.rewards.models.lanes.FAILURE_KINDS`
    (empty: success, and ``data`` is the reply object); ``message`` says why,
    for people; ``calls`` counts the HTTP calls made for it (retries included).
    """

    data: dict[str, Any] | None = None
    failure: str = ""
    message: str = ""
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the request succeeded."""
        return not self.failure


ReplyCheck = Callable[[dict[str, Any]], str]
"""Checks a reply object; returns why it is not usable (``""``: usable, a ``bad_response`` otherwise)."""


def message_problem(data: dict[str, Any]) -> str:
    """A :data:`ReplyCheck`: why the reply has no ``choices[0].message`` object (``""``: it has one)."""
    try:
        message = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return f"reply has no choices[0].message: {json.dumps(data)[:200]}"
    return "" if isinstance(message, dict) else "reply's choices[0].message is not an object"


@dataclass
class _Attempt:
    """What one HTTP call gave."""

    data: dict[str, Any] | None = None
    failure: str = ""
    message: str = ""
    retry_after_s: float | None = None
    retryable: bool = False
    endpoint_fault: bool = False  # counts against the breaker
    throttled: bool = False  # a 429: too many calls at once
    tokens_in: int = 0
    tokens_out: int = 0
    usage: bool = False


class ChatClient:
    """One endpoint's asynchronous client; use it from one event loop.

    ``transport`` (an ``httpx`` transport) is for tests of this class only.
    Raises ``ValueError`` when ``api_key_env`` names an unset variable.
    """

    def __init__(self, config: EndpointConfig, *, transport: Any = None) -> None:
        self.config = config
        self._api_key = config.api_key()
        self._transport = transport
        self._shards: list[Any] = []  # httpx.AsyncClient each, made on first use
        self._shard_load: list[int] = []
        self._in_flight = InFlight(config.max_in_flight, adaptive=config.adaptive_concurrency)
        self._hold = endpoint_hold(config.base_url)  # Retry-After, for every client of the server
        self._requests_pacer = Pacer(config.requests_per_minute)
        self._token_counter = (
            TokenCounter(config.tokenizer, config.base_url, config.model, config.timeout_s)
            if config.tokens_per_minute is not None
            else None
        )
        self._tokens_pacer = Pacer(
            config.tokens_per_minute, burst=_completion_estimate(config.sampling)
        )
        self._breaker = (
            Breaker(config.breaker_failures, config.breaker_reset_s)
            if config.breaker_failures is not None
            else None
        )
        self._latencies: collections.deque[float] = collections.deque(maxlen=4096)
        self._counts: collections.Counter[str] = collections.Counter()
        self._errors: collections.Counter[str] = collections.Counter()
        self._latency_sum_s = 0.0

    async def post(
        self,
        body: Mapping[str, Any],
        check: ReplyCheck | None = None,
        *,
        path: str = "/chat/completions",
    ) -> ChatReply:
        """POST ``body`` (sent as given) to ``base_url + path`` and return the reply or the
        failure; never raises for the endpoint.

        ``check`` may refuse a reply object that the caller cannot use: it
        becomes a ``bad_response`` (not retried). ``path`` is the API route
        (``"/embeddings"`` for an embeddings request); limits, retries and the
        breaker are this client's whatever the route.
        """
        self._counts["requests"] += 1
        start = time.monotonic()
        try:
            reply = await asyncio.wait_for(
                self._with_retries(body, check, path), self.config.deadline_s
            )
        except asyncio.TimeoutError:
            reply = ChatReply(
                failure="timeout",
                message=f"no reply within deadline_s={self.config.deadline_s:g} "
                "(waits and retries included); raise deadline_s or the endpoint's limits",
            )
        reply = dataclasses.replace(reply, latency_s=time.monotonic() - start)
        if reply.ok:
            self._counts["ok"] += 1
        else:
            self._errors[reply.failure] += 1
        return reply

    def metrics(self) -> dict[str, Any]:
        """Counters and gauges of this client (plain JSON values).

        ``requests`` (asked), ``calls`` (HTTP calls made), ``retries``, ``ok``,
        ``errors`` by failure kind, ``tokens_in``/``tokens_out`` (from ``usage``),
        ``latency_s`` (sum, count, p50, p90, p99 of recent calls), ``in_flight``,
        its ``peak``, ``in_flight_window`` (what adaptive concurrency allows now)
        and ``throttled`` (429 answers), ``retry_after`` (the server's pauses set by a
        ``Retry-After`` and the calls that waited for one, all clients of the server in this
        process), ``breaker`` (state, opens, and ``cause``:
        the last failure counted; ``off`` without one), ``token_count`` (requests
        counted by each means, with a tokens-per-minute limit), and ``cost`` when
        both prices are configured.
        """
        latencies = sorted(self._latencies)
        breaker = self._breaker
        metrics: dict[str, Any] = {
            "requests": self._counts["requests"],
            "calls": self._counts["calls"],
            "retries": self._counts["retries"],
            "ok": self._counts["ok"],
            "errors": dict(self._errors),
            "tokens_in": self._counts["tokens_in"],
            "tokens_out": self._counts["tokens_out"],
            "latency_s": {
                "sum": self._latency_sum_s,
                "count": self._counts["latency_count"],
                **{f"p{q}": _quantile(latencies, q / 100) for q in (50, 90, 99)},
            },
            "in_flight": self._in_flight.count,
            "in_flight_peak": self._in_flight.peak,
            "in_flight_window": self._in_flight.capacity(),
            "throttled": self._in_flight.throttles,
            "retry_after": {"pauses": self._hold.pauses, "held": self._hold.held},
            "breaker": (
                {"state": breaker.state, "opens": breaker.opens, "cause": breaker.cause}
                if breaker is not None
                else {"state": "off", "opens": 0}
            ),
        }
        if self._token_counter is not None:
            metrics["token_count"] = dict(self._token_counter.counted)
        config = self.config
        if config.price_in_per_1m is not None and config.price_out_per_1m is not None:
            metrics["cost"] = (
                self._counts["tokens_in"] * config.price_in_per_1m
                + self._counts["tokens_out"] * config.price_out_per_1m
            ) / 1e6
        return metrics

    async def aclose(self) -> None:
        """Close the HTTP connections (the client may not be used afterwards)."""
        for shard in self._shards:
            await shard.aclose()
        self._shards, self._shard_load = [], []

    async def _with_retries(
        self, body: Mapping[str, Any], check: ReplyCheck | None, path: str
    ) -> ChatReply:
        config = self.config
        breaker = self._breaker
        estimate: int | None = None
        retry, calls = 0, 0
        while True:
            if breaker is not None and not await self._breaker_passes(breaker):
                return _breaker_reply(config, breaker, retry, calls)
            if estimate is None:
                estimate = await self._token_estimate(body)
            waited = await self._take_slot(estimate)
            if waited is not None:
                return dataclasses.replace(waited, calls=calls)
            if breaker is not None and not breaker.allow():
                self._in_flight.release()  # another caller's probe went out first: not sent
                self._requests_pacer.adjust(-1)
                self._tokens_pacer.adjust(-estimate)
                continue  # wait for that probe at the top
            calls += 1
            try:
                attempt = await self._call(body, check, path)
                if attempt.throttled:
                    self._in_flight.throttled()
                elif not attempt.failure:
                    self._in_flight.succeeded()
            except asyncio.CancelledError:
                if breaker is not None and breaker.state == "half_open":
                    breaker.failure()  # a probe abandoned by the deadline: probe again later
                raise
            finally:
                self._in_flight.release()
            if attempt.retry_after_s is not None:
                self._hold.extend(attempt.retry_after_s)
            if attempt.usage:
                self._tokens_pacer.adjust(attempt.tokens_in + attempt.tokens_out - estimate)
            elif attempt.failure == "connect" or attempt.throttled:
                self._tokens_pacer.adjust(-estimate)  # nothing was served
            if breaker is not None:
                if attempt.endpoint_fault:
                    breaker.failure(attempt.message)
                else:
                    breaker.success()
            if not attempt.failure:
                return ChatReply(
                    data=attempt.data,
                    calls=calls,
                    tokens_in=attempt.tokens_in,
                    tokens_out=attempt.tokens_out,
                )
            if not attempt.retryable or retry >= config.max_retries:
                return _final(attempt, retry, calls)
            retry += 1
            delay = random.uniform(
                0.0, min(config.backoff_max_s, config.backoff_base_s * 2 ** (retry - 1))
            )
            if attempt.retry_after_s is not None:
                if attempt.retry_after_s > config.max_retry_after_s:
                    return _final(
                        attempt,
                        retry - 1,
                        calls,
                        f"Retry-After {attempt.retry_after_s:g} s "
                        f"is past max_retry_after_s={config.max_retry_after_s:g}",
                    )
                delay = max(delay, attempt.retry_after_s)
            self._counts["retries"] += 1
            await asyncio.sleep(delay)

    async def _breaker_passes(self, breaker: Breaker) -> bool:
        """May a call go out? While the breaker's probe is out, wait for it (at most ``timeout_s``)."""
        if not breaker.blocked():
            return True
        return breaker.probing() and await breaker.wait_probe(self.config.timeout_s)

    async def _token_estimate(self, body: Mapping[str, Any]) -> int:
        """Prompt tokens (see :mod:`~skyrl_rewards.rewards.models.token_count`) plus the completion's bound.

        0 without a tokens-per-minute limit (nothing is counted).
        """
        if self._token_counter is None:
            return 0
        config = self.config
        completion = (
            _completion_estimate(body)
            if "max_tokens" in body or "max_completion_tokens" in body
            else _completion_estimate(config.sampling)
        )
        self._shard()  # the HTTP clients exist: /tokenize goes over them
        prompt = await self._token_counter.count(body.get("messages"), self._shards[0])
        return prompt + completion

    async def _take_slot(self, estimate: int) -> ChatReply | None:
        """Hold an in-flight slot and the rate allowance; a ``rate_limited`` reply when they take too long."""
        config = self.config
        deadline = time.monotonic() + config.queue_timeout_s
        if not await self._in_flight.acquire(config.queue_timeout_s):
            return _rate_limited(config, "max_in_flight")
        if not await self._held(deadline):
            return _held_reply(config, self._hold.remaining())
        for pacer, amount, name in (
            (self._requests_pacer, 1, "requests_per_minute"),
            (self._tokens_pacer, estimate, "tokens_per_minute"),
        ):
            try:
                allowed = await pacer.acquire(amount, deadline - time.monotonic())
            except asyncio.CancelledError:
                self._in_flight.release()
                raise
            if not allowed:
                self._in_flight.release()
                return _rate_limited(config, name)
        if not await self._held(deadline):  # a Retry-After came while this one was paced
            self._requests_pacer.adjust(-1)
            self._tokens_pacer.adjust(-estimate)
            return _held_reply(config, self._hold.remaining())
        return None

    async def _held(self, deadline: float) -> bool:
        """Wait out the endpoint's ``Retry-After`` pause holding the in-flight slot; ``False`` (slot
        given back) when it ends past ``deadline`` or past ``max_retry_after_s`` from now."""
        bound = min(deadline - time.monotonic(), self.config.max_retry_after_s)
        try:
            passed = await self._hold.wait(bound)
        except asyncio.CancelledError:
            self._in_flight.release()
            raise
        if not passed:
            self._in_flight.release()
        return passed

    def _shard(self) -> int:
        """The least busy HTTP client (made on first use): see :data:`CONNECTIONS_PER_SHARD`."""
        if not self._shards:
            import httpx

            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            limit = self.config.max_in_flight
            count = 1 if limit is None else -(-limit // CONNECTIONS_PER_SHARD)
            per_shard = None if limit is None else -(-limit // count)
            self._shards = [
                httpx.AsyncClient(
                    headers=headers,
                    timeout=httpx.Timeout(self.config.timeout_s),
                    limits=httpx.Limits(
                        max_connections=per_shard, max_keepalive_connections=per_shard
                    ),
                    transport=self._transport,
                )
                for _ in range(count)
            ]
            self._shard_load = [0] * count
        return min(range(len(self._shards)), key=self._shard_load.__getitem__)

    async def _call(self, body: Mapping[str, Any], check: ReplyCheck | None, path: str) -> _Attempt:
        import httpx

        url = self.config.base_url.rstrip("/") + path
        self._counts["calls"] += 1
        start = time.monotonic()
        shard = self._shard()
        self._shard_load[shard] += 1
        try:
            response = await self._shards[shard].post(url, json=body)
        except httpx.TimeoutException as error:
            return _Attempt(
                failure="timeout",
                message=f"no reply from {url} within timeout_s={self.config.timeout_s:g} "
                f"({type(error).__name__})",
                retryable=True,
                endpoint_fault=True,
            )
        except httpx.TransportError as error:
            return _Attempt(
                failure="connect",
                message=f"cannot reach {url}: {type(error).__name__}: {error}",
                retryable=True,
                endpoint_fault=True,
            )
        finally:
            self._shard_load[shard] -= 1
        elapsed = time.monotonic() - start
        self._latencies.append(elapsed)
        self._latency_sum_s += elapsed
        self._counts["latency_count"] += 1
        if response.status_code != 200:
            return _status_attempt(response)
        attempt = _reply_attempt(response, check)
        self._counts["tokens_in"] += attempt.tokens_in
        self._counts["tokens_out"] += attempt.tokens_out
        return attempt


def _status_attempt(response: Any) -> _Attempt:
    status = response.status_code
    retry_after = _retry_after_s(response.headers.get("retry-after"))
    snippet = response.text[:200].replace("\n", " ")
    return _Attempt(
        failure="rate_limited" if status == 429 else "http_status",
        message=f"HTTP {status}: {snippet}",
        retry_after_s=retry_after if status in (429, 503) else None,
        retryable=status == 429 or status >= 500,
        endpoint_fault=status >= 500,
        throttled=status == 429,
    )


def _reply_attempt(response: Any, check: ReplyCheck | None) -> _Attempt:
    try:
        data = response.json()
    except (ValueError, UnicodeDecodeError) as error:
        return _Attempt(failure="bad_response", message=f"reply is not JSON: {error}")
    if not isinstance(data, dict):
        return _Attempt(failure="bad_response", message="reply is JSON but not an object")
    usage = data.get("usage")
    tokens_in, tokens_out, has_usage = 0, 0, False
    if isinstance(usage, dict):
        tokens_in = _count(usage.get("prompt_tokens"))
        tokens_out = _count(usage.get("completion_tokens"))
        has_usage = True
    problem = check(data) if check is not None else ""
    return _Attempt(
        data=None if problem else data,
        failure="bad_response" if problem else "",
        message=problem,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        usage=has_usage,
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _retry_after_s(value: str | None) -> float | None:
    """``Retry-After`` as seconds from now: delta seconds or an HTTP date; ``None`` when absent or bad."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _final(attempt: _Attempt, retries: int, calls: int, why: str = "") -> ChatReply:
    detail = f"; {why}" if why else ""
    return ChatReply(
        failure=attempt.failure,
        message=f"{attempt.message} (after {retries} retries{detail})",
        calls=calls,
        tokens_in=attempt.tokens_in,
        tokens_out=attempt.tokens_out,
    )


def _rate_limited(config: EndpointConfig, limit: str) -> ChatReply:
    return ChatReply(
        failure="rate_limited",
        message=f"no slot under {limit} within queue_timeout_s={config.queue_timeout_s:g}; "
        "raise the limit or queue_timeout_s, or send fewer requests",
    )


def _held_reply(config: EndpointConfig, remaining_s: float) -> ChatReply:
    return ChatReply(
        failure="rate_limited",
        message=f"{config.base_url} said Retry-After: its pause ends in {remaining_s:.3g} s, past "
        f"queue_timeout_s={config.queue_timeout_s:g} or max_retry_after_s="
        f"{config.max_retry_after_s:g} (not called); send later or raise them",
    )


def _breaker_reply(config: EndpointConfig, breaker: Breaker, retries: int, calls: int) -> ChatReply:
    cause = f", the last: {breaker.cause}" if breaker.cause else ""
    return ChatReply(
        failure="breaker_open",
        message=f"circuit breaker open for {config.base_url} after "
        f"{config.breaker_failures} consecutive failures{cause} (not called; probing every "
        f"{config.breaker_reset_s:g} s; {retries} retries before)",
        calls=calls,
    )


def _completion_estimate(fields: Mapping[str, Any]) -> int:
    """The completion's token bound: ``max_tokens`` (or ``max_completion_tokens``) in ``fields``, else 256."""
    max_tokens = fields.get("max_tokens", fields.get("max_completion_tokens"))
    return max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else 256


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(q * len(values)))]


class LoopThread:
    """A private event loop on a daemon thread, with the process's clients by key."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.clients: dict[str, ChatClient] = {}
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="skyrl-rewards-chat", daemon=True
        )
        self.thread.start()

    def submit(self, coroutine: Any) -> Future[Any]:
        """Run ``coroutine`` on the loop; its future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)


_LOCK = threading.Lock()
_LOOP: LoopThread | None = None


def loop_thread() -> LoopThread:
    """This process's private loop thread (started on first use, and anew in a forked child)."""
    global _LOOP
    with _LOCK:
        if _LOOP is None or _LOOP.pid != os.getpid():
            _LOOP = LoopThread()
        return _LOOP


def current_loop_thread() -> LoopThread | None:
    """This process's loop thread if it has started one, else ``None`` (starts nothing)."""
    loop = _LOOP
    return loop if loop is not None and loop.pid == os.getpid() else None


def post_chat(
    config: EndpointConfig, body: Mapping[str, Any], check: ReplyCheck | None = None
) -> ChatReply:
    """POST ``body`` to ``config``'s endpoint from synchronous code; blocks until the reply or failure.

    The call runs on the process's private loop thread, on one
    :class:`ChatClient` per endpoint configuration (so its limits and breaker
    hold for every thread of the process that posts to it). No cache: each
    call is sent. Raises ``ValueError`` for an unset API key variable. The
    wait is bounded by ``deadline_s``.
    """
    key = "chat:" + endpoint_key(dataclasses.asdict(config))
    loop = loop_thread()

    async def send() -> ChatReply:
        client = loop.clients.get(key)
        if client is None:
            client = loop.clients[key] = ChatClient(config)
        return await client.post(body, check)

    return loop.submit(send()).result(timeout=config.deadline_s + 60.0)


def caller_endpoint(
    base_url: str,
    model: str,
    *,
    api_key_env: str | None,
    timeout_s: float,
    max_retries: int,
    backoff_s: float,
) -> EndpointConfig:
    """An endpoint for a caller that bounds its own concurrency (the tau-bench eval's agent and user).

    No limits (its threads are the bound), no cache, and no circuit breaker:
    one conversation's failing requests (a 5xx on one task's prompt) must not
    fail the healthy conversations beside it; each gives up after its own
    retries. ``timeout_s`` bounds one call; ``max_retries`` retries follow a
    connect error, a timeout, a 429 or a 5xx, the n-th after a uniform wait in
    [0, min(30, backoff_s·2ⁿ⁻¹)] or the server's ``Retry-After`` (at most
    :attr:`EndpointConfig.max_retry_after_s`). ``deadline_s`` covers every call and wait.
    The key is sent only when ``$api_key_env`` is set (local servers need none).
    """
    key_env = api_key_env if api_key_env and os.environ.get(api_key_env) else None
    config = EndpointConfig(
        base_url=base_url,
        model=model,
        api_key_env=key_env,
        sampling={},
        timeout_s=timeout_s,
        max_in_flight=None,
        max_retries=max_retries,
        backoff_base_s=backoff_s,
        breaker_failures=None,
        cache_size=0,
    )
    retry_waits_s = max_retries * max(config.backoff_max_s, config.max_retry_after_s)
    config = dataclasses.replace(
        config, deadline_s=(max_retries + 1) * timeout_s + retry_waits_s + 1.0
    )
    config.check()
    return config
