"""A pool's start-up phases printed on stderr while a command waits for them."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def phases_shown(command: str) -> Iterator[None]:
    """Print a pool's start-up phases (:mod:`skyrl_rewards.pool.phases`) on stderr in the block."""
    shown = logging.getLogger("skyrl_rewards.pool.phases")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"skyrl-rewards {command}: %(message)s"))
    level, propagate = shown.level, shown.propagate
    shown.addHandler(handler)
    shown.setLevel(logging.INFO)
    shown.propagate = False
    try:
        yield
    finally:
        shown.removeHandler(handler)
        shown.setLevel(level)
        shown.propagate = propagate
