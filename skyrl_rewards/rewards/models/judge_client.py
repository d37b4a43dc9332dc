"""An asynchronous client for one OpenAI-compatible chat endpoint, with limits, retries and a breaker.

:class:`JudgeClient` sends ``POST {base_url}/chat/completions`` on one
long-lived ``httpx.AsyncClient`` and turns each
:class:`~skyrl_rewards.rewards.models.lanes.ModelRequest` into exactly one
:class:`~skyrl_rewards.rewards.models.lanes.ModelOutcome`. It never raises for
what the endpoint did; every failure is an outcome whose ``failure`` is one of
:data:`~skyrl_rewards.rewards.models.lanes.FAILURE_KINDS`:

- limits (:mod:`~skyrl_rewards.rewards.models.limits`): requests in flight,
  requests per minute and tokens per minute (prompt plus completion tokens,
  estimated before a call and corrected from the reply's ``usage``). A request
  that cannot get a slot within ``queue_timeout_s`` is ``rate_limited``.
- retries: connect errors, timeouts, 429 and 5xx are retried up to
  ``max_retries`` times with exponential back-off and full jitter; a
  ``Retry-After`` (seconds or an HTTP date) is honoured, and one longer than
  ``max_retry_after_s`` ends the request at once. Other 4xx are not retried.
- a circuit breaker: ``breaker_failures`` consecutive connect errors,
  timeouts or 5xx open it; while open every request is ``breaker_open`` at
  once, without a call; after ``breaker_reset_s`` one probe goes out and its
  success closes the breaker.
- a bounded LRU cache on :meth:`ModelRequest.cache_key`: identical requests
  (also those in flight at the same time) are sent once.
- ``deadline_s`` bounds one request from start to outcome, waits and retries included.

The limits are per client: hold one client per endpoint per process (what
:func:`run_judge_requests` does) or per pool (the pool's judge lane), and they
hold for everything that shares it. ``httpx`` is imported when a client is built.
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
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from skyrl_rewards.rewards.models.lanes import ModelOutcome, ModelRequest
from skyrl_rewards.rewards.models.limits import Breaker, InFlight, Pacer

IMAGE_TOKENS_ESTIMATE = 1024
"""Tokens counted for one image part before the reply's ``usage`` tells the real number."""

