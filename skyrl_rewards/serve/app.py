"""The Ray Serve application: a gateway in front of scorer replicas that are clients of the pool.

``Gateway`` (the HTTP ingress, one replica) checks the token, caps the body and
the rows, admits bodies up to ``max_queued_bytes`` (before reading them) and rows
up to ``max_queued_rows`` (past either: 429 with ``Retry-After``, never an
unbounded wait), turns each protocol into rows and the
results back into that protocol, and counts every route. ``Scorer`` replicas
(``num_scorers``, spread over the cluster's nodes) each hold one
:class:`~skyrl_rewards.pool.reward_pool.RewardPool` client of the running pool
and score a request's rows with :meth:`~skyrl_rewards.pool.reward_pool.RewardPool.score_async`:
the service scores nothing itself, so its values are the pool's, to the bit.

Faults: a scorer replica that dies mid-request has that request sent again,
once, to another replica (counted ``replica_retry`` with its cause; a second
death answers 503). A client that disconnects has its request cancelled; the
pool still finishes the work it shares with other requests (a cancelled
item's result is dropped, nobody else's). Every refusal is answered with a
status and a one-line cause, logged (the gateway replica's Serve log,
``logs/serve/replica_<app>_Gateway_*.log``) and kept in ``GET /v1/metrics``.
"""

# no `from __future__ import annotations`: FastAPI reads the route methods' annotations
# (``Request``) at import time, and Serve's ingress moves the methods out of this module.
import asyncio
import hmac
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve
from ray.exceptions import RayActorError, RayTaskError

from skyrl_rewards.rewards.contract.result import RewardResult
from skyrl_rewards.serve.protocols import (
    openrlhf_response,
    openrlhf_rows,
    verify_response,
    verify_row,
)
from skyrl_rewards.serve.route_metrics import RouteMetrics
from skyrl_rewards.serve.settings import ServeConfig
from skyrl_rewards.serve.wire import BadRequest, parse_json, parse_rows, results_json

api = FastAPI(title="skyrl-rewards", docs_url=None, redoc_url=None, openapi_url=None)

Answer = Callable[[Sequence[RewardResult]], dict[str, Any]]


