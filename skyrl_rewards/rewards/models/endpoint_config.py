"""The settings of one OpenAI-compatible chat endpoint: :class:`EndpointConfig`, checked.

Built from the plain mapping a component's ``endpoints()`` gives (its
``sampling``, ``extra_body``, ``limits``, ``retries``, ``breaker`` and
``prices`` sections), or for a caller that bounds its own concurrency
(:func:`caller_endpoint`: the tau-bench eval's agent and user). What a
:class:`~skyrl_rewards.rewards.models.chat_client.ChatClient` does with them is
that module's; this one only reads and checks them.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
