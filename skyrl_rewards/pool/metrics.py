"""What a reward pool counts: items, latency, timeouts, errors, retries, cache hits.

Counters are kept in the pool's process (readable with ``pool.metrics()``) and
exported through ``ray.util.metrics`` with the tag ``pool=<name>``, so
Prometheus sees the sum over every process that scores through the pool
(``skyrl_rewards_pool_<counter>``; latency as ``skyrl_rewards_pool_latency_s_bucket``
with ``le`` tags, ``_sum``, and ``skyrl_rewards_pool_items`` as its count).
Ray's counters are updated in one round every :data:`EXPORT_INTERVAL_S` (and
when ``pool.metrics()`` is read or the client shuts down): an increment costs
tens of microseconds, and under SkyRL's fully-async trainer items finish one
by one, hundreds per second, on the client's event loop.

The error-rate alarm watches a sliding window of items: when too many of them
must be masked (a component timed out or errored), it logs an error loudly and,
if configured, stops the pool from scoring. A run whose rewards silently turned
into fallbacks is then caught within one window.
"""

from __future__ import annotations

import bisect
import functools
import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)

LATENCY_BOUNDARIES_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
"""Upper bounds of the latency histogram buckets (the last bucket is open)."""

COUNTERS = {
    "items": "items scored (one per submitted sample)",
    "tasks": "reward computations asked for (items x components)",
    "worker_calls": "calls sent to workers (each carries a batch of computations)",
    "cache_hits": "computations answered from identical work (same batch or recent batches)",
    "remembered_timeouts": "computations answered as a timeout at once (input timed out before)",
    "timeouts": "computations that ran past timeout_s (worker killed and replaced)",
    "errors": "computations whose status is 'error'",
    "retries": "computations scored again after their worker died",
    "isolations": "computations re-run one by one to pin a hang on one of them",
    "deferred": "computations whose math check passed the first-pass cap (scored again alone)",
    "deferred_again": "slow-lane computations that passed the second-pass cap (tried last, full limit)",
    "second_pass_idle": "second passes run by an idle ordinary lane (at full priority)",
    "taken_over": "tasks an idle lane took from a call stuck on a slow task (scored twice at most)",
    "math_waits": "times a quiet call past timeout_s was found in a math check and waited on",
    "worker_restarts": "workers replaced after a crash, a hang or a lost node",
    "workers_recycled": "workers replaced after max_items_per_worker computations",
    "masked_items": "items with should_mask (some component timed out or errored)",
    "clamped_boxes": "predicted boxes or points past their relative grid (0-1000, 0-1), scored clamped",
    "lane_calls": "calls sent to a model lane (the judge lane, reward-model workers)",
    "lane_failures": "model-lane computations masked (endpoint or model failure, bad verdict)",
    "lane_timeouts": "model-lane computations whose call ran past the lane's timeout_s",
}
_RECENT_LATENCIES = 10000
EXPORT_INTERVAL_S = 1.0
"""Longest the counts exported through ``ray.util.metrics`` lag behind ``pool.metrics()``."""


@functools.cache
def _ray_exporters() -> dict[str, Any]:
    """The process-wide ``ray.util.metrics`` counters (created once per process).

    Latency is exported the way Prometheus stores a histogram (cumulative bucket
    counters tagged ``le``, plus ``_sum`` and ``_count``), so that a batch of
    items costs a few increments instead of one call per item.
    """
    from ray.util.metrics import Counter

    counters = {
        name: Counter(f"skyrl_rewards_pool_{name}", description=doc, tag_keys=("pool",))
        for name, doc in COUNTERS.items()
    }
    counters["latency_bucket"] = Counter(
        "skyrl_rewards_pool_latency_s_bucket",
        tag_keys=("pool", "le"),
        description="items whose latency (submission to result) is at most le seconds",
    )
    counters["latency_sum"] = Counter(
        "skyrl_rewards_pool_latency_s_sum",
        tag_keys=("pool",),
        description="total latency of scored items, seconds",
    )
    return counters


