"""An asynchronous client for one OpenAI-compatible chat endpoint: limits, retries, a breaker.

:class:`ChatClient` sends ``POST {base_url}/chat/completions`` (or another
``path``: a served reward model's ``/classify``) on long-lived
``httpx.AsyncClient`` connections and turns each request body into exactly one
:class:`ChatReply`: the whole reply JSON, or a failure whose ``failure`` is one
of :data:`~skyrl_rewards.rewards.contract.lanes.FAILURE_KINDS`. It never raises
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
simulator, which call :func:`~skyrl_rewards.rewards.models.chat_loop.post_chat` from their
threads. The limits are per client: ``post_chat`` and the judge's
:func:`~skyrl_rewards.rewards.models.judge_client.run_judge_requests` hold one
client per endpoint configuration per process, on one private event loop
thread (:mod:`~skyrl_rewards.rewards.models.chat_loop`). ``httpx`` is imported when a
client first calls. The endpoint's settings are
:mod:`~skyrl_rewards.rewards.models.endpoint_config`'s.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import email.utils
import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_rewards.rewards.models.endpoint_config import EndpointConfig
from skyrl_rewards.rewards.models.endpoint_hold import endpoint_hold
from skyrl_rewards.rewards.models.limits import Breaker, InFlight, Pacer
from skyrl_rewards.rewards.models.token_count import TokenCounter

CONNECTIONS_PER_SHARD = 16
"""Connections per ``httpx.AsyncClient``: a client's pool does work quadratic in its
connections on every request (httpcore 1.0), so ``max_in_flight`` connections are
spread over clients of at most this many, each request going to the least busy one."""


@dataclass(frozen=True)
class ChatReply:
    """What one request gave: the reply JSON, or a failure and why.

    ``failure`` is one of :data:`~skyrl_rewards.rewards.contract.lanes.FAILURE_KINDS`
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
