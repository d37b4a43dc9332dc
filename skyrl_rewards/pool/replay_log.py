"""A JSONL file of the items that timed out or crashed a worker, for regression tests.

Each line is one event::

    {"time": 1763772000.0, "pool": "p", "kind": "timeout", "component": "accuracy",
     "message": "...", "sample": {"completion": ..., "solution": ..., ...}}

``kind`` is ``timeout`` (the component ran past ``timeout_s``) or ``crash`` (the
worker process died while this component was its current work). Sample fields
that JSON cannot hold (numpy arrays, tuples) are written as lists or their
``repr``; long strings are cut to ``max_field_chars``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class ReplayLog:
    """Appends events to ``path`` (created with its parent folders on first write)."""

    def __init__(self, path: str | Path, *, pool_name: str, max_field_chars: int = 100_000) -> None:
        self.path = Path(path)
        self._pool_name = pool_name
        self._max_field_chars = max_field_chars
        self._lock = threading.Lock()

    def append(self, kind: str, component: str, sample: Mapping[str, Any], message: str) -> None:
        """Write one event; an ``OSError`` is logged, never raised (scoring must go on)."""
        record = {
            "time": time.time(),
            "pool": self._pool_name,
            "kind": kind,
            "component": component,
            "message": message,
            "sample": {str(k): self._jsonable(v) for k, v in sample.items()},
        }
        line = json.dumps(record, ensure_ascii=False, default=repr) + "\n"
        try:
            with self._lock:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as handle:
                    handle.write(line)
        except OSError as exc:
            logger.error("replay log %s: cannot append a %s event: %s", self.path, kind, exc)

    def _jsonable(self, value: Any) -> Any:
        if isinstance(value, str):
            return value[: self._max_field_chars]
        if hasattr(value, "tolist"):  # numpy arrays and scalars
            return value.tolist()
        if isinstance(value, (list, tuple)):
            return [self._jsonable(v) for v in value]
        if isinstance(value, Mapping):
            return {str(k): self._jsonable(v) for k, v in value.items()}
        return value


def read_replay_log(path: str | Path) -> list[dict[str, Any]]:
    """All events of a replay file, oldest first (for regression tests)."""
    with Path(path).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