class Refused(Exception):
    """A request answered with ``status`` and a one-line ``cause`` (and maybe headers)."""

    def __init__(self, status: int, cause: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(cause)
        self.status = status
        self.cause = cause
        self.headers = headers or {}


class Scorer:
    """One client of the pool ``pool_name``; scores a request's rows through it."""

    def __init__(self, pool_name: str, pool_namespace: str) -> None:
        from skyrl_rewards.pool.reward_pool import RewardPool

        self._pool = RewardPool.connect(pool_name, namespace=pool_namespace)
        self._log = logging.getLogger("ray.serve")  # this replica's Serve log file

    async def score(self, rows: list[dict[str, Any]]) -> list[RewardResult]:
        """One result per row, in order (the pool's, unchanged)."""
        self._log.info("scoring %d rows", len(rows))
        return await self._pool.score_async(rows)


@serve.ingress(api)
class Gateway:
    """HTTP: token, caps, admission, protocols and metrics; scoring is the scorers'."""

    def __init__(self, scorer: Any, settings: dict[str, Any]) -> None:
        self._scorer = scorer
        self._config = ServeConfig(**settings)
        self._token = self._config.token.encode() if self._config.token else None
        # Serve writes the "ray.serve" logger of a replica to its log file (logs/serve/replica_*)
        self._metrics = RouteMetrics(logging.getLogger("ray.serve"))
        self._queued_rows = 0
        self._queued_bytes = 0

    @api.post("/v1/score")
    async def score(self, request: Request) -> JSONResponse:
        """The batch route: ``{"rows": [...]}`` -> ``{"results": [...]}``, one per row."""

        def read(document: Any) -> tuple[list[dict[str, Any]], Answer]:
            rows = parse_rows(document, max_rows=self._config.max_rows)
            return rows, lambda results: {"results": results_json(results)}

        return await self._serve(request, "/v1/score", read)

    @api.post("/get_reward")
    async def get_reward(self, request: Request) -> JSONResponse:
        """OpenRLHF's remote reward model route."""

        def read(document: Any) -> tuple[list[dict[str, Any]], Answer]:
            return openrlhf_rows(document, max_rows=self._config.max_rows), openrlhf_response

        return await self._serve(request, "/get_reward", read)

    @api.post("/verify")
    async def verify(self, request: Request) -> JSONResponse:
        """NeMo-Gym's verify route: one rollout in, its reward and mask out."""

        def read(document: Any) -> tuple[list[dict[str, Any]], Answer]:
            return [verify_row(document)], lambda results: verify_response(document, results[0])

        return await self._serve(request, "/verify", read)

    @api.get("/v1/metrics")
    async def metrics(self, request: Request) -> JSONResponse:
        """Per route counters, events (retries, disconnects, 429s) and the recent faults."""
        try:
            self._check_token(request)
        except Refused as refused:
            return self._refuse("/v1/metrics", refused)
        return JSONResponse(
            {
                **self._metrics.snapshot(),
                "queued_rows": self._queued_rows,
                "queued_bytes": self._queued_bytes,
            }
        )

    @api.get("/v1/health")
    async def health(self) -> dict[str, str]:
        """``{"status": "ok"}`` while the gateway answers (no token needed)."""
        return {"status": "ok"}

    async def _serve(
        self,
        request: Request,
        route: str,
        read: Callable[[Any], tuple[list[dict[str, Any]], Answer]],
    ) -> JSONResponse:
        start = time.perf_counter()
        rows: list[dict[str, Any]] = []
        reserved = 0
        try:
            self._check_token(request)
            reserved = self._reserve_bytes(request)
            rows, answer = read(parse_json(await self._body(request)))
            results = await self._admitted(route, rows)
            payload = answer(results)
        except BadRequest as error:
            return self._refuse(route, Refused(error.status, str(error)))
        except Refused as refused:
            return self._refuse(route, refused)
        except asyncio.CancelledError:
            self._metrics.event_logged(
                route,
                "disconnected",
                f"the client went away with {len(rows)} rows in flight; their results are "
                "dropped, the work they share with other requests goes on",
            )
            raise
        finally:
            self._queued_bytes -= reserved
        masked = sum(1 for result in results if result.should_mask)
        self._metrics.answered(
            route, 200, rows=len(rows), masked=masked, seconds=time.perf_counter() - start
        )
        return JSONResponse(payload)

    def _check_token(self, request: Request) -> None:
        if self._token is None:
            return
        header = request.headers.get("authorization", "")
        offered = header[7:].strip() if header.lower().startswith("bearer ") else ""
        offered = offered or request.headers.get("x-api-key", "")
        if not offered:
            raise Refused(
                401,
                "no token: send `Authorization: Bearer TOKEN` (or `x-api-key: TOKEN`)",
                {"WWW-Authenticate": "Bearer"},
            )
        if not hmac.compare_digest(offered.encode(), self._token):
            raise Refused(401, "wrong token", {"WWW-Authenticate": "Bearer"})

    def _reserve_bytes(self, request: Request) -> int:
        """The bytes the body may hold (its ``Content-Length``, else ``max_body_bytes``), now
        counted in flight; 413 when it declares more than the cap, 429 past ``max_queued_bytes``."""
        limit = self._config.max_body_bytes
        declared = request.headers.get("content-length")
        size = int(declared) if declared is not None and declared.isdigit() else limit
        if size > limit:
            raise Refused(413, f"body: {declared} bytes, at most {limit}; split the batch")
        if self._queued_bytes + size > self._config.max_queued_bytes:
            raise self._busy(f"{self._queued_bytes} body bytes in flight", size, "max_queued_bytes")
        self._queued_bytes += size
        return size

    def _busy(self, queued: str, more: int, limit: str) -> Refused:
        """The 429 of a request that ``more`` would take past the setting ``limit``."""
        retry_s = self._config.retry_after_s
        return Refused(
            429,
            f"busy: {queued}, {more} more would pass {limit}={getattr(self._config, limit)}; "
            f"retry after {retry_s}s",
            {"Retry-After": str(retry_s)},
        )

    async def _body(self, request: Request) -> bytes:
        limit = self._config.max_body_bytes
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise Refused(413, f"body: more than {limit} bytes; split the batch")
        return bytes(body)

    async def _admitted(self, route: str, rows: list[dict[str, Any]]) -> list[RewardResult]:
        """Score ``rows`` if the queue has room for them (429 otherwise)."""
        if self._queued_rows + len(rows) > self._config.max_queued_rows:
            raise self._busy(f"{self._queued_rows} rows queued", len(rows), "max_queued_rows")
        self._queued_rows += len(rows)
        try:
            return await asyncio.wait_for(
                self._score(route, rows), timeout=self._config.request_timeout_s
            )
        except asyncio.TimeoutError:
            raise Refused(
                504,
                f"no scores within request_timeout_s={self._config.request_timeout_s:g}s "
                "(see the pool's metrics: `skyrl-rewards pool status`)",
            ) from None
        finally:
            self._queued_rows -= len(rows)

    async def _score(self, route: str, rows: list[dict[str, Any]]) -> list[RewardResult]:
        """The scorers' results; a scorer that died mid-request has the rows sent again, once."""
        if not rows:
            return []
        try:
            return await self._scorer.score.remote(rows)
        except RayTaskError as error:  # first: a task error may also subclass its cause's type
            raise Refused(503, f"the pool could not score: {first_line(error.cause)}") from None
        except RayActorError as error:
            self._metrics.event_logged(
                route,
                "replica_retry",
                f"a scorer replica died mid-request ({type(error).__name__}); its "
                f"{len(rows)} rows run again, once, on another replica",
            )
        try:
            return await self._scorer.score.remote(rows)
        except (RayActorError, RayTaskError) as error:
            raise Refused(
                503,
                f"scoring failed again after a scorer replica died ({type(error).__name__}); "
                "see `serve status` and the pool's state (`skyrl-rewards pool status`)",
            ) from None

    def _refuse(self, route: str, refused: Refused) -> JSONResponse:
        self._metrics.fault(route, refused.status, refused.cause)
        return JSONResponse(
            {"error": refused.cause, "status": refused.status},
            status_code=refused.status,
            headers=refused.headers,
        )


def first_line(error: BaseException | None) -> str:
    """The first line of ``error``'s message (its type's name when the message is empty)."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def build_app(config: ServeConfig) -> Any:
    """The application bound to ``config``: one gateway, ``num_scorers`` scorers spread over nodes."""
    scorer = serve.deployment(
        Scorer,
        name="Scorer",
        num_replicas=config.num_scorers,
        max_ongoing_requests=config.scorer_max_ongoing_requests,
        ray_actor_options={"num_cpus": 0},
    ).bind(config.pool_name, config.pool_namespace)
    gateway = serve.deployment(
        Gateway,
        name="Gateway",
        num_replicas=1,
        # far above max_queued_rows' requests: the gateway's own admission answers 429 first
        max_ongoing_requests=100_000,
        ray_actor_options={"num_cpus": 0},
    )
    return gateway.bind(scorer, asdict(config))