class PoolMetrics:
    """Thread-safe counters and a latency histogram for one pool client."""

    def __init__(self, pool_name: str) -> None:
        self._tags = {"pool": pool_name}
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._buckets = [0] * (len(LATENCY_BOUNDARIES_S) + 1)
        self._recent_s: deque[float] = deque(maxlen=_RECENT_LATENCIES)
        self._unexported: defaultdict[tuple[str, str], float] = defaultdict(float)
        """(exporter, ``le`` tag or "") -> the increment Ray's counter has not had yet."""
        self._exported_s = time.monotonic()

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name`` (one of :data:`COUNTERS`)."""
        if n <= 0:
            return
        with self._lock:
            self._counts[name] += n
            self._unexported[(name, "")] += n
        self._export_when_due()

    def record_items(
        self, latencies_s: list[float], *, errors: int, masked: int, clamped: int = 0
    ) -> None:
        """Record finished items: their latencies (submission to result), error components,
        masked items and clamped boxes."""
        added = [0] * len(self._buckets)
        for bucket in map(functools.partial(bisect.bisect_left, LATENCY_BOUNDARIES_S), latencies_s):
            added[bucket] += 1
        with self._lock:
            self._buckets = [old + new for old, new in zip(self._buckets, added, strict=True)]
            self._recent_s.extend(latencies_s)
            cumulative = 0
            for bound, n in zip((*LATENCY_BOUNDARIES_S, "+Inf"), added, strict=True):
                cumulative += n
                if cumulative:
                    self._unexported[("latency_bucket", str(bound))] += cumulative
            if latencies_s:
                self._unexported[("latency_sum", "")] += sum(latencies_s)
        self.count("items", len(latencies_s))
        self.count("errors", errors)
        self.count("masked_items", masked)
        self.count("clamped_boxes", clamped)

    def export(self) -> None:
        """Add what was counted since the last export to Ray's exported counters."""
        with self._lock:
            pending, self._unexported = self._unexported, defaultdict(float)
            self._exported_s = time.monotonic()
        if not pending:
            return
        exporters = _ray_exporters()
        for (name, le), n in pending.items():
            exporters[name].inc(n, tags={**self._tags, "le": le} if le else self._tags)

    def _export_when_due(self) -> None:
        if time.monotonic() - self._exported_s >= EXPORT_INTERVAL_S:
            self.export()

    def snapshot(self) -> dict[str, Any]:
        """Counters, ``cache_hit_rate``, latency buckets and p50/p99 of recent items."""
        self.export()
        with self._lock:
            data: dict[str, Any] = dict(self._counts)
            buckets = list(self._buckets)
            recent = sorted(self._recent_s)
        data["cache_hit_rate"] = data["cache_hits"] / data["tasks"] if data["tasks"] else 0.0
        data["latency_s"] = {
            "buckets": {
                **{f"le_{b:g}": n for b, n in zip(LATENCY_BOUNDARIES_S, buckets[:-1], strict=True)},
                "inf": buckets[-1],
            },
            "p50": _percentile(recent, 0.50),
            "p99": _percentile(recent, 0.99),
        }
        return data


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


class ErrorRateAlarm:
    """Fires when the share of masked items in the last ``window_items`` reaches ``max_rate``.

    Logs at ERROR level when it fires and at WARNING when the rate falls back.
    With ``stop=True`` a fired alarm stays fired: :attr:`stopped` is then True.
    """

    def __init__(
        self, *, window_items: int, max_rate: float, min_items: int, stop: bool, pool_name: str
    ) -> None:
        self._window: deque[bool] = deque(maxlen=window_items)
        self._masked = 0
        self._max_rate = max_rate
        self._min_items = min_items
        self._stop = stop
        self._pool_name = pool_name
        self.firing = False
        self.stopped = False
        self._lock = threading.Lock()

    @property
    def rate(self) -> float:
        """Share of masked items in the current window (0.0 when empty)."""
        return self._masked / len(self._window) if self._window else 0.0

    def record(self, masked: Sequence[bool]) -> None:
        """Add finished items (True: masked) to the window and update the alarm. Thread-safe."""
        with self._lock:
            quiet = not self.firing and len(self._window) >= self._min_items
            if quiet and not any(masked):  # the rate can only fall: no transition
                for _ in masked:
                    if len(self._window) == self._window.maxlen:
                        self._masked -= self._window[0]
                    self._window.append(False)
                return
            for flag in masked:
                self._record(flag)

    def _record(self, masked: bool) -> None:
        if len(self._window) == self._window.maxlen:
            self._masked -= self._window[0]
        self._window.append(masked)
        self._masked += masked
        hot = len(self._window) >= self._min_items and self.rate >= self._max_rate
        if hot and not self.firing:
            self.firing = True
            self.stopped = self.stopped or self._stop
            logger.error(
                "REWARD ALARM on pool %r: %.0f%% of the last %d items timed out or errored "
                "(limit %.0f%%); their rewards are fallbacks, not judgements%s",
                self._pool_name,
                100 * self.rate,
                len(self._window),
                100 * self._max_rate,
                "; scoring is stopped" if self._stop else "",
            )
        elif not hot and self.firing:
            self.firing = False
            logger.warning(
                "reward alarm on pool %r cleared: error rate %.0f%%",
                self._pool_name,
                100 * self.rate,
            )

    def snapshot(self) -> dict[str, Any]:
        """``{"firing", "stopped", "error_rate", "window_items"}``."""
        return {
            "firing": self.firing,
            "stopped": self.stopped,
            "error_rate": self.rate,
            "window_items": len(self._window),
        }
