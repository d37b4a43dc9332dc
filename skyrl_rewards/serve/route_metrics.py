"""Counters per route of one gateway replica, and the last refused requests with their causes."""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from typing import Any

logger = logging.getLogger(__name__)

RECENT_FAULTS = 64
"""How many refused or failed requests :class:`RouteMetrics` keeps, with their causes."""


class RouteMetrics:
    """Requests, rows, masked rows, statuses and latency per route; events (retries, disconnects)."""

    def __init__(self, log: logging.Logger = logger) -> None:
        self._log = log
        self._requests: Counter[str] = Counter()
        self._rows: Counter[str] = Counter()
        self._masked: Counter[str] = Counter()
        self._statuses: dict[str, Counter[int]] = {}
        self._seconds: Counter[str] = Counter()
        self._events: Counter[str] = Counter()
        self._faults: deque[dict[str, Any]] = deque(maxlen=RECENT_FAULTS)

    def answered(
        self, route: str, status: int, *, rows: int = 0, masked: int = 0, seconds: float = 0.0
    ) -> None:
        """Count one answered request of ``route``."""
        self._requests[route] += 1
        self._rows[route] += rows
        self._masked[route] += masked
        self._statuses.setdefault(route, Counter())[status] += 1
        self._seconds[route] += seconds

    def fault(self, route: str, status: int, cause: str) -> None:
        """Count and log a request answered with an error status, keeping its cause."""
        self.answered(route, status)
        self.event_logged(route, f"{status}", cause)

    def event_logged(self, route: str, kind: str, cause: str) -> None:
        """Log ``cause`` and keep it among the recent faults under ``kind``."""
        self._events[kind] += 1
        self._faults.append({"route": route, "kind": kind, "cause": cause, "at": time.time()})
        self._log.warning("skyrl-rewards serve: %s %s: %s", route, kind, cause)

    def snapshot(self) -> dict[str, Any]:
        """Plain JSON: per route its counters, the events and the recent faults."""
        routes = {
            route: {
                "requests": self._requests[route],
                "rows": self._rows[route],
                "masked_rows": self._masked[route],
                "status": {str(code): n for code, n in sorted(self._statuses[route].items())},
                "mean_latency_s": self._seconds[route] / max(1, self._requests[route]),
            }
            for route in sorted(self._statuses)
        }
        return {"routes": routes, "events": dict(self._events), "recent_faults": list(self._faults)}