CHARS_PER_TOKEN_ESTIMATE = 4
"""Characters of prompt text counted as one token before the reply's ``usage`` is known."""

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
    breaker_failures: int = 5
    """Consecutive failed calls (connect, timeout, 5xx) that open the breaker."""
    breaker_reset_s: float = 10.0
    """How long the breaker stays open before one probe is let through."""
    cache_size: int = 10_000
    """Successful outcomes kept for identical requests (0: no cache)."""
    price_in_per_1m: float | None = None
    """Price of one million prompt tokens; with the output price, metrics report ``cost``."""
    price_out_per_1m: float | None = None
    """Price of one million completion tokens."""

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> EndpointConfig:
        """Read a configuration (flat, or with ``limits``, ``retries``, ``breaker``, ``prices`` sections).

        Section keys: ``limits`` {max_in_flight, requests_per_minute,
        tokens_per_minute, queue_timeout_s}; ``retries`` {max_retries,
        backoff_base_s, backoff_max_s, max_retry_after_s}; ``breaker``
        {failures, reset_s}; ``prices`` {input_per_1m, output_per_1m}.
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
        positive = ("timeout_s", "deadline_s", "queue_timeout_s", "backoff_base_s", "backoff_max_s")
        for name in positive + ("breaker_reset_s", "max_retry_after_s"):
            _check_number(name, getattr(self, name), minimum=0.0, strict=name in positive)
        for name in ("max_in_flight", "requests_per_minute", "tokens_per_minute"):
            if getattr(self, name) is not None:
                _check_number(name, getattr(self, name), minimum=0.0, strict=True)
        for name in ("price_in_per_1m", "price_out_per_1m"):
            if getattr(self, name) is not None:
                _check_number(name, getattr(self, name), minimum=0.0)
        for name in ("max_retries", "cache_size", "breaker_failures"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"endpoint.{name}: expected a non-negative integer, got {value!r}")
        if self.breaker_failures < 1:
            raise ValueError("endpoint.breaker.failures: expected at least 1")
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


@dataclass
class _Attempt:
    """What one HTTP call gave."""

    text: str = ""
    failure: str = ""
    message: str = ""
    retry_after_s: float | None = None
    retryable: bool = False
    endpoint_fault: bool = False  # counts against the breaker
    tokens_in: int = 0
    tokens_out: int = 0
    usage: bool = False


class JudgeClient:
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
        self._in_flight = InFlight(config.max_in_flight)
        self._requests_pacer = Pacer(config.requests_per_minute)
        self._tokens_pacer = Pacer(config.tokens_per_minute, burst=_completion_estimate(config))
        self._breaker = Breaker(config.breaker_failures, config.breaker_reset_s)
        self._cache: collections.OrderedDict[tuple[str, bytes], ModelOutcome] = (
            collections.OrderedDict()
        )
        self._pending: dict[tuple[str, bytes], asyncio.Task[ModelOutcome]] = {}
        self._latencies: collections.deque[float] = collections.deque(maxlen=4096)
        self._counts: collections.Counter[str] = collections.Counter()
        self._errors: collections.Counter[str] = collections.Counter()
        self._latency_sum_s = 0.0

    async def complete(self, request: ModelRequest) -> ModelOutcome:
        """The outcome of ``request``: its reply, or a failure; never raises for the endpoint.

        An identical request answered before, or in flight now, gives the same
        outcome with ``cached`` set and no tokens (no call is made for it).
        """
        self._counts["requests"] += 1
        key = request.cache_key()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            self._counts["cache_hits"] += 1
            return _from_cache(cached)
        task = self._pending.get(key)
        if task is not None:
            self._counts["cache_hits"] += 1
            return _from_cache(await asyncio.shield(task))
        task = asyncio.ensure_future(self._complete_once(request))
        self._pending[key] = task
        task.add_done_callback(lambda done: self._finish(key, done))
        return await asyncio.shield(task)

    def metrics(self) -> dict[str, Any]:
        """Counters and gauges of this client (plain JSON values).

        ``requests`` (asked), ``calls`` (HTTP calls made), ``retries``, ``ok``,
        ``errors`` by failure kind, ``tokens_in``/``tokens_out`` (from ``usage``),
        ``latency_s`` (sum, count, p50, p90, p99 of recent calls), ``cache_hits``,
        ``in_flight`` and its ``peak``, ``breaker`` (state, opens), and ``cost``
        when both prices are configured.
        """
        latencies = sorted(self._latencies)
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
            "cache_hits": self._counts["cache_hits"],
            "cache_entries": len(self._cache),
            "in_flight": self._in_flight.count,
            "in_flight_peak": self._in_flight.peak,
            "breaker": {"state": self._breaker.state, "opens": self._breaker.opens},
        }
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

    def _finish(self, key: tuple[str, bytes], task: asyncio.Task[ModelOutcome]) -> None:
        self._pending.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            return
        outcome = task.result()
        if outcome.ok and self.config.cache_size > 0:
            self._cache[key] = outcome
            if len(self._cache) > self.config.cache_size:
                self._cache.popitem(last=False)

    async def _complete_once(self, request: ModelRequest) -> ModelOutcome:
        start = time.monotonic()
        try:
            outcome = await asyncio.wait_for(self._with_retries(request), self.config.deadline_s)
        except asyncio.TimeoutError:
            outcome = ModelOutcome(
                failure="timeout",
                message=f"no reply within deadline_s={self.config.deadline_s:g} "
                "(waits and retries included); raise deadline_s or the endpoint's limits",
            )
        outcome = dataclasses.replace(outcome, latency_s=time.monotonic() - start)
        if outcome.ok:
            self._counts["ok"] += 1
        else:
            self._errors[outcome.failure] += 1
        return outcome

    async def _with_retries(self, request: ModelRequest) -> ModelOutcome:
        config = self.config
        body = self._body(request)
        estimate = _token_estimate(request, config)
        retry = 0
        while True:
            if self._breaker.blocked():
                return _breaker_outcome(config, retry)
            waited = await self._take_slot(estimate)
            if waited is not None:
                return waited
            if not self._breaker.allow():
                self._in_flight.release()
                return _breaker_outcome(config, retry)
            try:
                attempt = await self._call(body)
            except asyncio.CancelledError:
                if self._breaker.state == "half_open":
                    self._breaker.failure()  # a probe abandoned by the deadline: probe again later
                raise
            finally:
                self._in_flight.release()
            if attempt.usage:
                self._tokens_pacer.adjust(attempt.tokens_in + attempt.tokens_out - estimate)
            elif attempt.failure == "connect":
                self._tokens_pacer.adjust(-estimate)  # nothing reached the server
            if attempt.endpoint_fault:
                self._breaker.failure()
            else:
                self._breaker.success()
            if not attempt.failure:
                return ModelOutcome(
                    text=attempt.text, tokens_in=attempt.tokens_in, tokens_out=attempt.tokens_out
                )
            if not attempt.retryable or retry >= config.max_retries:
                return _final(attempt, retry)
            retry += 1
            delay = random.uniform(
                0.0, min(config.backoff_max_s, config.backoff_base_s * 2 ** (retry - 1))
            )
            if attempt.retry_after_s is not None:
                if attempt.retry_after_s > config.max_retry_after_s:
                    return _final(
                        attempt,
                        retry - 1,
                        f"Retry-After {attempt.retry_after_s:g} s "
                        f"is past max_retry_after_s={config.max_retry_after_s:g}",
                    )
                delay = max(delay, attempt.retry_after_s)
            self._counts["retries"] += 1
            await asyncio.sleep(delay)

    async def _take_slot(self, estimate: int) -> ModelOutcome | None:
        """Hold an in-flight slot and the rate allowance; a ``rate_limited`` outcome when they take too long."""
        config = self.config
        deadline = time.monotonic() + config.queue_timeout_s
        if not await self._in_flight.acquire(config.queue_timeout_s):
            return _rate_limited(config, "max_in_flight")
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
        return None

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        messages = request.payload.get("messages")
        body = {**self.config.sampling, **self.config.extra_body}
        body.update(model=self.config.model, messages=messages)
        return body

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

    async def _call(self, body: dict[str, Any]) -> _Attempt:
        import httpx

        url = self.config.base_url.rstrip("/") + "/chat/completions"
        self._counts["calls"] += 1
        start = time.monotonic()
        shard = self._shard()
        self._shard_load[shard] += 1
        try:
            response = await self._shards[shard].post(url, json=body)
        except httpx.TimeoutException as error:
            return _Attempt(
                failure="timeout",
                message=f"no reply within timeout_s={self.config.timeout_s:g} ({type(error).__name__})",
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
        attempt = _reply_attempt(response)
        self._counts["tokens_in"] += attempt.tokens_in
        self._counts["tokens_out"] += attempt.tokens_out
        return attempt


def _from_cache(outcome: ModelOutcome) -> ModelOutcome:
    """An outcome answered without a call: no tokens spent, no latency."""
    return dataclasses.replace(outcome, cached=True, tokens_in=0, tokens_out=0, latency_s=0.0)


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
    )


def _reply_attempt(response: Any) -> _Attempt:
    try:
        data = response.json()
    except (ValueError, UnicodeDecodeError) as error:
        return _Attempt(failure="bad_response", message=f"reply is not JSON: {error}")
    usage = data.get("usage") if isinstance(data, dict) else None
    tokens_in, tokens_out, has_usage = 0, 0, False
    if isinstance(usage, dict):
        tokens_in = _count(usage.get("prompt_tokens"))
        tokens_out = _count(usage.get("completion_tokens"))
        has_usage = True
    text = _reply_text(data)
    if text is None:
        return _Attempt(
            failure="bad_response",
            message=f"reply has no choices[0].message.content: {json.dumps(data)[:200]}",
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            usage=has_usage,
        )
    return _Attempt(text=text, tokens_in=tokens_in, tokens_out=tokens_out, usage=has_usage)


def _reply_text(data: Any) -> str | None:
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None


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


def _final(attempt: _Attempt, retries: int, why: str = "") -> ModelOutcome:
    detail = f"; {why}" if why else ""
    return ModelOutcome(
        failure=attempt.failure,
        message=f"{attempt.message} (after {retries} retries{detail})",
        tokens_in=attempt.tokens_in,
        tokens_out=attempt.tokens_out,
    )


def _rate_limited(config: EndpointConfig, limit: str) -> ModelOutcome:
    return ModelOutcome(
        failure="rate_limited",
        message=f"no slot under {limit} within queue_timeout_s={config.queue_timeout_s:g}; "
        "raise the limit or queue_timeout_s, or send fewer requests",
    )


def _breaker_outcome(config: EndpointConfig, retries: int) -> ModelOutcome:
    return ModelOutcome(
        failure="breaker_open",
        message=f"circuit breaker open for {config.base_url} after "
        f"{config.breaker_failures} consecutive failures (not called; probing every "
        f"{config.breaker_reset_s:g} s; {retries} retries before)",
    )


def _completion_estimate(config: EndpointConfig) -> int:
    max_tokens = config.sampling.get("max_tokens", config.sampling.get("max_completion_tokens"))
    return max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else 256


def _token_estimate(request: ModelRequest, config: EndpointConfig) -> int:
    """Prompt tokens (characters / 4, a fixed count per image) plus the completion's bound."""
    chars, images = 0, 0
    for message in request.payload.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "image_url":
                    images += 1
                elif isinstance(part, dict):
                    chars += len(str(part.get("text", "")))
    return (
        chars // CHARS_PER_TOKEN_ESTIMATE
        + images * IMAGE_TOKENS_ESTIMATE
        + _completion_estimate(config)
    )


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(q * len(values)))]


