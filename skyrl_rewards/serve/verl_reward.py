"""verl's custom reward function, scoring through skyrl-rewards: the service, or a pool on the cluster.

In a verl config (verl's reward loop; ``reward_kwargs`` are merged into every call)::

    reward.custom_reward_function.path=pkg://skyrl_rewards.serve.verl_reward
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.url=http://127.0.0.1:8000
    # or, from inside the same Ray cluster, the pool itself:
    # +reward.custom_reward_function.reward_kwargs.pool=skyrl_rewards_pool

verl awaits ``compute_score(data_source=..., solution_str=..., ground_truth=...,
extra_info=...)`` once per sample, many at once; the calls of one event loop
that arrive within ``batch_wait_s`` go to the service as one request (at most
``max_rows``). The row is ``completion`` = ``solution_str``, ``solution`` =
``ground_truth`` (an object ground truth gives the row's columns instead),
``data_source``, and the columns in ``extra_info["skyrl_rewards"]`` (images,
``problem_type``, ...). The answer is ``{"score": value, "masked": 0.0 or 1.0,
<component>: value, ...}``: verl pays ``score`` and logs the other keys as
``reward_extra_info``. A masked row's ``score`` is the pool's fallback; filter on
``masked`` rather than train on it.

A 429 is waited out (its ``Retry-After``) and a 503 retried until
``timeout_s``; past it, or on a 4xx, :class:`RewardServiceError` names the
status and the service's cause.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
import weakref
from collections.abc import Mapping
from typing import Any

from skyrl_rewards.serve.settings import TOKEN_ENV

_BATCHERS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, str | None], _Batcher]
] = weakref.WeakKeyDictionary()
"""Each event loop's batchers, by (url, token); dropped with their loop."""
_POOLS: dict[tuple[str, str], Any] = {}


class RewardServiceError(RuntimeError):
    """The service refused or failed a request; the message has its status and cause."""


async def compute_score(
    data_source: str | None = None,
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
    *,
    url: str | None = None,
    pool: str | None = None,
    namespace: str = "skyrl_rewards",
    token_env: str = TOKEN_ENV,
    batch_wait_s: float = 0.01,
    max_rows: int = 256,
    timeout_s: float = 900.0,
    **_: Any,
) -> dict[str, float]:
    """Score one verl sample through the service at ``url`` or the pool named ``pool``.

    Returns ``{"score", "masked", <component>...}``; raises ``ValueError`` when
    neither or both of ``url`` and ``pool`` are given, :class:`RewardServiceError`
    when the service refuses the row or does not answer within ``timeout_s``.
    Other keyword arguments verl passes (``reward_router_address``, ...) are ignored.
    """
    if (url is None) == (pool is None):
        raise ValueError(
            "reward_kwargs: give exactly one of url (the service, e.g. http://127.0.0.1:8000) "
            "and pool (a pool's name on this Ray cluster)"
        )
    row = verl_row(data_source, solution_str, ground_truth, extra_info)
    if pool is not None:
        result = (await _pool(pool, namespace).score_async([row]))[0]
        return _answer(result.total, dict(result.components), result.should_mask)
    loop = asyncio.get_running_loop()
    token = os.environ.get(token_env) or None
    batchers = _BATCHERS.setdefault(loop, {})
    key = (url.rstrip("/"), token)
    batcher = batchers.get(key)
    if batcher is None:
        batcher = batchers[key] = _Batcher(key[0], token, batch_wait_s, max_rows, timeout_s)
    answered = await batcher.score(row)
    return _answer(answered["value"], answered["components"], answered["masked"])


def verl_row(
    data_source: str | None,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The pool row of one verl sample (see the module docstring)."""
    columns = dict((extra_info or {}).get("skyrl_rewards") or {})
    if isinstance(ground_truth, Mapping):
        columns.update(ground_truth)
    else:
        columns["solution"] = ground_truth
    return {**columns, "data_source": data_source, "completion": solution_str}


def _answer(value: float, components: dict[str, float], masked: bool) -> dict[str, float]:
    return {**components, "score": value, "masked": 1.0 if masked else 0.0}


def _pool(name: str, namespace: str) -> Any:
    """This process's client of the pool ``name`` (connected once)."""
    from skyrl_rewards.pool.reward_pool import RewardPool

    key = (name, namespace)
    if key not in _POOLS:
        _POOLS[key] = RewardPool.connect(name, namespace=namespace)
    return _POOLS[key]


def close_pool_clients() -> None:
    """Shut down this process's pool clients (the pool keeps running; the next call reconnects)."""
    while _POOLS:
        _POOLS.popitem()[1].shutdown()


class _Batcher:
    """Rows of one event loop gathered into ``/v1/score`` requests."""

    def __init__(
        self, url: str, token: str | None, batch_wait_s: float, max_rows: int, timeout_s: float
    ) -> None:
        import httpx

        self.loop = asyncio.get_running_loop()
        self._url = f"{url}/v1/score"
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._wait_s = batch_wait_s
        self._max_rows = max_rows
        self._timeout_s = timeout_s
        self._client = httpx.AsyncClient(timeout=timeout_s)
        self._pending: list[tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    async def score(self, row: dict[str, Any]) -> dict[str, Any]:
        future: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self._pending.append((row, future))
        if len(self._pending) >= self._max_rows:
            self._flush()
        elif self._timer is None:
            self._timer = self.loop.call_later(self._wait_s, self._flush)
        return await future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, []
        if batch:
            task = self.loop.create_task(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(
        self, batch: list[tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]]
    ) -> None:
        try:
            results = await self._post([row for row, _ in batch])
        except Exception as error:  # every waiting caller gets it: none waits forever
            if not isinstance(error, RewardServiceError):
                error = RewardServiceError(f"{self._url}: {type(error).__name__}: {error}")
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def _post(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        import httpx

        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                response = await self._client.post(
                    self._url, json={"rows": rows}, headers=self._headers
                )
            except httpx.HTTPError as error:
                raise RewardServiceError(
                    f"{self._url}: {type(error).__name__}: {error} (is `skyrl-rewards serve` "
                    "running there?)"
                ) from None
            if response.status_code == 200:
                try:
                    results = response.json()["results"]
                except (ValueError, KeyError, TypeError):
                    raise RewardServiceError(
                        f"{self._url}: 200 without a JSON results list: {response.text[:200]!r} "
                        "(is this `skyrl-rewards serve`?)"
                    ) from None
                if not isinstance(results, list) or len(results) != len(rows):
                    count = len(results) if isinstance(results, list) else "no list of"
                    raise RewardServiceError(f"{self._url}: {count} results for {len(rows)} rows")
                return results
            cause = _cause(response)
            wait_s = _retry_after_s(response.headers.get("retry-after"))
            if response.status_code not in (429, 503) or time.monotonic() + wait_s > deadline:
                raise RewardServiceError(f"{self._url}: {response.status_code}: {cause}")
            await asyncio.sleep(wait_s)


def _retry_after_s(header: str | None) -> float:
    """``Retry-After`` in seconds (0-60); 1 s when absent or not a number (an HTTP date)."""
    try:
        seconds = float(header or 1)
    except ValueError:
        return 1.0
    return min(max(seconds, 0.0), 60.0) if math.isfinite(seconds) else 1.0


def _cause(response: Any) -> str:
    try:
        return str(response.json().get("error", response.text))
    except ValueError:
        return response.text[:500]