class _LoopThread:
    """A private event loop on a daemon thread, with one client per endpoint key."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.clients: dict[str, JudgeClient] = {}
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="skyrl-rewards-judge", daemon=True
        )
        self.thread.start()

    def submit(self, coroutine: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    async def run(
        self, requests: Sequence[ModelRequest], configs: Mapping[str, EndpointConfig]
    ) -> list[ModelOutcome]:
        for key, config in configs.items():
            if key not in self.clients:
                self.clients[key] = JudgeClient(config)
        return list(await asyncio.gather(*(self.clients[r.endpoint].complete(r) for r in requests)))


_LOCK = threading.Lock()
_LOOP: _LoopThread | None = None


def _loop_thread() -> _LoopThread:
    global _LOOP
    with _LOCK:
        if _LOOP is None or _LOOP.pid != os.getpid():  # first use, or a forked child
            _LOOP = _LoopThread()
        return _LOOP


def run_judge_requests(
    requests: Sequence[ModelRequest], endpoints: Mapping[str, Mapping[str, Any]]
) -> list[ModelOutcome]:
    """Run judge requests concurrently in this process: one outcome per request, in order.

    One :class:`JudgeClient` per endpoint key lives as long as the process, on
    a private event loop in a background thread, so limits and the cache hold
    across calls, and this works from inside a running event loop too (it
    blocks the caller until the batch is done). The wait is bounded by the
    endpoints' ``deadline_s``. Raises ``ValueError`` for a bad endpoint
    configuration or an unset API key variable (configuration errors).
    """
    if not requests:
        return []
    keys = {request.endpoint for request in requests}
    configs = {key: EndpointConfig.from_mapping(endpoints[key]) for key in keys}
    for config in configs.values():
        config.api_key()
    loop = _loop_thread()
    bound_s = max(config.deadline_s for config in configs.values()) + 60.0
    return loop.submit(loop.run(requests, configs)).result(timeout=bound_s)


def judge_metrics() -> dict[str, dict[str, Any]]:
    """Metrics of this process's in-process judge clients, by endpoint key (see :meth:`JudgeClient.metrics`)."""
    loop = _LOOP
    if loop is None or loop.pid != os.getpid():
        return {}

    async def collect() -> dict[str, dict[str, Any]]:
        return {key: client.metrics() for key, client in loop.clients.items()}

    return loop.submit(collect()).result(timeout=30.0)
